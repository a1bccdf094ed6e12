//! The errors that stop a worker's pipeline.

use crate::protocol::SourceError;
use crate::trainer::TrainerError;

/// Errors that stop a worker.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A trainer failed.
    #[error("trainer on device {device} failed")]
    Trainer {
        /// The device.
        device: usize,
        /// What failed.
        #[source]
        source: TrainerError,
    },
    /// Device threads could not start.
    #[error("cannot start device threads")]
    Start(#[source] TrainerError),
    /// The master refused something it should not have, or gave no answer.
    #[error("task queue")]
    Queue(#[from] SourceError),
    /// Rows to serve again to a trainer that restarted from its checkpoint
    /// could not be read.
    #[error("cannot read again the rows after a trainer's checkpoint")]
    Replay {
        /// The read's failure.
        #[source]
        source: Box<connectors::Error>,
    },
    /// The store refused this process's login: every read would fail alike.
    #[error("stopped reading the job: the store refused this process's login")]
    LoginRefused {
        /// The read's failure, naming the file and what to do.
        #[source]
        source: Box<connectors::Error>,
    },
    /// Re-batching failed.
    #[error("cannot assemble a batch: {0}")]
    Batch(arrow::error::ArrowError),
    /// The queue can no longer record acknowledgements (its journal failed):
    /// the feed stopped at once.
    #[error("{0}; stopped handing batches to trainers (what they acknowledged since is not committed, and a resume serves it again)")]
    Halted(String),
    /// The master gave a lease of this worker to another one (or counted the
    /// worker gone) while its trainers, which keep checkpoints, may hold rows
    /// of it: the trainers were stopped without a further checkpoint, to
    /// start again from their last complete one (the master serves every
    /// row after it again).
    #[error("{0}: trainers stopped, to start again from their last complete checkpoint")]
    RolledBack(String),
    /// Trainers that keep checkpoints ended their streams without `checkpoint
    /// ID` after their last batch a second time, after the rows that were in
    /// no checkpoint the first time were served again once: what they
    /// trained is saved nowhere, and serving it again does not change that.
    #[error("the trainers keep checkpoints but ended their streams twice without `checkpoint ID` after their last batch ({rows} rows in no checkpoint, served again once already): a trainer that writes `checkpoints` must write `checkpoint ID` after the end of its stream")]
    NoFinalCheckpoint {
        /// Rows acknowledged and in no checkpoint the second time.
        rows: u64,
    },
}

/// Arrow's error is told in the message, not handed on as a cause.
impl From<arrow::error::ArrowError> for PipelineError {
    fn from(e: arrow::error::ArrowError) -> Self {
        PipelineError::Batch(e)
    }
}

impl PipelineError {
    /// Whether the master refused this worker as gone (silent past the
    /// lease timeout while its trainers held rows in no checkpoint).
    pub(super) fn is_gone(&self) -> bool {
        matches!(
            self,
            PipelineError::Queue(SourceError::Refused {
                source: crate::queue::QueueError::Gone { .. },
                ..
            })
        )
    }
}
