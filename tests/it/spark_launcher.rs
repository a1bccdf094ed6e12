//! Workers as Spark tasks: `jobs/spark/train_on_spark.py` under `spark-submit
//! --master local-cluster[2,1,1024]` (a standalone cluster on this machine: two
//! executor JVMs with their own Python workers) starts `sluice master` on the
//! driver and one `sluice worker` in each task of a barrier stage
//! (`sluice_trainer.spark`). Every id must reach the trainers exactly once; when
//! an executor JVM is killed mid-job, Spark runs the stage again, the workers of
//! the first attempt (the killed executor's and the one Spark kills on the other)
//! must be gone before the new ones train, and the job must still end with every
//! row committed exactly once and only in-flight batches served again.
//!
//! PySpark and Java come from the test venv (`.ci/run`); without them these
//! tests fail.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{
    ack_log, count_lines, expected_dataset, fixture, python, recorded_ids, spark_java_options,
    SLUICE,
};

/// 2,000 rows (ids 0..2000) in 40 Parquet part files: 40 tasks for two workers.
const DATASET: &str = "parquet_small_files";
/// Rows per batch.
const BATCH: u64 = 10;
/// Two executors of one core and 1 GiB each.
const SPARK_MASTER: &str = "local-cluster[2,1,1024]";
/// The longest a spark-submit of these tests may run.
const SPARK_DEADLINE: Duration = Duration::from_secs(360);

/// One Spark cluster at a time: each brings up three JVMs on this machine.
static SPARK: Mutex<()> = Mutex::new(());

/// A file of the repository.
fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A spark-submit run in its own process group, killed with its executors
/// when dropped.
struct Submit {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    /// The TMPDIR of the driver (where the master's temporary state goes).
    tmp: PathBuf,
}

/// What a spark-submit of `jobs/spark/train_on_spark.py` runs.
struct Launch<'a> {
    /// `--master` of spark-submit.
    master: &'a str,
    /// `--workers`.
    workers: u32,
    /// `--exec`.
    exec: String,
    /// Further options of train_on_spark.py.
    launcher: Vec<OsString>,
    /// Flags of `sluice master` / `sluice worker` (after `--`).
    sluice: Vec<String>,
}

impl Launch<'_> {
    /// Two workers on `local-cluster[2,1,1024]`, trainers logging into `out`,
    /// sleeping `sleep` seconds per batch.
    fn cluster(out: &Path, sleep: f64) -> Launch<'static> {
        Launch {
            master: SPARK_MASTER,
            workers: 2,
            exec: ack_log(out, sleep),
            launcher: Vec::new(),
            sluice: ["--batch-size", &BATCH.to_string()]
                .into_iter()
                .chain(["--devices", "1", "--lease-timeout", "3s", "--quiet"])
                .map(String::from)
                .collect(),
        }
    }
}

impl Submit {
    /// `spark-submit jobs/spark/train_on_spark.py` on `DATASET` with two workers
    /// whose trainers log into `out`, sleeping `sleep` seconds per batch, with
    /// the master's state in `dir/state`.
    fn start(dir: &Path, out: &Path, sleep: f64) -> Submit {
        let mut launch = Launch::cluster(out, sleep);
        launch.launcher = vec!["--state".into(), dir.join("state").into()];
        Submit::launch(dir, launch)
    }

    /// spark-submit of `launch`, its stdout and stderr in files of `dir`.
    fn launch(dir: &Path, launch: Launch) -> Submit {
        let venv_bin = Path::new(&python())
            .parent()
            .expect("the venv's bin directory")
            .to_path_buf();
        let stdout = dir.join("spark-submit.out");
        let stderr = dir.join("spark-submit.err");
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp).expect("tmp dir");
        let jvm_options = spark_java_options();
        let mut cmd = Command::new(venv_bin.join("spark-submit"));
        cmd.args(["--master", launch.master])
            .args(["--conf", "spark.ui.enabled=false"])
            .args(["--conf", "spark.ui.showConsoleProgress=false"])
            // Less JIT and GC work for three short-lived JVMs on a small machine.
            .args([
                "--conf",
                &format!("spark.driver.extraJavaOptions={jvm_options}"),
            ])
            .args([
                "--conf",
                &format!("spark.executor.extraJavaOptions={jvm_options}"),
            ])
            // The retried stage needs both executors again: a killed one is
            // replaced by the standalone worker; give the stage attempts room.
            .args(["--conf", "spark.stage.maxConsecutiveAttempts=4"])
            .arg(repo("jobs/spark/train_on_spark.py"))
            .arg(fixture(DATASET))
            .args(["--workers", &launch.workers.to_string()])
            .args(["--exec", &launch.exec])
            .arg("--sluice")
            .arg(SLUICE)
            .args(&launch.launcher)
            .arg("--")
            .args(&launch.sluice)
            .env("PYSPARK_PYTHON", python())
            .env("PYSPARK_DRIVER_PYTHON", python())
            // The driver and the executors' Python workers import sluice_trainer
            // from the source tree (a cluster would have the wheel installed).
            .env("PYTHONPATH", repo("python/sluice_trainer"))
            .env("TMPDIR", &tmp)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            // Opened for appending, as a shell's `2>>` does: the launcher then
            // writes its log lines there rather than into stdout.
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&stderr)
                    .expect("stderr file"),
            );
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().expect("start spark-submit");
        Submit {
            child,
            stdout,
            stderr,
            tmp,
        }
    }

    /// Whether spark-submit is still running.
    fn running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Waits up to `deadline` for spark-submit to exit; its status and stdout.
    fn wait(&mut self, deadline: Duration) -> (ExitStatus, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                start.elapsed() < deadline,
                "spark-submit did not finish within {deadline:?}\n{}",
                self.stderr_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let stdout = std::fs::read_to_string(&self.stdout).expect("spark-submit stdout");
        (status, stdout)
    }

    /// Waits for spark-submit; returns the job summary it printed: its whole
    /// stdout is that one JSON object, with no log line around it.
    fn summary(&mut self) -> Value {
        let (status, stdout) = self.wait(SPARK_DEADLINE);
        assert!(
            status.success(),
            "spark-submit exited with {status}\nstdout: {stdout}\n{}",
            self.stderr_tail()
        );
        common::parse_json(&stdout, "the stdout of train_on_spark.py")
    }

    /// spark-submit's stderr so far.
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The master's temporary state directories left in the driver's TMPDIR.
    fn temporary_state(&self) -> Vec<String> {
        std::fs::read_dir(&self.tmp)
            .expect("list tmp")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("sluice-state-"))
            .collect()
    }

    /// The lines train_on_spark.py wrote on stderr, in order.
    fn launcher_lines(&self) -> Vec<String> {
        self.stderr()
            .lines()
            .skip_while(|l| !l.starts_with("train_on_spark.py: "))
            .map(String::from)
            .collect()
    }

    /// The end of spark-submit's stderr without the JVM's stack frames.
    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("at "))
            .collect();
        format!(
            "spark-submit stderr (last lines):\n{}",
            lines[lines.len().saturating_sub(60)..].join("\n")
        )
    }
}

impl Drop for Submit {
    fn drop(&mut self) {
        if self.running() {
            // SAFETY: kill(2) on the process group of a child we started.
            unsafe {
                libc::kill(-(self.child.id() as i32), libc::SIGKILL);
            }
            let _ = self.child.wait();
        }
    }
}

/// The command line of process `pid` (empty once it is gone).
fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The parent of `pid` and its state letter, from /proc/PID/stat.
fn parent_and_state(pid: u32) -> Option<(u32, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid ...": comm may hold spaces, so read after its ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// Whether `pid` still runs (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    parent_and_state(pid).is_some_and(|(_, state)| state != 'Z')
}

/// Every process on this machine.
fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The live `sluice worker` processes whose trainers log into `out`.
fn sluice_workers(out: &Path) -> HashSet<u32> {
    let out = out.display().to_string();
    pids()
        .into_iter()
        .filter(|&pid| {
            let args = cmdline(pid);
            args.first().is_some_and(|a| a == SLUICE)
                && args.get(1).is_some_and(|a| a == "worker")
                && args.iter().any(|a| a.contains(&out))
                && alive(pid)
        })
        .collect()
}

/// The executor JVM above `pid` (its `CoarseGrainedExecutorBackend` ancestor).
fn executor_of(pid: u32) -> Option<u32> {
    let mut at = pid;
    for _ in 0..16 {
        let (parent, _) = parent_and_state(at)?;
        if cmdline(parent)
            .iter()
            .any(|a| a.contains("CoarseGrainedExecutorBackend"))
        {
            return Some(parent);
        }
        at = parent;
    }
    None
}

/// Checks what every Spark run must show: the master's books hold every row
/// once, no task failed, two tasks of the stage each ran a named worker.
#[track_caller]
fn assert_summary(summary: &Value, rows: u64) {
    assert_eq!(summary["exit_code"], 0, "{summary}");
    assert_eq!(summary["queue"]["job_over"], true, "{summary}");
    assert_eq!(summary["rows_committed"].as_u64(), Some(rows), "{summary}");
    assert_eq!(summary["rows_total"].as_u64(), Some(rows), "{summary}");
    assert_eq!(summary["queue"]["failed"], 0, "{summary}");
    assert_eq!(summary["failed"], Value::Array(Vec::new()), "{summary}");
    let tasks = summary["spark_tasks"].as_array().expect("spark_tasks");
    let workers: Vec<&str> = tasks
        .iter()
        .map(|t| t["worker"].as_str().expect("worker"))
        .collect();
    assert_eq!(workers, ["spark-0", "spark-1"], "{summary}");
    assert!(tasks.iter().all(|t| t["exit_code"] == 0), "{summary}");
}

#[test]
fn spark_tasks_train_every_id_exactly_once() {
    let _one = SPARK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("ids");
    std::fs::create_dir(&out).expect("ids dir");
    let rows = expected_dataset(DATASET)["rows"].as_u64().expect("rows");

    let mut submit = Submit::start(dir.path(), &out, 0.0);
    let summary = submit.summary();
    assert_summary(&summary, rows);
    common::assert_exactly_once(
        &recorded_ids(&out, "ids-"),
        rows,
        "trainers of two Spark tasks",
    );
    common::assert_exactly_once(&recorded_ids(&out, "acked-"), rows, "acknowledged");
    // Both Spark tasks ran a worker (assert_summary); how the tasks split
    // between them depends on when each started (a late one may find the job
    // done), so only the whole is checked: at least one trainer per run, at
    // most one per worker.
    let trainers: HashSet<String> = std::fs::read_dir(&out)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ids-"))
        .collect();
    assert!(
        (1..=2).contains(&trainers.len()),
        "trainer logs: {trainers:?}"
    );
}

#[test]
fn a_killed_executor_restarts_the_stage_and_every_row_is_committed_once() {
    let _one = SPARK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("ids");
    std::fs::create_dir(&out).expect("ids dir");
    let rows = expected_dataset(DATASET)["rows"].as_u64().expect("rows");

    let mut submit = Submit::start(dir.path(), &out, 0.1);
    // Both workers of the first attempt are training.
    let start = Instant::now();
    let first = loop {
        assert!(
            submit.running(),
            "spark-submit ended before the kill\n{}",
            submit.stderr_tail()
        );
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "no two workers training\n{}",
            submit.stderr_tail()
        );
        let workers = sluice_workers(&out);
        if workers.len() == 2 && count_lines(&out, "acked-") >= 300 {
            break workers;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let victim = *first.iter().min().expect("a worker");
    let executor = executor_of(victim).expect("the victim worker runs under an executor JVM");
    let acked_at_kill = count_lines(&out, "acked-");
    // SAFETY: kill(2) on an executor JVM of the Spark cluster this test started.
    unsafe {
        libc::kill(executor as i32, libc::SIGKILL);
    }
    eprintln!("killed executor {executor} (worker {victim}) at {acked_at_kill} acknowledged rows");

    // Spark runs the stage again. When a worker of the new attempt is up, no
    // worker of the first may be left: the one on the surviving executor dies
    // with the Python task Spark killed.
    let start = Instant::now();
    let second = loop {
        let now = sluice_workers(&out);
        let new: HashSet<u32> = now.difference(&first).copied().collect();
        if !new.is_empty() {
            break new;
        }
        assert!(
            submit.running(),
            "spark-submit ended without running the stage again\n{}",
            submit.stderr_tail()
        );
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "the stage did not start again\n{}",
            submit.stderr_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let start = Instant::now();
    while first.iter().any(|&pid| alive(pid)) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = first.iter().copied().filter(|&pid| alive(pid)).collect();
    assert!(
        left.is_empty(),
        "workers {left:?} of the first stage attempt still run beside {second:?} of the next"
    );

    let summary = submit.summary();
    assert_summary(&summary, rows);
    let pids: Vec<u64> = summary["spark_tasks"]
        .as_array()
        .expect("spark_tasks")
        .iter()
        .map(|t| t["pid"].as_u64().expect("pid"))
        .collect();
    assert!(
        pids.iter().all(|&p| !first.contains(&(p as u32))),
        "the stage that finished is the first attempt: {summary}"
    );
    // Every id reached a trainer; what was acknowledged came back only if it
    // was in flight (two batches per worker) when the workers were killed.
    let delivered = recorded_ids(&out, "ids-");
    common::cluster::undelivered(&delivered, rows, 1);
    let acked = recorded_ids(&out, "acked-");
    let again: u64 = acked
        .values()
        .map(|&n| u64::from(n.saturating_sub(1)))
        .sum();
    let bound = 2 * 2 * BATCH;
    eprintln!("{again} acknowledged rows acknowledged again after the kill (bound {bound})");
    assert!(
        again <= bound,
        "{again} acknowledged rows were served again (bound {bound})"
    );
    let acked_ids: HashMap<i64, u32> = acked;
    assert_eq!(
        acked_ids.len() as u64,
        rows,
        "every row acknowledged at least once"
    );
}

#[test]
fn options_go_to_the_subcommand_that_takes_them_and_unknown_ones_are_refused() {
    let script = format!(
        r#"
import json, sluice_trainer.spark as s
print(json.dumps(s._route({SLUICE:?}, dict(batch_size=8, lease_timeout="3s",
      allow_incomplete=True, ignore_corrupt_files=False, columns=["id", "x"]))))
try:
    s.train("/nowhere", 2, "true", sluice={SLUICE:?}, no_such_flag=1)
except TypeError as e:
    print("refused:", e)
"#
    );
    let out = common::run(
        Command::new(python())
            .args(["-c", &script])
            .env("PYTHONPATH", repo("python/sluice_trainer")),
    )
    .success();
    let mut lines = out.stdout.lines();
    let routed = common::parse_json(lines.next().unwrap_or_default(), "routed options");
    assert_eq!(
        routed,
        serde_json::json!([
            [
                "--lease-timeout",
                "3s",
                "--allow-incomplete",
                "--columns",
                "id,x"
            ],
            ["--batch-size", "8"]
        ]),
        "{out}"
    );
    assert_eq!(
        lines.next(),
        Some(
            "refused: no_such_flag: neither `sluice master` nor `sluice worker` has --no-such-flag"
        ),
        "{out}"
    );
}

/// Live `sluice` processes (master or worker) whose command line names a path
/// under `dir`: the master's `--state`, the workers' `--exec`.
fn sluice_processes(dir: &Path) -> Vec<u32> {
    let dir = dir.display().to_string();
    pids()
        .into_iter()
        .filter(|&pid| {
            let args = cmdline(pid);
            args.first().is_some_and(|a| a == SLUICE)
                && args.iter().any(|a| a.contains(&dir))
                && alive(pid)
        })
        .collect()
}

/// Waits up to `limit` for no `sluice` process of `dir` to be left.
#[track_caller]
fn assert_no_sluice_left(dir: &Path, limit: Duration) {
    let start = Instant::now();
    while !sluice_processes(dir).is_empty() && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = sluice_processes(dir);
    assert!(left.is_empty(), "sluice processes left behind: {left:?}");
}

/// The `--exec` of a trainer that says on stderr that it waits, waits (at
/// most 60 s) for the file `go`, then records ids into `out` as `ack_log` does.
fn waiting_trainer(go: &Path, out: &Path) -> String {
    format!(
        "echo \"trainer waiting on device $SLUICE_DEVICE\" >&2; i=0; \
         while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; exec {ack}",
        go = go.display(),
        ack = ack_log(out, 0.0)
    )
}

/// Waits until spark-submit's stderr holds `text`; panics when it ends first
/// or `limit` passes.
#[track_caller]
fn wait_for_stderr(submit: &mut Submit, text: &str, limit: Duration) {
    let start = Instant::now();
    while !submit.stderr().contains(text) {
        assert!(
            submit.running(),
            "spark-submit ended before its stderr showed `{text}`\n{}",
            submit.stderr_tail()
        );
        assert!(
            start.elapsed() < limit,
            "spark-submit's stderr did not show `{text}` within {limit:?}\n{}",
            submit.stderr_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn fewer_task_slots_than_workers_fail_within_seconds_naming_both_numbers() {
    let _one = SPARK.lock().unwrap_or_else(|e| e.into_inner());
    for (master, slots) in [("local[2]", 2), (SPARK_MASTER, 2)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("ids");
        std::fs::create_dir(&out).expect("ids dir");
        let mut launch = Launch::cluster(&out, 0.0);
        launch.master = master;
        launch.workers = 3;
        let started = Instant::now();
        let mut submit = Submit::launch(dir.path(), launch);
        // Seconds: spark-submit's start and the check. Without the check,
        // the barrier stage would wait for slots the application never
        // has (Spark checks again every 15 s, 40 times, by default).
        let (status, stdout) = submit.wait(Duration::from_secs(90));
        eprintln!("{master}: failed in {:?}", started.elapsed());
        assert!(
            !status.success(),
            "{master}: 3 workers on {slots} slots should fail: {stdout}"
        );
        let lines = submit.launcher_lines();
        let first = lines.first().map(String::as_str).unwrap_or_default();
        assert!(
            first.contains("num_workers=3 needs 3 Spark task slots")
                && first.contains(&format!("the application has {slots} ")),
            "{master}: the first line should name both numbers: {first}\n{}",
            submit.stderr_tail()
        );
        let summary = common::parse_json(&stdout, "the stdout of train_on_spark.py");
        assert_eq!(
            summary["error"].as_str(),
            Some(&first["train_on_spark.py: ".len()..])
        );
        assert_eq!(submit.temporary_state(), Vec::<String>::new(), "{master}");
        assert_no_sluice_left(dir.path(), Duration::from_secs(1));
        assert_eq!(count_lines(&out, "ids-"), 0, "{master}: nothing trained");
    }

    // train() itself, called from a PySpark program whose SparkContext runs.
    let dir = tempfile::tempdir().expect("tempdir");
    let script = format!(
        r#"
import json, sluice_trainer.spark as s
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.driver.extraJavaOptions", {jvm_options:?}).getOrCreate())
try:
    s.train({data:?}, 3, "true", spark=spark, sluice={SLUICE:?}, slots_timeout=300)
except s.SluiceSparkError as e:
    print("refused:", e)
    print(json.dumps(e.summary))
spark.stop()
"#,
        data = fixture(DATASET).display().to_string(),
        jvm_options = spark_java_options()
    );
    let started = Instant::now();
    let run = common::run(
        Command::new(python())
            .args(["-c", &script])
            .env("PYTHONPATH", repo("python/sluice_trainer"))
            .env("TMPDIR", dir.path()),
    )
    .success();
    // At once, not after slots_timeout (300 s here): the configuration says 2.
    // (The bound leaves a loaded machine the time to start Python and Spark.)
    assert!(started.elapsed() < Duration::from_secs(120), "{run}");
    let refused = run
        .stdout
        .lines()
        .find(|l| l.starts_with("refused: "))
        .unwrap_or_default();
    assert!(
        refused.contains("num_workers=3 needs 3 Spark task slots")
            && refused.contains("the application has 2 (local[2]"),
        "{run}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list tmp")
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("sluice-state-"))
        .collect();
    assert!(left.is_empty(), "temporary state left: {left:?}");
}

#[test]
fn a_trainer_that_keeps_failing_stops_the_job_at_once_with_its_cause_first() {
    let _one = SPARK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("trainers-started");
    let mut launch = Launch::cluster(dir.path(), 0.0);
    // Each trainer process appends a line and exits 3; no restarts, so each
    // worker starts one: more lines than workers means Spark ran the stage
    // again (the stage may run 4 times here, spark.stage.maxConsecutiveAttempts).
    launch.exec = format!("echo started >> {}; exit 3", marker.display());
    launch
        .sluice
        .extend(["--exec-restarts", "0"].map(String::from));
    launch.launcher = vec![
        "--summary-json".into(),
        dir.path().join("summary.json").into(),
    ];
    let mut submit = Submit::launch(dir.path(), launch);
    let start = Instant::now();
    while !marker.exists() {
        assert!(
            submit.running(),
            "spark-submit ended before a trainer started\n{}",
            submit.stderr_tail()
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no trainer started\n{}",
            submit.stderr_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let first_trainer = Instant::now();
    let (status, stdout) = submit.wait(Duration::from_secs(60));
    let took = first_trainer.elapsed();
    eprintln!("spark-submit ended {took:?} after the first trainer started");
    assert!(!status.success(), "should fail: {stdout}");
    assert!(
        took < Duration::from_secs(30),
        "the job took {took:?} to stop after its trainer failed"
    );

    let lines = submit.launcher_lines();
    let first = lines.first().map(String::as_str).unwrap_or_default();
    assert!(
        first.starts_with("train_on_spark.py: sluice worker spark-")
            && first.contains("exec trainer `echo started")
            && first.ends_with("exit status: 3"),
        "the first line should be the trainer's failure: {first}\n{}",
        submit.stderr_tail()
    );
    // It comes before what stopping the master logs.
    let stderr = submit.stderr();
    let at = |text: &str| stderr.lines().position(|l| l.contains(text));
    let cause_at = at("train_on_spark.py: sluice worker spark-");
    let master_stop_at = at("sluice master: SIGTERM: stopping");
    assert!(
        cause_at.is_some() && master_stop_at.is_some() && cause_at < master_stop_at,
        "the cause (line {cause_at:?}) should come before the master's stop (line {master_stop_at:?}):\n{stderr}"
    );
    for java in ["Py4JJavaError", "collectAndServe", "Traceback"] {
        assert!(!stderr.contains(java), "stderr shows `{java}`:\n{stderr}");
    }
    let started = std::fs::read_to_string(&marker).expect("marker");
    assert!(
        started.lines().count() <= 2,
        "trainers started {} times for 2 workers: the stage ran again",
        started.lines().count()
    );

    let summary = common::parse_json(&stdout, "the stdout of train_on_spark.py");
    let error = summary["error"].as_str().expect("the summary has `error`");
    assert!(error.ends_with("exit status: 3"), "{summary}");
    assert!(!stdout.contains("lease expired"), "{summary}");
    let file = std::fs::read_to_string(dir.path().join("summary.json")).expect("summary.json");
    assert_eq!(common::parse_json(&file, "summary.json"), summary);
    assert_eq!(submit.temporary_state(), Vec::<String>::new());
    assert_no_sluice_left(dir.path(), Duration::from_secs(5));
}

#[test]
fn worker_output_is_streamed_the_master_listens_where_told_and_the_summary_is_json() {
    let _one = SPARK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("ids");
    std::fs::create_dir(&out).expect("ids dir");
    let go = dir.path().join("go");
    let rows = expected_dataset(DATASET)["rows"].as_u64().expect("rows");
    // A port free on 127.0.0.2, an address of the loopback interface that
    // 0.0.0.0 would cover as well as 127.0.0.1, held on 127.0.0.1 by this
    // test (so that no other process takes it meanwhile): a master listening
    // beyond --listen could not bind it, and a connection to 127.0.0.1 reaches
    // this test's listener.
    let (port, held) = loop {
        let held = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port on 127.0.0.1");
        let port = held.local_addr().expect("its address").port();
        if std::net::TcpListener::bind(("127.0.0.2", port)).is_ok() {
            break (port, held);
        }
    };
    let summary_file = dir.path().join("summary.json");
    let mut launch = Launch::cluster(&out, 0.0);
    launch.master = "local[2]";
    launch.exec = waiting_trainer(&go, &out);
    launch.launcher = vec![
        "--listen".into(),
        format!("127.0.0.2:{port}").into(),
        "--summary-json".into(),
        summary_file.clone().into(),
    ];
    let mut submit = Submit::launch(dir.path(), launch);

    // The trainers' first line reaches the log while they still wait: nothing
    // has been trained, no worker has ended.
    wait_for_stderr(
        &mut submit,
        "trainer waiting on device 0",
        Duration::from_secs(90),
    );
    assert_eq!(count_lines(&out, "ids-"), 0, "trained before `go`");
    // The master serves on 127.0.0.2 only.
    assert!(
        std::net::TcpStream::connect(("127.0.0.2", port)).is_ok(),
        "the master does not answer on 127.0.0.2:{port}\n{}",
        submit.stderr_tail()
    );
    let probe = std::net::TcpStream::connect(("127.0.0.1", port)).expect("this test's listener");
    let (_, peer) = held
        .accept()
        .expect("the probe reaches this test's listener");
    assert_eq!(
        peer,
        probe.local_addr().expect("the probe's address"),
        "127.0.0.1:{port} is answered by this test alone: the master listens on --listen only"
    );
    std::fs::write(&go, "").expect("go");

    let summary = submit.summary();
    assert_summary(&summary, rows);
    common::assert_exactly_once(&recorded_ids(&out, "ids-"), rows, "trainers");
    let file = std::fs::read_to_string(&summary_file).expect("summary.json");
    assert_eq!(common::parse_json(&file, "summary.json"), summary);
    assert!(
        submit.stderr().contains(&format!(
            "sluice master listening on http://127.0.0.2:{port}"
        )),
        "{}",
        submit.stderr_tail()
    );
    assert_eq!(submit.temporary_state(), Vec::<String>::new());
    assert_no_sluice_left(dir.path(), Duration::from_secs(5));
}

#[test]
fn sigterm_to_the_driver_stops_the_job_and_removes_the_masters_state() {
    let _one = SPARK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("ids");
    std::fs::create_dir(&out).expect("ids dir");
    let summary_file = dir.path().join("summary.json");
    let mut launch = Launch::cluster(&out, 0.0);
    launch.master = "local[2]";
    // `go` never comes: the trainers wait until the driver is stopped.
    launch.exec = waiting_trainer(&dir.path().join("go"), &out);
    launch.launcher = vec!["--summary-json".into(), summary_file.clone().into()];
    let mut submit = Submit::launch(dir.path(), launch);
    wait_for_stderr(
        &mut submit,
        "trainer waiting on device 0",
        Duration::from_secs(90),
    );
    assert_eq!(submit.temporary_state().len(), 1, "the master's state");
    let script = repo("jobs/spark/train_on_spark.py").display().to_string();
    let driver = pids()
        .into_iter()
        .find(|&pid| {
            let args = cmdline(pid);
            args.first().is_some_and(|a| a.contains("python"))
                && args.iter().any(|a| a == &script)
                && args.iter().any(|a| a.contains(&out.display().to_string()))
        })
        .expect("the Python driver of train_on_spark.py");
    // SAFETY: kill(2) on the driver process of the spark-submit this test started.
    unsafe {
        libc::kill(driver as i32, libc::SIGTERM);
    }
    let (status, stdout) = submit.wait(Duration::from_secs(60));
    assert!(!status.success(), "stopped, yet exit 0: {stdout}");
    assert_eq!(submit.temporary_state(), Vec::<String>::new());
    assert_no_sluice_left(dir.path(), Duration::from_secs(10));
    let file = std::fs::read_to_string(&summary_file).expect("summary.json");
    let summary = common::parse_json(&file, "summary.json");
    assert!(summary["error"].as_str().is_some(), "{summary}");
}
