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
    // A job file's broken rule is the file's error, not the command line's.
    let job_file = e.chain().any(|c| c.is::<crate::config::JobFileError>());
    if !job_file
        && e.chain()
            .any(|cause| cause.is::<UsageError>() || cause.is::<crate::config::OptionError>())
    {
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
