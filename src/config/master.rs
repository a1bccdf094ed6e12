//! `sluice master`: the options of a distributed job's master.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use super::heading;
use super::value::{form, parse_duration};
use super::{check_columns, check_queue, rule, OptionError};

/// The default of `--listen`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";

/// The master of one job: where it listens, where its state lives, its queue.
#[derive(Debug, Clone, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct MasterOptions {
    /// Address to serve the API, status page and metrics on. With port 0 the system picks a free port; the master's first line on stderr, `sluice master listening on URL (state ...)`, says which.
    #[arg(long, default_value = DEFAULT_LISTEN, help = "Address of the API, status page, metrics", long_help, help_heading = heading::DISTRIBUTED)]
    pub listen: SocketAddr,
    /// Where the job's state (journal, snapshots) lives: a directory, or an s3://, gs://, az:// or hdfs:// prefix; a restarted master continues from it.
    #[arg(long, value_name = "DIR|URL", help = "The job's state: a directory or store URL", long_help, help_heading = heading::STATE)]
    pub state: String,
    /// Passes over the data.
    #[arg(long, default_value_t = 1, help_heading = heading::TRAINING)]
    pub epochs: u32,
    /// Seed of task order.
    #[arg(long, default_value_t = 0, help_heading = heading::TRAINING)]
    pub seed: u64,
    /// Failed reads per task before it is failed (after --read-retry of waiting for errors that may clear). Only the reader's own errors count: a crash, a stop or a lapsed lease hands the task back at its committed rows without using an attempt.
    #[arg(long, default_value_t = 3, help = "Failed reads of a task before it fails", long_help, help_heading = heading::READING, hide_short_help = true)]
    pub max_attempts: u32,
    /// Resuming a job whose tasks failed: put the failed tasks back, each from the rows it had committed, and run them (job files: `retry-failed = true`). Without it a rerun of such a job exits 2 again, naming them.
    #[arg(long, help = "Run the failed tasks of a resumed job again", long_help, help_heading = heading::STATE)]
    pub retry_failed: bool,
    /// A lease not renewed within this time goes back to the queue.
    #[arg(long, default_value = "30s", value_parser = parse_duration, help = "A lease not renewed this long goes back", long_help, help_heading = heading::STATE)]
    #[serde(deserialize_with = "form::duration")]
    pub lease_timeout: Duration,
    /// Keep answering "job over" this long after the last task, then exit.
    #[arg(long, default_value = "10s", value_parser = parse_duration, help = "Answer \"job over\" this long, then exit", long_help, help_heading = heading::DISTRIBUTED, hide_short_help = true)]
    #[serde(deserialize_with = "form::duration")]
    pub linger: Duration,
    /// Only these columns reach the trainers.
    #[arg(long, value_delimiter = ',', help_heading = heading::ROWS)]
    #[serde(deserialize_with = "form::some_list")]
    pub columns: Option<Vec<String>>,
    /// Train even if the output is visibly unfinished.
    #[arg(long, help_heading = heading::SOURCE, hide_short_help = true)]
    pub allow_incomplete: bool,
    /// Serve the rest when files are corrupt (a cut-off Parquet footer): each becomes a failed task, exit code 2. Without it a corrupt file stops the master before it serves.
    #[arg(long, help = "Fail the tasks of corrupt files, serve the rest", long_help, help_heading = heading::READING)]
    pub ignore_corrupt_files: bool,
    /// Output with no data rows (a directory holding only _SUCCESS, a table version with no rows) is a warning (exit 0), not an error (exit 1, before listening).
    #[arg(long, help = "No data rows is a warning (exit 0), not an error", long_help, help_heading = heading::SOURCE, hide_short_help = true)]
    pub allow_empty: bool,
    /// Global batches for the workers: step k of an epoch is rows [kG, (k+1)G) of an order fixed by --seed, the epoch and the data, and each of the --world-size ranks (every device of every worker, taken as workers join) gets the r-th of W equal slices of it. The same global batches for any world size and any workers: a job resumed with another --world-size goes on with them. The job's rows are cut into lanes (a divisor L of G, 24 for G = 1536), and a worker reads only its ranks' lanes.
    #[arg(long, value_name = "G", help = "Rows per step across the world", long_help, help_heading = heading::TRAINING)]
    pub global_batch_size: Option<u64>,
    /// With --global-batch-size: the ranks of the job's world, one per device of its workers; it must divide the lanes (24 for G = 1536: 1, 2, 3, 4, 6, 8, 12 or 24). A worker of D devices takes D ranks as it joins, and waits while none are free.
    #[arg(long, value_name = "W", help = "Ranks of the world (--global-batch-size)", long_help, help_heading = heading::TRAINING)]
    pub world_size: Option<u32>,
    /// With --global-batch-size: rows of one window of the global shuffle, spread over the lanes.
    #[arg(long, value_name = "ROWS", default_value_t = super::pipeline::DEFAULT_SHUFFLE_WINDOW, help = "Rows per window of the global shuffle", long_help, help_heading = heading::TRAINING, hide_short_help = true)]
    pub shuffle_window: u64,
    /// Serve HTTPS with this PEM certificate (chain); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key", help = "Serve HTTPS with this PEM certificate (chain)", long_help, help_heading = heading::DISTRIBUTED)]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert", help_heading = heading::DISTRIBUTED)]
    pub tls_key: Option<PathBuf>,
}

impl Default for MasterOptions {
    fn default() -> Self {
        MasterOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            state: String::new(),
            epochs: 1,
            seed: 0,
            max_attempts: 3,
            retry_failed: false,
            lease_timeout: Duration::from_secs(30),
            linger: Duration::from_secs(10),
            columns: None,
            allow_incomplete: false,
            ignore_corrupt_files: false,
            allow_empty: false,
            tls_cert: None,
            tls_key: None,
            global_batch_size: None,
            world_size: None,
            shuffle_window: super::pipeline::DEFAULT_SHUFFLE_WINDOW,
        }
    }
}

impl MasterOptions {
    /// Checks every rule, naming the first option that breaks one.
    pub fn validate(&self) -> Result<(), OptionError> {
        rule(
            !self.state.trim().is_empty(),
            "state",
            "name the directory or store prefix that keeps the job's state",
        )?;
        check_queue(self.epochs, self.max_attempts, self.lease_timeout)?;
        rule(
            self.tls_cert.is_some() == self.tls_key.is_some(),
            "tls-cert",
            "--tls-cert and --tls-key go together",
        )?;
        if let Some(columns) = &self.columns {
            check_columns(columns)?;
        }
        self.check_world()
    }

    /// The rules of `--global-batch-size` and `--world-size`.
    fn check_world(&self) -> Result<(), OptionError> {
        super::pipeline::check_rows(self.global_batch_size, self.shuffle_window)?;
        let (Some(size), Some(world)) = (self.global_batch_size, self.world_size) else {
            rule(
                self.global_batch_size.is_none() && self.world_size.is_none(),
                "world-size",
                "--global-batch-size and --world-size go together: the ranks of the world share each step",
            )?;
            return Ok(());
        };
        rule(world >= 1, "world-size", "a world holds at least one rank")?;
        rule(
            size % u64::from(world) == 0,
            "global-batch-size",
            &format!(
                "{size} rows per step cannot be cut into {world} equal slices, one per rank; make it a multiple of {world}"
            ),
        )
    }

    /// The queue settings, once valid; `follow` is whether the job follows its source.
    pub fn queue(&self, follow: bool) -> crate::queue::QueueConfig {
        let mut queue = crate::queue::QueueConfig::new(
            self.epochs,
            self.max_attempts,
            self.lease_timeout,
            self.seed,
            follow,
        );
        queue.world = self.world_size;
        queue
    }
}
