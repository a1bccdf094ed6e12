//! TFRecord files written by TensorFlow (tests/fixtures/make_tfrecord.py:
//! `tf.io.TFRecordWriter`, uncompressed, GZIP and ZLIB): `ls` and `train`
//! read every `tf.train.Example` once, with the values
//! `tf.data.TFRecordDataset` reads back; a flipped byte is one line naming
//! the file and no rows from it; `SequenceExample` records read as their
//! context's features and their feature lists as lists of lists.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::*;

/// make_tfrecord.py's `expected.json`.
fn expected() -> &'static Value {
    static EXPECTED: OnceLock<Value> = OnceLock::new();
    EXPECTED.get_or_init(|| fixture_json("tfrecord/expected.json", "make_tfrecord.py"))
}

fn tfrecord_dir(name: &str) -> PathBuf {
    let _ = expected();
    fixtures_dir().join("tfrecord").join(name)
}

/// The columns and their types: scalars where every record has one value
/// (`ints` has one in every record of part-00003 only, `blob` is UTF-8 in
/// part-00003 only: the other files decide), ordered by name.
const SCHEMA: [(&str, &str); 8] = [
    ("blob", "Binary"),
    ("emb", "List(Float32)"),
    ("id", "Int64"),
    ("ints", "List(Int64)"),
    ("label", "Float32"),
    ("opt", "Int64"),
    ("tags", "List(Utf8)"),
    ("text", "Utf8"),
];

/// Bytes from their hex form.
fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A feature as row_dump.py writes its column: what TensorFlow read
/// (`values`, absent where the record lacks the feature) in the column's type.
fn as_column(values: Option<&Value>, column_type: &str) -> Value {
    let Some(values) = values.and_then(Value::as_array) else {
        return Value::Null;
    };
    let text = |v: &Value| {
        Value::String(String::from_utf8(unhex(v.as_str().expect("hex"))).expect("UTF-8"))
    };
    match column_type {
        "List(Utf8)" => Value::Array(values.iter().map(text).collect()),
        "Utf8" => text(&values[0]),
        t if t.starts_with("List(") => Value::Array(values.clone()),
        _ => {
            assert_eq!(values.len(), 1, "a scalar column: {values:?}");
            values[0].clone()
        }
    }
}

/// Every row `sluice train DIR` hands an exec trainer, as row_dump.py writes them.
fn train_rows(dir: &Path) -> Vec<BTreeMap<String, Value>> {
    let out = tempfile::tempdir().expect("tempdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/row_dump.py");
    let exec = format!(
        "{} {} --out {}",
        python(),
        script.display(),
        out.path().display()
    );
    let dir = dir.display().to_string();
    sluice([
        "train",
        dir.as_str(),
        "--exec",
        &exec,
        "--devices",
        "2",
        "--batch-size",
        "64",
        "--quiet",
    ])
    .success();
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(out.path()).expect("list trainer output") {
        let path = entry.expect("list trainer output").path();
        let text = std::fs::read_to_string(&path).expect("read rows");
        for line in text.lines() {
            rows.push(parse_json_row(line, &path));
        }
    }
    rows
}

fn parse_json_row(line: &str, path: &Path) -> BTreeMap<String, Value> {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{}: bad row {line}: {e}", path.display()))
}

#[test]
fn ls_shows_the_format_rows_and_inferred_schema() {
    let dir = tfrecord_dir("examples").display().to_string();
    let listing = parse_json(
        &sluice(["ls", dir.as_str(), "--json"]).success().stdout,
        "ls --json",
    );
    assert_eq!(listing["format"], "tfrecord", "{listing}");
    assert_eq!(listing["rows"], expected()["rows"], "{listing}");
    assert_eq!(listing["files"], 5, "{listing}");
    let schema: Vec<(String, String)> = listing["schema"]
        .as_array()
        .expect("schema")
        .iter()
        .map(|f| {
            let name = f["name"].as_str().expect("name").to_string();
            (name, f["type"].as_str().expect("type").to_string())
        })
        .collect();
    let want: Vec<(String, String)> = SCHEMA
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    assert_eq!(schema, want);
    // Uncompressed, GZIP and ZLIB files together.
    assert_eq!(listing["format_detail"], "mixed", "{listing}");
    let text = sluice(["ls", dir.as_str()]).success().stdout;
    assert!(text.contains("tfrecord (mixed)"), "{text}");
    assert!(
        text.contains(&format!("{} rows", expected()["rows"])),
        "{text}"
    );
}

#[test]
fn ls_names_the_records_and_their_compression() {
    let examples = tfrecord_dir("examples");
    for (file, detail) in [
        ("part-00000.tfrecord", "Example"),
        ("part-00001.tfrecord.gz", "Example, gzip"),
        ("part-00002.tfrecord", "Example, zlib"),
        ("part-00003.tfrecord", "Example, gzip"),
        ("part-00004.tfrecord.deflate", "Example, zlib"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::copy(examples.join(file), dir.path().join(file)).expect("copy");
        let rows = expected()["files"][file].clone();
        let path = dir.path().display().to_string();
        let listing = parse_json(
            &sluice(["ls", path.as_str(), "--json"]).success().stdout,
            "ls --json",
        );
        assert_eq!(listing["format_detail"], detail, "{file}: {listing}");
        assert_eq!(listing["rows"], rows, "{file}: {listing}");
        let text = sluice(["ls", path.as_str()]).success().stdout;
        assert!(
            text.contains(&format!("tfrecord ({detail})")),
            "{file}: {text}"
        );
    }
}

#[test]
fn files_whose_names_say_nothing_are_read_by_content() {
    // An uncompressed file named as MapReduce names its output is found by
    // its framing; a GZIP one is read with --format tfrecord, its
    // compression found by its first bytes.
    let examples = tfrecord_dir("examples");
    for (file, extra) in [
        ("part-00000.tfrecord", None),
        ("part-00003.tfrecord", Some("tfrecord")),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::copy(examples.join(file), dir.path().join("part-r-00000")).expect("copy");
        let path = dir.path().display().to_string();
        let mut args = vec!["ls", path.as_str(), "--json"];
        if let Some(format) = extra {
            args.extend(["--format", format]);
        }
        let listing = parse_json(&sluice(&args).success().stdout, "ls --json");
        assert_eq!(listing["format"], "tfrecord", "{file}: {listing}");
        assert_eq!(
            listing["rows"],
            expected()["files"][file],
            "{file}: {listing}"
        );
    }
}

#[test]
fn train_delivers_every_example_once_as_tensorflow_reads_it() {
    let rows = train_rows(&tfrecord_dir("examples"));
    let examples = expected()["examples"].as_object().expect("examples");
    let total = expected()["rows"].as_u64().expect("rows");
    let mut counts: HashMap<i64, u32> = HashMap::new();
    for row in &rows {
        let id = row["id"].as_i64().expect("an id");
        *counts.entry(id).or_insert(0) += 1;
        let want = examples[&id.to_string()].as_object().expect("a record");
        for (name, column_type) in SCHEMA {
            let got = row.get(name).unwrap_or(&Value::Null);
            assert_eq!(
                got,
                &as_column(want.get(name), column_type),
                "id {id}, feature {name} ({column_type})"
            );
        }
        assert_eq!(row.len(), SCHEMA.len(), "id {id}: {row:?}");
    }
    assert_exactly_once(&counts, total, "tfrecord examples");
    // The features missing from some records are null there, and some
    // lists are empty.
    assert!(rows.iter().any(|r| r["opt"].is_null()));
    assert!(rows.iter().any(|r| r["tags"] == Value::Array(Vec::new())));
}

#[test]
fn a_flipped_crc_is_one_line_naming_the_file_and_no_rows_from_it() {
    let dir = tfrecord_dir("corrupt").display().to_string();
    for command in [
        vec!["ls", dir.as_str()],
        vec!["train", dir.as_str(), "--model", "none", "--quiet"],
    ] {
        let run = sluice(&command);
        assert_one_line_error(&run, &["part-00000.tfrecord", "CRC32C", "record 5"]);
        assert!(!run.stdout.contains("rows"), "no rows: {run}");
    }
    // Told to go on past corrupt files: the file's task fails, the good
    // file's 20 records (ids 20..39) arrive once each, none of the damaged one's.
    let out = tempfile::tempdir().expect("tempdir");
    let run = sluice([
        "train",
        dir.as_str(),
        "--exec",
        &recorder(out.path(), ""),
        "--ignore-corrupt-files",
        "--quiet",
    ]);
    assert_eq!(run.status.code(), Some(2), "a failed task: {run}");
    assert!(run.stderr.contains("part-00000.tfrecord"), "{run}");
    let ids = recorded_ids(out.path(), "ids-");
    let shifted: HashMap<i64, u32> = ids.iter().map(|(id, n)| (id - 20, *n)).collect();
    assert_exactly_once(&shifted, 20, "the good file");
}

/// A feature list as row_dump.py writes its column (lists of lists), from
/// what TensorFlow read (`steps`, absent where the record lacks the list).
fn as_steps(steps: Option<&Value>, item_type: &str) -> Value {
    match steps.and_then(Value::as_array) {
        None => Value::Null,
        Some(steps) => Value::Array(
            steps
                .iter()
                .map(|step| as_column(Some(step), &format!("List({item_type})")))
                .collect(),
        ),
    }
}

#[test]
fn sequence_examples_read_as_context_and_lists_of_lists() {
    let dir = tfrecord_dir("sequence");
    let path = dir.display().to_string();
    let listing = parse_json(
        &sluice(["ls", path.as_str(), "--json"]).success().stdout,
        "ls --json",
    );
    let schema: Vec<(String, String)> = listing["schema"]
        .as_array()
        .expect("schema")
        .iter()
        .map(|f| {
            let name = f["name"].as_str().expect("name").to_string();
            (name, f["type"].as_str().expect("type").to_string())
        })
        .collect();
    let want = [
        ("id", "Int64"),
        ("name", "Utf8"),
        ("scores", "List(List(Float32))"),
        ("steps", "List(List(Int64))"),
        ("words", "List(List(Utf8))"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    assert_eq!(schema, want, "{listing}");
    assert_eq!(listing["format_detail"], "SequenceExample", "{listing}");
    let sequences = expected()["sequences"].as_object().expect("sequences");
    let rows = train_rows(&dir);
    let mut counts: HashMap<i64, u32> = HashMap::new();
    for row in &rows {
        let id = row["id"].as_i64().expect("an id");
        *counts.entry(id).or_insert(0) += 1;
        let want = &sequences[&id.to_string()];
        assert_eq!(row["name"], as_column(want["context"].get("name"), "Utf8"));
        for (name, item) in [("scores", "Float32"), ("steps", "Int64"), ("words", "Utf8")] {
            assert_eq!(
                row[name],
                as_steps(want["lists"].get(name), item),
                "id {id}, feature list {name}"
            );
        }
    }
    assert_exactly_once(&counts, sequences.len() as u64, "sequence examples");
    assert!(rows.iter().any(|r| r["scores"].is_null()));
    assert!(rows.iter().any(|r| r["steps"] == Value::Array(Vec::new())));
}
