//! The `sluice` command: parses flags and dispatches; errors become one line and
//! an exit code from [`sluice::exit`] (`sluice --help` lists them).

// Library code says why each `unsafe` block is sound and never unwraps (tests may).
#![warn(clippy::undocumented_unsafe_blocks, clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::process::ExitCode;

use clap::Parser;
use sluice::cli::dist::Ended;
use sluice::cli::{Cli, CliCommand};
use sluice::exit;
use sluice::job::train::Outcome;
use sluice::logging;

/// Decoded column buffers come and go at a high rate: mimalloc keeps them in
/// its pages instead of handing memory back to the kernel between batches.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = before_parsing(&args) {
        return code;
    }
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    // Commands that only print what this build is: no runtime, no secrets.
    if let Some(done) = print_only(&cli.command) {
        return match done {
            Ok(()) => ExitCode::from(exit::DONE),
            Err(e) => failed(&e),
        };
    }
    if let Err(code) = harden(&cli.command) {
        return code;
    }
    // A keytab login sets the process's Kerberos environment: before any thread.
    let _login = match cli
        .command
        .kerberos()
        .map(|k| k.login().map_err(anyhow::Error::from))
        .transpose()
    {
        Ok(login) => login.flatten(),
        Err(e) => return failed(&e),
    };
    // A job file's settings, its login included, likewise.
    let (job, _job_login) = match &cli.command {
        CliCommand::Run(args) => match sluice::cli::run::prepare(args) {
            Ok((job, login)) => (Some(job), login),
            Err(e) => return failed(&e),
        },
        _ => (None, None),
    };
    run(cli.command, job)
}

/// What this binary does before its flags are parsed: a trainer's watcher or
/// hidden program, and the hints for flags clap would misread.
fn before_parsing(args: &[std::ffi::OsString]) -> Option<ExitCode> {
    quiet_panics_after_the_end();
    // A trainer's watcher is this binary run again: it watches and exits.
    sluice::trainer::watch_if_asked(args);
    // A trainer's program run where the job's token file reads as empty.
    sluice::harden::hide_if_asked(args);
    if let Ok(program) = std::env::current_exe() {
        sluice::trainer::run_watchers_as(&program);
    }
    if let Some(hint) = sluice::cli::table_version_hint(args) {
        eprintln!("sluice: {hint}");
        return Some(ExitCode::from(exit::USAGE));
    }
    if let Some(hint) = sluice::cli::equals_hint(args) {
        eprintln!("sluice: {hint}");
        return Some(ExitCode::from(exit::USAGE));
    }
    None
}

/// The command line parsed, its logging options checked and logging started.
fn parse() -> Result<Cli, ExitCode> {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return Err(clap_error(&e)),
    };
    if let Err(e) = cli.log.validate() {
        eprintln!("sluice: {e}");
        return Err(ExitCode::from(exit::USAGE));
    }
    sluice::logging::init(cli.verbose, &cli.log);
    Ok(cli)
}

/// Readies the process for `command`: tied to its trainer's life with
/// `--attach`, its memory kept private, its object store timeouts set.
fn harden(command: &CliCommand) -> Result<(), ExitCode> {
    // The child of its trainer (`--attach`) ends with it, however it ends.
    let attached = match command {
        CliCommand::Train(a) => a.trainer.attach.is_some(),
        CliCommand::Worker(a) => a.trainer.attach.is_some(),
        _ => false,
    };
    if attached {
        if let Err(e) = sluice::trainer::die_with_parent() {
            logging::fatal(&format!("--attach: {e}"), exit::ERROR);
            return Err(ExitCode::from(exit::ERROR));
        }
    }
    // Before any secret is read and any trainer started.
    if let Err(e) = sluice::harden::keep_secrets_private() {
        tracing::warn!("cannot make sluice non-dumpable (other processes of this user may read its memory): {e}");
    }
    // Object store timeouts hold for every store the command opens.
    if let Some(Err(e)) = command.store().map(|s| s.apply()) {
        logging::fatal(&e.to_string(), exit::USAGE);
        return Err(ExitCode::from(exit::USAGE));
    }
    Ok(())
}

/// Runs `command` on the async runtime: its exit code.
fn run(command: CliCommand, job: Option<sluice::schedule::Job>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            logging::fatal(&format!("cannot start the async runtime: {e}"), exit::ERROR);
            return ExitCode::from(exit::ERROR);
        }
    };
    match runtime.block_on(dispatch(command, job)) {
        Ok(Ended::Code(code)) => ExitCode::from(code),
        Ok(Ended::Aborted) => {
            // The abandoned run's threads are not waited for.
            runtime.shutdown_background();
            ExitCode::from(exit::INTERRUPTED)
        }
        Err(e) => failed(&e),
    }
}

/// The one line of an error that ended the command, and its exit code.
fn failed(e: &anyhow::Error) -> ExitCode {
    let code = sluice::cli::exit_code(e);
    logging::fatal(&one_line(e), code);
    ENDED.store(code.max(1), std::sync::atomic::Ordering::SeqCst);
    ExitCode::from(code)
}

/// The exit code of a command whose error line is out (0 before): what the
/// runtime's shutdown still does after it is no part of the command's answer.
static ENDED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Panics show as ever, except those of background tasks cancelled while the
/// runtime shuts down after the command's error line (a store client's task
/// unwrapping the join of another that the shutdown cancelled): the process
/// exits with the command's code, its error line the one line it printed
/// (and a build that aborts on panics does not abort).
fn quiet_panics_after_the_end() {
    let shown = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        match ENDED.load(std::sync::atomic::Ordering::SeqCst) {
            0 => shown(info),
            code => std::process::exit(i32::from(code)),
        }
    }));
}

/// A command line clap refused: clap's message (help and version go to
/// stdout and are no error), or a filter's own one line.
fn clap_error(e: &clap::Error) -> ExitCode {
    if e.kind() == clap::error::ErrorKind::DisplayVersion {
        // The same line after any subcommand (clap would name `sluice-train`).
        println!("{}", sluice::cli::version::line());
        return ExitCode::from(exit::DONE);
    }
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::from(exit::DONE);
    }
    match filter_error(e) {
        // A filter's own message already names the flag and the place.
        Some(message) => eprintln!("sluice: {message}"),
        None => {
            let _ = e.print();
        }
    }
    ExitCode::from(exit::USAGE)
}

/// Runs the commands that print what this build is (version, completions,
/// man pages, references); `None` for the others.
fn print_only(command: &CliCommand) -> Option<anyhow::Result<()>> {
    use sluice::cli::{completions, man, reference, version};
    match command {
        CliCommand::Version(args) => Some(version::run(args)),
        CliCommand::Completions(args) => Some(completions::run(args)),
        CliCommand::Man(args) => Some(man::run(args)),
        CliCommand::Reference(args) => Some(reference::run(args)),
        _ => None,
    }
}

/// The message of a `--filter` expression or a `--timezone` clap's parser
/// refused, one line.
fn filter_error(e: &clap::Error) -> Option<String> {
    if e.kind() != clap::error::ErrorKind::ValueValidation {
        return None;
    }
    let message = std::error::Error::source(e)?.to_string();
    (message.starts_with("--filter: ") || message.starts_with("--timezone: ")).then_some(message)
}

async fn dispatch(
    command: CliCommand,
    job: Option<sluice::schedule::Job>,
) -> anyhow::Result<Ended> {
    let code = match command {
        CliCommand::Ls(args) => {
            sluice::cli::ls::run(*args).await?;
            exit::DONE
        }
        CliCommand::Train(mut args) => {
            // From the start: a signal while the catalog is asked stops the run too.
            let (stop, abort) = sluice::cli::dist::stop_on_signals(args.train.grace)?;
            let lookup = sluice::job::train::until_stopped(Some(&stop), args.resolve_catalog());
            let Some(table) = lookup.await.transpose()? else {
                return Err(sluice::job::train::stopped_before_start().into());
            };
            let catalog = args.catalog.clone();
            let mut config = args.into_config()?;
            if let Some(table) = &table {
                table.apply(&mut config.dataset);
                config.table = Some(table.table_ref(&catalog));
            }
            let outcome = tokio::select! {
                outcome = sluice::job::train::run(config, Some(stop)) => outcome?,
                name = abort.signalled() => {
                    logging::result_warning(format!("{name} again: exiting now"));
                    return Ok(Ended::Aborted);
                }
            };
            let summary = match outcome {
                Outcome::Trained(summary) => summary,
                Outcome::AlreadyFinished(finished) => {
                    logging::result(finished.line());
                    return Ok(Ended::Code(exit::of_failed_tasks(&finished.tasks_failed)));
                }
            };
            summary.log();
            exit::of_failed_tasks(&summary.tasks_failed)
        }
        CliCommand::Master(args) => sluice::cli::dist::master(*args).await?,
        CliCommand::Worker(args) => return sluice::cli::dist::worker(*args).await,
        CliCommand::Status(args) => sluice::cli::dist::status(args).await?,
        CliCommand::Run(args) => {
            // `main` loaded it before the runtime started.
            let Some(job) = job else {
                anyhow::bail!("the job file was not loaded before the runtime started");
            };
            return sluice::cli::run::run(args, job).await;
        }
        CliCommand::Version(_)
        | CliCommand::Completions(_)
        | CliCommand::Man(_)
        | CliCommand::Reference(_) => {
            anyhow::bail!("printing commands run before the runtime starts")
        }
    };
    Ok(Ended::Code(code))
}

/// An error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    connectors::Report(e.as_ref()).to_string()
}
