//! The master's status page, rendered by a real headless Chromium while a job
//! runs: the page a person opens shows the job's live numbers, and they are
//! the queue's own: the page, `/metrics` and `sluice status --json` agree
//! with what the master's journal holds, mid-job and at the end.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::cluster::{
    journal_queue, journal_records, metric, signal, stderr_of, undelivered, wait_exit, Job, TOKEN,
};
use crate::common::{fixture, recorded_ids, wait_until};

/// Kills its processes when a test fails half-way.
struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn chromium_dom(url: &str) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("chromium must be installed (.ci/run installs it)");
    assert!(out.status.success(), "chromium failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of the element with `id`.
fn cell(dom: &str, id: &str) -> String {
    let marker = format!("id=\"{id}\">");
    let start = dom
        .find(&marker)
        .map(|i| i + marker.len())
        .unwrap_or_else(|| panic!("no #{id} in page"));
    dom[start..]
        .split('<')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The row counts of the page, `/metrics` and `sluice status --json`, read
/// one after the other: (committed, done, total) each.
struct Views {
    dom: String,
    metrics: String,
    status: serde_json::Value,
}

impl Views {
    fn read(job: &Job) -> Views {
        Views {
            dom: chromium_dom(&format!("{}/?token={TOKEN}", job.url())),
            metrics: job.metrics(),
            status: job.status(),
        }
    }

    /// Checks that all three show `committed`, `done` and `total` rows.
    #[track_caller]
    fn assert_rows(&self, committed: u64, done: u64, total: u64, when: &str) {
        let page = |id: &str| -> u64 {
            cell(&self.dom, id)
                .parse()
                .unwrap_or_else(|e| panic!("{when}: #{id} is not a number: {e}"))
        };
        let metrics = |name: &str| metric(&self.metrics, name).map(|v| v as u64);
        let status = |key: &str| self.status[key].as_u64();
        assert_eq!(
            page("rows-committed"),
            committed,
            "{when}: the page's committed rows"
        );
        assert_eq!(
            page("rows-done"),
            done,
            "{when}: the page's rows of tasks done"
        );
        assert_eq!(
            page("rows-total"),
            total,
            "{when}: the page's rows in the job"
        );
        assert_eq!(
            metrics("sluice_rows_committed_total"),
            Some(committed),
            "{when}: /metrics: {}",
            self.metrics
        );
        assert_eq!(metrics("sluice_rows_done_total"), Some(done), "{when}");
        assert_eq!(metrics("sluice_job_rows"), Some(total), "{when}");
        assert_eq!(
            status("rows_committed"),
            Some(committed),
            "{when}: {}",
            self.status
        );
        assert_eq!(status("rows_done"), Some(done), "{when}");
        assert_eq!(status("rows_total"), Some(total), "{when}");
        assert_eq!(
            self.status["queue"]["rows_committed"].as_u64(),
            Some(committed),
            "{when}"
        );
    }

    /// Checks that none of the three shows `secret`.
    #[track_caller]
    fn assert_hidden(&self, secret: &str, what: &str) {
        assert!(!self.dom.contains(secret), "the page shows {what}");
        assert!(!self.metrics.contains(secret), "/metrics shows {what}");
        assert!(
            !self.status.to_string().contains(secret),
            "status shows {what}"
        );
    }
}

#[test]
fn the_page_metrics_and_status_show_the_queues_rows_mid_job_and_at_the_end() {
    let mut job = Job::new("parquet_small_files", 3);
    // Workers paused for the mid-job sample stay live; the finished job is
    // served long enough to be sampled, then the master is stopped.
    job.lease_timeout = "30s".to_string();
    job.linger = "120s".to_string();
    let mut master = job.start_master(fixture("parquet_small_files"));
    let named = job.start_worker_with("--sleep 0.15", &["--name", "trainer-a"]);
    let unnamed = job.start_worker_with("--sleep 0.15", &[]);
    let default_name = format!("-{}", unnamed.id());
    let mut workers = Killed(vec![named, unnamed]);
    let total = job.rows() * u64::from(job.epochs);

    // Mid-job: once rows are committed, pause the workers so nothing moves,
    // and wait until what the master shows is what its journal holds.
    wait_until("rows committed", Duration::from_secs(60), || {
        job.status()["queue"]["rows_committed"]
            .as_u64()
            .unwrap_or(0)
            > 0
    });
    for worker in &workers.0 {
        signal(worker, libc::SIGSTOP);
    }
    wait_until("a still queue", Duration::from_secs(60), || {
        let shown = job.status()["rows_committed"].as_u64();
        std::thread::sleep(Duration::from_millis(500));
        let journaled = journal_queue(&job).status().rows_committed;
        shown == Some(journaled) && job.status()["rows_committed"].as_u64() == shown
    });
    let queue = journal_queue(&job).status();
    assert!(
        queue.rows_committed > 0 && queue.rows_committed < total && !queue.job_over,
        "a sample mid-job: {} of {total} rows committed",
        queue.rows_committed
    );
    let mid = Views::read(&job);
    mid.assert_rows(queue.rows_committed, queue.rows_done, total, "mid-job");
    assert_eq!(
        journal_queue(&job).status().rows_committed,
        queue.rows_committed,
        "the job moved while paused"
    );
    assert!(
        mid.dom.contains("sluice job"),
        "not the status page: {}",
        mid.dom
    );
    assert!(
        mid.dom.contains("parquet_small_files"),
        "the page names the dataset"
    );
    assert!(
        mid.dom.contains("<svg id=\"chart\""),
        "the rows/s chart is drawn"
    );
    assert_eq!(cell(&mid.dom, "workers-live"), "2", "both workers are live");
    assert_eq!(
        mid.dom.matches("class=\"worker\"").count(),
        2,
        "both are listed"
    );
    let names: Vec<&str> = mid.status["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert!(names.contains(&"trainer-a"), "--name is shown: {names:?}");
    let host_pid = names
        .iter()
        .find(|n| n.ends_with(&default_name))
        .unwrap_or_else(|| panic!("the default name is host-pid ({default_name}): {names:?}"));
    assert!(
        mid.dom.contains("trainer-a") && mid.dom.contains(host_pid),
        "names on the page"
    );
    assert!(
        mid.metrics.contains("name=\"trainer-a\"") && mid.metrics.contains(host_pid),
        "names in /metrics labels: {}",
        mid.metrics
    );
    assert_eq!(metric(&mid.metrics, "sluice_workers"), Some(2.0));
    for worker in &workers.0 {
        signal(worker, libc::SIGCONT);
    }

    // The end: every row of every epoch, the same everywhere.
    wait_until("the job to end", Duration::from_secs(120), || {
        job.status()["queue"]["job_over"].as_bool() == Some(true)
    });
    let end = Views::read(&job);
    end.assert_rows(total, total, total, "at the end");
    assert!(
        end.dom.contains(">job over<"),
        "the page says the job is over"
    );

    // Neither the token nor any worker's secret shows anywhere.
    let secrets: Vec<String> = journal_records(&job)
        .iter()
        .filter(|r| r["op"] == "register")
        .filter_map(|r| r["secret"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        secrets.len(),
        2,
        "each worker registered once with a secret"
    );
    for view in [&mid, &end] {
        view.assert_hidden(TOKEN, "the token");
        for secret in &secrets {
            view.assert_hidden(secret, "a worker secret");
        }
    }
    let refused = chromium_dom(&job.url());
    assert!(
        refused.contains("missing or wrong job token"),
        "the page needs the token"
    );

    // SIGTERM to a master whose job is over: exit 0.
    signal(&master, libc::SIGTERM);
    let status = wait_exit(&mut master, "master");
    let log = stderr_of(&mut master);
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        !log.contains(TOKEN) && secrets.iter().all(|s| !log.contains(s.as_str())),
        "the master's log shows a secret: {log}"
    );
    for worker in &mut workers.0 {
        assert!(wait_exit(worker, "worker").success());
    }
    undelivered(&recorded_ids(&job.ids, "ids-"), job.rows(), job.epochs);
}

/// `sluice status` of `job`'s master, as text.
fn status_text(job: &Job) -> String {
    let out = Command::new(crate::common::SLUICE)
        .args(["status", "--master", &job.url()])
        .env("SLUICE_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .output()
        .expect("sluice status");
    assert!(out.status.success(), "sluice status failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The HTTP status code of a GET of `url`.
fn http_code(url: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-m", "10", "-w", "%{http_code}"])
        .arg(url)
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The time left, as the master's log tells it, on every surface: `sluice
/// status`, its `--json`, the page and `/metrics`, mid-job and (0) at the
/// end; the page opened without the token, or with a wrong one, says how
/// to open it and shows nothing of the job.
#[test]
fn every_view_tells_the_time_left_and_the_page_without_a_token_says_how_to_open_it() {
    let mut job = Job::new("parquet_small_files", 3);
    job.lease_timeout = "30s".to_string();
    job.linger = "120s".to_string();
    let mut master = job.start_master(fixture("parquet_small_files"));
    let mut workers = Killed(vec![job.start_worker_with("--sleep 0.15", &[])]);

    wait_until("an ETA in the status", Duration::from_secs(60), || {
        job.status()["eta_seconds"]
            .as_f64()
            .is_some_and(|s| s > 0.0)
    });
    let dom = chromium_dom(&format!("{}/?token={TOKEN}", job.url()));
    let eta = cell(&dom, "eta");
    assert!(eta != "-" && eta.ends_with('s'), "the page's ETA: {eta}");
    let metrics = job.metrics();
    assert!(
        metric(&metrics, "sluice_eta_seconds").is_some_and(|s| s >= 0.0),
        "{metrics}"
    );
    let text = status_text(&job);
    assert!(
        text.contains(", eta ") && !text.contains(", eta -"),
        "sluice status: {text}"
    );

    wait_until("the job to end", Duration::from_secs(120), || {
        job.status()["queue"]["job_over"].as_bool() == Some(true)
    });
    assert_eq!(job.status()["eta_seconds"].as_f64(), Some(0.0));
    assert_eq!(metric(&job.metrics(), "sluice_eta_seconds"), Some(0.0));
    let dom = chromium_dom(&format!("{}/?token={TOKEN}", job.url()));
    assert_eq!(cell(&dom, "eta"), "0s");
    assert!(status_text(&job).contains(", eta 0s"));

    let wrong = "wrong-token-of-some-length-7c1e";
    for (url, said) in [
        (job.url(), "No token was given."),
        (format!("{}/?token={wrong}", job.url()), "not this job's"),
    ] {
        assert_eq!(http_code(&url), "401", "{url}");
        let page = chromium_dom(&url);
        for how in ["/?token=", "--token-file", "SLUICE_TOKEN", said] {
            assert!(page.contains(how), "no `{how}` on the page: {page}");
        }
        for data in [
            "parquet_small_files",
            "rows-committed",
            "id=\"eta\"",
            wrong,
            TOKEN,
        ] {
            assert!(!page.contains(data), "`{data}` on the page: {page}");
        }
    }

    signal(&master, libc::SIGTERM);
    let status = wait_exit(&mut master, "master");
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut master));
    for worker in &mut workers.0 {
        assert!(wait_exit(worker, "worker").success());
    }
}
