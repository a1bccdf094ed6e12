//! SequenceFiles as Hadoop writes them, read by sluice and by Hadoop's own
//! reader. The outputs are those of real MapReduce jobs run by Hadoop's
//! LocalJobRunner (tests/services/mapreduce.sh, into `mapreduce/`: a word count
//! as TextOutputFormat and as SequenceFileOutputFormat uncompressed, RECORD- and
//! BLOCK-compressed with each codec Hadoop runs in pure Java; one job per pair of
//! Writable classes; a map-only job; MultipleOutputs; a big file; an output
//! copied while its job still ran; corrupt copies) and of PySpark's RDD API
//! (tests/fixtures/make_hadoop.py, into `hadoop/`). For each, the records that
//! `SequenceFile.Reader` (or `sc.sequenceFile`) read are dumped as JSON lines;
//! sluice must hand a trainer every one of them once, as columns `key` and
//! `value` typed by their Writable classes.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

/// tests/services/mapreduce.sh's `expected.json`.
fn mapreduce() -> &'static Value {
    static EXPECTED: OnceLock<Value> = OnceLock::new();
    EXPECTED.get_or_init(|| {
        let path = fixtures_dir().join("mapreduce/expected.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read {} ({e}): run tests/run.sh (it runs tests/services/mapreduce.sh)",
                path.display()
            )
        });
        parse_json(&text, &path.display().to_string())
    })
}

/// make_hadoop.py's `expected.json`.
fn spark() -> &'static Value {
    static EXPECTED: OnceLock<Value> = OnceLock::new();
    EXPECTED.get_or_init(|| fixture_json("hadoop/expected.json", "make_hadoop.py"))
}

/// One output of the MapReduce jobs, by name.
fn output(name: &str) -> &'static Value {
    let found = &mapreduce()["outputs"][name];
    assert!(
        found.is_object(),
        "no output `{name}` in mapreduce/expected.json"
    );
    found
}

/// The Arrow type sluice gives a column of this Writable class (None: no column).
fn arrow_type(class: &str) -> Option<&'static str> {
    let short = class.rsplit('.').next().unwrap_or(class);
    Some(match short {
        "Text" => "Utf8",
        "IntWritable" | "VIntWritable" => "Int32",
        "LongWritable" | "VLongWritable" => "Int64",
        "ShortWritable" => "Int16",
        "ByteWritable" => "Int8",
        "FloatWritable" => "Float32",
        "DoubleWritable" => "Float64",
        "BooleanWritable" => "Boolean",
        "NullWritable" => return None,
        // BytesWritable, and the serialized bytes of any other class.
        _ => "Binary",
    })
}

/// A value as compared: integers exactly, floats to 13 significant digits
/// (the dumps print them as Java or Python do), text as is.
fn canonical(value: &Value, as_text: bool) -> String {
    match value {
        Value::String(s) if as_text => s.clone(),
        Value::Number(n) if as_text => n.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => format!("int {i}"),
            (_, Some(u)) => format!("int {u}"),
            _ => format!("float {:.12e}", n.as_f64().expect("a number")),
        },
        other => other.to_string(),
    }
}

/// A row as compared: its columns in name order.
fn row_key(row: &BTreeMap<String, Value>, as_text: bool) -> String {
    row.iter()
        .map(|(k, v)| format!("{k}={}", canonical(v, as_text)))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The rows of a dump (JSON lines), as a multiset of compared rows.
fn dump_rows(path: &Path, as_text: bool) -> HashMap<String, u32> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut rows = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let row: BTreeMap<String, Value> = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}: bad line {line}: {e}", path.display()));
        *rows.entry(row_key(&row, as_text)).or_insert(0) += 1;
    }
    rows
}

/// `sluice train DIR` and every row it handed a trainer
/// (tests/trainers/row_dump.py: every column, bytes as hex).
fn train_rows(dir: &Path, extra: &[&str]) -> (Run, Vec<BTreeMap<String, Value>>) {
    let out = tempfile::tempdir().expect("tempdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/row_dump.py");
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
        "97",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let run = sluice(&args);
    let rows = trainer_rows(out.path());
    (run, rows)
}

/// What row_dump.py wrote into `out`.
fn trainer_rows(out: &Path) -> Vec<BTreeMap<String, Value>> {
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(out).expect("list trainer output") {
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

/// What differs between the rows sluice handed over and the dump: empty when
/// every record arrived once, with equal values.
fn differences(got: &[BTreeMap<String, Value>], dump: &Path, as_text: bool) -> Vec<String> {
    let want = dump_rows(dump, as_text);
    let mut have: HashMap<String, u32> = HashMap::new();
    for row in got {
        *have.entry(row_key(row, as_text)).or_insert(0) += 1;
    }
    let mut found = Vec::new();
    let missing: Vec<_> = want
        .iter()
        .filter(|(row, n)| have.get(*row).copied().unwrap_or(0) < **n)
        .map(|(row, _)| row.clone())
        .collect();
    let extra: Vec<_> = have
        .iter()
        .filter(|(row, n)| want.get(*row).copied().unwrap_or(0) < **n)
        .map(|(row, n)| format!("{row} (x{n})"))
        .collect();
    let want_total: u32 = want.values().sum();
    if got.len() as u32 != want_total {
        found.push(format!(
            "{} rows, Hadoop's reader read {want_total}",
            got.len()
        ));
    }
    if !missing.is_empty() {
        found.push(format!(
            "{} records of Hadoop's reader missing or short, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(3)]
        ));
    }
    if !extra.is_empty() {
        found.push(format!(
            "{} rows Hadoop's reader did not read (or too often), e.g. {:?}",
            extra.len(),
            &extra[..extra.len().min(3)]
        ));
    }
    found
}

/// `sluice ls --json DIR` and what in it differs from an output of these
/// classes: the format and the columns' names and types.
fn listing_differences(
    dir: &Path,
    format: &str,
    key_class: &str,
    value_class: &str,
    extra: &[&str],
) -> Vec<String> {
    let dir_text = dir.display().to_string();
    let mut args = vec!["ls", "--json", dir_text.as_str()];
    // `ls` lists unfinished output as it is.
    args.extend(extra.iter().filter(|a| **a != "--allow-incomplete"));
    let run = sluice(&args);
    if !run.status.success() {
        return vec![format!("ls failed: {}", run.stderr.trim())];
    }
    let listing = run.json();
    let mut found = Vec::new();
    if listing["format"] != format {
        found.push(format!(
            "ls says format {}, not {format}",
            listing["format"]
        ));
    }
    let schema: Vec<(String, String)> = listing["schema"]
        .as_array()
        .map(|columns| {
            columns
                .iter()
                .filter(|c| c["partition"] != true)
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or_default().to_string(),
                        c["type"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let want: Vec<(String, String)> = [("key", key_class), ("value", value_class)]
        .iter()
        .filter_map(|(name, class)| arrow_type(class).map(|t| (name.to_string(), t.to_string())))
        .collect();
    if schema != want {
        found.push(format!(
            "columns {schema:?}, not {want:?} ({key_class}, {value_class})"
        ));
    }
    found
}

/// Checks one output against its dump (and its listing); returns what differs.
fn check_output(
    dir: &Path,
    dump: &Path,
    format: &str,
    classes: (&str, &str),
    extra: &[&str],
) -> Vec<String> {
    let as_text = format == "text";
    let mut found = listing_differences(dir, format, classes.0, classes.1, extra);
    let (run, rows) = train_rows(dir, extra);
    if run.status.success() {
        found.extend(differences(&rows, dump, as_text));
    } else {
        found.push(format!("train failed: {}", run.stderr.trim()));
    }
    found
}

#[test]
fn every_mapreduce_output_reads_as_hadoops_sequence_file_reader_reads_it() {
    let base = fixtures_dir().join("mapreduce");
    let outputs = mapreduce()["outputs"].as_object().expect("outputs");
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, out) in outputs {
        if name == "running" {
            continue; // an_output_copied_while_its_job_ran_*
        }
        let format = out["format"].as_str().expect("format");
        let (extra, classes): (&[&str], _) = if format == "text" {
            (&["--text-key-value"], ("Text", "Text"))
        } else {
            (
                &[],
                (
                    out["key_class"].as_str().expect("key_class"),
                    out["value_class"].as_str().expect("value_class"),
                ),
            )
        };
        let found = check_output(
            &base.join(out["dir"].as_str().expect("dir")),
            &base.join(out["dump"].as_str().expect("dump")),
            format,
            classes,
            extra,
        );
        checked += 1;
        for f in found {
            failures.push(format!(
                "{name} ({} {}, {}): {f}",
                out["compression"].as_str().unwrap_or("text"),
                out["codec"].as_str().unwrap_or("-"),
                out["files"]
            ));
        }
    }
    assert!(checked >= 24, "only {checked} outputs checked");
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn pyspark_sequence_files_read_as_sc_sequence_file_reads_them() {
    let base = fixtures_dir().join("hadoop");
    let outputs = spark()["outputs"].as_object().expect(
        "hadoop/expected.json has no `outputs`: regenerate it (tests/fixtures/make_hadoop.py)",
    );
    let mut failures = Vec::new();
    for (name, out) in outputs {
        let found = check_output(
            &base.join(name),
            &base.join(out["dump"].as_str().expect("dump")),
            "sequencefile",
            (
                out["key_class"].as_str().expect("key_class"),
                out["value_class"].as_str().expect("value_class"),
            ),
            &[],
        );
        failures.extend(found.into_iter().map(|f| format!("{name}: {f}")));
    }
    assert!(outputs.contains_key("newapi"), "saveAsNewAPIHadoopFile");
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Tasks `ls` plans for `dir` at this split size.
fn planned_tasks(dir: &Path, split_size: &str) -> u64 {
    let dir = dir.display().to_string();
    let listing = sluice(["ls", "--json", dir.as_str(), "--split-size", split_size])
        .success()
        .json();
    listing["tasks"].as_u64().expect("tasks")
}

/// Rows of the big outputs: ids 0..40000 in `key`.
fn big_rows(name: &str) -> u64 {
    output(name)["records"].as_u64().expect("records")
}

#[test]
fn a_big_sequence_file_split_at_sync_markers_delivers_every_record_once() {
    let base = fixtures_dir().join("mapreduce");
    for (name, split) in [("big", "256KiB"), ("big_block", "48KiB")] {
        let dir = base.join(name);
        let tasks = planned_tasks(&dir, split);
        assert!(
            tasks >= 4,
            "{name}: one file of {} split into {tasks} tasks at {split}",
            output(name)["files"]
        );
        let out = tempfile::tempdir().expect("tempdir");
        let dir_text = dir.display().to_string();
        let exec = recorder(out.path(), "--column key");
        sluice([
            "train",
            dir_text.as_str(),
            "--exec",
            &exec,
            "--devices",
            "2",
            "--batch-size",
            "500",
            "--split-size",
            split,
            "--quiet",
        ])
        .success();
        let ids = recorded_ids(out.path(), "ids-");
        assert_exactly_once(&ids, big_rows(name), &format!("{name} in {tasks} tasks"));
    }
}

/// `train --state` over the big file in tasks of 256 KiB, its trainer
/// (tests/trainers/ack_log.py) logging what it was handed and acknowledged.
fn big_train(state: &Path, out: &Path) -> Command {
    let data = fixtures_dir().join("mapreduce/big");
    let trainer = format!("{} --column key", ack_log(out, 0.02));
    let mut cmd = Command::new(SLUICE);
    cmd.arg("train")
        .arg(data)
        .args(["--quiet", "--batch-size", "100", "--devices", "1"])
        .args(["--split-size", "256KiB"])
        .arg("--state")
        .arg(state)
        .args(["--exec", &trainer])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn a_train_over_a_split_sequence_file_killed_ten_times_delivers_every_record_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let rows = big_rows("big");
    let mut moments = Moments(seed());
    let mut runs: Vec<PathBuf> = Vec::new();
    for k in 0..10 {
        let out = dir.path().join(format!("run{k}"));
        std::fs::create_dir_all(&out).expect("mkdir");
        let mut child = big_train(&state, &out).spawn().expect("start sluice train");
        let after = moments.next_ms(200, 3_000);
        std::thread::sleep(Duration::from_millis(after));
        let finished = child.try_wait().expect("poll").is_some();
        let _ = child.kill();
        let status = child.wait().expect("wait");
        eprintln!(
            "SIGKILL {k} after {after} ms: {} rows acknowledged{}",
            count_lines(&out, "acked-"),
            if finished { " (had ended)" } else { "" }
        );
        if finished {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                use std::io::Read;
                let _ = pipe.read_to_string(&mut stderr);
            }
            assert!(status.success(), "run {k} ended on its own: {stderr}");
        }
        runs.push(out);
    }
    let out = dir.path().join("last");
    std::fs::create_dir_all(&out).expect("mkdir");
    let last = big_train(&state, &out).output().expect("rerun");
    let stderr = String::from_utf8_lossy(&last.stderr);
    assert!(last.status.success(), "the rerun after 10 kills: {stderr}");
    runs.push(out);
    // Every record reached a trainer, and no acknowledged one was handed out
    // again beyond what one device holds unacknowledged (the exec window of 4
    // batches): committed rows are never served twice.
    let mut all: HashMap<i64, u32> = HashMap::new();
    for run in &runs {
        for (id, n) in recorded_ids(run, "acked-") {
            *all.entry(id).or_insert(0) += n;
        }
    }
    let missing: Vec<i64> = (0..rows as i64)
        .filter(|i| !all.contains_key(i))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "records never acknowledged, e.g. {missing:?}"
    );
    assert!(
        all.keys().all(|id| (0..rows as i64).contains(id)),
        "ids that are no record of the file"
    );
    for k in 0..runs.len() - 1 {
        let again = acked_then_served_again(&runs[k], &runs[k + 1..]);
        assert!(
            again <= 4 * 100,
            "kill {k}: {again} acknowledged records served again"
        );
    }
}

#[test]
fn an_output_copied_while_its_job_ran_is_refused_and_its_temporary_never_read() {
    let running = output("running");
    let base = fixtures_dir().join("mapreduce");
    let dir = base.join("running");
    let temporary = dir.join(running["temporary"].as_str().expect("temporary"));
    assert!(
        std::fs::metadata(&temporary)
            .map(|m| m.len() > 0)
            .unwrap_or(false),
        "the copy holds the running reducer's data: {}",
        temporary.display()
    );
    assert!(!dir.join("_SUCCESS").exists());
    let dir_text = dir.display().to_string();
    let refused = sluice(["train", dir_text.as_str(), "--model", "none", "--quiet"]);
    assert_one_line_error(&refused, &["_temporary", "--allow-incomplete"]);
    let listing = sluice(["ls", "--json", dir_text.as_str()]).success().json();
    assert_eq!(listing["complete"], false, "{listing}");
    assert_eq!(listing["format"], "sequencefile", "{listing}");
    assert_eq!(
        listing["files"], 1,
        "only the committed part file: {listing}"
    );
    let found = check_output(
        &dir,
        &base.join(running["dump"].as_str().expect("dump")),
        "sequencefile",
        (
            "org.apache.hadoop.io.Text",
            "org.apache.hadoop.io.IntWritable",
        ),
        &["--allow-incomplete"],
    );
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// A corrupt part file: its header names the codec that wrote it but its
/// block is cut short (`truncated`), or its header names another codec
/// (`wrong_codec`) or a class that does not exist (`unknown_codec`). sluice
/// hands the trainer no row from it and says which file it is, as for any
/// damaged file: refused at planning in one line (exit 1), or a task that
/// fails at the damage (exit 2, tests/it/exactly_once.rs); never a panic.
#[test]
fn a_corrupt_sequence_file_is_named_and_hands_over_no_row() {
    let corrupt = mapreduce()["corrupt"].as_object().expect("corrupt");
    let base = fixtures_dir().join("mapreduce");
    let mut failures = Vec::new();
    for (name, entry) in corrupt {
        let dir = base.join(entry["dir"].as_str().expect("dir"));
        let file = dir.join(entry["file"].as_str().expect("file"));
        let file_text = file.display().to_string();
        let (run, rows) = train_rows(&dir, &[]);
        if !rows.is_empty() {
            failures.push(format!("{name}: {} rows handed over", rows.len()));
        }
        let lines: Vec<&str> = run.stderr.lines().filter(|l| !l.is_empty()).collect();
        let refused = run.status.code() == Some(1)
            && lines.len() == 1
            && lines[0].starts_with("sluice: ")
            && lines[0].contains(&file_text);
        let failed_task = run.status.code() == Some(2)
            && run
                .stderr
                .lines()
                .any(|l| l.contains("failed task") && l.contains(&file_text));
        if run.stderr.contains("panicked") || !(refused || failed_task) {
            failures.push(format!(
                "{name}: neither refused in one line nor a failed task naming {file_text}: {run}"
            ));
        }
        if name == "unknown_codec" && !run.stderr.contains("org.example.NoSuchCodec") {
            failures.push(format!("{name}: the codec class is not named: {run}"));
        }
    }
    assert_eq!(corrupt.len(), 3);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
