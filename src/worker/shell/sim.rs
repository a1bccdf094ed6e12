//! A seeded simulation of workers' real [`super::Shell`]s against the real
//! queue: the coordinator and every action it asks for, the batcher, the
//! global shuffle, the stepper and the one delivery to the devices, driven
//! as its loop drives them, with the real committer and heartbeats on the
//! same single-threaded runtime, over an in-memory master (the real queue,
//! unreachable now and then), readers and trainers and a clock the
//! simulation moves (see [`super::sim_world`] and [`super::sim_worker`]).
//!
//! Each seed runs a job (splits of random sizes, a few epochs) with one to
//! three workers at a time, each with one to three devices of very
//! different speeds, under `--lockstep` on some seeds and `--shuffle global`
//! on others. Readers deliver rows in chunks, leave some out, and now and
//! then fail (the task is leased again from what was committed); trainers
//! that keep checkpoints write them and restart from their last one (the
//! rows they acknowledged since are read again), and on a quarter of the
//! seeds a read again fails now and then, which ends the worker's run. On
//! a sixth of the seeds one worker runs at a time and nothing else befalls
//! it. On the others workers are killed (on
//! two seeds in three), stopped (their leases handed back once their
//! trainers finish or their grace ends), the master is unreachable (past
//! the leases' timeout on two seeds in three: leases lapse by the workers'
//! clocks, their rows held back, and are lost when the master took them
//! back), and workers join. After the first 3,000 steps the job ends in
//! peace: nothing befalls the workers, trainers restart no more and slow
//! ones catch up.
//!
//! On a third of the seeds the master keeps the rows the trainers hold in
//! no complete checkpoint, as a remote master does: a lease lost (or the
//! worker counted gone, silent past the lease timeout with unsaved rows)
//! rolls the worker back: its run ends, its reports still go out, and it
//! joins again under its name, its trainers from the name's last checkpoint
//! the master recorded. What they trained since is lost, and so is what a
//! killed or stopped worker's trainers held in no checkpoint: the master
//! serves those rows again once it counts the worker gone. A run ends with
//! a final checkpoint on every device, and joins again while the job is not
//! over; a worker may also join under the name of one that left, resuming
//! from its checkpoint.
//!
//! On a fifth of the seeds the job is a master's of `--world-size`, read
//! in global batches (see [`super::sim_ranks`]): its splits cut into the
//! lanes of a small global batch, a roster of names of one to three
//! devices each (as many or not) whose devices are the world's ranks; now
//! and then a name joins again with another number of devices, another
//! name not running taking or giving the difference. Each worker takes its
//! ranks before it leases (ranks that need not follow each other, and it
//! never waits while as many as it has devices are free), is leased only
//! its lanes' tasks, and each batch a device gets is checked for its rank
//! and lanes.
//!
//! Checked on every path, as the master applies each request: nothing is
//! committed that no device of the attempt's worker acknowledged (or that
//! its reader left out); no row is committed by two attempts (rows served
//! again after their worker was lost are committed again, by a lease of
//! them). At the end (see [`super::sim_checks`]): every row of every epoch
//! is committed or in the job's checkpoint; on a seed where nothing was
//! lost, every row reached a trainer exactly once (rows a restarted trainer
//! lost count as not reached, until they are served again); where
//! the master keeps unsaved rows, every row of every epoch is in exactly
//! one name's last recorded checkpoint, by the simulation's own account of
//! what each device trained before each checkpoint line.
//!
//! Every path named at the end of the test is taken by some seed.
//! `SLUICE_SIM_SEED=N` runs seed `N` alone (to replay a failure), and
//! `SLUICE_SIM_TRACE` prints what happens.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::drive::Close;
use super::sim_ranks::World;
use super::sim_worker::{Fate, Row, Start, Trainer, Worker};
use super::sim_world::{Books, SimClock, SimMaster};
use super::PipelineError;
use crate::queue::{Queue, QueueConfig, WorkerId};
use crate::worker::pipeline_config::{PipelineConfig, Stop};

const SEEDS: u64 = 600;
/// Steps in which things befall the workers; then the job ends in peace.
const STEPS: usize = 3_000;
const MAX_STEPS: usize = 60_000;
/// The master's lease timeout.
const TIMEOUT: u64 = 400;
/// How much earlier a lease lapses by a worker's clock than by the
/// master's.
const MARGIN: u64 = 50;

/// A worker's name. On seeds whose master keeps unsaved rows, its trainers
/// outlive each run: one started again under it (after a roll back, a kill,
/// a stop or the end of its run) resumes from its last checkpoint the
/// master recorded.
pub(super) struct Name {
    /// Its devices' speeds.
    speeds: Vec<u64>,
    /// The last complete checkpoint the master recorded for it, and the
    /// rows it holds (the model its trainers resume from).
    pub(super) saved: Option<(String, Vec<Row>)>,
    /// A worker ran under it.
    ran: bool,
}

/// A worker whose run just ended, for the checkpoints the master recorded
/// of it: its id, name, trainers and the rows they resumed from.
type Parts<'a> = (WorkerId, usize, &'a [Trainer], &'a [Row]);

pub(super) struct Sim {
    pub(super) seed: u64,
    rng: ChaCha8Rng,
    pub(super) rows: Arc<Vec<u64>>,
    pub(super) epochs: u32,
    checkpoints: bool,
    /// The master keeps the rows the trainers hold in no checkpoint, and a
    /// lost lease rolls them back.
    pub(super) rollback: bool,
    /// Workers are killed and the master stays away past the leases.
    chaos: bool,
    /// One worker at a time, and nothing befalls it.
    solo: bool,
    lockstep: bool,
    global: bool,
    /// A master's job of `--world-size` (see [`super::sim_ranks`]).
    world: Option<Arc<World>>,
    pub(super) master: Arc<SimMaster>,
    clock: SimClock,
    workers: Vec<Worker>,
    pub(super) names: Vec<Name>,
    /// Times each row is in a trainer's model.
    pub(super) trained: HashMap<Row, i64>,
    pub(super) lossy: bool,
    step: usize,
    tracing: bool,
    pub(super) seen: HashSet<&'static str>,
}

impl Fate for Sim {
    fn pick(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }

    fn trained(&mut self, rows: &[Row], by: i64) {
        for row in rows {
            *self.trained.entry(*row).or_default() += by;
        }
    }

    fn saw(&mut self, path: &'static str) {
        self.seen.insert(path);
    }

    fn lossy(&mut self) {
        self.lossy = true;
    }

    /// After the steps in which things befall the workers: slow trainers,
    /// that restart about as often as they train, would keep the job from
    /// ending.
    fn peaceful(&self) -> bool {
        self.step > STEPS
    }

    /// On a quarter of the seeds, so that the others end every run well.
    fn reads_again_fail(&self) -> bool {
        (self.seed / 6) % 4 == 3
    }

    fn trace(&self, line: std::fmt::Arguments) {
        if self.tracing {
            eprintln!("{} t{}: {line}", self.step, self.clock.millis());
        }
    }
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let splits = 2 + (rng.next_u64() % 8) as usize;
        let epochs = 1 + (rng.next_u64() % 3) as u32;
        let mut rows: Vec<u64> = (0..splits).map(|_| rng.next_u64() % 60).collect();
        let solo = seed % 6 == 0;
        let world = (seed % 5 == 4).then(|| {
            rows.iter_mut().for_each(|r| *r += 20);
            let names = if solo { 1 } else { 1 + rng.next_u64() % 3 };
            Arc::new(World::new(&mut rng, &rows, names))
        });
        if let Some(world) = &world {
            rows = world.task_rows();
        }
        let config = QueueConfig {
            epochs,
            max_attempts: 1_000,
            lease_timeout_ms: TIMEOUT,
            seed,
            follow: false,
            affinity_wait_ms: 0,
            interleave: None,
            lanes: world.as_ref().map(|w| (*w.lanes).clone()),
            world: world.as_ref().map(|w| w.world),
        };
        let queue = Queue::with_rows(rows.iter().copied().map(Some).collect(), config)
            .expect("valid config");
        let rollback = matches!(seed % 6, 3 | 5);
        let clock = SimClock::new();
        let views = solo || world.is_some();
        let master = SimMaster::new(Books::new(queue), clock.clone(), rollback, views);
        let names = world
            .as_ref()
            .map_or_else(Vec::new, |w| roster(&mut rng, &w.roster));
        Sim {
            seed,
            rng,
            rows: Arc::new(rows),
            epochs,
            checkpoints: seed % 2 == 0 || rollback,
            rollback,
            chaos: seed % 3 != 0,
            solo,
            lockstep: (seed / 6) % 4 == 1,
            global: (seed / 6) % 3 == 2 || world.is_some(),
            world,
            master: Arc::new(master),
            clock,
            workers: Vec::new(),
            names,
            trained: HashMap::new(),
            lossy: false,
            step: 0,
            tracing: std::env::var("SLUICE_SIM_TRACE").is_ok(),
            seen: HashSet::new(),
        }
    }

    /// A worker's pipeline settings.
    fn config(&mut self, devices: usize) -> PipelineConfig {
        let mut config = PipelineConfig {
            batch_size: 1 + self.pick(9) as usize,
            batch_bytes: None,
            devices,
            prefetch: 1 + self.pick(4) as usize,
            read_ahead: Some(u64::MAX / 4),
            read_retry: Duration::ZERO,
            shuffle_buffer: if self.chance(300) { 16 } else { 0 },
            shuffle_window: None,
            global_batch_size: None,
            lanes: None,
            world: None,
            seed: self.seed,
            lease_timeout: Some(Duration::from_millis(TIMEOUT - MARGIN)),
            stop: Some(Stop {
                signal: tokio::sync::watch::channel(false).1,
                grace: Duration::from_millis(self.pick(1_500)),
            }),
            lockstep: self.lockstep,
            drop_last: false,
            follow: false,
            select: Arc::new(Default::default()),
            only_worker: false,
        };
        if self.global {
            config.shuffle_window = Some(1 + self.pick(150));
            config.shuffle_buffer = 0;
        }
        if let Some(world) = &self.world {
            config.shuffle_window = Some(world.window);
            config.global_batch_size = Some(world.global);
            config.lanes = Some(world.lanes.clone());
            config.world = Some(world.world);
        }
        config
    }

    /// The paths of a worker's settings.
    fn note_config(&mut self, config: &PipelineConfig) {
        if config.lockstep {
            self.saw("lockstep");
        }
        if config.shuffle_window.is_some() {
            self.saw("global shuffle");
        }
        if config.lockstep && config.shuffle_window.is_some() {
            self.saw("global shuffle in lockstep");
        }
        if config.devices > 1 {
            self.saw("several devices");
        }
        if config.world.is_some() && config.lockstep {
            self.saw("world: in lockstep");
        }
    }

    async fn run(&mut self) {
        while self.step < MAX_STEPS {
            self.step += 1;
            if self.workers.is_empty() && self.master.books().queue.is_over() {
                break;
            }
            let advance = self.pick(12);
            self.clock.advance(advance);
            if self.step <= STEPS && !self.solo {
                self.mischief();
            }
            self.join().await;
            if self.workers.len() > 1 {
                self.saw("several workers");
                let devices = |w: &Worker| w.trainers.len();
                let first = devices(&self.workers[0]);
                if self.world.is_some() && self.workers.iter().any(|w| devices(w) != first) {
                    self.saw("world: workers of unequal devices");
                }
            }
            if !self.workers.is_empty() {
                let index = self.pick(self.workers.len() as u64) as usize;
                let worker = self.workers.swap_remove(index);
                self.turn(worker).await;
            }
            // The committers' and heartbeats' turn.
            tokio::task::yield_now().await;
            self.take_recorded(None);
            if let Some(why) = self.master.books().broken.clone() {
                panic!("seed {} step {}: {why}", self.seed, self.step);
            }
        }
        if !self.workers.is_empty() {
            let status = self.master.books().queue.status();
            panic!(
                "seed {}: the job did not end in {MAX_STEPS} steps: {status:?}",
                self.seed
            );
        }
        self.check_end();
    }

    /// A worker joins while none runs or, now and then, beside others:
    /// under a new name or (on seeds whose master keeps unsaved rows, now
    /// and then) under the name of one that left. Once the job is over, no
    /// worker joins it.
    async fn join(&mut self) {
        let more = !self.solo && self.workers.len() < 3 && self.chance(2);
        if !(self.workers.is_empty() || more) || !self.master.up() {
            return;
        }
        if self.master.books().queue.is_over() {
            return;
        }
        let free: Vec<usize> = (0..self.names.len())
            .filter(|n| !self.workers.iter().any(|w| w.name == *n))
            .collect();
        if self.world.is_some() && free.is_empty() {
            // Every name of the roster runs: the world is full.
            return;
        }
        self.saw(if self.workers.is_empty() {
            "one worker alone"
        } else {
            "a worker joins beside others"
        });
        // A world's roster, or now and then the name of one that left.
        let again = self.rollback && !free.is_empty() && self.chance(500);
        let name = if self.world.is_some() || again {
            free[self.pick(free.len() as u64) as usize]
        } else {
            let devices = 1 + self.pick(3);
            self.names.push(name(&mut self.rng, devices));
            self.names.len() - 1
        };
        if self.world.is_some() {
            self.reshape(name, &free);
        }
        self.start(name).await;
    }

    /// A name of a world's roster that ran before joins again, now and
    /// then, with another number of devices: another name not running
    /// takes or gives the difference, so that the roster's devices still
    /// make the world.
    fn reshape(&mut self, name: usize, free: &[usize]) {
        let others: Vec<usize> = free.iter().copied().filter(|&n| n != name).collect();
        if !self.names[name].ran || others.is_empty() || !self.chance(3) {
            return;
        }
        let other = others[self.pick(others.len() as u64) as usize];
        let had = self.names[name].speeds.len() as u64;
        let total = had + self.names[other].speeds.len() as u64;
        let shapes: Vec<u64> = (total.saturating_sub(3).max(1)..=(total - 1).min(3))
            .filter(|&d| d != had)
            .collect();
        if shapes.is_empty() {
            return;
        }
        let devices = shapes[self.pick(shapes.len() as u64) as usize];
        self.names[name].speeds = speeds(&mut self.rng, devices);
        self.names[other].speeds = speeds(&mut self.rng, total - devices);
        self.trace(format_args!(
            "n{name} joins with {devices} devices, n{other} has {}",
            total - devices
        ));
        self.saw("world: a name joins again with another number of devices");
    }

    /// A run of a worker under `name`: registered anew, its trainers from
    /// the name's last checkpoint the master recorded.
    async fn start(&mut self, name: usize) {
        let saved = self.names[name].saved.clone();
        if self.rollback {
            let books = self.master.books();
            assert_eq!(
                books.queue.checkpoint_of(&format!("n{name}")),
                saved.as_ref().map(|(id, _)| id.as_str()),
                "seed {}: the master resumes name {name} from another checkpoint",
                self.seed
            );
        }
        let resume = saved.map(|(id, rows)| {
            self.saw("resumed from a checkpoint");
            (id.parse().expect("numbered checkpoints"), rows)
        });
        self.names[name].ran = true;
        let speeds = self.names[name].speeds.clone();
        let config = self.config(speeds.len());
        self.note_config(&config);
        let start = Start {
            name,
            speeds,
            resume,
            checkpoints: self.checkpoints,
            rows: self.rows.clone(),
            world: self.world.clone(),
        };
        match Worker::start(&self.master, start, config).await {
            Ok(worker) => {
                self.trace(format_args!("w{} joins as n{name}", worker.id.0));
                self.workers.push(worker);
            }
            Err(e) => panic!("seed {}: {}", self.seed, connectors::Report(&e)),
        }
    }

    /// Kills, stops, master downtime.
    fn mischief(&mut self) {
        let now = self.clock.millis();
        if self.master.up() && self.chance(3) {
            let longest = if self.chaos { 2 * TIMEOUT } else { TIMEOUT / 4 };
            let until = now + 20 + self.pick(longest);
            self.trace(format_args!("the master is away until t{until}"));
            self.master.down(until);
            self.saw("master unreachable");
        }
        if self.chaos && !self.workers.is_empty() && self.chance(2) {
            self.take_recorded(None);
            let index = self.pick(self.workers.len() as u64) as usize;
            let worker = self.workers.swap_remove(index);
            self.trace(format_args!("w{} killed", worker.id.0));
            worker.kill();
            self.lossy = true;
            self.saw("worker killed");
        }
        if !self.workers.is_empty() && self.chance(3) {
            let index = self.pick(self.workers.len() as u64) as usize;
            let mut worker = self.workers.swap_remove(index);
            if worker.ended.is_some() || worker.draining() {
                return self.workers.push(worker);
            }
            if !worker.replaying.is_empty() {
                // Rows read again for a restarted trainer are dropped too.
                self.lossy = true;
            }
            self.trace(format_args!("w{} stops", worker.id.0));
            self.saw("stopped");
            match worker.shell.begin_drain() {
                Ok(()) => self.workers.push(worker),
                Err(e) => self.close(worker, Err(e)),
            }
        }
    }

    /// A worker's turn: a heartbeat is due, and while the master answers
    /// the heartbeats' word is taken and the shell's loop goes round; then
    /// one thing happens to its rows.
    async fn turn(&mut self, mut worker: Worker) {
        if worker.ended.is_some() {
            return self.end(worker).await;
        }
        let now = self.clock.millis();
        // Where a silent worker is counted gone (and alone, where nothing
        // befalls it) the heartbeats keep time, half a lease timeout apart,
        // besides the random ones: only the master's downtime silences them.
        let regular = self.rollback || self.solo;
        let due = regular && now >= worker.last_beat + TIMEOUT / 2;
        if due || self.chance(100) {
            worker.clock.beat();
            worker.last_beat = now;
        }
        let result = if self.master.up() {
            self.live(&mut worker).await
        } else {
            worker
                .lapse(self)
                .and_then(|()| worker.act(self).map(|()| false))
        };
        match result {
            Ok(false) => self.workers.push(worker),
            Ok(true) => self.close(worker, Ok(())),
            Err(e) => self.close(worker, Err(e)),
        }
    }

    /// A turn while the master answers; true when the run is over.
    async fn live(&mut self, worker: &mut Worker) -> Result<bool, PipelineError> {
        worker.take_beats(self).await?;
        if worker.step(self).await? {
            return Ok(true);
        }
        worker.act(self)?;
        Ok(false)
    }

    /// A worker's run ended with `result`: the shell closes it (its
    /// trainers' last words taken unless rolled back or stopped), then it
    /// waits for the master to take its last reports.
    fn close(&mut self, mut worker: Worker, result: Result<(), PipelineError>) {
        self.trace(format_args!("w{} run over: {result:?}", worker.id.0));
        match &result {
            Err(e) if e.is_gone() && worker.shell.coordinator.rolls_back() => {
                self.saw("rolled back when counted gone");
            }
            Err(PipelineError::RolledBack(_)) => self.saw("rolled back on a lost lease"),
            Err(PipelineError::Replay { .. }) => self.saw("a failed read again ends the run"),
            _ => {}
        }
        let parts = (
            worker.id,
            worker.name,
            &worker.trainers[..],
            &worker.base[..],
        );
        self.take_recorded(Some(parts));
        let (result, close) = worker.close(result, self);
        if close == Close::RolledBack {
            self.saw("rolled back");
        }
        worker.ended = Some((result, close));
        self.workers.push(worker);
    }

    /// Once the master answers, a worker whose run ended sends its last
    /// reports; then it joins again (rolled back, or its run ended while
    /// the job is not over) or leaves.
    async fn end(&mut self, mut worker: Worker) {
        if !self.master.up() {
            return self.workers.push(worker);
        }
        let Some((result, close)) = worker.ended.take() else {
            return self.workers.push(worker);
        };
        let (id, name) = (worker.id, worker.name);
        let (outcome, trainers, base) = worker.finish(result.is_ok()).await;
        self.take_recorded(Some((id, name, &trainers[..], &base[..])));
        let over = self.master.books().queue.is_over();
        match (close, result) {
            (Close::RolledBack, _) => self.start(name).await,
            (Close::Tail, Ok(())) => {
                if self.checkpoints {
                    assert!(
                        outcome.checkpointed,
                        "seed {}: trainers not checkpointed",
                        self.seed
                    );
                    assert_eq!(
                        outcome.unsaved_at_end, 0,
                        "seed {}: rows trained after the final checkpoint",
                        self.seed
                    );
                    self.saw("ended with a final checkpoint");
                }
                if !over {
                    self.saw("joined again after its run ended");
                    self.start(name).await;
                }
            }
            (Close::Left, _) => {}
            (_, Err(_)) => self.lossy = true,
        }
    }

    /// The complete checkpoints the master recorded since last looked: the
    /// worker's name resumes from them, the rows of its trainers' model
    /// then (by the simulation's account). `ended` is a worker no longer
    /// among the workers.
    fn take_recorded(&mut self, ended: Option<Parts<'_>>) {
        let recorded = std::mem::take(&mut self.master.books().recorded);
        for (worker, id) in recorded {
            let parts = self
                .workers
                .iter()
                .find(|w| w.id == worker)
                .map(|w| (w.id, w.name, &w.trainers[..], &w.base[..]))
                .or(ended.filter(|e| e.0 == worker));
            let Some((_, name, trainers, base)) = parts else {
                panic!("seed {}: checkpoint {id} of a worker gone", self.seed);
            };
            let mut rows = base.to_vec();
            for trainer in trainers {
                let Some(&line) = trainer.lines.get(&id) else {
                    panic!(
                        "seed {}: checkpoint {id} is complete but a device never wrote it",
                        self.seed
                    );
                };
                rows.extend_from_slice(&trainer.trained[..line]);
            }
            self.trace(format_args!("n{name} saved {id}"));
            self.names[name].saved = Some((id, rows));
        }
    }
}

/// A new name of `devices` devices of random speeds.
fn name(rng: &mut ChaCha8Rng, devices: u64) -> Name {
    Name {
        speeds: speeds(rng, devices),
        saved: None,
        ran: false,
    }
}

/// The speeds of `devices` devices, drawn.
fn speeds(rng: &mut ChaCha8Rng, devices: u64) -> Vec<u64> {
    let speeds = [1000, 400, 60];
    (0..devices)
        .map(|d| speeds[((d + rng.next_u64() % 3) % 3) as usize])
        .collect()
}

/// The names of a world's roster, of `devices` devices each.
fn roster(rng: &mut ChaCha8Rng, devices: &[u64]) -> Vec<Name> {
    devices.iter().map(|&d| name(rng, d)).collect()
}

/// Runs seed `seed`: the paths it took.
async fn run(seed: u64) -> HashSet<&'static str> {
    let mut sim = Sim::new(seed);
    sim.run().await;
    sim.seen
}

fn seeds() -> Vec<u64> {
    match std::env::var("SLUICE_SIM_SEED") {
        Ok(seed) => vec![seed.trim().parse().expect("SLUICE_SIM_SEED is a number")],
        Err(_) => (1..=SEEDS).collect(),
    }
}

/// Runs every seed in `seeds` on a runtime of its own; the paths they took. A
/// failing seed names itself for replay, then fails the test.
fn run_seeds(seeds: &[u64]) -> HashSet<&'static str> {
    let mut seen = HashSet::new();
    for &seed in seeds {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let run = std::panic::AssertUnwindSafe(|| runtime.block_on(run(seed)));
        match std::panic::catch_unwind(run) {
            Ok(paths) => seen.extend(paths),
            Err(e) => {
                eprintln!("replay: SLUICE_SIM_SEED={seed} cargo test -p sluice --lib shell::sim");
                std::panic::resume_unwind(e);
            }
        }
    }
    seen
}

#[test]
fn every_row_is_committed_once_whatever_befalls_the_workers() {
    // Seeds are independent: two threads take every other one, so the longest
    // unit test takes half the time beside the others.
    let seeds = seeds();
    let halves: [Vec<u64>; 2] = [
        seeds.iter().copied().step_by(2).collect(),
        seeds.iter().copied().skip(1).step_by(2).collect(),
    ];
    let mut seen = HashSet::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = halves
            .iter()
            .map(|half| scope.spawn(|| run_seeds(half)))
            .collect();
        for handle in handles {
            match handle.join() {
                Ok(paths) => seen.extend(paths),
                Err(e) => std::panic::resume_unwind(e),
            }
        }
    });
    if std::env::var("SLUICE_SIM_SEED").is_err() {
        for path in super::sim_checks::PATHS {
            assert!(seen.contains(path), "no seed took the path: {path}");
        }
    }
}
