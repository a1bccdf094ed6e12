//! Exactly once under faults, measured in batches: what a trainer acknowledged
//! is committed at once, so a kill (of `train --state` or of a worker) or a
//! pause past the lease serves again only batches still in flight; a read that
//! fails half way through a task never repeats the rows already handed out.
//!
//! The trainer (tests/trainers/ack_log.py) logs, durably, every batch it was
//! handed and, separately, every batch whose `ack` went through.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::cluster::{self, Job};
use crate::common::{
    ack_log, acked_then_served_again, count_lines, damaged_parquet_copy, fixture, parse_json,
    wait_until, SLUICE,
};

/// Rows per batch in these tests.
const BATCH: u64 = 100;
/// Batches an exec trainer may hold unacknowledged (the exec window,
/// `DEFAULT_WINDOW` in src/trainer/exec/factory.rs). An `ack` the trainer
/// wrote that sluice had not read when it was killed belongs to one of them:
/// what a kill serves again is at most this many batches per device
/// (docs/concepts.md, "Exactly once"), however late a loaded machine reads
/// the acks.
const WINDOW: u64 = 4;
/// The fixture: one Spark part file of 20,000 rows in 73 row groups, ids 0..20000.
const DATASET: &str = "parquet_row_groups";

/// Ids in the files of `dir` whose names start with `prefix`, with counts.
fn ids_in(dir: &Path, prefix: &str) -> HashMap<i64, u32> {
    common::recorded_ids(dir, prefix)
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(&path).expect("mkdir");
    path
}

fn train_state(data: &Path, state: &Path, out: &Path, devices: u32, sleep: f64) -> Command {
    let mut cmd = Command::new(SLUICE);
    cmd.arg("train")
        .arg(data)
        .args(["--quiet", "--batch-size", &BATCH.to_string()])
        .args(["--devices", &devices.to_string()])
        .arg("--state")
        .arg(state)
        .args(["--exec", &ack_log(out, sleep)])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn a_killed_train_serves_again_at_most_a_window_of_acknowledged_batches_per_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let data = fixture(DATASET);
    let devices = 2;
    let rows: u64 = 20_000;
    let mut runs: Vec<PathBuf> = Vec::new();
    // Kill at three points, each after some more rows were acknowledged.
    for (k, acked_rows) in [1_500u64, 3_000, 4_500].into_iter().enumerate() {
        let out = fresh(dir.path(), &format!("run{k}"));
        let mut child = train_state(&data, &state, &out, devices, 0.03)
            .spawn()
            .expect("start sluice train");
        wait_until("acknowledged rows", Duration::from_secs(60), || {
            count_lines(&out, "acked-") >= acked_rows
        });
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        runs.push(out);
    }
    let out = fresh(dir.path(), "last");
    let last = train_state(&data, &state, &out, devices, 0.0)
        .output()
        .expect("resume");
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    runs.push(out);
    let bound = WINDOW * u64::from(devices) * BATCH;
    for k in 0..3 {
        let again = acked_then_served_again(&runs[k], &runs[k + 1..]);
        eprintln!("kill {k}: {again} acknowledged rows served again");
        assert!(
            again <= bound,
            "kill {k}: {again} acknowledged rows were served again (bound: the window of {WINDOW} batches per device = {bound})"
        );
    }
    let mut all: HashMap<i64, u32> = HashMap::new();
    for run in &runs {
        for (id, n) in ids_in(run, "ids-") {
            *all.entry(id).or_insert(0) += n;
        }
    }
    let missing: Vec<i64> = (0..rows as i64)
        .filter(|i| !all.contains_key(i))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "ids lost across the kills: {missing:?}");
}

/// Starts a worker of `job` whose trainers log into `out`.
fn worker(job: &Job, out: &Path, devices: u32, sleep: f64) -> Child {
    job.worker_command(&ack_log(out, sleep))
        .args(["--batch-size", &BATCH.to_string()])
        .args(["--devices", &devices.to_string(), "-q"])
        .spawn()
        .expect("start worker")
}

/// `rows_committed` of the master's queue (`None` once the master is gone).
fn committed(job: &Job) -> Option<u64> {
    job.try_status()?["queue"]["rows_committed"].as_u64()
}

#[test]
fn committed_rows_keep_up_with_acknowledged_rows() {
    let job = Job::new(DATASET, 1);
    let mut master = job.start_master(fixture(DATASET));
    let out = fresh(&job.ids, "w1");
    let devices = 2;
    let mut w = worker(&job, &out, devices, 0.1);
    let slack = 2 * u64::from(devices) * BATCH;
    let mut samples = 0;
    let mut worst = 0i64;
    while w.try_wait().expect("try_wait").is_none() {
        let acked = count_lines(&out, "acked-");
        let Some(committed) = committed(&job) else {
            break; // the master is gone: the job is over
        };
        if acked > 0 {
            samples += 1;
            worst = worst.max(acked as i64 - committed as i64);
            assert!(
                committed + slack >= acked,
                "sample {samples}: {acked} rows acknowledged but only {committed} committed"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = cluster::wait_exit(&mut w, "worker");
    assert!(status.success(), "worker failed");
    cluster::clean_finish(&mut master);
    assert!(samples >= 5, "too few samples ({samples}) to judge the lag");
    eprintln!("{samples} samples, worst lag {worst} rows");
    common::assert_exactly_once(&ids_in(&out, "ids-"), 20_000, "one worker");
}

#[test]
fn a_killed_worker_repeats_only_what_was_in_flight() {
    let job = Job::new(DATASET, 1);
    let mut master = job.start_master(fixture(DATASET));
    let devices = 2;
    let first = fresh(&job.ids, "w1");
    let second = fresh(&job.ids, "w2");
    let mut victim = worker(&job, &first, devices, 0.03);
    wait_until("acknowledged rows", Duration::from_secs(60), || {
        count_lines(&first, "acked-") >= 3_000
    });
    victim.kill().expect("SIGKILL");
    let _ = victim.wait();
    let mut survivor = worker(&job, &second, devices, 0.0);
    let status = cluster::wait_exit(&mut survivor, "worker");
    assert!(status.success(), "surviving worker failed");
    cluster::clean_finish(&mut master);
    let again = acked_then_served_again(&first, std::slice::from_ref(&second));
    eprintln!("killed worker: {again} acknowledged rows served again");
    let bound = WINDOW * u64::from(devices) * BATCH;
    assert!(
        again <= bound,
        "{again} rows acknowledged by the killed worker were served again (bound {bound})"
    );
    let mut all = ids_in(&first, "ids-");
    for (id, n) in ids_in(&second, "ids-") {
        *all.entry(id).or_insert(0) += n;
    }
    cluster::undelivered(&all, 20_000, 1);
}

/// (time, first id, rows) of every batch the trainers in `dir` were handed.
fn arrivals(dir: &Path) -> Vec<(f64, i64, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("list").flatten() {
        if !entry.file_name().to_string_lossy().starts_with("times-") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).expect("read times");
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(t), Some(first), Some(n)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            out.push((
                t.parse().expect("time"),
                first.parse().expect("id"),
                n.parse().expect("rows"),
            ));
        }
    }
    out
}

#[test]
fn a_worker_paused_past_its_leases_trains_none_of_their_rows() {
    let job = Job::new(DATASET, 1);
    let mut master = job.start_master(fixture(DATASET));
    let devices = 2;
    let paused_out = fresh(&job.ids, "paused");
    let other_out = fresh(&job.ids, "other");
    let mut paused = worker(&job, &paused_out, devices, 0.02);
    wait_until("acknowledged rows", Duration::from_secs(60), || {
        count_lines(&paused_out, "acked-") >= 1_000
    });
    cluster::signal(&paused, libc::SIGSTOP);
    // The lease timeout is 2 s: the paused worker departs, its leases lapse
    // and another worker takes them over.
    let mut other = worker(&job, &other_out, devices, 0.0);
    wait_until(
        "the paused worker to depart and the other to train",
        Duration::from_secs(90),
        || {
            count_lines(&other_out, "ids-") > 0
                && job
                    .try_status()
                    .is_some_and(|s| s["workers_departed"].as_u64() >= Some(1))
        },
    );
    let resumed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    cluster::signal(&paused, libc::SIGCONT);
    let status = cluster::wait_exit(&mut other, "other worker");
    assert!(status.success(), "other worker failed");
    let status = cluster::wait_exit(&mut paused, "paused worker");
    assert!(status.success(), "paused worker failed after SIGCONT");
    cluster::clean_finish(&mut master);
    let others: HashSet<i64> = ids_in(&other_out, "ids-").into_keys().collect();
    let late: Vec<(f64, i64, u64)> = arrivals(&paused_out)
        .into_iter()
        .filter(|(t, first, _)| *t > resumed_at && others.contains(first))
        .collect();
    assert!(
        late.is_empty(),
        "batches of lost leases reached a trainer of the paused worker after SIGCONT: {late:?}"
    );
    let mut all = ids_in(&paused_out, "ids-");
    for (id, n) in ids_in(&other_out, "ids-") {
        *all.entry(id).or_insert(0) += n;
    }
    cluster::undelivered(&all, 20_000, 1);
}

fn train_to_summary(data: &Path, out: &Path, summary: &Path, sleep: f64) -> Command {
    let mut cmd = Command::new(SLUICE);
    cmd.arg("train")
        .arg(data)
        .args([
            "--quiet",
            "--batch-size",
            &BATCH.to_string(),
            "--devices",
            "2",
        ])
        .args(["--exec", &ack_log(out, sleep)])
        .arg("--summary-json")
        .arg(summary)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

fn summary_rows(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).expect("summary");
    parse_json(&text, "summary")["rows"]
        .as_u64()
        .expect("rows in summary")
}

#[test]
fn a_row_group_that_cannot_be_read_repeats_no_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (part, _, bad) = damaged_parquet_copy(DATASET, dir.path(), 5);
    let out = fresh(dir.path(), "ids");
    let summary = dir.path().join("summary.json");
    let run = train_to_summary(&dir.path().join("data"), &out, &summary, 0.0)
        .output()
        .expect("train");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let ids = common::assert_damaged_run(run.status, &stderr, &part, &out, &bad);
    let received: u64 = ids.values().map(|&n| u64::from(n)).sum();
    assert_eq!(
        summary_rows(&summary),
        received,
        "the summary counts what the trainers received"
    );
}

#[test]
fn a_read_error_that_clears_resumes_after_the_last_row_handed_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (part, pristine, _) = damaged_parquet_copy(DATASET, dir.path(), 1);
    let out = fresh(dir.path(), "ids");
    let summary = dir.path().join("summary.json");
    let mut child = train_to_summary(&dir.path().join("data"), &out, &summary, 0.05)
        .spawn()
        .expect("train");
    // The reader fails at row group 1 long before the (slow) trainer has
    // acknowledged the rows before it; repair the file once the first batch
    // arrived, so the retry reads good data. The repair restores the file as
    // planned, modification time included (as `cp -p` from a backup would):
    // a file whose time changed is one changed since planning, never read.
    wait_until("the first batch", Duration::from_secs(60), || {
        count_lines(&out, "ids-") > 0
    });
    let planned = std::fs::metadata(&part)
        .and_then(|m| m.modified())
        .expect("mtime");
    std::fs::write(&part, &pristine).expect("repair");
    std::fs::File::options()
        .write(true)
        .open(&part)
        .and_then(|f| f.set_modified(planned))
        .expect("restore the mtime");
    let status = cluster::wait_exit(&mut child, "train");
    let stderr = cluster::stderr_of(&mut child);
    assert!(
        status.success(),
        "a read error that clears is retried: {stderr}"
    );
    assert!(
        stderr.contains("read failed"),
        "the read did fail before the repair: {stderr}"
    );
    common::assert_exactly_once(&ids_in(&out, "ids-"), 20_000, "transient read error");
    assert_eq!(summary_rows(&summary), 20_000);
}

#[test]
fn a_worker_stopped_by_sigterm_hands_its_tasks_back_at_once() {
    // A lease timeout far longer than the test: only a hand-back lets the
    // second worker go on in time.
    let mut job = Job::new(DATASET, 1);
    let mut master = long_lease_master(&mut job, DATASET, &[]);
    let first = fresh(&job.ids, "w1");
    let second = fresh(&job.ids, "w2");
    let mut stopped = job
        .worker_command(&ack_log(&first, 0.02))
        .args(["--grace", "20s"])
        .args(["--batch-size", &BATCH.to_string(), "--devices", "2", "-q"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start worker");
    wait_until("acknowledged rows", Duration::from_secs(60), || {
        count_lines(&first, "acked-") >= 2_000
    });
    cluster::signal(&stopped, libc::SIGTERM);
    let status = cluster::wait_exit(&mut stopped, "stopped worker");
    let stderr = cluster::stderr_of(&mut stopped);
    assert_eq!(
        status.code(),
        Some(130),
        "a SIGTERMed worker exits 130: {stderr}"
    );
    assert!(stderr.contains("handed back"), "{stderr}");
    let started = std::time::Instant::now();
    let mut other = worker(&job, &second, 2, 0.0);
    let status = cluster::wait_exit(&mut other, "second worker");
    assert!(status.success(), "second worker failed");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(60),
        "the handed-back task waited for its lease to lapse ({took:?})"
    );
    cluster::clean_finish(&mut master);
    // The stopped worker's trainers finished what they held: nothing twice.
    let mut all = ids_in(&first, "ids-");
    for (id, n) in ids_in(&second, "ids-") {
        *all.entry(id).or_insert(0) += n;
    }
    common::assert_exactly_once(&all, 20_000, "SIGTERM and hand-back");
}

/// A master whose leases last far longer than any test: only a hand-back or a
/// fair lease count lets another worker go on in time.
fn long_lease_master(job: &mut Job, dataset: &str, extra: &[&str]) -> cluster::Master {
    job.lease_timeout = "120s".to_string();
    job.master_args = extra.iter().map(|a| a.to_string()).collect();
    job.start_master(fixture(dataset))
}

#[test]
fn a_busy_worker_holds_few_leases_and_a_late_joiner_gets_work_at_once() {
    // 9 tasks of about 2,200 rows (row-group ranges of one Spark file).
    let mut job = Job::new(DATASET, 1);
    let mut master = long_lease_master(&mut job, DATASET, &["--split-size", "64KiB"]);
    let first = fresh(&job.ids, "w1");
    let second = fresh(&job.ids, "w2");
    // Slow trainers: the worker is bound by them, not by reading.
    let mut busy = worker(&job, &first, 1, 0.05);
    // Sampled every two batches over about a task's rows (2,200).
    let mut most = 0;
    let mut seen = 100;
    for _ in 0..10 {
        wait_until("acknowledged rows", Duration::from_secs(90), || {
            count_lines(&first, "acked-") >= seen + 2 * BATCH
        });
        seen = count_lines(&first, "acked-");
        most = most.max(job.status()["queue"]["leased"].as_u64().expect("leased"));
    }
    assert!(
        most <= 2,
        "a worker bound by its trainers held {most} leases at once (prefetch is 4)"
    );
    let joined = std::time::Instant::now();
    let mut late = worker(&job, &second, 1, 0.05);
    wait_until(
        "the late worker's first batch",
        Duration::from_secs(60),
        || count_lines(&second, "ids-") > 0,
    );
    let waited = joined.elapsed();
    assert!(
        waited < Duration::from_secs(20),
        "the late worker waited {waited:?} for work"
    );
    for (w, what) in [(&mut busy, "first worker"), (&mut late, "late worker")] {
        let status = cluster::wait_exit(w, what);
        assert!(status.success(), "{what} failed");
    }
    cluster::clean_finish(&mut master);
    let mut all = ids_in(&first, "ids-");
    for (id, n) in ids_in(&second, "ids-") {
        *all.entry(id).or_insert(0) += n;
    }
    common::assert_exactly_once(&all, 20_000, "two workers");
}

#[test]
fn train_stopped_by_sigint_commits_what_it_trained_and_resumes_with_nothing_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let data = fixture(DATASET);
    let first = fresh(dir.path(), "first");
    let mut child = train_state(&data, &state, &first, 2, 0.02)
        .spawn()
        .expect("start sluice train");
    wait_until("acknowledged rows", Duration::from_secs(60), || {
        count_lines(&first, "acked-") >= 3_000
    });
    cluster::signal(&child, libc::SIGINT);
    let status = cluster::wait_exit(&mut child, "interrupted train");
    let stderr = cluster::stderr_of(&mut child);
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("stopped by a signal") && stderr.contains("resume"),
        "{stderr}"
    );
    let second = fresh(dir.path(), "second");
    let out = train_state(&data, &state, &second, 2, 0.0)
        .output()
        .expect("resume");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut all = ids_in(&first, "ids-");
    for (id, n) in ids_in(&second, "ids-") {
        *all.entry(id).or_insert(0) += n;
    }
    // The trainers finished what they held and it was committed: nothing twice.
    common::assert_exactly_once(&all, 20_000, "SIGINT and resume");
}

#[test]
fn a_second_sigint_abandons_the_run_at_once_and_a_resume_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let data = fixture(DATASET);
    let log = dir.path().join("stderr");
    let started = dir.path().join("started");
    // A trainer that takes batches and never acknowledges one: after the
    // first SIGINT the run would wait out --grace for it; the second ends it.
    let mut child = Command::new(SLUICE)
        .arg("train")
        .arg(&data)
        .args(["--quiet", "--batch-size", &BATCH.to_string()])
        .arg("--state")
        .arg(&state)
        .args(["--grace", "10m"])
        .args([
            "--exec",
            &format!("touch {}; exec sleep 600", started.display()),
        ])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("stderr file"))
        .spawn()
        .expect("start sluice train");
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("the trainer started", Duration::from_secs(60), || {
        started.exists()
    });
    cluster::signal(&child, libc::SIGINT);
    wait_until("the first SIGINT handled", Duration::from_secs(30), || {
        text().contains("stop requested")
    });
    cluster::signal(&child, libc::SIGINT);
    // Well inside the 10 minutes of grace the first signal gave.
    wait_until(
        "the second SIGINT ends the run",
        Duration::from_secs(30),
        || matches!(child.try_wait(), Ok(Some(_))),
    );
    let status = cluster::wait_exit(&mut child, "abandoned train");
    assert_eq!(status.code(), Some(130), "{}", text());
    assert!(text().contains("SIGINT again: exiting now"), "{}", text());
    // Nothing was acknowledged: a resumed run trains every row once.
    let out = fresh(dir.path(), "resumed");
    let resumed = train_state(&data, &state, &out, 2, 0.0)
        .output()
        .expect("resume");
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    common::assert_exactly_once(&ids_in(&out, "ids-"), 20_000, "resumed after an abort");
}
