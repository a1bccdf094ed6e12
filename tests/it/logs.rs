//! Logs that work without a terminal, and signals that always stop: what a
//! scheduler (cron, a pod, a task runner) sees of a run whose stderr is a
//! file, and how a worker whose master is unreachable ends.
//!
//! Each test runs the real binary with its stderr sent to a file or a pipe,
//! as a scheduler runs it.

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::cluster::{signal, wait_exit, Job};
use crate::common::{expected_dataset, fixture, recorder, sluice_command};
use serde_json::Value;

/// Rows of `dataset`, as Spark counted them.
fn expected_rows(dataset: &str) -> u64 {
    expected_dataset(dataset)["rows"]
        .as_u64()
        .expect("expected rows")
}

/// The time a log line starts with, parsed as RFC 3339; panics naming the
/// line when it has none.
fn stamp(line: &str) -> chrono::DateTime<chrono::FixedOffset> {
    let first = line.split_whitespace().next().unwrap_or_default();
    chrono::DateTime::parse_from_rfc3339(first)
        .unwrap_or_else(|e| panic!("the line does not start with an RFC 3339 time ({e}): {line}"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn a_redirected_log_has_timestamped_progress_lines_and_the_rate_excludes_the_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("out");
    common::copy_dir(&fixture("parquet_small_files"), &data);
    std::fs::remove_file(data.join("_SUCCESS")).expect("remove _SUCCESS");
    let rows = expected_rows("parquet_small_files");
    let log = dir.path().join("train.log");
    let summary = dir.path().join("summary.json");
    let ids = dir.path().join("ids");
    // 8 batches per epoch, a quarter of a second each: 4 s of training.
    let batch = rows.div_ceil(8).to_string();
    let started = Instant::now();
    let mut train = sluice_command([
        "train",
        data.to_str().expect("utf8"),
        "--wait-success=60s",
        "--exec",
        &recorder(&ids, "--sleep 0.25"),
        "--batch-size",
        &batch,
        "--epochs",
        "2",
        "--log-every",
        "1s",
        "--summary-json",
        summary.to_str().expect("utf8"),
    ])
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("log file"))
    .spawn()
    .expect("start sluice");
    common::wait_until("the run to say it waits", Duration::from_secs(30), || {
        read(&log).contains("waiting for _SUCCESS")
    });
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(data.join("_SUCCESS"), b"").expect("write _SUCCESS");
    let status = wait_exit(&mut train, "sluice train");
    let wall = started.elapsed().as_secs_f64();
    let text = read(&log);
    assert!(status.success(), "{text}");

    // Every line is timestamped, in order.
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let stamps: Vec<_> = lines.iter().map(|l| stamp(l)).collect();
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{text}");
    let waiting = lines
        .iter()
        .find(|l| l.contains("waiting for _SUCCESS in"))
        .unwrap_or_else(|| panic!("the wait says what it waits for: {text}"));
    assert!(
        waiting.contains("no _SUCCESS") || waiting.contains("output present"),
        "the wait says what is there instead: {waiting}"
    );

    // Progress at least every --log-every while training, and at the end
    // of the first epoch.
    let progress: Vec<_> = lines
        .iter()
        .zip(&stamps)
        .filter(|(l, _)| l.contains("progress: epoch") || l.contains(" done: "))
        .collect();
    assert!(progress.len() >= 3, "progress lines every second: {text}");
    for (line, _) in &progress {
        assert!(
            line.contains("rows/s") && line.contains("tasks done") && line.contains("ETA"),
            "{line}"
        );
    }
    assert!(
        lines.iter().any(|l| l.contains("epoch 1/2 done:")),
        "a line at the end of the first epoch: {text}"
    );
    for pair in progress.windows(2) {
        let gap = (*pair[1].1 - *pair[0].1).num_milliseconds();
        assert!(
            gap <= 2500,
            "{gap} ms between progress lines with --log-every 1s: {text}"
        );
    }

    // The summary counts training time only, and says how long it waited.
    let s: Value = serde_json::from_str(&read(&summary)).expect("summary JSON");
    let waited = s["waited_seconds"].as_f64().expect("waited_seconds");
    let seconds = s["seconds"].as_f64().expect("seconds");
    let rate = s["rows_per_second"].as_f64().expect("rows_per_second");
    assert_eq!(s["rows"].as_u64(), Some(2 * rows), "{s}");
    assert!(waited >= 2.0, "waited {waited}s: {s}");
    assert!(
        seconds + waited <= wall + 0.5,
        "{seconds} + {waited} > {wall}"
    );
    let expected_rate = (2 * rows) as f64 / seconds;
    assert!(
        (rate - expected_rate).abs() <= expected_rate * 0.01,
        "rows/s {rate} is not rows over training seconds {expected_rate}: {s}"
    );
    let last = lines.last().expect("a summary line");
    assert!(
        last.contains(&format!("trained {} rows", 2 * rows))
            && last.contains(&format!("({rate:.0} rows/s) after waiting")),
        "{last}"
    );
}

#[test]
fn json_log_lines_parse_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows = expected_rows("parquet_small_files");
    let ids = dir.path().join("ids");
    let batch = rows.div_ceil(6).to_string();
    let out = common::run(&mut sluice_command([
        "--log-format",
        "json",
        "train",
        fixture("parquet_small_files").to_str().expect("utf8"),
        "--exec",
        &recorder(&ids, "--sleep 0.4"),
        "--batch-size",
        &batch,
        "--log-every",
        "1s",
    ]));
    assert!(out.status.success(), "{out}");
    let objects: Vec<Value> = out
        .stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for o in &objects {
        stamp(o["timestamp"].as_str().expect("timestamp"));
        assert!(o["level"].is_string() && o["message"].is_string(), "{o}");
        assert!(o["fields"].is_object(), "{o}");
    }
    let progress: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            o["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("progress:"))
        })
        .collect();
    assert!(!progress.is_empty(), "{out}");
    for p in &progress {
        assert!(
            p["fields"]["rows"].is_u64() && p["fields"]["tasks"].is_u64(),
            "{p}"
        );
    }
    let summary = objects.last().expect("a summary");
    assert_eq!(summary["fields"]["rows"].as_u64(), Some(rows), "{summary}");
    assert_eq!(summary["level"], "INFO", "{summary}");

    // The error that ends a command is an object too.
    let missing = dir.path().join("no-such-output");
    let out = common::run(&mut sluice_command([
        "train",
        missing.to_str().expect("utf8"),
        "--log-format",
        "json",
    ]));
    assert_eq!(out.status.code(), Some(1), "{out}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    let error: Value = serde_json::from_str(lines[0]).expect("JSON");
    assert_eq!(error["level"], "ERROR", "{error}");
    assert_eq!(error["fields"]["exit_code"], 1, "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("no-such-output")),
        "{error}"
    );
}

/// A port nothing listens on.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[test]
fn a_worker_whose_master_never_answered_stops_on_sigterm_within_its_grace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("worker.log");
    let master = format!("http://127.0.0.1:{}", free_port());
    let mut worker = sluice_command([
        "worker",
        "--master",
        &master,
        "--grace",
        "2s",
        "--stopped-exit-code",
        "143",
        "--exec",
        "true",
    ])
    .env("SLUICE_TOKEN", common::cluster::TOKEN)
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("log"))
    .spawn()
    .expect("start worker");
    common::wait_until(
        "the worker to wait for its master",
        Duration::from_secs(20),
        || read(&log).contains("waiting for master"),
    );
    let sent = Instant::now();
    signal(&worker, libc::SIGTERM);
    let status = wait_exit(&mut worker, "worker");
    let took = sent.elapsed();
    let text = read(&log);
    assert!(
        took < Duration::from_secs(4),
        "stopped after {took:?}: {text}"
    );
    assert_eq!(status.code(), Some(143), "{text}");
    assert!(text.contains("worker stopped"), "{text}");
    assert!(
        text.lines()
            .filter(|l| l.contains("waiting for master"))
            .count()
            == 1,
        "one line for the wait, not one per retry: {text}"
    );
}

#[test]
fn a_worker_whose_master_went_away_stops_on_sigterm_within_its_grace() {
    let job = Job::new("parquet_small_files", 1);
    let mut master = job.start_master(fixture("parquet_small_files"));
    let out = job.ids.join("w");
    let mut worker = job
        .recording_worker(&out, "--sleep 0.5")
        .args(["--grace", "2s"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start worker");
    common::wait_until("the worker to train", Duration::from_secs(60), || {
        common::count_lines(&out, "ids-") > 0
    });
    signal(&master, libc::SIGKILL);
    let _ = master.wait();
    std::thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    signal(&worker, libc::SIGTERM);
    let status = wait_exit(&mut worker, "worker");
    let took = sent.elapsed();
    let text = common::cluster::stderr_of(&mut worker);
    assert!(
        took < Duration::from_secs(5),
        "stopped after {took:?}: {text}"
    );
    assert_eq!(status.code(), Some(130), "{text}");
    assert!(
        text.contains("did not answer within the --grace period"),
        "{text}"
    );
}

#[test]
fn a_master_logs_its_progress_with_workers_and_leases() {
    let mut job = Job::new("parquet_small_files", 2);
    job.master_args = vec!["--log-every".to_string(), "1s".to_string()];
    job.linger = "1s".to_string();
    let mut master = job.start_master(fixture("parquet_small_files"));
    // 50 batches of 40 rows per epoch, 0.05 s each: about 5 s of training.
    let mut worker = job.start_worker("--sleep 0.05");
    let status = wait_exit(&mut worker, "worker");
    assert!(status.success(), "worker failed");
    common::cluster::clean_finish(&mut master);
    let log = master.log();
    for line in log.lines() {
        stamp(line);
    }
    let progress: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("progress: epoch"))
        .collect();
    assert!(progress.len() >= 2, "progress every second: {log}");
    assert!(
        progress
            .iter()
            .any(|l| l.contains(", 1 worker, ") && l.contains(" lease") && l.contains("rows/s")),
        "{log}"
    );
    assert!(log.contains("epoch 1/2 done:"), "{log}");
    assert!(log.contains("job over: 80 tasks done, 0 failed"), "{log}");
}
