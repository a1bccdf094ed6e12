//! Command-line flags as parsed by clap, before validation.

pub mod dist;
pub mod jobfile;
pub mod kerberos;
pub mod ls;
pub mod run;
pub mod train;

use clap::{Args, Parser, Subcommand};
use connectors::table::TableVersion;
use connectors::{DatasetOptions, Format, FormatOptions};

use crate::exit;

/// Hands Spark, Hive and MapReduce output to training.
///
/// sluice lists an output directory (local, HDFS or object storage), cuts it
/// into tasks, and feeds Arrow record batches to trainers on several device
/// threads, every row exactly once per epoch.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about, long_about, after_help = exit::TABLE)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Log more (-v: debug, -vv: trace). `RUST_LOG` overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the partitions, files, rows, bytes and tasks of an output directory.
    Ls(ls::LsArgs),
    /// Train on an output directory on this machine, with the master embedded.
    Train(Box<train::TrainArgs>),
    /// Serve one job's tasks to workers over HTTP (with a journal, status page and metrics).
    Master(Box<dist::MasterArgs>),
    /// Lease tasks from a master and train on them; join or leave at any time.
    Worker(Box<dist::WorkerArgs>),
    /// Show a running job's progress.
    Status(dist::StatusArgs),
    /// Run a job file once: train on the complete partitions no earlier run trained on (for cron).
    Run(run::RunArgs),
}

impl Command {
    /// The Kerberos login flags of the command, where it has them (a job file
    /// carries its own).
    pub fn kerberos(&self) -> Option<&kerberos::KerberosArgs> {
        match self {
            Command::Ls(a) => Some(&a.kerberos),
            Command::Train(a) => Some(&a.kerberos),
            Command::Master(a) => Some(&a.kerberos),
            Command::Worker(a) => Some(&a.kerberos),
            Command::Status(_) | Command::Run(_) => None,
        }
    }
}

/// A command line that asks for something impossible, found once it was parsed
/// (a bad value, a missing companion flag, a column named twice): the command
/// exits with [`exit::USAGE`] instead of [`exit::ERROR`].
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct UsageError {
    /// What is wrong, on one line.
    pub message: String,
}

/// A [`UsageError`] saying `message`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError {
        message: message.into(),
    })
}

/// The exit code of a command that failed with `e`: [`exit::USAGE`] for a
/// wrong command line, [`exit::HELD`] when another run or master holds the
/// job's state or lock, else [`exit::ERROR`].
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if e.chain().any(|cause| cause.is::<UsageError>()) {
        return exit::USAGE;
    }
    if e.chain().any(held_by_another) {
        return exit::HELD;
    }
    // The lock of a local state directory, held by another process.
    for cause in e.chain() {
        if let Some(e) = cause.downcast_ref::<crate::job::train::TrainError>() {
            return e.exit_code();
        }
        if let Some(e) = cause.downcast_ref::<crate::master::serve::MasterError>() {
            return e.exit_code();
        }
    }
    exit::ERROR
}

/// Whether an error says another run or master holds the job's state or lock.
fn held_by_another(cause: &(dyn std::error::Error + 'static)) -> bool {
    use crate::job::train::TrainError;
    use crate::master::journal::JournalError;
    use crate::master::serve::MasterError;
    use crate::master::state::StateError;
    use crate::schedule::lock::LockError;
    use crate::schedule::RunError;
    let lock = |e: &LockError| matches!(e, LockError::Held { .. } | LockError::Lost { .. });
    let journal = |e: &JournalError| matches!(e, JournalError::Taken { .. });
    let state = |e: &StateError| matches!(e, StateError::Journal(j) if journal(j));
    if let Some(e) = cause.downcast_ref::<RunError>() {
        return matches!(e, RunError::Lock(l) if lock(l));
    }
    if let Some(e) = cause.downcast_ref::<MasterError>() {
        return matches!(e, MasterError::State(s) if state(s));
    }
    if let Some(e) = cause.downcast_ref::<TrainError>() {
        return matches!(e, TrainError::State(s) if state(s));
    }
    cause.downcast_ref::<LockError>().is_some_and(lock)
        || cause.downcast_ref::<StateError>().is_some_and(state)
        || cause.downcast_ref::<JournalError>().is_some_and(journal)
}

/// Flags that say how to read a dataset; shared by every command that reads one.
#[derive(Debug, Clone, Args)]
pub struct DatasetArgs {
    /// Read every file as this format instead of guessing from file names.
    #[arg(long, value_parser = parse_format)]
    pub format: Option<Format>,
    /// Keep partition values as strings instead of inferring types as Spark does (`007` stays `007`).
    #[arg(long)]
    pub partition_strings: bool,
    /// Target split size: a task covers about this many bytes (e.g. 128MiB, 4MB, 1000000).
    #[arg(long, default_value = "128MiB", value_parser = parse_size)]
    pub split_size: u64,
    /// CSV files have no header line.
    #[arg(long)]
    pub csv_no_header: bool,
    /// CSV field delimiter (one character).
    #[arg(long, default_value = ",")]
    pub csv_delimiter: char,
    /// Split text lines at the first tab into `key` and `value` (MapReduce TextOutputFormat).
    #[arg(long)]
    pub text_key_value: bool,
    /// Read this version of a Delta table (time travel) instead of the latest.
    #[arg(long = "version", value_name = "N", conflicts_with_all = ["snapshot_id", "timestamp"])]
    pub table_version: Option<u64>,
    /// Read this snapshot of an Iceberg table instead of the current one.
    #[arg(long, value_name = "ID", conflicts_with = "timestamp")]
    pub snapshot_id: Option<i64>,
    /// Read the version of a Delta or Iceberg table that was current at this time:
    /// RFC 3339 (`2026-11-29T10:00:00Z`), `YYYY-MM-DD[ HH:MM:SS]` in UTC, or
    /// milliseconds since the epoch.
    #[arg(long, value_name = "T", value_parser = parse_timestamp)]
    pub timestamp: Option<i64>,
}

impl DatasetArgs {
    /// The connectors' options these flags describe.
    pub fn options(&self) -> anyhow::Result<DatasetOptions> {
        if !self.csv_delimiter.is_ascii() {
            return Err(usage("--csv-delimiter must be one ASCII character"));
        }
        if self.split_size == 0 {
            return Err(usage("--split-size must be more than 0"));
        }
        Ok(DatasetOptions {
            format: self.format,
            infer_partition_types: !self.partition_strings,
            split_size: self.split_size,
            format_options: FormatOptions {
                csv_header: !self.csv_no_header,
                csv_delimiter: self.csv_delimiter as u8,
                text_key_value: self.text_key_value,
                ..FormatOptions::default()
            },
            ignore_corrupt_files: false,
            table_version: match (self.table_version, self.snapshot_id, self.timestamp) {
                (Some(v), _, _) => TableVersion::Version(v),
                (_, Some(id), _) => TableVersion::SnapshotId(id),
                (_, _, Some(ms)) => TableVersion::Timestamp(ms),
                _ => TableVersion::Latest,
            },
        })
    }
}

/// Parses a point in time into milliseconds since the epoch: RFC 3339, a UTC
/// date with an optional time, or a plain number of milliseconds.
pub fn parse_timestamp(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    for format in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, format) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        if let Some(t) = d.and_hms_opt(0, 0, 0) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    Err(format!(
        "`{s}` is not a time: use RFC 3339 (2026-11-29T10:00:00Z), 2026-11-29 10:00:00 (UTC) or milliseconds since the epoch"
    ))
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse::<Format>().map_err(|e| e.to_string())
}

/// Parses a byte size: a number with an optional unit, decimal (`4MB`, `1k`) or
/// binary (`64KiB`, `128MiB`), in any case and with a fraction where wanted
/// (`1.5GiB`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let size = s
        .parse::<bytesize::ByteSize>()
        .map_err(|e| format!("`{s}` is not a size like 128MiB ({e})"))?;
    // The crate saturates on overflow: the largest value stands for "too large".
    match size.as_u64() {
        u64::MAX => Err(format!("`{s}` is too large")),
        bytes => Ok(bytes),
    }
}

/// The longest duration a flag takes (100 years of 365.25 days): deadlines computed
/// from a duration (now plus it, in milliseconds) stay far from overflowing.
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(3_155_760_000);

/// Parses a duration: plain seconds (`90`), or a number with a unit (`500ms`, `30s`,
/// `10m`, `2h`, `1d`), several of them (`1h 30m`) or a fraction (`1.5h`). At most
/// [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let parsed = match s.parse::<u64>() {
        Ok(secs) => Ok(std::time::Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(s),
    };
    let duration =
        parsed.map_err(|e| format!("`{s}` is not a duration like 30s, 10m or 2h ({e})"))?;
    if duration > MAX_DURATION {
        return Err(format!("`{s}` is too long: at most 100 years"));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn sizes_in_every_accepted_form() {
        assert_eq!(parse_size("128MiB"), Ok(128 * 1024 * 1024));
        assert_eq!(parse_size("64KiB"), Ok(64 * 1024));
        assert_eq!(parse_size("16kib"), Ok(16 * 1024));
        assert_eq!(parse_size("2GiB"), Ok(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_size("4MB"), Ok(4_000_000));
        assert_eq!(parse_size("3k"), Ok(3000));
        assert_eq!(parse_size("1gb"), Ok(1_000_000_000));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size(" 8 MiB "), Ok(8 * 1024 * 1024));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn sizes_refused_with_the_value_named() {
        for bad in ["x", "", "-5", "12 parsecs", "1e3"] {
            let err = parse_size(bad).expect_err(bad);
            assert!(err.contains(&format!("`{}`", bad.trim())), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
        let err = parse_size("20000000000EiB").expect_err("overflow");
        assert!(err.contains("too large"), "{err}");
    }

    #[test]
    fn durations_in_every_accepted_form() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration(" 2h "), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
    }

    #[test]
    fn durations_refused_with_the_value_named() {
        for bad in ["2x", "", "-5", "ten", "5 parsecs", "1.5"] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(err.contains(&format!("`{bad}`")), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn durations_that_would_overflow_are_refused() {
        // 2^64 / 3600 hours: the old parser multiplied this into a wrapped value.
        for huge in [
            "5124095576030432h",
            "18446744073709551615",
            "18446744073709551615m",
            "99999999999999999999999s",
            "101y",
        ] {
            let err = parse_duration(huge).expect_err(huge);
            assert!(err.contains(&format!("`{huge}`")), "{err}");
        }
        assert_eq!(parse_duration("100y"), Ok(MAX_DURATION));
    }
}
