//! Dates and timestamps as Spark wrote them in its legacy (hybrid Julian)
//! calendar: Spark 2, and Spark 3 and 4 with `datetimeRebaseModeInWrite`
//! (or `int96RebaseModeInWrite`) `LEGACY`, mark such Parquet and Avro files
//! and store days before 1582-10-15 as Julian calendar days; Spark's ORC
//! writer stores every file so (its footer names the calendar). Spark's reader
//! rebases them to the proleptic Gregorian calendar, field by field (the
//! same year, month, day and time of day), in UTC; so does this module.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Date32Array, PrimitiveArray};
use arrow::datatypes::{
    ArrowTimestampType, DataType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

/// The metadata key Spark writes into files whose dates and timestamps are
/// in the hybrid Julian calendar.
pub(crate) const LEGACY_DATETIME: &str = "org.apache.spark.legacyDateTime";
/// The key Spark writes into Parquet files whose INT96 timestamps are.
pub(crate) const LEGACY_INT96: &str = "org.apache.spark.legacyINT96";

/// 1582-10-15, the first Gregorian day, in days since 1970-01-01: days
/// before it are Julian calendar days in a legacy file.
const FIRST_GREGORIAN_DAY: i64 = -141_427;
/// The Julian Day Number of 1970-01-01.
const JDN_OF_EPOCH: i64 = 2_440_588;

/// A Julian calendar day (days since 1970-01-01 in the hybrid calendar) as
/// the proleptic Gregorian day of the same year, month and day. A Julian
/// 29 February that the Gregorian calendar lacks becomes 1 March, as Spark
/// makes it.
pub(crate) fn julian_to_gregorian_days(days: i64) -> i64 {
    if days >= FIRST_GREGORIAN_DAY {
        return days;
    }
    // From a Julian Day Number to a Julian calendar date (valid after 4800 BC).
    let c = days + JDN_OF_EPOCH + 32_082;
    if c < 0 {
        return days;
    }
    let d = (4 * c + 3) / 1461;
    let e = c - 1461 * d / 4;
    let m = (5 * e + 2) / 153;
    let day = e - (153 * m + 2) / 5 + 1;
    let month = m + 3 - 12 * (m / 10);
    let year = d - 4800 + m / 10;
    match chrono::NaiveDate::from_ymd_opt(year as i32, month as u32, 1) {
        Some(first) => {
            let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or(first);
            (first - epoch).num_days() + day - 1
        }
        None => days,
    }
}

/// A timestamp in `per_day` units since the epoch, rebased like its day.
fn rebase_instant(value: i64, per_day: i64) -> i64 {
    let days = value.div_euclid(per_day);
    if days >= FIRST_GREGORIAN_DAY {
        return value;
    }
    let within = value.rem_euclid(per_day);
    julian_to_gregorian_days(days)
        .saturating_mul(per_day)
        .saturating_add(within)
}

/// Microseconds since the epoch of a timestamp Spark wrote in the hybrid
/// calendar, rebased like its day (what Spark's readers do, in UTC).
pub(crate) fn rebase_micros(micros: i64) -> i64 {
    rebase_instant(micros, 86_400_000_000)
}

fn rebase_timestamps<T: ArrowTimestampType>(array: &ArrayRef, per_day: i64) -> Option<ArrayRef> {
    let values = array.as_any().downcast_ref::<PrimitiveArray<T>>()?;
    let rebased: PrimitiveArray<T> = values.unary(|v| rebase_instant(v, per_day));
    Some(Arc::new(rebased.with_timezone_opt(values.timezone())))
}

/// A column of dates or timestamps rebased; other columns as they are.
fn rebase_column(array: &ArrayRef) -> Option<ArrayRef> {
    const DAY_SECONDS: i64 = 86_400;
    match array.data_type() {
        DataType::Date32 => {
            let days = array.as_any().downcast_ref::<Date32Array>()?;
            let rebased: Date32Array =
                days.unary(|d| julian_to_gregorian_days(i64::from(d)) as i32);
            Some(Arc::new(rebased))
        }
        DataType::Timestamp(TimeUnit::Second, _) => {
            rebase_timestamps::<TimestampSecondType>(array, DAY_SECONDS)
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            rebase_timestamps::<TimestampMillisecondType>(array, DAY_SECONDS * 1_000)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            rebase_timestamps::<TimestampMicrosecondType>(array, DAY_SECONDS * 1_000_000)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            rebase_timestamps::<TimestampNanosecondType>(array, DAY_SECONDS * 1_000_000_000)
        }
        _ => None,
    }
}

/// Rebases the date and timestamp columns of `batch` named by `columns`
/// from the hybrid Julian calendar to the proleptic Gregorian one.
pub(crate) fn rebase(
    batch: RecordBatch,
    columns: &[String],
) -> Result<RecordBatch, arrow::error::ArrowError> {
    if columns.is_empty() {
        return Ok(batch);
    }
    let schema = batch.schema();
    let arrays: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, array)| {
            if columns.iter().any(|c| c == field.name()) {
                rebase_column(array).unwrap_or_else(|| array.clone())
            } else {
                array.clone()
            }
        })
        .collect();
    RecordBatch::try_new_with_options(
        schema,
        arrays,
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn days(y: i32, m: u32, d: u32) -> i64 {
        let date = chrono::NaiveDate::from_ymd_opt(y, m, d).expect("a date");
        let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("the epoch");
        (date - epoch).num_days()
    }

    #[test]
    fn julian_days_keep_their_fields() {
        // Gregorian days from the cutover on are the same in both calendars.
        assert_eq!(
            julian_to_gregorian_days(days(1582, 10, 15)),
            days(1582, 10, 15)
        );
        assert_eq!(julian_to_gregorian_days(0), 0);
        // Julian 1582-10-04 (the day before the cutover) is 10 days later in the
        // proleptic count than Gregorian 1582-10-04.
        assert_eq!(
            julian_to_gregorian_days(days(1582, 10, 15) - 1),
            days(1582, 10, 4)
        );
        // Julian 1000-01-01 is Gregorian 1000-01-06: 5 days apart then.
        assert_eq!(julian_to_gregorian_days(days(1000, 1, 6)), days(1000, 1, 1));
        // Julian 1000-02-29 (a Julian leap day only) becomes 1000-03-01.
        assert_eq!(julian_to_gregorian_days(days(1000, 3, 6)), days(1000, 3, 1));
        let micros = 86_400_000_000i64;
        let t = days(1500, 6, 11) * micros + 36_000_000_000;
        assert_eq!(
            rebase_instant(t, micros),
            days(1500, 6, 1) * micros + 36_000_000_000
        );
    }
}
