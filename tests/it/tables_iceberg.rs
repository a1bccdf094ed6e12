//! Iceberg tables written by real Spark with the real Iceberg runtime
//! (tests/fixtures/make_tables.py), read through `connectors::table`: every
//! snapshot holds exactly the files Spark lists and, less the rows its
//! position deletes remove, exactly the rows Spark counts; time travel by
//! snapshot id and by time picks the snapshot Spark read; the commits after
//! a snapshot are classified as their operations say; equality deletes are
//! refused in one line; a table copied elsewhere still reads.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use crate::common::*;
use arrow::datatypes::DataType;
use connectors::table::{self, CommitKind, TableKind, TableSnapshot, TableVersion};
use connectors::{Error, Location};
use object_store::ObjectStoreExt;
use serde_json::Value;

/// Every Iceberg table of `tables/expected.json`, by name.
fn iceberg_tables() -> Vec<(&'static str, &'static Value)> {
    let all = tables_expected()["tables"]
        .as_object()
        .expect("tables/expected.json has no `tables` object");
    let found: Vec<_> = all
        .iter()
        .filter(|(_, t)| t["kind"] == "iceberg")
        .map(|(name, t)| (name.as_str(), t))
        .collect();
    assert!(
        found.len() >= 5,
        "tables/expected.json has {} Iceberg tables",
        found.len()
    );
    found
}

fn versions(table: &Value) -> &Vec<Value> {
    table["versions"]
        .as_array()
        .expect("a table entry without `versions`")
}

fn snapshot_id(version: &Value) -> i64 {
    version["snapshot_id"]
        .as_i64()
        .expect("a version without `snapshot_id`")
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().expect("a string").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether Spark's snapshot has equality delete files (which are refused).
fn has_equality_deletes(version: &Value) -> bool {
    strings(&version["delete_files"])
        .iter()
        .any(|f| f.contains("eq-delete"))
}

fn open(dir: &Path) -> Location {
    connectors::store::open(&dir.display().to_string()).expect("open the table's store")
}

/// The store path of a file Spark lists relative to the table at `loc`,
/// named as a listing of the store names it.
fn store_path(loc: &Location, relative: &str) -> object_store::path::Path {
    object_store::path::Path::parse(format!("{}/{relative}", loc.root))
        .expect("a store path of the fixture file")
}

fn arrow_type(spark: &str) -> DataType {
    match spark {
        "bigint" => DataType::Int64,
        "int" => DataType::Int32,
        "double" => DataType::Float64,
        "string" => DataType::Utf8,
        other => panic!("a Spark type this test does not map: {other}"),
    }
}

/// Checks one snapshot against what Spark read at it.
async fn check_snapshot(what: &str, loc: &Location, snap: &TableSnapshot, version: &Value) {
    assert_eq!(snap.kind, TableKind::Iceberg, "{what}");
    assert_eq!(snap.version, snapshot_id(version), "{what}: snapshot id");
    assert_eq!(
        snap.timestamp_ms,
        version["timestamp_ms"].as_i64(),
        "{what}: commit time"
    );
    assert!(
        snap.format_version.starts_with("iceberg format v"),
        "{what}: {}",
        snap.format_version
    );
    assert!(snap.partition_fields.is_empty(), "{what}: partition fields");
    let live: u64 = snap
        .files
        .iter()
        .map(|f| {
            let rows = f.rows.expect("Iceberg records every file's rows");
            assert!(
                f.deleted.windows(2).all(|w| w[0] < w[1]),
                "{what}: deleted positions of {} not sorted and unique",
                f.path
            );
            assert!(
                f.deleted.last().is_none_or(|p| *p < rows),
                "{what}: a deleted position past the end of {}",
                f.path
            );
            rows - f.deleted.len() as u64
        })
        .sum();
    assert_eq!(
        live,
        version["count"].as_u64().expect("count"),
        "{what}: rows less deletes"
    );
    let files: BTreeSet<String> = snap.files.iter().map(|f| f.path.to_string()).collect();
    let expected: BTreeSet<String> = strings(&version["files"])
        .iter()
        .map(|f| store_path(loc, f).to_string())
        .collect();
    assert_eq!(files, expected, "{what}: live data files");
    for file in &snap.files {
        let meta = loc
            .store
            .head(&file.path)
            .await
            .unwrap_or_else(|e| panic!("{what}: {} cannot be read: {e}", file.path));
        assert_eq!(meta.size, file.size, "{what}: size of {}", file.path);
        assert!(
            file.added_in.is_some(),
            "{what}: {} without added_in",
            file.path
        );
    }
    let columns: Vec<(String, DataType)> = snap
        .schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect();
    let spark_columns: Vec<(String, DataType)> = strings(&version["columns"])
        .into_iter()
        .map(|c| {
            let ty = arrow_type(version["types"][&c].as_str().expect("a column type"));
            (c, ty)
        })
        .collect();
    assert_eq!(columns, spark_columns, "{what}: schema");
    let named: Vec<&str> = snap
        .columns
        .by_field_id
        .iter()
        .map(|(_, n)| n.as_str())
        .collect();
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(named, names, "{what}: field ids of every column");
}

fn assert_refused_for_equality_deletes(what: &str, result: connectors::Result<TableSnapshot>) {
    match result {
        Err(e @ Error::Table { .. }) => {
            let text = e.to_string();
            assert!(text.contains("equality deletes"), "{what}: {text}");
            assert!(!text.contains('\n'), "{what}: not one line: {text}");
        }
        Err(other) => panic!("{what}: expected a table error, got {other}"),
        Ok(snap) => panic!(
            "{what}: snapshot {} with equality deletes was read",
            snap.version
        ),
    }
}

#[tokio::test]
async fn every_snapshot_reads_as_spark_counted_it() {
    for (name, table) in iceberg_tables() {
        let dir = table_dir(table);
        let loc = open(&dir);
        assert_eq!(
            table::detect(&loc).await.expect("detect"),
            Some(TableKind::Iceberg),
            "{name}"
        );
        let versions = versions(table);
        for version in versions {
            let id = snapshot_id(version);
            let what = format!("{name} snapshot {id}");
            let read =
                table::snapshot(&loc, TableKind::Iceberg, TableVersion::SnapshotId(id)).await;
            if has_equality_deletes(version) {
                assert_refused_for_equality_deletes(&what, read);
                continue;
            }
            let snap = read.unwrap_or_else(|e| panic!("{what}: {e}"));
            check_snapshot(&what, &loc, &snap, version).await;
            assert!(
                snap.format_version
                    .starts_with(&format!("iceberg format v{}", table["format_version"])),
                "{what}: {}",
                snap.format_version
            );
        }
        let last = versions.last().expect("a table without versions");
        let latest = table::snapshot(&loc, TableKind::Iceberg, TableVersion::Latest).await;
        if has_equality_deletes(last) {
            assert_refused_for_equality_deletes(name, latest);
        } else {
            let latest = latest.unwrap_or_else(|e| panic!("{name} latest: {e}"));
            check_snapshot(&format!("{name} latest"), &loc, &latest, last).await;
        }
    }
}

/// Checks that the snapshot current at `at` is `want` (`None`: none was).
async fn expect_at(name: &str, loc: &Location, at: i64, want: Option<&Value>) {
    let got = table::snapshot(loc, TableKind::Iceberg, TableVersion::Timestamp(at)).await;
    match (want, got) {
        (None, Err(Error::NoSuchVersion { .. })) => {}
        (None, other) => panic!("{name} at {at}: expected no snapshot, got {other:?}"),
        (Some(v), _) if has_equality_deletes(v) => {}
        (Some(v), Ok(snap)) => assert_eq!(snap.version, snapshot_id(v), "{name} at {at}"),
        (Some(_), Err(e)) => panic!("{name} at {at}: {e}"),
    }
}

#[tokio::test]
async fn time_travel_by_time_picks_the_snapshot_then_current() {
    for (name, table) in iceberg_tables() {
        let loc = open(&table_dir(table));
        let versions = versions(table);
        for (i, version) in versions.iter().enumerate() {
            let ts = version["timestamp_ms"].as_i64().expect("timestamp_ms");
            expect_at(name, &loc, ts, Some(version)).await;
            let before = if i == 0 { None } else { versions.get(i - 1) };
            expect_at(name, &loc, ts - 1, before).await;
        }
    }
}

#[tokio::test]
async fn missing_snapshots_and_delta_options_are_named() {
    let (name, table) = iceberg_tables()[0];
    let loc = open(&table_dir(table));
    let known = snapshot_id(&versions(table)[0]);
    match table::snapshot(&loc, TableKind::Iceberg, TableVersion::SnapshotId(12345)).await {
        Err(e @ Error::NoSuchVersion { .. }) => {
            let text = e.to_string();
            assert!(text.contains("12345"), "{name}: {text}");
            assert!(text.contains(&known.to_string()), "{name}: {text}");
        }
        other => panic!("{name}: expected NoSuchVersion, got {other:?}"),
    }
    match table::snapshot(&loc, TableKind::Iceberg, TableVersion::Version(1)).await {
        Err(e @ Error::InvalidOption { .. }) => {
            assert!(e.to_string().contains("--snapshot-id"), "{name}: {e}")
        }
        other => panic!("{name}: expected InvalidOption, got {other:?}"),
    }
    match table::changes(&loc, TableKind::Iceberg, 12345, TableVersion::Latest).await {
        Err(e @ Error::NoSuchVersion { .. }) => {
            assert!(e.to_string().contains("not an ancestor"), "{name}: {e}")
        }
        other => panic!("{name}: expected NoSuchVersion, got {other:?}"),
    }
}

fn expected_kind(operation: &str) -> CommitKind {
    match operation {
        "append" => CommitKind::Append,
        "replace" => CommitKind::Compaction,
        "overwrite" | "delete" => CommitKind::Rewrite,
        other => panic!("an operation this test does not map: {other}"),
    }
}

#[tokio::test]
async fn changes_classify_the_commits_after_each_snapshot() {
    for (name, table) in iceberg_tables() {
        let dir = table_dir(table);
        let loc = open(&dir);
        let versions = versions(table);
        // The newest snapshot this reads (equality deletes are refused).
        let Some(target) = versions.iter().rposition(|v| !has_equality_deletes(v)) else {
            continue;
        };
        let at = TableVersion::SnapshotId(snapshot_id(&versions[target]));
        for since in 0..=target {
            let what = format!("{name} since {}", snapshot_id(&versions[since]));
            let changes =
                table::changes(&loc, TableKind::Iceberg, snapshot_id(&versions[since]), at)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
            let got: Vec<(i64, String, CommitKind)> = changes
                .commits
                .iter()
                .map(|c| (c.version, c.operation.clone(), c.kind.clone()))
                .collect();
            let want: Vec<(i64, String, CommitKind)> = versions[since + 1..=target]
                .iter()
                .map(|v| {
                    let op = v["operation"].as_str().expect("operation").to_string();
                    let kind = expected_kind(&op);
                    (snapshot_id(v), op, kind)
                })
                .collect();
            assert_eq!(got, want, "{what}: commits");
            // A file was appended after `since` when the first snapshot
            // listing it is an append after `since`.
            let mut appended_want = BTreeSet::new();
            let mut seen: HashSet<String> = HashSet::new();
            for (i, v) in versions[..=target].iter().enumerate() {
                for f in strings(&v["files"]) {
                    if seen.insert(f.clone()) && i > since && v["operation"] == "append" {
                        appended_want.insert(f);
                    }
                }
            }
            // Kept: still live at the target, or moved away only by a
            // compaction (`replace`) in the window, which keeps its rows.
            let kept = |f: &String| {
                let mut added = false;
                for v in &versions[since + 1..=target] {
                    let present = strings(&v["files"]).contains(f);
                    if present {
                        added = true;
                    } else if added {
                        return v["operation"] == "replace";
                    }
                }
                true
            };
            let appended_want: BTreeSet<String> = appended_want
                .iter()
                .filter(|f| kept(f))
                .map(|f| store_path(&loc, f).to_string())
                .collect();
            let appended: BTreeSet<String> = changes
                .appended
                .iter()
                .map(|f| f.path.to_string())
                .collect();
            assert_eq!(appended, appended_want, "{what}: appended files");
            assert_eq!(
                changes.snapshot.version,
                snapshot_id(&versions[target]),
                "{what}"
            );
        }
    }
}

#[tokio::test]
async fn a_copied_table_and_a_metadata_file_read_where_they_are() {
    let (name, table) = iceberg_tables()
        .into_iter()
        .find(|(name, _)| name.ends_with("mor_delete"))
        .expect("tables/expected.json has no iceberg/mor_delete");
    let from = table_dir(table);
    let copy = tempfile::tempdir().expect("tempdir");
    let to = copy.path().join("elsewhere/mor_delete");
    copy_dir(&from, &to);
    let loc = open(&to);
    let last = versions(table).last().expect("versions");
    let snap = table::snapshot(&loc, TableKind::Iceberg, TableVersion::Latest)
        .await
        .unwrap_or_else(|e| panic!("{name} copied: {e}"));
    check_snapshot(&format!("{name} copied"), &loc, &snap, last).await;
    assert!(
        snap.files.iter().any(|f| !f.deleted.is_empty()),
        "{name}: no position deletes applied"
    );

    // Every metadata file given itself reads its own current snapshot.
    let mut metadata_files: Vec<PathBuf> = std::fs::read_dir(to.join("metadata"))
        .expect("metadata dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
        .collect();
    metadata_files.sort();
    assert!(metadata_files.len() >= 2, "{name}: metadata files");
    let mut read = 0;
    for file in metadata_files {
        let text = std::fs::read_to_string(&file).expect("metadata file");
        let current =
            parse_json(&text, &file.display().to_string())["current-snapshot-id"].as_i64();
        let Some(version) = versions(table)
            .iter()
            .find(|v| Some(snapshot_id(v)) == current)
        else {
            continue;
        };
        let loc = open(&file);
        assert_eq!(
            table::detect(&loc).await.expect("detect"),
            Some(TableKind::Iceberg)
        );
        let snap = table::snapshot(&loc, TableKind::Iceberg, TableVersion::Latest)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        check_snapshot(&file.display().to_string(), &open(&to), &snap, version).await;
        read += 1;
    }
    assert!(read >= 2, "{name}: {read} metadata files read");
}
