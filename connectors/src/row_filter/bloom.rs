//! Parquet bloom filters (split block, as Spark writes them with
//! `parquet.bloom.filter.enabled#col`): a row group whose bloom filter on a
//! column holds none of the values an `=` or `IN` conjunct asks of it has no
//! kept row. Asked only of row groups statistics kept, and only for columns
//! whose values hash as they are stored: integers, dates and strings
//! (strings compare by their bytes; floating point `0.0 = -0.0` and decimals
//! of other scales would not).
//!
//! A bloom filter is read only where the footer records its length (as
//! parquet-mr 1.12.3 and later, Spark 3.4 and later, write it) and that
//! length is at most half the row group's compressed size (else reading it
//! costs about what it may save); one that does not read back is not used.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int32Type, Int64Type};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::bloom_filter::Sbbf;

use super::parquet::FileStats;
use super::parse::Op;
use super::Pred;

/// A value as the bloom filter hashes it.
#[derive(Debug, Clone, PartialEq)]
enum Probe {
    I32(i32),
    I64(i64),
    Bytes(Vec<u8>),
}

impl Probe {
    fn in_filter(&self, sbbf: &Sbbf) -> bool {
        match self {
            Probe::I32(v) => sbbf.check(v),
            Probe::I64(v) => sbbf.check(v),
            Probe::Bytes(v) => sbbf.check(v.as_slice()),
        }
    }
}

/// One conjunct a bloom filter can decide: `column` equal to one of
/// `values` (none: the conjunct is never true).
struct Lookup {
    column: String,
    values: Vec<Probe>,
}

/// The row groups of `groups` whose bloom filters rule out a conjunct of
/// `pred`. Fetches one bloom filter per column asked, per row group, and
/// stops asking a row group once one rules it out.
pub(crate) async fn ruled_out<R: AsyncFileReader>(
    stats: &FileStats<'_>,
    pred: &Pred,
    groups: &[usize],
    reader: &mut R,
) -> Vec<usize> {
    let lookups: Vec<Lookup> = pred
        .conjuncts()
        .into_iter()
        .filter_map(|c| lookup(c, stats))
        .collect();
    let mut out = Vec::new();
    if lookups.is_empty() {
        return out;
    }
    for &g in groups {
        for l in &lookups {
            let Some(sbbf) = fetch(stats, &l.column, g, reader).await else {
                continue;
            };
            if !l.values.iter().any(|v| v.in_filter(&sbbf)) {
                out.push(g);
                break;
            }
        }
    }
    out
}

/// The bloom filter of `column` in row group `group`, where there is one.
async fn fetch<R: AsyncFileReader>(
    stats: &FileStats<'_>,
    column: &str,
    group: usize,
    reader: &mut R,
) -> Option<Sbbf> {
    let index = stats.leaf_index(column)?;
    let row_group = stats.meta.row_groups().get(group)?;
    let chunk = row_group.columns().get(index)?;
    let offset = u64::try_from(chunk.bloom_filter_offset()?).ok()?;
    let length = u64::try_from(chunk.bloom_filter_length()?).ok()?;
    // A bloom filter as large as half the row group would cost about what
    // it may save.
    if length.saturating_mul(2) > u64::try_from(row_group.compressed_size()).unwrap_or(0) {
        return None;
    }
    let bytes = match reader.get_bytes(offset..offset + length).await {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::warn!(column, group, error = %e, "bloom filter not read; not used");
            return None;
        }
    };
    match Sbbf::from_bytes(&bytes) {
        Ok(sbbf) => Some(sbbf),
        Err(e) => {
            tracing::warn!(column, group, error = %e, "bloom filter does not read back; not used");
            None
        }
    }
}

/// The lookup `conjunct` asks of a bloom filter: `c = v`, or an `OR` of
/// such on one column (`c IN (...)`), compared as the column's values.
fn lookup(conjunct: &Pred, stats: &FileStats<'_>) -> Option<Lookup> {
    let mut column: Option<&str> = None;
    let mut values = Vec::new();
    let mut stack = vec![conjunct];
    while let Some(p) = stack.pop() {
        match p {
            Pred::Or(list) => stack.extend(list.iter()),
            // `IN (..., NULL)`: that member is never true.
            Pred::Const(None | Some(false)) => {}
            Pred::Cmp {
                column: c,
                op: Op::Eq,
                cast,
                value,
            } => {
                if column.is_some_and(|seen| seen != c) {
                    return None;
                }
                column = Some(c);
                let ty = stats.column_type(c)?;
                if !exact(ty, cast.as_ref()) {
                    return None;
                }
                if value.is_valid(0) {
                    values.push(probe(value, ty)?);
                }
            }
            _ => return None,
        }
    }
    Some(Lookup {
        column: column?.to_string(),
        values,
    })
}

/// Whether a column of type `ty` cast to `cast` for the comparison keeps
/// its values: an integer widened to a long, a date as a date.
fn exact(ty: &DataType, cast: Option<&DataType>) -> bool {
    match cast {
        None => true,
        Some(DataType::Int64) => ty.is_integer(),
        Some(DataType::Date32) => *ty == DataType::Date32,
        Some(_) => false,
    }
}

/// `value` as the bloom filter of a column of type `ty` hashes it; `None`
/// for what it cannot be asked about.
fn probe(value: &ArrayRef, ty: &DataType) -> Option<Probe> {
    let literal = value.data_type();
    match ty {
        DataType::Int8 | DataType::Int16 | DataType::Int32 if literal.is_integer() => {
            let v = cast(value, &DataType::Int32).ok()?;
            v.is_valid(0)
                .then(|| Probe::I32(v.as_primitive::<Int32Type>().value(0)))
        }
        DataType::Int64 if literal.is_integer() => {
            let v = cast(value, &DataType::Int64).ok()?;
            v.is_valid(0)
                .then(|| Probe::I64(v.as_primitive::<Int64Type>().value(0)))
        }
        DataType::Date32 if *literal == DataType::Date32 => {
            let v = cast(value, &DataType::Int32).ok()?;
            Some(Probe::I32(v.as_primitive::<Int32Type>().value(0)))
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            if matches!(
                literal,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) =>
        {
            let v = cast(value, &DataType::Utf8).ok()?;
            Some(Probe::Bytes(
                v.as_string::<i32>().value(0).as_bytes().to_vec(),
            ))
        }
        _ => None,
    }
}
