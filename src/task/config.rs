//! Settings of a task queue and the rules they must obey.

use serde::{Deserialize, Serialize};

/// How a job's tasks are leased. Build one (or take [`Default`]), then
/// [`QueueConfig::validate`] it; [`crate::task::Queue::new`] validates too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueConfig {
    /// Passes over every split (at least 1).
    pub epochs: u32,
    /// Leases a task may get in one epoch before it is failed (at least 1); a lapsed
    /// lease counts as an attempt.
    pub max_attempts: u32,
    /// A lease lapses this long after it was granted or last renewed (at least 1).
    pub lease_timeout_ms: u64,
    /// Seeds the order in which each epoch hands out its tasks.
    pub seed: u64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            epochs: 1,
            max_attempts: 3,
            lease_timeout_ms: 30_000,
            seed: 0,
        }
    }
}

impl QueueConfig {
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
    /// More splits than split indices (`u32`) can name.
    #[error("a job of {splits} splits is more than the {max} splits a queue can hold")]
    TooManySplits { splits: usize, max: u64 },
}
