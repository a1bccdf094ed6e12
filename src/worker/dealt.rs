//! A window of `--shuffle global` read and permuted ([`Dealt`]), and the
//! gathering of the rows picked from it into one batch ([`gather`]): what
//! the window's batches ([`super::shuffle`]) and the global batches
//! ([`super::global_steps`]) are cut with.

use crate::epoch::Epoch;
use std::collections::{HashMap, HashSet};

use arrow::array::ArrayRef;
use arrow::compute::interleave;
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::batcher::OutBatch;
use super::{push_piece, Piece, Provenance};
use crate::queue::AttemptId;

/// A window read and permuted: its batches go out one by one.
pub(super) struct Dealt {
    pub(super) epoch: Epoch,
    pub(super) number: u64,
    /// Its lane ([`crate::queue::Lanes`]; 0 without lanes).
    pub(super) lane: u32,
    /// Every batch read, in the window's order.
    pub(super) batches: Vec<RecordBatch>,
    /// The attempt and first row in its split of each batch.
    pub(super) origin: Vec<(AttemptId, u64)>,
    /// The rows in dealing order: (batch, row in it); `None`: committed before.
    pub(super) rows: Vec<Option<(u32, u32)>>,
    /// Batches cut so far.
    pub(super) next: usize,
}

impl Dealt {
    /// The next batch with rows to deal, and its number in the window; none
    /// once every batch is cut. Batches whose rows were all committed before
    /// (or are of lost leases) are skipped, their numbers kept.
    pub(super) fn cut(
        &mut self,
        size: usize,
        dead: &HashSet<AttemptId>,
    ) -> Result<Option<(usize, OutBatch)>, ArrowError> {
        while self.next * size < self.rows.len() {
            let index = self.next;
            self.next += 1;
            let from = index * size;
            let to = (from + size).min(self.rows.len());
            let picked: Vec<Picked<'_>> = self.rows[from..to]
                .iter()
                .flatten()
                .filter(|&&(b, _)| !dead.contains(&self.origin[b as usize].0))
                .map(|&(b, r)| (&self.batches[b as usize], self.origin[b as usize], r))
                .collect();
            let Some(out) = gather(&picked, self.epoch)? else {
                continue;
            };
            if self.next * size >= self.rows.len() {
                // The window's rows are all out: its batches go.
                self.batches.clear();
            }
            return Ok(Some((index, out)));
        }
        Ok(None)
    }
}

/// A row picked to go out: its batch, where the batch came from (attempt,
/// first row in its split) and the row in it.
pub(super) type Picked<'a> = (&'a RecordBatch, (AttemptId, u64), u32);

/// The rows `picked`, in order, as one batch of `epoch` with where each
/// came from; `None` when none is picked.
pub(super) fn gather(picked: &[Picked<'_>], epoch: Epoch) -> Result<Option<OutBatch>, ArrowError> {
    let Some(&(first, _, _)) = picked.first() else {
        return Ok(None);
    };
    let mut used: Vec<&RecordBatch> = Vec::new();
    let mut index_of: HashMap<*const RecordBatch, usize> = HashMap::new();
    let indices: Vec<(usize, usize)> = picked
        .iter()
        .map(|&(batch, _, row)| {
            let at = *index_of
                .entry(std::ptr::from_ref(batch))
                .or_insert_with(|| {
                    used.push(batch);
                    used.len() - 1
                });
            (at, row as usize)
        })
        .collect();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(first.num_columns());
    for c in 0..first.num_columns() {
        let arrays: Vec<&dyn arrow::array::Array> =
            used.iter().map(|b| b.column(c).as_ref()).collect();
        columns.push(interleave(&arrays, &indices)?);
    }
    let mut provenance = Provenance::new();
    for &(_, (attempt, start), row) in picked {
        push_piece(
            &mut provenance,
            Piece {
                attempt,
                start: start + u64::from(row),
                len: 1,
            },
        );
    }
    let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(picked.len()));
    let data = RecordBatch::try_new_with_options(first.schema(), columns, &options)?;
    Ok(Some(OutBatch {
        data,
        epoch,
        provenance,
    }))
}
