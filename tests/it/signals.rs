//! One SIGTERM ends any command at any moment: `train`, `train --follow`,
//! `master`, `master --follow`, `worker`, `run` and a loop over a Python
//! `Dataset`, stopped before their data exists, while they wait for
//! `_SUCCESS`, mid-epoch, between epochs, while following a source with
//! nothing new, with their master unreachable, and before their trainer
//! started. Each exits within `--grace` plus 2 s with the stopped code, 130,
//! and the same command run again trains every row exactly once overall, as
//! the acknowledging trainer logged them (tests/trainers/ack_log.py); a job
//! file without `follow` keeps no queue state, so its next run trains it all.
//!
//! Also here: the waits say what they wait for, `--idle-exit` ends a follow
//! of a source that never held anything, and progress lines count exactly.
//! The data is small (2,000 rows of Spark output) and the grace short, so
//! the whole file runs in well under a minute on 2 cores.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::cluster::{signal, wait_exit, TOKEN};
use crate::common::{ack_log, assert_exactly_once, count_lines, fixture, wait_until, SLUICE};

/// The grace every stopped command gets.
const GRACE: Duration = Duration::from_secs(2);
/// How long after the grace a stopped command may take to exit.
const MARGIN: Duration = Duration::from_secs(2);
/// Every wait of a test for what a command does.
const LIMIT: Duration = Duration::from_secs(60);
/// The fixture every test trains on.
const DATASET: &str = "parquet_small_files";

/// Rows of the fixture, as Spark counted them.
fn rows() -> u64 {
    common::expected_dataset(DATASET)["rows"]
        .as_u64()
        .expect("expected rows")
}

/// A test's directory: the data's place, the state, the trainer's log.
struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new() -> Case {
        let case = Case {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        std::fs::create_dir_all(case.acked()).expect("mkdir");
        case
    }

    /// Where the data is (or will be).
    fn data(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// Puts the fixture where the data is, `_SUCCESS` included or not.
    fn land(&self, success: bool) {
        common::copy_dir(&fixture(DATASET), &self.data());
        if !success {
            std::fs::remove_file(self.data().join("_SUCCESS")).expect("remove _SUCCESS");
        }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn acked(&self) -> PathBuf {
        self.dir.path().join("acked")
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// The trainer: logs what it acknowledged, `sleep` seconds a batch.
    fn trainer(&self, sleep: f64) -> String {
        ack_log(&self.acked(), sleep)
    }

    /// Rows the trainers acknowledged so far.
    fn acked_rows(&self) -> u64 {
        count_lines(&self.acked(), "acked-")
    }

    /// Every id acknowledged `epochs` times, over every run.
    #[track_caller]
    fn assert_trained(&self, epochs: u32, what: &str) {
        let counts = common::recorded_ids(&self.acked(), "acked-");
        if epochs == 1 {
            assert_exactly_once(&counts, rows(), what);
            return;
        }
        let wrong: Vec<_> = (0..rows() as i64)
            .filter(|id| counts.get(id) != Some(&epochs))
            .take(5)
            .map(|id| (id, counts.get(&id).copied().unwrap_or(0)))
            .collect();
        assert!(
            wrong.is_empty(),
            "{what}: ids not trained {epochs} times: {wrong:?}"
        );
        assert_eq!(counts.len() as u64, rows(), "{what}: ids outside the data");
    }

    /// `sluice train` on the data with the acknowledging trainer, its
    /// `--state` and a short grace; stderr to log `name`.
    fn train(&self, name: &str, sleep: f64, extra: &[&str]) -> Child {
        let mut cmd = Command::new(SLUICE);
        cmd.arg("train")
            .arg(self.data())
            .arg("--state")
            .arg(self.state())
            .args(["--exec", &self.trainer(sleep), "--batch-size", "100"])
            .args(["--grace", "2s", "--log-every", "1s"])
            .args(extra);
        spawn(cmd, &self.log(name))
    }

    fn read_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log(name)).unwrap_or_default()
    }
}

/// Starts `cmd` with its stderr written to `log`.
fn spawn(mut cmd: Command, log: &Path) -> Child {
    cmd.env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("start sluice")
}

/// Sends one SIGTERM to `child` and checks that it exits with `code`
/// within [`GRACE`] plus [`MARGIN`]; returns its log.
#[track_caller]
fn stop(child: &mut Child, log: &Path, code: i32, what: &str) -> String {
    let sent = Instant::now();
    signal(child, libc::SIGTERM);
    let status = wait_exit(child, what);
    let took = sent.elapsed();
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        took <= GRACE + MARGIN,
        "{what}: exited {took:?} after one SIGTERM: {text}"
    );
    assert_eq!(status.code(), Some(code), "{what}: {text}");
    assert!(!text.contains("panicked"), "{what}: {text}");
    text
}

/// Waits for `child` to exit and checks it exited 0; returns its log.
#[track_caller]
fn finish(child: &mut Child, log: &Path, what: &str) -> String {
    let status = wait_exit(child, what);
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "{what}: {status}: {text}");
    text
}

/// Waits until `log` has a line containing `line`.
fn wait_line(log: &Path, line: &str) {
    wait_until(&format!("`{line}` in {}", log.display()), LIMIT, || {
        std::fs::read_to_string(log).is_ok_and(|t| t.contains(line))
    });
}

// ---- train --follow: waits that end

#[test]
fn a_follow_of_a_path_that_does_not_exist_ends_at_idle_exit() {
    let case = Case::new();
    let started = Instant::now();
    let mut child = case.train(
        "follow",
        0.0,
        &["--follow", "--poll", "200ms", "--idle-exit", "2s"],
    );
    let text = finish(&mut child, &case.log("follow"), "train --follow");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "ended after {:?}: {text}",
        started.elapsed()
    );
    let url = format!("file://{}", case.data().display());
    assert!(
        text.contains(&format!("waiting for {url} to exist")),
        "the wait says what it waits for: {text}"
    );
    assert!(text.contains("--idle-exit"), "{text}");
    assert_eq!(case.acked_rows(), 0);
}

#[test]
fn a_follow_of_an_empty_directory_stops_on_one_sigterm() {
    let case = Case::new();
    std::fs::create_dir_all(case.data()).expect("mkdir");
    let mut child = case.train("follow", 0.0, &["--follow", "--poll", "200ms"]);
    let log = case.log("follow");
    wait_line(&log, "waiting for the first commit in");
    let sent = Instant::now();
    let text = stop(&mut child, &log, 130, "train --follow");
    assert!(sent.elapsed() < Duration::from_secs(5), "{text}");
    assert!(text.contains("stopped by a signal"), "{text}");
}

#[test]
fn follow_until_ends_a_follow_still_waiting_for_its_first_data() {
    let case = Case::new();
    let mut child = case.train(
        "follow",
        0.0,
        &["--follow", "--poll", "200ms", "--follow-until", "2s"],
    );
    let text = finish(&mut child, &case.log("follow"), "train --follow-until");
    assert!(text.contains("--follow-until"), "{text}");
}

// ---- train

#[test]
fn train_stopped_before_its_data_exists_then_resumed() {
    let case = Case::new();
    let mut child = case.train("first", 0.0, &["--wait-success=60s"]);
    wait_line(&case.log("first"), "waiting for _SUCCESS in");
    stop(&mut child, &case.log("first"), 130, "train --wait-success");
    case.land(true);
    let mut again = case.train("again", 0.0, &["--wait-success=60s"]);
    finish(&mut again, &case.log("again"), "train again");
    case.assert_trained(1, "train stopped before its data existed");
}

#[test]
fn train_stopped_waiting_for_success_then_resumed() {
    let case = Case::new();
    case.land(false);
    let mut child = case.train("first", 0.0, &["--wait-success=60s"]);
    wait_line(&case.log("first"), "waiting for _SUCCESS in");
    stop(&mut child, &case.log("first"), 130, "train --wait-success");
    std::fs::write(case.data().join("_SUCCESS"), b"").expect("write _SUCCESS");
    let mut again = case.train("again", 0.0, &["--wait-success=60s"]);
    finish(&mut again, &case.log("again"), "train again");
    case.assert_trained(1, "train stopped waiting for _SUCCESS");
}

#[test]
fn train_stopped_mid_epoch_then_resumed() {
    let case = Case::new();
    case.land(true);
    let mut child = case.train("first", 0.05, &["--epochs", "2", "--devices", "2"]);
    wait_until("rows acknowledged", LIMIT, || case.acked_rows() >= 300);
    stop(&mut child, &case.log("first"), 130, "train mid-epoch");
    assert!(case.acked_rows() < 2 * rows(), "stopped before the end");
    let mut again = case.train("again", 0.0, &["--epochs", "2", "--devices", "2"]);
    finish(&mut again, &case.log("again"), "train again");
    case.assert_trained(2, "train stopped mid-epoch");
}

#[test]
fn train_stopped_between_epochs_then_resumed() {
    let case = Case::new();
    case.land(true);
    let mut child = case.train("first", 0.03, &["--epochs", "2"]);
    wait_line(&case.log("first"), "epoch 1/2 done:");
    stop(&mut child, &case.log("first"), 130, "train between epochs");
    let mut again = case.train("again", 0.0, &["--epochs", "2"]);
    finish(&mut again, &case.log("again"), "train again");
    case.assert_trained(2, "train stopped between epochs");
}

#[test]
fn train_stopped_before_its_trainer_started_then_resumed() {
    let case = Case::new();
    case.land(true);
    // The trainer takes a while to start (an import of torch): it is
    // stopped before it read anything. The grace is long enough for it to
    // start and finish what it holds on a loaded machine (a trainer still
    // busy when the grace ends is killed as by SIGKILL, and what it held is
    // served again): the run exits as soon as it did.
    let started = case.dir.path().join("started");
    let exec = format!(
        "touch {} && sleep 1 && {}",
        started.display(),
        case.trainer(0.0)
    );
    let mut cmd = Command::new(SLUICE);
    cmd.arg("train")
        .arg(case.data())
        .arg("--state")
        .arg(case.state())
        .args(["--exec", &exec, "--batch-size", "100", "--grace", "60s"]);
    let mut child = spawn(cmd, &case.log("first"));
    wait_until("the trainer to be started", LIMIT, || started.exists());
    stop(
        &mut child,
        &case.log("first"),
        130,
        "train before its trainer",
    );
    let mut again = case.train("again", 0.0, &[]);
    finish(&mut again, &case.log("again"), "train again");
    case.assert_trained(1, "train stopped before its trainer started");
}

// ---- train --follow

#[test]
fn a_follow_stopped_before_its_data_exists_then_resumed() {
    let case = Case::new();
    let follow = ["--follow", "--poll", "200ms"];
    let mut child = case.train("first", 0.0, &follow);
    wait_line(&case.log("first"), "to exist");
    stop(&mut child, &case.log("first"), 130, "train --follow");
    case.land(true);
    let mut again = case.train(
        "again",
        0.0,
        &[&follow[..], &["--idle-exit", "1s"]].concat(),
    );
    finish(&mut again, &case.log("again"), "train --follow again");
    case.assert_trained(1, "a follow stopped before its data existed");
}

#[test]
fn a_follow_stopped_mid_data_and_with_nothing_new_then_resumed() {
    let case = Case::new();
    case.land(true);
    let follow = ["--follow", "--poll", "200ms"];
    let mut child = case.train("first", 0.05, &follow);
    wait_until("rows acknowledged", LIMIT, || case.acked_rows() >= 300);
    stop(
        &mut child,
        &case.log("first"),
        130,
        "train --follow mid-data",
    );
    let mut again = case.train("again", 0.0, &follow);
    wait_until("every row", LIMIT, || case.acked_rows() >= rows());
    wait_line(&case.log("again"), "following: no new data for");
    stop(
        &mut again,
        &case.log("again"),
        130,
        "train --follow, nothing new",
    );
    let mut last = case.train("last", 0.0, &[&follow[..], &["--idle-exit", "1s"]].concat());
    finish(&mut last, &case.log("last"), "train --follow last");
    case.assert_trained(1, "a follow stopped twice");
}

// ---- master and worker

/// A master of the case's data on a free port, its state the case's.
fn master(case: &Case, name: &str, extra: &[&str]) -> Child {
    let mut cmd = Command::new(SLUICE);
    cmd.arg("master")
        .arg(case.data())
        .args(["--listen", "127.0.0.1:0", "--linger", "1s"])
        .arg("--state")
        .arg(case.state())
        .args(extra)
        .env("SLUICE_TOKEN", TOKEN);
    spawn(cmd, &case.log(name))
}

/// The URL a master's log says it listens on.
fn listening(case: &Case, name: &str) -> String {
    wait_line(&case.log(name), "sluice master listening on ");
    let text = case.read_log(name);
    let line = text
        .lines()
        .find_map(|l| l.split_once("sluice master listening on ").map(|(_, r)| r))
        .expect("listening line");
    line.split_whitespace().next().expect("url").to_string()
}

/// A worker of `url` with the acknowledging trainer.
fn worker(case: &Case, url: &str, name: &str, sleep: f64) -> Child {
    let mut cmd = Command::new(SLUICE);
    cmd.args(["worker", "--master", url, "--exec", &case.trainer(sleep)])
        .args(["--batch-size", "100", "--grace", "2s"])
        .args(["--patience", "30s"])
        .env("SLUICE_TOKEN", TOKEN);
    spawn(cmd, &case.log(name))
}

#[test]
fn a_following_master_stopped_before_its_data_exists_then_resumed() {
    let case = Case::new();
    let follow = ["--follow", "--poll", "200ms"];
    let mut first = master(&case, "master1", &follow);
    wait_line(&case.log("master1"), "to exist");
    stop(&mut first, &case.log("master1"), 130, "master --follow");
    case.land(true);
    let mut again = master(
        &case,
        "master2",
        &[&follow[..], &["--idle-exit", "1s"]].concat(),
    );
    let url = listening(&case, "master2");
    let mut w = worker(&case, &url, "worker", 0.0);
    finish(&mut w, &case.log("worker"), "worker");
    finish(&mut again, &case.log("master2"), "master again");
    case.assert_trained(1, "a master stopped before its data existed");
}

#[test]
fn a_following_master_with_nothing_new_stopped_then_resumed() {
    let case = Case::new();
    case.land(true);
    let follow = ["--follow", "--poll", "200ms"];
    let mut first = master(
        &case,
        "master1",
        &[&follow[..], &["--log-every", "1s"]].concat(),
    );
    let url = listening(&case, "master1");
    let mut w = worker(&case, &url, "worker1", 0.0);
    wait_until("every row", LIMIT, || case.acked_rows() >= rows());
    wait_line(&case.log("master1"), "following: no new data for");
    wait_line(&case.log("master1"), " taken, lag ");
    let text = stop(
        &mut first,
        &case.log("master1"),
        130,
        "master --follow, nothing new",
    );
    assert_follow_lines(&text);
    // The worker, its master gone, stops on its own signal.
    stop(
        &mut w,
        &case.log("worker1"),
        130,
        "worker of a stopped master",
    );
    let mut again = master(
        &case,
        "master2",
        &[&follow[..], &["--idle-exit", "1s"]].concat(),
    );
    let url = listening(&case, "master2");
    let mut w = worker(&case, &url, "worker2", 0.0);
    finish(&mut w, &case.log("worker2"), "worker");
    finish(&mut again, &case.log("master2"), "master again");
    case.assert_trained(1, "a following master stopped with nothing new");
}

#[test]
fn a_worker_stopped_mid_epoch_then_started_again() {
    let case = Case::new();
    case.land(true);
    let mut m = master(&case, "master", &["--epochs", "2"]);
    let url = listening(&case, "master");
    let mut first = worker(&case, &url, "worker1", 0.05);
    wait_until("rows acknowledged", LIMIT, || case.acked_rows() >= 300);
    stop(&mut first, &case.log("worker1"), 130, "worker mid-epoch");
    let mut again = worker(&case, &url, "worker2", 0.0);
    finish(&mut again, &case.log("worker2"), "worker again");
    finish(&mut m, &case.log("master"), "master");
    case.assert_trained(2, "a worker stopped mid-epoch");
}

#[test]
fn a_worker_whose_master_is_unreachable_stops_on_one_sigterm() {
    let case = Case::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut w = worker(&case, &format!("http://127.0.0.1:{port}"), "worker", 0.0);
    wait_line(&case.log("worker"), "waiting for master");
    stop(
        &mut w,
        &case.log("worker"),
        130,
        "worker, master unreachable",
    );
}

// ---- run (a job file)

/// A followed job file of the case's data.
fn job_file(case: &Case, sleep: f64, extra: &str) -> PathBuf {
    let job = case.dir.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "source = {:?}\nstate = {:?}\nexec = {:?}\nbatch-size = 100\ngrace = \"2s\"\nfollow = true\npoll = \"200ms\"\n{extra}",
            case.data().display().to_string(),
            case.state().display().to_string(),
            case.trainer(sleep)
        ),
    )
    .expect("write job file");
    job
}

fn run(case: &Case, job: &Path, name: &str) -> Child {
    let mut cmd = Command::new(SLUICE);
    cmd.arg("run").arg(job).args(["--log-every", "1s"]);
    spawn(cmd, &case.log(name))
}

#[test]
fn a_job_file_run_stopped_before_its_data_exists_and_mid_data_then_resumed() {
    let case = Case::new();
    let job = job_file(&case, 0.05, "");
    let mut first = run(&case, &job, "run1");
    wait_line(&case.log("run1"), "to exist");
    stop(&mut first, &case.log("run1"), 130, "run before data");
    case.land(true);
    let mut second = run(&case, &job, "run2");
    wait_until("rows acknowledged", LIMIT, || case.acked_rows() >= 300);
    stop(&mut second, &case.log("run2"), 130, "run mid-data");
    let job = job_file(&case, 0.0, "idle-exit = \"1s\"\n");
    let mut last = run(&case, &job, "run3");
    finish(&mut last, &case.log("run3"), "run again");
    case.assert_trained(1, "a job file run stopped twice");
}

// ---- progress lines

#[test]
fn each_epochs_line_counts_that_epochs_rows_under_prefetch() {
    let case = Case::new();
    case.land(true);
    // 20 batches of 100 rows an epoch; the next epoch's tasks are leased
    // as soon as the last of this one is done.
    let mut child = case.train("train", 0.02, &["--epochs", "3", "--prefetch", "8"]);
    let text = finish(&mut child, &case.log("train"), "train");
    let rows = rows();
    for epoch in 1..=2 {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("epoch {epoch}/3 done:")))
            .unwrap_or_else(|| panic!("a line at the end of epoch {epoch}: {text}"));
        assert!(
            line.contains(&format!("done: {rows} rows (")),
            "epoch {epoch} holds {rows} rows: {line}"
        );
    }
}

#[test]
fn a_followed_jobs_lines_never_show_more_done_than_taken() {
    let case = Case::new();
    // Two partitions at first, a third while the job follows.
    let root = case.data();
    let parts: Vec<PathBuf> = (0..3).map(|i| root.join(format!("part={i}"))).collect();
    let files: Vec<PathBuf> = std::fs::read_dir(fixture(DATASET))
        .expect("list fixture")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    let land = |i: usize| {
        std::fs::create_dir_all(&parts[i]).expect("mkdir");
        for file in files.iter().skip(i).step_by(3) {
            std::fs::copy(file, parts[i].join(file.file_name().expect("name"))).expect("copy");
        }
        std::fs::write(parts[i].join("_SUCCESS"), b"").expect("marker");
    };
    land(0);
    land(1);
    let mut child = case.train("follow", 0.05, &["--follow", "--poll", "200ms"]);
    wait_until("rows acknowledged", LIMIT, || case.acked_rows() >= 200);
    land(2);
    wait_until("every row", LIMIT, || case.acked_rows() >= rows());
    wait_line(&case.log("follow"), "following: no new data for");
    stop(&mut child, &case.log("follow"), 130, "train --follow");
    assert_follow_lines(&case.read_log("follow"));
    case.assert_trained(1, "a followed job");
}

// ---- a Python Dataset (sluice as the child of the training loop)

/// `python tests/trainers/dataset_loop.py log DATA OUT` with the package
/// importable and this build of sluice as the Dataset's child.
fn dataset_loop(case: &Case, name: &str, sleep: f64) -> Child {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(common::python());
    cmd.arg(repo.join("tests/trainers/dataset_loop.py"))
        .arg("log")
        .arg(case.data())
        .arg(case.acked())
        .arg("--state")
        .arg(case.state())
        .args(["--sleep", &sleep.to_string(), "--option", "grace=2s"])
        .args(["--option", "wait_success=60s"])
        .env("PYTHONPATH", repo.join("python/sluice_trainer"))
        .env("SLUICE_BINARY", SLUICE);
    spawn(cmd, &case.log(name))
}

#[test]
fn a_python_dataset_stopped_mid_epoch_and_waiting_for_data_then_resumed() {
    let case = Case::new();
    let trained = || count_lines(&case.acked(), "trained-");
    // Waiting for data that does not exist yet: the loop has no batch.
    let mut waiting = dataset_loop(&case, "loop0", 0.0);
    wait_line(&case.log("loop0"), "waiting for _SUCCESS in");
    stop(
        &mut waiting,
        &case.log("loop0"),
        130,
        "a Dataset before its data",
    );
    case.land(true);
    let mut first = dataset_loop(&case, "loop1", 0.05);
    wait_until("rows trained", LIMIT, || trained() >= 300);
    stop(&mut first, &case.log("loop1"), 130, "a Dataset mid-epoch");
    assert!(trained() < rows(), "stopped before the end");
    let mut again = dataset_loop(&case, "loop2", 0.0);
    finish(&mut again, &case.log("loop2"), "a Dataset again");
    let counts = common::recorded_ids(&case.acked(), "trained-");
    assert_exactly_once(&counts, rows(), "a Dataset stopped mid-epoch");
}

/// Checks a followed job's progress lines: there are some, and none says
/// more rows or tasks trained than taken, nor an ETA.
#[track_caller]
fn assert_follow_lines(text: &str) {
    let counted: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("following: ") && l.contains(" trained of "))
        .collect();
    assert!(
        !counted.is_empty(),
        "progress lines while following: {text}"
    );
    for line in counted {
        // `following: R rows trained of T taken (S rows/s), D tasks trained of N taken, lag ...`
        let before = |word: &str| -> (u64, u64) {
            let i = line.find(word).expect("word");
            let numbers: Vec<u64> = line[..i]
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse().ok())
                .collect();
            (numbers[numbers.len() - 2], numbers[numbers.len() - 1])
        };
        let (rows_trained, rows_taken) = before(" taken (");
        let (tasks_trained, tasks_taken) = before(" taken, lag");
        assert!(
            rows_trained <= rows_taken && tasks_trained <= tasks_taken,
            "{line}"
        );
        assert!(line.contains(", lag ") && !line.contains("ETA"), "{line}");
    }
}

#[test]
fn a_masters_epoch_lines_count_that_epochs_rows() {
    let case = Case::new();
    case.land(true);
    let mut m = master(&case, "master", &["--epochs", "3", "--log-every", "1s"]);
    let url = listening(&case, "master");
    let mut w = worker(&case, &url, "worker", 0.02);
    finish(&mut w, &case.log("worker"), "worker");
    let text = finish(&mut m, &case.log("master"), "master");
    let rows = rows();
    for epoch in 1..=2 {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("epoch {epoch}/3 done:")))
            .unwrap_or_else(|| panic!("a line at the end of epoch {epoch}: {text}"));
        assert!(
            line.contains(&format!("done: {rows} rows (")),
            "epoch {epoch} holds {rows} rows: {line}"
        );
    }
    case.assert_trained(3, "a master's job");
}

#[test]
fn a_job_file_run_without_follow_stopped_mid_training_exits_130_and_records_nothing() {
    let case = Case::new();
    case.land(true);
    let job = case.dir.path().join("once.toml");
    let write = |sleep: f64| {
        std::fs::write(
            &job,
            format!(
                "source = {:?}\nstate = {:?}\nexec = {:?}\nbatch-size = 100\ngrace = \"2s\"\n",
                case.data().display().to_string(),
                case.state().display().to_string(),
                case.trainer(sleep)
            ),
        )
        .expect("write job file");
    };
    write(0.05);
    let mut first = run(&case, &job, "run1");
    wait_until("rows acknowledged", LIMIT, || case.acked_rows() >= 300);
    let text = stop(&mut first, &case.log("run1"), 130, "run mid-training");
    assert!(text.contains("stopped by a signal"), "{text}");
    // A job file's run keeps no queue state: the data is recorded as
    // trained only by a run that trained all of it, and the next run does.
    let before = case.acked_rows();
    write(0.0);
    let mut again = run(&case, &job, "run2");
    finish(&mut again, &case.log("run2"), "run again");
    assert_eq!(
        case.acked_rows() - before,
        rows(),
        "the next run trains it all"
    );
}

#[test]
fn a_worker_stopped_before_its_trainer_started_then_started_again() {
    let case = Case::new();
    case.land(true);
    let mut m = master(&case, "master", &[]);
    let url = listening(&case, "master");
    // The trainer takes a while to start: the worker holds leases it has
    // not trained from when it is stopped.
    let started = case.dir.path().join("started");
    let exec = format!(
        "touch {} && sleep 1 && {}",
        started.display(),
        case.trainer(0.0)
    );
    let mut cmd = Command::new(SLUICE);
    cmd.args(["worker", "--master", &url, "--exec", &exec])
        .args(["--batch-size", "100", "--grace", "2s"])
        .env("SLUICE_TOKEN", TOKEN);
    let mut first = spawn(cmd, &case.log("worker1"));
    wait_until("the trainer to be started", LIMIT, || started.exists());
    stop(
        &mut first,
        &case.log("worker1"),
        130,
        "worker before its trainer",
    );
    let mut again = worker(&case, &url, "worker2", 0.0);
    finish(&mut again, &case.log("worker2"), "worker again");
    finish(&mut m, &case.log("master"), "master");
    case.assert_trained(1, "a worker stopped before its trainer started");
}
