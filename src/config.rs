//! The validated configuration of a training job, built from flags (and later job files).

use std::path::PathBuf;
use std::time::Duration;

use connectors::DatasetOptions;

/// The default of `--read-ahead`: bytes the readers of a worker hold ahead of
/// its trainers, all together.
pub const DEFAULT_READ_AHEAD: &str = "64MiB";

/// Which trainer runs on each device thread.
#[derive(Debug, Clone)]
pub enum TrainerChoice {
    /// Count rows only.
    None,
    /// A built-in linear or logistic model.
    Model(ModelChoice),
    /// An external program speaking the exec protocol.
    Exec {
        /// The shell command.
        command: String,
        /// Restarts allowed per device.
        restarts: u32,
        /// How long a process may hold batches without acknowledging any before it is
        /// killed and restarted (`None`: no limit).
        timeout: Option<Duration>,
        /// More environment variables for the program (`SLUICE_CHECKPOINT_DIR`).
        env: Vec<(String, String)>,
    },
}

/// Settings of a built-in model.
#[derive(Debug, Clone)]
pub struct ModelChoice {
    /// Logistic (else linear).
    pub logistic: bool,
    /// Label column.
    pub label: String,
    /// Feature columns.
    pub features: Vec<String>,
    /// Learning rate override.
    pub learning_rate: Option<f64>,
    /// Where to write the model.
    pub output: Option<PathBuf>,
    /// A model written earlier by `output` to continue training from.
    pub init: Option<PathBuf>,
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
    /// Epochs.
    pub epochs: u32,
    /// The trainer.
    pub trainer: TrainerChoice,
    /// Projected columns.
    pub columns: Option<Vec<String>>,
    /// Tasks read ahead.
    pub prefetch: usize,
    /// Bytes read ahead (see [`DEFAULT_READ_AHEAD`]).
    pub read_ahead: u64,
    /// Shuffle buffer rows.
    pub shuffle_buffer: usize,
    /// One batch per device per step, the same steps per epoch on every device.
    pub lockstep: bool,
    /// With `lockstep`: drop the epoch's last partial step.
    pub drop_last: bool,
    /// What happens to each batch before its trainer gets it.
    pub transform: crate::trainer::Transform,
    /// Seed.
    pub seed: u64,
    /// Attempts per task.
    pub max_attempts: u32,
    /// Lease timeout.
    pub lease_timeout: Duration,
    /// Wait for `_SUCCESS` up to this long.
    pub wait_success: Option<Duration>,
    /// While waiting, fail as soon as this process (the output's writer) has exited.
    pub writer_pid: Option<u32>,
    /// Train on visibly unfinished output.
    pub allow_incomplete: bool,
    /// Summary file.
    pub summary_json: Option<PathBuf>,
    /// Journal directory: a killed run resumes from it.
    pub state: Option<PathBuf>,
    /// Steps between checkpoints of a built-in model, kept in `state` (0: none).
    pub checkpoint_every: u64,
    /// Draw a progress bar.
    pub progress: bool,
    /// Stops the run early (SIGINT/SIGTERM): acknowledged rows are committed
    /// and the tasks handed back, so `--state` resumes where it stopped.
    pub stop: Option<crate::worker::pipeline::Stop>,
}

/// A rule the configuration breaks.
#[derive(Debug, thiserror::Error)]
#[error("invalid option --{option}: {reason}")]
pub struct ConfigError {
    /// The flag.
    pub option: &'static str,
    /// The rule.
    pub reason: String,
}

impl TrainConfig {
    /// Checks every rule, explaining the first one broken.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let rule = |ok: bool, option: &'static str, reason: &str| {
            if ok {
                Ok(())
            } else {
                Err(ConfigError {
                    option,
                    reason: reason.to_string(),
                })
            }
        };
        rule(
            self.devices >= 1,
            "devices",
            "at least one device thread is needed",
        )?;
        rule(
            self.devices <= 1024,
            "devices",
            "at most 1024 device threads",
        )?;
        rule(
            self.batch_size >= 1,
            "batch-size",
            "a batch holds at least one row",
        )?;
        rule(self.epochs >= 1, "epochs", "at least one epoch")?;
        rule(
            self.prefetch >= 1,
            "prefetch",
            "at least one task must be read at a time",
        )?;
        rule(
            self.read_ahead >= 1,
            "read-ahead",
            "the readers need at least one byte",
        )?;
        rule(
            self.max_attempts >= 1,
            "max-attempts",
            "at least one attempt per task",
        )?;
        rule(
            !self.lease_timeout.is_zero(),
            "lease-timeout",
            "must be more than 0",
        )?;
        if let TrainerChoice::Model(m) = &self.trainer {
            rule(!m.label.is_empty(), "label", "name the label column")?;
            rule(
                !m.features.is_empty(),
                "features",
                "name the feature columns, e.g. --features f1,f2",
            )?;
            if let Some(lr) = m.learning_rate {
                rule(
                    lr.is_finite() && lr > 0.0,
                    "learning-rate",
                    "must be a positive number",
                )?;
            }
        }
        if self.checkpoint_every > 0 {
            rule(
                self.state.is_some(),
                "checkpoint-every",
                "needs --state: the checkpoints are kept in the job's state directory",
            )?;
            rule(
                matches!(self.trainer, TrainerChoice::Model(_)),
                "checkpoint-every",
                "applies to the built-in models (--model linear|logistic); an exec trainer writes its own checkpoints",
            )?;
        }
        rule(
            self.lockstep || !self.drop_last,
            "drop-last",
            "applies to --lockstep (the epoch's last partial step)",
        )?;
        if let Some(columns) = &self.columns {
            check_columns(columns)?;
        }
        if let Some(ids) = &self.device_ids {
            rule(
                !ids.is_empty() && ids.iter().all(|i| !i.is_empty()),
                "device-ids",
                "list one id per device, e.g. 0,1",
            )?;
        }
        Ok(())
    }
}

/// Refuses a `--columns` list that names a column twice: the trainer would be
/// handed two fields of one name.
pub fn check_columns(columns: &[String]) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    match columns.iter().find(|c| !seen.insert(c.as_str())) {
        Some(twice) => Err(ConfigError {
            option: "columns",
            reason: format!("column `{twice}` is listed twice"),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_listed_twice_is_named() {
        let cols = |s: &str| s.split(',').map(str::to_string).collect::<Vec<_>>();
        assert!(check_columns(&cols("id,x1,label")).is_ok());
        let err = check_columns(&cols("id,x1,id")).expect_err("id twice");
        assert_eq!(
            err.to_string(),
            "invalid option --columns: column `id` is listed twice"
        );
    }
}
