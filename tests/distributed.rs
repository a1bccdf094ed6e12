//! Fault tests of the distributed job: real `sluice master` and `sluice worker`
//! processes on 127.0.0.1 over real Spark output, workers killed, paused and
//! added, the master killed and restarted. Each asserts that the job finishes,
//! every id arrives, and duplicates stay within the rows that were leased but
//! not committed when a fault struck, counted from the master's journal.

mod common;

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{copy_dir, expected_dataset, fixture, python, recorded_ids, SLUICE};
use sluice::task::{Command as QueueCommand, LeaseReply, Queue, QueueConfig, Reply};

const TOKEN: &str = "test-token-4f1d";
/// Every scenario must end within this time.
const DEADLINE: Duration = Duration::from_secs(120);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A job: its master's address, state directory and where trainers record ids.
struct Job {
    port: u16,
    state: PathBuf,
    ids: PathBuf,
    dataset: String,
    epochs: u32,
    _dir: tempfile::TempDir,
}

impl Job {
    fn new(dataset: &str, epochs: u32) -> Job {
        let dir = tempfile::tempdir().expect("tempdir");
        let ids = dir.path().join("ids");
        std::fs::create_dir(&ids).expect("ids dir");
        Job {
            port: free_port(),
            state: dir.path().join("state"),
            ids,
            dataset: dataset.to_string(),
            epochs,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn start_master(&self, data: &Path) -> Child {
        let child = Command::new(SLUICE)
            .args(["master", data.to_str().expect("utf8")])
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--state", self.state.to_str().expect("utf8")])
            .args([
                "--epochs",
                &self.epochs.to_string(),
                "--lease-timeout",
                "2s",
                "--linger",
                "3s",
            ])
            .env("SLUICE_TOKEN", TOKEN)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start master");
        self.wait_up();
        child
    }

    fn wait_up(&self) {
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "master did not come up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn start_worker(&self, extra: &str) -> Child {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/record_ids.py");
        let cmd = format!(
            "{} {} --out {} --sleep 0.08 {extra}",
            python(),
            script.display(),
            self.ids.display()
        );
        Command::new(SLUICE)
            .args([
                "worker",
                "--master",
                &self.url(),
                "--exec",
                &cmd,
                "--batch-size",
                "40",
                "--prefetch",
                "2",
                "-q",
            ])
            .env("SLUICE_TOKEN", TOKEN)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start worker")
    }

    fn rows(&self) -> u64 {
        expected_dataset(&self.dataset)["rows"]
            .as_u64()
            .expect("rows")
    }

    /// Rows that may be served twice: for every attempt that lapsed or failed,
    /// the rows of its split past the offset it had committed.
    fn duplicate_budget(&self) -> u64 {
        let text = std::fs::read_to_string(self.state.join("journal.jsonl")).expect("journal");
        let job: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(self.state.join("job.json")).expect("job.json"),
        )
        .expect("json");
        let splits = job["spec"]["splits"].as_array().expect("splits");
        let config: QueueConfig =
            serde_json::from_value(job["queue"].clone()).expect("queue config");
        let mut queue = Queue::new(splits.len(), config).expect("queue");
        let mut leases: HashMap<u64, (usize, u64)> = HashMap::new();
        let mut budget = 0u64;
        for line in text.lines() {
            let command: QueueCommand = serde_json::from_str(line).expect("journal line");
            match (&command, queue.apply(&command)) {
                (_, Reply::Lease(Ok(LeaseReply::Tasks(ls)))) => {
                    for l in ls {
                        leases.insert(l.attempt.0, (l.split as usize, l.offset));
                    }
                }
                (
                    QueueCommand::Commit {
                        attempt, offset, ..
                    },
                    Reply::Commit(Ok(())),
                ) => {
                    if let Some(l) = leases.get_mut(&attempt.0) {
                        l.1 = *offset;
                    }
                }
                (_, Reply::Tick(expired)) => {
                    for e in expired {
                        budget += self.lost_rows(splits, leases.get(&e.attempt.0));
                    }
                }
                (QueueCommand::Fail { attempt, .. }, Reply::Fail(Ok(_))) => {
                    budget += self.lost_rows(splits, leases.get(&attempt.0));
                }
                _ => {}
            }
        }
        budget
    }

    fn lost_rows(&self, splits: &[serde_json::Value], lease: Option<&(usize, u64)>) -> u64 {
        let Some(&(split, committed)) = lease else {
            return 0;
        };
        let rows = splits[split]["rows"].as_u64().unwrap_or(u64::MAX / 4);
        rows.saturating_sub(committed)
    }
}

fn wait_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
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

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a child we started and still own.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// Every id arrived `epochs` times at least, and the extra deliveries fit the budget.
fn check_ids(job: &Job) {
    let ids = recorded_ids(&job.ids, "ids-");
    let rows = job.rows();
    let missing: Vec<i64> = (0..rows as i64)
        .filter(|i| ids.get(i).copied().unwrap_or(0) < job.epochs)
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "ids not delivered in every epoch: {missing:?}"
    );
    assert!(
        ids.keys().all(|&i| i >= 0 && (i as u64) < rows),
        "ids from outside the dataset"
    );
    let extra: u64 = ids.values().map(|&c| (c - job.epochs) as u64).sum();
    let budget = job.duplicate_budget();
    assert!(extra <= budget, "{extra} duplicate deliveries but only {budget} rows were leased and not committed at the faults");
}

fn clean_finish(master: &mut Child) {
    let status = wait_exit(master, "master");
    assert!(status.success(), "master failed: {}", stderr_of(master));
}

#[test]
fn workers_killed_and_joining_lose_nothing() {
    let job = Job::new("parquet_small_files", 2);
    let mut master = job.start_master(&fixture("parquet_small_files"));
    let mut workers: Vec<Child> = (0..3).map(|_| job.start_worker("")).collect();
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(800));
        let mut victim = workers.remove(round % workers.len());
        signal(&victim, libc::SIGKILL);
        let _ = victim.wait();
        workers.push(job.start_worker(""));
    }
    clean_finish(&mut master);
    for mut w in workers {
        wait_exit(&mut w, "worker");
    }
    check_ids(&job);
    assert!(
        job.duplicate_budget() > 0,
        "killing workers mid-task should have cost some leases"
    );
}

#[test]
fn master_killed_and_restarted_twice() {
    let job = Job::new("parquet_small_files", 2);
    let data = fixture("parquet_small_files");
    let mut master = job.start_master(&data);
    let mut workers: Vec<Child> = (0..3).map(|_| job.start_worker("")).collect();
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(1500));
        signal(&master, libc::SIGKILL);
        let _ = master.wait();
        std::thread::sleep(Duration::from_millis(500));
        master = job.start_master(&data);
    }
    clean_finish(&mut master);
    for w in &mut workers {
        let status = wait_exit(w, "worker");
        assert!(status.success(), "a worker failed after master restarts");
    }
    check_ids(&job);
}

#[test]
fn a_paused_worker_is_fenced_and_carries_on() {
    let job = Job::new("parquet_small_files", 1);
    let mut master = job.start_master(&fixture("parquet_small_files"));
    let mut workers: Vec<Child> = (0..3).map(|_| job.start_worker("")).collect();
    std::thread::sleep(Duration::from_millis(1000));
    signal(&workers[0], libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(4000));
    signal(&workers[0], libc::SIGCONT);
    clean_finish(&mut master);
    for w in &mut workers {
        wait_exit(w, "worker");
    }
    check_ids(&job);
}

#[test]
fn a_worker_joining_after_the_first_epoch_began_shares_the_work() {
    let job = Job::new("parquet_small_files", 2);
    let mut master = job.start_master(&fixture("parquet_small_files"));
    let mut first = job.start_worker("");
    std::thread::sleep(Duration::from_millis(1500));
    let mut late = job.start_worker("");
    clean_finish(&mut master);
    assert!(wait_exit(&mut first, "worker").success());
    assert!(wait_exit(&mut late, "worker").success());
    check_ids(&job);
}

#[test]
fn a_corrupt_file_fails_its_task_and_the_master_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_dir(&fixture("parquet_small_files"), &data);
    let victim = std::fs::read_dir(&data)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a parquet file");
    let mut bytes = std::fs::read(&victim).expect("read");
    let mid = bytes.len() / 2;
    bytes[8..mid].fill(0xAB);
    std::fs::write(&victim, &bytes).expect("corrupt");
    let job = Job::new("parquet_small_files", 1);
    let mut master = job.start_master(&data);
    let mut workers: Vec<Child> = (0..3).map(|_| job.start_worker("")).collect();
    let status = wait_exit(&mut master, "master");
    let err = stderr_of(&mut master);
    assert_eq!(
        status.code(),
        Some(2),
        "a failed task must make the master exit 2: {err}"
    );
    let name = victim.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(err.contains(name), "master should name {name}: {err}");
    for w in &mut workers {
        wait_exit(w, "worker");
    }
    let ids = recorded_ids(&job.ids, "ids-");
    assert!(ids.values().all(|&c| c == 1), "no id twice");
    assert!(ids.len() as u64 >= job.rows() - 100 && (ids.len() as u64) < job.rows());
}

#[test]
fn requests_without_the_token_are_refused() {
    let job = Job::new("parquet_small_files", 1);
    let mut master = job.start_master(&fixture("parquet_small_files"));
    for path in ["/v1/job", "/v1/status", "/metrics", "/"] {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("{}{path}", job.url()),
            ])
            .output()
            .expect("curl");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "401",
            "{path} without token"
        );
    }
    let out = Command::new(SLUICE)
        .args(["worker", "--master", &job.url(), "--patience", "2s", "-q"])
        .env("SLUICE_TOKEN", "wrong")
        .output()
        .expect("worker");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("token") && !err.contains(TOKEN) && !err.contains("wrong"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let page = Command::new("curl")
        .args(["-s", &format!("{}/?token={TOKEN}", job.url())])
        .output()
        .expect("curl");
    let html = String::from_utf8_lossy(&page.stdout);
    assert!(
        html.contains("sluice job") && !html.contains(TOKEN),
        "page must not show the token"
    );
    signal(&master, libc::SIGKILL);
    let _ = master.wait();
}
