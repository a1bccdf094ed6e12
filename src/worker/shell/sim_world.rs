//! The world the shell's simulation runs in: the real [`Queue`] behind an
//! in-memory [`TaskSource`] (every commit and finish it accepts recorded by
//! row, so a row committed by two attempts is caught as it happens), readers
//! that only record what they were asked to read (the simulation delivers
//! the rows), and a clock the simulation moves.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use connectors::{ReadAhead, Split};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::edges::{Clock, Readers};
use crate::epoch::Epoch;
use crate::protocol::ops::{self, Operation};
use crate::protocol::{SourceError, TaskSource};
use crate::queue::{
    AttemptId, Command, CutPiece, EpochView, FailOutcome, Lease, LeaseReply, Queue, QueueStatus,
    WorkerId,
};
use crate::worker::reader::{unskipped, ReadEvent};

/// The simulation's time, in milliseconds since its start.
#[derive(Debug, Clone)]
pub(super) struct SimClock {
    base: Instant,
    now: Arc<AtomicU64>,
}

impl SimClock {
    pub(super) fn new() -> SimClock {
        SimClock {
            base: Instant::now(),
            now: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Milliseconds since the start.
    pub(super) fn millis(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    pub(super) fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        self.base + Duration::from_millis(self.millis())
    }

    fn backoff_seed(&self, worker: WorkerId) -> u64 {
        worker.0
    }
}

/// A read the shell started: what to read, and how the shell stops it.
#[derive(Debug)]
pub(super) struct Started {
    pub(super) lease: Lease,
    pub(super) handle: AbortHandle,
}

/// Readers that record each read asked for (see [`Started`]).
#[derive(Debug, Clone, Default)]
pub(super) struct SimReaders {
    pub(super) started: Arc<Mutex<Vec<Started>>>,
}

impl Readers for SimReaders {
    fn start(
        &self,
        _split: Split,
        lease: Lease,
        _ahead: ReadAhead,
        _tx: mpsc::Sender<ReadEvent>,
    ) -> AbortHandle {
        let handle = tokio::spawn(std::future::pending::<()>()).abort_handle();
        let started = Started {
            lease,
            handle: handle.clone(),
        };
        self.started.lock().expect("readers").push(started);
        handle
    }
}

/// The queue, what it granted, and which attempt committed each row.
#[derive(Debug)]
pub(super) struct Books {
    pub(super) queue: Queue,
    pub(super) leases: HashMap<AttemptId, Lease>,
    /// `(epoch, split)` to the attempt that committed each row.
    pub(super) owners: HashMap<(Epoch, u32), HashMap<u64, AttemptId>>,
}

impl Books {
    /// Rows `start..end` of `attempt`'s lease (outside its skipped rows)
    /// are committed by it; none may be committed by another attempt.
    fn record(&mut self, attempt: AttemptId, start: u64, end: u64) {
        let Some(lease) = self.leases.get(&attempt) else {
            panic!("{attempt} committed without a lease");
        };
        let owners = self.owners.entry((lease.epoch, lease.split)).or_default();
        for (s, e) in unskipped(start, end, &lease.skip) {
            for row in s..e {
                let owner = *owners.entry(row).or_insert(attempt);
                assert_eq!(
                    owner, attempt,
                    "row {row} of split {} in epoch {} committed by {owner} and {attempt}",
                    lease.split, lease.epoch
                );
            }
        }
    }

    /// What the queue's reply to `command` says was committed.
    fn note(&mut self, command: &Command, accepted: bool) {
        if !accepted {
            return;
        }
        match command {
            Command::Commit {
                attempt,
                offset,
                ranges,
                ..
            } => {
                let from = self.leases.get(attempt).map_or(0, |l| l.offset);
                self.record(*attempt, from, *offset);
                for &(s, e) in ranges {
                    self.record(*attempt, s, e);
                }
            }
            Command::Finish { attempt, rows, .. } => {
                let from = self.leases.get(attempt).map_or(0, |l| l.offset);
                self.record(*attempt, from, *rows);
            }
            _ => {}
        }
    }
}

/// The real [`Queue`] as a worker's [`TaskSource`], at the simulation's time.
pub(super) struct SimSource {
    pub(super) books: Mutex<Books>,
    pub(super) clock: SimClock,
}

impl SimSource {
    fn apply<O: Operation>(&self, op: O) -> Result<O::Output, SourceError> {
        let now = self.clock.millis();
        let mut books = self.books.lock().expect("books");
        books.queue.apply(&Command::Tick { now });
        let command = op.command(now);
        let reply = books.queue.apply(&command);
        let output = O::output(reply).expect("the reply to its command");
        books.note(&command, output.is_ok());
        output.map_err(SourceError::refused(O::DOING))
    }
}

#[async_trait::async_trait]
impl TaskSource for SimSource {
    async fn register(&self) -> Result<WorkerId, SourceError> {
        self.apply(ops::Register::default())
    }

    async fn lease(&self, worker: WorkerId, max: usize) -> Result<LeaseReply, SourceError> {
        let reply = self.apply(ops::Lease { worker, max })?;
        if let LeaseReply::Tasks(leases) = &reply {
            let mut books = self.books.lock().expect("books");
            for lease in leases {
                books.leases.insert(lease.attempt, lease.clone());
            }
        }
        Ok(reply)
    }

    async fn heartbeat(
        &self,
        worker: WorkerId,
        _held: &[AttemptId],
    ) -> Result<Vec<AttemptId>, SourceError> {
        let beat = ops::Heartbeat {
            worker,
            rows: 0,
            held: None,
            cached: None,
            cache: None,
        };
        self.apply(beat).map(|r| r.lost)
    }

    async fn commit(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        offset: u64,
        ranges: Vec<(u64, u64)>,
    ) -> Result<(), SourceError> {
        self.apply(ops::Commit {
            worker,
            attempt,
            offset,
            ranges,
        })
    }

    async fn finish(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        rows: u64,
    ) -> Result<(), SourceError> {
        self.apply(ops::Finish {
            worker,
            attempt,
            rows,
        })
    }

    async fn fail(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        reason: String,
        for_good: bool,
    ) -> Result<FailOutcome, SourceError> {
        self.apply(ops::Fail {
            worker,
            attempt,
            reason,
            for_good,
        })
    }

    async fn hand_back(&self, worker: WorkerId, attempt: AttemptId) -> Result<(), SourceError> {
        self.apply(ops::HandBack { worker, attempt })
    }

    async fn declare_checkpoints(&self, _worker: WorkerId) -> Result<(), SourceError> {
        self.apply(ops::JobCheckpoint {
            id: None,
            pieces: Vec::new(),
        })
    }

    async fn checkpoint(
        &self,
        _worker: WorkerId,
        id: String,
        pieces: Vec<CutPiece>,
    ) -> Result<(), SourceError> {
        self.apply(ops::JobCheckpoint {
            id: Some(id),
            pieces,
        })
    }

    async fn status(&self) -> Result<QueueStatus, SourceError> {
        Ok(self.books.lock().expect("books").queue.status())
    }

    async fn epoch_view(&self, epoch: Epoch) -> Result<Option<EpochView>, SourceError> {
        Ok(self.books.lock().expect("books").queue.epoch_view(epoch))
    }
}
