//! Running a master: open the state, have the job planned on first start
//! ([`crate::plan`]), serve HTTP until every epoch is done and the linger
//! period has passed, or until SIGTERM or SIGINT stops it gracefully
//! (requests in flight answered, every change applied made durable; a
//! restart on the same state continues).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use connectors::Report;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::info;

use super::http::{router, status_of, AppState};
use crate::epoch::Epoch;
use crate::plan::{Followed, Following, PlanError, PlanRequest, Sources};
use crate::state::commit::{CommitError, GroupCommit};
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
    /// What the job is planned of (its sources, how they are read, the
    /// rows chosen, the queue settings).
    pub plan: PlanRequest,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where the job's state lives (a directory or an object store prefix).
    pub state: StateLocation,
    /// The job token.
    pub token: String,
    /// How long "job over" is served before exiting.
    pub linger: Duration,
    /// Serve HTTPS with this PEM certificate chain and key.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Resuming: put the failed tasks back and serve them (`--retry-failed`).
    pub retry_failed: bool,
}

/// Errors of the master.
#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    /// The job could not be planned, or its source followed (boxed: it is
    /// large).
    // transparent: each PlanError says what the planner was doing and on
    // which source, in the words `sluice train` and `sluice master` share;
    // "cannot plan the job" before it would say nothing more.
    #[error(transparent)]
    Plan(Box<PlanError>),
    /// The state could not be opened or resumed.
    #[error("cannot {doing} the job's state")]
    State {
        /// What was being done (`open`, `resume`).
        doing: &'static str,
        /// Why, naming the state (boxed: it is large).
        #[source]
        source: Box<StateError>,
    },
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
    #[error("cannot serve HTTPS (--tls-cert, --tls-key)")]
    Tls {
        /// Which file is wrong, and how.
        #[source]
        source: super::tls::TlsError,
    },
    /// The journal could not be written: nothing after the last durable
    /// change was answered, and a restart on the same state continues.
    #[error("{}; the master stopped: start it again on the same state to continue", Report(.0))]
    Journal(CommitError),
    /// Trainers that keep checkpoints ended their streams without a final
    /// `checkpoint ID` twice over the same rows (the second time after
    /// those rows were served again), whichever workers' trainers they were.
    #[error("the job ended with rows in no checkpoint")]
    NoFinalCheckpoint {
        /// What the trainers did, and how many rows it left out.
        #[source]
        source: crate::worker::pipeline::PipelineError,
    },
    /// The job token is too short to keep strangers out.
    #[error("the job token has {bytes} bytes, fewer than the {min} a master needs: make one with `openssl rand -hex 24`")]
    ShortToken {
        /// Its length.
        bytes: usize,
        /// The least accepted.
        min: usize,
    },
}

impl MasterError {
    /// The error of the job's state, which failed while the master was to
    /// `doing` it (`open`), for `map_err`.
    fn state(doing: &'static str) -> impl FnOnce(StateError) -> MasterError {
        move |source| MasterError::State {
            doing,
            source: Box::new(source),
        }
    }
}

impl From<PlanError> for MasterError {
    fn from(e: PlanError) -> Self {
        MasterError::Plan(Box::new(e))
    }
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
async fn make_job(plan: &PlanRequest) -> Result<Option<JobRecord>, PlanError> {
    let location =
        connectors::store::open(&plan.url).map_err(PlanError::read("open the source"))?;
    let Sources::Found {
        dataset,
        mixed,
        position,
    } = plan.open(&location).await?
    else {
        return Ok(None);
    };
    plan.refuse_empty(&dataset, position.as_ref())?;
    let read = plan.read_plan(&dataset)?;
    plan.job(&dataset, read, position, mixed.as_ref()).map(Some)
}

/// A master's state, ready to serve, or how the master ended before its
/// job existed.
#[allow(clippy::large_enum_variant)] // one per run
enum Started {
    /// The job's state, and its follower when it follows its source.
    Ready(MasterState, Option<Following>),
    /// Stopped, or with nothing to follow, before the job was made.
    Before(MasterOutcome),
}

/// Opens the job's state, planning the job first where there is none
/// (`signals` stop the master while its source is listed or awaited),
/// and resumes it.
async fn start(config: &MasterConfig, signals: &mut StopSignals) -> Result<Started, MasterError> {
    let plan = &config.plan;
    let identity = plan.identity(|| Ok(connectors::store::open(&plan.url)?.url()))?;
    let exists = MasterState::exists(&config.state)
        .await
        .map_err(MasterError::state("read"))?;
    let made = if exists {
        None
    } else {
        let made = tokio::select! {
            made = make_job(plan) => made?,
            signal = signals.next() => return Ok(Started::Before(MasterOutcome::before_job(Some(signal)))),
        };
        match made {
            Some(job) => Some(job),
            None => return Ok(Started::Before(MasterOutcome::before_job(None))),
        }
    };
    let (mut state, resumed) = MasterState::open(&config.state, identity, move || {
        made.ok_or_else(|| StateError::JobVanished {
            path: "job.json".to_string(),
            what: "disappeared",
        })
    })
    .await
    .map_err(MasterError::state("open"))?;
    if resumed {
        resume(config, &mut state)?;
    }
    info!(
        resumed,
        splits = state.spec.splits.len(),
        "master state ready"
    );
    let location = || connectors::store::open(&plan.url);
    let following = plan
        .follower(&state, location, std::time::SystemTime::now())
        .await?;
    Ok(Started::Ready(state, following))
}

/// A state opened again: the workers went on while this master was down,
/// so its downtime must not expire their leases nor count them gone; a
/// followed job follows on, and `--retry-failed` puts failed tasks back.
fn resume(config: &MasterConfig, state: &mut MasterState) -> Result<(), MasterError> {
    let now = crate::wall::wall_millis();
    let renew = StateError::journal(state.describe(), "renew the workers' leases");
    state
        .execute(crate::queue::Command::RenewAll { now })
        .map_err(renew)
        .map_err(MasterError::state("resume"))?;
    config
        .plan
        .reopen(state)
        .map_err(MasterError::state("resume"))?;
    if config.retry_failed {
        state
            .retry_failed(crate::wall::wall_millis())
            .map_err(MasterError::state("resume"))?;
    }
    if let Some(world) = config.plan.global.and_then(|g| g.world) {
        state
            .set_world(crate::wall::wall_millis(), world)
            .map_err(MasterError::state("resume"))?;
    }
    Ok(())
}

/// Runs the master until the job is over and the linger period passed.
pub async fn run(config: MasterConfig) -> Result<MasterOutcome, MasterError> {
    if config.token.len() < MIN_TOKEN_BYTES {
        return Err(MasterError::ShortToken {
            bytes: config.token.len(),
            min: MIN_TOKEN_BYTES,
        });
    }
    // From the start: a signal while the source is listed or awaited stops
    // the master before it has written anything.
    let mut signals =
        StopSignals::listen().map_err(|source| MasterError::Signals { cause: source })?;
    let (state, following) = match start(&config, &mut signals).await? {
        Started::Ready(state, following) => (state, following),
        Started::Before(outcome) => return Ok(outcome),
    };
    let master = Arc::new(Mutex::new(state));
    let commit = GroupCommit::start(master.clone()).map_err(|source| MasterError::Listen {
        addr: config.listen,
        cause: source,
    })?;
    let stopped_by = serve(&config, &master, &commit, following, signals).await?;
    let m = master.lock().unwrap_or_else(|e| e.into_inner());
    outcome(&config, &m, stopped_by)
}

/// The TLS acceptor (checked before binding, so a bad certificate fails
/// the start at once) and the bound listener, announced.
async fn bind(config: &MasterConfig) -> Result<(TcpListener, Option<TlsAcceptor>), MasterError> {
    let acceptor = match &config.tls {
        Some((cert, key)) => {
            Some(super::tls::acceptor(cert, key).map_err(|source| MasterError::Tls { source })?)
        }
        None => None,
    };
    let listener =
        TcpListener::bind(config.listen)
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
    Ok((listener, acceptor))
}

/// Serves the job, following its source beside (`following`), until it
/// has been over for the linger period or a signal stops it; returns the
/// signal, if one did. Every answered change is durable when it returns.
async fn serve(
    config: &MasterConfig,
    master: &Arc<Mutex<MasterState>>,
    commit: &GroupCommit,
    following: Option<Following>,
    signals: StopSignals,
) -> Result<Option<StopSignal>, MasterError> {
    // The follower runs beside the server in this task.
    let followed = Followed::default();
    let follow_fut = followed.follow(following, commit, |e| {
        tracing::error!(error = %Report(e), "following stopped; the master serves what it took, then ends");
    });
    let app = AppState {
        master: master.clone(),
        commit: commit.clone(),
        token: Arc::new(config.token.clone()),
    };
    let (listener, acceptor) = bind(config).await?;
    let stopped_by = Arc::new(Mutex::new(None));
    // A second signal while the requests in flight are answered.
    let (now_tx, now_rx) = tokio::sync::oneshot::channel::<StopSignal>();
    let over = job_over(master.clone(), config.linger);
    let shutdown = shutdown(over, signals, stopped_by.clone(), now_tx);
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
    followed.failed()?;
    let stopped_by = *stopped_by.lock().unwrap_or_else(|e| e.into_inner());
    Ok(stopped_by)
}

/// Resolves when the job is `over`, or when a signal asks to stop (kept in
/// `stopped_by`): then requests in flight are answered, and a second
/// signal meanwhile is sent on `now` to stop at once.
async fn shutdown(
    over: impl std::future::Future<Output = ()>,
    mut signals: StopSignals,
    stopped_by: Arc<Mutex<Option<StopSignal>>>,
    now: tokio::sync::oneshot::Sender<StopSignal>,
) {
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
                let _ = now.send(again);
            });
        }
    }
}

/// How the job ended, from the master's state `m` once serving stopped
/// (`stopped_by`: the signal that stopped it).
fn outcome(
    config: &MasterConfig,
    m: &MasterState,
    stopped_by: Option<StopSignal>,
) -> Result<MasterOutcome, MasterError> {
    let status = status_of(m);
    let queue = &status.queue;
    if let Some(rows) = m.queue().no_final_checkpoint() {
        use crate::worker::pipeline::PipelineError;
        return Err(MasterError::NoFinalCheckpoint {
            source: PipelineError::NoFinalCheckpoint { rows },
        });
    }
    if queue.job_over && queue.rows_done == 0 && status.failed.is_empty() {
        // Rows a listing cannot tell (text formats) turned out to be none.
        if !config.plan.allow_empty {
            return Err(config.plan.empty(m.spec.url.clone()).into());
        }
        tracing::warn!(url = %m.spec.url, "empty output: no data rows (allowed by --allow-empty)");
    }
    let failed = status.failed.iter().map(|f| {
        let epoch = f.epoch;
        format!("{} (epoch {epoch}): {}", f.file, f.reason)
    });
    Ok(MasterOutcome {
        failed: failed.collect(),
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
    epoch: Epoch,
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
            self.epoch = self.epoch.next();
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
fn epoch_rows(queue: &crate::queue::Queue, epoch: Epoch) -> u64 {
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
