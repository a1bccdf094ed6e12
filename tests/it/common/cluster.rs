//! A distributed job run by the tests: a real `sluice master` and `sluice
//! worker` processes on 127.0.0.1, with recording exec trainers, and the
//! signals the fault tests send them.
//!
//! A master binds the port it is given, or any free one for `--listen
//! 127.0.0.1:0`, and says where it listens in its first line on stderr
//! (`sluice master listening on http://127.0.0.1:PORT ...`): the tests let
//! the first master of a job choose its port and read it from there, so no
//! two tests can race for one. Restarts bind the same port again, since the
//! workers know the master by it.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{expected_dataset, python, recorded_ids, SLUICE};

/// The job token of every test job.
pub const TOKEN: &str = "test-token-4f1d-83c9-b2e0";
/// Every scenario must end within this time.
pub const DEADLINE: Duration = Duration::from_secs(120);
/// How long a master may take to start listening (it lists the dataset first).
pub const START_LIMIT: Duration = Duration::from_secs(60);

/// What a master prints once it listens, before its URL.
const LISTENING: &str = "sluice master listening on ";

/// A running `sluice master`. Its stderr is read on a thread as it comes (a
/// chatty master never blocks on a full pipe) and kept for messages; the
/// process is killed when this is dropped. Derefs to its [`Child`].
pub struct Master {
    child: Child,
    log: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

impl Master {
    /// Spawns `cmd` (a `sluice master` command line) with its stderr piped
    /// to the reading thread.
    pub fn spawn(mut cmd: Command) -> Master {
        let what = super::describe(&cmd);
        let mut child = cmd
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{what}`: {e}"));
        let log = Arc::new(Mutex::new(String::new()));
        let reader = child.stderr.take().map(|stderr| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut lines = BufReader::new(stderr);
                let mut line = String::new();
                while matches!(lines.read_line(&mut line), Ok(n) if n > 0) {
                    log.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push_str(&line);
                    line.clear();
                }
            })
        });
        Master { child, log, reader }
    }

    /// What the master wrote to stderr so far; everything, once it has exited.
    pub fn log(&mut self) -> String {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            if let Some(reader) = self.reader.take() {
                let _ = reader.join();
            }
        }
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until the master says it listens and returns its port; panics
    /// with its stderr if it exits first or takes longer than [`START_LIMIT`].
    pub fn wait_listening(&mut self) -> u16 {
        let start = Instant::now();
        loop {
            let log = self.log.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(port) = listening_port(&log) {
                return port;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "master exited with {status} before listening: {}",
                    self.log()
                );
            }
            assert!(
                start.elapsed() < START_LIMIT,
                "master did not listen within {START_LIMIT:?}: {log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The port in a master's "listening on" line of `log` (after its time and
/// level where stderr is not a terminal).
fn listening_port(log: &str) -> Option<u16> {
    let line = log
        .lines()
        .find_map(|l| l.split_once(LISTENING).map(|(_, rest)| rest))?;
    let url = line.split_whitespace().next()?;
    let addr = url.rsplit("//").next()?;
    let port = addr.rsplit(':').next()?;
    Some(
        port.parse()
            .unwrap_or_else(|e| panic!("no port in `{line}`: {e}")),
    )
}

impl Deref for Master {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl DerefMut for Master {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A job: its master's address, state location and where trainers record ids.
pub struct Job {
    /// The master's port, once its first master chose it (0 before).
    port: AtomicU16,
    /// `--state` of the master: a directory, or an object store URL.
    pub state: String,
    /// Where the recording trainers write.
    pub ids: PathBuf,
    /// The fixture trained on.
    pub dataset: String,
    /// Passes over it.
    pub epochs: u32,
    /// Environment of master and workers (what points them at a store).
    pub env: Vec<(String, String)>,
    /// More flags of the master (TLS).
    pub master_args: Vec<String>,
    /// More flags of the workers.
    pub worker_args: Vec<String>,
    /// Whether the master serves HTTPS.
    pub https: bool,
    /// The master's `--lease-timeout`.
    pub lease_timeout: String,
    /// The master's `--linger`.
    pub linger: String,
    _dir: tempfile::TempDir,
}

impl Job {
    /// A job over fixture `dataset` with its state in a fresh directory.
    pub fn new(dataset: &str, epochs: u32) -> Job {
        let dir = tempfile::tempdir().expect("tempdir");
        let ids = dir.path().join("ids");
        std::fs::create_dir(&ids).expect("ids dir");
        Job {
            port: AtomicU16::new(0),
            state: dir.path().join("state").display().to_string(),
            ids,
            dataset: dataset.to_string(),
            epochs,
            env: Vec::new(),
            master_args: Vec::new(),
            worker_args: Vec::new(),
            https: false,
            lease_timeout: "2s".to_string(),
            linger: "3s".to_string(),
            _dir: dir,
        }
    }

    /// The state directory of a job with local state.
    pub fn state_dir(&self) -> &Path {
        Path::new(&self.state)
    }

    /// The master's port; panics before the job's first master listens.
    pub fn port(&self) -> u16 {
        match self.port.load(Ordering::SeqCst) {
            0 => panic!("the job's master has not started yet: it has no port"),
            port => port,
        }
    }

    /// The master's base URL.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port())
    }

    /// Starts the master on `data` and waits until it listens: the first on
    /// a port it chooses, later ones (restarts) on the same port.
    pub fn start_master(&self, data: impl AsRef<OsStr>) -> Master {
        let known = self.port.load(Ordering::SeqCst);
        let mut master = Master::spawn(self.master_command(data, known));
        let port = master.wait_listening();
        if known == 0 {
            self.port.store(port, Ordering::SeqCst);
        } else {
            assert_eq!(
                port, known,
                "a restarted master listens where the first did"
            );
        }
        master
    }

    /// The master's command line, listening on `port` (0: any free port).
    pub fn master_command(&self, data: impl AsRef<OsStr>, port: u16) -> Command {
        let mut cmd = Command::new(SLUICE);
        cmd.arg("master")
            .arg(data)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--state", &self.state])
            .args([
                "--epochs",
                &self.epochs.to_string(),
                "--lease-timeout",
                &self.lease_timeout,
                "--linger",
                &self.linger,
            ])
            .args(&self.master_args)
            .env("SLUICE_TOKEN", TOKEN)
            .env_remove("RUST_LOG")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    /// Starts a worker whose trainers record ids (`extra`: more trainer flags).
    pub fn start_worker(&self, extra: &str) -> Child {
        self.start_worker_with(extra, &[])
    }

    /// A `sluice worker` of this job training with `exec`: the token and the
    /// job's environment set, no other flag, output discarded.
    pub fn worker_command(&self, exec: &str) -> Command {
        let mut cmd = Command::new(SLUICE);
        cmd.args(["worker", "--master", &self.url(), "--exec", exec])
            .env("SLUICE_TOKEN", TOKEN)
            .env_remove("RUST_LOG")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    /// Starts a worker whose trainers record ids, with more worker flags.
    pub fn start_worker_with(&self, extra: &str, args: &[&str]) -> Child {
        self.start_worker_into(&self.ids, extra, args)
    }

    /// Starts a worker whose trainers record ids into `out` (a directory in
    /// [`Job::ids`], so that [`Job::recorded_ids`] counts them), with more
    /// trainer flags `extra` and worker flags `args`.
    pub fn start_worker_into(&self, out: &Path, extra: &str, args: &[&str]) -> Child {
        self.recording_worker(out, extra)
            .args(args)
            .spawn()
            .expect("start worker")
    }

    /// The command line of a worker whose trainers record ids into `out`,
    /// with more trainer flags `extra`; batches of 40 rows, prefetch 2.
    pub fn recording_worker(&self, out: &Path, extra: &str) -> Command {
        std::fs::create_dir_all(out)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", out.display()));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/record_ids.py");
        let cmd = format!(
            "{} {} --out {} --sleep 0.08 {extra}",
            python(),
            script.display(),
            out.display()
        );
        let mut worker = self.worker_command(&cmd);
        worker
            .args(["--batch-size", "40", "--prefetch", "2", "-q"])
            .args(&self.worker_args);
        worker
    }

    /// `sluice status --json` of the running master.
    pub fn status(&self) -> serde_json::Value {
        let out = self.status_command().output().expect("sluice status");
        assert!(
            out.status.success(),
            "sluice status: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status JSON")
    }

    /// `sluice status --json`, or `None` when the master does not answer
    /// (it may have ended with the job).
    pub fn try_status(&self) -> Option<serde_json::Value> {
        let out = self.status_command().output().ok()?;
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    fn status_command(&self) -> Command {
        let mut cmd = Command::new(SLUICE);
        cmd.args(["status", "--master", &self.url(), "--json"])
            .env("SLUICE_TOKEN", TOKEN)
            .env_remove("RUST_LOG");
        cmd
    }

    /// The master's `/metrics` text.
    pub fn metrics(&self) -> String {
        let out = Command::new("curl")
            .args(["-sf", "-m", "10"])
            .arg(format!("{}/metrics?token={TOKEN}", self.url()))
            .output()
            .expect("curl");
        assert!(out.status.success(), "GET /metrics failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// How often each id was recorded by the trainers of this job: in
    /// [`Job::ids`] and the directories in it.
    pub fn recorded_ids(&self) -> std::collections::HashMap<i64, u32> {
        let mut counts = recorded_ids(&self.ids, "ids-");
        let entries = std::fs::read_dir(&self.ids)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", self.ids.display()));
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                for (id, n) in recorded_ids(&entry.path(), "ids-") {
                    *counts.entry(id).or_insert(0) += n;
                }
            }
        }
        counts
    }

    /// Rows of the dataset, as Spark counted them.
    pub fn rows(&self) -> u64 {
        expected_dataset(&self.dataset)["rows"]
            .as_u64()
            .expect("rows")
    }
}

/// The value of the unlabelled metric `name` in a `/metrics` text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The journal records of a job with local state, as JSON.
pub fn journal_records(job: &Job) -> Vec<serde_json::Value> {
    state_records(job.state_dir())
}

/// The journal records of the state directory `state`, as JSON (none
/// before the journal exists).
pub fn state_records(state: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(state.join("journal.jsonl")).unwrap_or_default();
    // A record counts once its newline is written: the master may be
    // writing the last one.
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete
        .lines()
        .map(|line| serde_json::from_str(line).expect("journal line"))
        .collect()
}

/// The queue the journal of a job with local state rebuilds: what the
/// master has made durable.
pub fn journal_queue(job: &Job) -> sluice::queue::Queue {
    state_queue(job.state_dir())
}

/// The queue that the state directory `state` (of `sluice master` or
/// `sluice train --state`) holds: what its journal made durable.
pub fn state_queue(state: &Path) -> sluice::queue::Queue {
    let text = std::fs::read_to_string(state.join("job.json")).expect("job.json");
    let spec: serde_json::Value = serde_json::from_str(&text).expect("job.json is JSON");
    let splits = spec["spec"]["splits"].as_array().expect("splits").len();
    let config: sluice::queue::QueueConfig =
        serde_json::from_value(spec["queue"].clone()).expect("queue config");
    let mut queue = sluice::queue::Queue::new(splits, config).expect("queue");
    for record in state_records(state) {
        let command: sluice::queue::Command =
            serde_json::from_value(record).expect("a journal command");
        queue.apply(&command);
    }
    queue
}

/// Waits for `child` to exit, killing it after [`DEADLINE`].
pub fn wait_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    wait_exit_within(child, what, DEADLINE)
}

/// [`wait_exit`] with a limit of its own, for a child that may take longer on
/// a busy machine (a Spark application).
pub fn wait_exit_within(
    child: &mut Child,
    what: &str,
    limit: Duration,
) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends `sig` to a child.
pub fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a child we started and still own.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

/// A process whose stderr a test reads.
pub trait Stderr {
    /// What it wrote to stderr (everything, once it has exited).
    fn stderr_text(&mut self) -> String;
}

impl Stderr for Child {
    /// Reads the piped stderr to its end (the process must be over, or
    /// about to be).
    fn stderr_text(&mut self) -> String {
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

impl Stderr for Master {
    fn stderr_text(&mut self) -> String {
        self.log()
    }
}

/// What a process wrote to its stderr.
pub fn stderr_of(process: &mut impl Stderr) -> String {
    process.stderr_text()
}

/// Waits for the master to exit 0.
pub fn clean_finish(master: &mut Master) {
    let status = wait_exit(master, "master");
    assert!(status.success(), "master failed: {}", stderr_of(master));
}

/// Ids delivered fewer than `epochs` times (the first few), and ids outside the dataset.
pub fn undelivered(counts: &std::collections::HashMap<i64, u32>, rows: u64, epochs: u32) {
    let missing: Vec<i64> = (0..rows as i64)
        .filter(|i| counts.get(i).copied().unwrap_or(0) < epochs)
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "ids not delivered in every epoch: {missing:?}"
    );
    assert!(
        counts.keys().all(|&i| i >= 0 && (i as u64) < rows),
        "ids from outside the dataset"
    );
}
