//! The worker: leases tasks, reads and re-batches their rows, feeds device
//! threads and commits row offsets as trainers acknowledge.
//!
//! Stages, one file each (tasks come from a [`crate::protocol::TaskSource`]:
//! the embedded queue or [`remote`], a master over HTTP): [`reader`]
//! (split to batches), [`batcher`] (exact batch sizes, optional shuffle),
//! [`devices`] (one thread per device owning a trainer), [`ledger`]
//! (acknowledged rows to committed offsets), joined in [`pipeline`]; under
//! `--lockstep`, [`stepper`] (one batch per device per step). Batches reach
//! the device threads through one [`delivery`]. A reader tries again reads
//! that fail for a reason that may pass ([`read_retry`]).
//!
//! The rules of the worker's leases and rows are [`coordinator`], a pure state
//! machine (events in, actions out) tested by a seeded simulation; `shell` is
//! the async shell that feeds it and performs its actions, started and joined
//! by [`pipeline`].

pub mod backoff;
pub mod batcher;
pub mod checkpoints;
mod committer;
pub mod coordinator;
mod dealt;
pub mod delivery;
pub mod devices;
pub mod epoch_steps;
pub mod global_steps;
mod in_order;
pub mod ledger;
pub mod pipeline;
pub mod pipeline_config;
pub mod pipeline_error;
pub mod read_retry;
pub mod reader;
pub mod remote;
mod shell;
pub mod shuffle;
pub mod stepper;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::queue::AttemptId;

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

/// What the worker knows of its leases' lives, shared by the coordinator, the
/// heartbeat task and the device threads: the attempts it lost, and when each
/// lease lapses at the latest by this worker's own clock (the time the request
/// that granted or renewed it was sent, plus the lease timeout; the master
/// renews later than that, so its deadline is never earlier). Device threads
/// drop the rows of dead attempts (lost, or the worker is stopping) from
/// batches not yet handed to a trainer, and hold back the rows of leases in
/// doubt (lapsed by this clock, neither renewed nor lost yet: the master is
/// unreachable, or this process was paused) until the master answers: a
/// worker paused or cut off past its leases trains none of their rows, and a
/// master down for longer than the lease timeout costs time, not rows.
#[derive(Debug, Clone, Default)]
pub struct LeaseClock {
    inner: Arc<Mutex<ClockInner>>,
    timeout: Option<Duration>,
}

#[derive(Debug, Default)]
struct ClockInner {
    /// The worker is stopping: no queued row reaches a trainer any more.
    stopped: bool,
    lost: HashSet<AttemptId>,
    expires: HashMap<AttemptId, Instant>,
}

impl LeaseClock {
    /// A clock for leases that lapse `timeout` after their last renewal
    /// (`None`: unknown, only leases reported lost are dead).
    pub fn new(timeout: Option<Duration>) -> Self {
        LeaseClock {
            inner: Arc::default(),
            timeout,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClockInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A lease was granted by a request sent at `sent`.
    pub fn granted(&self, attempt: AttemptId, sent: Instant) {
        if let Some(timeout) = self.timeout {
            self.lock().expires.insert(attempt, sent + timeout);
        }
    }

    /// The leases `attempts` were renewed by a heartbeat sent at `sent`.
    pub fn renewed(&self, attempts: &[AttemptId], sent: Instant) {
        let Some(timeout) = self.timeout else {
            return;
        };
        let mut inner = self.lock();
        for attempt in attempts {
            if let Some(at) = inner.expires.get_mut(attempt) {
                *at = (*at).max(sent + timeout);
            }
        }
    }

    /// The lease of `attempt` is lost.
    pub fn lose(&self, attempt: AttemptId) {
        let mut inner = self.lock();
        inner.expires.remove(&attempt);
        inner.lost.insert(attempt);
    }

    /// The attempt ended (finished or failed): nothing more to watch.
    pub fn forget(&self, attempt: AttemptId) {
        self.lock().expires.remove(&attempt);
    }

    /// The worker is stopping: every attempt is dead to the device threads.
    pub fn stop_all(&self) {
        self.lock().stopped = true;
    }

    /// Whether rows of `attempt` must not reach a trainer any more.
    pub fn is_dead(&self, attempt: AttemptId) -> bool {
        let inner = self.lock();
        inner.stopped || inner.lost.contains(&attempt)
    }

    /// Whether the lease of `attempt` lapsed by this worker's clock at `now`
    /// while the master has neither renewed it nor said it is lost: its rows
    /// wait until one of the two happens.
    pub fn in_doubt(&self, attempt: AttemptId, now: Instant) -> bool {
        let inner = self.lock();
        !inner.stopped
            && !inner.lost.contains(&attempt)
            && inner.expires.get(&attempt).is_some_and(|at| *at <= now)
    }

    /// Leases that lapsed by this worker's clock and are not yet counted lost.
    pub fn lapsed(&self, now: Instant) -> Vec<AttemptId> {
        self.lock()
            .expires
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(attempt, _)| *attempt)
            .collect()
    }
}

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
