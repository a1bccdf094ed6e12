//! `sluice master`, `sluice worker` and `sluice status`: the distributed job.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::train::WorkerOptions;
use super::{parse_duration, usage, DatasetArgs};
use crate::config::{check_columns, TrainerChoice};
use crate::exit;

/// Where the job token comes from.
#[derive(Debug, Clone, Args)]
pub struct TokenArgs {
    /// File holding the job token (or set SLUICE_TOKEN). Every request carries it.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
}

impl TokenArgs {
    /// Reads the token; it never appears in logs or errors. A token file that
    /// other users may read gets a warning naming the file.
    pub fn token(&self) -> anyhow::Result<String> {
        let token = match &self.token_file {
            Some(path) => {
                let token = std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!("cannot read --token-file {}: {e}", path.display())
                })?;
                warn_if_shared(path);
                token
            }
            None => std::env::var("SLUICE_TOKEN").unwrap_or_default(),
        };
        let token = token.trim().to_string();
        if token.is_empty() {
            return Err(usage(
                "no job token: pass --token-file FILE or set SLUICE_TOKEN",
            ));
        }
        Ok(token)
    }
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
    pub url: String,
    /// Address to serve the API, status page and metrics on. With port 0 the system picks a free port; the master's first line on stderr, `sluice master listening on URL (state ...)`, says which.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    /// Where the job's state (journal, snapshots) lives: a directory, or an s3://, gs://, az:// or hdfs:// prefix; a restarted master continues from it.
    #[arg(long, value_name = "DIR|URL")]
    pub state: String,
    /// Passes over the data.
    #[arg(long, default_value_t = 1)]
    pub epochs: u32,
    /// Seed of task order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Attempts per task before it is failed.
    #[arg(long, default_value_t = 3)]
    pub max_attempts: u32,
    /// A lease not renewed within this time goes back to the queue.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub lease_timeout: Duration,
    /// Keep answering "job over" this long after the last task, then exit.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub linger: Duration,
    /// Only these columns reach the trainers.
    #[arg(long, value_delimiter = ',')]
    pub columns: Option<Vec<String>>,
    /// Train even if the output is visibly unfinished.
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Serve the rest when files are corrupt (a cut-off Parquet footer): each becomes a failed task, exit code 2. Without it a corrupt file stops the master before it serves.
    #[arg(long)]
    pub ignore_corrupt_files: bool,
    /// Serve HTTPS with this PEM certificate (chain); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The job token.
    #[command(flatten)]
    pub token: TokenArgs,
    /// How to read the dataset.
    #[command(flatten)]
    pub dataset: DatasetArgs,
    /// Kerberos login for HDFS (the data and --state).
    #[command(flatten)]
    pub kerberos: super::kerberos::KerberosArgs,
}

/// Arguments of `sluice worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The master's URL, e.g. http://sluice-master:7070.
    #[arg(long)]
    pub master: String,
    /// Keep retrying an unreachable master this long before giving up.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub patience: Duration,
    /// Trust this PEM CA certificate for an https:// master (besides the system's roots).
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// On SIGTERM or SIGINT (pre-emption), how long the trainers may take to
    /// finish the batches they hold before the worker hands its tasks back and
    /// exits (keep it under the pod's terminationGracePeriodSeconds, 30 s by
    /// default). A second signal exits at once.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub grace: Duration,
    /// The worker's name on the status page, in `sluice status` and in /metrics (default: host name and pid, e.g. node-7-4121).
    #[arg(long)]
    pub name: Option<String>,
    /// Exit with this code instead of 0 when a signal stopped the worker before the job was over (e.g. 143 under a Kubernetes Job or as a Spark task, so that a pre-empted worker counts as failed and is started again).
    #[arg(long, value_name = "CODE", default_value_t = 0)]
    pub stopped_exit_code: u8,
    /// Trainer and pipeline options.
    #[command(flatten)]
    pub worker: WorkerOptions,
    /// The job token.
    #[command(flatten)]
    pub token: TokenArgs,
    /// Kerberos login for HDFS.
    #[command(flatten)]
    pub kerberos: super::kerberos::KerberosArgs,
}

/// Arguments of `sluice status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The master's URL.
    #[arg(long)]
    pub master: String,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
    /// Trust this PEM CA certificate for an https:// master (besides the system's roots).
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// The job token.
    #[command(flatten)]
    pub token: TokenArgs,
}

/// Runs `sluice master`; returns the process exit code.
pub async fn master(args: MasterArgs) -> anyhow::Result<u8> {
    if let Some(columns) = &args.columns {
        check_columns(columns).map_err(|e| usage(e.to_string()))?;
    }
    let mut dataset = args.dataset.options()?;
    dataset.ignore_corrupt_files = args.ignore_corrupt_files;
    let config = crate::master::serve::MasterConfig {
        url: args.url,
        dataset,
        columns: args.columns,
        queue: crate::task::QueueConfig {
            epochs: args.epochs,
            max_attempts: args.max_attempts,
            lease_timeout_ms: args.lease_timeout.as_millis() as u64,
            seed: args.seed,
        },
        listen: args.listen,
        state: crate::master::state::StateLocation::parse(&args.state),
        token: args.token.token()?,
        linger: args.linger,
        allow_incomplete: args.allow_incomplete,
        tls: args.tls_cert.zip(args.tls_key),
    };
    let state = config.state.to_string();
    let outcome = crate::master::serve::run(config).await?;
    if let (Some(signal), false) = (outcome.stopped_by, outcome.job_over) {
        eprintln!(
            "sluice master: stopped by {} before the job was over ({} of {} tasks done); \
             everything acknowledged is in {state}: start the master again with the same \
             --state to continue (exit code {})",
            signal.name(),
            outcome.tasks_done,
            outcome.tasks,
            signal.exit_code()
        );
        return Ok(signal.exit_code());
    }
    eprintln!(
        "job over: {} tasks done, {} failed",
        outcome.tasks_done,
        outcome.failed.len()
    );
    for f in &outcome.failed {
        eprintln!("failed task: {f}");
    }
    Ok(if outcome.failed.is_empty() {
        exit::DONE
    } else {
        exit::TASKS_FAILED
    })
}

/// Runs `sluice worker`.
pub async fn worker(args: WorkerArgs) -> anyhow::Result<u8> {
    let trainer: TrainerChoice = args.worker.trainer()?;
    let stopped_exit_code = args.stopped_exit_code;
    let config = crate::job::worker::WorkerConfig {
        master: args.master,
        token: args.token.token()?,
        trainer,
        devices: args.worker.device_count(),
        device_ids: args.worker.device_ids.clone(),
        batch_size: args.worker.batch_size,
        prefetch: args.worker.prefetch,
        read_ahead: args.worker.read_ahead,
        shuffle_buffer: args.worker.shuffle_buffer,
        lockstep: args.worker.lockstep,
        drop_last: args.worker.drop_last,
        transform: args.worker.transform(),
        patience: args.patience,
        ca_file: args.ca_file,
        stop: Some(stop_on_signals(args.grace)?),
        name: args.name.unwrap_or_else(default_worker_name),
    };
    if config.devices == 0
        || config.batch_size == 0
        || config.prefetch == 0
        || config.read_ahead == 0
    {
        return Err(usage(
            "--devices, --batch-size, --prefetch and --read-ahead must be at least 1",
        ));
    }
    let outcome = crate::job::worker::run(config).await?;
    if outcome.stopped {
        eprintln!(
            "worker stopped: {} rows in {} batches; its unfinished tasks were handed back",
            outcome.rows, outcome.batches
        );
        return Ok(stopped_exit_code);
    } else {
        eprintln!(
            "worker done: {} rows in {} batches{}",
            outcome.rows,
            outcome.batches,
            if outcome.dropped > 0 {
                format!("; {} rows dropped (--drop-last)", outcome.dropped)
            } else {
                String::new()
            }
        );
    }
    Ok(exit::DONE)
}

/// A stop request raised by the first SIGTERM or SIGINT; a second one exits
/// at once (exit code 130).
pub fn stop_on_signals(grace: Duration) -> anyhow::Result<crate::worker::pipeline::Stop> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            if *tx.borrow() {
                eprintln!("{name} again: exiting now");
                std::process::exit(130);
            }
            tracing::warn!(signal = name, "stop requested");
            let _ = tx.send(true);
        }
    });
    Ok(crate::worker::pipeline::Stop { signal: rx, grace })
}

/// A worker's name when `--name` is not given: host name and pid.
fn default_worker_name() -> String {
    format!("{}-{}", crate::host::host_name(), std::process::id())
}

/// Runs `sluice status`.
pub async fn status(args: StatusArgs) -> anyhow::Result<u8> {
    let source = crate::worker::remote::RemoteSource::new(
        &args.master,
        args.token.token()?,
        Duration::from_secs(5),
        args.ca_file.as_deref(),
    )?;
    let s = source.status_reply().await?;
    let text = if args.json {
        serde_json::to_string_pretty(&s)? + "\n"
    } else {
        let q = &s.queue;
        let total = s
            .rows_total
            .map_or_else(String::new, |t| format!(" of {t}"));
        let mut t = format!(
            "{}\n{}: epoch {}/{}, tasks todo {} leased {} done {} failed {}, {} tasks done in all, \
             {}{total} rows committed ({} in tasks done), {} workers live, {} departed\n",
            s.url,
            if q.job_over { "job over" } else { "running" },
            q.epoch + 1,
            q.epochs,
            q.todo,
            q.leased,
            q.done,
            q.failed,
            q.tasks_done,
            s.rows_committed,
            s.rows_done,
            s.workers.len(),
            s.workers_departed
        );
        for w in &s.workers {
            t.push_str(&format!(
                "worker {} {}: {} rows acknowledged, {:.0} rows/s, last heartbeat {:.1}s ago\n",
                w.worker, w.name, w.rows, w.rows_per_second, w.seconds_since_heartbeat
            ));
        }
        for f in &s.failed {
            t.push_str(&format!(
                "failed: {} (epoch {}): {}\n",
                f.file,
                f.epoch + 1,
                f.reason
            ));
        }
        t
    };
    super::ls::write_stdout(&text)?;
    Ok(exit::DONE)
}
