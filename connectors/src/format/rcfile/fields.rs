//! An RCFile column's fields as an Arrow array: text as Hive's
//! `ColumnarSerDe` writes it (the null text null, anything else parsed as
//! the column's type as a text table's field is), or LazyBinary as
//! `LazyBinaryColumnarSerDe` writes it: an empty field is null, a string
//! its bytes (the single byte `0xBF` the empty string), a boolean or
//! tinyint one byte, a smallint two, an int, bigint or date (days) a Hadoop
//! vlong, a float or double its IEEE bits big-endian, a decimal its scale
//! and unscaled bytes, a timestamp Hive's `TimestampWritable` bytes.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder, Float64Builder,
    Int16Builder, Int32Builder, Int64Builder, Int8Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, TimeUnit};

use super::vlong_at;

/// How a column's fields are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Encoding {
    /// Hive's text forms (`ColumnarSerDe`).
    Text,
    /// LazyBinary (`LazyBinaryColumnarSerDe`).
    Binary,
}

/// What LazyBinaryColumnarSerDe writes for an empty string.
const EMPTY_STRING: u8 = 0xBF;

/// The fields of one column (each `lengths[i]` bytes, one after another
/// in `data`) as an array of `field`'s type.
pub(super) fn column(
    field: &Field,
    encoding: Encoding,
    null: &[u8],
    lengths: &[u32],
    data: &[u8],
) -> Result<ArrayRef, String> {
    let mut at = 0usize;
    let cells = lengths.iter().map(move |&n| {
        let cell = &data[at..at + n as usize];
        at += n as usize;
        cell
    });
    match encoding {
        Encoding::Text => text_column(field, null, cells),
        Encoding::Binary => binary_column(field.data_type(), cells),
    }
}

/// Text fields: strings, cast to the column's type as a text table's are
/// (a field that does not parse is null, as Hive reads it).
fn text_column<'a>(
    field: &Field,
    null: &[u8],
    cells: impl Iterator<Item = &'a [u8]>,
) -> Result<ArrayRef, String> {
    let mut strings = StringBuilder::new();
    for cell in cells {
        if cell == null {
            strings.append_null();
        } else {
            strings.append_value(String::from_utf8_lossy(cell));
        }
    }
    let strings: ArrayRef = Arc::new(strings.finish());
    if field.data_type() == &DataType::Utf8 {
        return Ok(strings);
    }
    let options = arrow::compute::CastOptions {
        safe: true,
        ..Default::default()
    };
    arrow::compute::cast_with_options(&strings, field.data_type(), &options)
        .map_err(|e| e.to_string())
}

/// A fixed-width field's bytes, or why they are not.
fn fixed<const N: usize>(cell: &[u8], what: &str) -> Result<[u8; N], String> {
    cell.try_into()
        .map_err(|_| format!("a {what} of {} bytes (not {N})", cell.len()))
}

/// A field that is exactly one vlong.
fn whole_vlong(cell: &[u8], what: &str) -> Result<i64, String> {
    let mut at = 0;
    match vlong_at(cell, &mut at) {
        Some(v) if at == cell.len() => Ok(v),
        _ => Err(format!("a malformed {what} of {} bytes", cell.len())),
    }
}

/// Appends each cell's value (`None` for an empty cell) to a builder.
macro_rules! build {
    ($builder:expr, $cells:expr, |$cell:ident| $value:expr) => {{
        let mut builder = $builder;
        for $cell in $cells {
            if $cell.is_empty() {
                builder.append_null();
            } else {
                builder.append_value($value);
            }
        }
        Ok(Arc::new(builder.finish()) as ArrayRef)
    }};
}

/// LazyBinary fields as an array of `ty`.
fn binary_column<'a>(
    ty: &DataType,
    cells: impl Iterator<Item = &'a [u8]>,
) -> Result<ArrayRef, String> {
    match ty {
        DataType::Utf8 => build!(StringBuilder::new(), cells, |c| if c == [EMPTY_STRING] {
            String::new()
        } else {
            String::from_utf8_lossy(c).into_owned()
        }),
        DataType::Boolean => build!(BooleanBuilder::new(), cells, |c| fixed::<1>(c, "boolean")?
            [0]
            != 0),
        DataType::Int8 => build!(Int8Builder::new(), cells, |c| fixed::<1>(c, "tinyint")?[0]
            as i8),
        DataType::Int16 => build!(Int16Builder::new(), cells, |c| i16::from_be_bytes(fixed(
            c, "smallint"
        )?)),
        DataType::Int32 => build!(Int32Builder::new(), cells, |c| i32::try_from(whole_vlong(
            c, "int"
        )?)
        .map_err(|_| "an int out of range".to_string())?),
        DataType::Int64 => build!(Int64Builder::new(), cells, |c| whole_vlong(c, "bigint")?),
        DataType::Float32 => build!(Float32Builder::new(), cells, |c| f32::from_be_bytes(fixed(
            c, "float"
        )?)),
        DataType::Float64 => build!(Float64Builder::new(), cells, |c| f64::from_be_bytes(fixed(
            c, "double"
        )?)),
        DataType::Date32 => build!(Date32Builder::new(), cells, |c| i32::try_from(whole_vlong(
            c, "date"
        )?)
        .map_err(|_| "a date out of range".to_string())?),
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let builder = TimestampMicrosecondBuilder::new().with_timezone_opt(tz.clone());
            build!(builder, cells, |c| timestamp_micros(c)?)
        }
        DataType::Decimal128(precision, scale) => decimal_column(*precision, *scale, cells),
        other => Err(format!("LazyBinary {other} columns are not read")),
    }
}

/// LazyBinary decimals (`HiveDecimalWritable`: a vint scale, a vint length
/// and the unscaled value's two's-complement bytes) at the column's
/// precision and scale: rounded half up to the scale, null when the
/// precision cannot hold them (as Hive enforces a column's type).
fn decimal_column<'a>(
    precision: u8,
    scale: i8,
    cells: impl Iterator<Item = &'a [u8]>,
) -> Result<ArrayRef, String> {
    let mut builder = Decimal128Builder::new();
    let limit = 10i128.checked_pow(u32::from(precision));
    for cell in cells {
        if cell.is_empty() {
            builder.append_null();
            continue;
        }
        let value = rescale(decimal_parts(cell)?, i32::from(scale));
        match (value, limit) {
            (Some(v), Some(limit)) if v.abs() < limit => builder.append_value(v),
            _ => builder.append_null(),
        }
    }
    let array = builder
        .finish()
        .with_precision_and_scale(precision, scale)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(array))
}

/// A LazyBinary decimal's unscaled value and scale.
fn decimal_parts(cell: &[u8]) -> Result<(i128, i32), String> {
    let bad = || format!("a malformed decimal of {} bytes", cell.len());
    let mut at = 0;
    let scale = vlong_at(cell, &mut at).ok_or_else(bad)?;
    let len = vlong_at(cell, &mut at).ok_or_else(bad)?;
    let bytes = usize::try_from(len)
        .ok()
        .and_then(|n| cell.get(at..at + n))
        .filter(|b| at + b.len() == cell.len() && !b.is_empty() && b.len() <= 16)
        .ok_or_else(bad)?;
    let negative = bytes[0] & 0x80 != 0;
    let mut unscaled: i128 = if negative { -1 } else { 0 };
    for &b in bytes {
        unscaled = (unscaled << 8) | i128::from(b);
    }
    let scale = i32::try_from(scale).map_err(|_| bad())?;
    Ok((unscaled, scale))
}

/// `unscaled * 10^-from` at scale `to`, rounded half up (away from zero);
/// `None` when it does not fit.
fn rescale((unscaled, from): (i128, i32), to: i32) -> Option<i128> {
    if from <= to {
        let factor = 10i128.checked_pow(u32::try_from(to - from).ok()?)?;
        return unscaled.checked_mul(factor);
    }
    let factor = 10i128.checked_pow(u32::try_from(from - to).ok()?)?;
    let quotient = unscaled / factor;
    let remainder = (unscaled % factor).abs();
    Some(if remainder * 2 >= factor {
        quotient + unscaled.signum()
    } else {
        quotient
    })
}

/// A `TimestampWritable`'s microseconds since the epoch: four bytes whose
/// top bit says a vint follows, the low 31 bits of the seconds; then the
/// nanoseconds with their decimal digits reversed (negative when a vlong
/// of the seconds' higher bits follows it).
fn timestamp_micros(cell: &[u8]) -> Result<i64, String> {
    let bad = || format!("a malformed timestamp of {} bytes", cell.len());
    let first: [u8; 4] = cell
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    let first = u32::from_be_bytes(first);
    let mut seconds = i64::from(first & 0x7FFF_FFFF);
    let mut nanos: i64 = 0;
    let mut at = 4;
    if first & 0x8000_0000 != 0 {
        let mut reversed = vlong_at(cell, &mut at).ok_or_else(bad)?;
        let more_seconds = reversed < 0;
        if more_seconds {
            reversed = -reversed - 1;
        }
        nanos = unreverse_nanos(reversed).ok_or_else(bad)?;
        if more_seconds {
            let high = vlong_at(cell, &mut at).ok_or_else(bad)?;
            seconds |= high.checked_shl(31).ok_or_else(bad)?;
        }
    }
    if at != cell.len() {
        return Err(bad());
    }
    seconds
        .checked_mul(1_000_000)
        .and_then(|micros| micros.checked_add(nanos / 1000))
        .ok_or_else(bad)
}

/// Nanoseconds from their reversed decimal digits (123000000 is written
/// as 321).
fn unreverse_nanos(reversed: i64) -> Option<i64> {
    if reversed == 0 {
        return Some(0);
    }
    let digits = reversed.checked_ilog10()? + 1;
    let (mut value, mut rest) = (0i64, reversed);
    while rest != 0 {
        value = value * 10 + rest % 10;
        rest /= 10;
    }
    if digits < 9 {
        value *= 10i64.pow(9 - digits);
    }
    (0..1_000_000_000).contains(&value).then_some(value)
}
