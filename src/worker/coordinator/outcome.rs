//! What a run did: its progress as it goes, and its outcome.

use crate::epoch::Epoch;

/// Progress of a run, shared with whoever draws it.
#[derive(Debug, Default, Clone)]
pub struct Progress {
    /// Rows acknowledged by trainers.
    pub rows: u64,
    /// Batches acknowledged.
    pub batches: u64,
    /// Epoch of the last acknowledged batch.
    pub epoch: Epoch,
    /// Rows acknowledged by trainers, by epoch (indexed by epoch).
    pub epoch_rows: Vec<u64>,
}

/// How a run ended.
#[derive(Debug, Default)]
pub struct RunOutcome {
    /// Rows acknowledged by trainers (all epochs).
    pub rows: u64,
    /// Batches acknowledged.
    pub batches: u64,
    /// Task attempts that failed while reading, with reasons.
    pub read_failures: u64,
    /// The run was stopped early (see [`crate::worker::pipeline::Stop`]); its leases were handed back.
    pub stopped: bool,
    /// Rows dropped by `--drop-last` (committed as consumed, trained by no one).
    pub dropped: u64,
    /// The trainers declared that they keep checkpoints.
    pub checkpointed: bool,
    /// Rows served again to the devices whose trainer died and restarted
    /// from its last checkpoint (what it acknowledged after it).
    pub replayed: u64,
    /// Rows read and left out by `--split` or `--sample` (committed as
    /// consumed, shipped to no one).
    pub cut: u64,
    /// Rows the trainers, which keep checkpoints, acknowledged after their
    /// last `checkpoint ID` line once they ended their streams: they wrote
    /// none after their last batch (see
    /// [`crate::worker::pipeline::PipelineError::NoFinalCheckpoint`]).
    pub unsaved_at_end: u64,
    /// The rows acknowledged that were in no complete checkpoint when the
    /// trainers ended their streams (where `unsaved_at_end` is not 0).
    pub unsaved_pieces_at_end: Vec<crate::queue::CutPiece>,
    /// Rows acknowledged of each source of a job that mixes several, by
    /// the source's index (empty for one source).
    pub source_rows: Vec<u64>,
}
