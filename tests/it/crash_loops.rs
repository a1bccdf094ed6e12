//! Crash loops, as a supervisor (cron, systemd, Kubernetes) makes them: `train
//! --state` killed again and again at random moments and rerun until it exits
//! 0. A crash is never a failed attempt, a job with failed tasks never ends in
//! exit 0, and a run killed after its last task is finished by the next.
//!
//! The trainer (tests/trainers/ack_log.py) logs durably every batch it was
//! handed (`ids-*`) and every batch whose `ack` went through (`acked-*`).

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::object_stores::cloud::{Cloud, Kind};

use crate::common::{
    ack_log, acked_then_served_again, count_lines, damaged_parquet_copy, fixture, parse_json, seed,
    wait_until, Moments, SLUICE,
};

/// Rows per batch in these tests.
const BATCH: u64 = 100;
/// The fixture: one Spark part file of 20,000 rows in 73 row groups, ids 0..20000.
const DATASET: &str = "parquet_row_groups";
const ROWS: u64 = 20_000;

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(&path).expect("mkdir");
    path
}

/// `train --state` on two devices, device 1 fifty times slower than device 0.
fn skewed_train(
    data: impl AsRef<std::ffi::OsStr>,
    state: &Path,
    out: &Path,
    extra: &[&str],
) -> Command {
    let trainer = format!(
        "{} --sleep 0.04 --slow-device 1 --slow-sleep 2",
        ack_log(out, 0.0)
    );
    let mut cmd = Command::new(SLUICE);
    cmd.arg("train")
        .arg(data)
        .args(["--quiet", "--batch-size", &BATCH.to_string()])
        .args(["--devices", "2"])
        .arg("--state")
        .arg(state)
        .args(["--exec", &trainer])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Over `runs` (one per kill, then the run that finished): no id is
/// missing, and each kill served again at most what the two devices held
/// unacknowledged (the exec window, 4 batches each), whatever the skew: an
/// acknowledged batch is committed when it arrives, not once the slow
/// device's earlier batch is.
#[track_caller]
fn assert_each_kill_within_the_windows(runs: &[PathBuf], what: &str) {
    assert_none_missing(&all_ids(runs), what);
    let bound = 4 * 2 * BATCH;
    for k in 0..runs.len() - 1 {
        let again = acked_then_served_again(&runs[k], &runs[k + 1..]);
        eprintln!("kill {k}: {again} acknowledged rows served again");
        assert!(
            again <= bound,
            "{what}, kill {k}: {again} acknowledged rows served again (bound {bound}: the window of each device)"
        );
    }
}

/// Every id handed to a trainer in any of `runs`, with counts.
fn all_ids(runs: &[PathBuf]) -> HashMap<i64, u32> {
    let mut all: HashMap<i64, u32> = HashMap::new();
    for run in runs {
        for (id, n) in common::recorded_ids(run, "ids-") {
            *all.entry(id).or_insert(0) += n;
        }
    }
    all
}

#[track_caller]
fn assert_none_missing(all: &HashMap<i64, u32>, what: &str) {
    let missing: Vec<i64> = (0..ROWS as i64)
        .filter(|i| !all.contains_key(i))
        .take(5)
        .collect();
    let count = (0..ROWS as i64).filter(|i| !all.contains_key(i)).count();
    assert!(
        missing.is_empty(),
        "{what}: {count} ids never reached a trainer, e.g. {missing:?}"
    );
}

/// Ten runs of `train` (each made by `train(out, extra)` into a fresh
/// `out`), each stopped at a random moment: SIGKILL, or every other time a
/// SIGTERM that the slow device cannot honour within `--grace` (its trainers
/// are stopped as well, exit 130). Returns the runs' output directories.
fn stopped_ten_times(dir: &Path, train: impl Fn(&Path, &[&str]) -> Command) -> Vec<PathBuf> {
    let mut moments = Moments(seed());
    let mut runs: Vec<PathBuf> = Vec::new();
    for k in 0..10 {
        let out = fresh(dir, &format!("run{k}"));
        let mut child = train(&out, &["--grace", "500ms"])
            .spawn()
            .expect("start sluice train");
        // Anywhere from before the trainers start to well into the run:
        // prefetched tasks with no progress are in flight at most kills.
        let after = moments.next_ms(100, 2_500);
        std::thread::sleep(Duration::from_millis(after));
        let finished = child.try_wait().expect("poll").is_some();
        let how = if k % 2 == 1 && !finished {
            common::cluster::signal(&child, libc::SIGTERM);
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while child.try_wait().expect("poll").is_none() && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            "SIGTERM"
        } else {
            "SIGKILL"
        };
        let _ = child.kill();
        let status = child.wait().expect("wait");
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            use std::io::Read;
            let _ = pipe.read_to_string(&mut stderr);
        }
        eprintln!(
            "{how} {k} after {after} ms: {} rows acknowledged{}",
            count_lines(&out, "acked-"),
            if finished { " (had ended)" } else { "" }
        );
        if how == "SIGTERM" {
            assert!(
                matches!(status.code(), Some(130) | Some(0)),
                "a SIGTERM past --grace exits 130: {status}: {stderr}"
            );
        }
        runs.push(out);
        if finished {
            assert!(status.success(), "run {k} ended on its own: {stderr}");
        }
    }
    runs
}

#[test]
fn a_train_killed_or_stopped_at_ten_random_moments_loses_no_row_and_fails_no_task() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let data = fixture(DATASET);
    let mut runs = stopped_ten_times(dir.path(), |out, extra| {
        skewed_train(&data, &state, out, extra)
    });
    // What a supervisor does next: run the same command until it exits 0.
    let out = fresh(dir.path(), "last");
    let last = skewed_train(&data, &state, &out, &[])
        .output()
        .expect("resume");
    let stderr = String::from_utf8_lossy(&last.stderr);
    assert!(
        last.status.success(),
        "the rerun after 10 kills exits 0: {stderr}"
    );
    assert!(
        !stderr.contains("failed task"),
        "no task fails for having been in flight at a kill: {stderr}"
    );
    runs.push(out);
    assert_each_kill_within_the_windows(&runs, "10 kills");
    // And a finished job, run again, says so and still exits 0.
    let again = skewed_train(&data, &state, &fresh(dir.path(), "again"), &[])
        .output()
        .expect("rerun");
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(stderr.contains("already finished"), "{stderr}");
}

/// The rows `--filter` keeps in the crash loop from the S3 emulator: row
/// groups in the middle of the file are pruned, the edges filtered by row.
const KEPT: &str = "id < 4050 OR id >= 12050";

fn kept(id: i64) -> bool {
    !(4050..12050).contains(&id)
}

#[test]
fn a_filtered_train_from_s3_with_a_cache_stopped_at_ten_random_moments_trains_each_kept_row() {
    let s3 = Cloud::start(Kind::S3);
    let bucket = s3.new_bucket("crash-filter-cache");
    s3.upload(&bucket, &fixture(DATASET), "out");
    let url = s3.url(&bucket, "out");
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let cache = dir.path().join("cache");
    let cache_arg = cache.to_str().expect("utf-8 path").to_owned();
    let summary = dir.path().join("summary.json");
    let train = |out: &Path, extra: &[&str]| {
        let mut cmd = skewed_train(&url, &state, out, extra);
        cmd.args(["--filter", KEPT, "--cache", &cache_arg]);
        for (k, v) in s3.env() {
            cmd.env(k, v);
        }
        cmd
    };
    let mut runs = stopped_ten_times(dir.path(), train);
    let out = fresh(dir.path(), "last");
    let last = train(&out, &["--summary-json", summary.to_str().expect("utf-8")])
        .output()
        .expect("resume");
    let stderr = String::from_utf8_lossy(&last.stderr);
    assert!(
        last.status.success(),
        "the rerun after 10 stops exits 0: {stderr}"
    );
    assert!(!stderr.contains("failed task"), "{stderr}");
    runs.push(out);

    let all = all_ids(&runs);
    let outside: Vec<i64> = all.keys().copied().filter(|&i| !kept(i)).take(5).collect();
    assert!(
        outside.is_empty(),
        "rows the filter drops reached a trainer: {outside:?}"
    );
    let missing: Vec<i64> = (0..ROWS as i64)
        .filter(|&i| kept(i) && !all.contains_key(&i))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "kept rows never reached a trainer: {missing:?}"
    );
    let bound = 4 * 2 * BATCH;
    for k in 0..runs.len() - 1 {
        let again = acked_then_served_again(&runs[k], &runs[k + 1..]);
        assert!(
            again <= bound,
            "stop {k}: {again} acknowledged rows served again (bound {bound})"
        );
    }
    // The file came from the store once and from the cache after: the last
    // run read what it trained from disk, if anything was left to it.
    let Ok(summary) = std::fs::read_to_string(&summary) else {
        assert!(stderr.contains("already finished"), "no summary: {stderr}");
        return;
    };
    let summary = parse_json(&summary, "summary");
    let trained = summary["rows"].as_u64().unwrap_or(0);
    let hit = summary["cache"]["hit_bytes"].as_u64().unwrap_or(0);
    let fetched = summary["cache"]["fetched_bytes"].as_u64().unwrap_or(0);
    eprintln!("last run: {trained} rows, cache hits {hit} bytes, fetched {fetched} bytes");
    if trained > 0 {
        assert!(
            hit > 0 && fetched == 0,
            "the last run read from the cache, not the store: {summary}"
        );
    }
}

/// A local-trainer `train --state` whose summary goes to `summary`.
fn recorded_train(data: &Path, state: &Path, out: &Path, summary: &Path) -> Command {
    let mut cmd = Command::new(SLUICE);
    cmd.arg("train")
        .arg(data)
        .args(["--quiet", "--batch-size", &BATCH.to_string()])
        .arg("--state")
        .arg(state)
        .arg("--summary-json")
        .arg(summary)
        .args(["--exec", &ack_log(out, 0.0)])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn a_job_with_failed_tasks_never_reruns_to_exit_0_and_retry_failed_reads_them_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (part, pristine, bad) = damaged_parquet_copy(DATASET, dir.path(), 5);
    let data = dir.path().join("data");
    let state = dir.path().join("state");
    let summary = dir.path().join("summary.json");
    let first = fresh(dir.path(), "first");
    let run = recorded_train(&data, &state, &first, &summary)
        .output()
        .expect("train");
    let stderr = String::from_utf8_lossy(&run.stderr);
    common::assert_damaged_run(run.status, &stderr, &part, &first, &bad);
    let name = part.file_name().and_then(|n| n.to_str()).expect("name");

    // The same command again: nothing to do, but the failure stands.
    let rerun = recorded_train(&data, &state, &fresh(dir.path(), "rerun"), &summary)
        .output()
        .expect("rerun");
    let stderr = String::from_utf8_lossy(&rerun.stderr);
    assert_eq!(
        rerun.status.code(),
        Some(2),
        "a rerun of a job with failed tasks exits 2 again: {stderr}"
    );
    assert!(stderr.contains(name), "it names the file: {stderr}");
    assert!(
        stderr.contains("--retry-failed"),
        "it says how on: {stderr}"
    );

    // The file is repaired; --retry-failed reads the failed task again,
    // from the rows it had committed.
    std::fs::write(&part, &pristine).expect("repair");
    let retry = fresh(dir.path(), "retry");
    let run = recorded_train(&data, &state, &retry, &summary)
        .arg("--retry-failed")
        .output()
        .expect("retry");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "--retry-failed: {stderr}");
    let summary = parse_json(
        &std::fs::read_to_string(&summary).expect("summary"),
        "summary",
    );
    assert_eq!(
        summary["tasks_failed"].as_array().map(Vec::len),
        Some(0),
        "{summary}"
    );
    common::assert_exactly_once(
        &all_ids(&[first, retry]),
        ROWS,
        "the first run and the retry",
    );
}

#[test]
fn a_run_killed_after_its_last_task_is_finished_by_the_same_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = fixture(DATASET);
    let state = dir.path().join("state");
    let summary = dir.path().join("summary.json");
    let out = fresh(dir.path(), "run");
    // The trainer lingers after the end of its stream: every task is done
    // and committed, the run has not ended.
    let trainer = format!("{} --linger 60", ack_log(&out, 0.0));
    let mut child = Command::new(SLUICE)
        .arg("train")
        .arg(&data)
        .args(["--quiet", "--batch-size", &BATCH.to_string()])
        .arg("--state")
        .arg(&state)
        .arg("--summary-json")
        .arg(&summary)
        .args(["--exec", &trainer])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("train");
    wait_until("the end of the stream", Duration::from_secs(120), || {
        count_lines(&out, "eof-") > 0
    });
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    assert!(!summary.exists(), "killed before it wrote its summary");
    assert_eq!(count_lines(&out, "acked-"), ROWS, "every row acknowledged");

    let again = fresh(dir.path(), "again");
    let run = recorded_train(&data, &state, &again, &summary)
        .output()
        .expect("rerun");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "the same command finishes the job: {stderr}"
    );
    assert!(
        !stderr.contains("remove"),
        "never: delete the state: {stderr}"
    );
    assert!(summary.exists(), "the summary is written: {stderr}");
    assert_eq!(count_lines(&again, "ids-"), 0, "nothing is trained twice");
    // From then on the job is finished.
    let done = recorded_train(&data, &state, &again, &summary)
        .output()
        .expect("rerun");
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{stderr}");
    assert!(stderr.contains("already finished"), "{stderr}");
}

#[test]
fn a_built_in_model_whose_run_stopped_after_its_last_task_gets_its_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = fixture(DATASET);
    let state = dir.path().join("state");
    let model = dir.path().join("model.json");
    let train = |output: &Path| {
        let mut cmd = Command::new(SLUICE);
        cmd.arg("train")
            .arg(&data)
            .args(["--quiet", "--batch-size", &BATCH.to_string()])
            .args([
                "--model",
                "logistic",
                "--label",
                "label",
                "--features",
                "x1",
            ])
            .args(["--checkpoint-every", "7"])
            .arg("--state")
            .arg(&state)
            .arg("--output")
            .arg(output)
            .env_remove("RUST_LOG");
        common::run(&mut cmd)
    };
    let whole = dir.path().join("whole.json");
    train(&whole).success();
    // What a kill between the last task and the end of the run leaves: the
    // queue is over, the run's end (its summary in the state) never written,
    // and no --output.
    std::fs::remove_file(state.join("finished.json")).expect("the run's end marker");
    let run = train(&model).success();
    assert!(!run.stderr.contains("remove"), "{}", run.stderr);
    let written = parse_json(
        &std::fs::read_to_string(&model).expect("--output is written"),
        "model",
    );
    let reference = parse_json(&std::fs::read_to_string(&whole).expect("model"), "model");
    // One device: the steps of the whole job, each batch once.
    let steps = |m: &serde_json::Value| m["state"]["adam_steps"].as_u64();
    assert_eq!(steps(&reference), Some(ROWS / BATCH), "{reference}");
    assert_eq!(
        steps(&written),
        steps(&reference),
        "the model holds every batch once: {written}"
    );
}

/// A tmpfs of `size` mounted at `dir` (the tests run as root, as CI does),
/// unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mkdir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount a tmpfs at {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_state_on_a_full_disk_stops_the_feed_at_once_and_a_moved_state_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mount = dir.path().join("small");
    let disk = Tmpfs::mount(&mount, "4m");
    let state = mount.join("state");
    let data = fixture(DATASET);
    let first = fresh(dir.path(), "first");
    let mut child = skewed_train(&data, &state, &first, &[])
        .spawn()
        .expect("train");
    wait_until("acknowledged rows", Duration::from_secs(120), || {
        count_lines(&first, "acked-") >= 2_000
    });
    // The disk fills up under the running job.
    let filler = vec![0u8; 8 << 20];
    let _ = std::fs::write(mount.join("filler"), &filler);
    let status = common::cluster::wait_exit(&mut child, "train");
    let stderr = common::cluster::stderr_of(&mut child);
    assert_eq!(
        status.code(),
        Some(1),
        "a full disk fails the run: {stderr}"
    );
    assert!(
        stderr.contains(&state.display().to_string()) && stderr.contains("No space left"),
        "the error names the state and the OS error: {stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    let tmp: Vec<_> = std::fs::read_dir(&state)
        .expect("list the state")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tmp"))
        .collect();
    assert!(tmp.is_empty(), "temporary files left behind: {tmp:?}");

    // The state moves to a disk with room, and the job goes on from there.
    let moved = dir.path().join("moved");
    common::copy_dir(&state, &moved);
    drop(disk);
    let second = fresh(dir.path(), "second");
    let run = skewed_train(&data, &moved, &second, &[])
        .output()
        .expect("resume");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "the moved state resumes: {stderr}");
    assert_none_missing(&all_ids(&[first.clone(), second.clone()]), "a full disk");
    // Served again: at most what was in flight (the exec window of 4
    // batches per device, and commits on their way), not what trainers
    // were handed after the journal failed.
    let again = acked_then_served_again(&first, std::slice::from_ref(&second));
    let bound = 6 * 2 * BATCH;
    assert!(
        again <= bound,
        "{again} acknowledged rows served again after the disk filled (bound {bound})"
    );
}

#[test]
fn a_worker_killed_at_ten_random_moments_loses_no_row_and_fails_no_task() {
    use common::cluster::{self, Job};
    let mut moments = Moments(seed());
    let job = Job::new(DATASET, 1);
    let mut master = job.start_master(fixture(DATASET));
    let trainer = |out: &Path| {
        format!(
            "{} --sleep 0.04 --slow-device 1 --slow-sleep 2",
            ack_log(out, 0.0)
        )
    };
    let worker = |out: &Path| {
        let mut cmd = job.worker_command(&trainer(out));
        cmd.args(["--devices", "2", "--batch-size", &BATCH.to_string(), "-q"]);
        cmd
    };
    let mut runs: Vec<PathBuf> = Vec::new();
    for k in 0..10 {
        let out = fresh(&job.ids, &format!("w{k}"));
        let mut child = worker(&out).spawn().expect("start worker");
        let after = moments.next_ms(300, 3_000);
        std::thread::sleep(Duration::from_millis(after));
        let finished = child.try_wait().expect("poll").is_some();
        let _ = child.kill();
        let _ = child.wait();
        eprintln!(
            "kill {k} after {after} ms: {} rows acknowledged{}",
            count_lines(&out, "acked-"),
            if finished { " (had ended)" } else { "" }
        );
        runs.push(out);
    }
    let out = fresh(&job.ids, "last");
    let mut last = worker(&out).spawn().expect("start worker");
    let status = cluster::wait_exit(&mut last, "the last worker");
    assert!(status.success(), "the last worker exits 0");
    runs.push(out);
    // The master ends with every task done: none failed for the kills.
    cluster::clean_finish(&mut master);
    assert_each_kill_within_the_windows(&runs, "10 worker kills");
}

#[test]
fn a_checkpointing_trainer_killed_at_ten_random_moments_holds_every_id_once_per_epoch() {
    checkpointing_trainer_killed_ten_times(&[]);
}

/// The same under `--shuffle global`: windows of whole tasks read again on
/// each resume, batches dealt to devices by number.
#[test]
fn a_globally_shuffled_checkpointing_trainer_killed_at_ten_random_moments_holds_every_id_once_per_epoch(
) {
    checkpointing_trainer_killed_ten_times(&["--shuffle", "global", "--shuffle-window", "4000"]);
}

/// `train --state` with a checkpointing trainer on two devices (and `flags`),
/// SIGKILLed at ten random moments and run again until it ends: the final
/// models hold every id once per epoch.
fn checkpointing_trainer_killed_ten_times(flags: &[&str]) {
    let mut moments = Moments(seed());
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let out = fresh(dir.path(), "model");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/checkpoint_ids.py");
    let train = |extra: &str| {
        let mut cmd = Command::new(SLUICE);
        cmd.arg("train")
            .arg(fixture(DATASET))
            .args(["--quiet", "--batch-size", "100", "--split-size", "64KiB"])
            .args(["--devices", "2", "--epochs", "2"])
            .args(flags)
            .arg("--state")
            .arg(&state)
            .args([
                "--exec",
                &format!(
                    "{} {} --out {} {extra}",
                    common::python(),
                    script.display(),
                    out.display()
                ),
            ])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    for k in 0..10 {
        let mut child = train("--every 4 --sleep 0.05").spawn().expect("train");
        let after = moments.next_ms(300, 2_500);
        std::thread::sleep(Duration::from_millis(after));
        if child.try_wait().expect("poll").is_some() {
            eprintln!("run {k} ended before its kill");
            break;
        }
        let _ = child.kill();
        let _ = child.wait();
        eprintln!(
            "kill {k} after {after} ms: {} rows applied so far",
            count_lines(&out, "ids-")
        );
        // Trainers of a killed run may still write final models as their
        // stream ends: only the models of the run that ends count.
        for entry in std::fs::read_dir(&out).expect("list").flatten() {
            if entry.file_name().to_string_lossy().starts_with("final-") {
                std::fs::remove_file(entry.path()).expect("remove");
            }
        }
    }
    let last = train("--every 4").output().expect("resume");
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    let model = common::final_model(&out);
    let wrong: Vec<(i64, u64)> = (0..ROWS as i64)
        .map(|id| (id, model.get(&id).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != 2)
        .take(8)
        .collect();
    assert!(
        wrong.is_empty(),
        "ids not in the final models exactly twice (id, times): {wrong:?}"
    );
    assert_eq!(model.len() as u64, ROWS, "ids from outside the dataset");
}

#[test]
fn a_master_down_for_twice_the_lease_timeout_costs_time_not_rows() {
    use common::cluster::{self, Job};
    // Lease timeout 2 s (the job's default here); the master stays down 4 s.
    let job = Job::new(DATASET, 1);
    let mut master = job.start_master(fixture(DATASET));
    let out = fresh(&job.ids, "worker");
    let mut worker = job
        .worker_command(&format!(
            "{} --sleep 0.01 --slow-device 1 --slow-sleep 0.5",
            ack_log(&out, 0.0)
        ))
        .args(["--devices", "2", "--batch-size", &BATCH.to_string(), "-q"])
        .spawn()
        .expect("start worker");
    wait_until("acknowledged rows", Duration::from_secs(60), || {
        count_lines(&out, "acked-") >= 3_000
    });
    master.kill().expect("SIGKILL the master");
    let _ = master.wait();
    let down_at = count_lines(&out, "ids-");
    std::thread::sleep(Duration::from_secs(4));
    // Suspended: nothing reached a trainer after the leases lapsed by the
    // worker's clock (2 s), beyond what the devices already held.
    let while_down = count_lines(&out, "ids-") - down_at;
    let mut master = job.start_master(fixture(DATASET));
    let status = cluster::wait_exit(&mut worker, "worker");
    assert!(
        status.success(),
        "the worker goes on once the master is back"
    );
    cluster::clean_finish(&mut master);
    eprintln!("{while_down} rows reached trainers while the master was down");
    common::assert_exactly_once(
        &common::recorded_ids(&out, "ids-"),
        ROWS,
        "a master down past the lease timeout",
    );
}

#[test]
fn a_master_restarted_with_retry_failed_serves_its_failed_tasks_again() {
    use common::cluster::{self, Job};
    let dir = tempfile::tempdir().expect("tempdir");
    let (part, pristine, bad) = damaged_parquet_copy(DATASET, dir.path(), 5);
    let data = dir.path().join("data");
    let mut job = Job::new(DATASET, 1);
    let worker = |job: &Job, out: &Path| {
        let mut cmd = job.worker_command(&ack_log(out, 0.0));
        cmd.args(["--batch-size", &BATCH.to_string(), "-q"]);
        cmd.spawn().expect("start worker")
    };
    let first = fresh(&job.ids, "first");
    let mut master = job.start_master(&data);
    let mut w = worker(&job, &first);
    let status = cluster::wait_exit(&mut master, "master");
    let _ = cluster::wait_exit(&mut w, "worker");
    let stderr = cluster::stderr_of(&mut master);
    let name = part.file_name().and_then(|n| n.to_str()).expect("name");
    assert_eq!(status.code(), Some(2), "a failed task: {stderr}");
    assert!(stderr.contains(name), "named: {stderr}");
    let ids = common::recorded_ids(&first, "ids-");
    assert!(
        bad.clone().all(|i| !ids.contains_key(&i)),
        "damaged rows arrived"
    );

    // Repaired; the master comes back with --retry-failed and a new worker.
    std::fs::write(&part, &pristine).expect("repair");
    job.master_args.push("--retry-failed".to_string());
    let second = fresh(&job.ids, "second");
    let mut master = job.start_master(&data);
    let mut w = worker(&job, &second);
    let status = cluster::wait_exit(&mut w, "worker");
    assert!(status.success(), "the worker of the retry");
    cluster::clean_finish(&mut master);
    let mut all = common::recorded_ids(&first, "ids-");
    for (id, n) in common::recorded_ids(&second, "ids-") {
        *all.entry(id).or_insert(0) += n;
    }
    common::assert_exactly_once(&all, ROWS, "a failed task retried by its master");
}

/// How a worker dies on the rows it is handed, each time a supervisor
/// starts it again.
#[derive(Debug, Clone, Copy)]
enum Death {
    /// Its trainer fails on its first batch, restart after restart, until
    /// the worker gives up and exits.
    TrainerFails,
    /// Killed (SIGKILL, as the OOM killer does) once its trainer holds rows.
    KilledOnTheRows,
    /// Frozen on the rows past the lease timeout (a read stuck in the
    /// kernel), then killed by the supervisor's liveness probe.
    HangsPastTheLease,
}

/// Most worker starts a supervisor makes in these tests. One task of
/// `--max-attempts 2` takes two starts whose worker dies holding it; the
/// rest is room for starts that die before they lease it, however slowly
/// a loaded machine runs them.
const MOST_STARTS: usize = 12;

/// Whether the job goes on: the master runs and says its job is not over
/// (or did not answer: it may be busy).
fn job_goes_on(job: &common::cluster::Job, master: &mut common::cluster::Master) -> bool {
    if let Ok(Some(_)) = master.try_wait() {
        return false;
    }
    job.try_status()
        .is_none_or(|status| status["queue"]["job_over"].as_bool() != Some(true))
}

/// A supervisor's loop (Kubernetes, systemd): a worker started again each
/// time it exits, for as long as the job goes on; each one dies on its
/// rows as `death` says. The master sees a dead worker's lease lapse when
/// the next worker asks it for work, so the last attempt is counted by
/// the start after it: a loop of a fixed number of starts leaves the
/// master waiting for a worker wherever a loaded machine made one start
/// count no attempt. Returns the master's exit status and log, and the
/// starts it took; panics past [`MOST_STARTS`].
fn supervised_deaths(
    job: &common::cluster::Job,
    master: &mut common::cluster::Master,
    death: Death,
) -> (std::process::ExitStatus, String, usize) {
    use common::cluster;
    let mut started = 0;
    while job_goes_on(job, master) {
        assert!(
            started < MOST_STARTS,
            "{death:?}: the master goes on after {MOST_STARTS} worker starts: {}",
            master.log()
        );
        let out = fresh(&job.ids, &format!("start-{started}"));
        started += 1;
        let exec = match death {
            Death::TrainerFails => format!(
                "{} -c 'import sys; sys.stdin.buffer.read(1); sys.exit(3)'",
                common::python()
            ),
            Death::KilledOnTheRows | Death::HangsPastTheLease => ack_log(&out, 600.0),
        };
        let mut worker = job.worker_command(&exec);
        worker.args(["--exec-restarts", "1", "--prefetch", "2", "-q"]);
        let mut child = worker.spawn().expect("start worker");
        // Until its trainer holds rows, or it ends (a trainer that keeps
        // failing ends it), or the job does (a worker that finds no master
        // would wait for one).
        let holds = || !matches!(death, Death::TrainerFails) && count_lines(&out, "ids-") > 0;
        let since = std::time::Instant::now();
        let mut ask_at = std::time::Instant::now() + Duration::from_secs(1);
        while !holds() && child.try_wait().expect("poll").is_none() {
            if matches!(master.try_wait(), Ok(Some(_))) {
                break;
            }
            if std::time::Instant::now() >= ask_at {
                if !job_goes_on(job, master) {
                    break;
                }
                ask_at = std::time::Instant::now() + Duration::from_secs(1);
            }
            if since.elapsed() > cluster::DEADLINE {
                let _ = child.kill();
                panic!(
                    "{death:?}: start {started} got no rows within {:?}: {}",
                    cluster::DEADLINE,
                    master.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if holds() && matches!(death, Death::HangsPastTheLease) {
            cluster::signal(&child, libc::SIGSTOP);
            std::thread::sleep(Duration::from_secs(3));
        }
        let _ = child.kill();
        cluster::wait_exit(&mut child, "worker");
    }
    let status = cluster::wait_exit(master, "master");
    (status, cluster::stderr_of(master), started)
}

/// Rows that come back without end end the job, whatever kills the
/// workers they are handed to: under a supervisor that starts workers
/// again and again, the master exits 2 with a line naming the file of the
/// task and why.
fn rows_that_kill_every_worker_fail_their_tasks(death: Death) {
    use common::cluster;
    // One file, one task, leased by every worker in turn.
    let data = tempfile::tempdir().expect("tempdir");
    let part = std::fs::read_dir(fixture("csv_plain"))
        .expect("csv_plain")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .min()
        .expect("a part file of csv_plain");
    let name = part.file_name().expect("file name").to_owned();
    std::fs::copy(&part, data.path().join(&name)).expect("copy the part file");
    std::fs::write(data.path().join("_SUCCESS"), "").expect("_SUCCESS");
    let mut job = cluster::Job::new("csv_plain", 1);
    job.master_args = ["--split-size", "1GiB", "--max-attempts", "2"]
        .map(String::from)
        .to_vec();
    let mut master = job.start_master(data.path());
    let (status, log, starts) = supervised_deaths(&job, &mut master, death);
    eprintln!("{death:?}: the master ended after {starts} worker starts");
    assert_eq!(
        status.code(),
        Some(2),
        "{death:?}, after {starts} worker starts: {log}"
    );
    let failed: Vec<&str> = log.lines().filter(|l| l.contains("failed task:")).collect();
    assert_eq!(failed.len(), 1, "{death:?}: {log}");
    let name = name.to_str().expect("utf-8 name");
    for line in failed {
        assert!(line.contains(name), "names the file: {line}");
        assert!(
            line.contains("lease lapsed 2 times with no row committed"),
            "names the cause: {line}"
        );
    }
}

#[test]
fn a_trainer_that_keeps_failing_under_a_supervisor_fails_its_tasks_and_the_master() {
    rows_that_kill_every_worker_fail_their_tasks(Death::TrainerFails);
}

#[test]
fn a_worker_killed_on_the_same_rows_under_a_supervisor_fails_its_tasks_and_the_master() {
    rows_that_kill_every_worker_fail_their_tasks(Death::KilledOnTheRows);
}

#[test]
fn a_worker_that_hangs_past_the_lease_on_the_same_rows_fails_its_tasks_and_the_master() {
    rows_that_kill_every_worker_fail_their_tasks(Death::HangsPastTheLease);
}
