//! A seeded simulation of workers' coordinators against the real queue.
//!
//! Each seed runs a job (splits of random sizes, a few epochs) on the pure
//! [`Queue`] with one to three workers at a time. A worker is its
//! [`Coordinator`] and a small model of the shell around it: readers that
//! deliver rows in chunks (and fail, or leave rows out, now and then), a
//! batcher, devices of very different speeds, a lease clock of its own and a
//! committer whose reports wait while the master is unreachable. On the way
//! workers are killed, stopped (their leases handed back), their leases
//! lapse (suspended while the master is away, lost when it took them back),
//! and trainers that keep checkpoints restart from their last one (the rows
//! they acknowledged after it are read again).
//!
//! On a third of the seeds the master keeps the rows the trainers hold in
//! no complete checkpoint, as a remote master does: the worker reports its
//! checkpoints and unsaved rows to the queue as the committer sends them
//! (checkpoint records first), and a lease lost (or the worker counted
//! gone, silent past the lease timeout with unsaved rows) rolls it back:
//! its run ends, its reports still go out, and it joins again under its
//! name, a new coordinator with the same devices, its trainers from the
//! name's last checkpoint the master recorded. What they trained since is
//! lost, and so is what a killed or stopped worker's trainers held in no
//! checkpoint: the master serves those rows again once it counts the worker
//! gone. A run ends with a final checkpoint on every device, and joins
//! again while the job is not over; a worker may also join under the name
//! of one that left, resuming from its checkpoint.
//!
//! Checked on every path:
//! - nothing is committed that no device of the attempt's worker
//!   acknowledged (or that its reader left out);
//! - no row is committed by two attempts (exactly once per epoch; rows
//!   served again after their worker was lost are committed again, by a
//!   lease of them), and at the end every row of every epoch is committed
//!   (or, where the master keeps unsaved rows, in the job's checkpoint);
//! - every row of every epoch reached a trainer, and on a seed where no
//!   lease was lost and no worker killed, exactly once (rows a restarted
//!   trainer lost count as not reached, until they are served again);
//! - where the master keeps unsaved rows: every row of every epoch is in
//!   exactly one name's last recorded checkpoint (trained and saved once;
//!   rows trained and lost count zero), by the sim's own account of what
//!   each device trained before each checkpoint line.
//!
//! Every path named at the end of the test is taken by some seed.
//! `SLUICE_SIM_SEED=N` runs seed `N` alone (to replay a failure), and
//! `SLUICE_SIM_TRACE` prints what happens.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::epoch::Epoch;
use crate::queue::{Command, CutPiece, LeaseReply, Millis, Queue, QueueConfig, Reply, WorkerId};
use crate::worker::ledger;

const BATCH: u64 = 7;
const TIMEOUT: Millis = 400;
/// How much earlier a lease lapses by the worker's clock than by the
/// master's (the worker counts from when it sent the request).
const MARGIN: Millis = 50;
const STEPS: usize = 3_000;
const SEEDS: u64 = 600;

/// A batch on its way to a trainer.
#[derive(Debug, Clone)]
struct Batch {
    epoch: Epoch,
    pieces: Vec<Piece>,
}

/// A running read: the rows still to deliver, in order.
#[derive(Debug)]
struct SimRead {
    attempt: AttemptId,
    epoch: Epoch,
    rows: VecDeque<(u64, u64)>,
    /// The row the read fails at, if it does.
    fails_at: Option<u64>,
}

/// Rows `start..end` of a split in an epoch: `(epoch, split, start, end)`.
type Rows = (Epoch, u32, u64, u64);

#[derive(Debug, Default)]
struct Device {
    /// Per mille chance of a step.
    speed: usize,
    queue: VecDeque<Batch>,
    busy: Option<Batch>,
    /// Rows its trainer trained in this run, in order.
    trained: Vec<Rows>,
    /// Where in `trained` its last checkpoint line was written: what
    /// follows is lost if it restarts.
    from: usize,
    /// Where in `trained` each checkpoint line of this run was written.
    lines: HashMap<String, usize>,
    /// Its last checkpoint line's number.
    checkpoints: u32,
}

impl Device {
    /// Rows trained since its last checkpoint line.
    fn since(&self) -> &[Rows] {
        &self.trained[self.from..]
    }

    /// Writes the line `checkpoint ID`.
    fn line(&mut self, id: u32) {
        self.checkpoints = id;
        self.lines
            .entry(id.to_string())
            .or_insert(self.trained.len());
        self.from = self.trained.len();
    }

    /// Restarts from its last checkpoint line: the rows trained since.
    fn forget(&mut self) -> Vec<Rows> {
        self.trained.split_off(self.from)
    }
}

/// A worker's name. On seeds whose master keeps unsaved rows, its trainers
/// outlive each run: one started again under it (after a roll back, a kill,
/// a stop or the end of its run) resumes from its last checkpoint the
/// master recorded.
struct Name {
    /// Its devices' speeds.
    speeds: Vec<usize>,
    /// The last complete checkpoint the master recorded for it, and the rows
    /// it holds (the model its trainers resume from).
    saved: Option<(String, Vec<Rows>)>,
}

struct Worker {
    id: WorkerId,
    /// Its name (an index into the names).
    name: usize,
    coord: Coordinator,
    /// The rows of the checkpoint its trainers resumed from.
    base: Vec<Rows>,
    leases: HashMap<AttemptId, Lease>,
    reads: Vec<SimRead>,
    buffer: VecDeque<(Epoch, Piece)>,
    outbox: VecDeque<Batch>,
    devices: Vec<Device>,
    /// The lease clock: lapse times, lost attempts, stopping.
    expires: HashMap<AttemptId, Millis>,
    lost: HashSet<AttemptId>,
    stopped: bool,
    /// Reports not delivered yet.
    reports: VecDeque<Report>,
    /// Rows acknowledged (or cut) per attempt, the sim's own record.
    acked: HashMap<AttemptId, Vec<(u64, u64)>>,
    /// Stopping: the grace ends at this step.
    drain_until: Option<usize>,
    gone: bool,
    /// The epoch and split of each replay.
    replays: HashMap<AttemptId, (Epoch, u32)>,
    /// The rows each complete checkpoint reported and not yet delivered
    /// holds, by the sim's own account, in order.
    contents: VecDeque<Vec<Rows>>,
    /// Rolled back: its reports go out, then it joins again.
    rolling_back: bool,
    /// When its last heartbeat was answered.
    beat: Millis,
    /// Its run ended (the trainers wrote their final checkpoint): its
    /// reports go out, then it leaves or joins again.
    ended: bool,
}

struct Sim {
    seed: u64,
    rng: ChaCha8Rng,
    queue: Queue,
    rows: Vec<u64>,
    epochs: u32,
    now: Millis,
    step: usize,
    down_until: Millis,
    checkpoints: bool,
    workers: Vec<Worker>,
    /// Per (epoch, split): committed rows and the attempt that committed them.
    committed: HashMap<(Epoch, u32), BTreeMap<u64, AttemptId>>,
    /// Per (epoch, split, row): times a trainer holds it.
    trained: HashMap<(Epoch, u32, u64), i64>,
    lossy: bool,
    /// Workers are killed and the master stays away past the leases (on
    /// two seeds in three): else only stops, restarts and short downtimes.
    chaos: bool,
    /// The master keeps the rows the trainers hold in no checkpoint, and a
    /// lost lease rolls them back (on a third of the seeds).
    rollback: bool,
    names: Vec<Name>,
    /// Workers the master counted gone.
    gone: HashSet<WorkerId>,
    /// The worker of every attempt granted.
    owners: HashMap<AttemptId, WorkerId>,
    /// Leases of rows served again (a gone worker's unsaved rows).
    makeup: HashSet<AttemptId>,
    /// `SLUICE_SIM_TRACE` is set.
    tracing: bool,
    seen: HashSet<&'static str>,
}

fn covers(ranges: &[(u64, u64)], start: u64, end: u64) -> bool {
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

fn add_range(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    if end > start {
        crate::queue::insert_range(ranges, (start, end));
    }
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let splits = 2 + (rng.next_u64() % 8) as usize;
        let epochs = 1 + (rng.next_u64() % 3) as u32;
        let rows: Vec<u64> = (0..splits).map(|_| rng.next_u64() % 60).collect();
        let config = QueueConfig {
            epochs,
            max_attempts: 1_000,
            lease_timeout_ms: TIMEOUT,
            seed,
            follow: false,
            affinity_wait_ms: 0,
            interleave: None,
            lanes: None,
            world: None,
        };
        let queue = Queue::with_rows(rows.iter().copied().map(Some).collect(), config)
            .expect("valid config");
        // Odd seeds, one with chaos and one without in every six: the
        // checkpointed even ones stay without a master that keeps unsaved rows.
        let rollback = matches!(seed % 6, 3 | 5);
        Sim {
            seed,
            checkpoints: seed % 2 == 0 || rollback,
            rollback,
            names: Vec::new(),
            gone: HashSet::new(),
            owners: HashMap::new(),
            makeup: HashSet::new(),
            tracing: std::env::var("SLUICE_SIM_TRACE").is_ok(),
            rng,
            queue,
            rows,
            epochs,
            now: 0,
            step: 0,
            down_until: 0,
            workers: Vec::new(),
            committed: HashMap::new(),
            trained: HashMap::new(),
            lossy: false,
            chaos: seed % 3 != 0,
            seen: HashSet::new(),
        }
    }

    fn pick(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, per_mille: usize) -> bool {
        self.pick(1000) < per_mille
    }

    /// A line of the trace (`SLUICE_SIM_TRACE`).
    fn trace(&self, line: std::fmt::Arguments) {
        if self.tracing {
            eprintln!("{} t{}: {line}", self.step, self.now);
        }
    }

    fn at(&self) -> String {
        format!("seed {} step {}", self.seed, self.step)
    }

    fn up(&self) -> bool {
        self.now >= self.down_until
    }

    fn master(&mut self, command: Command) -> Reply {
        if let Reply::Tick { gone, .. } = self.queue.apply(&Command::Tick { now: self.now }) {
            if !gone.is_empty() {
                self.trace(format_args!("counted gone: {gone:?}"));
                self.seen.insert("counted gone");
            }
            self.gone.extend(gone);
        }
        let reply = self.queue.apply(&command);
        if !matches!(command, Command::Heartbeat { .. } | Command::Lease { .. }) {
            self.trace(format_args!("{command:?} -> {reply:?}"));
        }
        if matches!(
            reply,
            Reply::Commit(Err(_))
                | Reply::Finish(Err(_))
                | Reply::Fail(Err(_))
                | Reply::HandBack(Err(_))
        ) {
            // A report of a lease the master took back: its rows may have
            // reached a trainer here and will again elsewhere.
            self.lossy = true;
            self.seen.insert("report refused");
        }
        reply
    }

    /// A worker joins: under a new name, or (on seeds whose master keeps
    /// unsaved rows, now and then) under the name of one that left.
    fn join(&mut self) {
        let free: Vec<usize> = (0..self.names.len())
            .filter(|n| !self.workers.iter().any(|w| w.name == *n))
            .collect();
        let name = if self.rollback && !free.is_empty() && self.chance(500) {
            free[self.pick(free.len())]
        } else {
            let devices = 1 + self.pick(3);
            let speeds = [1000, 400, 60];
            let speeds = (0..devices)
                .map(|d| speeds[(d + self.pick(3)) % speeds.len()])
                .collect();
            self.names.push(Name {
                speeds,
                saved: None,
            });
            self.names.len() - 1
        };
        let worker = self.start(name);
        self.workers.push(worker);
    }

    /// A run of a worker under `name`: registered anew, its trainers from
    /// the name's last checkpoint the master recorded.
    fn start(&mut self, name: usize) -> Worker {
        let Reply::Register(id) = self.master(Command::Register {
            now: self.now,
            secret: None,
            name: Some(format!("n{name}")),
        }) else {
            panic!("{}: register", self.at());
        };
        let saved = self.names[name].saved.clone();
        self.trace(format_args!("w{} joins as n{name}, from {saved:?}", id.0));
        if self.rollback {
            assert_eq!(
                self.queue.checkpoint_of(&format!("n{name}")),
                saved.as_ref().map(|(id, _)| id.as_str()),
                "{}: the master resumes name {name} from another checkpoint",
                self.at()
            );
        }
        let (line, base) = match saved {
            Some((id, rows)) => {
                self.seen.insert("resumed from a checkpoint");
                (id.parse().expect("numbered checkpoints"), rows)
            }
            None => (0, Vec::new()),
        };
        let devices: Vec<Device> = self.names[name]
            .speeds
            .iter()
            .map(|&speed| Device {
                speed,
                checkpoints: line,
                ..Device::default()
            })
            .collect();
        let mut worker = Worker {
            id,
            name,
            coord: Coordinator::new(Settings {
                devices: devices.len(),
                splits: self.rows.len(),
                keeps_unsaved: self.rollback,
                global: false,
                replay_to_device: false,
            }),
            base,
            leases: HashMap::new(),
            reads: Vec::new(),
            buffer: VecDeque::new(),
            outbox: VecDeque::new(),
            devices,
            expires: HashMap::new(),
            lost: HashSet::new(),
            stopped: false,
            reports: VecDeque::new(),
            acked: HashMap::new(),
            drain_until: None,
            gone: false,
            replays: HashMap::new(),
            contents: VecDeque::new(),
            rolling_back: false,
            ended: false,
            beat: self.now,
        };
        if self.checkpoints {
            for device in 0..worker.devices.len() {
                let actions = worker.coord.handle(Event::Mark {
                    device,
                    kind: MarkKind::Declared,
                });
                self.perform(&mut worker, actions);
            }
        }
        worker
    }

    fn run(&mut self) {
        self.join();
        while self.step < STEPS * 4 {
            self.step += 1;
            let ending = self.step > STEPS;
            if self.finished(ending) {
                break;
            }
            self.now += self.pick(12) as Millis;
            if !ending {
                self.mischief();
            }
            let join = self.workers.is_empty() || (self.workers.len() < 3 && self.chance(2));
            // Once the job is over, no worker joins it.
            if join && !(self.rollback && self.queue.is_over()) {
                self.join();
            }
            if self.workers.is_empty() {
                continue;
            }
            let index = self.pick(self.workers.len());
            let mut worker = self.workers.swap_remove(index);
            self.work(&mut worker);
            if !worker.gone {
                self.workers.push(worker);
            }
        }
        self.check_end();
        if !self.rollback && !self.lossy && self.trained.values().any(|n| *n > 0) {
            self.seen.insert("a seed without loss");
            if self.seen.contains("replayed after a restart") {
                self.seen.insert("replayed on a seed without loss");
            }
        }
    }

    /// Whether the seed's run is over: the job is, every report reached
    /// the master and (where it keeps unsaved rows) every worker left.
    fn finished(&self, ending: bool) -> bool {
        if self.rollback {
            return self.queue.is_over() && self.workers.is_empty();
        }
        ending && self.queue.is_over() && self.workers.iter().all(|w| w.reports.is_empty())
    }

    /// Kills, stops, restarts, master downtime.
    fn mischief(&mut self) {
        if self.up() && self.chance(3) {
            let longest = if self.chaos { 2 * TIMEOUT } else { TIMEOUT / 4 };
            self.down_until = self.now + 20 + self.pick(longest as usize) as Millis;
            self.seen.insert("master unreachable");
        }
        if self.chaos && !self.workers.is_empty() && self.chance(2) {
            let index = self.pick(self.workers.len());
            self.workers.swap_remove(index);
            self.lossy = true;
            self.seen.insert("worker killed");
        }
        if !self.workers.is_empty() && self.chance(3) {
            let index = self.pick(self.workers.len());
            let mut worker = self.workers.swap_remove(index);
            if worker.drain_until.is_none() && worker.running() {
                if worker.replaying() {
                    // Rows read again for a restarted trainer are dropped too.
                    self.lossy = true;
                }
                let actions = worker.coord.handle(Event::Stop);
                worker.drain_until = Some(self.step + self.pick(300));
                self.perform(&mut worker, actions);
                self.seen.insert("stopped");
            }
            self.workers.push(worker);
        }
        if self.checkpoints && !self.workers.is_empty() && self.chance(8) {
            let index = self.pick(self.workers.len());
            let mut worker = self.workers.swap_remove(index);
            let device = self.pick(worker.devices.len());
            // A stopping worker reads nothing again: its trainers' restarts
            // are the next run's.
            if worker.devices[device].busy.is_none()
                && worker.drain_until.is_none()
                && worker.running()
            {
                self.restart(&mut worker, device);
            }
            self.workers.push(worker);
        }
    }

    /// The trainer of `device` restarts from its last checkpoint line: what
    /// it trained since is gone from its model.
    fn restart(&mut self, worker: &mut Worker, device: usize) {
        if self.tracing {
            eprintln!(
                "{} w{}: restart {device}: {:?}",
                self.step,
                worker.id.0,
                worker.devices[device].since()
            );
        }
        for (epoch, split, start, end) in worker.devices[device].forget() {
            for row in start..end {
                *self.trained.entry((epoch, split, row)).or_default() -= 1;
            }
        }
        let actions = worker.coord.handle(Event::Mark {
            device,
            kind: MarkKind::Restarted,
        });
        if actions.iter().any(|a| matches!(a, Action::Replay { .. })) {
            self.seen.insert("replayed after a restart");
        }
        self.perform(worker, actions);
    }

    fn work(&mut self, worker: &mut Worker) {
        self.deliver(worker);
        if worker.gone {
            return;
        }
        if worker.rolling_back || worker.ended {
            return self.rejoin_or_leave(worker);
        }
        if let Some(until) = worker.drain_until {
            if self.chance(100) || self.beat_due(worker) {
                self.heartbeat(worker);
            }
            if worker.rolling_back {
                return;
            }
            self.train(worker);
            let idle = worker.devices.iter().all(|d| d.busy.is_none());
            if idle || self.step >= until {
                let actions = worker.coord.handle(Event::DrainOver);
                self.perform(worker, actions);
                worker.drain_until = Some(usize::MAX);
                if worker.reports.is_empty() {
                    worker.gone = true;
                }
            }
            return;
        }
        let mut lapsed: Vec<AttemptId> = worker
            .expires
            .iter()
            .filter(|(_, at)| **at <= self.now)
            .map(|(a, _)| *a)
            .collect();
        lapsed.sort_unstable();
        if !lapsed.is_empty() {
            self.seen.insert("lease lapsed");
        }
        let actions = worker.coord.handle(Event::Lapsed { attempts: lapsed });
        self.perform(worker, actions);
        if self.beat_due(worker) {
            self.heartbeat(worker);
        }
        if worker.rolling_back {
            return;
        }
        match self.pick(10) {
            0 => self.heartbeat(worker),
            1 | 2 => self.lease(worker),
            3..=5 => self.read(worker),
            _ => {}
        }
        if worker.rolling_back {
            return;
        }
        self.batch(worker);
        self.train(worker);
        if self.rollback {
            self.end_if_done(worker);
        }
    }

    /// Where the master keeps unsaved rows, a worker silent for a lease
    /// timeout is counted gone, so its heartbeats keep time (half a lease
    /// timeout apart) besides the random ones: only the master's downtime
    /// silences it.
    fn beat_due(&self, worker: &Worker) -> bool {
        self.rollback && self.now >= worker.beat + TIMEOUT / 2
    }

    /// A worker rolled back, or whose run ended, once its reports reached
    /// the master: joins again (trainers from the name's last checkpoint the
    /// master recorded), or leaves (stopped, or the job is over).
    fn rejoin_or_leave(&mut self, worker: &mut Worker) {
        if !worker.reports.is_empty() || !self.up() {
            return;
        }
        if worker.drain_until.is_some() || (worker.ended && self.queue.is_over()) {
            worker.gone = true;
            return;
        }
        if worker.ended {
            self.seen.insert("joined again after its run ended");
        }
        *worker = self.start(worker.name);
    }

    /// The job is over for this worker and it holds nothing: the loop ends,
    /// and the trainers end their streams with a final checkpoint (one ID
    /// on every device).
    fn end_if_done(&mut self, worker: &mut Worker) {
        if !worker.coord.is_done() || !worker.idle() {
            return;
        }
        let actions = worker.coord.handle(Event::Tail);
        self.perform(worker, actions);
        let id = worker
            .devices
            .iter()
            .map(|d| d.checkpoints)
            .max()
            .unwrap_or(0)
            + 1;
        for device in 0..worker.devices.len() {
            worker.devices[device].line(id);
            let actions = worker.coord.handle(Event::Mark {
                device,
                kind: MarkKind::Checkpoint(id.to_string()),
            });
            self.perform(worker, actions);
        }
        let settings = worker.coord.settings;
        let outcome = std::mem::replace(&mut worker.coord, Coordinator::new(settings));
        let outcome = outcome.into_outcome(true);
        assert!(
            outcome.checkpointed,
            "{}: trainers not checkpointed",
            self.at()
        );
        assert_eq!(
            outcome.unsaved_at_end,
            0,
            "{}: rows trained after the final checkpoint",
            self.at()
        );
        worker.ended = true;
        self.seen.insert("ended with a final checkpoint");
    }

    /// The trainers may hold rows of a lease the master took back, or the
    /// master counted the worker gone: the run stops, its trainers are
    /// killed (nothing they still say counts) and what it read is dropped;
    /// its reports still go out, then it joins again.
    fn roll_back(&mut self, worker: &mut Worker) {
        self.trace(format_args!("w{} rolled back", worker.id.0));
        worker.rolling_back = true;
        worker.reads.clear();
        worker.buffer.clear();
        worker.outbox.clear();
        worker.expires.clear();
        for device in &mut worker.devices {
            device.queue.clear();
            device.busy = None;
        }
        self.seen.insert("rolled back");
    }

    /// The master refused a lease or heartbeat: it counted the worker gone.
    fn refused(&mut self, worker: &mut Worker) {
        if self.rollback && worker.coord.rolls_back() {
            self.seen.insert("rolled back when counted gone");
            self.roll_back(worker);
        } else {
            worker.gone = true;
            self.lossy = true;
        }
    }

    fn lease(&mut self, worker: &mut Worker) {
        if !self.up() || worker.coord.is_over() || worker.coord.leased_reads() >= 2 {
            return;
        }
        let reply = self.master(Command::Lease {
            now: self.now,
            worker: worker.id,
            max: 1,
        });
        match reply {
            Reply::Lease(Ok(LeaseReply::Tasks(leases))) => {
                for lease in leases {
                    worker
                        .expires
                        .insert(lease.attempt, self.now + TIMEOUT - MARGIN);
                    worker.leases.insert(lease.attempt, lease.clone());
                    let mut ranges = Vec::new();
                    for &(s, e) in &lease.skip {
                        add_range(&mut ranges, s, e);
                    }
                    worker.acked.insert(lease.attempt, ranges);
                    self.owners.insert(lease.attempt, worker.id);
                    if lease.skip.iter().any(|&(_, end)| end == u64::MAX) {
                        self.makeup.insert(lease.attempt);
                        self.seen.insert("unsaved rows served again");
                    }
                    let actions = worker.coord.handle(Event::Granted {
                        lease,
                        reachable: true,
                    });
                    self.perform(worker, actions);
                }
            }
            Reply::Lease(Ok(LeaseReply::JobOver)) => {
                let actions = worker.coord.handle(Event::NothingToLease { over: true });
                self.perform(worker, actions);
            }
            Reply::Lease(Ok(LeaseReply::Wait)) => {}
            Reply::Lease(Err(_)) => self.refused(worker),
            other => panic!("{}: lease answered {other:?}", self.at()),
        }
    }

    fn heartbeat(&mut self, worker: &mut Worker) {
        if !self.up() {
            return;
        }
        let reply = self.master(Command::Heartbeat {
            now: self.now,
            worker: worker.id,
            cached: None,
        });
        let lost = match reply {
            Reply::Heartbeat(Ok(lost)) => {
                worker.beat = self.now;
                lost
            }
            Reply::Heartbeat(Err(_)) => return self.refused(worker),
            other => panic!("{}: heartbeat answered {other:?}", self.at()),
        };
        for attempt in &lost {
            worker.expires.remove(attempt);
            worker.lost.insert(*attempt);
        }
        for at in worker.expires.values_mut() {
            *at = (*at).max(self.now + TIMEOUT - MARGIN);
        }
        for attempt in lost {
            if worker.rolling_back {
                break;
            }
            self.lossy = true;
            self.seen.insert("lease lost");
            let actions = worker.coord.handle(Event::Lost { attempt });
            self.perform(worker, actions);
        }
    }

    /// A read delivers a chunk of rows, leaves some out, fails or ends.
    fn read(&mut self, worker: &mut Worker) {
        if worker.reads.is_empty() {
            return;
        }
        let index = self.pick(worker.reads.len());
        let chunk = 1 + self.pick(9) as u64;
        let cut = self.chance(100);
        let read = &mut worker.reads[index];
        let attempt = read.attempt;
        let epoch = read.epoch;
        let Some(&(start, end)) = read.rows.front() else {
            let end = self.rows_of(worker, attempt);
            worker.reads.swap_remove(index);
            let actions = worker.coord.handle(Event::ReadDone { attempt, end });
            return self.perform(worker, actions);
        };
        let stop = (start + chunk).min(end);
        if read.fails_at.is_some_and(|at| at < stop) {
            worker.reads.swap_remove(index);
            self.seen.insert("read failed");
            let actions = worker.coord.handle(Event::ReadFailed {
                attempt,
                at: start,
                reason: "simulated".to_string(),
                for_good: false,
                window: false,
            });
            return self.perform(worker, actions);
        }
        if stop == end {
            read.rows.pop_front();
        } else if let Some(front) = read.rows.front_mut() {
            front.0 = stop;
        }
        let replay =
            worker.coord.replay_device(attempt).is_some() || !worker.leases.contains_key(&attempt);
        if cut && !replay {
            self.seen.insert("rows cut");
            if let Some(acked) = worker.acked.get_mut(&attempt) {
                add_range(acked, start, stop);
            }
            if let Some(lease) = worker.leases.get(&attempt) {
                // Consumed as if trained, in device 0's next checkpoint.
                for row in start..stop {
                    *self.trained.entry((epoch, lease.split, row)).or_default() += 1;
                }
                worker.devices[0]
                    .trained
                    .push((epoch, lease.split, start, stop));
            }
            let actions = worker.coord.handle(Event::Cut {
                attempt,
                runs: vec![(start, stop)],
                window: false,
            });
            return self.perform(worker, actions);
        }
        let actions = worker.coord.handle(Event::Rows { attempt });
        if actions.contains(&Action::Feed(attempt)) {
            worker.buffer.push_back((
                epoch,
                Piece {
                    attempt,
                    start,
                    len: stop - start,
                },
            ));
        }
        self.perform(worker, actions);
    }

    fn rows_of(&self, worker: &Worker, attempt: AttemptId) -> u64 {
        worker
            .leases
            .get(&attempt)
            .map_or(0, |l| self.rows[l.split as usize])
    }

    /// Cuts exact batches out of the buffer; a short one once nothing is read.
    fn batch(&mut self, worker: &mut Worker) {
        loop {
            let buffered: u64 = worker.buffer.iter().map(|(_, p)| p.len).sum();
            let flush = worker.coord.reads_none() && buffered > 0;
            if buffered < BATCH && !flush {
                return;
            }
            let mut batch = Batch {
                epoch: worker.buffer.front().map_or(Epoch(0), |(e, _)| *e),
                pieces: Vec::new(),
            };
            let mut want = BATCH;
            while want > 0 {
                let Some((epoch, mut piece)) = worker.buffer.pop_front() else {
                    break;
                };
                batch.epoch = epoch;
                if piece.len > want {
                    let rest = Piece {
                        attempt: piece.attempt,
                        start: piece.start + want,
                        len: piece.len - want,
                    };
                    worker.buffer.push_front((epoch, rest));
                    piece.len = want;
                }
                want -= piece.len;
                crate::worker::push_piece(&mut batch.pieces, piece);
            }
            worker.outbox.push_back(batch);
        }
    }

    /// Batches to the devices' queues; devices step at their own speed.
    fn train(&mut self, worker: &mut Worker) {
        while let Some(device) = worker.devices.iter().position(|d| d.queue.len() < 2) {
            let Some(batch) = worker.outbox.pop_front() else {
                break;
            };
            worker.devices[device].queue.push_back(batch);
        }
        for device in 0..worker.devices.len() {
            if !self.chance(worker.devices[device].speed) {
                continue;
            }
            if let Some(batch) = worker.devices[device].busy.take() {
                self.applied(worker, device, batch);
            } else {
                self.feed(worker, device);
            }
            if self.checkpoints && self.chance(30) {
                let dev = &mut worker.devices[device];
                dev.line(dev.checkpoints + 1);
                let id = dev.checkpoints.to_string();
                let actions = worker.coord.handle(Event::Mark {
                    device,
                    kind: MarkKind::Checkpoint(id),
                });
                self.perform(worker, actions);
            }
        }
    }

    /// The next batch to the trainer: rows of dead leases dropped, rows of
    /// leases in doubt held back.
    fn feed(&mut self, worker: &mut Worker, device: usize) {
        let now = self.now;
        let Some(batch) = worker.devices[device].queue.front() else {
            return;
        };
        let in_doubt = |a: &AttemptId| {
            !worker.stopped
                && !worker.lost.contains(a)
                && worker.expires.get(a).is_some_and(|at| *at <= now)
        };
        if batch.pieces.iter().any(|p| in_doubt(&p.attempt)) {
            self.seen.insert("rows held back");
            return;
        }
        let Some(mut batch) = worker.devices[device].queue.pop_front() else {
            return;
        };
        if worker.stopped {
            return;
        }
        batch.pieces.retain(|p| !worker.lost.contains(&p.attempt));
        if !batch.pieces.is_empty() {
            worker.devices[device].busy = Some(batch);
        }
    }

    fn applied(&mut self, worker: &mut Worker, device: usize, batch: Batch) {
        if self.tracing {
            eprintln!(
                "{} w{}: applied on {device}: {batch:?}",
                self.step, worker.id.0
            );
        }
        let rows: u64 = batch.pieces.iter().map(|p| p.len).sum();
        for piece in &batch.pieces {
            // Each piece's own epoch: a batch may hold rows of two.
            let Some((epoch, split)) = worker.origin(piece.attempt) else {
                panic!("{}: rows of an unknown attempt", self.at());
            };
            for row in piece.start..piece.start + piece.len {
                *self.trained.entry((epoch, split, row)).or_default() += 1;
            }
            worker.devices[device].trained.push((
                epoch,
                split,
                piece.start,
                piece.start + piece.len,
            ));
            if let Some(acked) = worker.acked.get_mut(&piece.attempt) {
                add_range(acked, piece.start, piece.start + piece.len);
            }
        }
        let actions = worker.coord.handle(Event::Applied {
            device,
            epoch: batch.epoch,
            rows,
            provenance: batch.pieces,
        });
        self.perform(worker, actions);
    }

    fn perform(&mut self, worker: &mut Worker, actions: Vec<Action>) {
        for action in actions {
            if self.tracing {
                eprintln!("{} w{}: {action:?}", self.step, worker.id.0);
            }
            match action {
                Action::Read(lease) => {
                    let fails_at = if self.chance(80) {
                        Some(lease.offset + self.pick(30) as u64)
                    } else {
                        None
                    };
                    let end = self.rows[lease.split as usize];
                    worker.reads.push(sim_read(&lease, end, fails_at));
                }
                Action::Replay { lease, .. } => {
                    let end = self.rows[lease.split as usize];
                    worker
                        .replays
                        .insert(lease.attempt, (lease.epoch, lease.split));
                    worker.reads.push(sim_read(&lease, end, None));
                }
                Action::Feed(_) | Action::Suspend(_) | Action::SyncHeld => {}
                Action::Report(report) => {
                    self.check_report(worker, &report);
                    if let (Report::Checkpoint { id, .. }, true) = (&report, self.rollback) {
                        let content = worker.content(id, &self.at());
                        worker.contents.push_back(content);
                    }
                    worker.reports.push_back(report);
                }
                Action::Drop(attempt) => {
                    worker.reads.retain(|r| r.attempt != attempt);
                    worker.buffer.retain(|(_, p)| p.attempt != attempt);
                    for batch in &mut worker.outbox {
                        batch.pieces.retain(|p| p.attempt != attempt);
                    }
                    worker.outbox.retain(|b| !b.pieces.is_empty());
                }
                Action::Forget(attempt) => {
                    worker.expires.remove(&attempt);
                }
                Action::Drain => {
                    worker.reads.clear();
                    worker.buffer.clear();
                    worker.outbox.clear();
                    worker.stopped = true;
                }
                Action::RollBack(_) if self.rollback => {
                    // The shell ends the run: nothing after it is done.
                    self.seen.insert("rolled back on a lost lease");
                    return self.roll_back(worker);
                }
                Action::RollBack(_) | Action::ReplayFailed => {
                    panic!(
                        "{}: {action:?} without a master that keeps unsaved rows",
                        self.at()
                    )
                }
            }
        }
    }

    /// What the coordinator commits was acknowledged by a device here (or
    /// left out by its reader, or skipped by the lease).
    fn check_report(&self, worker: &Worker, report: &Report) {
        let (attempt, end) = match report {
            Report::Ledger(ledger::Action::Commit {
                attempt,
                offset,
                ranges,
            }) => {
                let acked = &worker.acked[attempt];
                for &(s, e) in ranges {
                    assert!(
                        covers(acked, s, e),
                        "{}: commit of rows not acknowledged",
                        self.at()
                    );
                }
                (*attempt, *offset)
            }
            Report::Ledger(ledger::Action::Finish { attempt, rows }) => (*attempt, *rows),
            Report::Ledger(ledger::Action::Fail {
                attempt, offset, ..
            }) => (*attempt, *offset),
            _ => return,
        };
        let lease = &worker.leases[&attempt];
        assert!(
            covers(&worker.acked[&attempt], lease.offset, end),
            "{}: {report:?} commits rows {}..{end} of {attempt} not all acknowledged",
            self.at(),
            lease.offset
        );
    }

    /// The committer: reports reach the master while it is up. Where the
    /// master keeps unsaved rows, they go as the committer sends them: what
    /// is pending at once (some of the reports), checkpoint records first
    /// (of the snapshots of unsaved rows only the newest), then the rest.
    fn deliver(&mut self, worker: &mut Worker) {
        while self.up() && !worker.reports.is_empty() {
            let pending = if self.rollback {
                1 + self.pick(worker.reports.len())
            } else {
                1
            };
            let reports: Vec<Report> = worker.reports.drain(..pending).collect();
            let newest = reports
                .iter()
                .rposition(|r| matches!(r, Report::Unsaved(_)));
            let (records, rest): (Vec<_>, Vec<_>) =
                reports.into_iter().enumerate().partition(|(_, r)| {
                    matches!(
                        r,
                        Report::Declare
                            | Report::Checkpoint { .. }
                            | Report::Unsaved(_)
                            | Report::UnsavedAtEnd(_)
                    )
                });
            for (at, report) in records.into_iter().chain(rest) {
                if !matches!(report, Report::Unsaved(_)) || Some(at) == newest {
                    self.send(worker, report);
                }
            }
        }
        if !self.up() {
            self.seen.insert("reports waited");
        }
        if worker.drain_until == Some(usize::MAX) && worker.reports.is_empty() {
            worker.gone = true;
        }
    }

    /// A commit, finish or failure to the master; accepted rows recorded.
    fn send_ledger(&mut self, worker: &Worker, action: ledger::Action) {
        let (worker_id, now) = (Some(worker.id), self.now);
        let accepted = |reply: &Reply| {
            matches!(
                reply,
                Reply::Commit(Ok(())) | Reply::Finish(Ok(())) | Reply::Fail(Ok(_))
            )
        };
        match action {
            ledger::Action::Commit {
                attempt,
                offset,
                ranges,
            } => {
                let reply = self.master(Command::Commit {
                    now,
                    worker: worker_id,
                    attempt,
                    offset,
                    ranges: ranges.clone(),
                });
                if accepted(&reply) {
                    let lease = &worker.leases[&attempt];
                    let mut rows = vec![(lease.offset, offset)];
                    rows.extend(ranges);
                    self.record(lease.clone(), &rows);
                }
            }
            ledger::Action::Finish { attempt, rows } => {
                let reply = self.master(Command::Finish {
                    now,
                    worker: worker_id,
                    attempt,
                    rows,
                });
                if accepted(&reply) {
                    let lease = worker.leases[&attempt].clone();
                    self.record(lease.clone(), &[(lease.offset, rows)]);
                }
            }
            ledger::Action::Fail {
                attempt,
                offset,
                reason,
                for_good,
            } => {
                let reply = self.master(Command::Commit {
                    now,
                    worker: worker_id,
                    attempt,
                    offset,
                    ranges: Vec::new(),
                });
                if accepted(&reply) {
                    let lease = worker.leases[&attempt].clone();
                    self.record(lease.clone(), &[(lease.offset, offset)]);
                }
                self.master(Command::Fail {
                    now,
                    worker: worker_id,
                    attempt,
                    reason,
                    for_good,
                });
            }
        }
    }

    fn send(&mut self, worker: &mut Worker, report: Report) {
        let now = self.now;
        match report {
            Report::Ledger(action) => self.send_ledger(worker, action),
            Report::HandBack { attempt } => {
                self.seen.insert("handed back");
                self.master(Command::HandBack {
                    now,
                    worker: worker.id,
                    attempt,
                });
            }
            Report::GiveUp { attempt, reason } => {
                self.master(Command::Fail {
                    now,
                    worker: Some(worker.id),
                    attempt,
                    reason,
                    for_good: false,
                });
            }
            Report::Declare if self.rollback => {
                self.master(Command::DeclareCheckpoints { now });
            }
            Report::Checkpoint { id, pieces } if self.rollback => {
                self.send_checkpoint(worker, id, pieces)
            }
            Report::Unsaved(pieces) if self.rollback => {
                let reply = self.master(Command::Unsaved {
                    now,
                    worker: worker.id,
                    pieces,
                });
                if reply != Reply::Unsaved(Ok(())) {
                    self.seen.insert("unsaved rows refused");
                }
            }
            Report::Declare
            | Report::Checkpoint { .. }
            | Report::Unsaved(_)
            | Report::UnsavedAtEnd(_) => {}
        }
    }

    /// A complete checkpoint to the master: once recorded, the name's
    /// trainers resume from it (the rows the sim saw its devices train
    /// before their lines); refused, the master counted the worker gone.
    fn send_checkpoint(&mut self, worker: &mut Worker, id: String, pieces: Vec<CutPiece>) {
        let Some(content) = worker.contents.pop_front() else {
            panic!("{}: checkpoint {id} reported twice", self.at());
        };
        let reply = self.master(Command::Checkpoint {
            now: self.now,
            id: id.clone(),
            pieces,
            worker: Some(worker.id),
        });
        match reply {
            Reply::Checkpoint(Ok(())) => self.names[worker.name].saved = Some((id, content)),
            Reply::Checkpoint(Err(_)) => {
                self.gone.insert(worker.id);
                self.seen.insert("checkpoint refused");
            }
            other => panic!("{}: checkpoint answered {other:?}", self.at()),
        }
    }

    /// Rows `ranges` of `lease` committed: by no other attempt before.
    fn record(&mut self, lease: Lease, ranges: &[(u64, u64)]) {
        let at = self.at();
        let books = self
            .committed
            .entry((lease.epoch, lease.split))
            .or_default();
        for &(start, end) in ranges {
            for row in start..end {
                if lease.skip.iter().any(|&(s, e)| s <= row && row < e) {
                    continue;
                }
                let owner = books.entry(row).or_insert(lease.attempt);
                // Rows a gone worker's trainers held in no checkpoint are
                // served again (and again, when such a lease lapses).
                let before = self.owners.get(owner);
                if *owner != lease.attempt
                    && self.makeup.contains(&lease.attempt)
                    && (self.makeup.contains(owner)
                        || before.is_some_and(|w| self.gone.contains(w)))
                {
                    self.seen.insert("rows served again committed again");
                    *owner = lease.attempt;
                    continue;
                }
                assert_eq!(
                    *owner, lease.attempt,
                    "{at}: row {row} of split {} epoch {} committed by {} and {}",
                    lease.split, lease.epoch, owner, lease.attempt
                );
            }
        }
    }

    fn check_end(&self) {
        assert!(self.queue.is_over(), "{}: the job did not end", self.at());
        if self.rollback {
            return self.check_saved();
        }
        for epoch in Epoch::all(self.epochs) {
            for (split, &rows) in self.rows.iter().enumerate() {
                let split = split as u32;
                let books = self.committed.get(&(epoch, split));
                for row in 0..rows {
                    assert!(
                        books.is_some_and(|b| b.contains_key(&row)),
                        "{}: row {row} of split {split} epoch {epoch} never committed",
                        self.at()
                    );
                    let trained = self.trained.get(&(epoch, split, row)).copied().unwrap_or(0);
                    assert!(
                        trained >= 1 || self.lossy,
                        "{}: row {row} of split {split} epoch {epoch} trained {trained} times",
                        self.at()
                    );
                    assert!(
                        trained <= 1 || self.lossy,
                        "{}: row {row} of split {split} epoch {epoch} trained {trained} times",
                        self.at()
                    );
                }
            }
        }
    }
}

impl Sim {
    /// Where the master keeps unsaved rows: every row of every epoch is in
    /// exactly one name's last recorded checkpoint (the model its trainers
    /// end with: what they trained after it is lost), and committed or in
    /// the job's cut (a checkpoint's rows whose commit was refused).
    fn check_saved(&self) {
        let mut saved: HashMap<(Epoch, u32, u64), u32> = HashMap::new();
        for name in &self.names {
            for &(epoch, split, start, end) in name.saved.iter().flat_map(|(_, rows)| rows) {
                for row in start..end {
                    *saved.entry((epoch, split, row)).or_default() += 1;
                }
            }
        }
        for (n, name) in self.names.iter().enumerate() {
            self.trace(format_args!("n{n} saved {:?}", name.saved));
        }
        let cut = self.queue.cut();
        for epoch in Epoch::all(self.epochs) {
            for (split, &rows) in self.rows.iter().enumerate() {
                let split = split as u32;
                let books = self.committed.get(&(epoch, split));
                let covered = cut.covered(epoch, split);
                for row in 0..rows {
                    let in_cut = epoch.0 < cut.full_epochs
                        || covered.iter().any(|&(s, e)| s <= row && row < e);
                    assert!(
                        in_cut || books.is_some_and(|b| b.contains_key(&row)),
                        "{}: row {row} of split {split} epoch {epoch} never committed",
                        self.at()
                    );
                    let n = saved.remove(&(epoch, split, row)).unwrap_or(0);
                    assert_eq!(
                        n,
                        1,
                        "{}: row {row} of split {split} epoch {epoch} is in {n} checkpoints",
                        self.at()
                    );
                }
            }
        }
        assert!(saved.is_empty(), "{}: rows of no split saved", self.at());
    }
}

impl Worker {
    /// The rows of complete checkpoint `id` (every device wrote its line):
    /// those its trainers resumed from and, of each device, those it
    /// trained before its line.
    fn content(&self, id: &str, at: &str) -> Vec<Rows> {
        let mut rows = self.base.clone();
        for device in &self.devices {
            let Some(&line) = device.lines.get(id) else {
                panic!("{at}: checkpoint {id} is complete but a device never wrote it");
            };
            rows.extend_from_slice(&device.trained[..line]);
        }
        rows
    }

    /// Whether it runs (not rolled back, its run not ended).
    fn running(&self) -> bool {
        !self.rolling_back && !self.ended
    }

    /// Whether no row waits anywhere on its way to a trainer.
    fn idle(&self) -> bool {
        self.reads.is_empty()
            && self.buffer.is_empty()
            && self.outbox.is_empty()
            && self
                .devices
                .iter()
                .all(|d| d.queue.is_empty() && d.busy.is_none())
    }

    /// Whether rows read again for a restarted trainer wait anywhere
    /// before a trainer.
    fn replaying(&self) -> bool {
        let replay = |p: &Piece| self.replays.contains_key(&p.attempt);
        self.reads
            .iter()
            .any(|r| self.replays.contains_key(&r.attempt))
            || self.buffer.iter().any(|(_, p)| replay(p))
            || self.outbox.iter().flat_map(|b| &b.pieces).any(replay)
            || self
                .devices
                .iter()
                .flat_map(|d| &d.queue)
                .flat_map(|b| &b.pieces)
                .any(replay)
    }

    /// The epoch and split of a lease or replay read here.
    fn origin(&self, attempt: AttemptId) -> Option<(Epoch, u32)> {
        match self.leases.get(&attempt) {
            Some(lease) => Some((lease.epoch, lease.split)),
            None => self.replays.get(&attempt).copied(),
        }
    }
}

/// The rows a read of `lease` delivers: from its offset to the end of the
/// split, past the rows its lease skips.
fn sim_read(lease: &Lease, end: u64, fails_at: Option<u64>) -> SimRead {
    let mut rows = VecDeque::new();
    let mut at = lease.offset;
    let mut skip = lease.skip.clone();
    skip.sort();
    for (s, e) in skip {
        if s > at {
            rows.push_back((at, s.min(end)));
        }
        at = at.max(e);
    }
    if at < end {
        rows.push_back((at, end));
    }
    rows.retain(|(s, e)| e > s);
    SimRead {
        attempt: lease.attempt,
        epoch: lease.epoch,
        rows,
        fails_at,
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("SLUICE_SIM_SEED") {
        Ok(seed) => vec![seed.trim().parse().expect("SLUICE_SIM_SEED is a number")],
        Err(_) => (1..=SEEDS).collect(),
    }
}

#[test]
fn every_row_is_committed_once_whatever_befalls_the_workers() {
    let mut seen: HashSet<&'static str> = HashSet::new();
    for seed in seeds() {
        let mut sim = Sim::new(seed);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run()));
        if let Err(e) = result {
            eprintln!("replay: SLUICE_SIM_SEED={seed} cargo test --lib worker::coordinator::sim");
            std::panic::resume_unwind(e);
        }
        seen.extend(sim.seen.iter().copied());
    }
    if std::env::var("SLUICE_SIM_SEED").is_err() {
        for path in [
            "master unreachable",
            "worker killed",
            "stopped",
            "handed back",
            "replayed after a restart",
            "lease lapsed",
            "lease lost",
            "rows held back",
            "read failed",
            "rows cut",
            "reports waited",
            "a seed without loss",
            "replayed on a seed without loss",
            // Where the master keeps the rows trainers hold in no checkpoint:
            "rolled back",
            "rolled back on a lost lease",
            "rolled back when counted gone",
            "counted gone",
            "checkpoint refused",
            "unsaved rows served again",
            "rows served again committed again",
            "resumed from a checkpoint",
            "ended with a final checkpoint",
            "joined again after its run ended",
        ] {
            assert!(seen.contains(path), "no seed took the path: {path}");
        }
    }
}
