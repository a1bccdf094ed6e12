//! The master's status page, rendered by a real headless Chromium while a job
//! runs: the page a person opens shows the job's live numbers.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{fixture, python, SLUICE};

const TOKEN: &str = "page-token-91c2-5d7a-e6f4";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
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

#[test]
fn the_status_page_shows_live_numbers_in_a_browser() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = fixture("parquet_small_files");
    let _master = Killed(
        Command::new(SLUICE)
            .args(["master", data.to_str().expect("utf8"), "--epochs", "20"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--state", dir.path().join("state").to_str().expect("utf8")])
            .env("SLUICE_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("master"),
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/record_ids.py");
    let ids = dir.path().join("ids");
    std::fs::create_dir(&ids).expect("ids dir");
    let cmd = format!(
        "{} {} --out {} --sleep 0.05",
        python(),
        script.display(),
        ids.display()
    );
    let base = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "master did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _worker = Killed(
        Command::new(SLUICE)
            .args([
                "worker",
                "--master",
                &base,
                "--exec",
                &cmd,
                "--batch-size",
                "100",
                "-q",
            ])
            .env("SLUICE_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("worker"),
    );
    // Wait until the job has visibly moved and a heartbeat reported rows.
    let page = format!("{base}/?token={TOKEN}");
    let mut dom = String::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(1500));
        dom = chromium_dom(&page);
        let done: u64 = cell(&dom, "tasks-done").parse().unwrap_or(0);
        let rows: u64 = cell(&dom, "rows").parse().unwrap_or(0);
        if done > 0 && rows > 0 {
            break;
        }
    }
    assert!(dom.contains("sluice job"), "not the status page: {dom}");
    assert!(
        dom.contains("parquet_small_files"),
        "the page names the dataset"
    );
    let done: u64 = cell(&dom, "tasks-done")
        .parse()
        .expect("tasks done is a number");
    let rows: u64 = cell(&dom, "rows").parse().expect("rows is a number");
    assert!(
        done > 0 && rows > 0,
        "live numbers on the page: {done} tasks, {rows} rows"
    );
    assert!(
        cell(&dom, "epoch").ends_with("/ 20"),
        "epoch of 20: {}",
        cell(&dom, "epoch")
    );
    assert!(dom.contains("class=\"worker\""), "the worker is listed");
    assert!(
        dom.contains("<svg id=\"chart\""),
        "the rows/s chart is drawn"
    );
    assert!(!dom.contains(TOKEN), "the page must not show the token");
    let refused = chromium_dom(&base);
    assert!(
        refused.contains("missing or wrong job token"),
        "the page needs the token"
    );
}
