//! `sluice master`, `sluice worker` and `sluice status`: the distributed job.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::usage;
use crate::config::heading;
use crate::config::{
    FollowOptions, KerberosOptions, MasterOptions, PipelineOptions, ReadOptions, SelectOptions,
    StoreOptions, TrainerOptions, WorkerOptions,
};
use crate::exit;
use crate::logging;
use crate::trainer::protocol::TOKEN_ENV;

/// Where the job token comes from.
#[derive(Debug, Clone, Args)]
pub struct TokenArgs {
    /// File holding the job token (or set SLUICE_TOKEN, or pass --token-fd). Every
    /// request carries it.
    #[arg(long, conflicts_with = "token_fd", help = "File holding the job token (or set SLUICE_TOKEN)", long_help, help_heading = heading::DISTRIBUTED)]
    pub token_file: Option<PathBuf>,
    /// Descriptor N, open for reading, holding the job token (`--token-fd 3
    /// 3<token`, or a pipe): read once and closed, so no trainer inherits it and
    /// no path names it.
    #[arg(long, value_name = "N", help = "Descriptor N holding the job token", long_help, help_heading = heading::DISTRIBUTED, hide_short_help = true)]
    pub token_fd: Option<i32>,
}

impl TokenArgs {
    /// Reads the token; it never appears in logs or errors. A token file that
    /// other users may read gets a warning naming the file.
    pub fn token(&self) -> anyhow::Result<String> {
        let token = match (&self.token_file, self.token_fd) {
            (Some(path), _) => {
                let token = std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!("cannot read --token-file {}: {e}", path.display())
                })?;
                warn_if_shared(path);
                token
            }
            (None, Some(fd)) => read_token_fd(fd)?,
            (None, None) => std::env::var(TOKEN_ENV).unwrap_or_default(),
        };
        let token = token.trim().to_string();
        if token.is_empty() {
            return Err(usage(format!(
                "no job token: pass --token-file FILE or --token-fd N, or set {TOKEN_ENV}"
            )));
        }
        Ok(token)
    }

    /// Keeps the `--token-file` from the trainers this process starts: each
    /// runs where the file reads as empty. Where the kernel offers no way to
    /// (no unprivileged user namespaces), says at start that trainers of the
    /// same user can read it.
    pub fn hide_from_trainers(&self) {
        let Some(path) = &self.token_file else {
            return;
        };
        if let Err(reason) = crate::harden::hide_from_trainers(path) {
            tracing::warn!(
                "trainers run as the same user can read --token-file {} ({reason}): pass the \
                 token with --token-fd N or {TOKEN_ENV}, which trainers never get",
                path.display()
            );
        }
    }
}

/// Reads the token from descriptor `fd` to its end, then closes it.
fn read_token_fd(fd: i32) -> anyhow::Result<String> {
    use std::io::Read;
    let cannot = |e: std::io::Error| anyhow::anyhow!("cannot read --token-fd {fd}: {e}");
    let owned = crate::sys::fd::adopt(fd).map_err(cannot)?;
    let mut token = String::new();
    std::fs::File::from(owned)
        .read_to_string(&mut token)
        .map_err(cannot)?;
    Ok(token)
}

/// Warns when the token file at `path` is readable by its group or others.
fn warn_if_shared(path: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o044 != 0 {
            tracing::warn!(
                "--token-file {} is readable by other users (mode {mode:o}): make it private with chmod 600",
                path.display()
            );
        }
    }
}

/// Arguments of `sluice master`.
#[derive(Debug, Args)]
pub struct MasterArgs {
    /// The output directory to train on.
    #[arg(help_heading = heading::SOURCE, display_order = 0)]
    pub url: String,
    /// More sources, mixed with the first (see --weights, --epoch-rows).
    #[arg(value_name = "URL", help = "More sources, mixed with the first (--weights)", long_help, help_heading = heading::SOURCE, display_order = 1, hide_short_help = true)]
    pub more: Vec<String>,
    /// How several sources are mixed.
    #[command(flatten)]
    pub mix: crate::config::MixOptions,
    /// Where it listens, its state, its queue.
    #[command(flatten)]
    pub master: MasterOptions,
    /// The job token.
    #[command(flatten)]
    pub token: TokenArgs,
    /// How to read the dataset.
    #[command(flatten)]
    pub read: ReadOptions,
    /// The rows trained.
    #[command(flatten)]
    pub select: SelectOptions,
    /// Following the source as it grows.
    #[command(flatten)]
    pub follow: FollowOptions,
    /// Kerberos login for HDFS (the data and --state).
    #[command(flatten)]
    pub kerberos: KerberosOptions,
    /// Object store timeouts (the data and --state).
    #[command(flatten)]
    pub store: StoreOptions,
    /// The catalog a table name is looked up in.
    #[command(flatten)]
    pub catalog: crate::config::CatalogOptions,
}

/// Arguments of `sluice worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The master, the worker's name, how it stops.
    #[command(flatten)]
    pub worker: WorkerOptions,
    /// The pipeline between readers and trainers.
    #[command(flatten)]
    pub pipeline: PipelineOptions,
    /// The job token.
    #[command(flatten)]
    pub token: TokenArgs,
    /// Kerberos login for HDFS.
    #[command(flatten)]
    pub kerberos: KerberosOptions,
    /// Object store timeouts.
    #[command(flatten)]
    pub store: StoreOptions,
    /// How to ask the catalog of a table-by-name job for vended credentials.
    #[command(flatten)]
    pub catalog: crate::config::WorkerCatalogOptions,
    /// The device threads and their trainer.
    #[command(flatten)]
    pub trainer: TrainerOptions,
}

/// Arguments of `sluice status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The master's URL.
    #[arg(long, help_heading = heading::DISTRIBUTED)]
    pub master: String,
    /// Print JSON for scripts.
    #[arg(long, help_heading = heading::OUTPUT)]
    pub json: bool,
    /// Trust this PEM CA certificate for an https:// master (besides the system's roots).
    #[arg(long, value_name = "PEM", help = "Trust this PEM CA for an https:// master", long_help, help_heading = heading::DISTRIBUTED)]
    pub ca_file: Option<PathBuf>,
    /// The job token.
    #[command(flatten)]
    pub token: TokenArgs,
}

/// Runs `sluice master`; returns the process exit code.
pub async fn master(mut args: MasterArgs) -> anyhow::Result<u8> {
    let table = crate::catalog::lookup(&args.catalog, &args.url).await?;
    if let Some(table) = &table {
        args.url = table.read_url.clone();
    }
    for url in &mut args.more {
        if let Some(more) = crate::catalog::lookup(&args.catalog, url).await? {
            *url = more.read_url;
        }
    }
    let mut urls = vec![args.url.clone()];
    urls.extend(args.more.iter().cloned());
    let mix = args.mix.config(&urls)?;
    let options = args.master;
    options.validate()?;
    let mut dataset = args.read.dataset_options(options.ignore_corrupt_files)?;
    if let Some(table) = &table {
        table.apply(&mut dataset);
    }
    let follow = args.follow.config(options.epochs)?;
    args.select.validate()?;
    refuse_master_clashes(mix.as_ref(), follow.as_ref(), &args.select)?;
    let global = global_batches(&options);
    let plan = crate::plan::PlanRequest {
        global,
        kind: crate::plan::JobKind::Master,
        url: args.url,
        dataset,
        queue: options.queue(follow.is_some()),
        follow,
        columns: options.columns,
        select: args.select,
        allow_incomplete: options.allow_incomplete,
        allow_empty: options.allow_empty,
        table: table.as_ref().map(|t| t.table_ref(&args.catalog)),
        mix,
        batch_rows: crate::master::serve::DECODE_BATCH_ROWS,
        task_rows: crate::mix::plan::MASTER_TASK_ROWS,
        trainer: None,
    };
    let config = crate::master::serve::MasterConfig {
        plan,
        listen: options.listen,
        state: crate::state::master_state::StateLocation::parse(&options.state),
        token: args.token.token()?,
        linger: options.linger,
        tls: options.tls_cert.zip(options.tls_key),
        retry_failed: options.retry_failed,
    };
    let state = config.state.to_string();
    let outcome = crate::master::serve::run(config).await?;
    if let (Some(signal), false) = (outcome.stopped_by, outcome.job_over) {
        logging::result_warning(format!(
            "sluice master: stopped by {} before the job was over ({} of {} tasks done); \
             everything acknowledged is in {state}: start the master again with the same \
             --state to continue (exit code {})",
            signal.name(),
            outcome.tasks_done,
            outcome.tasks,
            exit::stopped_by(signal)
        ));
        return Ok(exit::stopped_by(signal));
    }
    logging::result(format!(
        "job over: {} tasks done, {} failed; {} rows served again{}",
        outcome.tasks_done,
        outcome.failed.len(),
        outcome.rows_made_up,
        if outcome.rows_made_up > 0 {
            " (acknowledged by workers lost before their trainers saved them in a checkpoint)"
        } else {
            ""
        }
    ));
    Ok(exit::of_failed_tasks(&outcome.failed))
}

/// Refuses the options of `sluice master` that cannot go together.
fn refuse_master_clashes(
    mix: Option<&crate::config::MixConfig>,
    follow: Option<&crate::config::FollowConfig>,
    select: &crate::config::SelectOptions,
) -> anyhow::Result<()> {
    if mix.is_some_and(|m| m.epoch_rows.is_some()) && follow.is_some() {
        return Err(usage(
            "--epoch-rows sizes epochs of sources whose rows are known at the start; a followed job grows as its sources commit (leave out --epoch-rows or --follow)",
        ));
    }
    if mix.is_some() && select.limit.is_some() {
        return Err(usage(
            "--limit takes the first rows of one dataset; with several sources use --epoch-rows",
        ));
    }
    if select.limit.is_some() && follow.is_some() {
        return Err(usage(
            "--limit takes the first rows of one dataset; a followed job (--follow) trains what its source commits",
        ));
    }
    Ok(())
}

/// The global batches `sluice master` cuts for its workers, if any.
fn global_batches(options: &crate::config::MasterOptions) -> Option<crate::plan::GlobalBatches> {
    let size = options.global_batch_size?;
    Some(crate::plan::GlobalBatches {
        size,
        window: options.shuffle_window,
        world: options.world_size,
    })
}

/// Runs `sluice worker`.
pub async fn worker(args: WorkerArgs) -> anyhow::Result<Ended> {
    let WorkerArgs {
        worker,
        trainer,
        pipeline,
        token,
        catalog,
        ..
    } = args;
    worker.validate()?;
    pipeline.validate()?;
    let (stop, abort) = stop_on_signals(worker.grace)?;
    let stopped_exit_code = worker.stopped_exit_code;
    let config = worker_config(worker, &trainer, &pipeline, &token, catalog)?;
    let outcome = tokio::select! {
        outcome = crate::job::worker::run(config, Some(stop)) => outcome?,
        name = abort.signalled() => {
            logging::result_warning(format!("{name} again: exiting now"));
            return Ok(Ended::Aborted);
        }
    };
    Ok(worker_ended(&outcome, stopped_exit_code))
}

/// The worker's configuration from its options; hides the job token from
/// trainers that are not attached.
fn worker_config(
    worker: WorkerOptions,
    trainer: &TrainerOptions,
    pipeline: &PipelineOptions,
    token: &TokenArgs,
    catalog: crate::config::WorkerCatalogOptions,
) -> anyhow::Result<crate::job::worker::WorkerConfig> {
    let trainer_choice = trainer.trainer()?;
    crate::config::rule(
        pipeline.global_batch_size.is_none(),
        "global-batch-size",
        "a distributed job's global batches are the master's: \
         `sluice master --global-batch-size G --world-size W`",
    )?;
    if matches!(
        trainer_choice,
        crate::config::TrainerChoice::Exec { attach: None, .. }
    ) {
        token.hide_from_trainers();
    }
    Ok(crate::job::worker::WorkerConfig {
        master: worker.master,
        token: token.token()?,
        trainer: trainer_choice,
        devices: trainer.device_count(),
        device_ids: trainer.device_ids.clone(),
        batch_size: pipeline.batch_size,
        batch_bytes: pipeline.batch_bytes,
        prefetch: pipeline.prefetch,
        read_ahead: pipeline.read_ahead,
        cache: pipeline.cache_config(),
        read_retry: pipeline.read_retry,
        shuffle_buffer: pipeline.shuffle_buffer,
        shuffle_window: pipeline.global_window(),
        lockstep: pipeline.lockstep,
        drop_last: pipeline.drop_last,
        transform: pipeline.transform(),
        patience: worker.patience,
        ca_file: worker.ca_file,
        name: worker.name.unwrap_or_else(default_worker_name),
        progress: !trainer.quiet,
        catalog,
    })
}

/// Reports how the worker's run ended and gives its exit code.
fn worker_ended(outcome: &crate::job::worker::WorkerOutcome, stopped_exit_code: u8) -> Ended {
    if let (Some(master), false) = (&outcome.master_lost, outcome.joined) {
        logging::result_warning(format!(
            "worker stopped before the master at {master} answered: it trained and held nothing"
        ));
        return Ended::Code(stopped_exit_code);
    }
    if let Some(master) = &outcome.master_lost {
        logging::result_warning(format!(
            "worker stopped: {} rows acknowledged; the master at {master} did not answer within \
             the --grace period, so the tasks this worker held lapse there and are served again",
            outcome.rows
        ));
        return Ended::Code(stopped_exit_code);
    }
    if outcome.stopped {
        logging::result_warning(format!(
            "worker stopped: {} rows in {} batches; its unfinished tasks were handed back",
            outcome.rows, outcome.batches
        ));
        return Ended::Code(stopped_exit_code);
    }
    logging::result(worker_done(outcome));
    Ended::Code(exit::DONE)
}

/// The line that reports a worker's finished run.
fn worker_done(outcome: &crate::job::worker::WorkerOutcome) -> String {
    format!(
        "worker done: {} rows in {} batches{}; {} rows served again{}{}",
        outcome.rows,
        outcome.batches,
        if outcome.dropped > 0 {
            format!("; {} rows dropped (--drop-last)", outcome.dropped)
        } else {
            String::new()
        },
        outcome.replayed,
        if outcome.replayed > 0 {
            " (acknowledged after the checkpoint a restarted trainer loaded)"
        } else {
            ""
        },
        if outcome.rolled_back > 0 {
            format!(
                "; its trainers were rolled back to their last complete checkpoint {} time(s), \
                 a lease of theirs having gone to another worker (the master serves again \
                 what they held in none)",
                outcome.rolled_back
            )
        } else {
            String::new()
        }
    )
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// With this exit code.
    Code(u8),
    /// Abandoned at a second SIGTERM or SIGINT: the process exits
    /// [`exit::INTERRUPTED`] at once, without waiting for the run's threads.
    Aborted,
}

/// The second SIGTERM or SIGINT, after which a command abandons its run.
#[derive(Debug)]
pub struct Abort(tokio::sync::oneshot::Receiver<&'static str>);

impl Abort {
    /// Resolves with the signal's name once a second signal came; never otherwise.
    pub async fn signalled(self) -> &'static str {
        match self.0.await {
            Ok(name) => name,
            Err(_) => std::future::pending().await,
        }
    }
}

/// A stop request raised by the first SIGTERM or SIGINT, and the [`Abort`]
/// a second one raises.
pub fn stop_on_signals(grace: Duration) -> anyhow::Result<(crate::worker::pipeline::Stop, Abort)> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (abort_tx, abort_rx) = tokio::sync::oneshot::channel();
    let mut abort_tx = Some(abort_tx);
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            if *tx.borrow() {
                if let Some(abort) = abort_tx.take() {
                    let _ = abort.send(name);
                }
                continue;
            }
            tracing::warn!(
                signal = name,
                grace_seconds = grace.as_secs_f64(),
                "{name}: stop requested; what the trainers acknowledge within --grace is committed (another signal exits at once)"
            );
            let _ = tx.send(true);
        }
    });
    Ok((
        crate::worker::pipeline::Stop { signal: rx, grace },
        Abort(abort_rx),
    ))
}

/// A worker's name when `--name` is not given: host name and pid.
fn default_worker_name() -> String {
    format!("{}-{}", crate::host::host_name(), std::process::id())
}

/// Runs `sluice status`.
pub async fn status(args: StatusArgs) -> anyhow::Result<u8> {
    crate::config::worker::check_master_url(&args.master)?;
    let source = crate::worker::remote::RemoteSource::new(
        &args.master,
        args.token.token()?,
        Duration::from_secs(5),
        args.ca_file.as_deref(),
    )?;
    let s = source.status_reply().await?;
    let text =
        if args.json {
            serde_json::to_string_pretty(&s)? + "\n"
        } else {
            let q = &s.queue;
            let total = s
                .rows_total
                .map_or_else(String::new, |t| format!(" of {t}"));
            let mut t = format!(
            "{}\n{}: epoch {}/{}, tasks todo {} leased {} done {} failed {}, {} tasks done in all, \
             {}{total} rows committed ({} in tasks done), {} workers live, {} departed, \
             eta {}\n",
            s.url,
            if q.job_over { "job over" } else { "running" },
            q.epoch,
            q.epochs,
            q.todo,
            q.leased,
            q.done,
            q.failed,
            q.tasks_done,
            s.rows_committed,
            s.rows_done,
            s.workers.len(),
            s.workers_departed,
            crate::master::page::eta_text(s.eta_seconds)
        );
            for source in &s.sources {
                t.push_str(&format!(
                    "source {}: {} rows committed\n",
                    source.name, source.rows
                ));
            }
            if let Some(f) = &s.follow {
                t.push_str(&format!(
                "following: newest taken {}, newest trained {}, lag {} rows / {:.1}s, {} steps{}\n",
                f.seen,
                f.trained.as_deref().unwrap_or("-"),
                f.lag_rows,
                f.lag_seconds,
                f.steps,
                if f.open { "" } else { " (closed: training what was taken)" }
            ));
            }
            if let Some(c) = &s.cache {
                t.push_str(&format!(
                    "cache: {} bytes hit, {} bytes fetched, {} bytes held\n",
                    c.hit_bytes, c.fetched_bytes, c.bytes
                ));
            }
            for w in &s.workers {
                t.push_str(&format!(
                    "worker {} {}: {} rows acknowledged, {:.0} rows/s, last heartbeat {:.1}s ago\n",
                    w.worker, w.name, w.rows, w.rows_per_second, w.seconds_since_heartbeat
                ));
            }
            for f in &s.failed {
                t.push_str(&format!(
                    "failed: {} (epoch {}): {}\n",
                    f.file, f.epoch, f.reason
                ));
            }
            t
        };
    super::ls::write_stdout(&text)?;
    Ok(exit::DONE)
}
