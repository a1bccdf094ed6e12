//! Tests of the exec trainer against small `sh` and Python children.

use super::*;
use crate::epoch::Epoch;
use arrow::array::{ArrayRef, Float64Array, Int64Array};
use arrow::record_batch::RecordBatch;
use std::path::Path;
use std::sync::mpsc;
use std::thread;

/// The Python with pyarrow that the test children run on: the test venv's,
/// `$SLUICE_PYTHON`, else `~/.cache/sluice/venv/bin/python` (as in the
/// integration tests). Panics naming the path when there is no such file:
/// these tests never pass by skipping.
fn python() -> String {
    let path = match std::env::var("SLUICE_PYTHON") {
        Ok(path) if !path.is_empty() => path,
        _ => {
            let home = std::env::var("HOME").unwrap_or_default();
            format!("{home}/.cache/sluice/venv/bin/python")
        }
    };
    assert!(
        Path::new(&path).is_file(),
        "no Python for the exec trainer tests at {path}: create the test venv \
         (tests/run.sh does) or point SLUICE_PYTHON at a Python with pyarrow"
    );
    path
}

/// Reads the stream and acks each batch, logging `<run> <id>` per batch; the first run
/// (no marker file yet) dies without acking its third batch.
const FLAKY_CHILD: &str = r#"
import os, sys, pyarrow.ipc as ipc
marker, log = sys.argv[1:3]
first = not os.path.exists(marker)
acks = os.fdopen(int(os.environ["SLUICE_ACK_FD"]), "w", buffering=1)
with open(log, "a") as out:
    for n, batch in enumerate(ipc.open_stream(sys.stdin.buffer)):
        out.write(("first" if first else "again") + " %d\n" % batch.column(0)[0].as_py())
        out.flush()
        if first and n == 2:
            open(marker, "w").close()
            sys.exit(3)
        acks.write("ack\n")
"#;

fn batch(seq: u64) -> Batch {
    let id = Arc::new(Int64Array::from(vec![seq as i64; 3])) as ArrayRef;
    let x = Arc::new(Float64Array::from(vec![0.5, 1.5, 2.5])) as ArrayRef;
    let data = RecordBatch::try_from_iter(vec![("id", id), ("x", x)]).expect("batch");
    Batch {
        seq,
        epoch: Epoch(0),
        data,
    }
}

/// Runs `test` on its own thread and fails if it takes longer than a minute.
fn within<T: Send + 'static>(test: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    thread::spawn(move || done.send(test()));
    result
        .recv_timeout(Duration::from_secs(60))
        .expect("exec trainer test hung")
}

/// Feeds batches `0..count`, then finishes; returns every acked seq in order.
fn run(trainer: &mut ExecTrainer, count: u64) -> Result<Vec<u64>, TrainerError> {
    let mut acked = Vec::new();
    for seq in 0..count {
        acked.extend(trainer.feed(batch(seq))?);
        assert!(trainer.in_flight() <= trainer.window);
    }
    acked.extend(trainer.finish()?);
    Ok(acked)
}

#[test]
fn python_child_acks_every_batch() {
    let python = python();
    let command = format!(
        "{python} -c \"import pyarrow.ipc as i, os, sys; f=os.fdopen(3,'w',1); \
         r=i.open_stream(sys.stdin.buffer); [f.write('ack\\n') for b in r]\""
    );
    let factory = ExecFactory::new(command);
    factory.validate(&batch(0).data.schema()).expect("validate");
    let (acked, report) = within(move || {
        let mut trainer = factory.start(0, 1).expect("start");
        let acked = run(&mut trainer, 10).expect("run");
        (acked, factory.report())
    });
    assert_eq!(acked, (0..10).collect::<Vec<_>>());
    assert_eq!(report.epochs[0].rows, 30);
}

#[test]
fn dead_child_is_restarted_with_exactly_the_unacked_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("child.py");
    std::fs::write(&script, FLAKY_CHILD).expect("write script");
    let (marker, log) = (dir.path().join("marker"), dir.path().join("log"));
    let python = python();
    let command = format!(
        "{python} {} {} {}",
        script.display(),
        marker.display(),
        log.display()
    );
    let (acked, restarts) = within(move || {
        let mut trainer = ExecFactory::new(command).start(0, 1).expect("start");
        let acked = run(&mut trainer, 8).expect("run");
        (acked, trainer.restarts())
    });
    assert_eq!(acked, (0..8).collect::<Vec<_>>());
    assert_eq!(restarts, 1);
    let log = std::fs::read_to_string(&log).expect("read log");
    let seen = |run: &str| -> Vec<u64> {
        let lines = log.lines().filter_map(|line| line.strip_prefix(run));
        lines.map(|id| id.trim().parse().expect("id")).collect()
    };
    assert_eq!(seen("first"), vec![0, 1, 2]);
    assert_eq!(seen("again"), (2..8).collect::<Vec<_>>());
}

#[test]
fn shell_child_acks_at_end_of_stream() {
    let command = "cat > /dev/null; echo ack >&3; echo >&3; echo ack >&3";
    let acked = within(move || {
        let mut trainer = ExecFactory::new(command).start(0, 1).expect("start");
        let fed = trainer.feed(batch(0)).expect("feed 0");
        let fed_more = trainer.feed(batch(1)).expect("feed 1");
        assert!(
            fed.is_empty() && fed_more.is_empty(),
            "acks only come at the end"
        );
        trainer.finish().expect("finish")
    });
    assert_eq!(acked, vec![0, 1]);
}

#[test]
fn missing_command_is_a_start_error() {
    let error = within(|| {
        let factory = ExecFactory::new("nosuch-sluice-trainer --flag");
        let mut trainer = factory.start(0, 1).expect("start");
        run(&mut trainer, 2).expect_err("must fail")
    });
    assert!(
        matches!(error, TrainerError::ExecNotRunnable { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("`nosuch-sluice-trainer --flag`"),
        "{message}"
    );
    assert!(message.contains("127"), "{message}");
}

#[test]
fn failing_child_exhausts_restarts() {
    let error = within(|| {
        let factory = ExecFactory::new("exit 1").with_max_restarts(2);
        let mut trainer = factory.start(0, 1).expect("start");
        run(&mut trainer, 3).expect_err("must fail")
    });
    assert!(
        matches!(
            error,
            TrainerError::RestartsExhausted {
                deaths: 3,
                restarts: 2,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "exec trainer `exit 1` on device 0 died 3 times (2 restarts allowed); last exit status: 1"
    );
}

#[test]
fn nonzero_exit_after_all_acks_fails() {
    let error = within(|| {
        let command = "cat > /dev/null; echo ack >&3; exit 4";
        let mut trainer = ExecFactory::new(command).start(0, 1).expect("start");
        trainer.feed(batch(0)).expect("feed");
        trainer.finish().expect_err("must fail")
    });
    assert!(
        matches!(error, TrainerError::ExecFailed { .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "exec trainer `cat > /dev/null; echo ack >&3; exit 4` on device 0 failed: exit status: 4"
    );
}

#[test]
fn other_lines_on_the_ack_pipe_are_errors() {
    let error = within(|| {
        let command = "echo hello >&3; cat > /dev/null";
        let mut trainer = ExecFactory::new(command).start(0, 1).expect("start");
        run(&mut trainer, 1).expect_err("must fail")
    });
    assert!(
        matches!(&error, TrainerError::BadAck { line, .. } if line == "hello"),
        "{error:?}"
    );
}

#[test]
fn environment_names_the_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().display().to_string();
    let command = format!(
        "echo \"$SLUICE_DEVICE $SLUICE_DEVICES $SLUICE_ACK_FD ${{CUDA_VISIBLE_DEVICES-unset}}\" \
         > {out}/env.$SLUICE_DEVICE; cat > /dev/null"
    );
    let with_ids = ExecFactory::new(command.clone()).with_device_ids(vec!["7".into(), "9".into()]);
    let without_ids = ExecFactory::new(command);
    within(move || {
        for device in 0..2 {
            let mut trainer = with_ids.start(device, 2).expect("start");
            assert!(trainer.finish().expect("finish").is_empty());
        }
        let mut trainer = without_ids.start(2, 3).expect("start");
        trainer.finish().expect("finish");
        assert!(matches!(
            with_ids.start(2, 3),
            Err(TrainerError::MissingDeviceId { device: 2, .. })
        ));
    });
    let read = |device: usize| {
        let path = dir.path().join(format!("env.{device}"));
        std::fs::read_to_string(path).expect("env file")
    };
    assert_eq!(read(0), "0 2 3 7\n");
    assert_eq!(read(1), "1 2 3 9\n");
    assert_eq!(read(2), "2 3 3 unset\n");
}

#[test]
fn several_devices_share_the_cpus_among_their_thread_pools() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().display().to_string();
    let command = format!(
        "echo \"${{OMP_NUM_THREADS-unset}}\" > {out}/omp.$SLUICE_DEVICES.${{TAG-none}}; cat > /dev/null"
    );
    let plain = ExecFactory::new(command.clone());
    let chosen = ExecFactory::new(command)
        .with_env("OMP_NUM_THREADS", "5")
        .with_env("TAG", "chosen");
    within(move || {
        for (factory, devices) in [(&plain, 1), (&plain, 2), (&chosen, 2)] {
            let mut trainer = factory.start(0, devices).expect("start");
            trainer.finish().expect("finish");
        }
    });
    let read = |name: &str| {
        let path = dir.path().join(name);
        std::fs::read_to_string(path).expect("env file")
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // What the test's own environment sets is handed on untouched.
    let inherited = std::env::var("OMP_NUM_THREADS").ok();
    let share = inherited
        .clone()
        .unwrap_or_else(|| (cpus / 2).max(1).to_string());
    assert_eq!(
        read("omp.1.none").trim(),
        inherited.as_deref().unwrap_or("unset")
    );
    assert_eq!(read("omp.2.none").trim(), share);
    assert_eq!(read("omp.2.chosen").trim(), "5");
}

#[test]
fn ack_pipe_is_the_only_extra_descriptor() {
    // fd 3 must be open for writing in the child, and the parent's copy closed: the
    // trainer sees end of file on the ack pipe once the child exits.
    let acked = within(|| {
        let command = "cat > /dev/null; [ -w /dev/fd/3 ] && echo ack >&3";
        let mut trainer = ExecFactory::new(command).start(0, 1).expect("start");
        trainer.feed(batch(5)).expect("feed");
        trainer.finish().expect("finish")
    });
    assert_eq!(acked, vec![5]);
}

/// Logs `<run> <id>` per batch read and acks it; the first run (no marker file yet)
/// writes its pid to the pid file on its second batch and sleeps without acking it.
const HANGING_CHILD: &str = r#"
import os, sys, time, pyarrow.ipc as ipc
marker, log, pid_file = sys.argv[1:4]
first = not os.path.exists(marker)
acks = os.fdopen(int(os.environ["SLUICE_ACK_FD"]), "w", buffering=1)
with open(log, "a") as out:
    for n, batch in enumerate(ipc.open_stream(sys.stdin.buffer)):
        out.write(("first" if first else "again") + " %d\n" % batch.column(0)[0].as_py())
        out.flush()
        if first and n == 1:
            open(marker, "w").close()
            with open(pid_file, "w") as f:
                f.write("%d\n" % os.getpid())
            while True:
                time.sleep(3600)
        acks.write("ack\n")
"#;

/// Whether process `pid` runs (a zombie, killed but not yet reaped, counts as gone).
fn running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    state != Some("Z")
}

/// Waits until `pid_file` holds a whole line: the shell creates the file
/// before `echo` has written to it.
fn wait_for_a_pid(pid_file: &Path) {
    while !std::fs::read_to_string(pid_file).is_ok_and(|t| t.ends_with('\n')) {
        thread::sleep(Duration::from_millis(10));
    }
}

/// The pids in a file (one per line), after checking that each is gone within 10 s.
#[track_caller]
fn assert_gone(pid_file: &Path) -> Vec<i32> {
    let text = std::fs::read_to_string(pid_file).expect("read pid file");
    let pids: Vec<i32> = text
        .lines()
        .map(|l| l.trim().parse().expect("pid"))
        .collect();
    assert!(!pids.is_empty(), "no pid in {}", pid_file.display());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&pid| running(pid)) && std::time::Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<i32> = pids.iter().copied().filter(|&pid| running(pid)).collect();
    for &pid in &left {
        // Cleans up after a failed test.
        crate::sys::post_fork::kill(pid, crate::sys::post_fork::SIGKILL);
    }
    assert!(left.is_empty(), "trainer processes survived: {left:?}");
    pids
}

#[test]
fn unresponsive_child_is_killed_and_restarted_with_its_unacked_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("child.py");
    std::fs::write(&script, HANGING_CHILD).expect("write script");
    let path = |name: &str| dir.path().join(name);
    // `; true` keeps the shell waiting: the hanging Python is its child, not the shell.
    let python = python();
    let command = format!(
        "{python} {} {} {} {}; true",
        script.display(),
        path("marker").display(),
        path("log").display(),
        path("pid").display()
    );
    // Long enough for the restarted Python to start and ack on a busy machine.
    let factory = ExecFactory::new(command).with_timeout(Some(Duration::from_secs(5)));
    let (acked, restarts) = within(move || {
        let mut trainer = factory.start(0, 1).expect("start");
        let acked = run(&mut trainer, 6).expect("run");
        (acked, trainer.restarts())
    });
    assert_eq!(acked, (0..6).collect::<Vec<_>>());
    assert_eq!(restarts, 1);
    let log = std::fs::read_to_string(path("log")).expect("read log");
    let seen = |run: &str| -> Vec<u64> {
        let lines = log.lines().filter_map(|line| line.strip_prefix(run));
        lines.map(|id| id.trim().parse().expect("id")).collect()
    };
    assert_eq!(seen("first"), vec![0, 1]);
    assert_eq!(seen("again"), (1..6).collect::<Vec<_>>());
    assert_gone(&path("pid"));
}

#[test]
fn child_that_keeps_hanging_exhausts_restarts_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    // Never reads or acks; its `sleep` (a grandchild of sluice) records its pid.
    let command = format!("sleep 1000 & echo $! >> {}; wait", pids.display());
    let factory = ExecFactory::new(command.clone())
        .with_max_restarts(1)
        .with_timeout(Some(Duration::from_secs(2)));
    let error = within(move || {
        let mut trainer = factory.start(0, 1).expect("start");
        run(&mut trainer, 1).expect_err("must fail")
    });
    assert!(
        matches!(
            error,
            TrainerError::Unresponsive {
                deaths: 2,
                restarts: 1,
                unacknowledged: 1,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!(
            "exec trainer `{command}` on device 0 sent no ack for 2s (--trainer-timeout) \
             with 1 unacknowledged batches and was killed; it stopped 2 times (1 restarts allowed)"
        )
    );
    assert_eq!(assert_gone(&pids).len(), 2, "one sleep per process");
}

#[test]
fn a_write_to_a_child_that_stopped_reading_times_out() {
    // Far more than a pipe holds: the write blocks until the child reads.
    let rows = 200_000;
    let id = Arc::new(Int64Array::from(vec![7; rows])) as ArrayRef;
    let big = RecordBatch::try_from_iter(vec![("id", id)]).expect("batch");
    let factory = ExecFactory::new("exec sleep 1000")
        .with_max_restarts(0)
        .with_timeout(Some(Duration::from_millis(500)));
    let error = within(move || {
        let mut trainer = factory.start(0, 1).expect("start");
        let batch = Batch {
            seq: 0,
            epoch: Epoch(0),
            data: big,
        };
        trainer.feed(batch).expect_err("must fail")
    });
    assert!(
        matches!(
            error,
            TrainerError::Unresponsive {
                deaths: 1,
                restarts: 0,
                unacknowledged: 1,
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn dropping_the_trainer_kills_what_the_child_started() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    let command = format!(
        "sleep 1000 & echo $! >> {}; cat > /dev/null",
        pids.display()
    );
    let pid_file = pids.clone();
    within(move || {
        let mut trainer = ExecFactory::new(command).start(0, 1).expect("start");
        trainer.feed(batch(0)).expect("feed");
        wait_for_a_pid(&pid_file);
        drop(trainer);
    });
    assert_gone(&pids);
}

#[test]
fn dropping_the_trainer_kills_what_the_child_started_in_a_session_of_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    let command = format!(
        "setsid sleep 1000 & echo $! >> {}; cat > /dev/null",
        pids.display()
    );
    let pid_file = pids.clone();
    within(move || {
        let mut trainer = ExecFactory::new(command).start(0, 1).expect("start");
        trainer.feed(batch(0)).expect("feed");
        wait_for_a_pid(&pid_file);
        drop(trainer);
    });
    assert_gone(&pids);
}

#[test]
fn what_a_finished_child_left_running_in_its_own_session_is_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    // The sleep's parent exits first: the watcher adopts it.
    let command = format!(
        "sh -c 'setsid sleep 1000 & echo $! >> {}'; cat > /dev/null; echo ack >&3",
        pids.display()
    );
    let acked = within(move || {
        let mut trainer = ExecFactory::new(command).start(0, 1).expect("start");
        run(&mut trainer, 1).expect("run")
    });
    assert_eq!(acked, vec![0]);
    assert_gone(&pids);
}

#[test]
fn an_overlong_ack_line_fails_at_once_quoting_only_its_start() {
    // 1 GB without a newline: the child blocks once the pipe is full and is killed.
    let command = "head -c 1000000000 /dev/zero | tr '\\0' x >&3; cat > /dev/null";
    let error = within(move || {
        let mut trainer = ExecFactory::new(command).start(0, 1).expect("start");
        run(&mut trainer, 1).expect_err("an overlong line")
    });
    let text = error.to_string();
    assert!(text.contains("a line longer than 4 KiB"), "{text}");
    assert!(text.contains(&format!("\"{}\"", "x".repeat(100))), "{text}");
    assert!(!text.contains(&"x".repeat(101)), "{text}");
}

/// Declares checkpoints, logs `<SLUICE_RESUME_CHECKPOINT or none>` at start,
/// acks each batch and writes `checkpoint <n>` after every second; the first
/// run (no marker yet) dies without acking its fourth batch.
const CHECKPOINTING_CHILD: &str = r#"
import os, sys, pyarrow.ipc as ipc
marker, log = sys.argv[1:3]
first = not os.path.exists(marker)
with open(log, "a") as out:
    out.write(os.environ.get("SLUICE_RESUME_CHECKPOINT", "none") + "\n")
acks = os.fdopen(int(os.environ["SLUICE_ACK_FD"]), "w", buffering=1)
acks.write("checkpoints\n")
for n, batch in enumerate(ipc.open_stream(sys.stdin.buffer)):
    if first and n == 3:
        open(marker, "w").close()
        sys.exit(3)
    acks.write("ack\n")
    if n % 2 == 1:
        acks.write("checkpoint c%d\n" % batch.column(0)[0].as_py())
"#;

#[test]
fn a_checkpointing_child_that_dies_restarts_from_its_last_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (marker, log) = (dir.path().join("marker"), dir.path().join("log"));
    let python = python();
    let command = format!(
        "{python} -c '{CHECKPOINTING_CHILD}' {} {}",
        marker.display(),
        log.display()
    );
    // Resumed at checkpoint `c0`: a child that dies before writing one of
    // its own starts from `c0` again; after `c1` from `c1`.
    let factory = ExecFactory::new(command).with_env(RESUME_CHECKPOINT_ENV, "c0");
    let (marks, acked) = within(move || {
        let mut trainer = factory.start(0, 1).expect("start");
        let acked = run(&mut trainer, 6).expect("run");
        (trainer.take_marks(), acked)
    });
    assert_eq!(acked, (0..6).collect::<Vec<_>>());
    let starts = std::fs::read_to_string(&log).expect("log");
    assert_eq!(starts.lines().collect::<Vec<_>>(), ["c0", "c1"]);
    let kinds: Vec<MarkKind> = marks.into_iter().map(|m| m.kind).collect();
    assert_eq!(kinds[0], MarkKind::Declared);
    assert!(kinds.contains(&MarkKind::Restarted), "{kinds:?}");
    assert!(
        kinds.contains(&MarkKind::Checkpoint("c1".to_string())),
        "{kinds:?}"
    );
}
