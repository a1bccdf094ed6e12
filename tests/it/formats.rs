//! Every format as Spark writes it with its default writer options, read by
//! `sluice` and by Spark's own reader with its default reader options
//! (tests/fixtures/make_formats.py): the same rows, values and nulls. For
//! CSV also: whether the first line is a header, found out from the data or
//! told, and what `ls` says was taken.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::common::*;
use serde_json::Value;

/// Where make_formats.py wrote the datasets.
fn formats_dir() -> PathBuf {
    fixtures_dir().join("formats")
}

/// make_formats.py's `expected.json`.
fn formats_expected() -> &'static Value {
    static EXPECTED: OnceLock<Value> = OnceLock::new();
    EXPECTED.get_or_init(|| fixture_json("formats/expected.json", "make_formats.py"))
}

/// What Spark read from one dataset.
fn spark_read(name: &str) -> &'static Value {
    let found = &formats_expected()["datasets"][name];
    assert!(
        found.is_object(),
        "no dataset `{name}` in formats/expected.json"
    );
    found
}

/// Every row `sluice train` hands a trainer, every column, as row_dump.py writes them.
fn train_rows(dir: &Path, extra: &[&str]) -> Vec<BTreeMap<String, Value>> {
    trainer_rows("row_dump.py", dir, extra)
}

/// Every line the test trainer `script` (in tests/trainers) writes for the
/// rows `sluice train` hands it.
fn trainer_rows(script: &str, dir: &Path, extra: &[&str]) -> Vec<BTreeMap<String, Value>> {
    let out = tempfile::tempdir().expect("tempdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/trainers")
        .join(script);
    let exec = format!(
        "{} {} --out {}",
        python(),
        script.display(),
        out.path().display()
    );
    let dir = dir.display().to_string();
    let mut args = vec![
        "train",
        dir.as_str(),
        "--exec",
        &exec,
        "--devices",
        "1",
        "--batch-size",
        "7",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    sluice(&args).success();
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(out.path()).expect("list trainer output") {
        let path = entry.expect("list trainer output").path();
        let text = std::fs::read_to_string(&path).expect("read rows");
        for line in text.lines() {
            let row: BTreeMap<String, Value> = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: bad row {line}: {e}", path.display()));
            rows.push(row);
        }
    }
    rows
}

/// A value as compared: CSV values as Spark's default reader sees them,
/// text, which sluice may have typed (`12` for `"12"`, `true` for `"true"`).
fn comparable(value: &Value, text_typed: bool) -> String {
    if text_typed {
        let number = match value {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.parse::<f64>().ok(),
            _ => None,
        };
        if let Some(n) = number {
            return format!("{n:?}");
        }
        if let Value::String(s) = value {
            if s == "true" || s == "false" {
                return s.clone();
            }
        }
    }
    value.to_string()
}

/// A row as compared, its columns in name order.
fn row_key(row: &BTreeMap<String, Value>, text_typed: bool) -> String {
    let parts: Vec<String> = row
        .iter()
        .map(|(k, v)| format!("{k}={}", comparable(v, text_typed)))
        .collect();
    parts.join(", ")
}

/// Checks that sluice reads the dataset `name` as Spark read it: the same
/// columns, and the same rows as a multiset.
#[track_caller]
fn assert_reads_as_spark(name: &str, extra: &[&str]) {
    let expected = spark_read(name);
    let csv = expected["format"] == "csv";
    let got = train_rows(&formats_dir().join(name), extra);
    let want: Vec<BTreeMap<String, Value>> = expected["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            r.as_object()
                .expect("a row")
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .collect();
    let mut columns: Vec<&str> = expected["columns"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    columns.sort_unstable();
    if let Some(row) = got.first() {
        let names: Vec<&str> = row.keys().map(String::as_str).collect();
        assert_eq!(names, columns, "{name}: columns differ from Spark's");
    }
    let mut want_keys: Vec<String> = want.iter().map(|r| row_key(r, csv)).collect();
    let mut got_keys: Vec<String> = got.iter().map(|r| row_key(r, csv)).collect();
    want_keys.sort();
    got_keys.sort();
    if want_keys != got_keys {
        let missing: Vec<&String> = want_keys
            .iter()
            .filter(|k| !got_keys.contains(k))
            .take(5)
            .collect();
        let extra: Vec<&String> = got_keys
            .iter()
            .filter(|k| !want_keys.contains(k))
            .take(5)
            .collect();
        panic!(
            "{name} (Spark read: {}): sluice gave {} rows, Spark {}\nSpark's, not sluice's: {missing:#?}\nsluice's, not Spark's: {extra:#?}",
            expected["read"],
            got_keys.len(),
            want_keys.len()
        );
    }
}

/// `sluice ls --json` of a dataset.
fn ls(name: &str, extra: &[&str]) -> Value {
    let dir = formats_dir().join(name).display().to_string();
    let mut args = vec!["ls", dir.as_str(), "--json"];
    args.extend_from_slice(extra);
    sluice(&args).success().json()
}

#[test]
fn csv_reads_as_spark_reads() {
    for name in [
        "csv_default",
        "csv_quoted",
        "csv_newlines",
        "csv_header",
        "csv_text_header",
    ] {
        let expected = spark_read(name);
        let listed = ls(name, &[]);
        assert_eq!(
            listed["csv_header"], expected["csv_header"],
            "{name}: the header verdict: {listed}"
        );
        let rows = expected["rows"].as_array().expect("rows").len() as u64;
        assert_eq!(listed["rows"].as_u64(), Some(rows), "{name}: {listed}");
        assert_reads_as_spark(name, &[]);
    }
    // The case, in words: no header, Spark's names; ids below
    // 3000 are an `int`, as Spark's inferSchema types them.
    let listed = sluice([
        "ls",
        formats_dir().join("csv_default").to_str().expect("utf-8"),
    ])
    .success();
    assert!(
        listed.stdout.contains("csv header: none") && listed.stdout.contains("_c0 Int32"),
        "{listed}"
    );
}

#[test]
fn csv_header_options_decide_outright() {
    // A header over text columns, told: the names are the header's.
    let listed = ls("csv_text_header", &["--csv-header"]);
    assert_eq!(listed["csv_header"], "given", "{listed}");
    let names: Vec<&str> = listed["schema"]
        .as_array()
        .expect("schema")
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert_eq!(names, ["name", "city"], "{listed}");
    let spark_rows = spark_read("csv_text_header")["rows"]
        .as_array()
        .expect("rows")
        .len() as u64;
    assert_eq!(
        listed["rows"].as_u64(),
        Some(spark_rows - 1),
        "the header line is no row: {listed}"
    );
    // Spark's header files read as having none: every header line is a row.
    let dir = formats_dir().join("csv_header");
    let files = std::fs::read_dir(&dir)
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("part-"))
        .count() as u64;
    let listed = ls("csv_header", &["--csv-no-header"]);
    assert_eq!(listed["csv_header"], "given", "{listed}");
    let rows = spark_read("csv_header")["rows"]
        .as_array()
        .expect("rows")
        .len() as u64;
    assert_eq!(listed["rows"].as_u64(), Some(rows + files), "{listed}");
    // Both at once contradict each other.
    let dir = dir.display().to_string();
    let both = sluice(["ls", &dir, "--csv-header", "--csv-no-header"]);
    assert!(!both.status.success(), "{both}");
    // Non-CSV datasets have no verdict.
    assert_eq!(ls("json", &[])["csv_header"], Value::Null);
}

#[test]
fn csv_files_that_disagree_on_a_header_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let part = |from: &str| {
        let found = std::fs::read_dir(formats_dir().join(from))
            .expect("list")
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().starts_with("part-"))
            .expect("a part file");
        found.path()
    };
    std::fs::copy(part("csv_header"), dir.path().join("part-00000.csv")).expect("copy");
    std::fs::copy(part("csv_default"), dir.path().join("part-00001.csv")).expect("copy");
    let path = dir.path().display().to_string();
    let run = sluice(["ls", &path]);
    assert_one_line_error(&run, &["part-00000.csv", "part-00001.csv", "--csv-header"]);
}

#[test]
fn csv_header_choice_is_part_of_the_job_identity() {
    let state = tempfile::tempdir().expect("tempdir");
    let state_dir = state.path().join("state").display().to_string();
    let dir = formats_dir().join("csv_default").display().to_string();
    sluice([
        "train", &dir, "--model", "none", "--quiet", "--state", &state_dir,
    ])
    .success();
    let again = sluice([
        "train",
        &dir,
        "--model",
        "none",
        "--quiet",
        "--state",
        &state_dir,
        "--csv-header",
    ]);
    assert!(
        !again.status.success() && again.stderr.contains("--csv-header"),
        "{again}"
    );
}

#[test]
fn json_lines_read_as_spark_reads() {
    assert_reads_as_spark("json", &[]);
}

#[test]
fn text_reads_as_spark_reads() {
    assert_reads_as_spark("text", &[]);
}

#[test]
fn orc_reads_as_spark_reads() {
    assert_reads_as_spark("orc", &[]);
}

#[test]
fn avro_reads_as_spark_reads() {
    for name in ["avro", "avro_julian"] {
        assert_reads_as_spark(name, &[]);
    }
}

#[test]
fn parquet_reads_as_spark_reads() {
    for name in [
        "parquet_default",
        "parquet_legacy",
        "parquet_millis",
        "parquet_ancient",
        "parquet_julian_int96",
        "parquet_julian_micros",
    ] {
        assert_reads_as_spark(name, &[]);
    }
}

/// One row a trainer wrote: its values by column.
type Row = BTreeMap<String, Value>;

/// What sluice hands a trainer from a dataset of make_formats.py's
/// `calendar`: each row by id (dates in days, timestamps in their unit since
/// 1970, as epoch_values.py writes them), and the Arrow type of each column.
fn epoch_rows(name: &str, extra: &[&str]) -> (BTreeMap<i64, Row>, BTreeMap<String, Value>) {
    let mut rows = BTreeMap::new();
    let mut types = BTreeMap::new();
    for row in trainer_rows("epoch_values.py", &formats_dir().join(name), extra) {
        if let Some(Value::Object(t)) = row.get("__types__") {
            types.extend(t.clone());
            continue;
        }
        let id = row["id"].as_i64().expect("an id");
        assert!(rows.insert(id, row).is_none(), "{name}: id {id} twice");
    }
    (rows, types)
}

/// Spark's rows of a dataset of make_formats.py's `calendar`, by id.
fn spark_epoch_rows(name: &str) -> BTreeMap<i64, &'static serde_json::Map<String, Value>> {
    spark_read(name)["epoch_rows"]
        .as_array()
        .expect("epoch_rows")
        .iter()
        .map(|r| {
            let r = r.as_object().expect("a row");
            (r["id"].as_i64().expect("an id"), r)
        })
        .collect()
}

/// Microseconds since 1970 of midnight (UTC) of a date.
fn midnight_micros(y: i32, m: u32, d: u32) -> i64 {
    let date = chrono::NaiveDate::from_ymd_opt(y, m, d).expect("a date");
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("the epoch");
    (date - epoch).num_days() * 86_400_000_000
}

/// Dates from year 1 to 9999 and timestamps outside 1677-2262, as Spark
/// writes them to ORC (hybrid Julian calendar: Spark rebases them when it
/// reads) and to Parquet: sluice hands on exactly the days and microseconds
/// Spark reads, timestamps in microseconds, Spark's timestamp_ntz as a
/// timestamp. Issue 52: ORC's were 5-10 days off before 1582, and a file
/// holding 1500-01-01 could not be read at all.
#[test]
fn dates_and_timestamps_far_from_1970_read_as_spark_reads() {
    for name in ["orc_calendar", "orc_proleptic", "parquet_calendar"] {
        let want = spark_epoch_rows(name);
        let (got, types) = epoch_rows(name, &[]);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{name}: ids"
        );
        for column in ["ts", "ntz"] {
            let ty = types[column].as_str().unwrap_or_default();
            assert!(ty.starts_with("timestamp[us"), "{name}: {column} is {ty}");
        }
        assert_eq!(types["day"], "date32[day]", "{name}");
        for (id, spark) in &want {
            let row = &got[id];
            for column in ["name", "day", "ts", "ntz"] {
                assert_eq!(
                    row[column], spark[column],
                    "{name}: id {id}, {column}: sluice {} where Spark reads {} ({} {})",
                    row[column], spark[column], spark["day_text"], spark["ts_text"]
                );
            }
        }
    }
}

/// A file holding timestamps that nanoseconds cannot, read for another of
/// its columns only: no error, every row.
#[test]
fn orc_with_ancient_timestamps_reads_for_other_columns() {
    let (got, types) = epoch_rows("orc_calendar", &["--columns", "id,name"]);
    assert_eq!(
        types.keys().collect::<Vec<_>>(),
        ["id", "name"],
        "{types:?}"
    );
    let want = spark_epoch_rows("orc_calendar");
    let names: Vec<&Value> = got.values().map(|r| &r["name"]).collect();
    let spark: Vec<&Value> = want.values().map(|r| &r["name"]).collect();
    assert_eq!(names, spark);
}

/// A filter, the column it reads, and which of Spark's values it keeps.
type FilterCase = (&'static str, &'static str, fn(i64) -> bool);

/// Filters on dates and timestamps before 1582 and after 2262 keep the
/// rows Spark's values say, in ORC (whose stripe statistics hold stored,
/// unrebased dates) as in Parquet.
#[test]
fn filters_on_ancient_dates_and_timestamps_keep_spark_rows() {
    let cases: [FilterCase; 5] = [
        ("ts < '1600-01-01'", "ts", |v| {
            v < midnight_micros(1600, 1, 1)
        }),
        ("ts > '2262-04-12'", "ts", |v| {
            v > midnight_micros(2262, 4, 12)
        }),
        ("day < '1582-10-05'", "day", |v| v < -141_437),
        // Ids 3-5 (1582-10-04, 1582-10-15, 1900-01-01) share an ORC file whose
        // statistics hold Julian 1582-10-04, ten days later than the value read.
        ("day < '1582-10-10'", "day", |v| v < -141_432),
        ("day >= '1000-03-01'", "day", |v| v >= -354_226),
    ];
    for name in ["orc_calendar", "parquet_calendar"] {
        let spark = spark_epoch_rows(name);
        for (filter, column, keeps) in &cases {
            let want: Vec<i64> = spark
                .iter()
                .filter(|(_, r)| r[*column].as_i64().is_some_and(*keeps))
                .map(|(id, _)| *id)
                .collect();
            assert!(!want.is_empty(), "{filter} keeps something");
            let (got, _) = epoch_rows(name, &["--filter", filter]);
            let got: Vec<i64> = got.keys().copied().collect();
            assert_eq!(got, want, "{name}: --filter \"{filter}\"");
        }
    }
}
