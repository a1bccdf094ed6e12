//! Command-line flags as parsed by clap, before validation.

pub mod completions;
pub mod dist;
pub(crate) mod examples;
pub mod ls;
pub mod man;
pub mod reference;
pub mod run;
pub(crate) mod train;
pub mod version;

use clap::{Parser, Subcommand};

use crate::config::heading;
use crate::exit;

/// A command line that asks for something impossible, found once it was
/// parsed; exits [`exit::USAGE`].
pub(crate) use crate::exit::UsageError;

/// Hands Spark, Hive and MapReduce output to training.
///
/// sluice lists an output directory (local, HDFS or object storage), cuts it
/// into tasks, and feeds Arrow record batches to trainers on several device
/// threads, every row exactly once per epoch.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, propagate_version = true, about, long_about, after_help = exit::TABLE)]
#[command(after_long_help = format!("{}\n\n{}", exit::TABLE, examples::TOP))]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: CliCommand,
    /// Log more (-v: debug, -vv: trace). `RUST_LOG` overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true, help_heading = heading::LOGGING)]
    pub verbose: u8,
    /// How it logs where stderr is not a terminal.
    #[command(flatten)]
    pub log: crate::config::LogOptions,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Show the partitions, files, rows, bytes and tasks of an output directory.
    #[command(after_help = examples::LS_SHORT, after_long_help = examples::LS)]
    Ls(Box<ls::LsArgs>),
    /// Train on an output directory on this machine, with the master embedded.
    #[command(after_help = examples::TRAIN_SHORT, after_long_help = examples::TRAIN)]
    Train(Box<train::TrainArgs>),
    /// Serve one job's tasks to workers over HTTP (with a journal, status page and metrics).
    #[command(after_help = examples::MASTER_SHORT, after_long_help = examples::MASTER)]
    Master(Box<dist::MasterArgs>),
    /// Lease tasks from a master and train on them; join or leave at any time.
    #[command(after_help = examples::WORKER_SHORT, after_long_help = examples::WORKER)]
    Worker(Box<dist::WorkerArgs>),
    /// Show a running job's progress.
    #[command(after_long_help = examples::STATUS)]
    Status(dist::StatusArgs),
    /// Run a job file once: train on the complete partitions no earlier run trained on (for cron).
    #[command(
        about = "Run a job file once: train the partitions no run trained yet (cron)",
        long_about
    )]
    #[command(after_help = examples::RUN_SHORT, after_long_help = examples::RUN)]
    Run(run::RunArgs),
    /// Print the version, commit, build date and profile (--json: for bug reports).
    #[command(after_long_help = examples::VERSION)]
    Version(version::VersionArgs),
    /// Print a completion script for bash, zsh, fish or powershell.
    #[command(after_long_help = examples::COMPLETIONS)]
    Completions(completions::CompletionsArgs),
    /// Print the man page (roff), or write one page per command with --dir.
    #[command(after_long_help = examples::MAN)]
    Man(man::ManArgs),
    /// Print a reference generated from these definitions (docs/reference/).
    #[command(hide = true)]
    Reference(reference::ReferenceArgs),
}

impl CliCommand {
    /// The Kerberos login flags of the command, where it has them (a job file
    /// carries its own).
    pub fn kerberos(&self) -> Option<&crate::config::KerberosOptions> {
        match self {
            CliCommand::Ls(a) => Some(&a.kerberos),
            CliCommand::Train(a) => Some(&a.kerberos),
            CliCommand::Master(a) => Some(&a.kerberos),
            CliCommand::Worker(a) => Some(&a.kerberos),
            CliCommand::Status(_)
            | CliCommand::Run(_)
            | CliCommand::Version(_)
            | CliCommand::Completions(_)
            | CliCommand::Man(_)
            | CliCommand::Reference(_) => None,
        }
    }

    /// The object store timeouts of the command, where it has them (a job
    /// file carries its own).
    pub fn store(&self) -> Option<&crate::config::StoreOptions> {
        match self {
            CliCommand::Ls(a) => Some(&a.store),
            CliCommand::Train(a) => Some(&a.store),
            CliCommand::Master(a) => Some(&a.store),
            CliCommand::Worker(a) => Some(&a.store),
            CliCommand::Status(_)
            | CliCommand::Run(_)
            | CliCommand::Version(_)
            | CliCommand::Completions(_)
            | CliCommand::Man(_)
            | CliCommand::Reference(_) => None,
        }
    }
}

/// The hint for a command line clap refused where a flag whose value must
/// follow `=` (`--wait-success=10m`: its value is optional) was given a
/// value after a space: `--wait-success takes its value after `=`, not '10m'
/// after a space: write --wait-success=10m`. Asked before clap parses: the
/// sources of `train` take any number of values, so the `10m` would pass as
/// one.
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
            .then(|| {
                format!("{flag} takes its value after `=`, not '{value}' after a space: write {flag}={value}")
            })
    })
}

/// The message for `--version N` after a subcommand: the old spelling of
/// `--table-version N`, refused rather than read as a request for sluice's
/// own version (which `--version` alone prints).
pub fn table_version_hint(args: &[std::ffi::OsString]) -> Option<String> {
    let subcommands: Vec<String> = <Cli as clap::CommandFactory>::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let args: Vec<&str> = args.iter().skip(1).filter_map(|a| a.to_str()).collect();
    let start = args
        .iter()
        .position(|a| subcommands.iter().any(|s| s == a))?;
    let rest = &args[start + 1..];
    rest.iter().enumerate().find_map(|(i, arg)| {
        let value = match arg.strip_prefix("--version") {
            Some(v) if v.starts_with('=') => v[1..].to_string(),
            Some("") => rest
                .get(i + 1)
                .filter(|v| v.parse::<u64>().is_ok())
                .map(|v| v.to_string())?,
            _ => return None,
        };
        Some(format!(
            "--version {value}: a table's version is chosen with --table-version {value} \
             (--version alone prints sluice's version)"
        ))
    })
}

/// Writes `bytes` to stdout: a reader that closed the pipe early (`| head`)
/// ends the command quietly; another write error is the command's error.
pub fn to_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("cannot write to stdout"))
        }
        _ => Ok(()),
    }
}

/// A [`UsageError`] saying `message`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError {
        message: message.into(),
    })
}

/// The exit code of a command that failed with `e`: the first error of its
/// cause chain that decides one (see [`exit::ExitCode`]), else [`exit::ERROR`].
pub fn exit_code(e: &anyhow::Error) -> u8 {
    exit::of_chain(e.chain())
}
