//! The types an ORC file's columns are decoded as, and handed on as: its
//! timestamps decoded as exact nanoseconds (orc-rust's 38-digit decimals,
//! which neither overflow nor refuse a nanosecond) and handed on as
//! microseconds, as Spark reads them; Spark's `timestamp_ntz` columns (a
//! `bigint` marked so) handed on as timestamps; and, in a file whose
//! calendar is the hybrid Julian one (every file Spark writes), dates and
//! timestamps before 1582-10-15 rebased as Spark's ORC reader rebases them.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, ListArray, MapArray, RecordBatch, RecordBatchOptions, StructArray,
    UnionArray,
};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, FieldRef, Fields, Int64Type, Schema, SchemaRef, TimeUnit,
    TimestampMicrosecondType, UnionFields,
};
use arrow::error::ArrowError;
use orc_rust::schema::{DataType as OrcType, RootDataType};

use super::footer::FooterExtras;
use crate::format::spark_legacy;

/// The decimal orc-rust decodes a timestamp as: nanoseconds since 1970.
const NANOS: DataType = DataType::Decimal128(38, 9);

/// A batch that cannot be handed on as the file's schema says.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ShapeError {
    /// A timestamp further from 1970 than microseconds in 64 bits reach
    /// (about 292,000 years): Spark cannot read it either.
    #[error("a timestamp {seconds} seconds from 1970 does not fit microseconds in 64 bits")]
    OutOfRange {
        /// Seconds since 1970.
        seconds: i128,
    },
    /// Arrow refused the converted columns as an array or batch of the
    /// types handed on: a foreign error, told in the message.
    #[error("the decoded columns cannot be handed on as the file's types: {0}")]
    Arrow(ArrowError),
}

/// How one ORC file's batches are decoded and handed on.
#[derive(Debug)]
pub(crate) struct Shape {
    /// The schema orc-rust decodes: timestamps as nanosecond decimals.
    pub(crate) read: SchemaRef,
    /// The schema handed on: timestamps in microseconds, Spark's
    /// `timestamp_ntz` as timestamps without a time zone.
    pub(crate) out: SchemaRef,
    /// Dates and timestamps are in the hybrid Julian calendar: rebased.
    pub(crate) hybrid: bool,
    /// Which top-level columns change between `read` and `out`.
    changed: Vec<bool>,
}

impl Shape {
    /// The shape of a file whose columns are `root`, which orc-rust would
    /// decode as `file` (its own default schema), with the footer `extras`.
    pub(crate) fn new(root: &RootDataType, file: &Schema, extras: &FooterExtras) -> Shape {
        let hybrid = !extras.proleptic;
        let (mut read, mut out, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        for (column, field) in root.children().iter().zip(file.fields()) {
            let (r, o) = types(column.data_type(), field.data_type(), extras);
            changed.push(r != o || (hybrid && has_dates(&o)));
            read.push(Arc::new(field.as_ref().clone().with_data_type(r)));
            out.push(Arc::new(field.as_ref().clone().with_data_type(o)));
        }
        let metadata = file.metadata().clone();
        Shape {
            read: Arc::new(Schema::new_with_metadata(read, metadata.clone())),
            out: Arc::new(Schema::new_with_metadata(out, metadata)),
            hybrid,
            changed,
        }
    }

    /// A batch orc-rust decoded (as `read`) as it is handed on (as `out`).
    pub(crate) fn convert(&self, batch: RecordBatch) -> Result<RecordBatch, ShapeError> {
        if !self.changed.iter().any(|c| *c) {
            return Ok(batch);
        }
        let mut columns = Vec::with_capacity(batch.num_columns());
        for (i, array) in batch.columns().iter().enumerate() {
            let field = self.out.fields().get(i);
            columns.push(match (field, self.changed.get(i)) {
                (Some(field), Some(true)) => convert(array, field.data_type(), self.hybrid)?,
                _ => array.clone(),
            });
        }
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        // Field names as the file gives them; nullability as orc-rust's batch says.
        let fields: Vec<FieldRef> = batch
            .schema()
            .fields()
            .iter()
            .zip(&columns)
            .map(|(f, c)| Arc::new(f.as_ref().clone().with_data_type(c.data_type().clone())))
            .collect();
        let schema = Schema::new_with_metadata(fields, self.out.metadata().clone());
        RecordBatch::try_new_with_options(Arc::new(schema), columns, &options)
            .map_err(ShapeError::Arrow)
    }
}

/// The type one ORC column is decoded as, and the type it is handed on as,
/// from orc-rust's default Arrow type for it.
fn types(orc: &OrcType, arrow: &DataType, extras: &FooterExtras) -> (DataType, DataType) {
    match (orc, arrow) {
        (
            OrcType::Timestamp { .. } | OrcType::TimestampWithLocalTimezone { .. },
            DataType::Timestamp(_, tz),
        ) => (
            NANOS,
            DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
        ),
        (OrcType::Long { column_index }, DataType::Int64)
            if extras
                .spark_types
                .get(*column_index)
                .is_some_and(|t| t.as_deref() == Some("timestamp_ntz")) =>
        {
            (
                DataType::Int64,
                DataType::Timestamp(TimeUnit::Microsecond, None),
            )
        }
        (OrcType::Struct { children, .. }, DataType::Struct(fields)) => {
            let pairs: Vec<(FieldRef, FieldRef)> = children
                .iter()
                .zip(fields.iter())
                .map(|(c, f)| both(f, types(c.data_type(), f.data_type(), extras)))
                .collect();
            let (read, out): (Vec<FieldRef>, Vec<FieldRef>) = pairs.into_iter().unzip();
            (
                DataType::Struct(Fields::from(read)),
                DataType::Struct(Fields::from(out)),
            )
        }
        (OrcType::List { child, .. }, DataType::List(field)) => {
            let (read, out) = both(field, types(child, field.data_type(), extras));
            (DataType::List(read), DataType::List(out))
        }
        (OrcType::Map { key, value, .. }, DataType::Map(entries, sorted)) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return (arrow.clone(), arrow.clone());
            };
            let (Some(k), Some(v)) = (kv.first(), kv.get(1)) else {
                return (arrow.clone(), arrow.clone());
            };
            let (k_read, k_out) = both(k, types(key, k.data_type(), extras));
            let (v_read, v_out) = both(v, types(value, v.data_type(), extras));
            let entry = |k: FieldRef, v: FieldRef| {
                let kv = DataType::Struct(Fields::from(vec![k, v]));
                Arc::new(entries.as_ref().clone().with_data_type(kv))
            };
            (
                DataType::Map(entry(k_read, v_read), *sorted),
                DataType::Map(entry(k_out, v_out), *sorted),
            )
        }
        (OrcType::Union { variants, .. }, DataType::Union(fields, mode)) => {
            let (mut read, mut out) = (Vec::new(), Vec::new());
            for ((id, f), variant) in fields.iter().zip(variants) {
                let (r, o) = both(f, types(variant, f.data_type(), extras));
                read.push((id, r));
                out.push((id, o));
            }
            (
                DataType::Union(read.into_iter().collect::<UnionFields>(), *mode),
                DataType::Union(out.into_iter().collect::<UnionFields>(), *mode),
            )
        }
        _ => (arrow.clone(), arrow.clone()),
    }
}

/// `field` with each of two types.
fn both(field: &FieldRef, (read, out): (DataType, DataType)) -> (FieldRef, FieldRef) {
    (
        Arc::new(field.as_ref().clone().with_data_type(read)),
        Arc::new(field.as_ref().clone().with_data_type(out)),
    )
}

/// Whether a type holds dates or timestamps a calendar rebase changes.
fn has_dates(ty: &DataType) -> bool {
    match ty {
        DataType::Date32 | DataType::Timestamp(..) => true,
        DataType::Struct(fields) => fields.iter().any(|f| has_dates(f.data_type())),
        DataType::List(f) | DataType::Map(f, _) => has_dates(f.data_type()),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| has_dates(f.data_type())),
        _ => false,
    }
}

/// One column as decoded, as handed on as `out`; `hybrid`: its dates and
/// timestamps are rebased from the hybrid calendar.
fn convert(array: &ArrayRef, out: &DataType, hybrid: bool) -> Result<ArrayRef, ShapeError> {
    let converted: ArrayRef = match (array.data_type(), out) {
        (DataType::Decimal128(..), DataType::Timestamp(TimeUnit::Microsecond, tz)) => {
            let nanos = array.as_primitive::<Decimal128Type>();
            let micros = nanos.try_unary::<_, TimestampMicrosecondType, _>(|ns| {
                let us =
                    i64::try_from(ns.div_euclid(1_000)).map_err(|_| ShapeError::OutOfRange {
                        seconds: ns / 1_000_000_000,
                    })?;
                Ok::<_, ShapeError>(match hybrid {
                    true => spark_legacy::rebase_micros(us),
                    false => us,
                })
            })?;
            Arc::new(micros.with_timezone_opt(tz.clone()))
        }
        (DataType::Int64, DataType::Timestamp(TimeUnit::Microsecond, None)) => Arc::new(
            array
                .as_primitive::<Int64Type>()
                .reinterpret_cast::<TimestampMicrosecondType>(),
        ),
        (DataType::Date32, DataType::Date32) if hybrid => {
            let days = array.as_primitive::<Date32Type>();
            Arc::new(days.unary::<_, Date32Type>(|d| {
                spark_legacy::julian_to_gregorian_days(i64::from(d)) as i32
            }))
        }
        _ => convert_nested(array, out, hybrid)?,
    };
    Ok(converted)
}

/// A struct, list, map or union column as decoded, its children converted
/// to those of `out` (see [`convert`]); any other as it is.
fn convert_nested(array: &ArrayRef, out: &DataType, hybrid: bool) -> Result<ArrayRef, ShapeError> {
    Ok(match (array.data_type(), out) {
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let s = array.as_struct();
            let columns = s
                .columns()
                .iter()
                .zip(fields.iter())
                .map(|(c, f)| convert(c, f.data_type(), hybrid))
                .collect::<Result<Vec<_>, _>>()?;
            Arc::new(
                StructArray::try_new_with_length(
                    fields.clone(),
                    columns,
                    s.nulls().cloned(),
                    s.len(),
                )
                .map_err(ShapeError::Arrow)?,
            )
        }
        (DataType::List(_), DataType::List(field)) => {
            let list = array.as_list::<i32>();
            let values = convert(list.values(), field.data_type(), hybrid)?;
            Arc::new(
                ListArray::try_new(
                    field.clone(),
                    list.offsets().clone(),
                    values,
                    list.nulls().cloned(),
                )
                .map_err(ShapeError::Arrow)?,
            )
        }
        (DataType::Map(..), DataType::Map(field, sorted)) => {
            let map = array.as_map();
            let entries: ArrayRef = Arc::new(map.entries().clone());
            let entries = convert(&entries, field.data_type(), hybrid)?;
            Arc::new(
                MapArray::try_new(
                    field.clone(),
                    map.offsets().clone(),
                    entries.as_struct().clone(),
                    map.nulls().cloned(),
                    *sorted,
                )
                .map_err(ShapeError::Arrow)?,
            )
        }
        (DataType::Union(..), DataType::Union(fields, _)) => {
            let union = array.as_any().downcast_ref::<UnionArray>().ok_or_else(|| {
                ShapeError::Arrow(ArrowError::CastError("not a union array".to_string()))
            })?;
            let children = fields
                .iter()
                .map(|(id, f)| convert(union.child(id), f.data_type(), hybrid))
                .collect::<Result<Vec<_>, _>>()?;
            Arc::new(
                UnionArray::try_new(
                    fields.clone(),
                    union.type_ids().clone(),
                    union.offsets().cloned(),
                    children,
                )
                .map_err(ShapeError::Arrow)?,
            )
        }
        _ => array.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Date32Array, Decimal128Array, Int64Array, TimestampMicrosecondArray};
    use arrow::datatypes::Field;

    fn field(name: &str, ty: DataType) -> Field {
        Field::new(name, ty, true)
    }

    /// A shape of top-level columns only, as `Shape::new` makes it.
    fn shape(read: Vec<Field>, out: Vec<Field>, hybrid: bool) -> Shape {
        let changed = read
            .iter()
            .zip(&out)
            .map(|(r, o)| r.data_type() != o.data_type() || (hybrid && has_dates(o.data_type())))
            .collect();
        Shape {
            read: Arc::new(Schema::new(read)),
            out: Arc::new(Schema::new(out)),
            hybrid,
            changed,
        }
    }

    fn micros(y: i32, m: u32, d: u32) -> i64 {
        let date = chrono::NaiveDate::from_ymd_opt(y, m, d).expect("a date");
        let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("the epoch");
        (date - epoch).num_days() * 86_400_000_000
    }

    #[test]
    fn nanoseconds_become_microseconds_rounded_down_and_rebased() {
        let us = DataType::Timestamp(TimeUnit::Microsecond, None);
        let s = shape(
            vec![field("ts", NANOS), field("day", DataType::Date32)],
            vec![field("ts", us.clone()), field("day", DataType::Date32)],
            true,
        );
        let ns = Decimal128Array::from(vec![
            Some(-1),
            Some(1_999),
            None,
            // Julian 1500-01-01 12:00, a Gregorian 1500-01-10 12:00 instant.
            Some(i128::from(micros(1500, 1, 10) + 43_200_000_000) * 1_000 + 5),
            Some(i128::from(i64::MAX) * 1_000),
        ])
        .with_precision_and_scale(38, 9)
        .expect("decimal");
        let days = Date32Array::from(vec![None, Some(0), Some(-141_428), Some(-141_427), None]);
        let batch = RecordBatch::try_new(
            s.read.clone(),
            vec![Arc::new(ns.clone()), Arc::new(days.clone())],
        )
        .expect("batch");
        let out = s.convert(batch.clone()).expect("converts");
        assert_eq!(out.schema().field(0).data_type(), &us);
        let ts = out.column(0).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(ts.value(0), -1, "rounded down, as Spark does");
        assert_eq!(ts.value(1), 1);
        assert!(ts.is_null(2));
        assert_eq!(ts.value(3), micros(1500, 1, 1) + 43_200_000_000);
        assert_eq!(ts.value(4), i64::MAX);
        let rebased = out.column(1).as_primitive::<Date32Type>();
        // Julian 1582-10-04 is the proleptic 1582-10-04, ten days earlier.
        assert_eq!(rebased.value(2), -141_438);
        assert_eq!(rebased.value(3), -141_427);
        // A proleptic file: nothing moves.
        let s = shape(
            vec![field("ts", NANOS), field("day", DataType::Date32)],
            vec![field("ts", us), field("day", DataType::Date32)],
            false,
        );
        let out = s.convert(batch).expect("converts");
        let ts = out.column(0).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(ts.value(3), micros(1500, 1, 10) + 43_200_000_000);
        assert_eq!(
            out.column(1).as_primitive::<Date32Type>().value(2),
            -141_428
        );
    }

    #[test]
    fn timestamps_past_microseconds_are_an_error() {
        let s = shape(
            vec![field("ts", NANOS)],
            vec![field(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, None),
            )],
            false,
        );
        let ns = Decimal128Array::from(vec![Some((i128::from(i64::MAX) + 1) * 1_000)])
            .with_precision_and_scale(38, 9)
            .expect("decimal");
        let batch = RecordBatch::try_new(s.read.clone(), vec![Arc::new(ns)]).expect("batch");
        let err = s.convert(batch).expect_err("out of range");
        assert!(err.to_string().contains("does not fit"), "{err}");
    }

    #[test]
    fn nested_timestamps_and_ntz_bigints_are_converted() {
        let us_utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let read_item = Arc::new(field("item", NANOS));
        let out_item = Arc::new(field("item", us_utc.clone()));
        let ntz = DataType::Timestamp(TimeUnit::Microsecond, None);
        let s = shape(
            vec![
                field("list", DataType::List(read_item.clone())),
                field("ntz", DataType::Int64),
            ],
            vec![
                field("list", DataType::List(out_item.clone())),
                field("ntz", ntz.clone()),
            ],
            true,
        );
        let values = Decimal128Array::from(vec![1_000i128, 2_000, 3_000])
            .with_precision_and_scale(38, 9)
            .expect("decimal");
        let list = ListArray::try_new(
            read_item,
            arrow::buffer::OffsetBuffer::from_lengths([2, 1]),
            Arc::new(values),
            None,
        )
        .expect("list");
        // Spark's timestamp_ntz: never rebased, even in a hybrid file.
        let old = micros(1000, 1, 1);
        let batch = RecordBatch::try_new(
            s.read.clone(),
            vec![Arc::new(list), Arc::new(Int64Array::from(vec![old, 7]))],
        )
        .expect("batch");
        let out = s.convert(batch).expect("converts");
        assert_eq!(out.schema().field(0).data_type(), &DataType::List(out_item));
        let items = out.column(0).as_list::<i32>().values().clone();
        let items = items
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .expect("micros");
        assert_eq!(items.values().as_ref(), &[1, 2, 3]);
        assert_eq!(out.schema().field(1).data_type(), &ntz);
        let ntz = out.column(1).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(ntz.values().as_ref(), &[old, 7]);
    }
}
