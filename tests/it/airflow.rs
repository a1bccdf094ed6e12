//! `sluice_trainer.airflow` under a real Airflow 3: `airflow dags test` runs the
//! example DAGs of jobs/airflow and the fault DAGs of tests/airflow, with the
//! sluice binary built for these tests, on SQLite in a temporary `AIRFLOW_HOME`.
//!
//! Airflow comes from its own venv (`$SLUICE_AIRFLOW_VENV`, default
//! `~/.cache/sluice/venv-airflow`; .ci/run installs it from
//! tests/requirements-airflow.txt). The metadata database is migrated once per
//! run of this file and copied into each test's home.

use crate::common;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{
    acked_then_served_again, assert_exactly_once, copy_dir, expected_dataset, fixture, parse_json,
    python, recorded_ids, spark_java_options, table_dir, table_version, tables_expected,
    wait_until, SLUICE,
};

/// The logical date every test runs its DAG for.
const DAY: &str = "2026-11-29";
/// The longest a `dags test` may take: they take 15-40 s, and several times
/// that on a machine loaded by the other tests (a task once waited 76 s to
/// start).
const DAG_LIMIT: Duration = Duration::from_secs(300);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv holding Airflow; panics with how to get one (tests never skip).
fn airflow_venv() -> PathBuf {
    let venv = std::env::var_os("SLUICE_AIRFLOW_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("HOME")).join(".cache/sluice/venv-airflow"));
    assert!(
        venv.join("bin/airflow").is_file(),
        "no Airflow at {}: run .ci/run (it installs tests/requirements-airflow.txt there) \
         or set SLUICE_AIRFLOW_VENV",
        venv.display()
    );
    venv
}

/// An `airflow` command for the home `home` and DAG folder `dags`: no example
/// DAGs, no OpenLineage unless a test sets its transport, `sluice_trainer` from
/// this checkout and the sluice binary of these tests.
fn airflow(home: &Path, dags: &Path) -> Command {
    let mut cmd = Command::new(airflow_venv().join("bin/airflow"));
    cmd.env("AIRFLOW_HOME", home)
        .env("AIRFLOW__CORE__DAGS_FOLDER", dags)
        .env("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
        .env("AIRFLOW__OPENLINEAGE__DISABLED", "true")
        .env("PYTHONPATH", repo().join("python/sluice_trainer"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("SLUICE_BINARY", SLUICE)
        .env("SLUICE_SENSOR_POKE_S", "0.2")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    cmd
}

/// A migrated metadata database, made once per run of this file (in the
/// target's temporary directory, named by this process; those of processes
/// gone are removed).
fn template_db() -> &'static Path {
    static DB: OnceLock<PathBuf> = OnceLock::new();
    DB.get_or_init(|| {
        let parent = Path::new(env!("CARGO_TARGET_TMPDIR"));
        if let Ok(entries) = std::fs::read_dir(parent) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("airflow-db-") {
                    if !Path::new("/proc").join(pid).exists() {
                        let _ = std::fs::remove_dir_all(entry.path());
                    }
                }
            }
        }
        let home = parent.join(format!("airflow-db-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).expect("mkdir the template's home");
        let started = Instant::now();
        let out = airflow(&home, &home)
            .args(["db", "migrate"])
            .output()
            .expect("start airflow db migrate");
        assert!(
            out.status.success(),
            "airflow db migrate failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "airflow db migrate: {:.1}s",
            started.elapsed().as_secs_f64()
        );
        home.join("airflow.db")
    })
}

/// One test's Airflow: its own home (a copy of the migrated database) and DAG folder.
struct Airflow {
    home: PathBuf,
    dags: PathBuf,
    env: Vec<(String, String)>,
}

impl Airflow {
    fn new(root: &Path, dags: &Path) -> Self {
        let home = root.join("airflow-home");
        std::fs::create_dir_all(&home).expect("mkdir home");
        std::fs::copy(template_db(), home.join("airflow.db")).expect("copy the database");
        Airflow {
            home,
            dags: dags.to_path_buf(),
            env: Vec::new(),
        }
    }

    fn env(&mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> &mut Self {
        self.env.push((
            key.to_string(),
            value.as_ref().to_string_lossy().into_owned(),
        ));
        self
    }

    /// Starts `airflow dags test DAG DAY ARGS`, its output into a log file.
    fn dags_test(&self, dag: &str, args: &[&str]) -> DagsTest {
        let log = self.home.join(format!("dags-test-{dag}.log"));
        let out = File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = airflow(&self.home, &self.dags);
        cmd.args(["dags", "test", dag, DAY])
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(out)
            .stderr(err);
        let child = cmd.spawn().expect("start airflow dags test");
        DagsTest {
            child: Some(child),
            log,
            started: Instant::now(),
        }
    }
}

/// A running `airflow dags test`, killed if the test fails first.
struct DagsTest {
    child: Option<Child>,
    log: PathBuf,
    started: Instant,
}

impl DagsTest {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn child(&self) -> &Child {
        self.child.as_ref().expect("running")
    }

    /// Waits for the run to end (at most [`DAG_LIMIT`]); its exit status and log.
    fn wait(mut self) -> (ExitStatus, String) {
        let mut child = self.child.take().expect("running");
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                eprintln!(
                    "airflow dags test: {:.1}s",
                    self.started.elapsed().as_secs_f64()
                );
                return (status, self.log());
            }
            if self.started.elapsed() > DAG_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "airflow dags test still running after {DAG_LIMIT:?}:\n{}",
                    tail(&self.log(), 80)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the log holds `text`; panics with the log after `limit`.
    fn wait_for(&mut self, text: &str, limit: Duration) {
        let start = Instant::now();
        while !self.log().contains(text) {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || start.elapsed() > limit {
                panic!(
                    "`{text}` never came in the log ({exited:?}):\n{}",
                    tail(&self.log(), 80)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for DagsTest {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The byte offset of `needle` in `log`, panicking with the log when absent.
#[track_caller]
fn position(log: &str, needle: &str) -> usize {
    log.find(needle)
        .unwrap_or_else(|| panic!("the log has no `{needle}`:\n{}", tail(log, 80)))
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_json(&text, &path.display().to_string())
}

/// The example DAG (jobs/airflow/clicks_daily.py) end to end on Spark output:
/// the sensor defers until `_SUCCESS` appears, `train` runs sluice on the day's
/// partition, `report` reads its summary from XCom, every id trained once.
/// The ETL task itself (SparkSubmitOperator, about 30 s of spark-submit here)
/// is marked done (`--mark-success-pattern`): the day's data is Spark output
/// from the fixtures, copied without its `_SUCCESS`, which the test writes once
/// the sensor waits in the trigger.
#[test]
fn the_daily_dag_waits_for_success_then_trains_every_row_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("clicks");
    let day = root.join(format!("dt={DAY}"));
    copy_dir(&fixture("parquet_small_files"), &day);
    std::fs::remove_file(day.join("_SUCCESS")).expect("no _SUCCESS yet");
    let ids = dir.path().join("ids");
    std::fs::create_dir(&ids).expect("mkdir");
    let trainer = common::recorder(&ids, "");
    let conf = serde_json::json!({
        "root": root,
        "exec": trainer,
        "state_root": dir.path().join("state"),
    })
    .to_string();

    let airflow = Airflow::new(dir.path(), &repo().join("jobs/airflow"));
    let mut run = airflow.dags_test(
        "sluice_clicks_daily",
        &["-c", &conf, "--mark-success-pattern", "spark_etl"],
    );
    // The trigger's first look: the day is not there yet, nothing was trained.
    run.wait_for("[sluice_trainer.airflow.SluiceOutputTrigger]", DAG_LIMIT);
    assert_eq!(
        common::count_lines(&ids, "ids-"),
        0,
        "trained before _SUCCESS"
    );
    std::fs::write(day.join("_SUCCESS"), b"").expect("_SUCCESS");
    let (status, log) = run.wait();
    assert!(status.success(), "the DAG run failed:\n{}", tail(&log, 80));

    let deferred = position(&log, "waiting (deferred to the triggerer)");
    let polling = position(&log, "[sluice_trainer.airflow.SluiceOutputTrigger]");
    let first_poll = log[..polling].lines().last().unwrap_or_default();
    assert!(
        first_poll.contains("has no _SUCCESS yet"),
        "the trigger first says what it waits for: {first_poll}"
    );
    let fired = position(&log, "ready: ");
    let trained = position(&log, "sluice train done: 2000 rows trained");
    assert!(
        deferred < polling && polling < fired && fired < trained,
        "the sensor defers, the trigger polls, fires, then train runs:\n{}",
        tail(&log, 80)
    );
    position(
        &log,
        &format!("report: {DAY}: trained 2000 rows, 40 tasks done, 0 failed"),
    );
    position(
        &log,
        "Marking success for <Task(SparkSubmitOperator): spark_etl>",
    );
    let rows = expected_dataset("parquet_small_files")["rows"]
        .as_u64()
        .expect("rows");
    assert_eq!(rows, 2000);
    assert_exactly_once(&recorded_ids(&ids, "ids-"), rows, "the daily DAG");
}

/// The same DAG with its Spark step run for real: SparkSubmitOperator submits
/// jobs/spark/etl.py to a local Spark (the `spark_default` connection, the
/// venv's spark-submit), the sensor finds the day's `_SUCCESS` at once, and
/// every id the ETL wrote is trained once.
#[test]
fn the_daily_dag_runs_its_spark_etl_then_trains_its_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("clicks");
    let ids = dir.path().join("ids");
    std::fs::create_dir(&ids).expect("mkdir");
    let rows = 1000;
    let conf = serde_json::json!({
        "root": root,
        "rows": rows,
        "exec": common::recorder(&ids, ""),
        "state_root": dir.path().join("state"),
    })
    .to_string();
    // spark-submit from the venv's pyspark, found on the PATH as the
    // operator wants it.
    let venv_bin = Path::new(&python())
        .parent()
        .expect("the venv's bin")
        .to_path_buf();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    std::os::unix::fs::symlink(venv_bin.join("spark-submit"), bin.join("spark-submit"))
        .expect("symlink spark-submit");
    let spark_home = Command::new(python())
        .args([
            "-c",
            "import os, pyspark; print(os.path.dirname(pyspark.__file__))",
        ])
        .output()
        .expect("python");
    assert!(spark_home.status.success(), "pyspark in {}", python());
    let spark_home = String::from_utf8_lossy(&spark_home.stdout)
        .trim()
        .to_string();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let mut airflow = Airflow::new(dir.path(), &repo().join("jobs/airflow"));
    airflow
        .env("PATH", &path)
        .env("SPARK_HOME", &spark_home)
        .env("PYSPARK_PYTHON", python())
        .env("PYSPARK_DRIVER_PYTHON", python())
        // The JVM of spark-submit, the driver of `local[2]`: less JIT and GC
        // work for a short-lived JVM on a small machine.
        .env("SPARK_SUBMIT_OPTS", spark_java_options())
        .env(
            "AIRFLOW_CONN_SPARK_DEFAULT",
            r#"{"conn_type": "spark", "host": "local[2]"}"#,
        );
    let (status, log) = airflow
        .dags_test("sluice_clicks_daily", &["-c", &conf])
        .wait();
    assert!(status.success(), "the DAG run failed:\n{}", tail(&log, 80));
    let submitted = position(&log, "etl: wrote 1000 rows");
    let trained = position(&log, "sluice train done: 1000 rows trained");
    assert!(submitted < trained, "{}", tail(&log, 80));
    assert!(
        !log.contains("deferred to the triggerer"),
        "the output was complete when the sensor looked"
    );
    position(&log, &format!("report: {DAY}: trained 1000 rows"));
    assert_exactly_once(&recorded_ids(&ids, "ids-"), rows, "the ETL's day");
}

/// A part file whose footer is cut (Spark's own corrupt output fixture) among
/// good ones: each task fails naming it; exit 2 is not retried; with
/// `allow_failed_tasks` the task succeeds and its summary names the file.
#[test]
fn corrupt_input_fails_the_task_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_dir(&fixture("parquet_small_files"), &data);
    let bad = std::fs::read_dir(fixture("bad/truncated_parquet"))
        .expect("bad/truncated_parquet")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a truncated parquet file");
    let name = bad
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name")
        .to_string();
    std::fs::copy(&bad, data.join(&name)).expect("copy");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");

    let mut airflow = Airflow::new(dir.path(), &repo().join("tests/airflow"));
    airflow
        .env("SLUICE_TEST_DATA", &data)
        .env("SLUICE_TEST_OUT", &out)
        .env("SLUICE_TEST_TRAINER", recorder_template());
    let (status, log) = airflow.dags_test("sluice_test_corrupt", &[]).wait();
    assert!(!status.success(), "the DAG run fails:\n{}", tail(&log, 60));

    let planned = read_json(&out.join("failed-plan_fails-try1.json"));
    assert_eq!(planned["exception"], "SluiceExitError", "{planned}");
    let message = planned["message"].as_str().expect("message");
    assert!(
        message.contains(&name) && message.contains("exit 1"),
        "the task's error names {name}: {message}"
    );

    let failed = read_json(&out.join("failed-tasks_fail-try1.json"));
    assert_eq!(failed["exception"], "SluiceTasksFailed", "{failed}");
    let message = failed["message"].as_str().expect("message");
    assert!(
        message.contains(&name) && message.contains("1 task(s) failed"),
        "the task's error names {name}: {message}"
    );
    assert!(
        !out.join("tasks_fail-try2").exists(),
        "exit 2 is not retried (the task has a retry left)"
    );
    let rows = expected_dataset("parquet_small_files")["rows"]
        .as_u64()
        .expect("rows");
    assert_exactly_once(
        &recorded_ids(&out.join("tasks_fail-try1"), "ids-"),
        rows,
        "the good files",
    );

    let summary = read_json(&out.join("summary-allowed.json"));
    assert_eq!(summary["rows"].as_u64(), Some(rows), "{summary}");
    let tasks_failed = summary["tasks_failed"].as_array().expect("tasks_failed");
    assert_eq!(tasks_failed.len(), 1, "{summary}");
    assert!(
        tasks_failed[0]["file"]
            .as_str()
            .is_some_and(|f| f.ends_with(&name)),
        "{summary}"
    );
    assert!(
        log.contains("(allow_failed_tasks: the task succeeds)"),
        "a warning says it: {}",
        tail(&log, 60)
    );
}

/// The `SLUICE_TEST_TRAINER` of tests/trainers/record_ids.py (`{out}`: a
/// directory per task and try).
fn recorder_template() -> String {
    format!(
        "{} {} --out {{out}}",
        python(),
        repo().join("tests/trainers/record_ids.py").display()
    )
}

/// The training task's process gets SIGTERM mid-training (what Airflow's
/// supervisor sends a task it stops): `on_kill` has sluice drain and exit
/// 130, the task is retried on the same state, and every row is acknowledged
/// once over both tries.
#[test]
fn a_task_killed_mid_training_then_retried_trains_every_row_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    let trainer = format!(
        "{} {} --sleep 0.2 --out {{out}}",
        python(),
        repo().join("tests/trainers/ack_log.py").display()
    );
    let data = fixture("parquet_small_files");
    let mut airflow = Airflow::new(dir.path(), &repo().join("tests/airflow"));
    airflow
        .env("SLUICE_TEST_DATA", &data)
        .env("SLUICE_TEST_OUT", &out)
        .env("SLUICE_TEST_STATE", dir.path().join("state"))
        .env("SLUICE_TEST_TRAINER", &trainer);
    let run = airflow.dags_test("sluice_test_kill", &[]);
    let first = out.join("train-try1");
    wait_until("the first try's first acknowledgements", DAG_LIMIT, || {
        common::count_lines(&first, "acked-") > 0
    });
    common::cluster::signal(run.child(), libc::SIGTERM);
    let (status, log) = run.wait();
    assert!(status.success(), "the retry succeeds:\n{}", tail(&log, 80));

    let killed = read_json(&out.join("failed-train-try1.json"));
    assert_eq!(killed["exception"], "SluiceExitError", "{killed}");
    assert!(
        killed["message"]
            .as_str()
            .is_some_and(|m| m.contains("exit 130")),
        "{killed}"
    );
    let sigterm = position(&log, "sending SIGTERM to sluice");
    let resumed = position(&log, "resuming from saved state");
    assert!(sigterm < resumed, "{}", tail(&log, 80));
    assert!(
        !out.join("train-try3").exists(),
        "one retry: {}",
        tail(&log, 40)
    );

    let second = out.join("train-try2");
    assert_eq!(
        acked_then_served_again(&first, std::slice::from_ref(&second)),
        0,
        "rows acknowledged in the killed try were served again"
    );
    let mut acked: HashMap<i64, u32> = recorded_ids(&first, "acked-");
    let before = acked.values().sum::<u32>();
    assert!(
        before > 0 && before < 2000,
        "killed mid-training: {before} rows"
    );
    for (id, n) in recorded_ids(&second, "acked-") {
        *acked.entry(id).or_insert(0) += n;
    }
    let rows = expected_dataset("parquet_small_files")["rows"]
        .as_u64()
        .expect("rows");
    assert_exactly_once(&acked, rows, "both tries");
    let summary = read_json(&out.join("summary-train.json"));
    assert_eq!(
        summary["rows"].as_u64(),
        Some(rows - u64::from(before)),
        "the retry's summary reached the next task: {summary}"
    );
}

/// The Delta example DAG (jobs/airflow/clicks_delta.py, `sluice run` on a job
/// file) with OpenLineage's file transport: the training task's COMPLETE event
/// names the table with the version trained as input, the model as output,
/// and the rows trained in the run facet `sluice`.
#[test]
fn openlineage_events_name_the_table_version_and_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let entry = &tables_expected()["tables"]["delta/appends"];
    let table = dir.path().join("table");
    copy_dir(&table_dir(entry), &table);
    let last = table_version("delta/appends", -1);
    let version = last["version"].as_u64().expect("version");
    let rows = last["count"].as_u64().expect("count");
    let model = dir.path().join("model.json");
    let job = dir.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "source = \"table\"\nstate = \"state\"\nmodel = \"linear\"\nlabel = \"v\"\n\
             features = [\"n\"]\noutput = {:?}\n",
            model.display().to_string()
        ),
    )
    .expect("job file");
    let events = dir.path().join("events.jsonl");
    let transport = serde_json::json!({
        "type": "file", "log_file_path": events, "append": true,
    })
    .to_string();
    let conf = serde_json::json!({ "job_file": job }).to_string();

    let mut airflow = Airflow::new(dir.path(), &repo().join("jobs/airflow"));
    airflow
        .env("AIRFLOW__OPENLINEAGE__DISABLED", "false")
        .env("AIRFLOW__OPENLINEAGE__TRANSPORT", &transport)
        .env("AIRFLOW__OPENLINEAGE__NAMESPACE", "sluice-test")
        // Events are sent from a forked process, given this long (a loaded machine).
        .env("AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT", "120");
    let (status, log) = airflow
        .dags_test("sluice_clicks_delta", &["-c", &conf])
        .wait();
    assert!(status.success(), "the DAG run failed:\n{}", tail(&log, 80));
    assert!(model.is_file(), "the model was written");

    let text = std::fs::read_to_string(&events).expect("OpenLineage events");
    let complete: Vec<Value> = text
        .lines()
        .map(|l| parse_json(l, "an OpenLineage event"))
        .filter(|e| e["eventType"] == "COMPLETE" && e["job"]["name"] == "sluice_clicks_delta.train")
        .collect();
    assert_eq!(complete.len(), 1, "one COMPLETE event of train:\n{text}");
    let event = &complete[0];
    let inputs = event["inputs"].as_array().expect("inputs");
    assert_eq!(inputs.len(), 1, "{event}");
    assert_eq!(inputs[0]["namespace"], "file", "{event}");
    assert_eq!(
        inputs[0]["name"].as_str(),
        table.to_str(),
        "the input is the table: {event}"
    );
    assert_eq!(
        inputs[0]["facets"]["version"]["datasetVersion"],
        version.to_string(),
        "the input's version: {event}"
    );
    assert_eq!(
        inputs[0]["inputFacets"]["inputStatistics"]["rowCount"].as_u64(),
        Some(rows),
        "{event}"
    );
    let outputs = event["outputs"].as_array().expect("outputs");
    assert_eq!(outputs.len(), 1, "{event}");
    assert_eq!(outputs[0]["namespace"], "file", "{event}");
    assert_eq!(outputs[0]["name"].as_str(), model.to_str(), "{event}");
    let facet = &event["run"]["facets"]["sluice"];
    assert_eq!(facet["rows"].as_u64(), Some(rows), "{event}");
    assert_eq!(facet["tasksFailed"], serde_json::json!([]), "{event}");
}

/// tests/airflow/operator_units.py: the operator, sensor and trigger called
/// directly on fixtures, for what the DAGs above do not reach (Delta and
/// Iceberg versions, a job file's new partitions, a missing or empty path, a
/// retry after the job finished, a held state, a usage error, the lineage of
/// `sluice train` with `--output`).
#[test]
fn operator_sensor_and_trigger_called_directly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let done = common::run(
        Command::new(airflow_venv().join("bin/python"))
            .arg(repo().join("tests/airflow/operator_units.py"))
            .env("AIRFLOW_HOME", dir.path())
            .env("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
            .env("PYTHONPATH", repo().join("python/sluice_trainer"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("SLUICE_BINARY", SLUICE)
            .env("SLUICE_FIXTURES", common::fixtures_dir())
            .env("SLUICE_PYTHON", python())
            .env_remove("RUST_LOG"),
    );
    assert!(done.status.success(), "{done}");
    assert!(
        done.stderr.contains("\nOK"),
        "the tests did not all run and pass: {done}"
    );
}
