//! Skipping from statistics: whether any row of a container (a partition, a
//! Parquet row group, a page) may make the filter true, decided on what is
//! known of each column there (its least and greatest value, its nulls and
//! rows). Each part of the filter is given the truth values it may take in
//! the container (true, false, unknown), combined as SQL combines them; a
//! container is skipped only where the whole filter cannot be true. What is
//! not known (no statistics, a column of the data at the partition level)
//! may be anything.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, StringArray, UInt64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field};
use serde::Serialize;

use super::bind::{is_string, Pred};
use super::eval::{column_as, compare, literal_for};
use super::parse::Op;

/// What is known of one column in each of a run of containers.
pub(crate) struct ColumnStats {
    /// Least non-null value in each container (null where not known).
    pub mins: ArrayRef,
    /// Greatest non-null value in each (null where not known).
    pub maxes: ArrayRef,
    /// Nulls in each, where known.
    pub null_counts: Option<UInt64Array>,
    /// Rows in each, where known.
    pub rows: Option<UInt64Array>,
    /// Whether floating point values are known to hold no NaN (statistics
    /// leave NaN out of their least and greatest values).
    pub nan_free: bool,
}

/// Statistics of a run of containers, by column.
pub(crate) trait Stats {
    /// How many containers.
    fn len(&self) -> usize;
    /// What is known of `column`, `None` when nothing is.
    fn column(&self, column: &str) -> Option<ColumnStats>;
    /// The one row every container holds, where that is known (a
    /// partition's values): any condition on its columns is then computed.
    fn row(&self) -> Option<arrow::record_batch::RecordBatch> {
        None
    }
}

/// The truth values a part of the filter may take in each container.
struct Maybe {
    t: Vec<bool>,
    f: Vec<bool>,
    n: Vec<bool>,
}

impl Maybe {
    fn anything(len: usize) -> Maybe {
        Maybe {
            t: vec![true; len],
            f: vec![true; len],
            n: vec![true; len],
        }
    }
}

/// Which containers may hold a row the filter keeps.
pub(crate) fn may_match(pred: &Pred, stats: &dyn Stats) -> Vec<bool> {
    maybe(pred, stats).t
}

fn maybe(pred: &Pred, stats: &dyn Stats) -> Maybe {
    let len = stats.len();
    match pred {
        Pred::And(list) => list
            .iter()
            .map(|p| maybe(p, stats))
            .reduce(|a, b| both(a, b, len))
            .unwrap_or(Maybe {
                t: vec![true; len],
                f: vec![false; len],
                n: vec![false; len],
            }),
        Pred::Or(list) => list
            .iter()
            .map(|p| maybe(p, stats))
            .reduce(|a, b| either(a, b, len))
            .unwrap_or(Maybe {
                t: vec![false; len],
                f: vec![true; len],
                n: vec![false; len],
            }),
        Pred::Not(a) => {
            let a = maybe(a, stats);
            Maybe {
                t: a.f,
                f: a.t,
                n: a.n,
            }
        }
        Pred::Rows(expr) => stats
            .row()
            .and_then(|row| computed(expr, &row, len))
            .unwrap_or_else(|| Maybe::anything(len)),
        Pred::Opaque => Maybe::anything(len),
        Pred::Const(v) => Maybe {
            t: vec![*v == Some(true); len],
            f: vec![*v == Some(false); len],
            n: vec![v.is_none(); len],
        },
        Pred::IsNull { column, negated } => match stats.column(column) {
            None => Maybe::anything(len),
            Some(s) => {
                let (some_null, some_value) = nulls(&s, len);
                let (t, f) = if *negated {
                    (some_value, some_null)
                } else {
                    (some_null, some_value)
                };
                Maybe {
                    t,
                    f,
                    n: vec![false; len],
                }
            }
        },
        Pred::Cmp {
            column,
            op,
            cast: to,
            value,
        } => match stats.column(column) {
            None => Maybe::anything(len),
            Some(s) => {
                compared(&s, *op, to.as_ref(), value, len).unwrap_or_else(|| Maybe::anything(len))
            }
        },
        Pred::Like {
            column,
            matcher,
            negated: false,
        } => match (stats.column(column), &matcher.prefix) {
            (Some(s), Some(prefix)) => {
                prefixed(&s, prefix, len).unwrap_or_else(|| Maybe::anything(len))
            }
            _ => Maybe::anything(len),
        },
        Pred::Like { .. } => Maybe::anything(len),
    }
}

/// A condition computed on the one row of a partition's values, in each
/// of its `len` containers; `None` when it names another column or fails
/// (a value that is no number: the rows will say).
fn computed(
    expr: &super::expr::Expr,
    row: &arrow::record_batch::RecordBatch,
    len: usize,
) -> Option<Maybe> {
    let mut names = Vec::new();
    expr.columns(&mut names);
    if names.iter().any(|n| row.column_by_name(n).is_none()) {
        return None;
    }
    let value = super::expr::eval(expr, row).ok()?;
    let value = value.as_any().downcast_ref::<BooleanArray>()?;
    let (t, f, n) = match value.is_valid(0).then(|| value.value(0)) {
        Some(true) => (true, false, false),
        Some(false) => (false, true, false),
        None => (false, false, true),
    };
    Some(Maybe {
        t: vec![t; len],
        f: vec![f; len],
        n: vec![n; len],
    })
}

/// `a AND b` in each container.
fn both(a: Maybe, b: Maybe, len: usize) -> Maybe {
    let n = (0..len)
        .map(|i| (a.n[i] && (b.t[i] || b.n[i])) || (b.n[i] && (a.t[i] || a.n[i])))
        .collect();
    Maybe {
        t: (0..len).map(|i| a.t[i] && b.t[i]).collect(),
        f: (0..len).map(|i| a.f[i] || b.f[i]).collect(),
        n,
    }
}

/// `a OR b` in each container.
fn either(a: Maybe, b: Maybe, len: usize) -> Maybe {
    let n = (0..len)
        .map(|i| (a.n[i] && (b.f[i] || b.n[i])) || (b.n[i] && (a.f[i] || a.n[i])))
        .collect();
    Maybe {
        t: (0..len).map(|i| a.t[i] || b.t[i]).collect(),
        f: (0..len).map(|i| a.f[i] && b.f[i]).collect(),
        n,
    }
}

/// Per container: whether it may hold a null, whether it may hold a value.
fn nulls(s: &ColumnStats, len: usize) -> (Vec<bool>, Vec<bool>) {
    let count = |a: &Option<UInt64Array>, i: usize| {
        a.as_ref().and_then(|a| a.is_valid(i).then(|| a.value(i)))
    };
    (0..len)
        .map(|i| match (count(&s.null_counts, i), count(&s.rows, i)) {
            (Some(n), Some(r)) => (n > 0, n < r),
            (Some(0), None) => (false, true),
            _ => (true, true),
        })
        .unzip()
}

/// A kernel's answer per container, unknown (null) taken as may.
fn may(result: Result<BooleanArray, arrow::error::ArrowError>, len: usize) -> Option<Vec<bool>> {
    let result = result.ok()?;
    (result.len() == len).then(|| result.iter().map(|v| v.unwrap_or(true)).collect())
}

fn compared(
    s: &ColumnStats,
    op: Op,
    to: Option<&DataType>,
    value: &ArrayRef,
    len: usize,
) -> Option<Maybe> {
    let mins = column_as(&s.mins, to).ok()?;
    let maxes = column_as(&s.maxes, to).ok()?;
    let v = literal_for(value, mins.as_ref()).ok()?;
    let cmp = |side: &ArrayRef, op: Op| may(compare(side, op, &v), len);
    let (t, f) = match op {
        Op::Eq => (
            and(cmp(&mins, Op::Le)?, cmp(&maxes, Op::Ge)?),
            or(cmp(&mins, Op::Ne)?, cmp(&maxes, Op::Ne)?),
        ),
        Op::Ne => (
            or(cmp(&mins, Op::Ne)?, cmp(&maxes, Op::Ne)?),
            and(cmp(&mins, Op::Le)?, cmp(&maxes, Op::Ge)?),
        ),
        Op::Lt => (cmp(&mins, Op::Lt)?, cmp(&maxes, Op::Ge)?),
        Op::Le => (cmp(&mins, Op::Le)?, cmp(&maxes, Op::Gt)?),
        Op::Gt => (cmp(&maxes, Op::Gt)?, cmp(&mins, Op::Le)?),
        Op::Ge => (cmp(&maxes, Op::Ge)?, cmp(&mins, Op::Lt)?),
    };
    // NaN is greater than every number in Spark, and statistics leave it
    // out: on floating point columns they decide nothing.
    let float = matches!(
        s.mins.data_type(),
        DataType::Float16 | DataType::Float32 | DataType::Float64
    );
    if float && !s.nan_free {
        return None;
    }
    Some(with_nulls(s, t, f, len))
}

/// Values compared where the container holds some; a container of nulls
/// only is unknown throughout.
fn with_nulls(s: &ColumnStats, t: Vec<bool>, f: Vec<bool>, len: usize) -> Maybe {
    let (some_null, some_value) = nulls(s, len);
    Maybe {
        t: (0..len).map(|i| t[i] && some_value[i]).collect(),
        f: (0..len).map(|i| f[i] && some_value[i]).collect(),
        n: some_null,
    }
}

fn and(a: Vec<bool>, b: Vec<bool>) -> Vec<bool> {
    a.into_iter().zip(b).map(|(a, b)| a && b).collect()
}

fn or(a: Vec<bool>, b: Vec<bool>) -> Vec<bool> {
    a.into_iter().zip(b).map(|(a, b)| a || b).collect()
}

/// The least string greater than every string starting with `prefix`.
fn successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        if let Some(next) = char::from_u32(last as u32 + 1) {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

fn prefixed(s: &ColumnStats, prefix: &str, len: usize) -> Option<Maybe> {
    if !is_string(s.mins.data_type()) {
        return None;
    }
    let p: ArrayRef = Arc::new(StringArray::from(vec![prefix]));
    let lo = literal_for(&p, s.maxes.as_ref()).ok()?;
    let t_lo = may(compare(&s.maxes, Op::Ge, &lo), len)?;
    let t = match successor(prefix) {
        Some(next) => {
            let next: ArrayRef = Arc::new(StringArray::from(vec![next.as_str()]));
            let hi = literal_for(&next, s.mins.as_ref()).ok()?;
            and(t_lo, may(compare(&s.mins, Op::Lt, &hi), len)?)
        }
        None => t_lo,
    };
    Some(with_nulls(s, t, vec![true; len], len))
}

/// The statistics of one partition: its values, each the one value of
/// every row; data columns unknown.
pub(crate) struct PartitionStats<'a> {
    pub fields: &'a [Field],
    pub values: &'a [Option<String>],
}

impl Stats for PartitionStats<'_> {
    fn len(&self) -> usize {
        1
    }

    fn row(&self) -> Option<arrow::record_batch::RecordBatch> {
        super::values_batch(self.fields, self.values)
    }

    fn column(&self, column: &str) -> Option<ColumnStats> {
        let i = self.fields.iter().position(|f| f.name() == column)?;
        let value = self.values.get(i)?.as_deref();
        let strings: ArrayRef = Arc::new(StringArray::from(vec![value]));
        let typed = cast(&strings, self.fields[i].data_type()).ok()?;
        if value.is_some() && typed.is_null(0) {
            return None;
        }
        Some(ColumnStats {
            mins: typed.clone(),
            maxes: typed,
            null_counts: Some(UInt64Array::from(vec![u64::from(value.is_none())])),
            rows: Some(UInt64Array::from(vec![1])),
            // A partition value is the value: a directory named NaN is a
            // string (Spark infers no double from it).
            nan_free: true,
        })
    }
}

/// What a filter keeps and skips of a dataset, as `ls` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PruneCounts {
    /// Files kept (one of their row groups may hold a kept row).
    pub files_kept: u64,
    /// Files skipped whole.
    pub files_pruned: u64,
    /// Row groups kept (Parquet).
    pub row_groups_kept: u64,
    /// Row groups skipped (Parquet).
    pub row_groups_pruned: u64,
    /// Rows in what is kept, where the files say.
    pub rows_kept: Option<u64>,
    /// Bytes of the files kept.
    pub bytes_kept: u64,
}
