//! Following a source (`--follow`): after the data present at the start, the
//! job looks at its source every `--poll` (and at once when inotify sees a
//! local directory change) and turns what was committed since into splits,
//! which [`run`] adds to the queue with [`Command::Grow`], journaled with
//! the position reached. What counts as committed:
//!
//! - a Spark Structured Streaming file sink: the batches its log
//!   (`_spark_metadata/`) adds;
//! - a Delta or Iceberg table: the files its new versions append
//!   (compactions add nothing; a commit that rewrote rows stops the job);
//! - an output directory: each new partition directory, once the write that
//!   made it is committed: its own `_SUCCESS` (or one of a partition
//!   directory above it), or a root `_SUCCESS` written after the
//!   partition's files, or where the writer leaves no marker at all, once it
//!   has not changed for `--settle`;
//! - a table by name (`--catalog`): an Iceberg table's snapshots after the
//!   one its catalog points to now, the catalog asked again on each poll; a
//!   partitioned Hive table's new partitions, as the metastore lists them,
//!   each once it holds files.

pub mod inotify;
pub mod several;

use connectors::Report;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use connectors::layout::names::{classify_dir, DirClass, FileClass};
use connectors::table::{self, CommitKind, TableKind, TableVersion};
use connectors::{Dataset, DatasetOptions, ErrorKind, Location, ReadPlan, Split};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use tracing::{info, warn};

use crate::config::{FollowConfig, OnRewrite};
use crate::protocol::follow::{FollowPosition, FollowStep};
use crate::queue::{Command, Reply};
use crate::wall::wall_millis;
use inotify::LocalWatch;

/// Why following stopped the job.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The source could not be read.
    #[error(transparent)]
    Connector(#[from] connectors::Error),
    /// New data has columns the job's trainers were not set up for.
    #[error("{what} of {url} does not fit the job: {reason}; a followed job keeps the schema it started with (start a new job, with another --state, to take the new schema)")]
    Schema {
        /// The source.
        url: String,
        /// What was new (`batch 7`, `version 3`, `dt=2026-12-01`).
        what: String,
        /// The clash.
        reason: String,
    },
    /// A table commit removed or rewrote rows the job may have trained.
    #[error("{url}: {noun} {version} ({operation}) rewrote data: a followed job trains appends only; start a new job (another --state) on the table's new version, or in a job file set on-rewrite = \"skip\" (appends only) or \"retrain\" (the whole new version)")]
    Rewrite {
        /// The table.
        url: String,
        /// `version` or `snapshot`.
        noun: &'static str,
        /// The version.
        version: i64,
        /// What the log calls the operation.
        operation: String,
    },
    /// The catalog of a table followed by name could not answer.
    #[error("{0}")]
    Catalog(String),
    /// The queue refused the new splits, or its journal failed.
    #[error("the job could not take new splits: {0}")]
    Grow(String),
}

/// What a followed job found committed.
#[derive(Debug)]
pub struct Found {
    /// The new splits.
    pub splits: Vec<Split>,
    /// The position after them.
    pub position: FollowPosition,
    /// When the source committed them, when it says.
    pub committed_ms: Option<i64>,
}

/// What kind of source is followed, and where in it the job is.
#[derive(Debug)]
enum Watch {
    Sink {
        batch: Option<u64>,
    },
    Table {
        kind: TableKind,
        version: Option<i64>,
    },
    /// A Hive table's partitions, as its metastore lists them.
    Catalog {
        /// Partitions taken (`dt=2026-11-01`, as [`partition_name`] names them).
        taken: BTreeSet<String>,
    },
    Partitions {
        /// Partition directories taken (relative, as on disk).
        taken: BTreeSet<String>,
        /// Partitions seen and not yet committed: their files, and since
        /// when they have been as they are.
        pending: BTreeMap<String, Pending>,
        /// The root holds data files of its own, outside any partition:
        /// warned once.
        warned_root: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct Pending {
    /// (name, size) of every file, sorted: what "unchanged" compares.
    files: Vec<(String, u64)>,
    since: Instant,
}

/// Looks at a source for what was committed since the job's position.
pub struct Follower {
    location: Location,
    options: DatasetOptions,
    plan: ReadPlan,
    config: FollowConfig,
    watch: Watch,
    local: Option<LocalWatch>,
    /// Columns found in new data that the job's schema lacks (warned once each).
    unknown_columns: BTreeSet<String>,
    /// The table the source was resolved from, asked again on each poll.
    table: Option<crate::config::TableRef>,
    /// A job of several sources: a follower of each (this one then looks
    /// at none itself; see [`several`]).
    several: Vec<Follower>,
    /// Each source's position, with [`Follower::several`].
    positions: Vec<FollowPosition>,
    /// Each source's weight, with [`Follower::several`].
    weights: Vec<f64>,
}

/// How a followed job names a catalog partition: `col=value/col2=value2`,
/// as the dataset names its partition directory.
fn partition_name(fields: &[arrow::datatypes::Field], values: &[Option<String>]) -> String {
    fields
        .iter()
        .zip(values)
        .map(|(f, v)| format!("{}={}", f.name(), v.as_deref().unwrap_or("null")))
        .collect::<Vec<_>>()
        .join("/")
}

/// The kind of source at `location`, for a followed job.
async fn watch_of(location: &Location) -> Result<Watch, connectors::Error> {
    if connectors::sink::is_sink(location).await? {
        return Ok(Watch::Sink { batch: None });
    }
    if let Some(kind) = table::detect(location).await? {
        return Ok(Watch::Table {
            kind,
            version: None,
        });
    }
    Ok(Watch::Partitions {
        taken: BTreeSet::new(),
        pending: BTreeMap::new(),
        warned_root: false,
    })
}

/// Whether an error only means that the source has nothing yet (a sink or
/// directory not created yet, or empty).
fn nothing_yet(e: &connectors::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound) || matches!(e, connectors::Error::EmptyDir { .. })
}

/// What a followed source holds at the start of its job.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per job
pub enum First {
    /// Its first committed data, and the position it stands for.
    Found(Dataset, FollowPosition),
    /// It held nothing until `--idle-exit` or `--follow-until` ended the
    /// wait (`by` names which): the job has nothing to train.
    Ended {
        /// The option that ended the wait.
        by: &'static str,
    },
}

/// Opens what the source holds committed at the start of a followed job,
/// waiting until it holds something: a streaming query or ETL that has not
/// written yet is normal. The wait says what it waits for when it starts
/// and every `--log-every`, and ends, with nothing, at `--follow-until` or
/// once the source has held nothing for `--idle-exit`. A table by name
/// (`table`) is asked about again at each look. The future holds nothing
/// durable: cancel it to stop waiting (a signal).
pub async fn first_dataset(
    location: &Location,
    options: &DatasetOptions,
    config: &FollowConfig,
    table: Option<&crate::config::TableRef>,
) -> Result<First, connectors::Error> {
    let started = Instant::now();
    let until = config.until.map(|u| u.deadline(SystemTime::now()));
    let mut said: Option<(String, crate::logging::Wait)> = None;
    let mut local = LocalWatch::new(location);
    let mut location = location.clone();
    let mut options = options.clone();
    let mut first = true;
    loop {
        if let (Some(table), false) = (table, first) {
            match crate::catalog::resolve(&table.catalog, &table.name).await {
                Ok(found) => {
                    let mut fresh = options.clone();
                    found.apply(&mut fresh);
                    if fresh.catalog_partitions.is_some() {
                        options.catalog_partitions = fresh.catalog_partitions;
                    } else if found.read_url != location.url() {
                        location = connectors::store::open(&found.read_url)?;
                    }
                }
                Err(e) => {
                    warn!(error = %Report(&e), "following: the catalog did not answer; asking again at the next poll");
                }
            }
        }
        first = false;
        let waiting = match try_first(&location, &options, config).await {
            Ok(Some((dataset, position))) => return Ok(First::Found(dataset, position)),
            Ok(None) => Waiting::Commit,
            // A local directory that exists and holds nothing lists as
            // missing, as an empty prefix of an object store does.
            Err(e) if matches!(e.kind(), ErrorKind::NotFound) => {
                match location.local_dir().is_some_and(|dir| dir.is_dir()) {
                    true => Waiting::Commit,
                    false => Waiting::Exist,
                }
            }
            Err(e @ connectors::Error::EmptyDir { .. }) => {
                tracing::debug!(error = %Report(&e), "nothing to follow yet");
                Waiting::Commit
            }
            Err(e) if e.is_transient() => Waiting::Readable(Report(&e).to_string()),
            Err(e) => return Err(e),
        };
        let limit = first_limit(config, until, started);
        if limit.is_some_and(|left| left.is_zero()) {
            let by = if until.is_some_and(|t| SystemTime::now() >= t) {
                "--follow-until"
            } else {
                "--idle-exit"
            };
            crate::logging::result_warning(format!(
                "following: {} held nothing to train when {by} ended the wait; nothing trained",
                location.url()
            ));
            return Ok(First::Ended { by });
        }
        let (what, detail) = waiting.said(&location.url());
        if said.as_ref().is_none_or(|(w, _)| *w != what) {
            said = Some((what.clone(), crate::logging::Wait::new(what)));
        }
        if let Some((_, wait)) = &mut said {
            // Whole seconds, rounded up: `--idle-exit 2s` reads as 2s.
            let shown = limit.map(|l| Duration::from_secs(l.as_secs_f64().ceil() as u64));
            wait.say(&detail, shown);
        }
        let pause = limit.map_or(config.poll, |left| left.min(config.poll));
        wait(&mut local, pause.max(Duration::from_millis(10))).await;
    }
}

/// What the start of a followed job waits for.
enum Waiting {
    /// The source's directory, bucket prefix or table to exist.
    Exist,
    /// Its first committed data.
    Commit,
    /// The source to answer again (a transient failure, its message).
    Readable(String),
}

impl Waiting {
    /// What is waited for in `url`, and what is there instead, as a wait says them.
    fn said(&self, url: &str) -> (String, String) {
        match self {
            Waiting::Exist => (format!("{url} to exist"), "nothing there yet".to_string()),
            Waiting::Commit => (
                format!("the first commit in {url}"),
                "nothing committed there yet".to_string(),
            ),
            Waiting::Readable(e) => (
                format!("the first commit in {url}"),
                format!("cannot read it now ({e}); trying again"),
            ),
        }
    }
}

/// How long the start of a followed job may still wait: until
/// `--follow-until`, and for `--idle-exit` since it `started` (the source
/// has held nothing since); `None` without either.
fn first_limit(
    config: &FollowConfig,
    until: Option<SystemTime>,
    started: Instant,
) -> Option<Duration> {
    let until = until.map(|t| t.duration_since(SystemTime::now()).unwrap_or_default());
    let idle = config
        .idle_exit
        .map(|d| d.saturating_sub(started.elapsed()));
    match (until, idle) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn try_first(
    location: &Location,
    options: &DatasetOptions,
    config: &FollowConfig,
) -> Result<Option<(Dataset, FollowPosition)>, connectors::Error> {
    if options.catalog_partitions.is_some() {
        // A Hive table by name: the partitions its metastore lists that
        // hold files now; the others are taken once they do.
        let dataset = Dataset::open(location.clone(), options.clone()).await?;
        if dataset.files.is_empty() {
            // Its schema is the metastore's partition columns only: wait
            // for a partition that holds files.
            return Ok(None);
        }
        let taken: BTreeSet<String> = dataset
            .files
            .iter()
            .map(|f| f.partition_dir.clone())
            .collect();
        return Ok(has_schema(dataset).map(|d| {
            (
                d,
                FollowPosition::Partitions {
                    taken: taken.into_iter().collect(),
                },
            )
        }));
    }
    match watch_of(location).await? {
        Watch::Sink { .. } => {
            let Some(batch) = connectors::sink::newest_batch(location).await? else {
                return Ok(None);
            };
            let dataset =
                Dataset::open_sink_batches(location.clone(), None, batch, options.clone()).await?;
            Ok(has_schema(dataset).map(|d| (d, FollowPosition::Sink { batch: Some(batch) })))
        }
        // Taken above (the catalog's partitions are in the options).
        Watch::Catalog { .. } => Ok(None),
        Watch::Table { kind, .. } => {
            if kind == TableKind::Delta && !delta_has_version(location).await? {
                return Ok(None);
            }
            let dataset = Dataset::open(location.clone(), options.clone()).await?;
            let version = dataset.table.as_ref().map(|t| t.version);
            Ok(has_schema(dataset).map(|d| (d, FollowPosition::Table { version })))
        }
        Watch::Partitions { .. } => {
            let listing = connectors::listing::list(location).await?;
            let units = units(&listing);
            if units.root_files {
                // Not partitioned: the directory as a whole once its write is
                // committed (or, without markers, settled); nothing follows.
                let settled = units.no_markers
                    && wall_millis() as i64 - units.root_newest_ms
                        >= config.settle.as_millis() as i64;
                let committed = units.root_success_ms.is_some() && !units.root_in_flight;
                if !committed && !settled {
                    return Ok(None);
                }
                let dataset = Dataset::open(location.clone(), options.clone()).await?;
                return Ok(has_schema(dataset)
                    .map(|d| (d, FollowPosition::Partitions { taken: Vec::new() })));
            }
            let committed: Vec<&Unit> = units
                .list
                .iter()
                .filter(|u| {
                    units.committed(u) || (units.no_markers && settled_by_mtime(u, config.settle))
                })
                .collect();
            if committed.is_empty() {
                return Ok(None);
            }
            let roots: Vec<Path> = committed.iter().map(|u| u.path.clone()).collect();
            let dataset = open_roots(location.clone(), roots, options.clone()).await?;
            let taken = committed.iter().map(|u| u.name.clone()).collect();
            Ok(has_schema(dataset).map(|d| (d, FollowPosition::Partitions { taken })))
        }
    }
}

/// Whether a Delta table's log holds a version yet (a streaming query
/// creates `_delta_log/` before its first commit).
async fn delta_has_version(location: &Location) -> Result<bool, connectors::Error> {
    let log = location.root.clone().join(table::delta::LOG_DIR);
    let listed = location
        .store
        .list_with_delimiter(Some(&log))
        .await
        .map_err(|e| connectors::Error::from_store(location.display(&log), e))?;
    Ok(listed.objects.iter().any(|o| {
        let name = o.location.filename().unwrap_or_default();
        name.ends_with(".json") || name.ends_with(".parquet")
    }))
}

/// Whether version `version` of the Delta table at `location` is committed
/// (its log file exists).
async fn delta_has(location: &Location, version: i64) -> Result<bool, connectors::Error> {
    let path = location
        .root
        .clone()
        .join(table::delta::LOG_DIR)
        .join(format!("{version:020}.json"));
    match location.store.head(&path).await {
        Ok(_) => Ok(true),
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(connectors::Error::from_store(location.display(&path), e)),
    }
}

/// The dataset, when it has a schema to plan from (data files, or a
/// table's own schema).
fn has_schema(dataset: Dataset) -> Option<Dataset> {
    (!dataset.schema().fields().is_empty()).then_some(dataset)
}

/// [`Dataset::open_roots`] on owned inputs.
async fn open_roots(
    location: Location,
    roots: Vec<Path>,
    options: DatasetOptions,
) -> Result<Dataset, connectors::Error> {
    Dataset::open_roots(location, &roots, options).await
}

/// [`table::changes`] on owned inputs.
async fn table_changes(
    location: Location,
    kind: TableKind,
    since: i64,
    at: TableVersion,
) -> Result<table::TableChanges, connectors::Error> {
    table::changes(&location, kind, since, at).await
}

/// Whether the newest file of `unit` was written at least `settle` ago.
fn settled_by_mtime(unit: &Unit, settle: Duration) -> bool {
    let newest = unit.newest_ms;
    let now = wall_millis() as i64;
    now.saturating_sub(newest) >= settle.as_millis() as i64
}

impl Follower {
    /// A follower of the job's source from `position` (where the job's
    /// start and its growths so far left it); `taken` lists every partition
    /// directory taken so far (for a directory source).
    pub async fn new(
        location: Location,
        options: DatasetOptions,
        plan: ReadPlan,
        config: FollowConfig,
        position: &FollowPosition,
        taken: BTreeSet<String>,
    ) -> Result<Follower, connectors::Error> {
        let watch = match position {
            FollowPosition::Sink { batch } => Watch::Sink { batch: *batch },
            FollowPosition::Table { version } => {
                let kind = match table::detect(&location).await? {
                    Some(kind) => kind,
                    None => {
                        return Err(connectors::Error::Layout {
                            path: location.url(),
                            reason: "the job followed a table here, and it is no table any more"
                                .to_string(),
                        })
                    }
                };
                Watch::Table {
                    kind,
                    version: *version,
                }
            }
            FollowPosition::Partitions { .. } if options.catalog_partitions.is_some() => {
                Watch::Catalog { taken }
            }
            FollowPosition::Partitions { .. } => Watch::Partitions {
                taken,
                pending: BTreeMap::new(),
                warned_root: false,
            },
            FollowPosition::Sources { .. } => {
                return Err(connectors::Error::Layout {
                    path: location.url(),
                    reason: "each of several sources is followed on its own".to_string(),
                })
            }
        };
        let local = LocalWatch::new(&location);
        // What the job's start decided of a CSV header holds for all it follows.
        let mut options = options;
        if plan.options.csv_header.is_some() {
            options.format_options.csv_header = plan.options.csv_header;
        }
        Ok(Follower {
            location,
            options,
            plan,
            config,
            watch,
            local,
            unknown_columns: BTreeSet::new(),
            table: None,
            several: Vec::new(),
            positions: Vec::new(),
            weights: Vec::new(),
        })
    }

    /// Asks the catalog about the followed table again: an Iceberg table's
    /// current metadata file becomes the location read, a Hive table's
    /// partition list the one new partitions are found in.
    async fn ask_catalog(&mut self) -> Result<(), FollowError> {
        let Some(table) = &self.table else {
            return Ok(());
        };
        let found = match crate::catalog::resolve(&table.catalog, &table.name).await {
            Ok(found) => found,
            // Down for a while: asked again at the next poll.
            Err(e @ crate::catalog::CatalogError::Unreachable { .. }) => {
                warn!(error = %Report(&e), "following: the catalog did not answer; asking again at the next poll");
                return Ok(());
            }
            Err(e) => return Err(FollowError::Catalog(Report(&e).to_string())),
        };
        let mut options = self.options.clone();
        found.apply(&mut options);
        if options.catalog_partitions.is_some() {
            self.options.catalog_partitions = options.catalog_partitions;
        } else if found.read_url != self.location.url() {
            self.location = connectors::store::open(&found.read_url)?;
        }
        Ok(())
    }

    /// The follower of a followed job where its state left it (its start
    /// and every growth so far), with the split it grows from and when it
    /// ends; `started` is when this run started (`--follow-until` durations
    /// count from it).
    pub async fn resume(
        state: &crate::state::MasterState,
        location: Location,
        options: DatasetOptions,
        config: FollowConfig,
        started: SystemTime,
        table: Option<crate::config::TableRef>,
    ) -> Result<(Follower, u32, Ends), connectors::Error> {
        let (position, taken) =
            crate::protocol::follow::position_of(state.spec.follow.as_ref(), state.queue().grown());
        let follower = Follower::new(
            location,
            options,
            state.spec.plan.clone(),
            config,
            &position,
            taken,
        )
        .await?;
        let follower = Follower { table, ..follower };
        let ends = Ends {
            until: config.until.map(|u| u.deadline(started)),
            idle_exit: config.idle_exit,
        };
        Ok((follower, state.spec.splits.len() as u32, ends))
    }

    /// When files last landed or changed in a partition not committed yet
    /// (none for a sink or a table, whose commits are atomic).
    pub fn last_landed(&self) -> Option<Instant> {
        if !self.several.is_empty() {
            return self.several.iter().filter_map(Follower::last_landed).max();
        }
        match &self.watch {
            Watch::Partitions { pending, .. } => pending.values().map(|p| p.since).max(),
            _ => None,
        }
    }

    /// Looks at the source once: what was committed since the position.
    pub async fn poll(&mut self) -> Result<Option<Found>, FollowError> {
        if !self.several.is_empty() {
            return self.poll_several().await;
        }
        self.ask_catalog().await?;
        let found = match &mut self.watch {
            Watch::Catalog { taken } => {
                let Some(catalog) = self.options.catalog_partitions.clone() else {
                    return Ok(None);
                };
                let mut fresh = catalog.clone();
                fresh
                    .partitions
                    .retain(|p| !taken.contains(&partition_name(&catalog.fields, &p.values)));
                if let Some(filter) = &self.options.partition_filter {
                    fresh
                        .partitions
                        .retain(|p| filter.matches(&catalog.fields, &p.values));
                }
                if fresh.partitions.is_empty() {
                    return Ok(None);
                }
                let mut options = self.options.clone();
                options.catalog_partitions = None;
                let dataset =
                    Dataset::open_partitions(self.location.clone(), fresh, options).await?;
                let names: BTreeSet<String> = dataset
                    .files
                    .iter()
                    .map(|f| f.partition_dir.clone())
                    .collect();
                if names.is_empty() {
                    return Ok(None);
                }
                taken.extend(names.iter().cloned());
                let names: Vec<String> = names.into_iter().collect();
                let what = match names.as_slice() {
                    [one] => one.clone(),
                    many => format!("{} partitions", many.len()),
                };
                info!(partitions = %names.join(", "), files = dataset.files.len(), "following: new partitions in the metastore");
                Some((
                    dataset,
                    FollowPosition::Partitions { taken: names },
                    None,
                    what,
                ))
            }
            Watch::Sink { batch } => {
                let Some(newest) = connectors::sink::newest_batch(&self.location).await? else {
                    return Ok(None);
                };
                if batch.is_some_and(|b| newest <= b) {
                    return Ok(None);
                }
                let dataset = Dataset::open_sink_batches(
                    self.location.clone(),
                    *batch,
                    newest,
                    self.options.clone(),
                )
                .await?;
                *batch = Some(newest);
                info!(
                    batch = newest,
                    files = dataset.files.len(),
                    "following: new batch of the streaming sink"
                );
                let committed_ms = sink_commit_ms(&self.location, newest).await;
                Some((
                    dataset,
                    FollowPosition::Sink {
                        batch: Some(newest),
                    },
                    committed_ms,
                    format!("batch {newest}"),
                ))
            }
            Watch::Table { kind, version } => {
                let kind = *kind;
                // A Delta table's next version is one file: look for it
                // before reading the log.
                if let (TableKind::Delta, Some(v)) = (kind, *version) {
                    if !delta_has(&self.location, v.saturating_add(1)).await? {
                        return Ok(None);
                    }
                }
                let latest = table::snapshot(&self.location, kind, TableVersion::Latest).await?;
                if *version == Some(latest.version) {
                    return Ok(None);
                }
                let (files, snapshot, new_version) = match *version {
                    None => {
                        let files = latest.files.clone();
                        (files, latest, None)
                    }
                    Some(since) => {
                        let at = match kind {
                            TableKind::Delta => TableVersion::Version(latest.version.max(0) as u64),
                            TableKind::Iceberg => TableVersion::SnapshotId(latest.version),
                        };
                        let changes = table_changes(self.location.clone(), kind, since, at).await?;
                        let rewrite = changes
                            .commits
                            .iter()
                            .find(|c| c.kind == CommitKind::Rewrite);
                        match (rewrite, self.config.on_rewrite) {
                            (None, _) => (changes.appended, changes.snapshot, Some(since)),
                            (Some(bad), OnRewrite::Fail) => {
                                return Err(FollowError::Rewrite {
                                    url: self.location.url(),
                                    noun: noun(kind),
                                    version: bad.version,
                                    operation: bad.operation.clone(),
                                })
                            }
                            (Some(bad), OnRewrite::Skip) => {
                                let skipped: u64 =
                                    changes.rewritten.iter().filter_map(|f| f.rows).sum();
                                warn!(version = bad.version, operation = %bad.operation, skipped_rows = skipped, "following: a commit rewrote rows; only the appends are trained (on-rewrite = \"skip\")");
                                (changes.appended, changes.snapshot, Some(since))
                            }
                            (Some(bad), OnRewrite::Retrain) => {
                                warn!(version = bad.version, operation = %bad.operation, "following: a commit rewrote rows; the whole new version is trained again (on-rewrite = \"retrain\")");
                                let files = changes.snapshot.files.clone();
                                (files, changes.snapshot, Some(since))
                            }
                        }
                    }
                };
                let to = snapshot.version;
                let committed_ms = snapshot.timestamp_ms;
                let dataset = Dataset::from_table(
                    self.location.clone(),
                    snapshot,
                    Some(files),
                    self.options.clone(),
                )
                .await?;
                *version = Some(to);
                info!(from = ?new_version, to, files = dataset.files.len(), "following: new {} of the table", noun(kind));
                Some((
                    dataset,
                    FollowPosition::Table { version: Some(to) },
                    committed_ms,
                    format!("{} {to}", noun(kind)),
                ))
            }
            Watch::Partitions {
                taken,
                pending,
                warned_root,
            } => {
                let listing = match connectors::listing::list(&self.location).await {
                    Ok(listing) => listing,
                    Err(e) if nothing_yet(&e) => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
                let units = units(&listing);
                if units.root_files && !*warned_root {
                    warn!(url = %self.location.url(), "files directly in the followed directory are not followed: only new partition directories are taken");
                    *warned_root = true;
                }
                let now = Instant::now();
                let mut ready: Vec<&Unit> = Vec::new();
                for unit in &units.list {
                    if taken.contains(&unit.name) {
                        continue;
                    }
                    let files: Vec<(String, u64)> = unit.files.clone();
                    let entry = pending.entry(unit.name.clone()).or_insert(Pending {
                        files: files.clone(),
                        since: now,
                    });
                    if entry.files != files {
                        entry.files = files;
                        entry.since = now;
                    }
                    let settled = units.no_markers && entry.since.elapsed() >= self.config.settle;
                    if units.committed(unit) || settled {
                        ready.push(unit);
                    }
                }
                if ready.is_empty() {
                    return Ok(None);
                }
                let roots: Vec<Path> = ready.iter().map(|u| u.path.clone()).collect();
                let names: Vec<String> = ready.iter().map(|u| u.name.clone()).collect();
                let committed_ms = ready.iter().map(|u| u.committed_ms(&units)).max().flatten();
                let dataset =
                    open_roots(self.location.clone(), roots, self.options.clone()).await?;
                for name in &names {
                    pending.remove(name);
                    taken.insert(name.clone());
                }
                let what = match names.as_slice() {
                    [one] => one.clone(),
                    many => format!("{} partitions", many.len()),
                };
                info!(partitions = %names.join(", "), files = dataset.files.len(), "following: new partitions committed");
                Some((
                    dataset,
                    FollowPosition::Partitions { taken: names },
                    committed_ms,
                    what,
                ))
            }
        };
        let Some((dataset, position, committed_ms, what)) = found else {
            return Ok(None);
        };
        self.check_schema(&dataset, &what)?;
        Ok(Some(Found {
            splits: dataset.splits,
            position,
            committed_ms,
        }))
    }

    /// New data must fit the schema the job was planned with: the same
    /// types for the columns it has, the same partition columns. Columns
    /// the job lacks are not read (warned once).
    fn check_schema(&mut self, dataset: &Dataset, what: &str) -> Result<(), FollowError> {
        let clash = |reason: String| FollowError::Schema {
            url: self.location.url(),
            what: what.to_string(),
            reason,
        };
        if dataset.splits.is_empty() {
            return Ok(());
        }
        for field in dataset.data_schema.fields() {
            match self.plan.data_schema.field_with_name(field.name()) {
                Ok(known) if known.data_type() != field.data_type() => {
                    return Err(clash(format!(
                        "column {} is {} there, {} in the job",
                        field.name(),
                        field.data_type(),
                        known.data_type()
                    )))
                }
                Ok(_) => {}
                Err(_) => {
                    if self.unknown_columns.insert(field.name().clone()) {
                        warn!(column = %field.name(), %what, "a column the job started without is not read");
                    }
                }
            }
        }
        let names = |fields: &[arrow::datatypes::Field]| -> Vec<String> {
            fields.iter().map(|f| f.name().clone()).collect()
        };
        let (have, want) = (
            names(&dataset.partition_fields),
            names(&self.plan.partition_fields),
        );
        if have != want {
            return Err(clash(format!(
                "partition columns [{}], the job's are [{}]",
                have.join(", "),
                want.join(", ")
            )));
        }
        Ok(())
    }

    /// Waits until the next look: `--poll`, or sooner when a watched local
    /// directory changes.
    pub async fn wait(&mut self) {
        wait(&mut self.local, self.config.poll).await;
    }
}

async fn wait(local: &mut Option<LocalWatch>, poll: Duration) {
    match local {
        Some(watch) => watch.changed(poll).await,
        None => tokio::time::sleep(poll).await,
    }
}

fn noun(kind: TableKind) -> &'static str {
    match kind {
        TableKind::Delta => "version",
        TableKind::Iceberg => "snapshot",
    }
}

/// When the sink's log file of `batch` was written (`_spark_metadata/N`,
/// or `N.compact`), if it can be told.
async fn sink_commit_ms(location: &Location, batch: u64) -> Option<i64> {
    let dir = location.root.clone().join("_spark_metadata");
    for name in [batch.to_string(), format!("{batch}.compact")] {
        if let Ok(meta) = location.store.head(&dir.clone().join(name)).await {
            return Some(meta.last_modified.timestamp_millis());
        }
    }
    None
}

/// A partition directory holding data files: what a directory source's
/// follower takes, once.
#[derive(Debug)]
struct Unit {
    /// Relative path, as on disk (`dt=2026-11-29/hour=03`).
    name: String,
    /// Its path in the store.
    path: Path,
    /// (name, size) of each data file, sorted.
    files: Vec<(String, u64)>,
    /// The newest file's time (ms since the epoch).
    newest_ms: i64,
    /// `_SUCCESS` in it or in a partition directory above it: its time.
    own_success_ms: Option<i64>,
    /// In-flight output inside it.
    in_flight: bool,
}

impl Unit {
    fn committed_ms(&self, units: &Units) -> Option<i64> {
        self.own_success_ms.or(units.root_success_ms)
    }
}

/// The partition directories of a listing, and the markers that decide them.
#[derive(Debug, Default)]
struct Units {
    list: Vec<Unit>,
    /// The root `_SUCCESS`'s time.
    root_success_ms: Option<i64>,
    /// In-flight output at the root (a write of the whole directory under way).
    root_in_flight: bool,
    /// No `_SUCCESS` anywhere: the writer leaves no markers.
    no_markers: bool,
    /// Data files directly in the root.
    root_files: bool,
    /// The newest of them (ms since the epoch).
    root_newest_ms: i64,
}

impl Units {
    /// Committed by a marker: its own (or a partition's above it), or the
    /// root's written after its files with no whole-directory write under way.
    fn committed(&self, unit: &Unit) -> bool {
        if unit.in_flight {
            return false;
        }
        if unit.own_success_ms.is_some() {
            return true;
        }
        match self.root_success_ms {
            Some(at) => !self.root_in_flight && at >= unit.newest_ms,
            None => false,
        }
    }
}

/// Groups a listing's data files by partition directory.
fn units(listing: &connectors::listing::Listing) -> Units {
    let mut out = Units::default();
    let mut successes: BTreeMap<String, i64> = BTreeMap::new();
    let mut by_dir: BTreeMap<String, Unit> = BTreeMap::new();
    for file in &listing.files {
        let ms = file.meta.last_modified.timestamp_millis();
        let dir = file.dirs.join("/");
        match file.class {
            FileClass::Success => {
                if file.dirs.is_empty() {
                    out.root_success_ms = Some(ms);
                } else {
                    successes.insert(dir, ms);
                }
            }
            FileClass::Data => {
                if file.dirs.is_empty() {
                    out.root_files = true;
                    out.root_newest_ms = out.root_newest_ms.max(ms);
                    continue;
                }
                if !file
                    .dirs
                    .iter()
                    .all(|d| matches!(classify_dir(d), DirClass::Partition { .. }))
                {
                    continue;
                }
                let unit = by_dir.entry(dir.clone()).or_insert_with(|| Unit {
                    name: dir.clone(),
                    path: parent(&file.meta.location),
                    files: Vec::new(),
                    newest_ms: i64::MIN,
                    own_success_ms: None,
                    in_flight: false,
                });
                let name = file
                    .meta
                    .location
                    .filename()
                    .unwrap_or_default()
                    .to_string();
                unit.files.push((name, file.meta.size));
                unit.newest_ms = unit.newest_ms.max(ms);
            }
            _ => {}
        }
    }
    for name in &listing.in_flight {
        match name.rsplit_once('/') {
            Some((dir, _)) => {
                for (unit_name, unit) in by_dir.iter_mut() {
                    if unit_name == dir || unit_name.starts_with(&format!("{dir}/")) {
                        unit.in_flight = true;
                    }
                }
            }
            None => out.root_in_flight = true,
        }
    }
    for unit in by_dir.values_mut() {
        unit.files.sort();
        // Its own `_SUCCESS`, or one of a partition directory above it.
        let mut prefix = String::new();
        for segment in unit.name.split('/') {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(segment);
            if let Some(ms) = successes.get(&prefix) {
                unit.own_success_ms = Some(unit.own_success_ms.map_or(*ms, |m: i64| m.max(*ms)));
            }
        }
    }
    out.no_markers = out.root_success_ms.is_none() && successes.is_empty();
    out.list = by_dir.into_values().collect();
    out
}

/// The directory holding `path`.
fn parent(path: &Path) -> Path {
    let parts: Vec<_> = path.parts().collect();
    let n = parts.len().saturating_sub(1);
    Path::from_iter(parts.into_iter().take(n))
}

/// Where a followed job is to the outside: what it does with each thing found.
#[async_trait::async_trait]
pub trait Grow: Send + Sync {
    /// Applies `command` to the job's queue, durably.
    async fn apply(&self, command: Command) -> Result<Reply, String>;
    /// Whether tasks the job took wait to be trained (to do or leased): a
    /// job at work is not idle.
    fn busy(&self) -> bool {
        false
    }
}

/// `sluice train`'s embedded queue grows a followed job durably.
#[async_trait::async_trait]
impl Grow for crate::state::LocalQueue {
    async fn apply(&self, command: Command) -> Result<Reply, String> {
        self.run(command).map_err(|e| Report(&e).to_string())
    }
    fn busy(&self) -> bool {
        self.has_work()
    }
}

/// The master's group commit grows a followed job durably.
#[async_trait::async_trait]
impl Grow for crate::state::commit::GroupCommit {
    async fn apply(&self, command: Command) -> Result<Reply, String> {
        self.run(command).await.map_err(|e| Report(&e).to_string())
    }
    fn busy(&self) -> bool {
        self.has_work()
    }
}

/// When a followed job stops taking new data.
#[derive(Debug, Clone, Copy)]
pub struct Ends {
    /// At this time (`--follow-until`).
    pub until: Option<SystemTime>,
    /// After the job trained what it took and the source has not changed
    /// for this long (`--idle-exit`).
    pub idle_exit: Option<Duration>,
}

/// Follows the source until [`Ends`] says to stop, growing the job by what
/// is committed (from split `next` on), then closes the job: it ends once
/// what was taken is trained. A transient failure to read the source is
/// logged and retried at the next poll; any other closes the job and is
/// returned. Cancel the future to stop following without closing (a
/// signal: the job resumes following from its journal).
pub async fn run(
    mut follower: Follower,
    grow: &dyn Grow,
    mut next: u32,
    ends: Ends,
) -> Result<(), FollowError> {
    let mut last_change = Instant::now();
    let mut warned = Instant::now() - Duration::from_secs(3600);
    let every = crate::logging::settings().every;
    let mut quiet = crate::logging::Every::new(every);
    let result = loop {
        if ends.until.is_some_and(|t| SystemTime::now() >= t) {
            info!("following: --follow-until reached; training what was taken, then ending");
            break Ok(());
        }
        // Idle means nothing to do: what was taken is trained, and nothing
        // landed in the source (files of a partition not yet committed
        // count: its ETL is at work).
        if grow.busy() {
            last_change = Instant::now();
        }
        if let Some(landed) = follower.last_landed() {
            last_change = last_change.max(landed);
        }
        if ends.idle_exit.is_some_and(|d| last_change.elapsed() >= d) {
            info!(idle = ?last_change.elapsed(), "following: the source has not changed for --idle-exit; training what was taken, then ending");
            break Ok(());
        }
        match follower.poll().await {
            Ok(Some(found)) => {
                last_change = Instant::now();
                let rows = found
                    .splits
                    .iter()
                    .map(|s| s.rows)
                    .try_fold(0u64, |sum, r| r.map(|r| sum.saturating_add(r)));
                let count = found.splits.len() as u32;
                let step = FollowStep {
                    splits: found.splits,
                    position: found.position,
                    committed_ms: found.committed_ms,
                    seen_ms: wall_millis(),
                    rows,
                };
                let rows_each: Vec<Option<u64>> = step.splits.iter().map(|s| s.rows).collect();
                let sources: Vec<u32> = match follower.several.is_empty() {
                    true => Vec::new(),
                    false => step.splits.iter().map(|s| s.source).collect(),
                };
                let record = match serde_json::to_value(&step) {
                    Ok(record) => record,
                    Err(e) => break Err(FollowError::Grow(Report(&e).to_string())),
                };
                let command = Command::Grow {
                    now: wall_millis(),
                    first: next,
                    rows: rows_each,
                    record,
                    sources,
                };
                match grow.apply(command).await {
                    Ok(Reply::Grow(Ok(()))) => next = next.saturating_add(count),
                    Ok(Reply::Grow(Err(e))) => {
                        break Err(FollowError::Grow(Report(&e).to_string()))
                    }
                    Ok(_) => {
                        break Err(FollowError::Grow(
                            "the queue answered another request".to_string(),
                        ))
                    }
                    Err(e) => break Err(FollowError::Grow(e)),
                }
                continue; // look again at once: more may be there
            }
            Ok(None) => {
                let idle = last_change.elapsed();
                if idle >= every && quiet.due() {
                    let idle = crate::logging::short_duration(idle);
                    info!(target: crate::logging::PROGRESS, idle_seconds = last_change.elapsed().as_secs(), "following: no new data for {idle}");
                }
            }
            Err(FollowError::Connector(e)) if e.is_transient() || nothing_yet(&e) => {
                if warned.elapsed() >= Duration::from_secs(60) {
                    warn!(error = %Report(&e), "following: cannot read the source now; trying again");
                    warned = Instant::now();
                }
            }
            Err(e) => break Err(e),
        }
        let sleep = match ends.until {
            Some(t) => t
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                .min(follower.config.poll),
            None => follower.config.poll,
        };
        wait(&mut follower.local, sleep).await;
    };
    // Close whatever happened: the job trains what it took, then ends.
    if let Err(e) = grow.apply(Command::Close { now: wall_millis() }).await {
        warn!(error = %e, "following: the job could not be closed");
    }
    result
}

#[cfg(test)]
mod tests {
    use connectors::listing::{ListedFile, Listing};
    use object_store::ObjectMeta;

    use super::*;

    fn file(path: &str, ms: i64) -> ListedFile {
        let location = Path::from(path);
        let name = location.filename().unwrap_or_default().to_string();
        let parts: Vec<String> = location.parts().map(|p| p.as_ref().to_string()).collect();
        ListedFile {
            meta: ObjectMeta {
                location,
                last_modified: chrono::DateTime::from_timestamp_millis(ms).expect("time"),
                size: 10,
                e_tag: None,
                version: None,
            },
            dirs: parts[1..parts.len() - 1].to_vec(),
            class: connectors::layout::names::classify_file(&name),
        }
    }

    fn listing(files: Vec<ListedFile>, in_flight: &[&str]) -> Listing {
        Listing {
            files,
            in_flight: in_flight.iter().map(|s| s.to_string()).collect(),
            ..Listing::default()
        }
    }

    fn committed(units: &Units) -> Vec<&str> {
        units
            .list
            .iter()
            .filter(|u| units.committed(u))
            .map(|u| u.name.as_str())
            .collect()
    }

    #[test]
    fn a_partition_is_committed_by_its_own_marker_or_one_above_it() {
        let units = units(&listing(
            vec![
                file("t/dt=1/hour=0/part-0.parquet", 10),
                file("t/dt=1/_SUCCESS", 20),
                file("t/dt=2/part-0.parquet", 10),
                file("t/dt=3/part-0.parquet", 10),
                file("t/dt=3/_SUCCESS", 20),
            ],
            &["dt=3/_temporary"],
        ));
        assert_eq!(committed(&units), ["dt=1/hour=0"]);
        assert!(!units.no_markers);
    }

    #[test]
    fn the_root_marker_commits_only_partitions_written_before_it() {
        let files = vec![
            file("t/dt=1/part-0.parquet", 10),
            file("t/dt=2/part-0.parquet", 30),
            file("t/_SUCCESS", 20),
        ];
        let units = units(&listing(files.clone(), &[]));
        assert_eq!(committed(&units), ["dt=1"]);
        // A write of the whole directory under way commits nothing by the root's marker.
        let units_in_flight = super::units(&listing(files, &["_temporary"]));
        assert!(committed(&units_in_flight).is_empty());
    }

    #[test]
    fn without_any_marker_partitions_wait_for_the_settle_time() {
        let units = units(&listing(vec![file("t/dt=1/part-0.parquet", 10)], &[]));
        assert!(units.no_markers);
        assert!(committed(&units).is_empty());
        assert!(settled_by_mtime(&units.list[0], Duration::from_secs(30)));
        let now = wall_millis() as i64;
        let fresh = super::units(&listing(vec![file("t/dt=1/part-0.parquet", now)], &[]));
        assert!(!settled_by_mtime(&fresh.list[0], Duration::from_secs(30)));
    }

    fn config(idle_exit: Option<Duration>) -> FollowConfig {
        FollowConfig {
            poll: Duration::from_secs(1),
            settle: Duration::from_secs(30),
            until: None,
            idle_exit,
            on_rewrite: OnRewrite::Fail,
        }
    }

    #[test]
    fn the_wait_for_a_first_commit_is_bounded_by_idle_exit_from_the_start_and_follow_until() {
        let started = Instant::now();
        assert_eq!(first_limit(&config(None), None, started), None);
        let idle =
            first_limit(&config(Some(Duration::from_secs(2))), None, started).expect("a limit");
        assert!(idle <= Duration::from_secs(2) && idle > Duration::from_secs(1));
        let long_ago = started - Duration::from_secs(5);
        assert_eq!(
            first_limit(&config(Some(Duration::from_secs(2))), None, long_ago),
            Some(Duration::ZERO),
            "--idle-exit counts from the start while nothing is there"
        );
        let past = SystemTime::now() - Duration::from_secs(1);
        assert_eq!(
            first_limit(&config(Some(Duration::from_secs(60))), Some(past), started),
            Some(Duration::ZERO),
            "--follow-until passed ends the wait"
        );
    }
}
