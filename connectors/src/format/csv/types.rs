//! CSV column types as Spark's `CSVInferSchema` infers them: a column of
//! numbers is `int` when every value fits 32 bits, `bigint` when it fits 64,
//! `decimal(p,0)` beyond (up to 38 digits), `double` for fractions and
//! exponents; types of records and of files merge by Spark's
//! `compatibleType` (`int` and `bigint` make `bigint`, an integer and a
//! `double` make `double`, types with nothing in common make `string`).

use std::sync::Arc;

use arrow::datatypes::{DataType, TimeUnit};

use crate::format::FileInfo;

/// Spark's largest decimal precision.
const MAX_PRECISION: u8 = 38;
/// The digits of a Java `int` (`DecimalType.forType(IntegerType)`).
const INT_DIGITS: u8 = 10;
/// The digits of a Java `long` (`DecimalType.forType(LongType)`).
const LONG_DIGITS: u8 = 20;

/// A column of numbers as Spark types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Number {
    /// `int`: every value fits 32 bits.
    Int,
    /// `bigint`: every value fits 64 bits.
    Long,
    /// `decimal(p,0)`: whole numbers of up to `p` digits.
    Decimal(u8),
    /// `double`.
    Double,
}

impl Number {
    /// The arrow type of the column.
    pub(super) fn data_type(self) -> DataType {
        match self {
            Number::Int => DataType::Int32,
            Number::Long => DataType::Int64,
            Number::Decimal(p) => DataType::Decimal128(p, 0),
            Number::Double => DataType::Float64,
        }
    }

    /// The number type of an arrow type CSV inference gives.
    fn of(data_type: &DataType) -> Option<Number> {
        match data_type {
            DataType::Int32 => Some(Number::Int),
            DataType::Int64 => Some(Number::Long),
            DataType::Decimal128(p, 0) => Some(Number::Decimal(*p)),
            DataType::Float64 => Some(Number::Double),
            _ => None,
        }
    }

    /// The type of two (Spark's `compatibleType` of numbers).
    pub(super) fn merge(self, other: Number) -> Number {
        use Number::*;
        match (self, other) {
            (Double, _) | (_, Double) => Double,
            (Int, Int) => Int,
            (Int | Long, Int | Long) => Long,
            (Int, Decimal(p)) | (Decimal(p), Int) => Decimal(p.max(INT_DIGITS)),
            (Long, Decimal(p)) | (Decimal(p), Long) => Decimal(p.max(LONG_DIGITS)),
            (Decimal(p), Decimal(q)) => Decimal(p.max(q)),
        }
    }
}

/// The type of a column of numbers so far (`None`: no value yet) after one
/// more value, or `None` if the value is no number. As Spark's
/// `inferField`, the value is tried from the type so far on (after a
/// decimal, `5` is `decimal(1,0)`, not `int`).
pub(super) fn infer_number(so_far: Option<Number>, value: &str) -> Option<Number> {
    let this = match so_far {
        None | Some(Number::Int) => as_int(value),
        Some(Number::Long) => as_long(value),
        Some(Number::Decimal(_)) => as_decimal(value),
        Some(Number::Double) => as_double(value),
    }?;
    Some(so_far.map_or(this, |t| t.merge(this)))
}

/// Spark's `tryParseInteger`.
fn as_int(value: &str) -> Option<Number> {
    if value.parse::<i32>().is_ok() {
        Some(Number::Int)
    } else {
        as_long(value)
    }
}

/// Spark's `tryParseLong`.
fn as_long(value: &str) -> Option<Number> {
    if value.parse::<i64>().is_ok() {
        Some(Number::Long)
    } else {
        as_decimal(value)
    }
}

/// Spark's `tryParseDecimal`: a `java.math.BigDecimal` of scale 0 and at
/// most 38 digits (`1.5E1` is one; a negative scale, `1E10`, is refused as
/// Spark's `DecimalType` refuses it), else a double.
fn as_decimal(value: &str) -> Option<Number> {
    match big_decimal(value) {
        Some((precision, 0)) if precision <= u32::from(MAX_PRECISION) => {
            u8::try_from(precision).ok().map(Number::Decimal)
        }
        _ => as_double(value),
    }
}

/// Spark's `tryParseDouble`: what `java.lang.Double.parseDouble` reads
/// (its decimal forms, blanks around them ignored), or Spark's words for
/// the non-finite values. Java's hexadecimal forms and `d`/`f` suffixes
/// stay text: arrow's reader would not read them as numbers.
fn as_double(value: &str) -> Option<Number> {
    let value = value.trim_ascii();
    let word = matches!(
        value,
        "NaN" | "Infinity" | "+Infinity" | "-Infinity" | "Inf" | "-Inf"
    );
    let plain = value
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'))
        && value.parse::<f64>().is_ok();
    (word || plain).then_some(Number::Double)
}

/// The precision and scale of `java.math.BigDecimal(value)`, if it reads
/// it: `[+-]digits[.digits][(e|E)[+-]digits]`.
fn big_decimal(value: &str) -> Option<(u32, i64)> {
    let body = value.strip_prefix(['+', '-']).unwrap_or(value);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + fraction.len() == 0 || !digits(whole) || !digits(fraction) {
        return None;
    }
    // Java's exponent is an `int`, its sign optional.
    let exponent = match exponent {
        Some(e) => i64::from(e.parse::<i32>().ok()?),
        None => 0,
    };
    let significant = whole
        .bytes()
        .chain(fraction.bytes())
        .skip_while(|&b| b == b'0')
        .count();
    let precision = u32::try_from(significant.max(1)).ok()?;
    let scale = i64::try_from(fraction.len()).ok()? - exponent;
    Some((precision, scale))
}

/// What the values of a column so far say of it as Spark numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Numbers {
    /// No value yet (empty values are nulls and say nothing).
    #[default]
    Unseen,
    /// Numbers, all of them, of this type.
    Are(Number),
    /// A value that is no number.
    Not,
}

impl Numbers {
    /// With one more value.
    pub(super) fn with(self, value: &str) -> Numbers {
        let so_far = match self {
            _ if value.is_empty() => return self,
            Numbers::Unseen => None,
            Numbers::Are(number) => Some(number),
            Numbers::Not => return Numbers::Not,
        };
        infer_number(so_far, value).map_or(Numbers::Not, Numbers::Are)
    }
}

/// Whether a column of this arrow type may be Spark numbers: arrow's
/// integers and doubles, and text (integers past 64 bits, `Inf`, `+5`).
pub(super) fn may_be_numbers(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int64 | DataType::Float64 | DataType::Utf8
    )
}

/// The type of a column of the head as Spark infers it, from the type
/// arrow's inference gave it and, where it may be numbers, what its values
/// say: numbers as Spark types them (a column arrow typed as numbers that
/// Spark reads as text, `nan` say, is text), a timestamp an instant in
/// microseconds.
pub(super) fn spark_type(arrow: &DataType, numbers: Option<Numbers>) -> DataType {
    match (arrow, numbers) {
        (DataType::Timestamp(..), _) => {
            DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC")))
        }
        (_, Some(Numbers::Are(number))) => number.data_type(),
        (DataType::Int64 | DataType::Float64, Some(Numbers::Not)) => DataType::Utf8,
        (other, _) => other.clone(),
    }
}

/// The type of a column typed `a` in one file and `b` in another, as
/// Spark's `compatibleType`: numbers widen, a date and a timestamp make a
/// timestamp, an empty column takes the other's type, anything else is
/// `string`.
pub(crate) fn compatible(a: &DataType, b: &DataType) -> DataType {
    if a == b {
        return a.clone();
    }
    match (a, b) {
        (DataType::Null, other) | (other, DataType::Null) => other.clone(),
        (DataType::Date32, t @ DataType::Timestamp(..))
        | (t @ DataType::Timestamp(..), DataType::Date32) => t.clone(),
        _ => match (Number::of(a), Number::of(b)) {
            (Some(x), Some(y)) => x.merge(y).data_type(),
            _ => DataType::Utf8,
        },
    }
}

/// Gives every file's column the type Spark infers across all the files
/// (`compatibleType` of the types each file's head gave it), so that a
/// column `int` in one file and `bigint` in another is `bigint` in both.
pub(crate) fn widen_across_files(infos: &mut [FileInfo]) {
    crate::format::widen_columns(
        infos,
        |a, b| Some(compatible(a, b)),
        |f, t| f.clone().with_data_type(t.clone()),
    );
}
