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
//! Checked on every path:
//! - nothing is committed that no device of the attempt's worker
//!   acknowledged (or that its reader left out);
//! - no row is committed by two attempts (exactly once per epoch), and at
//!   the end every row of every epoch is committed;
//! - every row of every epoch reached a trainer, and on a seed where no
//!   lease was lost and no worker killed, exactly once (rows a restarted
//!   trainer lost count as not reached, until they are served again).
//!
//! `SLUICE_SIM_SEED=N` runs seed `N` alone (to replay a failure).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::queue::{Command, LeaseReply, Millis, Queue, QueueConfig, Reply, WorkerId};
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
    epoch: u32,
    pieces: Vec<Piece>,
}

/// A running read: the rows still to deliver, in order.
#[derive(Debug)]
struct SimRead {
    attempt: AttemptId,
    epoch: u32,
    rows: VecDeque<(u64, u64)>,
    /// The row the read fails at, if it does.
    fails_at: Option<u64>,
}

#[derive(Debug, Default)]
struct Device {
    /// Per mille chance of a step.
    speed: usize,
    queue: VecDeque<Batch>,
    busy: Option<Batch>,
    /// Rows trained since its last checkpoint line: lost if it restarts.
    since: Vec<(u32, u32, u64, u64)>,
    checkpoints: u32,
}

struct Worker {
    id: WorkerId,
    coord: Coordinator,
    leases: HashMap<AttemptId, Lease>,
    reads: Vec<SimRead>,
    buffer: VecDeque<(u32, Piece)>,
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
    replays: HashMap<AttemptId, (u32, u32)>,
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
    committed: HashMap<(u32, u32), BTreeMap<u64, AttemptId>>,
    /// Per (epoch, split, row): times a trainer holds it.
    trained: HashMap<(u32, u32, u64), i64>,
    lossy: bool,
    /// Workers are killed and the master stays away past the leases (on
    /// two seeds in three): else only stops, restarts and short downtimes.
    chaos: bool,
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
        };
        let queue = Queue::with_rows(rows.iter().copied().map(Some).collect(), config)
            .expect("valid config");
        Sim {
            seed,
            checkpoints: seed % 2 == 0,
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

    fn at(&self) -> String {
        format!("seed {} step {}", self.seed, self.step)
    }

    fn up(&self) -> bool {
        self.now >= self.down_until
    }

    fn master(&mut self, command: Command) -> Reply {
        self.queue.apply(&Command::Tick { now: self.now });
        let reply = self.queue.apply(&command);
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

    fn join(&mut self) {
        let Reply::Register(id) = self.master(Command::Register {
            now: self.now,
            secret: None,
            name: None,
        }) else {
            panic!("{}: register", self.at());
        };
        let devices = 1 + self.pick(3);
        let speeds = [1000, 400, 60];
        let devices: Vec<Device> = (0..devices)
            .map(|d| Device {
                speed: speeds[(d + self.pick(3)) % speeds.len()],
                ..Device::default()
            })
            .collect();
        let mut worker = Worker {
            id,
            coord: Coordinator::new(Settings {
                devices: devices.len(),
                splits: self.rows.len(),
                keeps_unsaved: false,
                global: false,
                replay_to_device: false,
            }),
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
        self.workers.push(worker);
    }

    fn run(&mut self) {
        self.join();
        while self.step < STEPS * 4 {
            self.step += 1;
            let ending = self.step > STEPS;
            if ending && self.queue.is_over() && self.workers.iter().all(|w| w.reports.is_empty()) {
                break;
            }
            self.now += self.pick(12) as Millis;
            if !ending {
                self.mischief();
            }
            if self.workers.is_empty() || (self.workers.len() < 3 && self.chance(2)) {
                self.join();
            }
            let index = self.pick(self.workers.len());
            let mut worker = self.workers.swap_remove(index);
            self.work(&mut worker);
            if !worker.gone {
                self.workers.push(worker);
            }
        }
        self.check_end();
        if !self.lossy && self.trained.values().any(|n| *n > 0) {
            self.seen.insert("a seed without loss");
            if self.seen.contains("replayed after a restart") {
                self.seen.insert("replayed on a seed without loss");
            }
        }
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
            if worker.drain_until.is_none() {
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
            if worker.devices[device].busy.is_none() && worker.drain_until.is_none() {
                self.restart(&mut worker, device);
            }
            self.workers.push(worker);
        }
    }

    /// The trainer of `device` restarts from its last checkpoint line: what
    /// it trained since is gone from its model.
    fn restart(&mut self, worker: &mut Worker, device: usize) {
        if std::env::var("SLUICE_SIM_TRACE").is_ok() {
            eprintln!(
                "{} w{}: restart {device}: {:?}",
                self.step, worker.id.0, worker.devices[device].since
            );
        }
        for (epoch, split, start, end) in std::mem::take(&mut worker.devices[device].since) {
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
        if let Some(until) = worker.drain_until {
            if self.chance(100) {
                self.heartbeat(worker);
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
        let lapsed: Vec<AttemptId> = worker
            .expires
            .iter()
            .filter(|(_, at)| **at <= self.now)
            .map(|(a, _)| *a)
            .collect();
        if !lapsed.is_empty() {
            self.seen.insert("lease lapsed");
        }
        let actions = worker.coord.handle(Event::Lapsed { attempts: lapsed });
        self.perform(worker, actions);
        match self.pick(10) {
            0 => self.heartbeat(worker),
            1 | 2 => self.lease(worker),
            3..=5 => self.read(worker),
            _ => {}
        }
        self.batch(worker);
        self.train(worker);
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
            Reply::Lease(Err(_)) => {
                worker.gone = true;
                self.lossy = true;
            }
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
            Reply::Heartbeat(Ok(lost)) => lost,
            Reply::Heartbeat(Err(_)) => {
                worker.gone = true;
                self.lossy = true;
                return;
            }
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
                    .since
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
                epoch: worker.buffer.front().map_or(0, |(e, _)| *e),
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
                dev.checkpoints += 1;
                dev.since.clear();
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
        if std::env::var("SLUICE_SIM_TRACE").is_ok() {
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
            worker.devices[device]
                .since
                .push((epoch, split, piece.start, piece.start + piece.len));
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
            if std::env::var("SLUICE_SIM_TRACE").is_ok() {
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

    /// The committer: reports reach the master while it is up.
    fn deliver(&mut self, worker: &mut Worker) {
        while self.up() {
            let Some(report) = worker.reports.pop_front() else {
                break;
            };
            self.send(worker, report);
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

    fn send(&mut self, worker: &Worker, report: Report) {
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
            Report::Declare | Report::Checkpoint { .. } | Report::Unsaved(_) => {}
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
        for epoch in 0..self.epochs {
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

impl Worker {
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
    fn origin(&self, attempt: AttemptId) -> Option<(u32, u32)> {
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
        ] {
            assert!(seen.contains(path), "no seed took the path: {path}");
        }
    }
}
