//! The device threads and the trainer each of them runs.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Deserialize;

use super::heading;
use super::value::{form, parse_timeout};
use super::{rule, OptionError};
use crate::trainer::{Attach, DEFAULT_MAX_RESTARTS, DEFAULT_TRAINER_TIMEOUT};

/// The built-in models.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// Consume and count batches (dry runs, benchmarks).
    #[default]
    None,
    /// Linear regression (squared loss).
    Linear,
    /// Logistic regression (log loss, accuracy).
    Logistic,
}

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
        /// `--attach`: the program is the process that started sluice.
        attach: Option<Attach>,
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

/// The device threads and their trainer; shared by `train` and `worker`.
#[derive(Debug, Clone, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct TrainerOptions {
    /// Device threads, each owning one trainer.
    #[arg(long, default_value_t = 1, help_heading = heading::TRAINING)]
    pub devices: usize,
    /// Accelerator ids, one per device thread (sets CUDA_VISIBLE_DEVICES for exec trainers); implies --devices.
    #[arg(long, value_delimiter = ',', help = "Accelerator ids, one per device thread", long_help, help_heading = heading::TRAINING)]
    #[serde(deserialize_with = "form::some_list")]
    pub device_ids: Option<Vec<String>>,
    /// Built-in model; ignored when --exec is given.
    #[arg(long, value_enum, default_value_t = ModelKind::None, help = "Built-in model", long_help, help_heading = heading::TRAINING)]
    pub model: ModelKind,
    /// Label column of the linear and logistic models.
    #[arg(long, help_heading = heading::TRAINING)]
    pub label: Option<String>,
    /// Feature columns (numeric or fixed-size lists), comma-separated.
    #[arg(long, value_delimiter = ',', help = "Feature columns of the built-in models (a,b,c)", long_help, help_heading = heading::TRAINING)]
    #[serde(deserialize_with = "form::some_list")]
    pub features: Option<Vec<String>>,
    /// Learning rate of the built-in models.
    #[arg(long, help_heading = heading::TRAINING, hide_short_help = true)]
    pub learning_rate: Option<f64>,
    /// Write the trained model here as JSON.
    #[arg(long, help_heading = heading::OUTPUT)]
    pub output: Option<PathBuf>,
    /// Continue training a model written earlier by --output (its weights, feature scaling and optimizer state).
    #[arg(long, value_name = "FILE", help = "Continue a model written earlier by --output", long_help, help_heading = heading::TRAINING, hide_short_help = true)]
    pub init_model: Option<PathBuf>,
    /// Train with an external program: `sh -c CMD` per device, fed an Arrow IPC stream on stdin, acknowledging each applied batch with a line `ack` on fd $SLUICE_ACK_FD.
    #[arg(long, value_name = "CMD", help = "Train with a program fed Arrow IPC on stdin", long_help, help_heading = heading::TRAINERS)]
    pub exec: Option<String>,
    /// Be the child of the trainer (what `sluice_trainer.Dataset` starts): write the Arrow stream of the one device to descriptor DATA_FD, read its ack lines from ACK_FD, and put batches in the memory file SHM_FD when it asks; sluice dies with the process that started it.
    #[arg(long, value_name = "DATA_FD,ACK_FD[,SHM_FD]", value_parser = super::value::parse_with::<Attach>, conflicts_with = "exec", help = "Be the child of a trainer (sluice_trainer.Dataset)", long_help, help_heading = heading::TRAINERS, hide_short_help = true)]
    #[serde(skip)]
    pub attach: Option<Attach>,
    /// Restarts allowed per device when the exec trainer dies.
    #[arg(long, default_value_t = DEFAULT_MAX_RESTARTS, help = "Restarts allowed per device's trainer", long_help, help_heading = heading::TRAINERS)]
    pub exec_restarts: u32,
    /// An exec trainer holding batches that sends no ack for this long is killed (its process group) and restarted, which counts as a restart; `off` (or 0) waits forever.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_timeout, help = "Restart a trainer that acks nothing this long", long_help, help_heading = heading::TRAINERS)]
    #[serde(deserialize_with = "form::timeout")]
    pub trainer_timeout: Duration,
    /// No progress bar, nor the progress lines that take its place where stderr is not a terminal.
    #[arg(long, short, help = "No progress bar, no progress lines", long_help, help_heading = heading::LOGGING)]
    pub quiet: bool,
}

impl Default for TrainerOptions {
    fn default() -> Self {
        TrainerOptions {
            devices: 1,
            device_ids: None,
            model: ModelKind::None,
            label: None,
            features: None,
            learning_rate: None,
            output: None,
            init_model: None,
            exec: None,
            attach: None,
            exec_restarts: DEFAULT_MAX_RESTARTS,
            trainer_timeout: DEFAULT_TRAINER_TIMEOUT,
            quiet: false,
        }
    }
}

impl TrainerOptions {
    /// Checks every rule, naming the first option that breaks one.
    pub fn validate(&self) -> Result<(), OptionError> {
        let devices = self.device_count();
        rule(
            devices >= 1,
            "devices",
            "at least one device thread is needed",
        )?;
        rule(devices <= 1024, "devices", "at most 1024 device threads")?;
        if let Some(ids) = &self.device_ids {
            rule(
                !ids.is_empty() && ids.iter().all(|i| !i.is_empty()),
                "device-ids",
                "list one id per device, e.g. 0,1",
            )?;
        }
        if self.attach.is_some() {
            rule(
                devices == 1,
                "attach",
                "the process that started sluice is the trainer of one device",
            )?;
            rule(
                self.model == ModelKind::None,
                "attach",
                "the process that started sluice is the trainer; --model does not apply",
            )?;
        }
        let builtin = self.exec.is_none() && self.model != ModelKind::None;
        rule(
            builtin || self.output.is_none(),
            "output",
            "writes the built-in model (--model linear|logistic); an --exec trainer writes its own model",
        )?;
        rule(
            builtin || self.init_model.is_none(),
            "init-model",
            "continues the built-in model (--model linear|logistic); an --exec trainer loads its own model",
        )?;
        if self.exec.is_none() && self.model != ModelKind::None {
            let model = match self.model {
                ModelKind::Logistic => "logistic",
                _ => "linear",
            };
            rule(
                self.label.as_deref().is_some_and(|l| !l.is_empty()),
                "label",
                &format!("--model {model} needs the label column: --label COL"),
            )?;
            rule(
                self.features
                    .as_ref()
                    .is_some_and(|f| !f.is_empty() && f.iter().all(|c| !c.trim().is_empty())),
                "features",
                "name the feature columns, e.g. --features f1,f2 (no empty name)",
            )?;
            if let Some(lr) = self.learning_rate {
                rule(
                    lr.is_finite() && lr > 0.0,
                    "learning-rate",
                    "must be a positive number",
                )?;
            }
        }
        Ok(())
    }

    /// The trainer these choose, once valid.
    pub fn trainer(&self) -> Result<TrainerChoice, OptionError> {
        self.validate()?;
        let timeout = (!self.trainer_timeout.is_zero()).then_some(self.trainer_timeout);
        if let Some(attach) = self.attach {
            return Ok(TrainerChoice::Exec {
                command: "the process that started sluice (--attach)".to_string(),
                restarts: 0,
                timeout,
                env: Vec::new(),
                attach: Some(attach),
            });
        }
        Ok(match (&self.exec, self.model) {
            (Some(cmd), _) => TrainerChoice::Exec {
                command: cmd.clone(),
                restarts: self.exec_restarts,
                timeout,
                env: Vec::new(),
                attach: None,
            },
            (None, ModelKind::None) => TrainerChoice::None,
            (None, kind) => TrainerChoice::Model(ModelChoice {
                logistic: kind == ModelKind::Logistic,
                label: self.label.clone().unwrap_or_default(),
                features: self.features.clone().unwrap_or_default(),
                learning_rate: self.learning_rate,
                output: self.output.clone(),
                init: self.init_model.clone(),
            }),
        })
    }

    /// Device threads, from --device-ids when given.
    pub fn device_count(&self) -> usize {
        self.device_ids
            .as_ref()
            .map(Vec::len)
            .unwrap_or(self.devices)
    }
}
