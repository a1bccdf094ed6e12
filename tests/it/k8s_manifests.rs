//! The Kubernetes manifests in `jobs/k8s/`: every `sluice` command line in
//! them must be accepted by the CLI's own parser, and a worker stopped by
//! SIGTERM (a pre-empted pod of the worker Job) must exit with the code that
//! makes the Job replace it.

use crate::common;

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use sluice::cli::Cli;

/// The `args:` lists of containers whose command is `sluice`.
fn sluice_command_lines(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut command_is_sluice = false;
    for line in text.lines() {
        let line = line.trim();
        if let Some(cmd) = line.strip_prefix("command:") {
            let cmd: Vec<String> =
                serde_json::from_str(cmd.trim()).expect("command is a JSON-style list");
            command_is_sluice = cmd.first().is_some_and(|c| c == "sluice");
        } else if let Some(args) = line.strip_prefix("args:") {
            let args: Vec<String> =
                serde_json::from_str(args.trim()).expect("args is a JSON-style list");
            if command_is_sluice {
                out.push(args);
            }
        }
    }
    out
}

#[test]
fn every_sluice_command_line_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs/k8s");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("jobs/k8s") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("manifest");
        for args in sluice_command_lines(&text) {
            let argv = std::iter::once("sluice".to_string()).chain(args.iter().cloned());
            if let Err(e) = Cli::try_parse_from(argv) {
                panic!(
                    "{}: `sluice {}` is refused by the CLI: {e}",
                    path.display(),
                    args.join(" ")
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 2,
        "expected the master and worker command lines, found {checked}"
    );
}

#[test]
fn a_bad_flag_would_be_caught() {
    let bad = r#"command: ["sluice"]
args: ["worker", "--master", "http://m:7070", "--no-such-flag"]"#;
    let lines = sluice_command_lines(bad);
    let argv = std::iter::once("sluice".to_string()).chain(lines[0].iter().cloned());
    assert!(Cli::try_parse_from(argv).is_err());
}

#[test]
fn a_worker_stopped_before_the_job_is_over_exits_with_its_stopped_exit_code() {
    use common::cluster::{signal, stderr_of, wait_exit, Job};

    let job = Job::new("parquet_row_groups", 1);
    let mut master = job.start_master(common::fixture("parquet_row_groups"));
    let out = tempfile::tempdir().expect("tempdir");
    let mut worker = job
        .worker_command(&common::ack_log(out.path(), 0.05))
        .args(["--batch-size", "100", "--grace", "5s", "-q"])
        .args(["--stopped-exit-code", "143"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start worker");
    common::wait_until("acknowledged rows", Duration::from_secs(60), || {
        common::count_lines(out.path(), "acked-") >= 200
    });
    signal(&worker, libc::SIGTERM);
    let status = wait_exit(&mut worker, "stopped worker");
    let stderr = stderr_of(&mut worker);
    let _ = master.kill();
    let _ = master.wait();
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("handed back"), "{stderr}");
}
