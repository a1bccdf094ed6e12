//! The pipeline: leases tasks ahead, runs readers, re-batches, feeds the
//! device threads and turns acknowledgements into commits, until the source
//! says the job is over.

use std::sync::Arc;
use std::time::Duration;

use connectors::{Location, ReadPlan, Split};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::batcher::{Batcher, OutBatch};
use super::devices::{DeviceEvent, Devices};
use super::ledger::{Action, Ledger};
use super::reader::{self, ReadEvent};
use super::source::TaskSource;
use super::Piece;
use crate::task::{AttemptId, LeaseReply, QueueError, WorkerId};
use crate::trainer::{TrainerError, TrainerFactory};

/// How often leases are renewed.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long to wait before asking again after a `Wait`.
const WAIT_RETRY: Duration = Duration::from_millis(50);

/// Settings of one worker pipeline.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Rows per batch handed to a trainer.
    pub batch_size: usize,
    /// Device threads.
    pub devices: usize,
    /// Tasks leased and read ahead.
    pub prefetch: usize,
    /// Rows of the shuffle buffer (0: no shuffle).
    pub shuffle_buffer: usize,
    /// Seed of the shuffle buffer.
    pub seed: u64,
}

/// Progress of a run, shared with whoever draws it.
#[derive(Debug, Default, Clone)]
pub struct Progress {
    /// Rows acknowledged by trainers.
    pub rows: u64,
    /// Batches acknowledged.
    pub batches: u64,
    /// Epoch of the last acknowledged batch.
    pub epoch: u32,
}

/// How a run ended.
#[derive(Debug, Default)]
pub struct RunOutcome {
    /// Rows acknowledged by trainers (all epochs).
    pub rows: u64,
    /// Batches acknowledged.
    pub batches: u64,
    /// Task attempts that failed while reading, with reasons.
    pub read_failures: u64,
}

/// Errors that stop a worker.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A trainer failed.
    #[error("trainer on device {device} failed: {source}")]
    Trainer {
        /// The device.
        device: usize,
        /// What failed.
        #[source]
        source: TrainerError,
    },
    /// Device threads could not start.
    #[error("cannot start device threads: {0}")]
    Start(#[source] TrainerError),
    /// The master refused something it should not have.
    #[error("task queue: {0}")]
    Queue(#[from] crate::task::QueueError),
    /// Re-batching failed.
    #[error("cannot assemble a batch: {0}")]
    Batch(#[from] arrow::error::ArrowError),
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
    let (batch_tx, batch_rx) = mpsc::channel::<OutBatch>(devices_n * 2);
    let (event_tx, mut event_rx) = mpsc::unbounded_channel::<DeviceEvent>();
    let devices =
        Devices::start(factory, devices_n, batch_rx, event_tx).map_err(PipelineError::Start)?;
    let mut state = Coordinator {
        worker: source.register().await?,
        source,
        location,
        splits,
        plan: plan.clone(),
        config: config.clone(),
        ledger: Ledger::default(),
        batcher: Batcher::new(
            plan.output_schema(),
            config.batch_size,
            config.shuffle_buffer,
            config.seed,
        ),
        readers: 0,
        progress: Progress::default(),
        outcome: RunOutcome::default(),
        held: Arc::new(tokio::sync::Mutex::new(Vec::new())),
    };
    let (beat_tx, mut beat_rx) = mpsc::unbounded_channel();
    let beats = Heartbeats::spawn(
        state.source.clone(),
        state.worker,
        state.held.clone(),
        beat_tx,
    );
    let (read_tx, mut read_rx) = mpsc::channel::<ReadEvent>(config.prefetch.max(1) * 2);
    let result = state
        .drive(
            &read_tx,
            &mut read_rx,
            &batch_tx,
            &mut event_rx,
            &mut beat_rx,
            &on_progress,
        )
        .await;
    drop(beats);
    drop(batch_tx);
    // Drain trainer acknowledgements until the device threads are gone.
    let joined = tokio::task::spawn_blocking(move || devices.join());
    while let Some(event) = event_rx.recv().await {
        if let DeviceEvent::Failed { device, error } = event {
            if result.is_ok() {
                return Err(PipelineError::Trainer {
                    device,
                    source: error,
                });
            }
        }
    }
    let _ = joined.await;
    result.map(|_| state.outcome)
}

/// The state of the loop that joins the stages.
struct Coordinator {
    source: Arc<dyn TaskSource>,
    worker: WorkerId,
    location: Location,
    splits: Arc<Vec<Split>>,
    plan: Arc<ReadPlan>,
    config: PipelineConfig,
    ledger: Ledger,
    batcher: Batcher,
    readers: usize,
    progress: Progress,
    outcome: RunOutcome,
    /// The attempts this worker holds, as its heartbeats report them. A lease
    /// and the update of this list happen under its lock, so a heartbeat
    /// never reports a list that misses a lease already granted.
    held: Arc<tokio::sync::Mutex<Vec<AttemptId>>>,
}

/// What the heartbeat task tells the coordinator.
type Beat = Result<AttemptId, QueueError>;

/// Heartbeats in a task of their own: leases are renewed on time even while
/// the coordinator waits on a full batch channel or a slow report.
struct Heartbeats(tokio::task::JoinHandle<()>);

impl Heartbeats {
    fn spawn(
        source: Arc<dyn TaskSource>,
        worker: WorkerId,
        held: Arc<tokio::sync::Mutex<Vec<AttemptId>>>,
        to_coordinator: mpsc::UnboundedSender<Beat>,
    ) -> Heartbeats {
        Heartbeats(tokio::spawn(async move {
            let mut ticker = tokio::time::interval(HEARTBEAT);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                let result = {
                    let held = held.lock().await;
                    source.heartbeat(worker, &held).await
                };
                let beats: Vec<Beat> = match result {
                    Ok(lost) => lost.into_iter().map(Ok).collect(),
                    Err(e) => vec![Err(e)],
                };
                for beat in beats {
                    if to_coordinator.send(beat).is_err() {
                        return;
                    }
                }
            }
        }))
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Coordinator {
    async fn drive(
        &mut self,
        read_tx: &mpsc::Sender<ReadEvent>,
        read_rx: &mut mpsc::Receiver<ReadEvent>,
        batch_tx: &mpsc::Sender<OutBatch>,
        events: &mut mpsc::UnboundedReceiver<DeviceEvent>,
        beats: &mut mpsc::UnboundedReceiver<Beat>,
        on_progress: &(impl Fn(&Progress) + Send),
    ) -> Result<(), PipelineError> {
        let mut flushed = false;
        loop {
            let over = self.top_up(read_tx).await?;
            if over && self.readers == 0 && self.ledger.is_empty() {
                return Ok(());
            }
            if self.readers == 0 && self.batcher.buffered() > 0 && !flushed {
                // Nothing more to read for now: let the short batch go so that its tasks can end.
                for out in self.batcher.flush()? {
                    send(batch_tx, out).await;
                }
                flushed = true;
            }
            tokio::select! {
                Some(beat) = beats.recv() => {
                    let lost = beat?;
                    warn!(attempt = %lost, "lease lost; its rows will be served again elsewhere");
                    self.ledger.drop_attempt(lost);
                    self.sync_held().await;
                }
                Some(event) = read_rx.recv() => {
                    flushed = false;
                    self.on_read(event, batch_tx).await?;
                }
                Some(event) = events.recv() => {
                    self.on_device(event).await?;
                    on_progress(&self.progress);
                }
                _ = tokio::time::sleep(WAIT_RETRY) => {}
            }
        }
    }

    /// Leases tasks until `prefetch` are being read; returns whether the job is over.
    async fn top_up(&mut self, read_tx: &mpsc::Sender<ReadEvent>) -> Result<bool, PipelineError> {
        let held = self.held.clone();
        let mut held = held.lock().await;
        let over = self.lease_more(read_tx).await;
        *held = self.ledger.attempts();
        over
    }

    /// Publishes the attempts held to the heartbeat task.
    async fn sync_held(&mut self) {
        *self.held.lock().await = self.ledger.attempts();
    }

    async fn lease_more(
        &mut self,
        read_tx: &mpsc::Sender<ReadEvent>,
    ) -> Result<bool, PipelineError> {
        while self.readers < self.config.prefetch.max(1) {
            let want = self.config.prefetch.max(1) - self.readers;
            match self.source.lease(self.worker, want).await? {
                LeaseReply::Tasks(leases) if !leases.is_empty() => {
                    for lease in leases {
                        let Some(split) = self.splits.get(lease.split as usize).cloned() else {
                            let reason = format!("split {} is not in this job", lease.split);
                            self.source.fail(self.worker, lease.attempt, reason).await?;
                            continue;
                        };
                        debug!(attempt = %lease.attempt, split = lease.split, epoch = lease.epoch, offset = lease.offset, "leased");
                        self.ledger.start(lease.clone());
                        reader::spawn(
                            self.location.clone(),
                            split,
                            self.plan.clone(),
                            lease,
                            read_tx.clone(),
                        );
                        self.readers += 1;
                    }
                }
                LeaseReply::Tasks(_) | LeaseReply::Wait => return Ok(false),
                LeaseReply::JobOver => return Ok(true),
            }
        }
        Ok(false)
    }

    async fn on_read(
        &mut self,
        event: ReadEvent,
        batch_tx: &mpsc::Sender<OutBatch>,
    ) -> Result<(), PipelineError> {
        match event {
            ReadEvent::Batch {
                attempt,
                epoch,
                start,
                batch,
            } => {
                if self.ledger.lease(attempt).is_none() {
                    return Ok(()); // lost or failed meanwhile
                }
                let piece = Piece {
                    attempt,
                    start,
                    len: batch.num_rows() as u64,
                };
                for out in self.batcher.push(batch, piece, epoch)? {
                    send(batch_tx, out).await;
                }
            }
            ReadEvent::Done { attempt, end } => {
                self.readers = self.readers.saturating_sub(1);
                if let Some(action) = self.ledger.read_done(attempt, end) {
                    self.apply(action).await?;
                }
            }
            ReadEvent::Failed { attempt, reason } => {
                self.readers = self.readers.saturating_sub(1);
                self.outcome.read_failures += 1;
                warn!(attempt = %attempt, %reason, "task failed");
                self.ledger.drop_attempt(attempt);
                if let Err(e) = self.source.fail(self.worker, attempt, reason).await {
                    warn!(attempt = %attempt, error = %e, "master refused the failure report");
                }
            }
        }
        Ok(())
    }

    async fn on_device(&mut self, event: DeviceEvent) -> Result<(), PipelineError> {
        match event {
            DeviceEvent::Applied {
                epoch,
                rows,
                provenance,
                ..
            } => {
                self.progress.rows += rows as u64;
                self.progress.batches += 1;
                self.progress.epoch = epoch;
                self.outcome.rows += rows as u64;
                self.outcome.batches += 1;
                for piece in &provenance {
                    if let Some(action) = self.ledger.ack(piece) {
                        self.apply(action).await?;
                    }
                }
                Ok(())
            }
            DeviceEvent::Failed { device, error } => Err(PipelineError::Trainer {
                device,
                source: error,
            }),
        }
    }

    async fn apply(&mut self, action: Action) -> Result<(), PipelineError> {
        let result = match action {
            Action::Commit { attempt, offset } => {
                self.source.commit(self.worker, attempt, offset).await
            }
            Action::Finish { attempt, rows } => {
                self.source.finish(self.worker, attempt, rows).await
            }
        };
        if let Err(e) = result {
            // A stale attempt (lease lost meanwhile): its rows will be served again.
            warn!(error = %e, "master refused a report");
        }
        Ok(())
    }
}

/// Sends a batch to the devices; a closed channel means they are gone, which
/// the device events report.
async fn send(tx: &mpsc::Sender<OutBatch>, out: OutBatch) {
    let _ = tx.send(out).await;
}
