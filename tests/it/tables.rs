//! Delta Lake tables written by real Spark with the real Delta connector
//! (tests/fixtures/make_tables.py): every version `ls` counts and `train`
//! delivers is exactly the version Spark reads (appends, a partitioned table,
//! an overwrite, deletion vectors, column mapping, schema evolution, a
//! compaction, a merge), time travel by version and by time, and the errors
//! for versions that do not exist.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::*;
use serde_json::Value;

/// The expected entries of every table of `kind`, by name.
fn tables(kind: &str) -> Vec<(&'static str, &'static Value)> {
    let all = tables_expected()["tables"]
        .as_object()
        .expect("tables/expected.json has no `tables` object");
    let found: Vec<_> = all
        .iter()
        .filter(|(_, t)| t["kind"] == kind)
        .map(|(name, t)| (name.as_str(), t))
        .collect();
    assert!(
        !found.is_empty(),
        "tables/expected.json has no {kind} table"
    );
    found
}

fn versions(table: &Value) -> &Vec<Value> {
    table["versions"]
        .as_array()
        .expect("a table entry without `versions`")
}

fn ids_of(version: &Value) -> BTreeSet<i64> {
    version["ids"]
        .as_array()
        .expect("a version without `ids`")
        .iter()
        .map(|v| v.as_i64().expect("a non-integer id"))
        .collect()
}

/// `sluice ls --json` of `dir` with `extra` flags.
fn ls(dir: &Path, extra: &[&str]) -> Value {
    let dir = dir.display().to_string();
    let mut args = vec!["ls", dir.as_str(), "--json"];
    args.extend_from_slice(extra);
    sluice(&args).success().json()
}

/// What one `train` delivered: ids with how often, and the trainers' value files.
struct Trained {
    ids: std::collections::HashMap<i64, u32>,
    sums: BTreeMap<String, f64>,
    nulls: BTreeMap<String, u64>,
    partitions: BTreeMap<String, u64>,
    columns: Vec<String>,
    summary: Value,
}

/// Trains on `dir` with two devices of the table-check trainer.
fn train(dir: &Path, extra: &[&str], partition_columns: &[&str]) -> Trained {
    let out = tempfile::tempdir().expect("tempdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/table_check.py");
    let exec = format!(
        "{} {} --out {} --partition-columns '{}'",
        python(),
        script.display(),
        out.path().display(),
        partition_columns.join(",")
    );
    let summary = out.path().join("summary.json");
    let dir = dir.display().to_string();
    let summary_arg = summary.display().to_string();
    let mut args = vec![
        "train",
        dir.as_str(),
        "--exec",
        &exec,
        "--devices",
        "2",
        "--batch-size",
        "37",
        "--quiet",
        "--summary-json",
        &summary_arg,
    ];
    args.extend_from_slice(extra);
    sluice(&args).success();
    let mut trained = Trained {
        ids: recorded_ids(out.path(), "ids-"),
        sums: BTreeMap::new(),
        nulls: BTreeMap::new(),
        partitions: BTreeMap::new(),
        columns: Vec::new(),
        summary: parse_json(
            &std::fs::read_to_string(&summary).expect("no summary written"),
            "summary",
        ),
    };
    for entry in std::fs::read_dir(out.path()).expect("list trainer output") {
        let path = entry.expect("list trainer output").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.starts_with("values-") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read values");
        let values = parse_json(&text, name);
        trained.columns = values["columns"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|c| c.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        for (column, sum) in values["sums"].as_object().into_iter().flatten() {
            *trained.sums.entry(column.clone()).or_default() += sum.as_f64().unwrap_or(0.0);
        }
        for (column, n) in values["nulls"].as_object().into_iter().flatten() {
            *trained.nulls.entry(column.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
        for (label, n) in values["partitions"].as_object().into_iter().flatten() {
            *trained.partitions.entry(label.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
    }
    trained
}

/// Every id of `version` arrived once, and no other.
#[track_caller]
fn assert_ids(trained: &Trained, version: &Value, what: &str) {
    let expected = ids_of(version);
    let twice: Vec<_> = trained.ids.iter().filter(|(_, &n)| n > 1).take(5).collect();
    assert!(twice.is_empty(), "{what}: ids delivered twice: {twice:?}");
    let got: BTreeSet<i64> = trained.ids.keys().copied().collect();
    let missing: Vec<_> = expected.difference(&got).take(5).collect();
    let extra: Vec<_> = got.difference(&expected).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: ids missing {missing:?}, ids not in that version (deleted or overwritten) {extra:?}"
    );
}

/// The values Spark summed for `version`, compared with what was trained.
#[track_caller]
fn assert_values(trained: &Trained, version: &Value, what: &str) {
    let columns: Vec<String> = version["columns"]
        .as_array()
        .expect("a version without `columns`")
        .iter()
        .filter_map(|c| c.as_str().map(String::from))
        .collect();
    let got: BTreeSet<&String> = trained.columns.iter().collect();
    let want: BTreeSet<&String> = columns.iter().collect();
    assert_eq!(got, want, "{what}: columns");
    for (column, sum) in version["sums"].as_object().into_iter().flatten() {
        let Some(sum) = sum.as_f64() else {
            continue; // every value null
        };
        let trained_sum = trained.sums.get(column).copied().unwrap_or(0.0);
        assert!(
            (trained_sum - sum).abs() <= 1e-6 * sum.abs().max(1.0),
            "{what}: sum of `{column}` is {trained_sum}, Spark read {sum}"
        );
    }
    for (column, n) in version["null_counts"].as_object().into_iter().flatten() {
        assert_eq!(
            trained.nulls.get(column).copied().unwrap_or(0),
            n.as_u64().unwrap_or(0),
            "{what}: nulls in `{column}`"
        );
    }
}

#[test]
fn every_delta_version_lists_and_trains_as_spark_reads_it() {
    for (name, table) in tables("delta") {
        let dir = table_dir(table);
        let partition_columns = partition_columns(table);
        let all = versions(table);
        for (i, version) in all.iter().enumerate() {
            let number = version["version"].as_u64().expect("a Delta version number");
            let what = format!("{name} version {number} ({})", version["operation"]);
            let latest = i + 1 == all.len();
            let flag = number.to_string();
            let mut extra: Vec<&str> = if latest {
                vec![]
            } else {
                vec!["--table-version", &flag]
            };
            let listing = ls(&dir, &extra);
            assert_eq!(listing["table"]["kind"], "delta", "{what}: {listing}");
            assert_eq!(listing["table"]["version"].as_u64(), Some(number), "{what}");
            assert_eq!(
                listing["rows"].as_u64(),
                version["count"].as_u64(),
                "{what}: ls rows differ from Spark's count"
            );
            if version["count"].as_u64() == Some(0) {
                // A version with no row (CREATE TABLE) is empty output.
                let mut args = vec!["train", dir.to_str().expect("utf8"), "--quiet"];
                args.extend_from_slice(&extra);
                let refused = sluice(&args);
                assert_eq!(refused.status.code(), Some(1), "{what}: {refused}");
                assert_one_line_error(&refused, &["empty output", "--allow-empty"]);
                extra.push("--allow-empty");
            }
            let trained = train(&dir, &extra, &partition_columns);
            assert_ids(&trained, version, &what);
            assert_values(&trained, version, &what);
            assert_eq!(
                trained.summary["table"]["version"].as_u64(),
                Some(number),
                "{what}: the summary records the version trained"
            );
            assert_partitions(&trained, version, &partition_columns, &what);
        }
    }
}

/// The columns Spark counted rows per value of (`partition_counts`).
fn partition_columns(table: &Value) -> Vec<&str> {
    table["partition_columns"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
        .unwrap_or_default()
}

/// The trained rows per partition value equal Spark's `partition_counts`.
#[track_caller]
fn assert_partitions(trained: &Trained, version: &Value, columns: &[&str], what: &str) {
    for entry in version["partition_counts"].as_array().into_iter().flatten() {
        let label = columns
            .iter()
            .map(|c| format!("{c}={}", plain(&entry[*c])))
            .collect::<Vec<_>>()
            .join("/");
        assert_eq!(
            trained.partitions.get(&label).copied(),
            entry["count"].as_u64(),
            "{what}: rows of partition {label} ({:?})",
            trained.partitions
        );
    }
}

/// A JSON value as Python's `str()` prints it (what the trainer labels with).
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "None".to_string(),
        other => other.to_string(),
    }
}

#[test]
fn delta_time_travel_by_timestamp_reads_the_version_then_current() {
    for (name, table) in tables("delta") {
        let dir = table_dir(table);
        for version in versions(table) {
            let number = version["version"].as_u64().expect("a Delta version number");
            let Some(ms) = version["timestamp_ms"].as_i64() else {
                panic!("{name}: version {number} has no timestamp_ms");
            };
            let at = ms.to_string();
            let listing = ls(&dir, &["--timestamp", &at]);
            assert_eq!(
                listing["table"]["version"].as_u64(),
                Some(number),
                "{name}: --timestamp {at} (version {number}'s commit time)"
            );
            assert_eq!(
                listing["rows"].as_u64(),
                version["count"].as_u64(),
                "{name}"
            );
        }
    }
}

#[test]
fn the_state_records_the_table_version_a_job_planned_from() {
    let (_, table) = tables("delta")
        .into_iter()
        .find(|(n, _)| *n == "delta/dv")
        .expect("delta/dv");
    let work = tempfile::tempdir().expect("tempdir");
    let state = work.path().join("state");
    let dir = table_dir(table).display().to_string();
    let state_arg = state.display().to_string();
    sluice([
        "train",
        dir.as_str(),
        "--table-version",
        "1",
        "--model",
        "none",
        "--quiet",
        "--state",
        state_arg.as_str(),
    ])
    .success();
    let job = parse_json(
        &std::fs::read_to_string(state.join("job.json")).expect("job.json"),
        "job.json",
    );
    assert_eq!(job["spec"]["table"]["kind"], "delta", "{job}");
    assert_eq!(job["spec"]["table"]["version"].as_u64(), Some(1), "{job}");
}

#[test]
fn delta_versions_that_do_not_exist_are_refused_in_one_line() {
    let (_, table) = tables("delta")[0];
    let dir = table_dir(table);
    let dir = dir.display().to_string();
    let run = sluice(["ls", dir.as_str(), "--table-version", "999"]).failure();
    assert_one_line_error(&run, &["no such version", "999"]);
    let run = sluice(["ls", dir.as_str(), "--timestamp", "2001-01-01"]).failure();
    assert_one_line_error(&run, &["no such version", "2001-01-01"]);
    let run = sluice(["ls", dir.as_str(), "--snapshot-id", "5"]).failure();
    assert_one_line_error(&run, &["--snapshot-id", "Delta"]);
    let plain = fixture("parquet_plain").display().to_string();
    let run = sluice(["ls", plain.as_str(), "--table-version", "1"]).failure();
    assert_one_line_error(&run, &["neither a Delta nor an Iceberg table"]);
}

#[test]
fn the_old_version_flag_is_refused_naming_table_version_and_version_alone_prints_sluices() {
    let (_, table) = tables("delta")[0];
    let dir = table_dir(table).display().to_string();
    for args in [
        vec!["train", dir.as_str(), "--version", "1"],
        vec!["ls", dir.as_str(), "--version=1"],
    ] {
        let run = sluice(args).failure();
        assert_eq!(run.status.code(), Some(64), "{run}");
        assert_one_line_error(&run, &["--table-version 1"]);
    }
    for command in ["train", "ls", "master", "worker", "run", "status"] {
        let run = sluice([command, "--version"]).success();
        let top = sluice(["--version"]).success();
        assert!(
            run.stdout
                .starts_with(&format!("sluice {} (", env!("CARGO_PKG_VERSION"))),
            "sluice {command} --version: {run}"
        );
        assert_eq!(run.stdout, top.stdout, "sluice {command} --version");
    }
}

#[test]
fn a_delta_directory_is_never_read_as_raw_files() {
    // Spark's overwrite leaves the old files in place: a listing would read
    // them too. The table holds only the rows of its last version.
    let (name, table) = tables("delta")
        .into_iter()
        .find(|(n, _)| n.contains("overwrite"))
        .expect("a Delta overwrite table");
    let dir = table_dir(table);
    let last = versions(table).last().expect("versions");
    let files_on_disk = walk_parquet(&dir);
    let live = last["files"].as_array().map(Vec::len).unwrap_or(0);
    assert!(
        files_on_disk > live,
        "{name}: the fixture should keep overwritten files on disk ({files_on_disk} files, {live} live)"
    );
    let listing = ls(&dir, &[]);
    assert_eq!(listing["files"].as_u64(), Some(live as u64), "{name}");
    assert_eq!(listing["rows"].as_u64(), last["count"].as_u64(), "{name}");
}

fn walk_parquet(dir: &Path) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("list table") {
        let path = entry.expect("list table").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() && !name.starts_with('_') {
            n += walk_parquet(&path);
        } else if name.ends_with(".parquet") && !name.starts_with('.') {
            n += 1;
        }
    }
    n
}

/// A copy of a Delta table as it stood at `version`: the commits after it
/// are moved aside (into the returned directory) to be put back one by one,
/// as if Spark committed them later.
struct GrowingTable {
    dir: PathBuf,
    later: PathBuf,
    _tmp: tempfile::TempDir,
}

impl GrowingTable {
    fn at(table: &Value, version: u64) -> GrowingTable {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("table");
        copy_dir(&table_dir(table), &dir);
        let later = tmp.path().join("later");
        std::fs::create_dir_all(&later).expect("mkdir");
        for entry in std::fs::read_dir(dir.join("_delta_log")).expect("list log") {
            let path = entry.expect("list log").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            let number = name.trim_start_matches('.').split('.').next().unwrap_or("");
            if let Ok(v) = number.parse::<u64>() {
                if v > version {
                    std::fs::rename(&path, later.join(&name)).expect("move commit aside");
                }
            }
        }
        GrowingTable {
            dir,
            later,
            _tmp: tmp,
        }
    }

    /// Puts back the commits up to `version`.
    fn commit_up_to(&self, version: u64) {
        for entry in std::fs::read_dir(&self.later).expect("list") {
            let path = entry.expect("list").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            let number = name.trim_start_matches('.').split('.').next().unwrap_or("");
            if number.parse::<u64>().is_ok_and(|v| v <= version) {
                std::fs::rename(&path, self.dir.join("_delta_log").join(&name))
                    .expect("put commit back");
            }
        }
    }
}

fn delta_table(name: &str) -> &'static Value {
    tables("delta")
        .into_iter()
        .find(|(n, _)| *n == format!("delta/{name}"))
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("tables/expected.json has no delta/{name}"))
}

/// Runs the job on `source` with a recording trainer into a fresh directory.
fn run_table_job(
    work: &Path,
    source: &Path,
    on_rewrite: Option<&str>,
) -> (Run, std::collections::HashMap<i64, u32>) {
    let ids = tempfile::tempdir_in(work).expect("tempdir");
    let state = work.join("state");
    let job = work.join("job.toml");
    let mut text = format!(
        "source = {:?}\nstate = {:?}\nexec = {:?}\nbatch-size = 41\ndevices = 2\nquiet = true\n",
        source.display().to_string(),
        state.display().to_string(),
        recorder(ids.path(), "")
    );
    if let Some(policy) = on_rewrite {
        text.push_str(&format!("on-rewrite = {policy:?}\n"));
    }
    std::fs::write(&job, text).expect("write job file");
    let run = sluice(["run", job.display().to_string().as_str(), "--json"]);
    let ids = recorded_ids(ids.path(), "ids-");
    (run, ids)
}

fn ids_between(table: &Value, before: Option<u64>, after: u64) -> BTreeSet<i64> {
    let at = |v: u64| {
        versions(table)
            .iter()
            .find(|x| x["version"].as_u64() == Some(v))
            .map(ids_of)
            .unwrap_or_else(|| panic!("no version {v}"))
    };
    let now = at(after);
    match before {
        Some(b) => now.difference(&at(b)).copied().collect(),
        None => now,
    }
}

#[track_caller]
fn assert_trained(ids: &std::collections::HashMap<i64, u32>, want: &BTreeSet<i64>, what: &str) {
    let twice: Vec<_> = ids.iter().filter(|(_, &n)| n > 1).take(5).collect();
    assert!(twice.is_empty(), "{what}: ids trained twice: {twice:?}");
    let got: BTreeSet<i64> = ids.keys().copied().collect();
    assert_eq!(got.len(), want.len(), "{what}: rows trained");
    assert_eq!(&got, want, "{what}: ids trained");
}

#[test]
fn a_scheduled_job_on_a_delta_table_trains_each_appended_row_once() {
    let table = delta_table("appends");
    let grow = GrowingTable::at(table, 0);
    let work = tempfile::tempdir().expect("tempdir");
    let (run, ids) = run_table_job(work.path(), &grow.dir, None);
    let report = run.success().json();
    assert_eq!(report["table"]["to"].as_u64(), Some(0), "{report}");
    assert_trained(
        &ids,
        &ids_between(table, None, 0),
        "first run: version 0 whole",
    );

    grow.commit_up_to(1);
    let (run, ids) = run_table_job(work.path(), &grow.dir, None);
    let report = run.success().json();
    assert_eq!(report["table"]["from"].as_u64(), Some(0), "{report}");
    assert_eq!(report["table"]["trains"], "appended", "{report}");
    assert_trained(
        &ids,
        &ids_between(table, Some(0), 1),
        "second run: the append of version 1",
    );

    grow.commit_up_to(2);
    let (run, ids) = run_table_job(work.path(), &grow.dir, None);
    run.success();
    assert_trained(
        &ids,
        &ids_between(table, Some(1), 2),
        "third run: the append of version 2",
    );

    let (run, ids) = run_table_job(work.path(), &grow.dir, None);
    let report = run.success().json();
    assert!(ids.is_empty(), "nothing new: nothing trained ({report})");
    let trained: Value = parse_json(
        &std::fs::read_to_string(work.path().join("state/trained.json")).expect("trained.json"),
        "trained.json",
    );
    assert_eq!(trained["table"]["version"].as_u64(), Some(2), "{trained}");
}

#[test]
fn a_delta_rewrite_follows_the_job_policy() {
    // dv: version 0 creates 0..999, version 1 deletes id % 7 == 0 (deletion
    // vectors), version 2 appends 1000..1299.
    let table = delta_table("dv");
    let grow = GrowingTable::at(table, 0);
    let work = tempfile::tempdir().expect("tempdir");
    let (run, _) = run_table_job(work.path(), &grow.dir, Some("fail"));
    run.success();
    grow.commit_up_to(2);

    let (run, ids) = run_table_job(work.path(), &grow.dir, Some("fail"));
    let run = run.failure();
    assert_eq!(run.status.code(), Some(2), "{run}");
    assert_one_line_error(
        &run,
        &[
            "rewritten after version 0",
            "version 1 (DELETE)",
            "on-rewrite",
        ],
    );
    assert!(ids.is_empty(), "fail trains nothing");

    let (run, ids) = run_table_job(work.path(), &grow.dir, Some("skip"));
    let report = run.success().json();
    // The delete only gave files deletion vectors: no row is new.
    assert_eq!(report["skipped_rewritten_rows"], 0, "{report}");
    let kinds: Vec<&str> = report["table"]["commits"]
        .as_array()
        .expect("commits")
        .iter()
        .filter_map(|c| c["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["rewrite", "append"], "{report}");
    assert_trained(
        &ids,
        &ids_between(table, Some(1), 2),
        "skip: only the append",
    );

    grow.commit_up_to(3);
    let (run, ids) = run_table_job(work.path(), &grow.dir, Some("retrain"));
    let report = run.success().json();
    assert_eq!(report["table"]["trains"], "all", "{report}");
    assert_trained(
        &ids,
        &ids_between(table, None, 3),
        "retrain: all of version 3, no deleted row",
    );
}

#[test]
fn a_delta_overwrite_stops_the_job_by_default_and_skip_counts_what_it_leaves() {
    // overwrite: version 0 writes 0..499, version 1 overwrites the table
    // with 1000..1399 (a WRITE in overwrite mode).
    let table = delta_table("overwrite");
    let grow = GrowingTable::at(table, 0);
    let work = tempfile::tempdir().expect("tempdir");
    let (run, _) = run_table_job(work.path(), &grow.dir, None);
    run.success();
    grow.commit_up_to(1);

    let (run, ids) = run_table_job(work.path(), &grow.dir, None);
    assert_eq!(run.status.code(), Some(2), "the default is fail: {run}");
    assert_one_line_error(
        &run,
        &[
            "version 1 (WRITE)",
            "on-rewrite = \"retrain\"",
            "on-rewrite = \"skip\"",
        ],
    );
    assert!(ids.is_empty(), "nothing trained: {run}");
    let trained: Value = parse_json(
        &std::fs::read_to_string(work.path().join("state/trained.json")).expect("trained.json"),
        "trained.json",
    );
    assert_eq!(
        trained["table"]["version"], 0,
        "nothing recorded: {trained}"
    );

    let overwritten = ids_between(table, None, 1).len() as u64;
    let (run, ids) = run_table_job(work.path(), &grow.dir, Some("skip"));
    let run = run.success();
    let report = run.json();
    assert!(ids.is_empty(), "skip trains no rewritten row: {report}");
    assert_eq!(
        report["skipped_rewritten_rows"].as_u64(),
        Some(overwritten),
        "{report}"
    );
    assert!(
        run.stderr.contains("WARN") && run.stderr.contains(&format!("rows={overwritten}")),
        "a warning counts them: {run}"
    );
    let trained: Value = parse_json(
        &std::fs::read_to_string(work.path().join("state/trained.json")).expect("trained.json"),
        "trained.json",
    );
    assert_eq!(trained["table"]["version"], 1, "{trained}");
    let last = trained["runs"].as_array().and_then(|r| r.last());
    assert_eq!(
        last.and_then(|r| r["skipped_rewritten_rows"].as_u64()),
        Some(overwritten),
        "{trained}"
    );
}

/// Writes the next commit of the Delta table at `dir` (at `version` now): a
/// delete of every file version 0 added, so the new version holds no row.
fn delete_everything(dir: &Path, version: u64) {
    let log = dir.join("_delta_log");
    let first = std::fs::read_to_string(log.join(format!("{:020}.json", 0))).expect("commit 0");
    let mut lines = vec![
        r#"{"commitInfo":{"timestamp":1700000000000,"operation":"DELETE","operationParameters":{}}}"#
            .to_string(),
    ];
    for line in first.lines() {
        let action = parse_json(line, "commit 0");
        if let Some(path) = action["add"]["path"].as_str() {
            lines.push(
                serde_json::json!({"remove": {"path": path, "deletionTimestamp": 1700000000000u64, "dataChange": true}})
                    .to_string(),
            );
        }
    }
    assert!(lines.len() > 1, "commit 0 adds no file");
    std::fs::write(
        log.join(format!("{:020}.json", version + 1)),
        lines.join("\n") + "\n",
    )
    .expect("write commit");
}

#[test]
fn an_empty_table_version_is_empty_output() {
    let table = delta_table("appends");
    let grow = GrowingTable::at(table, 0);
    delete_everything(&grow.dir, 0);
    let dir = grow.dir.display().to_string();
    let run = sluice(["train", dir.as_str(), "--quiet"]);
    assert_eq!(run.status.code(), Some(1), "{run}");
    assert_one_line_error(&run, &[dir.as_str(), "empty output", "--allow-empty"]);

    let work = tempfile::tempdir().expect("tempdir");
    let (run, ids) = run_table_job(work.path(), &grow.dir, None);
    assert_eq!(run.status.code(), Some(1), "{run}");
    assert_one_line_error(&run, &["version 1", "empty output", "allow-empty"]);
    assert!(ids.is_empty());
    let job = work.path().join("job.toml");
    let allowed = sluice(["run", job.display().to_string().as_str(), "--allow-empty"]).success();
    assert!(
        allowed.stderr.contains("empty output"),
        "a warning: {allowed}"
    );
}

#[test]
fn a_delta_compaction_is_recognised_and_not_trained_again() {
    let table = delta_table("compaction");
    let grow = GrowingTable::at(table, 2);
    let work = tempfile::tempdir().expect("tempdir");
    let (run, ids) = run_table_job(work.path(), &grow.dir, Some("fail"));
    run.success();
    assert_trained(&ids, &ids_between(table, None, 2), "first run");
    grow.commit_up_to(3);
    let (run, ids) = run_table_job(work.path(), &grow.dir, Some("fail"));
    let report = run.success().json();
    assert_eq!(
        report["table"]["commits"][0]["kind"], "compaction",
        "{report}"
    );
    assert!(ids.is_empty(), "a compaction trains nothing: {report}");
    assert_eq!(report["recorded"], true, "{report}");
}

#[test]
fn every_iceberg_snapshot_lists_and_trains_as_spark_reads_it() {
    for (name, table) in tables("iceberg") {
        let dir = table_dir(table);
        let partition_columns = partition_columns(table);
        for version in versions(table) {
            let id = version["snapshot_id"]
                .as_i64()
                .expect("an Iceberg snapshot id");
            let what = format!("{name} snapshot {id} ({})", version["operation"]);
            let flag = id.to_string();
            let extra = ["--snapshot-id", flag.as_str()];
            if name.contains("equality_delete")
                && version["delete_files"]
                    .as_array()
                    .is_some_and(|d| !d.is_empty())
            {
                let run = sluice([
                    "ls",
                    dir.display().to_string().as_str(),
                    "--snapshot-id",
                    &flag,
                ])
                .failure();
                assert_one_line_error(&run, &["equality delete"]);
                continue;
            }
            let listing = ls(&dir, &extra);
            assert_eq!(listing["table"]["kind"], "iceberg", "{what}: {listing}");
            assert_eq!(listing["table"]["version"].as_i64(), Some(id), "{what}");
            assert_eq!(
                listing["rows"].as_u64(),
                version["count"].as_u64(),
                "{what}: ls rows differ from Spark's count"
            );
            let trained = train(&dir, &extra, &partition_columns);
            assert_ids(&trained, version, &what);
            assert_values(&trained, version, &what);
            assert_partitions(&trained, version, &partition_columns, &what);
        }
    }
}

/// A copy of an Iceberg table as it stood at snapshot `id`: the metadata
/// files written after it are moved aside, to be put back later.
fn iceberg_at(table: &Value, id: i64) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("table");
    copy_dir(&table_dir(table), &dir);
    let later = tmp.path().join("later");
    std::fs::create_dir_all(&later).expect("mkdir");
    let meta = dir.join("metadata");
    let mut keep = 0;
    let mut numbered = Vec::new();
    for entry in std::fs::read_dir(&meta).expect("list metadata") {
        let path = entry.expect("list metadata").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        let Some(n) = name
            .strip_prefix('v')
            .and_then(|r| r.strip_suffix(".metadata.json"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let json = parse_json(
            &std::fs::read_to_string(&path).expect("read metadata"),
            &name,
        );
        if json["current-snapshot-id"].as_i64() == Some(id) {
            keep = keep.max(n);
        }
        numbered.push((n, name));
    }
    assert!(keep > 0, "no metadata file has snapshot {id} current");
    for (n, name) in numbered {
        if n > keep {
            std::fs::rename(meta.join(&name), later.join(&name)).expect("move aside");
        }
    }
    std::fs::write(meta.join("version-hint.text"), keep.to_string()).expect("version hint");
    (tmp, dir, later)
}

/// Puts every metadata file moved aside back (the table at its last snapshot).
fn iceberg_catch_up(dir: &Path, later: &Path) {
    let meta = dir.join("metadata");
    let mut last = 0;
    for entry in std::fs::read_dir(later).expect("list") {
        let path = entry.expect("list").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        if let Some(n) = name
            .strip_prefix('v')
            .and_then(|r| r.strip_suffix(".metadata.json"))
            .and_then(|n| n.parse::<u32>().ok())
        {
            last = last.max(n);
        }
        std::fs::rename(&path, meta.join(&name)).expect("put back");
    }
    std::fs::write(meta.join("version-hint.text"), last.to_string()).expect("version hint");
}

#[test]
fn an_iceberg_overwrite_stops_the_job_by_default_and_skip_counts_what_it_leaves() {
    // overwrite: a CTAS of 600 rows, then overwrites and deletes; the last
    // overwrite replaces the whole table with 300 rows.
    let table = tables("iceberg")
        .into_iter()
        .find(|(n, _)| *n == "iceberg/overwrite")
        .map(|(_, t)| t)
        .expect("iceberg/overwrite");
    let all = versions(table);
    let first = all[0]["snapshot_id"].as_i64().expect("id");
    let (_tmp, dir, later) = iceberg_at(table, first);
    let work = tempfile::tempdir().expect("tempdir");
    let (run, _) = run_table_job(work.path(), &dir, None);
    run.success();
    iceberg_catch_up(&dir, &later);

    let (run, ids) = run_table_job(work.path(), &dir, None);
    assert_eq!(run.status.code(), Some(2), "the default is fail: {run}");
    let second = all[1]["snapshot_id"].as_i64().expect("id");
    assert_one_line_error(
        &run,
        &[&format!("snapshot {second} (overwrite)"), "on-rewrite"],
    );
    assert!(ids.is_empty(), "nothing trained: {run}");

    let (run, ids) = run_table_job(work.path(), &dir, Some("skip"));
    let report = run.success().json();
    assert!(ids.is_empty(), "skip trains no rewritten row: {report}");
    let last = all.last().expect("versions");
    assert_eq!(
        report["skipped_rewritten_rows"].as_u64(),
        last["count"].as_u64(),
        "the rows of the last overwrite: {report}"
    );
}

#[test]
fn a_scheduled_job_on_an_iceberg_table_trains_appends_and_skips_a_compaction() {
    let table = tables("iceberg")
        .into_iter()
        .find(|(n, _)| *n == "iceberg/compaction")
        .map(|(_, t)| t)
        .expect("iceberg/compaction");
    let all = versions(table);
    let first = &all[0];
    let (_tmp, dir, later) = iceberg_at(table, first["snapshot_id"].as_i64().expect("id"));
    let work = tempfile::tempdir().expect("tempdir");
    let (run, ids) = run_table_job(work.path(), &dir, Some("fail"));
    run.success();
    assert_trained(&ids, &ids_of(first), "first run: the first snapshot");
    iceberg_catch_up(&dir, &later);
    // Three appends, then a `replace` (rewrite_data_files): the appends are
    // trained once; the compaction is recognised, so "fail" does not stop it.
    let (run, ids) = run_table_job(work.path(), &dir, Some("fail"));
    let report = run.success().json();
    let kinds: Vec<&str> = report["table"]["commits"]
        .as_array()
        .expect("commits")
        .iter()
        .filter_map(|c| c["kind"].as_str())
        .collect();
    assert_eq!(kinds.last(), Some(&"compaction"), "{report}");
    let last = all.last().expect("versions");
    let want: BTreeSet<i64> = ids_of(last).difference(&ids_of(first)).copied().collect();
    assert_trained(
        &ids,
        &want,
        "second run: the appends after the first snapshot",
    );
}
