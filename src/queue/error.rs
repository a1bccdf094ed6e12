//! Why the task queue refused a request.

use serde::{Deserialize, Serialize};

use super::types::{AttemptId, WorkerId};

/// A request the queue refused. A refused request changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum QueueError {
    /// The attempt is not the live lease of any task: it lapsed, was re-leased,
    /// already finished or failed, or never existed. The worker should drop the task.
    #[error("attempt {attempt} holds no live lease")]
    Stale { attempt: AttemptId },
    /// The worker id was never handed out by this queue; register first.
    #[error("worker {worker} is not registered")]
    UnknownWorker { worker: WorkerId },
    /// A commit or finish would move the committed row offset backwards.
    #[error("attempt {attempt} reported offset {offset}, behind the committed offset {committed}")]
    OffsetBackwards {
        attempt: AttemptId,
        committed: u64,
        offset: u64,
    },
    /// The attempt is live but leased to another worker: a worker may report
    /// only on its own leases.
    #[error("attempt {attempt} is leased to worker {holder}, not to worker {worker}")]
    NotYours {
        attempt: AttemptId,
        worker: WorkerId,
        holder: WorkerId,
    },
    /// A commit named a row offset past the end of the attempt's split.
    #[error("attempt {attempt} reported offset {offset}, past the {rows} rows of split {split}")]
    OffsetPastEnd {
        attempt: AttemptId,
        split: u32,
        offset: u64,
        rows: u64,
    },
    /// A finish reported a row count other than the split's (known from the
    /// file's metadata, or from the split's first finish).
    #[error("attempt {attempt} finished split {split} with {reported} rows, but it has {rows}")]
    WrongRows {
        attempt: AttemptId,
        split: u32,
        reported: u64,
        rows: u64,
    },
    /// A request named a worker without that worker's secret (a master
    /// checks it; the queue only keeps it).
    #[error("worker {worker} did not send its secret: a request may only name its own worker")]
    WrongSecret { worker: WorkerId },
    /// The worker was counted gone (silent past the lease timeout while its
    /// trainers held rows not in a checkpoint, which were served again): it
    /// may not go on.
    #[error("worker {worker} was counted gone after a silence longer than the lease timeout; the rows its trainers had not checkpointed were served again")]
    Gone { worker: WorkerId },
    /// Tasks were offered to a job that is closed (or never followed its source).
    #[error("the job takes no more tasks: it does not follow its source, or was closed")]
    Closed,
    /// Splits offered to a followed job do not come right after its last one.
    #[error("the splits offered start at {first}, but the job's next split is {next}")]
    NotNext { first: u32, next: u32 },
    /// A worker of a job of `--world-size` leased without holding ranks
    /// (it never took them, or another worker took them while it was
    /// silent): it takes ranks again.
    #[error("worker {worker} holds no ranks of the job's world; take ranks first")]
    NoRanks { worker: WorkerId },
    /// A worker has more devices than the job's world has ranks.
    #[error("a worker of {devices} devices cannot join a world of {world} ranks (--world-size)")]
    WorldTooSmall { devices: u32, world: u32 },
    /// A job cannot hold more splits than split indices (`u32`) can name.
    #[error("the job holds as many splits as a queue can name")]
    Full,
}
