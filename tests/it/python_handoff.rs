//! The numpy and torch forms of batches in shared memory: `sluice_trainer` reads a
//! lone record batch message from its header (numpy views at the offsets it names, no
//! pyarrow object per column). Under `sluice train --exec` on two devices, every row
//! must arrive once, the values must be those pyarrow reads from the same message,
//! and numbers without nulls must be views of the memory file. The header reader is
//! also checked against pyarrow on every flat type (`tests/python/message_forms.py`).

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{assert_exactly_once, expected_dataset, fixture, python, run, sluice};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs `tests/trainers/handoff_check.py` (with `extra` options) on two devices over
/// a fixture of numbers and strings (nulls: `message_forms.py`); checks every row once and returns
/// the trainers' reports.
fn checked_run(extra: &str) -> Vec<Value> {
    let dataset = "parquet_row_groups";
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    let exec = format!(
        "PYTHONPATH={} {} {} --out {} {extra}",
        repo("python/sluice_trainer").display(),
        python(),
        repo("tests/trainers/handoff_check.py").display(),
        out.display()
    );
    let data = fixture(dataset).display().to_string();
    let args: [&str; 9] = [
        "train",
        &data,
        "--exec",
        &exec,
        "--devices",
        "2",
        "--batch-size",
        "50",
        "--quiet",
    ];
    let done = sluice(args);
    assert!(done.status.success(), "{done}");
    let (mut reports, mut counts) = (Vec::new(), HashMap::new());
    for entry in std::fs::read_dir(&out).expect("list out") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let text = std::fs::read_to_string(&path).expect("read");
        if name.starts_with("handoff-") {
            reports.push(common::parse_json(&text, name));
        } else if name.starts_with("ids-") {
            for line in text.lines() {
                *counts
                    .entry(line.parse::<i64>().expect("an id"))
                    .or_insert(0) += 1;
            }
        }
    }
    assert_eq!(reports.len(), 2, "one report per device: {done}");
    let rows = expected_dataset(dataset)["rows"].as_u64().expect("rows");
    assert_exactly_once(&counts, rows, "numpy and torch forms");
    let batches: u64 = reports
        .iter()
        .map(|r| r["batches"].as_u64().expect("batches"))
        .sum();
    let header: u64 = reports
        .iter()
        .map(|r| r["header"].as_u64().expect("header"))
        .sum();
    // Batches written before sluice read `shm message` come on stdin (a window of 4).
    assert!(
        batches > 20 && header + 8 >= batches,
        "{header} of {batches} read from the header: {reports:?}"
    );
    for report in &reports {
        assert_eq!(report["mismatches"], Value::Array(vec![]), "{report}");
    }
    reports
}

#[test]
fn numpy_form_matches_pyarrow_with_numbers_in_place_and_strings_as_buffers() {
    let reports = checked_run("");
    let field = |key: &str| -> u64 { reports.iter().map(|r| r[key].as_u64().expect(key)).sum() };
    assert!(
        field("views") >= field("header"),
        "numbers were copied: {reports:?}"
    );
    assert!(
        field("strings") >= field("batches"),
        "strings not as Strings: {reports:?}"
    );
}

#[test]
fn torch_form_matches_the_record_batch_path_each_row_once() {
    crate::common::require_torch();
    let reports = checked_run("--torch");
    let views: u64 = reports
        .iter()
        .map(|r| r["views"].as_u64().expect("views"))
        .sum();
    assert!(views > 0, "no tensor shared the memory file: {reports:?}");
}

#[test]
fn header_reader_matches_pyarrow_on_every_flat_type() {
    let done = run(Command::new(python())
        .arg(repo("tests/python/message_forms.py"))
        .env("PYTHONPATH", repo("python/sluice_trainer")));
    assert!(done.status.success(), "{done}");
    assert!(
        done.stderr.contains("\nOK"),
        "the tests did not all run and pass: {done}"
    );
}
