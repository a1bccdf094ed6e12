//! One worker of the shell's simulation: the real [`Shell`] with its real
//! committer and heartbeats, in-memory readers (rows delivered in chunks,
//! cut now and then, reads that fail) and trainers of very different speeds
//! that hold back rows of leases in doubt and drop those of dead leases, as
//! the device threads do, and keep checkpoints.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use connectors::{ReadPlan, Split};
use futures::FutureExt;
use tokio::sync::mpsc;

use super::drive::Close;
use super::heartbeats::{Beat, Heartbeats};
use super::sim_ranks::World;
use super::sim_world::{add_range, SimClock, SimMaster, SimReaders, SimSource};
use super::{Job, PipelineError, Shell, Wiring};
use crate::epoch::Epoch;
use crate::protocol::{Halt, TaskSource};
use crate::queue::{AttemptId, WorkerId};
use crate::trainer::MarkKind;
use crate::worker::batcher::{self, OutBatch};
use crate::worker::coordinator::{Report, RunOutcome};
use crate::worker::delivery::Lanes;
use crate::worker::devices::{DeviceEvent, Queues};
use crate::worker::pipeline_config::PipelineConfig;
use crate::worker::reader::{unskipped, ReadEvent};
use crate::worker::LeaseClock;

/// Rows of split `s` are ids `s * SPLIT_IDS ..`.
pub(super) const SPLIT_IDS: i64 = 100_000;

/// A row: its epoch and id.
pub(super) type Row = (Epoch, i64);

/// The id of row `row` of split `split`.
pub(super) fn id(split: u32, row: u64) -> i64 {
    i64::from(split) * SPLIT_IDS + row as i64
}

/// A trainer: how fast it is, what it holds, what its model holds.
#[derive(Debug, Default)]
pub(super) struct Trainer {
    /// Per mille chance of applying a batch in a step.
    pub(super) speed: u64,
    /// A batch taken from its queue and not handed over yet (rows of a
    /// lease in doubt wait).
    next: Option<OutBatch>,
    /// Batches handed over, not applied yet.
    held: Vec<OutBatch>,
    /// The rows its model holds from this run, in order.
    pub(super) trained: Vec<Row>,
    /// Where in `trained` its last checkpoint line was written.
    saved: usize,
    /// Where in `trained` each checkpoint line of this run was written.
    pub(super) lines: HashMap<String, usize>,
    /// Its last checkpoint line's number.
    pub(super) checkpoints: u32,
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
    /// Rows read outside any lease (for a restarted trainer, or a window's
    /// context).
    again: bool,
    /// How the shell stops it: a stopped read tells nothing more.
    handle: tokio::task::AbortHandle,
}

/// Where the trainers take their batches from.
enum Inbox {
    Shared(mpsc::Receiver<OutBatch>),
    Own(Vec<mpsc::Receiver<OutBatch>>),
}

/// What the simulation does with a worker's rows: the seed's randomness,
/// the rows each trainer holds, and the paths taken.
pub(super) trait Fate {
    /// A number below `n`.
    fn pick(&mut self, n: u64) -> u64;
    /// True `per_mille` times in a thousand.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.pick(1000) < per_mille
    }
    /// `rows` joined a trainer's model (`by` 1) or left it (-1).
    fn trained(&mut self, rows: &[Row], by: i64);
    /// A path was taken.
    fn saw(&mut self, path: &'static str);
    /// Rows may reach trainers twice, or none: the seed is not checked for
    /// rows trained exactly once.
    fn lossy(&mut self);
    /// A line of the trace (`SLUICE_SIM_TRACE`).
    fn trace(&self, line: std::fmt::Arguments);
    /// Whether the job ends in peace now: trainers restart no more, and
    /// slow ones catch up.
    fn peaceful(&self) -> bool;
    /// Whether reads outside any lease (for a restarted trainer, or a
    /// window's context) fail now and then, ending the run.
    fn reads_again_fail(&self) -> bool;
}

/// A worker: its shell, and what the simulation plays around it.
pub(super) struct Worker {
    pub(super) id: WorkerId,
    /// Its name (an index into the seed's names).
    pub(super) name: usize,
    pub(super) shell: Shell,
    /// Its view of the time: when its heartbeats go.
    pub(super) clock: SimClock,
    master: Arc<SimMaster>,
    read_rx: mpsc::Receiver<ReadEvent>,
    flushed: bool,
    readers: SimReaders,
    reads: HashMap<AttemptId, Read>,
    /// The epoch and split of every read's attempt.
    origins: HashMap<AttemptId, (Epoch, u32)>,
    pub(super) trainers: Vec<Trainer>,
    inbox: Inbox,
    /// The rows of the checkpoint its trainers resumed from.
    pub(super) base: Vec<Row>,
    /// Rows a restarted trainer lost, not applied again yet.
    pub(super) replaying: HashSet<Row>,
    beats: mpsc::UnboundedReceiver<Beat>,
    heartbeats: Option<Heartbeats>,
    committer: Option<tokio::task::JoinHandle<()>>,
    abandon: Halt,
    lockstep: bool,
    /// The trainers keep checkpoints.
    checkpoints: bool,
    rows: Arc<Vec<u64>>,
    world: Option<Arc<World>>,
    /// When it last asked for a heartbeat.
    pub(super) last_beat: u64,
    /// Its run is over (how, and how it closed): it waits for the master
    /// to take its last reports.
    pub(super) ended: Option<(Result<(), PipelineError>, Close)>,
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

/// A Parquet split of `rows` rows, the only one of its file.
pub(in crate::worker) fn split(rows: u64) -> Split {
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
    let first = id(split, start);
    let ids = Int64Array::from_iter_values(first..first + (end - start) as i64);
    RecordBatch::try_new(schema, vec![Arc::new(ids)]).expect("batch")
}

/// Trainers of `speeds`, from checkpoint `line` on.
fn trainers(speeds: &[u64], line: u32) -> Vec<Trainer> {
    let trainer = |&speed| Trainer {
        speed,
        checkpoints: line,
        ..Trainer::default()
    };
    speeds.iter().map(trainer).collect()
}

/// What a worker starts with.
pub(super) struct Start {
    pub(super) name: usize,
    pub(super) speeds: Vec<u64>,
    /// The checkpoint its trainers resume from: its number and rows.
    pub(super) resume: Option<(u32, Vec<Row>)>,
    pub(super) checkpoints: bool,
    pub(super) rows: Arc<Vec<u64>>,
    /// A master's job of `--world-size`: its lanes and ranks.
    pub(super) world: Option<Arc<World>>,
}

impl Worker {
    /// Registers a worker under its name and starts its shell, committer
    /// and heartbeats; its trainers declare their checkpoints.
    pub(super) async fn start(
        master: &Arc<SimMaster>,
        start: Start,
        config: PipelineConfig,
    ) -> Result<Worker, PipelineError> {
        let source: Arc<dyn TaskSource> = Arc::new(SimSource {
            master: master.clone(),
            name: Some(format!("n{}", start.name)),
        });
        let id = source.register().await?;
        let lockstep = config.lockstep;
        let dealt = config.shuffle_window.is_some() && !lockstep;
        let (lanes, queues) = Lanes::open(start.speeds.len(), lockstep, dealt);
        let (report_tx, report_rx) = mpsc::unbounded_channel::<Report>();
        let ending = crate::worker::committer::Ending::default();
        let committer = tokio::spawn(crate::worker::committer::committer(
            source.clone(),
            id,
            report_rx,
            Default::default(),
            ending.clone(),
        ));
        let (read_tx, read_rx) = mpsc::channel::<ReadEvent>(1);
        let lease_clock = LeaseClock::new(config.lease_timeout);
        let clock = master.clock.for_worker();
        let readers = SimReaders::default();
        let wiring = Wiring {
            read_tx,
            lanes,
            reports: report_tx,
            clock: lease_clock.clone(),
            ending: ending.clone(),
            readers: Arc::new(readers.clone()),
            time: Arc::new(clock.clone()),
        };
        let job = Job {
            source,
            location: connectors::store::open("file:///tmp").expect("location"),
            splits: Arc::new(match &start.world {
                Some(world) => world.splits(split),
                None => start.rows.iter().map(|&r| split(r)).collect(),
            }),
            plan: Arc::new(plan()),
        };
        let shell = Shell::new(job, config, id, wiring);
        let (heartbeats, beats) = shell.heartbeats(ending, lease_clock);
        let (line, base) = start.resume.unwrap_or_default();
        let mut worker = Worker {
            id,
            name: start.name,
            shell,
            last_beat: clock.millis(),
            clock,
            master: master.clone(),
            read_rx,
            flushed: false,
            readers,
            reads: HashMap::new(),
            origins: HashMap::new(),
            trainers: trainers(&start.speeds, line),
            inbox: match queues {
                Queues::Shared(rx) => Inbox::Shared(rx),
                Queues::PerDevice(rxs) | Queues::Dealt(rxs) => Inbox::Own(rxs),
            },
            base,
            replaying: HashSet::new(),
            beats,
            heartbeats: Some(heartbeats),
            committer: Some(committer),
            abandon: Halt::default(),
            lockstep,
            checkpoints: start.checkpoints,
            rows: start.rows,
            world: start.world,
            ended: None,
        };
        worker.declare()?;
        Ok(worker)
    }

    /// The trainers say they keep checkpoints.
    fn declare(&mut self) -> Result<(), PipelineError> {
        if !self.checkpoints {
            return Ok(());
        }
        for device in 0..self.trainers.len() {
            let kind = MarkKind::Declared;
            self.shell.on_device(DeviceEvent::Mark { device, kind })?;
        }
        Ok(())
    }

    /// Killed: nothing more of it reaches the master.
    pub(super) fn kill(mut self) {
        self.shell.stop_readers();
        if let Some(committer) = self.committer.take() {
            committer.abort();
        }
    }

    /// The heartbeats' word, while the master answers.
    pub(super) async fn take_beats(&mut self, fate: &mut dyn Fate) -> Result<(), PipelineError> {
        while let Ok(beat) = self.beats.try_recv() {
            if beat.is_ok() {
                fate.saw("lease lost");
                fate.lossy();
            }
            self.shell.on_beat(beat).await?;
        }
        Ok(())
    }

    /// The shell's loop before it waits; true when the run is over.
    pub(super) async fn step(&mut self, fate: &mut dyn Fate) -> Result<bool, PipelineError> {
        self.note_lapsed(fate);
        self.shell.step(&self.read_rx, &mut self.flushed).await
    }

    /// While the master does not answer (the loop goes round without
    /// leasing): leases lapsed by this worker's clock wait for its word.
    pub(super) fn lapse(&mut self, fate: &mut dyn Fate) -> Result<(), PipelineError> {
        self.note_lapsed(fate);
        self.shell.drop_lapsed()
    }

    fn note_lapsed(&self, fate: &mut dyn Fate) {
        if !self.shell.clock.lapsed(self.shell.time.now()).is_empty() {
            fate.saw("lease lapsed");
        }
    }

    /// Whether the run is stopping.
    pub(super) fn draining(&self) -> bool {
        self.shell.draining.is_some()
    }

    /// One thing happens: a reader delivers, a batch goes to the trainers'
    /// queues, a trainer takes or applies a batch, or writes a checkpoint
    /// line or restarts.
    pub(super) fn act(&mut self, fate: &mut dyn Fate) -> Result<(), PipelineError> {
        match fate.pick(10) {
            0..=3 => {
                if !self.draining() && !self.shell.backed_up() && self.read(fate)? {
                    self.flushed = false;
                }
                Ok(())
            }
            4..=5 => self.deliver(),
            6..=8 => self.train(fate),
            _ => self.mark(fate),
        }
    }

    /// The next batch (or step) goes to the trainers' queues if they have
    /// room.
    fn deliver(&mut self) -> Result<(), PipelineError> {
        let door = self.shell.delivery.door();
        let room = door.room().now_or_never();
        if let Some(room) = room {
            self.shell.send(room)?;
        }
        Ok(())
    }

    /// A reader delivers rows of one of the reads running (or cuts them,
    /// or ends, or fails). Whether it delivered anything.
    fn read(&mut self, fate: &mut dyn Fate) -> Result<bool, PipelineError> {
        self.take_started(fate);
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
        let attempt = running[fate.pick(running.len() as u64) as usize];
        let event = self.next_event(attempt, fate);
        fate.trace(format_args!("w{} {event:?}", self.id.0));
        match event {
            Some(event) => self.shell.on_read(event).map(|()| true),
            None => Ok(false),
        }
    }

    /// The reads the shell started since last looked.
    fn take_started(&mut self, fate: &mut dyn Fate) {
        let started = std::mem::take(&mut *self.readers.started.lock().expect("readers"));
        for s in started {
            // Nothing is read past a final skip to the end of the split (a
            // lease of rows served again, a read again).
            let last = s.lease.skip.last().filter(|(_, e)| *e == u64::MAX);
            let rows = self.rows[s.lease.split as usize];
            let end = last.map_or(rows, |&(start, _)| start.min(rows));
            let runs = unskipped(s.lease.offset, end, &s.lease.skip);
            // Reads outside any lease count their ids down from the top.
            let again = s.lease.attempt.0 > u64::MAX / 2;
            let fails = if again {
                fate.reads_again_fail() && fate.chance(60)
            } else {
                fate.chance(80)
            };
            let fails_at = fails.then(|| s.lease.offset + fate.pick(end + 1 - s.lease.offset));
            let (epoch, split) = (s.lease.epoch, s.lease.split);
            fate.trace(format_args!(
                "w{} read {:?} fails at {fails_at:?}",
                self.id.0, s.lease
            ));
            let read = Read {
                epoch,
                split,
                end,
                at: s.lease.offset,
                runs,
                fails_at,
                over: false,
                again,
                handle: s.handle,
            };
            self.origins.insert(s.lease.attempt, (epoch, split));
            self.reads.insert(s.lease.attempt, read);
        }
    }

    /// The next thing the read of `attempt` tells: rows (or rows cut), its
    /// failure, or its end.
    fn next_event(&mut self, attempt: AttemptId, fate: &mut dyn Fate) -> Option<ReadEvent> {
        let chunk = 1 + fate.pick(12);
        let cut = fate.chance(30) && self.shell.global.is_none();
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
            fate.saw(if read.again {
                "a read again fails"
            } else {
                "a read fails"
            });
            let at = fails_at.max(at);
            return Some(ReadEvent::Failed { attempt, at, error });
        }
        if next.is_none() {
            read.over = true;
            let end = read.end;
            return Some(ReadEvent::Done { attempt, end });
        }
        let end = read.fails_at.map_or(end, |f| end.min(f));
        read.at = end;
        if cut && !read.again {
            return Some(self.cut(attempt, epoch, split, (start, end), fate));
        }
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

    /// The reader leaves rows `start..end` out: consumed as if trained, in
    /// device 0's next checkpoint.
    fn cut(
        &mut self,
        attempt: AttemptId,
        epoch: Epoch,
        split: u32,
        (start, end): (u64, u64),
        fate: &mut dyn Fate,
    ) -> ReadEvent {
        fate.saw("rows cut");
        let cut: Vec<Row> = (start..end).map(|row| (epoch, id(split, row))).collect();
        fate.trained(&cut, 1);
        self.trainers[0].trained.extend(cut);
        let mut books = self.master.books();
        add_range(books.acked.entry(attempt).or_default(), start, end);
        let len = end - start;
        ReadEvent::Cut {
            attempt,
            start,
            len,
        }
    }

    /// A batch from the trainers' queue of `device`.
    fn take(&mut self, device: usize) -> Option<OutBatch> {
        match &mut self.inbox {
            Inbox::Shared(rx) => rx.try_recv().ok(),
            Inbox::Own(rxs) => rxs.get_mut(device).and_then(|rx| rx.try_recv().ok()),
        }
    }

    /// Whether the queue of `device` is closed and empty (a batch found
    /// there is taken).
    fn closed(&mut self, device: usize) -> bool {
        let next = match &mut self.inbox {
            Inbox::Shared(rx) => rx.try_recv(),
            Inbox::Own(rxs) => match rxs.get_mut(device) {
                Some(rx) => rx.try_recv(),
                None => return true,
            },
        };
        match next {
            Ok(batch) => {
                self.trainers[device].next = Some(batch);
                false
            }
            Err(e) => e == mpsc::error::TryRecvError::Disconnected,
        }
    }

    /// A trainer applies a batch it holds, or takes one from its queue: a
    /// batch with rows of a lease in doubt waits, rows of a dead lease are
    /// dropped (not under lockstep, whose steps are fed whole).
    fn train(&mut self, fate: &mut dyn Fate) -> Result<(), PipelineError> {
        let device = fate.pick(self.trainers.len() as u64) as usize;
        let speed = if fate.peaceful() {
            1000
        } else {
            self.trainers[device].speed
        };
        if !self.trainers[device].held.is_empty() && fate.chance(speed) {
            return self.apply(device, fate);
        }
        if self.trainers[device].held.len() < 2 {
            self.hand_over(device, fate)?;
        }
        if self.draining() && self.devices_idle() {
            // The device threads ended: what they held was applied, their
            // queues were dropped.
            self.shell.devices_done = true;
        }
        Ok(())
    }

    /// The device thread of `device` takes its next batch and hands it to
    /// the trainer once no row of it is in doubt.
    fn hand_over(&mut self, device: usize, fate: &mut dyn Fate) -> Result<(), PipelineError> {
        if self.trainers[device].next.is_none() {
            self.trainers[device].next = self.take(device);
        }
        let Some(next) = self.trainers[device].next.take() else {
            return Ok(());
        };
        let now = self.shell.time.now();
        let clock = &self.shell.clock;
        if !self.lockstep
            && next
                .provenance
                .iter()
                .any(|p| clock.in_doubt(p.attempt, now))
        {
            fate.saw("rows held back");
            self.trainers[device].next = Some(next);
            return Ok(());
        }
        let out = if self.lockstep {
            Some(next)
        } else {
            batcher::without(next, |a| clock.is_dead(a)).map_err(PipelineError::Batch)?
        };
        self.trainers[device].held.extend(out);
        Ok(())
    }

    /// Whether every trainer applied what it held and its queue is over.
    fn devices_idle(&mut self) -> bool {
        (0..self.trainers.len()).all(|d| {
            self.trainers[d].held.is_empty() && self.trainers[d].next.is_none() && self.closed(d)
        })
    }

    /// Where trainers keep checkpoints: one writes its next line, or
    /// restarts from its last (what it applied since is lost, and read
    /// again), but not while the worker stops or once the job ends in
    /// peace.
    fn mark(&mut self, fate: &mut dyn Fate) -> Result<(), PipelineError> {
        if !self.checkpoints {
            return Ok(());
        }
        let device = fate.pick(self.trainers.len() as u64) as usize;
        if fate.pick(5) == 0 {
            if self.draining() || fate.peaceful() {
                return Ok(());
            }
            let trainer = &mut self.trainers[device];
            let lost = trainer.trained.split_off(trainer.saved);
            fate.trace(format_args!(
                "w{} device {device} restarts, losing {lost:?}",
                self.id.0
            ));
            fate.trained(&lost, -1);
            self.replaying.extend(lost.iter().copied());
            if !lost.is_empty() {
                fate.saw("a trainer restarts from its checkpoint");
            }
            let kind = MarkKind::Restarted;
            return self.shell.on_device(DeviceEvent::Mark { device, kind });
        }
        let id = self.trainers[device].checkpoints + 1;
        self.line(device, id, fate)
    }

    /// Trainer `device` writes the line `checkpoint ID`.
    fn line(&mut self, device: usize, id: u32, fate: &mut dyn Fate) -> Result<(), PipelineError> {
        let trainer = &mut self.trainers[device];
        trainer.checkpoints = id;
        trainer.saved = trainer.trained.len();
        let id = id.to_string();
        trainer.lines.entry(id.clone()).or_insert(trainer.saved);
        fate.trace(format_args!(
            "w{} device {device} checkpoint {id}",
            self.id.0
        ));
        fate.saw("checkpoints");
        let kind = MarkKind::Checkpoint(id);
        self.shell.on_device(DeviceEvent::Mark { device, kind })
    }

    /// Trainer `device` applies the batch it holds first: its rows, by the
    /// reads they came from, join its model.
    fn apply(&mut self, device: usize, fate: &mut dyn Fate) -> Result<(), PipelineError> {
        let out = self.trainers[device].held.remove(0);
        let rows = self.rows_of(&out);
        fate.trace(format_args!(
            "w{} device {device} applies {rows:?}",
            self.id.0
        ));
        self.check_world(device, &out, &rows);
        fate.trained(&rows, 1);
        if rows.iter().any(|row| self.replaying.remove(row)) {
            fate.saw("replayed after a restart");
        }
        self.trainers[device].trained.extend(rows);
        {
            let mut books = self.master.books();
            for piece in &out.provenance {
                let acked = books.acked.entry(piece.attempt).or_default();
                add_range(acked, piece.start, piece.start + piece.len);
            }
        }
        self.shell.on_device(DeviceEvent::Applied {
            device,
            epoch: out.epoch,
            rows: out.data.num_rows(),
            provenance: out.provenance,
        })
    }

    /// In a job of `--world-size`: `out` is of the rank of `device`, and of
    /// its lanes (see [`World::check_batch`]).
    fn check_world(&self, device: usize, out: &OutBatch, rows: &[Row]) {
        let Some(world) = &self.world else {
            return;
        };
        let mut books = self.master.books();
        let ranks = books.ranks.ranks.get(&self.id).cloned();
        let replay = out.provenance.iter().any(|p| p.attempt.0 > u64::MAX / 2);
        if let Err(why) = world.check_batch(ranks, device, out, rows, replay) {
            books.break_rule(format!("w{}: {why}", self.id.0));
        }
    }

    /// The rows of `out` as `(epoch, id)`, by its provenance, which must
    /// name the rows its data holds.
    fn rows_of(&self, out: &OutBatch) -> Vec<Row> {
        let mut rows = Vec::new();
        for piece in &out.provenance {
            let (epoch, split) = self.origins[&piece.attempt];
            let first = id(split, piece.start);
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
            "a batch's provenance names other rows than it holds"
        );
        rows
    }

    /// The run's loop is over (`result`): the shell closes it; unless rolled
    /// back or stopped the trainers apply what they hold and their queues
    /// hold and end their streams (a final checkpoint each where they keep
    /// them).
    pub(super) fn close(
        &mut self,
        result: Result<(), PipelineError>,
        fate: &mut dyn Fate,
    ) -> (Result<(), PipelineError>, Close) {
        self.heartbeats = None;
        let (mut result, close) = self.shell.close(result, &self.abandon);
        if close != Close::Tail {
            return (result, close);
        }
        for device in 0..self.trainers.len() {
            self.trainers[device].speed = 1000;
            loop {
                self.hand_over(device, fate)
                    .unwrap_or_else(|e| panic!("{}", connectors::Report(&e)));
                if self.trainers[device].held.is_empty() {
                    break;
                }
                if let (Err(e), true) = (self.apply(device, fate), result.is_ok()) {
                    result = Err(e);
                }
            }
        }
        if self.checkpoints {
            let last = self.trainers.iter().map(|t| t.checkpoints).max();
            let id = last.unwrap_or(0) + 1;
            for device in 0..self.trainers.len() {
                if let (Err(e), true) = (self.line(device, id, fate), result.is_ok()) {
                    result = Err(e);
                }
            }
        }
        (result, close)
    }

    /// Once every report made so far reached the master: the run's outcome.
    pub(super) async fn finish(mut self, ok: bool) -> (RunOutcome, Vec<Trainer>, Vec<Row>) {
        let committer = self.committer.take().expect("a committer until the end");
        let outcome = self.shell.finish(ok, committer).await;
        (outcome, self.trainers, self.base)
    }
}
