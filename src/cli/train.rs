//! `sluice train`: flags of the single-machine job, turned into a validated [`TrainConfig`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::{parse_duration, usage, DatasetArgs};
use crate::config::{ModelChoice, TrainConfig, TrainerChoice};
use crate::trainer::{HashBuckets, Transform, DEFAULT_CHECKPOINT_EVERY};

/// The built-in models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelArg {
    /// Consume and count batches (dry runs, benchmarks).
    None,
    /// Linear regression (squared loss).
    Linear,
    /// Logistic regression (log loss, accuracy).
    Logistic,
}

/// Flags of the trainers and the worker pipeline, shared by `train` and `worker`.
#[derive(Debug, Clone, Args)]
pub struct WorkerOptions {
    /// Device threads, each owning one trainer.
    #[arg(long, default_value_t = 1)]
    pub devices: usize,
    /// Accelerator ids, one per device thread (sets CUDA_VISIBLE_DEVICES for exec trainers); implies --devices.
    #[arg(long, value_delimiter = ',')]
    pub device_ids: Option<Vec<String>>,
    /// Rows per batch handed to a trainer (only the last batch of an epoch may be short).
    #[arg(long, default_value_t = 1024)]
    pub batch_size: usize,
    /// Built-in model; ignored when --exec is given.
    #[arg(long, value_enum, default_value_t = ModelArg::None)]
    pub model: ModelArg,
    /// Label column of the linear and logistic models.
    #[arg(long)]
    pub label: Option<String>,
    /// Feature columns (numeric or fixed-size lists), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub features: Option<Vec<String>>,
    /// Learning rate of the built-in models.
    #[arg(long)]
    pub learning_rate: Option<f64>,
    /// Write the trained model here as JSON.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Continue training a model written earlier by --output (its weights, feature scaling and optimizer state).
    #[arg(long, value_name = "FILE")]
    pub init_model: Option<PathBuf>,
    /// Train with an external program: `sh -c CMD` per device, fed an Arrow IPC stream on stdin, acknowledging each applied batch with a line `ack` on fd $SLUICE_ACK_FD.
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,
    /// Restarts allowed per device when the exec trainer dies.
    #[arg(long, default_value_t = 3)]
    pub exec_restarts: u32,
    /// An exec trainer holding batches that sends no ack for this long is killed (its process group) and restarted, which counts as a restart; `off` (or 0) waits forever.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_timeout)]
    pub trainer_timeout: Duration,
    /// Tasks leased and read ahead of the trainers.
    #[arg(long, default_value_t = 4)]
    pub prefetch: usize,
    /// Bytes the readers may hold ahead of the trainers, all together (e.g. 64MiB): row groups fetched and not yet decoded, decoded batches not yet batched. A row group larger than this is read alone.
    #[arg(long, value_name = "SIZE", default_value = crate::config::DEFAULT_READ_AHEAD, value_parser = super::parse_size)]
    pub read_ahead: u64,
    /// Rows held in a shuffle buffer (0: rows keep their order within a task).
    #[arg(long, default_value_t = 0)]
    pub shuffle_buffer: usize,
    /// Every step gives each device one batch, and every device the same number of steps per epoch (the epoch's last partial step split evenly); exec trainers get RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for torch.distributed, and are not restarted (a device process that dies stops the run).
    #[arg(long)]
    pub lockstep: bool,
    /// With --lockstep: drop the epoch's last partial step instead of splitting it; its rows count as consumed (committed) and the summary counts them.
    #[arg(long, requires = "lockstep")]
    pub drop_last: bool,
    /// Hash categorical columns into int64 buckets before batches reach the trainer, with the hash of `sluice_trainer.bucket_of`: `N` hashes every string, binary and dictionary column into [0, N); `COL=N,COL=N` hashes exactly those columns (integer ones too). A Python trainer then wraps them as tensors without work per row.
    #[arg(long, value_name = "N|COL=N,...")]
    pub hash_buckets: Option<HashBuckets>,
    /// Replace nulls of integer and floating point columns with this value before batches reach the trainer, so they wrap as numpy arrays or tensors without a copy.
    #[arg(long, value_name = "V", allow_negative_numbers = true)]
    pub fill_nulls: Option<f64>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

impl WorkerOptions {
    /// The trainer these flags choose.
    pub fn trainer(&self) -> anyhow::Result<TrainerChoice> {
        Ok(match (&self.exec, self.model) {
            (Some(cmd), _) => TrainerChoice::Exec {
                command: cmd.clone(),
                restarts: self.exec_restarts,
                timeout: (!self.trainer_timeout.is_zero()).then_some(self.trainer_timeout),
                env: Vec::new(),
            },
            (None, ModelArg::None) => TrainerChoice::None,
            (None, kind) => TrainerChoice::Model(ModelChoice {
                logistic: kind == ModelArg::Logistic,
                label: self
                    .label
                    .clone()
                    .ok_or_else(|| usage(format!("--model {kind:?} needs --label COL")))?,
                features: self.features.clone().unwrap_or_default(),
                learning_rate: self.learning_rate,
                output: self.output.clone(),
                init: self.init_model.clone(),
            }),
        })
    }

    /// The transform these flags choose (`--hash-buckets`, `--fill-nulls`).
    pub fn transform(&self) -> Transform {
        Transform {
            hash_buckets: self.hash_buckets.clone().unwrap_or_default(),
            fill_nulls: self.fill_nulls,
        }
    }

    /// Device threads, from --device-ids when given.
    pub fn device_count(&self) -> usize {
        self.device_ids
            .as_ref()
            .map(Vec::len)
            .unwrap_or(self.devices)
    }
}

/// The directory of `train --state`: a path, or the path of a `file://` URL.
/// A store URL is refused (rather than taken for a directory named `s3:`):
/// state on a store is the master's.
fn local_state(state: PathBuf) -> anyhow::Result<PathBuf> {
    let Some((scheme, rest)) = state.to_str().and_then(|s| s.split_once("://")) else {
        return Ok(state);
    };
    if scheme.eq_ignore_ascii_case("file") {
        return Ok(PathBuf::from(rest));
    }
    Err(usage(format!(
        "--state {}: `sluice train` keeps its state in a local directory (a path or file:// URL); for state on an object store or HDFS run `sluice master DATA --state {}` and `sluice worker --master URL`",
        state.display(),
        state.display()
    )))
}

/// Parses `--trainer-timeout`: a duration, or `off` (returned as zero: no limit).
fn parse_timeout(s: &str) -> Result<Duration, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

/// Arguments of `sluice train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The output directory: a path, file://, hdfs://, s3://, gs:// or az:// URL.
    pub url: String,
    /// Trainer and pipeline options.
    #[command(flatten)]
    pub worker: WorkerOptions,
    /// Passes over the data; task order is reshuffled each epoch.
    #[arg(long, default_value_t = 1)]
    pub epochs: u32,
    /// Only these columns reach the trainer (comma-separated); default all.
    #[arg(long, value_delimiter = ',')]
    pub columns: Option<Vec<String>>,
    /// Seed of task order and shuffling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Attempts per task before it is failed.
    #[arg(long, default_value_t = 3)]
    pub max_attempts: u32,
    /// A lease not renewed within this time goes back to the queue (e.g. 60s).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub lease_timeout: Duration,
    /// Wait for _SUCCESS before starting (spark-submit handoff); optional timeout, default 1h.
    #[arg(long, value_name = "TIMEOUT", num_args = 0..=1, default_missing_value = "1h", value_parser = parse_duration, require_equals = true)]
    pub wait_success: Option<Duration>,
    /// With --wait-success: fail as soon as this process (the job writing the output, e.g. spark-submit) exits without _SUCCESS appearing.
    #[arg(long, value_name = "PID", requires = "wait_success")]
    pub writer_pid: Option<u32>,
    /// Train even if the output is visibly unfinished (no _SUCCESS, _temporary present).
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Train the rest when files are corrupt (a cut-off Parquet footer): each becomes a failed task named in the summary, exit code 2. Without it a corrupt file stops the job before training.
    #[arg(long)]
    pub ignore_corrupt_files: bool,
    /// Write a JSON summary of the run here.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Keep the job's journal in this local directory (a path or file:// URL); run the same command again after a crash to resume. For state on an object store or HDFS, use `sluice master --state URL`.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// On SIGINT or SIGTERM, how long the trainers may take to finish the
    /// batches they hold; what they acknowledged is committed and the run
    /// exits 130 (resume with the same --state). A second signal exits at once.
    #[arg(long, default_value = "20s", value_parser = crate::cli::parse_duration)]
    pub grace: std::time::Duration,
    /// With --state and a built-in model: save the model in the state every STEPS steps (and before each new epoch), so that a resumed run continues it from there; default 100, 0 = never (a resumed run then starts the model over).
    #[arg(long, value_name = "STEPS")]
    pub checkpoint_every: Option<u64>,
    /// How to read the dataset.
    #[command(flatten)]
    pub dataset: DatasetArgs,
    /// Kerberos login for HDFS.
    #[command(flatten)]
    pub kerberos: super::kerberos::KerberosArgs,
}

impl TrainArgs {
    /// Validates the flags into a configuration.
    pub fn into_config(self) -> anyhow::Result<TrainConfig> {
        let mut dataset = self.dataset.options()?;
        dataset.ignore_corrupt_files = self.ignore_corrupt_files;
        let trainer = self.worker.trainer()?;
        let state = self.state.map(local_state).transpose()?;
        let checkpoint_every = self.checkpoint_every.unwrap_or(match (&trainer, &state) {
            (TrainerChoice::Model(_), Some(_)) => DEFAULT_CHECKPOINT_EVERY,
            _ => 0,
        });
        let config = TrainConfig {
            url: self.url,
            dataset,
            devices: self.worker.device_count(),
            device_ids: self.worker.device_ids.clone(),
            batch_size: self.worker.batch_size,
            epochs: self.epochs,
            trainer,
            columns: self.columns,
            prefetch: self.worker.prefetch,
            read_ahead: self.worker.read_ahead,
            shuffle_buffer: self.worker.shuffle_buffer,
            lockstep: self.worker.lockstep,
            drop_last: self.worker.drop_last,
            transform: self.worker.transform(),
            seed: self.seed,
            max_attempts: self.max_attempts,
            lease_timeout: self.lease_timeout,
            wait_success: self.wait_success,
            writer_pid: self.writer_pid,
            allow_incomplete: self.allow_incomplete,
            summary_json: self.summary_json,
            state,
            checkpoint_every,
            progress: !self.worker.quiet,
            stop: None,
        };
        config.validate().map_err(|e| usage(e.to_string()))?;
        Ok(config)
    }
}
