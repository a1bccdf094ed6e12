//! Python trainers: the `sluice_trainer` package (`python/sluice_trainer`), installed
//! with pip, under `sluice train --exec` and `sluice worker --exec` on two devices,
//! and the PyTorch example (`examples/torch`) on a Criteo-like dataset written by
//! Spark. Every id must reach the trainers exactly once (also when a trainer is
//! killed), torch tensors must share memory with the Arrow buffers, and the
//! example's loss must fall. The checkpoint lines (`checkpoints`, `checkpoint ID`)
//! of the package, of `tests/trainers/checkpoint_ids.py` and of the example are
//! checked against a fake driver (`tests/python/checkpoint_protocol.py`).
//!
//! PyTorch comes from `tests/requirements-torch.txt` (installed by `.ci/run`); without
//! it these tests fail rather than skip.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::cluster::{clean_finish, wait_exit, Job, TOKEN};
use crate::common::{
    assert_exactly_once, copy_dir, expected_dataset, fixture, parse_json, python, recorded_ids,
    run, sluice, Run, SLUICE,
};

/// A file of the repository.
fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Where `pip install` put the package (once per test run): what `PYTHONPATH` names.
fn package_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("sluice_trainer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // pip builds in the source tree; a copy keeps the repository clean.
        let source = root.join("source");
        copy_dir(&repo("python/sluice_trainer"), &source);
        let site = root.join("site");
        run(Command::new(python())
            .args(["-m", "pip", "install", "--quiet", "--no-deps"])
            .args(["--no-build-isolation", "--target"])
            .arg(&site)
            .arg(&source))
        .success();
        assert!(
            site.join("sluice_trainer/__init__.py").is_file(),
            "pip installed no sluice_trainer package into {}",
            site.display()
        );
        site
    })
}

/// `python SCRIPT ARGS` with the installed package importable: an `--exec` command.
fn exec_command(script: &str, args: &str) -> String {
    format!(
        "PYTHONPATH={} {} {} {args}",
        package_dir().display(),
        python(),
        repo(script).display()
    )
}

/// Runs `sluice train DATA --exec CMD --quiet` with more options.
fn train(data: &Path, exec: &str, options: &[&str]) -> Run {
    let mut args = vec![
        "train".to_string(),
        data.display().to_string(),
        "--exec".to_string(),
        exec.to_string(),
        "--quiet".to_string(),
    ];
    args.extend(options.iter().map(|o| o.to_string()));
    sluice(args)
}

/// The JSON files in `dir` whose names start with `prefix`.
fn json_files(dir: &Path, prefix: &str) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with(prefix) && name.ends_with(".json")
        })
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).expect("read a trainer's JSON");
            parse_json(&text, &path.display().to_string())
        })
        .collect()
}

/// Rows of a fixture dataset, as Spark counted them.
fn rows(dataset: &str) -> u64 {
    expected_dataset(dataset)["rows"].as_u64().expect("rows")
}

/// Checks what the package reported of each process: devices 0 and 1 of 2, ack fd 3.
#[track_caller]
fn assert_devices(envs: &[Value], cuda: Option<[&str; 2]>) {
    let mut seen: Vec<i64> = envs
        .iter()
        .map(|e| e["device"].as_i64().expect("device"))
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, [0, 1], "processes per device: {envs:?}");
    for env in envs {
        assert_eq!(env["devices"], 2, "{env}");
        assert_eq!(env["ack_fd"], 3, "{env}");
        let want = cuda.map_or(Value::Null, |ids| {
            Value::from(ids[env["device"].as_u64().expect("device") as usize])
        });
        assert_eq!(env["cuda_visible_devices"], want, "{env}");
    }
}

#[test]
fn package_trainer_gets_every_id_once_on_two_devices() {
    for (dataset, options) in [
        ("parquet_row_groups", ""),
        ("parquet_small_files", "--manual"),
    ] {
        let out = tempfile::tempdir().expect("tempdir");
        let exec = exec_command(
            "tests/trainers/package_ids.py",
            &format!("--out {} {options}", out.path().display()),
        );
        let data = fixture(dataset);
        let done = train(&data, &exec, &["--device-ids", "3,5", "--batch-size", "97"]);
        let what = format!("{dataset} {options}");
        assert!(done.status.success(), "{what}: {done}");
        assert_exactly_once(&recorded_ids(out.path(), "ids-"), rows(dataset), &what);
        let envs = json_files(out.path(), "env-");
        assert_eq!(envs.len(), 2, "{what}: one process per device: {envs:?}");
        assert_devices(&envs, Some(["3", "5"]));
    }
}

#[test]
fn killed_package_trainers_are_restarted_and_acknowledged_ids_arrive_once() {
    let dataset = "parquet_row_groups";
    let out = tempfile::tempdir().expect("tempdir");
    let exec = exec_command(
        "tests/trainers/package_ids.py",
        &format!("--out {} --kill-after 3", out.path().display()),
    );
    let done = train(
        &fixture(dataset),
        &exec,
        &["--devices", "2", "--batch-size", "97"],
    );
    assert!(done.status.success(), "{done}");
    for device in 0..2 {
        assert!(
            out.path().join(format!("died-{device}")).exists(),
            "the trainer of device {device} was never killed: {done}"
        );
    }
    let ids = recorded_ids(out.path(), "ids-");
    assert_exactly_once(&ids, rows(dataset), "trainers killed once per device");
    // The batch each killed process had not acknowledged reached its successor.
    let unacked = recorded_ids(out.path(), "unacked-");
    assert!(!unacked.is_empty(), "no batch was in flight at the kills");
    for id in unacked.keys() {
        assert_eq!(
            ids.get(id),
            Some(&1),
            "unacknowledged id {id} was not served again"
        );
    }
    let envs = json_files(out.path(), "env-");
    assert_eq!(
        envs.len(),
        4,
        "two processes per device (one restart each): {envs:?}"
    );
    assert_devices(&envs, None);
}

#[test]
fn package_trainer_under_sluice_worker() {
    let job = Job::new("parquet_small_files", 1);
    let mut master = job.start_master(fixture("parquet_small_files"));
    let exec = exec_command(
        "tests/trainers/package_ids.py",
        &format!("--out {}", job.ids.display()),
    );
    let mut worker = Command::new(SLUICE)
        .args(["worker", "--master", &job.url(), "--exec", &exec])
        .args(["--devices", "2", "--batch-size", "64", "-q"])
        .env("SLUICE_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start worker");
    assert!(wait_exit(&mut worker, "worker").success(), "worker failed");
    clean_finish(&mut master);
    assert_exactly_once(
        &recorded_ids(&job.ids, "ids-"),
        job.rows(),
        "sluice worker --exec with the package",
    );
    assert_devices(&json_files(&job.ids, "env-"), None);
}

#[test]
fn outside_sluice_the_package_says_so_in_one_line() {
    let script = "import sluice_trainer\nfor batch in sluice_trainer.batches():\n    pass\n";
    let done = run(Command::new(python())
        .args(["-c", script])
        .env("PYTHONPATH", package_dir())
        .env_remove("SLUICE_ACK_FD"));
    assert!(!done.status.success(), "should have failed: {done}");
    let lines: Vec<&str> = done.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr should be one line: {done}");
    assert!(
        lines[0].starts_with("sluice_trainer: SLUICE_ACK_FD is not set")
            && lines[0].contains("sluice train"),
        "unclear message: {done}"
    );
}

#[test]
fn a_cuda_device_without_cuda_is_one_line() {
    common::require_torch();
    let script =
        "import sluice_trainer\nfor t in sluice_trainer.torch_batches(device='cuda'):\n    pass\n";
    let done = run(Command::new(python())
        .args(["-c", script])
        .env("PYTHONPATH", package_dir())
        .env("CUDA_VISIBLE_DEVICES", ""));
    assert!(!done.status.success(), "should have failed: {done}");
    let lines: Vec<&str> = done.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr should be one line: {done}");
    assert!(
        lines[0].starts_with("sluice_trainer: device='cuda'")
            && lines[0].contains("torch.cuda.is_available() is False"),
        "unclear message: {done}"
    );
}

/// Buckets (of 1000) that `bucket_of` gave these strings when the hash was defined:
/// a change would send the values of models trained before to other embeddings.
const PINNED_BUCKETS: [(&str, u64); 4] = [("", 535), ("a", 186), ("Zürich", 356), ("row-1-x", 845)];

#[test]
fn torch_tensors_share_memory_with_the_arrow_buffers() {
    common::require_torch();
    let dataset = "parquet_row_groups";
    let out = tempfile::tempdir().expect("tempdir");
    let exec = exec_command(
        "tests/trainers/torch_tensors.py",
        &format!("--out {} --buckets 1000", out.path().display()),
    );
    let done = train(
        &fixture(dataset),
        &exec,
        &["--devices", "2", "--batch-size", "500"],
    );
    assert!(done.status.success(), "{done}");
    let reports = json_files(out.path(), "tensors-");
    assert_eq!(reports.len(), 2, "one report per device: {done}");
    let mut ids: HashMap<i64, u32> = HashMap::new();
    for report in &reports {
        let batches = report["batches"].as_u64().expect("batches");
        assert!(batches > 0, "a device got no batch: {report}");
        for column in ["id", "x1", "x2", "label"] {
            assert_eq!(
                report["shared"][column].as_u64(),
                Some(batches),
                "the `{column}` tensor was not a view of the Arrow buffer in every batch \
                 (copied in {:?}): {report}",
                report["copied"][column]
            );
        }
        assert_eq!(report["copied"], serde_json::json!({}), "{report}");
        assert_eq!(report["value_mismatches"], 0, "{report}");
        assert_eq!(report["hash_mismatches"], 0, "{report}");
        let dtypes = &report["dtypes"];
        assert_eq!(dtypes["id"], "torch.int64", "{report}");
        assert_eq!(dtypes["x1"], "torch.float64", "{report}");
        assert_eq!(dtypes["label"], "torch.int32", "{report}");
        assert_eq!(dtypes["s"], "torch.int64", "hashed strings: {report}");
        for (value, bucket) in PINNED_BUCKETS {
            assert_eq!(
                report["probe"][value], bucket,
                "bucket of {value:?}: {report}"
            );
        }
        for id in report["ids"].as_array().expect("ids") {
            *ids.entry(id.as_i64().expect("id")).or_insert(0) += 1;
        }
    }
    assert_exactly_once(&ids, rows(dataset), "ids seen through torch tensors");
}

#[test]
fn strings_reach_trainers_as_views_only_when_asked_for() {
    common::require_torch();
    let dataset = "parquet_row_groups";
    for (options, want) in [(&[][..], "string"), (&["--string-view"][..], "string_view")] {
        let out = tempfile::tempdir().expect("tempdir");
        let exec = exec_command(
            "tests/trainers/torch_tensors.py",
            &format!("--out {} --buckets 1000", out.path().display()),
        );
        let mut args = vec!["--devices", "1", "--batch-size", "500"];
        args.extend_from_slice(options);
        let done = train(&fixture(dataset), &exec, &args);
        assert!(done.status.success(), "{options:?}: {done}");
        let reports = json_files(out.path(), "tensors-");
        assert_eq!(reports.len(), 1, "{options:?}: {done}");
        let report = &reports[0];
        assert_eq!(report["arrow_types"]["s"], want, "{options:?}: {report}");
        assert_eq!(report["rows"].as_u64(), Some(rows(dataset)), "{report}");
        // Hashed in Python from the views: the same buckets as from plain strings.
        assert_eq!(report["hash_mismatches"], 0, "{options:?}: {report}");
        assert_eq!(report["value_mismatches"], 0, "{options:?}: {report}");
    }
}

/// Mean of the `window` first and last losses over all devices' summaries.
fn loss_ends(summaries: &[Value], window: usize) -> (f64, f64) {
    let mut first = Vec::new();
    let mut last = Vec::new();
    for summary in summaries {
        let losses: Vec<f64> = summary["losses"]
            .as_array()
            .expect("losses")
            .iter()
            .map(|l| l.as_f64().expect("loss"))
            .collect();
        first.extend(losses.iter().take(window));
        last.extend(losses.iter().rev().take(window));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    (mean(&first), mean(&last))
}

/// The Criteo-like dataset of `rows` rows that `examples/torch/make_criteo.py`
/// wrote with Spark (run by `tests/fixtures/make_criteo.py`), checked against
/// the line it printed; its path and rows.
fn criteo(rows: u64) -> (PathBuf, u64) {
    let name = format!("criteo/rows-{rows}");
    let made = common::fixture_json(&format!("{name}.json"), "make_criteo.py");
    assert_eq!(made["rows"], rows, "{made}");
    assert_eq!(made["files"], 4, "{made}");
    let data = common::fixture(&name);
    assert!(data.join("_SUCCESS").is_file(), "Spark wrote no _SUCCESS");
    (data, rows)
}

#[test]
fn torch_example_loss_falls_on_spark_written_criteo_data() {
    common::require_torch();
    let work = tempfile::tempdir().expect("tempdir");
    let (data, rows) = criteo(30_000);

    let summaries_dir = work.path().join("summaries");
    let exec = exec_command(
        "examples/torch/train_ctr.py",
        &format!("--summary-dir {} --window 15", summaries_dir.display()),
    );
    let done = train(
        &data,
        &exec,
        &["--devices", "2", "--epochs", "2", "--batch-size", "256"],
    );
    assert!(done.status.success(), "{done}");
    assert!(
        done.stderr.contains("train_ctr device 0/2")
            && done.stderr.contains("train_ctr device 1/2"),
        "each device's process should report its loss on stderr: {done}"
    );
    let summaries = json_files(&summaries_dir, "summary-");
    assert_eq!(summaries.len(), 2, "one summary per device: {done}");
    let trained: u64 = summaries
        .iter()
        .map(|s| s["rows"].as_u64().expect("rows"))
        .sum();
    assert_eq!(
        trained,
        2 * rows,
        "rows trained over 2 epochs: {summaries:?}"
    );
    for summary in &summaries {
        assert!(
            summary["steps"].as_u64() > Some(0),
            "a device trained nothing: {done}"
        );
    }

    // A device whose process started late may have had too few steps to learn much;
    // the loss is judged on those with at least three windows of steps.
    let judged: Vec<Value> = summaries
        .iter()
        .filter(|s| s["steps"].as_u64() >= Some(45))
        .cloned()
        .collect();
    assert!(!judged.is_empty(), "no device trained 45 steps: {done}");
    let (first, last) = loss_ends(&judged, 15);
    let positives: u64 = summaries
        .iter()
        .map(|s| s["positives"].as_u64().expect("positives"))
        .sum();
    let share = positives as f64 / trained as f64;
    // The loss of always predicting the base rate: below it, the features were learned.
    let base_rate = -(share * share.ln() + (1.0 - share) * (1.0 - share).ln());
    assert!(
        last < first - 0.05,
        "loss did not fall: first steps {first:.4}, last steps {last:.4}\n{done}"
    );
    assert!(
        last < base_rate - 0.03,
        "final loss {last:.4} is not below the base-rate loss {base_rate:.4}\n{done}"
    );

    // Nulls in a numeric column are refused unless asked to fill them, in one line.
    let part = std::fs::read_dir(&data)
        .expect("list criteo")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "parquet"))
        .expect("a part file");
    let script = format!(
        "import pyarrow.parquet as pq, sluice_trainer\n\
         batch = pq.read_table({:?}, columns=['I3']).to_batches()[0]\n\
         sluice_trainer.to_torch(batch)\n",
        part.display().to_string()
    );
    let refused = run(Command::new(python())
        .args(["-c", &script])
        .env("PYTHONPATH", package_dir()));
    assert!(
        !refused.status.success(),
        "nulls should be refused: {refused}"
    );
    let lines: Vec<&str> = refused.stderr.lines().collect();
    assert!(
        lines.len() == 1
            && lines[0].starts_with("sluice_trainer: column 'I3' has ")
            && lines[0].contains("nulls='fill'"),
        "unclear message for nulls: {refused}"
    );
}

/// Runs test classes of `tests/python/checkpoint_protocol.py`, a fake driver that
/// starts trainers with an ack pipe and an Arrow stream, as sluice does for one device,
/// and checks the lines they write (`checkpoints`, `ack`, `checkpoint ID`).
fn checkpoint_protocol(classes: &[&str]) {
    let done = run(Command::new(python())
        .arg(repo("tests/python/checkpoint_protocol.py"))
        .args(classes)
        .env("PYTHONPATH", package_dir()));
    assert!(done.status.success(), "{done}");
    assert!(
        done.stderr.contains("\nOK"),
        "the tests did not all run and pass: {done}"
    );
}

#[test]
fn package_and_test_trainer_write_checkpoint_lines_in_protocol_order() {
    checkpoint_protocol(&["Package", "TestTrainer"]);
}

#[test]
fn torch_example_saves_reports_and_resumes_checkpoints() {
    common::require_torch();
    checkpoint_protocol(&["TorchExample"]);
}

#[test]
fn torch_example_killed_under_sluice_resumes_from_its_checkpoint_with_each_row_once() {
    common::require_torch();
    let work = tempfile::tempdir().expect("tempdir");
    let (data, rows) = criteo(12_000);
    let state = work.path().join("state");
    let checkpoints = work.path().join("checkpoints");
    // Each run has its summaries apart: trainers of the killed run may still
    // end their stream (and write a summary) as they are being killed.
    let exec = |summaries: &Path| {
        exec_command(
            "examples/torch/train_ctr.py",
            &format!(
                "--summary-dir {} --window 5 --checkpoint-dir {} --checkpoint-every 5 \
                 --keep-checkpoints 1000",
                summaries.display(),
                checkpoints.display()
            ),
        )
    };
    let command = |summaries: &Path| {
        let mut cmd = common::sluice_command([
            "train",
            data.to_str().expect("utf8"),
            "--quiet",
            "--devices",
            "2",
            "--batch-size",
            "128",
            "--epochs",
            "2",
        ]);
        cmd.arg("--state")
            .arg(&state)
            .args(["--exec", &exec(summaries)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    };
    // Kill once both devices saved their second checkpoint (step 10).
    let mut first = command(&work.path().join("killed"))
        .spawn()
        .expect("start sluice train");
    let saved = |device: &str| -> u64 {
        std::fs::read_dir(checkpoints.join(device))
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<u64>().ok())
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    };
    common::wait_until(
        "two checkpoints per device",
        std::time::Duration::from_secs(300),
        || saved("device-0") >= 10 && saved("device-1") >= 10,
    );
    first.kill().expect("SIGKILL");
    let _ = first.wait();
    let summaries = work.path().join("resumed");
    let resumed = run(&mut command(&summaries)).success();
    // "resuming from the trainers' last complete checkpoint ... rows=N"
    let line = resumed
        .stderr
        .lines()
        .find(|l| l.contains("last complete checkpoint"))
        .unwrap_or_else(|| panic!("the resumed run names no checkpoint: {resumed}"));
    let in_checkpoint: u64 = line
        .split("rows=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no row count in `{line}`"));
    assert!(in_checkpoint > 0, "{line}");
    let done = json_files(&summaries, "summary-");
    assert_eq!(done.len(), 2, "one summary per device: {resumed}");
    for summary in &done {
        assert!(
            !summary["resumed_from"].is_null(),
            "device {} did not load its checkpoint: {summary}",
            summary["device"]
        );
    }
    let trained: u64 = done.iter().map(|s| s["rows"].as_u64().expect("rows")).sum();
    assert_eq!(
        trained + in_checkpoint,
        2 * rows,
        "the resumed run trains exactly the rows its checkpoint lacks"
    );
}
