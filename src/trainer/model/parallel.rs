//! `--model linear|logistic`: one model shared by all device threads, trained with
//! synchronous data parallelism.
//!
//! Every step, each participating device thread computes its batch's gradient with the
//! current weights; the gradients are averaged (weighted by rows) and applied once, in an
//! [`AllReduce`] that never waits for a thread that is idle or finished.
//!
//! With [`ModelCheckpoints`] the model is saved every so many steps and each device
//! thread says so after the batches the saved model holds (see [`super::shared_model`]);
//! a resumed job starts from its last complete checkpoint.

use std::sync::{Arc, Mutex, MutexGuard};

use arrow::datatypes::Schema;

use super::allreduce::AllReduce;
use super::features::FeatureLayout;
use super::linear::{self, LinearKind, LinearModel, DEFAULT_LEARNING_RATE};
use super::shared_model::{CheckpointInfo, ModelCheckpoints, Saver, SharedModel};
use crate::trainer::{Batch, Mark, MarkKind, Trainer, TrainerError, TrainerFactory, TrainerReport};

type Group = AllReduce<SharedModel>;

/// Builds [`LinearTrainer`]s that share one linear or logistic regression model.
///
/// Call [`TrainerFactory::validate`] with the dataset schema before
/// [`TrainerFactory::make`]; it resolves the label and feature columns.
pub struct LinearFactory {
    /// The label column.
    pub label: String,
    /// Feature columns: numeric, or fixed-size lists of numbers.
    pub features: Vec<String>,
    /// Adam's learning rate ([`DEFAULT_LEARNING_RATE`] unless set).
    pub learning_rate: f64,
    /// Linear or logistic regression.
    pub kind: LinearKind,
    /// A model written earlier (`--output` JSON) to continue training from.
    pub init: Option<serde_json::Value>,
    /// Checkpoints in the job's state: where, how often, and the one to start from
    /// (which takes the place of `init`).
    pub checkpoints: Option<ModelCheckpoints>,
    shared: Mutex<Shared>,
}

/// What `validate` and the first `make` set up.
#[derive(Default)]
struct Shared {
    layout: Option<Arc<FeatureLayout>>,
    group: Option<Arc<Group>>,
    /// The model resumed from a checkpoint or `init`, checked against the layout by
    /// `validate`, with the steps it was trained for (checkpoints only).
    resumed: Option<(LinearModel, u64)>,
}

impl LinearFactory {
    /// A `kind` model predicting `label` from `features`, with the default learning rate.
    pub fn new(kind: LinearKind, label: impl Into<String>, features: Vec<String>) -> Self {
        LinearFactory {
            label: label.into(),
            features,
            learning_rate: DEFAULT_LEARNING_RATE,
            kind,
            init: None,
            checkpoints: None,
            shared: Mutex::new(Shared::default()),
        }
    }

    /// Sets Adam's learning rate.
    pub fn with_learning_rate(mut self, learning_rate: f64) -> Self {
        self.learning_rate = learning_rate;
        self
    }

    /// Starts from a model this factory's trainers wrote earlier (the JSON of
    /// `--output`, with its `state`): same kind, label and features, and training
    /// continues with its weights, feature scaling and optimizer state.
    pub fn with_init(mut self, model: serde_json::Value) -> Self {
        self.init = Some(model);
        self
    }

    /// Keeps checkpoints as `checkpoints` says, and starts from its `resume` checkpoint.
    pub fn with_checkpoints(mut self, checkpoints: ModelCheckpoints) -> Self {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// The model to start from, checked against `layout`: the checkpoint to resume,
    /// else `init`; with the steps it was trained for.
    fn resume(&self, layout: &FeatureLayout) -> Result<Option<(LinearModel, u64)>, TrainerError> {
        let checkpoint = self.checkpoints.as_ref().and_then(|c| {
            let id = c.resume.as_ref()?;
            Some(c.path(id))
        });
        if let Some(path) = checkpoint {
            return self.resume_checkpoint(&path, layout).map(Some);
        }
        match &self.init {
            Some(init) => Ok(Some((self.model_of(init, layout)?, 0))),
            None => Ok(None),
        }
    }

    /// The model of checkpoint file `path`, with its statistics and steps.
    fn resume_checkpoint(
        &self,
        path: &std::path::Path,
        layout: &FeatureLayout,
    ) -> Result<(LinearModel, u64), TrainerError> {
        let text = std::fs::read_to_string(path).map_err(|source| TrainerError::Io {
            action: format!(
                "read the model checkpoint {} (the job's last complete checkpoint)",
                path.display()
            ),
            cause: source,
        })?;
        let damaged = |source| TrainerError::CheckpointDamaged {
            path: path.display().to_string(),
            cause: source,
        };
        let json: serde_json::Value = serde_json::from_str(&text).map_err(damaged)?;
        let info: CheckpointInfo =
            serde_json::from_value(json["checkpoint"].clone()).map_err(damaged)?;
        let model = self.model_of(&json, layout)?.with_epoch_totals(info.epochs);
        Ok((model, info.step))
    }

    /// The model `init` (JSON written by `--output`) describes, checked against `layout`.
    fn model_of(
        &self,
        init: &serde_json::Value,
        layout: &FeatureLayout,
    ) -> Result<LinearModel, TrainerError> {
        let mismatch = |what: &str, saved: &serde_json::Value, now: String| {
            Err(TrainerError::InitModel {
                reason: format!("it has {what} {saved}, this job {now}"),
            })
        };
        if init["kind"] != self.kind.name() {
            return mismatch("kind", &init["kind"], self.kind.name().to_string());
        }
        if init["label"] != layout.label.as_str() {
            return mismatch("label", &init["label"], layout.label.clone());
        }
        if init["features"] != serde_json::json!(layout.names) {
            return mismatch("features", &init["features"], layout.names.join(","));
        }
        let state = serde_json::from_value(init["state"].clone())
            .map_err(|source| TrainerError::InitModelState { cause: source })?;
        LinearModel::resume(self.kind, layout.width(), self.learning_rate, state)
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_settings(&self) -> Result<(), TrainerError> {
        if self.features.is_empty() {
            return Err(TrainerError::NoFeatures {
                kind: self.kind.name(),
            });
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(TrainerError::BadLearningRate {
                learning_rate: self.learning_rate,
            });
        }
        Ok(())
    }

    /// The all-reduce of `devices` threads, created by the first call.
    fn group(&self, shared: &mut Shared, devices: usize) -> Result<Arc<Group>, TrainerError> {
        let layout = shared.layout.as_ref().ok_or(TrainerError::NotValidated)?;
        if let Some(group) = &shared.group {
            return Ok(Arc::clone(group));
        }
        let (model, steps) = match shared.resumed.take() {
            Some((model, steps)) => (model, steps),
            None => (
                LinearModel::new(self.kind, layout.width(), self.learning_rate),
                0,
            ),
        };
        let saver = match &self.checkpoints {
            Some(c) if c.every > 0 => {
                let resumed = c.resume.as_ref().map(|_| steps);
                Some(Saver::open(&c.dir, c.every, devices, resumed)?)
            }
            _ => None,
        };
        let shared_model = SharedModel::new(model, Arc::clone(layout), devices, steps, saver);
        // The same steps from run to run: the pipeline deals built-in models one
        // batch per device per step, in the order the tasks were leased.
        let group = Arc::new(AllReduce::ordered(devices, shared_model));
        shared.group = Some(Arc::clone(&group));
        Ok(group)
    }
}

impl TrainerFactory for LinearFactory {
    fn validate(&self, schema: &Schema) -> Result<(), TrainerError> {
        self.check_settings()?;
        let layout = FeatureLayout::resolve(schema, &self.label, &self.features)?;
        let resumed = self.resume(&layout)?;
        let mut shared = self.shared();
        shared.layout = Some(Arc::new(layout));
        shared.resumed = resumed;
        Ok(())
    }

    fn make(&self, device: usize, devices: usize) -> Result<Box<dyn Trainer>, TrainerError> {
        if device >= devices {
            return Err(TrainerError::DeviceOutOfRange { device, devices });
        }
        let mut shared = self.shared();
        let group = self.group(&mut shared, devices)?;
        if group.members() != devices {
            let expected = group.members();
            return Err(TrainerError::DeviceCountChanged {
                device,
                devices,
                expected,
            });
        }
        let layout = shared.layout.clone().ok_or(TrainerError::NotValidated)?;
        let base = group.update(|s| s.applied(device));
        // A trainer that keeps checkpoints says so before its first acknowledgement.
        let saving = self.checkpoints.as_ref().is_some_and(|c| c.every > 0);
        let marks = saving
            .then_some(Mark {
                after: 0,
                kind: MarkKind::Declared,
            })
            .into_iter()
            .collect();
        Ok(Box::new(LinearTrainer {
            device,
            kind: self.kind,
            layout,
            group,
            finished: false,
            saving,
            base,
            marks,
        }))
    }

    fn report(&self) -> TrainerReport {
        let shared = self.shared();
        let (Some(layout), Some(group)) = (&shared.layout, &shared.group) else {
            return TrainerReport::default();
        };
        group.read(|shared| TrainerReport {
            epochs: shared.model.epochs(),
            model: Some(shared.model.to_json(layout)),
        })
    }

    fn current_loss(&self) -> Option<f64> {
        let group = self.shared().group.clone()?;
        group.read(|shared| shared.model.last_loss())
    }
}

/// One device thread's share of the training: computes its batches' gradients and takes
/// part in every step while it has data. Each batch is applied when `feed` returns.
pub struct LinearTrainer {
    device: usize,
    kind: LinearKind,
    layout: Arc<FeatureLayout>,
    group: Arc<Group>,
    finished: bool,
    /// The model saves checkpoints: this trainer marks them.
    saving: bool,
    /// This device's batches in the shared model when the trainer was built.
    base: u64,
    /// Marks not taken yet.
    marks: Vec<Mark>,
}

impl LinearTrainer {
    /// Computes the batch's gradient with the current weights and waits for its step.
    fn step(&self, batch: &Batch) -> Result<(), TrainerError> {
        let rows = self.layout.rows(&batch.data)?;
        let snapshot = self.group.read(|shared| shared.model.snapshot());
        let part = linear::gradient(self.kind, &snapshot, &rows, batch.epoch);
        self.group
            .step(self.device, (self.device, part))
            .map_err(|source| TrainerError::AllReduce {
                device: self.device,
                doing: "step",
                source,
            })?;
        match self.group.update(SharedModel::take_failure) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Adds a mark for each checkpoint saved since the last call (and, when
    /// `finishing`, takes no part in later ones).
    fn collect_marks(&mut self, finishing: bool) {
        if !self.saving {
            return;
        }
        let device = self.device;
        let told = self.group.update(|shared| {
            let told = shared.tell(device);
            if finishing {
                shared.finished(device);
            }
            told
        });
        for (id, batches) in told {
            self.marks.push(Mark {
                after: batches.saturating_sub(self.base),
                kind: MarkKind::Checkpoint(id),
            });
        }
    }
}

impl Trainer for LinearTrainer {
    fn feed(&mut self, batch: Batch) -> Result<Vec<u64>, TrainerError> {
        if self.finished {
            return Err(TrainerError::Finished {
                device: self.device,
            });
        }
        self.group
            .activate(self.device)
            .map_err(|source| TrainerError::AllReduce {
                device: self.device,
                doing: "next step",
                source,
            })?;
        if let Err(error) = self.step(&batch) {
            // A thread that failed its batch must not hold up the others' step.
            self.group.set_idle(self.device, true);
            return Err(error);
        }
        Ok(vec![batch.seq])
    }

    fn flush(&mut self) -> Result<Vec<u64>, TrainerError> {
        Ok(Vec::new())
    }

    fn set_idle(&mut self, idle: bool) {
        self.group.set_idle(self.device, idle);
    }

    fn finish(&mut self) -> Result<Vec<u64>, TrainerError> {
        if !self.finished {
            self.collect_marks(true);
        }
        self.finished = true;
        self.group.finish(self.device);
        Ok(Vec::new())
    }

    fn take_marks(&mut self) -> Vec<Mark> {
        if !self.finished {
            self.collect_marks(false);
        }
        std::mem::take(&mut self.marks)
    }
}

impl Drop for LinearTrainer {
    fn drop(&mut self) {
        let device = self.device;
        self.group.update(|shared| shared.finished(device));
        self.group.finish(self.device);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epoch::Epoch;
    use arrow::array::{ArrayRef, Float64Array};
    use arrow::record_batch::RecordBatch;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    /// `count` batches of `size` rows with features x1 in [-1, 1] and x2 in [-100, 100]
    /// (deliberately on another scale) and a label from `label(x1, x2)`.
    fn dataset(count: usize, size: usize, label: impl Fn(f64, f64) -> f64) -> Vec<RecordBatch> {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        (0..count)
            .map(|_| {
                let x1: Vec<f64> = (0..size).map(|_| rng.random_range(-1.0..1.0)).collect();
                let x2: Vec<f64> = (0..size).map(|_| rng.random_range(-100.0..100.0)).collect();
                let y: Vec<f64> = x1.iter().zip(&x2).map(|(a, b)| label(*a, *b)).collect();
                let column = |v: Vec<f64>| Arc::new(Float64Array::from(v)) as ArrayRef;
                RecordBatch::try_from_iter(vec![
                    ("x1", column(x1)),
                    ("x2", column(x2)),
                    ("y", column(y)),
                ])
                .expect("batch")
            })
            .collect()
    }

    /// Trains over `batches` for `epochs` epochs on `devices` threads, dealing batches
    /// round-robin except that device 0 gets only the first one (unequal shares).
    fn train(
        factory: &LinearFactory,
        batches: &[RecordBatch],
        devices: usize,
        epochs: u32,
    ) -> TrainerReport {
        factory.validate(&batches[0].schema()).expect("validate");
        let (done, finished) = mpsc::channel();
        for device in 0..devices {
            let mut trainer = factory.make(device, devices).expect("make");
            let mine: Vec<Batch> = Epoch::all(epochs)
                .flat_map(|epoch| batches.iter().map(move |b| (epoch, b)))
                .enumerate()
                .filter(|(i, _)| i % devices == device && (devices == 1 || device > 0 || *i == 0))
                .map(|(i, (epoch, data))| Batch {
                    seq: i as u64,
                    epoch,
                    data: data.clone(),
                })
                .collect();
            let done = done.clone();
            thread::spawn(move || {
                for batch in mine {
                    let seq = batch.seq;
                    assert_eq!(trainer.feed(batch).expect("feed"), vec![seq]);
                }
                trainer.finish().expect("finish");
                done.send(device).expect("report done");
            });
        }
        for _ in 0..devices {
            finished
                .recv_timeout(Duration::from_secs(60))
                .expect("training deadlocked");
        }
        factory.report()
    }

    fn accuracy(report: &TrainerReport, batches: &[RecordBatch]) -> f64 {
        let model = report.model.as_ref().expect("model");
        let w: Vec<f64> = serde_json::from_value(model["weights"].clone()).expect("weights");
        let b = model["bias"].as_f64().expect("bias");
        let mut right = 0;
        let mut total = 0;
        for batch in batches {
            let column = |name: &str| {
                let array = batch.column_by_name(name).expect("column");
                array
                    .as_any()
                    .downcast_ref::<Float64Array>()
                    .expect("f64")
                    .clone()
            };
            let (x1, x2, y) = (column("x1"), column("x2"), column("y"));
            for i in 0..batch.num_rows() {
                let z = w[0] * x1.value(i) + w[1] * x2.value(i) + b;
                right += usize::from((z >= 0.0) == (y.value(i) > 0.5));
                total += 1;
            }
        }
        right as f64 / total as f64
    }

    fn features() -> Vec<String> {
        vec!["x1".into(), "x2".into()]
    }

    fn separable(x1: f64, x2: f64) -> f64 {
        f64::from(u8::from(2.0 * x1 + 0.03 * x2 - 0.5 > 0.0))
    }

    #[test]
    fn logistic_separates_on_one_device() {
        let batches = dataset(40, 50, separable);
        let factory = LinearFactory::new(LinearKind::Logistic, "y", features());
        let report = train(&factory, &batches, 1, 3);
        assert_eq!(report.epochs.len(), 3);
        let last = report.epochs.last().expect("epoch");
        assert_eq!(last.rows, 2000);
        assert!(last.accuracy.expect("accuracy") >= 0.95, "{last:?}");
        assert!(accuracy(&report, &batches) >= 0.95, "{:?}", report.model);
        assert!(factory.current_loss().is_some());
    }

    #[test]
    fn logistic_separates_on_four_devices() {
        let batches = dataset(40, 50, separable);
        let factory = LinearFactory::new(LinearKind::Logistic, "y", features());
        let report = train(&factory, &batches, 4, 3);
        let rows: u64 = report.epochs.iter().map(|e| e.rows).sum();
        // device 0 takes only the first of its round-robin share
        assert_eq!(rows, 3 * 2000 - (50 * (3 * 40 / 4 - 1)));
        assert!(accuracy(&report, &batches) >= 0.95, "{:?}", report.model);
        let first = report.epochs[0].loss.expect("loss");
        let last = report.epochs.last().and_then(|e| e.loss).expect("loss");
        assert!(last < first, "loss falls: {first} -> {last}");
    }

    #[test]
    fn linear_recovers_weights() {
        let batches = dataset(40, 50, |x1, x2| 3.0 * x1 - 0.02 * x2 + 0.5);
        let factory = LinearFactory::new(LinearKind::Linear, "y", features());
        let report = train(&factory, &batches, 2, 10);
        let model = report.model.expect("model");
        let w: Vec<f64> = serde_json::from_value(model["weights"].clone()).expect("weights");
        let b = model["bias"].as_f64().expect("bias");
        assert!((w[0] - 3.0).abs() < 0.02, "{model}");
        assert!((w[1] + 0.02).abs() < 0.001, "{model}");
        assert!((b - 0.5).abs() < 0.02, "{model}");
        assert!(report.epochs.iter().all(|e| e.accuracy.is_none()));
    }

    #[test]
    fn validate_names_bad_columns() {
        let schema = dataset(1, 1, separable)[0].schema();
        let factory = LinearFactory::new(LinearKind::Logistic, "label", features());
        let error = factory.validate(&schema).unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown column `label`; available columns: x1, x2, y"
        );
        let factory = LinearFactory::new(LinearKind::Linear, "y", Vec::new());
        assert!(matches!(
            factory.validate(&schema),
            Err(TrainerError::NoFeatures { .. })
        ));
        let factory = LinearFactory::new(LinearKind::Linear, "y", features());
        assert!(matches!(
            factory.make(0, 1),
            Err(TrainerError::NotValidated)
        ));
    }

    #[test]
    fn skips_rows_with_null_labels() {
        let x = Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0])) as ArrayRef;
        let y = Arc::new(Float64Array::from(vec![Some(1.0), None, Some(0.0)])) as ArrayRef;
        let data = RecordBatch::try_from_iter(vec![("x", x), ("y", y)]).expect("batch");
        let factory = LinearFactory::new(LinearKind::Logistic, "y", vec!["x".into()]);
        factory.validate(&data.schema()).expect("validate");
        let mut trainer = factory.make(0, 1).expect("make");
        let batch = Batch {
            seq: 4,
            epoch: Epoch(0),
            data,
        };
        assert_eq!(trainer.feed(batch).expect("feed"), vec![4]);
        trainer.finish().expect("finish");
        let epoch = &factory.report().epochs[0];
        assert_eq!((epoch.rows, epoch.skipped), (2, 1));
        assert!((epoch.loss.expect("loss") - 2f64.ln()).abs() < 1e-12);
    }
}

#[cfg(test)]
#[path = "parallel_checkpoint_tests.rs"]
mod checkpoint_tests;
