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
    /// The queue could not be reached (a remote master); never produced by the queue itself.
    #[error("{reason}")]
    Transport { reason: String },
}
