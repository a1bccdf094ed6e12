//! `sluice train` end to end over real Spark output: every id arrives exactly
//! once through exec trainers, crashes are recovered, models learn, and bad
//! input fails clearly.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::common;

use crate::common::{assert_exactly_once, copy_dir, recorded_ids, recorder};

fn fixtures() -> PathBuf {
    let dir = std::env::var_os("SLUICE_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/generated"));
    assert!(
        dir.join("expected.json").exists(),
        "no Spark fixtures in {}: run tests/run.sh, which writes them",
        dir.display()
    );
    dir
}

fn expected_rows(name: &str) -> u64 {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).expect("expected.json");
    let v: Value = serde_json::from_str(&text).expect("expected.json is JSON");
    v["datasets"][name]["rows"]
        .as_u64()
        .unwrap_or_else(|| panic!("no row count for {name} in expected.json"))
}

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn train_exec(
    dataset: &str,
    devices: usize,
    extra: &[&str],
) -> (Output, HashMap<i64, u32>, tempfile::TempDir) {
    let out_dir = tempfile::tempdir().expect("tempdir");
    let data = fixtures().join(dataset);
    let cmd = recorder(out_dir.path(), "");
    let devices = devices.to_string();
    let mut args = vec![
        "train",
        data.to_str().expect("utf8 path"),
        "--exec",
        &cmd,
        "--devices",
        &devices,
        "--batch-size",
        "97",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let out = sluice(&args);
    let ids = recorded_ids(out_dir.path(), "ids-");
    (out, ids, out_dir)
}

#[test]
fn every_id_once_across_formats_and_devices() {
    for dataset in [
        "parquet_partitioned",
        "csv_gzip",
        "json",
        "orc",
        "parquet_row_groups",
    ] {
        for devices in [1, 4] {
            let (out, ids, _dir) = train_exec(dataset, devices, &[]);
            assert!(
                out.status.success(),
                "{dataset} on {devices} devices failed: {}",
                stderr(&out)
            );
            assert_exactly_once(
                &ids,
                expected_rows(dataset),
                &format!("{dataset} x{devices}"),
            );
        }
    }
}

#[test]
fn byte_range_splits_and_shuffle_keep_every_id_once() {
    let (out, ids, _dir) = train_exec(
        "csv_plain",
        3,
        &[
            "--split-size",
            "16KiB",
            "--shuffle-buffer",
            "500",
            "--seed",
            "7",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_exactly_once(
        &ids,
        expected_rows("csv_plain"),
        "csv_plain split in byte ranges",
    );
    let (out, ids, _dir) = train_exec(
        "parquet_row_groups",
        2,
        &["--split-size", "64KiB", "--prefetch", "3"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_exactly_once(
        &ids,
        expected_rows("parquet_row_groups"),
        "row-group splits",
    );
}

/// The batches the trainers of tests/trainers/ack_log.py in `dir` were handed,
/// in the order they arrived: (arrival time, ids) each.
fn batches_in_arrival_order(dir: &Path) -> Vec<(f64, Vec<i64>)> {
    let mut batches = Vec::new();
    for entry in std::fs::read_dir(dir).expect("list").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(trainer) = name.strip_prefix("times-") else {
            continue;
        };
        let read = |path: PathBuf| {
            std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
        };
        let times = read(entry.path());
        let ids = read(dir.join(format!("ids-{trainer}")));
        let mut ids = ids.lines().map(|l| l.parse::<i64>().expect("an id"));
        for line in times.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let time: f64 = fields[0].parse().expect("a time");
            let rows: usize = fields[2].parse().expect("a row count");
            batches.push((time, ids.by_ref().take(rows).collect()));
        }
    }
    batches.sort_by(|a, b| a.0.total_cmp(&b.0));
    batches
}

#[test]
fn a_read_ahead_smaller_than_a_row_group_still_delivers_every_id_once() {
    // One byte: every row group is fetched alone, and each reader has at most
    // one batch waiting; nothing may stall or be lost.
    for extra in [
        &["--read-ahead", "1"][..],
        &["--read-ahead", "1", "--lockstep"],
    ] {
        let mut args = vec!["--split-size", "64KiB", "--prefetch", "4"];
        args.extend_from_slice(extra);
        let (out, ids, _dir) = train_exec("parquet_row_groups", 3, &args);
        assert!(out.status.success(), "{extra:?}: {}", stderr(&out));
        assert_exactly_once(
            &ids,
            expected_rows("parquet_row_groups"),
            &format!("row groups read one at a time {extra:?}"),
        );
    }
}

#[test]
fn several_epochs_deliver_every_id_once_per_epoch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = fixtures().join("parquet_small_files");
    let out = sluice(&[
        "train",
        data.to_str().expect("utf8"),
        "--exec",
        &common::ack_log(dir.path(), 0.0),
        "--devices",
        "2",
        "--batch-size",
        "97",
        "--epochs",
        "3",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = expected_rows("parquet_small_files");
    // An epoch starts once every task of the one before is done, so the
    // batches in the order they arrived are the epochs one after the other.
    let mut batches = batches_in_arrival_order(dir.path()).into_iter();
    for epoch in 1..=3 {
        let mut ids: HashMap<i64, u32> = HashMap::new();
        let mut taken = 0u64;
        while taken < rows {
            let (_, batch) = batches
                .next()
                .unwrap_or_else(|| panic!("epoch {epoch} ended after {taken} of {rows} rows"));
            taken += batch.len() as u64;
            for id in batch {
                *ids.entry(id).or_insert(0) += 1;
            }
        }
        assert_exactly_once(&ids, rows, &format!("epoch {epoch}"));
    }
    let left: Vec<_> = batches.collect();
    assert!(left.is_empty(), "batches after the third epoch: {left:?}");
}

#[test]
fn a_killed_trainer_loses_nothing_and_repeats_only_unacknowledged_batches() {
    let out_dir = tempfile::tempdir().expect("tempdir");
    let data = fixtures().join("parquet_small_files");
    let cmd = recorder(out_dir.path(), "--die-after 3");
    let out = sluice(&[
        "train",
        data.to_str().expect("utf8"),
        "--exec",
        &cmd,
        "--devices",
        "2",
        "--batch-size",
        "50",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let acked = recorded_ids(out_dir.path(), "ids-");
    let unacked = recorded_ids(out_dir.path(), "unacked-");
    assert!(
        !unacked.is_empty(),
        "the trainer was supposed to die holding a batch"
    );
    assert_exactly_once(
        &acked,
        expected_rows("parquet_small_files"),
        "after a trainer crash",
    );
    // What the dead trainers held went to their successors, once.
    let held: Vec<_> = unacked
        .keys()
        .filter(|id| acked.get(id) != Some(&1))
        .collect();
    assert!(
        held.is_empty(),
        "unacknowledged ids not served again once: {held:?}"
    );
}

#[test]
fn logistic_regression_separates_spark_data() {
    for devices in ["1", "4"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let summary = dir.path().join("summary.json");
        let model = dir.path().join("model.json");
        let data = fixtures().join("separable");
        let out = sluice(&[
            "train",
            data.to_str().expect("utf8"),
            "--model",
            "logistic",
            "--label",
            "label",
            "--features",
            "f1,f2,f3",
            "--epochs",
            "8",
            "--devices",
            devices,
            "--batch-size",
            "64",
            "--quiet",
            "--summary-json",
            summary.to_str().expect("utf8"),
            "--output",
            model.to_str().expect("utf8"),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let s: Value = serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary"))
            .expect("json");
        let acc = s["accuracy"].as_array().expect("accuracy per epoch");
        let last = acc.last().and_then(Value::as_f64).expect("last accuracy");
        assert!(last >= 0.95, "accuracy {last} on {devices} devices: {s}");
        let loss: Vec<f64> = s["loss"]
            .as_array()
            .expect("loss")
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        assert!(loss.last() < loss.first(), "loss should fall: {loss:?}");
        assert_eq!(s["rows"].as_u64(), Some(8 * expected_rows("separable")));
        assert_eq!(s["tasks_failed"].as_array().map(Vec::len), Some(0));
        let m: Value =
            serde_json::from_str(&std::fs::read_to_string(&model).expect("model")).expect("json");
        assert_eq!(m["weights"].as_array().map(Vec::len), Some(3));
    }
}

#[test]
fn a_corrupt_file_fails_its_task_and_everything_else_trains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_dir(&fixtures().join("parquet_small_files"), &data);
    let victim = std::fs::read_dir(&data)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a parquet file");
    let bytes = std::fs::read(&victim).expect("read");
    let mut broken = bytes.clone();
    let mid = broken.len() / 2;
    for b in &mut broken[8..mid] {
        *b = 0xAB;
    }
    std::fs::write(&victim, &broken).expect("corrupt");
    let summary = dir.path().join("summary.json");
    let ids_dir = dir.path().join("ids");
    std::fs::create_dir(&ids_dir).expect("ids dir");
    let cmd = recorder(&ids_dir, "");
    let out = sluice(&[
        "train",
        data.to_str().expect("utf8"),
        "--exec",
        &cmd,
        "--quiet",
        "--summary-json",
        summary.to_str().expect("utf8"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a failed task must give exit code 2: {}",
        stderr(&out)
    );
    let name = victim.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(
        stderr(&out).contains(name),
        "stderr should name {name}: {}",
        stderr(&out)
    );
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("json");
    let failed = s["tasks_failed"].as_array().expect("tasks_failed");
    assert_eq!(failed.len(), 1, "{s}");
    assert!(
        failed[0]["file"]
            .as_str()
            .is_some_and(|f| f.ends_with(name)),
        "{s}"
    );
    let ids = recorded_ids(&ids_dir, "ids-");
    let twice: Vec<_> = ids.iter().filter(|(_, &c)| c > 1).take(5).collect();
    assert!(twice.is_empty(), "ids delivered twice: {twice:?}");
    let total = expected_rows("parquet_small_files");
    let lost = common::expected_dataset("parquet_small_files")["file_rows"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("expected.json has no row count for {name}"));
    assert_eq!(
        ids.len() as u64,
        total - lost,
        "every row but the {lost} of {name} is trained"
    );
    assert!(ids.keys().all(|&id| id >= 0 && (id as u64) < total));
}

#[test]
fn unknown_label_names_it_and_lists_columns() {
    let data = fixtures().join("separable");
    let out = sluice(&[
        "train",
        data.to_str().expect("utf8"),
        "--model",
        "logistic",
        "--label",
        "nope",
        "--features",
        "f1",
        "--quiet",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    // The columns it lists include those not named on the command line.
    assert!(
        err.contains("nope") && ["f1", "f2", "f3", "id"].iter().all(|c| err.contains(c)),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn non_numeric_feature_is_refused() {
    let data = fixtures().join("parquet_partitioned");
    let out = sluice(&[
        "train",
        data.to_str().expect("utf8"),
        "--model",
        "linear",
        "--label",
        "x1",
        "--features",
        "country",
        "--quiet",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("country"), "{}", stderr(&out));
}

#[test]
fn an_exec_trainer_that_cannot_start_is_a_clear_error() {
    let data = fixtures().join("separable");
    let out = sluice(&[
        "train",
        data.to_str().expect("utf8"),
        "--exec",
        "/nonexistent/trainer --flag",
        "--quiet",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("/nonexistent/trainer"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn unfinished_output_is_refused_unless_allowed() {
    let data = fixtures().join("failed_job");
    let out = sluice(&["train", data.to_str().expect("utf8"), "--quiet"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("_temporary") && err.contains("--allow-incomplete"),
        "{err}"
    );
    let out = sluice(&[
        "train",
        data.to_str().expect("utf8"),
        "--quiet",
        "--allow-incomplete",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("trained {} rows", expected_rows("failed_job"))),
        "{}",
        stderr(&out)
    );
}

#[test]
fn empty_output_is_refused_unless_allowed() {
    // What Spark leaves for an empty DataFrame written as CSV or JSON.
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("out-empty");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("_SUCCESS"), b"").expect("write _SUCCESS");
    let data = dir.to_str().expect("utf8");
    let out = sluice(&["train", data, "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let line = one_error_line(&out);
    assert!(
        line.contains(data) && line.contains("empty output") && line.contains("--allow-empty"),
        "{line}"
    );
    // No trainer is started: there is nothing to hand it, not even a schema.
    let out = sluice(&[
        "train",
        data,
        "--quiet",
        "--allow-empty",
        "--exec",
        "exit 3",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("empty output"),
        "a warning: {}",
        stderr(&out)
    );

    // A master refuses it before it listens, and with --allow-empty serves
    // an empty job that is over at once.
    let master = |extra: &[&str]| {
        let state = tempfile::tempdir_in(tmp.path()).expect("tempdir");
        let mut args = vec![
            "master",
            data,
            "--listen",
            "127.0.0.1:0",
            "--linger",
            "0s",
            "--state",
            state.path().to_str().expect("utf8"),
        ];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(&args)
            .env("SLUICE_TOKEN", "a-token-long-enough-for-a-master")
            .output()
            .expect("run sluice master")
    };
    let out = master(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let line = one_error_line(&out);
    assert!(
        line.contains(data) && line.contains("empty output"),
        "{line}"
    );
    let out = master(&["--allow-empty"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("empty output"),
        "a warning: {}",
        stderr(&out)
    );

    // Rows a listing cannot count: JSON files holding no record are found
    // empty once read.
    std::fs::write(dir.join("part-00000.json"), b"\n\n").expect("write part");
    let out = sluice(&["train", data, "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let line = one_error_line(&out);
    assert!(
        line.contains(data) && line.contains("empty output"),
        "{line}"
    );
}

#[test]
fn wait_success_times_out_clearly_and_starts_when_success_appears() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("out");
    copy_dir(&fixtures().join("parquet_small_files"), &data);
    std::fs::remove_file(data.join("_SUCCESS")).expect("remove _SUCCESS");
    let out = sluice(&[
        "train",
        data.to_str().expect("utf8"),
        "--wait-success=2s",
        "--quiet",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("_SUCCESS"), "{}", stderr(&out));
    // A run waiting for _SUCCESS starts once it appears.
    let log = dir.path().join("train.log");
    let mut waiting = common::sluice_command([
        "train",
        data.to_str().expect("utf8"),
        "--wait-success=120s",
        "--quiet",
    ])
    .env("RUST_LOG", "info")
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(&log).expect("log file"))
    .spawn()
    .expect("start sluice");
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    common::wait_until(
        "the run to wait for _SUCCESS",
        Duration::from_secs(60),
        || read_log().contains("waiting for _SUCCESS"),
    );
    assert!(
        waiting.try_wait().expect("try_wait").is_none(),
        "the run ended without _SUCCESS: {}",
        read_log()
    );
    std::fs::write(data.join("_SUCCESS"), b"").expect("write _SUCCESS");
    let status = common::cluster::wait_exit(&mut waiting, "sluice train");
    assert!(status.success(), "{}", read_log());
    assert!(
        read_log().contains(&format!(
            "trained {} rows",
            expected_rows("parquet_small_files")
        )),
        "{}",
        read_log()
    );
}

#[test]
fn bundled_example_trains_and_loss_falls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let summary = dir.path().join("s.json");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/clicks");
    let out = sluice(&[
        "train",
        example.to_str().expect("utf8"),
        "--model",
        "logistic",
        "--label",
        "label",
        "--features",
        "f1,f2,f3,f4",
        "--epochs",
        "5",
        "--devices",
        "2",
        "--batch-size",
        "256",
        "--quiet",
        "--summary-json",
        summary.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("json");
    let loss: Vec<f64> = s["loss"]
        .as_array()
        .expect("loss")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert_eq!(loss.len(), 5);
    assert!(loss[4] < loss[0], "loss should fall: {loss:?}");
}

#[test]
fn bad_flags_are_one_line_errors() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/clicks");
    let out = sluice(&[
        "train",
        example.to_str().expect("utf8"),
        "--batch-size",
        "0",
    ]);
    assert!(!out.status.success());
    assert!(
        one_error_line(&out).contains("batch-size"),
        "{}",
        stderr(&out)
    );
    let out = sluice(&[
        "train",
        example.to_str().expect("utf8"),
        "--model",
        "logistic",
        "--features",
        "f1",
    ]);
    assert!(!out.status.success());
    assert!(one_error_line(&out).contains("--label"), "{}", stderr(&out));
}

/// The exit code of `sluice ARGS`, with its stderr for messages.
fn exit_code(args: &[&str]) -> (Option<i32>, String) {
    let out = sluice(args);
    (out.status.code(), stderr(&out))
}

/// The stderr of a failed run, checked to be one line starting `sluice: `.
#[track_caller]
fn one_error_line(out: &Output) -> String {
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "one line expected: {err}");
    assert!(err.starts_with("sluice: "), "{err}");
    err
}

#[test]
fn exit_codes_tell_usage_errors_from_failures() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/clicks");
    let ex = example.to_str().expect("utf8");
    let usage: [&[&str]; 11] = [
        &[],
        &["ls", "--no-such-flag", ex],
        &["train"],
        &["train", ex, "--epochs", "x"],
        &["train", ex, "--epochs", "0"],
        &["train", ex, "--batch-size", "0"],
        &["train", ex, "--model", "logistic", "--features", "f1"],
        &["train", ex, "--split-size", "0"],
        &["train", ex, "--read-ahead", "0"],
        &["train", ex, "--read-ahead", "lots"],
        &["master", ex],
    ];
    for args in usage {
        let (code, err) = exit_code(args);
        assert_eq!(
            code,
            Some(64),
            "`sluice {}` is a usage error: {err}",
            args.join(" ")
        );
    }
    for args in [&["--help"][..], &["--version"], &["train", "--help"]] {
        let (code, err) = exit_code(args);
        assert_eq!(code, Some(0), "`sluice {}`: {err}", args.join(" "));
    }
    let help = String::from_utf8_lossy(&sluice(&["--help"]).stdout).into_owned();
    let table = help
        .split("Exit codes:")
        .nth(1)
        .unwrap_or_else(|| panic!("`sluice --help` lists no exit codes: {help}"));
    for code in ["0 ", "1 ", "2 ", "3 ", "64 "] {
        assert!(
            table.lines().any(|l| l.trim_start().starts_with(code)),
            "exit code {code}missing from: {table}"
        );
    }
    let missing = Path::new(env!("CARGO_MANIFEST_DIR")).join("no-such-output");
    let (code, err) = exit_code(&["train", missing.to_str().expect("utf8"), "--quiet"]);
    assert_eq!(
        code,
        Some(1),
        "a missing dataset is an error, not a usage error: {err}"
    );
}

#[test]
fn a_column_listed_twice_is_refused_naming_it() {
    let data = fixtures().join("parquet_small_files");
    let data = data.to_str().expect("utf8");
    let out = sluice(&["train", data, "--columns", "id,x1,id", "--quiet"]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    let err = one_error_line(&out);
    assert!(err.contains("--columns") && err.contains("`id`"), "{err}");
    let state = tempfile::tempdir().expect("tempdir");
    let out = sluice(&[
        "master",
        data,
        "--state",
        state.path().to_str().expect("utf8"),
        "--columns",
        "x1,x1",
    ]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    let err = one_error_line(&out);
    assert!(err.contains("--columns") && err.contains("`x1`"), "{err}");
}

#[test]
fn a_state_on_a_store_is_refused_and_a_file_url_is_a_directory() {
    let data = fixtures().join("parquet_small_files");
    let data = data.to_str().expect("utf8");
    // Run where a store URL taken for a path would leave a directory (`s3:`).
    let cwd = tempfile::tempdir().expect("tempdir");
    let train = |state: &str| {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["train", data, "--state", state, "--quiet"])
            .current_dir(cwd.path())
            .output()
            .expect("run sluice")
    };
    for url in [
        "hdfs://127.0.0.1:1/sluice/state",
        "s3://bucket/sluice/state",
        "gs://bucket/sluice/state",
        "az://container/sluice/state",
    ] {
        let out = train(url);
        assert_eq!(out.status.code(), Some(64), "{url}: {}", stderr(&out));
        let err = one_error_line(&out);
        assert!(
            err.contains(&format!("--state {url}")) && err.contains("sluice master"),
            "{err}"
        );
    }
    let state = cwd.path().join("state");
    let out = train(&format!("file://{}", state.display()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        state.join("job.json").is_file(),
        "no state in {}",
        state.display()
    );
    let left: Vec<_> = std::fs::read_dir(cwd.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, ["state"], "only the state directory is made");
}

/// A copy of the Spark output `parquet_small_files` with the Spark part file of
/// `bad/truncated_parquet` (cut in half: no footer) among its parts; its name.
fn small_files_with_a_cut_footer(root: &Path) -> (PathBuf, String) {
    let data = root.join("data");
    copy_dir(&fixtures().join("parquet_small_files"), &data);
    let bad_dir = fixtures().join("bad/truncated_parquet");
    let bad = std::fs::read_dir(&bad_dir)
        .expect("bad/truncated_parquet")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a truncated parquet file");
    let name = bad.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(!data.join(name).exists(), "{name} is already a good part");
    std::fs::copy(&bad, data.join(name)).expect("copy");
    (data, name.to_string())
}

#[test]
fn a_corrupt_footer_stops_planning_unless_ignore_corrupt_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, name) = small_files_with_a_cut_footer(dir.path());
    let data = data.to_str().expect("utf8");
    let ids_dir = dir.path().join("ids");
    let cmd = recorder(&ids_dir, "");

    let out = sluice(&["train", data, "--exec", &cmd, "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = one_error_line(&out);
    assert!(err.contains(&name) && err.contains("corrupt"), "{err}");
    assert!(!ids_dir.exists(), "nothing is trained when planning fails");

    std::fs::create_dir(&ids_dir).expect("ids dir");
    let summary = dir.path().join("summary.json");
    let out = sluice(&[
        "train",
        data,
        "--exec",
        &cmd,
        "--devices",
        "2",
        "--quiet",
        "--ignore-corrupt-files",
        "--summary-json",
        summary.to_str().expect("utf8"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a corrupt file is a failed task: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out)
            .lines()
            .any(|l| l.contains("failed task: ") && l.contains(&name)),
        "the printed summary names {name}: {}",
        stderr(&out)
    );
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("json");
    let failed = s["tasks_failed"].as_array().expect("tasks_failed");
    assert_eq!(failed.len(), 1, "{s}");
    assert!(
        failed[0]["file"]
            .as_str()
            .is_some_and(|f| f.ends_with(&name)),
        "{s}"
    );
    let rows = expected_rows("parquet_small_files");
    assert_eq!(s["rows"].as_u64(), Some(rows), "{s}");
    assert_exactly_once(&recorded_ids(&ids_dir, "ids-"), rows, "the good files");
}

#[test]
fn a_killed_run_resumes_from_its_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let first = dir.path().join("first");
    let second = dir.path().join("second");
    std::fs::create_dir(&first).expect("mkdir");
    std::fs::create_dir(&second).expect("mkdir");
    let data = fixtures().join("parquet_small_files");
    let run = |ids: &Path| {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "train",
                data.to_str().expect("utf8"),
                "--quiet",
                "--batch-size",
                "40",
                "--devices",
                "2",
            ])
            .args(["--state", state.to_str().expect("utf8")])
            .args(["--exec", &recorder(ids, "--sleep 0.1")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start sluice")
    };
    let mut killed = run(&first);
    // Killed once its state holds some committed rows.
    common::wait_until("rows committed", Duration::from_secs(90), || {
        state.join("job.json").is_file()
            && common::cluster::state_queue(&state).status().rows_committed > 0
    });
    killed.kill().expect("SIGKILL");
    let _ = killed.wait();
    let committed = common::cluster::state_queue(&state).status().rows_committed;
    let out = run(&second).wait_with_output().expect("resume");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = expected_rows("parquet_small_files");
    let before = recorded_ids(&first, "ids-");
    let after = recorded_ids(&second, "ids-");
    // The resumed run trains exactly what its state does not hold as committed.
    assert_eq!(
        after.values().map(|&n| u64::from(n)).sum::<u64>(),
        rows - committed,
        "the resumed run trains the {} rows not committed before the kill",
        rows - committed
    );
    let mut all = before.clone();
    for (id, n) in after {
        *all.entry(id).or_insert(0) += n;
    }
    let missing: Vec<i64> = (0..rows as i64)
        .filter(|i| !all.contains_key(i))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "ids lost across the crash: {missing:?}");
}

#[test]
fn every_split_of_every_dataset_yields_each_row_once() {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).expect("expected.json");
    let expected: Value = serde_json::from_str(&text).expect("json");
    let datasets = expected["datasets"].as_object().expect("datasets");
    let mut checked = 0;
    for (name, info) in datasets {
        let rows = info["rows"].as_u64().unwrap_or(0);
        if name.starts_with("bad/") || rows == 0 {
            continue;
        }
        let text_format = info["format"] == "text";
        let out_dir = tempfile::tempdir().expect("tempdir");
        let column = if text_format { "--column key" } else { "" };
        let cmd = recorder(out_dir.path(), column);
        let data = fixtures().join(name);
        let mut args = vec![
            "train",
            data.to_str().expect("utf8"),
            "--exec",
            &cmd,
            "--devices",
            "2",
            "--batch-size",
            "128",
            "--split-size",
            "64KiB",
            "--quiet",
            "--allow-incomplete",
        ];
        if text_format {
            args.push("--text-key-value");
        }
        let out = sluice(&args);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let ids = recorded_ids(out_dir.path(), "ids-");
        assert_exactly_once(&ids, rows, name);
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} datasets checked");
}

/// The command line of a logistic job on `separable` keeping its state in
/// `state`, with the flags of `set` replacing or added to the usual ones.
fn logistic_args(dir: &Path, state: &Path, set: &[(&str, &str)]) -> Vec<String> {
    let data = fixtures().join("separable");
    let model = dir.join("model.json");
    let summary = dir.join("summary.json");
    let mut flags: Vec<(&str, &str)> = vec![
        ("--model", "logistic"),
        ("--label", "label"),
        ("--features", "f1,f2"),
        ("--batch-size", "64"),
        ("--state", state.to_str().expect("utf8")),
        ("--output", model.to_str().expect("utf8")),
        ("--summary-json", summary.to_str().expect("utf8")),
    ];
    for &(flag, value) in set {
        match flags.iter_mut().find(|(f, _)| *f == flag) {
            Some(entry) => entry.1 = value,
            None => flags.push((flag, value)),
        }
    }
    let mut args = vec![
        "train".to_string(),
        data.display().to_string(),
        "--quiet".to_string(),
    ];
    for (flag, value) in flags {
        args.push(flag.to_string());
        args.push(value.to_string());
    }
    args
}

#[test]
fn a_finished_job_run_again_does_nothing_and_keeps_its_outputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let first = common::sluice(logistic_args(dir.path(), &state, &[("--epochs", "2")])).success();
    assert!(
        first
            .stderr
            .contains(&format!("trained {} rows", 2 * expected_rows("separable"))),
        "{first}"
    );
    let model = std::fs::read(dir.path().join("model.json")).expect("model");
    let summary = std::fs::read(dir.path().join("summary.json")).expect("summary");
    // The same job again, and again on other devices (which do not change what is trained).
    for extra in [
        &[("--epochs", "2")][..],
        &[("--epochs", "2"), ("--devices", "2")][..],
    ] {
        let again = common::sluice(logistic_args(dir.path(), &state, extra)).success();
        let lines: Vec<&str> = again.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {again}");
        assert!(
            lines[0].contains("already finished")
                && lines[0].contains("nothing to do")
                && lines[0].contains(state.to_str().expect("utf8")),
            "{again}"
        );
        assert_eq!(
            std::fs::read(dir.path().join("model.json")).expect("model"),
            model,
            "--output left as the finished run wrote it"
        );
        assert_eq!(
            std::fs::read(dir.path().join("summary.json")).expect("summary"),
            summary,
            "--summary-json left as the finished run wrote it"
        );
    }
    // A run killed after its last task but before it ended (and wrote its
    // outputs) leaves no record of its end: the same command finishes it,
    // writing the outputs from the model's last checkpoint.
    std::fs::remove_file(state.join("finished.json")).expect("the end of the run is recorded");
    std::fs::remove_file(dir.path().join("model.json")).expect("the model");
    let finished =
        common::sluice(logistic_args(dir.path(), &state, &[("--epochs", "2")])).success();
    assert!(!finished.stderr.contains("remove"), "{finished}");
    let rebuilt = common::parse_json(
        &std::fs::read_to_string(dir.path().join("model.json")).expect("--output written again"),
        "model",
    );
    let original = common::parse_json(&String::from_utf8_lossy(&model), "model");
    assert_eq!(
        rebuilt["state"]["adam_steps"], original["state"]["adam_steps"],
        "the model holds every step once"
    );
    assert!(state.join("finished.json").exists(), "the end is recorded");
}

#[test]
fn a_state_refuses_other_options_naming_both_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    common::sluice(logistic_args(dir.path(), &state, &[])).success();
    let model = std::fs::read(dir.path().join("model.json")).expect("model");
    let copy = dir.path().join("copy");
    copy_dir(&fixtures().join("separable"), &copy);
    let copy_url = format!("file://{}", copy.display());
    let with_copy = {
        let mut args = logistic_args(dir.path(), &state, &[]);
        args[1] = copy.display().to_string();
        args
    };
    let cases: Vec<(Vec<String>, &str, &str, &str)> = vec![
        (
            logistic_args(dir.path(), &state, &[("--epochs", "2")]),
            "--epochs",
            "1",
            "2",
        ),
        (
            logistic_args(dir.path(), &state, &[("--features", "f1,f2,f3")]),
            "--features",
            "f1,f2",
            "f1,f2,f3",
        ),
        (
            logistic_args(dir.path(), &state, &[("--label", "f3")]),
            "--label",
            "label",
            "f3",
        ),
        (
            logistic_args(dir.path(), &state, &[("--model", "linear")]),
            "--model",
            "logistic",
            "linear",
        ),
        (
            logistic_args(dir.path(), &state, &[("--batch-size", "32")]),
            "--batch-size",
            "64",
            "32",
        ),
        (
            logistic_args(dir.path(), &state, &[("--seed", "5")]),
            "--seed",
            "0",
            "5",
        ),
        (
            logistic_args(dir.path(), &state, &[("--shuffle-buffer", "100")]),
            "--shuffle-buffer",
            "0",
            "100",
        ),
        (
            logistic_args(dir.path(), &state, &[("--shuffle", "global")]),
            "--shuffle",
            "not given",
            "global",
        ),
        (
            logistic_args(dir.path(), &state, &[("--columns", "label,f1,f2")]),
            "--columns",
            "not given",
            "label,f1,f2",
        ),
        (
            logistic_args(dir.path(), &state, &[("--format", "parquet")]),
            "--format",
            "not given",
            "parquet",
        ),
        (with_copy, "the dataset", "separable", &copy_url),
    ];
    for (args, option, recorded, given) in cases {
        let run = common::sluice(&args);
        common::assert_one_line_error(
            &run,
            &[
                &format!("{option} was "),
                &format!("{recorded} there"),
                &format!("{given} now"),
                state.to_str().expect("utf8"),
                "remove",
            ],
        );
        assert_eq!(run.status.code(), Some(1), "{run}");
        assert_eq!(
            std::fs::read(dir.path().join("model.json")).expect("model"),
            model,
            "a refused run writes nothing: {run}"
        );
    }
}

/// This machine's host name, as the lock file records it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("host name")
        .trim()
        .to_string()
}

#[test]
fn a_second_run_on_a_held_state_exits_3_naming_the_holder_and_a_killed_one_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let ids: Vec<PathBuf> = ["first", "refused", "resumed"]
        .iter()
        .map(|name| dir.path().join(name))
        .collect();
    for d in &ids {
        std::fs::create_dir(d).expect("mkdir");
    }
    let data = fixtures().join("parquet_small_files");
    let command = |ids: &Path| {
        let mut cmd = common::sluice_command([
            "train",
            data.to_str().expect("utf8"),
            "--quiet",
            "--batch-size",
            "40",
            "--devices",
            "2",
        ]);
        cmd.args(["--state", state.to_str().expect("utf8")])
            .args(["--exec", &recorder(ids, "--sleep 0.2")]);
        cmd
    };
    let mut first = command(&ids[0])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start sluice");
    let pid = first.id();
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(state.join("lock"))
        .unwrap_or_default()
        .contains(&format!("\"pid\":{pid}"))
    {
        assert!(
            first.try_wait().expect("try_wait").is_none(),
            "the first run ended before taking the lock"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the first run never wrote its name into the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let refused = common::run(&mut command(&ids[1]));
    assert!(
        first.try_wait().expect("try_wait").is_none(),
        "the first run should still hold the state"
    );
    assert_eq!(refused.status.code(), Some(3), "{refused}");
    common::assert_one_line_error(
        &refused,
        &[
            &format!("pid {pid}"),
            &host_name(),
            state.to_str().expect("utf8"),
        ],
    );
    assert!(
        recorded_ids(&ids[1], "ids-").is_empty(),
        "the refused run trained nothing"
    );
    // Kill it once it has finished a task, so that the resume has something to skip.
    while !std::fs::read_to_string(state.join("journal.jsonl"))
        .unwrap_or_default()
        .contains("\"op\":\"finish\"")
    {
        assert!(
            first.try_wait().expect("try_wait").is_none(),
            "the first run ended before it was killed"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the first run finished no task"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    first.kill().expect("SIGKILL");
    let _ = first.wait();
    let resumed = common::run(&mut command(&ids[2])).success();
    let rows = expected_rows("parquet_small_files");
    let before = recorded_ids(&ids[0], "ids-");
    let after = recorded_ids(&ids[2], "ids-");
    assert!(
        (after.len() as u64) < rows,
        "the resumed run should not start over ({} rows): {resumed}",
        after.len()
    );
    let missing: Vec<i64> = (0..rows as i64)
        .filter(|i| !before.contains_key(i) && !after.contains_key(i))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "ids lost across the kill: {missing:?}");
}

/// `tests/state_fixtures/format-1` holding the checkout's path of
/// `examples/clicks`, copied to `to`.
fn format_1_state(to: &Path) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = repo.join("tests/state_fixtures/format-1");
    let clicks = repo.join("examples/clicks");
    let clicks = clicks.to_str().expect("utf-8 path");
    std::fs::create_dir_all(to).expect("mkdir");
    for name in ["job.json", "journal.jsonl"] {
        let text = std::fs::read_to_string(fixture.join(name)).expect("the fixture");
        let text = text.replace("@CLICKS@", clicks.trim_start_matches('/'));
        std::fs::write(to.join(name), text).expect("write the state");
    }
    repo.join("examples/clicks")
}

/// A state written by an older build resumes in this one (and is marked with
/// this build's format); a state of a newer format is refused, naming both.
#[test]
fn a_state_of_an_older_format_resumes_and_a_newer_one_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let state = tmp.path().join("state");
    let data = format_1_state(&state);
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).expect("mkdir");
    let trainer = format!(
        "{} {} --out {}",
        common::python(),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/trainers/ack_log.py")
            .display(),
        out.display()
    );
    let args = |state: &Path| -> Vec<String> {
        [
            "train",
            data.to_str().expect("utf-8"),
            "--state",
            state.to_str().expect("utf-8"),
            "--epochs",
            "2",
            "--batch-size",
            "100",
            "--seed",
            "5",
            "--quiet",
            "--exec",
            trainer.as_str(),
        ]
        .map(String::from)
        .to_vec()
    };
    let run = common::sluice(args(&state)).success();
    // The rows of the two tasks the killed run left, each once.
    let acked = recorded_ids(&out, "acked-");
    assert_eq!(acked.values().sum::<u32>(), 3000, "{run}");
    assert!(acked.values().all(|&n| n == 1), "a row twice: {run}");
    let job: Value =
        serde_json::from_slice(&std::fs::read(state.join("job.json")).expect("job")).expect("json");
    let format = job["format"].as_u64().expect("a format recorded");
    assert!(format > 1, "marked with this build's format: {format}");

    let newer = tmp.path().join("newer");
    format_1_state(&newer);
    let path = newer.join("job.json");
    let mut job: Value = serde_json::from_slice(&std::fs::read(&path).expect("job")).expect("json");
    job["format"] = (format + 1).into();
    std::fs::write(&path, job.to_string()).expect("write");
    let run = common::sluice(args(&newer)).failure();
    assert_eq!(run.status.code(), Some(1), "{run}");
    common::assert_one_line_error(
        &run,
        &[
            &format!("state format {}", format + 1),
            &format!("up to {format}"),
            newer.to_str().expect("utf-8"),
        ],
    );
}

/// `--output` and `--summary-json` where nothing can be written, as on a
/// full disk (a file size limit of zero: every write fails with EFBIG):
/// the run fails naming the file, and leaves no empty or partial model or
/// summary, nor a temporary file.
#[test]
fn outputs_a_full_disk_refuses_leave_no_partial_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("model.json");
    let summary = dir.path().join("summary.json");
    let data = fixtures().join("separable");
    let script = "trap '' XFSZ; ulimit -f 0; exec \"$@\"";
    let out = Command::new("sh")
        .args(["-c", script, "sh", env!("CARGO_BIN_EXE_sluice"), "train"])
        .arg(&data)
        .args([
            "--model",
            "logistic",
            "--label",
            "label",
            "--features",
            "f1,f2,f3",
        ])
        .args(["--quiet", "--output"])
        .arg(&model)
        .arg("--summary-json")
        .arg(&summary)
        .output()
        .expect("run sluice");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("model.json"), "{}", stderr(&out));
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

/// The job's state holds worker secrets (the journal): its directory is
/// 0700 and every file in it 0600, whatever the umask.
#[test]
fn the_state_is_private_to_its_user() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let data = fixtures().join("separable");
    let out = sluice(&[
        "train",
        data.to_str().expect("utf8"),
        "--model",
        "logistic",
        "--label",
        "label",
        "--features",
        "f1,f2,f3",
        "--quiet",
        "--checkpoint-every",
        "10",
        "--state",
        state.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mode = |path: &Path| std::fs::metadata(path).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o700, "{}", state.display());
    let mut pending = vec![state.clone()];
    let mut files = 0;
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("list").flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files += 1;
                assert_eq!(mode(&path), 0o600, "{}", path.display());
            }
        }
    }
    assert!(
        files >= 3,
        "job.json, the journal and finished.json at least"
    );
}
