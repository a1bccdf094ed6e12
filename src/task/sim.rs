//! A seeded simulation: many workers lease, commit, finish, fail, crash, stall and
//! report late; after every step the queue is checked against a reference model, and
//! the recorded command log is replayed on a fresh queue.

use std::collections::BTreeMap;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::queue::tests::check_invariants;
use super::*;

const TIMEOUT: Millis = 1_000;
const STEPS: usize = 5_000;
const SEEDS: std::ops::RangeInclusive<u64> = 1..=12;

/// A live attempt as the model sees it.
#[derive(Debug, Clone, Copy)]
struct LiveAttempt {
    split: u32,
    worker: WorkerId,
    deadline: Millis,
}

/// What the queue should hold, kept by simple rules independent of its code.
#[derive(Debug, Default)]
struct Model {
    epoch: u32,
    over: bool,
    attempts: Vec<u32>,
    committed: Vec<u64>,
    resolved: Vec<bool>,
    live: BTreeMap<AttemptId, LiveAttempt>,
    lost: BTreeMap<WorkerId, Vec<AttemptId>>,
    done_total: u64,
    failed_total: usize,
}

/// Paths the simulation went down, to prove it exercised them.
#[derive(Debug, Default, Clone, Copy)]
struct Coverage {
    epochs: u32,
    expired: u32,
    retried: u32,
    failed: u32,
    stale: u32,
    backwards: u32,
    waits: u32,
}

/// A report a worker may send about one of its leases.
#[derive(Debug, Clone)]
enum Report {
    Commit(u64),
    Finish(u64),
    Fail,
}

struct SimWorker {
    id: WorkerId,
    /// Leases the worker believes it holds, with the rows it has committed so far.
    held: Vec<(Lease, u64)>,
}

struct Sim {
    seed: u64,
    rng: ChaCha8Rng,
    queue: Queue,
    config: QueueConfig,
    now: Millis,
    rows: Vec<u64>,
    workers: Vec<SimWorker>,
    /// Leases of crashed workers, and ended attempts: sources of late reports.
    zombies: Vec<(Lease, u64)>,
    model: Model,
    log: Vec<(Command, Reply)>,
    coverage: Coverage,
    /// Epoch and per-split committed offsets at the last check, which must not shrink.
    seen: (u32, Vec<u64>),
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let splits = 10 + (rng.next_u64() % 50) as usize;
        let config = QueueConfig {
            epochs: 2 + (rng.next_u64() % 7) as u32,
            max_attempts: 1 + (rng.next_u64() % 4) as u32,
            lease_timeout_ms: TIMEOUT,
            seed,
        };
        let rows = (0..splits).map(|_| rng.next_u64() % 200).collect();
        let queue = Queue::new(splits, config.clone()).expect("valid config");
        let mut sim = Sim {
            seed,
            rng,
            queue,
            config,
            now: 0,
            rows,
            workers: Vec::new(),
            zombies: Vec::new(),
            model: Model::default(),
            log: Vec::new(),
            coverage: Coverage::default(),
            seen: (0, Vec::new()),
        };
        sim.reset_model_epoch();
        sim
    }

    fn pick(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n.max(1) as u64) as usize
    }

    fn apply(&mut self, command: Command) -> Reply {
        let reply = self.queue.apply(&command);
        self.log.push((command, reply.clone()));
        reply
    }

    fn run(&mut self) {
        for step in 0..STEPS {
            if self.model.over {
                break;
            }
            if self.workers.is_empty() {
                self.register();
            }
            match self.pick(100) {
                0..=2 if self.workers.len() < 10 => self.register(),
                3..=24 => {
                    let (index, max) = (self.pick(self.workers.len()), 1 + self.pick(3));
                    self.lease(index, max);
                }
                25..=56 => self.work(),
                57..=74 => self.heartbeat(),
                75..=77 => self.crash(),
                78..=85 => self.late_report(),
                _ => {
                    let by = self.pick(60) as Millis;
                    self.advance(by);
                }
            }
            self.check(step);
        }
        self.drain();
    }

    fn register(&mut self) {
        let Reply::Register(id) = self.apply(Command::Register { now: self.now }) else {
            panic!("seed {}: register answered otherwise", self.seed);
        };
        self.model.lost.insert(id, Vec::new());
        self.workers.push(SimWorker {
            id,
            held: Vec::new(),
        });
    }

    fn lease(&mut self, index: usize, max: usize) {
        let worker = self.workers[index].id;
        let reply = self.apply(Command::Lease {
            now: self.now,
            worker,
            max,
        });
        let seed = self.seed;
        match reply {
            Reply::Lease(Ok(LeaseReply::Tasks(leases))) => {
                assert!(!leases.is_empty() && leases.len() <= max, "seed {seed}");
                for lease in leases {
                    self.model_grant(&lease, worker);
                    self.workers[index].held.push((lease.clone(), lease.offset));
                }
            }
            Reply::Lease(Ok(LeaseReply::Wait)) => {
                self.coverage.waits += 1;
                assert!(!self.model.over, "seed {seed}: wait after the job is over");
                assert_eq!(self.queue.status().todo, 0, "seed {seed}: wait with todo");
                assert!(
                    !self.model.live.is_empty(),
                    "seed {seed}: wait with no lease"
                );
            }
            Reply::Lease(Ok(LeaseReply::JobOver)) => {
                assert!(self.model.over, "seed {seed}: job over too soon");
            }
            other => panic!("seed {seed}: lease answered {other:?}"),
        }
    }

    fn model_grant(&mut self, lease: &Lease, worker: WorkerId) {
        let (seed, split) = (self.seed, lease.split as usize);
        assert_eq!(lease.epoch, self.model.epoch, "seed {seed}: lease epoch");
        assert_eq!(
            lease.offset, self.model.committed[split],
            "seed {seed}: resume offset"
        );
        assert_eq!(lease.deadline, self.now + TIMEOUT, "seed {seed}: deadline");
        assert!(
            !self.model.resolved[split],
            "seed {seed}: leased a resolved task"
        );
        let double = self.model.live.values().any(|l| l.split == lease.split);
        assert!(!double, "seed {seed}: two live leases on split {split}");
        self.model.attempts[split] += 1;
        let live = LiveAttempt {
            split: lease.split,
            worker,
            deadline: lease.deadline,
        };
        assert!(
            self.model.live.insert(lease.attempt, live).is_none(),
            "seed {seed}"
        );
    }

    /// A live worker moves one of its leases forward: commit, finish or fail.
    fn work(&mut self) {
        let busy: Vec<usize> = (0..self.workers.len())
            .filter(|&i| !self.workers[i].held.is_empty())
            .collect();
        if busy.is_empty() {
            return;
        }
        let index = busy[self.pick(busy.len())];
        let slot = self.pick(self.workers[index].held.len());
        let (lease, position) = self.workers[index].held[slot].clone();
        let total = self.rows[lease.split as usize];
        let report = match self.pick(100) {
            0..=5 => Report::Fail,
            6..=8 => Report::Commit(position.saturating_sub(1 + self.pick(3) as u64)),
            _ if position >= total => Report::Finish(total),
            _ => Report::Commit((position + self.pick(60) as u64).min(total)),
        };
        let accepted = self.report(&lease, report.clone());
        match report {
            Report::Commit(offset) if accepted => self.workers[index].held[slot].1 = offset,
            _ if accepted || !self.model.live.contains_key(&lease.attempt) => {
                let ended = self.workers[index].held.remove(slot);
                self.zombies.push(ended);
            }
            _ => {} // a refused backwards commit: the lease is still live
        }
    }

    /// Sends `report` about `lease`, checks the reply against the model and updates it.
    /// Returns whether the queue accepted it.
    fn report(&mut self, lease: &Lease, report: Report) -> bool {
        let (seed, attempt) = (self.seed, lease.attempt);
        let expected = self.expect(lease, &report);
        let command = match report {
            Report::Commit(offset) => Command::Commit {
                now: self.now,
                attempt,
                offset,
            },
            Report::Finish(rows) => Command::Finish {
                now: self.now,
                attempt,
                rows,
            },
            Report::Fail => Command::Fail {
                now: self.now,
                attempt,
                reason: format!("attempt {attempt} broke"),
            },
        };
        let reply = self.apply(command);
        assert_eq!(reply, expected, "seed {seed}: report on {lease:?}");
        reply.changed()
    }

    /// The reply the queue must give to `report`, with the model updated to match.
    fn expect(&mut self, lease: &Lease, report: &Report) -> Reply {
        let attempt = lease.attempt;
        let split = lease.split as usize;
        let stale = QueueError::Stale { attempt };
        let live = self.model.live.contains_key(&attempt);
        let committed = self.model.committed[split];
        let backwards = |offset| QueueError::OffsetBackwards {
            attempt,
            committed,
            offset,
        };
        if !live {
            self.coverage.stale += 1;
        }
        match *report {
            Report::Commit(_) | Report::Finish(_) if !live => {
                if matches!(report, Report::Commit(_)) {
                    Reply::Commit(Err(stale))
                } else {
                    Reply::Finish(Err(stale))
                }
            }
            Report::Fail if !live => Reply::Fail(Err(stale)),
            Report::Commit(offset) if offset < committed => {
                self.coverage.backwards += 1;
                Reply::Commit(Err(backwards(offset)))
            }
            Report::Finish(rows) if rows < committed => Reply::Finish(Err(backwards(rows))),
            Report::Commit(offset) => {
                self.model.committed[split] = offset;
                if let Some(live) = self.model.live.get_mut(&attempt) {
                    live.deadline = live.deadline.max(self.now + TIMEOUT);
                }
                Reply::Commit(Ok(()))
            }
            Report::Finish(rows) => {
                self.model.live.remove(&attempt);
                self.model.committed[split] = rows;
                self.model.done_total += 1;
                self.resolve(split);
                Reply::Finish(Ok(()))
            }
            Report::Fail => {
                self.model.live.remove(&attempt);
                Reply::Fail(Ok(self.model_end_attempt(split)))
            }
        }
    }

    fn model_end_attempt(&mut self, split: usize) -> FailOutcome {
        if self.model.attempts[split] < self.config.max_attempts {
            self.coverage.retried += 1;
            return FailOutcome::Retried;
        }
        self.coverage.failed += 1;
        self.model.failed_total += 1;
        self.resolve(split);
        FailOutcome::Failed
    }

    fn resolve(&mut self, split: usize) {
        self.model.resolved[split] = true;
        if self.model.resolved.iter().all(|r| *r) {
            assert!(
                self.model.live.is_empty(),
                "seed {}: resolved with leases",
                self.seed
            );
            self.coverage.epochs += 1;
            if self.model.epoch + 1 < self.config.epochs {
                self.model.epoch += 1;
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
    }

    fn heartbeat(&mut self) {
        let index = self.pick(self.workers.len());
        let worker = self.workers[index].id;
        let lost = std::mem::take(self.model.lost.entry(worker).or_default());
        let renewed = self.now + TIMEOUT;
        for live in self.model.live.values_mut().filter(|l| l.worker == worker) {
            live.deadline = live.deadline.max(renewed);
        }
        let reply = self.apply(Command::Heartbeat {
            now: self.now,
            worker,
        });
        assert_eq!(
            reply,
            Reply::Heartbeat(Ok(lost.clone())),
            "seed {}",
            self.seed
        );
        let held = &mut self.workers[index].held;
        let (dropped, kept): (Vec<_>, Vec<_>) =
            held.drain(..).partition(|(l, _)| lost.contains(&l.attempt));
        *held = kept;
        self.zombies.extend(dropped);
    }

    fn crash(&mut self) {
        if self.workers.len() > 1 {
            let index = self.pick(self.workers.len());
            let worker = self.workers.swap_remove(index);
            self.zombies.extend(worker.held);
        }
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

    fn advance(&mut self, by: Millis) {
        self.now += by;
        let now = self.now;
        let due: Vec<(AttemptId, LiveAttempt)> = self
            .model
            .live
            .iter()
            .filter(|(_, l)| l.deadline <= now)
            .map(|(a, l)| (*a, *l))
            .collect();
        let mut expected = Vec::new();
        for (attempt, live) in due {
            let epoch = self.model.epoch;
            self.model.live.remove(&attempt);
            self.model
                .lost
                .entry(live.worker)
                .or_default()
                .push(attempt);
            self.coverage.expired += 1;
            expected.push(Expired {
                attempt,
                worker: live.worker,
                epoch,
                split: live.split,
                outcome: self.model_end_attempt(live.split as usize),
            });
        }
        let reply = self.apply(Command::Tick { now });
        assert_eq!(
            reply,
            Reply::Tick(expected),
            "seed {}: tick at {now}",
            self.seed
        );
    }

    /// A reliable worker finishes whatever is left, so every epoch must complete.
    fn drain(&mut self) {
        self.register();
        let index = self.workers.len() - 1;
        for round in 0..10 * self.config.epochs as usize + 10 {
            if self.model.over {
                break;
            }
            self.advance(2 * TIMEOUT);
            self.lease(index, self.rows.len());
            let held = std::mem::take(&mut self.workers[index].held);
            for (lease, _) in held {
                let rows = self.rows[lease.split as usize];
                assert!(
                    self.report(&lease, Report::Finish(rows)),
                    "seed {}",
                    self.seed
                );
            }
            self.check(STEPS + round);
        }
        assert!(self.model.over, "seed {}: job never ended", self.seed);
    }

    /// Compares the queue with the model, split by split.
    fn check(&mut self, step: usize) {
        self.check_offsets_grow(step);
        let (q, m, seed) = (&self.queue, &self.model, self.seed);
        let at = format!("seed {seed} step {step}");
        if let Err(broken) = check_invariants(q) {
            panic!("{at}: {broken}");
        }
        let s = q.status();
        assert_eq!(
            s.todo + s.leased + s.done + s.failed,
            self.rows.len(),
            "{at}: lost"
        );
        assert_eq!((q.epoch(), q.is_over()), (m.epoch, m.over), "{at}: epoch");
        for (split, task) in q.tasks().iter().enumerate() {
            assert_eq!(
                task.attempts, m.attempts[split],
                "{at}: attempts of {split}"
            );
            let resolved = matches!(
                task.state,
                TaskState::Done { .. } | TaskState::Failed { .. }
            );
            assert_eq!(resolved, m.resolved[split], "{at}: split {split} {task:?}");
            match task.state {
                TaskState::Todo { offset } => assert_eq!(offset, m.committed[split], "{at}"),
                TaskState::Leased {
                    attempt,
                    worker,
                    deadline,
                    offset,
                } => {
                    let live = m.live.get(&attempt).expect("model knows the lease");
                    assert_eq!((live.split as usize, live.worker), (split, worker), "{at}");
                    assert_eq!(
                        (live.deadline, offset),
                        (deadline, m.committed[split]),
                        "{at}"
                    );
                }
                TaskState::Done { .. } | TaskState::Failed { .. } => {}
            }
        }
        assert_eq!(s.leased, m.live.len(), "{at}: live leases");
        assert_eq!(
            (s.tasks_done, s.failures.len()),
            (m.done_total, m.failed_total),
            "{at}"
        );
    }

    /// Committed offsets of the current epoch never decrease, step after step.
    fn check_offsets_grow(&mut self, step: usize) {
        let offsets: Vec<u64> = (self.queue.tasks().iter())
            .map(|task| match &task.state {
                TaskState::Todo { offset } | TaskState::Leased { offset, .. } => *offset,
                TaskState::Done { rows } => *rows,
                TaskState::Failed { .. } => u64::MAX,
            })
            .collect();
        let epoch = self.queue.epoch();
        if epoch == self.seen.0 && !self.seen.1.is_empty() {
            for (split, (before, after)) in self.seen.1.iter().zip(&offsets).enumerate() {
                let seed = self.seed;
                assert!(
                    after >= before,
                    "seed {seed} step {step}: split {split} offset {before} -> {after}"
                );
            }
        }
        self.seen = (epoch, offsets);
    }

    /// Replays the recorded log on a fresh queue: same replies, same queue; then
    /// replays only the commands that changed something: same queue again.
    fn check_replay(&self) {
        let seed = self.seed;
        let fresh = || Queue::new(self.rows.len(), self.config.clone()).expect("valid config");
        let mut replayed = fresh();
        for (i, (command, reply)) in self.log.iter().enumerate() {
            assert_eq!(&replayed.apply(command), reply, "seed {seed}: command {i}");
        }
        assert_eq!(replayed, self.queue, "seed {seed}: full replay");
        assert_eq!(replayed.status(), self.queue.status(), "seed {seed}");
        let mut journaled = fresh();
        for (command, _) in self.log.iter().filter(|(_, reply)| reply.changed()) {
            journaled.apply(command);
        }
        assert_eq!(journaled, self.queue, "seed {seed}: replay of changes only");
    }
}

#[test]
fn simulated_workers_never_lose_a_task_or_pass_a_stale_report() {
    let mut total = Coverage::default();
    for seed in SEEDS {
        let mut sim = Sim::new(seed);
        sim.run();
        let expected = sim.rows.len() as u64 * u64::from(sim.config.epochs);
        let m = &sim.model;
        assert_eq!(
            m.done_total + m.failed_total as u64,
            expected,
            "seed {seed}"
        );
        assert_eq!(
            sim.coverage.epochs, sim.config.epochs,
            "seed {seed}: epochs"
        );
        assert_eq!(sim.queue.failures().len(), m.failed_total, "seed {seed}");
        sim.check_replay();
        let c = sim.coverage;
        total = Coverage {
            epochs: total.epochs + c.epochs,
            expired: total.expired + c.expired,
            retried: total.retried + c.retried,
            failed: total.failed + c.failed,
            stale: total.stale + c.stale,
            backwards: total.backwards + c.backwards,
            waits: total.waits + c.waits,
        };
    }
    let c = total;
    let covered = [
        c.expired,
        c.retried,
        c.failed,
        c.stale,
        c.backwards,
        c.waits,
    ];
    assert!(
        covered.iter().all(|n| *n > 0),
        "a path was never taken: {c:?}"
    );
}

#[test]
fn a_random_command_log_replays_to_the_same_queue() {
    for seed in SEEDS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let config = QueueConfig {
            epochs: 3,
            max_attempts: 2,
            lease_timeout_ms: 50,
            seed,
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
        0 => Command::Register { now },
        1 | 2 => Command::Lease {
            now,
            worker,
            max: (rng.next_u64() % 4) as usize,
        },
        3 => Command::Heartbeat { now, worker },
        4 => Command::Commit {
            now,
            attempt,
            offset,
        },
        5 => Command::Finish {
            now,
            attempt,
            rows: offset,
        },
        6 => Command::Fail {
            now,
            attempt,
            reason: format!("reason {offset}"),
        },
        _ => Command::Tick { now },
    }
}
