//! The worker's coordinator: the rules of one worker's leases and rows, as a
//! pure state machine. It hears [`Event`]s (a lease granted, rows read, a
//! batch acknowledged, a checkpoint line, a lease lost or lapsed, a request
//! to stop) and answers with [`Action`]s (read, feed, report a commit or a
//! hand-back, drop a lost lease's rows, roll back, drain). It does no I/O,
//! runs no task and reads no clock: the async shell
//! ([`super::pipeline`]) feeds it and performs what it asks, and the
//! shell's seeded simulation (`shell/sim.rs`) drives both through kills,
//! lapses, restarts and stops, checking that every row is committed exactly
//! once.
//!
//! It keeps the books ([`Ledger`]: acknowledged rows to commits;
//! [`Checkpoints`]: what the trainers' checkpoints hold), which reads run
//! and what for ([`reads`]), and the run's counts ([`outcome`]). The rows
//! themselves (Arrow batches, the batcher, the stepper, the global
//! shuffle's windows) stay with the shell: the coordinator decides whether
//! they go on, and whose they are.

mod action;
mod event;
pub mod outcome;
pub mod reads;

use std::collections::{HashMap, HashSet};

use tracing::{debug, warn};

pub use action::{Action, Report};
pub use event::Event;
pub use outcome::{Progress, RunOutcome};
use reads::{ReadKind, Reads};

use super::checkpoints::{CheckpointAction, Checkpoints};
use super::ledger::Ledger;
use super::Piece;
use crate::epoch::Epoch;
use crate::queue::{AttemptId, CutPiece, Lease};
use crate::trainer::MarkKind;

/// What the coordinator is told once, at the start.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Device threads.
    pub devices: usize,
    /// Splits the worker knows at the start.
    pub splits: usize,
    /// The source serves again what a lost worker held in no checkpoint (a
    /// master): a lost lease then rolls checkpointing trainers back.
    pub keeps_unsaved: bool,
    /// `--shuffle global`: leases are read once their window is, and the
    /// shell tells each read it starts ([`Event::WindowRead`]).
    pub global: bool,
    /// Rows read again for a restarted trainer go back to its own device
    /// (`--shuffle global` without lockstep).
    pub replay_to_device: bool,
}

/// The state of one worker's leases and rows.
#[derive(Debug)]
pub struct Coordinator {
    settings: Settings,
    ledger: Ledger,
    checkpoints: Checkpoints,
    /// The epoch and split of every attempt read here (leases and replays).
    origins: HashMap<AttemptId, (Epoch, u32)>,
    reads: Reads,
    /// The next made-up attempt of a replay (counting down from `u64::MAX`).
    next_replay: u64,
    /// Splits known.
    splits: usize,
    /// The master said the job is over.
    over: bool,
    /// Stopping early.
    draining: bool,
    /// The run's loop is over (see [`Event::Tail`]).
    tail: bool,
    /// Leases in doubt, already announced.
    suspended: HashSet<AttemptId>,
    progress: Progress,
    outcome: RunOutcome,
}

impl Coordinator {
    /// A worker holding nothing yet.
    pub fn new(settings: Settings) -> Self {
        Coordinator {
            settings,
            ledger: Ledger::default(),
            checkpoints: Checkpoints::new(settings.devices),
            origins: HashMap::new(),
            reads: Reads::default(),
            next_replay: u64::MAX,
            splits: settings.splits,
            over: false,
            draining: false,
            tail: false,
            suspended: HashSet::new(),
            progress: Progress::default(),
            outcome: RunOutcome::default(),
        }
    }

    /// Takes `event`; what to do about it, in order.
    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::Granted { lease, reachable } => self.granted(lease, reachable, &mut out),
            Event::Splits { count } => self.splits = self.splits.max(count),
            Event::NothingToLease { over } => self.over |= over,
            Event::WindowRead { lease, context } => self.window_read(&lease, context),
            Event::Rows { attempt, .. } => self.rows(attempt, &mut out),
            Event::Cut {
                attempt,
                runs,
                window,
            } => self.cut(attempt, &runs, window, &mut out),
            Event::Started { attempt } => self.reads.started(attempt),
            Event::ReadDone { attempt, end } => self.read_done(attempt, end, &mut out),
            Event::ReadFailed {
                attempt,
                at,
                reason,
                for_good,
                window,
            } => self.read_failed(attempt, at, reason, for_good, window, &mut out),
            Event::Applied {
                device,
                epoch,
                rows,
                provenance,
            } => self.applied(device, epoch, rows, &provenance, &mut out),
            Event::Dropped { provenance } => {
                self.outcome.dropped += provenance.iter().map(|p| p.len).sum::<u64>();
                self.consume(0, &provenance, &mut out);
            }
            Event::Mark { device, kind } => self.mark(device, kind, &mut out),
            Event::Lost { attempt } => self.lost(attempt, &mut out),
            Event::Lapsed { attempts } => self.lapsed(&attempts, &mut out),
            Event::Stop => self.stop(&mut out),
            Event::DrainOver => self.hand_back_all(&mut out),
            Event::Tail => self.tail = true,
        }
        out
    }

    /// The attempts held (for the heartbeats).
    pub fn attempts(&self) -> Vec<AttemptId> {
        self.ledger.attempts()
    }

    /// Whether the master said the job is over.
    pub fn is_over(&self) -> bool {
        self.over
    }

    /// Whether the job is over and nothing is read or held any more (the
    /// shell adds the rows it still holds).
    pub fn is_done(&self) -> bool {
        self.over && self.reads.is_empty() && self.ledger.is_empty()
    }

    /// Whether no read of any sort runs.
    pub fn reads_none(&self) -> bool {
        self.reads.is_empty()
    }

    /// Reads of leases running.
    pub fn leased_reads(&self) -> usize {
        self.reads.leased()
    }

    /// Whether the read of lease `attempt` runs.
    pub fn is_reading(&self, attempt: AttemptId) -> bool {
        self.reads.kind(attempt) == Some(ReadKind::Leased)
    }

    /// Whether no leased read is still starting (has delivered no rows).
    pub fn none_starting(&self) -> bool {
        self.reads.none_starting()
    }

    /// The device the rows of `attempt` go back to, when it is a replay
    /// whose rows do (see [`Settings::replay_to_device`]).
    pub fn replay_device(&self, attempt: AttemptId) -> Option<usize> {
        match self.reads.kind(attempt)? {
            ReadKind::Replay { device } if self.settings.replay_to_device => Some(device),
            _ => None,
        }
    }

    /// The counter of made-up attempts (reads outside any lease), counting
    /// down from `u64::MAX`: the global shuffle names its context reads
    /// from it too, so that no two reads share an id.
    pub fn made_up_ids(&mut self) -> &mut u64 {
        &mut self.next_replay
    }

    /// Splits known.
    pub fn splits(&self) -> usize {
        self.splits
    }

    /// Whether a lost lease rolls the trainers back: they keep checkpoints,
    /// and the master serves again what this worker held in no checkpoint.
    pub fn rolls_back(&self) -> bool {
        self.checkpoints.declared() && self.settings.keeps_unsaved
    }

    /// The progress so far.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Whether the run was stopped early.
    pub fn stopped(&self) -> bool {
        self.outcome.stopped
    }

    /// The outcome of the run; `ended_well`: the run ended without error.
    pub fn into_outcome(mut self, ended_well: bool) -> RunOutcome {
        let declared = self.checkpoints.declared();
        if ended_well && declared && !self.outcome.stopped {
            // What to do about it (serve the rows once more, or fail) is the
            // job's: a worker joins again, `sluice train` rewinds its queue.
            self.outcome.unsaved_at_end = self.checkpoints.after_last_lines();
            if self.outcome.unsaved_at_end > 0 {
                self.outcome.unsaved_pieces_at_end = self.checkpoints.unsaved();
            }
        }
        self.outcome.checkpointed = declared;
        self.outcome
    }

    fn granted(&mut self, lease: Lease, reachable: bool, out: &mut Vec<Action>) {
        let attempt = lease.attempt;
        if !reachable {
            // Leased again, once the master answers.
            out.push(Action::Forget(attempt));
            out.push(Action::Report(Report::HandBack { attempt }));
            return;
        }
        if lease.split as usize >= self.splits {
            let reason = format!("split {} is not in this job", lease.split);
            out.push(Action::Forget(attempt));
            out.push(Action::Report(Report::GiveUp { attempt, reason }));
            return;
        }
        debug!(%attempt, split = lease.split, epoch = lease.epoch.number(), offset = lease.offset, "leased");
        self.ledger.start(lease.clone());
        self.origins.insert(attempt, (lease.epoch, lease.split));
        if !self.settings.global {
            self.reads.start(attempt, ReadKind::Leased, true);
        }
        out.push(Action::Read(lease));
    }

    /// The epoch and split an attempt (or a made-up replay id) reads, once
    /// its rows were asked for.
    pub fn origin(&self, attempt: AttemptId) -> Option<(Epoch, u32)> {
        self.origins.get(&attempt).copied()
    }

    fn window_read(&mut self, lease: &Lease, context: bool) {
        let kind = if context {
            ReadKind::Context
        } else {
            ReadKind::Leased
        };
        self.origins
            .insert(lease.attempt, (lease.epoch, lease.split));
        self.reads.start(lease.attempt, kind, false);
    }

    fn rows(&mut self, attempt: AttemptId, out: &mut Vec<Action>) {
        self.reads.started(attempt);
        let replay = matches!(self.reads.kind(attempt), Some(ReadKind::Replay { .. }));
        if self.ledger.lease(attempt).is_some() || replay {
            out.push(Action::Feed(attempt));
        }
        // else lost meanwhile
    }

    fn cut(
        &mut self,
        attempt: AttemptId,
        runs: &[(u64, u64)],
        window: bool,
        out: &mut Vec<Action>,
    ) {
        let replay = matches!(self.reads.kind(attempt), Some(ReadKind::Replay { .. }));
        if !window && (self.ledger.lease(attempt).is_none() || replay) {
            return; // lost meanwhile, or consumed before
        }
        for &(start, end) in runs {
            self.outcome.cut += end - start;
            // Consumed as rows dropped are: committed, in device 0's next checkpoint.
            let piece = Piece {
                attempt,
                start,
                len: end - start,
            };
            self.consume(0, &[piece], out);
        }
    }

    fn read_done(&mut self, attempt: AttemptId, end: u64, out: &mut Vec<Action>) {
        if self.reads.end(attempt) != Some(ReadKind::Leased) {
            return; // stopped (lost meanwhile), or outside any lease
        }
        if let Some(action) = self.ledger.read_done(attempt, end) {
            self.report(Report::Ledger(action), out);
        }
    }

    fn read_failed(
        &mut self,
        attempt: AttemptId,
        at: u64,
        reason: String,
        for_good: bool,
        window: bool,
        out: &mut Vec<Action>,
    ) {
        match self.reads.end(attempt) {
            None => return,
            Some(ReadKind::Replay { .. }) => return out.push(Action::ReplayFailed),
            Some(ReadKind::Context) if window => return out.push(Action::ReplayFailed),
            Some(ReadKind::Context) => return,
            Some(ReadKind::Leased) => {}
        }
        self.outcome.read_failures += 1;
        if window {
            warn!(%attempt, row = at, %reason, "read failed; the window goes on without the rows after it, which are read again later");
        } else if for_good {
            warn!(%attempt, row = at, %reason, "read failed for good; the rows before it go on to the trainers, the task fails");
        } else {
            warn!(%attempt, row = at, %reason, "read failed; the rows before it go on to the trainers, the rest is read again");
        }
        if let Some(action) = self.ledger.read_failed(attempt, at, reason, for_good) {
            self.report(Report::Ledger(action), out);
        }
    }

    fn applied(
        &mut self,
        device: usize,
        epoch: Epoch,
        rows: u64,
        provenance: &[Piece],
        out: &mut Vec<Action>,
    ) {
        self.consume(device, provenance, out);
        self.progress.rows += rows;
        self.progress.batches += 1;
        self.progress.epoch = epoch;
        let slot = epoch.index();
        if self.progress.epoch_rows.len() <= slot {
            self.progress.epoch_rows.resize(slot + 1, 0);
        }
        self.progress.epoch_rows[slot] += rows;
        self.outcome.rows += rows;
        self.outcome.batches += 1;
    }

    /// Rows `device` acknowledged (or that were dropped): into its next
    /// checkpoint, and acknowledged to the ledger.
    fn consume(&mut self, device: usize, provenance: &[Piece], out: &mut Vec<Action>) {
        if self.checkpoints.declared() {
            let origins = &self.origins;
            let pieces = provenance.iter().filter_map(|p| {
                let &(epoch, split) = origins.get(&p.attempt)?;
                Some(CutPiece {
                    epoch,
                    split,
                    start: p.start,
                    end: p.start + p.len,
                })
            });
            self.checkpoints.on_applied(device, pieces);
            if self.settings.keeps_unsaved {
                // Before the commits these rows lead to: the master
                // must know they are not in a checkpoint yet.
                out.push(Action::Report(Report::Unsaved(self.checkpoints.unsaved())));
            }
        }
        for action in self.ledger.ack_all(provenance) {
            self.report(Report::Ledger(action), out);
        }
    }

    fn report(&mut self, report: Report, out: &mut Vec<Action>) {
        out.push(Action::Report(report));
    }

    /// A trainer's checkpoint line, or its restart from a checkpoint.
    fn mark(&mut self, device: usize, kind: MarkKind, out: &mut Vec<Action>) {
        let action = match kind {
            MarkKind::Declared => self.checkpoints.on_declared(),
            MarkKind::Checkpoint(id) => self.checkpoints.on_checkpoint(device, id),
            MarkKind::Restarted => {
                self.restarted(device, out);
                None
            }
        };
        match action {
            Some(CheckpointAction::Declare) => out.push(Action::Report(Report::Declare)),
            Some(CheckpointAction::Complete { id, pieces }) => {
                debug!(%id, pieces = pieces.len(), "checkpoint complete");
                out.push(Action::Report(Report::Checkpoint { id, pieces }));
                if self.settings.keeps_unsaved {
                    out.push(Action::Report(Report::Unsaved(self.checkpoints.unsaved())));
                }
            }
            None => {}
        }
    }

    /// `device`'s trainer restarted from its last checkpoint: the rows it
    /// acknowledged after it are read again, outside any lease (they were
    /// committed already).
    fn restarted(&mut self, device: usize, out: &mut Vec<Action>) {
        let again = self.checkpoints.on_restarted(device);
        if again.is_empty() {
            return;
        }
        let rows: u64 = again.iter().map(|p| p.end - p.start).sum();
        self.outcome.replayed += rows;
        warn!(device, rows, "trainer restarted from its last checkpoint; the rows it acknowledged after it are served again");
        if self.tail {
            warn!(device, "trainer restarted after the last batch: the rows it acknowledged after its checkpoint are not in its model");
        }
        for piece in again {
            if piece.split as usize >= self.splits {
                continue;
            }
            let attempt = AttemptId(self.next_replay);
            self.next_replay -= 1;
            self.origins.insert(attempt, (piece.epoch, piece.split));
            self.reads
                .start(attempt, ReadKind::Replay { device }, false);
            let lease = Lease {
                attempt,
                epoch: piece.epoch,
                split: piece.split,
                offset: piece.start,
                deadline: 0,
                skip: vec![(piece.end, u64::MAX)],
                repaired: false,
            };
            out.push(Action::Replay { lease, device });
        }
    }

    /// The master said a lease is lost: its rows go nowhere (they are
    /// served again elsewhere), or, when the trainers may hold some in no
    /// checkpoint, the trainers roll back.
    fn lost(&mut self, attempt: AttemptId, out: &mut Vec<Action>) {
        if self.rolls_back() {
            warn!(%attempt, "lease lost while trainers may hold its rows; rolling them back to their last complete checkpoint");
            out.push(Action::RollBack(format!("lease {attempt} was lost")));
            return;
        }
        warn!(%attempt, "lease lost; its rows will be served again elsewhere");
        self.ledger.drop_attempt(attempt);
        self.reads.end(attempt);
        self.suspended.remove(&attempt);
        out.push(Action::Drop(attempt));
        out.push(Action::SyncHeld);
    }

    /// Leases that lapsed by this worker's clock are suspended, not dropped:
    /// no row of theirs reaches a trainer until the master renews them or
    /// says they are lost. Attempts no longer held are forgotten.
    fn lapsed(&mut self, attempts: &[AttemptId], out: &mut Vec<Action>) {
        for &attempt in attempts {
            if self.ledger.lease(attempt).is_none() {
                out.push(Action::Forget(attempt));
            } else if self.suspended.insert(attempt) {
                out.push(Action::Suspend(attempt));
            }
        }
        let draining = self.draining;
        self.suspended
            .retain(|attempt| !draining && attempts.contains(attempt));
    }

    /// Stops early: no more leases or reads; rows no trainer holds are
    /// dropped; the device threads finish what they hold.
    fn stop(&mut self, out: &mut Vec<Action>) {
        if self.draining {
            return;
        }
        self.draining = true;
        self.outcome.stopped = true;
        self.reads.clear();
        out.push(Action::Drain);
    }

    /// Hands every attempt still held back to the master, after committing
    /// what was acknowledged.
    fn hand_back_all(&mut self, out: &mut Vec<Action>) {
        for attempt in self.ledger.attempts() {
            self.ledger.drop_attempt(attempt);
            out.push(Action::Forget(attempt));
            out.push(Action::Report(Report::HandBack { attempt }));
        }
        out.push(Action::SyncHeld);
    }
}
