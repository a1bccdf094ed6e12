//! Trainers: what a device thread hands its batches to, and what tells it which batches are applied.
//!
//! A [`TrainerFactory`] checks the dataset schema once, then builds one [`Trainer`] per
//! device thread. Three kinds ship with sluice:
//! - [`NoneFactory`] (`--model none`) only counts rows;
//! - [`LinearFactory`] (`--model linear|logistic`) trains one shared linear model with
//!   synchronous data parallelism over the device threads, saving checkpoints of it
//!   under the job's state when asked ([`ModelCheckpoints`]);
//! - [`ExecFactory`] (`--exec CMD`) feeds an external process per device an Arrow IPC stream
//!   and reads its acknowledgements (see "The exec trainer protocol" in the design notes).

mod error;
pub(crate) mod exec;
pub(crate) mod hashing;
pub(crate) mod model;
mod plain;
mod stats;
mod transform;

pub(crate) use error::TrainerError;
pub(crate) use exec::protocol::{self, RESUME_CHECKPOINT_ENV};
pub use exec::{die_with_parent, run_watchers_as, watch_if_asked};
pub(crate) use exec::{Attach, ExecFactory, DEFAULT_MAX_RESTARTS, DEFAULT_TRAINER_TIMEOUT};
pub(crate) use model::{
    LinearFactory, LinearKind, ModelCheckpoints, NoneFactory, DEFAULT_CHECKPOINT_EVERY,
};
pub(crate) use transform::{HashBuckets, Transform, TransformFactory};

use crate::epoch::Epoch;
use arrow::datatypes::Schema;
use arrow::record_batch::RecordBatch;

/// One batch handed to a trainer; `seq` is unique per device thread and increasing.
#[derive(Clone, Debug)]
pub struct Batch {
    /// Position of the batch among those fed to this device thread.
    pub seq: u64,
    /// Epoch the rows belong to (0-based).
    pub epoch: Epoch,
    /// The rows.
    pub data: RecordBatch,
}

/// Something a trainer said besides acknowledging batches, in order with its
/// acknowledgements: `after` is how many batches it had acknowledged in all
/// (since it was built) when it said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// Acknowledgements before the mark, counted since the trainer was built.
    pub after: u64,
    /// What it said.
    pub kind: MarkKind,
}

/// What a [`Mark`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkKind {
    /// The trainer keeps checkpoints (`checkpoints`).
    Declared,
    /// The trainer saved a checkpoint holding every batch it acknowledged so
    /// far (`checkpoint ID`).
    Checkpoint(String),
    /// The trainer's process died and a new one started from the device's
    /// last checkpoint: the rows acknowledged after it must be served again.
    Restarted,
}

/// Applies batches on one device thread.
///
/// The device thread calls [`Trainer::set_idle`] with `true` before it blocks waiting for
/// data and with `false` once it has some: synchronous data-parallel trainers rely on it to
/// complete a step without threads that have nothing to contribute.
pub trait Trainer: Send {
    /// Hands one batch over; returns the seqs of batches now applied (this one and/or earlier ones; may be empty for asynchronous trainers).
    fn feed(&mut self, batch: Batch) -> Result<Vec<u64>, TrainerError>;
    /// Blocks until every batch fed so far is applied; returns their seqs.
    fn flush(&mut self) -> Result<Vec<u64>, TrainerError>;
    /// Blocks until the trainer can take another batch without waiting (for
    /// exec trainers: fewer than `window` batches unacknowledged); returns the
    /// seqs applied meanwhile. The device thread calls it before it takes the
    /// next batch, so a batch is checked (e.g. for a lost lease) right before
    /// it is handed over, not before a long wait.
    fn make_room(&mut self) -> Result<Vec<u64>, TrainerError> {
        Ok(Vec::new())
    }
    /// Like [`Trainer::flush`], one step at a time: waits until at least one
    /// more batch is applied (when any is pending) and returns the seqs
    /// applied so far, with `true` once nothing is pending. A device thread
    /// with nothing to feed reports each acknowledgement as it comes instead
    /// of holding them all until the last one.
    fn flush_some(&mut self) -> Result<(Vec<u64>, bool), TrainerError> {
        Ok((self.flush()?, true))
    }
    /// The device thread is about to wait for data (idle = true) or got some (false). Synchronous data-parallel trainers use it so that a thread with nothing to do never holds up a step.
    fn set_idle(&mut self, _idle: bool) {}
    /// No more data: ends the trainer (waits for the child to exit for exec) and returns the seqs applied meanwhile.
    fn finish(&mut self) -> Result<Vec<u64>, TrainerError>;
    /// What the trainer said besides acknowledgements since last asked (see
    /// [`Mark`]); the device thread asks after each call that returns seqs.
    fn take_marks(&mut self) -> Vec<Mark> {
        Vec::new()
    }
}

/// Builds one trainer per device thread and holds what they share.
pub trait TrainerFactory: Send + Sync {
    /// Checks the dataset's Arrow schema (the batches' schema) before anything runs.
    fn validate(&self, schema: &Schema) -> Result<(), TrainerError>;
    /// Builds the trainer of device thread `device` out of `devices`.
    fn make(&self, device: usize, devices: usize) -> Result<Box<dyn Trainer>, TrainerError>;
    /// Per-epoch statistics and the model once all trainers finished.
    fn report(&self) -> TrainerReport;
    /// Latest known loss for a progress bar (None when the trainer has no loss).
    fn current_loss(&self) -> Option<f64> {
        None
    }
}

/// What a factory's trainers did: statistics per epoch and the trained model, if any.
#[derive(serde::Serialize, Default, Clone, Debug)]
pub struct TrainerReport {
    /// One entry per epoch that saw rows, in epoch order.
    pub epochs: Vec<EpochStats>,
    /// The model as JSON (built-in models only).
    pub model: Option<serde_json::Value>,
}

/// Statistics of one epoch over all device threads.
#[derive(serde::Serialize, Default, Clone, Debug, PartialEq)]
pub struct EpochStats {
    /// Epoch (0-based; JSON counts from 1).
    #[serde(with = "crate::epoch::one_based")]
    pub epoch: Epoch,
    /// Rows applied (for built-in models: rows trained on, excluding skipped rows).
    pub rows: u64,
    /// Mean training loss over the epoch's rows, each computed before its batch's update.
    pub loss: Option<f64>,
    /// Fraction of rows classified correctly before their batch's update (logistic only).
    pub accuracy: Option<f64>,
    /// Rows skipped because their label was null.
    #[serde(skip_serializing_if = "is_zero")]
    pub skipped: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
