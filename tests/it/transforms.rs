//! `--hash-buckets` and `--fill-nulls`: batches transformed in Rust before a trainer
//! sees them. The buckets must be exactly those of `sluice_trainer.bucket_of` (the
//! hash serving code uses), nulls and non-ASCII values included; filled columns must
//! reach numpy without a copy; the same keys work in job files.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{assert_one_line_error, fixture, python, sluice, Run};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The `--exec` command of tests/trainers/column_values.py writing into `out`.
fn values_trainer(out: &Path, extra: &str) -> String {
    format!(
        "PYTHONPATH={} {} {} --out {} {extra}",
        repo("python/sluice_trainer").display(),
        python(),
        repo("tests/trainers/column_values.py").display(),
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
        "--devices".to_string(),
        "2".to_string(),
        "--batch-size".to_string(),
        "100".to_string(),
    ];
    args.extend(options.iter().map(|o| o.to_string()));
    sluice(args)
}

/// The reports of column_values.py in `dir`, merged: rows by id (each id once).
struct Report {
    rows: HashMap<String, serde_json::Map<String, Value>>,
    types: HashMap<String, String>,
    metadata: HashMap<String, Value>,
    null_counts: HashMap<String, u64>,
    zero_copy: HashMap<String, u64>,
    batches: u64,
    numpy_mismatches: u64,
}

fn report(dir: &Path) -> Report {
    let mut merged = Report {
        rows: HashMap::new(),
        types: HashMap::new(),
        metadata: HashMap::new(),
        null_counts: HashMap::new(),
        zero_copy: HashMap::new(),
        batches: 0,
        numpy_mismatches: 0,
    };
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let text = std::fs::read_to_string(&path).expect("read a trainer report");
        let value: Value = common::parse_json(&text, &path.display().to_string());
        for (id, row) in value["rows"].as_object().expect("rows") {
            let row = row.as_object().expect("row").clone();
            assert!(
                merged.rows.insert(id.clone(), row).is_none(),
                "id {id} arrived twice"
            );
        }
        for (name, kind) in value["types"].as_object().expect("types") {
            merged
                .types
                .insert(name.clone(), kind.as_str().expect("type").to_string());
        }
        for (name, meta) in value["metadata"].as_object().expect("metadata") {
            merged.metadata.insert(name.clone(), meta.clone());
        }
        for (key, target) in [
            ("null_counts", &mut merged.null_counts),
            ("zero_copy", &mut merged.zero_copy),
        ] {
            for (name, n) in value[key].as_object().expect(key) {
                *target.entry(name.clone()).or_default() += n.as_u64().expect("count");
            }
        }
        merged.batches += value["batches"].as_u64().expect("batches");
        merged.numpy_mismatches += value["numpy_mismatches"].as_u64().expect("mismatches");
    }
    merged
}

/// Every row's `columns` in `hashed` equal the Python buckets in `reference`.
fn assert_same_buckets(hashed: &Report, reference: &Report, columns: &[&str], buckets: u64) {
    assert_eq!(hashed.rows.len(), reference.rows.len(), "row counts differ");
    assert!(!hashed.rows.is_empty(), "no rows arrived");
    for column in columns {
        assert_eq!(
            hashed.types.get(*column).map(String::as_str),
            Some("int64"),
            "`{column}` did not arrive as int64 buckets"
        );
        assert_eq!(
            hashed.metadata[*column]["sluice.hash_buckets"],
            Value::String(buckets.to_string()),
            "`{column}` is not marked as hashed"
        );
        assert_eq!(
            hashed.null_counts.get(*column),
            Some(&0),
            "`{column}` kept nulls"
        );
        let mut differ = Vec::new();
        for (id, row) in &hashed.rows {
            let want = &reference.rows[id][*column];
            if &row[*column] != want {
                differ.push(format!("id {id}: sluice {} python {want}", row[*column]));
            }
        }
        assert!(
            differ.is_empty(),
            "`{column}`: {} of {} rows hashed differently, e.g. {:?}",
            differ.len(),
            hashed.rows.len(),
            &differ[..differ.len().min(5)]
        );
    }
}

#[test]
fn hashed_buckets_equal_bucket_of_in_python_including_nulls_and_non_ascii() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Spark's partition values: 'São Paulo', 'Zürich', '#1 [main]', 'a=b/c%', null.
    let data = fixture("parquet_partitioned");
    let reference_dir = tmp.path().join("reference");
    train(&data, &values_trainer(&reference_dir, "--buckets 997"), &[]).success();
    let reference = report(&reference_dir);
    assert_eq!(
        reference.numpy_mismatches, 0,
        "hash_array and bucket_of disagree"
    );
    for column in ["country", "city"] {
        assert!(
            reference.null_counts.get(column).copied().unwrap_or(0) > 0,
            "the fixture has null `{column}` values to compare"
        );
    }

    let hashed_dir = tmp.path().join("hashed");
    train(
        &data,
        &values_trainer(&hashed_dir, ""),
        &["--hash-buckets", "997"],
    )
    .success();
    let hashed = report(&hashed_dir);
    assert_same_buckets(&hashed, &reference, &["country", "city"], 997);
    // Numbers are left alone by `--hash-buckets N`.
    assert_eq!(hashed.types.get("x1").map(String::as_str), Some("double"));
}

#[test]
fn named_columns_hash_integers_and_avro_strings_with_nulls() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = fixture("avro");
    let reference_dir = tmp.path().join("reference");
    train(&data, &values_trainer(&reference_dir, "--buckets 101"), &[]).success();
    let reference = report(&reference_dir);
    assert_eq!(
        reference.numpy_mismatches, 0,
        "hash_array and bucket_of disagree"
    );
    assert!(reference.null_counts.get("s").copied().unwrap_or(0) > 0);

    let hashed_dir = tmp.path().join("hashed");
    train(
        &data,
        &values_trainer(&hashed_dir, ""),
        &["--hash-buckets", "s=101,label=101"],
    )
    .success();
    let hashed = report(&hashed_dir);
    assert_same_buckets(&hashed, &reference, &["s", "label"], 101);
}

/// Writes partitions `dt=1` and `dt=2` (with `_SUCCESS`) of a table whose numeric
/// columns hold nulls: id, f (float64), i (int32), s (string).
fn table_with_nulls(root: &Path) {
    let script = r#"
import os, sys
import pyarrow as pa, pyarrow.parquet as pq
root = sys.argv[1]
for part in (1, 2):
    ids = list(range((part - 1) * 500, part * 500))
    table = pa.table({
        "id": pa.array(ids, pa.int64()),
        "f": pa.array([None if i % 7 == 0 else i / 2 for i in ids], pa.float64()),
        "i": pa.array([None if i % 5 == 0 else i for i in ids], pa.int32()),
        "s": pa.array([None if i % 3 == 0 else f"v{i % 13}" for i in ids]),
    })
    out = os.path.join(root, f"dt={part}")
    os.makedirs(out, exist_ok=True)
    pq.write_table(table, os.path.join(out, "part-00000.snappy.parquet"), row_group_size=200)
    open(os.path.join(out, "_SUCCESS"), "w").close()
"#;
    let status = std::process::Command::new(python())
        .args(["-c", script])
        .arg(root)
        .status()
        .expect("run python");
    assert!(status.success(), "writing the test table failed");
}

fn assert_filled(report: &Report, rows: usize) {
    assert_eq!(report.rows.len(), rows, "every row arrives once");
    for column in ["f", "i"] {
        assert_eq!(
            report.null_counts.get(column),
            Some(&0),
            "`{column}` kept nulls"
        );
        assert_eq!(
            report.zero_copy.get(column),
            Some(&report.batches),
            "`{column}` did not wrap as numpy without a copy in every batch"
        );
    }
    for (id, row) in &report.rows {
        let id: i64 = id.parse().expect("numeric id");
        let f = row["f"].as_f64().expect("f is a number");
        let i = row["i"].as_i64().expect("i is a number");
        assert_eq!(
            f,
            if id % 7 == 0 { -1.0 } else { id as f64 / 2.0 },
            "f of {id}"
        );
        assert_eq!(i, if id % 5 == 0 { -1 } else { id }, "i of {id}");
    }
}

#[test]
fn filled_columns_have_no_nulls_and_wrap_without_a_copy() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    table_with_nulls(&data);

    let raw_dir = tmp.path().join("raw");
    train(&data.join("dt=1"), &values_trainer(&raw_dir, ""), &[]).success();
    let raw = report(&raw_dir);
    assert!(raw.null_counts["f"] > 0 && raw.null_counts["i"] > 0);

    let filled_dir = tmp.path().join("filled");
    train(
        &data.join("dt=1"),
        &values_trainer(&filled_dir, ""),
        &["--fill-nulls", "-1"],
    )
    .success();
    let filled = report(&filled_dir);
    assert_filled(&filled, 500);
    // Strings are not numbers: their nulls stay.
    assert!(filled.null_counts["s"] > 0);
}

#[test]
fn job_files_take_hash_buckets_and_fill_nulls() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    table_with_nulls(&data);
    let out = tmp.path().join("out");
    let job = tmp.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "source = {:?}\nstate = {:?}\nexec = {:?}\nquiet = true\nbatch-size = 100\n\
             hash-buckets = \"s=50\"\nfill-nulls = -1\n",
            data.join("dt=*").display().to_string(),
            tmp.path().join("state").display().to_string(),
            values_trainer(&out, ""),
        ),
    )
    .expect("write job file");
    sluice(["run", job.to_str().expect("utf-8"), "--json"]).success();
    let report = report(&out);
    assert_filled(&report, 1000);
    assert_eq!(report.types.get("s").map(String::as_str), Some("int64"));
    assert_eq!(report.null_counts.get("s"), Some(&0));
    for row in report.rows.values() {
        let bucket = row["s"].as_i64().expect("s is a bucket");
        assert!((0..50).contains(&bucket), "bucket {bucket} out of range");
    }
}

#[test]
fn transforms_that_do_not_fit_fail_in_one_line_naming_the_column() {
    let data = fixture("parquet_partitioned");
    let exec = "true";
    // Values that are not what the flag takes, and columns the data lacks:
    // usage errors (64). Columns it cannot hash: errors naming the column (1).
    for (flag, value, mentions, code) in [
        ("--hash-buckets", "0", vec!["--hash-buckets", "bucket"], 64),
        ("--hash-buckets", "city=", vec!["--hash-buckets"], 64),
        ("--fill-nulls", "zero", vec!["--fill-nulls"], 64),
        ("--hash-buckets", "nope=3", vec!["nope"], 64),
        ("--hash-buckets", "x1=3", vec!["x1", "Float64"], 1),
    ] {
        let run = train(&data, exec, &[flag, value]);
        assert_eq!(run.status.code(), Some(code), "{flag} {value}: {run}");
        if code == 64 {
            // clap's usage error: its first line names the flag and the reason.
            let first = run.stderr.lines().next().unwrap_or("");
            for m in &mentions {
                assert!(first.contains(m), "`{first}` should mention {m}: {run}");
            }
        } else {
            assert_one_line_error(&run, &mentions);
        }
    }
}
