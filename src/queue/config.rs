//! Settings of a task queue and the rules they must obey.

use crate::epoch::Epoch;
use serde::{Deserialize, Serialize};

/// How a job's tasks are leased. Build one (or take [`Default`]), then
/// [`QueueConfig::validate`] it; [`crate::queue::Queue::new`] validates too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueConfig {
    /// Passes over every split (at least 1).
    pub epochs: u32,
    /// Attempts a task may use in one epoch before it is failed (at least 1):
    /// reported read failures, and leases that lapsed with no row committed
    /// by their worker since they were granted; progress resets the count.
    pub max_attempts: u32,
    /// A lease lapses this long after it was granted or last renewed (at least 1).
    pub lease_timeout_ms: u64,
    /// Seeds the order in which each epoch hands out its tasks.
    pub seed: u64,
    /// The job follows its source (`--follow`): tasks are added while it
    /// runs ([`crate::queue::Queue::grow`]) and it is not over until it is
    /// closed ([`crate::queue::Queue::close`]). Only one epoch.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub follow: bool,
    /// From the second epoch, how long a worker that asks while every task
    /// left is held in another live worker's cache waits before it takes
    /// one of them (see `Queue::next_for`).
    pub affinity_wait_ms: u64,
    /// A job that mixes several sources: how their tasks interleave in each
    /// epoch's order (see [`super::order::Interleave`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interleave: Option<super::order::Interleave>,
    /// `--global-batch-size`: the lanes the job's rows are cut into, whose
    /// windows set each epoch's order (see [`super::lanes`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lanes: Option<super::lanes::Lanes>,
    /// `--world-size`: the ranks the workers' devices take as they join
    /// ([`super::ranks`]), each leased only its lanes' tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub world: Option<u32>,
}

/// The default of [`QueueConfig::affinity_wait_ms`].
pub const DEFAULT_AFFINITY_WAIT_MS: u64 = 2_000;

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            epochs: 1,
            max_attempts: 3,
            lease_timeout_ms: 30_000,
            seed: 0,
            follow: false,
            affinity_wait_ms: DEFAULT_AFFINITY_WAIT_MS,
            interleave: None,
            lanes: None,
            world: None,
        }
    }
}

impl QueueConfig {
    /// The settings of a job of `epochs` passes, `max_attempts` failed reads
    /// per task, leases lapsing after `lease_timeout` (in whole milliseconds,
    /// at most `u64::MAX`), task order seeded by `seed`, following its
    /// source when `follow`. Not yet validated.
    pub fn new(
        epochs: u32,
        max_attempts: u32,
        lease_timeout: std::time::Duration,
        seed: u64,
        follow: bool,
    ) -> QueueConfig {
        QueueConfig {
            epochs,
            max_attempts,
            lease_timeout_ms: u64::try_from(lease_timeout.as_millis()).unwrap_or(u64::MAX),
            seed,
            follow,
            affinity_wait_ms: DEFAULT_AFFINITY_WAIT_MS,
            interleave: None,
            lanes: None,
            world: None,
        }
    }

    /// Splits `0..splits` in the order epoch `epoch` leases them: the
    /// seeded shuffle, its sources interleaved when the job mixes several.
    pub fn order(&self, epoch: Epoch, splits: usize) -> Vec<u32> {
        if let Some(lanes) = self.lanes.as_ref().filter(|l| l.rows.len() == splits) {
            return lanes.order(self.seed, epoch);
        }
        let order = super::order::epoch_order(self.seed, epoch, splits);
        match &self.interleave {
            Some(mix) if mix.source.len() == splits => mix.arrange(order),
            _ => order,
        }
    }

    /// Checks every rule; the error names the first one broken.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.epochs == 0 {
            return Err(ConfigError::NoEpochs);
        }
        if self.max_attempts == 0 {
            return Err(ConfigError::NoAttempts);
        }
        if self.lease_timeout_ms == 0 {
            return Err(ConfigError::NoLeaseTimeout);
        }
        if self.follow && self.epochs != 1 {
            return Err(ConfigError::FollowEpochs {
                epochs: self.epochs,
            });
        }
        Ok(())
    }
}

/// A broken rule of [`QueueConfig`], or a job the queue cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `epochs` is 0.
    #[error("epochs must be at least 1, or no task would ever be handed out")]
    NoEpochs,
    /// `max_attempts` is 0.
    #[error("max_attempts must be at least 1, or every task would fail unread")]
    NoAttempts,
    /// `lease_timeout_ms` is 0.
    #[error("lease_timeout_ms must be at least 1, or every lease would lapse when granted")]
    NoLeaseTimeout,
    /// `follow` with more than one epoch: a followed source has no end to
    /// start a second pass at.
    #[error(
        "--follow trains each row once as it is committed; --epochs {epochs} cannot go with it"
    )]
    FollowEpochs {
        /// The epochs asked for.
        epochs: u32,
    },
    /// More splits than split indices (`u32`) can name.
    #[error("a job of {splits} splits is more than the {max} splits a queue can hold")]
    TooManySplits { splits: usize, max: u64 },
}
