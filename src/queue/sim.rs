//! A seeded simulation of the queue under a crowd of workers and a restarting master.
//!
//! Workers lease, commit, finish, fail, crash, pause past their leases and come back
//! with late reports, send reports twice, and lose replies. The simulated master
//! works as `MasterState::execute` does: a tick at each command's time, then the
//! command, and the commands that changed state go to its journal. Now and then it
//! snapshots the queue (starting a new journal), and it restarts: the queue is rebuilt
//! from the journal alone or from the last snapshot and the journal after it, and
//! must equal the queue before the restart. A restart may lose the reply of the
//! request in flight (the worker retries it, or its heartbeat gives back the leases
//! it never saw), or lose the request itself (its journal record never became
//! durable, so it was never answered). Workers keep their leases across restarts:
//! their reports are honoured while the attempt is live and refused once it lapsed
//! or went to someone else.
//!
//! After every step the queue is checked against a reference model kept by simple
//! rules: no task lost, no stale attempt accepted, committed offsets never move back
//! (across restarts too), and at the end of every seed every epoch completed.
//! Workers also report on other workers' attempts and, once a split's row count is
//! known (from the start on even seeds, from its first finish on odd ones), past
//! its end or with a wrong count: all refused.
//!
//! Settings come from the environment:
//! - `SLUICE_SIM_STEPS`: steps per seed;
//! - `SLUICE_SIM_SEEDS`: `N` (seeds 1 to N) or `A-B` (seeds A to B);
//! - `SLUICE_SIM_SEED`: this seed only (to replay a failure);
//! - `SLUICE_SIM_WORKERS`: most workers at once;
//! - `SLUICE_SIM_CHECK_EVERY`: steps between full checks of every task (the tasks a
//!   step touched, and the counts, are checked after every step).
//!
//! A failing seed prints the command that replays it. The long run that goes with the
//! benchmarks (millions of steps, thousands of workers):
//!
//! ```sh
//! cargo test --release --lib queue::sim -- --ignored --nocapture
//! ```

use crate::epoch::Epoch;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Instant;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::books::tests::check_invariants;
use super::*;

/// Ended leases kept as sources of late reports.
const ZOMBIES: usize = 4_096;
/// Journal records kept from the start for full replays; past this, snapshots only.
const FULL_JOURNAL: usize = 200_000;
/// Commands kept with their replies for the replay at the end of a seed.
const FULL_LOG: usize = 400_000;
/// Simulated milliseconds a time step moves at most.
const TIME_STEP: u64 = 60;

/// How big and how long a simulation is.
#[derive(Debug, Clone, Copy)]
struct Profile {
    /// The test that runs it (for the replay command).
    test: &'static str,
    /// Whether that test is `#[ignore]`d.
    ignored: bool,
    /// Steps per seed, before the drain that finishes the job.
    steps: usize,
    /// First and last seed.
    seeds: (u64, u64),
    /// True when one seed was asked for (coverage is not required then).
    replay: bool,
    /// Most workers at once.
    workers: usize,
    /// Steps between full checks.
    check_every: usize,
    /// Paths a run of every seed must take at least once.
    required: &'static [&'static str],
}

impl Profile {
    /// The profile with the `SLUICE_SIM_*` settings of the environment applied.
    fn with_env(mut self) -> Profile {
        if let Some(steps) = env_number("SLUICE_SIM_STEPS") {
            self.steps = steps as usize;
        }
        if let Some(workers) = env_number("SLUICE_SIM_WORKERS") {
            self.workers = (workers as usize).max(1);
        }
        if let Some(every) = env_number("SLUICE_SIM_CHECK_EVERY") {
            self.check_every = (every as usize).max(1);
        }
        if let Ok(seeds) = std::env::var("SLUICE_SIM_SEEDS") {
            let parse = |s: &str| {
                s.trim()
                    .parse::<u64>()
                    .unwrap_or_else(|_| panic!("SLUICE_SIM_SEEDS={seeds}: want N or A-B"))
            };
            self.seeds = match seeds.split_once('-') {
                Some((a, b)) => (parse(a), parse(b)),
                None => (1, parse(&seeds)),
            };
        }
        if let Some(seed) = env_number("SLUICE_SIM_SEED") {
            self.seeds = (seed, seed);
            self.replay = true;
        }
        self
    }

    /// The command that runs `seed` alone again.
    fn replay_command(&self, seed: u64) -> String {
        let release = if cfg!(debug_assertions) {
            ""
        } else {
            " --release"
        };
        let ignored = if self.ignored { " --ignored" } else { "" };
        format!(
            "SLUICE_SIM_SEED={seed} SLUICE_SIM_STEPS={} SLUICE_SIM_WORKERS={} \
             SLUICE_SIM_CHECK_EVERY={} cargo test{release} --lib -- queue::sim::{} --exact{ignored}",
            self.steps, self.workers, self.check_every, self.test
        )
    }
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    let number = value.trim().replace('_', "");
    Some(
        number
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
    )
}

/// A live attempt as the model sees it.
#[derive(Debug, Clone, Copy)]
struct LiveAttempt {
    split: u32,
    worker: WorkerId,
    deadline: Millis,
    /// Its worker committed no row since it was granted: a lapse counts as
    /// an attempt of its task.
    idle: bool,
}

/// What the queue should hold, kept by simple rules independent of its code.
#[derive(Debug, Clone, Default)]
struct Model {
    epoch: Epoch,
    over: bool,
    next_worker: u64,
    attempts: Vec<u32>,
    committed: Vec<u64>,
    resolved: Vec<bool>,
    unresolved: usize,
    live: BTreeMap<AttemptId, LiveAttempt>,
    /// The live attempt of each split.
    holder: Vec<Option<AttemptId>>,
    /// Live attempts of each worker.
    by_worker: BTreeMap<WorkerId, BTreeSet<AttemptId>>,
    /// Live attempts by deadline.
    due: BTreeSet<(Millis, AttemptId)>,
    lost: BTreeMap<WorkerId, Vec<AttemptId>>,
    /// Rows of each split as the queue knows them: from the start, or from the
    /// split's first finish.
    known: Vec<Option<u64>>,
    done_total: u64,
    failed_total: usize,
}

impl Model {
    fn add_live(&mut self, attempt: AttemptId, live: LiveAttempt) {
        self.holder[live.split as usize] = Some(attempt);
        self.by_worker
            .entry(live.worker)
            .or_default()
            .insert(attempt);
        self.due.insert((live.deadline, attempt));
        self.live.insert(attempt, live);
    }

    fn renew(&mut self, attempt: AttemptId, deadline: Millis) {
        if let Some(live) = self.live.get_mut(&attempt) {
            if deadline > live.deadline {
                self.due.remove(&(live.deadline, attempt));
                self.due.insert((deadline, attempt));
                live.deadline = deadline;
            }
        }
    }

    /// `worker` committed rows: none of its live attempts is idle now.
    fn progressed(&mut self, worker: WorkerId) {
        for attempt in self.by_worker.get(&worker).into_iter().flatten() {
            if let Some(live) = self.live.get_mut(attempt) {
                live.idle = false;
            }
        }
    }

    fn remove_live(&mut self, attempt: AttemptId) -> Option<LiveAttempt> {
        let live = self.live.remove(&attempt)?;
        self.holder[live.split as usize] = None;
        if let Some(held) = self.by_worker.get_mut(&live.worker) {
            held.remove(&attempt);
        }
        self.due.remove(&(live.deadline, attempt));
        Some(live)
    }
}

/// How often each path was taken, to prove the simulation went down it.
type Coverage = BTreeMap<&'static str, u64>;

/// Paths a run of many seeds must take at least once.
const REQUIRED: &[&str] = &[
    "expired",
    "idle lapse",
    "retried",
    "failed",
    "stale",
    "backwards",
    "wait",
    "duplicate",
    "pause",
    "late report refused",
    "restart from journal",
    "restart from snapshot",
    "restart losing a request",
    "lost lease reply",
    "lost heartbeat reply",
    "retried report",
    "taken back",
    "not yours",
    "past the end",
    "wrong rows",
    "leased from its cache",
    "affinity wait",
];

/// With thousands of workers and fewer tasks, most lease requests are answered
/// `Wait`, so a lease reply lost in a restart seldom carries tasks to take back.
const REQUIRED_IN_A_CROWD: &[&str] = &[
    "expired",
    "retried",
    "failed",
    "stale",
    "backwards",
    "wait",
    "duplicate",
    "pause",
    "late report refused",
    "restart from journal",
    "restart from snapshot",
    "restart losing a request",
    "lost heartbeat reply",
    "retried report",
];

/// A report a worker may send about one of its leases.
#[derive(Debug, Clone, Copy)]
enum Report {
    Commit(u64),
    Finish(u64),
    Fail,
    /// The master failing a lease its worker says it does not hold.
    TakeBack(WorkerId),
}

#[derive(Debug, Clone)]
struct SimWorker {
    id: WorkerId,
    /// Leases the worker believes it holds, with the rows it has committed so far.
    held: Vec<(Lease, u64)>,
    /// Paused (stopped acting) until then.
    paused_until: Option<Millis>,
    /// The splits its cache holds, as it last told the queue.
    cached: BTreeSet<u32>,
}

/// Where a task stands, for counting.
enum TaskKind {
    Todo,
    Leased,
    Resolved,
}

/// What a restart that loses the request in flight puts back.
struct Saved {
    queue: Queue,
    model: Model,
    workers: Vec<SimWorker>,
    zombies: Vec<(Lease, u64)>,
    journal: usize,
    full_journal: Option<usize>,
    log: Option<usize>,
}

struct Sim {
    seed: u64,
    profile: Profile,
    rng: ChaCha8Rng,
    queue: Queue,
    config: QueueConfig,
    timeout: Millis,
    now: Millis,
    /// When the master last ticked: a second tick at the same time changes nothing.
    ticked_at: Option<Millis>,
    rows: Vec<u64>,
    /// The row counts the queue was built with (all known, or none).
    plan_rows: Vec<Option<u64>>,
    workers: Vec<SimWorker>,
    /// Leases of crashed workers, and ended attempts: sources of late reports.
    zombies: Vec<(Lease, u64)>,
    model: Model,
    /// Every command with its reply, for the replay at the end (dropped when too long).
    log: Option<Vec<(Command, Reply)>>,
    /// The master's journal since its last snapshot: the commands that changed state.
    journal: Vec<Command>,
    /// The whole journal since the job began (dropped when too long).
    full_journal: Option<Vec<Command>>,
    /// The last snapshot: the queue as JSON when `journal` was last emptied.
    snapshot: Option<Vec<u8>>,
    /// Journal records between snapshots.
    snapshot_every: usize,
    /// Master restarts in 10,000 steps.
    restarts_per_10k: usize,
    coverage: Coverage,
    /// Epoch and per-split committed offsets at the last check, which must not shrink.
    seen: (Epoch, Vec<u64>),
    /// Splits whose task a command touched since the last check.
    touched: Vec<u32>,
    step: usize,
}

impl Sim {
    fn new(seed: u64, profile: Profile) -> Sim {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let crowd = profile.workers > 16;
        let splits = if crowd {
            profile.workers / 4 + (rng.next_u64() % (profile.workers as u64 / 2 + 1)) as usize
        } else {
            10 + (rng.next_u64() % 50) as usize
        };
        let epochs = if crowd {
            2 + rng.next_u64() % 3
        } else {
            2 + rng.next_u64() % 7
        };
        // A worker acts about once in `workers` steps and time moves ~4 ms a step: a
        // lease lasts long enough for its worker to come back about half the time.
        let timeout = (40 * profile.workers as u64).max(1_000);
        let config = QueueConfig {
            epochs: epochs as u32,
            max_attempts: 1 + (rng.next_u64() % 4) as u32,
            lease_timeout_ms: timeout,
            seed,
            follow: false,
            // Affinity on every seed, its wait zero on some.
            affinity_wait_ms: if seed % 3 == 0 { 0 } else { timeout / 4 },
            interleave: None,
            lanes: None,
            world: None,
        };
        let rows: Vec<u64> = (0..splits).map(|_| rng.next_u64() % 200).collect();
        let plan_rows: Vec<Option<u64>> = if seed % 2 == 0 {
            rows.iter().copied().map(Some).collect()
        } else {
            vec![None; splits]
        };
        let snapshot_every = 20 + (rng.next_u64() % 500) as usize;
        let queue = Queue::with_rows(plan_rows.clone(), config.clone()).expect("valid config");
        let mut sim = Sim {
            seed,
            profile,
            rng,
            queue,
            config,
            timeout,
            now: 0,
            ticked_at: None,
            rows,
            workers: Vec::new(),
            zombies: Vec::new(),
            model: Model {
                next_worker: 1,
                known: plan_rows.clone(),
                ..Model::default()
            },
            plan_rows,
            log: Some(Vec::new()),
            journal: Vec::new(),
            full_journal: Some(Vec::new()),
            snapshot: None,
            snapshot_every,
            // A restart's downtime moves time as much as a few hundred steps do.
            restarts_per_10k: if crowd { 15 } else { 30 },
            coverage: Coverage::new(),
            seen: (Epoch(0), vec![0; splits]),
            touched: Vec::new(),
            step: 0,
        };
        sim.reset_model_epoch();
        sim
    }

    fn pick(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n.max(1) as u64) as usize
    }

    /// True `per_mille` times in a thousand.
    fn chance(&mut self, per_mille: usize) -> bool {
        self.pick(1000) < per_mille
    }

    fn cover(&mut self, path: &'static str) {
        *self.coverage.entry(path).or_default() += 1;
    }

    fn at(&self) -> String {
        format!("seed {} step {}", self.seed, self.step)
    }

    fn run(&mut self) {
        for _ in 0..self.profile.workers {
            self.register();
        }
        for step in 0..self.profile.steps {
            self.step = step;
            if self.model.over {
                break;
            }
            if self.workers.is_empty() {
                self.register();
            }
            self.expire();
            let roll = self.pick(10_000);
            match roll {
                0..=299 if self.workers.len() < self.profile.workers => self.register(),
                300..=2499 => {
                    if let Some(index) = self.awake(|_| true) {
                        let max = 1 + self.pick(3);
                        self.lease(index, max, true);
                    }
                }
                2500..=5699 => self.work(),
                5700..=7499 => {
                    if let Some(index) = self.awake(|_| true) {
                        self.heartbeat(index, true);
                    }
                }
                7500..=7799 => self.crash(),
                7800..=8599 => self.late_report(),
                8600..=8699 => self.pause(),
                _ if (8700..8700 + self.restarts_per_10k).contains(&roll) => self.restart(),
                _ => {
                    self.now += self.pick(TIME_STEP as usize) as Millis;
                }
            }
            self.maybe_snapshot();
            let full = step % self.profile.check_every == 0;
            self.check(full);
        }
        self.drain();
    }

    /// A worker able to act now and matching `want`, found by a few random tries. A
    /// paused worker whose pause is over comes back instead (and the step is spent).
    fn awake(&mut self, want: impl Fn(&SimWorker) -> bool) -> Option<usize> {
        for _ in 0..8 {
            let index = self.pick(self.workers.len());
            let worker = self.workers.get(index)?;
            match worker.paused_until {
                Some(until) if until <= self.now => {
                    self.resume(index);
                    return None;
                }
                Some(_) => {}
                None if want(worker) => return Some(index),
                None => {}
            }
        }
        None
    }

    /// Records a command and its reply as the master does: the commands that changed
    /// state go to the journal.
    fn record(&mut self, command: Command, reply: Reply) {
        if reply.changed() {
            if let Some(full) = &mut self.full_journal {
                full.push(command.clone());
            }
            self.journal.push(command.clone());
        }
        if let Some(log) = &mut self.log {
            log.push((command, reply));
        }
    }

    /// Sends a command to the master, which ticks at its time first.
    fn apply(&mut self, command: Command) -> Reply {
        self.expire();
        let reply = self.queue.apply(&command);
        self.record(command, reply.clone());
        reply
    }

    /// The master's tick at `now`: expires every lapsed lease, as the model expects.
    fn expire(&mut self) {
        let now = self.now;
        if self.ticked_at == Some(now) {
            // Every deadline is later than the time it was set at, so nothing is due.
            assert!(
                self.model.due.first().is_none_or(|(d, _)| *d > now),
                "{}",
                self.at()
            );
            return;
        }
        self.ticked_at = Some(now);
        let mut due: Vec<AttemptId> = self
            .model
            .due
            .range(..=(now, AttemptId(u64::MAX)))
            .map(|(_, attempt)| *attempt)
            .collect();
        due.sort();
        let mut expected = Vec::with_capacity(due.len());
        let epoch = self.model.epoch;
        for attempt in due {
            let live = self.model.remove_live(attempt).expect("due is live");
            self.model
                .lost
                .entry(live.worker)
                .or_default()
                .push(attempt);
            self.cover("expired");
            self.touched.push(live.split);
            // A lapse is an attempt only when its worker committed nothing
            // since the grant; otherwise back to todo, counted nowhere.
            let outcome = if live.idle {
                self.cover("idle lapse");
                self.model.attempts[live.split as usize] += 1;
                self.model_end_attempt(live.split as usize)
            } else {
                FailOutcome::Retried
            };
            expected.push(Expired {
                attempt,
                worker: live.worker,
                epoch,
                split: live.split,
                outcome,
            });
        }
        let tick = Command::Tick { now };
        let reply = self.queue.apply(&tick);
        let expected = Reply::Tick {
            expired: expected,
            gone: Vec::new(),
        };
        assert_eq!(reply, expected, "{}: tick at {now}", self.at());
        self.record(tick, reply);
    }

    fn register(&mut self) {
        let expected = WorkerId(self.model.next_worker);
        self.model.next_worker += 1;
        let reply = self.apply(Command::Register {
            now: self.now,
            secret: None,
            name: None,
        });
        assert_eq!(reply, Reply::Register(expected), "{}", self.at());
        self.model.lost.insert(expected, Vec::new());
        self.workers.push(SimWorker {
            id: expected,
            held: Vec::new(),
            paused_until: None,
            cached: BTreeSet::new(),
        });
    }

    /// What worker `index` says its cache holds with a heartbeat: now and
    /// then a new random set of splits (a third of them or so).
    fn cached_report(&mut self, index: usize) -> Option<Vec<u32>> {
        if !self.chance(200) {
            return None;
        }
        let splits = self.rows.len() as u32;
        let cached: BTreeSet<u32> = (0..splits).filter(|_| self.chance(330)).collect();
        self.workers[index].cached = cached.clone();
        Some(cached.into_iter().collect())
    }

    /// Worker `index` asks for up to `max` tasks; with `deliver` false the reply never
    /// reaches it (the master died before answering).
    fn lease(&mut self, index: usize, max: usize, deliver: bool) {
        self.expire();
        let worker = self.workers[index].id;
        let reply = self.apply(Command::Lease {
            now: self.now,
            worker,
            max,
        });
        let at = self.at();
        match reply {
            Reply::Lease(Ok(LeaseReply::Tasks(leases))) => {
                assert!(!leases.is_empty() && leases.len() <= max, "{at}");
                for lease in leases {
                    if lease.epoch > Epoch(0) && self.workers[index].cached.contains(&lease.split) {
                        self.cover("leased from its cache");
                    }
                    self.model_grant(&lease, worker);
                    if deliver {
                        self.workers[index].held.push((lease.clone(), lease.offset));
                    }
                }
            }
            Reply::Lease(Ok(LeaseReply::Wait)) => {
                self.cover("wait");
                assert!(!self.model.over, "{at}: wait after the job is over");
                if self.model.unresolved != self.model.live.len() {
                    // Tasks left, each in another live worker's cache: only
                    // from the second epoch, and within the bounded wait.
                    assert!(
                        self.model.epoch > Epoch(0),
                        "{at}: affinity wait in epoch 0"
                    );
                    assert!(self.config.affinity_wait_ms > 0, "{at}: wait with none set");
                    self.cover("affinity wait");
                } else {
                    assert!(!self.model.live.is_empty(), "{at}: wait with no lease");
                }
            }
            Reply::Lease(Ok(LeaseReply::JobOver)) => {
                assert!(self.model.over, "{at}: job over too soon");
            }
            other => panic!("{at}: lease answered {other:?}"),
        }
    }

    fn model_grant(&mut self, lease: &Lease, worker: WorkerId) {
        let (at, split) = (self.at(), lease.split as usize);
        assert_eq!(lease.epoch, self.model.epoch, "{at}: lease epoch");
        assert_eq!(
            lease.offset, self.model.committed[split],
            "{at}: resume offset"
        );
        assert_eq!(lease.deadline, self.now + self.timeout, "{at}: deadline");
        assert!(!self.model.resolved[split], "{at}: leased a resolved task");
        assert!(
            self.model.holder[split].is_none(),
            "{at}: two live leases on split {split}"
        );
        assert!(
            !self.model.live.contains_key(&lease.attempt),
            "{at}: attempt reused"
        );
        self.touched.push(lease.split);
        self.model.add_live(
            lease.attempt,
            LiveAttempt {
                split: lease.split,
                worker,
                deadline: lease.deadline,
                idle: true,
            },
        );
    }

    /// The report a worker makes next about a lease it holds at `position`.
    fn next_report(&mut self, lease: &Lease, position: u64) -> Report {
        let total = self.rows[lease.split as usize];
        let known = self.model.known[lease.split as usize].is_some();
        match self.pick(100) {
            0..=5 => Report::Fail,
            6..=8 => Report::Commit(position.saturating_sub(1 + self.pick(3) as u64)),
            // Reports a queue that knows the count refuses (one that does not
            // would learn a wrong count from them).
            9 if known => Report::Commit(total + 1 + self.pick(3) as u64),
            10 if known => Report::Finish(match self.pick(2) {
                0 => total + 1,
                _ => total.checked_sub(1).unwrap_or(total + 1),
            }),
            _ if position >= total => Report::Finish(total),
            _ => Report::Commit((position + self.pick(60) as u64).min(total)),
        }
    }

    /// A live worker moves one of its leases forward: commit, finish or fail,
    /// sometimes sending the same report twice.
    fn work(&mut self) {
        let Some(index) = self.awake(|w| !w.held.is_empty()) else {
            return;
        };
        let slot = self.pick(self.workers[index].held.len());
        let (lease, position) = self.workers[index].held[slot].clone();
        let report = self.next_report(&lease, position);
        if self.chance(30) {
            self.impostor(&lease, report);
        }
        let accepted = self.report(&lease, report);
        if self.chance(50) {
            self.cover("duplicate");
            self.report(&lease, report);
        }
        self.settle(index, lease.attempt, report, accepted);
    }

    /// The worker's books after the reply to `report` about `attempt`.
    fn settle(&mut self, index: usize, attempt: AttemptId, report: Report, accepted: bool) {
        let live = self.model.live.contains_key(&attempt);
        let worker = &mut self.workers[index];
        let Some(slot) = worker.held.iter().position(|(l, _)| l.attempt == attempt) else {
            return;
        };
        match report {
            Report::Commit(offset) if accepted => worker.held[slot].1 = offset,
            _ if accepted || !live => {
                let ended = worker.held.remove(slot);
                self.bury(ended);
            }
            _ => {} // a refused backwards commit: the lease is still live
        }
    }

    fn bury(&mut self, ended: (Lease, u64)) {
        self.zombies.push(ended);
        if self.zombies.len() > ZOMBIES {
            let old = self.pick(self.zombies.len());
            self.zombies.swap_remove(old);
        }
    }

    /// Another worker sends `report` about a live `lease` it does not hold: refused,
    /// nothing changes.
    fn impostor(&mut self, lease: &Lease, report: Report) {
        self.expire();
        let Some(holder) = self.model.live.get(&lease.attempt).map(|l| l.worker) else {
            return;
        };
        let worker = WorkerId(1 + self.pick(self.model.next_worker as usize - 1) as u64);
        if worker == holder {
            return;
        }
        self.cover("not yours");
        let refused = QueueError::NotYours {
            attempt: lease.attempt,
            worker,
            holder,
        };
        let expected = match report {
            Report::Commit(_) => Reply::Commit(Err(refused)),
            Report::Finish(_) => Reply::Finish(Err(refused)),
            Report::Fail | Report::TakeBack(_) => Reply::Fail(Err(refused)),
        };
        let reply = self.apply(self.command(worker, lease.attempt, report));
        assert_eq!(reply, expected, "{}: impostor on {lease:?}", self.at());
    }

    /// The command that sends `report` about `attempt` from `worker`.
    fn command(&self, worker: WorkerId, attempt: AttemptId, report: Report) -> Command {
        let now = self.now;
        let worker = Some(worker);
        match report {
            Report::Commit(offset) => Command::Commit {
                now,
                worker,
                attempt,
                offset,
                ranges: Vec::new(),
            },
            Report::Finish(rows) => Command::Finish {
                now,
                worker,
                attempt,
                rows,
            },
            Report::Fail => Command::Fail {
                now,
                worker,
                attempt,
                reason: format!("attempt {attempt} broke"),
                for_good: false,
            },
            Report::TakeBack(holder) => Command::Fail {
                now,
                worker: Some(holder),
                attempt,
                reason: format!("lease reply never reached worker {holder}"),
                for_good: false,
            },
        }
    }

    /// Sends `report` about `lease`, checks the reply against the model and updates it.
    /// Returns whether the queue accepted it.
    fn report(&mut self, lease: &Lease, report: Report) -> bool {
        self.expire();
        let attempt = lease.attempt;
        // Reports come from the attempt's holder (from anyone, once it is stale).
        let worker = (self.model.live.get(&attempt)).map_or(WorkerId(0), |l| l.worker);
        let expected = self.expect(lease, report);
        let reply = self.apply(self.command(worker, attempt, report));
        assert_eq!(reply, expected, "{}: report on {lease:?}", self.at());
        self.touched.push(lease.split);
        reply.changed()
    }

    /// The reply the queue must give to `report`, with the model updated to match.
    fn expect(&mut self, lease: &Lease, report: Report) -> Reply {
        let attempt = lease.attempt;
        let split = lease.split as usize;
        let stale = QueueError::Stale { attempt };
        let live = self.model.live.contains_key(&attempt);
        // An attempt of an earlier epoch is never live, so the split index is safe.
        let committed = if live { self.model.committed[split] } else { 0 };
        let backwards = |offset| QueueError::OffsetBackwards {
            attempt,
            committed,
            offset,
        };
        if !live {
            self.cover("stale");
            return match report {
                Report::Commit(_) => Reply::Commit(Err(stale)),
                Report::Finish(_) => Reply::Finish(Err(stale)),
                Report::Fail | Report::TakeBack(_) => Reply::Fail(Err(stale)),
            };
        }
        let known = self.model.known[split];
        match report {
            Report::Commit(offset) if offset < committed => {
                self.cover("backwards");
                Reply::Commit(Err(backwards(offset)))
            }
            Report::Finish(rows) if rows < committed => Reply::Finish(Err(backwards(rows))),
            Report::Commit(offset) if known.is_some_and(|rows| offset > rows) => {
                self.cover("past the end");
                Reply::Commit(Err(QueueError::OffsetPastEnd {
                    attempt,
                    split: lease.split,
                    offset,
                    rows: known.unwrap_or_default(),
                }))
            }
            Report::Finish(reported) if known.is_some_and(|rows| reported != rows) => {
                self.cover("wrong rows");
                Reply::Finish(Err(QueueError::WrongRows {
                    attempt,
                    split: lease.split,
                    reported,
                    rows: known.unwrap_or_default(),
                }))
            }
            Report::Commit(offset) => {
                if offset > committed {
                    // Progress: this attempt does not count against the task,
                    // nor does a lapse of any lease its worker holds.
                    self.model.attempts[split] = 0;
                    if let Some(live) = self.model.live.get(&attempt) {
                        let worker = live.worker;
                        self.model.progressed(worker);
                    }
                }
                self.model.committed[split] = offset;
                self.model.renew(attempt, self.now + self.timeout);
                Reply::Commit(Ok(()))
            }
            Report::Finish(rows) => {
                if let Some(live) = self.model.live.get(&attempt) {
                    let worker = live.worker;
                    self.model.progressed(worker);
                }
                self.model.remove_live(attempt);
                self.model.committed[split] = rows;
                self.model.known[split].get_or_insert(rows);
                self.model.done_total += 1;
                self.cover("finished");
                self.resolve(split);
                Reply::Finish(Ok(()))
            }
            Report::Fail | Report::TakeBack(_) => {
                self.model.remove_live(attempt);
                self.model.attempts[split] += 1;
                Reply::Fail(Ok(self.model_end_attempt(split)))
            }
        }
    }

    fn model_end_attempt(&mut self, split: usize) -> FailOutcome {
        if self.model.attempts[split] < self.config.max_attempts {
            self.cover("retried");
            return FailOutcome::Retried;
        }
        self.cover("failed");
        self.model.failed_total += 1;
        self.resolve(split);
        FailOutcome::Failed
    }

    fn resolve(&mut self, split: usize) {
        assert!(!self.model.resolved[split], "{}: resolved twice", self.at());
        self.model.resolved[split] = true;
        self.model.unresolved -= 1;
        if self.model.unresolved == 0 {
            assert!(
                self.model.live.is_empty(),
                "{}: resolved with leases",
                self.at()
            );
            self.cover("epochs");
            if self.model.epoch.0 + 1 < self.config.epochs {
                self.model.epoch = self.model.epoch.next();
                self.reset_model_epoch();
            } else {
                self.model.over = true;
            }
        }
    }

    fn reset_model_epoch(&mut self) {
        let n = self.rows.len();
        self.model.attempts = vec![0; n];
        self.model.committed = vec![0; n];
        self.model.resolved = vec![false; n];
        self.model.holder = vec![None; n];
        self.model.unresolved = n;
        if n == 0 {
            self.model.over = true;
        }
    }

    /// Worker `index` renews its leases and learns the ones it lost. With `deliver`
    /// false the reply never reaches it. Otherwise the master then takes back the
    /// leases the worker does not say it holds, as the HTTP master does.
    fn heartbeat(&mut self, index: usize, deliver: bool) {
        self.expire();
        let worker = self.workers[index].id;
        let lost = std::mem::take(self.model.lost.entry(worker).or_default());
        let renewed = self.now + self.timeout;
        let held: Vec<AttemptId> = (self.model.by_worker.get(&worker))
            .map(|set| set.iter().copied().collect())
            .unwrap_or_default();
        for attempt in held {
            self.model.renew(attempt, renewed);
        }
        let cached = self.cached_report(index);
        let reply = self.apply(Command::Heartbeat {
            now: self.now,
            worker,
            cached,
        });
        assert_eq!(reply, Reply::Heartbeat(Ok(lost.clone())), "{}", self.at());
        if !deliver {
            return;
        }
        let held = &mut self.workers[index].held;
        let (dropped, kept): (Vec<_>, Vec<_>) =
            held.drain(..).partition(|(l, _)| lost.contains(&l.attempt));
        *held = kept;
        for ended in dropped {
            self.bury(ended);
        }
        self.take_back(index);
    }

    /// Fails the leases the queue gave worker `index` that the worker does not hold:
    /// their replies never reached it.
    fn take_back(&mut self, index: usize) {
        let worker = self.workers[index].id;
        let held: BTreeSet<AttemptId> = self.workers[index]
            .held
            .iter()
            .map(|(l, _)| l.attempt)
            .collect();
        // What the master finds in its books, in split order.
        let unheld: Vec<(AttemptId, u32)> = (self.queue.tasks().iter().enumerate())
            .filter_map(|(split, task)| match task.state {
                TaskState::Leased {
                    attempt, worker: w, ..
                } if w == worker && !held.contains(&attempt) => Some((attempt, split as u32)),
                _ => None,
            })
            .collect();
        let expected: BTreeSet<AttemptId> = (self.model.by_worker.get(&worker))
            .map(|set| set.difference(&held).copied().collect())
            .unwrap_or_default();
        let found: BTreeSet<AttemptId> = unheld.iter().map(|(a, _)| *a).collect();
        assert_eq!(
            found,
            expected,
            "{}: leases worker {worker} lacks",
            self.at()
        );
        for (attempt, split) in unheld {
            self.cover("taken back");
            let lease = Lease {
                attempt,
                epoch: self.model.epoch,
                split,
                offset: 0,
                deadline: 0,
                skip: Vec::new(),
                repaired: false,
            };
            assert!(
                self.report(&lease, Report::TakeBack(worker)),
                "{}",
                self.at()
            );
        }
    }

    fn crash(&mut self) {
        if self.workers.len() > 1 {
            let index = self.pick(self.workers.len());
            let worker = self.workers.swap_remove(index);
            for ended in worker.held {
                self.bury(ended);
            }
        }
    }

    /// A worker stops acting (a long GC pause, a stopped container) for up to a few
    /// lease timeouts.
    fn pause(&mut self) {
        let index = self.pick(self.workers.len());
        let pause = self.timeout / 2 + self.pick(2 * self.timeout as usize) as Millis;
        if let Some(worker) = self.workers.get_mut(index) {
            if worker.paused_until.is_none() {
                worker.paused_until = Some(self.now + pause);
                self.cover("pause");
            }
        }
    }

    /// A paused worker comes back: it reports the progress it made on every lease it
    /// held (refused for those that lapsed meanwhile), then heartbeats.
    fn resume(&mut self, index: usize) {
        self.workers[index].paused_until = None;
        let held = std::mem::take(&mut self.workers[index].held);
        for (lease, position) in held {
            let total = self.rows[lease.split as usize];
            let offset = (position + self.pick(60) as u64).min(total);
            if self.report(&lease, Report::Commit(offset)) {
                self.cover("late report accepted");
                self.workers[index].held.push((lease, offset));
            } else {
                self.cover("late report refused");
                self.bury((lease, position));
            }
        }
        self.heartbeat(index, true);
    }

    /// A report from a crashed worker, or about an attempt that already ended.
    fn late_report(&mut self) {
        if self.zombies.is_empty() {
            return;
        }
        let pick = self.pick(self.zombies.len());
        let (lease, position) = self.zombies[pick].clone();
        let report = match self.pick(3) {
            0 => Report::Commit(position),
            1 => Report::Finish(self.rows[lease.split as usize]),
            _ => Report::Fail,
        };
        self.report(&lease, report);
    }

    /// The master snapshots its queue every so many journal records and starts a
    /// new journal.
    fn maybe_snapshot(&mut self) {
        if self.journal.len() >= self.snapshot_every {
            let snapshot = serde_json::to_vec(&self.queue).expect("a queue serializes");
            self.snapshot = Some(snapshot);
            self.journal.clear();
            self.cover("snapshot");
        }
        if self
            .full_journal
            .as_ref()
            .is_some_and(|j| j.len() > FULL_JOURNAL)
        {
            self.full_journal = None;
        }
        if self.log.as_ref().is_some_and(|l| l.len() > FULL_LOG) {
            self.log = None;
        }
    }

    /// The master is killed and started again: sometimes with a reply lost on the
    /// way, sometimes with the request in flight lost altogether.
    fn restart(&mut self) {
        let mut retry = None;
        match self.pick(4) {
            0 => {}
            1 => return self.restart_losing_a_request(),
            2 => {
                if let Some(index) = self.awake(|_| true) {
                    if self.chance(500) {
                        self.cover("lost lease reply");
                        let max = 1 + self.pick(3);
                        self.lease(index, max, false);
                    } else {
                        self.cover("lost heartbeat reply");
                        self.heartbeat(index, false);
                    }
                }
            }
            _ => {
                if let Some(index) = self.awake(|w| !w.held.is_empty()) {
                    let slot = self.pick(self.workers[index].held.len());
                    let (lease, position) = self.workers[index].held[slot].clone();
                    let report = self.next_report(&lease, position);
                    self.report(&lease, report);
                    retry = Some((self.workers[index].id, lease, report));
                }
            }
        }
        self.rebuild();
        self.downtime();
        if let Some((worker, lease, report)) = retry {
            // The worker never got the answer and sends the same report again.
            self.cover("retried report");
            let accepted = self.report(&lease, report);
            if let Some(index) = self.workers.iter().position(|w| w.id == worker) {
                self.settle(index, lease.attempt, report, accepted);
            }
        }
    }

    /// The master dies with a request applied but its journal record not yet
    /// durable: the request was never answered, and after the restart it is as if
    /// it had never been made.
    fn restart_losing_a_request(&mut self) {
        self.cover("restart losing a request");
        let saved = Saved {
            queue: self.queue.clone(),
            model: self.model.clone(),
            workers: self.workers.clone(),
            zombies: self.zombies.clone(),
            journal: self.journal.len(),
            full_journal: self.full_journal.as_ref().map(Vec::len),
            log: self.log.as_ref().map(Vec::len),
        };
        if self.chance(500) {
            if let Some(index) = self.awake(|_| true) {
                let max = 1 + self.pick(3);
                self.lease(index, max, true);
            }
        } else {
            self.work();
        }
        self.journal.truncate(saved.journal);
        if let (Some(full), Some(len)) = (&mut self.full_journal, saved.full_journal) {
            full.truncate(len);
        }
        if let (Some(log), Some(len)) = (&mut self.log, saved.log) {
            log.truncate(len);
        }
        self.model = saved.model;
        self.workers = saved.workers;
        self.zombies = saved.zombies;
        self.queue = saved.queue;
        self.rebuild();
        self.downtime();
    }

    /// Rebuilds the queue as a restarted master does, from the last snapshot and
    /// the journal after it, or from the whole journal; it must equal the queue
    /// the master had.
    fn rebuild(&mut self) {
        let from_snapshot =
            self.snapshot.is_some() && (self.full_journal.is_none() || self.chance(500));
        let (mut rebuilt, tail, what) = match (&self.snapshot, &self.full_journal) {
            (Some(snapshot), _) if from_snapshot => (
                serde_json::from_slice::<Queue>(snapshot).expect("a snapshot deserializes"),
                &self.journal,
                "restart from snapshot",
            ),
            (_, Some(full)) => (
                Queue::with_rows(self.plan_rows.clone(), self.config.clone())
                    .expect("valid config"),
                full,
                "restart from journal",
            ),
            _ => panic!("{}: nothing to restart from", self.at()),
        };
        for command in tail {
            rebuilt.apply(command);
        }
        assert!(
            rebuilt == self.queue,
            "{}: {what}: the rebuilt queue differs from the one before the restart",
            self.at()
        );
        self.queue = rebuilt;
        self.ticked_at = None;
        self.cover(what);
        self.check(true);
    }

    /// Time passes while the master is down, sometimes longer than a lease.
    fn downtime(&mut self) {
        let longest = if self.chance(100) {
            2 * self.timeout
        } else {
            (self.timeout / 10).min(2_000)
        };
        self.now += self.pick(longest as usize) as Millis;
    }

    /// A reliable worker finishes whatever is left, so every epoch must complete.
    fn drain(&mut self) {
        self.register();
        let index = self.workers.len() - 1;
        for round in 0..10 * self.config.epochs as usize + 10 {
            self.step = self.profile.steps + round;
            if self.model.over {
                break;
            }
            self.now += 2 * self.timeout;
            self.lease(index, self.rows.len(), true);
            let held = std::mem::take(&mut self.workers[index].held);
            for (lease, _) in held {
                let rows = self.rows[lease.split as usize];
                self.cover("finished by the drain");
                assert!(self.report(&lease, Report::Finish(rows)), "{}", self.at());
            }
            self.check(true);
        }
        assert!(self.model.over, "seed {}: job never ended", self.seed);
        self.lease(index, 1, true);
    }

    /// Compares the queue with the model: the tasks touched since the last check
    /// (every task when `full`), the counts, and the offsets seen before.
    fn check(&mut self, full: bool) {
        let epoch = self.queue.epoch();
        let full = full || epoch != self.seen.0;
        if epoch != self.seen.0 {
            self.seen = (epoch, vec![0; self.rows.len()]);
        }
        let at = self.at();
        assert_eq!(
            (epoch, self.queue.is_over()),
            (self.model.epoch, self.model.over),
            "{at}: epoch"
        );
        assert_eq!(
            self.queue.failures().len(),
            self.model.failed_total,
            "{at}: failures"
        );
        let touched = std::mem::take(&mut self.touched);
        if !full {
            for split in touched {
                self.check_task(split as usize, &at);
            }
            return;
        }
        if let Err(broken) = check_invariants(&self.queue) {
            panic!("{at}: {broken}");
        }
        let (mut leased, mut resolved) = (0, 0);
        for split in 0..self.rows.len() {
            match self.check_task(split, &at) {
                TaskKind::Leased => leased += 1,
                TaskKind::Resolved => resolved += 1,
                TaskKind::Todo => {}
            }
        }
        assert_eq!(leased, self.model.live.len(), "{at}: live leases");
        assert_eq!(
            resolved + self.model.unresolved,
            self.rows.len(),
            "{at}: resolved"
        );
    }

    /// One task against the model; its committed offset must not have moved back.
    fn check_task(&mut self, split: usize, at: &str) -> TaskKind {
        let (task, m) = (&self.queue.tasks()[split], &self.model);
        assert_eq!(
            task.attempts, m.attempts[split],
            "{at}: attempts of {split}"
        );
        let resolved = matches!(
            task.state,
            TaskState::Done { .. } | TaskState::Failed { .. }
        );
        assert_eq!(resolved, m.resolved[split], "{at}: split {split} {task:?}");
        let (kind, offset) = match task.state {
            TaskState::Todo { offset } => {
                assert_eq!(offset, m.committed[split], "{at}: split {split}");
                assert!(m.holder[split].is_none(), "{at}: split {split} held");
                (TaskKind::Todo, offset)
            }
            TaskState::Leased {
                attempt,
                worker,
                deadline,
                offset,
            } => {
                let live = m.live.get(&attempt).expect("model knows the lease");
                assert_eq!(m.holder[split], Some(attempt), "{at}: split {split}");
                assert_eq!((live.split as usize, live.worker), (split, worker), "{at}");
                assert_eq!(
                    (live.deadline, offset),
                    (deadline, m.committed[split]),
                    "{at}: split {split}"
                );
                (TaskKind::Leased, offset)
            }
            TaskState::Done { rows } => (TaskKind::Resolved, rows),
            TaskState::Failed { .. } => (TaskKind::Resolved, u64::MAX),
        };
        let before = self.seen.1[split];
        assert!(
            offset >= before,
            "{at}: split {split} offset {before} -> {offset}"
        );
        self.seen.1[split] = offset;
        kind
    }

    /// Replays the recorded log on a fresh queue: same replies, same queue; then
    /// replays only the commands that changed something: same queue again.
    fn check_replay(&self) {
        let Some(log) = &self.log else {
            return;
        };
        let seed = self.seed;
        let fresh =
            || Queue::with_rows(self.plan_rows.clone(), self.config.clone()).expect("valid config");
        let mut replayed = fresh();
        for (i, (command, reply)) in log.iter().enumerate() {
            assert_eq!(&replayed.apply(command), reply, "seed {seed}: command {i}");
        }
        assert_eq!(replayed, self.queue, "seed {seed}: full replay");
        assert_eq!(replayed.status(), self.queue.status(), "seed {seed}");
        let mut journaled = fresh();
        for (command, _) in log.iter().filter(|(_, reply)| reply.changed()) {
            journaled.apply(command);
        }
        assert_eq!(journaled, self.queue, "seed {seed}: replay of changes only");
    }
}

/// Runs one seed to the end of its job; returns the paths it took.
fn run_seed(seed: u64, profile: Profile) -> Coverage {
    let mut sim = Sim::new(seed, profile);
    sim.run();
    let expected = sim.rows.len() as u64 * u64::from(sim.config.epochs);
    let m = &sim.model;
    assert_eq!(
        m.done_total + m.failed_total as u64,
        expected,
        "seed {seed}: every task of every epoch done or failed"
    );
    let epochs = sim.coverage.get("epochs").copied().unwrap_or(0);
    let want = if sim.rows.is_empty() {
        0
    } else {
        u64::from(sim.config.epochs)
    };
    assert_eq!(epochs, want, "seed {seed}: every epoch completes");
    let status = sim.queue.status();
    assert_eq!(
        (status.tasks_done, status.failures.len()),
        (m.done_total, m.failed_total),
        "seed {seed}"
    );
    assert!(status.job_over && status.todo == 0 && status.leased == 0);
    sim.check_replay();
    sim.coverage
}

/// Runs every seed of `profile` (after the environment's settings); a failing seed
/// prints the command that replays it.
fn simulate(profile: Profile) {
    let profile = profile.with_env();
    let mut total = Coverage::new();
    let started = Instant::now();
    for seed in profile.seeds.0..=profile.seeds.1 {
        let seed_started = Instant::now();
        match catch_unwind(AssertUnwindSafe(|| run_seed(seed, profile))) {
            Ok(coverage) => {
                for (path, n) in coverage {
                    *total.entry(path).or_default() += n;
                }
            }
            Err(panic) => {
                eprintln!(
                    "simulation failed at seed {seed}; replay it with:\n  {}",
                    profile.replay_command(seed)
                );
                resume_unwind(panic);
            }
        }
        if profile.ignored {
            eprintln!(
                "seed {seed}: {} steps, {} workers in {:.1?}",
                profile.steps,
                profile.workers,
                seed_started.elapsed()
            );
        }
    }
    eprintln!(
        "{}: seeds {}-{}, {} steps each, up to {} workers, {:.1?}; {total:?}",
        profile.test,
        profile.seeds.0,
        profile.seeds.1,
        profile.steps,
        profile.workers,
        started.elapsed()
    );
    if !profile.replay {
        let missed: Vec<&str> = (profile.required.iter())
            .filter(|path| total.get(*path).copied().unwrap_or(0) == 0)
            .copied()
            .collect();
        assert!(
            missed.is_empty(),
            "paths never taken: {missed:?} in {total:?}"
        );
    }
}

#[test]
fn simulated_workers_never_lose_a_task_or_pass_a_stale_report() {
    simulate(Profile {
        test: "simulated_workers_never_lose_a_task_or_pass_a_stale_report",
        ignored: false,
        steps: 5_000,
        seeds: (1, 12),
        replay: false,
        workers: 10,
        check_every: 1,
        required: REQUIRED,
    });
}

#[test]
fn thousands_of_workers_and_master_restarts_lose_nothing() {
    simulate(Profile {
        test: "thousands_of_workers_and_master_restarts_lose_nothing",
        ignored: false,
        steps: 20_000,
        seeds: (1, 2),
        replay: false,
        workers: 2_000,
        check_every: 16,
        required: REQUIRED_IN_A_CROWD,
    });
}

/// The long run that goes with the benchmarks (millions of steps):
/// `cargo test --release --lib queue::sim -- --ignored --nocapture`.
#[test]
#[ignore = "long run: cargo test --release --lib queue::sim -- --ignored"]
fn long_simulation_with_thousands_of_workers() {
    simulate(Profile {
        test: "long_simulation_with_thousands_of_workers",
        ignored: true,
        steps: 1_000_000,
        seeds: (1, 4),
        replay: false,
        workers: 5_000,
        check_every: 100,
        required: REQUIRED,
    });
}

#[test]
fn a_random_command_log_replays_to_the_same_queue() {
    for seed in 1..=12 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let config = QueueConfig {
            epochs: 3,
            max_attempts: 2,
            lease_timeout_ms: 50,
            seed,
            follow: false,
            affinity_wait_ms: 20,
            interleave: None,
            lanes: None,
            world: None,
        };
        let mut queue = Queue::new(12, config.clone()).expect("valid config");
        let mut log = Vec::new();
        let mut now = 0;
        for _ in 0..2_000 {
            now += rng.next_u64() % 20;
            let command = random_command(&mut rng, now);
            let reply = queue.apply(&command);
            log.push((command, reply));
        }
        let mut replayed = Queue::new(12, config).expect("valid config");
        for (i, (command, reply)) in log.iter().enumerate() {
            assert_eq!(&replayed.apply(command), reply, "seed {seed}: command {i}");
        }
        assert_eq!(replayed.status(), queue.status(), "seed {seed}");
        assert_eq!(replayed.tasks(), queue.tasks(), "seed {seed}");
        assert_eq!(replayed, queue, "seed {seed}");
    }
}

/// Any command at all, valid or not: small ids so that many hit.
fn random_command(rng: &mut ChaCha8Rng, now: Millis) -> Command {
    let worker = WorkerId(rng.next_u64() % 6);
    let attempt = AttemptId(rng.next_u64() % 40);
    let offset = rng.next_u64() % 100;
    match rng.next_u64() % 8 {
        0 => Command::Register {
            now,
            secret: (worker.0 % 2 == 0).then(|| WorkerSecret::new(format!("{offset:032x}"))),
            name: None,
        },
        1 | 2 => Command::Lease {
            now,
            worker,
            max: (rng.next_u64() % 4) as usize,
        },
        3 => Command::Heartbeat {
            now,
            worker,
            cached: (offset % 3 == 0).then(|| vec![(offset % 12) as u32, (offset % 5) as u32]),
        },
        4 => Command::Commit {
            now,
            worker: (offset % 3 != 0).then_some(worker),
            attempt,
            offset,
            ranges: if offset % 2 == 0 {
                Vec::new()
            } else {
                vec![(offset + 1, offset + 3)]
            },
        },
        5 => Command::Finish {
            now,
            worker: (offset % 3 != 0).then_some(worker),
            attempt,
            rows: offset,
        },
        6 => Command::Fail {
            now,
            worker: (offset % 3 != 0).then_some(worker),
            attempt,
            reason: format!("reason {offset}"),
            for_good: offset % 5 == 0,
        },
        _ => Command::Tick { now },
    }
}
