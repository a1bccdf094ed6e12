//! `--filter` against Spark itself: several hundred generated predicates
//! over edge values that Spark wrote as Parquet, ORC, CSV and JSON
//! (tests/fixtures/make_filter_diff.py, which recorded what `df.filter(EXPR)`
//! keeps of each format, or the error Spark raised). Each predicate is read
//! in process through the connectors, as a job reads: parsed, the dataset
//! opened with it (partitions and row groups pruned), every split read. The
//! ids sluice keeps must be exactly Spark's, each once. A predicate sluice
//! refuses is counted and listed, not failed; one that Spark fails on must
//! be refused or fail the read, never answer.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use arrow::array::{Array, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use connectors::{read_split, Dataset, DatasetOptions, Error, ReadPlan, RowFilter};
use futures::StreamExt;
use serde_json::Value;

use crate::common::*;

const FORMATS: [&str; 4] = ["parquet", "orc", "csv", "json"];

/// Predicates read at once, each on a thread of its own.
const THREADS: usize = 2;

/// What sluice made of one predicate.
enum Outcome {
    /// Read: the ids kept, in the order read (a null id as `i64::MIN`).
    Ids(Vec<i64>),
    /// Refused before anything was read: the filter does not parse, or
    /// does not fit the dataset's columns.
    Refused(String),
    /// Accepted, but opening or reading the dataset failed.
    Failed(String),
}

/// An error as one line.
fn line(error: impl std::fmt::Display) -> String {
    error
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// An error of opening or planning: a refusal of the filter, or a failure.
fn refused_or_failed(error: Error) -> Outcome {
    match error {
        Error::RowFilter(_) => Outcome::Refused(line(error)),
        other => Outcome::Failed(line(other)),
    }
}

/// How each predicate finds the dataset of a format.
enum Opening {
    /// Opened with the filter, as a job opens it: partitions, files and
    /// row groups left out by it (Parquet and ORC, whose footers are read
    /// in a moment).
    WithEach(String),
    /// Opened once without a filter (CSV and JSON: finding the header and
    /// inferring the types of every file again for each predicate would
    /// take minutes); each predicate reads its splits, its partitions left
    /// out as opening with it leaves them out.
    Once(Box<Dataset>),
}

/// Opens the dataset at `dir` with `filter`.
async fn open(dir: &str, filter: Option<RowFilter>) -> connectors::Result<Dataset> {
    let location = connectors::store::open(dir).expect("open the fixture's store");
    let options = DatasetOptions {
        row_filter: filter,
        ..DatasetOptions::default()
    };
    Dataset::open(location, options).await
}

/// Reads the dataset under `expr`, as a job would: the ids kept.
async fn sluice_ids(opening: &Opening, expr: &str) -> Outcome {
    let filter = match RowFilter::parse(expr) {
        Ok(filter) => filter,
        Err(e) => return Outcome::Refused(line(e)),
    };
    let dataset = match opening {
        Opening::WithEach(dir) => match open(dir, Some(filter)).await {
            Ok(dataset) => dataset,
            Err(e) => return refused_or_failed(e),
        },
        Opening::Once(all) => {
            let mut dataset = Dataset::clone(all);
            dataset
                .splits
                .retain(|s| filter.partition_may_match(&all.partition_fields, &s.partition_values));
            dataset.options.row_filter = Some(filter);
            dataset
        }
    };
    let plan = match ReadPlan::new(&dataset, Some(&["id".to_string()]), 4096) {
        Ok(plan) => plan,
        Err(e) => return refused_or_failed(e),
    };
    let mut ids = Vec::new();
    for split in &dataset.splits {
        let mut batches = read_split(&dataset.location, split, &plan, 0);
        while let Some(batch) = batches.next().await {
            let batch = match batch {
                Ok(batch) => batch,
                Err(e) => return Outcome::Failed(line(e)),
            };
            let column = cast(batch.column(0), &DataType::Int64).expect("ids as bigint");
            let column = column
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("a bigint column");
            ids.extend(column.iter().map(|id| id.unwrap_or(i64::MIN)));
        }
    }
    Outcome::Ids(ids)
}

/// Up to five of `ids`, for a message.
fn some(ids: &[i64]) -> String {
    let shown: Vec<String> = ids.iter().take(5).map(i64::to_string).collect();
    let more = if ids.len() > 5 { ", ..." } else { "" };
    format!("[{}{more}]", shown.join(", "))
}

/// How sluice's ids differ from Spark's (`want`, sorted), if they do.
fn difference(want: &[i64], got: &[i64]) -> Option<String> {
    let mut sorted = got.to_vec();
    sorted.sort_unstable();
    let mut twice: Vec<i64> = sorted
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    twice.dedup();
    sorted.dedup();
    if twice.is_empty() && sorted == want {
        return None;
    }
    let (mut missing, mut extra) = (Vec::new(), Vec::new());
    let (mut w, mut g) = (want.iter().peekable(), sorted.iter().peekable());
    loop {
        match (w.peek(), g.peek()) {
            (Some(a), Some(b)) if a == b => {
                w.next();
                g.next();
            }
            (Some(a), Some(b)) if a < b => missing.extend(w.next()),
            (Some(_), Some(_)) | (None, Some(_)) => extra.extend(g.next()),
            (Some(_), None) => missing.extend(w.next()),
            (None, None) => break,
        }
    }
    let mut parts = vec![format!("Spark keeps {}, sluice {}", want.len(), got.len())];
    for (what, ids) in [("missing", &missing), ("extra", &extra), ("twice", &twice)] {
        if !ids.is_empty() {
            parts.push(format!("{} {what} {}", ids.len(), some(ids)));
        }
    }
    Some(parts.join("; "))
}

/// What comparing one predicate's answers found.
enum Verdict {
    /// Sluice kept exactly Spark's ids.
    Equal,
    /// Spark failed, and so did sluice (refused or failed to read).
    BothFail,
    /// Sluice refused what Spark answered.
    Refused(String),
    /// A column it names is of another type as sluice reads the format than
    /// as Spark reads it back (CSV and JSON types are inferred): what the
    /// filter computes is not the same question, so it is not compared.
    TypeDiffers(String),
    /// Sluice failed a cast Spark never computed: Spark's optimizer proved
    /// the part holding it constant (`UnwrapCastInBinaryComparison` on a
    /// literal no value equals), so the malformed value failed nothing.
    /// Sluice computes every operand that `AND`, `OR`, `CASE` and nulls do
    /// not leave out, and fails on the row naming the value; counted and
    /// listed.
    OptimizedAway(String),
    /// Anything else: a bug.
    Mismatch(String),
}

fn verdict(spark: &Value, outcome: Outcome) -> Verdict {
    match (spark.get("error").and_then(Value::as_str), outcome) {
        (Some(_), Outcome::Refused(_) | Outcome::Failed(_)) => Verdict::BothFail,
        (Some(error), Outcome::Ids(ids)) => Verdict::Mismatch(format!(
            "Spark fails ({error}), sluice answers {} rows",
            ids.len()
        )),
        (None, Outcome::Refused(why)) => Verdict::Refused(why),
        (None, Outcome::Failed(why)) if why.contains("[CAST_INVALID_INPUT]") => {
            Verdict::OptimizedAway(why)
        }
        (None, Outcome::Failed(why)) => Verdict::Mismatch(format!("sluice fails: {why}")),
        (None, Outcome::Ids(ids)) => {
            let want: Vec<i64> = spark["ids"]
                .as_array()
                .expect("a predicate without `ids` or `error`")
                .iter()
                .map(|id| id.as_i64().expect("an id"))
                .collect();
            match difference(&want, &ids) {
                None => Verdict::Equal,
                Some(diff) => Verdict::Mismatch(diff),
            }
        }
    }
}

/// Counts of one format, for the closing summary.
#[derive(Default)]
struct Counts {
    predicates: usize,
    equal: usize,
    refused: usize,
    type_differs: usize,
    spark_errors: usize,
    optimized_away: usize,
    mismatched: usize,
}

/// A runtime for one reading thread.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Reads the dataset under each of `exprs`, on [`THREADS`] threads each
/// with a runtime of its own; the outcomes in the order of `exprs`.
fn read_all(opening: &Opening, exprs: &[String]) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Outcome>>> = Mutex::new(exprs.iter().map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                let mut rt = runtime();
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(expr) = exprs.get(k) else { break };
                    let read = || rt.block_on(sluice_ids(opening, expr));
                    // A panic is a failure of that predicate, not of the others.
                    let outcome =
                        std::panic::catch_unwind(AssertUnwindSafe(read)).unwrap_or_else(|panic| {
                            let what = panic
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default();
                            Outcome::Failed(format!("panicked: {}", line(what)))
                        });
                    if matches!(&outcome, Outcome::Failed(why) if why.starts_with("panicked")) {
                        rt = runtime();
                    }
                    done.lock().expect("no reader panicked")[k] = Some(outcome);
                }
            });
        }
    });
    done.into_inner()
        .expect("no reader panicked")
        .into_iter()
        .map(|outcome| outcome.expect("every predicate read"))
        .collect()
}

/// Spark's schema string (`struct<id:int,dec:decimal(20,4),...>`) as
/// column name and type name.
fn spark_columns(schema: &str) -> Vec<(String, String)> {
    let inner = schema
        .strip_prefix("struct<")
        .and_then(|s| s.strip_suffix('>'))
        .unwrap_or(schema);
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner
        .char_indices()
        .chain(std::iter::once((inner.len(), ',')))
    {
        match c {
            '(' | '<' => depth += 1,
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                if let Some((name, ty)) = inner[start..i].split_once(':') {
                    out.push((name.trim().to_ascii_lowercase(), ty.trim().to_string()));
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

/// An arrow type by Spark's name for it (`other` where Spark has none).
fn spark_name(t: &DataType) -> String {
    match t {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 => "tinyint".into(),
        DataType::Int16 => "smallint".into(),
        DataType::Int32 => "int".into(),
        DataType::Int64 => "bigint".into(),
        DataType::Float32 => "float".into(),
        DataType::Float64 => "double".into(),
        DataType::Decimal128(p, s) => format!("decimal({p},{s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "string".into(),
        DataType::Date32 => "date".into(),
        DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, _) => "timestamp".into(),
        other => format!("{other}"),
    }
}

/// The columns whose types differ between Spark's read and sluice's.
fn differing_types(dir: &str, spark_schema: &str) -> Vec<(String, String, String)> {
    let dataset = runtime()
        .block_on(open(dir, None))
        .unwrap_or_else(|e| panic!("cannot open {dir}: {e}"));
    let ours = dataset.schema();
    spark_columns(spark_schema)
        .into_iter()
        .filter_map(|(name, spark)| {
            let field = ours
                .fields()
                .iter()
                .find(|f| f.name().eq_ignore_ascii_case(&name))?;
            let mine = spark_name(field.data_type());
            (mine != spark).then_some((name, spark, mine))
        })
        .collect()
}

/// Reads every predicate of one format; its counts, and the refusals and
/// mismatches as lines.
fn check_format(
    dir: &Path,
    cases: &[Value],
    spark_schema: &str,
) -> (Counts, Vec<String>, Vec<String>) {
    let exprs: Vec<String> = cases
        .iter()
        .map(|c| {
            c["expr"]
                .as_str()
                .expect("a predicate without `expr`")
                .to_string()
        })
        .collect();
    let dir = dir.display().to_string();
    let differing = differing_types(&dir, spark_schema);
    let opening = if dir.ends_with("csv") || dir.ends_with("json") {
        let all = runtime().block_on(open(&dir, None));
        Opening::Once(Box::new(
            all.unwrap_or_else(|e| panic!("cannot open {dir}: {e}")),
        ))
    } else {
        Opening::WithEach(dir)
    };
    let outcomes = read_all(&opening, &exprs);
    let mut counts = Counts {
        predicates: cases.len(),
        ..Counts::default()
    };
    let (mut refusals, mut mismatches) = (Vec::new(), Vec::new());
    for ((case, expr), outcome) in cases.iter().zip(&exprs).zip(outcomes) {
        let shown = short(expr);
        let named = RowFilter::parse(expr)
            .map(|f| f.columns())
            .unwrap_or_default();
        let differs: Vec<String> = differing
            .iter()
            .filter(|(name, ..)| named.iter().any(|n| n.eq_ignore_ascii_case(name)))
            .map(|(name, spark, mine)| format!("{name} is {spark} in Spark, {mine} in sluice"))
            .collect();
        let judged = if differs.is_empty() || matches!(outcome, Outcome::Refused(_)) {
            verdict(case, outcome)
        } else {
            Verdict::TypeDiffers(differs.join("; "))
        };
        match judged {
            Verdict::TypeDiffers(why) => {
                counts.type_differs += 1;
                refusals.push(format!("`{shown}`: not compared: {why}"));
            }
            Verdict::OptimizedAway(why) => {
                counts.optimized_away += 1;
                refusals.push(format!(
                    "`{shown}`: cast Spark optimized away: {}",
                    short(&why)
                ));
            }
            Verdict::Equal => counts.equal += 1,
            Verdict::BothFail => counts.spark_errors += 1,
            Verdict::Refused(why) => {
                counts.refused += 1;
                refusals.push(format!("`{shown}`: {}", short(&why)));
            }
            Verdict::Mismatch(what) => {
                counts.mismatched += 1;
                mismatches.push(format!("`{shown}`: {what}"));
            }
        }
    }
    (counts, refusals, mismatches)
}

/// A long predicate or message cut for a line of the report.
fn short(text: &str) -> String {
    const MAX: usize = 300;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}... ({} chars)", &text[..cut], text.chars().count()),
        None => text.to_string(),
    }
}

/// The CSV files Spark wrote are typed as Spark's `inferSchema` typed them
/// when it read them back (`df.schema`): `int` where every value fits 32
/// bits, `bigint` where one does not, `timestamp` an instant, and so on.
#[test]
fn csv_columns_are_typed_as_spark_infers_them() {
    let expected = fixture_json("filter_diff/expected.json", "make_filter_diff.py");
    let entry = &expected["formats"]["csv"];
    let dir = fixtures_dir()
        .join("filter_diff")
        .join(entry["dir"].as_str().expect("csv without `dir`"));
    let schema = entry["schema"]
        .as_str()
        .expect("csv without Spark's schema");
    let spark = spark_columns(schema);
    for (column, spark_type) in [("id", "int"), ("l", "bigint"), ("ts", "timestamp")] {
        assert!(
            spark.contains(&(column.to_string(), spark_type.to_string())),
            "the fixture's {column} is no longer {spark_type} in Spark: {schema}"
        );
    }
    let dir = dir.display().to_string();
    let differing = differing_types(&dir, schema);
    assert!(
        differing.is_empty(),
        "CSV columns typed otherwise than Spark's {schema}: {differing:?}"
    );
    // A `timestamp` is an instant (a zone in its arrow type), not a
    // wall-clock `timestamp_ntz`.
    let dataset = runtime()
        .block_on(open(&dir, None))
        .unwrap_or_else(|e| panic!("cannot open {dir}: {e}"));
    let ts = dataset.schema().field_with_name("ts").cloned();
    assert!(
        matches!(
            ts.as_ref().map(|f| f.data_type()),
            Ok(DataType::Timestamp(_, Some(_)))
        ),
        "{ts:?}"
    );
}

#[test]
fn sluice_keeps_exactly_the_rows_spark_keeps() {
    let expected = fixture_json("filter_diff/expected.json", "make_filter_diff.py");
    let base = fixtures_dir().join("filter_diff");
    let mut report = Vec::new();
    let mut summary = Vec::new();
    let mut all_mismatches = Vec::new();
    for format in FORMATS {
        let entry = &expected["formats"][format];
        let cases = entry["predicates"]
            .as_array()
            .unwrap_or_else(|| panic!("filter_diff/expected.json has no {format} predicates"));
        assert!(
            cases.len() >= 300,
            "{format}: {} predicates; make_filter_diff.py generates at least 300",
            cases.len()
        );
        let dir = base.join(entry["dir"].as_str().expect("a format without `dir`"));
        let started = Instant::now();
        let schema = entry["schema"].as_str().unwrap_or_default();
        let (counts, refusals, mismatches) = check_format(&dir, cases, schema);
        summary.push(format!(
            "filter_diff {format}: {} predicates, {} equal, {} refused, {} not compared \
             (a column typed otherwise than Spark infers it), {} spark errors, \
             {} failed on a cast Spark's optimizer left out, {} mismatched ({:.1} s)",
            counts.predicates,
            counts.equal,
            counts.refused,
            counts.type_differs,
            counts.spark_errors,
            counts.optimized_away,
            counts.mismatched,
            started.elapsed().as_secs_f64()
        ));
        all_mismatches.extend(mismatches.into_iter().map(|m| format!("{format} {m}")));
        // A cast failing where Spark answered is the rare optimizer case,
        // not a way around a mismatch: more than 1 in 100 is a bug.
        if counts.optimized_away * 100 > counts.predicates {
            all_mismatches.push(format!(
                "{format}: {} predicates fail a cast where Spark answers (see the list)",
                counts.optimized_away
            ));
        }
        report.push((format, refusals));
    }
    for (format, refusals) in &report {
        eprintln!(
            "filter_diff {format}: {} refused or not compared:",
            refusals.len()
        );
        for refusal in refusals {
            eprintln!("  {refusal}");
        }
    }
    for line in &summary {
        eprintln!("{line}");
    }
    assert!(
        all_mismatches.is_empty(),
        "{} predicates where sluice answers otherwise than Spark's df.filter:\n{}\n{}",
        all_mismatches.len(),
        all_mismatches.join("\n"),
        summary.join("\n")
    );
}
