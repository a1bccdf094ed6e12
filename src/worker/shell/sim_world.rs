//! The world the shell's simulation runs in: the real [`Queue`] behind an
//! in-memory master that may be unreachable for a while (every request it
//! applies recorded in its [`Books`], so a row committed by two attempts, or
//! committed without a device's acknowledgement, is caught as it happens),
//! readers that only record what they were asked to read (the simulation
//! delivers the rows), and a clock the simulation moves, which also says
//! when each worker's heartbeats go.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use connectors::{ReadAhead, Split};
use tokio::sync::{mpsc, Notify};
use tokio::task::AbortHandle;

use super::edges::{Clock, Readers, Ticks};
use super::sim_ranks::RankBooks;
use crate::epoch::Epoch;
use crate::protocol::ops::Operation;
use crate::protocol::source::AppliesOps;
use crate::protocol::SourceError;
use crate::queue::{
    AttemptId, Command, EpochView, Lease, LeaseReply, Queue, QueueStatus, Reply, WorkerId,
};
use crate::worker::reader::{unskipped, ReadEvent};

/// The simulation's time, in milliseconds since its start; each worker's
/// copy also says when its heartbeats go.
#[derive(Debug, Clone)]
pub(super) struct SimClock {
    base: Instant,
    now: Arc<AtomicU64>,
    /// Told whenever the time moves.
    moved: Arc<Notify>,
    /// A worker's next heartbeat goes once told.
    beat: Arc<Notify>,
}

impl SimClock {
    pub(super) fn new() -> SimClock {
        SimClock {
            base: Instant::now(),
            now: Arc::new(AtomicU64::new(0)),
            moved: Arc::new(Notify::new()),
            beat: Arc::new(Notify::new()),
        }
    }

    /// The same time, with heartbeats of its own (a worker's).
    pub(super) fn for_worker(&self) -> SimClock {
        SimClock {
            beat: Arc::new(Notify::new()),
            ..self.clone()
        }
    }

    /// Milliseconds since the start.
    pub(super) fn millis(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    pub(super) fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
        self.moved.notify_waiters();
    }

    /// The worker's next heartbeat goes (once its task has a turn).
    pub(super) fn beat(&self) {
        self.beat.notify_one();
    }

    /// Resolves once the time is `at` or later.
    async fn until(&self, at: u64) {
        loop {
            let moved = self.moved.notified();
            if self.millis() >= at {
                return;
            }
            moved.await;
        }
    }
}

/// Heartbeats when the simulation says.
struct SimTicks(Arc<Notify>);

#[async_trait::async_trait]
impl Ticks for SimTicks {
    async fn tick(&mut self) {
        self.0.notified().await;
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        self.base + Duration::from_millis(self.millis())
    }

    fn backoff_seed(&self, worker: WorkerId) -> u64 {
        worker.0
    }

    fn heartbeats(&self) -> Box<dyn Ticks> {
        Box::new(SimTicks(self.beat.clone()))
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

/// The queue, what it granted and to whom, which attempt committed each
/// row, and what the simulation saw the workers' devices acknowledge.
#[derive(Debug)]
pub(super) struct Books {
    pub(super) queue: Queue,
    pub(super) leases: HashMap<AttemptId, Lease>,
    /// The worker each attempt was granted to.
    workers: HashMap<AttemptId, WorkerId>,
    /// `(epoch, split)` to the attempt that committed each row.
    pub(super) owners: HashMap<(Epoch, u32), HashMap<u64, AttemptId>>,
    /// Rows of each attempt its worker's devices acknowledged, its reader
    /// cut or its lease skips: no other row of it may be committed.
    pub(super) acked: HashMap<AttemptId, Vec<(u64, u64)>>,
    /// Workers the master counted gone.
    pub(super) gone: HashSet<WorkerId>,
    /// Leases of rows served again (a gone worker's unsaved rows).
    makeup: HashSet<AttemptId>,
    /// Complete checkpoints the master recorded of a worker, in order.
    pub(super) recorded: Vec<(WorkerId, String)>,
    /// A report of a lease the master took back was refused: its rows may
    /// have reached a trainer there and will again elsewhere.
    pub(super) lossy: bool,
    /// The first rule broken (found in a task, reported by the simulation).
    pub(super) broken: Option<String>,
    pub(super) seen: HashSet<&'static str>,
    /// What the master told of the world's ranks.
    pub(super) ranks: RankBooks,
    /// `SLUICE_SIM_TRACE` is set: the requests are traced.
    tracing: bool,
}

impl Books {
    pub(super) fn new(queue: Queue) -> Books {
        Books {
            queue,
            leases: HashMap::new(),
            workers: HashMap::new(),
            owners: HashMap::new(),
            acked: HashMap::new(),
            gone: HashSet::new(),
            makeup: HashSet::new(),
            recorded: Vec::new(),
            lossy: false,
            broken: None,
            seen: HashSet::new(),
            ranks: RankBooks::default(),
            tracing: std::env::var("SLUICE_SIM_TRACE").is_ok(),
        }
    }

    pub(super) fn break_rule(&mut self, why: String) {
        self.broken.get_or_insert(why);
    }

    /// Rows `start..end` of `attempt`'s lease (outside its skipped rows)
    /// are committed by it: by no other attempt before, but where rows a
    /// gone worker's trainers held in no checkpoint are served again.
    fn record(&mut self, attempt: AttemptId, start: u64, end: u64) {
        let Some(lease) = self.leases.get(&attempt) else {
            return self.break_rule(format!("{attempt} committed without a lease"));
        };
        let (epoch, split) = (lease.epoch, lease.split);
        let runs = unskipped(start, end, &lease.skip);
        let mut twice = None;
        let owners = self.owners.entry((epoch, split)).or_default();
        for row in runs.into_iter().flat_map(|(s, e)| s..e) {
            let owner = *owners.entry(row).or_insert(attempt);
            if owner == attempt {
                continue;
            }
            let before = self.workers.get(&owner);
            if self.makeup.contains(&attempt)
                && (self.makeup.contains(&owner) || before.is_some_and(|w| self.gone.contains(w)))
            {
                self.seen.insert("rows served again committed again");
                owners.insert(row, attempt);
                continue;
            }
            twice.get_or_insert(format!(
                "row {row} of split {split} in epoch {epoch} committed by {owner} and {attempt}"
            ));
        }
        if let Some(why) = twice {
            self.break_rule(why);
        }
    }

    /// Rows `start..end` of `attempt` are to be committed: its worker's
    /// devices acknowledged them (or its reader cut them).
    fn check_acked(&mut self, attempt: AttemptId, start: u64, end: u64) {
        let acked = self.acked.get(&attempt).map_or(&[][..], Vec::as_slice);
        if !covers(acked, start, end) {
            self.break_rule(format!(
                "rows {start}..{end} of {attempt} committed, not all acknowledged: {acked:?}"
            ));
        }
    }

    /// What a request asks to commit was acknowledged.
    fn check(&mut self, command: &Command) {
        let from = |books: &Books, attempt| books.leases.get(attempt).map_or(0, |l| l.offset);
        match command {
            Command::Commit {
                attempt,
                offset,
                ranges,
                ..
            } => {
                self.check_acked(*attempt, from(self, attempt), *offset);
                for &(s, e) in ranges {
                    self.check_acked(*attempt, s, e);
                }
            }
            Command::Finish { attempt, rows, .. } => {
                self.check_acked(*attempt, from(self, attempt), *rows);
            }
            _ => {}
        }
    }

    /// What the queue's reply to `command` says was granted, committed or
    /// refused.
    fn note(&mut self, command: &Command, reply: &Reply) {
        if let Err(why) = self.ranks.note(command, reply, &mut self.seen) {
            self.break_rule(why);
        }
        match (command, reply) {
            (Command::Lease { worker, .. }, Reply::Lease(Ok(LeaseReply::Tasks(leases)))) => {
                for lease in leases {
                    self.granted(*worker, lease);
                }
            }
            (
                Command::Commit {
                    attempt,
                    offset,
                    ranges,
                    ..
                },
                Reply::Commit(Ok(())),
            ) => {
                let from = self.leases.get(attempt).map_or(0, |l| l.offset);
                self.record(*attempt, from, *offset);
                for &(s, e) in ranges {
                    self.record(*attempt, s, e);
                }
            }
            (Command::Finish { attempt, rows, .. }, Reply::Finish(Ok(()))) => {
                let from = self.leases.get(attempt).map_or(0, |l| l.offset);
                self.record(*attempt, from, *rows);
            }
            (Command::HandBack { .. }, Reply::HandBack(Ok(()))) => {
                self.seen.insert("handed back");
            }
            (
                Command::Checkpoint {
                    id,
                    worker: Some(worker),
                    ..
                },
                Reply::Checkpoint(result),
            ) => match result {
                Ok(()) => self.recorded.push((*worker, id.clone())),
                Err(_) => {
                    self.gone.insert(*worker);
                    self.seen.insert("checkpoint refused");
                }
            },
            (
                _,
                Reply::Commit(Err(_))
                | Reply::Finish(Err(_))
                | Reply::Fail(Err(_))
                | Reply::HandBack(Err(_)),
            ) => {
                self.lossy = true;
                self.seen.insert("report refused");
            }
            _ => {}
        }
    }

    /// `lease` granted to `worker`: its skipped rows count as acknowledged.
    fn granted(&mut self, worker: WorkerId, lease: &Lease) {
        let mut acked = Vec::new();
        for &(s, e) in &lease.skip {
            add_range(&mut acked, s, e);
        }
        self.acked.insert(lease.attempt, acked);
        self.workers.insert(lease.attempt, worker);
        self.leases.insert(lease.attempt, lease.clone());
        if lease.skip.iter().any(|&(_, end)| end == u64::MAX) {
            self.makeup.insert(lease.attempt);
            self.seen.insert("unsaved rows served again");
        }
    }

    /// The master's time is `now`: workers silent too long are gone.
    fn tick(&mut self, now: u64) {
        if let Reply::Tick { gone, .. } = self.queue.apply(&Command::Tick { now }) {
            if !gone.is_empty() {
                self.seen.insert("counted gone");
            }
            self.gone.extend(gone);
        }
    }
}

/// Whether `ranges` (sorted, disjoint) cover `start..end`.
pub(super) fn covers(ranges: &[(u64, u64)], start: u64, end: u64) -> bool {
    let mut at = start;
    for &(s, e) in ranges {
        if s <= at && e > at {
            at = e;
        }
        if at >= end {
            return true;
        }
    }
    at >= end
}

/// Adds `start..end` to the sorted, disjoint `ranges`.
pub(super) fn add_range(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    if end > start {
        crate::queue::insert_range(ranges, (start, end));
    }
}

/// The master: the real queue and its books, at the simulation's time,
/// unreachable now and then.
#[derive(Debug)]
pub(super) struct SimMaster {
    books: Mutex<Books>,
    pub(super) clock: SimClock,
    /// Unreachable until this time.
    down_until: AtomicU64,
    /// It keeps the rows workers' trainers hold in no checkpoint, as a
    /// remote master does; else checkpoints are the whole job's, as in the
    /// embedded queue.
    keeps_unsaved: bool,
    /// It tells epochs' views (the job has one worker, or a world).
    views: bool,
}

impl SimMaster {
    pub(super) fn new(books: Books, clock: SimClock, keeps_unsaved: bool, views: bool) -> Self {
        SimMaster {
            books: Mutex::new(books),
            clock,
            down_until: AtomicU64::new(0),
            keeps_unsaved,
            views,
        }
    }

    pub(super) fn books(&self) -> MutexGuard<'_, Books> {
        self.books.lock().expect("books")
    }

    /// Whether it answers now.
    pub(super) fn up(&self) -> bool {
        self.clock.millis() >= self.down_until.load(Ordering::SeqCst)
    }

    /// It is unreachable until `at`.
    pub(super) fn down(&self, at: u64) {
        self.down_until.store(at, Ordering::SeqCst);
    }

    /// Resolves once it answers.
    async fn reachable(&self) {
        while !self.up() {
            self.clock
                .until(self.down_until.load(Ordering::SeqCst))
                .await;
        }
    }
}

/// A worker's way to the master: its requests wait while the master is
/// unreachable, then the real queue applies them.
pub(super) struct SimSource {
    pub(super) master: Arc<SimMaster>,
    /// The name the worker registers under.
    pub(super) name: Option<String>,
}

#[async_trait::async_trait]
impl AppliesOps for SimSource {
    async fn apply<O: Operation>(&self, op: O) -> Result<O::Output, SourceError> {
        let master = &self.master;
        if !master.up() {
            master.books().seen.insert("requests waited");
            master.reachable().await;
        }
        let now = master.clock.millis();
        let mut books = master.books();
        books.tick(now);
        let command = op.command(now);
        books.check(&command);
        let reply = books.queue.apply(&command);
        if books.tracing && !matches!(command, Command::Heartbeat { .. }) {
            eprintln!("t{now}: {command:?} -> {reply:?}");
        }
        books.note(&command, &reply);
        let output = O::output(reply).expect("the reply to its command");
        output.map_err(SourceError::refused(O::DOING))
    }

    fn queue_status(&self) -> QueueStatus {
        self.master.books().queue.status()
    }

    fn registers_as(&self) -> Option<String> {
        self.name.clone()
    }

    fn keeps_unsaved_rows(&self) -> bool {
        self.master.keeps_unsaved
    }

    fn view_of(&self, epoch: Epoch) -> Option<EpochView> {
        if !self.master.views {
            return None;
        }
        self.master.books().queue.epoch_view(epoch)
    }
}
