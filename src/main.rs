//! The `sluice` command: parses flags and dispatches; errors become one line and
//! an exit code from [`sluice::exit`] (`sluice --help` lists them).

use std::process::ExitCode;

use clap::Parser;
use sluice::cli::dist::Ended;
use sluice::cli::{Cli, Command};
use sluice::exit;
use sluice::job::train::Outcome;
use tracing_subscriber::EnvFilter;

/// Decoded column buffers come and go at a high rate: mimalloc keeps them in
/// its pages instead of handing memory back to the kernel between batches.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A trainer's watcher is this binary run again: it watches and exits.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    sluice::trainer::watch_if_asked(&args);
    if let Ok(program) = std::env::current_exe() {
        sluice::trainer::run_watchers_as(&program);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout and are no error; the rest is a wrong command line.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::DONE
            });
        }
    };
    init_logging(cli.verbose);
    // Before any secret is read and any trainer started.
    if let Err(e) = sluice::harden::keep_secrets_private() {
        tracing::warn!("cannot make sluice non-dumpable (other processes of this user may read its memory): {e}");
    }
    // Object store timeouts hold for every store the command opens.
    if let Some(Err(e)) = cli.command.store().map(|s| s.apply()) {
        eprintln!("sluice: {e}");
        return ExitCode::from(exit::USAGE);
    }
    // A keytab login sets the process's Kerberos environment: before any thread.
    let _login = match cli
        .command
        .kerberos()
        .map(|k| k.login().map_err(anyhow::Error::from))
        .transpose()
    {
        Ok(login) => login.flatten(),
        Err(e) => {
            eprintln!("sluice: {}", one_line(&e));
            return ExitCode::from(sluice::cli::exit_code(&e));
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: cannot start the async runtime: {e}");
            return ExitCode::from(exit::ERROR);
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(Ended::Code(code)) => ExitCode::from(code),
        Ok(Ended::Aborted) => {
            // The abandoned run's threads are not waited for.
            runtime.shutdown_background();
            ExitCode::from(exit::INTERRUPTED)
        }
        Err(e) => {
            eprintln!("sluice: {}", one_line(&e));
            ExitCode::from(sluice::cli::exit_code(&e))
        }
    }
}

async fn dispatch(command: Command) -> anyhow::Result<Ended> {
    let code = match command {
        Command::Ls(args) => {
            sluice::cli::ls::run(args).await?;
            exit::DONE
        }
        Command::Train(args) => {
            let grace = args.train.grace;
            let mut config = args.into_config()?;
            let (stop, abort) = sluice::cli::dist::stop_on_signals(grace)?;
            config.stop = Some(stop);
            let outcome = tokio::select! {
                outcome = sluice::job::train::run(config) => outcome?,
                name = abort.signalled() => {
                    eprintln!("{name} again: exiting now");
                    return Ok(Ended::Aborted);
                }
            };
            let summary = match outcome {
                Outcome::Trained(summary) => summary,
                Outcome::AlreadyFinished(finished) => {
                    eprintln!("{}", finished.line());
                    return Ok(Ended::Code(failed_tasks(&finished.tasks_failed)));
                }
            };
            eprintln!("{}", summary.line());
            failed_tasks(&summary.tasks_failed)
        }
        Command::Master(args) => sluice::cli::dist::master(*args).await?,
        Command::Worker(args) => return sluice::cli::dist::worker(*args).await,
        Command::Status(args) => sluice::cli::dist::status(args).await?,
        Command::Run(args) => sluice::cli::run::run(args).await?,
    };
    Ok(Ended::Code(code))
}

/// Names each failed task on stderr; the exit code they make.
fn failed_tasks(failed: &[sluice::job::summary::FailedTask]) -> u8 {
    for task in failed {
        eprintln!(
            "failed task: {} (epoch {}): {}",
            task.file, task.epoch, task.reason
        );
    }
    if failed.is_empty() {
        exit::DONE
    } else {
        exit::TASKS_FAILED
    }
}

/// An error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts
        .join(": ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        // hdfs-native warns about each namenode it fails over from; the error
        // that matters reaches the user as the one-line message.
        0 => "warn,hdfs_native=error",
        1 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only on a terminal: logs sent to a file or a pipe stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .compact()
        .init();
}
