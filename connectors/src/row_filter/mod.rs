//! Row filters (`--filter`): a Spark SQL `WHERE` expression over any column,
//! data and partition columns alike, kept exactly as `df.filter(EXPR)` keeps
//! rows in Spark 4 (ANSI mode): SQL's three-valued logic (a comparison with
//! null is unknown, `NOT` of unknown is unknown, only rows where the whole
//! filter is true are kept), numbers compared after Spark's widening with
//! `-0.0 = 0.0` and NaN above every number, strings by their bytes, dates
//! and timestamps in the session time zone (`--timezone`, UTC unless given:
//! see [`tz`]), arithmetic that fails where Spark's fails.
//!
//! The text is read by Spark's lexical rules ([`lex`]) and parsed by its
//! grammar ([`parse`]) into a tree of our own, bound to the dataset's
//! schema ([`bind`]: comparisons of a column with literals as such,
//! everything else typed by [`resolve`] into an [`expr`]; unknown columns
//! and type mismatches are refused there, naming the place), then used
//! twice: to skip what cannot hold a kept row from statistics ([`prune`]:
//! partition values, Parquet row groups and pages) and to keep rows
//! ([`eval`]).

mod arith;
mod bind;
pub(crate) mod bloom;
mod cast;
mod eval;
mod expr;
mod func;
mod hash;
mod lex;
mod like;
pub(crate) mod orc;
pub(crate) mod parquet;
mod parse;
pub(crate) mod prune;
mod resolve;
mod rows;
mod types;
mod tz;
mod unwrap;

use std::fmt;

use arrow::datatypes::Schema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub(crate) use bind::Pred;
pub use parquet::{filter_counts, FilterCounts};
pub use prune::PruneCounts;
pub use tz::{SessionTz, TimeZoneError};

/// A place in the expression: line and column, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// Line, from 1.
    pub line: u64,
    /// Column, from 1.
    pub column: u64,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Why a `--filter` expression was refused; each names the place.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RowFilterError {
    /// The expression does not parse, or uses what a filter cannot.
    #[error("--filter: {reason} at {at} in `{text}`")]
    Syntax {
        /// The expression.
        text: String,
        /// What is wrong.
        reason: String,
        /// Where.
        at: Pos,
    },
    /// A column the dataset does not have.
    #[error("--filter: unknown column {column} at {at} in `{text}`; columns are: {available}")]
    UnknownColumn {
        /// The expression.
        text: String,
        /// The column named.
        column: String,
        /// Where.
        at: Pos,
        /// The columns there are, comma separated.
        available: String,
    },
    /// A literal that cannot be compared with its column.
    #[error("--filter: {reason} at {at} in `{text}`")]
    Type {
        /// The expression.
        text: String,
        /// What does not fit.
        reason: String,
        /// Where.
        at: Pos,
    },
}

/// A parsed `--filter` expression (not yet bound to a schema), with the
/// session time zone its timestamps are computed in.
#[derive(Debug, Clone, PartialEq)]
pub struct RowFilter {
    text: String,
    node: parse::Node,
    tz: SessionTz,
}

impl RowFilter {
    /// Parses a `--filter` expression (timestamps in UTC until
    /// [`RowFilter::with_timezone`] says otherwise).
    pub fn parse(text: &str) -> Result<RowFilter, RowFilterError> {
        let node = parse::parse(text)?;
        Ok(RowFilter {
            text: text.to_string(),
            node,
            tz: SessionTz::Utc,
        })
    }

    /// The filter with its timestamps computed in `tz` (`--timezone`).
    pub fn with_timezone(mut self, tz: SessionTz) -> RowFilter {
        self.tz = tz;
        self
    }

    /// The session time zone its timestamps are computed in.
    pub fn timezone(&self) -> SessionTz {
        self.tz
    }

    /// The expression as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The columns the expression names, each once, in order of appearance.
    pub fn columns(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.node.columns(&mut out);
        out
    }

    /// Checks the expression against `schema` (data and partition columns)
    /// and types every literal by its column.
    pub(crate) fn bind(&self, schema: &Schema) -> Result<Pred, RowFilterError> {
        bind::bind(&self.node, schema, &self.text, self.tz)
    }

    /// Whether a partition with these values (aligned with `fields`, `None`
    /// for null) may hold a row the filter keeps; conditions on data
    /// columns may be anything here.
    pub fn partition_may_match(
        &self,
        fields: &[arrow::datatypes::Field],
        values: &[Option<String>],
    ) -> bool {
        if fields.is_empty() {
            return true;
        }
        let schema = Schema::new(fields.to_vec());
        let pred = bind::bind_lenient(&self.node, &schema, self.tz);
        let stats = prune::PartitionStats { fields, values };
        prune::may_match(&pred, &stats)
            .first()
            .copied()
            .unwrap_or(true)
    }

    /// As [`RowFilter::partition_may_match`], with `fields` the partition
    /// columns known so far; `None` when a condition on one of them does
    /// not fit its type (the filter is refused on any such schema).
    pub fn partition_may_match_typed(
        &self,
        fields: &[arrow::datatypes::Field],
        values: &[Option<String>],
    ) -> Option<bool> {
        let schema = Schema::new(fields.to_vec());
        let pred = bind::bind_partial(&self.node, &schema, self.tz)?;
        let stats = prune::PartitionStats { fields, values };
        Some(
            prune::may_match(&pred, &stats)
                .first()
                .copied()
                .unwrap_or(true),
        )
    }

    /// The expression bound to what `schema` can decide; conditions on
    /// other columns (or that do not fit) may be anything (for pruning).
    pub(crate) fn lenient(&self, schema: &Schema) -> Pred {
        bind::bind_lenient(&self.node, schema, self.tz)
    }

    /// The filter's value on one row of partition values (`values` aligned
    /// with `fields`, `None` for null); with `known_only`, only the
    /// top-level conjuncts that name nothing but `fields` count, and one
    /// that is not true there makes it false.
    pub(crate) fn on_values(
        &self,
        fields: &[arrow::datatypes::Field],
        values: &[Option<String>],
        known_only: bool,
    ) -> Option<bool> {
        use arrow::array::Array;
        let batch = values_batch(fields, values)?;
        let schema = batch.schema();
        let nodes: Vec<&parse::Node> = match (&self.node, known_only) {
            (parse::Node::And(list), true) => list.iter().collect(),
            (node, _) => vec![node],
        };
        let mut out = Some(true);
        for node in nodes {
            if known_only {
                let mut names = Vec::new();
                node.columns(&mut names);
                let known = names
                    .iter()
                    .all(|n| fields.iter().any(|f| f.name().eq_ignore_ascii_case(n)));
                if !known {
                    continue;
                }
            }
            let value = bind::bind(node, &schema, &self.text, self.tz)
                .and_then(|pred| {
                    eval::eval(&pred, &batch).map_err(|e| RowFilterError::Type {
                        text: self.text.clone(),
                        reason: e.to_string(),
                        at: Pos::default(),
                    })
                })
                .ok()
                .and_then(|v| v.is_valid(0).then(|| v.value(0)));
            match value {
                Some(true) => {}
                _ if known_only => return Some(false),
                Some(false) => return Some(false),
                None => out = None,
            }
        }
        out
    }

    /// Checks the expression against `schema`: every column exists and
    /// every literal fits its column.
    pub fn check(&self, schema: &Schema) -> Result<(), RowFilterError> {
        self.bind(schema).map(drop)
    }
}

impl fmt::Display for RowFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A filter as it travels: its text alone where its zone is UTC, else its
/// text and zone.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum FilterForm {
    /// The text, in UTC.
    Text(String),
    /// The text and its zone.
    Zoned { filter: String, timezone: SessionTz },
}

impl Serialize for RowFilter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.tz.is_utc() {
            s.serialize_str(&self.text)
        } else {
            FilterForm::Zoned {
                filter: self.text.clone(),
                timezone: self.tz,
            }
            .serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for RowFilter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (text, tz) = match FilterForm::deserialize(d)? {
            FilterForm::Text(text) => (text, SessionTz::Utc),
            FilterForm::Zoned { filter, timezone } => (filter, timezone),
        };
        RowFilter::parse(&text)
            .map(|f| f.with_timezone(tz))
            .map_err(serde::de::Error::custom)
    }
}

pub(crate) use eval::keep;

/// One row of partition values typed as their fields (a value that is no
/// value of its type is null); `None` where a value cannot be typed at all.
fn values_batch(
    fields: &[arrow::datatypes::Field],
    values: &[Option<String>],
) -> Option<arrow::record_batch::RecordBatch> {
    let mut columns: Vec<arrow::array::ArrayRef> = Vec::with_capacity(fields.len());
    for (i, field) in fields.iter().enumerate() {
        let value = values.get(i).cloned().flatten();
        let strings: arrow::array::ArrayRef =
            std::sync::Arc::new(arrow::array::StringArray::from(vec![value
                .as_deref()
                .map(str::trim)]));
        columns.push(arrow::compute::cast(&strings, field.data_type()).ok()?);
    }
    let schema = Schema::new(
        fields
            .iter()
            .map(|f| f.clone().with_nullable(true))
            .collect::<Vec<_>>(),
    );
    let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(1));
    arrow::record_batch::RecordBatch::try_new_with_options(
        std::sync::Arc::new(schema),
        columns,
        &options,
    )
    .ok()
}

/// One item of `--columns`: a column of the dataset, or an expression that
/// computes one (`hash(user) % 1000 AS user_bucket`).
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnItem {
    /// The output column's name.
    pub name: String,
    /// The expression, for a computed column; `None` for a column read as it is.
    pub expr: Option<String>,
}

/// Parses a `--columns` list: names, and expressions with `AS name`.
pub fn parse_columns(text: &str) -> Result<Vec<ColumnItem>, RowFilterError> {
    let items = parse::parse_select(text)?;
    items
        .into_iter()
        .map(|item| match (item.node, item.alias) {
            (parse::Node::Column(c), None) => Ok(ColumnItem {
                name: c.name,
                expr: None,
            }),
            (parse::Node::Column(c), Some(alias)) if alias == c.name => Ok(ColumnItem {
                name: c.name,
                expr: None,
            }),
            (_, Some(alias)) => Ok(ColumnItem {
                name: alias,
                expr: Some(item.text),
            }),
            (node, None) => Err(RowFilterError::Syntax {
                text: text.to_string(),
                reason: format!("a computed column needs a name: `{} AS name`", item.text),
                at: node.pos(),
            }),
        })
        .collect()
}

/// A computed column's expression, typed against `schema`.
#[derive(Debug, Clone)]
pub struct ComputedColumn {
    expr: expr::Expr,
}

impl ComputedColumn {
    /// Parses and types `text` against `schema`, timestamps in `tz`.
    pub fn bind(
        text: &str,
        schema: &Schema,
        tz: SessionTz,
    ) -> Result<ComputedColumn, RowFilterError> {
        let node = parse::parse(text)?;
        let expr = resolve::Resolver { schema, text, tz }.expr(&node)?;
        if expr.ty == arrow::datatypes::DataType::Null {
            return Ok(ComputedColumn {
                expr: expr.implicit(&arrow::datatypes::DataType::Utf8),
            });
        }
        Ok(ComputedColumn { expr })
    }

    /// The type of its values.
    pub fn data_type(&self) -> &arrow::datatypes::DataType {
        &self.expr.ty
    }

    /// The columns it reads.
    pub fn columns(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.expr.columns(&mut out);
        out
    }

    /// Its value for every row of `batch`.
    pub fn eval(
        &self,
        batch: &arrow::record_batch::RecordBatch,
    ) -> Result<arrow::array::ArrayRef, arrow::error::ArrowError> {
        expr::eval(&self.expr, batch)
    }
}

/// Counts a filtered batch: `read` rows decoded, `kept` of them kept.
pub(crate) fn count_rows(read: u64, kept: u64) {
    use std::sync::atomic::Ordering;
    parquet::ROWS_FILTERED.fetch_add(read - kept, Ordering::Relaxed);
    parquet::ROWS_KEPT.fetch_add(kept, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, ArrayRef, Decimal128Array, Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;

    use super::*;

    fn batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("d", DataType::Decimal128(10, 2), true),
        ]);
        let d = Decimal128Array::from(vec![Some(125), None, Some(1250), Some(-5)])
            .with_precision_and_scale(10, 2)
            .expect("decimal");
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![Some(1), None, Some(7), Some(-3)])),
            Arc::new(StringArray::from(vec![
                Some("apple"),
                Some("b"),
                None,
                Some("apricot"),
            ])),
            Arc::new(d),
        ];
        RecordBatch::try_new(Arc::new(schema), columns).expect("batch")
    }

    /// The value per row: `Some(true)`, `Some(false)` or `None` (unknown).
    fn values(expr: &str) -> Vec<Option<bool>> {
        let b = batch();
        let pred = RowFilter::parse(expr)
            .expect("parses")
            .bind(&b.schema())
            .expect("binds");
        let out = eval::eval(&pred, &b).expect("evaluates");
        (0..out.len())
            .map(|i| out.is_valid(i).then(|| out.value(i)))
            .collect()
    }

    #[test]
    fn three_valued_logic_as_in_sql() {
        let (t, f, n) = (Some(true), Some(false), None);
        assert_eq!(values("i > 0"), [t, n, t, f]);
        assert_eq!(values("NOT (i > 0)"), [f, n, f, t]);
        assert_eq!(values("i > 0 OR s = 'b'"), [t, t, t, f]);
        assert_eq!(values("i > 0 AND s = 'b'"), [f, n, n, f]);
        assert_eq!(values("i IN (1, NULL)"), [t, n, n, n]);
        assert_eq!(values("i NOT IN (1, NULL)"), [f, n, n, n]);
        assert_eq!(values("i = NULL"), [n, n, n, n]);
        assert_eq!(values("i IS NULL"), [f, t, f, f]);
        assert_eq!(values("-5 <= i"), [t, n, t, t]);
    }

    #[test]
    fn numbers_widen_as_spark_widens_them() {
        let (t, f, n) = (Some(true), Some(false), None);
        assert_eq!(values("i < 1.5"), [t, n, f, t]);
        assert_eq!(values("i >= 7e0"), [f, n, t, f]);
        assert_eq!(values("d = 1.25"), [t, n, f, f]);
        assert_eq!(values("d > 12.499"), [f, n, t, f]);
        assert_eq!(values("d BETWEEN -1 AND 2"), [t, n, f, t]);
        assert_eq!(values("i = '7'"), [f, n, t, f]);
    }

    #[test]
    fn decimal_division_and_remainder_as_spark() {
        let (t, f, n) = (Some(true), Some(false), None);
        // decimal(10,2) / decimal(1,0): decimal(14,6), half up.
        assert_eq!(values("d / 3 = 0.416667"), [t, n, f, f]);
        assert_eq!(values("d / 3 = 4.166667"), [f, n, t, f]);
        assert_eq!(values("d / 3 = -0.016667"), [f, n, f, t]);
        // decimal(10,2) / int: decimal(21,13).
        assert_eq!(values("d / i = 0.0166666666667"), [f, n, f, t]);
        assert_eq!(values("d % 3 = 0.50 OR d % 3 = -0.05"), [f, n, t, t]);
        assert_eq!(values("d % 0.5 = 0.25"), [t, n, f, f]);
        let b = batch();
        let pred = RowFilter::parse("d / (i - i) > 0")
            .expect("parses")
            .bind(&b.schema())
            .expect("binds");
        let err = eval::eval(&pred, &b).expect_err("by zero").to_string();
        assert!(err.contains("DIVIDE_BY_ZERO"), "{err}");
    }

    #[test]
    fn like_and_strings_by_their_bytes() {
        let (t, f, n) = (Some(true), Some(false), None);
        assert_eq!(values("s LIKE 'ap%'"), [t, f, n, t]);
        assert_eq!(values("s NOT LIKE '%p%'"), [f, t, n, f]);
        assert_eq!(values("s > 'apple'"), [f, t, n, t]);
    }

    #[test]
    fn errors_name_the_place() {
        let b = batch();
        let bind = |e: &str| RowFilter::parse(e).and_then(|f| f.bind(&b.schema()).map(drop));
        let err = bind("ctry = 'US'").expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "--filter: unknown column ctry at 1:1 in `ctry = 'US'`; columns are: i, s, d"
        );
        let err = bind("i > 1 AND d = true")
            .expect_err("mismatch")
            .to_string();
        assert!(
            err.contains("cannot compare decimal(10,2) with boolean") && err.contains("at 1:11"),
            "{err}"
        );
        // Spark 4 casts the string column to bigint and fails the query on
        // the first value that is no number; so does sluice, on the rows.
        assert!(bind("s = 3").is_ok());
        assert!(bind("s = DATE '2024-01-01' AND i = 1").is_ok());
        assert!(bind("i = DATE '2024-01-01'").is_err(), "no common type");
        let err = bind("i >").expect_err("syntax").to_string();
        assert!(
            err.starts_with("--filter: ") && err.contains("at 1:"),
            "{err}"
        );
        assert!(
            bind("i = 'x'").is_err(),
            "'x' is no bigint: Spark fails the query"
        );
        assert!(bind("i").is_err(), "an integer column is no condition");
    }

    #[test]
    fn spark_semantics_on_edge_values() {
        let (t, f, n) = (Some(true), Some(false), None);
        let schema = Schema::new(vec![
            Field::new("d", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
        ]);
        let d = arrow::array::Float64Array::from(vec![
            Some(-0.0),
            Some(0.0),
            Some(f64::NAN),
            Some(f64::INFINITY),
            None,
        ]);
        let s = StringArray::from(vec![
            Some("a\\b"),
            Some("O'Brien"),
            Some("50%"),
            Some(""),
            None,
        ]);
        let b =
            RecordBatch::try_new(Arc::new(schema), vec![Arc::new(d), Arc::new(s)]).expect("batch");
        let values = |expr: &str| -> Vec<Option<bool>> {
            let pred = RowFilter::parse(expr)
                .expect("parses")
                .bind(&b.schema())
                .expect("binds");
            let out = eval::eval(&pred, &b).expect("evaluates");
            (0..out.len())
                .map(|i| out.is_valid(i).then(|| out.value(i)))
                .collect()
        };
        assert_eq!(values("d = 0"), [t, t, f, f, n]);
        assert_eq!(values("d < 0"), [f, f, f, f, n]);
        assert_eq!(values("d > 1e308"), [f, f, t, t, n]);
        assert_eq!(values("d = CAST('NaN' AS DOUBLE)"), [f, f, t, f, n]);
        assert_eq!(values("d + 0 = d"), [t, t, t, t, n]);
        assert_eq!(values("d <=> NULL"), [f, f, f, f, t]);
        assert_eq!(values("NOT d <=> 0.0"), [f, f, t, t, t]);
        assert_eq!(values(r"s = 'a\\b'"), [t, f, f, f, n]);
        assert_eq!(values("s = 'O''Brien'"), [f, t, f, f, n]);
        assert_eq!(values(r"s LIKE '%\%'"), [f, f, t, f, n]);
        assert_eq!(values("length(s) = 0 OR s ILIKE 'o%'"), [f, t, f, t, n]);
        let refused = |expr: &str| {
            RowFilter::parse(expr)
                .and_then(|f| f.bind(&b.schema()).map(drop))
                .expect_err(expr)
                .to_string()
        };
        assert!(refused(r"s LIKE 'a\\b'").contains("escape character"));
        assert!(refused("md5(s) = 'x'").contains("function md5"));
    }

    /// Long lists and chains are parsed, bound and computed without a
    /// stack frame per term: on a thread with a small stack.
    #[test]
    fn long_lists_need_no_stack() {
        let worker = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let schema = Schema::new(vec![Field::new("i", DataType::Int32, true)]);
                let i = Int32Array::from((0..5000).collect::<Vec<i32>>());
                let b = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(i)]).expect("batch");
                let list = (0..100_000)
                    .map(|v| (v * 2).to_string())
                    .collect::<Vec<_>>()
                    .join(",");
                let chain = (0..10_000)
                    .map(|v| format!("i = {}", v * 3))
                    .collect::<Vec<_>>()
                    .join(" OR ");
                let mut kept = Vec::new();
                for expr in [
                    format!("i IN ({list})"),
                    chain,
                    format!("abs(i) IN ({list})"),
                ] {
                    let pred = RowFilter::parse(&expr)
                        .expect("parses")
                        .bind(&b.schema())
                        .expect("binds");
                    let out = eval::eval(&pred, &b).expect("evaluates");
                    kept.push(out.true_count());
                }
                kept
            })
            .expect("thread");
        assert_eq!(worker.join().expect("no overflow"), [2500, 1667, 2500]);
    }

    /// Timestamps in the session's zone; `timestamp_ntz` untouched.
    #[test]
    fn timestamps_in_the_session_time_zone() {
        use arrow::array::TimestampMicrosecondArray;
        use arrow::datatypes::TimeUnit;
        let utc = |s: &str| {
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S")
                .expect("a time")
                .and_utc()
                .timestamp_micros()
        };
        let times = [
            "2026-03-08 09:59:59",
            "2026-03-08 10:30:00",
            "2026-11-01 08:30:00",
            "2026-11-01 09:30:00",
            "2026-01-02 07:30:00",
        ];
        let schema = Schema::new(vec![
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new(
                "ntz",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ),
        ]);
        let ts = TimestampMicrosecondArray::from(times.iter().map(|t| utc(t)).collect::<Vec<_>>())
            .with_timezone("UTC");
        let ntz = TimestampMicrosecondArray::from(times.iter().map(|t| utc(t)).collect::<Vec<_>>());
        let b = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(ts), Arc::new(ntz)])
            .expect("batch");
        let la = SessionTz::parse("America/Los_Angeles").expect("zone");
        let kept = |expr: &str| -> Vec<bool> {
            let pred = RowFilter::parse(expr)
                .expect("parses")
                .with_timezone(la)
                .bind(&b.schema())
                .expect("binds");
            let out = eval::eval(&pred, &b).expect("evaluates");
            (0..out.len())
                .map(|i| out.is_valid(i) && out.value(i))
                .collect()
        };
        let (t, f) = (true, false);
        assert_eq!(kept("hour(ts) = 1"), [t, f, t, t, f]);
        assert_eq!(kept("ts >= '2026-03-08 02:30:00'"), [f, t, t, t, f]);
        assert_eq!(
            kept("ts = TIMESTAMP '2026-11-01 01:30:00'"),
            [f, f, t, f, f]
        );
        assert_eq!(kept("to_date(ts) = '2026-01-01'"), [f, f, f, f, t]);
        assert_eq!(
            kept("cast(ts AS string) LIKE '2026-11-01 01:30%'"),
            [f, f, t, t, f]
        );
        assert_eq!(
            kept("date_trunc('day', ts) = '2026-11-01'"),
            [f, f, t, t, f]
        );
        assert_eq!(
            kept("date_trunc('hour', ts) = '2026-11-01 01:00:00'"),
            [f, f, t, f, f]
        );
        assert_eq!(kept("day(ts) = 1 AND month(ts) = 1"), [f, f, f, f, t]);
        assert_eq!(
            kept("cast(ts AS date) = DATE '2026-03-08'"),
            [t, t, f, f, f]
        );
        // `timestamp_ntz`: wall-clock times, no zone shifts them.
        assert_eq!(kept("hour(ntz) = 9"), [t, f, f, t, f]);
        assert_eq!(kept("ntz = '2026-11-01 08:30:00'"), [f, f, t, f, f]);
        assert_eq!(kept("to_date(ntz) = '2026-01-02'"), [f, f, f, f, t]);
    }

    #[test]
    fn partitions_are_pruned_on_their_values() {
        let fields = vec![Field::new("ctry", DataType::Utf8, true)];
        let us = [Some("US".to_string())];
        let null = [None];
        let f = RowFilter::parse("ctry = 'DE' AND x > 3").expect("parses");
        assert!(!f.partition_may_match(&fields, &us));
        assert!(!f.partition_may_match(&fields, &null));
        let f = RowFilter::parse("ctry IS NULL OR x > 3").expect("parses");
        assert!(f.partition_may_match(&fields, &us), "x may be anything");
        let f = RowFilter::parse("NOT (ctry = 'US')").expect("parses");
        assert!(!f.partition_may_match(&fields, &us));
        assert!(
            !f.partition_may_match(&fields, &null),
            "NOT of unknown keeps nothing"
        );
    }
}
