//! Exactly once into the model: trainers that keep checkpoints
//! (tests/trainers/checkpoint_ids.py, whose model is the multiset of ids it
//! applied, saved in each checkpoint) end with every id in their model
//! exactly once per epoch, across SIGKILLs of `sluice train --state` at
//! several points and across trainer processes that die.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{count_lines, fixture, parse_json, python, wait_until, SLUICE};

/// One Spark part file of 20,000 rows (ids 0..20000), cut into 9 tasks.
const DATASET: &str = "parquet_row_groups";
const ROWS: u64 = 20_000;

fn checkpointer(out: &Path, extra: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/checkpoint_ids.py");
    format!(
        "{} {} --out {} {extra}",
        python(),
        script.display(),
        out.display()
    )
}

fn train(state: &Path, out: &Path, devices: u32, epochs: u32, extra: &str) -> Command {
    let mut cmd = Command::new(SLUICE);
    cmd.arg("train")
        .arg(fixture(DATASET))
        .args(["--quiet", "--batch-size", "100", "--split-size", "64KiB"])
        .args(["--devices", &devices.to_string()])
        .args(["--epochs", &epochs.to_string()])
        .arg("--state")
        .arg(state)
        .args(["--exec", &checkpointer(out, extra)])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

#[track_caller]
fn assert_once_per_epoch(model: &HashMap<i64, u64>, epochs: u64) {
    let wrong: Vec<(i64, u64)> = (0..ROWS as i64)
        .map(|id| (id, model.get(&id).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != epochs)
        .take(8)
        .collect();
    assert!(
        wrong.is_empty(),
        "ids not in the model exactly {epochs} times (id, times): {wrong:?}"
    );
    assert_eq!(model.len() as u64, ROWS, "ids from outside the dataset");
}

fn remove_finals(out: &Path) {
    for entry in std::fs::read_dir(out).expect("list").flatten() {
        if entry.file_name().to_string_lossy().starts_with("final-") {
            std::fs::remove_file(entry.path()).expect("remove");
        }
    }
}

fn killed_and_resumed(devices: u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let out: PathBuf = dir.path().join("model");
    std::fs::create_dir(&out).expect("mkdir");
    let epochs = 2;
    for applied in [2_500u64, 9_000, 21_000, 30_000] {
        let mut child = train(&state, &out, devices, epochs, "--every 4 --sleep 0.02")
            .spawn()
            .expect("start sluice train");
        wait_until("applied rows", Duration::from_secs(120), || {
            count_lines(&out, "ids-") >= applied
        });
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }
    remove_finals(&out);
    let summary = dir.path().join("summary.json");
    let last = train(&state, &out, devices, epochs, "--every 4")
        .arg("--summary-json")
        .arg(&summary)
        .output()
        .expect("resume");
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    let summary = parse_json(
        &std::fs::read_to_string(&summary).expect("summary"),
        "summary",
    );
    let again = &summary["served_again"];
    assert_eq!(again["after_stop"], true, "{summary}");
    assert_eq!(
        again["rows"].as_u64(),
        Some(
            again["trainer_restarts"].as_u64().unwrap_or(0)
                + again["checkpoint_rewind"].as_u64().unwrap_or(0)
        ),
        "{summary}"
    );
    assert_once_per_epoch(&common::final_model(&out), u64::from(epochs));
    let resumed = std::fs::read_dir(&out)
        .expect("list")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("start-"))
        .filter(|e| {
            let text = std::fs::read_to_string(e.path()).expect("read start");
            !parse_json(&text, "start")["resume"].is_null()
        })
        .count();
    assert!(
        resumed > 0,
        "no trainer was started from a checkpoint (SLUICE_RESUME_CHECKPOINT)"
    );
    // The runs were cut short where rows had been applied but not yet
    // checkpointed: those rows were trained again, yet are in the model once.
    assert!(
        count_lines(&out, "ids-") > ROWS * u64::from(epochs),
        "no row was applied twice: the kills proved nothing"
    );
}

#[test]
fn a_model_killed_four_times_holds_every_row_once_per_epoch() {
    killed_and_resumed(1);
}

#[test]
fn two_devices_killed_four_times_hold_every_row_once_per_epoch() {
    killed_and_resumed(2);
}

#[test]
fn trainers_learn_which_checkpoints_are_complete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).expect("mkdir");
    let run = train(&dir.path().join("state"), &out, 2, 1, "--every 3")
        .output()
        .expect("train");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut told = 0;
    for entry in std::fs::read_dir(&out).expect("list").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("complete-") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).expect("read");
        let ids: Vec<u64> = text
            .lines()
            .map(|l| l.trim().parse().expect("a checkpoint ID"))
            .collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "{name}: each newer than the last: {ids:?}"
        );
        for id in &ids {
            // Complete: every device had saved it.
            for device in 0..2 {
                let file = out.join(format!("ckpt-{device}-{id}.json"));
                assert!(
                    file.exists(),
                    "{name} told {id}, but {} is missing",
                    file.display()
                );
            }
        }
        told += ids.len();
    }
    assert!(told > 0, "no trainer was told of a complete checkpoint");
}

#[test]
fn a_trainer_that_dies_is_rolled_back_to_its_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let out = dir.path().join("model");
    std::fs::create_dir(&out).expect("mkdir");
    // Device 0 dies after 10 batches (2 after its checkpoint 2), device 1
    // after saving its 3rd checkpoint but before reporting it.
    let summary = dir.path().join("summary.json");
    let run = train(
        &state,
        &out,
        2,
        1,
        "--every 4 --die-after 10 --die-in-checkpoint 3",
    )
    .arg("--summary-json")
    .arg(&summary)
    .output()
    .expect("train");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    // The summary counts the rows acknowledged twice: after the checkpoint
    // each restarted trainer loaded.
    let summary = parse_json(
        &std::fs::read_to_string(&summary).expect("summary"),
        "summary",
    );
    let twice = count_lines(&out, "ids-") - ROWS;
    assert!(twice > 0, "no row was acknowledged twice");
    assert_eq!(
        summary["served_again"]["trainer_restarts"].as_u64(),
        Some(twice),
        "{summary}"
    );
    assert_eq!(summary["served_again"]["rows"].as_u64(), Some(twice));
    assert!(
        Path::new(&out).join("died-0").exists() && Path::new(&out).join("died-ckpt-1").exists(),
        "both trainers died once"
    );
    assert_once_per_epoch(&common::final_model(&out), 1);
}

#[test]
fn a_job_without_checkpoint_lines_keeps_acknowledged_rows() {
    // The ids trainer of the other tests acknowledges without `checkpoints`:
    // a resumed run serves only what was not acknowledged.
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let out = dir.path().join("ids");
    std::fs::create_dir(&out).expect("mkdir");
    let recorder = common::ack_log(&out, 0.005);
    let run = |out: &Path| {
        let _ = out;
        Command::new(SLUICE)
            .arg("train")
            .arg(fixture(DATASET))
            .args(["--quiet", "--batch-size", "100", "--split-size", "64KiB"])
            .arg("--state")
            .arg(&state)
            .args(["--exec", &recorder])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("train")
    };
    let mut first = run(&out);
    wait_until("acknowledged rows", Duration::from_secs(60), || {
        count_lines(&out, "acked-") >= 5_000
    });
    first.kill().expect("SIGKILL");
    let _ = first.wait();
    let mut second = run(&out);
    let status = common::cluster::wait_exit(&mut second, "resumed train");
    assert!(
        status.success(),
        "{}",
        common::cluster::stderr_of(&mut second)
    );
    let served = count_lines(&out, "ids-");
    assert!(
        served < ROWS + 1_000,
        "a job without checkpoints served {served} rows for {ROWS}: acknowledged rows came back"
    );
}

/// A worker of `job` named `name` whose trainer keeps checkpoints in `out`.
fn checkpointing_worker(job: &common::cluster::Job, name: &str, out: &Path) -> std::process::Child {
    checkpointing_worker_with(job, name, out, "--every 4 --sleep 0.02")
}

/// [`checkpointing_worker`] with trainer flags `trainer`.
fn checkpointing_worker_with(
    job: &common::cluster::Job,
    name: &str,
    out: &Path,
    trainer: &str,
) -> std::process::Child {
    job.worker_command(&checkpointer(out, trainer))
        .args([
            "--name",
            name,
            "--batch-size",
            "100",
            "--devices",
            "1",
            "-q",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start worker")
}

#[test]
fn distributed_models_keep_every_row_once_across_a_killed_worker_and_master() {
    use common::cluster;
    let epochs = 2;
    let mut job = cluster::Job::new(DATASET, epochs);
    job.master_args = vec!["--split-size".to_string(), "64KiB".to_string()];
    // Longer than the master's restart below: a worker that cannot renew its
    // leases for a whole lease timeout drops them itself (it cannot tell a
    // master that is down from one that cut it off), and rows its trainers
    // then apply are served again elsewhere.
    // 20 s: a master restart on a loaded 2-core machine must fit well inside it.
    job.lease_timeout = "20s".to_string();
    let mut master = job.start_master(fixture(DATASET));
    let first = job.ids.join("w1");
    let second = job.ids.join("w2");
    std::fs::create_dir_all(&first).expect("mkdir");
    std::fs::create_dir_all(&second).expect("mkdir");
    let mut w1 = checkpointing_worker(&job, "w1", &first);
    let mut w2 = checkpointing_worker(&job, "w2", &second);
    wait_until("w1's applied rows", Duration::from_secs(120), || {
        count_lines(&first, "ids-") >= 3_000
    });
    w1.kill().expect("SIGKILL w1");
    let _ = w1.wait();
    // The master counts w1 gone after the lease timeout and serves again what
    // its trainer had not checkpointed.
    wait_until("the killed w1 to depart", Duration::from_secs(120), || {
        job.try_status()
            .is_some_and(|s| s["workers_departed"].as_u64() >= Some(1))
    });
    remove_finals(&first);
    let mut w1 = checkpointing_worker(&job, "w1", &first);
    wait_until("w2's applied rows", Duration::from_secs(120), || {
        count_lines(&second, "ids-") >= 12_000
    });
    master.kill().expect("SIGKILL master");
    let _ = master.wait();
    let mut master = job.start_master(fixture(DATASET));
    for (w, what) in [(&mut w1, "restarted w1"), (&mut w2, "w2")] {
        let status = cluster::wait_exit(w, what);
        assert!(status.success(), "{what} failed: {}", cluster::stderr_of(w));
    }
    cluster::clean_finish(&mut master);
    let started: Vec<_> = std::fs::read_dir(&first)
        .expect("list")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("start-"))
        .map(|e| std::fs::read_to_string(e.path()).expect("read"))
        .collect();
    assert!(
        started
            .iter()
            .any(|s| !parse_json(s, "start")["resume"].is_null()),
        "the restarted w1 did not resume from w1's checkpoint: {started:?}"
    );
    let mut model = common::final_model(&first);
    for (id, n) in common::final_model(&second) {
        *model.entry(id).or_insert(0) += n;
    }
    assert_once_per_epoch(&model, u64::from(epochs));
}

/// The union of the final models of the trainers that wrote into `dirs`.
fn union_of_models(dirs: &[&Path]) -> HashMap<i64, u64> {
    let mut model = HashMap::new();
    for dir in dirs {
        for (id, n) in common::final_model(dir) {
            *model.entry(id).or_insert(0) += n;
        }
    }
    model
}

/// Waits for both workers to exit 0; returns what they wrote to stderr.
fn both_exit(w1: &mut std::process::Child, w2: &mut std::process::Child) -> String {
    use common::cluster;
    let mut logs = String::new();
    for (w, what) in [(w1, "w1"), (w2, "w2")] {
        let status = cluster::wait_exit(w, what);
        let log = cluster::stderr_of(w);
        assert!(status.success(), "{what} failed: {log}");
        logs += &format!("--- {what}:\n{log}");
    }
    logs
}

/// The union of the trainers' final models in `dirs` holds every id once
/// per epoch; the workers' `logs` are shown when it does not.
fn assert_models(dirs: &[&Path], epochs: u32, logs: &str) {
    let model = union_of_models(dirs);
    let wrong = (0..ROWS as i64)
        .filter(|id| model.get(id).copied().unwrap_or(0) != u64::from(epochs))
        .count();
    if wrong > 0 {
        eprintln!("worker logs:\n{logs}");
    }
    assert_once_per_epoch(&model, u64::from(epochs));
}

/// Whether a trainer in `out` saw the end of its stream.
fn stream_ended(out: &Path) -> bool {
    std::fs::read_dir(out).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("ended-"))
    })
}

#[test]
fn a_worker_killed_after_the_last_task_has_its_rows_made_up() {
    use common::cluster;
    let epochs = 2;
    let mut job = cluster::Job::new(DATASET, epochs);
    job.master_args = vec!["--split-size".to_string(), "64KiB".to_string()];
    job.lease_timeout = "3s".to_string();
    let mut master = job.start_master(fixture(DATASET));
    let first = job.ids.join("w1");
    let second = job.ids.join("w2");
    std::fs::create_dir_all(&first).expect("mkdir");
    std::fs::create_dir_all(&second).expect("mkdir");
    // w1's trainer checkpoints only at the end of its stream, and is slow
    // to: every row it trained is in no checkpoint when it is killed.
    let mut w1 =
        checkpointing_worker_with(&job, "w1", &first, "--every 0 --sleep 0.01 --linger 600");
    let mut w2 = checkpointing_worker_with(&job, "w2", &second, "--every 4 --sleep 0.01");
    wait_until(
        "w1's trainer to reach the end of its stream",
        cluster::DEADLINE,
        || stream_ended(&first),
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        master.try_wait().expect("master").is_none(),
        "the master ended the job before w1's trainer saved what it trained: {}",
        master.log()
    );
    assert!(
        w2.try_wait().expect("w2").is_none(),
        "w2 left before the job was over"
    );
    w1.kill().expect("SIGKILL w1");
    let _ = w1.wait();
    // w2 waits for the job to be over: once w1 is counted gone, it trains
    // what w1's trainer held in no checkpoint.
    let status = cluster::wait_exit(&mut w2, "w2");
    let logs = cluster::stderr_of(&mut w2);
    assert!(status.success(), "w2 failed: {logs}");
    cluster::clean_finish(&mut master);
    // The killed w1 left no final model: w2's holds every row.
    assert_models(&[&second], epochs, &logs);
}

/// Paused past its lease timeout (SIGSTOP: its trainer runs on and may
/// acknowledge and checkpoint the rows it was handed), a worker's leases go
/// to the other worker, and so do the rows its trainer held in no checkpoint
/// the master recorded: it rolls its trainer back and joins again. Three
/// pauses at random moments, each model checked at the end.
#[test]
fn a_worker_paused_at_random_moments_rolls_its_trainer_back_and_no_row_is_trained_twice() {
    use common::{cluster, seed, Moments};
    let mut moments = Moments(seed());
    let epochs = 2;
    let mut job = cluster::Job::new(DATASET, epochs);
    job.master_args = vec!["--split-size".to_string(), "64KiB".to_string()];
    job.lease_timeout = "3s".to_string();
    let mut master = job.start_master(fixture(DATASET));
    let first = job.ids.join("w1");
    let second = job.ids.join("w2");
    std::fs::create_dir_all(&first).expect("mkdir");
    std::fs::create_dir_all(&second).expect("mkdir");
    let mut w1 = checkpointing_worker_with(&job, "w1", &first, "--every 3 --sleep 0.05");
    let mut w2 = checkpointing_worker_with(&job, "w2", &second, "--every 4 --sleep 0.05");
    let mut pauses = 0;
    let mut at = 0;
    while pauses < 3 {
        at += moments.next_ms(500, 3_000);
        let mut over = false;
        wait_until("w1's applied rows", cluster::DEADLINE, || {
            over = w1.try_wait().ok().flatten().is_some();
            over || count_lines(&first, "ids-") >= at
        });
        if over {
            break;
        }
        // Past the lease timeout: its leases go to w2, its trainer
        // acknowledges (and may checkpoint) what it was handed meanwhile.
        cluster::signal(&w1, libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(moments.next_ms(4_500, 6_000)));
        cluster::signal(&w1, libc::SIGCONT);
        pauses += 1;
    }
    eprintln!("w1 paused {pauses} times");
    let logs = both_exit(&mut w1, &mut w2);
    assert!(
        logs.contains("joining the job again"),
        "w1 did not roll back after its pause: {logs}"
    );
    cluster::clean_finish(&mut master);
    assert_models(&[&first, &second], epochs, &logs);
}

#[test]
fn a_master_down_past_twice_the_lease_timeout_costs_no_row_of_a_model() {
    use common::cluster;
    let epochs = 2;
    let mut job = cluster::Job::new(DATASET, epochs);
    job.master_args = vec!["--split-size".to_string(), "64KiB".to_string()];
    job.lease_timeout = "3s".to_string();
    let mut master = job.start_master(fixture(DATASET));
    let first = job.ids.join("w1");
    let second = job.ids.join("w2");
    std::fs::create_dir_all(&first).expect("mkdir");
    std::fs::create_dir_all(&second).expect("mkdir");
    let mut w1 = checkpointing_worker_with(&job, "w1", &first, "--every 4 --sleep 0.02");
    let mut w2 = checkpointing_worker_with(&job, "w2", &second, "--every 4 --sleep 0.02");
    wait_until("rows applied", cluster::DEADLINE, || {
        count_lines(&first, "ids-") + count_lines(&second, "ids-") >= 6_000
    });
    master.kill().expect("SIGKILL master");
    let _ = master.wait();
    std::thread::sleep(Duration::from_secs(7));
    let mut master = job.start_master(fixture(DATASET));
    let logs = both_exit(&mut w1, &mut w2);
    cluster::clean_finish(&mut master);
    assert_models(&[&first, &second], epochs, &logs);
}

/// The line of `stderr` that fails a job whose trainers never write a final
/// checkpoint, from its first word on (without a log line's time and level).
fn no_final_checkpoint_error(stderr: &str) -> String {
    const START: &str = "the trainers keep checkpoints but ended their streams twice";
    let line = stderr
        .lines()
        .find(|l| l.contains(START))
        .unwrap_or_else(|| {
            panic!("no line saying the streams ended twice without a checkpoint: {stderr}")
        });
    let at = line.find(START).unwrap_or_default();
    line[at..].to_string()
}

/// Trainer processes started (one `start-*` file each).
fn trainer_starts(out: &Path) -> usize {
    std::fs::read_dir(out)
        .expect("list")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("start-"))
        .count()
}

/// A trainer that declares checkpoints and ends its stream without one,
/// in `sluice train` and in a distributed job: sluice says so once, starts
/// the trainer again from its last checkpoint to serve the rows after it
/// once more, then fails with exit 2 and the same line, never a loop.
#[test]
fn a_trainer_that_never_writes_a_final_checkpoint_fails_train_and_worker_alike() {
    use common::cluster;
    // 200 batches of 100 rows: the last checkpoint falls 4 batches before the end.
    let trainer = "--every 7 --sleep 0.002 --no-final";
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("train");
    std::fs::create_dir(&out).expect("mkdir");
    let started = std::time::Instant::now();
    let run = train(&dir.path().join("state"), &out, 1, 1, trainer)
        .output()
        .expect("train");
    let train_log = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(2), "train: {train_log}");
    assert!(
        started.elapsed() < cluster::DEADLINE,
        "train took {:?}",
        started.elapsed()
    );
    let said = train_log.matches("are served once more").count();
    assert_eq!(said, 1, "train said it {said} times: {train_log}");
    assert_eq!(trainer_starts(&out), 2, "train: {train_log}");
    let train_error = no_final_checkpoint_error(&train_log);
    assert!(
        train_error.contains("must write `checkpoint ID` after the end of its stream"),
        "{train_error}"
    );

    let mut job = cluster::Job::new(DATASET, 1);
    job.master_args = vec!["--split-size".to_string(), "64KiB".to_string()];
    let mut master = job.start_master(fixture(DATASET));
    let worked = job.ids.join("w1");
    std::fs::create_dir_all(&worked).expect("mkdir");
    let started = std::time::Instant::now();
    let mut worker = checkpointing_worker_with(&job, "w1", &worked, trainer);
    let status = cluster::wait_exit(&mut worker, "worker");
    let worker_log = cluster::stderr_of(&mut worker);
    assert_eq!(status.code(), Some(2), "worker: {worker_log}");
    assert!(
        started.elapsed() < cluster::DEADLINE,
        "worker took {:?}",
        started.elapsed()
    );
    let said = worker_log.matches("are served once more").count();
    assert_eq!(said, 1, "the worker said it {said} times: {worker_log}");
    assert_eq!(trainer_starts(&worked), 2, "worker: {worker_log}");
    let worker_error = no_final_checkpoint_error(&worker_log);
    // The rows in no checkpoint differ with where the last checkpoint fell;
    // the rest of the line is the same.
    let words = |line: &str| -> String {
        line.split(['(', ')'])
            .step_by(2)
            .collect::<Vec<_>>()
            .join("()")
    };
    assert_eq!(words(&worker_error), words(&train_error));
    let _ = master.kill();
}

/// A supervisor's loop (Kubernetes, systemd, the Spark launcher): a worker
/// named `name` training with `trainer` flags started again each time it
/// exits, at most `starts` times, until the master exits. Returns the
/// master's exit status and log, and the starts it took.
fn supervised(
    job: &common::cluster::Job,
    master: &mut common::cluster::Master,
    trainer: &str,
    starts: usize,
) -> (std::process::ExitStatus, String, usize) {
    use common::cluster;
    let mut started = 0;
    while started < starts {
        if let Ok(Some(_)) = master.try_wait() {
            break;
        }
        let out = job.ids.join(format!("start-{started}"));
        std::fs::create_dir_all(&out).expect("mkdir");
        started += 1;
        let mut worker = checkpointing_worker_with(job, "w1", &out, trainer);
        // A worker ends with its trainer, or is stopped once the master has
        // ended the job (it would otherwise wait for a master that is gone).
        let limit = std::time::Instant::now() + std::time::Duration::from_secs(300);
        loop {
            if let Ok(Some(_)) = worker.try_wait() {
                break;
            }
            if let Ok(Some(_)) = master.try_wait() {
                let _ = worker.kill();
                let _ = worker.wait();
                break;
            }
            assert!(
                std::time::Instant::now() < limit,
                "worker start {started} did not end within 300 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    let status = cluster::wait_exit(master, "master");
    (status, cluster::stderr_of(master), started)
}

/// Rows that come back without end end the job: a trainer that never
/// writes a final checkpoint, under a supervisor that starts its worker
/// again each time it exits, fails the master with exit 2 and the line
/// `sluice train` prints, within 5 worker starts.
#[test]
fn a_master_whose_rows_come_back_without_end_fails_under_a_supervisor() {
    use common::cluster;
    let trainer = "--every 7 --sleep 0.002 --no-final";
    let mut job = cluster::Job::new(DATASET, 1);
    job.master_args = vec!["--split-size".to_string(), "64KiB".to_string()];
    let mut master = job.start_master(fixture(DATASET));
    let (status, log, starts) = supervised(&job, &mut master, trainer, 5);
    assert_eq!(
        status.code(),
        Some(2),
        "after {starts} worker starts: {log}"
    );
    let error = no_final_checkpoint_error(&log);
    assert!(
        error.contains("must write `checkpoint ID` after the end of its stream"),
        "{error}"
    );
}
