//! Checkpoints of the trainers of one worker: which rows each device's
//! checkpoints hold, and when a checkpoint is complete (every device wrote
//! the same ID), the rows it adds to the job's cut.
//!
//! A device's checkpoint holds every batch it acknowledged before the line
//! `checkpoint ID`. So each device collects the rows it acknowledged since
//! its last checkpoint line; the line moves them to that ID; once every
//! device wrote an ID, the rows of all devices up to it are the complete
//! checkpoint's. A device whose trainer restarted from its last checkpoint
//! gives back the rows it acknowledged after it: they are served again.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use arrow::record_batch::RecordBatch;

use crate::queue::CutPiece;

pub use crate::trainer::protocol::CHECKPOINT_COMPLETE_KEY;

/// The newest complete checkpoint of a worker's trainers, set once the
/// master recorded it, read by the device threads.
#[derive(Debug, Clone, Default)]
pub struct Completed(Arc<Mutex<Option<String>>>);

impl Completed {
    /// Checkpoint `id` is complete and recorded.
    pub fn set(&self, id: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
    }

    /// The newest complete checkpoint, if any.
    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `batch` tagged with the newest complete checkpoint when it is not
    /// `told` (which becomes it); untouched otherwise.
    pub fn tag(&self, batch: RecordBatch, told: &mut Option<String>) -> RecordBatch {
        let Some(id) = self.get() else {
            return batch;
        };
        if told.as_ref() == Some(&id) {
            return batch;
        }
        let schema = batch.schema();
        let mut metadata = schema.metadata().clone();
        metadata.insert(CHECKPOINT_COMPLETE_KEY.to_string(), id.clone());
        let tagged = arrow::datatypes::Schema::new_with_metadata(schema.fields().clone(), metadata);
        match batch.clone().with_schema(Arc::new(tagged)) {
            Ok(tagged) => {
                *told = Some(id);
                tagged
            }
            Err(_) => batch,
        }
    }
}

/// What a checkpoint event asks the worker to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointAction {
    /// Record that the job is checkpointed (the first `checkpoints` line).
    Declare,
    /// Record complete checkpoint `id`, adding `pieces` to the cut.
    Complete {
        /// The ID every device wrote.
        id: String,
        /// Rows the checkpoint adds.
        pieces: Vec<CutPiece>,
    },
}

/// The checkpoint state of one worker's devices.
#[derive(Debug)]
pub struct Checkpoints {
    declared: bool,
    /// Per device: rows acknowledged since its last checkpoint line.
    since: Vec<Vec<CutPiece>>,
    /// Per device: checkpoint IDs it wrote, with their rows, not complete yet.
    pending: Vec<VecDeque<(String, Vec<CutPiece>)>>,
    /// Rows restarted trainers gave back, not acknowledged again yet: in no
    /// trainer now, yet still this worker's to save (should it be lost
    /// before, the master must serve them again).
    replaying: Vec<CutPiece>,
}

impl Checkpoints {
    /// No checkpoint yet, for `devices` devices.
    pub fn new(devices: usize) -> Self {
        Checkpoints {
            declared: false,
            since: vec![Vec::new(); devices.max(1)],
            pending: vec![VecDeque::new(); devices.max(1)],
            replaying: Vec::new(),
        }
    }

    /// Whether a trainer declared that it keeps checkpoints.
    pub fn declared(&self) -> bool {
        self.declared
    }

    /// A trainer wrote `checkpoints`; the first time asks to record it.
    pub fn on_declared(&mut self) -> Option<CheckpointAction> {
        if self.declared {
            return None;
        }
        self.declared = true;
        Some(CheckpointAction::Declare)
    }

    /// `device` acknowledged these rows.
    pub fn on_applied(&mut self, device: usize, pieces: impl IntoIterator<Item = CutPiece>) {
        if !self.declared {
            return;
        }
        let Some(since) = self.since.get_mut(device) else {
            return;
        };
        for piece in pieces {
            push_merged(since, piece);
            if !self.replaying.is_empty() {
                self.replaying = without(std::mem::take(&mut self.replaying), &piece);
            }
        }
    }

    /// `device` wrote `checkpoint ID`; returns the checkpoint that is now
    /// complete, if any.
    pub fn on_checkpoint(&mut self, device: usize, id: String) -> Option<CheckpointAction> {
        let rows = std::mem::take(self.since.get_mut(device)?);
        self.pending.get_mut(device)?.push_back((id, rows));
        // The first ID of device 0's queue that every device has written.
        let id = self.pending.first()?.iter().map(|(id, _)| id).find(|id| {
            self.pending
                .iter()
                .all(|queue| queue.iter().any(|(other, _)| other == *id))
        })?;
        let id = id.clone();
        let mut pieces = Vec::new();
        for queue in &mut self.pending {
            while let Some((other, rows)) = queue.pop_front() {
                pieces.extend(rows);
                if other == id {
                    break;
                }
            }
        }
        Some(CheckpointAction::Complete { id, pieces })
    }

    /// The rows acknowledged that are in no complete checkpoint yet.
    pub fn unsaved(&self) -> Vec<CutPiece> {
        let mut rows = Vec::new();
        for (since, pending) in self.since.iter().zip(&self.pending) {
            for (_, pieces) in pending {
                rows.extend(pieces.iter().copied());
            }
            rows.extend(since.iter().copied());
        }
        rows.extend(self.replaying.iter().copied());
        rows
    }

    /// Rows the devices acknowledged after their own last `checkpoint ID`
    /// line: once the streams ended, rows of a trainer that wrote no final
    /// checkpoint (a final one that is not complete, its ID not written by
    /// every device, is another matter).
    pub fn after_last_lines(&self) -> u64 {
        let pieces = self.since.iter().flatten();
        pieces.map(|p| p.end.saturating_sub(p.start)).sum()
    }

    /// `device`'s trainer restarted from its last checkpoint: the rows it
    /// acknowledged after that checkpoint, to be served again.
    /// They stay unsaved until acknowledged again.
    pub fn on_restarted(&mut self, device: usize) -> Vec<CutPiece> {
        let again = self
            .since
            .get_mut(device)
            .map(std::mem::take)
            .unwrap_or_default();
        self.replaying.extend(again.iter().copied());
        again
    }
}

/// `pieces` without the rows of `removed`.
fn without(pieces: Vec<CutPiece>, removed: &CutPiece) -> Vec<CutPiece> {
    let mut left = Vec::with_capacity(pieces.len() + 1);
    for piece in pieces {
        let apart = piece.epoch != removed.epoch
            || piece.split != removed.split
            || piece.end <= removed.start
            || removed.end <= piece.start;
        if apart {
            left.push(piece);
            continue;
        }
        if piece.start < removed.start {
            left.push(CutPiece {
                end: removed.start,
                ..piece
            });
        }
        if removed.end < piece.end {
            left.push(CutPiece {
                start: removed.end,
                ..piece
            });
        }
    }
    left
}

/// Appends `piece`, merged with the last one when it continues it.
fn push_merged(pieces: &mut Vec<CutPiece>, piece: CutPiece) {
    if piece.end <= piece.start {
        return;
    }
    if let Some(last) = pieces.last_mut() {
        if last.epoch == piece.epoch && last.split == piece.split && last.end == piece.start {
            last.end = piece.end;
            return;
        }
    }
    pieces.push(piece);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epoch::Epoch;

    fn rows(split: u32, start: u64, end: u64) -> CutPiece {
        CutPiece {
            epoch: Epoch(0),
            split,
            start,
            end,
        }
    }

    #[test]
    fn nothing_is_tracked_before_a_declaration() {
        let mut c = Checkpoints::new(1);
        c.on_applied(0, [rows(0, 0, 10)]);
        assert_eq!(c.on_declared(), Some(CheckpointAction::Declare));
        assert_eq!(c.on_declared(), None);
        c.on_applied(0, [rows(0, 10, 20), rows(0, 20, 30)]);
        assert_eq!(
            c.on_checkpoint(0, "1".into()),
            Some(CheckpointAction::Complete {
                id: "1".into(),
                pieces: vec![rows(0, 10, 30)]
            })
        );
    }

    #[test]
    fn a_checkpoint_is_complete_once_every_device_wrote_it() {
        let mut c = Checkpoints::new(2);
        c.on_declared();
        c.on_applied(0, [rows(0, 0, 10)]);
        c.on_applied(1, [rows(0, 10, 20)]);
        assert_eq!(c.on_checkpoint(0, "5".into()), None);
        c.on_applied(0, [rows(0, 20, 30)]);
        c.on_applied(1, [rows(0, 30, 40)]);
        assert_eq!(
            c.on_checkpoint(1, "5".into()),
            Some(CheckpointAction::Complete {
                id: "5".into(),
                pieces: vec![rows(0, 0, 10), rows(0, 10, 20), rows(0, 30, 40)]
            }),
            "device 0's rows after its line are not in it"
        );
        // Device 1 skips ID 6: 7 completes with everything up to it.
        assert_eq!(c.on_checkpoint(0, "6".into()), None);
        assert_eq!(c.on_checkpoint(0, "7".into()), None);
        assert_eq!(
            c.on_checkpoint(1, "7".into()),
            Some(CheckpointAction::Complete {
                id: "7".into(),
                pieces: vec![rows(0, 20, 30)]
            })
        );
    }

    #[test]
    fn rows_after_a_devices_last_line_are_told_apart_from_an_incomplete_checkpoint() {
        let mut c = Checkpoints::new(2);
        c.on_declared();
        c.on_applied(0, [rows(0, 0, 10)]);
        c.on_applied(1, [rows(0, 10, 20)]);
        // Final lines of different IDs: no complete checkpoint, yet each
        // device wrote one after its last batch.
        c.on_checkpoint(0, "1".into());
        c.on_checkpoint(1, "2".into());
        assert_eq!(c.after_last_lines(), 0);
        assert_eq!(c.unsaved().len(), 2);
        c.on_applied(1, [rows(0, 20, 25)]);
        assert_eq!(c.after_last_lines(), 5);
    }

    #[test]
    fn a_restarted_device_gives_back_what_followed_its_checkpoint() {
        let mut c = Checkpoints::new(1);
        c.on_declared();
        c.on_applied(0, [rows(1, 0, 10)]);
        c.on_checkpoint(0, "1".into());
        c.on_applied(0, [rows(1, 10, 20)]);
        assert_eq!(c.on_restarted(0), vec![rows(1, 10, 20)]);
        assert_eq!(c.on_restarted(0), vec![]);
    }

    #[test]
    fn rows_a_restart_gave_back_stay_unsaved_until_acknowledged_again() {
        // Found by the coordinator's simulation (seed 5): a worker counted
        // gone after its trainer restarted, before the rows it was served
        // again were acknowledged, had them in no report of unsaved rows, so
        // the master served them to no one.
        let mut c = Checkpoints::new(2);
        c.on_declared();
        c.on_applied(0, [rows(1, 0, 10)]);
        c.on_checkpoint(0, "1".into());
        c.on_applied(0, [rows(1, 10, 20)]);
        c.on_applied(1, [rows(2, 0, 5)]);
        assert_eq!(c.on_restarted(0), vec![rows(1, 10, 20)]);
        let unsaved = c.unsaved();
        assert!(unsaved.contains(&rows(1, 10, 20)), "{unsaved:?}");
        // Acknowledged again in part, by any device: the rest still waits.
        c.on_applied(1, [rows(1, 12, 15)]);
        let unsaved = c.unsaved();
        for piece in [rows(1, 10, 12), rows(1, 12, 15), rows(1, 15, 20)] {
            assert!(unsaved.contains(&piece), "{piece:?} in {unsaved:?}");
        }
        c.on_applied(0, [rows(1, 10, 12), rows(1, 15, 20)]);
        let total: u64 = c.unsaved().iter().map(|p| p.end - p.start).sum();
        assert_eq!(total, 10 + 10 + 5, "each row once");
    }
}
