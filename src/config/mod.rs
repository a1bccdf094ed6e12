//! The configuration of every command, as data.
//!
//! Each command's options are plain structs that clap fills from flags and
//! serde fills from a job file's keys, with one set of defaults and one
//! `validate` per struct:
//!
//! | struct | what it configures | used by |
//! |---|---|---|
//! | [`ReadOptions`] | how a dataset is read | `ls`, `train`, `master`, job files |
//! | [`TrainerOptions`] | the device threads and their trainer | `train`, `worker`, job files |
//! | [`PipelineOptions`] | a worker's pipeline: batches, read-ahead, transforms | `train`, `worker`, job files |
//! | [`TrainOptions`] | the single-machine job and its queue | `train`, job files |
//! | [`SelectOptions`] | the rows trained: splits, samples, limits | `train`, `master`, job files |
//! | [`FollowOptions`] | following a source as it grows (`--follow`) | `train`, `master`, job files |
//! | [`MasterOptions`] | the master of a distributed job | `master` |
//! | [`WorkerOptions`] | a worker's link to its master | `worker` |
//! | [`KerberosOptions`] | a keytab login for HDFS | every command that reads HDFS, job files |
//! | [`LogOptions`] | log lines without a terminal: progress, timestamps, JSON | every command |
//! | [`StoreOptions`] | object store timeouts | every command that reads a store, job files |
//! | [`JobFile`] | a scheduled pipeline (`sluice run JOB.toml`) | `run` |
//!
//! Validated options become the runtime settings the jobs take ([`TrainConfig`]
//! and the master's and worker's own). A broken rule is an [`OptionError`]
//! naming the option.

pub mod catalog;
pub mod follow;
pub mod heading;
pub mod job;
pub mod kerberos;
pub mod log;
pub mod master;
pub mod mix;
pub mod pipeline;
pub mod read;
pub mod select;
pub mod store;
pub mod train;
pub mod trainer;
pub mod value;
pub mod worker;

pub use catalog::{CatalogOptions, TableRef, WorkerCatalogOptions};
pub use follow::{FollowConfig, FollowOptions, OnRewrite};
pub use job::{JobFile, JobFileError};
pub use kerberos::KerberosOptions;
pub use log::{LogFormat, LogOptions};
pub use master::MasterOptions;
pub use mix::{MixConfig, MixOptions, SourceTable, SourceTableError, TablesError};
#[cfg(test)]
pub use pipeline::ShuffleMode;
pub use pipeline::{CacheConfig, PipelineOptions};
pub use read::ReadOptions;
pub use select::SelectOptions;
pub use store::StoreOptions;
pub use train::{TrainConfig, TrainOptions};
#[cfg(test)]
pub use trainer::ModelKind;
pub use trainer::{ModelChoice, TrainerChoice, TrainerOptions};
pub use worker::WorkerOptions;

/// An option whose value breaks a rule; the message names the option as a flag
/// (`--batch-size`), which is also its key in a job file (`batch-size`).
#[derive(Debug, thiserror::Error)]
#[error("invalid option --{option}{}: {reason}", shown(.value))]
pub struct OptionError {
    /// The option's long name.
    pub option: &'static str,
    /// The value refused, where the message shows it.
    pub value: Option<String>,
    /// The rule broken.
    pub reason: String,
}

fn shown(value: &Option<String>) -> String {
    value.as_ref().map(|v| format!(" {v}")).unwrap_or_default()
}

impl OptionError {
    /// `option` breaks the rule `reason`.
    pub fn new(option: &'static str, reason: impl Into<String>) -> Self {
        OptionError {
            option,
            value: None,
            reason: reason.into(),
        }
    }
}

/// `Ok` when `ok`, else the rule `reason` of `option`, broken.
pub(crate) fn rule(ok: bool, option: &'static str, reason: &str) -> Result<(), OptionError> {
    if ok {
        Ok(())
    } else {
        Err(OptionError::new(option, reason))
    }
}

/// The queue's rules, alike for `sluice train` and `sluice master`.
pub(crate) fn check_queue(
    epochs: u32,
    max_attempts: u32,
    lease_timeout: std::time::Duration,
) -> Result<(), OptionError> {
    rule(epochs >= 1, "epochs", "at least one epoch")?;
    rule(
        max_attempts >= 1,
        "max-attempts",
        "at least one attempt per task",
    )?;
    rule(
        !lease_timeout.is_zero(),
        "lease-timeout",
        "must be more than 0",
    )
}

/// Refuses a `--columns` list that names no column, an empty one
/// (`--columns ''`, `a,,b`), or a column twice: the trainer would be handed
/// nothing, or two fields of one name.
pub fn check_columns(columns: &[String]) -> Result<(), OptionError> {
    if columns.is_empty() || columns.iter().any(|c| c.trim().is_empty()) {
        return Err(OptionError {
            option: "columns",
            value: Some(format!("'{}'", columns.join(","))),
            reason: "an empty column name: name the columns, e.g. --columns id,x1,label, or leave the flag out for all".to_string(),
        });
    }
    // Pieces of a computed column (`substring(s, 1, 3) AS p` is cut at its
    // commas) are checked once joined, when the dataset is known.
    let plain = |c: &&String| !c.contains(['(', ')', ' ', '\'', '"', '`']);
    let mut seen = std::collections::HashSet::new();
    match columns
        .iter()
        .filter(plain)
        .find(|c| !seen.insert(c.as_str()))
    {
        Some(twice) => Err(OptionError::new(
            "columns",
            format!("column `{twice}` is listed twice"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_listed_twice_is_named() {
        let cols = |s: &str| s.split(',').map(str::to_string).collect::<Vec<_>>();
        assert!(check_columns(&cols("id,x1,label")).is_ok());
        let err = check_columns(&cols("id,x1,id")).expect_err("id twice");
        assert_eq!(
            err.to_string(),
            "invalid option --columns: column `id` is listed twice"
        );
    }

    #[test]
    fn an_empty_column_name_is_refused() {
        for columns in [vec![], vec![String::new()], vec!["id".into(), " ".into()]] {
            let err = check_columns(&columns).expect_err("empty");
            assert!(err.to_string().contains("empty column name"), "{err}");
        }
    }
}
