//! `sluice worker`: one elastic worker of a distributed job, fed by a remote master.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::train::{make_factory, write_json, TrainError};
use crate::config::TrainerChoice;
use crate::trainer::RESUME_CHECKPOINT_ENV;
use crate::worker::pipeline::{self, PipelineConfig};
use crate::worker::remote::{RemoteError, RemoteSource};

/// Settings of a worker.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The master's base URL.
    pub master: String,
    /// The job token.
    pub token: String,
    /// The trainer.
    pub trainer: TrainerChoice,
    /// Device threads.
    pub devices: usize,
    /// Accelerator ids.
    pub device_ids: Option<Vec<String>>,
    /// Rows per batch.
    pub batch_size: usize,
    /// Tasks read ahead.
    pub prefetch: usize,
    /// Bytes read ahead.
    pub read_ahead: u64,
    /// How long a read that fails for a reason that may pass is tried again.
    pub read_retry: Duration,
    /// Shuffle buffer rows.
    pub shuffle_buffer: usize,
    /// One batch per device per step, the same steps per epoch on every device.
    pub lockstep: bool,
    /// With `lockstep`: drop the epoch's last partial step.
    pub drop_last: bool,
    /// What happens to each batch before its trainer gets it.
    pub transform: crate::trainer::Transform,
    /// How long to keep retrying an unreachable master.
    pub patience: Duration,
    /// A CA certificate to trust for an https:// master.
    pub ca_file: Option<std::path::PathBuf>,
    /// Stops the worker early (pre-emption).
    pub stop: Option<crate::worker::pipeline::Stop>,
    /// The name it registers with, for people (status page, metrics).
    pub name: String,
}

/// Errors of a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Talking to the master failed.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// Setting up or running training failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// The dataset could not be opened.
    #[error(transparent)]
    Connector(#[from] connectors::Error),
}

/// What a worker did.
#[derive(Debug)]
pub struct WorkerOutcome {
    /// Rows its trainers acknowledged.
    pub rows: u64,
    /// Batches acknowledged.
    pub batches: u64,
    /// Stopped early by a signal; its unfinished tasks were handed back.
    pub stopped: bool,
    /// Rows dropped by `--drop-last`.
    pub dropped: u64,
}

/// Runs a worker until the master says the job is over.
pub async fn run(config: WorkerConfig) -> Result<WorkerOutcome, WorkerError> {
    let source = RemoteSource::new(
        &config.master,
        config.token.clone(),
        config.patience,
        config.ca_file.as_deref(),
    )?
    .with_name(config.name.clone());
    let spec = source.job_for(&config.name).await?;
    info!(url = %spec.url, splits = spec.splits.len(), name = %config.name, "joined job");
    let location = connectors::store::open(&spec.url)?;
    let mut trainer = config.trainer.clone();
    if let (Some(id), TrainerChoice::Exec { env, .. }) = (&spec.resume_checkpoint, &mut trainer) {
        // A worker started again under its name: its trainers load the last
        // checkpoint the name's trainers completed.
        info!(checkpoint = %id, name = %config.name, "trainers resume from this worker's last complete checkpoint");
        env.push((RESUME_CHECKPOINT_ENV.to_string(), id.clone()));
    }
    let factory = make_factory(
        &trainer,
        config.device_ids.as_ref(),
        config.lockstep,
        &config.transform,
    )?;
    factory
        .validate(&spec.plan.output_schema())
        .map_err(TrainError::from)?;
    let rows = source.rows_counter();
    let pipeline_config = PipelineConfig {
        batch_size: config.batch_size,
        devices: config.devices,
        prefetch: config.prefetch,
        read_ahead: config.read_ahead,
        read_retry: config.read_retry,
        shuffle_buffer: config.shuffle_buffer,
        seed: spec.seed,
        lease_timeout: spec.lease_timeout_ms.map(Duration::from_millis),
        stop: config.stop.clone(),
        lockstep: config.lockstep,
        drop_last: config.drop_last,
        follow: spec.follow.is_some(),
    };
    let outcome = pipeline::run(
        Arc::new(source),
        location,
        Arc::new(spec.splits),
        Arc::new(spec.plan),
        factory.clone(),
        pipeline_config,
        move |p| rows.store(p.rows, Ordering::Relaxed),
    )
    .await
    .map_err(TrainError::from)?;
    if let (TrainerChoice::Model(m), Some(model)) = (&config.trainer, factory.report().model) {
        if let Some(path) = &m.output {
            write_json(path, &model)?;
        }
    }
    Ok(WorkerOutcome {
        rows: outcome.rows,
        batches: outcome.batches,
        stopped: outcome.stopped,
        dropped: outcome.dropped,
    })
}
