//! `sluice train`: the single-machine job's options, and the validated
//! [`TrainConfig`] the job runs with.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use connectors::DatasetOptions;
use serde::Deserialize;

use super::heading;
use super::value::{form, parse_duration};
use super::{
    check_columns, check_queue, rule, FollowOptions, OptionError, PipelineOptions, ReadOptions,
    SelectOptions, TrainerChoice, TrainerOptions,
};
use crate::trainer::DEFAULT_CHECKPOINT_EVERY;

/// The job and its queue; with [`TrainerOptions`], [`PipelineOptions`] and
/// [`ReadOptions`] they make a `sluice train` command or a job file.
#[derive(Debug, Clone, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct TrainOptions {
    /// Passes over the data; task order is reshuffled each epoch.
    #[arg(long, default_value_t = 1, help = "Passes over the data", long_help, help_heading = heading::TRAINING)]
    pub epochs: u32,
    /// Only these columns reach the trainer (comma-separated); default all. A column may be computed with a Spark SQL expression and a name: "label, hash(user) % 1000 AS user_bucket, lower(country) AS country_lc" (the functions and operators of --filter).
    #[arg(long, value_delimiter = ',', help = "Only these columns reach the trainer (a,b,c)", long_help, help_heading = heading::ROWS)]
    #[serde(deserialize_with = "form::some_list")]
    pub columns: Option<Vec<String>>,
    /// Seed of task order and shuffling.
    #[arg(long, default_value_t = 0, help_heading = heading::TRAINING)]
    pub seed: u64,
    /// Failed reads per task before it is failed (after --read-retry of waiting for errors that may clear). Only the reader's own errors count: a crash, a stop or a lapsed lease hands the task back at its committed rows without using an attempt.
    #[arg(long, default_value_t = 3, help = "Failed reads of a task before it fails", long_help, help_heading = heading::READING, hide_short_help = true)]
    pub max_attempts: u32,
    /// Resuming a job whose tasks failed: put the failed tasks back, each from the rows it had committed, and run them (job files: `retry-failed = true`). Without it a rerun of such a job exits 2 again, naming them.
    #[arg(long, help = "Run the failed tasks of a resumed job again", long_help, help_heading = heading::STATE)]
    pub retry_failed: bool,
    /// A lease not renewed within this time goes back to the queue (e.g. 60s).
    #[arg(long, default_value = "60s", value_parser = parse_duration, help = "A lease not renewed this long goes back", long_help, help_heading = heading::STATE, hide_short_help = true)]
    #[serde(deserialize_with = "form::duration")]
    pub lease_timeout: Duration,
    /// Wait for _SUCCESS before starting (spark-submit handoff); optional timeout, default 1h.
    #[arg(long, value_name = "TIMEOUT", num_args = 0..=1, default_missing_value = "1h", value_parser = parse_duration, require_equals = true, help = "Wait for _SUCCESS first (spark-submit handoff)", long_help, help_heading = heading::SOURCE)]
    #[serde(deserialize_with = "form::some_duration")]
    pub wait_success: Option<Duration>,
    /// With --wait-success: fail as soon as this process (the job writing the output, e.g. spark-submit) exits without _SUCCESS appearing.
    #[arg(long, value_name = "PID", requires = "wait_success", help = "With --wait-success: fail once this writer exits", long_help, help_heading = heading::SOURCE, hide_short_help = true)]
    pub writer_pid: Option<u32>,
    /// Train even if the output is visibly unfinished (no _SUCCESS, _temporary present).
    #[arg(long, help = "Train even if the output looks unfinished", long_help, help_heading = heading::SOURCE, hide_short_help = true)]
    pub allow_incomplete: bool,
    /// Train the rest when files are corrupt (a cut-off Parquet footer): each becomes a failed task named in the summary, exit code 2. Without it a corrupt file stops the job before training.
    #[arg(long, help = "Fail the tasks of corrupt files, train the rest", long_help, help_heading = heading::READING)]
    pub ignore_corrupt_files: bool,
    /// Output with no data rows (a directory holding only _SUCCESS, a table version with no rows) is a warning (exit 0), not an error (exit 1).
    #[arg(long, help = "No data rows is a warning (exit 0), not an error", long_help, help_heading = heading::SOURCE, hide_short_help = true)]
    pub allow_empty: bool,
    /// Write a JSON summary of the run here.
    #[arg(long, help_heading = heading::OUTPUT)]
    pub summary_json: Option<PathBuf>,
    /// On SIGINT or SIGTERM, how long the trainers may take to finish the
    /// batches they hold; what they acknowledged is committed and the run
    /// exits 130 (resume with the same --state). A second signal exits at once.
    #[arg(long, default_value = "20s", value_parser = parse_duration, help = "Time trainers get to finish on SIGINT/SIGTERM", long_help, help_heading = heading::STATE)]
    #[serde(deserialize_with = "form::duration")]
    pub grace: Duration,
    /// With --state and a built-in model: save the model in the state every STEPS steps (and before each new epoch), so that a resumed run continues it from there; default 100, 0 = never (a resumed run then starts the model over).
    #[arg(long, value_name = "STEPS", help = "Save the built-in model every STEPS steps", long_help, help_heading = heading::STATE, hide_short_help = true)]
    pub checkpoint_every: Option<u64>,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            epochs: 1,
            columns: None,
            seed: 0,
            max_attempts: 3,
            retry_failed: false,
            lease_timeout: Duration::from_secs(60),
            wait_success: None,
            writer_pid: None,
            allow_incomplete: false,
            ignore_corrupt_files: false,
            allow_empty: false,
            summary_json: None,
            grace: Duration::from_secs(20),
            checkpoint_every: None,
        }
    }
}

/// What a `sluice train` job is made of: its options, the dataset's URL and the
/// local state directory (`--state`) if any.
#[derive(Debug, Clone, Copy)]
pub struct TrainParts<'a> {
    /// The job and its queue.
    pub train: &'a TrainOptions,
    /// The device threads and their trainer.
    pub trainer: &'a TrainerOptions,
    /// The pipeline between readers and trainers.
    pub pipeline: &'a PipelineOptions,
    /// How the dataset is read.
    pub read: &'a ReadOptions,
    /// Following the source as it grows.
    pub follow: &'a FollowOptions,
    /// The rows trained.
    pub select: &'a SelectOptions,
}

impl TrainParts<'_> {
    /// Checks every rule of every part, naming the first option that breaks
    /// one, and builds the job's configuration.
    pub fn config(self, url: String, state: Option<PathBuf>) -> Result<TrainConfig, OptionError> {
        let TrainParts {
            train,
            trainer,
            pipeline,
            read,
            follow,
            select,
        } = self;
        let dataset = read.dataset_options(train.ignore_corrupt_files)?;
        let choice = trainer.trainer()?;
        pipeline.validate()?;
        ranks_divide(pipeline, trainer.device_count())?;
        train.validate()?;
        let follow = follow.config(train.epochs)?;
        select.validate()?;
        rules_of_following(train, pipeline, select, follow.is_some())?;
        let state = state.map(local_state).transpose()?;
        let is_model = matches!(choice, TrainerChoice::Model(_));
        let checkpoint_every = checkpoint_every(train, is_model, state.is_some())?;
        Ok(TrainConfig {
            url,
            dataset,
            devices: trainer.device_count(),
            device_ids: trainer.device_ids.clone(),
            batch_size: pipeline.batch_size,
            batch_bytes: pipeline.batch_bytes,
            epochs: train.epochs,
            trainer: choice,
            columns: train.columns.clone(),
            prefetch: pipeline.prefetch,
            read_ahead: pipeline.read_ahead,
            cache: pipeline.cache_config(),
            read_retry: pipeline.read_retry,
            shuffle_buffer: pipeline.shuffle_buffer,
            shuffle_window: pipeline.global_window(),
            global_batch_size: pipeline.global_batch_size,
            lockstep: pipeline.lockstep,
            drop_last: pipeline.drop_last,
            transform: pipeline.transform(),
            seed: train.seed,
            max_attempts: train.max_attempts,
            retry_failed: train.retry_failed,
            lease_timeout: train.lease_timeout,
            wait_success: train.wait_success,
            writer_pid: train.writer_pid,
            allow_incomplete: train.allow_incomplete,
            allow_empty: train.allow_empty,
            summary_json: train.summary_json.clone(),
            state,
            checkpoint_every,
            progress: !trainer.quiet,
            follow,
            select: select.clone(),
            table: None,
            mix: None,
        })
    }
}

/// `--global-batch-size G` gives each of the `ranks` devices an equal slice
/// of every step: the ranks must divide `G`.
pub(crate) fn ranks_divide(pipeline: &PipelineOptions, ranks: usize) -> Result<(), OptionError> {
    let Some(size) = pipeline.global_batch_size else {
        return Ok(());
    };
    rule(
        size % (ranks.max(1) as u64) == 0,
        "global-batch-size",
        &format!(
            "{size} rows per step cannot be cut into {ranks} equal slices, one per device; \
             make it a multiple of {ranks}"
        ),
    )
}

/// The rules of a followed job (`followed`: `--follow`) with the other parts'
/// options.
fn rules_of_following(
    train: &TrainOptions,
    pipeline: &PipelineOptions,
    select: &SelectOptions,
    followed: bool,
) -> Result<(), OptionError> {
    rule(
        select.limit.is_none() || !followed,
        "limit",
        "a followed job trains what its source commits, as it comes; --limit takes the first rows of one dataset",
    )?;
    rule(
        pipeline.global_window().is_none() || !followed,
        "shuffle",
        "--shuffle global permutes the tasks of an epoch known in advance; a followed job's tasks come as its source commits them",
    )?;
    if followed {
        rule(
            train.wait_success.is_none(),
            "wait-success",
            "--follow takes each partition once it is committed; it does not wait for one _SUCCESS",
        )?;
    }
    Ok(())
}

/// The steps between a built-in model's checkpoints (0: none), checked against
/// the trainer (`is_model`) and the state directory (`has_state`).
fn checkpoint_every(
    train: &TrainOptions,
    is_model: bool,
    has_state: bool,
) -> Result<u64, OptionError> {
    Ok(match train.checkpoint_every {
        Some(steps) => {
            if steps > 0 {
                rule(
                    has_state,
                    "checkpoint-every",
                    "needs --state: the checkpoints are kept in the job's state directory",
                )?;
                rule(
                    is_model,
                    "checkpoint-every",
                    "applies to the built-in models (--model linear|logistic); an exec trainer writes its own checkpoints",
                )?;
            }
            steps
        }
        None if is_model && has_state => DEFAULT_CHECKPOINT_EVERY,
        None => 0,
    })
}

impl TrainOptions {
    /// Checks every rule of these options alone, naming the first option that
    /// breaks one.
    pub fn validate(&self) -> Result<(), OptionError> {
        check_queue(self.epochs, self.max_attempts, self.lease_timeout)?;
        rule(
            self.writer_pid.is_none() || self.wait_success.is_some(),
            "writer-pid",
            "applies to --wait-success (the process writing the output)",
        )?;
        if let Some(columns) = &self.columns {
            check_columns(columns)?;
        }
        Ok(())
    }
}

/// The directory of `train --state`: a path, or the path of a `file://` URL.
/// A store URL is refused (rather than taken for a directory named `s3:`):
/// state on a store is the master's.
fn local_state(state: PathBuf) -> Result<PathBuf, OptionError> {
    let Some(text) = state.to_str() else {
        return Ok(state);
    };
    if let Some(path) = connectors::store::local_path_of(text) {
        return Ok(PathBuf::from(path));
    }
    Err(OptionError {
        option: "state",
        value: Some(state.display().to_string()),
        reason: format!(
            "`sluice train` keeps its state in a local directory (a path or file:// URL); for state on an object store or HDFS run `sluice master DATA --state {}` and `sluice worker --master URL`",
            state.display()
        ),
    })
}

/// A validated `sluice train` job.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// The dataset URL.
    pub url: String,
    /// How to read it.
    pub dataset: DatasetOptions,
    /// Device threads.
    pub devices: usize,
    /// Accelerator ids per device.
    pub device_ids: Option<Vec<String>>,
    /// Rows per batch.
    pub batch_size: usize,
    /// Most bytes per batch, if bounded.
    pub batch_bytes: Option<u64>,
    /// Epochs.
    pub epochs: u32,
    /// The trainer.
    pub trainer: TrainerChoice,
    /// Projected columns.
    pub columns: Option<Vec<String>>,
    /// Tasks read ahead.
    pub prefetch: usize,
    /// Bytes read ahead (`None`: see [`super::pipeline::default_read_ahead`]).
    pub read_ahead: Option<u64>,
    /// The cache of remote files (`--cache`).
    pub cache: Option<super::CacheConfig>,
    /// How long a read that fails for a reason that may pass is tried again
    /// before it counts as a failed attempt (see `worker/read_retry.rs`).
    pub read_retry: Duration,
    /// Shuffle buffer rows.
    pub shuffle_buffer: usize,
    /// `--shuffle global`: the rows of a window (`None`: `--shuffle tasks`).
    pub shuffle_window: Option<u64>,
    /// `--global-batch-size`: rows per step across the devices.
    pub global_batch_size: Option<u64>,
    /// One batch per device per step, the same steps per epoch on every device.
    pub lockstep: bool,
    /// With `lockstep`: drop the epoch's last partial step.
    pub drop_last: bool,
    /// What happens to each batch before its trainer gets it.
    pub transform: crate::trainer::Transform,
    /// Seed.
    pub seed: u64,
    /// Failed reads per task before it is failed.
    pub max_attempts: u32,
    /// Put a resumed job's failed tasks back (`--retry-failed`).
    pub retry_failed: bool,
    /// Lease timeout.
    pub lease_timeout: Duration,
    /// Wait for `_SUCCESS` up to this long.
    pub wait_success: Option<Duration>,
    /// While waiting, fail as soon as this process (the output's writer) has exited.
    pub writer_pid: Option<u32>,
    /// Train on visibly unfinished output.
    pub allow_incomplete: bool,
    /// Output with no data rows is a warning, not an error.
    pub allow_empty: bool,
    /// Summary file.
    pub summary_json: Option<PathBuf>,
    /// Journal directory: a killed run resumes from it.
    pub state: Option<PathBuf>,
    /// Steps between checkpoints of a built-in model, kept in `state` (0: none).
    pub checkpoint_every: u64,
    /// Draw a progress bar.
    pub progress: bool,
    /// Follow the source as it grows (`--follow`).
    pub follow: Option<super::FollowConfig>,
    /// The rows trained (`--split`, `--sample`, `--limit`).
    pub select: SelectOptions,
    /// The table the URL was resolved from, when the source was a table
    /// name: the job's identity, and what a followed job asks about.
    pub table: Option<super::TableRef>,
    /// Several sources mixed by weight (`url` is the first of them).
    pub mix: Option<super::MixConfig>,
}

impl TrainConfig {
    /// This job mixing the sources of `mix` (`None`: one source), checked
    /// against the options a mix cannot go with.
    pub fn with_mix(mut self, mix: Option<super::MixConfig>) -> Result<Self, OptionError> {
        let Some(mix) = mix else {
            return Ok(self);
        };
        rule(
            self.follow.is_none() || mix.epoch_rows.is_none(),
            "epoch-rows",
            "sizes epochs of sources whose rows are known at the start; a followed job grows as its sources commit (leave out --epoch-rows or --follow)",
        )?;
        rule(
            self.select.limit.is_none(),
            "limit",
            "takes the first rows of one dataset; with several sources use --epoch-rows",
        )?;
        rule(
            self.wait_success.is_none(),
            "wait-success",
            "waits for the _SUCCESS of one output; with several sources, start the job once each is complete",
        )?;
        self.mix = Some(mix);
        Ok(self)
    }
}
