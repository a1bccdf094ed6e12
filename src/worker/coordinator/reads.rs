//! The reads a worker runs, and what each is for.

use std::collections::{HashMap, HashSet};

use crate::queue::AttemptId;

/// Why a read runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadKind {
    /// The rows of a lease.
    Leased,
    /// Rows read again for the trainer of `device`, which restarted from its
    /// checkpoint (outside any lease: the rows were committed already).
    Replay {
        /// The trainer's device.
        device: usize,
    },
    /// `--shuffle global`: rows of a task done before this run, read to keep
    /// a window's permutation whole (outside any lease).
    Context,
}

/// The reads running, by attempt (made-up attempts for replays and context
/// reads), and which of the leased ones have not delivered rows yet.
#[derive(Debug, Default)]
pub struct Reads {
    kinds: HashMap<AttemptId, ReadKind>,
    starting: HashSet<AttemptId>,
}

impl Reads {
    /// A read started.
    pub fn start(&mut self, attempt: AttemptId, kind: ReadKind, starting: bool) {
        self.kinds.insert(attempt, kind);
        if starting {
            self.starting.insert(attempt);
        }
    }

    /// What the read of `attempt` is for, while it runs.
    pub fn kind(&self, attempt: AttemptId) -> Option<ReadKind> {
        self.kinds.get(&attempt).copied()
    }

    /// The read delivered rows or waits for bytes: no longer starting.
    pub fn started(&mut self, attempt: AttemptId) {
        self.starting.remove(&attempt);
    }

    /// The read ended or was stopped; what it was for.
    pub fn end(&mut self, attempt: AttemptId) -> Option<ReadKind> {
        self.starting.remove(&attempt);
        self.kinds.remove(&attempt)
    }

    /// Every read stops.
    pub fn clear(&mut self) {
        self.starting.clear();
        self.kinds.clear();
    }

    /// Reads of leases running.
    pub fn leased(&self) -> usize {
        self.count(|k| k == ReadKind::Leased)
    }

    fn count(&self, is: impl Fn(ReadKind) -> bool) -> usize {
        self.kinds.values().filter(|k| is(**k)).count()
    }

    /// Whether no read runs.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// Whether no leased read is still starting.
    pub fn none_starting(&self) -> bool {
        self.starting.is_empty()
    }
}
