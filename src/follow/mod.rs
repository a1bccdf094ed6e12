//! Following a source (`--follow`): after the data present at the start
//! ([`first_dataset`]), the job looks at its source every `--poll` (and at
//! once when inotify sees a local directory change) and turns what was
//! committed since into splits, which [`run`] adds to the queue with
//! [`Command::Grow`](crate::queue::Command::Grow), journaled with the
//! position reached. One module per kind of source watched, as each says
//! what counts as committed there:
//!
//! - [`sink`]: a Spark Structured Streaming file sink, the batches its log
//!   (`_spark_metadata/`) adds;
//! - [`delta`] and [`iceberg`] (with what they share in [`table`]): the
//!   files a table's new versions append (compactions add nothing; a commit
//!   that rewrote rows stops the job);
//! - [`dirs`]: an output directory, each new partition directory once the
//!   write that made it is committed (a `_SUCCESS`, or `--settle` without
//!   markers);
//! - [`catalog`]: a table by name (`--catalog`), the catalog asked again on
//!   each poll; a partitioned Hive table's new partitions, as the metastore
//!   lists them, each once it holds files;
//! - [`several`]: several sources followed together, each by its own follower.
//!
//! [`first`] waits for a source's first committed data, [`run`] is the
//! polling loop they all share, and [`inotify`] the watch of local directories.

mod catalog;
mod delta;
mod dirs;
mod first;
mod iceberg;
pub mod inotify;
mod run;
pub mod several;
mod sink;
mod table;

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use connectors::table::TableKind;
use connectors::{Dataset, DatasetOptions, ErrorKind, Location, ReadPlan, Split};
use tracing::warn;

use crate::config::FollowConfig;
use crate::protocol::follow::FollowPosition;
pub use first::{first_dataset, First};
use inotify::LocalWatch;
pub use run::{run, Ends, Grow};

/// Why following stopped the job.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The source could not be read.
    #[error("cannot {doing}")]
    Connector {
        /// What was being done (`list the new partitions of URL`).
        doing: String,
        /// Why, naming the path (boxed: it is large).
        #[source]
        source: Box<connectors::Error>,
    },
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

impl FollowError {
    /// The error of the source, which failed while `doing`, for `map_err`.
    pub(crate) fn read(doing: impl Into<String>) -> impl FnOnce(connectors::Error) -> FollowError {
        let doing = doing.into();
        move |source| FollowError::Connector {
            doing,
            source: Box::new(source),
        }
    }
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

/// What one look at a source of one kind took: its dataset, the position
/// after it, when the source committed it (when it says) and what it was
/// (`batch 7`, `version 3`, `dt=2026-12-01`), as a schema clash names it.
#[derive(Debug)]
struct Taken {
    dataset: Dataset,
    position: FollowPosition,
    committed_ms: Option<i64>,
    what: String,
}

/// What kind of source is followed, and where in it the job is.
#[derive(Debug)]
enum Watch {
    /// A streaming sink: the last batch taken.
    Sink { batch: Option<u64> },
    /// A Delta or Iceberg table: the last version taken.
    Table {
        kind: TableKind,
        version: Option<i64>,
    },
    /// A Hive table's partitions, as its metastore lists them.
    Catalog {
        /// Partitions taken (`dt=2026-11-01`, as the dataset names its
        /// partition directories).
        taken: BTreeSet<String>,
    },
    /// An output directory's partitions.
    Partitions(dirs::DirWatch),
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

/// The kind of source at `location`, for a followed job.
async fn watch_of(location: &Location) -> Result<Watch, connectors::Error> {
    if connectors::sink::is_sink(location).await? {
        return Ok(Watch::Sink { batch: None });
    }
    if let Some(kind) = connectors::table::detect(location).await? {
        return Ok(Watch::Table {
            kind,
            version: None,
        });
    }
    Ok(Watch::Partitions(dirs::DirWatch::new(BTreeSet::new())))
}

/// Whether an error only means that the source has nothing yet (a sink or
/// directory not created yet, or empty).
fn nothing_yet(e: &connectors::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound) || matches!(e, connectors::Error::EmptyDir { .. })
}

/// The dataset, when it has a schema to plan from (data files, or a
/// table's own schema).
fn has_schema(dataset: Dataset) -> Option<Dataset> {
    (!dataset.schema().fields().is_empty()).then_some(dataset)
}

impl Watch {
    /// Where a job is in its source at `location` from `position` (where
    /// its start and its growths so far left it); `taken` lists every
    /// partition directory taken so far.
    async fn resumed(
        location: &Location,
        options: &DatasetOptions,
        position: &FollowPosition,
        taken: BTreeSet<String>,
    ) -> Result<Watch, connectors::Error> {
        Ok(match position {
            FollowPosition::Sink { batch } => Watch::Sink { batch: *batch },
            FollowPosition::Table { version } => {
                let kind = match connectors::table::detect(location).await? {
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
            FollowPosition::Partitions { .. } => Watch::Partitions(dirs::DirWatch::new(taken)),
            FollowPosition::Sources { .. } => {
                return Err(connectors::Error::Layout {
                    path: location.url(),
                    reason: "each of several sources is followed on its own".to_string(),
                })
            }
        })
    }
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
        let watch = Watch::resumed(&location, &options, position, taken).await?;
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
            Watch::Partitions(dirs) => dirs.last_landed(),
            _ => None,
        }
    }

    /// Looks at the source once: what was committed since the position.
    pub async fn poll(&mut self) -> Result<Option<Found>, FollowError> {
        if !self.several.is_empty() {
            return self.poll_several().await;
        }
        self.ask_catalog().await?;
        let (location, options) = (&self.location, &self.options);
        let on_rewrite = self.config.on_rewrite;
        let taken = match &mut self.watch {
            Watch::Catalog { taken } => catalog::poll(taken, location, options).await?,
            Watch::Sink { batch } => sink::poll(batch, location, options).await?,
            Watch::Table {
                kind: TableKind::Delta,
                version,
            } => delta::poll(version, location, options, on_rewrite).await?,
            Watch::Table {
                kind: TableKind::Iceberg,
                version,
            } => iceberg::poll(version, location, options, on_rewrite).await?,
            Watch::Partitions(dirs) => dirs.poll(location, options, self.config.settle).await?,
        };
        let Some(Taken {
            dataset,
            position,
            committed_ms,
            what,
        }) = taken
        else {
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
    /// types for the columns it has (for CSV, types the job's widen them
    /// to: an `int` column of new files is read as the job's `bigint`),
    /// the same partition columns. Columns the job lacks are not read
    /// (warned once).
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
                Ok(known)
                    if !connectors::format::reads_as(
                        dataset.format,
                        field.data_type(),
                        known.data_type(),
                    ) =>
                {
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
}

/// Waits `poll`, or less when the local directory `local` watches changes.
async fn wait(local: &mut Option<LocalWatch>, poll: Duration) {
    match local {
        Some(watch) => watch.changed(poll).await,
        None => tokio::time::sleep(poll).await,
    }
}
