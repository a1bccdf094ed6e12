//! The rows in a job's last complete checkpoint (its *cut*): what a resume
//! restores. Trainers that keep checkpoints say which batches each checkpoint
//! holds; sluice turns that into rows of (epoch, split) and keeps their union
//! here, compacted: whole epochs become a count, whole splits one range.
//!
//! Pure data, like the queue that holds it: no I/O, no clock.

use crate::epoch::Epoch;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Rows `start..end` of split `split` in epoch `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutPiece {
    /// Epoch (0-based).
    pub epoch: Epoch,
    /// Split index.
    pub split: u32,
    /// First row.
    pub start: u64,
    /// One past the last row.
    pub end: u64,
}

/// Sorted, disjoint, non-empty row ranges `(start, end)`.
pub type Ranges = Vec<(u64, u64)>;

/// The rows of the last complete checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    /// A trainer declared that it keeps checkpoints: the job is checkpointed,
    /// and a resume restores this cut rather than what was acknowledged.
    pub checkpointed: bool,
    /// The ID of the last complete checkpoint, if any.
    pub id: Option<String>,
    /// Every epoch before this one is wholly in the cut.
    pub full_epochs: u32,
    /// Rows in the cut of the later epochs: epoch -> split -> ranges.
    covered: BTreeMap<Epoch, BTreeMap<u32, Ranges>>,
    /// Rows in the cut over all epochs.
    pub rows: u64,
}

impl Cut {
    /// Records a complete checkpoint `id` holding `pieces` (besides what the
    /// cut held). `rows_of` gives a split's row count when known, so that
    /// whole splits and epochs compact.
    pub fn add(
        &mut self,
        id: &str,
        pieces: &[CutPiece],
        splits: usize,
        rows_of: impl Fn(u32) -> Option<u64>,
    ) {
        self.checkpointed = true;
        self.id = Some(id.to_string());
        for piece in pieces {
            if piece.epoch < Epoch(self.full_epochs) || piece.end <= piece.start {
                continue;
            }
            let ranges = self
                .covered
                .entry(piece.epoch)
                .or_default()
                .entry(piece.split)
                .or_default();
            let before = total(ranges);
            insert(ranges, (piece.start, piece.end));
            self.rows = self.rows.saturating_add(total(ranges) - before);
        }
        // Whole epochs collapse into `full_epochs`.
        while let Some(splits_of) = self.covered.get(&Epoch(self.full_epochs)) {
            let whole = splits > 0
                && (0..splits as u32).all(|split| {
                    let ranges = splits_of.get(&split).map(Vec::as_slice).unwrap_or(&[]);
                    match rows_of(split) {
                        Some(0) => true,
                        Some(rows) => ranges == [(0, rows)],
                        None => false,
                    }
                });
            if !whole {
                break;
            }
            self.covered.remove(&Epoch(self.full_epochs));
            self.full_epochs += 1;
        }
    }

    /// The rows of `split` in `epoch` that are in the cut.
    pub fn covered(&self, epoch: Epoch, split: u32) -> &[(u64, u64)] {
        self.covered
            .get(&epoch)
            .and_then(|splits| splits.get(&split))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Whether any row of `epoch` is in the cut (beyond whole epochs).
    pub fn touches(&self, epoch: Epoch) -> bool {
        self.covered.contains_key(&epoch)
    }
}

fn total(ranges: &[(u64, u64)]) -> u64 {
    ranges.iter().map(|(s, e)| e - s).sum()
}

/// Inserts `new` into sorted disjoint ranges, merging what touches it.
pub fn insert(ranges: &mut Ranges, new: (u64, u64)) {
    let pos = ranges.partition_point(|r| r.0 < new.0);
    ranges.insert(pos, new);
    let mut merged: Ranges = Vec::with_capacity(ranges.len());
    for r in ranges.drain(..) {
        match merged.last_mut() {
            Some(last) if r.0 <= last.1 => last.1 = last.1.max(r.1),
            _ => merged.push(r),
        }
    }
    *ranges = merged;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(epoch: Epoch, split: u32, start: u64, end: u64) -> CutPiece {
        CutPiece {
            epoch,
            split,
            start,
            end,
        }
    }

    #[test]
    fn pieces_merge_and_whole_epochs_compact() {
        let mut cut = Cut::default();
        let rows = |_| Some(100);
        cut.add(
            "1",
            &[piece(Epoch(0), 0, 0, 50), piece(Epoch(0), 1, 50, 100)],
            2,
            rows,
        );
        assert_eq!(cut.covered(Epoch(0), 0), &[(0, 50)]);
        assert_eq!(cut.covered(Epoch(0), 1), &[(50, 100)]);
        assert_eq!(cut.rows, 100);
        cut.add(
            "2",
            &[piece(Epoch(0), 0, 50, 100), piece(Epoch(1), 0, 0, 10)],
            2,
            rows,
        );
        assert_eq!(cut.full_epochs, 0, "split 1 still has a hole");
        cut.add("3", &[piece(Epoch(0), 1, 0, 50)], 2, rows);
        assert_eq!(cut.full_epochs, 1);
        assert_eq!(cut.covered(Epoch(1), 0), &[(0, 10)]);
        assert_eq!(cut.id.as_deref(), Some("3"));
        assert_eq!(cut.rows, 210);
        // Pieces of a whole epoch add nothing.
        cut.add("4", &[piece(Epoch(0), 0, 0, 100)], 2, rows);
        assert_eq!(cut.rows, 210);
    }

    #[test]
    fn unknown_row_counts_never_compact() {
        let mut cut = Cut::default();
        cut.add("a", &[piece(Epoch(0), 0, 0, 100)], 1, |_| None);
        assert_eq!(cut.full_epochs, 0);
        assert!(cut.touches(Epoch(0)));
    }
}
