//! Fault tests of the distributed job: real `sluice master` and `sluice worker`
//! processes on 127.0.0.1 over real Spark output, workers killed, paused and
//! added, the master killed and restarted. Each asserts that the job finishes,
//! every id arrives, and duplicates stay within the rows that were leased but
//! not committed when a fault struck, counted from the master's journal.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command};
use std::time::Duration;

use crate::common::cluster::{
    clean_finish, journal_queue, journal_records, metric, signal, stderr_of, undelivered,
    wait_exit, Job, TOKEN,
};
use crate::common::{copy_dir, count_lines, fixture, recorded_ids, wait_until, SLUICE};
use sluice::queue::{Command as QueueCommand, LeaseReply, Queue, QueueConfig, Reply};

/// How long a condition of these tests may take to come true on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(90);

/// The journal of a job with local state replayed: every command the master
/// made durable, with the queue's reply to it.
fn replayed(job: &Job) -> Vec<(QueueCommand, Reply)> {
    let text = std::fs::read_to_string(job.state_dir().join("job.json")).expect("job.json");
    let spec: serde_json::Value = serde_json::from_str(&text).expect("job.json is JSON");
    let splits = spec["spec"]["splits"].as_array().expect("splits").len();
    let config: QueueConfig = serde_json::from_value(spec["queue"].clone()).expect("queue config");
    let mut queue = Queue::new(splits, config).expect("queue");
    journal_records(job)
        .into_iter()
        .map(|record| {
            let command: QueueCommand = serde_json::from_value(record).expect("a journal command");
            let reply = queue.apply(&command);
            (command, reply)
        })
        .collect()
}

/// Budget of duplicate rows a job's faults allow.
trait Budget {
    /// Rows that may be served twice: for every attempt that lapsed or failed,
    /// the rows of its split past the offset it had committed.
    fn duplicate_budget(&self) -> u64;
}

impl Budget for Job {
    fn duplicate_budget(&self) -> u64 {
        let job: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(self.state_dir().join("job.json")).expect("job.json"),
        )
        .expect("json");
        let splits = job["spec"]["splits"].as_array().expect("splits");
        let mut leases: HashMap<u64, (usize, u64)> = HashMap::new();
        let mut budget = 0u64;
        for (command, reply) in replayed(self) {
            match (&command, reply) {
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
                (_, Reply::Tick { expired, .. }) => {
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
    let ids = job.recorded_ids();
    undelivered(&ids, job.rows(), job.epochs);
    let extra: u64 = ids.values().map(|&c| (c - job.epochs) as u64).sum();
    let budget = job.duplicate_budget();
    assert!(extra <= budget, "{extra} duplicate deliveries but only {budget} rows were leased and not committed at the faults");
}

/// Every id arrived exactly `epochs` times.
fn check_exactly_epochs(ids: &HashMap<i64, u32>, job: &Job) {
    undelivered(ids, job.rows(), job.epochs);
    let more: Vec<_> = ids
        .iter()
        .filter(|(_, &c)| c > job.epochs)
        .take(5)
        .collect();
    assert!(
        more.is_empty(),
        "ids served more than once an epoch: {more:?}"
    );
}

/// `rows_committed` of the running master, or 0 while it does not answer.
fn rows_committed(job: &Job) -> u64 {
    job.try_status()
        .and_then(|s| s["queue"]["rows_committed"].as_u64())
        .unwrap_or(0)
}

#[test]
fn workers_killed_and_joining_lose_nothing() {
    let job = Job::new("parquet_small_files", 2);
    let mut master = job.start_master(fixture("parquet_small_files"));
    let dir = |n: usize| job.ids.join(format!("w{n}"));
    let mut workers: Vec<(Child, usize)> = (0..3)
        .map(|n| (job.start_worker_into(&dir(n), "", &[]), n))
        .collect();
    for round in 0..3 {
        let (mut victim, n) = workers.remove(round % workers.len());
        // Killed mid-task: once its trainer has taken one more batch.
        let before = count_lines(&dir(n), "ids-");
        wait_until("the victim to train a batch", PATIENCE, || {
            count_lines(&dir(n), "ids-") > before
        });
        signal(&victim, libc::SIGKILL);
        let _ = victim.wait();
        workers.push((job.start_worker_into(&dir(3 + round), "", &[]), 3 + round));
    }
    clean_finish(&mut master);
    for (mut w, _) in workers {
        wait_exit(&mut w, "worker");
    }
    check_ids(&job);
    assert!(
        job.duplicate_budget() > 0,
        "killing workers mid-task should have cost some leases"
    );
    let joined = count_lines(&dir(5), "ids-");
    assert!(joined > 0, "the last worker to join trained nothing");
}

#[test]
fn master_killed_and_restarted_twice() {
    let job = Job::new("parquet_small_files", 2);
    let data = fixture("parquet_small_files");
    let mut master = job.start_master(&data);
    let mut workers: Vec<Child> = (0..3).map(|_| job.start_worker("")).collect();
    let mut durable = 0;
    for kill in 0..2 {
        // Killed once more rows were made durable since the last start.
        wait_until("more rows committed", PATIENCE, || {
            journal_queue(&job).status().rows_committed > durable
        });
        signal(&master, libc::SIGKILL);
        let _ = master.wait();
        let journaled = journal_queue(&job).status();
        assert!(!journaled.job_over, "kill {kill}: the job was over");
        durable = journaled.rows_committed;
        master = job.start_master(&data);
        let resumed = job.status()["queue"]["rows_committed"]
            .as_u64()
            .expect("rows_committed");
        assert!(
            resumed >= durable,
            "kill {kill}: the restarted master starts at {resumed} rows committed, \
             not at the {durable} of its journal"
        );
    }
    clean_finish(&mut master);
    for w in &mut workers {
        let status = wait_exit(w, "worker");
        assert!(status.success(), "a worker failed after master restarts");
    }
    check_ids(&job);
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
    wait_until("both workers live", PATIENCE, || {
        live_names(&job) == ["alpha", "beta"]
    });
    signal(&beta, libc::SIGKILL);
    let _ = beta.wait();
    // Gone once it has missed heartbeats for the lease timeout (2 s).
    wait_until("the killed worker to depart", PATIENCE, || {
        live_names(&job) == ["alpha"]
    });
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
    wait_until("the worker back under its name", PATIENCE, || {
        live_names(&job) == ["alpha"]
    });
    clean_finish(&mut master);
    assert!(wait_exit(&mut alpha, "worker").success());
    check_ids(&job);
}

#[test]
fn a_master_stopped_by_sigterm_mid_job_exits_130_and_resumes_exactly_once() {
    let mut job = Job::new("parquet_small_files", 2);
    // Leases outlive the restart, so no task is served twice.
    job.lease_timeout = "30s".to_string();
    let data = fixture("parquet_small_files");
    let mut master = job.start_master(&data);
    let mut workers: Vec<Child> = (0..3).map(|_| job.start_worker("")).collect();
    wait_until("rows committed", PATIENCE, || rows_committed(&job) > 0);
    signal(&master, libc::SIGTERM);
    let status = wait_exit(&mut master, "master");
    let log = stderr_of(&mut master);
    assert_eq!(
        status.code(),
        Some(130),
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
    let stopped = journal_queue(&job).status();
    assert!(
        !stopped.job_over && stopped.rows_committed > 0,
        "{stopped:?}"
    );

    let mut master = job.start_master(&data);
    clean_finish(&mut master);
    for w in &mut workers {
        assert!(wait_exit(w, "worker").success(), "a worker failed");
    }
    check_exactly_epochs(&job.recorded_ids(), &job);
    assert_eq!(job.duplicate_budget(), 0, "no lease lapsed or failed");
}

/// The id the master gave the worker registered as `name`, from the journal.
fn worker_id(journal: &[(QueueCommand, Reply)], name: &str) -> u64 {
    journal
        .iter()
        .find_map(|(command, reply)| match (command, reply) {
            (QueueCommand::Register { name: Some(n), .. }, Reply::Register(id)) if n == name => {
                Some(id.0)
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no worker registered as {name} in the journal"))
}

/// The attempts of `worker` that lapsed, from the journal.
fn lapsed(journal: &[(QueueCommand, Reply)], worker: u64) -> HashSet<u64> {
    let mut out = HashSet::new();
    for (_, reply) in journal {
        if let Reply::Tick { expired, .. } = reply {
            out.extend(
                expired
                    .iter()
                    .filter(|e| e.worker.0 == worker)
                    .map(|e| e.attempt.0),
            );
        }
    }
    out
}

/// The attempts leased to `worker` in `journal`.
fn leased_to(journal: &[(QueueCommand, Reply)], worker: u64) -> HashSet<u64> {
    let mut out = HashSet::new();
    for (command, reply) in journal {
        if let (QueueCommand::Lease { worker: w, .. }, Reply::Lease(Ok(LeaseReply::Tasks(ls)))) =
            (command, reply)
        {
            if w.0 == worker {
                out.extend(ls.iter().map(|l| l.attempt.0));
            }
        }
    }
    out
}

/// The attempt a report (commit, finish, fail, hand-back) is about.
fn reported_attempt(command: &QueueCommand) -> Option<u64> {
    match command {
        QueueCommand::Commit { attempt, .. }
        | QueueCommand::Finish { attempt, .. }
        | QueueCommand::Fail { attempt, .. }
        | QueueCommand::HandBack { attempt, .. } => Some(attempt.0),
        _ => None,
    }
}

#[test]
fn a_paused_worker_is_fenced_and_carries_on() {
    // Three epochs: work is left for the paused worker once it goes on.
    let job = Job::new("parquet_small_files", 3);
    let mut master = job.start_master(fixture("parquet_small_files"));
    let paused_out = job.ids.join("paused");
    let log = job.ids.join("paused.log");
    let mut paused = job
        .recording_worker(&paused_out, "")
        .args(["--name", "paused"])
        .stderr(std::fs::File::create(&log).expect("worker log"))
        .spawn()
        .expect("start worker");
    let mut others: Vec<Child> = (0..2)
        .map(|n| job.start_worker_into(&job.ids.join(format!("w{n}")), "", &[]))
        .collect();
    wait_until("the paused worker's first batches", PATIENCE, || {
        count_lines(&paused_out, "ids-") >= 80
    });
    signal(&paused, libc::SIGSTOP);
    // Fenced: it departs (no heartbeat for the lease timeout, 2 s) and the
    // master's journal records its leases lapsing.
    wait_until("the paused worker's leases to lapse", PATIENCE, || {
        let journal = replayed(&job);
        !lapsed(&journal, worker_id(&journal, "paused")).is_empty()
            && !live_names(&job).contains(&"paused".to_string())
    });
    let before = journal_records(&job).len();
    signal(&paused, libc::SIGCONT);
    // It carries on: after the pause it is leased new tasks and commits them.
    wait_until("the resumed worker to commit new work", PATIENCE, || {
        let journal = replayed(&job);
        let since = &journal[before.min(journal.len())..];
        let fresh = leased_to(since, worker_id(&journal, "paused"));
        since.iter().any(|(command, reply)| {
            matches!(reply, Reply::Commit(Ok(())) | Reply::Finish(Ok(())))
                && reported_attempt(command).is_some_and(|a| fresh.contains(&a))
        })
    });
    clean_finish(&mut master);
    let status = wait_exit(&mut paused, "paused worker");
    let log = std::fs::read_to_string(&log).expect("worker log");
    assert!(status.success(), "the fenced worker failed: {log}");
    assert!(
        log.contains("lease lapsed") || log.contains("lease lost"),
        "the fenced worker never learned that its leases were gone: {log}"
    );
    for w in &mut others {
        assert!(wait_exit(w, "worker").success(), "a worker failed");
    }

    // The master took no report on a lapsed attempt of the fenced worker.
    let journal = replayed(&job);
    let fenced = lapsed(&journal, worker_id(&journal, "paused"));
    let mut gone = HashSet::new();
    for (command, reply) in &journal {
        if let Reply::Tick { expired, .. } = reply {
            gone.extend(expired.iter().map(|e| e.attempt.0));
        }
        if let Some(attempt) = reported_attempt(command).filter(|a| fenced.contains(a)) {
            assert!(
                !gone.contains(&attempt),
                "the master accepted {command:?} on the lapsed attempt {attempt}"
            );
        }
    }
    // What its trainers took after losing the leases is not counted: the
    // master committed every row once an epoch, no more.
    let queue = journal_queue(&job).status();
    assert_eq!(
        queue.rows_committed,
        job.rows() * u64::from(job.epochs),
        "rows committed over the job: {queue:?}"
    );
    check_ids(&job);
}

#[test]
fn a_worker_joining_after_the_first_epoch_began_shares_the_work() {
    let mut job = Job::new("parquet_small_files", 2);
    // No lease lapses on a loaded machine: every row is served exactly once an epoch.
    job.lease_timeout = "60s".to_string();
    let mut master = job.start_master(fixture("parquet_small_files"));
    let (first_out, late_out) = (job.ids.join("first"), job.ids.join("late"));
    let mut first = job.start_worker_into(&first_out, "", &[]);
    wait_until("the first worker's first batches", PATIENCE, || {
        count_lines(&first_out, "ids-") >= 80
    });
    let mut late = job.start_worker_into(&late_out, "", &[]);
    clean_finish(&mut master);
    assert!(wait_exit(&mut first, "worker").success());
    assert!(wait_exit(&mut late, "worker").success());
    let (by_first, by_late) = (
        recorded_ids(&first_out, "ids-"),
        recorded_ids(&late_out, "ids-"),
    );
    let share = |ids: &HashMap<i64, u32>| ids.values().map(|&n| u64::from(n)).sum::<u64>();
    let total = job.rows() * u64::from(job.epochs);
    // Each trained at least a whole batch of its own, and together every row
    // once an epoch.
    assert!(
        share(&by_first) >= 40 && share(&by_late) >= 40,
        "the work was not shared: the first worker trained {} rows, the late one {} of {total}",
        share(&by_first),
        share(&by_late)
    );
    eprintln!(
        "shares: first {} rows, late {} rows of {total}",
        share(&by_first),
        share(&by_late)
    );
    check_exactly_epochs(&job.recorded_ids(), &job);
    assert_eq!(share(&by_first) + share(&by_late), total);
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
    // Every row of the other files arrived once, none of the corrupt one.
    let ids = job.recorded_ids();
    let twice: Vec<_> = ids.iter().filter(|(_, &c)| c > 1).take(5).collect();
    assert!(twice.is_empty(), "ids delivered twice: {twice:?}");
    let lost = common::expected_dataset("parquet_small_files")["file_rows"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("expected.json has no row count for {name}"));
    assert_eq!(
        ids.len() as u64,
        job.rows() - lost,
        "every row but the {lost} of {name} is trained"
    );
    assert!(ids.keys().all(|&id| id >= 0 && (id as u64) < job.rows()));
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
            .any(|l| l.contains("failed task: ") && l.contains(name)),
        "the master names {name}: {err}"
    );
    for w in &mut workers {
        wait_exit(w, "worker");
    }
    let ids = job.recorded_ids();
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
    let ids = job.recorded_ids();
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
