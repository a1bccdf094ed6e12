//! Fault tests of the distributed job: real `sluice master` and `sluice worker`
//! processes on 127.0.0.1 over real Spark output, workers killed, paused and
//! added, the master killed and restarted. Each asserts that the job finishes,
//! every id arrives, and duplicates stay within the rows that were leased but
//! not committed when a fault struck, counted from the master's journal.

mod common;

use std::collections::HashMap;
use std::process::{Child, Command};
use std::time::Duration;

use common::cluster::{
    clean_finish, metric, signal, stderr_of, undelivered, wait_exit, Job, TOKEN,
};
use common::{copy_dir, fixture, recorded_ids, SLUICE};
use sluice::task::{Command as QueueCommand, LeaseReply, Queue, QueueConfig, Reply};

/// Budget of duplicate rows a job's faults allow.
trait Budget {
    /// Rows that may be served twice: for every attempt that lapsed or failed,
    /// the rows of its split past the offset it had committed.
    fn duplicate_budget(&self) -> u64;
}

impl Budget for Job {
    fn duplicate_budget(&self) -> u64 {
        let text =
            std::fs::read_to_string(self.state_dir().join("journal.jsonl")).expect("journal");
        let job: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(self.state_dir().join("job.json")).expect("job.json"),
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
                        budget += lost_rows(splits, leases.get(&e.attempt.0));
                    }
                }
                (QueueCommand::Fail { attempt, .. }, Reply::Fail(Ok(_))) => {
                    budget += lost_rows(splits, leases.get(&attempt.0));
                }
                _ => {}
            }
        }
        budget
    }
}

fn lost_rows(splits: &[serde_json::Value], lease: Option<&(usize, u64)>) -> u64 {
    let Some(&(split, committed)) = lease else {
        return 0;
    };
    let rows = splits[split]["rows"].as_u64().unwrap_or(u64::MAX / 4);
    rows.saturating_sub(committed)
}

/// Every id arrived `epochs` times at least, and the extra deliveries fit the budget.
fn check_ids(job: &Job) {
    let ids = recorded_ids(&job.ids, "ids-");
    undelivered(&ids, job.rows(), job.epochs);
    let extra: u64 = ids.values().map(|&c| (c - job.epochs) as u64).sum();
    let budget = job.duplicate_budget();
    assert!(extra <= budget, "{extra} duplicate deliveries but only {budget} rows were leased and not committed at the faults");
}

#[test]
fn workers_killed_and_joining_lose_nothing() {
    let job = Job::new("parquet_small_files", 2);
    let mut master = job.start_master(fixture("parquet_small_files"));
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

/// Polls `ready` every 200 ms; panics naming `what` after `limit`.
fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The names of the live workers in `sluice status --json`, sorted.
fn live_names(job: &Job) -> Vec<String> {
    let mut names: Vec<String> = job.status()["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["name"].as_str().unwrap_or_default().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn a_killed_worker_departs_and_names_survive_a_master_restart() {
    let job = Job::new("parquet_small_files", 2);
    let data = fixture("parquet_small_files");
    let mut master = job.start_master(&data);
    let mut alpha = job.start_worker_with("--sleep 0.15", &["--name", "alpha"]);
    let mut beta = job.start_worker_with("--sleep 0.15", &["--name", "beta"]);
    wait_for("both workers live", Duration::from_secs(30), || {
        live_names(&job) == ["alpha", "beta"]
    });
    signal(&beta, libc::SIGKILL);
    let _ = beta.wait();
    // Gone once it has missed heartbeats for the lease timeout (2 s).
    wait_for(
        "the killed worker to depart",
        Duration::from_secs(10),
        || live_names(&job) == ["alpha"],
    );
    let status = job.status();
    assert_eq!(status["workers_departed"], 1, "{status}");
    assert_eq!(
        status["queue"]["job_over"], false,
        "still mid-job: {status}"
    );
    let metrics = job.metrics();
    assert_eq!(metric(&metrics, "sluice_workers"), Some(1.0), "{metrics}");
    assert_eq!(metric(&metrics, "sluice_workers_departed"), Some(1.0));
    assert!(
        metrics.contains("name=\"alpha\"") && !metrics.contains("name=\"beta\""),
        "{metrics}"
    );

    // Names are journaled with the registration: a restarted master knows
    // the surviving worker by name at its first heartbeat.
    signal(&master, libc::SIGKILL);
    let _ = master.wait();
    master = job.start_master(&data);
    wait_for(
        "the worker back under its name",
        Duration::from_secs(10),
        || live_names(&job) == ["alpha"],
    );
    clean_finish(&mut master);
    assert!(wait_exit(&mut alpha, "worker").success());
    check_ids(&job);
}

#[test]
fn a_master_stopped_by_sigterm_mid_job_exits_143_and_resumes_exactly_once() {
    let mut job = Job::new("parquet_small_files", 2);
    // Leases outlive the restart, so no task is served twice.
    job.lease_timeout = "30s".to_string();
    let data = fixture("parquet_small_files");
    let mut master = job.start_master(&data);
    let mut workers: Vec<Child> = (0..3).map(|_| job.start_worker("")).collect();
    wait_for("rows committed", Duration::from_secs(60), || {
        job.status()["queue"]["rows_committed"]
            .as_u64()
            .unwrap_or(0)
            > 0
    });
    signal(&master, libc::SIGTERM);
    let status = wait_exit(&mut master, "master");
    let log = stderr_of(&mut master);
    assert_eq!(
        status.code(),
        Some(143),
        "a stop before the job is over: {log}"
    );
    assert!(
        log.contains("stopped by SIGTERM before the job was over") && log.contains("same --state"),
        "one line saying what to do: {log}"
    );
    let journal = std::fs::read(job.state_dir().join("journal.jsonl")).expect("journal");
    assert_eq!(
        journal.last(),
        Some(&b'\n'),
        "the last group commit was finished"
    );
    let stopped = common::cluster::journal_queue(&job).status();
    assert!(
        !stopped.job_over && stopped.rows_committed > 0,
        "{stopped:?}"
    );

    std::thread::sleep(Duration::from_millis(300));
    let mut master = job.start_master(&data);
    clean_finish(&mut master);
    for w in &mut workers {
        assert!(wait_exit(w, "worker").success(), "a worker failed");
    }
    let ids = recorded_ids(&job.ids, "ids-");
    undelivered(&ids, job.rows(), job.epochs);
    let twice: Vec<_> = ids
        .iter()
        .filter(|(_, &c)| c > job.epochs)
        .take(5)
        .collect();
    assert!(
        twice.is_empty(),
        "ids served more than once an epoch: {twice:?}"
    );
    assert_eq!(job.duplicate_budget(), 0, "no lease lapsed or failed");
}

#[test]
fn a_paused_worker_is_fenced_and_carries_on() {
    let job = Job::new("parquet_small_files", 1);
    let mut master = job.start_master(fixture("parquet_small_files"));
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
    let mut master = job.start_master(fixture("parquet_small_files"));
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
fn a_corrupt_footer_stops_the_master_unless_ignore_corrupt_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_dir(&fixture("parquet_small_files"), &data);
    let bad = std::fs::read_dir(fixture("bad/truncated_parquet"))
        .expect("bad/truncated_parquet")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a truncated parquet file");
    let name = bad.file_name().and_then(|n| n.to_str()).expect("name");
    std::fs::copy(&bad, data.join(name)).expect("copy");

    let mut job = Job::new("parquet_small_files", 1);
    let refused = job.master_command(&data, 0).output().expect("run master");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains(name), "the master names {name}: {err}");

    job.master_args.push("--ignore-corrupt-files".into());
    let mut master = job.start_master(&data);
    let mut workers: Vec<Child> = (0..2).map(|_| job.start_worker("")).collect();
    let status = wait_exit(&mut master, "master");
    let err = stderr_of(&mut master);
    assert_eq!(
        status.code(),
        Some(2),
        "a corrupt file is a failed task: {err}"
    );
    assert!(
        err.lines()
            .any(|l| l.starts_with("failed task: ") && l.contains(name)),
        "the master names {name}: {err}"
    );
    for w in &mut workers {
        wait_exit(w, "worker");
    }
    let ids = recorded_ids(&job.ids, "ids-");
    common::assert_exactly_once(&ids, job.rows(), "the good files");
}

#[test]
fn requests_without_the_token_are_refused() {
    let job = Job::new("parquet_small_files", 1);
    let mut master = job.start_master(fixture("parquet_small_files"));
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

/// A CA and a certificate it signed for 127.0.0.1, made with openssl:
/// (ca.pem, server.pem, server.key) in `dir`.
fn certificates(dir: &std::path::Path) -> (String, String, String) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=sluice test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext.cnf");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    let path = |name: &str| dir.join(name).display().to_string();
    (path("ca.pem"), path("server.pem"), path("server.key"))
}

#[test]
fn a_master_serves_https_to_workers_that_trust_its_ca() {
    let certs = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = certificates(certs.path());
    let mut job = Job::new("parquet_small_files", 1);
    job.https = true;
    job.master_args = vec!["--tls-cert".into(), cert, "--tls-key".into(), key.clone()];
    job.worker_args = vec!["--ca-file".into(), ca.clone()];
    let mut master = job.start_master(fixture("parquet_small_files"));

    // Plain HTTP to the TLS port gets no answer; a worker that does not trust
    // the CA stops with one line about the certificate.
    let plain = Command::new("curl")
        .args([
            "-s",
            "-m",
            "5",
            &format!("http://127.0.0.1:{}/v1/job", job.port()),
        ])
        .output()
        .expect("curl");
    assert!(!plain.status.success(), "plain HTTP was answered");
    let untrusted = Command::new(SLUICE)
        .args(["worker", "--master", &job.url(), "--patience", "2s", "-q"])
        .env("SLUICE_TOKEN", TOKEN)
        .output()
        .expect("worker");
    let err = String::from_utf8_lossy(&untrusted.stderr);
    assert!(!untrusted.status.success(), "an untrusting worker went on");
    assert!(
        err.contains("certificate") || err.contains("UnknownIssuer"),
        "{err}"
    );

    let mut workers: Vec<Child> = (0..2).map(|_| job.start_worker("")).collect();
    let status = Command::new(SLUICE)
        .args(["status", "--master", &job.url(), "--ca-file", &ca, "--json"])
        .env("SLUICE_TOKEN", TOKEN)
        .output()
        .expect("status");
    assert!(
        status.status.success(),
        "status over https: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    clean_finish(&mut master);
    for w in &mut workers {
        assert!(wait_exit(w, "worker").success());
    }
    let ids = recorded_ids(&job.ids, "ids-");
    common::assert_exactly_once(&ids, job.rows(), "over https");
    let log = stderr_of(&mut master);
    assert!(
        !log.contains("PRIVATE KEY"),
        "the key never reaches the log"
    );
}

#[test]
fn a_bad_certificate_stops_the_master_with_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").expect("write");
    let out = Command::new(SLUICE)
        .args([
            "master",
            fixture("parquet_small_files").to_str().expect("utf8"),
        ])
        .args(["--listen", "127.0.0.1:0", "--state"])
        .arg(dir.path().join("state"))
        .args(["--tls-cert", junk.to_str().expect("utf8")])
        .args(["--tls-key", junk.to_str().expect("utf8")])
        .env("SLUICE_TOKEN", TOKEN)
        .output()
        .expect("master");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("junk.pem") && err.trim().lines().count() == 1,
        "{err}"
    );
}

/// Runs a master that must refuse to start: its exit status and stderr, within 30 s.
fn refused_master(mut cmd: Command) -> (std::process::ExitStatus, String) {
    let mut child = cmd.spawn().expect("start master");
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return (status, stderr_of(&mut child));
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the master should have refused to start: {}",
                stderr_of(&mut child)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_master_refuses_a_held_state_and_other_options_on_restart() {
    let mut job = Job::new("parquet_small_files", 1);
    let data = fixture("parquet_small_files");
    let mut master = job.start_master(&data);
    let (status, err) = refused_master(job.master_command(&data, 0));
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("pid {}", master.id())) && err.trim().lines().count() == 1,
        "one line naming the holder: {err}"
    );
    assert!(
        master.try_wait().expect("try_wait").is_none(),
        "the first master keeps running"
    );
    signal(&master, libc::SIGKILL);
    let _ = master.wait();
    job.epochs = 2;
    let (status, err) = refused_master(job.master_command(&data, job.port()));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("--epochs was 1 there, 2 now")
            && err.contains("remove")
            && err.trim().lines().count() == 1,
        "one line naming the option and both values: {err}"
    );
    job.epochs = 1;
    let mut master = job.start_master(&data);
    let workers: Vec<Child> = (0..2).map(|_| job.start_worker("")).collect();
    clean_finish(&mut master);
    for mut w in workers {
        wait_exit(&mut w, "worker");
    }
    check_ids(&job);
}
