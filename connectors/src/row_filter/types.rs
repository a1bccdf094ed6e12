//! Spark's types as arrow holds them, and how Spark's analyzer brings two
//! of them together (ANSI mode, Spark 4): the wider number of two numbers,
//! the date or timestamp a string is read as, the type a `CASE` or `IN`
//! list takes.

use arrow::array::{Array, ArrayRef, Float32Array, Float64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, TimeUnit};
use arrow::error::ArrowError;

/// A column's type as the expression engine computes with it: string and
/// binary views and large variants as plain ones, every timestamp in
/// microseconds (a `timestamp` keeps a zone, a `timestamp_ntz` has none),
/// unsigned integers widened; `None` for what a filter does not compute
/// with (lists, maps, structs).
pub(crate) fn engine_type(t: &DataType) -> Option<DataType> {
    Some(match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => DataType::Binary,
        DataType::Timestamp(_, tz) => DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
        DataType::Date64 => DataType::Date32,
        DataType::UInt8 => DataType::Int16,
        DataType::UInt16 => DataType::Int32,
        DataType::UInt32 => DataType::Int64,
        DataType::UInt64 => DataType::Decimal128(20, 0),
        DataType::Float16 => DataType::Float32,
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) => DataType::Decimal128(*p, *s),
        DataType::Dictionary(_, v) => return engine_type(v),
        DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal128(..)
        | DataType::Date32
        | DataType::Null => t.clone(),
        _ => return None,
    })
}

/// The name Spark gives a type, for messages.
pub(crate) fn spark_name(t: &DataType) -> String {
    match t {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 => "tinyint".into(),
        DataType::Int16 => "smallint".into(),
        DataType::Int32 => "int".into(),
        DataType::Int64 => "bigint".into(),
        DataType::Float32 => "float".into(),
        DataType::Float64 => "double".into(),
        DataType::Decimal128(p, s) => format!("decimal({p},{s})"),
        DataType::Utf8 => "string".into(),
        DataType::Binary => "binary".into(),
        DataType::Date32 => "date".into(),
        DataType::Timestamp(_, None) => "timestamp_ntz".into(),
        DataType::Timestamp(..) => "timestamp".into(),
        DataType::Null => "void".into(),
        other => other.to_string(),
    }
}

pub(crate) fn is_integral(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    )
}

pub(crate) fn is_fractional(t: &DataType) -> bool {
    matches!(t, DataType::Float32 | DataType::Float64)
}

pub(crate) fn is_numeric(t: &DataType) -> bool {
    is_integral(t) || is_fractional(t) || matches!(t, DataType::Decimal128(..))
}

/// The decimal an integer type fits in whole (`int` is `decimal(10,0)`).
pub(crate) fn integral_as_decimal(t: &DataType) -> Option<(u8, i8)> {
    Some(match t {
        DataType::Int8 => (3, 0),
        DataType::Int16 => (5, 0),
        DataType::Int32 => (10, 0),
        DataType::Int64 => (20, 0),
        DataType::Decimal128(p, s) => (*p, *s),
        _ => return None,
    })
}

fn rank(t: &DataType) -> Option<u8> {
    Some(match t {
        DataType::Int8 => 1,
        DataType::Int16 => 2,
        DataType::Int32 => 3,
        DataType::Int64 => 4,
        DataType::Float32 => 6,
        DataType::Float64 => 7,
        _ => return None,
    })
}

/// The wider of two numeric types, as Spark's `findWiderTypeForTwo`:
/// integers by width, decimals by the digits of both sides (at most 38),
/// a decimal with a float or double a double.
pub(crate) fn wider_numeric(a: &DataType, b: &DataType) -> Option<DataType> {
    if a == b {
        return Some(a.clone());
    }
    let decimal = matches!(a, DataType::Decimal128(..)) || matches!(b, DataType::Decimal128(..));
    if decimal {
        if is_fractional(a) || is_fractional(b) {
            return Some(DataType::Float64);
        }
        let (p1, s1) = integral_as_decimal(a)?;
        let (p2, s2) = integral_as_decimal(b)?;
        let scale = s1.max(s2);
        let whole = (p1 as i16 - s1 as i16).max(p2 as i16 - s2 as i16);
        let precision = whole + scale as i16;
        if precision > 38 {
            // Spark keeps the whole digits and cuts the scale.
            let scale = (38 - whole).max(0) as i8;
            return Some(DataType::Decimal128(38, scale));
        }
        return Some(DataType::Decimal128(precision as u8, scale));
    }
    let (ra, rb) = (rank(a)?, rank(b)?);
    // In ANSI mode a float and any integer meet in a double (Spark's
    // `findTightestCommonType`: the float cannot hold every integer).
    let float_with_wide_int =
        |x: &DataType, y: &DataType| *x == DataType::Float32 && is_integral(y);
    if float_with_wide_int(a, b) || float_with_wide_int(b, a) {
        return Some(DataType::Float64);
    }
    Some(if ra >= rb { a.clone() } else { b.clone() })
}

/// The type two values are compared as, or `None` where Spark refuses the
/// comparison (or sluice cannot be sure it casts as Spark would).
pub(crate) fn comparison_type(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    if a == b {
        return Some(a.clone());
    }
    match (a, b) {
        (Null, t) | (t, Null) => Some(t.clone()),
        (x, y) if is_numeric(x) && is_numeric(y) => wider_numeric(x, y),
        (Utf8, t) | (t, Utf8) => string_promotion(t),
        // A date meets a timestamp as that timestamp (in the session's
        // zone, or without one); a `timestamp_ntz` meets a `timestamp` as
        // the `timestamp`.
        (Date32, t @ Timestamp(..)) | (t @ Timestamp(..), Date32) => Some(t.clone()),
        (Timestamp(_, None), t @ Timestamp(..)) | (t @ Timestamp(..), Timestamp(..)) => {
            Some(t.clone())
        }
        _ => None,
    }
}

/// The type a string meets another type as (Spark 4's ANSI
/// `findWiderTypeForString`): an integer as a `bigint`, a float, double or
/// decimal as a `double`, a date, timestamp, boolean or binary as that
/// type; both sides are cast to it.
pub(crate) fn string_promotion(other: &DataType) -> Option<DataType> {
    match other {
        t if is_integral(t) => Some(DataType::Int64),
        t if is_fractional(t) || matches!(t, DataType::Decimal128(..)) => Some(DataType::Float64),
        DataType::Date32
        | DataType::Timestamp(..)
        | DataType::Boolean
        | DataType::Binary
        | DataType::Utf8
        | DataType::Null => Some(other.clone()),
        _ => None,
    }
}

/// The type every branch of a `CASE`, `COALESCE` or `IN` list takes.
pub(crate) fn common_type<'a>(types: impl IntoIterator<Item = &'a DataType>) -> Option<DataType> {
    let mut out = DataType::Null;
    for t in types {
        out = comparison_type(&out, t)?;
    }
    Some(out)
}

/// Floats made ready to compare as Spark compares them: `-0.0` as `0.0`,
/// every NaN the one NaN (equal to itself, greater than every number,
/// which is how arrow's total order then ranks it).
pub(crate) fn normalize_floats(array: &ArrayRef) -> ArrayRef {
    match array.data_type() {
        DataType::Float64 => {
            let a = array
                .as_any()
                .downcast_ref::<Float64Array>()
                .map(|a| a.unary::<_, arrow::datatypes::Float64Type>(norm64));
            match a {
                Some(a) => std::sync::Arc::new(a),
                None => array.clone(),
            }
        }
        DataType::Float32 => {
            let a = array
                .as_any()
                .downcast_ref::<Float32Array>()
                .map(|a| a.unary::<_, arrow::datatypes::Float32Type>(norm32));
            match a {
                Some(a) => std::sync::Arc::new(a),
                None => array.clone(),
            }
        }
        _ => array.clone(),
    }
}

fn norm64(x: f64) -> f64 {
    if x.is_nan() {
        f64::NAN
    } else if x == 0.0 {
        0.0
    } else {
        x
    }
}

fn norm32(x: f32) -> f32 {
    if x.is_nan() {
        f32::NAN
    } else if x == 0.0 {
        0.0
    } else {
        x
    }
}

/// A column as the engine computes with it ([`engine_type`]).
pub(crate) fn engine_array(array: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    match engine_type(array.data_type()) {
        Some(t) if &t != array.data_type() => cast(array, &t),
        Some(_) => Ok(array.clone()),
        None => Err(ArrowError::InvalidArgumentError(format!(
            "a filter does not compute with {}",
            array.data_type()
        ))),
    }
}
