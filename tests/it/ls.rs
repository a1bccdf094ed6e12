//! `sluice ls` against real Spark output: every count is checked against what Spark
//! itself counted (`expected.json`, written by tests/fixtures/make_fixtures.py).

use crate::common;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::{assert_one_line_error, expected_dataset, expected_datasets, fixture, sluice};
use serde_json::Value;

// ------------------------------------------------------------------ helpers

/// `sluice ls --json [extra] DIR`, which must succeed; its JSON.
fn ls_json(dir: &Path, extra: &[&str]) -> Value {
    sluice(ls_args(dir, extra, true)).success().json()
}

/// `sluice ls [extra] DIR` (the table for people), which must succeed; its stdout.
fn ls_table(dir: &Path, extra: &[&str]) -> String {
    sluice(ls_args(dir, extra, false)).success().stdout
}

fn ls_args(dir: &Path, extra: &[&str], json: bool) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["ls".into()];
    if json {
        args.push("--json".into());
    }
    args.extend(extra.iter().map(OsString::from));
    args.push(dir.into());
    args
}

/// Datasets Spark could read, with their expected entries (the file-path fixture is
/// left to its own test: `ls` wants a directory).
fn readable_datasets() -> Vec<(&'static str, &'static Value)> {
    expected_datasets()
        .iter()
        .filter(|(_, e)| e.get("rows").is_some() && e["is_file"] != Value::Bool(true))
        .map(|(name, e)| (name.as_str(), e))
        .collect()
}

/// What `complete` sluice must report: Spark's answer, where "cannot tell" (null,
/// no markers at all) is reported as not complete.
fn expected_complete(entry: &Value) -> bool {
    entry["complete"].as_bool().unwrap_or(false)
}

/// The listing's partitions by their path.
fn partitions_by_path(listing: &Value) -> BTreeMap<String, &Value> {
    listing["partitions"]
        .as_array()
        .expect("`partitions` is not a list")
        .iter()
        .map(|p| {
            (
                p["path"]
                    .as_str()
                    .expect("partition without a `path`")
                    .to_string(),
                p,
            )
        })
        .collect()
}

/// One partition of a listing, by path; panics naming the paths there are.
#[track_caller]
fn partition<'a>(listing: &'a Value, path: &str) -> &'a Value {
    let parts = partitions_by_path(listing);
    parts
        .get(path)
        .copied()
        .unwrap_or_else(|| panic!("no partition `{path}`; partitions: {:?}", parts.keys()))
}

/// The schema field called `name`; panics naming the fields there are.
#[track_caller]
fn field<'a>(listing: &'a Value, name: &str) -> &'a Value {
    let fields = listing["schema"]
        .as_array()
        .expect("`schema` is not a list");
    fields
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| {
            let names: Vec<&Value> = fields.iter().map(|f| &f["name"]).collect();
            panic!("no column `{name}` in the schema; columns: {names:?}")
        })
}

fn field_names(listing: &Value) -> Vec<String> {
    listing["schema"]
        .as_array()
        .expect("`schema` is not a list")
        .iter()
        .map(|f| {
            f["name"]
                .as_str()
                .expect("schema field without a name")
                .to_string()
        })
        .collect()
}

/// Spark's partition values as sluice reports them: the string on disk, unescaped.
/// Uses `partition_values_as_strings` when the fixture recorded it (typed values such
/// as `7.0` for `007` cannot be turned back into the original), else renders Spark's
/// integers as strings.
fn expected_values(entry: &Value, path: &str) -> Value {
    if let Some(v) = entry
        .get("partition_values_as_strings")
        .and_then(|m| m.get(path))
    {
        return v.clone();
    }
    let typed = entry["partition_values"][path]
        .as_object()
        .unwrap_or_else(|| panic!("expected.json has no partition_values for `{path}`"));
    typed
        .iter()
        .map(|(col, v)| {
            let s = match v {
                Value::Null => Value::Null,
                Value::String(s) => Value::String(s.clone()),
                Value::Number(n) if n.is_i64() || n.is_u64() => Value::String(n.to_string()),
                other => panic!(
                    "`{path}`: cannot compare Spark's typed value {other} with a string; \
                     the fixture should record partition_values_as_strings"
                ),
            };
            (col.clone(), s)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Column names of a Spark `simpleString` schema: `struct<id:bigint,p:int>`.
fn spark_columns(schema: &str) -> Vec<(String, String)> {
    let inner = schema
        .strip_prefix("struct<")
        .and_then(|s| s.strip_suffix('>'))
        .unwrap_or_else(|| panic!("not a Spark struct schema: {schema}"));
    let mut columns = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            ',' if depth == 0 => {
                columns.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !inner.is_empty() {
        columns.push(&inner[start..]);
    }
    columns
        .into_iter()
        .map(|c| {
            let (name, ty) = c
                .split_once(':')
                .unwrap_or_else(|| panic!("bad column `{c}`"));
            (name.to_string(), ty.to_string())
        })
        .collect()
}

/// How sluice (Arrow) prints a Spark type, for the types the fixtures use.
fn arrow_type(spark_type: &str) -> Option<&'static str> {
    Some(match spark_type {
        "bigint" => "Int64",
        "int" => "Int32",
        "double" => "Float64",
        "string" => "Utf8",
        "date" => "Date32",
        "timestamp" => "Timestamp(µs)",
        _ => return None,
    })
}

/// `(files, bytes)` per partition directory of a dataset's live files, measured on disk.
fn live_files_per_dir(name: &str, entry: &Value) -> BTreeMap<String, (u64, u64)> {
    let file_rows = entry["file_rows"]
        .as_object()
        .unwrap_or_else(|| panic!("{name}: expected.json has no file_rows"));
    let mut dirs: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for file in file_rows.keys() {
        let dir = file.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        let path = fixture(name).join(file);
        let size = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .len();
        let totals = dirs.entry(dir.to_string()).or_default();
        totals.0 += 1;
        totals.1 += size;
    }
    dirs
}

/// The listing's `field` as a u64.
#[track_caller]
fn num(listing: &Value, field: &str) -> u64 {
    listing[field]
        .as_u64()
        .unwrap_or_else(|| panic!("`{field}` is not a count: {}", listing[field]))
}

/// File names listed under `ignored` (each entry has a `path`, maybe a URL).
fn ignored_names(listing: &Value) -> Vec<String> {
    listing["ignored"]
        .as_array()
        .expect("`ignored` is not a list")
        .iter()
        .map(|i| {
            let path = i["path"].as_str().expect("ignored entry without a `path`");
            path.rsplit('/').next().unwrap_or(path).to_string()
        })
        .collect()
}

/// What the table says about completeness, from the first line mentioning it.
#[derive(Debug, PartialEq)]
enum Claim {
    Complete,
    NotComplete,
    Unknown,
    Silent,
}

fn completeness_claim(table: &str) -> Claim {
    let Some(line) = table
        .lines()
        .find(|l| l.to_lowercase().contains("complete"))
    else {
        return Claim::Silent;
    };
    let line = line.to_lowercase();
    if line.contains("not complete") || line.contains("incomplete") {
        Claim::NotComplete
    } else if line.contains("unknown") {
        Claim::Unknown
    } else {
        Claim::Complete
    }
}

/// Panics listing every problem found, if any.
#[track_caller]
fn assert_no_problems(what: &str, problems: &[String]) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

// ------------------------------------------------------- every dataset vs Spark

#[test]
fn totals_match_spark() {
    let mut problems = Vec::new();
    for (name, exp) in readable_datasets() {
        let got = ls_json(&fixture(name), &[]);
        for key in ["rows", "files"] {
            if got[key] != exp[key] {
                problems.push(format!(
                    "{name}: {key} is {}, Spark says {}",
                    got[key], exp[key]
                ));
            }
        }
        let complete = Value::Bool(expected_complete(exp));
        if got["complete"] != complete {
            problems.push(format!(
                "{name}: complete is {}, expected {complete} (Spark: {})",
                got["complete"], exp["complete"]
            ));
        }
        if exp["files"].as_u64() > Some(0) && got["format"] != exp["format"] {
            problems.push(format!(
                "{name}: format is {}, expected {}",
                got["format"], exp["format"]
            ));
        }
        let disk_bytes: u64 = live_files_per_dir(name, exp).values().map(|(_, b)| b).sum();
        if got["bytes"] != disk_bytes {
            problems.push(format!(
                "{name}: bytes is {}, the live files hold {disk_bytes}",
                got["bytes"]
            ));
        }
    }
    assert_no_problems("`sluice ls --json` totals differ from Spark's", &problems);
}

#[test]
fn partition_rows_and_values_match_spark() {
    let mut problems = Vec::new();
    for (name, exp) in readable_datasets() {
        let got = ls_json(&fixture(name), &[]);
        let parts = partitions_by_path(&got);
        let expected_rows = exp["partitions"].as_object().expect("no partitions map");
        if expected_rows.is_empty() {
            // Unpartitioned: everything in the root, no partition values.
            for (path, p) in &parts {
                if !path.is_empty() || p["values"] != serde_json::json!({}) {
                    problems.push(format!(
                        "{name}: unpartitioned, yet lists partition `{path}` with values {}",
                        p["values"]
                    ));
                }
            }
            continue;
        }
        let got_rows: serde_json::Map<String, Value> = parts
            .iter()
            .map(|(path, p)| (path.clone(), p["rows"].clone()))
            .collect();
        if &got_rows != expected_rows {
            problems.push(format!(
                "{name}: rows per partition\n    sluice: {}\n    Spark:  {}",
                Value::from(got_rows),
                exp["partitions"]
            ));
        }
        for path in expected_rows.keys() {
            let Some(p) = parts.get(path) else { continue };
            let want = expected_values(exp, path);
            if p["values"] != want {
                problems.push(format!(
                    "{name}: `{path}` has values {}, expected {want}",
                    p["values"]
                ));
            }
        }
    }
    assert_no_problems("partitions differ from Spark's", &problems);
}

#[test]
fn partition_files_and_bytes_match_disk() {
    let mut problems = Vec::new();
    for (name, exp) in readable_datasets() {
        let got = ls_json(&fixture(name), &[]);
        let got: BTreeMap<String, (u64, u64)> = partitions_by_path(&got)
            .into_iter()
            .map(|(path, p)| (path, (num(p, "files"), num(p, "bytes"))))
            .collect();
        let want = live_files_per_dir(name, exp);
        if got != want {
            problems.push(format!(
                "{name}: (files, bytes) per partition\n    sluice:     {got:?}\n    live files: {want:?}"
            ));
        }
    }
    assert_no_problems(
        "partition files/bytes differ from the live files on disk",
        &problems,
    );
}

#[test]
fn schema_matches_spark() {
    let mut problems = Vec::new();
    for (name, exp) in readable_datasets() {
        if exp["files"].as_u64() == Some(0) {
            continue; // no data file: nothing to discover a schema from
        }
        let got = ls_json(&fixture(name), &[]);
        let spark = spark_columns(exp["schema"].as_str().expect("no schema in expected.json"));
        let want_names: Vec<&str> = spark.iter().map(|(n, _)| n.as_str()).collect();
        if field_names(&got) != want_names {
            problems.push(format!(
                "{name}: columns are {:?}, Spark has {want_names:?}",
                field_names(&got)
            ));
            continue;
        }
        let partition_cols = exp["partition_schema"]
            .as_object()
            .expect("no partition_schema");
        for (col, spark_type) in &spark {
            let f = field(&got, col);
            let is_partition = partition_cols.contains_key(col);
            if f["partition"] != is_partition {
                problems.push(format!(
                    "{name}: `{col}` has partition={}, expected {is_partition}",
                    f["partition"]
                ));
            }
            // Spark's CSV reader keeps every data column a string unless told to infer;
            // only partition columns are comparable there.
            if exp["format"] == "csv" && !is_partition {
                continue;
            }
            let want = arrow_type(spark_type)
                .unwrap_or_else(|| panic!("{name}: no Arrow name for Spark type {spark_type}"));
            if f["type"] != want {
                problems.push(format!(
                    "{name}: `{col}` is {}, Spark's {spark_type} is {want}",
                    f["type"]
                ));
            }
        }
    }
    assert_no_problems("schemas differ from Spark's", &problems);
}

#[test]
fn table_shows_total_rows_and_completeness() {
    let mut problems = Vec::new();
    for (name, exp) in readable_datasets() {
        let table = ls_table(&fixture(name), &[]);
        let rows = exp["rows"].as_u64().expect("rows");
        if !table.contains(&format!("{rows} rows")) {
            problems.push(format!(
                "{name}: table does not say `{rows} rows`:\n{table}"
            ));
        }
        let claim = completeness_claim(&table);
        if let Some(sink) = exp.get("sink") {
            // A streaming sink's log is its commit record: the table names its batch.
            let status = format!("streaming file sink, batch {}", sink["batch"]);
            if !table.lines().next().is_some_and(|l| l.ends_with(&status)) {
                problems.push(format!(
                    "{name}: the first line does not end `{status}`:\n{table}"
                ));
            }
            continue;
        }
        let ok = match exp["complete"] {
            Value::Bool(true) => claim == Claim::Complete,
            Value::Bool(false) => claim == Claim::NotComplete,
            _ => claim == Claim::NotComplete || claim == Claim::Unknown,
        };
        if !ok {
            problems.push(format!(
                "{name}: table claims {claim:?}, Spark's complete is {}:\n{table}",
                exp["complete"]
            ));
        }
    }
    assert_no_problems("the table is wrong", &problems);
}

// ----------------------------------------------------------- layout rules

#[test]
fn conflicting_partition_columns_fail_naming_both_files() {
    let dir = fixture("conflict_cols");
    for json in [false, true] {
        let run = sluice(ls_args(&dir, &[], json));
        assert_one_line_error(&run, &["a=1/b=2/f.parquet", "a=1/f.parquet"]);
    }
}

#[test]
fn root_file_of_partitioned_table_is_ignored_and_reported() {
    let exp = expected_dataset("root_file");
    let got = ls_json(&fixture("root_file"), &[]);
    assert_eq!(
        got["rows"], exp["rows"],
        "rows must not include the root file"
    );
    let ignored = ignored_names(&got);
    for f in exp["ignored_files"].as_array().expect("ignored_files") {
        let f = f.as_str().unwrap();
        assert!(
            ignored.iter().any(|i| i == f),
            "`{f}` should be in `ignored`: {ignored:?}"
        );
    }
    let parts = partitions_by_path(&got);
    assert!(
        !parts.contains_key(""),
        "the root file must not form a partition: {:?}",
        parts.keys()
    );
}

#[test]
fn dbio_uncommitted_files_are_skipped() {
    let exp = expected_dataset("dbio");
    let got = ls_json(&fixture("dbio"), &[]);
    assert_eq!(
        got["rows"], 450,
        "rows of the live (committed or unmarked) DBIO files"
    );
    assert_eq!(got["files"], 2, "only two DBIO files are live");
    let ignored = ignored_names(&got);
    for f in exp["dead_files"].as_array().expect("dead_files") {
        let f = f.as_str().unwrap();
        assert!(
            ignored.iter().any(|i| i == f),
            "dead file `{f}` should be in `ignored`: {ignored:?}"
        );
    }
    for f in exp["live_files"].as_array().expect("live_files") {
        let f = f.as_str().unwrap();
        assert!(
            !ignored.iter().any(|i| i == f),
            "live file `{f}` is listed as ignored"
        );
    }
}

#[test]
fn magic_committer_in_flight_shows_nothing() {
    let dir = fixture("magic_inflight");
    let got = ls_json(&dir, &[]);
    assert_eq!(
        got["rows"], 0,
        "a magic committer's pending data is not visible"
    );
    assert_eq!(
        got["files"], 0,
        "a magic committer's pending data is not visible"
    );
    assert_eq!(got["complete"], false, "no _SUCCESS and a job in flight");
    let in_flight = got["in_flight"]
        .as_array()
        .expect("`in_flight` is not a list");
    assert!(
        in_flight
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.contains("__magic_job-123"))),
        "`in_flight` should name __magic_job-123: {in_flight:?}"
    );
    let table = ls_table(&dir, &[]);
    assert_eq!(
        completeness_claim(&table),
        Claim::NotComplete,
        "table:\n{table}"
    );
}

#[test]
fn failed_job_is_not_complete_and_names_temporary() {
    let got = ls_json(&fixture("failed_job"), &[]);
    assert_eq!(got["complete"], false);
    assert_eq!(
        got["rows"], 900,
        "the task attempt under _temporary must not be counted"
    );
    let in_flight = got["in_flight"]
        .as_array()
        .expect("`in_flight` is not a list");
    assert!(
        in_flight
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.starts_with("_temporary"))),
        "`in_flight` should name _temporary: {in_flight:?}"
    );
}

#[test]
fn no_markers_is_not_reported_complete() {
    let dir = fixture("no_markers");
    let got = ls_json(&dir, &[]);
    assert_eq!(
        got["complete"], false,
        "without _SUCCESS, completeness cannot be claimed"
    );
    assert_eq!(
        got["in_flight"],
        serde_json::json!([]),
        "nothing is in flight"
    );
    let table = ls_table(&dir, &[]);
    let claim = completeness_claim(&table);
    assert!(
        claim == Claim::NotComplete || claim == Claim::Unknown,
        "table should not claim completeness ({claim:?}):\n{table}"
    );
}

#[test]
fn underscore_partition_dirs_with_equals_are_kept() {
    let got = ls_json(&fixture("hidden"), &[]);
    assert_eq!(
        got["rows"], 160,
        "`_col=1` and `_col=2` hold data (Spark keeps them)"
    );
    assert_eq!(partition(&got, "_col=1")["values"]["_col"], "1");
    assert_eq!(partition(&got, "_col=2")["values"]["_col"], "2");
    assert_eq!(field(&got, "_col")["partition"], true);
}

#[test]
fn hidden_dirs_inside_partitions_are_skipped() {
    let got = ls_json(&fixture("hidden_dirs"), &[]);
    assert_eq!(
        got["rows"], 120,
        "rows under a=1/_hidden or a=1/.staging leaked in"
    );
    assert_eq!(
        got["files"], 1,
        "files under a=1/_hidden or a=1/.staging leaked in"
    );
    let parts = partitions_by_path(&got);
    assert_eq!(parts.keys().collect::<Vec<_>>(), ["a=1"], "partitions");
}

#[test]
fn crc_siblings_are_not_data() {
    let got = ls_json(&fixture("crc_siblings"), &[]);
    assert_eq!(got["files"], 1, ".crc checksum files are not data files");
    assert_eq!(got["rows"], 300);
}

#[test]
fn folder_marker_keys_are_not_partitions() {
    let got = ls_json(&fixture("folder_markers"), &[]);
    assert_eq!(got["rows"], 250);
    assert_eq!(got["files"], 1, "`year=2024_$folder$` is not a data file");
    let parts = partitions_by_path(&got);
    assert_eq!(
        parts.keys().collect::<Vec<_>>(),
        ["year=2024"],
        "partitions"
    );
    assert_eq!(partition(&got, "year=2024")["values"]["year"], "2024");
}

#[test]
fn escaped_partition_values_are_unescaped() {
    let got = ls_json(&fixture("escaped"), &[]);
    assert_eq!(partition(&got, "s=a%3Db%2Fc%25")["values"]["s"], "a=b/c%");
    assert_eq!(partition(&got, "s=x%3Ay")["values"]["s"], "x:y");
    assert_eq!(partition(&got, "s=plain")["values"]["s"], "plain");
    assert_eq!(partition(&got, "s=a%3Db%2Fc%25")["rows"], 40);
}

#[test]
fn hive_default_partition_reads_as_null() {
    let got = ls_json(&fixture("parquet_partitioned"), &[]);
    let p = partition(
        &got,
        "country=__HIVE_DEFAULT_PARTITION__/city=__HIVE_DEFAULT_PARTITION__",
    );
    assert_eq!(p["values"]["country"], Value::Null);
    assert_eq!(p["values"]["city"], Value::Null);
    let p = partition(&got, "country=BR/city=__HIVE_DEFAULT_PARTITION__");
    assert_eq!(
        p["values"],
        serde_json::json!({"country": "BR", "city": null})
    );
}

#[test]
fn date_and_timestamp_partitions_widen_to_timestamp() {
    let got = ls_json(&fixture("widen_ts"), &[]);
    assert_eq!(
        field(&got, "d")["type"],
        "Timestamp(µs)",
        "d=2024-01-01 + d=2024-01-02 10:00:00"
    );
    assert_eq!(field(&got, "d")["partition"], true);
    assert_eq!(
        partition(&got, "d=2024-01-02 10%3A00%3A00")["values"]["d"],
        "2024-01-02 10:00:00"
    );
    let got = ls_json(&fixture("json"), &[]);
    assert_eq!(
        field(&got, "day")["type"],
        "Date32",
        "dates alone stay dates"
    );
}

#[test]
fn int_and_double_partitions_widen_to_double() {
    let got = ls_json(&fixture("widen_num"), &[]);
    assert_eq!(field(&got, "id2")["type"], "Float64", "id2=007 + id2=1.5");
    let got = ls_json(&fixture("avro"), &[]);
    assert_eq!(field(&got, "p")["type"], "Int32", "p=0 + p=1");
}

#[test]
fn partitions_with_a_string_widen_to_string() {
    let got = ls_json(&fixture("widen_str"), &[]);
    assert_eq!(
        field(&got, "id2")["type"],
        "Utf8",
        "id2=007 + id2=1.5 + id2=abc"
    );
    assert_eq!(partition(&got, "id2=007")["values"]["id2"], "007");
}

#[test]
fn partition_strings_keeps_values_as_written() {
    let got = ls_json(&fixture("widen_num"), &["--partition-strings"]);
    assert_eq!(
        field(&got, "id2")["type"],
        "Utf8",
        "--partition-strings must not infer types"
    );
    assert_eq!(partition(&got, "id2=007")["values"]["id2"], "007");
    assert_eq!(partition(&got, "id2=1.5")["values"]["id2"], "1.5");
    assert_eq!(got["rows"], 60);
    let got = ls_json(&fixture("widen_ts"), &["--partition-strings"]);
    assert_eq!(field(&got, "d")["type"], "Utf8");
    assert_eq!(partition(&got, "d=2024-01-01")["values"]["d"], "2024-01-01");
}

// ------------------------------------------------------------------- splits

#[test]
fn parquet_row_group_splits_keep_every_row() {
    let exp = expected_dataset("parquet_row_groups");
    let got = ls_json(&fixture("parquet_row_groups"), &["--split-size", "64KiB"]);
    let tasks = num(&got, "tasks");
    let groups = exp["row_groups"].as_u64().expect("row_groups");
    assert!(
        tasks > 1,
        "one {}-byte file of {groups} row groups at 64KiB per task gave {tasks} task(s)",
        got["bytes"]
    );
    assert!(tasks <= groups, "{tasks} tasks for {groups} row groups");
    assert_eq!(
        got["rows"], exp["rows"],
        "rows over {tasks} row-group splits"
    );
}

#[test]
fn csv_byte_range_splits_keep_every_row() {
    let got = ls_json(&fixture("csv_plain"), &["--split-size", "16KiB"]);
    let tasks = num(&got, "tasks");
    assert!(
        tasks > 2 * num(&got, "files"),
        "{} CSV files of {} bytes in all gave only {tasks} tasks",
        got["files"],
        got["bytes"]
    );
    assert_eq!(
        got["rows"], 5000,
        "rows counted over {tasks} byte-range splits"
    );
}

#[test]
fn text_splits_of_any_size_keep_every_row() {
    let mut problems = Vec::new();
    for name in ["text_none", "csv_plain", "json"] {
        let want = &expected_dataset(name)["rows"];
        for size in ["50", "333", "1000", "4096"] {
            let got = ls_json(&fixture(name), &["--split-size", size]);
            if &got["rows"] != want {
                problems.push(format!(
                    "{name} --split-size {size}: {} rows over {} tasks, expected {want}",
                    got["rows"], got["tasks"]
                ));
            }
        }
    }
    assert_no_problems("line-boundary rules lose or repeat rows", &problems);
}

#[test]
fn gzip_files_are_never_split() {
    for name in ["text_gzip", "csv_gzip"] {
        let exp = expected_dataset(name);
        let got = ls_json(&fixture(name), &["--split-size", "1KiB"]);
        assert_eq!(
            got["tasks"], got["files"],
            "{name}: a gzip file must be one task"
        );
        assert_eq!(got["rows"], exp["rows"], "{name}: rows");
    }
}

#[test]
fn text_codecs_all_give_their_rows() {
    let codecs = common::expected()["codecs"]
        .as_object()
        .expect("no codecs in expected.json");
    let mut names: Vec<&str> = codecs
        .values()
        .filter_map(|c| c.get("dataset").or_else(|| c.get("fallback_dataset")))
        .map(|d| d.as_str().expect("codec dataset name"))
        .collect();
    names.extend(["text_gzip_concat", "text_bz2_big"]);
    assert!(names.len() >= 8, "too few codec datasets: {names:?}");
    let mut problems = Vec::new();
    for name in names {
        let exp = expected_dataset(name);
        let got = ls_json(&fixture(name), &[]);
        if got["rows"] != exp["rows"] || got["format"] != "text" {
            problems.push(format!(
                "{name}: {} rows as {}, expected {} as text",
                got["rows"], got["format"], exp["rows"]
            ));
        }
    }
    // bzip2 may be split; whether it is or not, every row comes once.
    let got = ls_json(&fixture("text_bz2_big"), &["--split-size", "256KiB"]);
    if got["rows"] != 50000 {
        problems.push(format!(
            "text_bz2_big at 256KiB splits: {} rows, expected 50000",
            got["rows"]
        ));
    }
    assert_no_problems("text codecs", &problems);
}

#[test]
fn text_key_value_gives_key_and_value_columns() {
    let got = ls_json(&fixture("text_gzip"), &["--text-key-value"]);
    assert_eq!(
        field_names(&got),
        ["key", "value"],
        "schema with --text-key-value"
    );
    assert_eq!(got["rows"], 2000);
}

// ------------------------------------------------------------ empty outputs

#[test]
fn empty_parquet_job_has_one_file_and_no_rows() {
    let got = ls_json(&fixture("parquet_empty"), &[]);
    assert_eq!(
        got["files"], 1,
        "Spark's zero-row Parquet file is a (live) file"
    );
    assert_eq!(got["rows"], 0);
    assert_eq!(got["complete"], true);
    assert_eq!(
        field_names(&got),
        ["id", "x1", "label"],
        "schema from the zero-row file's footer"
    );
}

#[test]
fn empty_partitioned_job_has_no_files() {
    let got = ls_json(&fixture("parquet_empty_partitioned"), &[]);
    assert_eq!(got["files"], 0);
    assert_eq!(got["rows"], 0);
    assert_eq!(got["tasks"], 0);
    assert_eq!(got["complete"], true);
    assert_eq!(got["partitions"], serde_json::json!([]));
}

#[test]
fn empty_json_job_has_no_rows() {
    let got = ls_json(&fixture("json_empty"), &[]);
    assert_eq!(
        got["files"], 0,
        "a 0-byte part file is not a data file (Spark drops it)"
    );
    assert_eq!(got["rows"], 0);
    assert_eq!(got["tasks"], 0);
    assert_eq!(got["complete"], true);
}

// ------------------------------------------------------------------- bad input

/// `ls` on `dir` fails, in both output modes, with one `sluice: ` line naming `name`.
#[track_caller]
fn assert_ls_fails_naming(dir: &Path, name: &str) {
    for json in [false, true] {
        let run = sluice(ls_args(dir, &[], json));
        assert_one_line_error(&run, &[name]);
    }
}

/// The one data file of a fixture directory.
fn only_data_file(dir: &Path) -> String {
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('_') && !n.starts_with('.'))
        .collect();
    assert_eq!(
        names.len(),
        1,
        "{}: expected one data file, found {names:?}",
        dir.display()
    );
    names.into_iter().next().unwrap()
}

#[test]
fn missing_path_fails_cleanly() {
    assert_ls_fails_naming(&fixture("bad/no_such_output"), "no_such_output");
}

#[test]
fn truncated_parquet_fails_cleanly() {
    let dir = fixture("bad/truncated_parquet");
    assert_ls_fails_naming(&dir, &only_data_file(&dir));
}

#[test]
fn corrupt_gzip_fails_cleanly() {
    let dir = fixture("bad/bad_gzip");
    assert_ls_fails_naming(&dir, "part-00000.csv.gz");
}

#[test]
fn ragged_csv_fails_cleanly() {
    let dir = fixture("bad/ragged_csv");
    assert_ls_fails_naming(&dir, "part-00000.csv");
}

#[test]
fn file_instead_of_directory_fails_cleanly() {
    assert_ls_fails_naming(&fixture("bad/single_file.parquet"), "single_file.parquet");
}

/// A copy of the Spark fixture `parquet_small_files` to add odd entries to.
fn small_files_copy() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("out");
    common::copy_dir(&fixture("parquet_small_files"), &data);
    (tmp, data)
}

#[test]
fn a_broken_symlink_among_part_files_fails_naming_it() {
    let (_tmp, data) = small_files_copy();
    let name = "part-00040-gone-c000.snappy.parquet";
    std::os::unix::fs::symlink(data.join("no-such-target"), data.join(name)).expect("symlink");
    for json in [false, true] {
        let run = sluice(ls_args(&data, &[], json));
        assert_one_line_error(&run, &[name, "broken symbolic link", "no-such-target"]);
    }
    // A hidden one is no data, as for any hidden name.
    std::fs::remove_file(data.join(name)).expect("rm");
    std::os::unix::fs::symlink(data.join("gone"), data.join(".part-0.crc")).expect("symlink");
    let got = ls_json(&data, &[]);
    assert_eq!(got["rows"], expected_dataset("parquet_small_files")["rows"]);
}

#[test]
fn a_fifo_among_part_files_is_ignored_as_not_a_regular_file() {
    let (_tmp, data) = small_files_copy();
    let name = "part-00040-fifo-c000.snappy.parquet";
    let made = Command::new("mkfifo")
        .arg(data.join(name))
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo failed");
    let exp = expected_dataset("parquet_small_files");
    let got = ls_json(&data, &[]);
    assert_eq!(got["rows"], exp["rows"], "{got}");
    assert_eq!(
        got["files"], exp["files"],
        "the FIFO is no data file: {got}"
    );
    let entry = got["ignored"]
        .as_array()
        .expect("ignored")
        .iter()
        .find(|i| i["path"].as_str().is_some_and(|p| p.ends_with(name)))
        .unwrap_or_else(|| panic!("{name} should be in `ignored`: {got}"));
    assert_eq!(entry["reason"], "not a regular file: a FIFO", "{got}");
    let table = ls_table(&data, &[]);
    assert!(
        table.contains(name) && table.contains("not a regular file"),
        "{table}"
    );
}

#[test]
fn an_empty_directory_is_named_as_empty_not_missing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let empty = tmp.path().join("out-empty");
    std::fs::create_dir(&empty).expect("mkdir");
    for json in [false, true] {
        let run = sluice(ls_args(&empty, &[], json));
        assert_one_line_error(&run, &["out-empty", "empty directory", "no data files"]);
        assert_eq!(run.status.code(), Some(1), "{run}");
        assert!(!run.stderr.contains("no such path"), "{run}");
    }
    let missing = sluice(ls_args(&tmp.path().join("out-missing"), &[], false));
    assert_one_line_error(&missing, &["no such path", "out-missing"]);
}

/// Runs `program args` as user and group 65534 (nobody).
fn as_nobody(program: &Path, args: &[OsString]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(program)
        .args(args)
        .env_remove("RUST_LOG");
    cmd
}

#[test]
fn unreadable_file_fails_naming_it() {
    // Root reads any file, so the check runs as nobody.
    let setpriv = Command::new("setpriv")
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    assert!(
        setpriv.is_ok_and(|s| s.success()),
        "this test needs `setpriv` (util-linux) to run sluice as an unprivileged user"
    );
    let exp = expected_dataset("bad/unreadable");
    let chmod_file = exp["chmod_file"].as_str().expect("chmod_file");

    let tmp = tempfile::Builder::new()
        .prefix("sluice-unreadable-")
        .tempdir_in("/tmp")
        .expect("temp dir");
    let mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    mode(tmp.path(), 0o755);
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    mode(&out, 0o755);
    for entry in std::fs::read_dir(fixture("bad/unreadable")).unwrap() {
        let entry = entry.unwrap();
        let to = out.join(entry.file_name());
        std::fs::copy(entry.path(), &to).unwrap();
        mode(&to, 0o644);
    }

    // The binary under target/ may sit below a directory nobody cannot enter.
    let probe = common::run(&mut as_nobody(
        Path::new(common::SLUICE),
        &["--version".into()],
    ));
    let binary = if probe.status.success() {
        Path::new(common::SLUICE).to_path_buf()
    } else {
        let copy = tmp.path().join("sluice");
        std::fs::copy(common::SLUICE, &copy).unwrap();
        mode(&copy, 0o755);
        copy
    };

    let args = |json: bool| ls_args(&out, &[], json);
    let before = common::run(&mut as_nobody(&binary, &args(true)))
        .success()
        .json();
    assert_eq!(
        before["rows"], exp["rows"],
        "nobody can read the copy before the chmod"
    );

    mode(&out.join(chmod_file), 0o000);
    for json in [false, true] {
        let run = common::run(&mut as_nobody(&binary, &args(json)));
        assert_one_line_error(&run, &[chmod_file]);
    }
}

#[test]
fn closed_stdout_does_not_panic() {
    // A pipe whose reading end is already closed: every write fails with EPIPE,
    // as with `sluice ls DIR | head -1`.
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe(2) failed");
    // SAFETY: pipe(2) just returned these descriptors and nothing else owns them.
    let (reader, writer) = unsafe {
        use std::os::fd::{FromRawFd, OwnedFd};
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    drop(reader);
    for json in [false, true] {
        let mut cmd = common::sluice_command(ls_args(&fixture("parquet_partitioned"), &[], json));
        cmd.stdout(Stdio::from(writer.try_clone().unwrap()));
        let run = common::run(&mut cmd);
        assert!(
            !run.stderr.contains("panicked") && run.status.code() != Some(101),
            "a closed stdout should end sluice quietly, not panic: {run}"
        );
    }
}
