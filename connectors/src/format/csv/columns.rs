//! A split's columns as arrow's CSV reader reads them and as the dataset
//! types them: timestamps are instants, a text without an offset read as a
//! wall-clock time in the session time zone (`--timezone`, Spark's
//! `spark.sql.session.timeZone`); a value that does not fit the type the
//! head of the files gave its column fails the read, named with its column.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Decimal128Array, StringArray, TimestampMicrosecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Decimal128Type, Field, Schema, SchemaRef, TimeUnit};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use chrono::{FixedOffset, Utc};

use super::types::{infer_number, Number};
use crate::row_filter::SessionTz;

/// The columns of a split: what arrow's reader reads, and what the dataset
/// is typed as.
pub(super) struct Columns {
    /// The types arrow's reader decodes.
    pub(super) read: SchemaRef,
    /// The dataset's types, those of the batches handed on.
    target: SchemaRef,
    /// The session time zone.
    zone: SessionTz,
    /// The records of each file's head the types were inferred from.
    records: usize,
}

impl Columns {
    /// The columns `names` (a split's, in file order) typed as the
    /// dataset's `schema` types them (text where it has no such column),
    /// inferred from the first `records` records of each file.
    pub(super) fn new(
        names: &[String],
        schema: &Schema,
        zone: SessionTz,
        records: usize,
    ) -> Columns {
        let target: Vec<Field> = names
            .iter()
            .map(|n| {
                let ty = schema
                    .field_with_name(n)
                    .map(|f| f.data_type().clone())
                    .unwrap_or(DataType::Utf8);
                Field::new(n, ty, true)
            })
            .collect();
        let read: Vec<Field> = target
            .iter()
            .map(|f| f.clone().with_data_type(read_type(f.data_type(), zone)))
            .collect();
        Columns {
            read: Arc::new(Schema::new(read)),
            target: Arc::new(Schema::new(target)),
            zone,
            records,
        }
    }

    /// A batch as read, in the dataset's types.
    pub(super) fn finish(&self, batch: RecordBatch) -> Result<RecordBatch, String> {
        if batch.schema() == self.target {
            return Ok(batch);
        }
        let columns = batch
            .columns()
            .iter()
            .zip(self.target.fields())
            .map(|(column, field)| self.column(column, field))
            .collect::<Result<Vec<ArrayRef>, String>>()?;
        RecordBatch::try_new(self.target.clone(), columns).map_err(|e| e.to_string())
    }

    /// One column as read, of `field`'s type.
    fn column(&self, column: &ArrayRef, field: &Field) -> Result<ArrayRef, String> {
        let texts = || {
            column
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| format!("column `{}` was not read as text", field.name()))
        };
        match (column.data_type(), field.data_type()) {
            (read, target) if read == target => Ok(column.clone()),
            (DataType::Utf8, DataType::Timestamp(TimeUnit::Microsecond, tz)) => {
                let micros = self.instants(texts()?, field)?;
                Ok(Arc::new(micros.with_timezone_opt(tz.clone())))
            }
            (DataType::Utf8, DataType::Decimal128(precision, 0)) => {
                Ok(Arc::new(self.whole_numbers(texts()?, field, *precision)?))
            }
            // The same instants, under the dataset's label.
            (_, target) => cast(column, target).map_err(|e| e.to_string()),
        }
    }

    /// Timestamp texts as instants (microseconds): with an offset or zone
    /// as it says, without one as a wall-clock time in the session zone.
    fn instants(
        &self,
        texts: &StringArray,
        field: &Field,
    ) -> Result<TimestampMicrosecondArray, String> {
        texts
            .iter()
            .map(|text| match text {
                None => Ok(None),
                Some(text) => instant(text, self.zone)
                    .map(Some)
                    .ok_or_else(|| self.not_of_type(text, field)),
            })
            .collect()
    }

    /// Whole numbers of at most `precision` digits, each one Spark's
    /// inference would have typed so (arrow's decimal parser would drop the
    /// fraction of `1.5`, which Spark's inference makes a `double`).
    fn whole_numbers(
        &self,
        texts: &StringArray,
        field: &Field,
        precision: u8,
    ) -> Result<Decimal128Array, String> {
        let typed = Some(Number::Decimal(precision));
        let values = texts
            .iter()
            .map(|text| match text {
                None => Ok(None),
                Some(text) if infer_number(typed, text) == typed => {
                    arrow::compute::kernels::cast_utils::parse_decimal::<Decimal128Type>(
                        text, precision, 0,
                    )
                    .map(Some)
                    .map_err(|_| self.not_of_type(text, field))
                }
                Some(text) => Err(self.not_of_type(text, field)),
            })
            .collect::<Result<Decimal128Array, String>>()?;
        values
            .with_precision_and_scale(precision, 0)
            .map_err(|e| e.to_string())
    }

    /// Arrow's error on a value of the split, the value named with its
    /// column, its type as Spark names it and where that type came from.
    pub(super) fn explain(&self, error: &ArrowError) -> String {
        let text = error.to_string();
        let Some(bad) = BadValue::of(&text) else {
            return text;
        };
        let Some(field) = self.target.fields().get(bad.column) else {
            return text;
        };
        match bad.value {
            Some(value) => self.not_of_type(value, field),
            None => self.not_of_type_because(field, bad.why),
        }
    }

    /// Why `value` of `field` fails the read.
    fn not_of_type(&self, value: &str, field: &Field) -> String {
        format!(
            "value `{value}` of column `{}` is no {}, {}",
            field.name(),
            spark_name(field.data_type()),
            self.whence()
        )
    }

    /// Why a value of `field` fails the read, as arrow says (`why`).
    fn not_of_type_because(&self, field: &Field, why: &str) -> String {
        format!(
            "a value of column `{}` ({why}) is no {}, {}",
            field.name(),
            spark_name(field.data_type()),
            self.whence()
        )
    }

    /// Where the columns' types came from.
    fn whence(&self) -> String {
        format!(
            "the type the first {} records of each file gave the column (Spark infers it from \
             all of them)",
            self.records
        )
    }
}

/// What arrow's CSV reader says of a value it cannot read as its column's
/// type: `Error while parsing value '3000000000' as type 'Int32' for column
/// 1 at line 5. Row data: ...`, or for timestamps `Error parsing column 2
/// at line 5: ...`.
#[derive(Debug, PartialEq)]
struct BadValue<'a> {
    /// The column's index.
    column: usize,
    /// The value, where arrow says it apart.
    value: Option<&'a str>,
    /// Arrow's words on it.
    why: &'a str,
}

impl<'a> BadValue<'a> {
    /// What arrow's message `text` says, if it is one of those.
    fn of(text: &'a str) -> Option<BadValue<'a>> {
        if let Some((_, rest)) = text.split_once("Error while parsing value '") {
            let (value, rest) = rest.split_once("' as type '")?;
            let (_, rest) = rest.split_once("' for column ")?;
            let (column, _) = rest.split_once(" at line ")?;
            return Some(BadValue {
                column: column.parse().ok()?,
                value: Some(value),
                why: "",
            });
        }
        let (_, rest) = text.split_once("Error parsing column ")?;
        let (column, rest) = rest.split_once(" at line ")?;
        let (_, why) = rest.split_once(": ")?;
        Some(BadValue {
            column: column.parse().ok()?,
            value: None,
            why: why.trim(),
        })
    }
}

/// The type arrow's reader decodes a column of the dataset's type `target`
/// as: a timestamp in the session zone where arrow's parser takes a text
/// without an offset as the zone's wall-clock time exactly (UTC and fixed
/// offsets); text in a region's zone, read here as `java.time` reads it
/// (a time in a gap moved on, in an overlap the earlier instant); whole
/// decimals as text, read here (see [`Columns::whole_numbers`]).
fn read_type(target: &DataType, zone: SessionTz) -> DataType {
    match target {
        DataType::Timestamp(TimeUnit::Microsecond, Some(_))
            if matches!(zone, SessionTz::Region(_)) =>
        {
            DataType::Utf8
        }
        DataType::Timestamp(unit, Some(_)) => {
            DataType::Timestamp(*unit, Some(Arc::from(zone.name())))
        }
        DataType::Decimal128(_, 0) => DataType::Utf8,
        other => other.clone(),
    }
}

/// One timestamp text as an instant (microseconds).
fn instant(text: &str, zone: SessionTz) -> Option<i64> {
    let utc = arrow::compute::kernels::cast_utils::string_to_datetime(&Utc, text).ok()?;
    // A text without an offset is read an hour apart an hour east.
    let east = FixedOffset::east_opt(3600)?;
    let probe = arrow::compute::kernels::cast_utils::string_to_datetime(&east, text).ok()?;
    if probe.timestamp_micros() == utc.timestamp_micros() {
        return Some(utc.timestamp_micros());
    }
    zone.instant(&utc.naive_utc())
}

/// Spark's name of a type CSV inference gives.
fn spark_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Int32 => "int".into(),
        DataType::Int64 => "bigint".into(),
        DataType::Float64 => "double".into(),
        DataType::Boolean => "boolean".into(),
        DataType::Date32 => "date".into(),
        DataType::Decimal128(p, s) => format!("decimal({p},{s})"),
        DataType::Timestamp(_, Some(_)) => "timestamp".into(),
        DataType::Timestamp(_, None) => "timestamp_ntz".into(),
        DataType::Utf8 => "string".into(),
        other => other.to_string(),
    }
}
