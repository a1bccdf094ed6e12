//! Running a master: open the state, list the dataset on first start, serve
//! HTTP until every epoch is done and the linger period has passed, or until
//! SIGTERM or SIGINT stops it gracefully (requests in flight answered, every
//! change applied made durable; a restart on the same state continues).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use connectors::{Dataset, DatasetOptions, ReadPlan, Report};
use tracing::info;

use super::http::{router, status_of, AppState};
use crate::protocol::spec::CatalogSource;
use crate::queue::QueueConfig;
use crate::state::commit::{CommitError, GroupCommit};
use crate::state::identity::{Identity, DATASET};
use crate::state::master_state::{JobRecord, MasterState, StateError, StateLocation};

/// Rows per decoded batch in the read plan a master serves (recorded in its
/// `job.json`): each worker cuts the rows into batches of its own
/// `--batch-size`, which the master does not know.
pub const DECODE_BATCH_ROWS: usize = 8192;

/// The shortest job token a master accepts, in bytes.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Settings of `sluice master`.
#[derive(Debug, Clone)]
pub struct MasterConfig {
    /// The dataset URL.
    pub url: String,
    /// How to read it.
    pub dataset: DatasetOptions,
    /// Columns workers read (all when `None`).
    pub columns: Option<Vec<String>>,
    /// The rows trained (`--split`, `--sample`, `--limit`).
    pub select: crate::config::SelectOptions,
    /// Queue settings.
    pub queue: QueueConfig,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where the job's state lives (a directory or an object store prefix).
    pub state: StateLocation,
    /// The job token.
    pub token: String,
    /// How long "job over" is served before exiting.
    pub linger: Duration,
    /// Train on visibly unfinished output.
    pub allow_incomplete: bool,
    /// Output with no data rows is a warning, not an error.
    pub allow_empty: bool,
    /// Serve HTTPS with this PEM certificate chain and key.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Resuming: put the failed tasks back and serve them (`--retry-failed`).
    pub retry_failed: bool,
    /// Follow the source as it grows (`--follow`).
    pub follow: Option<crate::config::FollowConfig>,
    /// The table the URL was resolved from, when the source was a table
    /// name: the job's identity, and what a followed job asks about.
    pub table: Option<crate::config::TableRef>,
    /// Several sources mixed by weight (`url` is the first of them).
    pub mix: Option<crate::config::MixConfig>,
}

/// Errors of the master.
#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    /// The dataset could not be read.
    #[error(transparent)]
    Connector(#[from] connectors::Error),
    /// An option breaks a rule.
    #[error(transparent)]
    Options(#[from] crate::config::OptionError),
    /// Several sources cannot be mixed as asked.
    #[error(transparent)]
    Mix(#[from] crate::mix::MixError),
    /// The rows to train cannot be chosen by the key asked for (`--split-key`).
    #[error(transparent)]
    Select(#[from] crate::protocol::select::SelectError),
    /// The state could not be opened.
    #[error(transparent)]
    State(#[from] StateError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {cause}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The failure.
        cause: std::io::Error,
    },
    /// The stop signals could not be listened for.
    #[error("cannot listen for SIGTERM and SIGINT: {cause}")]
    Signals {
        /// The failure.
        cause: std::io::Error,
    },
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] super::tls::TlsError),
    /// The journal could not be written: nothing after the last durable
    /// change was answered, and a restart on the same state continues.
    #[error("{}; the master stopped: start it again on the same state to continue", Report(.0))]
    Journal(CommitError),
    /// Trainers that keep checkpoints ended their streams without a final
    /// `checkpoint ID` twice over the same rows (the second time after
    /// those rows were served again), whichever workers' trainers they were.
    #[error(transparent)]
    NoFinalCheckpoint(crate::worker::pipeline::PipelineError),
    /// The job token is too short to keep strangers out.
    #[error("the job token has {bytes} bytes, fewer than the {min} a master needs: make one with `openssl rand -hex 24`")]
    ShortToken {
        /// Its length.
        bytes: usize,
        /// The least accepted.
        min: usize,
    },
    /// The output is visibly unfinished.
    #[error("{url} is not finished: no _SUCCESS and in-flight output present ({markers}); pass --allow-incomplete to train anyway")]
    Unfinished {
        /// The dataset.
        url: String,
        /// In-flight names.
        markers: String,
    },
    /// The output has no data rows, and `--allow-empty` was not given.
    #[error("{url} is empty output: no data rows (pass --allow-empty if that is expected)")]
    Empty {
        /// The dataset.
        url: String,
    },
    /// The job's filters kept no row, and `--allow-empty` was not given.
    #[error("{filters} kept no row of {url} (pass --allow-empty if that is expected)")]
    Filtered {
        /// The filters, named ([`crate::config::read::filters_named`]).
        filters: String,
        /// The dataset.
        url: String,
    },
    /// Following the source failed (`--follow`); what was taken before was served.
    #[error(transparent)]
    Follow(#[from] crate::follow::FollowError),
}

/// How the job ended.
#[derive(Debug)]
pub struct MasterOutcome {
    /// Tasks failed (the exit code is non-zero when there are any).
    pub failed: Vec<String>,
    /// Tasks done over all epochs.
    pub tasks_done: u64,
    /// Tasks over all epochs.
    pub tasks: u64,
    /// Whether every epoch is finished.
    pub job_over: bool,
    /// The signal that stopped the master, if one did.
    pub stopped_by: Option<StopSignal>,
    /// Rows served again because their worker was lost before its trainers
    /// saved them in a checkpoint.
    pub rows_made_up: u64,
}

impl MasterOutcome {
    /// A master that ended before its job existed: stopped by `signal`, or
    /// (`None`) with a followed source that held nothing until `--idle-exit`
    /// or `--follow-until` ended the wait (a job over with nothing to do).
    fn before_job(signal: Option<StopSignal>) -> MasterOutcome {
        MasterOutcome {
            failed: Vec::new(),
            tasks_done: 0,
            tasks: 0,
            job_over: signal.is_none(),
            stopped_by: signal,
            rows_made_up: 0,
        }
    }
}

/// A signal that stops a master gracefully: it stops accepting, answers the
/// requests in flight (their changes durable first), makes whatever else was
/// applied durable, and returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGTERM (what Kubernetes and systemd send).
    Term,
    /// SIGINT (Ctrl-C).
    Int,
}

impl StopSignal {
    /// The signal's name.
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Term => "SIGTERM",
            StopSignal::Int => "SIGINT",
        }
    }
}

/// The stop signals, listened for before the master binds its port.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn listen() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) -> StopSignal {
        tokio::select! {
            _ = self.term.recv() => StopSignal::Term,
            _ = self.int.recv() => StopSignal::Int,
        }
    }
}

/// Lists the dataset and builds the job (first start only); `None` where a
/// followed source held nothing until `--idle-exit` or `--follow-until`
/// ended the wait for it.
async fn make_job(config: &MasterConfig) -> Result<Option<JobRecord>, MasterError> {
    if let Some(mix) = &config.mix {
        return make_mixed_job(config, mix).await;
    }
    let location = connectors::store::open(&config.url)?;
    let (dataset, position) = match &config.follow {
        Some(follow) => {
            let first = crate::follow::first_dataset(
                &location,
                &config.dataset,
                follow,
                config.table.as_ref(),
            )
            .await?;
            match first {
                crate::follow::First::Found(dataset, position) => (dataset, Some(position)),
                crate::follow::First::Ended { .. } => return Ok(None),
            }
        }
        None => (Dataset::open(location, config.dataset.clone()).await?, None),
    };
    if position.is_none() && dataset.visibly_unfinished() && !config.allow_incomplete {
        return Err(MasterError::Unfinished {
            url: dataset.location.url(),
            markers: dataset.in_flight.join(", "),
        });
    }
    if position.is_none() && dataset.known_empty() && !config.allow_empty {
        return Err(empty(config, dataset.location.url()));
    }
    let plan = ReadPlan::new(&dataset, config.columns.as_deref(), DECODE_BATCH_ROWS)?;
    let mut job = JobRecord::build::<MasterError>(
        &dataset,
        plan,
        &config.select,
        position,
        config.queue.clone(),
    )?;
    job.spec.catalog_table = config.table.as_ref().map(|table| CatalogSource {
        catalog: without_userinfo(table.catalog.catalog.as_deref().unwrap_or_default()),
        name: table.name.clone(),
        vended: table.vended,
    });
    Ok(Some(job))
}

/// The error of a job on `url` that has no row to serve: the filters it
/// was given kept none, or (without filters) the output holds none.
fn empty(config: &MasterConfig, url: String) -> MasterError {
    match crate::config::read::filters_named(&config.dataset) {
        Some(filters) => MasterError::Filtered { filters, url },
        None => MasterError::Empty { url },
    }
}

/// Lists every source of `mix` and builds the job of their mix.
async fn make_mixed_job(
    config: &MasterConfig,
    mix: &crate::config::MixConfig,
) -> Result<Option<JobRecord>, MasterError> {
    let columns = config.columns.as_deref();
    if let Some(follow) = &config.follow {
        use crate::follow::several::{first_datasets, FirstOfAll};
        let FirstOfAll::Found(datasets, position) =
            first_datasets(mix, &config.dataset, follow).await?
        else {
            return Ok(None);
        };
        let (dataset, mixed) =
            crate::mix::finish(mix, datasets, columns, DECODE_BATCH_ROWS).await?;
        return mixed_job(config, mix, &dataset, &mixed, Some(position)).map(Some);
    }
    let (dataset, mixed) = crate::mix::open(
        mix,
        &config.dataset,
        columns,
        DECODE_BATCH_ROWS,
        |dataset| {
            if dataset.visibly_unfinished() && !config.allow_incomplete {
                return Err(MasterError::Unfinished {
                    url: dataset.location.url(),
                    markers: dataset.in_flight.join(", "),
                });
            }
            Ok(())
        },
    )
    .await?;
    if dataset.known_empty() && !config.allow_empty {
        return Err(empty(config, dataset.location.url()));
    }
    mixed_job(config, mix, &dataset, &mixed, None).map(Some)
}

/// The job of the sources of `mix` opened as `dataset` (`position`: where a
/// followed job stands in each).
fn mixed_job(
    config: &MasterConfig,
    mix: &crate::config::MixConfig,
    dataset: &Dataset,
    mixed: &crate::mix::Mixed,
    position: Option<crate::protocol::follow::FollowPosition>,
) -> Result<JobRecord, MasterError> {
    let plan = ReadPlan::new(dataset, config.columns.as_deref(), DECODE_BATCH_ROWS)?;
    let mut job = JobRecord::build::<MasterError>(
        dataset,
        plan,
        &config.select,
        position,
        config.queue.clone(),
    )?;
    let task_rows = crate::mix::plan::MASTER_TASK_ROWS;
    crate::mix::apply(&mut job, mixed, mix, task_rows)?;
    Ok(job)
}

/// `uri` without the user and password it may carry.
fn without_userinfo(uri: &str) -> String {
    match reqwest::Url::parse(uri) {
        Ok(mut url) if !url.username().is_empty() || url.password().is_some() => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.to_string()
        }
        _ => uri.to_string(),
    }
}

/// The options of `config` that decide what is trained (see [`Identity`]).
fn identity(config: &MasterConfig) -> Result<Identity, MasterError> {
    let dataset = match &config.table {
        Some(table) => table.identity.clone(),
        None => connectors::store::open(&config.url)?.url(),
    };
    Ok(Identity::default()
        .with(DATASET, dataset)
        .with("epochs", config.queue.epochs)
        .with("seed", config.queue.seed)
        .with_opt("columns", config.columns.as_ref().map(|c| c.join(",")))
        .with_opt("follow", config.follow.map(|_| "true"))
        .with_select(&config.select)
        .with_dataset(&config.dataset)
        .with_opt("sources", config.mix.as_ref().map(|m| m.describe()))
        .with_opt("epoch-rows", config.mix.as_ref().and_then(|m| m.epoch_rows))
        .with_opt(
            "source-column",
            config.mix.as_ref().and_then(|m| m.source_column.clone()),
        ))
}

/// Runs the master until the job is over and the linger period passed.
pub async fn run(config: MasterConfig) -> Result<MasterOutcome, MasterError> {
    if config.token.len() < MIN_TOKEN_BYTES {
        return Err(MasterError::ShortToken {
            bytes: config.token.len(),
            min: MIN_TOKEN_BYTES,
        });
    }
    let identity = identity(&config)?;
    // From the start: a signal while the source is listed or awaited stops
    // the master before it has written anything.
    let mut signals =
        StopSignals::listen().map_err(|source| MasterError::Signals { cause: source })?;
    let job_exists = MasterState::exists(&config.state).await?;
    let made = if job_exists {
        None
    } else {
        let made = tokio::select! {
            made = make_job(&config) => made?,
            signal = signals.next() => return Ok(MasterOutcome::before_job(Some(signal))),
        };
        match made {
            Some(job) => Some(job),
            None => return Ok(MasterOutcome::before_job(None)),
        }
    };
    let (state, resumed) = MasterState::open(&config.state, identity, move || {
        made.ok_or_else(|| StateError::JobVanished {
            path: "job.json".to_string(),
            what: "disappeared",
        })
    })
    .await?;
    let mut state = state;
    if resumed {
        // The workers went on while this master was down: its downtime must
        // not expire their leases nor count them gone.
        state
            .execute(crate::queue::Command::RenewAll {
                now: crate::wall::wall_millis(),
            })
            .map_err(|e| MasterError::State(e.into()))?;
        if config.follow.is_some() && !state.queue().is_open() {
            // Closed by --idle-exit or --follow-until: follow on.
            state
                .execute(crate::queue::Command::Reopen {
                    now: crate::wall::wall_millis(),
                })
                .map_err(|e| MasterError::State(e.into()))?;
        }
        if config.retry_failed {
            state
                .retry_failed(crate::wall::wall_millis())
                .map_err(|e| MasterError::State(e.into()))?;
        }
    }
    info!(
        resumed,
        splits = state.spec.splits.len(),
        "master state ready"
    );
    let following = match (&config.follow, &state.spec.follow, &config.mix) {
        (Some(follow), Some(_), Some(mix)) if state.queue().is_open() => Some(
            crate::follow::Follower::resume_several(
                &state,
                mix,
                &config.dataset,
                *follow,
                std::time::SystemTime::now(),
            )
            .await?,
        ),
        (Some(follow), Some(_), None) if state.queue().is_open() => {
            let location = connectors::store::open(&config.url)?;
            Some(
                crate::follow::Follower::resume(
                    &state,
                    location,
                    config.dataset.clone(),
                    *follow,
                    std::time::SystemTime::now(),
                    config.table.clone(),
                )
                .await?,
            )
        }
        _ => None,
    };
    let master = Arc::new(Mutex::new(state));
    let commit = GroupCommit::start(master.clone()).map_err(|source| MasterError::Listen {
        addr: config.listen,
        cause: source,
    })?;
    // The follower runs beside the server in this task; it is dropped (not
    // closed: a restarted master follows on) when serving stops first.
    let followed: std::cell::RefCell<Option<Result<(), crate::follow::FollowError>>> =
        Default::default();
    let follow_fut = {
        let grow = commit.clone();
        let followed = &followed;
        async move {
            if let Some((follower, next, ends)) = following {
                let result = crate::follow::run(follower, &grow, next, ends).await;
                if let Err(e) = &result {
                    tracing::error!(error = %Report(e), "following stopped; the master serves what it took, then ends");
                }
                *followed.borrow_mut() = Some(result);
            }
            std::future::pending::<std::convert::Infallible>().await
        }
    };
    let app = AppState {
        master: master.clone(),
        commit: commit.clone(),
        token: Arc::new(config.token.clone()),
    };
    // Checked before binding, so a bad certificate fails the start at once.
    let acceptor = match &config.tls {
        Some((cert, key)) => Some(super::tls::acceptor(cert, key)?),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| MasterError::Listen {
            addr: config.listen,
            cause: source,
        })?;
    let addr = listener.local_addr().unwrap_or(config.listen);
    let scheme = if acceptor.is_some() { "https" } else { "http" };
    crate::logging::result(format!(
        "sluice master listening on {scheme}://{addr} (state {})",
        config.state
    ));
    let stopped_by = Arc::new(Mutex::new(None));
    // A second signal while the requests in flight are answered.
    let (now_tx, now_rx) = tokio::sync::oneshot::channel::<StopSignal>();
    let shutdown = {
        let stopped_by = stopped_by.clone();
        let over = job_over(master.clone(), config.linger);
        async move {
            tokio::select! {
                () = over => {}
                signal = signals.next() => {
                    crate::logging::result_warning(format!(
                        "sluice master: {}: stopping; answering the requests in flight",
                        signal.name()
                    ));
                    *stopped_by.lock().unwrap_or_else(|e| e.into_inner()) = Some(signal);
                    // A second signal while those finish stops at once: what
                    // was answered is durable, the rest a restart redoes.
                    tokio::spawn(async move {
                        let again = signals.next().await;
                        crate::logging::result_warning(format!("sluice master: {}: stopping now", again.name()));
                        let _ = now_tx.send(again);
                    });
                }
            }
        }
    };
    let serving = async {
        let serve = async {
            match acceptor {
                Some(acceptor) => {
                    let tls = super::tls::listener(listener, acceptor);
                    super::listen::serve(tls, router(app), shutdown).await;
                }
                None => super::listen::serve(listener, router(app), shutdown).await,
            }
        };
        tokio::select! {
            () = serve => {}
            never = follow_fut => match never {},
        }
    };
    let stop_now = async {
        match now_rx.await {
            Ok(signal) => signal,
            // No second signal can come any more.
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        () = serving => {
            // Every request is answered; changes of requests whose clients
            // hung up before their answer become durable too.
            commit.sync().await.map_err(MasterError::Journal)?;
        }
        error = commit.failed() => return Err(MasterError::Journal(error)),
        // What was answered is durable; the rest a restart redoes.
        _ = stop_now => {}
    }
    if let Some(Err(e)) = followed.take() {
        return Err(MasterError::Follow(e));
    }
    let stopped_by = *stopped_by.lock().unwrap_or_else(|e| e.into_inner());
    let m = master.lock().unwrap_or_else(|e| e.into_inner());
    let status = status_of(&m);
    let queue = &status.queue;
    if let Some(rows) = m.queue().no_final_checkpoint() {
        use crate::worker::pipeline::PipelineError;
        return Err(MasterError::NoFinalCheckpoint(
            PipelineError::NoFinalCheckpoint { rows },
        ));
    }
    if queue.job_over && queue.rows_done == 0 && status.failed.is_empty() {
        // Rows a listing cannot tell (text formats) turned out to be none.
        if !config.allow_empty {
            return Err(empty(&config, m.spec.url.clone()));
        }
        tracing::warn!(url = %m.spec.url, "empty output: no data rows (allowed by --allow-empty)");
    }
    Ok(MasterOutcome {
        failed: status
            .failed
            .iter()
            .map(|f| {
                format!(
                    "{} (epoch {}): {}",
                    f.file,
                    crate::epoch::Epoch(f.epoch),
                    f.reason
                )
            })
            .collect(),
        tasks_done: status.queue.tasks_done,
        tasks: (status.queue.splits as u64).saturating_mul(u64::from(status.queue.epochs)),
        job_over: status.queue.job_over,
        stopped_by,
        rows_made_up: m.queue().rows_made_up(),
    })
}

/// Resolves once the job has been over for `linger`; samples the master's
/// figures (and forgets departed workers) twice a second meanwhile, and
/// writes its progress lines.
async fn job_over(master: Arc<Mutex<MasterState>>, linger: Duration) {
    let mut ticker = tokio::time::interval(Duration::from_millis(500));
    let mut progress: Option<MasterProgress> = None;
    loop {
        ticker.tick().await;
        let mut m = master.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        m.sample(now);
        progress
            .get_or_insert_with(|| MasterProgress::new(&m))
            .tick(&m);
        if m.queue().is_over() {
            let since = *m.over_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= linger {
                return;
            }
        }
    }
}

/// A master's progress lines: at least every `--log-every` while the job
/// runs, and at the end of each epoch (the last one's is `job over`).
/// Written whether or not stderr is a terminal: a master draws no bar.
struct MasterProgress {
    /// Rows committed when this master started.
    rows_before: u64,
    epoch: u32,
    due: crate::logging::Every,
    /// Rows committed at the last line, and when: rows per second are over
    /// the last interval.
    rows_then: u64,
    then: std::time::Instant,
    /// When the epoch of `epoch` began (for its line's rows per second).
    epoch_began: std::time::Instant,
}

impl MasterProgress {
    fn new(m: &MasterState) -> MasterProgress {
        let status = m.queue().status();
        MasterProgress {
            rows_before: status.rows_committed,
            epoch: status.epoch,
            due: crate::logging::Every::new(crate::logging::settings().every),
            rows_then: status.rows_committed,
            then: std::time::Instant::now(),
            epoch_began: std::time::Instant::now(),
        }
    }

    fn tick(&mut self, m: &MasterState) {
        // Over: the last epoch's line is `job over`, written elsewhere; the
        // epochs that ended since the last tick before it still get theirs.
        let over = m.queue().is_over();
        let epoch_done = m.queue().epoch() > self.epoch;
        if !epoch_done && (over || !self.due.due()) {
            return;
        }
        self.due.reset();
        let status = status_of(m);
        let queue = &status.queue;
        let tasks = (queue.splits as u64).saturating_mul(u64::from(queue.epochs));
        let eta = m.eta(std::time::Instant::now());
        let line = |epoch, epoch_done, rows, rows_per_second| crate::logging::ProgressLine {
            epoch,
            epochs: queue.epochs,
            epoch_done,
            rows,
            rows_per_second,
            tasks_done: queue.tasks_done,
            tasks,
            eta,
            workers: Some(status.workers.len()),
            leases: Some(queue.leased),
        };
        // Each epoch that ended: its own rows, not those of the next one
        // its workers leased meanwhile.
        while self.epoch < queue.epoch {
            let rows = epoch_rows(m.queue(), self.epoch);
            let seconds = self.epoch_began.elapsed().as_secs_f64();
            line(self.epoch, true, rows, per_second(rows, seconds)).log();
            self.epoch += 1;
            self.epoch_began = std::time::Instant::now();
        }
        if epoch_done || over {
            return;
        }
        let rate = per_second(
            status.rows_committed.saturating_sub(self.rows_then),
            self.then.elapsed().as_secs_f64(),
        );
        self.rows_then = status.rows_committed;
        self.then = std::time::Instant::now();
        match &status.follow {
            Some(follow) => crate::logging::FollowLine {
                rows_trained: status.rows_committed,
                rows_taken: known_rows(m.queue()).max(status.rows_committed),
                tasks_trained: queue.tasks_done,
                tasks_taken: (queue.splits as u64).max(queue.tasks_done),
                rows_per_second: rate,
                lag_rows: follow.lag_rows,
                lag_seconds: follow.lag_seconds,
            }
            .log(),
            None => line(
                queue.epoch,
                false,
                status.rows_committed.saturating_sub(self.rows_before),
                rate,
            )
            .log(),
        }
    }
}

/// The rows of `epoch`, once it is over: every split's but those failed in it.
fn epoch_rows(queue: &crate::queue::Queue, epoch: u32) -> u64 {
    let failed: std::collections::BTreeSet<u32> = queue
        .failures()
        .iter()
        .filter(|f| f.epoch == epoch)
        .map(|f| f.split)
        .collect();
    (0..queue.tasks().len() as u32)
        .filter(|s| !failed.contains(s))
        .filter_map(|s| queue.split_rows(s))
        .sum()
}

/// The rows of the splits whose rows are known.
fn known_rows(queue: &crate::queue::Queue) -> u64 {
    (0..queue.tasks().len() as u32)
        .filter_map(|s| queue.split_rows(s))
        .sum()
}

/// `rows` over `seconds`, 0 over no time.
fn per_second(rows: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        rows as f64 / seconds
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::without_userinfo;

    #[test]
    fn a_catalog_uri_told_to_workers_carries_no_user_or_password() {
        assert_eq!(
            without_userinfo("https://svc:p4ss@catalog.example:8181/ws"),
            "https://catalog.example:8181/ws"
        );
        assert_eq!(
            without_userinfo("http://127.0.0.1:8181"),
            "http://127.0.0.1:8181"
        );
        assert_eq!(without_userinfo("thrift://hms:9083"), "thrift://hms:9083");
    }
}
