//! The queue: the tasks of a job (split × epoch) and the rules that lease them to
//! elastic workers (`books.rs`: tasks, leases, workers, the checkpoint cut).
//!
//! [`Queue`] is a pure state machine: no I/O, no clock, no threads. The embedded
//! runner and the HTTP master wrap it; a journal records each [`Command`] before its
//! [`Reply`] is sent and replays them after a restart.

mod books;
mod command;
mod config;
mod cut;
mod error;
mod order;
mod types;

#[cfg(test)]
mod sim;

pub use books::{Growth, Queue};
pub use command::{Command, Reply};
pub use config::{ConfigError, QueueConfig};
pub use cut::{insert as insert_range, Cut, CutPiece, Ranges};
pub use error::QueueError;
pub use order::{epoch_order, window_order, Interleave};
pub use types::{
    AttemptId, EpochView, Expired, FailOutcome, Lease, LeaseReply, Millis, QueueStatus, Task,
    TaskFailure, TaskState, WorkerId, WorkerSecret,
};
