//! The one planner of a job, whichever command runs it (`sluice train`,
//! `sluice master`, `sluice run`): its sources opened (one, several mixed
//! by weight, or followed) and checked finished and not empty, the read plan
//! and the job record of their splits (filters, `--split`/`--sample`/
//! `--limit`, mixing), the follower of a resumed followed job, and the
//! job's identity. A command builds a [`PlanRequest`] of its options and
//! asks it; what it does with the job (train it here, serve it) is its own.

mod follow;
mod identity;
mod lanes;
mod open;

pub use follow::{Followed, Following};
pub use identity::TrainerIdentity;
pub use lanes::GlobalBatches;
pub use open::Sources;

use connectors::{Dataset, DatasetOptions, ReadPlan};

use crate::config::{FollowConfig, MixConfig, SelectOptions, TableRef, TrainConfig};
use crate::protocol::follow::FollowPosition;
use crate::protocol::spec::CatalogSource;
use crate::queue::QueueConfig;
use crate::state::JobRecord;

/// Who runs the planned job: decides the little that differs between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// Trained in this process (`sluice train`, `sluice run`): files left
    /// out and output whose completeness cannot be told are warned of, and
    /// unfinished output can be waited for (`--wait-success`).
    Train,
    /// Served to workers (`sluice master`): they are told the catalog table
    /// a source was resolved from, to ask it for credentials themselves.
    Master,
}

impl JobKind {
    /// What an error about unfinished output advises.
    fn unfinished_hint(self) -> &'static str {
        match self {
            JobKind::Train => "wait for the job with --wait-success, or pass --allow-incomplete",
            JobKind::Master => "pass --allow-incomplete to train anyway",
        }
    }
}

/// What planning a job takes: the options of `sluice train` or `sluice
/// master` that decide which rows the job holds and how they are read.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// Who runs the job.
    pub kind: JobKind,
    /// The dataset URL (with several sources, the first of them).
    pub url: String,
    /// How to read it.
    pub dataset: DatasetOptions,
    /// Columns read (all when `None`).
    pub columns: Option<Vec<String>>,
    /// The rows trained (`--split`, `--sample`, `--limit`).
    pub select: SelectOptions,
    /// Several sources mixed by weight.
    pub mix: Option<MixConfig>,
    /// Follow the source as it grows (`--follow`).
    pub follow: Option<FollowConfig>,
    /// The table the URL was resolved from, when the source was a table name.
    pub table: Option<TableRef>,
    /// Rows per decoded batch in the read plan.
    pub batch_rows: usize,
    /// Rows per task of a mixed job's windows.
    pub task_rows: u64,
    /// Queue settings (`follow` set from whether the job follows its source).
    pub queue: QueueConfig,
    /// Train on visibly unfinished output.
    pub allow_incomplete: bool,
    /// Output with no data rows is a warning, not an error.
    pub allow_empty: bool,
    /// The trainer's options that are part of the identity (`sluice train`).
    pub trainer: Option<TrainerIdentity>,
    /// `--global-batch-size` with `--shuffle global`: rows per step and per
    /// window, which cut the job's rows into lanes ([`lanes`]).
    pub global: Option<lanes::GlobalBatches>,
}

impl PlanRequest {
    /// The request of a job `sluice train` (or `sluice run`) trains here.
    pub fn of_train(config: &TrainConfig) -> PlanRequest {
        PlanRequest {
            kind: JobKind::Train,
            url: config.url.clone(),
            dataset: config.dataset.clone(),
            columns: config.columns.clone(),
            select: config.select.clone(),
            mix: config.mix.clone(),
            follow: config.follow,
            table: config.table.clone(),
            batch_rows: config.batch_size,
            task_rows: crate::mix::plan::task_rows(config.batch_size),
            queue: QueueConfig::new(
                config.epochs,
                config.max_attempts,
                config.lease_timeout,
                config.seed,
                config.follow.is_some(),
            ),
            allow_incomplete: config.allow_incomplete,
            allow_empty: config.allow_empty,
            trainer: Some(TrainerIdentity::of(config)),
            global: config
                .global_batch_size
                .zip(config.shuffle_window)
                .map(|(size, window)| lanes::GlobalBatches {
                    size,
                    window,
                    world: None,
                }),
        }
    }

    /// How `dataset` is read: the columns asked for, in batches of
    /// [`PlanRequest::batch_rows`].
    pub fn read_plan(&self, dataset: &Dataset) -> Result<ReadPlan, PlanError> {
        // Each error of the plan names the path or the flag at fault.
        ReadPlan::new(dataset, self.columns.as_deref(), self.batch_rows)
            .map_err(PlanError::read("plan the read"))
    }

    /// The job of `dataset` read by `plan`: its splits (the rows chosen),
    /// where a followed job stands in its source (`position`), a mixed
    /// job's windows and interleaving (`mixed`: its sources' plans).
    pub fn job(
        &self,
        dataset: &Dataset,
        plan: ReadPlan,
        position: Option<FollowPosition>,
        mixed: Option<&crate::mix::Mixed>,
    ) -> Result<JobRecord, PlanError> {
        let mut queue = self.queue.clone();
        queue.follow = position.is_some();
        let mut job = JobRecord::build::<PlanError>(dataset, plan, &self.select, position, queue)?;
        match (mixed, &self.mix) {
            (Some(mixed), Some(mix)) => crate::mix::apply(&mut job, mixed, mix, self.task_rows)?,
            _ if self.kind == JobKind::Master => {
                job.spec.catalog_table = self.table.as_ref().map(|table| CatalogSource {
                    catalog: without_userinfo(table.catalog.catalog.as_deref().unwrap_or_default()),
                    name: table.name.clone(),
                    vended: table.vended,
                });
            }
            _ => {}
        }
        if let Some(global) = &self.global {
            lanes::apply(&mut job, global)?;
        }
        Ok(job)
    }

    /// Refuses visibly unfinished output (unless `--allow-incomplete`); a
    /// job trained here warns of what it reads anyway, and of files not read.
    pub fn check_finished(&self, dataset: &Dataset) -> Result<(), PlanError> {
        let url = || dataset.location.url();
        if dataset.visibly_unfinished() && !self.allow_incomplete {
            return Err(PlanError::Unfinished {
                url: url(),
                markers: dataset.in_flight.join(", "),
                hint: self.kind.unfinished_hint(),
            });
        }
        if self.kind == JobKind::Master {
            return Ok(());
        }
        if dataset.visibly_unfinished() {
            tracing::warn!(url = %url(), "training on unfinished output (--allow-incomplete)");
        } else if !dataset.complete {
            tracing::warn!(url = %url(), "no _SUCCESS marker: cannot tell whether the output is complete");
        }
        warn_not_read(std::slice::from_ref(dataset));
        Ok(())
    }

    /// Refuses output known from its listing to hold no row, unless
    /// `--allow-empty` (a followed job, at `position`, waits for rows).
    pub fn refuse_empty(
        &self,
        dataset: &Dataset,
        position: Option<&FollowPosition>,
    ) -> Result<(), PlanError> {
        if position.is_none() && dataset.known_empty() && !self.allow_empty {
            return Err(self.empty(dataset.location.url()));
        }
        Ok(())
    }

    /// The error of a job on `url` that has no row to train: the filters it
    /// was given kept none, or (without filters) the output holds none.
    pub fn empty(&self, url: String) -> PlanError {
        match crate::config::read::filters_named(&self.dataset) {
            Some(filters) => PlanError::Filtered { filters, url },
            None => PlanError::Empty { url },
        }
    }
}

/// Warns of the files of `datasets` that are not read, and why.
fn warn_not_read(datasets: &[Dataset]) {
    for ignored in datasets.iter().flat_map(|d| &d.ignored) {
        tracing::warn!(path = %ignored.path, reason = %ignored.reason, "file not read");
    }
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

/// Why a job could not be planned, or its source followed.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The dataset could not be read.
    #[error("cannot {doing}")]
    Connector {
        /// What was being done (`open the source`, `plan the read`).
        doing: String,
        /// Why, naming the path or column (boxed: it is large).
        #[source]
        source: Box<connectors::Error>,
    },
    /// An option of the rows to train (`--split`, `--sample`) breaks a rule.
    #[error("cannot choose the rows to train")]
    Options {
        /// The option and the rule.
        #[source]
        source: crate::config::OptionError,
    },
    /// Several sources cannot be mixed as asked.
    #[error("cannot mix the sources")]
    Mix {
        /// Which sources disagree, and how.
        #[source]
        source: crate::mix::MixError,
    },
    /// The rows to train cannot be chosen by the key asked for (`--split-key`).
    #[error("cannot choose the rows to train")]
    Select {
        /// The key, and why.
        #[source]
        source: crate::protocol::select::SelectError,
    },
    /// The output is visibly unfinished.
    #[error("{url} is not finished: no _SUCCESS and in-flight output present ({markers}); {hint}")]
    Unfinished {
        /// The dataset.
        url: String,
        /// In-flight names.
        markers: String,
        /// What to do about it, in the command's terms.
        hint: &'static str,
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
    /// `--world-size` cannot share the job's lanes.
    #[error("invalid option --world-size: {reason}")]
    World {
        /// Why, naming the numbers.
        reason: String,
    },
    /// Following the source failed (`--follow`); what was taken before was
    /// trained or served.
    #[error("cannot {doing}")]
    Follow {
        /// What was being done (`go on following the source`).
        doing: &'static str,
        /// Why following stopped.
        #[source]
        source: crate::follow::FollowError,
    },
}

impl PlanError {
    /// The error of the source, which failed while `doing`, for `map_err`.
    pub fn read(doing: impl Into<String>) -> impl FnOnce(connectors::Error) -> PlanError {
        let doing = doing.into();
        move |source| PlanError::Connector {
            doing,
            source: Box::new(source),
        }
    }

    /// The error of following the source, which stopped while `doing`,
    /// for `map_err`.
    pub fn follow(doing: &'static str) -> impl FnOnce(crate::follow::FollowError) -> PlanError {
        move |source| PlanError::Follow { doing, source }
    }
}

/// Every option error the planner meets is one of the rows to train
/// (`--split`, `--sample`, `--limit`; [`JobRecord::build`]).
impl From<crate::config::OptionError> for PlanError {
    fn from(source: crate::config::OptionError) -> Self {
        PlanError::Options { source }
    }
}

/// A key that cannot place rows fails the choice of the rows to train
/// ([`JobRecord::build`]).
impl From<crate::protocol::select::SelectError> for PlanError {
    fn from(source: crate::protocol::select::SelectError) -> Self {
        PlanError::Select { source }
    }
}

/// Every error of mixing sources (their columns, `--epoch-rows`, a source
/// that cannot be opened; [`crate::mix::open`]) fails the mix.
impl From<crate::mix::MixError> for PlanError {
    fn from(source: crate::mix::MixError) -> Self {
        PlanError::Mix { source }
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
