//! The job's identity: the options that decide what is trained, recorded
//! with its state (see [`Identity`]).

use super::{PlanError, PlanRequest};
use crate::config::{TrainConfig, TrainerChoice};
use crate::state::identity::{Identity, DATASET};

/// The options of a job trained here that decide what is trained, besides
/// those of its data. Not among them: the `--exec` command line (it often
/// carries paths that differ between runs), devices, prefetch and the
/// output files.
#[derive(Debug, Clone)]
pub struct TrainerIdentity {
    model: &'static str,
    label: Option<String>,
    features: Option<String>,
    batch_size: usize,
    shuffle_buffer: usize,
    shuffle_window: Option<u64>,
    learning_rate: Option<f64>,
    init_model: Option<String>,
}

impl TrainerIdentity {
    /// The trainer's part of the identity of a `sluice train` job.
    pub fn of(config: &TrainConfig) -> TrainerIdentity {
        let model = match &config.trainer {
            TrainerChoice::Model(m) => Some(m),
            _ => None,
        };
        TrainerIdentity {
            model: match &config.trainer {
                TrainerChoice::None => "none",
                TrainerChoice::Exec { .. } => "--exec",
                TrainerChoice::Model(m) if m.logistic => "logistic",
                TrainerChoice::Model(_) => "linear",
            },
            label: model.map(|m| m.label.clone()),
            features: model.map(|m| m.features.join(",")),
            batch_size: config.batch_size,
            shuffle_buffer: config.shuffle_buffer,
            shuffle_window: config.shuffle_window,
            learning_rate: model.and_then(|m| m.learning_rate),
            init_model: model
                .and_then(|m| m.init.as_ref())
                .map(|p| p.display().to_string()),
        }
    }
}

impl PlanRequest {
    /// The options that decide what is trained (see [`Identity`]). The
    /// dataset is named by its table (`CATALOG#TABLE`) when it was given
    /// by name, else by its URL as opened, `opened`.
    pub fn identity(
        &self,
        opened: impl FnOnce() -> Result<String, connectors::Error>,
    ) -> Result<Identity, PlanError> {
        let dataset = match &self.table {
            Some(table) => table.identity.clone(),
            None => opened().map_err(PlanError::read("open the source"))?,
        };
        let trainer = self.trainer.as_ref();
        let mut identity = Identity::default().with(DATASET, dataset);
        if let Some(t) = trainer {
            identity = identity
                .with("model", t.model)
                .with_opt("label", t.label.as_ref())
                .with_opt("features", t.features.as_ref());
        }
        identity = identity
            .with("epochs", self.queue.epochs)
            .with("seed", self.queue.seed);
        if let Some(t) = trainer {
            identity = identity
                .with("batch-size", t.batch_size)
                .with("shuffle-buffer", t.shuffle_buffer)
                .with_opt("shuffle", t.shuffle_window.map(|_| "global"))
                .with_opt("shuffle-window", t.shuffle_window);
        }
        identity = identity
            .with_opt("columns", self.columns.as_ref().map(|c| c.join(",")))
            .with_opt("follow", self.follow.map(|_| "true"));
        if let Some(t) = trainer {
            identity = identity
                .with_opt("learning-rate", t.learning_rate)
                .with_opt("init-model", t.init_model.as_ref());
        }
        let mix = self.mix.as_ref();
        Ok(identity
            .with_select(&self.select)
            .with_dataset(&self.dataset)
            .with_opt("sources", mix.map(|m| m.describe()))
            .with_opt("epoch-rows", mix.and_then(|m| m.epoch_rows))
            .with_opt("source-column", mix.and_then(|m| m.source_column.clone())))
    }
}
