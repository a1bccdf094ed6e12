//! Structured Streaming file sinks written by real Spark queries
//! (tests/fixtures/make_fixtures.py): sluice reads what their `_spark_metadata`
//! log committed, exactly the ids Spark's own reader returns, and never the part
//! files a killed micro-batch left behind.

use std::path::Path;

use crate::common::{
    ack_log, assert_exactly_once, assert_one_line_error, copy_dir, expected_dataset, fixture,
    recorded_ids, sluice,
};
use serde_json::Value;

const NOT_COMMITTED: &str = "not committed by the streaming query";

fn ls_json(dir: &Path) -> Value {
    sluice(["ls".as_ref(), "--json".as_ref(), dir.as_os_str()])
        .success()
        .json()
}

fn ls_table(dir: &Path) -> String {
    sluice(["ls".as_ref(), dir.as_os_str()]).success().stdout
}

/// The newest batch expected.json records for a sink fixture.
fn batch(name: &str) -> &'static Value {
    &expected_dataset(name)["sink"]["batch"]
}

#[test]
fn ls_shows_the_batch_and_ignores_what_the_killed_batch_left() {
    let name = "streaming_sink_killed";
    let exp = expected_dataset(name);
    let got = ls_json(&fixture(name));
    assert_eq!(got["sink"]["batch"], *batch(name), "{got}");
    assert_eq!(got["rows"], exp["rows"], "rows Spark's reader returns");
    assert_eq!(got["files"], exp["files"]);
    assert_eq!(got["complete"], true, "the log is the commit record");
    let stray = exp["uncommitted_files"]
        .as_array()
        .expect("uncommitted_files");
    assert!(!stray.is_empty(), "the fixture left no uncommitted file");
    let ignored = got["ignored"].as_array().expect("ignored");
    for file in stray {
        let file = file.as_str().expect("a name");
        let entry = ignored
            .iter()
            .find(|i| i["path"].as_str().is_some_and(|p| p.ends_with(file)))
            .unwrap_or_else(|| panic!("{file} is not listed as ignored: {got}"));
        assert_eq!(entry["reason"], NOT_COMMITTED);
    }
    let table = ls_table(&fixture(name));
    let head = table.lines().next().unwrap_or_default();
    assert!(
        head.ends_with(&format!("streaming file sink, batch {}", batch(name))),
        "{table}"
    );
    for file in stray {
        let line = format!("{} ({NOT_COMMITTED})", file.as_str().expect("a name"));
        assert!(table.contains(&line), "no `{line}` in:\n{table}");
    }
}

#[test]
fn a_compacted_log_gives_every_committed_file() {
    for name in ["streaming_sink", "streaming_sink_partitioned"] {
        let exp = expected_dataset(name);
        assert!(
            !exp["compact"].as_array().expect("compact").is_empty(),
            "{name}: the fixture has no .compact file"
        );
        let got = ls_json(&fixture(name));
        assert_eq!(got["sink"]["batch"], *batch(name), "{name}: {got}");
        assert_eq!(got["rows"], exp["rows"], "{name}");
        assert_eq!(got["files"], exp["files"], "{name}");
        assert_eq!(got["ignored"], Value::Array(Vec::new()), "{name}");
        for (path, rows) in exp["partitions"].as_object().expect("partitions") {
            let part = got["partitions"]
                .as_array()
                .expect("partitions")
                .iter()
                .find(|p| p["path"] == path.as_str())
                .unwrap_or_else(|| panic!("{name}: no partition {path}: {got}"));
            assert_eq!(part["rows"], *rows, "{name}: {path}");
        }
    }
}

#[test]
fn training_reads_exactly_the_ids_spark_reads() {
    for name in ["streaming_sink_killed", "streaming_sink_partitioned"] {
        let rows = expected_dataset(name)["rows"].as_u64().expect("rows");
        let out = tempfile::tempdir().expect("tempdir");
        let trainer = ack_log(out.path(), 0.0);
        let run = sluice([
            "train",
            fixture(name).to_str().expect("utf8"),
            "--quiet",
            "--batch-size",
            "16",
            "--devices",
            "2",
            "--exec",
            &trainer,
        ]);
        assert!(run.status.success(), "{run}");
        let acked = recorded_ids(out.path(), "acked-");
        assert_exactly_once(&acked, rows, name);
    }
}

#[test]
fn an_empty_sink_is_empty_output() {
    let name = "streaming_sink_empty";
    assert_eq!(
        *batch(name),
        Value::Null,
        "the fixture's query ran no batch"
    );
    let dir = fixture(name);
    let table = ls_table(&dir);
    assert!(
        table.contains("streaming file sink, no batch committed yet"),
        "{table}"
    );
    let data = dir.to_str().expect("utf8");
    let run = sluice(["train", data, "--quiet"]);
    assert_one_line_error(&run, &[data, "empty output", "--allow-empty"]);
    sluice(["train", data, "--quiet", "--allow-empty"]).success();
    // One batch of an empty input file: one zero-row file, no row.
    let got = ls_json(&fixture("streaming_sink_no_rows"));
    assert_eq!(
        (got["rows"].as_u64(), got["files"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(got["sink"]["batch"], 0);
}

#[test]
fn a_partition_directory_of_a_sink_is_listed_as_spark_does() {
    // `_spark_metadata` in a parent does not count, in Spark as here.
    let got = ls_json(&fixture("streaming_sink_partitioned").join("part=a"));
    assert_eq!(got["sink"], Value::Null, "{got}");
    assert!(got["rows"].as_u64() > Some(0));
}

/// A copy of sink `name` in `to` whose log names the copy's files (as if the
/// query had written there).
fn relocated_copy(name: &str, to: &Path) {
    copy_dir(&fixture(name), to);
    let from = format!("file://{}/", fixture(name).display());
    let into = format!("file://{}/", to.display());
    for entry in std::fs::read_dir(to.join("_spark_metadata")).expect("log dir") {
        let path = entry.expect("entry").path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            std::fs::remove_file(&path).expect("remove checksum");
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read batch file");
        std::fs::write(&path, text.replace(&from, &into)).expect("rewrite batch file");
    }
}

#[test]
fn a_broken_log_fails_naming_file_and_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Copied as is, the log names the original's files: outside the copy.
    let copy = tmp.path().join("copied");
    copy_dir(&fixture("streaming_sink"), &copy);
    let run = sluice(["ls".as_ref(), copy.as_os_str()]);
    assert_one_line_error(
        &run,
        &[
            "_spark_metadata/2.compact, line 2",
            "outside the sink directory",
        ],
    );

    let dir = tmp.path().join("sink");
    relocated_copy("streaming_sink", &dir);
    let exp = expected_dataset("streaming_sink");
    assert_eq!(
        ls_json(&dir)["rows"],
        exp["rows"],
        "the relocated copy reads the same"
    );
    let log = dir.join("_spark_metadata");
    let text = std::fs::read_to_string(log.join("3")).expect("batch 3");
    std::fs::write(log.join("3"), format!("{text}\n{{\"path\": 3")).expect("write");
    let run = sluice(["ls".as_ref(), dir.as_os_str()]);
    assert_one_line_error(&run, &["_spark_metadata/3, line 3", "bad JSON"]);
    std::fs::remove_file(log.join("3")).expect("remove batch 3");
    let run = sluice(["train".as_ref(), dir.as_os_str(), "--quiet".as_ref()]);
    assert_one_line_error(&run, &["_spark_metadata/3", "missing"]);
}
