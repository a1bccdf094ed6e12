//! Reads that fail for a reason that may pass wait, with backoff, before they
//! count (`--read-retry`): part files moved away while the last task is read
//! are waited for and every row is trained once; with `--read-retry 0` the
//! same outage fails the task at once; corrupt data fails at once, whatever
//! the retry allows; a SIGTERM while a read waits stops the run at once, and
//! the same command trains the rest.

use crate::common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    assert_exactly_once, copy_dir, count_lines, damaged_parquet_copy, expected_dataset, fixture,
    recorded_ids, recorder, wait_until, SLUICE,
};

/// The fixture: 4,000 rows (ids 0..4000) in three Spark part files.
const DATASET: &str = "separable";
/// What sluice logs when a read waits to be tried again.
const WAITING: &str = "reading again after a wait";
/// The longest any run here may take before the test gives up on it.
const LIMIT: Duration = Duration::from_secs(120);

/// A running `sluice train`, its stderr written to a file.
struct Train {
    child: Child,
    stderr: PathBuf,
}

impl Train {
    /// Starts `sluice train DATA` over one device, one task read at a time,
    /// with a slow id-recording trainer writing into `ids`, and `extra` flags;
    /// its stderr goes to `dir`/`log`.
    fn start(dir: &Path, log: &str, data: &Path, ids: &Path, extra: &[&str]) -> Train {
        let stderr = dir.join(log);
        let log = File::create(&stderr).expect("stderr file");
        let trainer = recorder(ids, "--sleep 0.02");
        let child = Command::new(SLUICE)
            .arg("train")
            .arg(data)
            .args(["--quiet", "--devices", "1", "--prefetch", "1"])
            .args(["--batch-size", "20", "--exec", &trainer])
            .args(extra)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sluice train");
        Train { child, stderr }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Whether it has exited.
    fn exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// Waits for the exit, within [`LIMIT`] (killed past it).
    fn wait(mut self) -> (ExitStatus, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return (status, self.stderr());
            }
            if start.elapsed() > LIMIT {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("sluice train ran past {LIMIT:?}: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Train {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Parquet part files of `data`.
fn part_files(data: &Path) -> Vec<PathBuf> {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(data)
        .expect("list data")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    parts.sort();
    assert!(parts.len() >= 3, "{DATASET} has {} part files", parts.len());
    parts
}

/// Moves `parts` into `away` (outside the dataset).
fn move_away(parts: &[PathBuf], away: &Path) {
    std::fs::create_dir_all(away).expect("mkdir away");
    for part in parts {
        let name = part.file_name().expect("name");
        std::fs::rename(part, away.join(name)).expect("move a part file away");
    }
}

/// Puts back what [`move_away`] moved.
fn put_back(parts: &[PathBuf], away: &Path) {
    for part in parts {
        let name = part.file_name().expect("name");
        std::fs::rename(away.join(name), part).expect("put a part file back");
    }
}

/// A copy of the fixture, a directory for the trainer's ids and the run's
/// files.
fn setup(dir: &Path) -> (PathBuf, PathBuf) {
    let data = dir.join("data");
    copy_dir(&fixture(DATASET), &data);
    let ids = dir.join("ids");
    std::fs::create_dir(&ids).expect("ids dir");
    (data, ids)
}

/// Waits until the trainer has recorded its first rows: the job is planned
/// and the first task is being read, the last not yet (one task at a time,
/// and a slow trainer holds the reader of the first back).
fn wait_for_first_rows(train: &mut Train, ids: &Path) {
    wait_until("the trainer's first rows", LIMIT, || {
        assert!(!train.exited(), "sluice ended early: {}", train.stderr());
        count_lines(ids, "ids-") > 0
    });
}

#[test]
fn part_files_away_for_seconds_while_the_last_task_is_read_are_waited_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, ids) = setup(dir.path());
    let parts = part_files(&data);
    let away = dir.path().join("away");
    let mut train = Train::start(
        dir.path(),
        "stderr.log",
        &data,
        &ids,
        &["--read-retry", "60s"],
    );
    wait_for_first_rows(&mut train, &ids);
    move_away(&parts, &away);
    // The outage is seen: a read failed and waits to be tried again.
    wait_until("a read waiting to be tried again", LIMIT, || {
        assert!(
            !train.exited(),
            "sluice ended while the files were away: {}",
            train.stderr()
        );
        train.stderr().contains(WAITING)
    });
    std::thread::sleep(Duration::from_secs(3));
    put_back(&parts, &away);
    let (status, stderr) = train.wait();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(WAITING), "{stderr}");
    let named = parts.iter().any(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).expect("name");
        stderr.contains(name)
    });
    assert!(named, "the waiting read names its file: {stderr}");
    let rows = expected_dataset(DATASET)["rows"].as_u64().expect("rows");
    assert_exactly_once(&recorded_ids(&ids, "ids-"), rows, "after the outage");
}

#[test]
fn with_no_read_retry_part_files_away_fail_their_task_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, ids) = setup(dir.path());
    let parts = part_files(&data);
    let away = dir.path().join("away");
    let mut train = Train::start(
        dir.path(),
        "stderr.log",
        &data,
        &ids,
        &["--read-retry", "0"],
    );
    wait_for_first_rows(&mut train, &ids);
    move_away(&parts, &away);
    // Away until the run ends: its later tasks are read while they are away.
    let (status, stderr) = train.wait();
    put_back(&parts, &away);
    assert_eq!(status.code(), Some(2), "a failed task exits 2: {stderr}");
    assert!(
        !stderr.contains(WAITING),
        "no wait with --read-retry 0: {stderr}"
    );
    let failed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("failed task: "))
        .collect();
    assert!(!failed.is_empty(), "{stderr}");
    for line in failed {
        let named = parts.iter().any(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).expect("name");
            line.contains(name)
        });
        assert!(named && line.contains("no such path"), "{line}");
    }
    let twice: Vec<_> = recorded_ids(&ids, "ids-")
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .take(5)
        .collect();
    assert!(twice.is_empty(), "ids served twice: {twice:?}");
}

/// Runs `sluice train` over `data` with a retry far longer than the test may
/// take; returns its exit status and stderr.
fn train_with_long_retry(
    dir: &Path,
    data: &Path,
    ids: &Path,
    extra: &[&str],
) -> (ExitStatus, String) {
    let mut args = vec!["--read-retry", "1h"];
    args.extend_from_slice(extra);
    Train::start(dir, "stderr.log", data, ids, &args).wait()
}

#[test]
fn a_corrupt_row_group_fails_at_once_whatever_the_read_retry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ids = dir.path().join("ids");
    std::fs::create_dir(&ids).expect("ids dir");
    let (part, _, _) = damaged_parquet_copy("parquet_row_groups", dir.path(), 3);
    let (status, stderr) = train_with_long_retry(dir.path(), &dir.path().join("data"), &ids, &[]);
    assert_eq!(status.code(), Some(2), "a failed task exits 2: {stderr}");
    let name = part.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(
        stderr.contains(name) && stderr.contains("corrupt"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(WAITING),
        "corrupt data is not waited for: {stderr}"
    );
}

#[test]
fn a_garbage_part_file_fails_at_once_whatever_the_read_retry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, ids) = setup(dir.path());
    let garbage = data.join("part-00000.parquet");
    std::fs::write(&garbage, b"this is not a parquet file, only some bytes").expect("garbage");
    let (status, stderr) =
        train_with_long_retry(dir.path(), &data, &ids, &["--ignore-corrupt-files"]);
    assert_eq!(status.code(), Some(2), "a failed task exits 2: {stderr}");
    assert!(stderr.contains("part-00000.parquet"), "{stderr}");
    assert!(
        !stderr.contains(WAITING),
        "corrupt data is not waited for: {stderr}"
    );
    // Every row of the good files is trained.
    let rows = expected_dataset(DATASET)["rows"].as_u64().expect("rows");
    assert_exactly_once(&recorded_ids(&ids, "ids-"), rows, "the good files");
}

#[test]
fn a_stop_while_a_read_waits_stops_at_once_and_the_rerun_trains_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, ids) = setup(dir.path());
    let parts = part_files(&data);
    let away = dir.path().join("away");
    let state = dir.path().join("state");
    let state_arg = state.to_str().expect("utf8");
    // A retry far longer than the test: only a prompt stop ends the run.
    let extra = ["--read-retry", "1h", "--state", state_arg];
    let mut train = Train::start(dir.path(), "first.log", &data, &ids, &extra);
    wait_for_first_rows(&mut train, &ids);
    move_away(&parts, &away);
    wait_until("a read waiting to be tried again", LIMIT, || {
        assert!(!train.exited(), "sluice ended early: {}", train.stderr());
        train.stderr().contains(WAITING)
    });
    common::cluster::signal(&train.child, libc::SIGTERM);
    let (status, stderr) = train.wait();
    assert_eq!(status.code(), Some(130), "stopped by SIGTERM: {stderr}");
    put_back(&parts, &away);
    let (status, stderr) = Train::start(dir.path(), "second.log", &data, &ids, &extra).wait();
    assert_eq!(
        status.code(),
        Some(0),
        "the rerun trains the rest: {stderr}"
    );
    let rows = expected_dataset(DATASET)["rows"].as_u64().expect("rows");
    assert_exactly_once(&recorded_ids(&ids, "ids-"), rows, "stopped, then resumed");
}

/// A part file changed between the job's planning (its master's start) and
/// its reading (a worker's): shrunk, grown, or rewritten with the same size
/// and other ids. Its task fails at once, never waited for as a read that
/// may pass (the worker's `--read-retry` is its default of minutes), the
/// master names the file as changed since planning and what to do, and no
/// row of the changed file reaches a trainer.
#[test]
fn a_part_file_changed_since_planning_fails_its_task_at_once_naming_it() {
    use common::cluster::{self, Job};
    use common::PartChange;
    for change in PartChange::ALL {
        let dataset = "csv_plain";
        let job = Job::new(dataset, 1);
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        copy_dir(&fixture(dataset), &data);
        let mut master = job.start_master(&data);
        let part = common::first_csv_part(&data);
        let planned = std::fs::read(&part).expect("read part");
        std::fs::write(&part, change.apply(&planned)).expect("change part");
        let started = Instant::now();
        let mut worker = job.start_worker("--sleep 0");
        let status = cluster::wait_exit(&mut worker, "worker");
        let master_status = cluster::wait_exit(&mut master, "master");
        let took = started.elapsed();
        let log = master.log();
        assert!(
            took < Duration::from_secs(60),
            "{change:?}: took {took:?}: {log}"
        );
        assert!(status.success(), "{change:?}: the worker failed");
        assert_eq!(master_status.code(), Some(2), "{change:?}: {log}");
        let name = part
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let failed: Vec<&str> = log.lines().filter(|l| l.contains("failed task")).collect();
        assert!(!failed.is_empty(), "{change:?}: no failed task: {log}");
        for line in &failed {
            assert!(
                line.contains(&name)
                    && line.contains("changed since the job was planned")
                    && line.contains("without --state"),
                "{change:?}: {line}"
            );
        }
        let ids = job.recorded_ids();
        let rows = expected_dataset(dataset)["rows"].as_i64().expect("rows");
        let foreign: Vec<_> = ids
            .keys()
            .filter(|&&id| !(0..rows).contains(&id))
            .take(5)
            .collect();
        assert!(
            foreign.is_empty(),
            "{change:?}: ids from no planned row: {foreign:?}"
        );
        assert!(ids.values().all(|&n| n == 1), "{change:?}: an id twice");
    }
}
