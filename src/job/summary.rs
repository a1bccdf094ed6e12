//! The job summary: what `--summary-json` writes and the last lines printed.

use serde::Serialize;

use crate::epoch::Epoch;
use crate::trainer::TrainerReport;

/// A task given up, named by its file.
#[derive(Debug, Clone, Serialize)]
pub struct FailedTask {
    /// The file of the task's split.
    pub file: String,
    /// Epoch (JSON counts from 1).
    #[serde(with = "crate::epoch::one_based")]
    pub epoch: Epoch,
    /// Split index.
    pub split: u32,
    /// Attempts made.
    pub attempts: u32,
    /// Why the last attempt failed.
    pub reason: String,
}

impl std::fmt::Display for FailedTask {
    /// `FILE (epoch N): REASON`, with epochs counted from 1 as everywhere.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (epoch {}): {}", self.file, self.epoch, self.reason)
    }
}

/// The summary of a training run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The dataset.
    pub url: String,
    /// What the cache of remote files did (`--cache`): bytes served from
    /// it, bytes fetched from the store through it, bytes it holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<connectors::cache::CacheStats>,
    /// Rows acknowledged by trainers, over all epochs.
    pub rows: u64,
    /// Batches acknowledged.
    pub batches: u64,
    /// Rows of epochs' last partial steps dropped by `--drop-last`: consumed
    /// (committed) without reaching a trainer; not counted in `rows`.
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_rows: u64,
    /// Epochs run.
    pub epochs: u32,
    /// Device threads.
    pub devices: usize,
    /// Tasks done over all epochs.
    pub tasks_done: u64,
    /// Tasks given up.
    pub tasks_failed: Vec<FailedTask>,
    /// Wall-clock seconds of training (a wait for `_SUCCESS` before it not counted).
    pub seconds: f64,
    /// Rows per second of training.
    pub rows_per_second: f64,
    /// Seconds waited for `_SUCCESS` before training (`--wait-success`).
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub waited_seconds: f64,
    /// Mean training loss per epoch (built-in models).
    pub loss: Vec<Option<f64>>,
    /// Accuracy per epoch (logistic model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<Vec<Option<f64>>>,
    /// The checkpoint a resumed run started from (jobs whose trainers keep
    /// checkpoints). `rows` and `batches` count what this run trained; the
    /// checkpoint holds the rest, and a built-in model's `loss`, `accuracy` and
    /// `trainer.epochs` cover both: each row once per epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed: Option<Resumed>,
    /// The Delta or Iceberg table version trained, when the dataset is a table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<connectors::TableInfo>,
    /// Rows handed to a trainer a second time in this run, and why.
    pub served_again: ServedAgain,
    /// Per-epoch statistics of the trainers.
    pub trainer: TrainerReport,
    /// What `--filter` skipped and kept in this process (row groups pruned
    /// on their statistics, rows skipped on the page index, rows dropped by
    /// the row-level filter), when the job has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<connectors::row_filter::FilterCounts>,
    /// The sources of a job that mixes several, each with the rows this run
    /// trained of it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceRows>,
}

/// One source of a mixed job in the summary.
#[derive(Debug, Clone, Serialize)]
pub struct SourceRows {
    /// Its name (`sluice.source`, `--source-column`).
    pub name: String,
    /// Its URL.
    pub url: String,
    /// Its weight.
    pub weight: f64,
    /// Rows acknowledged of it in this run.
    pub rows: u64,
}

/// The sources of `mix` with the rows trained of each (`rows`, by index).
pub fn source_rows(mix: Option<&crate::config::MixConfig>, rows: &[u64]) -> Vec<SourceRows> {
    let Some(mix) = mix else {
        return Vec::new();
    };
    mix.sources
        .iter()
        .enumerate()
        .map(|(i, s)| SourceRows {
            name: s.name.clone(),
            url: s.url.clone(),
            weight: s.weight,
            rows: rows.get(i).copied().unwrap_or(0),
        })
        .collect()
}

/// Rows a run handed to a trainer a second time, by cause (see the README's
/// "Exactly once"). `rows` is their sum.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServedAgain {
    /// All of them.
    pub rows: u64,
    /// Acknowledged after the checkpoint a trainer that died restarted from.
    pub trainer_restarts: u64,
    /// Acknowledged by the stopped run after the job's last complete
    /// checkpoint, which this run resumed from.
    pub checkpoint_rewind: u64,
    /// The run resumed a stopped one: besides the rows above, the batches
    /// that run's trainers held unacknowledged (at most the exec window, 4
    /// per device) were served again; no record says which.
    pub after_stop: bool,
}

impl ServedAgain {
    /// What a run served again, from its parts.
    pub fn new(trainer_restarts: u64, checkpoint_rewind: u64, after_stop: bool) -> ServedAgain {
        ServedAgain {
            rows: trainer_restarts.saturating_add(checkpoint_rewind),
            trainer_restarts,
            checkpoint_rewind,
            after_stop,
        }
    }

    /// "N rows served again (why)", for the summary line.
    pub fn text(&self) -> String {
        let mut why = Vec::new();
        if self.trainer_restarts > 0 {
            why.push(format!(
                "{} acknowledged after the checkpoint a restarted trainer loaded",
                self.trainer_restarts
            ));
        }
        if self.checkpoint_rewind > 0 {
            why.push(format!(
                "{} acknowledged after the last complete checkpoint",
                self.checkpoint_rewind
            ));
        }
        let mut s = format!("{} rows served again", self.rows);
        if !why.is_empty() {
            s.push_str(&format!(" ({})", why.join(", ")));
        }
        if self.after_stop {
            s.push_str(
                ", besides the batches the stopped run's trainers held unacknowledged (at most 4 per device)",
            );
        }
        s
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_f64(n: &f64) -> bool {
    *n == 0.0
}

/// The checkpoint a resumed run started from.
#[derive(Debug, Clone, Serialize)]
pub struct Resumed {
    /// Its ID.
    pub checkpoint: String,
    /// Rows in it, over all epochs.
    pub rows: u64,
}

impl Summary {
    /// One line for people.
    pub fn line(&self) -> String {
        let mut s = format!(
            "trained {} rows in {} batches over {} epoch(s) on {} device(s) in {:.1}s ({:.0} rows/s){}; {} tasks done, {} failed",
            self.rows,
            self.batches,
            self.epochs,
            self.devices,
            self.seconds,
            self.rows_per_second,
            if self.waited_seconds >= 0.05 {
                format!(" after waiting {:.1}s for its data", self.waited_seconds)
            } else {
                String::new()
            },
            self.tasks_done,
            self.tasks_failed.len()
        );
        let losses: Vec<String> = self
            .loss
            .iter()
            .flatten()
            .map(|l| format!("{l:.4}"))
            .collect();
        if !losses.is_empty() {
            s.push_str(&format!("; loss per epoch: {}", losses.join(" ")));
        }
        if let Some(acc) = &self.accuracy {
            let accs: Vec<String> = acc.iter().flatten().map(|a| format!("{a:.3}")).collect();
            s.push_str(&format!("; accuracy: {}", accs.join(" ")));
        }
        if let Some(c) = &self.cache {
            s.push_str(&format!(
                "; cache: {} bytes hit, {} fetched, {} held",
                c.hit_bytes, c.fetched_bytes, c.bytes
            ));
        }
        if self.dropped_rows > 0 {
            s.push_str(&format!(
                "; {} rows dropped (--drop-last)",
                self.dropped_rows
            ));
        }
        if let Some(r) = &self.resumed {
            s.push_str(&format!(
                "; resumed from checkpoint {} holding {} rows",
                r.checkpoint, r.rows
            ));
        }
        s.push_str("; ");
        s.push_str(&self.served_again.text());
        s
    }

    /// Writes [`Summary::line`] to stderr: plain on a terminal, a log line
    /// elsewhere (with the figures as fields in JSON).
    pub fn log(&self) {
        if crate::logging::settings().plain_results() {
            eprintln!("{}", self.line());
            return;
        }
        tracing::info!(
            target: crate::logging::RESULT,
            rows = self.rows,
            batches = self.batches,
            epochs = self.epochs,
            seconds = self.seconds,
            rows_per_second = self.rows_per_second,
            waited_seconds = self.waited_seconds,
            tasks_done = self.tasks_done,
            tasks_failed = self.tasks_failed.len() as u64,
            "{}",
            self.line()
        );
    }
}
