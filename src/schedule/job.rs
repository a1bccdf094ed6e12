//! A scheduled job: its source, state, lock and the training it runs, as the
//! job file (read by `sluice run`, see [`crate::cli::jobfile`]) describes it.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::TrainConfig;

/// How long a lock lives without being refreshed, unless the job file says otherwise.
pub const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(600);

/// What `sluice run` does on a table when commits since the last run removed
/// or rewrote rows it trained (overwrite, delete, merge, update). Compactions,
/// which rewrite files without changing rows, are always skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRewrite {
    /// Report the rewrite and train only the rows appended since.
    #[default]
    Skip,
    /// Train the table's whole current version again.
    Retrain,
    /// Stop without training or recording anything.
    Fail,
}

impl std::str::FromStr for OnRewrite {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "skip" => Ok(OnRewrite::Skip),
            "retrain" => Ok(OnRewrite::Retrain),
            "fail" => Ok(OnRewrite::Fail),
            other => Err(format!(
                "is `{other}`; it must be \"skip\", \"retrain\" or \"fail\""
            )),
        }
    }
}

/// A parsed and validated job.
#[derive(Debug, Clone)]
pub struct Job {
    /// The job file.
    pub path: PathBuf,
    /// The source URL, possibly with `*` in path segments.
    pub source: String,
    /// The state location (a directory or object store URL).
    pub state: String,
    /// Lifetime of the job's lock between refreshes.
    pub lock_ttl: Duration,
    /// A source that matches nothing is not an error (`allow-empty = true`).
    pub allow_empty: bool,
    /// What a run does when a table's commits rewrote data already trained.
    pub on_rewrite: OnRewrite,
    /// The training options, validated as `sluice train` validates them.
    pub train: TrainConfig,
}
