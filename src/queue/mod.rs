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
mod lanes;
mod order;
mod ranks;
mod types;

#[cfg(test)]
mod sim;

pub(crate) use books::Growth;
pub use books::Queue;
pub use command::{Command, Reply};
pub(crate) use config::ConfigError;
pub use config::QueueConfig;
pub(crate) use cut::{insert as insert_range, CutPiece};
pub(crate) use error::QueueError;
pub(crate) use lanes::cut as cut_lanes;
pub use lanes::{lane_count, windows_of, LaneWindow, Lanes};
#[cfg(test)]
pub(crate) use order::epoch_order;
pub(crate) use order::{window_order, Interleave};
pub use ranks::{Ranks, RanksReply};
#[cfg(test)]
pub(crate) use types::Expired;
pub use types::{AttemptId, LeaseReply, WorkerId, WorkerSecret};
pub(crate) use types::{
    EpochView, FailOutcome, Lease, Millis, QueueStatus, TaskFailure, TaskState,
};
