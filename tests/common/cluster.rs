//! A distributed job run by the tests: a real `sluice master` and `sluice
//! worker` processes on 127.0.0.1, with recording exec trainers, and the
//! signals the fault tests send them.

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{expected_dataset, python, SLUICE};

/// The job token of every test job.
pub const TOKEN: &str = "test-token-4f1d-83c9-b2e0";
/// Every scenario must end within this time.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// A port nothing listens on yet.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A job: its master's address, state location and where trainers record ids.
pub struct Job {
    /// The master's port.
    pub port: u16,
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
            port: free_port(),
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

    /// The master's base URL.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Starts the master on `data` and waits until it listens.
    pub fn start_master(&self, data: impl AsRef<OsStr>) -> Child {
        let mut child = self
            .master_command(data, self.port)
            .spawn()
            .expect("start master");
        wait_for_master(self.port, Some(&mut child));
        child
    }

    /// The master's command line, listening on `port`.
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
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/record_ids.py");
        let cmd = format!(
            "{} {} --out {} --sleep 0.08 {extra}",
            python(),
            script.display(),
            self.ids.display()
        );
        self.worker_command(&cmd)
            .args(["--batch-size", "40", "--prefetch", "2", "-q"])
            .args(&self.worker_args)
            .args(args)
            .spawn()
            .expect("start worker")
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
    let text = std::fs::read_to_string(job.state_dir().join("journal.jsonl")).expect("journal");
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
pub fn journal_queue(job: &Job) -> sluice::task::Queue {
    let text = std::fs::read_to_string(job.state_dir().join("job.json")).expect("job.json");
    let spec: serde_json::Value = serde_json::from_str(&text).expect("job.json is JSON");
    let splits = spec["spec"]["splits"].as_array().expect("splits").len();
    let config: sluice::task::QueueConfig =
        serde_json::from_value(spec["queue"].clone()).expect("queue config");
    let mut queue = sluice::task::Queue::new(splits, config).expect("queue");
    for record in journal_records(job) {
        let command: sluice::task::Command =
            serde_json::from_value(record).expect("a journal command");
        queue.apply(&command);
    }
    queue
}

/// Waits until something accepts connections on `port`.
pub fn wait_listening(port: u16) {
    wait_for_master(port, None);
}

/// Waits until `port` accepts connections; fails at once, with its stderr,
/// if `child` (the master meant to listen there) exits first.
fn wait_for_master(port: u16, mut child: Option<&mut Child>) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(child) = child.as_deref_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("master exited with {status}: {}", stderr_of(child));
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "master did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for `child` to exit, killing it after [`DEADLINE`].
pub fn wait_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("{what} did not finish within {DEADLINE:?}");
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

/// What a child wrote to its piped stderr.
pub fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// Waits for the master to exit 0.
pub fn clean_finish(master: &mut Child) {
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
