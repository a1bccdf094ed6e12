//! `sluice run JOB.toml`: one incremental run of a scheduled job.

use std::path::PathBuf;

use clap::Args;

use super::dist::Ended;
use crate::config::heading;
use crate::exit;
use crate::schedule::{self, Job, RunOptions};

/// Arguments of `sluice run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job file: `source`, `state` and `sluice train` options (see jobs/clicks.toml).
    #[arg(help = "The job file (see jobs/clicks.toml)", long_help)]
    pub job: PathBuf,
    /// Only list what would be trained and what is waiting; train and record nothing.
    #[arg(long, help = "List what would be trained; train nothing", long_help)]
    pub dry_run: bool,
    /// Print the run's report as JSON on stdout.
    #[arg(long, help_heading = heading::OUTPUT)]
    pub json: bool,
    /// A source that matches nothing, or new data with no rows, is a warning (exit 0), not an error (exit 1); also `allow-empty = true` in the job file.
    #[arg(
        long,
        help = "No new rows is a warning (exit 0), not an error",
        long_help
    )]
    pub allow_empty: bool,
}

/// Loads the job file of `sluice run` and applies its process-wide settings
/// (object store timeouts, the Kerberos login that sets the process's
/// environment): to be called before any other thread starts. Keep the
/// login for as long as the job runs.
pub fn prepare(
    args: &RunArgs,
) -> anyhow::Result<(Job, Option<connectors::store::kerberos::KeytabLogin>)> {
    let (job, kerberos, store) = Job::load_with_store(&args.job)?;
    store.apply()?;
    let login = kerberos.login()?;
    Ok((job, login))
}

/// Runs the job once; returns how it ended (0 done or nothing new, 2 tasks
/// failed; errors are left to the caller: 1, 2 when a table rewrite stops the run
/// (`on-rewrite = "fail"`), 3 when another run holds the lock, 130 when a
/// signal stopped it). A second SIGTERM or SIGINT abandons the run.
/// `job` is the job file `args.job`, loaded (and its process-wide settings,
/// object store timeouts and Kerberos login, applied) by [`prepare`] before
/// the runtime started.
pub async fn run(args: RunArgs, mut job: Job) -> anyhow::Result<Ended> {
    let (stop, abort) = super::dist::stop_on_signals(job.grace)?;
    let lookup = crate::job::train::until_stopped(Some(&stop), job.lookup());
    if lookup.await.transpose()?.is_none() {
        return Err(crate::job::train::stopped_before_start().into());
    }
    let options = RunOptions {
        dry_run: args.dry_run,
        allow_empty: args.allow_empty || job.train.allow_empty,
    };
    let report = tokio::select! {
        report = schedule::run(&job, options, Some(stop)) => report?,
        name = abort.signalled() => {
            crate::logging::result_warning(format!("{name} again: exiting now"));
            return Ok(Ended::Aborted);
        }
    };
    if args.json {
        crate::cli::ls::write_stdout(&(serde_json::to_string_pretty(&report)? + "\n"))?;
    } else {
        for line in report.lines() {
            crate::logging::result(line);
        }
    }
    let failed = report.summary.as_ref().map_or(&[][..], |s| &s.tasks_failed);
    Ok(Ended::Code(exit::of_failed_tasks(failed)))
}
