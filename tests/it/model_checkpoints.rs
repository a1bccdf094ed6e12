//! Checkpoints of the built-in models: `sluice train --state` with a logistic
//! model, killed with SIGKILL at several points and resumed, continues the
//! model from its last complete checkpoint, ends as good as a run never
//! interrupted, and its statistics hold every row once per epoch.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{expected_dataset, fixture, parse_json, sluice, sluice_command, Run};

const DATASET: &str = "separable";
const EPOCHS: u64 = 20;
const BATCH: u64 = 8;

fn rows() -> u64 {
    expected_dataset(DATASET)["rows"]
        .as_u64()
        .expect("rows of separable")
}

/// A logistic job on `separable` with its state, model and summary in `dir`.
fn train_args(dir: &Path, devices: u32, extra: &[&str]) -> Vec<String> {
    let path = |name: &str| dir.join(name).display().to_string();
    let mut args: Vec<String> = vec![
        "train".into(),
        fixture(DATASET).display().to_string(),
        "--quiet".into(),
        "--model".into(),
        "logistic".into(),
        "--label".into(),
        "label".into(),
        "--features".into(),
        "f1,f2,f3".into(),
        "--epochs".into(),
        EPOCHS.to_string(),
        "--batch-size".into(),
        BATCH.to_string(),
        "--devices".into(),
        devices.to_string(),
        "--state".into(),
        path("state"),
        "--output".into(),
        path("model.json"),
        "--summary-json".into(),
        path("summary.json"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Tasks finished so far, over every run on the state (from its journal).
fn tasks_finished(state: &Path) -> usize {
    std::fs::read_to_string(state.join("journal.jsonl"))
        .unwrap_or_default()
        .matches("\"op\":\"finish\"")
        .count()
}

/// Starts the job and kills it with SIGKILL as soon as its journal holds
/// `tasks` finished tasks (over all runs so far).
fn kill_after_tasks(dir: &Path, devices: u32, tasks: usize) {
    let mut child = sluice_command(train_args(dir, devices, &[]))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice train");
    let started = Instant::now();
    while tasks_finished(&dir.join("state")) < tasks {
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!(
                "the run ended ({status}) before {tasks} tasks were done: {}",
                common::cluster::stderr_of(&mut child)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "not {tasks} tasks done within 2 minutes"
        );
        std::thread::sleep(Duration::from_millis(3));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_json(&text, &path.display().to_string())
}

/// Accuracy of the model in `model` on the whole dataset: one more epoch from
/// it with a learning rate too small to move it (accuracy is measured before
/// each update).
fn accuracy_of(model: &Path) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let summary = dir.path().join("summary.json");
    let model = model.display().to_string();
    let summary_path = summary.display().to_string();
    sluice([
        "train",
        fixture(DATASET).to_str().expect("utf8"),
        "--quiet",
        "--model",
        "logistic",
        "--label",
        "label",
        "--features",
        "f1,f2,f3",
        "--init-model",
        &model,
        "--learning-rate",
        "1e-12",
        "--summary-json",
        &summary_path,
    ])
    .success();
    read_json(&summary)["accuracy"][0]
        .as_f64()
        .expect("accuracy")
}

fn last_loss(summary: &Value) -> f64 {
    summary["loss"]
        .as_array()
        .and_then(|l| l.last())
        .and_then(Value::as_f64)
        .expect("loss of the last epoch")
}

fn killed_twice_and_resumed(devices: u32) {
    let whole = tempfile::tempdir().expect("tempdir");
    let uninterrupted = sluice(train_args(whole.path(), devices, &[])).success();
    let whole_summary = read_json(&whole.path().join("summary.json"));
    let steps = EPOCHS * rows() / BATCH;

    // Killed in epoch 4, then in epoch 12 (3 tasks an epoch).
    let dir = tempfile::tempdir().expect("tempdir");
    kill_after_tasks(dir.path(), devices, 12);
    kill_after_tasks(dir.path(), devices, 36);
    let last: Run = sluice(train_args(dir.path(), devices, &[])).success();
    let summary = read_json(&dir.path().join("summary.json"));

    // It started from the last complete checkpoint, and said so.
    let resumed = &summary["resumed"];
    let id = resumed["checkpoint"].as_str().unwrap_or_else(|| {
        panic!("the last run did not resume from a checkpoint: {summary}\n{last}")
    });
    let file: PathBuf = dir
        .path()
        .join("state/checkpoints")
        .join(format!("model-{id}.json"));
    assert!(
        last.stderr
            .contains("the model continues from its checkpoint")
            && last.stderr.contains(&file.display().to_string()),
        "{last}"
    );
    // Each row once per epoch: the checkpoint's rows and this run's make the
    // job, and the model's statistics count every row of every epoch once.
    let in_checkpoint = resumed["rows"].as_u64().expect("rows in the checkpoint");
    let this_run = summary["rows"].as_u64().expect("rows");
    assert_eq!(in_checkpoint + this_run, EPOCHS * rows(), "{summary}");
    let epochs = summary["trainer"]["epochs"].as_array().expect("epochs");
    assert_eq!(epochs.len() as u64, EPOCHS, "{summary}");
    for epoch in epochs {
        assert_eq!(epoch["rows"].as_u64(), Some(rows()), "{epoch}");
    }
    // The model went on from the checkpoint: its optimizer counts the steps of
    // the killed runs too (with one device, exactly those of an uninterrupted run).
    let model = read_json(&dir.path().join("model.json"));
    let adam_steps = model["state"]["adam_steps"].as_u64().expect("adam steps");
    let batches = summary["batches"].as_u64().expect("batches");
    assert!(
        adam_steps > batches,
        "{adam_steps} steps, {batches} batches in the last run"
    );
    if devices == 1 {
        assert_eq!(adam_steps, steps);
    }
    // As good as the run never interrupted, within noise.
    let (killed, whole_accuracy) = (
        accuracy_of(&dir.path().join("model.json")),
        accuracy_of(&whole.path().join("model.json")),
    );
    assert!(killed >= 0.98, "accuracy {killed}");
    assert!(
        (killed - whole_accuracy).abs() <= 0.01,
        "accuracy {killed}, uninterrupted {whole_accuracy}"
    );
    let (loss, whole_loss) = (last_loss(&summary), last_loss(&whole_summary));
    assert!(
        loss <= 3.0 * whole_loss + 1e-4,
        "last epoch's loss {loss}, uninterrupted {whole_loss}: {uninterrupted}"
    );
}

#[test]
fn a_logistic_model_killed_twice_resumes_from_its_checkpoints() {
    killed_twice_and_resumed(1);
}

#[test]
fn a_logistic_model_on_two_devices_killed_twice_resumes_from_its_checkpoints() {
    killed_twice_and_resumed(2);
}

#[test]
fn checkpoint_every_sets_the_steps_and_needs_state_and_a_built_in_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = sluice(train_args(dir.path(), 1, &["--checkpoint-every", "333"])).success();
    let steps = EPOCHS * rows() / BATCH;
    let mut ids: Vec<u64> = std::fs::read_dir(dir.path().join("state/checkpoints"))
        .expect("checkpoints")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("model-")?
                .strip_suffix(".json")?
                .parse()
                .ok()
        })
        .collect();
    ids.sort_unstable();
    let every: Vec<u64> = ids.iter().copied().filter(|id| id % 333 == 0).collect();
    assert_eq!(
        every.last().copied(),
        Some(steps / 333 * 333),
        "{ids:?} {run}"
    );
    assert!(ids.len() <= 4, "old checkpoints are removed: {ids:?}");

    let off = tempfile::tempdir().expect("tempdir");
    sluice(train_args(off.path(), 1, &["--checkpoint-every", "0"])).success();
    assert!(!off.path().join("state/checkpoints").exists());

    let data = fixture(DATASET).display().to_string();
    let no_state = sluice([
        "train",
        &data,
        "--model",
        "logistic",
        "--label",
        "label",
        "--features",
        "f1",
        "--checkpoint-every",
        "10",
    ]);
    assert_eq!(no_state.status.code(), Some(64), "{no_state}");
    common::assert_one_line_error(&no_state, &["--checkpoint-every", "--state"]);
    let state = dir.path().join("exec-state").display().to_string();
    let exec = sluice([
        "train",
        &data,
        "--exec",
        "cat",
        "--state",
        &state,
        "--checkpoint-every",
        "10",
    ]);
    assert_eq!(exec.status.code(), Some(64), "{exec}");
    common::assert_one_line_error(&exec, &["--checkpoint-every", "built-in"]);
}
