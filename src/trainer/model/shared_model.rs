//! What the device threads of a built-in model share through the all-reduce: the
//! model, the steps applied, each device's batches in them, and the checkpoints saved
//! from them (`sluice train --state` with `--model linear|logistic`).
//!
//! A checkpoint is taken while a step is applied, under the all-reduce's lock. No
//! device is then working on a batch: a step completes only once every device
//! contributed to it, went idle or finished, and `feed` acknowledges a batch once its
//! step is applied. So each device's share of the saved model is exactly the batches
//! of the steps applied so far, which are exactly the batches it acknowledged; its
//! `checkpoint ID` mark comes right after them (see [`Mark`](super::Mark)).
//!
//! Checkpoints are taken every `every` steps and before the first step holding a batch
//! of a new epoch (the model as the previous epoch left it). Their IDs are step
//! counts, continued across resumes, so they only grow. Each is written to a temporary
//! file, synced, renamed to `model-ID.json` and its directory synced; it holds what
//! `--output` writes (so it can serve as `--init-model`) plus a `checkpoint` object:
//! its ID, step count and the per-epoch statistics of the rows trained into it.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::allreduce::Reduce;
use super::features::FeatureLayout;
use super::linear::{BatchGradient, LinearModel};
use crate::epoch::Epoch;
use crate::trainer::stats::EpochTotals;
use crate::trainer::TrainerError;

/// Steps between checkpoints of a built-in model when `--state` is given and
/// `--checkpoint-every` is not.
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 100;

/// Checkpoints kept once every device was told of them: the job's last complete
/// checkpoint is always among them (and among any newer ones).
const KEEP: usize = 3;

/// Where a built-in model keeps its checkpoints, how often it takes them, and which
/// one it starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelCheckpoints {
    /// The directory of the checkpoint files (`STATE/checkpoints`).
    pub dir: PathBuf,
    /// Steps between checkpoints; 0 takes none (a resume still loads one).
    pub every: u64,
    /// The ID of the checkpoint to start from: the job's last complete one.
    pub resume: Option<String>,
}

impl ModelCheckpoints {
    /// The file of checkpoint `id`.
    pub fn path(&self, id: &str) -> PathBuf {
        checkpoint_path(&self.dir, id)
    }
}

/// The file of checkpoint `id` in `dir`.
pub fn checkpoint_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("model-{id}.json"))
}

/// The step count in the name of a checkpoint file, `model-STEP.json`.
fn step_of(name: &str) -> Option<u64> {
    name.strip_prefix("model-")?
        .strip_suffix(".json")?
        .parse()
        .ok()
}

/// What a checkpoint file holds besides the model JSON of `--output`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct CheckpointInfo {
    /// The checkpoint's ID.
    pub id: String,
    /// Steps applied to the model.
    pub step: u64,
    /// Statistics of the rows in the model, by epoch.
    pub epochs: BTreeMap<Epoch, EpochTotals>,
}

/// The all-reduce's reducer of the built-in models.
pub(crate) struct SharedModel {
    /// The model.
    pub model: LinearModel,
    layout: Arc<FeatureLayout>,
    /// Steps applied, counting those of the checkpoint resumed from.
    steps: u64,
    /// Per device: its batches in the steps applied.
    applied: Vec<u64>,
    /// Per device: its batches in the step being gathered.
    current: Vec<u64>,
    /// The highest epoch of a batch applied so far.
    epoch: Option<Epoch>,
    /// The highest epoch of a batch in the step being gathered.
    step_epoch: Option<Epoch>,
    saver: Option<Saver>,
}

impl SharedModel {
    /// `model` for `devices` device threads, `steps` steps into the job (those of the
    /// checkpoint it resumes), saving checkpoints with `saver` if any.
    pub fn new(
        model: LinearModel,
        layout: Arc<FeatureLayout>,
        devices: usize,
        steps: u64,
        saver: Option<Saver>,
    ) -> Self {
        let epoch = model.epoch_totals().keys().next_back().copied();
        SharedModel {
            model,
            layout,
            steps,
            applied: vec![0; devices],
            current: vec![0; devices],
            epoch,
            step_epoch: None,
            saver,
        }
    }

    /// Batches of `device` in the steps applied so far.
    pub fn applied(&self, device: usize) -> u64 {
        self.applied.get(device).copied().unwrap_or(0)
    }

    /// The checkpoints `device` was not told of yet: each ID with the count of the
    /// device's batches it holds.
    pub fn tell(&mut self, device: usize) -> Vec<(String, u64)> {
        match &mut self.saver {
            Some(saver) => saver.tell(device),
            None => Vec::new(),
        }
    }

    /// `device` takes no further part: it is told of no more checkpoints.
    pub fn finished(&mut self, device: usize) {
        if let Some(told) = self.saver.as_mut().and_then(|s| s.told.get_mut(device)) {
            *told = Some(u64::MAX);
        }
    }

    /// Why saving a checkpoint failed, once (to the first device that asks).
    pub fn take_failure(&mut self) -> Option<TrainerError> {
        self.saver.as_mut().and_then(|s| s.failure.take())
    }

    /// Saves the model as it stands (the steps applied so far).
    fn save(&mut self) {
        let Some(saver) = &mut self.saver else {
            return;
        };
        let mut json = self.model.to_json(&self.layout);
        let info = CheckpointInfo {
            id: self.steps.to_string(),
            step: self.steps,
            epochs: self.model.epoch_totals(),
        };
        if let (Some(object), Ok(info)) = (json.as_object_mut(), serde_json::to_value(info)) {
            object.insert("checkpoint".to_string(), info);
        }
        saver.save(self.steps, &self.applied, &json);
    }
}

impl Reduce for SharedModel {
    /// The device, and its batch's gradient.
    type Part = (usize, BatchGradient);

    fn add(&mut self, (device, part): (usize, BatchGradient)) {
        if let Some(count) = self.current.get_mut(device) {
            *count += 1;
        }
        self.step_epoch = self.step_epoch.max(Some(part.epoch));
        self.model.add(part);
    }

    fn apply(&mut self) {
        // The first batch of a new epoch: save the model as the last epoch left it
        // (the parts added to this step are not in it until it is applied).
        if self.epoch.is_some() && self.step_epoch > self.epoch {
            self.save();
        }
        self.model.apply();
        self.steps += 1;
        for (applied, current) in self.applied.iter_mut().zip(&mut self.current) {
            *applied += std::mem::take(current);
        }
        self.epoch = self.epoch.max(self.step_epoch.take());
        let every = self.saver.as_ref().map_or(0, |s| s.every);
        if every > 0 && self.steps % every == 0 {
            self.save();
        }
    }
}

/// Writes checkpoints, tells each device of them, and removes old ones.
pub(crate) struct Saver {
    dir: PathBuf,
    every: u64,
    /// Checkpoint files, oldest first: the step, and each device's batches in it
    /// (`None` for those of earlier runs, which no device is told of).
    saved: VecDeque<(u64, Option<Vec<u64>>)>,
    /// Per device: the step of the last checkpoint it was told of; `u64::MAX` once
    /// it finished.
    told: Vec<Option<u64>>,
    /// A checkpoint could not be written: no more are taken.
    failure: Option<TrainerError>,
    broken: bool,
}

impl Saver {
    /// Checkpoints every `every` steps (more than 0) into `dir`, for `devices`
    /// devices of a job that resumes from the checkpoint of step `resumed`, if any.
    /// Checkpoints after it were never complete: they are removed, and their IDs
    /// will name new ones.
    pub fn open(
        dir: &Path,
        every: u64,
        devices: usize,
        resumed: Option<u64>,
    ) -> Result<Saver, TrainerError> {
        let io = |action: &str, source| TrainerError::Io {
            action: format!("{action} {}", dir.display()),
            cause: source,
        };
        std::fs::create_dir_all(dir).map_err(|e| io("create the checkpoint directory", e))?;
        let entries = std::fs::read_dir(dir).map_err(|e| io("list the checkpoints in", e))?;
        let mut kept = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io("list the checkpoints in", e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let stale = match step_of(&name) {
                Some(step) if resumed.is_some_and(|r| step <= r) => {
                    kept.push(step);
                    false
                }
                Some(_) => true,
                None => name.starts_with("model-") && name.ends_with(".tmp"),
            };
            if stale {
                std::fs::remove_file(entry.path()).map_err(|e| TrainerError::Io {
                    action: format!("remove the stale checkpoint {}", entry.path().display()),
                    cause: e,
                })?;
            }
        }
        kept.sort_unstable();
        Ok(Saver {
            dir: dir.to_path_buf(),
            every,
            saved: kept.into_iter().map(|step| (step, None)).collect(),
            told: vec![resumed; devices],
            failure: None,
            broken: false,
        })
    }

    fn save(&mut self, step: u64, applied: &[u64], json: &serde_json::Value) {
        if self.broken || self.saved.back().is_some_and(|(last, _)| *last >= step) {
            return;
        }
        let path = checkpoint_path(&self.dir, &step.to_string());
        let text = serde_json::to_string_pretty(json).unwrap_or_default() + "\n";
        match write_durably(&path, text.as_bytes()) {
            Ok(()) => {
                self.saved.push_back((step, Some(applied.to_vec())));
                self.prune();
            }
            Err(source) => {
                self.broken = true;
                self.failure = Some(TrainerError::Io {
                    action: format!("save the model checkpoint {}", path.display()),
                    cause: source,
                });
            }
        }
    }

    fn tell(&mut self, device: usize) -> Vec<(String, u64)> {
        let Some(told) = self.told.get_mut(device) else {
            return Vec::new();
        };
        let mut news = Vec::new();
        for (step, counts) in &self.saved {
            if told.is_some_and(|t| t >= *step) {
                continue;
            }
            let Some(counts) = counts else {
                continue;
            };
            news.push((step.to_string(), counts.get(device).copied().unwrap_or(0)));
            *told = Some(*step);
        }
        news
    }

    /// Removes the checkpoints older than the last [`KEEP`] every device was told of.
    fn prune(&mut self) {
        let Some(delivered) = self.told.iter().min().copied().flatten() else {
            return;
        };
        let delivered: Vec<u64> = self
            .saved
            .iter()
            .map(|(step, _)| *step)
            .filter(|step| *step <= delivered)
            .collect();
        let Some(&oldest) = delivered
            .len()
            .checked_sub(KEEP)
            .and_then(|i| delivered.get(i))
        else {
            return;
        };
        while let Some((step, _)) = self.saved.front().filter(|(step, _)| *step < oldest) {
            let path = checkpoint_path(&self.dir, &step.to_string());
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot remove an old checkpoint")
                }
            }
            self.saved.pop_front();
        }
    }
}

/// Writes `bytes` to `path` so that a crash leaves either the old file or the whole
/// new one: a temporary file, synced, renamed, and the directory synced.
fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // In the job's state: private to its user, as the rest of it.
    crate::sys::fd::write_replacing(path, bytes, crate::sys::fd::PRIVATE_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_files_are_named_by_step() {
        assert_eq!(step_of("model-300.json"), Some(300));
        assert_eq!(step_of("model-x.json"), None);
        assert_eq!(step_of("model-300.tmp"), None);
        let path = checkpoint_path(Path::new("/s/checkpoints"), "7");
        assert_eq!(path, Path::new("/s/checkpoints/model-7.json"));
    }

    #[test]
    fn opening_removes_checkpoints_after_the_one_resumed() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "model-100.json",
            "model-200.json",
            "model-300.json",
            "model-400.tmp",
        ] {
            std::fs::write(dir.path().join(name), "{}").expect("write");
        }
        std::fs::write(dir.path().join("notes.txt"), "mine").expect("write");
        let saver = Saver::open(dir.path(), 100, 2, Some(200)).expect("open");
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["model-100.json", "model-200.json", "notes.txt"]);
        assert_eq!(saver.saved, [(100, None), (200, None)]);
        // A job with no complete checkpoint keeps none.
        Saver::open(dir.path(), 100, 2, None).expect("open");
        assert!(!dir.path().join("model-100.json").exists());
    }

    #[test]
    fn old_checkpoints_go_once_every_device_was_told_of_newer_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut saver = Saver::open(dir.path(), 1, 2, None).expect("open");
        let json = serde_json::json!({});
        for step in 1..=5 {
            saver.save(step, &[step, 0], &json);
            assert_eq!(saver.tell(0), vec![(step.to_string(), step)]);
        }
        // Device 1 was told of none: every file stays.
        assert_eq!(saver.saved.len(), 5);
        assert_eq!(saver.tell(1).len(), 5);
        saver.save(6, &[6, 1], &json);
        let steps: Vec<u64> = saver.saved.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            steps,
            [3, 4, 5, 6],
            "the last 3 told to both, and the newer one"
        );
        assert!(!dir.path().join("model-2.json").exists());
        assert!(dir.path().join("model-3.json").exists());
        // A finished device holds nothing back.
        saver.told[1] = Some(u64::MAX);
        saver.tell(0);
        saver.save(7, &[7, 1], &json);
        assert_eq!(saver.saved.front().map(|s| s.0), Some(4));
    }
}
