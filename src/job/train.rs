//! `sluice train`: the whole job on one machine, the queue embedded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use connectors::{Dataset, ReadPlan};
use indicatif::{ProgressBar, ProgressStyle};
use tracing::warn;

use super::summary::{FailedTask, Summary};
use super::wait;
use crate::config::{TrainConfig, TrainerChoice};
use crate::job::spec::JobSpec;
use crate::master::journal::MemoryJournal;
use crate::master::state::{JobFile, MasterState, StateError, StateLocation};
use crate::task::{Command, QueueConfig};
use crate::trainer::{ExecFactory, LinearFactory, ModelKind, NoneFactory, TrainerFactory};
use crate::worker::pipeline::{self, PipelineConfig, Progress};
use crate::worker::LocalQueue;

/// Errors that stop a training job before or while it runs.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// Reading the dataset failed.
    #[error(transparent)]
    Connector(#[from] connectors::Error),
    /// `_SUCCESS` never came.
    #[error(transparent)]
    Wait(#[from] wait::WaitError),
    /// The output is visibly unfinished.
    #[error("{url} is not finished: no _SUCCESS and in-flight output present ({markers}); wait for the job with --wait-success, or pass --allow-incomplete")]
    Unfinished {
        /// The dataset.
        url: String,
        /// In-flight names.
        markers: String,
    },
    /// The trainer refused the schema or could not be set up.
    #[error(transparent)]
    Trainer(#[from] crate::trainer::TrainerError),
    /// The queue configuration is invalid.
    #[error(transparent)]
    Queue(#[from] crate::task::ConfigError),
    /// The state directory is unusable.
    #[error(transparent)]
    State(#[from] StateError),
    /// The pipeline stopped.
    #[error(transparent)]
    Pipeline(#[from] pipeline::PipelineError),
    /// The model to continue from (`--init-model`) cannot be read.
    #[error("cannot read the model to continue from, {path}: {reason}")]
    InitModel {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Writing an output file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

/// Runs a training job and returns its summary.
pub async fn run(config: TrainConfig) -> Result<Summary, TrainError> {
    let started = Instant::now();
    let location = connectors::store::open(&config.url)?;
    let dataset = match config.wait_success {
        Some(timeout) => {
            wait::until_success(&location, &config.dataset, timeout, config.writer_pid).await?
        }
        None => Dataset::open(location.clone(), config.dataset.clone()).await?,
    };
    check_finished(&dataset, config.allow_incomplete)?;
    run_dataset(config, dataset, started).await
}

/// Trains on a dataset already opened and checked (`sluice run` opens the union of
/// several partitions); `started` is when the job began, for the summary's timing.
pub async fn run_dataset(
    config: TrainConfig,
    dataset: Dataset,
    started: Instant,
) -> Result<Summary, TrainError> {
    let plan = ReadPlan::new(&dataset, config.columns.as_deref(), config.batch_size)?;
    let factory = make_factory(&config.trainer, config.device_ids.as_ref())?;
    factory.validate(&plan.output_schema())?;
    let job = JobFile {
        spec: JobSpec {
            url: dataset.location.url(),
            splits: dataset.splits.clone(),
            plan,
            epochs: config.epochs,
            seed: config.seed,
            lease_timeout_ms: None,
        },
        queue: QueueConfig {
            epochs: config.epochs,
            max_attempts: config.max_attempts,
            lease_timeout_ms: config.lease_timeout.as_millis() as u64,
            seed: config.seed,
        },
    };
    let state = match &config.state {
        Some(dir) => {
            let location = StateLocation::Dir(dir.clone());
            let (mut state, resumed) = MasterState::open(&location, move || Ok(job)).await?;
            if resumed {
                // The run that wrote this state is gone: take its leases back now
                // instead of waiting for them to lapse.
                let _ = state.execute(Command::Tick { now: u64::MAX / 2 });
                warn!(state = %dir.display(), done = state.queue.status().tasks_done, "resuming from saved state");
            }
            state
        }
        None => MasterState::with_journal(job, Box::new(MemoryJournal::default()))?,
    };
    let spec = state.spec.clone();
    let source = LocalQueue::new(state);
    let total_tasks = spec.splits.len() as u64 * config.epochs as u64;
    let bar = progress_bar(config.progress, total_tasks);
    let pipeline_config = PipelineConfig {
        batch_size: config.batch_size,
        devices: config.devices,
        prefetch: config.prefetch,
        shuffle_buffer: config.shuffle_buffer,
        seed: config.seed,
        lease_timeout: Some(config.lease_timeout),
    };
    let splits = Arc::new(spec.splits.clone());
    let drawer = Drawer::new(bar.clone(), source.clone(), factory.clone(), config.epochs);
    let outcome = pipeline::run(
        Arc::new(source.clone()),
        dataset.location.clone(),
        splits.clone(),
        Arc::new(spec.plan.clone()),
        factory.clone(),
        pipeline_config,
        move |p| drawer.draw(p),
    )
    .await;
    bar.finish_and_clear();
    let outcome = outcome?;
    let report = factory.report();
    if let (TrainerChoice::Model(m), Some(model)) = (&config.trainer, &report.model) {
        if let Some(path) = &m.output {
            write_json(path, model)?;
        }
    }
    let failures = source.snapshot(|q| q.failures().to_vec());
    let tasks_done = source.status_now().tasks_done;
    let seconds = started.elapsed().as_secs_f64();
    let logistic = matches!(&config.trainer, TrainerChoice::Model(m) if m.logistic);
    let summary = Summary {
        url: dataset.location.url(),
        rows: outcome.rows,
        batches: outcome.batches,
        epochs: config.epochs,
        devices: config.devices,
        tasks_done,
        tasks_failed: failures
            .into_iter()
            .map(|f| FailedTask {
                file: splits
                    .get(f.split as usize)
                    .map(|s| dataset.location.display(&s.object_path()))
                    .unwrap_or_default(),
                epoch: f.epoch,
                split: f.split,
                attempts: f.attempts,
                reason: f.reason,
            })
            .collect(),
        seconds,
        rows_per_second: outcome.rows as f64 / seconds.max(1e-9),
        loss: report.epochs.iter().map(|e| e.loss).collect(),
        accuracy: logistic.then(|| report.epochs.iter().map(|e| e.accuracy).collect()),
        trainer: report,
    };
    if let Some(path) = &config.summary_json {
        let value = serde_json::to_value(&summary).unwrap_or_default();
        write_json(path, &value)?;
    }
    Ok(summary)
}

/// Refuses visibly unfinished output; warns when completeness cannot be told.
fn check_finished(dataset: &Dataset, allow_incomplete: bool) -> Result<(), TrainError> {
    if dataset.visibly_unfinished() {
        if !allow_incomplete {
            return Err(TrainError::Unfinished {
                url: dataset.location.url(),
                markers: dataset.in_flight.join(", "),
            });
        }
        warn!(url = %dataset.location.url(), "training on unfinished output (--allow-incomplete)");
    } else if !dataset.complete {
        warn!(url = %dataset.location.url(), "no _SUCCESS marker: cannot tell whether the output is complete");
    }
    for ignored in &dataset.ignored {
        warn!(path = %ignored.path, reason = %ignored.reason, "file not read");
    }
    Ok(())
}

/// Builds the trainers' factory for a trainer choice.
pub fn make_factory(
    trainer: &TrainerChoice,
    device_ids: Option<&Vec<String>>,
) -> Result<Arc<dyn TrainerFactory>, TrainError> {
    Ok(match trainer {
        TrainerChoice::None => Arc::new(NoneFactory::new()),
        TrainerChoice::Exec {
            command,
            restarts,
            timeout,
            env,
        } => {
            let mut f = ExecFactory::new(command.clone())
                .with_max_restarts(*restarts)
                .with_timeout(*timeout);
            for (key, value) in env {
                f = f.with_env(key, value);
            }
            if let Some(ids) = device_ids {
                f = f.with_device_ids(ids.clone());
            }
            Arc::new(f)
        }
        TrainerChoice::Model(m) => {
            let kind = if m.logistic {
                ModelKind::Logistic
            } else {
                ModelKind::Linear
            };
            let mut f = LinearFactory::new(kind, m.label.clone(), m.features.clone());
            if let Some(lr) = m.learning_rate {
                f = f.with_learning_rate(lr);
            }
            if let Some(path) = &m.init {
                f = f.with_init(read_model(path)?);
            }
            Arc::new(f)
        }
    })
}

/// Reads a model written by `--output`.
fn read_model(path: &std::path::Path) -> Result<serde_json::Value, TrainError> {
    let error = |reason: String| TrainError::InitModel {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| error(format!("not JSON: {e}")))
}

/// Writes pretty JSON to a file.
pub fn write_json(path: &std::path::Path, value: &serde_json::Value) -> Result<(), TrainError> {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    std::fs::write(path, text + "\n").map_err(|source| TrainError::Write {
        path: path.display().to_string(),
        source,
    })
}

fn progress_bar(enabled: bool, total: u64) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} tasks {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Draws progress at most every 100 ms.
struct Drawer {
    bar: ProgressBar,
    source: LocalQueue,
    factory: Arc<dyn TrainerFactory>,
    epochs: u32,
    started: Instant,
    last: std::sync::Mutex<Instant>,
}

impl Drawer {
    fn new(
        bar: ProgressBar,
        source: LocalQueue,
        factory: Arc<dyn TrainerFactory>,
        epochs: u32,
    ) -> Self {
        Drawer {
            bar,
            source,
            factory,
            epochs,
            started: Instant::now(),
            last: std::sync::Mutex::new(Instant::now()),
        }
    }

    fn draw(&self, p: &Progress) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() < Duration::from_millis(100) {
            return;
        }
        *last = Instant::now();
        let status = self.source.status_now();
        self.bar.set_position(status.tasks_done);
        let rate = p.rows as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        let mut msg = format!(
            "epoch {}/{} {} rows {:.0} rows/s",
            p.epoch + 1,
            self.epochs,
            p.rows,
            rate
        );
        if let Some(loss) = self.factory.current_loss() {
            msg.push_str(&format!(" loss {loss:.4}"));
        }
        self.bar.set_message(msg);
    }
}
