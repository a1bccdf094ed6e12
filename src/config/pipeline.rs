//! A worker's pipeline: how rows are batched, how far readers run ahead, and
//! what happens to each batch before its trainer gets it.

use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Deserialize;

use super::heading;
use super::value::{form, parse_duration, parse_size};
use super::{rule, OptionError};
use crate::trainer::{HashBuckets, Transform};

/// The default of `--read-ahead` (64 MiB): bytes the readers of a worker hold
/// ahead of its trainers, all together.
const DEFAULT_READ_AHEAD_BYTES: u64 = 64 * 1024 * 1024;

/// The most the default read-ahead grows to on a remote store.
const REMOTE_READ_AHEAD_MAX: u64 = 256 * 1024 * 1024;

/// Reads a worker keeps leased beyond one per device on a remote store
/// (within `--prefetch`): while every device decodes a task, the next two
/// tasks' fetches are on their way. One was not enough at 50 ms a request:
/// a 26 MB row group took about as long to arrive as a device took to
/// decode one, so devices waited on every other task.
pub const REMOTE_EXTRA_READS: usize = 2;

/// The read-ahead when `--read-ahead` is not given: [`DEFAULT_READ_AHEAD_BYTES`];
/// from a remote store, at least enough for [`REMOTE_EXTRA_READS`] splits
/// more than the devices (`largest_split` bytes each), up to 256 MiB. Each
/// device then decodes a task while the next tasks' fetches are already
/// under way, so that the store's time to first byte is hidden, not paid
/// once per task.
pub fn default_read_ahead(remote: bool, devices: usize, largest_split: u64) -> u64 {
    if !remote {
        return DEFAULT_READ_AHEAD_BYTES;
    }
    let wanted = largest_split.saturating_mul((devices.max(1) + REMOTE_EXTRA_READS) as u64);
    wanted.clamp(DEFAULT_READ_AHEAD_BYTES, REMOTE_READ_AHEAD_MAX)
}

/// The default of `--shuffle-window`: rows of one window of `--shuffle global`.
pub const DEFAULT_SHUFFLE_WINDOW: u64 = 262_144;

/// The order rows reach the trainers in (`--shuffle`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShuffleMode {
    /// Tasks in a seeded order per epoch, rows in their order within a task
    /// (or through `--shuffle-buffer`); the order across devices depends on
    /// timing.
    #[default]
    Tasks,
    /// Rows permuted across tasks within windows of `--shuffle-window` rows,
    /// seeded by `--seed`: the same batches in the same order on each device
    /// for the same seed, data and devices, and a resumed run goes on with
    /// the same sequence.
    Global,
}

/// The default of `--cache-size`.
pub const DEFAULT_CACHE_SIZE: &str = "10GiB";

/// A cache of remote files on local disk (`--cache`, `--cache-size`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// The directory.
    pub dir: std::path::PathBuf,
    /// Most bytes it holds.
    pub size: u64,
}

/// The default of `--read-retry`.
pub const DEFAULT_READ_RETRY: Duration = Duration::from_secs(120);

/// The pipeline between the readers and the trainers; shared by `train` and `worker`.
#[derive(Debug, Clone, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct PipelineOptions {
    /// Rows per batch handed to a trainer (only the last batch of an epoch may be short).
    #[arg(long, default_value_t = 1024, help = "Rows per batch handed to a trainer", long_help, help_heading = heading::TRAINING)]
    pub batch_size: usize,
    /// Most bytes of a batch handed to a trainer (e.g. 16MiB): a batch ends at whichever of --batch-size rows and this many bytes comes first, so that rows of large values (audio, images) bound memory by bytes, not rows. Readers cut what they decode the same way (Parquet by its row groups' sizes, SequenceFiles by their records). Rows count by their Arrow size; a batch holds at least one row. Not with --lockstep or --shuffle global, whose batches are --batch-size rows.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = "Most bytes per batch (cut at rows or bytes, first)", long_help, help_heading = heading::TRAINING, hide_short_help = true)]
    #[serde(deserialize_with = "form::some_size")]
    pub batch_bytes: Option<u64>,
    /// Tasks leased and read ahead of the trainers.
    #[arg(long, default_value_t = 4, help = "Tasks leased and read ahead", long_help, help_heading = heading::READING)]
    pub prefetch: usize,
    /// Bytes the readers may hold ahead of the trainers, all together (e.g. 128MiB): row groups fetched and not yet decoded, decoded batches not yet batched. A row group larger than this is read alone. Default 64MiB; from a remote store (S3, GCS, Azure, HDFS), enough for two splits more than the devices, up to 256MiB, so that the next tasks are fetched while every device decodes.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = "Bytes read ahead of the trainers [default: 64MiB; remote: more]", long_help, help_heading = heading::READING)]
    #[serde(deserialize_with = "form::some_size")]
    pub read_ahead: Option<u64>,
    /// How long a read that fails for a reason that may pass (the file not found or refused, a connection error or timeout, HTTP 5xx or 429 from the store) is tried again, from the row it failed at, after jittered waits (0.5 s doubling up to 30 s), before it counts as a failed attempt of its task; `0` counts it at once. Corrupt data fails at once.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration, help = "How long a read that may pass is retried", long_help, help_heading = heading::READING, hide_short_help = true)]
    #[serde(deserialize_with = "form::duration")]
    pub read_retry: Duration,
    /// Rows held in a shuffle buffer (0: rows keep their order within a task).
    #[arg(long, default_value_t = 0, help = "Rows in a shuffle buffer (0: none)", long_help, help_heading = heading::TRAINING, hide_short_help = true)]
    pub shuffle_buffer: usize,
    /// `tasks`: tasks in a seeded order per epoch, rows in order within each (or through --shuffle-buffer). `global`: with --seed, a deterministic, resumable order: the epoch's tasks, in the seeded order, are taken in windows of whole tasks (--shuffle-window), each window's rows permuted by (seed, epoch, window) and cut into batches, the i-th batch of window w going to device (w + i) mod --devices; the same seed, data and devices give every device the same batches in the same order, and a run resumed from --state goes on with the same sequence (each window's last batch may be short). A window is read whole before its first batch goes out: its rows are held in memory. With --global-batch-size G the order is cut into steps of G rows instead (the rows cut into lanes, each step G/L rows of every lane), the same global batches for any number of devices. Deterministic for one worker (`sluice train`), and for the workers of `sluice master --global-batch-size G --world-size W`; without those, the workers of a master each permute the windows of the tasks they lease.
    #[arg(long, value_enum, default_value_t = ShuffleMode::Tasks, help = "Row order: tasks or global", long_help, hide_possible_values = true, help_heading = heading::TRAINING)]
    pub shuffle: ShuffleMode,
    /// With --shuffle global: rows of one window (at least one whole task; a task whose row count its files do not record is a window of its own). The shuffle's memory bound: the rows of up to two windows are held, the one whose batches go out and the next, read meanwhile.
    #[arg(long, value_name = "ROWS", default_value_t = DEFAULT_SHUFFLE_WINDOW, help = "Rows per window of --shuffle global", long_help, help_heading = heading::TRAINING, hide_short_help = true)]
    pub shuffle_window: u64,
    /// With --shuffle global: step k of an epoch is G rows of the epoch's order, and each of the W devices (ranks) gets the r-th of W equal slices of it (G/W rows; --batch-size is not used). Where every row is known before the job starts, its rows are cut into L lanes of equal rows (L divides G: 24 for G = 1536), each permuted in windows of --shuffle-window / L rows, and step k is rows [kG/L, (k+1)G/L) of every lane. The order, and so every global batch, depends only on --seed, the epoch and the data, never on the number of devices: a job resumed with other --devices goes on with the same global batches. W must divide G. The epoch's last step holds the rows left, split as evenly as possible (--drop-last drops it).
    #[arg(long, value_name = "G", help = "Rows per step across all devices (--shuffle global)", long_help, help_heading = heading::TRAINING)]
    pub global_batch_size: Option<u64>,
    /// Every step gives each device one batch, and every device the same number of steps per epoch (the epoch's last partial step split evenly); exec trainers get RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for torch.distributed, and are not restarted (a device process that dies stops the run).
    #[arg(long, help = "One batch per device per step (torch.distributed)", long_help, help_heading = heading::TRAINING)]
    pub lockstep: bool,
    /// With --lockstep: drop the epoch's last partial step instead of splitting it; its rows count as consumed (committed) and the summary counts them.
    #[arg(long, requires = "lockstep", help = "With --lockstep: drop the last partial step", long_help, help_heading = heading::TRAINING, hide_short_help = true)]
    pub drop_last: bool,
    /// Hash categorical columns into int64 buckets before batches reach the trainer, with the hash of `sluice_trainer.bucket_of`: `N` hashes every string, binary and dictionary column into [0, N); `COL=N,COL=N` hashes exactly those columns (integer ones too). A Python trainer then wraps them as tensors without work per row.
    #[arg(long, value_name = "N|COL=N,...", value_parser = super::value::parse_with::<HashBuckets>, help = "Hash categorical columns into int64 buckets", long_help, help_heading = heading::TRAINERS)]
    #[serde(deserialize_with = "form::some_parsed")]
    pub hash_buckets: Option<HashBuckets>,
    /// Replace nulls of integer and floating point columns with this value before batches reach the trainer, so they wrap as numpy arrays or tensors without a copy.
    #[arg(long, value_name = "V", allow_negative_numbers = true, help = "Replace nulls of numeric columns with V", long_help, help_heading = heading::TRAINERS)]
    pub fill_nulls: Option<f64>,
    /// Hand string and binary columns to exec trainers as Arrow views (`Utf8View`, `BinaryView`), the form they are read in, instead of `Utf8` and `Binary`: no copy of every value per batch. For trainers whose Arrow reads views (pyarrow 16 or later); `sluice_trainer.Dataset` asks for them itself when its pyarrow can. Built-in models take views always.
    #[arg(long, help = "Hand strings to exec trainers as Arrow views", long_help, help_heading = heading::TRAINERS, hide_short_help = true)]
    pub string_view: bool,
    /// Keep what is read from a remote store (S3, GCS, Azure, HDFS) in this local directory, so that later epochs (and later runs) read it from disk: whole files, kept under their path, size and entity tag or modification time (a rewritten file is fetched again), every block checked against a checksum when read (a damaged entry is fetched again). Kept while they fit in --cache-size; the job's files are never evicted for each other, so each epoch after the first fetches only what did not fit. Workers on one host may share the directory. A local source is never cached.
    #[arg(long, value_name = "DIR", help = "Keep remote files in this local directory for later epochs", long_help, help_heading = heading::READING)]
    pub cache: Option<std::path::PathBuf>,
    /// Most bytes the --cache directory holds (e.g. 512MiB, 2GiB).
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_CACHE_SIZE, value_parser = parse_size, help = "Most bytes the --cache directory holds", long_help, help_heading = heading::READING, hide_short_help = true)]
    #[serde(deserialize_with = "form::size")]
    pub cache_size: u64,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            batch_size: 1024,
            batch_bytes: None,
            prefetch: 4,
            read_ahead: None,
            read_retry: DEFAULT_READ_RETRY,
            shuffle_buffer: 0,
            shuffle: ShuffleMode::Tasks,
            shuffle_window: DEFAULT_SHUFFLE_WINDOW,
            global_batch_size: None,
            lockstep: false,
            drop_last: false,
            hash_buckets: None,
            fill_nulls: None,
            string_view: false,
            cache: None,
            cache_size: 10 * 1024 * 1024 * 1024,
        }
    }
}

/// A step of `--global-batch-size` and a window of `--shuffle-window` hold
/// at least one row (`sluice train`, `sluice worker`, `sluice master`).
pub(crate) fn check_rows(global_batch_size: Option<u64>, window: u64) -> Result<(), OptionError> {
    rule(
        window >= 1,
        "shuffle-window",
        "a window holds at least one row",
    )?;
    rule(
        global_batch_size.is_none_or(|g| g >= 1),
        "global-batch-size",
        "a step holds at least one row",
    )
}

impl PipelineOptions {
    /// Checks every rule, naming the first option that breaks one.
    pub fn validate(&self) -> Result<(), OptionError> {
        rule(
            self.batch_size >= 1,
            "batch-size",
            "a batch holds at least one row",
        )?;
        rule(
            self.batch_bytes.is_none_or(|bytes| bytes >= 1),
            "batch-bytes",
            "a batch holds at least one byte",
        )?;
        rule(
            self.batch_bytes.is_none() || !self.lockstep,
            "batch-bytes",
            "--lockstep gives every device batches of --batch-size rows; set --batch-size for the bytes you want",
        )?;
        rule(
            self.batch_bytes.is_none() || self.shuffle != ShuffleMode::Global,
            "batch-bytes",
            "--shuffle global cuts its windows into batches of --batch-size rows; set --batch-size for the bytes you want",
        )?;
        rule(
            self.prefetch >= 1,
            "prefetch",
            "at least one task must be read at a time",
        )?;
        rule(
            self.read_ahead.is_none_or(|bytes| bytes >= 1),
            "read-ahead",
            "the readers need at least one byte",
        )?;
        check_rows(self.global_batch_size, self.shuffle_window)?;
        rule(
            self.shuffle != ShuffleMode::Global || self.shuffle_buffer == 0,
            "shuffle-buffer",
            "--shuffle global permutes whole windows; a shuffle buffer applies to --shuffle tasks",
        )?;
        rule(
            self.global_batch_size.is_none() || self.shuffle == ShuffleMode::Global,
            "global-batch-size",
            "it cuts the order of --shuffle global into steps; add --shuffle global",
        )?;
        rule(
            self.lockstep || !self.drop_last,
            "drop-last",
            "applies to --lockstep (the epoch's last partial step)",
        )?;
        rule(
            self.cache_size >= 1,
            "cache-size",
            "the cache needs at least one byte",
        )
    }

    /// The cache these choose (`--cache`, `--cache-size`), if any.
    pub fn cache_config(&self) -> Option<CacheConfig> {
        self.cache.as_ref().map(|dir| CacheConfig {
            dir: dir.clone(),
            size: self.cache_size,
        })
    }

    /// The rows of a window of `--shuffle global`, `None` for `--shuffle tasks`.
    pub fn global_window(&self) -> Option<u64> {
        (self.shuffle == ShuffleMode::Global).then_some(self.shuffle_window)
    }

    /// The transform these choose (`--hash-buckets`, `--fill-nulls`).
    pub fn transform(&self) -> Transform {
        Transform {
            hash_buckets: self.hash_buckets.clone().unwrap_or_default(),
            fill_nulls: self.fill_nulls,
            string_view: self.string_view,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_global_shuffle_takes_no_buffer_and_a_window_of_rows() {
        let global = PipelineOptions {
            shuffle: ShuffleMode::Global,
            ..PipelineOptions::default()
        };
        assert!(global.validate().is_ok());
        assert_eq!(global.global_window(), Some(DEFAULT_SHUFFLE_WINDOW));
        assert_eq!(PipelineOptions::default().global_window(), None);
        let buffered = PipelineOptions {
            shuffle_buffer: 100,
            ..global.clone()
        };
        assert_eq!(
            buffered.validate().map_err(|e| e.option),
            Err("shuffle-buffer")
        );
        let empty = PipelineOptions {
            shuffle_window: 0,
            ..global
        };
        assert_eq!(
            empty.validate().map_err(|e| e.option),
            Err("shuffle-window")
        );
    }

    #[test]
    fn the_default_read_ahead_grows_on_remote_stores_only_and_within_a_bound() {
        const MIB: u64 = 1024 * 1024;
        // A local source: 64 MiB whatever its files.
        assert_eq!(default_read_ahead(false, 2, 26 * MIB), 64 * MIB);
        // Remote: two splits more than the devices, at least the local default...
        assert_eq!(default_read_ahead(true, 2, 40 * MIB), 160 * MIB);
        assert_eq!(default_read_ahead(true, 2, MIB), 64 * MIB);
        // ...and never above 256 MiB, however large the files.
        assert_eq!(default_read_ahead(true, 8, 1024 * MIB), 256 * MIB);
        assert_eq!(default_read_ahead(true, 0, u64::MAX), 256 * MIB);
    }

    #[test]
    fn an_explicit_read_ahead_is_kept_and_zero_is_refused() {
        let set = PipelineOptions {
            read_ahead: Some(16 * 1024 * 1024),
            ..PipelineOptions::default()
        };
        assert!(set.validate().is_ok());
        assert_eq!(PipelineOptions::default().read_ahead, None);
        let zero = PipelineOptions {
            read_ahead: Some(0),
            ..PipelineOptions::default()
        };
        assert_eq!(zero.validate().map_err(|e| e.option), Err("read-ahead"));
    }
}
