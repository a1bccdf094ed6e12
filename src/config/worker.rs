//! `sluice worker`: a worker's link to its master and how it leaves.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use super::value::{form, parse_duration};
use super::{rule, OptionError};

/// How a worker reaches its master, names itself and stops; with
/// [`super::TrainerOptions`] and [`super::PipelineOptions`] they make a
/// `sluice worker` command.
#[derive(Debug, Clone, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct WorkerOptions {
    /// The master's URL, e.g. http://sluice-master:7070.
    #[arg(long)]
    pub master: String,
    /// Keep retrying an unreachable master this long before giving up.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    #[serde(deserialize_with = "form::duration")]
    pub patience: Duration,
    /// Trust this PEM CA certificate for an https:// master (besides the system's roots).
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// On SIGTERM or SIGINT (pre-emption), how long the trainers may take to
    /// finish the batches they hold before the worker hands its tasks back and
    /// exits (keep it under the pod's terminationGracePeriodSeconds, 30 s by
    /// default). A second signal exits at once.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    #[serde(deserialize_with = "form::duration")]
    pub grace: Duration,
    /// The worker's name on the status page, in `sluice status` and in /metrics (default: host name and pid, e.g. node-7-4121).
    #[arg(long)]
    pub name: Option<String>,
    /// Exit with this code instead of 0 when a signal stopped the worker before the job was over (e.g. 143 under a Kubernetes Job or as a Spark task, so that a pre-empted worker counts as failed and is started again).
    #[arg(long, value_name = "CODE", default_value_t = 0)]
    pub stopped_exit_code: u8,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            master: String::new(),
            patience: Duration::from_secs(300),
            ca_file: None,
            grace: Duration::from_secs(20),
            name: None,
            stopped_exit_code: 0,
        }
    }
}

impl WorkerOptions {
    /// Checks every rule, naming the first option that breaks one.
    pub fn validate(&self) -> Result<(), OptionError> {
        rule(
            !self.master.trim().is_empty(),
            "master",
            "name the master's URL, e.g. http://sluice-master:7070",
        )?;
        if let Some(name) = &self.name {
            rule(
                !name.trim().is_empty() && !name.chars().any(char::is_control),
                "name",
                "must be printable and not empty",
            )?;
        }
        Ok(())
    }
}
