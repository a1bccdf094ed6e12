//! Plain data the task queue hands out and reports: ids, task states, leases, status.

use crate::epoch::Epoch;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Time as the queue sees it: milliseconds on any clock the caller chooses
/// (a monotonic clock since start, or simulated time). The queue never reads a clock.
pub type Millis = u64;

/// A worker, as named by the queue when it registered. Ids start at 1 and are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkerId(pub u64);

/// One lease of one task: the fencing token. Unique across the whole job (a counter
/// starting at 1), so a report naming an attempt that is no longer the task's live
/// lease is recognised and refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AttemptId(pub u64);

/// A worker's proof of who it is: random, handed out when it registers with a
/// master and sent with each of its requests. Kept by the queue (so a
/// restarted master still knows it) but compared only by [`WorkerSecret::matches`],
/// in constant time; `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkerSecret(String);

impl WorkerSecret {
    /// Wraps a secret (the master makes them from 128 random bits, as hex).
    pub fn new(secret: impl Into<String>) -> WorkerSecret {
        WorkerSecret(secret.into())
    }

    /// The secret itself, to send to the master.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this secret, compared in constant time.
    pub fn matches(&self, given: &WorkerSecret) -> bool {
        use subtle::ConstantTimeEq;
        bool::from(self.0.as_bytes().ct_eq(given.0.as_bytes()))
    }
}

impl fmt::Debug for WorkerSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WorkerSecret(..)")
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where one task (one split in the current epoch) stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum TaskState {
    /// Waiting to be leased; the next lease resumes at `offset`, the rows already committed.
    Todo { offset: u64 },
    /// Held by `worker` under `attempt` until `deadline` unless renewed by a heartbeat.
    /// `offset` is the committed row count, moved forward by commits.
    Leased {
        attempt: AttemptId,
        worker: WorkerId,
        deadline: Millis,
        offset: u64,
    },
    /// Read to the end: `rows` rows of the split were acknowledged.
    Done { rows: u64 },
    /// Given up after `max_attempts` attempts; `reason` is the last attempt's failure.
    /// `offset` is the rows committed before it was given up (absent in older
    /// journals: 0), where `--retry-failed` resumes it.
    Failed {
        reason: String,
        #[serde(default, skip_serializing_if = "is_zero")]
        offset: u64,
    },
}

/// One split's entry in the current epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// Where the task stands.
    pub state: TaskState,
    /// Failed reads of this task in the current epoch since its committed
    /// offset last moved (`<= max_attempts`), and leases of it that lapsed
    /// with no row committed by their worker since they were granted (the
    /// worker died on it: a trainer that keeps failing, a worker killed on
    /// these rows). Handed-back leases are not counted (a stop is not the
    /// task's failure), nor lapses of a worker that was committing rows,
    /// nor attempts that made progress, so a job killed and resumed many
    /// times never fails a task.
    pub attempts: u32,
    /// Rows past the committed offset that are already in the job's
    /// checkpoint (after a resume): not to be served again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip: Vec<(u64, u64)>,
}

/// A task handed to a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Fencing token to quote in every report about this task.
    pub attempt: AttemptId,
    /// Epoch the task belongs to (0-based).
    pub epoch: Epoch,
    /// Index of the split in the job's split list.
    pub split: u32,
    /// Rows of the split already committed: start reading after them.
    pub offset: u64,
    /// The lease lapses at this time unless a heartbeat renews it.
    pub deadline: Millis,
    /// Rows past `offset` not to read: they are in the job's checkpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip: Vec<(u64, u64)>,
    /// The split's file was declared repaired (its task failed, then was put
    /// back with `--retry-failed`): read it as it is now, checking only that
    /// its size is the one planned, not its entity tag or modification time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repaired: bool,
}

/// How an epoch hands out its splits, as its one worker orders its windows
/// by it (`--shuffle global`): the epoch's lease order, and the splits no
/// lease of the epoch names again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochView {
    /// The epoch.
    pub epoch: Epoch,
    /// Its splits in [`super::epoch_order`].
    pub order: Vec<u32>,
    /// Splits read and acknowledged to their end.
    pub done: Vec<u32>,
    /// Splits given up.
    pub failed: Vec<u32>,
}

/// Answer to a lease request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseReply {
    /// Up to the requested number of tasks, in the epoch's order.
    Tasks(Vec<Lease>),
    /// Nothing to lease now, but the job is not over: tasks are leased (perhaps to the
    /// asking worker itself) and may come back or end the epoch. Ask again later.
    Wait,
    /// Every epoch is finished; the worker may exit.
    JobOver,
}

/// What became of a task whose attempt failed or expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailOutcome {
    /// Back to todo at its committed offset, to be leased again.
    Retried,
    /// Out of attempts: the task is failed for this epoch.
    Failed,
}

/// A lease that lapsed at a tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expired {
    /// The attempt that lapsed.
    pub attempt: AttemptId,
    /// The worker that held it.
    pub worker: WorkerId,
    /// Epoch of the task.
    pub epoch: Epoch,
    /// Split of the task.
    pub split: u32,
    /// Whether the task goes back to todo or is failed.
    pub outcome: FailOutcome,
}

/// A task given up after its last attempt, kept for the job summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFailure {
    /// Epoch of the task.
    pub epoch: Epoch,
    /// Split of the task.
    pub split: u32,
    /// Attempts made.
    pub attempts: u32,
    /// Reason given by the last attempt.
    pub reason: String,
}

/// Counts for progress pages and job summaries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStatus {
    /// Current epoch (0-based; JSON counts from 1); the last epoch once the job is over.
    #[serde(with = "crate::epoch::one_based")]
    pub epoch: Epoch,
    /// Epochs in the job.
    pub epochs: u32,
    /// Splits (tasks per epoch).
    pub splits: usize,
    /// Tasks of the current epoch waiting to be leased.
    pub todo: usize,
    /// Tasks of the current epoch under a live lease.
    pub leased: usize,
    /// Tasks of the current epoch done.
    pub done: usize,
    /// Tasks of the current epoch failed.
    pub failed: usize,
    /// Tasks done over all epochs.
    pub tasks_done: u64,
    /// Rows of done tasks over all epochs.
    pub rows_done: u64,
    /// Rows acknowledged and committed over all epochs: done tasks' rows plus
    /// the committed offsets of the others (what a restart would not serve again).
    #[serde(default)]
    pub rows_committed: u64,
    /// Workers ever registered.
    pub workers: usize,
    /// Every task given up so far, oldest first (JSON counts their epochs
    /// from 1, as every epoch people read).
    #[serde(with = "failures_one_based")]
    pub failures: Vec<TaskFailure>,
    /// True once every epoch is finished.
    pub job_over: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Serde for the failures of a [`QueueStatus`]: their epochs counted from
/// 1 in JSON (the queue's own snapshot keeps [`TaskFailure`]'s 0-based
/// index).
mod failures_one_based {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::TaskFailure;
    use crate::epoch::Epoch;

    /// A failure as the status shows it.
    #[derive(Serialize, Deserialize)]
    struct Shown {
        #[serde(with = "crate::epoch::one_based")]
        epoch: Epoch,
        split: u32,
        attempts: u32,
        reason: String,
    }

    /// Writes each failure with its epoch counted from 1.
    pub fn serialize<S: Serializer>(
        failures: &[TaskFailure],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let shown: Vec<Shown> = failures
            .iter()
            .map(|f| Shown {
                epoch: f.epoch,
                split: f.split,
                attempts: f.attempts,
                reason: f.reason.clone(),
            })
            .collect();
        shown.serialize(serializer)
    }

    /// Reads failures whose epochs count from 1.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<TaskFailure>, D::Error> {
        let shown = Vec::<Shown>::deserialize(deserializer)?;
        Ok(shown
            .into_iter()
            .map(|s| TaskFailure {
                epoch: s.epoch,
                split: s.split,
                attempts: s.attempts,
                reason: s.reason,
            })
            .collect())
    }
}

#[cfg(test)]
mod failures_tests {
    use super::TaskFailure;
    use crate::epoch::Epoch;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Status {
        #[serde(with = "super::failures_one_based")]
        failures: Vec<TaskFailure>,
    }

    #[test]
    fn a_failure_shows_its_epoch_counted_from_one_as_every_epoch_in_json() {
        let failure = TaskFailure {
            epoch: Epoch(0),
            split: 3,
            attempts: 2,
            reason: "corrupt".into(),
        };
        let text = serde_json::to_string(&Status {
            failures: vec![failure.clone()],
        })
        .expect("json");
        assert!(text.contains(r#""epoch":1"#), "{text}");
        let back: Status = serde_json::from_str(&text).expect("read back");
        assert_eq!(back.failures, vec![failure]);
    }
}
