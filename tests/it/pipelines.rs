//! Scheduled jobs and the spark-submit handoff, against real Spark output:
//! `sluice run JOB.toml` runs as cron would start them (each partition trained
//! exactly once, nothing new is no error, two runs at once, a run killed with
//! SIGKILL), and `jobs/spark/submit_and_train.sh` starting Spark and
//! `sluice train --wait-success` together.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    assert_exactly_once, copy_dir, expected_dataset, fixture, python, recorded_ids, recorder, run,
    sluice, sluice_command, spark_java_options, Run,
};
use serde_json::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `spark-submit` beside the test venv's Python.
fn spark_submit() -> PathBuf {
    Path::new(&python())
        .parent()
        .expect("python has a directory")
        .join("spark-submit")
}

/// Real Spark (jobs/spark/etl.py) writes `rows` rows per day as ROOT/dt=DAY, ids from `first_id`.
fn spark_etl(root: &Path, days: &[&str], rows: u64, first_id: u64) {
    let mut cmd = Command::new(spark_submit());
    cmd.env("PYSPARK_PYTHON", python())
        .env("PYSPARK_DRIVER_PYTHON", python())
        .args(["--master", "local[2]", "--driver-java-options"])
        .arg(spark_java_options())
        .arg(repo().join("jobs/spark/etl.py"))
        .arg("--out")
        .arg(root)
        .args([
            "--rows",
            &rows.to_string(),
            "--first-id",
            &first_id.to_string(),
        ]);
    for day in days {
        cmd.args(["--day", day]);
    }
    run(&mut cmd).success();
}

/// Writes a job file training `source` with the id recorder writing into `out`.
fn job_file(dir: &Path, source: &Path, state: &Path, exec: &str) -> PathBuf {
    let path = dir.join("job.toml");
    let text = format!(
        "source = {:?}\nstate = {:?}\nexec = {:?}\nbatch-size = 64\ndevices = 2\nquiet = true\n",
        source.display().to_string(),
        state.display().to_string(),
        exec
    );
    std::fs::write(&path, text).expect("write job file");
    path
}

fn run_job(job: &Path, extra: &[&str]) -> Run {
    let mut args = vec![
        "run".to_string(),
        job.display().to_string(),
        "--json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    sluice(&args)
}

fn trained(state: &Path) -> Value {
    let text = std::fs::read_to_string(state.join("trained.json")).expect("trained.json");
    serde_json::from_str(&text).expect("trained.json is JSON")
}

fn trained_names(state: &Path) -> Vec<String> {
    let record = trained(state);
    let map = record["partitions"].as_object().expect("partitions object");
    map.keys().cloned().collect()
}

fn new_names(report: &Value) -> Vec<String> {
    report["new"]
        .as_array()
        .expect("new is a list")
        .iter()
        .map(|p| p["path"].as_str().expect("path").to_string())
        .collect()
}

#[test]
fn cron_runs_train_each_spark_partition_exactly_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let table = tmp.path().join("clicks");
    let state = tmp.path().join("state");
    spark_etl(&table, &["2026-11-28", "2026-11-29"], 300, 0);

    let out = |n: u32| tmp.path().join(format!("ids{n}"));
    let job = job_file(
        tmp.path(),
        &table.join("dt=*"),
        &state,
        &recorder(&out(0), ""),
    );
    let dry = run_job(&job, &["--dry-run"]).success().json();
    assert_eq!(new_names(&dry), ["dt=2026-11-28", "dt=2026-11-29"]);
    assert_eq!(dry["new"][0]["rows"], 300);
    assert!(
        !state.join("trained.json").exists(),
        "a dry run records nothing"
    );
    assert!(!out(0).exists(), "a dry run trains nothing");

    let job = job_file(
        tmp.path(),
        &table.join("dt=*"),
        &state,
        &recorder(&out(1), ""),
    );
    let first = run_job(&job, &[]).success().json();
    assert_eq!(first["rows"], 600, "{first}");
    assert_eq!(first["recorded"], true);
    assert_exactly_once(&recorded_ids(&out(1), "ids-"), 600, "first run");
    assert_eq!(trained_names(&state), ["dt=2026-11-28", "dt=2026-11-29"]);

    let job = job_file(
        tmp.path(),
        &table.join("dt=*"),
        &state,
        &recorder(&out(2), ""),
    );
    let again = run_job(&job, &[]).success();
    let report = again.json();
    assert_eq!(report["rows"], 0, "{again}");
    assert!(new_names(&report).is_empty(), "{again}");
    assert_eq!(report["trained_before"], 2);
    assert!(!out(2).exists(), "nothing new: no trainer started");
    let plain = sluice(["run", job.to_str().expect("utf-8 path")]).success();
    assert!(plain.stderr.contains("nothing new"), "{plain}");

    // Spark appends the next day; a partition still being written waits.
    spark_etl(&table, &["2026-11-30"], 250, 600);
    std::fs::create_dir_all(table.join("dt=2026-12-01/_temporary/0")).expect("mkdir");
    let job = job_file(
        tmp.path(),
        &table.join("dt=*"),
        &state,
        &recorder(&out(3), ""),
    );
    let third = run_job(&job, &[]).success().json();
    assert_eq!(new_names(&third), ["dt=2026-11-30"]);
    assert_eq!(third["waiting"][0]["path"], "dt=2026-12-01");
    assert_eq!(third["rows"], 250);
    let ids = recorded_ids(&out(3), "ids-");
    assert_eq!(
        ids.len(),
        250,
        "third run trains exactly the new day's rows"
    );
    assert!((600..850).all(|id| ids.get(&id) == Some(&1)), "{ids:?}");
    assert_eq!(trained(&state)["runs"].as_array().map(Vec::len), Some(2));
}

/// A copy of the Spark fixture `parquet_partitioned` (a whole-table write: one
/// `_SUCCESS` above `country=*/city=*`) and a job over it with a slow recorder.
fn slow_job(tmp: &Path, out: &Path, sleep: &str) -> (PathBuf, PathBuf, u64) {
    let table = tmp.join("table");
    if !table.exists() {
        copy_dir(&fixture("parquet_partitioned"), &table);
    }
    let state = tmp.join("state");
    let exec = recorder(out, &format!("--sleep {sleep}"));
    let job = job_file(tmp, &table.join("country=*/city=*"), &state, &exec);
    let rows = expected_dataset("parquet_partitioned")["rows"]
        .as_u64()
        .expect("rows");
    (job, state, rows)
}

fn wait_for_ids(dir: &Path, timeout: Duration) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if dir.is_dir() && !recorded_ids(dir, "ids-").is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no ids recorded in {} within {timeout:?}", dir.display());
}

#[test]
fn a_second_run_refuses_and_a_killed_run_marks_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out1 = tmp.path().join("ids1");
    let (job, state, rows) = slow_job(tmp.path(), &out1, "0.05");
    let mut first = sluice_command(["run", job.to_str().expect("utf-8")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice run");
    wait_for_ids(&out1, Duration::from_secs(60));

    let second = sluice(["run", job.to_str().expect("utf-8")]);
    common::assert_one_line_error(&second, &["still going", "not starting"]);
    assert_eq!(
        second.status.code(),
        Some(3),
        "a held lock has its own exit code: {second}"
    );

    first.kill().expect("SIGKILL");
    let _ = first.wait();
    assert!(
        !state.join("trained.json").exists(),
        "a killed run records nothing"
    );
    assert!(state.join("lock.json").exists(), "SIGKILL leaves the lock");
    assert!(!recorded_ids(&out1, "ids-").is_empty());

    let out2 = tmp.path().join("ids2");
    let (job, state, _) = slow_job(tmp.path(), &out2, "0");
    let next = run_job(&job, &[]).success().json();
    assert_eq!(next["rows"], rows);
    assert_eq!(
        next["new"].as_array().map(Vec::len),
        Some(trained_names(&state).len())
    );
    assert_exactly_once(&recorded_ids(&out2, "ids-"), rows, "run after the kill");
    assert!(
        !state.join("lock.json").exists(),
        "a finished run releases the lock"
    );
}

#[test]
fn the_built_in_model_continues_across_runs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let table = tmp.path().join("clicks");
    let example = repo().join("examples/clicks");
    std::fs::create_dir_all(&table).expect("mkdir");
    std::fs::copy(example.join("_SUCCESS"), table.join("_SUCCESS")).expect("copy");
    copy_dir(&example.join("dt=2024-03-01"), &table.join("dt=2024-03-01"));
    let state = tmp.path().join("state");
    let job = tmp.path().join("model.toml");
    std::fs::write(
        &job,
        format!(
            "source = {:?}\nstate = \"state\"\nmodel = \"logistic\"\nlabel = \"label\"\n\
             features = [\"f1\", \"f2\", \"f3\", \"f4\"]\nquiet = true\n",
            table.join("dt=*").display().to_string()
        ),
    )
    .expect("write job");
    let first = run_job(&job, &[]).success().json();
    let rows1 = first["rows"].as_u64().expect("rows");
    let model = |state: &Path| -> Value {
        let checkpoint = trained(state)["checkpoint"]
            .as_str()
            .expect("checkpoint")
            .to_string();
        let text =
            std::fs::read_to_string(state.join(checkpoint).join("model.json")).expect("model");
        serde_json::from_str(&text).expect("model JSON")
    };
    let seen1 = model(&state)["state"]["moments"]["count"].as_f64();
    assert_eq!(seen1, Some(rows1 as f64));

    copy_dir(&example.join("dt=2024-03-02"), &table.join("dt=2024-03-02"));
    let second = run_job(&job, &[]).success().json();
    assert_eq!(new_names(&second), ["dt=2024-03-02"]);
    let rows2 = second["rows"].as_u64().expect("rows");
    let after = model(&state);
    assert_eq!(
        after["state"]["moments"]["count"].as_f64(),
        Some((rows1 + rows2) as f64),
        "the second run continued the first run's model"
    );
    let models = std::fs::read_dir(state.join("checkpoints"))
        .expect("checkpoints")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().join("model.json").exists())
        })
        .count();
    assert_eq!(models, 1, "the previous checkpoint is removed");
}

#[test]
fn job_file_errors_name_the_key_and_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = tmp.path().join("bad.toml");
    std::fs::write(
        &job,
        "source = \"/x/dt=*\"\nstate = \"/tmp/s\"\nbatch_sise = 3\n",
    )
    .expect("write");
    let run = sluice(["run", job.to_str().expect("utf-8")]);
    common::assert_one_line_error(&run, &["unknown key `batch_sise`", "bad.toml"]);
}

#[test]
fn a_source_that_matches_nothing_fails_unless_allowed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let state = tmp.path().join("state");
    let ids = tmp.path().join("ids");
    std::fs::create_dir(tmp.path().join("clicks")).expect("mkdir");
    for source in ["clicks/dt=*", "clicks", "no-such-table/dt=*"] {
        let job = job_file(
            tmp.path(),
            &tmp.path().join(source),
            &state,
            &recorder(&ids, ""),
        );
        let refused = run_job(&job, &[]);
        common::assert_one_line_error(&refused, &[source, "matches nothing", "--allow-empty"]);
        assert_eq!(refused.status.code(), Some(1), "{refused}");

        let allowed = run_job(&job, &["--allow-empty"]).success();
        let report = allowed.json();
        assert_eq!(report["matched"], 0, "{allowed}");
        assert_eq!(report["rows"], 0, "{allowed}");
        assert!(
            allowed.stderr.contains("matches nothing"),
            "a warning: {allowed}"
        );

        let text = std::fs::read_to_string(&job).expect("job file") + "allow-empty = true\n";
        std::fs::write(&job, text).expect("write job file");
        run_job(&job, &[]).success();
    }
    assert!(!ids.exists(), "nothing was trained");
}

#[test]
fn a_new_partition_with_no_rows_is_refused_unless_allowed() {
    // A day Spark wrote from an empty DataFrame: only _SUCCESS.
    let tmp = tempfile::tempdir().expect("tempdir");
    let day = tmp.path().join("clicks/dt=2026-11-29");
    std::fs::create_dir_all(&day).expect("mkdir");
    std::fs::write(day.join("_SUCCESS"), b"").expect("write _SUCCESS");
    let state = tmp.path().join("state");
    let ids = tmp.path().join("ids");
    let job = job_file(
        tmp.path(),
        &tmp.path().join("clicks/dt=*"),
        &state,
        &recorder(&ids, ""),
    );
    let refused = run_job(&job, &[]);
    common::assert_one_line_error(&refused, &["dt=2026-11-29", "empty output", "allow-empty"]);
    assert_eq!(refused.status.code(), Some(1), "{refused}");
    assert!(!state.join("trained.json").exists(), "nothing recorded");

    let allowed = run_job(&job, &["--allow-empty"]).success();
    assert_eq!(allowed.json()["rows"], 0, "{allowed}");
    assert!(
        allowed.stderr.contains("empty output"),
        "a warning: {allowed}"
    );
    assert_eq!(trained_names(&state), ["dt=2026-11-29"], "{allowed}");
}

fn handoff(root: &Path, day: &str, etl: &[&str], train: &[&str]) -> Run {
    let mut cmd = Command::new(repo().join("jobs/spark/submit_and_train.sh"));
    cmd.env("SLUICE", common::SLUICE)
        .env("SLUICE_PYTHON", python())
        .env("SLUICE_WAIT", "5m")
        .env("SPARK_MASTER", "local[2]")
        .env("SPARK_SUBMIT_OPTS", spark_java_options())
        .env_remove("RUST_LOG")
        .arg(root)
        .arg(day)
        .args(etl)
        .arg("--")
        .args(train);
    run(&mut cmd)
}

#[test]
fn spark_submit_handoff_trains_every_id_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("clicks");
    let out = tmp.path().join("ids");
    let exec = recorder(&out, "");
    let done = handoff(
        &root,
        "2026-11-29",
        &["--rows", "700", "--slow", "2"],
        &[
            "--exec",
            &exec,
            "--devices",
            "2",
            "--batch-size",
            "50",
            "--quiet",
        ],
    )
    .success();
    assert!(done.stderr.contains("trained 700 rows"), "{done}");
    assert!(root.join("dt=2026-11-29/_SUCCESS").exists());
    assert_exactly_once(&recorded_ids(&out, "ids-"), 700, "handoff");
}

#[test]
fn a_failed_spark_job_stops_the_handoff_with_its_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("clicks");
    let out = tmp.path().join("ids");
    let exec = recorder(&out, "");
    let failed = handoff(
        &root,
        "2026-11-29",
        &["--rows", "200", "--slow", "2", "--fail"],
        &["--exec", &exec, "--quiet"],
    )
    .failure();
    let line = failed
        .stderr
        .lines()
        .find(|l| l.starts_with("sluice: "))
        .unwrap_or_else(|| panic!("no sluice error line: {failed}"));
    assert!(
        line.contains("failed") && line.contains("no _SUCCESS"),
        "{failed}"
    );
    assert!(line.contains("dt=2026-11-29"), "{failed}");
    assert!(!root.join("dt=2026-11-29/_SUCCESS").exists());
    assert!(
        !out.exists() || recorded_ids(&out, "ids-").is_empty(),
        "nothing trained"
    );
}
