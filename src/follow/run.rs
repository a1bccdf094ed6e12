//! The polling loop every followed job shares, whatever it watches: look,
//! grow the job by what was committed ([`Command::Grow`], journaled with
//! the position reached), wait for `--poll` or a local change, until
//! [`Ends`] says to stop; then close the job.

use std::time::{Duration, Instant, SystemTime};

use connectors::Report;
use tracing::{info, warn};

use super::{nothing_yet, wait, FollowError, Follower, Found};
use crate::protocol::follow::FollowStep;
use crate::queue::{Command, Reply};
use crate::wall::wall_millis;

/// Where a followed job is to the outside: what it does with each thing found.
#[async_trait::async_trait]
pub trait Grow: Send + Sync {
    /// Applies `command` to the job's queue, durably.
    async fn apply(&self, command: Command) -> Result<Reply, String>;
    /// Whether tasks the job took wait to be trained (to do or leased): a
    /// job at work is not idle.
    fn busy(&self) -> bool {
        false
    }
}

/// `sluice train`'s embedded queue grows a followed job durably.
#[async_trait::async_trait]
impl Grow for crate::state::LocalQueue {
    async fn apply(&self, command: Command) -> Result<Reply, String> {
        self.run("grow or close the followed job", command)
            .map_err(|e| Report(&e).to_string())
    }
    fn busy(&self) -> bool {
        self.has_work()
    }
}

/// The master's group commit grows a followed job durably.
#[async_trait::async_trait]
impl Grow for crate::state::commit::GroupCommit {
    async fn apply(&self, command: Command) -> Result<Reply, String> {
        self.run(command).await.map_err(|e| Report(&e).to_string())
    }
    fn busy(&self) -> bool {
        self.has_work()
    }
}

/// When a followed job stops taking new data.
#[derive(Debug, Clone, Copy)]
pub struct Ends {
    /// At this time (`--follow-until`).
    pub until: Option<SystemTime>,
    /// After the job trained what it took and the source has not changed
    /// for this long (`--idle-exit`).
    pub idle_exit: Option<Duration>,
}

/// Follows the source until [`Ends`] says to stop, growing the job by what
/// is committed (from split `next` on), then closes the job: it ends once
/// what was taken is trained. A transient failure to read the source is
/// logged and retried at the next poll; any other closes the job and is
/// returned. Cancel the future to stop following without closing (a
/// signal: the job resumes following from its journal).
pub async fn run(
    mut follower: Follower,
    grow: &dyn Grow,
    mut next: u32,
    ends: Ends,
) -> Result<(), FollowError> {
    let mut last_change = Instant::now();
    let mut warned = Instant::now() - Duration::from_secs(3600);
    let every = crate::logging::settings().every;
    let mut quiet = crate::logging::Every::new(every);
    let result = loop {
        if ends.until.is_some_and(|t| SystemTime::now() >= t) {
            info!("following: --follow-until reached; training what was taken, then ending");
            break Ok(());
        }
        if ends.idle(&mut last_change, &follower, grow) {
            info!(idle = ?last_change.elapsed(), "following: the source has not changed for --idle-exit; training what was taken, then ending");
            break Ok(());
        }
        match follower.poll().await {
            Ok(Some(found)) => {
                last_change = Instant::now();
                match grow_by(found, follower.several.is_empty(), grow, next).await {
                    Ok(count) => next = next.saturating_add(count),
                    Err(e) => break Err(e),
                }
                continue; // look again at once: more may be there
            }
            Ok(None) => {
                let idle = last_change.elapsed();
                if idle >= every && quiet.due() {
                    let idle = crate::logging::short_duration(idle);
                    info!(target: crate::logging::PROGRESS, idle_seconds = last_change.elapsed().as_secs(), "following: no new data for {idle}");
                }
            }
            Err(FollowError::Connector { source: e, .. })
                if e.is_transient() || nothing_yet(&e) =>
            {
                if warned.elapsed() >= Duration::from_secs(60) {
                    warn!(error = %Report(&e), "following: cannot read the source now; trying again");
                    warned = Instant::now();
                }
            }
            Err(e) => break Err(e),
        }
        let sleep = ends.pause(follower.config.poll);
        wait(&mut follower.local, sleep).await;
    };
    // Close whatever happened: the job trains what it took, then ends.
    if let Err(e) = grow.apply(Command::Close { now: wall_millis() }).await {
        warn!(error = %e, "following: the job could not be closed");
    }
    result
}

impl Ends {
    /// Whether the job has been idle for `--idle-exit`, `last_change`
    /// moved on first to now while `grow` is busy and to when files last
    /// landed in the source. Idle means nothing to do: what was taken is
    /// trained, and nothing landed in the source (files of a partition not
    /// yet committed count: its ETL is at work).
    fn idle(&self, last_change: &mut Instant, follower: &Follower, grow: &dyn Grow) -> bool {
        if grow.busy() {
            *last_change = Instant::now();
        }
        if let Some(landed) = follower.last_landed() {
            *last_change = (*last_change).max(landed);
        }
        self.idle_exit.is_some_and(|d| last_change.elapsed() >= d)
    }

    /// How long to wait before the next look: `poll`, or less where
    /// `--follow-until` comes sooner.
    fn pause(&self, poll: Duration) -> Duration {
        match self.until {
            Some(t) => t
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                .min(poll),
            None => poll,
        }
    }
}

/// Grows the job by `found`, its splits numbered from `next` (tagged with
/// their sources unless `one_source`): how many splits it took.
async fn grow_by(
    found: Found,
    one_source: bool,
    grow: &dyn Grow,
    next: u32,
) -> Result<u32, FollowError> {
    let rows = found
        .splits
        .iter()
        .map(|s| s.rows)
        .try_fold(0u64, |sum, r| r.map(|r| sum.saturating_add(r)));
    let count = found.splits.len() as u32;
    let step = FollowStep {
        splits: found.splits,
        position: found.position,
        committed_ms: found.committed_ms,
        seen_ms: wall_millis(),
        rows,
    };
    let rows_each: Vec<Option<u64>> = step.splits.iter().map(|s| s.rows).collect();
    let sources: Vec<u32> = match one_source {
        true => Vec::new(),
        false => step.splits.iter().map(|s| s.source).collect(),
    };
    let record =
        serde_json::to_value(&step).map_err(|e| FollowError::Grow(Report(&e).to_string()))?;
    let command = Command::Grow {
        now: wall_millis(),
        first: next,
        rows: rows_each,
        record,
        sources,
    };
    match grow.apply(command).await {
        Ok(Reply::Grow(Ok(()))) => Ok(count),
        Ok(Reply::Grow(Err(e))) => Err(FollowError::Grow(Report(&e).to_string())),
        Ok(_) => Err(FollowError::Grow(
            "the queue answered another request".to_string(),
        )),
        Err(e) => Err(FollowError::Grow(e)),
    }
}
