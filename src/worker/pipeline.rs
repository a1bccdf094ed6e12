//! The pipeline: leases tasks ahead, runs readers, re-batches, feeds the
//! device threads and turns acknowledgements into commits, until the source
//! says the job is over.
//!
//! One coordinator loop joins the stages, and it never waits on a stage that
//! can be slow: batches for the devices wait in an outbox sent from as the
//! device queue has room, so acknowledgements (and lost leases) are handled
//! while data waits. Reports to the master go through a committer task of
//! their own, which sends whatever is pending at once, merged per attempt, so
//! an acknowledged batch is committed within one round trip.

use crate::epoch::Epoch;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use connectors::{Location, ReadAhead, ReadPlan, Split, SplitRange};

use crate::trainer::protocol::{
    EPOCH_KEY, EPOCH_STEPS_KEY, EPOCH_STEPS_UNKNOWN_KEY, SOURCE_KEY, STEP_KEY,
};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tracing::{debug, warn};

pub use super::coordinator::{Progress, RunOutcome};

use super::backoff::Backoff;
use super::batcher::{self, Batcher, OutBatch};
use super::checkpoints::Completed;
use super::committer::{committer, Ending};
use super::coordinator::{Action, Coordinator, Event, Report, Settings};
use super::devices::{Brakes, DeviceEvent, Devices, Queues};
use super::epoch_steps::{epoch_steps, EpochSteps};
use super::heartbeats::{Beat, Heartbeats};
use super::in_order::InOrder;
use super::ledger;
pub use super::pipeline_config::{PipelineConfig, Stop};
use super::reader::{self, ReadEvent};
use super::shuffle::{Cut, GlobalShuffle};
use super::stepper::{Step, Stepper};
use super::{LeaseClock, Piece};
use crate::protocol::TaskSource;
use crate::protocol::{Halt, SourceError};
use crate::queue::{AttemptId, Lease, LeaseReply, WorkerId};
use crate::trainer::{TrainerError, TrainerFactory};

/// How often the coordinator looks again when nothing else wakes it.
const IDLE_TICK: Duration = Duration::from_millis(50);
/// How soon a worker waiting to lease asks again once a task of its own ended:
/// its end is what most often changes the master's answer (the epoch, or the
/// job, is over once the last task finishes), and the committer hands it on
/// within a moment. Without it the worker would wait out its backoff, up to a
/// second, at the end of every epoch.
const AFTER_OWN_END: Duration = Duration::from_millis(2);

/// Errors that stop a worker.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A trainer failed.
    #[error("trainer on device {device} failed")]
    Trainer {
        /// The device.
        device: usize,
        /// What failed.
        #[source]
        source: TrainerError,
    },
    /// Device threads could not start.
    #[error("cannot start device threads")]
    Start(#[source] TrainerError),
    /// The master refused something it should not have, or gave no answer.
    #[error("task queue")]
    Queue(#[from] SourceError),
    /// Rows to serve again to a trainer that restarted from its checkpoint
    /// could not be read.
    #[error("cannot read again the rows after a trainer's checkpoint")]
    Replay {
        /// The read's failure.
        #[source]
        source: Box<connectors::Error>,
    },
    /// The store refused this process's login: every read would fail alike.
    #[error("stopped reading the job: the store refused this process's login")]
    LoginRefused {
        /// The read's failure, naming the file and what to do.
        #[source]
        source: Box<connectors::Error>,
    },
    /// Re-batching failed.
    #[error("cannot assemble a batch: {0}")]
    Batch(arrow::error::ArrowError),
    /// The queue can no longer record acknowledgements (its journal failed):
    /// the feed stopped at once.
    #[error("{0}; stopped handing batches to trainers (what they acknowledged since is not committed, and a resume serves it again)")]
    Halted(String),
    /// The master gave a lease of this worker to another one (or counted the
    /// worker gone) while its trainers, which keep checkpoints, may hold rows
    /// of it: the trainers were stopped without a further checkpoint, to
    /// start again from their last complete one (the master serves every
    /// row after it again).
    #[error("{0}: trainers stopped, to start again from their last complete checkpoint")]
    RolledBack(String),
    /// Trainers that keep checkpoints ended their streams without `checkpoint
    /// ID` after their last batch a second time, after the rows that were in
    /// no checkpoint the first time were served again once: what they
    /// trained is saved nowhere, and serving it again does not change that.
    #[error("the trainers keep checkpoints but ended their streams twice without `checkpoint ID` after their last batch ({rows} rows in no checkpoint, served again once already): a trainer that writes `checkpoints` must write `checkpoint ID` after the end of its stream")]
    NoFinalCheckpoint {
        /// Rows acknowledged and in no checkpoint the second time.
        rows: u64,
    },
}

/// Arrow's error is told in the message, not handed on as a cause.
impl From<arrow::error::ArrowError> for PipelineError {
    fn from(e: arrow::error::ArrowError) -> Self {
        PipelineError::Batch(e)
    }
}

/// What is done when trainers that keep checkpoints end their streams
/// without a final `checkpoint ID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalCheckpointRule {
    /// Exec trainers that sluice started: the rows after their last
    /// checkpoint are served once more, and a second such end fails the job
    /// ([`PipelineError::NoFinalCheckpoint`]).
    Enforced,
    /// A trainer that started sluice (`--attach`, `sluice_trainer.Dataset`)
    /// cannot be started again: a warning.
    Warned,
    /// A built-in model: its model is sluice's own, written at the end.
    Unchecked,
}

impl FinalCheckpointRule {
    /// The rule for `trainer`.
    pub fn of(trainer: &crate::config::TrainerChoice) -> FinalCheckpointRule {
        match trainer {
            crate::config::TrainerChoice::Exec { attach: None, .. } => {
                FinalCheckpointRule::Enforced
            }
            crate::config::TrainerChoice::Exec { .. } => FinalCheckpointRule::Warned,
            _ => FinalCheckpointRule::Unchecked,
        }
    }
}

/// The warning when a trainer that started sluice ended its stream without
/// a final `checkpoint ID`: it cannot be started again, and `rows` stay in
/// no checkpoint.
pub fn warn_attached_without_final_checkpoint(rows: u64) {
    warn!(
        rows,
        "the trainer keeps checkpoints but ended its stream without `checkpoint ID` after its \
         last batch: {rows} rows it acknowledged are in no checkpoint (it started sluice, so \
         it cannot be started again to be served them once more)"
    );
}

/// The warning, said once per job, when trainers that keep checkpoints end
/// their streams without a final `checkpoint ID`: `rows` acknowledged rows
/// are in no checkpoint, and are served once more.
pub fn warn_no_final_checkpoint(rows: u64) {
    warn!(
        rows,
        "the trainers keep checkpoints but ended their streams without `checkpoint ID` after \
         their last batch: {rows} rows they acknowledged are in no checkpoint; they are served \
         once more to trainers started from their last complete checkpoint, and the job fails \
         if the streams end that way again"
    );
}

impl PipelineError {
    /// Whether the master refused this worker as gone (silent past the
    /// lease timeout while its trainers held rows in no checkpoint).
    fn is_gone(&self) -> bool {
        matches!(
            self,
            PipelineError::Queue(SourceError::Refused {
                source: crate::queue::QueueError::Gone { .. },
                ..
            })
        )
    }
}

/// Runs one worker until the job is over.
pub async fn run(
    source: Arc<dyn TaskSource>,
    location: Location,
    splits: Arc<Vec<Split>>,
    plan: Arc<ReadPlan>,
    factory: Arc<dyn TrainerFactory>,
    config: PipelineConfig,
    on_progress: impl Fn(&Progress) + Send,
) -> Result<RunOutcome, PipelineError> {
    let devices_n = config.devices.max(1);
    let (batch_tx, lanes, queues) = device_queues(&config);
    let (event_tx, mut event_rx) = mpsc::unbounded_channel::<DeviceEvent>();
    let clock = LeaseClock::new(config.lease_timeout);
    let halt = source.halt().unwrap_or_default();
    let abandon = Halt::default();
    let completed = Completed::default();
    let devices = Devices::start(
        factory,
        devices_n,
        queues,
        event_tx,
        clock.clone(),
        Brakes {
            halt: halt.clone(),
            abandon: abandon.clone(),
        },
        completed.clone(),
    )
    .map_err(PipelineError::Start)?;
    let worker = source.register().await?;
    let (report_tx, report_rx) = mpsc::unbounded_channel::<Report>();
    let ending = Ending::default();
    let committer = tokio::spawn(committer(
        source.clone(),
        worker,
        report_rx,
        completed,
        ending.clone(),
    ));
    let (read_tx, mut read_rx) = mpsc::channel::<ReadEvent>(config.prefetch.max(1) * 2);
    let wiring = Wiring {
        read_tx,
        batch_tx,
        lanes,
        reports: report_tx,
        clock: clock.clone(),
        ending: ending.clone(),
    };
    let job = Job {
        source,
        location,
        splits,
        plan,
    };
    let mut state = Shell::new(job, config, worker, wiring);
    let (beats, mut beat_rx) = state.heartbeats(ending, clock);
    let result = state
        .drive(&mut read_rx, &mut event_rx, &mut beat_rx, &on_progress)
        .await;
    drop(beats);
    let (result, joined) = state
        .wind_down(result, devices, &mut event_rx, &abandon)
        .await;
    let outcome = finish(state, result.is_ok(), committer).await;
    if let Some(joined) = joined {
        let _ = joined.await;
    }
    result.map(|_| outcome)
}

/// The run's outcome, once every report made so far has reached the master
/// (the committer ended): rows left in no checkpoint at the end are sent
/// back to be served once more.
async fn finish(state: Shell, ok: bool, committer: tokio::task::JoinHandle<()>) -> RunOutcome {
    let Shell {
        reports,
        coordinator,
        source_rows,
        ..
    } = state;
    let mut outcome = coordinator.into_outcome(ok);
    outcome.source_rows = source_rows;
    if !outcome.unsaved_pieces_at_end.is_empty() {
        // The master serves them once more, and fails the job should rows
        // of them be left in no checkpoint at an end again.
        let pieces = std::mem::take(&mut outcome.unsaved_pieces_at_end);
        let _ = reports.send(Report::UnsavedAtEnd(pieces));
    }
    drop(reports);
    let _ = committer.await;
    outcome
}

/// The device threads' queues: the shared one's sender (`None` under
/// lockstep or `--shuffle global`), each device's own senders, and what the
/// device threads read from.
fn device_queues(
    config: &PipelineConfig,
) -> (
    Option<mpsc::Sender<OutBatch>>,
    Vec<mpsc::Sender<OutBatch>>,
    Queues,
) {
    let devices_n = config.devices.max(1);
    // Under lockstep each device has a queue of one batch: a step is sent
    // whole once every device has room for its batch.
    // Under `--shuffle global` (without lockstep) each device has a queue
    // of its own too: each batch goes to the device its number deals it to.
    let dealt = config.shuffle_window.is_some() && !config.lockstep;
    if config.lockstep {
        let (txs, rxs) = (0..devices_n).map(|_| mpsc::channel::<OutBatch>(1)).unzip();
        (None, txs, Queues::PerDevice(rxs))
    } else if dealt {
        let (txs, rxs) = (0..devices_n).map(|_| mpsc::channel::<OutBatch>(2)).unzip();
        (None, txs, Queues::Dealt(rxs))
    } else {
        let (batch_tx, batch_rx) = mpsc::channel::<OutBatch>(devices_n * 2);
        (Some(batch_tx), Vec::new(), Queues::Shared(batch_rx))
    }
}

/// What a worker reads: the source of its tasks and the job's data.
struct Job {
    source: Arc<dyn TaskSource>,
    location: Location,
    splits: Arc<Vec<Split>>,
    plan: Arc<ReadPlan>,
}

/// The channels and shared state the shell talks through.
struct Wiring {
    read_tx: mpsc::Sender<ReadEvent>,
    batch_tx: Option<mpsc::Sender<OutBatch>>,
    lanes: Vec<mpsc::Sender<OutBatch>>,
    reports: mpsc::UnboundedSender<Report>,
    clock: LeaseClock,
    ending: Ending,
}

/// A seed for the worker's lease backoff: its id and this process's time, so
/// that workers of one job wait apart.
fn backoff_seed(worker: WorkerId) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    worker.0.rotate_left(32) ^ u64::from(nanos) ^ u64::from(std::process::id())
}

/// Room in the device queue, or never when there is no queue any more.
async fn reserve(
    tx: Option<&mpsc::Sender<OutBatch>>,
) -> Result<mpsc::Permit<'_, OutBatch>, mpsc::error::SendError<()>> {
    match tx {
        Some(tx) => tx.reserve().await,
        None => std::future::pending().await,
    }
}

/// Room in every device's queue (`--lockstep`), or never when there are no
/// queues any more.
async fn reserve_all(
    lanes: &[mpsc::Sender<OutBatch>],
) -> Result<Vec<mpsc::Permit<'_, OutBatch>>, mpsc::error::SendError<()>> {
    if lanes.is_empty() {
        return std::future::pending().await;
    }
    let mut permits = Vec::with_capacity(lanes.len());
    for lane in lanes {
        permits.push(lane.reserve().await?);
    }
    Ok(permits)
}

/// Resolves once the stop signal turns true (never without a signal).
async fn stopped(signal: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match signal {
        Some(rx) => {
            if rx.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// The rows of one read event, waiting for the coordinator's word.
struct Arrived {
    batch: arrow::record_batch::RecordBatch,
    piece: Piece,
    epoch: Epoch,
    /// Its share of the read-ahead budget, given back once it is taken.
    held: connectors::read_ahead::Reservation,
}

/// The async shell around the [`Coordinator`]: it feeds it what happens
/// (replies of the master, readers' rows, devices' acknowledgements) and
/// performs what it asks, and holds the rows themselves on their way to the
/// devices.
struct Shell {
    /// The rules of this worker's leases and rows.
    coordinator: Coordinator,
    /// The rows of the read event at hand, until the coordinator says
    /// whether they go to the batcher ([`Action::Feed`]).
    arrived: Option<Arrived>,
    /// The error of the failed read at hand, until the coordinator says
    /// whether it ends the run ([`Action::ReplayFailed`]).
    failure: Option<connectors::Error>,
    source: Arc<dyn TaskSource>,
    worker: WorkerId,
    location: Location,
    /// The source is on a remote store: the worker keeps reads beyond its
    /// devices under way (see [`Shell::hungry`]).
    remote: bool,
    splits: Arc<Vec<Split>>,
    plan: Arc<ReadPlan>,
    config: PipelineConfig,
    batcher: Batcher,
    /// How to stop each running read (leased, replayed, context).
    handles: HashMap<AttemptId, AbortHandle>,
    /// With one device: reads taken in lease order (see [`InOrder`]).
    in_order: Option<InOrder>,
    /// To the shell, from readers.
    read_tx: mpsc::Sender<ReadEvent>,
    /// The bytes all readers may hold ahead of the shell.
    ahead: ReadAhead,
    /// `--shuffle global`: leases to place in a window (see `offer_global`).
    to_offer: Vec<Lease>,
    /// The attempts held changed since the heartbeats were told.
    unsynced: bool,
    /// To the device threads; dropped to end them.
    batch_tx: Option<mpsc::Sender<OutBatch>>,
    /// `--shuffle global`: windows read, permuted and cut into batches.
    global: Option<GlobalShuffle>,
    /// `--shuffle global` without lockstep: batches for the devices, each
    /// with its device, sent in order as its device's queue has room.
    dealt: VecDeque<(usize, OutBatch)>,
    /// Under lockstep: steps in the making, sent whole to `lanes`.
    stepper: Option<Stepper>,
    /// Under lockstep: one queue per device, in device order (else empty);
    /// cleared to end the device threads.
    lanes: Vec<mpsc::Sender<OutBatch>>,
    /// Stopping early: the time the trainers must be done by.
    draining: Option<Instant>,
    /// Every device thread ended.
    devices_done: bool,
    /// Rows acknowledged of each source of a mixed job (empty for one).
    source_rows: Vec<u64>,
    /// Batches ready for the devices, sent as the device queue has room.
    outbox: VecDeque<OutBatch>,
    /// Reading pauses while the outbox holds this many batches.
    outbox_max: usize,
    /// To the committer.
    reports: mpsc::UnboundedSender<Report>,
    clock: LeaseClock,
    /// No lease request before this (after a reply with nothing to do).
    next_lease: Instant,
    /// How long to wait after each reply with nothing to do.
    backoff: Backoff,
    /// The attempts this worker holds, as its heartbeats report them. A lease
    /// and the update of this list happen under its lock, so a heartbeat
    /// never reports a list that misses a lease already granted.
    held: Arc<tokio::sync::Mutex<Vec<AttemptId>>>,
    /// Attempts whose end is on its way to the master (see [`Ending`]).
    ending: Ending,
    /// The steps of an epoch on each process, or why they are not known
    /// (`sluice.epoch_steps`).
    epoch_steps: EpochSteps,
    /// Without lockstep: the next step of each epoch (`sluice.step`).
    next_step: HashMap<Epoch, u64>,
}

/// The bytes of the largest split: its byte range, or its whole file where
/// it is cut by row groups.
fn largest(splits: &[Split]) -> u64 {
    splits
        .iter()
        .map(|split| match &split.range {
            SplitRange::Bytes { start, end } | SplitRange::Stripes { start, end } => {
                end.saturating_sub(*start)
            }
            SplitRange::Whole | SplitRange::RowGroups(_) | SplitRange::Unreadable { .. } => {
                split.size
            }
        })
        .max()
        .unwrap_or(0)
}

/// Device events handled in one go before the loop looks at anything else.
const EVENTS_PER_ROUND: usize = 4096;

impl Shell {
    fn new(job: Job, config: PipelineConfig, worker: WorkerId, wiring: Wiring) -> Shell {
        let devices_n = config.devices.max(1);
        let coordinator = Coordinator::new(Settings {
            devices: devices_n,
            splits: job.splits.len(),
            keeps_unsaved: job.source.keeps_unsaved(),
            global: config.shuffle_window.is_some(),
            replay_to_device: config.shuffle_window.is_some() && !config.lockstep,
        });
        let schema = job.plan.output_schema();
        let remote = !job.location.is_local();
        let read_ahead = config.read_ahead.unwrap_or_else(|| {
            crate::config::pipeline::default_read_ahead(remote, devices_n, largest(&job.splits))
        });
        let epoch_steps = epoch_steps(&job.splits, &job.plan, &config);
        Shell {
            epoch_steps,
            next_step: HashMap::new(),
            coordinator,
            arrived: None,
            failure: None,
            read_tx: wiring.read_tx,
            ahead: ReadAhead::new(read_ahead),
            remote,
            to_offer: Vec::new(),
            unsynced: false,
            worker,
            source: job.source,
            location: job.location,
            splits: job.splits,
            plan: match config.batch_bytes {
                Some(bytes) => {
                    std::sync::Arc::new((*job.plan).clone().with_batch_bytes(Some(bytes)))
                }
                None => job.plan,
            },
            batcher: Batcher::new(
                schema.clone(),
                config.batch_size,
                config.shuffle_buffer,
                config.seed,
            )
            .with_batch_bytes(config.batch_bytes),
            handles: HashMap::new(),
            // With several devices the batch each gets depends on their speed
            // anyway; the global shuffle orders its windows itself.
            in_order: (config.only_worker && devices_n == 1 && config.shuffle_window.is_none())
                .then(InOrder::default),
            stepper: config
                .lockstep
                .then(|| Stepper::new(schema, devices_n, config.batch_size, config.drop_last)),
            batch_tx: wiring.batch_tx,
            global: GlobalShuffle::of(&config),
            dealt: VecDeque::new(),
            lanes: wiring.lanes,
            draining: None,
            devices_done: false,
            source_rows: Vec::new(),
            outbox: VecDeque::new(),
            // Under lockstep the stepper holds one step back, and one more waits.
            outbox_max: devices_n * if config.lockstep { 3 } else { 2 },
            reports: wiring.reports,
            clock: wiring.clock,
            next_lease: Instant::now(),
            backoff: if config.follow {
                Backoff::between(
                    super::backoff::FIRST,
                    super::backoff::FOLLOW_LONGEST,
                    Some(backoff_seed(worker)),
                )
            } else {
                Backoff::new(backoff_seed(worker))
            },
            held: Arc::new(tokio::sync::Mutex::new(Vec::new())),
            ending: wiring.ending,
            config,
        }
    }

    /// Starts the heartbeats of the leases this shell holds.
    fn heartbeats(
        &self,
        ending: Ending,
        clock: LeaseClock,
    ) -> (Heartbeats, mpsc::UnboundedReceiver<Beat>) {
        let (beat_tx, beat_rx) = mpsc::unbounded_channel();
        let source = self.source.clone();
        let beats = Heartbeats::spawn(
            source,
            self.worker,
            self.held.clone(),
            ending,
            clock,
            beat_tx,
        );
        (beats, beat_rx)
    }

    /// After the loop: rolls the trainers back, or lets them end their
    /// streams (their last acknowledgements and checkpoints still count), or,
    /// stopped early, leaves them to end with the process. The run's result,
    /// and the join of the device threads to wait for.
    async fn wind_down(
        &mut self,
        result: Result<(), PipelineError>,
        devices: Devices,
        event_rx: &mut mpsc::UnboundedReceiver<DeviceEvent>,
        abandon: &Halt,
    ) -> (
        Result<(), PipelineError>,
        Option<tokio::task::JoinHandle<()>>,
    ) {
        let mut result = match result {
            Err(e) if e.is_gone() && self.coordinator.rolls_back() => {
                Err(PipelineError::RolledBack(
                    "the master counted this worker gone (silent past the lease timeout)"
                        .to_string(),
                ))
            }
            result => result,
        };
        let rolled_back = matches!(result, Err(PipelineError::RolledBack(_)));
        if rolled_back {
            // Before the device queues close: no trainer ends its stream (and
            // writes a checkpoint after it).
            abandon.set("rolled back".to_string());
            self.clock.stop_all();
            self.outbox.clear();
            self.dealt.clear();
        }
        self.stop_readers();
        drop(self.batch_tx.take());
        self.lanes.clear();
        let stop_requested = self
            .config
            .stop
            .as_ref()
            .is_some_and(|s| *s.signal.borrow());
        if rolled_back {
            // The trainers are killed; nothing they still say counts.
            let joined = tokio::task::spawn_blocking(move || devices.join());
            while event_rx.recv().await.is_some() {}
            return (result, Some(joined));
        }
        if self.coordinator.stopped() || stop_requested {
            // Stopped, leases handed back (or a stop was asked for and the run
            // failed meanwhile): trainers still busy past the grace period end
            // with the process (their process groups are killed).
            return (result, None);
        }
        // The trainers end their streams: their last acknowledgements and
        // checkpoints (a trainer's final one) still count.
        self.coordinator.handle(Event::Tail);
        let joined = tokio::task::spawn_blocking(move || devices.join());
        while let Some(event) = event_rx.recv().await {
            if let (Err(e), true) = (self.on_device(event), result.is_ok()) {
                result = Err(e);
            }
        }
        (result, Some(joined))
    }

    async fn drive(
        &mut self,
        read_rx: &mut mpsc::Receiver<ReadEvent>,
        events: &mut mpsc::UnboundedReceiver<DeviceEvent>,
        beats: &mut mpsc::UnboundedReceiver<Beat>,
        on_progress: &(impl Fn(&Progress) + Send),
    ) -> Result<(), PipelineError> {
        let mut flushed = false;
        let mut stop = self.config.stop.as_ref().map(|s| s.signal.clone());
        loop {
            if self.step(read_rx, &mut flushed).await? {
                return Ok(());
            }
            let batch_tx = self.batch_tx.clone();
            let lanes = self.lanes.clone();
            let step_ready = self.stepper.as_ref().is_some_and(Stepper::ready);
            let dealt_lane = self
                .dealt
                .front()
                .and_then(|(device, _)| self.lanes.get(*device).cloned());
            tokio::select! {
                biased;
                event = events.recv(), if !self.devices_done => match event {
                    Some(event) => self.on_devices(event, events, on_progress)?,
                    None => self.devices_done = true,
                },
                Some(beat) = beats.recv() => {
                    let attempt = beat?;
                    self.act(Event::Lost { attempt })?;
                    self.sync_if_changed().await;
                }
                permit = reserve(batch_tx.as_ref()), if !self.outbox.is_empty() => match permit {
                    Ok(permit) => {
                        if let Some(out) = self.outbox.pop_front() {
                            permit.send(self.tagged(out));
                        }
                    }
                    // The device threads are gone; their events say why.
                    Err(_) => self.outbox.clear(),
                },
                permit = reserve(dealt_lane.as_ref()), if dealt_lane.is_some() => match permit {
                    Ok(permit) => {
                        if let Some((_, out)) = self.dealt.pop_front() {
                            permit.send(self.tagged(out));
                        }
                    }
                    // The device threads are gone; their events say why.
                    Err(_) => self.dealt.clear(),
                },
                permits = reserve_all(&lanes), if step_ready => self.send_step(permits)?,
                _ = stopped(&mut stop), if self.draining.is_none() => self.begin_drain()?,
                Some(event) = read_rx.recv(), if self.draining.is_none() && !self.backed_up() => {
                    flushed = false;
                    self.on_read(event)?;
                }
                _ = tokio::time::sleep(self.idle_wait()) => {}
            }
        }
    }

    /// What the loop does before it waits: stops if the source halted,
    /// hands back once drained, leases more, moves the global shuffle on,
    /// and lets the short batch go once nothing more is read. True when the
    /// run is over.
    async fn step(
        &mut self,
        read_rx: &mpsc::Receiver<ReadEvent>,
        flushed: &mut bool,
    ) -> Result<bool, PipelineError> {
        if let Some(why) = self.source.halt().as_ref().and_then(Halt::reason) {
            // Nothing more can be committed: no queued row reaches a
            // trainer, and no more is read.
            self.clock.stop_all();
            self.stop_readers();
            self.outbox.clear();
            self.dealt.clear();
            return Err(PipelineError::Halted(why.to_string()));
        }
        self.drop_lapsed()?;
        if let Some(deadline) = self.draining {
            if self.devices_done || Instant::now() >= deadline {
                self.hand_back_all().await?;
                return Ok(true);
            }
        } else {
            // Lease while the pipeline is hungry: at the start every device's
            // first task (and on a remote store the reads kept beyond them)
            // side by side, not one per turn of the loop (a turn can wait a
            // round trip to the store).
            for _ in 0..self.config.prefetch.max(1) {
                if self.coordinator.is_over()
                    || Instant::now() < self.next_lease
                    || !self.hungry(read_rx)
                {
                    break;
                }
                let before = self.coordinator.leased_reads();
                self.top_up().await?;
                if self.coordinator.leased_reads() <= before {
                    break;
                }
            }
        }
        self.consume_dropped()?;
        self.pump_global()?;
        if self.coordinator.is_done()
            && self.dealt.is_empty()
            && self.global.as_ref().is_none_or(GlobalShuffle::is_empty)
            && self.outbox.is_empty()
            && self.stepper.as_ref().is_none_or(Stepper::is_empty)
        {
            return Ok(true);
        }
        let open_step = self.stepper.as_ref().is_some_and(Stepper::open);
        if self.coordinator.reads_none()
            && self.global.as_ref().is_none_or(|g| !g.holds_rows())
            && (self.batcher.buffered() > 0 || open_step)
            && !*flushed
        {
            // Nothing more to read for now: let the short batch go so
            // that its tasks can end (under lockstep: the epoch ends here).
            let tail = self.batcher.flush()?;
            self.ready(tail);
            if let Some(stepper) = &mut self.stepper {
                stepper.end_epoch();
            }
            if let Some(global) = &mut self.global {
                global.end_epoch();
            }
            self.pump_global()?;
            self.consume_dropped()?;
            *flushed = true;
        }
        Ok(false)
    }

    /// A device event and those that came with it (a round at most).
    fn on_devices(
        &mut self,
        first: DeviceEvent,
        events: &mut mpsc::UnboundedReceiver<DeviceEvent>,
        on_progress: &(impl Fn(&Progress) + Send),
    ) -> Result<(), PipelineError> {
        self.on_device(first)?;
        for _ in 0..EVENTS_PER_ROUND {
            let Ok(event) = events.try_recv() else { break };
            self.on_device(event)?;
        }
        on_progress(self.coordinator.progress());
        Ok(())
    }

    /// Under lockstep: every device has room, the next step goes.
    fn send_step(
        &mut self,
        permits: Result<Vec<mpsc::Permit<'_, OutBatch>>, mpsc::error::SendError<()>>,
    ) -> Result<(), PipelineError> {
        let Ok(permits) = permits else {
            // The device threads are gone; their events say why.
            if let Some(stepper) = &mut self.stepper {
                stepper.clear();
            }
            return Ok(());
        };
        let step = self.stepper.as_mut().map(Stepper::next_step).transpose()?;
        if let Some(Step { batches, .. }) = step.flatten() {
            for (permit, out) in permits.into_iter().zip(batches) {
                permit.send(self.tagged(out));
            }
        }
        self.consume_dropped()
    }

    /// Whether to lease more: fewer readers run than devices (up to
    /// `prefetch`), or the stages after the readers are waiting for rows
    /// (nothing decoded waits for them) and the read-ahead budget has room
    /// (no reader waits for bytes to fit: a task leased then would only
    /// wait, held from other workers). Readers so multiply while reading is
    /// the bottleneck, up to `prefetch`, as far as the bytes they hold allow;
    /// a worker whose trainers are the bottleneck holds one task per device,
    /// and a worker joining later finds the other tasks still in the queue.
    fn hungry(&self, read_rx: &mpsc::Receiver<ReadEvent>) -> bool {
        if let Some(global) = &self.global {
            return global.wants_lease();
        }
        // At least one read per device (up to --prefetch), and on a remote
        // store two more: while every device decodes a task, the next ones'
        // fetches, a round trip and a transfer each, are already on their
        // way. (The default read-ahead there holds that many row groups.)
        let extra = usize::from(self.remote) * crate::config::pipeline::REMOTE_EXTRA_READS;
        let floor = self
            .config
            .prefetch
            .max(1)
            .min(self.config.devices.max(1) + extra);
        self.coordinator.leased_reads() < floor
            || (self.coordinator.none_starting()
                && self.coordinator.leased_reads() < self.config.prefetch.max(1)
                && self.ahead.waiting() == 0
                && read_rx.is_empty()
                && !self.backed_up()
                && self.batcher.buffered() < self.config.batch_size
                && self.in_order.as_ref().is_none_or(InOrder::holds_nothing))
    }

    /// Whether enough batches wait for the devices that reading pauses.
    /// Under lockstep only while a step can go: rows that wait for more rows
    /// (to make a step) never stop the reading.
    fn backed_up(&self) -> bool {
        if self.global.is_some() && self.stepper.is_none() {
            // Reads fill the window, whose rows are bounded by its size.
            return false;
        }
        match &self.stepper {
            Some(stepper) => stepper.ready() && stepper.held() >= self.outbox_max,
            None => self.outbox.len() >= self.outbox_max,
        }
    }

    /// Batches out of the batcher: to the devices' queue, or under lockstep
    /// to the stepper.
    fn ready(&mut self, batches: Vec<OutBatch>) {
        match &mut self.stepper {
            Some(stepper) => batches.into_iter().for_each(|b| stepper.push(b)),
            None => self.outbox.extend(batches),
        }
    }

    /// Rows `--drop-last` dropped: consumed (committed, and part of the next
    /// checkpoint of device 0) without reaching a trainer.
    fn consume_dropped(&mut self) -> Result<(), PipelineError> {
        let Some(dropped) = self.stepper.as_mut().map(Stepper::take_dropped) else {
            return Ok(());
        };
        for out in dropped {
            debug!(
                rows = out.data.num_rows(),
                epoch = out.epoch.number(),
                "rows of the epoch's partial step dropped (--drop-last)"
            );
            self.act(Event::Dropped {
                provenance: out.provenance,
            })?;
        }
        Ok(())
    }

    /// Stops early (see [`Stop`]): no more leases or reads; rows that no
    /// trainer holds are dropped; the device threads finish what they hold.
    fn begin_drain(&mut self) -> Result<(), PipelineError> {
        let grace = self
            .config
            .stop
            .as_ref()
            .map_or(Duration::ZERO, |s| s.grace);
        warn!(
            grace_secs = grace.as_secs_f64(),
            "stopping: the trainers finish the batches they hold, the rest is handed back"
        );
        self.draining = Some(Instant::now() + grace);
        self.act(Event::Stop)
    }

    /// Drops every row no trainer holds, and ends the device queues.
    fn drain(&mut self) {
        self.stop_readers();
        self.outbox.clear();
        self.dealt.clear();
        if let Some(global) = &mut self.global {
            global.clear();
        }
        if let Some(stepper) = &mut self.stepper {
            stepper.clear();
        }
        for attempt in self.coordinator.attempts() {
            self.batcher.drop_attempt(attempt);
        }
        // Batches still queued for the devices are dropped by them, unfed
        // (under lockstep the last step sent is fed whole, on every device).
        self.clock.stop_all();
        self.batch_tx = None;
        self.lanes.clear();
    }

    /// Hands every attempt still held back to the master, after committing
    /// what was acknowledged.
    async fn hand_back_all(&mut self) -> Result<(), PipelineError> {
        self.act(Event::DrainOver)?;
        self.sync_if_changed().await;
        Ok(())
    }

    /// Reads rows of `lease` again (for the trainer of `device`, which
    /// restarted from its checkpoint), outside any lease: the rows were
    /// committed already.
    fn replay(&mut self, lease: Lease) {
        let Some(split) = self.splits.get(lease.split as usize).cloned() else {
            return;
        };
        let attempt = lease.attempt;
        let handle = self.spawn_reader(split, lease, self.read_tx.clone());
        self.handles.insert(attempt, handle);
    }

    /// Starts reading `split` from where `lease` says, sending to `tx`.
    fn spawn_reader(&self, split: Split, lease: Lease, tx: mpsc::Sender<ReadEvent>) -> AbortHandle {
        self.spawn_reader_within(split, lease, tx, self.ahead.clone())
    }

    fn spawn_reader_within(
        &self,
        split: Split,
        lease: Lease,
        tx: mpsc::Sender<ReadEvent>,
        ahead: ReadAhead,
    ) -> AbortHandle {
        reader::ReadTask {
            location: self.location.clone(),
            split,
            plan: self.plan.clone(),
            select: self.config.select.clone(),
            lease,
            ahead,
            read_retry: self.config.read_retry,
            tx,
        }
        .spawn()
    }

    /// Leases tasks until `prefetch` are being read.
    async fn top_up(&mut self) -> Result<(), PipelineError> {
        let held = self.held.clone();
        let mut held = held.lock().await;
        let result = self.lease_more().await;
        *held = self.coordinator.attempts();
        self.unsynced = false;
        result
    }

    /// Publishes the attempts held to the heartbeat task.
    async fn sync_held(&mut self) {
        *self.held.lock().await = self.coordinator.attempts();
        self.unsynced = false;
    }

    /// Publishes the attempts held, if they changed.
    async fn sync_if_changed(&mut self) {
        if self.unsynced {
            self.sync_held().await;
        }
    }

    async fn lease_more(&mut self) -> Result<(), PipelineError> {
        let prefetch = self.config.prefetch.max(1);
        // One task at a time: the next only once this one delivers rows and
        // the pipeline still waits for more (see `hungry`).
        if self.global.is_none() && self.coordinator.leased_reads() >= prefetch {
            return Ok(());
        }
        let sent = Instant::now();
        match self.source.lease(self.worker, 1).await? {
            LeaseReply::Tasks(leases) if !leases.is_empty() => {
                self.backoff.reset();
                for lease in leases {
                    self.clock.granted(lease.attempt, sent);
                    let reachable = (lease.split as usize) < self.coordinator.splits()
                        || self.learn_splits().await;
                    self.act(Event::Granted { lease, reachable })?;
                    for lease in std::mem::take(&mut self.to_offer) {
                        // Read once its window is (see `pump_global`).
                        self.offer_global(lease).await?;
                    }
                }
            }
            LeaseReply::Tasks(_) | LeaseReply::Wait => {
                self.next_lease = Instant::now() + self.backoff.next_wait();
                self.global_waits().await?;
            }
            LeaseReply::JobOver => {
                self.act(Event::NothingToLease { over: true })?;
                self.global_waits().await?;
            }
        }
        Ok(())
    }

    /// Starts reading a lease, or under `--shuffle global` places it in a
    /// window (see `offer_global`).
    fn start_read(&mut self, lease: Lease) -> Result<(), PipelineError> {
        if self.global.is_some() {
            self.to_offer.push(lease);
            return Ok(());
        }
        let Some(split) = self.splits.get(lease.split as usize).cloned() else {
            return Ok(());
        };
        let attempt = lease.attempt;
        let handle = match &mut self.in_order {
            Some(order) => {
                let ahead = self.ahead.with_turn(order.queue(attempt));
                self.spawn_reader_within(split, lease, self.read_tx.clone(), ahead)
            }
            None => self.spawn_reader(split, lease, self.read_tx.clone()),
        };
        self.handles.insert(attempt, handle);
        self.take_in_order()
    }

    /// Tells the coordinator `event` and does what it asks.
    fn act(&mut self, event: Event) -> Result<(), PipelineError> {
        let actions = self.coordinator.handle(event);
        self.perform_all(actions)
    }

    fn perform_all(&mut self, actions: Vec<Action>) -> Result<(), PipelineError> {
        actions
            .into_iter()
            .try_for_each(|action| self.perform(action))
    }

    /// Does what the coordinator asks. `Feed` and `ReplayFailed` concern the
    /// read event at hand, whose rows or error wait in `arrived` and
    /// `failure` while the coordinator decides.
    fn perform(&mut self, action: Action) -> Result<(), PipelineError> {
        match action {
            Action::Read(lease) => self.start_read(lease)?,
            Action::Replay { lease, .. } => self.replay(lease),
            Action::Report(report) => self.report(report),
            Action::Drop(attempt) => self.drop_lost(attempt)?,
            Action::Forget(attempt) => self.clock.forget(attempt),
            Action::Suspend(attempt) => {
                warn!(%attempt, "lease lapsed before a heartbeat renewed it: its rows wait for the master's answer");
            }
            Action::Drain => self.drain(),
            Action::SyncHeld => self.unsynced = true,
            Action::RollBack(why) => return Err(PipelineError::RolledBack(why)),
            Action::Feed(attempt) => self.feed(attempt)?,
            Action::ReplayFailed => {
                if let Some(error) = self.failure.take() {
                    return Err(PipelineError::Replay {
                        source: Box::new(error),
                    });
                }
            }
        }
        Ok(())
    }

    /// Gives the rows of the read event at hand to the batcher.
    fn feed(&mut self, attempt: AttemptId) -> Result<(), PipelineError> {
        let Some(arrived) = self.arrived.take_if(|a| a.piece.attempt == attempt) else {
            return Ok(());
        };
        let ready = self
            .batcher
            .push(arrived.batch, arrived.piece, arrived.epoch)?;
        // Taken: the batch's bytes leave the read-ahead budget.
        drop(arrived.held);
        self.ready(ready);
        Ok(())
    }

    /// Places a lease in the global shuffle, with the view of its epoch
    /// first where the source tells one.
    async fn offer_global(&mut self, lease: Lease) -> Result<(), PipelineError> {
        if self
            .global
            .as_ref()
            .is_some_and(|g| g.needs_view(lease.epoch))
        {
            let view = self.source.epoch_view(lease.epoch).await?;
            if let Some(global) = &mut self.global {
                global.set_view(view, &self.splits);
            }
        }
        if let Some(global) = &mut self.global {
            global.offer(lease, &self.splits);
        }
        Ok(())
    }

    /// The source has nothing to lease now: a window of the leases as they
    /// came takes no more, and a planned window waiting for tasks looks
    /// again at which of them are done.
    async fn global_waits(&mut self) -> Result<(), PipelineError> {
        let Some(global) = &mut self.global else {
            return Ok(());
        };
        global.nothing_to_lease();
        if let Some(epoch) = global.pending_epoch() {
            let view = self.source.epoch_view(epoch).await?;
            if let Some(global) = &mut self.global {
                global.set_view(view, &self.splits);
            }
        }
        Ok(())
    }

    /// Moves the global shuffle on: starts the reads of the window being
    /// read (up to `--prefetch` at a time), and takes its dealt batches to
    /// the devices' queues (under lockstep, to the stepper).
    fn pump_global(&mut self) -> Result<(), PipelineError> {
        let Some(global) = &mut self.global else {
            return Ok(());
        };
        let room = self.config.prefetch.max(1).saturating_sub(global.reading());
        let orders = global.pump(&self.splits, room, self.coordinator.made_up_ids());
        for order in orders {
            let lease = order.lease;
            let Some(split) = self.splits.get(lease.split as usize).cloned() else {
                continue;
            };
            let attempt = lease.attempt;
            self.act(Event::WindowRead {
                lease: lease.clone(),
                context: order.context,
            })?;
            let handle = self.spawn_reader(split, lease, self.read_tx.clone());
            self.handles.insert(attempt, handle);
        }
        loop {
            // Under lockstep, batches that wait for more (to make a step,
            // or the epoch's end: a window's short last batch) never stop
            // the next ones.
            let room = match &self.stepper {
                Some(stepper) => !stepper.ready() || stepper.held() < self.outbox_max,
                None => self.dealt.len() < self.outbox_max,
            };
            if !room {
                return Ok(());
            }
            let Some(global) = &mut self.global else {
                return Ok(());
            };
            if global.global_batches() {
                let Some(cut) = global.next_step()? else {
                    return Ok(());
                };
                self.take_cut(cut);
                continue;
            }
            let Some((device, out)) = global.next_batch()? else {
                return Ok(());
            };
            match &mut self.stepper {
                Some(stepper) => stepper.push(out),
                None => self.dealt.push_back((device, out)),
            }
        }
    }

    /// A global batch cut: under lockstep a step for the stepper, else each
    /// rank's batch for its device in step order (none of 0 rows).
    fn take_cut(&mut self, cut: Cut) {
        match (cut, &mut self.stepper) {
            (Cut::Step(step), Some(stepper)) => stepper.push_step(step),
            (Cut::Step(step), None) => self.dealt.extend(
                step.batches
                    .into_iter()
                    .enumerate()
                    .filter(|(_, out)| out.data.num_rows() > 0),
            ),
            (Cut::Dropped(batches), Some(stepper)) => stepper.push_dropped(batches),
            // --drop-last comes with --lockstep only.
            (Cut::Dropped(_), None) => {}
        }
    }

    /// A read for the global shuffle's window: its rows join the window;
    /// rows it cuts that were not committed before are consumed.
    fn on_global_read(&mut self, event: ReadEvent) -> Result<(), PipelineError> {
        let Some(global) = &mut self.global else {
            return Ok(());
        };
        match event {
            ReadEvent::Batch {
                attempt,
                start,
                batch,
                held,
                ..
            } => {
                global.add(attempt, start, batch);
                // The window holds the rows now: out of the read-ahead budget.
                drop(held);
                Ok(())
            }
            ReadEvent::Cut {
                attempt,
                start,
                len,
            } => {
                let runs = global.uncommitted(attempt, start, len);
                let window = true;
                self.act(Event::Cut {
                    attempt,
                    runs,
                    window,
                })
            }
            ReadEvent::Waiting { .. } => Ok(()),
            ReadEvent::LoginRefused { error } => Err(PipelineError::LoginRefused {
                source: Box::new(error),
            }),
            ReadEvent::Done { attempt, end } => {
                global.read_ended(attempt);
                self.handles.remove(&attempt);
                self.act(Event::ReadDone { attempt, end })
            }
            ReadEvent::Failed { attempt, at, error } => {
                global.read_ended(attempt);
                self.handles.remove(&attempt);
                self.read_failed(attempt, at, error, true)
            }
        }
    }

    /// A read failed: the coordinator decides (a replay that fails stops
    /// the run).
    fn read_failed(
        &mut self,
        attempt: AttemptId,
        at: u64,
        error: connectors::Error,
        window: bool,
    ) -> Result<(), PipelineError> {
        let event = Event::ReadFailed {
            attempt,
            at,
            reason: connectors::Report(&error).to_string(),
            for_good: error.is_for_good(),
            window,
        };
        self.failure = Some(error);
        let done = self.act(event);
        self.failure = None;
        done
    }

    /// Under `--shuffle global` without lockstep, rows read again for a
    /// trainer that restarted from its checkpoint go back to its device, in
    /// batches of their own. Returns whether `event` was such rows.
    fn dealt_replay(&mut self, event: &ReadEvent) -> bool {
        let ReadEvent::Batch {
            attempt,
            epoch,
            start,
            batch,
            ..
        } = event
        else {
            return false;
        };
        let Some(device) = self.coordinator.replay_device(*attempt) else {
            return false;
        };
        let size = self.config.batch_size.max(1);
        for at in (0..batch.num_rows()).step_by(size) {
            let len = size.min(batch.num_rows() - at);
            let out = OutBatch {
                data: batch.slice(at, len),
                epoch: *epoch,
                provenance: vec![Piece {
                    attempt: *attempt,
                    start: start + at as u64,
                    len: len as u64,
                }],
            };
            self.dealt.push_back((device, out));
        }
        true
    }

    /// Fetches the splits a followed job added since this worker last
    /// looked (a lease named one it lacks); false when the master could
    /// not be asked (the lease is then handed back, to be leased again).
    async fn learn_splits(&mut self) -> bool {
        match self.source.splits_from(self.splits.len()).await {
            Ok(more) => {
                if !more.is_empty() {
                    debug!(added = more.len(), "the job grew: new splits");
                    Arc::make_mut(&mut self.splits).extend(more);
                    let count = self.splits.len();
                    self.coordinator.handle(Event::Splits { count });
                }
                true
            }
            Err(e) => {
                warn!(error = %connectors::Report(&e), "cannot fetch the job's new splits");
                false
            }
        }
    }

    /// How long the loop may sleep with nothing to do: until the next lease
    /// request is due, at most [`IDLE_TICK`].
    fn idle_wait(&self) -> Duration {
        let due = self.next_lease.saturating_duration_since(Instant::now());
        if due.is_zero() {
            IDLE_TICK
        } else {
            due.min(IDLE_TICK)
        }
    }

    /// Sends a report to the committer.
    fn report(&mut self, report: Report) {
        if let Report::Ledger(
            ledger::Action::Finish { attempt, .. } | ledger::Action::Fail { attempt, .. },
        ) = &report
        {
            self.clock.forget(*attempt);
            self.backoff.reset();
            self.next_lease = self.next_lease.min(Instant::now() + AFTER_OWN_END);
        }
        if let Some(attempt) = report.ends() {
            self.ending.add(attempt);
        }
        // The committer ends only after the shell: the send cannot fail
        // while it runs.
        let _ = self.reports.send(report);
    }

    /// The lease of `attempt` is lost: stop reading it and drop its rows
    /// wherever they wait, so no trainer gets them; they are served again
    /// elsewhere.
    fn drop_lost(&mut self, attempt: AttemptId) -> Result<(), PipelineError> {
        self.clock.lose(attempt);
        if let Some(reader) = self.handles.remove(&attempt) {
            reader.abort();
        }
        let dropped = self.batcher.drop_attempt(attempt);
        let mut kept = VecDeque::with_capacity(self.outbox.len());
        for out in self.outbox.drain(..) {
            if let Some(out) = batcher::without(out, |a| a == attempt)? {
                kept.push_back(out);
            }
        }
        self.outbox = kept;
        if let Some(global) = &mut self.global {
            global.drop_attempt(attempt);
        }
        let mut kept = VecDeque::with_capacity(self.dealt.len());
        for (device, out) in self.dealt.drain(..) {
            if let Some(out) = batcher::without(out, |a| a == attempt)? {
                kept.push_back((device, out));
            }
        }
        self.dealt = kept;
        let dropped = match &mut self.stepper {
            Some(stepper) => dropped + stepper.drop_attempt(attempt)?,
            None => dropped,
        };
        if let Some(order) = &mut self.in_order {
            order.drop_attempt(attempt);
        }
        self.take_in_order()?;
        debug!(%attempt, dropped, "rows of a lost lease dropped");
        Ok(())
    }

    /// Leases that lapsed by this worker's clock (no heartbeat got through in
    /// time: the master is unreachable, or the process was paused) are
    /// suspended, not dropped: no row of theirs reaches a trainer until the
    /// master renews them (a restarted master renews every lease) or says
    /// they are lost (then their rows are dropped).
    fn drop_lapsed(&mut self) -> Result<(), PipelineError> {
        let attempts = self.clock.lapsed(Instant::now());
        self.act(Event::Lapsed { attempts })
    }

    fn stop_readers(&mut self) {
        if let Some(order) = &mut self.in_order {
            *order = InOrder::default();
        }
        for (_, reader) in self.handles.drain() {
            reader.abort();
        }
    }

    /// A reader's event, taken now or, with one device, once the reads
    /// leased before its attempt are taken (see [`InOrder`]).
    fn on_read(&mut self, event: ReadEvent) -> Result<(), PipelineError> {
        let Some(order) = &mut self.in_order else {
            return self.take_read(event);
        };
        let attempt = match &event {
            ReadEvent::Batch { attempt, .. }
            | ReadEvent::Cut { attempt, .. }
            | ReadEvent::Done { attempt, .. }
            | ReadEvent::Failed { attempt, .. } => *attempt,
            // They change no row's order.
            ReadEvent::Waiting { .. } | ReadEvent::LoginRefused { .. } => {
                return self.take_read(event)
            }
        };
        if !order.holds(attempt) || order.is_first(attempt) {
            return self.take_read(event).and_then(|()| self.take_in_order());
        }
        if let ReadEvent::Batch { .. } = &event {
            // Started: the next task may be leased meanwhile.
            self.coordinator.handle(Event::Started { attempt });
        }
        order.wait(attempt, event);
        Ok(())
    }

    /// Takes the events of the reads whose turn it is now: while the first
    /// read in lease order is over (done, failed, lost), the next one's
    /// events held so far, and gives the read first in line its turn.
    fn take_in_order(&mut self) -> Result<(), PipelineError> {
        loop {
            let Some(order) = &mut self.in_order else {
                return Ok(());
            };
            let Some(first) = order.first() else {
                return Ok(());
            };
            if !self.coordinator.is_reading(first) {
                // Over: what it still held was of a read stopped meanwhile.
                order.forget_first();
                continue;
            }
            if order.give_turn() {
                self.ahead.wake();
            }
            let held = order.take_held(first);
            if held.is_empty() {
                return Ok(());
            }
            for event in held {
                self.take_read(event)?;
            }
        }
    }

    fn take_read(&mut self, event: ReadEvent) -> Result<(), PipelineError> {
        let attempt = match &event {
            ReadEvent::Batch { attempt, .. }
            | ReadEvent::Cut { attempt, .. }
            | ReadEvent::Waiting { attempt }
            | ReadEvent::Done { attempt, .. }
            | ReadEvent::Failed { attempt, .. } => Some(*attempt),
            ReadEvent::LoginRefused { .. } => None,
        };
        if let (Some(global), Some(attempt)) = (&self.global, attempt) {
            if global.owns(attempt) {
                return self.on_global_read(event);
            }
            if self.dealt_replay(&event) {
                return Ok(());
            }
        }
        match event {
            ReadEvent::Batch {
                attempt,
                epoch,
                start,
                batch,
                held,
            } => {
                let piece = Piece {
                    attempt,
                    start,
                    len: batch.num_rows() as u64,
                };
                self.arrived = Some(Arrived {
                    batch,
                    piece,
                    epoch,
                    held,
                });
                let done = self.act(Event::Rows { attempt });
                // Rows the coordinator did not take are dropped here.
                self.arrived = None;
                done
            }
            ReadEvent::Cut {
                attempt,
                start,
                len,
            } => self.act(Event::Cut {
                attempt,
                runs: vec![(start, start + len)],
                window: false,
            }),
            // Not starting any more: other tasks may be leased and read
            // meanwhile (within `--prefetch`).
            ReadEvent::Waiting { attempt } => self.act(Event::Started { attempt }),
            ReadEvent::LoginRefused { error } => Err(PipelineError::LoginRefused {
                source: Box::new(error),
            }),
            ReadEvent::Done { attempt, end } => {
                self.handles.remove(&attempt);
                self.act(Event::ReadDone { attempt, end })
            }
            ReadEvent::Failed { attempt, at, error } => {
                self.handles.remove(&attempt);
                self.read_failed(attempt, at, error, false)
            }
        }
    }

    fn on_device(&mut self, event: DeviceEvent) -> Result<(), PipelineError> {
        match event {
            DeviceEvent::Mark { device, kind } => self.act(Event::Mark { device, kind }),
            DeviceEvent::Applied {
                device,
                epoch,
                rows,
                provenance,
            } => {
                self.count_sources(&provenance);
                self.act(Event::Applied {
                    device,
                    epoch,
                    rows: rows as u64,
                    provenance,
                })
            }
            DeviceEvent::Failed { device, error } => Err(PipelineError::Trainer {
                device,
                source: error,
            }),
        }
    }
}

/// The sources of a job that mixes several: which one a batch holds, and
/// how many rows of each the trainers acknowledged.
impl Shell {
    /// The source of every row of `provenance`, when the job mixes several
    /// sources and they all came from one.
    fn source_of(&self, provenance: &[Piece]) -> Option<u32> {
        if self.plan.source_names.is_empty() {
            return None;
        }
        let mut sources = provenance.iter().map(|p| {
            let (_, split) = self.coordinator.origin(p.attempt)?;
            self.splits.get(split as usize).map(|s| s.source)
        });
        let first = sources.next()??;
        sources.all(|s| s == Some(first)).then_some(first)
    }

    /// `out` with its epoch, step and the steps of its epoch in its metadata
    /// (under lockstep the stepper gave the first two), and its source's name
    /// (`sluice.source`) when all its rows came from one source of a mixed job.
    fn tagged(&mut self, mut out: OutBatch) -> OutBatch {
        let schema = out.data.schema();
        let mut metadata = schema.metadata().clone();
        if !metadata.contains_key(EPOCH_KEY) {
            let next = self.next_step.entry(out.epoch).or_insert(0);
            metadata.insert(EPOCH_KEY.to_string(), out.epoch.0.to_string());
            metadata.insert(STEP_KEY.to_string(), next.to_string());
            *next += 1;
        }
        match &self.epoch_steps {
            Ok(steps) => metadata.insert(EPOCH_STEPS_KEY.to_string(), steps.to_string()),
            Err(why) => metadata.insert(EPOCH_STEPS_UNKNOWN_KEY.to_string(), why.clone()),
        };
        if let Some(name) = self
            .source_of(&out.provenance)
            .and_then(|s| self.plan.source_names.get(s as usize))
        {
            metadata.insert(SOURCE_KEY.to_string(), name.clone());
        }
        let tagged = Arc::new(schema.as_ref().clone().with_metadata(metadata));
        if let Ok(data) = out.data.clone().with_schema(tagged) {
            out.data = data;
        }
        out
    }

    /// Counts the rows of `provenance`, acknowledged, by their source.
    fn count_sources(&mut self, provenance: &[Piece]) {
        if self.plan.source_names.is_empty() {
            return;
        }
        let sources = self.plan.source_names.len();
        self.source_rows.resize(sources, 0);
        for piece in provenance {
            let Some((_, split)) = self.coordinator.origin(piece.attempt) else {
                continue;
            };
            let source = self.splits.get(split as usize).map_or(0, |s| s.source);
            if let Some(n) = self.source_rows.get_mut(source as usize) {
                *n += piece.len;
            }
        }
    }
}
