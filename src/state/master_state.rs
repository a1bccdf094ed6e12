//! The job's state: the queue, its journal, the job spec, and what the
//! status page shows about workers. Every queue command goes through
//! [`MasterState::execute`], which journals it before its reply is used.

use connectors::Report;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use connectors::store::Location;
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};

use super::dir_lock::{DirLock, DirLockError};
use super::dir_log::{write_durably, DirLog};
use super::identity::{Identity, DATASET};
use super::journal::{sync_dir, Journal, JournalError, Pending};
use super::object_log::{self, ObjectLog};
use crate::protocol::spec::JobSpec;
use crate::queue::{Command, ConfigError, Millis, Queue, QueueConfig, Reply, WorkerId};

/// Samples kept for the rows/s chart.
const HISTORY: usize = 120;
/// Journal records between two snapshots, at least: a job of more splits
/// waits as many records as it has splits, so that writing snapshots (whose
/// size grows with the splits) costs the same per record whatever the job's
/// size, and a restart replays at most about two snapshots' worth of records.
pub const SNAPSHOT_EVERY: u64 = 50_000;

/// The format of a job's state that this build writes: `job.json`, the
/// journals and snapshots beside it, and the follow records in them. A state
/// of an older format is resumed (and marked with this one before anything is
/// appended); a state of a newer format is refused, never misread.
///
/// 1: states written before the format was recorded. 2: `format` recorded.
pub const STATE_FORMAT: u32 = 2;

/// The format of a `job.json` that records none.
fn unrecorded_format() -> u32 {
    1
}

/// The job's record (`job.json`): what the state location holds besides the journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    /// The state's format ([`STATE_FORMAT`] for a state this build created).
    #[serde(default = "unrecorded_format")]
    pub format: u32,
    /// The job.
    pub spec: JobSpec,
    /// The queue's settings.
    pub queue: QueueConfig,
    /// The options that decide what is trained, checked on every restart
    /// (empty in states written before they were recorded).
    #[serde(default)]
    pub identity: Identity,
}

impl JobRecord {
    /// The job of `dataset` read by `plan`: its splits, cut to the rows
    /// `select` chooses, leased as `queue` says, and, for a followed job,
    /// where it stands in its source (`follow`). `sluice train` and
    /// `sluice master` both build their job here, so that the spec's epochs
    /// and seed are always the queue's.
    pub fn build<E>(
        dataset: &connectors::Dataset,
        plan: connectors::ReadPlan,
        select: &crate::config::SelectOptions,
        follow: Option<crate::protocol::follow::FollowPosition>,
        queue: QueueConfig,
    ) -> Result<JobRecord, E>
    where
        E: From<crate::config::OptionError> + From<crate::protocol::select::SelectError>,
    {
        let mut splits = dataset.splits.clone();
        let select = crate::protocol::select::plan(
            select.selection()?,
            select.limit,
            &plan.output_schema(),
            &mut splits,
        )?;
        Ok(JobRecord {
            format: STATE_FORMAT,
            spec: JobSpec {
                url: dataset.location.url(),
                splits,
                plan,
                epochs: queue.epochs,
                seed: queue.seed,
                lease_timeout_ms: None,
                resume_checkpoint: None,
                table: dataset.table.clone(),
                follow,
                select,
                catalog_table: None,
                sources: Vec::new(),
                global: None,
            },
            queue,
            identity: Identity::default(),
        })
    }

    /// The recorded identity, completed from the spec where older states
    /// recorded the dataset, epochs and seed only there.
    pub fn recorded_identity(&self) -> Identity {
        self.identity
            .clone()
            .or_with(DATASET, &self.spec.url)
            .or_with("epochs", self.spec.epochs)
            .or_with("seed", self.spec.seed)
    }
}

/// The splits a growth of a followed job added, from its record.
fn grown_splits(growth: &crate::queue::Growth) -> Result<Vec<connectors::Split>, StateError> {
    serde_json::from_value::<crate::protocol::follow::FollowStep>(growth.record.clone())
        .map(|step| step.splits)
        .map_err(|source| StateError::BadGrowth {
            first: growth.first,
            cause: source,
        })
}

/// Errors opening or running the master's state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The journal, or a record of the state beside it (`job.json`), could
    /// not be read or written.
    #[error("state {state}: cannot {doing}")]
    Journal {
        /// The state location.
        state: String,
        /// What was being done (`replay its journal`, `read its job.json`).
        doing: &'static str,
        /// The journal's failure, naming the file (boxed: it is large).
        #[source]
        source: Box<JournalError>,
    },
    /// The state directory is unusable.
    #[error("state {path}: {cause}")]
    Io {
        /// The path.
        path: String,
        /// The failure.
        cause: std::io::Error,
    },
    /// `job.json` is not the JSON of a sluice job (or the job cannot be written as JSON).
    #[error("state {path} is not a sluice job: {cause}")]
    BadJob {
        /// The file.
        path: String,
        /// What the JSON parser found.
        cause: serde_json::Error,
    },
    /// The state was written by a newer sluice, in a format this one cannot read.
    #[error("state {state} was written by a newer sluice (state format {found}); this sluice reads state formats up to {supported}: resume it with that sluice or a newer one, or start afresh with another --state")]
    Newer {
        /// The state location.
        state: String,
        /// Its format.
        found: u32,
        /// The newest format this build reads ([`STATE_FORMAT`]).
        supported: u32,
    },
    /// `job.json` was there when the master started and is gone now: another
    /// process changes the state.
    #[error("state {path}: job.json {what} while the master was starting; is another master or a cleanup using this state?")]
    JobVanished {
        /// The file.
        path: String,
        /// What happened to it.
        what: &'static str,
    },
    /// Another process holds the state directory, or its lock cannot be
    /// taken.
    // transparent: each DirLockError names the state and says the lock is
    // what failed (`state DIR is in use by ...`, `cannot lock state ...`),
    // which is all the context there is.
    #[error(transparent)]
    Locked(#[from] DirLockError),
    /// The state belongs to a job with other options.
    #[error("state {state} belongs to another job: {option} was {recorded} there, {given} now; to start afresh, remove {state} or pass another --state")]
    Changed {
        /// The state location.
        state: String,
        /// The option, as people name it (`--epochs`, `the dataset`).
        option: String,
        /// Its recorded value.
        recorded: String,
        /// Its value now.
        given: String,
    },
    /// The queue of the recorded job refused its settings.
    #[error("state {state}: cannot rebuild the queue of its job")]
    Config {
        /// The state location.
        state: String,
        /// The rule the settings break.
        #[source]
        source: ConfigError,
    },
    /// The state URL cannot be opened.
    #[error("cannot open state {url}")]
    Location {
        /// The state URL.
        url: String,
        /// Why its store cannot be used (boxed: it is large).
        #[source]
        source: Box<connectors::Error>,
    },
    /// The journal holds splits a followed job took that cannot be read.
    #[error(
        "the splits the job took from split {first} on cannot be read from its journal: {cause}"
    )]
    BadGrowth {
        /// The first split of the growth.
        first: u32,
        /// What the JSON parser found.
        cause: serde_json::Error,
    },
}

impl StateError {
    /// The error of a journal of `state` that failed while `doing` (`replay
    /// its journal`), for `map_err`.
    pub fn journal(
        state: impl Into<String>,
        doing: &'static str,
    ) -> impl FnOnce(JournalError) -> StateError {
        let state = state.into();
        move |source| StateError::Journal {
            state,
            doing,
            source: Box::new(source),
        }
    }

    /// The error of the state URL `url` that cannot be opened, for `map_err`.
    fn location(url: &str) -> impl FnOnce(connectors::Error) -> StateError + '_ {
        move |source| StateError::Location {
            url: url.to_string(),
            source: Box::new(source),
        }
    }
}

/// Where a job's state lives: a local directory, or a prefix on an object
/// store (`s3://`, `gs://`, `az://`, `hdfs://`).
#[derive(Debug, Clone)]
pub enum StateLocation {
    /// A local directory (a path or a `file://` URL).
    Dir(PathBuf),
    /// A prefix on an object store.
    Store(String),
}

impl StateLocation {
    /// Reads a `--state` value.
    pub fn parse(value: &str) -> StateLocation {
        match connectors::store::local_path_of(value) {
            Some(path) => StateLocation::Dir(PathBuf::from(path)),
            None => StateLocation::Store(value.to_string()),
        }
    }
}

impl std::fmt::Display for StateLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateLocation::Dir(dir) => write!(f, "{}", dir.display()),
            StateLocation::Store(url) => f.write_str(url),
        }
    }
}

/// What the master knows of a live worker beyond the queue: its own figures,
/// from its heartbeats. A worker silent for longer than the lease timeout has
/// departed and is dropped (see [`MasterState::sample`]).
#[derive(Debug, Clone)]
pub struct WorkerSeen {
    /// Rows its trainers acknowledged, as its last heartbeat reported them.
    pub rows: u64,
    /// When it was last heard from (registration or heartbeat).
    pub last: Instant,
    /// Rows per second between its last two heartbeats.
    pub rate: f64,
}

/// The master.
pub struct MasterState {
    /// The queue: changed only through [`MasterState::apply`] and
    /// [`MasterState::execute`], so every change reaches the journal.
    queue: Queue,
    /// Where changes go; `None` while a group committer holds it.
    journal: Option<Box<dyn Journal>>,
    /// Changes applied but not yet handed to the journal (group commit).
    pending: Vec<Command>,
    /// Changes applied since the start; the group committer reports how many are durable.
    applied: u64,
    /// The job.
    pub spec: Arc<JobSpec>,
    /// The options recorded for the job (empty in states written before
    /// they were recorded).
    pub identity: Identity,
    /// Live workers: heard from within the lease timeout.
    pub workers: HashMap<WorkerId, WorkerSeen>,
    /// Committed rows/s samples for the chart, oldest first.
    pub history: VecDeque<f64>,
    /// The queue's committed rows at the last sample, and when.
    last_sample: Option<(Instant, u64)>,
    /// Rows the whole job serves, once every split's count is known (they
    /// never change after that).
    rows_total: std::cell::OnceCell<u64>,
    /// Requests served.
    pub requests: u64,
    /// Commands journaled.
    pub journaled: u64,
    /// When the job was first seen over.
    pub over_since: Option<Instant>,
    /// Records since the last snapshot.
    since_snapshot: u64,
    /// Records between snapshots.
    snapshot_every: u64,
    /// What each worker's cache did, as its last heartbeat said (kept when
    /// it departs: the job's totals count it).
    cache: BTreeMap<WorkerId, connectors::cache::CacheStats>,
    /// When this master started, and the queue's figures then: the time
    /// left is told at the pace since ([`MasterState::eta`]).
    began: Began,
}

/// When a master started, with the rows committed and tasks done then.
#[derive(Debug, Clone, Copy)]
struct Began {
    at: Instant,
    rows: u64,
    tasks: u64,
}

impl MasterState {
    /// Opens a job's state: loads `job.json` or writes it from `make` with
    /// `identity`, then replays the journal. A local directory is locked
    /// first, for as long as the journal lives. Returns whether an earlier
    /// run's state was found; its recorded identity must match `identity`.
    pub async fn open(
        location: &StateLocation,
        identity: Identity,
        make: impl FnOnce() -> Result<JobRecord, StateError>,
    ) -> Result<(MasterState, bool), StateError> {
        let (job, resumed, journal): (JobRecord, bool, Box<dyn Journal>) = match location {
            StateLocation::Dir(dir) => {
                create_dir(dir)?;
                let lock = DirLock::acquire(dir)?;
                let (job, resumed) = open_dir_job(dir, identity, make)?;
                let journal = DirLog::open(dir, lock).map_err(StateError::journal(
                    dir.display().to_string(),
                    "open its journal",
                ))?;
                (job, resumed, Box::new(journal))
            }
            StateLocation::Store(url) => {
                let location = connectors::store::open(url).map_err(StateError::location(url))?;
                let (job, resumed) = open_store_job(&location, identity, make).await?;
                let journal = ObjectLog::open(location)
                    .await
                    .map_err(StateError::journal(url.as_str(), "open its journal"))?;
                (job, resumed, Box::new(journal))
            }
        };
        Ok((MasterState::replay(job, journal)?, resumed))
    }

    /// Whether `location` holds a job already (a restart).
    pub async fn exists(location: &StateLocation) -> Result<bool, StateError> {
        match location {
            StateLocation::Dir(dir) => Ok(dir.join("job.json").exists()),
            StateLocation::Store(url) => {
                let location = connectors::store::open(url).map_err(StateError::location(url))?;
                let path = location.root.clone().join("job.json");
                object_log::exists(&location, &path)
                    .await
                    .map_err(StateError::journal(url.as_str(), "look for its job.json"))
            }
        }
    }

    /// Changes how many records go between snapshots (tests use small numbers).
    pub fn set_snapshot_every(&mut self, records: u64) {
        self.snapshot_every = records.max(1);
    }

    /// The queue, to read (changes go through [`MasterState::apply`]).
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Where the state's journal lives, for messages (`memory` when it was
    /// handed to the committers).
    pub fn describe(&self) -> String {
        match &self.journal {
            Some(journal) => journal.describe(),
            None => "memory".to_string(),
        }
    }

    /// Whether a snapshot is due.
    pub fn snapshot_due(&self) -> bool {
        self.since_snapshot >= self.snapshot_every
            || self.journal.as_ref().is_some_and(|j| j.wants_snapshot())
    }

    /// Builds the state over any journal, replaying what it holds.
    pub fn with_journal(
        job: JobRecord,
        journal: Box<dyn Journal>,
    ) -> Result<MasterState, StateError> {
        MasterState::replay(job, journal)
    }

    /// Replays the journal over its snapshot or over a fresh queue. The
    /// splits' row counts from the files' metadata bound what workers report.
    fn replay(job: JobRecord, mut journal: Box<dyn Journal>) -> Result<MasterState, StateError> {
        let loaded = journal.load().map_err(StateError::journal(
            journal.describe(),
            "replay its journal",
        ))?;
        let rows: Vec<Option<u64>> = job.spec.splits.iter().map(|s| s.rows).collect();
        let mut queue = match loaded.base {
            Some(mut queue) => {
                queue.know_rows(&rows);
                queue
            }
            None => {
                Queue::with_rows(rows, job.queue.clone()).map_err(|source| StateError::Config {
                    state: journal.describe(),
                    source,
                })?
            }
        };
        for command in &loaded.commands {
            queue.apply(command);
        }
        let snapshot_every = SNAPSHOT_EVERY.max(job.spec.splits.len() as u64);
        let (queue_rows, queue_tasks) = (queue.rows_committed(), queue.status().tasks_done);
        let mut spec = job.spec;
        for growth in queue.grown() {
            spec.splits.extend(grown_splits(growth)?);
        }
        Ok(MasterState {
            since_snapshot: loaded.commands.len() as u64,
            snapshot_every,
            queue,
            journal: Some(journal),
            pending: Vec::new(),
            applied: 0,
            spec: Arc::new(spec),
            identity: job.identity,
            workers: HashMap::new(),
            cache: BTreeMap::new(),
            history: VecDeque::new(),
            last_sample: None,
            rows_total: std::cell::OnceCell::new(),
            requests: 0,
            journaled: 0,
            over_since: None,
            began: Began {
                at: Instant::now(),
                rows: queue_rows,
                tasks: queue_tasks,
            },
        })
    }

    /// Takes the journal out for a group committer; from then on
    /// [`MasterState::apply`] queues changes for [`MasterState::take_pending`].
    pub fn take_journal(&mut self) -> Option<Box<dyn Journal>> {
        self.journal.take()
    }

    /// Expires lapsed leases (except before [`Command::RenewAll`]), then
    /// applies `command` without writing it:
    /// returns the reply and the count of changes that must be durable before
    /// the reply may be sent (see [`MasterState::take_pending`]).
    pub fn apply(&mut self, command: Command) -> (Reply, u64) {
        self.requests = self.requests.saturating_add(1);
        let before = self.pending.len();
        // A restarted master renews every lease before anything can expire
        // them: its own downtime is not the workers' silence.
        if !matches!(command, Command::RenewAll { .. }) {
            let tick = Command::Tick { now: command.now() };
            if self.queue.apply(&tick).changed() {
                self.pending.push(tick);
            }
        }
        let reply = self.queue.apply(&command);
        if let (Command::Grow { .. }, Reply::Grow(Ok(()))) = (&command, &reply) {
            self.took_growth();
        }
        if reply.changed() {
            self.pending.push(command);
        }
        let new = (self.pending.len() - before) as u64;
        self.applied = self.applied.saturating_add(new);
        self.journaled = self.journaled.saturating_add(new);
        self.since_snapshot = self.since_snapshot.saturating_add(new);
        (reply, self.applied)
    }

    /// Adds the splits of the growth the queue just took to the spec that
    /// workers are served (a record the queue took was made by this
    /// version, so it reads; one that does not is logged and its splits'
    /// tasks fail when leased, naming the split).
    fn took_growth(&mut self) {
        let Some(growth) = self.queue.grown().last() else {
            return;
        };
        match grown_splits(growth) {
            Ok(splits) => Arc::make_mut(&mut self.spec).splits.extend(splits),
            Err(e) => tracing::error!(error = %Report(&e), "a growth of the job cannot be read"),
        }
        self.rows_total = std::cell::OnceCell::new();
    }

    /// The splits from index `from` on (a worker of a followed job asks for
    /// the splits added since it fetched the spec).
    pub fn splits_from(&self, from: usize) -> Vec<connectors::Split> {
        self.spec.splits.get(from..).unwrap_or_default().to_vec()
    }

    /// A followed job's position and lag (`None` for a job that does not follow).
    /// The lag is counted up to `now` (wall-clock milliseconds).
    pub fn follow_status(&self, now: Millis) -> Option<crate::protocol::follow::FollowStatus> {
        use crate::protocol::follow::{FollowStatus, FollowStep};
        use crate::queue::TaskState;
        let start = self.spec.follow.as_ref()?;
        let tasks = self.queue.tasks();
        let over = |split: usize| {
            tasks.get(split).is_none_or(|t| {
                matches!(t.state, TaskState::Done { .. } | TaskState::Failed { .. })
            })
        };
        let first_grown = self
            .queue
            .grown()
            .first()
            .map_or(tasks.len(), |g| g.first as usize);
        let mut trained = (0..first_grown).all(over).then(|| start.describe());
        let mut seen = start.describe();
        let mut lag_since: Option<u64> = None;
        let mut prefix = trained.is_some();
        for growth in self.queue.grown() {
            let Some(step) = FollowStep::of(growth) else {
                continue;
            };
            seen = step.position.describe();
            let first = growth.first as usize;
            let done = (first..first + growth.rows.len()).all(over);
            if done && prefix {
                trained = Some(seen.clone());
            } else {
                prefix = false;
            }
            if !done && lag_since.is_none() {
                lag_since = Some(step.seen_ms);
            }
        }
        let lag_rows = (0..tasks.len())
            .filter(|&s| !over(s))
            .map(|s| {
                let rows = self.queue.split_rows(s as u32).unwrap_or(0);
                let committed = match tasks[s].state {
                    TaskState::Todo { offset } => offset,
                    TaskState::Leased { offset, .. } => offset,
                    _ => 0,
                };
                rows.saturating_sub(committed)
            })
            .sum();
        let lag_seconds = lag_since
            .map(|ms| now.saturating_sub(ms) as f64 / 1000.0)
            .unwrap_or(0.0);
        Some(FollowStatus {
            open: self.queue.is_open(),
            seen,
            trained,
            lag_rows,
            lag_seconds,
            steps: self.queue.grown().len(),
        })
    }

    /// Changes applied since the start (see [`MasterState::apply`]).
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Hands the changes applied so far to a group committer: the commands,
    /// the change count they bring durability to, and whether a snapshot is
    /// due once they are written. The committer keeps its own copy of the
    /// queue for snapshots ([`Replica`]), so none is made here, under the lock
    /// every request takes.
    pub fn take_pending(&mut self) -> (Vec<Command>, u64, bool) {
        let commands = std::mem::take(&mut self.pending);
        let due = self.snapshot_due();
        if due {
            self.since_snapshot = 0;
        }
        (commands, self.applied, due)
    }

    /// A copy of the queue, for a group committer's [`Replica`]. Changes
    /// applied and not yet taken are in the copy already: the replica skips
    /// them when the committer hands them over.
    pub fn replica(&self) -> Replica {
        Replica {
            queue: Arc::new(self.queue.clone()),
            behind: VecDeque::new(),
            skip: self.pending.len(),
        }
    }

    /// Puts the failed tasks back (`--retry-failed`, see
    /// [`Queue::retry_failed`]) at `now`, durably, and says how many on the log.
    pub fn retry_failed(&mut self, now: Millis) -> Result<(), StateError> {
        let retry = StateError::journal(
            self.describe(),
            "put its failed tasks back (--retry-failed)",
        );
        let reply = self.execute(Command::RetryFailed { now }).map_err(retry)?;
        if let Reply::RetryFailed { retried, kept } = reply {
            tracing::warn!(retried, "failed tasks put back (--retry-failed)");
            if kept > 0 {
                tracing::warn!(
                    kept,
                    "failed tasks of earlier epochs cannot be put back; they stay failed"
                );
            }
        }
        Ok(())
    }

    /// A job of `--global-batch-size` resumed with `--world-size world`:
    /// durably the queue's world, where it was another.
    pub fn set_world(&mut self, now: Millis, world: u32) -> Result<(), StateError> {
        if self.queue.config().world == Some(world) {
            return Ok(());
        }
        let set = StateError::journal(self.describe(), "set the job's world size");
        self.execute(Command::SetWorld { now, world })
            .map_err(set)?;
        tracing::info!(world, "the job's world size is now this (--world-size)");
        Ok(())
    }

    /// Expires lapsed leases, then applies `command`; changes are durable
    /// before returning (the single-process path, without group commit).
    pub fn execute(&mut self, command: Command) -> Result<Reply, JournalError> {
        let (reply, _) = self.apply(command);
        let (commands, _, due) = self.take_pending();
        let snapshot = due.then(|| Arc::new(self.queue.clone()));
        if let Some(journal) = self.journal.as_mut() {
            persist(journal.as_mut(), &commands, snapshot)?;
        }
        Ok(reply)
    }

    /// Records a heartbeat's row count for the status page, heard at `now`.
    pub fn saw_worker(&mut self, worker: WorkerId, rows: u64, now: Instant) {
        let entry = self.workers.entry(worker).or_insert(WorkerSeen {
            rows,
            last: now,
            rate: 0.0,
        });
        let dt = now.saturating_duration_since(entry.last).as_secs_f64();
        if dt > 0.0 && rows >= entry.rows {
            entry.rate = (rows - entry.rows) as f64 / dt;
        }
        entry.rows = rows;
        entry.last = now;
    }

    /// Records what `worker`'s cache did so far, as its heartbeat said.
    pub fn saw_cache(&mut self, worker: WorkerId, stats: connectors::cache::CacheStats) {
        self.cache.insert(worker, stats);
    }

    /// What the workers' caches did, summed; `None` when none reported one.
    pub fn cache_stats(&self) -> Option<connectors::cache::CacheStats> {
        (!self.cache.is_empty()).then(|| {
            self.cache
                .values()
                .fold(connectors::cache::CacheStats::default(), |sum, c| {
                    connectors::cache::CacheStats {
                        hit_bytes: sum.hit_bytes.saturating_add(c.hit_bytes),
                        fetched_bytes: sum.fetched_bytes.saturating_add(c.fetched_bytes),
                        bytes: sum.bytes.saturating_add(c.bytes),
                    }
                })
        })
    }

    /// Whether `seen` was heard from within the lease timeout before `now`.
    fn is_live(&self, seen: &WorkerSeen, now: Instant) -> bool {
        let timeout = std::time::Duration::from_millis(self.queue.config().lease_timeout_ms);
        now.saturating_duration_since(seen.last) <= timeout
    }

    /// The live workers at `now`: heard from within the lease timeout (a
    /// worker that misses its heartbeats for longer has lost its leases and
    /// departed).
    pub fn live_workers(&self, now: Instant) -> impl Iterator<Item = (WorkerId, &WorkerSeen)> + '_ {
        self.workers
            .iter()
            .filter(move |(_, seen)| self.is_live(seen, now))
            .map(|(id, seen)| (*id, seen))
    }

    /// Rows the whole job serves (every split's rows times the epochs),
    /// once every split's row count is known.
    pub fn rows_total(&self) -> Option<u64> {
        if let Some(total) = self.rows_total.get() {
            return Some(*total);
        }
        let mut per_epoch = 0u64;
        for split in 0..self.queue.tasks().len() {
            let rows = self.queue.split_rows(u32::try_from(split).ok()?)?;
            per_epoch = per_epoch.saturating_add(rows);
        }
        let total = per_epoch.saturating_mul(u64::from(self.queue.config().epochs));
        Some(*self.rows_total.get_or_init(|| total))
    }

    /// The time left at `now`, at the pace of this master so far: the rows
    /// left at the rows per second committed since it started (tasks, while
    /// a split's row count is unknown). `None` before it saw a row
    /// committed; 0 once the job is over. The master's progress lines, its
    /// status, page and metrics all tell this one figure.
    pub fn eta(&self, now: Instant) -> Option<Duration> {
        if self.queue.is_over() {
            return Some(Duration::ZERO);
        }
        let elapsed = now.saturating_duration_since(self.began.at);
        let status = self.queue.status();
        match self.rows_total() {
            Some(total) => crate::logging::eta(
                status.rows_committed.saturating_sub(self.began.rows),
                total.saturating_sub(self.began.rows),
                elapsed,
            ),
            None => {
                let tasks = (status.splits as u64).saturating_mul(u64::from(status.epochs));
                crate::logging::eta(
                    status.tasks_done.saturating_sub(self.began.tasks),
                    tasks.saturating_sub(self.began.tasks),
                    elapsed,
                )
            }
        }
    }

    /// Forgets the workers departed by `now` and adds a sample of the
    /// queue's committed rows per second to the chart.
    pub fn sample(&mut self, now: Instant) {
        let departed: Vec<WorkerId> = self
            .workers
            .iter()
            .filter(|(_, seen)| !self.is_live(seen, now))
            .map(|(id, _)| *id)
            .collect();
        for worker in departed {
            self.workers.remove(&worker);
            let name = self.queue.worker_name(worker).unwrap_or("");
            tracing::info!(%worker, name, "worker departed: no heartbeat within the lease timeout");
        }
        let committed = self.queue.rows_committed();
        if let Some((at, before)) = self.last_sample {
            let seconds = now.saturating_duration_since(at).as_secs_f64();
            if seconds > 0.0 {
                let rate = committed.saturating_sub(before) as f64 / seconds;
                self.history.push_back(rate);
            }
        }
        self.last_sample = Some((now, committed));
        while self.history.len() > HISTORY {
            self.history.pop_front();
        }
    }
}

/// Appends `commands` and then, when given, writes the snapshot of the queue
/// they lead to. A failed snapshot is only a warning (the journal still holds
/// everything; the next one is tried later), unless another master took the
/// job over.
pub fn persist(
    journal: &mut dyn Journal,
    commands: &[Command],
    snapshot: Option<Arc<Queue>>,
) -> Result<(), JournalError> {
    write(journal, commands, snapshot)?.wait()
}

/// [`persist`], leaving the wait for the commands to be durable to the
/// [`Pending`] returned (the snapshot needs no wait: the journal keeps
/// everything until it is durable).
pub fn write(
    journal: &mut dyn Journal,
    commands: &[Command],
    snapshot: Option<Arc<Queue>>,
) -> Result<Pending, JournalError> {
    let pending = journal.write(commands)?;
    snapshot_after(journal, pending, snapshot)
}

/// Writes `snapshot`, when given, of the queue that every command written
/// so far leads to, then hands back `pending` (the wait for those commands).
/// A failed snapshot is only a warning, unless another master took the job
/// over.
pub fn snapshot_after(
    journal: &mut dyn Journal,
    pending: Pending,
    snapshot: Option<Arc<Queue>>,
) -> Result<Pending, JournalError> {
    if let Some(queue) = snapshot {
        match journal.snapshot(queue) {
            Ok(()) => {}
            Err(e @ JournalError::Taken { .. }) => return Err(e),
            Err(e) => tracing::warn!(error = %Report(&e), "snapshot failed"),
        }
    }
    Ok(pending)
}

/// The group committer's own copy of the queue, kept current by applying
/// every batch after it is written, so that a snapshot is taken from it
/// instead of copying the live queue under the lock every request takes
/// (tens of milliseconds for a million tasks, during which nothing is
/// answered). It costs a second queue in memory and one more apply of each
/// change, on the committer's thread.
///
/// While a snapshot is being written it holds the copy: the committer then
/// keeps the batches back and applies them once it has the copy again, at
/// most [`Replica::CATCH_UP`] more per batch, so that catching up never
/// holds one batch long.
#[derive(Debug)]
pub struct Replica {
    queue: Arc<Queue>,
    behind: VecDeque<Command>,
    /// Commands still to come that the copy holds already.
    skip: usize,
}

impl Replica {
    /// Commands kept back that one batch applies besides its own.
    pub const CATCH_UP: usize = 1024;

    /// Applies `commands`, written after every command applied before.
    pub fn apply(&mut self, commands: Vec<Command>) {
        let skip = self.skip.min(commands.len());
        self.skip -= skip;
        let own = commands.len() - skip;
        self.behind.extend(commands.into_iter().skip(skip));
        let Some(queue) = Arc::get_mut(&mut self.queue) else {
            return;
        };
        let n = self.behind.len().min(own.saturating_add(Self::CATCH_UP));
        for command in self.behind.drain(..n) {
            queue.apply(&command);
        }
    }

    /// The queue after every command applied, to snapshot; `None` while an
    /// earlier snapshot still holds it or commands are kept back.
    pub fn share(&self) -> Option<Arc<Queue>> {
        (self.behind.is_empty() && Arc::strong_count(&self.queue) == 1).then(|| self.queue.clone())
    }
}

/// Creates the state directory when missing, durably: the directory that
/// holds it is synced too.
fn create_dir(dir: &Path) -> Result<(), StateError> {
    let io = |path: &Path, source| StateError::Io {
        path: path.display().to_string(),
        cause: source,
    };
    // Only its user reads a job's state (its journal holds worker
    // secrets), a directory an older build made included.
    let created =
        connectors::private::create_dir(dir, "state directory").map_err(|e| io(dir, e))?;
    if !created {
        return Ok(());
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    sync_dir(parent).map_err(|e| io(parent, e))
}

fn open_dir_job(
    dir: &Path,
    identity: Identity,
    make: impl FnOnce() -> Result<JobRecord, StateError>,
) -> Result<(JobRecord, bool), StateError> {
    let path = dir.join("job.json");
    if path.exists() {
        let text = std::fs::read(&path).map_err(|source| StateError::Io {
            path: path.display().to_string(),
            cause: source,
        })?;
        let mut job = parse_job(
            &dir.display().to_string(),
            &path.display().to_string(),
            &text,
        )?;
        check_identity(&dir.display().to_string(), &job, &identity)?;
        if job.format < STATE_FORMAT {
            // Marked before anything of this build's format is appended.
            job.format = STATE_FORMAT;
            write_durably(&path, &job_bytes(&job)?).map_err(StateError::journal(
                dir.display().to_string(),
                "mark its job.json with this build's format",
            ))?;
        }
        return Ok((job, true));
    }
    let mut job = make()?;
    job.identity = identity;
    write_durably(&path, &job_bytes(&job)?).map_err(StateError::journal(
        dir.display().to_string(),
        "write its job.json",
    ))?;
    Ok((job, false))
}

/// Refuses a state recorded with other options than `identity`'s.
fn check_identity(state: &str, job: &JobRecord, identity: &Identity) -> Result<(), StateError> {
    match identity.first_change(&job.recorded_identity()) {
        None => Ok(()),
        Some(change) => Err(StateError::Changed {
            state: state.to_string(),
            option: change.option,
            recorded: change.recorded,
            given: change.given,
        }),
    }
}

async fn open_store_job(
    location: &Location,
    identity: Identity,
    make: impl FnOnce() -> Result<JobRecord, StateError>,
) -> Result<(JobRecord, bool), StateError> {
    let path = location.root.clone().join("job.json");
    let shown = location.display(&path);
    let state = location.url();
    let read = object_log::read(location, &path)
        .await
        .map_err(StateError::journal(state.as_str(), "read its job.json"))?;
    if let Some(bytes) = read {
        let mut job = parse_job(&state, &shown, &bytes)?;
        check_identity(&state, &job, &identity)?;
        if job.format < STATE_FORMAT {
            // Marked before anything of this build's format is appended.
            job.format = STATE_FORMAT;
            location
                .store
                .put(&path, job_bytes(&job)?.into())
                .await
                .map_err(|source| JournalError::Store {
                    location: shown.clone(),
                    cause: source,
                })
                .map_err(StateError::journal(
                    state.as_str(),
                    "mark its job.json with this build's format",
                ))?;
        }
        return Ok((job, true));
    }
    let mut job = make()?;
    job.identity = identity.clone();
    let mut conditional = true;
    let created = object_log::create(location, &path, job_bytes(&job)?, &mut conditional)
        .await
        .map_err(StateError::journal(state.as_str(), "write its job.json"))?;
    if created {
        return Ok((job, false));
    }
    // Another master created the job first: use its version.
    let bytes = object_log::read(location, &path)
        .await
        .map_err(StateError::journal(state.as_str(), "read its job.json"))?
        .ok_or_else(|| StateError::JobVanished {
            path: shown.clone(),
            what: "was created and removed",
        })?;
    let job = parse_job(&state, &shown, &bytes)?;
    check_identity(&state, &job, &identity)?;
    Ok((job, true))
}

/// Reads `job.json` of `state`, refusing a format newer than this build's
/// before reading anything else of it.
fn parse_job(state: &str, path: &str, bytes: &[u8]) -> Result<JobRecord, StateError> {
    #[derive(Deserialize)]
    struct Format {
        #[serde(default = "unrecorded_format")]
        format: u32,
    }
    let bad = |source| StateError::BadJob {
        path: path.to_string(),
        cause: source,
    };
    let found = serde_json::from_slice::<Format>(bytes).map_err(bad)?.format;
    if found > STATE_FORMAT {
        return Err(StateError::Newer {
            state: state.to_string(),
            found,
            supported: STATE_FORMAT,
        });
    }
    serde_json::from_slice(bytes).map_err(bad)
}

fn job_bytes(job: &JobRecord) -> Result<Vec<u8>, StateError> {
    serde_json::to_vec(job).map_err(|source| StateError::BadJob {
        path: "job.json".to_string(),
        cause: source,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::queue::LeaseReply;
    use crate::state::journal::MemoryJournal;
    use crate::wall::wall_millis;
    use connectors::{FormatOptions, ReadPlan};

    fn register(now: u64) -> Command {
        Command::Register {
            now,
            secret: None,
            name: None,
        }
    }

    #[test]
    fn a_replica_held_by_a_snapshot_keeps_batches_back_and_catches_up() {
        let state =
            MasterState::with_journal(job(3), Box::new(MemoryJournal::default())).expect("state");
        let mut replica = state.replica();
        let mut live = state.queue.clone();
        let mut feed = |replica: &mut Replica, from: u64, n: u64| {
            let batch: Vec<Command> = (from..from + n).map(register).collect();
            for command in &batch {
                live.apply(command);
            }
            replica.apply(batch);
            live.clone()
        };
        let held = replica.share().expect("a current replica is shared");
        // A snapshot being written holds the copy: batches wait.
        let after = feed(&mut replica, 1, 3000);
        assert!(replica.share().is_none(), "behind while held");
        assert_eq!(*held, state.queue, "the snapshot's copy does not move");
        drop(held);
        // Each batch catches up at most its own and CATCH_UP more.
        let mut from = 3001;
        let mut rounds = 0;
        let now = loop {
            let now = feed(&mut replica, from, 1);
            from += 1;
            rounds += 1;
            if let Some(shared) = replica.share() {
                break (shared, now);
            }
            assert!(rounds < 10, "catches up in a few batches");
        };
        assert!(rounds >= 2, "3000 kept back take more than one batch");
        assert_eq!(*now.0, now.1, "caught up: the copy is the live queue");
        assert_ne!(now.1, after);
    }

    #[test]
    fn a_replica_skips_the_changes_its_copy_holds_already() {
        let mut state =
            MasterState::with_journal(job(3), Box::new(MemoryJournal::default())).expect("state");
        state.apply(register(1));
        let mut replica = state.replica();
        let (pending, _, _) = state.take_pending();
        replica.apply(pending);
        state.apply(register(2));
        let (pending, _, _) = state.take_pending();
        replica.apply(pending);
        assert_eq!(*replica.share().expect("current"), state.queue);
    }

    /// A job of `splits` one-row splits over two epochs.
    pub(crate) fn job(splits: usize) -> JobRecord {
        let split = connectors::Split {
            path: "p".into(),
            size: 1,
            format: connectors::Format::Text,
            codec: connectors::codec::Codec::None,
            partition_dir: String::new(),
            partition_values: Vec::new(),
            range: connectors::SplitRange::Whole,
            rows: Some(1),
            deleted: Vec::new(),
            stamp: Default::default(),
            source: 0,
            window: None,
        };
        JobRecord {
            format: STATE_FORMAT,
            spec: JobSpec {
                url: "file:///x".into(),
                splits: vec![split; splits],
                plan: ReadPlan {
                    data_schema: Arc::new(arrow::datatypes::Schema::empty()),
                    partition_fields: Vec::new(),
                    columns: Vec::new(),
                    options: FormatOptions::default(),
                    file_columns: Default::default(),
                    string_view: true,
                    filter: None,
                    sources: Vec::new(),
                    source_names: Vec::new(),
                    source_column: None,
                    derived: Vec::new(),
                    timezone: Default::default(),
                },
                epochs: 2,
                seed: 1,
                lease_timeout_ms: None,
                resume_checkpoint: None,
                table: None,
                follow: None,
                select: Default::default(),
                catalog_table: None,
                sources: Vec::new(),
                global: None,
            },
            queue: QueueConfig {
                epochs: 2,
                ..QueueConfig::default()
            },
            identity: Identity::default(),
        }
    }

    #[tokio::test]
    async fn snapshots_compact_the_journal_and_restore_the_same_queue() {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = StateLocation::Dir(dir.path().to_path_buf());
        let (mut state, resumed) =
            MasterState::open(&location, Identity::default(), || Ok(job(30)))
                .await
                .expect("open");
        assert!(!resumed);
        state.set_snapshot_every(7);
        let worker = match state
            .execute(Command::Register {
                now: 1,
                secret: None,
                name: None,
            })
            .expect("register")
        {
            Reply::Register(w) => w,
            other => panic!("{other:?}"),
        };
        for step in 0..40u64 {
            let reply = state
                .execute(Command::Lease {
                    now: 10 + step,
                    worker,
                    max: 1,
                })
                .expect("lease");
            if let Reply::Lease(Ok(LeaseReply::Tasks(ls))) = reply {
                for l in ls {
                    state
                        .execute(Command::Finish {
                            now: 10 + step,
                            worker: Some(worker),
                            attempt: l.attempt,
                            rows: 1,
                        })
                        .expect("finish");
                }
            }
        }
        let before = state.queue.clone();
        // Closing the state waits for the snapshot being written.
        drop(state);
        assert!(
            dir.path().join("snapshot.json").exists(),
            "snapshots were taken"
        );
        let journals = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("journal"))
            })
            .count();
        assert_eq!(journals, 1, "old journals are removed");
        let (restored, resumed) =
            MasterState::open(&location, Identity::default(), || panic!("job.json exists"))
                .await
                .expect("reopen");
        assert!(resumed);
        assert_eq!(
            restored.queue, before,
            "snapshot + journal rebuild the same queue"
        );
    }

    #[tokio::test]
    async fn a_silent_worker_departs_after_the_lease_timeout_and_the_chart_counts_commits() {
        let mut file = job(2);
        file.queue.lease_timeout_ms = 200;
        let mut state =
            MasterState::with_journal(file, Box::new(MemoryJournal::default())).expect("state");
        let register = |state: &mut MasterState, name: &str| match state
            .execute(Command::Register {
                now: wall_millis(),
                secret: None,
                name: Some(name.into()),
            })
            .expect("register")
        {
            Reply::Register(w) => w,
            other => panic!("{other:?}"),
        };
        let start = Instant::now();
        let at = |ms: u64| start + std::time::Duration::from_millis(ms);
        let quiet = register(&mut state, "quiet");
        state.saw_worker(quiet, 0, at(0));
        let busy = register(&mut state, "busy");
        state.saw_worker(busy, 0, at(120));
        state.sample(at(120));
        state.saw_worker(busy, 40, at(240));
        let live: Vec<WorkerId> = state.live_workers(at(240)).map(|(w, _)| w).collect();
        assert_eq!(live, vec![busy], "silent for longer than the lease timeout");
        assert_eq!(state.queue.worker_name(quiet), Some("quiet"));
        let lease = state
            .execute(Command::Lease {
                now: wall_millis(),
                worker: busy,
                max: 1,
            })
            .expect("lease");
        let Reply::Lease(Ok(LeaseReply::Tasks(leases))) = lease else {
            panic!("{lease:?}");
        };
        state
            .execute(Command::Finish {
                now: wall_millis(),
                worker: Some(busy),
                attempt: leases[0].attempt,
                rows: 1,
            })
            .expect("finish");
        state.sample(at(250));
        assert!(
            !state.workers.contains_key(&quiet),
            "departed workers are forgotten"
        );
        assert_eq!(state.rows_total(), Some(4), "2 splits of 1 row, 2 epochs");
        assert_eq!(state.queue.rows_committed(), 1);
        assert!(state.workers.contains_key(&busy));
        assert!(
            state.history.back().is_some_and(|rate| *rate > 0.0),
            "the chart shows committed rows: {:?}",
            state.history
        );
    }

    #[tokio::test]
    async fn a_state_refuses_another_job_and_a_second_holder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = StateLocation::Dir(dir.path().join("state"));
        let identity = || {
            Identity::default()
                .with(DATASET, "file:///x")
                .with("epochs", 2)
                .with("features", "f1")
        };
        let (state, _) = MasterState::open(&location, identity(), || Ok(job(3)))
            .await
            .expect("open");
        let held = MasterState::open(&location, identity(), || panic!("job.json exists"))
            .await
            .err()
            .expect("held by the first");
        assert!(
            matches!(held, StateError::Locked(DirLockError::Held { .. })),
            "{held}"
        );
        drop(state);
        let other = identity().with("features", "f1,f2");
        let err = MasterState::open(&location, other, || panic!("job.json exists"))
            .await
            .err()
            .expect("another job");
        assert!(matches!(err, StateError::Changed { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("--features was f1 there, f1,f2 now"),
            "{text}"
        );
        MasterState::open(&location, identity(), || panic!("job.json exists"))
            .await
            .expect("the same job resumes");
    }

    #[tokio::test]
    async fn a_state_without_a_recorded_identity_is_checked_on_its_spec_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("job.json");
        let mut old = serde_json::to_value(job(3)).expect("json");
        old.as_object_mut().expect("object").remove("identity");
        std::fs::write(&path, old.to_string()).expect("write old job.json");
        let location = StateLocation::Dir(dir.path().to_path_buf());
        let given = Identity::default()
            .with(DATASET, "file:///x")
            .with("epochs", 2)
            .with("features", "anything");
        let (state, resumed) = MasterState::open(&location, given.clone(), || panic!("exists"))
            .await
            .expect("options not recorded are not checked");
        assert!(resumed);
        drop(state);
        let err = MasterState::open(&location, given.with("epochs", 3), || panic!("exists"))
            .await
            .err()
            .expect("epochs are recorded in the spec");
        assert!(
            err.to_string().contains("--epochs was 2 there, 3 now"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_older_format_resumes_and_is_marked_a_newer_one_is_refused_naming_both() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("job.json");
        let location = StateLocation::Dir(dir.path().to_path_buf());
        let identity = || {
            Identity::default()
                .with(DATASET, "file:///x")
                .with("epochs", 2)
        };
        // A state written before the format was recorded.
        let mut old = serde_json::to_value(job(3)).expect("json");
        old.as_object_mut().expect("object").remove("format");
        std::fs::write(&path, old.to_string()).expect("write old job.json");
        let (state, resumed) = MasterState::open(&location, identity(), || panic!("exists"))
            .await
            .expect("an older format resumes");
        assert!(resumed);
        drop(state);
        let marked: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("job.json")).expect("json");
        assert_eq!(marked["format"], STATE_FORMAT, "{marked}");
        // A state of a format this build does not know.
        let mut newer = serde_json::to_value(job(3)).expect("json");
        newer["format"] = (STATE_FORMAT + 1).into();
        newer["spec"] = serde_json::json!({"something": "else entirely"});
        std::fs::write(&path, newer.to_string()).expect("write newer job.json");
        let err = MasterState::open(&location, identity(), || panic!("exists"))
            .await
            .err()
            .expect("a newer format is refused");
        assert!(matches!(err, StateError::Newer { .. }), "{err}");
        let text = err.to_string();
        for version in [STATE_FORMAT + 1, STATE_FORMAT] {
            assert!(text.contains(&version.to_string()), "{text}");
        }
    }
}
