//! The worker: leases tasks, reads and re-batches their rows, feeds device
//! threads and commits row offsets as trainers acknowledge.
//!
//! Stages, one file each: [`source`] (where tasks come from), [`reader`]
//! (split to batches), [`batcher`] (exact batch sizes, optional shuffle),
//! [`devices`] (one thread per device owning a trainer), [`ledger`]
//! (acknowledged rows to committed offsets), joined in [`pipeline`].

pub mod batcher;
pub mod devices;
pub mod ledger;
pub mod pipeline;
pub mod reader;
pub mod remote;
pub mod source;

pub use pipeline::{run, PipelineConfig, RunOutcome};
pub use source::{LocalQueue, TaskSource};

use crate::task::AttemptId;

/// A run of rows of one task attempt: rows `start..start + len` of its split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// The attempt that read the rows.
    pub attempt: AttemptId,
    /// First row, counted from the start of the split.
    pub start: u64,
    /// Number of rows.
    pub len: u64,
}

/// Where the rows of one batch came from, in row order.
pub type Provenance = Vec<Piece>;

/// Appends `piece` to `prov`, merging it with the last piece when contiguous.
pub fn push_piece(prov: &mut Provenance, piece: Piece) {
    if piece.len == 0 {
        return;
    }
    if let Some(last) = prov.last_mut() {
        if last.attempt == piece.attempt && last.start + last.len == piece.start {
            last.len += piece.len;
            return;
        }
    }
    prov.push(piece);
}
