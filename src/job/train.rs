//! `sluice train`: the whole job on one machine, the queue embedded.

use connectors::Report;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use connectors::{Dataset, ReadPlan};
use indicatif::{ProgressBar, ProgressStyle};
use tracing::warn;

use super::progress::{Intake, Sample, Tally};
use super::summary::{FailedTask, Resumed, ServedAgain, Summary};
use super::wait;
use crate::config::{ModelChoice, TrainConfig, TrainerChoice};
use crate::plan::{Followed, PlanError, PlanRequest, Sources};
use crate::protocol::follow::FollowPosition;
use crate::protocol::spec::JobSpec;
use crate::queue::Command;
use crate::state::dir_log::write_durably;
use crate::state::journal::MemoryJournal;
use crate::state::LocalQueue;
use crate::state::{JobRecord, MasterState, StateError, StateLocation};
use crate::trainer::{
    ExecFactory, LinearFactory, LinearKind, ModelCheckpoints, NoneFactory, TrainerFactory,
    Transform, TransformFactory, RESUME_CHECKPOINT_ENV,
};
use crate::wall::wall_millis;
use crate::worker::pipeline::{self, PipelineConfig, Progress, Stop};

/// Errors that stop a training job before or while it runs.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The source could not be opened, or its read planned.
    #[error("cannot {doing}")]
    Connector {
        /// What was being done (`open the source`).
        doing: String,
        /// Why, naming the path or column (boxed: it is large).
        #[source]
        source: Box<connectors::Error>,
    },
    /// The cache directory (`--cache`) cannot be used.
    #[error("{0}")]
    Cache(String),
    /// The job could not be planned, or its source followed (boxed: it is
    /// large).
    // transparent: each PlanError says what the planner was doing and on
    // which source, in the words `sluice train` and `sluice master` share;
    // "cannot plan the job" before it would say nothing more.
    #[error(transparent)]
    Plan(Box<PlanError>),
    /// `_SUCCESS` never came.
    #[error("cannot wait for the output to finish (--wait-success)")]
    Wait {
        /// Why the wait ended, naming the output.
        #[source]
        source: wait::WaitError,
    },
    /// The trainer refused the schema or could not be set up.
    #[error("cannot {doing}")]
    Trainer {
        /// What was being done (`set the trainer up for the columns read`).
        doing: &'static str,
        /// Why, naming the column or option.
        #[source]
        source: crate::trainer::TrainerError,
    },
    /// The state directory is unusable.
    #[error("cannot {doing} the job's state")]
    State {
        /// What was being done (`open`, `resume`).
        doing: &'static str,
        /// Why, naming the state (boxed: it is large).
        #[source]
        source: Box<StateError>,
    },
    /// The pipeline stopped.
    #[error("training stopped")]
    Pipeline {
        /// Why: the trainer, the queue or the reads.
        #[source]
        source: pipeline::PipelineError,
    },
    /// The model to continue from (`--init-model`) cannot be read.
    #[error("cannot read the model to continue from, {path}: {cause}")]
    InitModel {
        /// The file.
        path: String,
        /// The read's failure.
        cause: std::io::Error,
    },
    /// The model to continue from (`--init-model`) is not JSON.
    #[error("the model to continue from, {path}, is not JSON: {cause}")]
    InitModelJson {
        /// The file.
        path: String,
        /// What the JSON parser found.
        cause: serde_json::Error,
    },
    /// A signal stopped the run before the job was over.
    #[error("stopped by a signal after {rows} rows: what the trainers acknowledged is committed{resume}")]
    Stopped {
        /// Rows trained in this run.
        rows: u64,
        /// How to go on.
        resume: String,
    },
    /// Writing an output file failed.
    #[error("cannot write {path}: {cause}")]
    Write {
        /// The file.
        path: String,
        /// The failure.
        cause: std::io::Error,
    },
}

impl TrainError {
    /// The error of the source, which failed while `doing`, for `map_err`.
    pub fn read(doing: impl Into<String>) -> impl FnOnce(connectors::Error) -> TrainError {
        let doing = doing.into();
        move |source| TrainError::Connector {
            doing,
            source: Box::new(source),
        }
    }

    /// The error of the trainer, which refused while `doing`, for `map_err`.
    pub fn trainer(doing: &'static str) -> impl FnOnce(crate::trainer::TrainerError) -> TrainError {
        move |source| TrainError::Trainer { doing, source }
    }

    /// The error of the job's state, which failed while the run was to
    /// `doing` it (`open`), for `map_err`.
    pub fn state(doing: &'static str) -> impl FnOnce(StateError) -> TrainError {
        move |source| TrainError::State {
            doing,
            source: Box::new(source),
        }
    }
}

/// The pipeline stops the training: every pipeline error is the training's.
impl From<pipeline::PipelineError> for TrainError {
    fn from(source: pipeline::PipelineError) -> Self {
        TrainError::Pipeline { source }
    }
}

impl From<PlanError> for TrainError {
    fn from(e: PlanError) -> Self {
        TrainError::Plan(Box::new(e))
    }
}

/// The file in the state directory written when a run has ended, after its
/// outputs: the run's summary.
pub const FINISHED: &str = "finished.json";

/// The directory in the state directory of the built-in models' checkpoints.
pub const CHECKPOINTS: &str = "checkpoints";

/// How a training job ended.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per run
pub enum Outcome {
    /// It trained (from the start, or resuming its state).
    Trained(Summary),
    /// Its `--state` holds this very job, finished by an earlier run: nothing
    /// was trained and no output file was written.
    AlreadyFinished(Finished),
}

/// A job found finished in its state.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The state directory.
    pub state: PathBuf,
    /// Tasks done over all epochs.
    pub tasks_done: u64,
    /// Tasks given up: a rerun of such a job exits 2 again, naming them
    /// (`--retry-failed` puts them back instead).
    pub tasks_failed: Vec<FailedTask>,
}

impl Finished {
    /// One line for people.
    pub fn line(&self) -> String {
        format!(
            "job in {} already finished ({} tasks done, {} failed); nothing to do{}",
            self.state.display(),
            self.tasks_done,
            self.tasks_failed.len(),
            if self.tasks_failed.is_empty() {
                " (to train again, pass another --state)"
            } else {
                " (--retry-failed reads the failed tasks again)"
            }
        )
    }
}

/// `dataset` with reads of its remote files kept in the `--cache`
/// directory; a local dataset as it is (its directory is not touched).
fn with_cache(config: &TrainConfig, mut dataset: Dataset) -> Result<Dataset, TrainError> {
    let Some(cache) = &config.cache else {
        return Ok(dataset);
    };
    if dataset.location.is_all_local() {
        cache_unused(cache);
        return Ok(dataset);
    }
    let cache = connectors::cache::Cache::open(&cache.dir, cache.size)
        .map_err(|e| TrainError::Cache(Report(&e).to_string()))?;
    let keys: Vec<_> = dataset
        .splits
        .iter()
        .filter_map(|s| dataset.location.cache_key(s))
        .collect();
    cache.set_job(&keys);
    dataset.location = dataset.location.clone().with_cache(cache);
    Ok(dataset)
}

/// Says once per process that `--cache` is not used: every source of the
/// job is on the local filesystem, read where it lies.
pub(crate) fn cache_unused(cache: &crate::config::CacheConfig) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        warn!(dir = %cache.dir.display(), "--cache is not used: the source is on the local filesystem, read where it lies");
    });
}

/// Runs a training job and returns how it ended; `stop`, when given, stops
/// it early (SIGINT/SIGTERM): acknowledged rows are committed and the tasks
/// handed back, so `--state` resumes where it stopped.
pub async fn run(config: TrainConfig, stop: Option<Stop>) -> Result<Outcome, TrainError> {
    let location =
        connectors::store::open(&config.url).map_err(TrainError::read("open the source"))?;
    let waiting = Instant::now();
    let request = PlanRequest::of_train(&config);
    if let (None, None, Some(timeout)) = (&config.follow, &config.mix, config.wait_success) {
        let wait = wait::until_success(&location, &config.dataset, timeout, config.writer_pid);
        let Some(dataset) = until_stopped(stop.as_ref(), wait).await else {
            return Err(stopped_waiting(&config));
        };
        let dataset = dataset.map_err(|source| TrainError::Wait { source })?;
        request.check_finished(&dataset)?;
        return run_dataset(config, stop, dataset, waiting.elapsed()).await;
    }
    let opened = match until_stopped(stop.as_ref(), request.open(&location)).await {
        Some(opened) => opened?,
        None => return Err(stopped_waiting(&config)),
    };
    let Sources::Found {
        dataset,
        mixed,
        position,
    } = opened
    else {
        return nothing_followed(&config, &location, waiting.elapsed());
    };
    // A followed job's wait for its first data is in its summary.
    let waited = match position {
        Some(_) => waiting.elapsed(),
        None => Duration::ZERO,
    };
    run_job(config, stop, dataset, position, waited, mixed).await
}

/// Runs `work` until it is done (`Some`) or `stop` is requested first
/// (`None`: `work` is dropped). Only for work that holds nothing durable.
pub async fn until_stopped<T>(
    stop: Option<&Stop>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    let Some(stop) = stop else {
        return Some(work.await);
    };
    let mut signal = stop.signal.clone();
    tokio::select! {
        done = work => Some(done),
        Ok(_) = signal.wait_for(|stop| *stop) => None,
    }
}

/// A command stopped by a signal before its job started (while a catalog
/// was asked): nothing was trained or written.
pub fn stopped_before_start() -> TrainError {
    TrainError::Stopped {
        rows: 0,
        resume: "; run the same command to go on".to_string(),
    }
}

/// A run stopped before it trained anything (waiting for its data).
fn stopped_waiting(config: &TrainConfig) -> TrainError {
    TrainError::Stopped {
        rows: 0,
        resume: resume_hint(config),
    }
}

/// How a stopped run goes on, as its error says it.
fn resume_hint(config: &TrainConfig) -> String {
    match &config.state {
        Some(dir) => format!("; run the same command to resume from {}", dir.display()),
        None => " (no --state: nothing to resume from)".to_string(),
    }
}

/// Trains on a dataset already opened and checked (`sluice run` opens the union of
/// several partitions); `waited` is how long the job waited for `_SUCCESS`
/// before, for the summary (its rows per second count training only).
pub async fn run_dataset(
    config: TrainConfig,
    stop: Option<Stop>,
    dataset: Dataset,
    waited: Duration,
) -> Result<Outcome, TrainError> {
    run_job(config, stop, dataset, None, waited, None).await
}

/// [`run_dataset`] of a mixed job (`mixed`: its sources, opened as one
/// dataset by [`crate::mix::finish`]); `sluice run` of `[[source]]` tables.
pub async fn run_dataset_mixed(
    config: TrainConfig,
    stop: Option<Stop>,
    dataset: Dataset,
    mixed: Option<crate::mix::Mixed>,
) -> Result<Outcome, TrainError> {
    run_job(config, stop, dataset, None, Duration::ZERO, mixed).await
}

/// Trains on `dataset`; a followed job (`follow`: where the dataset stands
/// in its source) then grows with what the source commits. `waited` is how
/// long the job waited for its data before (for the summary).
async fn run_job(
    config: TrainConfig,
    stop: Option<Stop>,
    dataset: Dataset,
    follow: Option<FollowPosition>,
    waited: Duration,
    mixed: Option<crate::mix::Mixed>,
) -> Result<Outcome, TrainError> {
    let started = Instant::now();
    let dataset = with_cache(&config, dataset)?;
    let request = PlanRequest::of_train(&config);
    request.refuse_empty(&dataset, follow.as_ref())?;
    if dataset.known_empty() && follow.is_none() && dataset.schema().fields().is_empty() {
        return nothing_to_train(&config, &dataset, started, waited);
    }
    let (job, factory) = plan_job(&config, &request, &dataset, follow, mixed.as_ref())?;
    let schema = job.spec.plan.output_schema();
    if config.mix.is_some() {
        factory.validate(&schema).map_err(TrainError::trainer(
            "set the trainer up for the columns read",
        ))?;
    }
    let ready = match &config.state {
        Some(dir) => {
            match open_state(&config, &request, &dataset, dir, job, factory, &schema).await? {
                Opened::Ready(ready) => ready,
                Opened::Finished(finished) => return Ok(Outcome::AlreadyFinished(finished)),
            }
        }
        None => Ready {
            state: MasterState::with_journal(job, Box::new(MemoryJournal::default()))
                .map_err(TrainError::state("open"))?,
            factory,
            resumed_from: None,
            rewound: 0,
            after_stop: false,
        },
    };
    // `--follow-until` counts from the start, the wait for the first data included.
    let since = started.checked_sub(waited).unwrap_or(started);
    let trained = train(&config, &request, stop, &dataset, since, ready).await?;
    finish(&config, &dataset, started, waited, trained)
}

/// Plans the job of `dataset` (see [`PlanRequest::job`]) with the trainers'
/// factory, checked against the columns read.
fn plan_job(
    config: &TrainConfig,
    request: &PlanRequest,
    dataset: &Dataset,
    follow: Option<FollowPosition>,
    mixed: Option<&crate::mix::Mixed>,
) -> Result<(JobRecord, Arc<dyn TrainerFactory>), TrainError> {
    let plan = request.read_plan(dataset)?;
    let factory = make_factory(
        &config.trainer,
        config.device_ids.as_ref(),
        config.lockstep,
        &config.transform,
    )?;
    factory
        .validate(&plan.output_schema())
        .map_err(TrainError::trainer(
            "set the trainer up for the columns read",
        ))?;
    let job = request.job(dataset, plan, follow, mixed)?;
    Ok((job, factory))
}

/// A job's queue ready to train, with its trainers' factory, and what
/// resuming it changed.
struct Ready {
    state: MasterState,
    factory: Arc<dyn TrainerFactory>,
    /// The trainers' checkpoint the run continues from.
    resumed_from: Option<Resumed>,
    /// Rows acknowledged after the last complete checkpoint, served again.
    rewound: u64,
    /// Whether this run resumes one that stopped before its end.
    after_stop: bool,
}

/// What a job's `--state` holds.
#[allow(clippy::large_enum_variant)] // one per run
enum Opened {
    /// A job to train (new, or resumed).
    Ready(Ready),
    /// This very job, finished by an earlier run.
    Finished(Finished),
}

/// Opens (or creates) the job's state in `dir` and resumes it: failed tasks
/// put back (`--retry-failed`), a followed job reopened, the trainers taken
/// back to their last complete checkpoint, a gone run's leases taken back.
/// The trainers' factory, made again for a checkpoint, is checked against
/// `schema`, the columns read.
async fn open_state(
    config: &TrainConfig,
    request: &PlanRequest,
    dataset: &Dataset,
    dir: &std::path::Path,
    job: JobRecord,
    factory: Arc<dyn TrainerFactory>,
    schema: &SchemaRef,
) -> Result<Opened, TrainError> {
    let location = StateLocation::Dir(dir.to_path_buf());
    let identity = request.identity(|| Ok(dataset.location.url()))?;
    let (state, resumed) = MasterState::open(&location, identity, move || Ok(job))
        .await
        .map_err(TrainError::state("open"))?;
    let mut ready = Ready {
        after_stop: resumed && !state.queue().is_over(),
        state,
        factory,
        resumed_from: None,
        rewound: 0,
    };
    let state = &mut ready.state;
    if resumed && config.retry_failed && !state.queue().failures().is_empty() {
        state
            .retry_failed(crate::wall::wall_millis())
            .map_err(TrainError::state("resume"))?;
    }
    if resumed {
        request.reopen(state).map_err(TrainError::state("resume"))?;
    }
    let mut finishing = false;
    if resumed && state.queue().is_over() {
        // States written before the identity was recorded have no
        // FINISHED either: there a queue over is all one can tell.
        if dir.join(FINISHED).exists() || state.identity.is_empty() {
            let status = state.queue().status();
            check_rows(config, dataset, &status)?;
            return Ok(Opened::Finished(Finished {
                state: dir.to_path_buf(),
                tasks_done: status.tasks_done,
                tasks_failed: failed_tasks(dataset, &dataset.splits, state.queue().failures()),
            }));
        }
        // The last run did every task but stopped before it wrote its
        // outputs: this run writes them (a checkpointed job first
        // trains what its last checkpoint lacks).
        warn!(state = %dir.display(), "the last run did every task but stopped before it ended; finishing it");
        finishing = true;
    }
    if resumed && state.queue().cut().checkpointed {
        rewind_to_checkpoint(config, dir, schema, &mut ready)?;
    } else if resumed {
        take_back_leases(state)?;
        if !finishing {
            warn!(state = %dir.display(), done = state.queue().status().tasks_done, "resuming from saved state");
        }
    }
    if let TrainerChoice::Model(model) = &config.trainer {
        model_from_state(config, model, dir, schema, &mut ready)?;
    }
    Ok(Opened::Ready(ready))
}

/// The run that wrote this state is gone: its leases are taken back now
/// instead of waiting for them to lapse. Its master went with it: a crash,
/// not an attempt of the tasks it held (RenewAll first).
fn take_back_leases(state: &mut MasterState) -> Result<(), TrainError> {
    let now = crate::wall::wall_millis();
    let take_back = || {
        StateError::journal(
            state.describe(),
            "take back the leases of the run that wrote it",
        )
    };
    let (renew, tick) = (take_back(), take_back());
    state
        .execute(Command::RenewAll { now })
        .map_err(renew)
        .map_err(TrainError::state("resume"))?;
    state
        .execute(Command::Tick { now: u64::MAX / 2 })
        .map_err(tick)
        .map_err(TrainError::state("resume"))?;
    Ok(())
}

/// A built-in model keeps its checkpoints in the state, and a resume
/// continues the last complete one: the trainer built so, checked against
/// the columns read.
fn model_from_state(
    config: &TrainConfig,
    model: &ModelChoice,
    dir: &std::path::Path,
    schema: &SchemaRef,
    ready: &mut Ready,
) -> Result<(), TrainError> {
    let checkpoints = ModelCheckpoints {
        dir: dir.join(CHECKPOINTS),
        every: config.checkpoint_every,
        resume: ready.resumed_from.as_ref().map(|r| r.checkpoint.clone()),
    };
    let path = checkpoints.resume.as_ref().map(|id| checkpoints.path(id));
    ready.factory = TransformFactory::wrap(
        Arc::new(linear_factory(model, Some(checkpoints))?),
        &config.transform,
    );
    ready.factory.validate(schema).map_err(TrainError::trainer(
        "set the trainer up for the columns read",
    ))?;
    if let Some(path) = path {
        warn!(path = %path.display(), "the model continues from its checkpoint");
    }
    Ok(())
}

/// A resumed job whose trainers keep checkpoints goes back to the last
/// complete one: the rows after it are served again, and every trainer
/// loads it.
fn rewind_to_checkpoint(
    config: &TrainConfig,
    dir: &std::path::Path,
    schema: &SchemaRef,
    ready: &mut Ready,
) -> Result<(), TrainError> {
    let state = &mut ready.state;
    let committed = state.queue().rows_committed();
    let rewind = StateError::journal(state.describe(), "go back to its last complete checkpoint");
    state
        .execute(Command::Rewind { now: wall_millis() })
        .map_err(rewind)
        .map_err(TrainError::state("resume"))?;
    let cut = state.queue().cut();
    ready.rewound = committed.saturating_sub(cut.rows);
    warn!(
        state = %dir.display(),
        checkpoint = cut.id.as_deref().unwrap_or("none"),
        rows = cut.rows,
        "resuming from the trainers' last complete checkpoint"
    );
    ready.resumed_from = cut.id.clone().map(|checkpoint| Resumed {
        checkpoint,
        rows: cut.rows,
    });
    if let (Some(id), TrainerChoice::Exec { .. }) = (&cut.id, &config.trainer) {
        let mut trainer = config.trainer.clone();
        if let TrainerChoice::Exec { env, .. } = &mut trainer {
            env.push((RESUME_CHECKPOINT_ENV.to_string(), id.clone()));
        }
        ready.factory = make_factory(
            &trainer,
            config.device_ids.as_ref(),
            config.lockstep,
            &config.transform,
        )?;
        ready.factory.validate(schema).map_err(TrainError::trainer(
            "set the trainer up for the columns read",
        ))?;
    }
    Ok(())
}

/// The trainer factory of a run whose trainers start from checkpoint `id`
/// (none: from scratch): an exec trainer is told it in its environment.
fn resumed_factory(
    config: &TrainConfig,
    schema: SchemaRef,
    id: Option<&str>,
) -> Result<Arc<dyn TrainerFactory>, TrainError> {
    let mut trainer = config.trainer.clone();
    if let (Some(id), TrainerChoice::Exec { env, .. }) = (id, &mut trainer) {
        env.retain(|(key, _)| key != RESUME_CHECKPOINT_ENV);
        env.push((RESUME_CHECKPOINT_ENV.to_string(), id.to_string()));
    }
    let factory = make_factory(
        &trainer,
        config.device_ids.as_ref(),
        config.lockstep,
        &config.transform,
    )?;
    factory.validate(&schema).map_err(TrainError::trainer(
        "set the trainer up for the columns read",
    ))?;
    Ok(factory)
}

/// What two runs of the pipeline over one queue did together.
fn add_runs(first: pipeline::RunOutcome, then: pipeline::RunOutcome) -> pipeline::RunOutcome {
    pipeline::RunOutcome {
        rows: first.rows + then.rows,
        batches: first.batches + then.batches,
        read_failures: first.read_failures + then.read_failures,
        stopped: then.stopped,
        dropped: first.dropped + then.dropped,
        checkpointed: first.checkpointed || then.checkpointed,
        replayed: first.replayed + then.replayed + first.unsaved_at_end,
        cut: first.cut + then.cut,
        unsaved_at_end: then.unsaved_at_end,
        unsaved_pieces_at_end: then.unsaved_pieces_at_end,
        source_rows: add_counts(first.source_rows, &then.source_rows),
    }
}

/// `first` and `then` added index by index.
fn add_counts(mut first: Vec<u64>, then: &[u64]) -> Vec<u64> {
    if first.len() < then.len() {
        first.resize(then.len(), 0);
    }
    for (sum, n) in first.iter_mut().zip(then) {
        *sum += n;
    }
    first
}

/// What the pipeline did, and what the summary reads after it.
struct Trained {
    outcome: pipeline::RunOutcome,
    source: LocalQueue,
    spec: Arc<JobSpec>,
    factory: Arc<dyn TrainerFactory>,
    resumed_from: Option<Resumed>,
    rewound: u64,
    after_stop: bool,
}

/// Runs the pipeline on the job's queue until the job is over or `stop`
/// stops it, following the source beside it for a followed job, with a
/// progress bar or progress lines.
async fn train(
    config: &TrainConfig,
    request: &PlanRequest,
    stop: Option<Stop>,
    dataset: &Dataset,
    started: Instant,
    ready: Ready,
) -> Result<Trained, TrainError> {
    let Ready {
        state,
        factory,
        resumed_from,
        rewound,
        after_stop,
    } = ready;
    let (spec, lanes) = (state.spec.clone(), state.queue().config().lanes.clone());
    let started_at = std::time::SystemTime::now() - started.elapsed();
    let following = request
        .follower(&state, || Ok(dataset.location.clone()), started_at)
        .await?;
    let source = LocalQueue::new(state);
    // The follower runs beside the pipeline in this task.
    let followed = Followed::default();
    let grow = source.clone();
    let follow_fut = followed.follow(following, &grow, |_| {});
    let total_tasks = spec.splits.len() as u64 * config.epochs as u64;
    // Where progress is written as lines (no terminal, or JSON), no bar.
    let lines = crate::logging::settings().progress_lines();
    let bar = progress_bar(config.progress && !lines, total_tasks);
    let pipeline_config = pipeline_config_of(config, &spec, lanes, stop);
    let splits = Arc::new(spec.splits.clone());
    let drawer = Drawer::new(bar.clone(), source.clone(), factory.clone(), config.epochs);
    let rows_total = rows_total(&spec, config.epochs);
    let progress_lines = (config.progress && lines).then(|| {
        ProgressLines::spawn(
            source.clone(),
            drawer.epoch_rows.clone(),
            rows_total,
            spec.follow.is_some(),
        )
    });
    let plan = Arc::new(spec.plan.clone());
    let pipeline_fut = run_to_final_checkpoint(
        config,
        &source,
        dataset,
        Reading {
            splits,
            plan,
            pipeline: pipeline_config,
        },
        factory.clone(),
        &drawer,
    );
    let outcome = tokio::select! {
        outcome = pipeline_fut => outcome,
        never = follow_fut => match never {},
    };
    if let Some(lines) = progress_lines {
        lines.finish();
    }
    bar.finish_and_clear();
    let (outcome, factory) = outcome?;
    followed.failed()?;
    if outcome.stopped {
        return Err(TrainError::Stopped {
            rows: outcome.rows,
            resume: resume_hint(config),
        });
    }
    Ok(Trained {
        outcome,
        source,
        spec,
        factory,
        resumed_from,
        rewound,
        after_stop,
    })
}

/// How `sluice train` runs its pipeline. A built-in model is the same from
/// run to run with the same --seed: its tasks are read one at a time, in
/// the order they are leased, and its devices step in lockstep (one batch
/// each per step, summed in device order).
fn pipeline_config_of(
    config: &TrainConfig,
    spec: &JobSpec,
    lanes: Option<crate::queue::Lanes>,
    stop: Option<Stop>,
) -> PipelineConfig {
    let builtin = matches!(config.trainer, TrainerChoice::Model(_));
    PipelineConfig {
        batch_size: config.batch_size,
        batch_bytes: config.batch_bytes,
        devices: config.devices,
        prefetch: if builtin { 1 } else { config.prefetch },
        read_ahead: config.read_ahead,
        read_retry: config.read_retry,
        shuffle_buffer: config.shuffle_buffer,
        shuffle_window: config.shuffle_window,
        global_batch_size: config.global_batch_size,
        lanes: lanes.map(Arc::new),
        world: None,
        seed: config.seed,
        lease_timeout: Some(config.lease_timeout),
        stop,
        lockstep: config.lockstep || builtin,
        drop_last: config.drop_last,
        follow: spec.follow.is_some(),
        select: Arc::new(spec.select.clone()),
        only_worker: true,
    }
}

/// The rows of every epoch, where every split's count is known; `None`
/// for a followed job, whose rows grow as its source commits.
fn rows_total(spec: &JobSpec, epochs: u32) -> Option<u64> {
    spec.splits
        .iter()
        .map(|s| s.rows)
        .try_fold(0u64, |sum, rows| rows.map(|r| sum.saturating_add(r)))
        .map(|per_epoch| per_epoch.saturating_mul(u64::from(epochs)))
        .filter(|_| spec.follow.is_none())
}

/// What one pipeline run reads: the job's splits, its read plan and how.
struct Reading {
    splits: Arc<Vec<connectors::Split>>,
    plan: Arc<ReadPlan>,
    pipeline: PipelineConfig,
}

/// Runs the pipeline until the job is over; where a trainer that keeps
/// checkpoints ended with rows in none, once more from its last complete
/// checkpoint (as a worker that joins again), and then refused.
async fn run_to_final_checkpoint(
    config: &TrainConfig,
    source: &LocalQueue,
    dataset: &Dataset,
    reading: Reading,
    factory: Arc<dyn TrainerFactory>,
    drawer: &Drawer,
) -> Result<(pipeline::RunOutcome, Arc<dyn TrainerFactory>), TrainError> {
    let Reading {
        splits,
        plan,
        pipeline: pipeline_config,
    } = reading;
    let mut factory = factory;
    let mut before: Option<pipeline::RunOutcome> = None;
    loop {
        let outcome = pipeline::run(
            Arc::new(source.clone()),
            dataset.location.clone(),
            splits.clone(),
            plan.clone(),
            factory.clone(),
            pipeline_config.clone(),
            |p| drawer.draw(p),
        )
        .await?;
        let unsaved = (!outcome.stopped).then_some(outcome.unsaved_at_end);
        let served_once = before.is_some();
        let outcome = match before.take() {
            Some(first) => add_runs(first, outcome),
            None => outcome,
        };
        let rule = pipeline::FinalCheckpointRule::of(&config.trainer);
        match (unsaved, rule) {
            (None | Some(0), _) | (_, pipeline::FinalCheckpointRule::Unchecked) => {
                return Ok((outcome, factory));
            }
            (Some(rows), pipeline::FinalCheckpointRule::Warned) => {
                pipeline::warn_attached_without_final_checkpoint(rows);
                return Ok((outcome, factory));
            }
            (Some(rows), pipeline::FinalCheckpointRule::Enforced) if served_once => {
                return Err(pipeline::PipelineError::NoFinalCheckpoint { rows }.into());
            }
            (Some(rows), pipeline::FinalCheckpointRule::Enforced) => {
                // As a worker that joins again: the trainers start from
                // the last complete checkpoint and the rows after it are
                // served once more.
                pipeline::warn_no_final_checkpoint(rows);
                let id = source.rewind().map_err(pipeline::PipelineError::from)?;
                factory = resumed_factory(config, plan.output_schema(), id.as_deref())?;
                before = Some(outcome);
            }
        }
    }
}

/// Ends a job that trained to its end: writes the model (`--output`) and
/// the summary (`--summary-json`, and `finished.json` in the state), then
/// refuses output that turned out to hold no rows.
fn finish(
    config: &TrainConfig,
    dataset: &Dataset,
    started: Instant,
    waited: Duration,
    trained: Trained,
) -> Result<Outcome, TrainError> {
    let Trained {
        outcome,
        source,
        spec,
        factory,
        resumed_from,
        rewound,
        after_stop,
    } = trained;
    let report = factory.report();
    if let (TrainerChoice::Model(m), Some(model)) = (&config.trainer, &report.model) {
        if let Some(path) = &m.output {
            write_json(path, model)?;
        }
    }
    let failures = source.snapshot(|q| q.failures().to_vec());
    let splits = Arc::new(source.splits_now());
    let tasks_done = source.status_now().tasks_done;
    let seconds = started.elapsed().as_secs_f64();
    let logistic = matches!(&config.trainer, TrainerChoice::Model(m) if m.logistic);
    let summary = Summary {
        table: spec.table.clone(),
        url: dataset.location.url(),
        rows: outcome.rows,
        batches: outcome.batches,
        dropped_rows: outcome.dropped,
        epochs: config.epochs,
        devices: config.devices,
        tasks_done,
        tasks_failed: failed_tasks(dataset, &splits, &failures),
        seconds,
        rows_per_second: outcome.rows as f64 / seconds.max(1e-9),
        waited_seconds: waited.as_secs_f64(),
        loss: report.epochs.iter().map(|e| e.loss).collect(),
        accuracy: logistic.then(|| report.epochs.iter().map(|e| e.accuracy).collect()),
        resumed: resumed_from,
        served_again: ServedAgain::new(outcome.replayed, rewound, after_stop),
        trainer: report,
        filter: config
            .dataset
            .row_filter
            .is_some()
            .then(connectors::row_filter::filter_counts),
        cache: dataset.location.cache().map(|c| c.stats()),
        sources: super::summary::source_rows(config.mix.as_ref(), &outcome.source_rows),
    };
    if let Some(path) = &config.summary_json {
        let value = serde_json::to_value(&summary).unwrap_or_default();
        write_json(path, &value)?;
    }
    if let Some(dir) = &config.state {
        let value = serde_json::to_vec_pretty(&summary).unwrap_or_default();
        write_durably(&dir.join(FINISHED), &value)
            .map_err(StateError::journal(
                dir.display().to_string(),
                "record that the run ended (finished.json)",
            ))
            .map_err(TrainError::state("close"))?;
    }
    check_rows(config, dataset, &source.status_now())?;
    Ok(Outcome::Trained(summary))
}

/// The job's given-up tasks, each with the file it reads.
fn failed_tasks(
    dataset: &Dataset,
    splits: &[connectors::Split],
    failures: &[crate::queue::TaskFailure],
) -> Vec<FailedTask> {
    failures
        .iter()
        .map(|f| FailedTask {
            file: splits
                .get(f.split as usize)
                .map(|s| {
                    let location = dataset.location.of_source(s.source);
                    location.display(&s.object_path())
                })
                .unwrap_or_default(),
            epoch: f.epoch,
            split: f.split,
            attempts: f.attempts,
            reason: f.reason.clone(),
        })
        .collect()
}

/// Checks what the job asks of the dataset's schema without training: its
/// `--columns`, and the trainer's label, features and transforms. A dry run
/// so fails where the run would, naming the column.
pub fn check_schema(config: &TrainConfig, dataset: &Dataset) -> Result<(), TrainError> {
    if dataset.schema().fields().is_empty() {
        return Ok(());
    }
    // Each error of the plan names the path or the flag at fault.
    let plan = ReadPlan::new(dataset, config.columns.as_deref(), config.batch_size)
        .map_err(TrainError::read("plan the read"))?;
    let mut trainer = config.trainer.clone();
    if let TrainerChoice::Model(model) = &mut trainer {
        // The model a run continues from is no part of the schema.
        model.init = None;
    }
    let factory = make_factory(&trainer, None, false, &config.transform)?;
    factory
        .validate(&plan.output_schema())
        .map_err(TrainError::trainer(
            "set the trainer up for the columns read",
        ))?;
    Ok(())
}

/// Output with no data file and so no schema, allowed by `--allow-empty`:
/// a warning and the summary of a run that trained nothing, without starting
/// a trainer (there is not even a schema to hand one).
fn nothing_to_train(
    config: &TrainConfig,
    dataset: &Dataset,
    started: Instant,
    waited: Duration,
) -> Result<Outcome, TrainError> {
    let url = dataset.location.url();
    warn!(url = %url, "empty output: no data rows (allowed by --allow-empty)");
    nothing_trained(config, url, dataset.table.clone(), started, waited)
}

/// A followed source that held nothing until `--idle-exit` or
/// `--follow-until` ended the wait for it: the summary of a run that
/// trained nothing. Its `--state` is not created (there was no schema to
/// record), so a rerun waits afresh.
fn nothing_followed(
    config: &TrainConfig,
    location: &connectors::Location,
    waited: Duration,
) -> Result<Outcome, TrainError> {
    nothing_trained(config, location.url(), None, Instant::now(), waited)
}

/// The summary of a run that trained nothing, written where asked.
fn nothing_trained(
    config: &TrainConfig,
    url: String,
    table: Option<connectors::TableInfo>,
    started: Instant,
    waited: Duration,
) -> Result<Outcome, TrainError> {
    let logistic = matches!(&config.trainer, TrainerChoice::Model(m) if m.logistic);
    let summary = Summary {
        table,
        url,
        rows: 0,
        batches: 0,
        dropped_rows: 0,
        epochs: config.epochs,
        devices: config.devices,
        tasks_done: 0,
        tasks_failed: Vec::new(),
        seconds: started.elapsed().as_secs_f64(),
        rows_per_second: 0.0,
        waited_seconds: waited.as_secs_f64(),
        loss: Vec::new(),
        accuracy: logistic.then(Vec::new),
        served_again: ServedAgain::default(),
        resumed: None,
        trainer: Default::default(),
        filter: None,
        cache: None,
        sources: Vec::new(),
    };
    if let Some(path) = &config.summary_json {
        let value = serde_json::to_value(&summary).unwrap_or_default();
        write_json(path, &value)?;
    }
    Ok(Outcome::Trained(summary))
}

/// After a job is over: output whose rows could not be known before reading
/// (text formats) and that turned out to hold none is refused as empty, as
/// output known empty from its listing is before training; with
/// `--allow-empty`, a warning. A job with failed tasks is not judged here.
fn check_rows(
    config: &TrainConfig,
    dataset: &Dataset,
    status: &crate::queue::QueueStatus,
) -> Result<(), TrainError> {
    if status.rows_done > 0 || !status.failures.is_empty() {
        return Ok(());
    }
    let url = dataset.location.url();
    if !config.allow_empty {
        return Err(PlanRequest::of_train(config).empty(url).into());
    }
    match crate::config::read::filters_named(&config.dataset) {
        Some(filters) => warn!(url = %url, "{filters} kept no row (allowed by --allow-empty)"),
        None => warn!(url = %url, "empty output: no data rows (allowed by --allow-empty)"),
    }
    Ok(())
}

/// Builds the trainers' factory for a trainer choice; `lockstep` makes exec
/// trainers one `torch.distributed` group (see [`ExecFactory::with_lockstep`]),
/// and `transform` is applied to every batch before a trainer gets it.
pub fn make_factory(
    trainer: &TrainerChoice,
    device_ids: Option<&Vec<String>>,
    lockstep: bool,
    transform: &Transform,
) -> Result<Arc<dyn TrainerFactory>, TrainError> {
    let factory: Arc<dyn TrainerFactory> = match trainer {
        TrainerChoice::None => Arc::new(NoneFactory::new()),
        TrainerChoice::Exec {
            command,
            restarts,
            timeout,
            env,
            attach,
        } => {
            let mut f = ExecFactory::new(command.clone())
                .with_max_restarts(*restarts)
                .with_timeout(*timeout);
            if let Some(attach) = attach {
                f = f.with_attach(*attach);
            }
            for (key, value) in env {
                f = f.with_env(key, value);
            }
            if let Some(ids) = device_ids {
                f = f.with_device_ids(ids.clone());
            }
            if lockstep {
                f = f.with_lockstep().map_err(TrainError::trainer(
                    "set the trainers up in lockstep (--lockstep)",
                ))?;
            }
            Arc::new(f)
        }
        TrainerChoice::Model(m) => Arc::new(linear_factory(m, None)?),
    };
    // Built-in models read views as they are; only exec trainers may need
    // plain strings (see `--string-view`).
    let builtin = !matches!(trainer, TrainerChoice::Exec { .. });
    let transform = Transform {
        string_view: transform.string_view || builtin,
        ..transform.clone()
    };
    Ok(TransformFactory::wrap(factory, &transform))
}

/// Builds the factory of a built-in model, keeping `checkpoints` if given (a
/// checkpoint to resume takes the place of `--init-model`).
fn linear_factory(
    m: &ModelChoice,
    checkpoints: Option<ModelCheckpoints>,
) -> Result<LinearFactory, TrainError> {
    let kind = if m.logistic {
        LinearKind::Logistic
    } else {
        LinearKind::Linear
    };
    let mut f = LinearFactory::new(kind, m.label.clone(), m.features.clone());
    if let Some(lr) = m.learning_rate {
        f = f.with_learning_rate(lr);
    }
    let resumes = checkpoints.as_ref().is_some_and(|c| c.resume.is_some());
    if let (Some(path), false) = (&m.init, resumes) {
        f = f.with_init(read_model(path)?);
    }
    if let Some(checkpoints) = checkpoints {
        f = f.with_checkpoints(checkpoints);
    }
    Ok(f)
}

/// Reads a model written by `--output`.
fn read_model(path: &std::path::Path) -> Result<serde_json::Value, TrainError> {
    let shown = || path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TrainError::InitModel {
        path: shown(),
        cause: source,
    })?;
    serde_json::from_str(&text).map_err(|source| TrainError::InitModelJson {
        path: shown(),
        cause: source,
    })
}

/// Writes pretty JSON to a file.
pub fn write_json(path: &std::path::Path, value: &serde_json::Value) -> Result<(), TrainError> {
    let text = serde_json::to_string_pretty(value).unwrap_or_default() + "\n";
    // Whole or not at all: a full disk leaves no empty or partial file.
    let mode = crate::sys::fd::PUBLIC_FILE;
    crate::sys::fd::write_replacing(path, text.as_bytes(), mode).map_err(|source| {
        TrainError::Write {
            path: path.display().to_string(),
            cause: source,
        }
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
    /// Rows the trainers acknowledged so far, by epoch (for progress lines).
    epoch_rows: Arc<std::sync::Mutex<Vec<u64>>>,
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
            epoch_rows: Arc::default(),
            bar,
            source,
            factory,
            epochs,
            started: Instant::now(),
            last: std::sync::Mutex::new(Instant::now()),
        }
    }

    fn draw(&self, p: &Progress) {
        self.epoch_rows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone_from(&p.epoch_rows);
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() < Duration::from_millis(100) {
            return;
        }
        *last = Instant::now();
        let status = self.source.status_now();
        // A followed job's tasks grow as its source commits.
        self.bar
            .set_length(status.splits as u64 * u64::from(self.epochs));
        self.bar.set_position(status.tasks_done);
        let rate = p.rows as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        let mut msg = format!(
            "epoch {}/{} {} rows {:.0} rows/s",
            p.epoch, self.epochs, p.rows, rate
        );
        if let Some(loss) = self.factory.current_loss() {
            msg.push_str(&format!(" loss {loss:.4}"));
        }
        self.bar.set_message(msg);
    }
}

/// Progress lines where stderr is not a terminal (in place of the bar): one
/// at least every `--log-every`, and one at the end of each epoch but the
/// last (the summary says how that one ended); a followed job's say what
/// was taken, what was trained and the lag (see [`Tally`]). Stops when
/// dropped; [`ProgressLines::finish`] first writes the lines of epochs that
/// ended since the last look.
struct ProgressLines {
    task: tokio::task::JoinHandle<()>,
    sampler: Arc<Sampler>,
    tally: Arc<std::sync::Mutex<Tally>>,
}

/// Takes the samples progress lines are counted from.
struct Sampler {
    source: LocalQueue,
    epoch_rows: Arc<std::sync::Mutex<Vec<u64>>>,
    follow: bool,
}

impl Sampler {
    /// Where the job stands now; a followed job's intake is counted only
    /// for a `periodic` line (it walks every task).
    fn sample(&self, periodic: bool) -> Sample {
        let status = self.source.status_now();
        let intake = (self.follow && periodic).then(|| {
            let taken = self.source.snapshot(|q| {
                (0..status.splits as u32)
                    .filter_map(|s| q.split_rows(s))
                    .sum::<u64>()
            });
            let lag = self.source.follow_now();
            Intake {
                rows_taken: taken,
                lag_rows: lag.as_ref().map_or(0, |l| l.lag_rows),
                lag_seconds: lag.as_ref().map_or(0.0, |l| l.lag_seconds),
            }
        });
        Sample {
            epoch: status.epoch,
            epochs: status.epochs,
            job_over: status.job_over,
            tasks_done: status.tasks_done,
            splits: status.splits as u64,
            rows_committed: status.rows_committed,
            epoch_rows: self
                .epoch_rows
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            // A followed job's sample says it follows, counted or not.
            follow: self.follow.then(|| intake.unwrap_or_default()),
        }
    }
}

impl ProgressLines {
    fn spawn(
        source: LocalQueue,
        epoch_rows: Arc<std::sync::Mutex<Vec<u64>>>,
        rows_total: Option<u64>,
        follow: bool,
    ) -> ProgressLines {
        let every = crate::logging::settings().every;
        let sampler = Arc::new(Sampler {
            source,
            epoch_rows,
            follow,
        });
        let tally = Arc::new(std::sync::Mutex::new(Tally::new(
            sampler.sample(false),
            rows_total,
            Instant::now(),
        )));
        let task = {
            let (sampler, tally) = (sampler.clone(), tally.clone());
            tokio::spawn(async move {
                let mut due = crate::logging::Every::new(every);
                let mut ticks = tokio::time::interval(Duration::from_millis(250).min(every));
                loop {
                    ticks.tick().await;
                    let periodic = due.due();
                    let sample = sampler.sample(periodic);
                    let lines = tally.lock().unwrap_or_else(|e| e.into_inner()).lines(
                        &sample,
                        Instant::now(),
                        periodic,
                    );
                    for line in &lines {
                        line.log();
                    }
                    if !lines.is_empty() {
                        due.reset();
                    }
                }
            })
        };
        ProgressLines {
            task,
            sampler,
            tally,
        }
    }

    /// Stops the lines, writing those of the epochs that ended since the
    /// last look (a short epoch may end between two).
    fn finish(self) {
        self.task.abort();
        let sample = self.sampler.sample(false);
        let lines = self.tally.lock().unwrap_or_else(|e| e.into_inner()).lines(
            &sample,
            Instant::now(),
            false,
        );
        for line in &lines {
            line.log();
        }
    }
}

impl Drop for ProgressLines {
    fn drop(&mut self) {
        self.task.abort();
    }
}
