//! What happens to a worker, as the coordinator hears of it.

use super::super::Piece;
use crate::epoch::Epoch;
use crate::queue::{AttemptId, Lease};
use crate::trainer::MarkKind;

/// One thing that happened: a reply of the master, a reader's progress, a
/// device's acknowledgement or checkpoint line, a request to stop. Time
/// comes in with the events that need it; the coordinator reads no clock.
#[derive(Debug, Clone)]
pub enum Event {
    /// The master granted a lease. `reachable` is false when its split is
    /// one this worker does not know yet and the master could not be asked
    /// for the job's new splits.
    Granted {
        /// The lease.
        lease: Lease,
        /// Whether the master answered when asked for new splits.
        reachable: bool,
    },
    /// The job grew: this worker now knows `count` splits.
    Splits {
        /// Splits known.
        count: usize,
    },
    /// The master has nothing to lease now (`over`: nor ever will).
    NothingToLease {
        /// The job is over.
        over: bool,
    },
    /// `--shuffle global`: the shell started a read for a window (the
    /// rows of a lease, or `context`: of a task done before this run).
    WindowRead {
        /// What is read.
        lease: Lease,
        /// Outside any lease.
        context: bool,
    },
    /// A reader delivered rows of `attempt` (not for a window).
    Rows {
        /// The attempt (a lease, or a read again for a restarted trainer).
        attempt: AttemptId,
    },
    /// A reader left rows out (`--split`, `--sample`, `--limit`): consumed
    /// as if trained. `runs`: the rows, as `(start, end)`.
    Cut {
        /// The attempt.
        attempt: AttemptId,
        /// The rows left out.
        runs: Vec<(u64, u64)>,
        /// Read for the global shuffle's window (its rows were checked
        /// against the commits before, and are always taken).
        window: bool,
    },
    /// A reader started delivering, or waits for bytes: it no longer
    /// counts as starting.
    Started {
        /// The attempt.
        attempt: AttemptId,
    },
    /// A read reached the end of its split at row `end`.
    ReadDone {
        /// The attempt.
        attempt: AttemptId,
        /// Rows of the split.
        end: u64,
    },
    /// A read failed at row `at`.
    ReadFailed {
        /// The attempt.
        attempt: AttemptId,
        /// The first row not delivered.
        at: u64,
        /// Why.
        reason: String,
        /// No attempt can succeed.
        for_good: bool,
        /// Read for the global shuffle's window.
        window: bool,
    },
    /// A device's trainer acknowledged a batch.
    Applied {
        /// The device.
        device: usize,
        /// The batch's epoch.
        epoch: Epoch,
        /// Its rows.
        rows: u64,
        /// Where they came from.
        provenance: Vec<Piece>,
    },
    /// Rows `--drop-last` dropped: consumed without reaching a trainer.
    Dropped {
        /// Where they came from.
        provenance: Vec<Piece>,
    },
    /// A trainer's checkpoint line, or its restart from a checkpoint.
    Mark {
        /// The device.
        device: usize,
        /// Which.
        kind: MarkKind,
    },
    /// The master said the lease of `attempt` is lost.
    Lost {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The leases that lapsed by this worker's own clock and were neither
    /// renewed nor reported lost yet.
    Lapsed {
        /// Those attempts.
        attempts: Vec<AttemptId>,
    },
    /// Stop early (pre-emption): lease and read no more.
    Stop,
    /// The trainers finished (or the grace period is over): hand back
    /// every lease still held.
    DrainOver,
    /// The run's loop is over: only device events still come, as the
    /// trainers end their streams.
    Tail,
}
