//! `sluice worker`: one elastic worker of a distributed job, fed by a remote master.

use connectors::Report;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::train::{make_factory, write_json, TrainError};
use crate::config::TrainerChoice;
use crate::protocol::spec::JobSpec;
use crate::trainer::TrainerFactory;
use crate::trainer::RESUME_CHECKPOINT_ENV;
use crate::worker::pipeline::{self, FinalCheckpointRule, PipelineConfig};
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
    /// Most bytes per batch handed to a trainer, if bounded.
    pub batch_bytes: Option<u64>,
    /// Tasks read ahead.
    pub prefetch: usize,
    /// Bytes read ahead (`None`: the default for the source).
    pub read_ahead: Option<u64>,
    /// The cache of remote files (`--cache`).
    pub cache: Option<crate::config::CacheConfig>,
    /// How long a read that fails for a reason that may pass is tried again.
    pub read_retry: Duration,
    /// Shuffle buffer rows.
    pub shuffle_buffer: usize,
    /// `--shuffle global`: the rows of a window (`None`: `--shuffle tasks`).
    pub shuffle_window: Option<u64>,
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
    /// The name it registers with, for people (status page, metrics).
    pub name: String,
    /// Progress lines where stderr is not a terminal (`--quiet` drops them).
    pub progress: bool,
    /// How to ask the catalog of a table-by-name job for the storage
    /// credentials it vends.
    pub catalog: crate::config::WorkerCatalogOptions,
}

/// Errors of a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Talking to the master failed.
    #[error("cannot {doing}")]
    Remote {
        /// What was being done (`join the job`).
        doing: &'static str,
        /// Why, naming the master.
        #[source]
        source: RemoteError,
    },
    /// Setting training up, or writing what it made, failed.
    #[error("cannot {doing}")]
    Train {
        /// What was being done (`start training the job`).
        doing: &'static str,
        /// Why.
        #[source]
        source: TrainError,
    },
    /// The pipeline stopped: a trainer, the queue or the reads.
    #[error("training stopped")]
    Pipeline {
        /// Why.
        #[source]
        source: crate::worker::pipeline::PipelineError,
    },
    /// A `Dataset` process of a `torchrun` job whose world is not the
    /// master's (`WORLD_SIZE` against `--world-size`).
    #[error("torchrun's WORLD_SIZE is {torchrun}, but the job's world has {world} ranks (sluice master --world-size {world}): start one process per rank")]
    World {
        /// `WORLD_SIZE` of the process.
        torchrun: u32,
        /// The master's `--world-size`.
        world: u32,
    },
    /// The dataset could not be opened.
    #[error("cannot open the job's source")]
    Connector {
        /// Why, naming the URL (boxed: it is large).
        #[source]
        source: Box<connectors::Error>,
    },
}

impl WorkerError {
    /// The error of the master, met while `doing`, for `map_err`.
    fn remote(doing: &'static str) -> impl FnOnce(RemoteError) -> WorkerError {
        move |source| WorkerError::Remote { doing, source }
    }

    /// The error of setting training up or finishing it, met while
    /// `doing`, for `map_err`.
    fn train(doing: &'static str) -> impl FnOnce(TrainError) -> WorkerError {
        move |source| WorkerError::Train { doing, source }
    }
}

/// What a worker did.
#[derive(Debug, Default)]
pub struct WorkerOutcome {
    /// Rows its trainers acknowledged.
    pub rows: u64,
    /// Batches acknowledged.
    pub batches: u64,
    /// Stopped early by a signal; its unfinished tasks were handed back.
    pub stopped: bool,
    /// Rows dropped by `--drop-last`.
    pub dropped: u64,
    /// Whether it joined the job (its master answered once).
    pub joined: bool,
    /// Stopped, the master (this URL) did not answer within the grace: the
    /// leases it held lapse there and are served again.
    pub master_lost: Option<String>,
    /// Times its trainers were rolled back to their last complete
    /// checkpoint (a lease of theirs went to another worker) and it joined
    /// the job again.
    pub rolled_back: u32,
    /// Its trainers keep checkpoints.
    pub checkpointed: bool,
    /// Rows served again to its trainers that restarted from their last
    /// checkpoint (what they acknowledged after it).
    pub replayed: u64,
    /// Rows its trainers held in no checkpoint when they ended their
    /// streams (no `checkpoint ID` after their last batch).
    pub unsaved_at_end: u64,
}

/// Runs a worker until the master says the job is over, or `stop` says to
/// stop early (pre-emption: its tasks are handed back).
pub async fn run(
    config: WorkerConfig,
    stop: Option<crate::worker::pipeline::Stop>,
) -> Result<WorkerOutcome, WorkerError> {
    let mut source = RemoteSource::new(
        &config.master,
        config.token.clone(),
        config.patience,
        config.ca_file.as_deref(),
    )
    .map_err(WorkerError::remote("set up the connection to the master"))?
    .with_name(config.name.clone());
    if let Some(stop) = &stop {
        source = source.with_stop(stop);
    }
    let source = Arc::new(source);
    let mut rolled_back = 0u32;
    let mut rejoined = 0u32;
    // The job's catalog is asked for vended credentials once per process.
    let mut asked = false;
    let mut replayed = 0u64;
    // Trainers that keep checkpoints ended their streams without a final
    // one: the rows in none are served once more (the master keeps them for
    // the next worker that joins, this one), and a second such end fails.
    let mut ended_unsaved = false;
    // Batches acknowledged in every join of the job, as rows are (the
    // source's counter): the last line counts them all.
    let batches = Arc::new(std::sync::atomic::AtomicU64::new(0));
    loop {
        let before = Counted {
            rows: source.rows_counter().load(Ordering::Relaxed),
            batches: batches.clone(),
        };
        let joins = rolled_back + rejoined;
        match run_once(&config, stop.as_ref(), &source, joins, before, &mut asked).await? {
            Ran::Ended(mut outcome) => {
                let unsaved = (!outcome.stopped).then_some(outcome.unsaved_at_end);
                match (unsaved, FinalCheckpointRule::of(&config.trainer)) {
                    (None | Some(0), _) | (_, FinalCheckpointRule::Unchecked) => {}
                    (Some(rows), FinalCheckpointRule::Warned) => {
                        pipeline::warn_attached_without_final_checkpoint(rows);
                    }
                    (Some(rows), FinalCheckpointRule::Enforced) if ended_unsaved => {
                        let error = pipeline::PipelineError::NoFinalCheckpoint { rows };
                        return Err(WorkerError::Pipeline { source: error });
                    }
                    (Some(rows), FinalCheckpointRule::Enforced) => {
                        ended_unsaved = true;
                        pipeline::warn_no_final_checkpoint(rows);
                    }
                }
                if outcome.checkpointed && !outcome.stopped && !job_over(&source).await {
                    // Another worker's trainers still hold rows in no
                    // checkpoint: if it is lost, they are served again, here
                    // too. Join again, trainers from their final checkpoint.
                    info!(
                        name = %config.name,
                        "the job is not over until every worker's trainers saved what they \
                         trained; joining again to serve what a lost worker held"
                    );
                    rejoined += 1;
                    replayed += outcome.replayed;
                    continue;
                }
                outcome.rolled_back = rolled_back;
                outcome.replayed += replayed;
                return Ok(outcome);
            }
            Ran::RolledBack(why) => {
                rolled_back += 1;
                tracing::warn!(
                    name = %config.name,
                    "{why}; joining the job again under the same name"
                );
            }
        }
    }
}

/// Whether the master says the job is over (taken as over when it cannot
/// say: the worker's own part is done).
async fn job_over(source: &RemoteSource) -> bool {
    use crate::protocol::TaskSource;
    match source.status().await {
        Ok(status) => status.job_over,
        Err(e) => {
            tracing::debug!(error = %Report(&e), "no job status");
            true
        }
    }
}

/// Asks the catalog of the job's table for the storage credentials it vends
/// (as the master did), kept fresh for as long as the worker runs. A
/// catalog that does not answer is a warning: the worker reads with the
/// credentials of its own environment.
async fn vended_credentials(
    table: &crate::protocol::spec::CatalogSource,
    login: &crate::config::WorkerCatalogOptions,
) {
    if !table.vended {
        return;
    }
    let options = login.for_catalog(&table.catalog);
    match crate::catalog::lookup(&options, &table.name).await {
        Ok(_) => {
            info!(catalog = %table.catalog, table = %table.name, "storage credentials vended by the catalog")
        }
        Err(e) => tracing::warn!(
            error = %Report(&e),
            "no storage credentials from the job's catalog: reading with this worker's own"
        ),
    }
}

/// How one membership of the job ended.
enum Ran {
    Ended(WorkerOutcome),
    /// Its trainers were rolled back (see [`pipeline::PipelineError::RolledBack`]):
    /// join again, from the name's last complete checkpoint.
    RolledBack(String),
}

/// What earlier joins of the job acknowledged: its rows, and the counter
/// of its batches that this join adds to.
struct Counted {
    rows: u64,
    batches: Arc<std::sync::atomic::AtomicU64>,
}

/// Joins the job (again) and trains until the job is over for this worker.
async fn run_once(
    config: &WorkerConfig,
    stop: Option<&crate::worker::pipeline::Stop>,
    source: &Arc<RemoteSource>,
    joins: u32,
    counted: Counted,
    asked: &mut bool,
) -> Result<Ran, WorkerError> {
    let before = counted.rows;
    let batches_before = counted.batches.load(Ordering::Relaxed);
    // Stopped before it joined: nothing is held, nothing to hand back.
    let spec = tokio::select! {
        spec = source.job_for(&config.name) => spec.map_err(WorkerError::remote("join the job"))?,
        () = stopped(stop) => {
            return Ok(Ran::Ended(stopped_outcome(config, before, batches_before, joins > 0)));
        }
    };
    info!(url = %spec.url, splits = spec.splits.len(), name = %config.name, "joined job");
    check_world(config, &spec)?;
    if let (Some(table), false) = (&spec.catalog_table, *asked) {
        *asked = true;
        vended_credentials(table, &config.catalog).await;
    }
    let location = job_location(&spec).map_err(|e| WorkerError::Connector { source: e.into() })?;
    let location = with_cache(config, &spec, source, location)
        .map_err(WorkerError::train("start training the job"))?;
    let factory =
        job_factory(config, &spec).map_err(WorkerError::train("start training the job"))?;
    let rows = source.rows_counter();
    let acknowledged = rows.clone();
    let batches_counted = counted.batches.clone();
    let gave_up = source.clone();
    let progress = WorkerProgress::spawn(rows.clone(), config.progress);
    let pipeline_config = pipeline_config(config, &spec, stop);
    let outcome = pipeline::run(
        source.clone(),
        location,
        Arc::new(spec.splits),
        Arc::new(spec.plan),
        factory.clone(),
        pipeline_config,
        move |p| {
            rows.store(before + p.rows, Ordering::Relaxed);
            counted
                .batches
                .store(batches_before + p.batches, Ordering::Relaxed);
            progress.epoch.store(p.epoch.0, Ordering::Relaxed);
        },
    )
    .await;
    let outcome = match outcome {
        Ok(outcome) => outcome,
        // Stopped, and the master did not answer within the grace: the
        // worker stops anyway; its leases lapse at the master.
        Err(e) if gave_up.gave_up_stopping() => {
            tracing::warn!(error = %Report(&e), "the master did not answer after the stop");
            return Ok(Ran::Ended(stopped_outcome(
                config,
                acknowledged.load(Ordering::Relaxed),
                batches_counted.load(Ordering::Relaxed),
                true,
            )));
        }
        Err(pipeline::PipelineError::RolledBack(why)) => return Ok(Ran::RolledBack(why)),
        Err(e) => return Err(WorkerError::Pipeline { source: e }),
    };
    if let (TrainerChoice::Model(m), Some(model)) = (&config.trainer, factory.report().model) {
        if let Some(path) = &m.output {
            write_json(path, &model).map_err(WorkerError::train("write the model (--output)"))?;
        }
    }
    let master_lost = outcome.stopped && gave_up.gave_up_stopping();
    Ok(Ran::Ended(joined_outcome(
        config,
        outcome,
        (before, batches_before),
        master_lost,
    )))
}

/// A worker stopped without the master's answer: its rows and batches so
/// far, its leases left to lapse at the master.
fn stopped_outcome(config: &WorkerConfig, rows: u64, batches: u64, joined: bool) -> WorkerOutcome {
    WorkerOutcome {
        rows,
        batches,
        stopped: true,
        joined,
        master_lost: Some(config.master.clone()),
        ..WorkerOutcome::default()
    }
}

/// What a join that ran to its end adds to the rows and batches counted
/// before it (`counted`); `master_lost` when its hand-backs did not reach
/// the master.
fn joined_outcome(
    config: &WorkerConfig,
    outcome: pipeline::RunOutcome,
    counted: (u64, u64),
    master_lost: bool,
) -> WorkerOutcome {
    WorkerOutcome {
        rows: counted.0 + outcome.rows,
        batches: counted.1 + outcome.batches,
        stopped: outcome.stopped,
        dropped: outcome.dropped,
        joined: true,
        master_lost: master_lost.then(|| config.master.clone()),
        rolled_back: 0,
        checkpointed: outcome.checkpointed,
        replayed: outcome.replayed,
        unsaved_at_end: outcome.unsaved_at_end,
    }
}

/// Where a joined job's data is read: its source (or sources).
fn job_location(spec: &JobSpec) -> Result<connectors::Location, connectors::Error> {
    let mut location = connectors::store::open(&spec.url)?;
    if !spec.sources.is_empty() {
        let all = spec
            .sources
            .iter()
            .map(|url| connectors::store::open(url))
            .collect::<Result<Vec<_>, _>>()?;
        location = location.with_sources(all);
    }
    Ok(location)
}

/// `location` read through the worker's `--cache` where the data is not
/// local (the cache reported to the master through `source`).
fn with_cache(
    config: &WorkerConfig,
    spec: &JobSpec,
    source: &Arc<RemoteSource>,
    mut location: connectors::Location,
) -> Result<connectors::Location, TrainError> {
    if let (Some(cache), true) = (&config.cache, location.is_all_local()) {
        super::train::cache_unused(cache);
    }
    if let (Some(cache), false) = (&config.cache, location.is_all_local()) {
        let cache = connectors::cache::Cache::open(&cache.dir, cache.size)
            .map_err(|e| TrainError::Cache(Report(&e).to_string()))?;
        let keys: Vec<_> = spec.splits.iter().map(|s| location.cache_key(s)).collect();
        cache.set_job(keys.iter().flatten());
        source.report_cache(cache.clone(), keys);
        location = location.with_cache(cache);
    }
    Ok(location)
}

/// The trainers of a joined job, checked against the batches it makes; a
/// worker started again under its name resumes from its last checkpoint.
fn job_factory(
    config: &WorkerConfig,
    spec: &JobSpec,
) -> Result<Arc<dyn TrainerFactory>, TrainError> {
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
        .map_err(TrainError::trainer(
            "set the trainer up for the columns read",
        ))?;
    Ok(factory)
}

/// A `Dataset` (an attached trainer) in a `torchrun` process joins a job of
/// `--world-size` only where `torchrun`'s `WORLD_SIZE` is that world.
fn check_world(config: &WorkerConfig, spec: &JobSpec) -> Result<(), WorkerError> {
    let attached = matches!(
        &config.trainer,
        TrainerChoice::Exec {
            attach: Some(_),
            ..
        }
    );
    let world = spec.global.as_ref().and_then(|g| g.world);
    let torchrun = std::env::var("WORLD_SIZE")
        .ok()
        .and_then(|w| w.trim().parse::<u32>().ok());
    match (attached, world, torchrun) {
        (true, Some(world), Some(torchrun)) if world != torchrun => {
            Err(WorkerError::World { torchrun, world })
        }
        _ => Ok(()),
    }
}

/// The pipeline of a joined job: the worker's options and the job's.
fn pipeline_config(
    config: &WorkerConfig,
    spec: &JobSpec,
    stop: Option<&crate::worker::pipeline::Stop>,
) -> PipelineConfig {
    PipelineConfig {
        batch_size: config.batch_size,
        batch_bytes: config.batch_bytes,
        devices: config.devices,
        prefetch: config.prefetch,
        read_ahead: config.read_ahead,
        read_retry: config.read_retry,
        shuffle_buffer: config.shuffle_buffer,
        shuffle_window: spec
            .global
            .as_ref()
            .map(|g| g.window)
            .or(config.shuffle_window),
        global_batch_size: spec.global.as_ref().map(|g| g.size),
        lanes: spec
            .global
            .as_ref()
            .and_then(|g| g.lanes.clone())
            .map(Arc::new),
        world: spec.global.as_ref().and_then(|g| g.world),
        seed: spec.seed,
        lease_timeout: spec.lease_timeout_ms.map(Duration::from_millis),
        stop: stop.cloned(),
        // A built-in model's devices step in lockstep (see `job::train`).
        lockstep: config.lockstep || matches!(config.trainer, TrainerChoice::Model(_)),
        drop_last: config.drop_last,
        follow: spec.follow.is_some(),
        select: Arc::new(spec.select.clone()),
        only_worker: false,
    }
}

/// Resolves once `stop` is requested (never without one).
async fn stopped(stop: Option<&crate::worker::pipeline::Stop>) {
    let Some(stop) = stop else {
        return std::future::pending().await;
    };
    let mut signal = stop.signal.clone();
    if signal.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A worker's progress lines where stderr is not a terminal: rows, rows/s
/// (over the last interval) and epoch every `--log-every` (the job's tasks are the master's; `sluice
/// status` shows them).
struct WorkerProgress {
    epoch: Arc<std::sync::atomic::AtomicU32>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl WorkerProgress {
    fn spawn(rows: Arc<std::sync::atomic::AtomicU64>, enabled: bool) -> WorkerProgress {
        let epoch = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let settings = crate::logging::settings();
        let task = (enabled && settings.progress_lines()).then(|| {
            let epoch = epoch.clone();
            tokio::spawn(async move {
                // Rows per second over the last interval, not since the start.
                let mut then = (std::time::Instant::now(), rows.load(Ordering::Relaxed));
                let mut ticks = tokio::time::interval(settings.every);
                ticks.tick().await;
                loop {
                    ticks.tick().await;
                    let rows = rows.load(Ordering::Relaxed);
                    let seconds = then.0.elapsed().as_secs_f64();
                    let rate = rows.saturating_sub(then.1) as f64 / seconds.max(1e-9);
                    then = (std::time::Instant::now(), rows);
                    let epoch = crate::epoch::Epoch(epoch.load(Ordering::Relaxed)).number();
                    tracing::info!(
                        target: crate::logging::PROGRESS,
                        rows,
                        rows_per_second = rate,
                        epoch,
                        "progress: epoch {epoch}, {rows} rows ({rate:.0} rows/s) trained by this worker"
                    );
                }
            })
        });
        WorkerProgress { epoch, task }
    }
}

impl Drop for WorkerProgress {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
