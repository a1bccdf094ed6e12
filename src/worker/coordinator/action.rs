//! What the coordinator asks its shell to do.

use crate::queue::{AttemptId, CutPiece, Lease};

use super::super::ledger;

/// One thing to do. The shell performs them in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start reading a lease (the global shuffle, when on, places it in a
    /// window first).
    Read(Lease),
    /// Read rows again outside any lease for a trainer that restarted
    /// from its checkpoint; `device` is the trainer's.
    Replay {
        /// The rows, under a made-up attempt.
        lease: Lease,
        /// The device that acknowledged them before.
        device: usize,
    },
    /// Pass the rows just read on (to the batcher, the window or a device).
    Feed(AttemptId),
    /// Tell the master.
    Report(Report),
    /// The lease is lost: stop its reader and drop its rows wherever they
    /// wait, so that no trainer gets them.
    Drop(AttemptId),
    /// The attempt ended or is not tracked: its lease clock can forget it.
    Forget(AttemptId),
    /// The lease lapsed by this worker's clock: no row of it reaches a
    /// trainer until the master answers (logged once).
    Suspend(AttemptId),
    /// Stop early: stop every reader, drop every row no trainer holds, and
    /// let the device threads finish the batches they have.
    Drain,
    /// The attempts held changed: tell the heartbeats.
    SyncHeld,
    /// Stop the run: the trainers may hold rows of a lost lease and keep
    /// checkpoints, so they go back to their last complete one.
    RollBack(String),
    /// Stop the run: rows to serve again to a restarted trainer could not be
    /// read.
    ReplayFailed,
}

/// What the coordinator asks the committer to tell the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The job's trainers keep checkpoints.
    Declare,
    /// The rows acknowledged that are in no complete checkpoint.
    Unsaved(Vec<CutPiece>),
    /// The rows acknowledged that are in no complete checkpoint as the
    /// trainers ended their streams (none after their last batch).
    UnsavedAtEnd(Vec<CutPiece>),
    /// A complete checkpoint and the rows it adds.
    Checkpoint {
        /// Its ID.
        id: String,
        /// The rows.
        pieces: Vec<CutPiece>,
    },
    /// What the ledger decided.
    Ledger(ledger::Action),
    /// Hand a lease back unfinished, without counting it as a failed
    /// attempt: the worker is stopping.
    HandBack {
        /// The attempt.
        attempt: AttemptId,
    },
    /// Hand a lease back as failed: this worker will not go on with it.
    GiveUp {
        /// The attempt.
        attempt: AttemptId,
        /// Why, for the master's log and summary.
        reason: String,
    },
}

impl Report {
    /// The attempt whose end this report tells, if it tells one.
    pub fn ends(&self) -> Option<AttemptId> {
        match self {
            Report::Ledger(
                ledger::Action::Finish { attempt, .. } | ledger::Action::Fail { attempt, .. },
            )
            | Report::HandBack { attempt }
            | Report::GiveUp { attempt, .. } => Some(*attempt),
            _ => None,
        }
    }
}
