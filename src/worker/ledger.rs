//! Acknowledged rows to commits: per attempt, the contiguous prefix of
//! acknowledged rows (the offset) and the acknowledged ranges past it are
//! committed as they come, so a device slow to acknowledge one batch holds
//! back no other batch's commit; a task is finished once its reader reached
//! the end and every row it read is acknowledged.
//!
//! A read that fails half way is not given up at once: the rows it delivered
//! before the failure are already on their way to the devices, so the attempt
//! is failed only once they are all acknowledged, with the failure's row as
//! its committed offset. The retry then starts after the last row a device saw:
//! no row is served twice because a read failed.

use std::collections::HashMap;
use std::ops::Range;

use super::Piece;
use crate::queue::{AttemptId, Lease};

/// What the ledger asks the master to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Rows up to `offset` of the attempt's split are acknowledged, and so
    /// are the rows of `ranges` past it.
    Commit {
        /// The attempt.
        attempt: AttemptId,
        /// New committed offset.
        offset: u64,
        /// Acknowledged rows past `offset`: sorted, disjoint `(start, end)`.
        ranges: Vec<(u64, u64)>,
    },
    /// The attempt's split is read and acknowledged to its end.
    Finish {
        /// The attempt.
        attempt: AttemptId,
        /// Rows of the split.
        rows: u64,
    },
    /// The attempt's read failed at row `offset`, and every row before it is
    /// acknowledged: commit `offset`, then report the attempt failed.
    Fail {
        /// The attempt.
        attempt: AttemptId,
        /// Rows acknowledged (the row the read failed at).
        offset: u64,
        /// Why the read failed.
        reason: String,
        /// No attempt can succeed (see [`connectors::Error::is_for_good`]).
        for_good: bool,
    },
}

/// How the reader of an attempt ended.
#[derive(Debug)]
enum ReadEnd {
    /// At the end of the split, row `end`.
    Done(u64),
    /// Failed at row `at`.
    Failed {
        at: u64,
        reason: String,
        for_good: bool,
    },
}

#[derive(Debug)]
struct Entry {
    lease: Lease,
    /// Acknowledged ranges at or past `committed`, sorted and disjoint.
    acked: Vec<Range<u64>>,
    /// Rows before this are acknowledged (starts at the lease offset).
    committed: u64,
    /// Set when the reader ended.
    end: Option<ReadEnd>,
    /// The lease covers rows before this only (a lease of rows served
    /// again ends with a skip to the end of the split).
    limit: Option<u64>,
}

/// Tracks every attempt this worker holds.
#[derive(Debug, Default)]
pub struct Ledger {
    entries: HashMap<AttemptId, Entry>,
}

impl Ledger {
    /// Starts tracking a lease.
    pub fn start(&mut self, lease: Lease) {
        let committed = lease.offset;
        // Rows the lease skips (already in the job's checkpoint) count as
        // acknowledged: they are never sent, and the task can still finish.
        let mut acked = Vec::new();
        let mut limit = None;
        for &(start, end) in &lease.skip {
            if end == u64::MAX {
                limit = Some(start.max(committed));
            } else if end > committed && end > start {
                insert(&mut acked, start.max(committed)..end);
            }
        }
        let mut entry = Entry {
            lease,
            acked,
            committed,
            end: None,
            limit,
        };
        advance(&mut entry);
        self.entries.insert(entry.lease.attempt, entry);
    }

    /// The lease of an attempt still tracked.
    pub fn lease(&self, attempt: AttemptId) -> Option<&Lease> {
        self.entries.get(&attempt).map(|e| &e.lease)
    }

    /// The attempts tracked.
    pub fn attempts(&self) -> Vec<AttemptId> {
        // In order: the same events give the same reports (a seed of the
        // shell's simulation replays).
        let mut attempts: Vec<AttemptId> = self.entries.keys().copied().collect();
        attempts.sort_unstable();
        attempts
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets an attempt (lost); later acks for it are ignored. Returns
    /// whether it was tracked.
    pub fn drop_attempt(&mut self, attempt: AttemptId) -> bool {
        self.entries.remove(&attempt).is_some()
    }

    /// The reader of `attempt` reached the end of the split at row `end`.
    pub fn read_done(&mut self, attempt: AttemptId, end: u64) -> Option<Action> {
        let entry = self.entries.get_mut(&attempt)?;
        let end = entry.limit.map_or(end, |limit| end.min(limit));
        entry.end = Some(ReadEnd::Done(end));
        self.settle(attempt)
    }

    /// The reader of `attempt` failed at row `at` (rows before it were
    /// delivered). The attempt fails once they are all acknowledged; a
    /// failure past the rows the lease covers ends it as done.
    pub fn read_failed(
        &mut self,
        attempt: AttemptId,
        at: u64,
        reason: String,
        for_good: bool,
    ) -> Option<Action> {
        let entry = self.entries.get_mut(&attempt)?;
        entry.end = Some(match entry.limit {
            Some(limit) if at >= limit => ReadEnd::Done(limit),
            _ => ReadEnd::Failed {
                at,
                reason,
                for_good,
            },
        });
        self.settle(attempt)
    }

    /// Rows of a piece were acknowledged by a trainer.
    #[cfg(test)]
    pub fn ack(&mut self, piece: &Piece) -> Option<Action> {
        let fresh = self.take_ack(piece)?;
        self.action_after_ack(piece.attempt, fresh)
    }

    /// The rows of a batch were acknowledged: one action per attempt whose
    /// rows it holds, in the order the attempts first appear (a batch
    /// shuffled across tasks holds many pieces of each).
    pub fn ack_all(&mut self, pieces: &[Piece]) -> Vec<Action> {
        let mut touched: Vec<(AttemptId, bool)> = Vec::new();
        for piece in pieces {
            let Some(fresh) = self.take_ack(piece) else {
                continue;
            };
            match touched.iter_mut().find(|(a, _)| *a == piece.attempt) {
                Some((_, any)) => *any |= fresh,
                None => touched.push((piece.attempt, fresh)),
            }
        }
        touched
            .into_iter()
            .filter_map(|(attempt, fresh)| self.action_after_ack(attempt, fresh))
            .collect()
    }

    /// Records the rows of `piece` as acknowledged; whether any was not
    /// before (`None`: the attempt is not tracked).
    fn take_ack(&mut self, piece: &Piece) -> Option<bool> {
        let entry = self.entries.get_mut(&piece.attempt)?;
        let new = piece.start.max(entry.committed)..piece.start + piece.len;
        // The acknowledged range that starts at or before the new rows.
        let at = entry.acked.partition_point(|r| r.start <= new.start);
        let covered = at > 0 && entry.acked.get(at - 1).is_some_and(|r| new.end <= r.end);
        let fresh = !new.is_empty() && !covered;
        insert(&mut entry.acked, piece.start..piece.start + piece.len);
        advance(entry);
        Some(fresh)
    }

    /// What acknowledged rows of `attempt` lead to: its end, or a commit
    /// when any was new.
    fn action_after_ack(&mut self, attempt: AttemptId, fresh: bool) -> Option<Action> {
        let settled = self.settle(attempt);
        if settled.is_some() {
            return settled;
        }
        let entry = self.entries.get(&attempt)?;
        fresh.then(|| Action::Commit {
            attempt,
            offset: entry.committed,
            ranges: entry.acked.iter().map(|r| (r.start, r.end)).collect(),
        })
    }

    fn settle(&mut self, attempt: AttemptId) -> Option<Action> {
        let entry = self.entries.get(&attempt)?;
        let reached = match &entry.end {
            Some(ReadEnd::Done(end)) => *end,
            Some(ReadEnd::Failed { at, .. }) => *at,
            None => return None,
        };
        if entry.committed < reached {
            return None;
        }
        let entry = self.entries.remove(&attempt)?;
        match entry.end {
            Some(ReadEnd::Failed {
                at,
                reason,
                for_good,
            }) => Some(Action::Fail {
                attempt,
                offset: at,
                reason,
                for_good,
            }),
            _ => Some(Action::Finish {
                attempt,
                rows: reached,
            }),
        }
    }
}

/// Moves the committed offset over the acknowledged ranges that touch it.
fn advance(entry: &mut Entry) {
    let reached = entry
        .acked
        .iter()
        .take_while(|r| {
            let touches = r.start <= entry.committed;
            if touches {
                entry.committed = entry.committed.max(r.end);
            }
            touches
        })
        .count();
    entry.acked.drain(..reached);
}

/// Inserts a range into a sorted list of disjoint ranges, merging the
/// neighbours it touches.
fn insert(ranges: &mut Vec<Range<u64>>, new: Range<u64>) {
    if new.is_empty() {
        return;
    }
    // The first range that ends at or after the new one's start.
    let from = ranges.partition_point(|r| r.end < new.start);
    let mut merged = new;
    let mut to = from;
    while let Some(r) = ranges.get(to) {
        if r.start > merged.end {
            break;
        }
        merged.start = merged.start.min(r.start);
        merged.end = merged.end.max(r.end);
        to += 1;
    }
    ranges.splice(from..to, [merged]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epoch::Epoch;

    fn lease(attempt: u64, offset: u64) -> Lease {
        Lease {
            attempt: AttemptId(attempt),
            epoch: Epoch(0),
            split: 0,
            offset,
            deadline: 0,
            skip: Vec::new(),
            repaired: false,
        }
    }

    fn piece(attempt: u64, start: u64, len: u64) -> Piece {
        Piece {
            attempt: AttemptId(attempt),
            start,
            len,
        }
    }

    #[test]
    fn commits_every_acknowledged_range_as_it_comes() {
        let mut l = Ledger::default();
        l.start(lease(1, 10));
        assert_eq!(
            l.ack(&piece(1, 20, 5)),
            Some(Action::Commit {
                attempt: AttemptId(1),
                offset: 10,
                ranges: vec![(20, 25)],
            }),
            "rows 10..20 are still on a slow device: 20..25 is committed all the same"
        );
        assert_eq!(l.ack(&piece(1, 20, 5)), None, "nothing new");
        assert_eq!(
            l.ack(&piece(1, 10, 10)),
            Some(Action::Commit {
                attempt: AttemptId(1),
                offset: 25,
                ranges: Vec::new(),
            })
        );
        assert_eq!(l.read_done(AttemptId(1), 30), None);
        assert_eq!(
            l.ack(&piece(1, 25, 5)),
            Some(Action::Finish {
                attempt: AttemptId(1),
                rows: 30
            })
        );
        assert!(l.is_empty());
    }

    #[test]
    fn empty_task_finishes_when_read() {
        let mut l = Ledger::default();
        l.start(lease(2, 7));
        assert_eq!(
            l.read_done(AttemptId(2), 7),
            Some(Action::Finish {
                attempt: AttemptId(2),
                rows: 7
            })
        );
    }

    #[test]
    fn failed_read_fails_once_its_rows_are_acknowledged() {
        let mut l = Ledger::default();
        l.start(lease(4, 0));
        assert!(l.ack(&piece(4, 0, 10)).is_some());
        assert_eq!(l.read_failed(AttemptId(4), 30, "bad".into(), false), None);
        assert_eq!(
            l.ack(&piece(4, 20, 10)),
            Some(Action::Commit {
                attempt: AttemptId(4),
                offset: 10,
                ranges: vec![(20, 30)],
            }),
            "rows 10..20 are still on a device: not failed yet"
        );
        assert_eq!(
            l.ack(&piece(4, 10, 10)),
            Some(Action::Fail {
                attempt: AttemptId(4),
                offset: 30,
                reason: "bad".into(),
                for_good: false,
            })
        );
        assert!(l.is_empty());
    }

    #[test]
    fn read_failing_at_the_committed_row_fails_at_once() {
        let mut l = Ledger::default();
        l.start(lease(5, 40));
        assert_eq!(
            l.read_failed(AttemptId(5), 40, "gone".into(), false),
            Some(Action::Fail {
                attempt: AttemptId(5),
                offset: 40,
                reason: "gone".into(),
                for_good: false,
            })
        );
    }

    #[test]
    fn read_failing_past_a_lease_of_rows_served_again_finishes_it() {
        let mut l = Ledger::default();
        let mut served_again = lease(6, 20);
        served_again.skip = vec![(21, u64::MAX)];
        l.start(served_again);
        assert!(l.ack(&piece(6, 20, 1)).is_some());
        assert_eq!(
            l.read_failed(AttemptId(6), 25, "bad".into(), false),
            Some(Action::Finish {
                attempt: AttemptId(6),
                rows: 21
            }),
            "a window reads the whole split: it failed past the lease's rows"
        );
        assert!(l.is_empty());
    }

    #[test]
    fn dropped_attempt_ignores_acks() {
        let mut l = Ledger::default();
        l.start(lease(3, 0));
        l.drop_attempt(AttemptId(3));
        assert_eq!(l.ack(&piece(3, 0, 5)), None);
    }
}
