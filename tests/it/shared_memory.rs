//! Batches in shared memory: a trainer that asks for them (`shm message`, or `shm`
//! for whole streams, on its ack pipe) reads each batch from the memory file sluice
//! wrote it into, with no copy and, as lone messages, with every buffer on a 64-byte
//! boundary; the
//! memory stays bounded because regions are reused once acknowledged; a trainer that
//! dies is restarted and served its unacknowledged batches again; trainers that do
//! not ask keep reading the plain Arrow stream on stdin.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{assert_exactly_once, expected_dataset, fixture, python, sluice, Run};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn checker(out: &Path, extra: &str) -> String {
    format!(
        "PYTHONPATH={} {} {} --out {} {extra}",
        repo("python/sluice_trainer").display(),
        python(),
        repo("tests/trainers/shm_check.py").display(),
        out.display()
    )
}

fn train(data: &Path, exec: &str, options: &[&str]) -> Run {
    let mut args = vec![
        "train".to_string(),
        data.display().to_string(),
        "--exec".to_string(),
        exec.to_string(),
        "--quiet".to_string(),
    ];
    args.extend(options.iter().map(|o| o.to_string()));
    sluice(args)
}

fn reports(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("list reports") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("shm-") && name.ends_with(".json") {
            let text = std::fs::read_to_string(&path).expect("read report");
            out.push(common::parse_json(&text, name));
        }
    }
    out
}

/// How often each id was acknowledged, from the ids-*.txt files of `dir`.
fn ids(dir: &Path) -> HashMap<i64, u32> {
    let mut counts = HashMap::new();
    for entry in std::fs::read_dir(dir).expect("list ids") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.starts_with("ids-") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read ids");
        for line in text.lines() {
            *counts
                .entry(line.parse::<i64>().expect("an id"))
                .or_insert(0) += 1;
        }
    }
    counts
}

fn total_rows(dataset: &str) -> u64 {
    expected_dataset(dataset)["rows"].as_u64().expect("rows")
}

#[test]
fn batches_come_from_shared_memory_without_a_copy_and_memory_stays_bounded() {
    let reports = shared_run("");
    for report in &reports {
        assert_eq!(report["messages_offered"], true, "{report}");
        // Lone record batch messages, every buffer of each on 64 bytes.
        assert_eq!(report["messages"], report["shared"], "{report}");
        assert_eq!(report["aligned"], report["shared"], "{report}");
    }
}

#[test]
fn trainers_asking_for_whole_streams_still_get_them() {
    for report in shared_run("--stream") {
        assert_eq!(report["messages"], 0, "{report}");
    }
}

/// A 2-device run whose trainers ask for shared memory (with `extra` options to the
/// checker): every row once, nearly every batch from shared memory, the memory
/// file bounded. Returns the trainers' reports.
fn shared_run(extra: &str) -> Vec<Value> {
    let dataset = "parquet_row_groups";
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    let run = train(
        &fixture(dataset),
        &checker(&out, extra),
        &["--devices", "2", "--batch-size", "50"],
    );
    assert!(run.status.success(), "{run}");
    let reports = reports(&out);
    assert_eq!(reports.len(), 2, "one report per device: {run}");
    assert_exactly_once(&ids(&out), total_rows(dataset), "shared memory");
    let (mut batches, mut shared_batches) = (0, 0);
    for report in &reports {
        assert_eq!(report["offered"], true, "{report}");
        let received = report["batches"].as_u64().expect("batches");
        let shared = report["shared"].as_u64().expect("shared");
        batches += received;
        shared_batches += shared;
        // Batches written before sluice read the `shm` line come on stdin; the
        // window is 4 batches. (How the batches split between the two devices
        // is left to timing: one may get only a few.)
        assert!(
            shared + 4 >= received,
            "only {shared} of {received} batches were read from shared memory: {report}"
        );
        // Four slots of at least 1 MiB each, reused: never one region per batch.
        let max_file = report["max_file"].as_u64().expect("max_file");
        assert!(
            max_file <= 8 << 20,
            "the memory file grew to {max_file} bytes over {received} batches: {report}"
        );
    }
    assert!(batches > 20, "too few batches to show reuse: {batches}");
    assert!(
        shared_batches + 8 >= batches,
        "only {shared_batches} of {batches} batches came from shared memory"
    );
    reports
}

#[test]
fn a_trainer_killed_while_reading_shared_memory_is_restarted_without_losing_a_row() {
    let dataset = "parquet_row_groups";
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    let summary = tmp.path().join("summary.json");
    let run = train(
        &fixture(dataset),
        &checker(&out, "--die-after 7"),
        // One device: it gets every batch, so it reaches the 7th and dies
        // whatever the timing.
        &[
            "--devices",
            "1",
            "--batch-size",
            "50",
            "--summary-json",
            summary.to_str().expect("utf-8"),
        ],
    );
    assert!(run.status.success(), "{run}");
    assert!(out.join("died").exists(), "the trainer never died: {run}");
    assert_exactly_once(&ids(&out), total_rows(dataset), "after a restart");
    let text = std::fs::read_to_string(&summary).expect("summary");
    let summary: Value = common::parse_json(&text, "summary");
    assert_eq!(
        summary["rows"].as_u64(),
        Some(total_rows(dataset)),
        "{summary}"
    );
}

#[test]
fn trainers_that_do_not_ask_read_the_plain_stream() {
    let dataset = "parquet_row_groups";
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    let run = train(
        &fixture(dataset),
        &checker(&out, "--no-shm"),
        &["--devices", "2", "--batch-size", "50"],
    );
    assert!(run.status.success(), "{run}");
    let reports = reports(&out);
    assert_exactly_once(&ids(&out), total_rows(dataset), "plain stream");
    for report in &reports {
        assert_eq!(report["shared"], 0, "{report}");
    }
    // A trainer in any language: pyarrow's own stream reader, no sluice_trainer.
    let plain = tmp.path().join("plain");
    std::fs::create_dir(&plain).expect("mkdir");
    let script = format!(
        "import os, sys, pyarrow as pa\n\
         r = pa.ipc.open_stream(sys.stdin.buffer)\n\
         n = 0\n\
         for b in r:\n    n += b.num_rows; os.write(3, b'ack\\n')\n\
         open(os.path.join({:?}, 'rows-%d' % os.getpid()), 'w').write(str(n))\n",
        plain.display().to_string()
    );
    let script_path = tmp.path().join("plain.py");
    std::fs::write(&script_path, script).expect("write script");
    let exec = format!("{} {}", python(), script_path.display());
    let run = train(
        &fixture(dataset),
        &exec,
        &["--devices", "2", "--batch-size", "50"],
    );
    assert!(run.status.success(), "{run}");
    let mut rows = 0u64;
    for entry in std::fs::read_dir(&plain).expect("list") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read");
        rows += text.trim().parse::<u64>().expect("a count");
    }
    assert_eq!(rows, total_rows(dataset));
}
