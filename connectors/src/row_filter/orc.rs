//! ORC's stripe statistics for [`super::prune`]: each stripe's least and
//! greatest value, and its nulls, of integer, string and date columns (the
//! kinds whose statistics order as Spark compares; floating point,
//! decimal and timestamp columns decide nothing here). Dates of a file in
//! the hybrid Julian calendar are rebased as its values are: the rebase
//! never reorders days, so rebased bounds still bound the rebased values.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{ArrayRef, Date32Array, Int64Array, StringArray, UInt64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Schema};
use orc_rust::reader::metadata::FileMetadata;
use orc_rust::statistics::TypeStatistics;

use super::prune::{may_match, ColumnStats, Stats};
use super::Pred;

pub(crate) static STRIPES_READ: AtomicU64 = AtomicU64::new(0);
pub(crate) static STRIPES_PRUNED: AtomicU64 = AtomicU64::new(0);

/// Which of `stripes` may hold a row `pred` keeps, from their statistics;
/// `schema` is the file's Arrow schema (its columns in the file's order);
/// `rebase_days`, where the file's dates are read rebased, how a stored day
/// is read. Counts what it skips.
pub(crate) fn stripes_kept(
    meta: &FileMetadata,
    schema: &Schema,
    pred: &Pred,
    stripes: &[usize],
    rebase_days: Option<fn(i64) -> i64>,
) -> Vec<bool> {
    let kept = may_match(
        pred,
        &Stripes {
            meta,
            schema,
            stripes,
            rebase_days,
        },
    );
    let pruned = kept.iter().filter(|k| !**k).count() as u64;
    STRIPES_PRUNED.fetch_add(pruned, Ordering::Relaxed);
    STRIPES_READ.fetch_add(kept.len() as u64 - pruned, Ordering::Relaxed);
    kept
}

struct Stripes<'a> {
    meta: &'a FileMetadata,
    schema: &'a Schema,
    stripes: &'a [usize],
    rebase_days: Option<fn(i64) -> i64>,
}

/// The least and greatest value of one stripe's column, as Arrow scalars of
/// the kind statistics give (`None`: nothing known); dates read through
/// `rebase_days` where given.
fn bounds(
    stats: Option<&TypeStatistics>,
    rebase_days: Option<fn(i64) -> i64>,
) -> (Option<Bound>, Option<Bound>) {
    match stats {
        Some(TypeStatistics::Integer { min, max, .. }) => {
            (Some(Bound::Int(*min)), Some(Bound::Int(*max)))
        }
        Some(TypeStatistics::String {
            lower_bound,
            upper_bound,
            ..
        }) => (
            Some(Bound::Str(lower_bound.clone())),
            Some(Bound::Str(upper_bound.clone())),
        ),
        Some(TypeStatistics::Date { min, max }) => {
            let day = |d: i32| match rebase_days {
                Some(rebase) => i32::try_from(rebase(i64::from(d))).ok(),
                None => Some(d),
            };
            (day(*min).map(Bound::Date), day(*max).map(Bound::Date))
        }
        _ => (None, None),
    }
}

#[derive(Clone)]
enum Bound {
    Int(i64),
    Str(String),
    Date(i32),
}

/// The bounds of a run of stripes as one array of `ty` (nulls where not
/// known); `None` when the kinds do not fit it.
fn array(bounds: &[Option<Bound>], ty: &DataType) -> Option<ArrayRef> {
    let out: ArrayRef = if ty.is_integer() {
        let values: Vec<Option<i64>> = bounds
            .iter()
            .map(|b| match b {
                Some(Bound::Int(v)) => Some(*v),
                _ => None,
            })
            .collect();
        cast(&(Arc::new(Int64Array::from(values)) as ArrayRef), ty).ok()?
    } else if matches!(
        ty,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        let values: Vec<Option<&str>> = bounds
            .iter()
            .map(|b| match b {
                Some(Bound::Str(v)) => Some(v.as_str()),
                _ => None,
            })
            .collect();
        cast(&(Arc::new(StringArray::from(values)) as ArrayRef), ty).ok()?
    } else if *ty == DataType::Date32 {
        let values: Vec<Option<i32>> = bounds
            .iter()
            .map(|b| match b {
                Some(Bound::Date(v)) => Some(*v),
                _ => None,
            })
            .collect();
        Arc::new(Date32Array::from(values))
    } else {
        return None;
    };
    Some(out)
}

impl Stats for Stripes<'_> {
    fn len(&self) -> usize {
        self.stripes.len()
    }

    fn column(&self, column: &str) -> Option<ColumnStats> {
        let (i, field) = self.schema.column_with_name(column)?;
        let index = self
            .meta
            .root_data_type()
            .children()
            .get(i)?
            .data_type()
            .column_index();
        let all = self.meta.stripe_metadatas();
        let (mut mins, mut maxes, mut nulls, mut rows) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for &s in self.stripes {
            let stripe = all.get(s)?;
            let stats = stripe.column_statistics().get(index);
            let (lo, hi) = bounds(stats.and_then(|c| c.type_statistics()), self.rebase_days);
            mins.push(lo);
            maxes.push(hi);
            let n = stripe.number_of_rows();
            rows.push(Some(n));
            nulls.push(stats.map(|c| match c.has_null() {
                false => 0,
                true => n.saturating_sub(c.number_of_values()),
            }));
        }
        Some(ColumnStats {
            mins: array(&mins, field.data_type())?,
            maxes: array(&maxes, field.data_type())?,
            null_counts: Some(UInt64Array::from(nulls)),
            rows: Some(UInt64Array::from(rows)),
            nan_free: false,
        })
    }
}
