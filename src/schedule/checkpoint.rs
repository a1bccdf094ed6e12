//! The model carried from one run to the next. A successful run saves its model
//! under `checkpoints/<run>/` in the state location, and `trained.json` names that
//! prefix in the same write that records the run's partitions: a run killed before
//! that write leaves the previous checkpoint in force.
//!
//! Built-in models (`--model linear|logistic`) save their JSON (`model.json`) and the
//! next run continues from it. Exec trainers get a local directory in
//! `SLUICE_CHECKPOINT_DIR`, filled with the previous checkpoint's files before they
//! start; whatever they leave there is saved once the run succeeded.

use std::path::{Path, PathBuf};

use object_store::PutMode;

use super::state::StateStore;
use super::RunError;
use crate::config::TrainerChoice;
use crate::trainer::protocol::CHECKPOINT_DIR_ENV;

/// The object name of a built-in model inside a checkpoint.
const MODEL: &str = "model.json";

/// A run's local working directory, removed when dropped.
pub struct WorkDir {
    /// The directory.
    pub path: PathBuf,
}

impl WorkDir {
    /// Creates a fresh directory for `run` under the system's temporary directory.
    pub fn create(run: &str) -> Result<WorkDir, RunError> {
        let path = std::env::temp_dir().join(format!("sluice-run-{run}"));
        std::fs::create_dir_all(path.join("checkpoint")).map_err(|source| local(&path, source))?;
        Ok(WorkDir { path })
    }

    /// Where an exec trainer reads and writes its checkpoint.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.path.join("checkpoint")
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn local(path: &Path, source: std::io::Error) -> RunError {
    RunError::Local {
        path: path.display().to_string(),
        cause: source,
    }
}

/// Prepares the trainer to continue from checkpoint `previous` (a prefix in the state).
pub async fn restore(
    state: &StateStore,
    previous: Option<&str>,
    trainer: &mut TrainerChoice,
    work: &WorkDir,
) -> Result<(), RunError> {
    match trainer {
        TrainerChoice::None => Ok(()),
        TrainerChoice::Model(model) => {
            let Some(previous) = previous else {
                return Ok(());
            };
            let name = format!("{previous}/{MODEL}");
            let Some((bytes, _)) = state
                .get(&state.path(&name))
                .await
                .map_err(RunError::state("read the last run's model"))?
            else {
                return Ok(());
            };
            let file = work.path.join("init-model.json");
            crate::sys::fd::write_replacing(&file, &bytes, crate::sys::fd::PUBLIC_FILE)
                .map_err(|e| local(&file, e))?;
            model.init = Some(file);
            Ok(())
        }
        TrainerChoice::Exec { env, .. } => {
            let dir = work.checkpoint_dir();
            if let Some(previous) = previous {
                download(state, previous, &dir).await?;
            }
            env.push((CHECKPOINT_DIR_ENV.to_string(), dir.display().to_string()));
            Ok(())
        }
    }
}

/// Saves this run's checkpoint as `checkpoints/<run>`; returns that prefix, or `None`
/// when the trainer keeps no model.
pub async fn save(
    state: &StateStore,
    run: &str,
    trainer: &TrainerChoice,
    model: Option<&serde_json::Value>,
    work: &WorkDir,
) -> Result<Option<String>, RunError> {
    let prefix = format!("checkpoints/{run}");
    match (trainer, model) {
        (TrainerChoice::Model(_), Some(model)) => {
            let text = serde_json::to_string_pretty(model).unwrap_or_default() + "\n";
            let path = state.path(&format!("{prefix}/{MODEL}"));
            state
                .put(&path, text.into(), PutMode::Overwrite)
                .await
                .map_err(RunError::state("save this run's model"))?;
            Ok(Some(prefix))
        }
        (TrainerChoice::Exec { .. }, _) => {
            upload(state, &work.checkpoint_dir(), &prefix).await?;
            Ok(Some(prefix))
        }
        _ => Ok(None),
    }
}

/// Copies every object below `prefix` into `dir`.
async fn download(state: &StateStore, prefix: &str, dir: &Path) -> Result<(), RunError> {
    let root = state.path(prefix);
    let listed = state
        .list(prefix)
        .await
        .map_err(RunError::state("list the last run's checkpoint"))?;
    for path in listed {
        let Some(parts) = path.prefix_match(&root) else {
            continue;
        };
        let relative: PathBuf = parts.map(|p| p.as_ref().to_string()).collect();
        let file = dir.join(relative);
        let Some((bytes, _)) = state
            .get(&path)
            .await
            .map_err(RunError::state("read the last run's checkpoint"))?
        else {
            continue;
        };
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| local(parent, e))?;
        }
        crate::sys::fd::write_replacing(&file, &bytes, crate::sys::fd::PUBLIC_FILE)
            .map_err(|e| local(&file, e))?;
    }
    Ok(())
}

/// Copies every file below `dir` to objects below `prefix`.
async fn upload(state: &StateStore, dir: &Path, prefix: &str) -> Result<(), RunError> {
    for (file, relative) in files_below(dir)? {
        let bytes = std::fs::read(&file).map_err(|e| local(&file, e))?;
        let path = state.path(&format!("{prefix}/{relative}"));
        state
            .put(&path, bytes.into(), PutMode::Overwrite)
            .await
            .map_err(RunError::state("save this run's checkpoint"))?;
    }
    Ok(())
}

/// Files below `dir` with their `/`-joined paths relative to it.
fn files_below(dir: &Path) -> Result<Vec<(PathBuf, String)>, RunError> {
    let mut out = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((current, relative)) = pending.pop() {
        let entries = std::fs::read_dir(&current).map_err(|e| local(&current, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| local(&current, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if relative.is_empty() {
                name
            } else {
                format!("{relative}/{name}")
            };
            let kind = entry.file_type().map_err(|e| local(&entry.path(), e))?;
            if kind.is_dir() {
                pending.push((entry.path(), rel));
            } else if kind.is_file() {
                out.push((entry.path(), rel));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}
