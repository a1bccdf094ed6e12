//! The math of the built-in linear and logistic regression models, trained with Adam.
//!
//! Each batch yields a [`BatchGradient`]: the sum over its rows of the loss gradient,
//! computed with the model as it was before the step. The [`LinearModel`] is the
//! all-reduce's [`Reduce`]r: it adds the gradients of one step, divides by the step's
//! rows (so batches weigh by their rows) and applies one Adam update.
//!
//! Robust to feature scale without tuning: the model trains on standardized features,
//! `(x - mean) / std` with the running mean and standard deviation of every row seen so
//! far (see [`super::scaling`]; the first step standardizes each batch by itself), and
//! exports weights and bias over the raw features. The optimizer is Adam (β₁ = 0.9,
//! β₂ = 0.999, ε = 1e-8) with a default learning rate of [`DEFAULT_LEARNING_RATE`];
//! Adam scales each weight's step by the running size of its gradient, so the loss's
//! scale (the label's scale, for linear regression) needs no tuning either.
//!
//! Losses: linear regression minimizes half the mean squared error; logistic regression
//! the mean log loss, with a label above 0.5 counting as 1 and a prediction of at least
//! 0.5 as class 1 for accuracy.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::allreduce::Reduce;
use super::features::{FeatureLayout, Rows};
use super::scaling::{Moments, Scaling};
use crate::epoch::Epoch;
use crate::trainer::stats::{EpochLog, EpochTotals};
use crate::trainer::TrainerError;

/// Learning rate used when none is given.
pub const DEFAULT_LEARNING_RATE: f64 = 0.05;

const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPSILON: f64 = 1e-8;

/// Which linear model to train.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinearKind {
    /// Least squares regression.
    Linear,
    /// Binary classification with the logistic function.
    Logistic,
}

impl LinearKind {
    /// The model's name as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            LinearKind::Linear => "linear",
            LinearKind::Logistic => "logistic",
        }
    }

    /// Per-row loss and derivative of the loss by the linear score `z`.
    fn loss_and_slope(self, z: f64, label: f64) -> (f64, f64) {
        match self {
            LinearKind::Linear => {
                let error = z - label;
                (error * error / 2.0, error)
            }
            LinearKind::Logistic => {
                let y = if label > 0.5 { 1.0 } else { 0.0 };
                // log(1 + e^z) - y z, written to neither overflow nor lose precision.
                let softplus = z.max(0.0) + (-z.abs()).exp().ln_1p();
                (softplus - y * z, sigmoid(z) - y)
            }
        }
    }

    /// Whether the score `z` classifies a row with `label` correctly (logistic only).
    fn correct(self, z: f64, label: f64) -> bool {
        self == LinearKind::Logistic && (z >= 0.0) == (label > 0.5)
    }
}

impl fmt::Display for LinearKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LinearKind {
    type Err = TrainerError;

    fn from_str(name: &str) -> Result<Self, TrainerError> {
        match name {
            "linear" => Ok(LinearKind::Linear),
            "logistic" => Ok(LinearKind::Logistic),
            other => Err(TrainerError::UnknownModel {
                name: other.to_owned(),
            }),
        }
    }
}

fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// One batch's contribution to a step.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct BatchGradient {
    /// Epoch of the batch.
    pub epoch: Epoch,
    /// Sum over rows of the gradient: one entry per feature, then the bias.
    pub sums: Vec<f64>,
    /// Rows, loss and correct predictions, computed before the update.
    pub totals: EpochTotals,
    /// Feature moments of the batch's rows.
    pub moments: Moments,
}

/// What a gradient is computed from: the shared model as of the current step.
#[derive(Clone, Debug)]
pub(crate) struct ModelView {
    /// Weights over standardized features, then the bias.
    pub weights: Vec<f64>,
    /// The model's standardization; `None` before it saw any row.
    pub scaling: Option<Scaling>,
}

/// The gradient of `rows` at `snapshot`.
pub(crate) fn gradient(
    kind: LinearKind,
    snapshot: &ModelView,
    rows: &Rows,
    epoch: Epoch,
) -> BatchGradient {
    let weights = &snapshot.weights;
    let width = weights.len() - 1;
    let moments = Moments::of_rows(rows, width);
    let scaling = match &snapshot.scaling {
        Some(scaling) => scaling.clone(),
        None => moments.scaling(width),
    };
    let mut sums = vec![0.0; weights.len()];
    let mut totals = EpochTotals {
        rows: rows.labels.len() as u64,
        skipped: rows.skipped,
        ..EpochTotals::default()
    };
    let mut x = vec![0.0; width];
    for (raw, &label) in rows.features.chunks_exact(width.max(1)).zip(&rows.labels) {
        scaling.apply(raw, &mut x);
        let z = weights[width] + x.iter().zip(weights).map(|(x, w)| x * w).sum::<f64>();
        let (loss, slope) = kind.loss_and_slope(z, label);
        totals.loss_sum += loss;
        totals.correct += u64::from(kind.correct(z, label));
        for (sum, x) in sums.iter_mut().zip(&x) {
            *sum += slope * x;
        }
        sums[width] += slope;
    }
    BatchGradient {
        epoch,
        sums,
        totals,
        moments,
    }
}

/// Adam's running moments.
#[derive(Clone, Debug)]
struct Adam {
    learning_rate: f64,
    first: Vec<f64>,
    second: Vec<f64>,
    steps: i32,
}

impl Adam {
    fn new(learning_rate: f64, size: usize) -> Self {
        Adam {
            learning_rate,
            first: vec![0.0; size],
            second: vec![0.0; size],
            steps: 0,
        }
    }

    /// Moves `weights` against the mean gradient `gradient`.
    fn update(&mut self, weights: &mut [f64], gradient: &[f64]) {
        self.steps = self.steps.saturating_add(1);
        let unbias1 = 1.0 - BETA1.powi(self.steps);
        let unbias2 = 1.0 - BETA2.powi(self.steps);
        let moments = self.first.iter_mut().zip(self.second.iter_mut());
        for ((w, g), (m, v)) in weights.iter_mut().zip(gradient).zip(moments) {
            *m = BETA1 * *m + (1.0 - BETA1) * g;
            *v = BETA2 * *v + (1.0 - BETA2) * g * g;
            *w -= self.learning_rate * (*m / unbias1) / ((*v / unbias2).sqrt() + EPSILON);
        }
    }
}

/// Everything needed to continue training a model where it stopped: written into the
/// model JSON under `"state"` and read back by [`LinearModel::resume`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ModelState {
    /// Weights over standardized features, then the bias.
    pub weights: Vec<f64>,
    /// Feature moments of every row trained on.
    pub moments: Moments,
    /// Adam's first moments.
    pub adam_first: Vec<f64>,
    /// Adam's second moments.
    pub adam_second: Vec<f64>,
    /// Adam steps taken.
    pub adam_steps: i32,
}

/// The shared model: weights, standardization, optimizer state, the step being
/// gathered and statistics.
#[derive(Clone, Debug)]
pub(crate) struct LinearModel {
    kind: LinearKind,
    /// One weight per standardized feature, then the bias.
    weights: Vec<f64>,
    /// Moments of every row applied so far.
    moments: Moments,
    adam: Adam,
    pending: Vec<f64>,
    pending_moments: Moments,
    pending_rows: u64,
    pending_loss: f64,
    /// Statistics of the step being gathered, logged when it is applied.
    pending_log: Vec<(Epoch, EpochTotals)>,
    log: EpochLog,
    last_loss: Option<f64>,
}

impl LinearModel {
    /// A zero model over `features` features.
    pub fn new(kind: LinearKind, features: usize, learning_rate: f64) -> Self {
        LinearModel {
            kind,
            weights: vec![0.0; features + 1],
            moments: Moments::default(),
            adam: Adam::new(learning_rate, features + 1),
            pending: vec![0.0; features + 1],
            pending_moments: Moments::default(),
            pending_rows: 0,
            pending_loss: 0.0,
            pending_log: Vec::new(),
            log: EpochLog::with_loss(kind == LinearKind::Logistic),
            last_loss: None,
        }
    }

    /// A model over `features` features continuing from a saved `state`.
    pub fn resume(
        kind: LinearKind,
        features: usize,
        learning_rate: f64,
        state: ModelState,
    ) -> Result<Self, TrainerError> {
        let size = features + 1;
        let fits = state.weights.len() == size
            && state.adam_first.len() == size
            && state.adam_second.len() == size
            && state.moments.fits(features)
            && state.adam_steps >= 0;
        if !fits {
            return Err(TrainerError::InitModel {
                reason: format!("its state does not hold {features} features"),
            });
        }
        let mut model = LinearModel::new(kind, features, learning_rate);
        model.weights = state.weights;
        model.moments = state.moments;
        model.adam.first = state.adam_first;
        model.adam.second = state.adam_second;
        model.adam.steps = state.adam_steps;
        Ok(model)
    }

    /// The state [`LinearModel::resume`] continues from.
    pub fn state(&self) -> ModelState {
        ModelState {
            weights: self.weights.clone(),
            moments: self.moments.clone(),
            adam_first: self.adam.first.clone(),
            adam_second: self.adam.second.clone(),
            adam_steps: self.adam.steps,
        }
    }

    /// What the next step's gradients are computed from.
    pub fn snapshot(&self) -> ModelView {
        let scaling = (!self.moments.is_empty()).then(|| self.moments.scaling(self.width()));
        ModelView {
            weights: self.weights.clone(),
            scaling,
        }
    }

    fn width(&self) -> usize {
        self.weights.len() - 1
    }

    /// Mean training loss of the last applied step.
    pub fn last_loss(&self) -> Option<f64> {
        self.last_loss
    }

    /// Per-epoch statistics so far.
    pub fn epochs(&self) -> Vec<crate::trainer::EpochStats> {
        self.log.stats()
    }

    /// The totals behind [`LinearModel::epochs`], by epoch (saved in checkpoints).
    pub fn epoch_totals(&self) -> BTreeMap<Epoch, EpochTotals> {
        self.log.totals().clone()
    }

    /// Continues the statistics of a checkpoint: `totals` as saved by
    /// [`LinearModel::epoch_totals`].
    pub fn with_epoch_totals(mut self, totals: BTreeMap<Epoch, EpochTotals>) -> Self {
        for (epoch, totals) in totals {
            self.log.add(epoch, totals);
        }
        self
    }

    /// The model as JSON: kind, label, expanded feature names, and the weights and bias
    /// over raw feature values.
    pub fn to_json(&self, layout: &FeatureLayout) -> serde_json::Value {
        let width = self.width();
        let scaling = self.moments.scaling(width);
        let (weights, bias) = scaling.to_raw(&self.weights[..width], self.weights[width]);
        serde_json::json!({
            "kind": self.kind.name(),
            "label": layout.label,
            "features": layout.names,
            "weights": weights,
            "bias": bias,
            "state": self.state(),
        })
    }
}

impl Reduce for LinearModel {
    type Part = BatchGradient;

    fn add(&mut self, part: BatchGradient) {
        for (sum, g) in self.pending.iter_mut().zip(&part.sums) {
            *sum += g;
        }
        self.pending_rows += part.totals.rows;
        self.pending_loss += part.totals.loss_sum;
        self.pending_moments.merge(&part.moments);
        self.pending_log.push((part.epoch, part.totals));
    }

    fn apply(&mut self) {
        if self.pending_rows > 0 {
            let rows = self.pending_rows as f64;
            let mean: Vec<f64> = self.pending.iter().map(|sum| sum / rows).collect();
            self.adam.update(&mut self.weights, &mean);
            self.last_loss = Some(self.pending_loss / rows);
        }
        self.moments.merge(&self.pending_moments);
        for (epoch, totals) in self.pending_log.drain(..) {
            self.log.add(epoch, totals);
        }
        self.pending_moments = Moments::default();
        self.pending.fill(0.0);
        self.pending_rows = 0;
        self.pending_loss = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(features: Vec<f64>, labels: Vec<f64>) -> Rows {
        Rows {
            features,
            labels,
            skipped: 0,
        }
    }

    /// A snapshot with `weights` and no standardization.
    fn raw(weights: &[f64]) -> ModelView {
        let width = weights.len() - 1;
        ModelView {
            weights: weights.to_vec(),
            scaling: Some(Scaling {
                shift: vec![0.0; width],
                scale: vec![1.0; width],
            }),
        }
    }

    #[test]
    fn linear_gradient_and_loss() {
        let batch = rows(vec![1.0, 2.0, 3.0, 4.0], vec![1.0, 0.0]);
        let g = gradient(LinearKind::Linear, &raw(&[1.0, 0.0, 0.5]), &batch, Epoch(0));
        // scores 1.5 and 3.5; errors 0.5 and 3.5
        assert_eq!(g.sums, vec![0.5 + 3.5 * 3.0, 0.5 * 2.0 + 3.5 * 4.0, 4.0]);
        assert_eq!(g.totals.loss_sum, (0.25 + 12.25) / 2.0);
        assert_eq!(g.totals.correct, 0);
    }

    #[test]
    fn logistic_loss_is_stable_and_counts_correct_rows() {
        let batch = rows(vec![1000.0, -1000.0, 0.0], vec![1.0, 1.0, 0.0]);
        let g = gradient(LinearKind::Logistic, &raw(&[1.0, 0.0]), &batch, Epoch(0));
        assert!((g.totals.loss_sum - (1000.0 + 2f64.ln())).abs() < 1e-9);
        assert_eq!(g.totals.correct, 1);
        assert!(g.sums.iter().all(|s| s.is_finite()));
    }

    #[test]
    fn model_json_lists_features_weights_and_bias() {
        let layout = FeatureLayout {
            label: "y".into(),
            columns: vec![("v".into(), 2)],
            names: vec!["v[0]".into(), "v[1]".into()],
        };
        let model = LinearModel::new(LinearKind::Logistic, 2, 0.1);
        let mut json = model.to_json(&layout);
        let state = json.as_object_mut().and_then(|o| o.remove("state"));
        assert!(state.is_some(), "{json}");
        assert_eq!(
            json,
            serde_json::json!({"kind": "logistic", "label": "y", "features": ["v[0]", "v[1]"],
                "weights": [0.0, 0.0], "bias": 0.0})
        );
    }

    #[test]
    fn first_step_standardizes_the_batch_by_itself() {
        let batch = rows(vec![100.0, 300.0], vec![1.0, 0.0]);
        let first = ModelView {
            weights: vec![1.0, 0.0],
            scaling: None,
        };
        let g = gradient(LinearKind::Linear, &first, &batch, Epoch(0));
        // standardized features -1 and 1; scores -1 and 1; errors -2 and 1
        assert_eq!(g.sums, vec![2.0 + 1.0, -1.0]);
    }

    #[test]
    fn applied_step_moves_weights_and_exports_raw_weights() {
        let layout = FeatureLayout {
            label: "y".into(),
            columns: vec![("x".into(), 1)],
            names: vec!["x".into()],
        };
        let mut model = LinearModel::new(LinearKind::Linear, 1, 0.1);
        let batch = rows(vec![100.0, 300.0], vec![1.0, 0.0]);
        let part = gradient(LinearKind::Linear, &model.snapshot(), &batch, Epoch(0));
        model.add(part);
        model.apply();
        let snapshot = model.snapshot();
        // Gradient (0.5, -0.5): Adam's first step moves each weight by the learning rate.
        assert!((snapshot.weights[0] + 0.1).abs() < 1e-6, "{snapshot:?}");
        assert!((snapshot.weights[1] - 0.1).abs() < 1e-6, "{snapshot:?}");
        let json = model.to_json(&layout);
        let weight = json["weights"][0].as_f64().expect("weight");
        let bias = json["bias"].as_f64().expect("bias");
        // raw scores at 100 and 300 equal the standardized scores at -1 and 1
        assert!((weight * 100.0 + bias - 0.2).abs() < 1e-6, "{json}");
        assert!((weight * 300.0 + bias).abs() < 1e-6, "{json}");
        assert_eq!(model.last_loss(), Some(0.25));
    }

    #[test]
    fn resumed_model_continues_where_it_stopped() {
        let batches = [
            rows(vec![100.0, 300.0], vec![1.0, 0.0]),
            rows(vec![200.0, 50.0], vec![0.5, 1.5]),
        ];
        let step = |model: &mut LinearModel, batch: &Rows| {
            let part = gradient(LinearKind::Linear, &model.snapshot(), batch, Epoch(0));
            model.add(part);
            model.apply();
        };
        let mut whole = LinearModel::new(LinearKind::Linear, 1, 0.1);
        step(&mut whole, &batches[0]);
        let saved = serde_json::to_value(whole.state()).expect("state as json");
        step(&mut whole, &batches[1]);
        let state: ModelState = serde_json::from_value(saved).expect("state from json");
        let mut resumed = LinearModel::resume(LinearKind::Linear, 1, 0.1, state).expect("resume");
        step(&mut resumed, &batches[1]);
        assert_eq!(resumed.state(), whole.state());
        let wrong = LinearModel::resume(LinearKind::Linear, 2, 0.1, whole.state());
        assert!(matches!(wrong, Err(TrainerError::InitModel { .. })));
    }

    #[test]
    fn parses_model_names() {
        assert_eq!(
            "logistic".parse::<LinearKind>().ok(),
            Some(LinearKind::Logistic)
        );
        let error = "tree".parse::<LinearKind>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown model `tree`; expected linear or logistic"
        );
    }
}
