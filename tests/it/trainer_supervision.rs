//! Exec trainers under supervision: a trainer that holds batches without acknowledging
//! them is killed after `--trainer-timeout` and restarted (or the job fails clearly once
//! the restarts are spent), no trainer (nor anything it started, even in a session of
//! its own) outlives a `SIGKILL`ed sluice, a trainer flooding its ack pipe fails at once,
//! and trainers never see the job token, not even through `/proc`.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::cluster::{clean_finish, signal, wait_exit, Job, TOKEN};
use crate::common::{
    assert_exactly_once, expected_dataset, fixture, python, recorded_ids, recorder, sluice_command,
    SLUICE,
};

/// Reads one batch, appends its pid to the file given, and sleeps without acknowledging.
const HANG: &str = r#"
import os, sys, time, pyarrow.ipc as ipc
stream = ipc.open_stream(sys.stdin.buffer)
next(iter(stream))
with open(sys.argv[1], "a") as f:
    f.write("%d\n" % os.getpid())
while True:
    time.sleep(3600)
"#;

/// `python HANG PIDS; true`: the shell waits, so the sleeping Python is sluice's
/// grandchild (what `sh -c` makes of most commands).
fn hanging_trainer(dir: &Path) -> (String, PathBuf) {
    let script = dir.join("hang.py");
    std::fs::write(&script, HANG).expect("write the trainer");
    let pids = dir.join("pids");
    let command = format!("{} {} {}; true", python(), script.display(), pids.display());
    (command, pids)
}

/// Runs `sluice ARGS` with stdout and stderr in files (a trainer that survives cannot
/// hold a pipe open then), killing it after the tests' deadline; returns its stderr.
fn run_bounded(args: &[&str], dir: &Path) -> (ExitStatus, String) {
    let log = dir.join("sluice.stderr");
    let file = std::fs::File::create(&log).expect("create the log");
    let mut child = sluice_command(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .expect("start sluice");
    let status = wait_exit(&mut child, "sluice train");
    (status, std::fs::read_to_string(&log).expect("read the log"))
}

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

/// The pids in `file`, one per complete line (none while it does not exist).
fn read_pids(file: &Path) -> Vec<i32> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let lines = text.split_inclusive('\n').filter(|l| l.ends_with('\n'));
    lines.map(|l| l.trim().parse().expect("pid")).collect()
}

/// The pids listed in the files of `dir` whose names start with `prefix`.
fn pids_in(dir: &Path, prefix: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir(dir).expect("list the trainers' files") {
        let path = entry.expect("directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(prefix) {
            pids.extend(read_pids(&path));
        }
    }
    pids
}

/// Checks that none of `pids` runs within 10 s; kills the survivors before failing.
#[track_caller]
fn assert_all_gone(pids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&pid| running(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<i32> = pids.iter().copied().filter(|&pid| running(pid)).collect();
    for &pid in &left {
        // SAFETY: kill has no memory effects; cleans up after a failed check.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "trainer processes survived: {left:?}");
}

fn rows(dataset: &str) -> u64 {
    expected_dataset(dataset)["rows"].as_u64().expect("rows")
}

#[test]
fn a_hung_trainer_is_killed_and_restarted_and_every_row_arrives_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    // Each device's first process hangs on its third batch; the restarted ones run.
    let exec = format!("{}; true", recorder(&out, "--hang-after 2"));
    let data = fixture("parquet_small_files");
    let (status, stderr) = run_bounded(
        &[
            "train",
            data.to_str().expect("utf8 path"),
            "--exec",
            &exec,
            "--devices",
            "2",
            "--batch-size",
            "50",
            // Long enough for a restarted Python to start and ack on a busy machine.
            "--trainer-timeout",
            "5s",
            "--quiet",
        ],
        dir.path(),
    );
    assert!(
        status.success(),
        "sluice train failed ({status}):\n{stderr}"
    );
    for device in ["device 0", "device 1"] {
        let warned = stderr.lines().any(|line| {
            line.contains(&format!("exec trainer on {device} sent no ack for 5s"))
                && line.contains("--trainer-timeout")
                && line.contains("unacknowledged batches")
        });
        assert!(warned, "no timeout warning for {device}:\n{stderr}");
    }
    assert!(
        !recorded_ids(&out, "unacked-").is_empty(),
        "the trainers were supposed to hang holding a batch"
    );
    assert_exactly_once(
        &recorded_ids(&out, "ids-"),
        rows("parquet_small_files"),
        "after hung trainers were restarted",
    );
    let hung = pids_in(&out, "hung-pid-");
    assert_eq!(hung.len(), 2, "one hung process per device");
    assert_all_gone(&hung);
}

#[test]
fn a_trainer_that_keeps_hanging_fails_the_job_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (exec, pids) = hanging_trainer(dir.path());
    let data = fixture("parquet_small_files");
    let (status, stderr) = run_bounded(
        &[
            "train",
            data.to_str().expect("utf8 path"),
            "--exec",
            &exec,
            "--batch-size",
            "50",
            "--trainer-timeout",
            "3s",
            "--exec-restarts",
            "1",
            "--quiet",
        ],
        dir.path(),
    );
    assert_eq!(status.code(), Some(1), "should fail ({status}):\n{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    for part in [
        "sluice: ",
        "device 0",
        "sent no ack for 3s (--trainer-timeout)",
        "was killed",
        "stopped 2 times (1 restarts allowed)",
    ] {
        assert!(last.contains(part), "error should say `{part}`:\n{stderr}");
    }
    // Each process hung on the batch it read (unless killed before it read one).
    let pids = read_pids(&pids);
    assert!(!pids.is_empty() && pids.len() <= 2, "{pids:?}:\n{stderr}");
    assert_all_gone(&pids);
}

#[test]
fn no_trainer_outlives_a_killed_sluice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (exec, pids) = hanging_trainer(dir.path());
    let data = fixture("parquet_small_files");
    let log = std::fs::File::create(dir.path().join("sluice.stderr")).expect("log");
    let mut sluice = sluice_command([
        "train",
        data.to_str().expect("utf8 path"),
        "--exec",
        &exec,
        "--devices",
        "2",
        "--batch-size",
        "50",
        "--quiet",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(log)
    .spawn()
    .expect("start sluice");
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_pids(&pids).len() < 2 {
        if Instant::now() > deadline || matches!(sluice.try_wait(), Ok(Some(_))) {
            let _ = sluice.kill();
            let _ = sluice.wait();
            assert_all_gone(&read_pids(&pids));
            let log = std::fs::read_to_string(dir.path().join("sluice.stderr"));
            panic!(
                "the trainers did not start hanging:\n{}",
                log.unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(&sluice, libc::SIGKILL);
    let status = wait_exit(&mut sluice, "sluice train");
    assert_eq!(status.code(), None, "sluice should have been killed");
    assert_all_gone(&read_pids(&pids));
}

#[test]
fn trainers_of_sluice_worker_never_see_the_job_token() {
    let job = Job::new("parquet_small_files", 1);
    let mut master = job.start_master(fixture("parquet_small_files"));
    let exec = format!(
        "env > {}/environ-$SLUICE_DEVICE-$$ && {}",
        job.ids.display(),
        recorder(&job.ids, "")
    );
    let mut worker = std::process::Command::new(SLUICE)
        .args(["worker", "--master", &job.url(), "--exec", &exec])
        .args(["--devices", "2", "--batch-size", "64", "-q"])
        .env("SLUICE_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start worker");
    assert!(wait_exit(&mut worker, "worker").success(), "worker failed");
    clean_finish(&mut master);
    assert_exactly_once(&recorded_ids(&job.ids, "ids-"), job.rows(), "sluice worker");
    let mut dumps = 0;
    for entry in std::fs::read_dir(&job.ids).expect("list") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.starts_with("environ-") {
            continue;
        }
        dumps += 1;
        let env = std::fs::read_to_string(&path).expect("read an environment dump");
        assert!(
            env.lines().any(|l| l == "SLUICE_ACK_FD=3"),
            "not the trainer's environment:\n{env}"
        );
        assert!(
            !env.contains("SLUICE_TOKEN") && !env.contains(TOKEN),
            "the trainer's environment holds the job token:\n{env}"
        );
    }
    assert_eq!(dumps, 2, "one environment dump per device");
}

#[test]
fn a_trainer_that_floods_its_ack_pipe_fails_at_once_with_a_short_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 200 MB without a newline on fd 3.
    let exec = "head -c 200000000 /dev/zero | tr '\\0' x >&3; cat > /dev/null";
    let data = fixture("parquet_small_files");
    let (status, stderr) = run_bounded(
        &["train", data.to_str().expect("utf8 path"), "--exec", exec],
        dir.path(),
    );
    assert!(!status.success(), "sluice train should fail:\n{stderr}");
    assert!(
        stderr.len() < 64 * 1024,
        "{} bytes on stderr, starting:\n{}",
        stderr.len(),
        &stderr[..stderr.len().min(2000)]
    );
    let quoted = format!("starting \"{}\"", "x".repeat(100));
    let named = stderr.lines().any(|line| {
        line.contains("on device 0 wrote a line longer than 4 KiB on its ack pipe")
            && line.contains(&quoted)
    });
    assert!(named, "no error quoting the line's start:\n{stderr}");
    assert!(
        !stderr.contains(&"x".repeat(101)),
        "more than 100 bytes quoted"
    );
}

#[test]
fn nothing_a_trainer_started_in_its_own_session_outlives_a_killed_sluice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    // `setsid` leaves the trainer's process group and session.
    let exec = format!(
        "setsid sleep 300 & echo $! > {}; cat > /dev/null",
        pids.display()
    );
    let data = fixture("parquet_small_files");
    let mut sluice = sluice_command(["train", data.to_str().expect("utf8 path"), "--exec", &exec])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice");
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_pids(&pids).is_empty() {
        if Instant::now() > deadline || matches!(sluice.try_wait(), Ok(Some(_))) {
            let _ = sluice.kill();
            let _ = sluice.wait();
            panic!("the trainer did not start its sleep");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&sluice, libc::SIGKILL);
    let status = wait_exit(&mut sluice, "sluice train");
    assert_eq!(status.code(), None, "sluice should have been killed");
    assert_all_gone(&read_pids(&pids));
}

/// Reports, for its parent (its watcher) and the parent's parent (sluice), the pid and what reading `/proc/PID/environ` and `/proc/PID/mem` gave;
/// then acknowledges its one batch as it arrives.
const SNOOP: &str = r#"watcher=$PPID
sluice=$(cut -d' ' -f4 /proc/$watcher/stat)
for pid in $watcher $sluice; do
  echo "pid $pid"
  tr '\0' '\n' < /proc/$pid/environ 2>&1
  head -c 4096 /proc/$pid/mem 2>&1 | tr '\0' '.'
done > REPORT 2>&1
head -c 1 > /dev/null
echo ack >&3
cat > /dev/null"#;

#[test]
fn a_trainer_cannot_read_the_token_from_sluice_s_memory_or_environment() {
    // Root reads any process's /proc files: sluice and its trainer run as nobody.
    let setpriv = std::process::Command::new("setpriv")
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    assert!(
        setpriv.is_ok_and(|s| s.success()),
        "this test needs `setpriv` (util-linux) to run sluice as an unprivileged user"
    );
    let dir = tempfile::Builder::new()
        .prefix("sluice-snoop-")
        .tempdir_in("/tmp")
        .expect("temp dir");
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
    };
    mode(dir.path(), 0o777);
    // One file of three rows: one batch.
    let data = dir.path().join("out");
    std::fs::create_dir(&data).expect("mkdir");
    std::fs::write(data.join("_SUCCESS"), "").expect("write _SUCCESS");
    let rows = "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n";
    std::fs::write(data.join("part-00000.json"), rows).expect("write the data");
    mode(&data, 0o755);
    let report = dir.path().join("report");
    let exec = SNOOP.replace("REPORT", &report.display().to_string());
    let mut sluice = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", SLUICE])
        .args(["train", data.to_str().expect("utf8 path"), "--exec", &exec])
        .args(["--batch-size", "100", "--quiet"])
        .env("SLUICE_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice as nobody");
    let status = wait_exit(&mut sluice, "sluice train");
    let stderr = common::cluster::Stderr::stderr_text(&mut sluice);
    assert!(
        status.success(),
        "sluice train failed ({status}):\n{stderr}"
    );
    let report = std::fs::read_to_string(&report).expect("the trainer's report");
    assert!(
        report.contains(&format!("pid {}\n", sluice.id())),
        "the trainer did not find sluice:\n{report}"
    );
    assert!(
        !report.contains(TOKEN) && !report.contains("SLUICE_TOKEN"),
        "a trainer read the job token from sluice:\n{report}"
    );
    // The watcher runs the sluice binary afresh, with an empty environment: it holds
    // nothing of sluice's. Sluice's own files are closed to its trainers.
    for file in ["environ", "mem"] {
        let path = format!("/proc/{}/{file}", sluice.id());
        let denied = report
            .lines()
            .any(|l| l.contains(&path) && l.contains("Permission denied"));
        assert!(denied, "{path} was not refused:\n{report}");
    }
}
