//! A seeded simulation of the real [`Shell`]: the coordinator and every
//! action it asks for, the batcher, the global shuffle, the stepper and the
//! one delivery to the devices, driven as its loop drives them, over the real
//! queue (see [`super::sim_world`]), in-memory readers and trainers and a
//! clock the simulation moves. The committer is the real one, on the same
//! single-threaded runtime.
//!
//! Each seed runs a job (splits of random sizes, a few epochs) on one to
//! three devices of very different speeds, under `--lockstep` on some seeds
//! and `--shuffle global` on others. Readers deliver rows in chunks and now
//! and then fail (the task is leased again from what was committed);
//! trainers that keep checkpoints write them and restart from their last one
//! (the rows they acknowledged since are read again), and a read again that
//! fails ends the run, as it ends a worker.
//!
//! Checked on every path: no row is committed by two attempts (as the queue
//! accepts each commit); at the end of a run the queue is over, every row of
//! every epoch is committed, and every row of every epoch is in exactly one
//! trainer's model (rows a restarted trainer lost count as not trained until
//! they are served again). Every path named at the end of the test is taken
//! by some seed. `SLUICE_SIM_SEED=N` runs seed `N` alone (to replay a
//! failure), and `SLUICE_SIM_TRACE` prints what happens.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use connectors::{ReadPlan, Split};
use futures::FutureExt;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::mpsc;

use super::sim_world::{Books, SimClock, SimReaders, SimSource};
use super::{Job, PipelineError, Shell, Wiring};
use crate::epoch::Epoch;
use crate::protocol::TaskSource;
use crate::queue::{AttemptId, Queue, QueueConfig};
use crate::trainer::MarkKind;
use crate::worker::batcher::OutBatch;
use crate::worker::coordinator::{Event, Report};
use crate::worker::delivery::Lanes;
use crate::worker::devices::{DeviceEvent, Queues};
use crate::worker::pipeline_config::PipelineConfig;
use crate::worker::reader::{unskipped, ReadEvent};
use crate::worker::LeaseClock;

const SEEDS: u64 = 600;
const STEPS: usize = 60_000;
/// Rows of split `s` are ids `s * SPLIT_IDS ..`.
const SPLIT_IDS: i64 = 100_000;

/// A trainer: how fast it is, what it holds, what its model holds.
#[derive(Debug, Default)]
struct Trainer {
    /// Per mille chance of applying a batch in a step.
    speed: u64,
    /// Batches taken from its queue, not applied yet.
    held: Vec<OutBatch>,
    /// `(epoch, id)` of every row in its model, in order.
    trained: Vec<(Epoch, i64)>,
    /// Where in `trained` its last checkpoint was written.
    saved: usize,
    /// Its last checkpoint's number.
    checkpoints: u32,
}

/// A read the shell started, and where the simulation is in it.
#[derive(Debug)]
struct Read {
    epoch: Epoch,
    split: u32,
    end: u64,
    /// The next row to deliver.
    at: u64,
    /// The rows to deliver (outside the lease's skipped rows).
    runs: Vec<(u64, u64)>,
    fails_at: Option<u64>,
    over: bool,
    /// How the shell stops it: a stopped read tells nothing more.
    handle: tokio::task::AbortHandle,
}

/// Where the trainers take their batches from.
enum Inbox {
    Shared(mpsc::Receiver<OutBatch>),
    Own(Vec<mpsc::Receiver<OutBatch>>),
}

struct Sim {
    seed: u64,
    rng: ChaCha8Rng,
    rows: Vec<u64>,
    epochs: u32,
    checkpoints: bool,
    clock: SimClock,
    source: Arc<SimSource>,
    readers: SimReaders,
    reads: HashMap<AttemptId, Read>,
    /// The epoch and split of every read's attempt.
    origins: HashMap<AttemptId, (Epoch, u32)>,
    trainers: Vec<Trainer>,
    inbox: Inbox,
    /// Paths this seed took.
    seen: HashSet<&'static str>,
}

/// A job's read plan: one column, `id`.
fn plan() -> ReadPlan {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    ReadPlan {
        data_schema: schema,
        partition_fields: Vec::new(),
        columns: vec!["id".to_string()],
        options: Default::default(),
        file_columns: Default::default(),
        string_view: false,
        filter: None,
        sources: Vec::new(),
        source_names: Vec::new(),
        source_column: None,
        derived: Vec::new(),
        timezone: Default::default(),
    }
}

fn split(rows: u64) -> Split {
    Split {
        path: "part".to_string(),
        size: 1,
        format: connectors::Format::Parquet,
        codec: connectors::codec::Codec::None,
        partition_dir: String::new(),
        partition_values: Vec::new(),
        range: connectors::SplitRange::Whole,
        rows: Some(rows),
        deleted: Vec::new(),
        stamp: Default::default(),
        source: 0,
        window: None,
    }
}

/// The rows `start..end` of `split`, as ids.
fn rows(split: u32, start: u64, end: u64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let first = i64::from(split) * SPLIT_IDS + start as i64;
    let ids = Int64Array::from_iter_values(first..first + (end - start) as i64);
    RecordBatch::try_new(schema, vec![Arc::new(ids)]).expect("batch")
}

impl Sim {
    fn pick(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }

    /// A line of the trace (`SLUICE_SIM_TRACE`).
    fn trace(&self, line: std::fmt::Arguments) {
        if std::env::var("SLUICE_SIM_TRACE").is_ok() {
            eprintln!("t{}: {line}", self.clock.millis());
        }
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        self.pick(1000) < per_mille
    }

    /// The pipeline's settings of this seed.
    fn config(&mut self, devices: usize) -> PipelineConfig {
        let mut config = PipelineConfig {
            batch_size: 1 + self.pick(9) as usize,
            batch_bytes: None,
            devices,
            prefetch: 1 + self.pick(4) as usize,
            read_ahead: Some(u64::MAX / 4),
            read_retry: std::time::Duration::ZERO,
            shuffle_buffer: if self.chance(300) { 16 } else { 0 },
            shuffle_window: None,
            global_batch_size: None,
            lanes: None,
            world: None,
            seed: self.seed,
            lease_timeout: None,
            stop: None,
            lockstep: self.seed % 4 == 1,
            drop_last: false,
            follow: false,
            select: Arc::new(Default::default()),
            only_worker: false,
        };
        if self.seed % 3 == 2 {
            config.shuffle_window = Some(1 + self.pick(150));
            config.shuffle_buffer = 0;
        }
        config
    }
}

/// Runs seed `seed`: the paths it took.
async fn run(seed: u64) -> HashSet<&'static str> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let splits = 1 + (rng.next_u64() % 7) as usize;
    let epochs = 1 + (rng.next_u64() % 3) as u32;
    let counts: Vec<u64> = (0..splits).map(|_| rng.next_u64() % 50).collect();
    let queue_config = QueueConfig {
        epochs,
        max_attempts: 1_000,
        lease_timeout_ms: u64::MAX / 4,
        seed,
        follow: false,
        affinity_wait_ms: 0,
        interleave: None,
        lanes: None,
        world: None,
    };
    let queue = Queue::with_rows(counts.iter().copied().map(Some).collect(), queue_config)
        .expect("valid config");
    let clock = SimClock::new();
    let source = Arc::new(SimSource {
        books: Mutex::new(Books {
            queue,
            leases: HashMap::new(),
            owners: HashMap::new(),
        }),
        clock: clock.clone(),
    });
    let devices = 1 + (rng.next_u64() % 3) as usize;
    let mut sim = Sim {
        seed,
        rng,
        rows: counts,
        epochs,
        checkpoints: seed % 2 == 0,
        clock,
        source,
        readers: SimReaders::default(),
        reads: HashMap::new(),
        origins: HashMap::new(),
        trainers: Vec::new(),
        inbox: Inbox::Shared(mpsc::channel(1).1),
        seen: HashSet::new(),
    };
    let config = sim.config(devices);
    sim.drive(config).await;
    sim.seen
}

impl Sim {
    /// One worker's run, the real shell driven step by step.
    async fn drive(&mut self, config: PipelineConfig) {
        let devices = config.devices;
        let dealt = config.shuffle_window.is_some() && !config.lockstep;
        let (lanes, queues) = Lanes::open(devices, config.lockstep, dealt);
        self.inbox = match queues {
            Queues::Shared(rx) => Inbox::Shared(rx),
            Queues::PerDevice(rxs) | Queues::Dealt(rxs) => Inbox::Own(rxs),
        };
        let speeds = [1000, 400, 60];
        self.trainers = (0..devices)
            .map(|d| Trainer {
                speed: speeds[(d + self.pick(3) as usize) % speeds.len()],
                ..Trainer::default()
            })
            .collect();
        self.note_paths(&config);
        let source: Arc<dyn TaskSource> = self.source.clone();
        let worker = source.register().await.expect("registered");
        let (report_tx, report_rx) = mpsc::unbounded_channel::<Report>();
        let ending = crate::worker::committer::Ending::default();
        let committer = tokio::spawn(crate::worker::committer::committer(
            source.clone(),
            worker,
            report_rx,
            Default::default(),
            ending.clone(),
        ));
        let (read_tx, read_rx) = mpsc::channel::<ReadEvent>(1);
        let wiring = Wiring {
            read_tx,
            lanes,
            reports: report_tx,
            clock: LeaseClock::new(None),
            ending,
            readers: Arc::new(self.readers.clone()),
            time: Arc::new(self.clock.clone()),
        };
        let job = Job {
            source,
            location: connectors::store::open("file:///tmp").expect("location"),
            splits: Arc::new(self.rows.iter().map(|&r| split(r)).collect()),
            plan: Arc::new(plan()),
        };
        let mut shell = Shell::new(job, config, worker, wiring);
        let result = self.steps(&mut shell, &read_rx).await;
        match result {
            Ok(()) => {
                self.tail(&mut shell).await;
                let _ = shell.finish(true, committer).await;
                self.check_end();
            }
            Err(PipelineError::Replay { .. }) => {
                self.seen.insert("a failed read again ends the run");
                let _ = shell.finish(false, committer).await;
            }
            Err(e) => panic!("seed {}: {}", self.seed, connectors::Report(&e)),
        }
    }

    fn note_paths(&mut self, config: &PipelineConfig) {
        if config.lockstep {
            self.seen.insert("lockstep");
        }
        if config.shuffle_window.is_some() {
            self.seen.insert("global shuffle");
        }
        if config.lockstep && config.shuffle_window.is_some() {
            self.seen.insert("global shuffle in lockstep");
        }
        if self.trainers.len() > 1 {
            self.seen.insert("several devices");
        }
    }

    /// The shell's loop, one thing at a time, until the run is over.
    async fn steps(
        &mut self,
        shell: &mut Shell,
        read_rx: &mpsc::Receiver<ReadEvent>,
    ) -> Result<(), PipelineError> {
        let mut flushed = false;
        if self.checkpoints {
            for device in 0..self.trainers.len() {
                shell.on_device(DeviceEvent::Mark {
                    device,
                    kind: MarkKind::Declared,
                })?;
            }
        }
        for _ in 0..STEPS {
            let advance = 1 + self.pick(20);
            self.clock.advance(advance);
            if shell.step(read_rx, &mut flushed).await? {
                return Ok(());
            }
            match self.pick(10) {
                0..=3 => {
                    if self.read(shell)? {
                        flushed = false;
                    }
                }
                4..=5 => self.deliver(shell)?,
                6..=8 => self.train(shell)?,
                _ => self.mark(shell)?,
            }
            // The committer's turn.
            tokio::task::yield_now().await;
        }
        panic!("seed {}: the run did not end in {STEPS} steps", self.seed);
    }

    /// The next batch (or step) goes to the trainers' queues if they have
    /// room.
    fn deliver(&mut self, shell: &mut Shell) -> Result<(), PipelineError> {
        let door = shell.delivery.door();
        let room = door.room().now_or_never();
        if let Some(room) = room {
            shell.send(room)?;
        }
        Ok(())
    }

    /// A reader delivers rows of one of the reads running (or its end, or
    /// its failure). Whether it delivered anything.
    fn read(&mut self, shell: &mut Shell) -> Result<bool, PipelineError> {
        self.take_started();
        let mut running: Vec<_> = self
            .reads
            .iter()
            .filter(|(_, r)| !r.over && !r.handle.is_finished())
            .map(|(a, _)| *a)
            .collect();
        running.sort();
        if running.is_empty() {
            return Ok(false);
        }
        let attempt = running[self.pick(running.len() as u64) as usize];
        let event = self.next_event(attempt);
        self.trace(format_args!("{event:?}"));
        match event {
            Some(event) => shell.on_read(event).map(|()| true),
            None => Ok(false),
        }
    }

    /// The reads the shell started since last looked.
    fn take_started(&mut self) {
        let started = std::mem::take(&mut *self.readers.started.lock().expect("readers"));
        for s in started {
            let end = self.rows[s.lease.split as usize];
            let runs = unskipped(s.lease.offset, end, &s.lease.skip);
            // Reads outside any lease count their ids down from the top.
            let replay = s.lease.attempt.0 > u64::MAX / 2;
            let fails = if replay {
                self.chance(60)
            } else {
                self.chance(80)
            };
            let fails_at = fails.then(|| s.lease.offset + self.pick(end + 1 - s.lease.offset));
            let read = Read {
                epoch: s.lease.epoch,
                split: s.lease.split,
                end,
                at: s.lease.offset,
                runs,
                fails_at,
                over: false,
                handle: s.handle,
            };
            self.trace(format_args!("read {:?} fails at {fails_at:?}", s.lease));
            self.origins
                .insert(s.lease.attempt, (s.lease.epoch, s.lease.split));
            self.reads.insert(s.lease.attempt, read);
        }
    }

    /// The next thing the read of `attempt` tells: rows, its failure, or
    /// its end.
    fn next_event(&mut self, attempt: AttemptId) -> Option<ReadEvent> {
        let chunk = 1 + self.pick(12);
        let read = self.reads.get_mut(&attempt)?;
        let (epoch, split, at) = (read.epoch, read.split, read.at);
        let next = read.runs.iter().find(|(_, e)| *e > at).copied();
        let (start, end) = match next {
            Some((s, e)) => (s.max(at), e.min(s.max(at) + chunk)),
            None => (read.end, read.end),
        };
        if let Some(fails_at) = read.fails_at.filter(|f| *f <= start) {
            read.over = true;
            let error = connectors::Error::Corrupt {
                path: "part".to_string(),
                format: "parquet".to_string(),
                reason: "simulated".to_string(),
            };
            self.seen.insert(if attempt.0 > u64::MAX / 2 {
                "a read again fails"
            } else {
                "a read fails"
            });
            let at = fails_at.max(at);
            return Some(ReadEvent::Failed { attempt, at, error });
        }
        if next.is_none() {
            read.over = true;
            return Some(ReadEvent::Done {
                attempt,
                end: read.end,
            });
        }
        let end = read.fails_at.map_or(end, |f| end.min(f));
        read.at = end;
        let batch = rows(split, start, end);
        let held = connectors::ReadAhead::unbounded()
            .reserve(0)
            .now_or_never()
            .expect("no wait for an unbounded budget");
        Some(ReadEvent::Batch {
            attempt,
            epoch,
            start,
            batch,
            held,
        })
    }

    /// A trainer takes a batch from its queue, or applies one it holds.
    fn train(&mut self, shell: &mut Shell) -> Result<(), PipelineError> {
        let device = self.pick(self.trainers.len() as u64) as usize;
        let speed = self.trainers[device].speed;
        if !self.trainers[device].held.is_empty() && self.chance(speed) {
            return self.train_device(shell, device);
        }
        if self.trainers[device].held.len() < 2 {
            let taken = match &mut self.inbox {
                Inbox::Shared(rx) => rx.try_recv().ok(),
                Inbox::Own(rxs) => rxs.get_mut(device).and_then(|rx| rx.try_recv().ok()),
            };
            self.trainers[device].held.extend(taken);
        }
        Ok(())
    }

    /// Where trainers keep checkpoints: one writes its next, or restarts
    /// from its last (what it applied since is lost, and read again).
    fn mark(&mut self, shell: &mut Shell) -> Result<(), PipelineError> {
        if !self.checkpoints {
            return Ok(());
        }
        let device = self.pick(self.trainers.len() as u64) as usize;
        let trainer = &mut self.trainers[device];
        if self.rng.next_u64() % 5 == 0 {
            let lost = trainer.trained.len() - trainer.saved;
            let line = format!(
                "device {device} restarts, losing {:?}",
                &trainer.trained[trainer.saved..]
            );
            self.trace(format_args!("{line}"));
            let trainer = &mut self.trainers[device];
            trainer.trained.truncate(trainer.saved);
            if lost > 0 {
                self.seen.insert("a trainer restarts from its checkpoint");
            }
            return shell.on_device(DeviceEvent::Mark {
                device,
                kind: MarkKind::Restarted,
            });
        }
        trainer.checkpoints += 1;
        trainer.saved = trainer.trained.len();
        let id = trainer.checkpoints.to_string();
        let line = format!("device {device} checkpoint {id}");
        self.trace(format_args!("{line}"));
        self.seen.insert("checkpoints");
        shell.on_device(DeviceEvent::Mark {
            device,
            kind: MarkKind::Checkpoint(id),
        })
    }

    /// The run's loop is over: the trainers apply what they hold and their
    /// queues hold, and end their streams (a final checkpoint each).
    async fn tail(&mut self, shell: &mut Shell) {
        shell.coordinator.handle(Event::Tail);
        shell.delivery.close();
        let seed = self.seed;
        for device in 0..self.trainers.len() {
            loop {
                let taken = match &mut self.inbox {
                    Inbox::Shared(rx) => rx.try_recv().ok(),
                    Inbox::Own(rxs) => rxs.get_mut(device).and_then(|rx| rx.try_recv().ok()),
                };
                self.trainers[device].held.extend(taken);
                if self.trainers[device].held.is_empty() {
                    break;
                }
                self.trainers[device].speed = 1000;
                if let Err(e) = self.train_device(shell, device) {
                    panic!("seed {seed}: {}", connectors::Report(&e));
                }
            }
        }
        if self.checkpoints {
            for device in 0..self.trainers.len() {
                let trainer = &mut self.trainers[device];
                trainer.checkpoints += 1;
                trainer.saved = trainer.trained.len();
                let kind = MarkKind::Checkpoint(trainer.checkpoints.to_string());
                if let Err(e) = shell.on_device(DeviceEvent::Mark { device, kind }) {
                    panic!("seed {seed}: {}", connectors::Report(&e));
                }
            }
        }
        tokio::task::yield_now().await;
    }

    /// Trainer `device` applies the batch it holds first: its rows, by the
    /// reads they came from, join its model.
    fn train_device(&mut self, shell: &mut Shell, device: usize) -> Result<(), PipelineError> {
        let out = self.trainers[device].held.remove(0);
        let rows = self.rows_of(&out);
        self.trace(format_args!("device {device} applies {rows:?}"));
        self.trainers[device].trained.extend(rows);
        shell.on_device(DeviceEvent::Applied {
            device,
            epoch: out.epoch,
            rows: out.data.num_rows(),
            provenance: out.provenance,
        })
    }

    /// The rows of `out` as `(epoch, id)`, by its provenance, which must
    /// name the rows its data holds.
    fn rows_of(&self, out: &OutBatch) -> Vec<(Epoch, i64)> {
        let mut rows = Vec::new();
        for piece in &out.provenance {
            let (epoch, split) = self.origins[&piece.attempt];
            let first = i64::from(split) * SPLIT_IDS + piece.start as i64;
            rows.extend((first..first + piece.len as i64).map(|id| (epoch, id)));
        }
        let mut named: Vec<i64> = rows.iter().map(|(_, id)| *id).collect();
        let mut held: Vec<i64> = out
            .data
            .column(0)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec();
        named.sort_unstable();
        held.sort_unstable();
        assert_eq!(
            named, held,
            "seed {}: a batch's provenance names other rows than it holds",
            self.seed
        );
        rows
    }

    /// At the end: the queue is over, every row of every epoch committed
    /// (by one attempt, as checked on the way) and in exactly one model.
    fn check_end(&self) {
        let seed = self.seed;
        let books = self.source.books.lock().expect("books");
        assert!(books.queue.is_over(), "seed {seed}: the queue is not over");
        let mut trained: HashMap<(Epoch, i64), usize> = HashMap::new();
        for trainer in &self.trainers {
            for row in &trainer.trained {
                *trained.entry(*row).or_default() += 1;
            }
        }
        for epoch in (0..self.epochs).map(Epoch) {
            for (split, &rows) in self.rows.iter().enumerate() {
                let owners = books.owners.get(&(epoch, split as u32));
                for row in 0..rows {
                    assert!(
                        owners.is_some_and(|o| o.contains_key(&row)),
                        "seed {seed}: row {row} of split {split} in epoch {epoch} never committed"
                    );
                    let id = split as i64 * SPLIT_IDS + row as i64;
                    let times = trained.remove(&(epoch, id)).unwrap_or(0);
                    assert_eq!(
                        times, 1,
                        "seed {seed}: row {row} of split {split} in epoch {epoch} trained {times} times"
                    );
                }
            }
        }
        assert!(
            trained.is_empty(),
            "seed {seed}: rows of no task trained: {trained:?}"
        );
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("SLUICE_SIM_SEED") {
        Ok(seed) => vec![seed.trim().parse().expect("SLUICE_SIM_SEED is a number")],
        Err(_) => (0..SEEDS).collect(),
    }
}

#[test]
fn the_shell_commits_and_trains_every_row_once() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut seen = HashSet::new();
    for seed in seeds() {
        seen.extend(runtime.block_on(run(seed)));
    }
    if std::env::var("SLUICE_SIM_SEED").is_err() {
        for path in [
            "lockstep",
            "global shuffle",
            "global shuffle in lockstep",
            "several devices",
            "a read fails",
            "checkpoints",
            "a trainer restarts from its checkpoint",
            "a read again fails",
            "a failed read again ends the run",
        ] {
            assert!(seen.contains(path), "no seed took the path: {path}");
        }
    }
}
