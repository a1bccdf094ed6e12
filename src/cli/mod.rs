//! Command-line flags as parsed by clap, before validation.

pub mod dist;
pub mod ls;
pub mod run;
pub mod train;

use clap::{Parser, Subcommand};

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
    /// How it logs where stderr is not a terminal.
    #[command(flatten)]
    pub log: crate::config::LogOptions,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the partitions, files, rows, bytes and tasks of an output directory.
    Ls(Box<ls::LsArgs>),
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
    pub fn kerberos(&self) -> Option<&crate::config::KerberosOptions> {
        match self {
            Command::Ls(a) => Some(&a.kerberos),
            Command::Train(a) => Some(&a.kerberos),
            Command::Master(a) => Some(&a.kerberos),
            Command::Worker(a) => Some(&a.kerberos),
            Command::Status(_) | Command::Run(_) => None,
        }
    }

    /// The object store timeouts of the command, where it has them (a job
    /// file carries its own).
    pub fn store(&self) -> Option<&crate::config::StoreOptions> {
        match self {
            Command::Ls(a) => Some(&a.store),
            Command::Train(a) => Some(&a.store),
            Command::Master(a) => Some(&a.store),
            Command::Worker(a) => Some(&a.store),
            Command::Status(_) | Command::Run(_) => None,
        }
    }
}

/// The hint for a command line clap refused where a flag whose value must
/// follow `=` (`--wait-success=10m`: its value is optional) was given a
/// value after a space: `--wait-success takes its value after `=`: write
/// --wait-success=10m`.
pub fn equals_hint(args: &[std::ffi::OsString]) -> Option<String> {
    let command = <Cli as clap::CommandFactory>::command();
    let flags: Vec<String> = command
        .get_subcommands()
        .flat_map(|c| c.get_arguments())
        .chain(command.get_arguments())
        .filter(|a| a.is_require_equals_set())
        .filter_map(|a| a.get_long().map(|long| format!("--{long}")))
        .collect();
    args.windows(2).find_map(|pair| {
        let (flag, value) = (pair[0].to_str()?, pair[1].to_str()?);
        let fits = crate::config::value::parse_duration(value).is_ok();
        (fits && flags.iter().any(|f| f == flag))
            .then(|| format!("{flag} takes its value after `=`: write {flag}={value}"))
    })
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
/// wrong command line or job file, [`exit::HELD`] when another run or master holds the
/// job's state or lock, else [`exit::ERROR`].
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if e.chain().any(is_usage) {
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
        if let Some(e) = cause.downcast_ref::<crate::schedule::RunError>() {
            return e.exit_code();
        }
    }
    exit::ERROR
}

/// Whether an error is the command line's or the job file's: a flag or key
/// whose value breaks a rule, an unknown key, a URL that cannot be read as
/// one (no or an unknown scheme), a column or feature the dataset does not
/// have. Those exit [`exit::USAGE`] at once; running again as is cannot help.
fn is_usage(cause: &(dyn std::error::Error + 'static)) -> bool {
    use crate::config::{JobFileError, OptionError};
    use crate::job::train::TrainError;
    use crate::job::worker::WorkerError;
    use crate::master::serve::MasterError;
    use crate::schedule::RunError;
    use crate::trainer::TrainerError;
    let connector = |e: &connectors::Error| {
        matches!(
            e,
            connectors::Error::InvalidUrl { .. }
                | connectors::Error::UnknownColumn { .. }
                | connectors::Error::InvalidOption { .. }
                | connectors::Error::Filter(_)
        )
    };
    let trainer = |e: &TrainerError| {
        matches!(
            e,
            TrainerError::UnknownColumn { .. } | TrainerError::NotNumeric { .. }
        )
    };
    // Errors wrapped transparently hide the wrapped error from `chain()`.
    let train = |e: &TrainError| match e {
        TrainError::Connector(c) => connector(c),
        TrainError::Trainer(t) => trainer(t),
        TrainError::Options(_) | TrainError::Select(_) => true,
        _ => false,
    };
    if cause.is::<UsageError>() || cause.is::<OptionError>() {
        return true;
    }
    if let Some(e) = cause.downcast_ref::<crate::catalog::CatalogError>() {
        return e.is_usage();
    }
    if let Some(e) = cause.downcast_ref::<JobFileError>() {
        return !matches!(e, JobFileError::Read { .. });
    }
    if let Some(e) = cause.downcast_ref::<connectors::Error>() {
        return connector(e);
    }
    if let Some(e) = cause.downcast_ref::<TrainerError>() {
        return trainer(e);
    }
    if let Some(e) = cause.downcast_ref::<TrainError>() {
        return train(e);
    }
    if let Some(e) = cause.downcast_ref::<RunError>() {
        return match e {
            RunError::Source { .. } => true,
            RunError::Connector(c) => connector(c),
            RunError::Train(t) => train(t),
            _ => false,
        };
    }
    if let Some(e) = cause.downcast_ref::<MasterError>() {
        return match e {
            MasterError::Connector(c) => connector(c),
            MasterError::Options(_) | MasterError::Select(_) => true,
            _ => false,
        };
    }
    if let Some(e) = cause.downcast_ref::<WorkerError>() {
        return match e {
            WorkerError::Connector(c) => connector(c),
            WorkerError::Train(t) => train(t),
            _ => false,
        };
    }
    false
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
