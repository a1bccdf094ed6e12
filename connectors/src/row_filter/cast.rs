//! `CAST` as Spark 4 casts in ANSI mode: a string that is no value of the
//! type fails (`TRY_CAST` gives null), a number out of the type's range
//! fails, decimals round half up, strings are trimmed, `NaN` and
//! `Infinity` read as Spark reads them. Casts sluice cannot do exactly as
//! Spark (a double written as a string, say) are refused when the filter is
//! bound, never approximated.

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Date32Array,
    Decimal128Array, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array, Int8Array,
    StringArray, TimestampMicrosecondArray,
};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int64Type,
    TimestampMicrosecondType,
};
use arrow::error::ArrowError;

use super::parse::{parse_date, parse_number, parse_timestamp, parse_timestamp_ntz, Literal};
use super::types::{is_fractional, is_integral};
use super::tz::SessionTz;

/// How a cast treats a value it cannot convert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CastMode {
    /// One the analyzer added (ANSI: fails).
    Implicit,
    /// `CAST` (ANSI: fails).
    Ansi,
    /// `TRY_CAST`: null.
    Try,
}

const DAY_MICROS: i64 = 86_400_000_000;

fn fail(what: String) -> ArrowError {
    ArrowError::CastError(what)
}

/// A parsed literal as a one-value array of its Spark type (a timestamp
/// read in `tz`, the session's zone).
pub(crate) fn literal_array(lit: &Literal, tz: &SessionTz) -> Option<ArrayRef> {
    Some(match lit {
        Literal::Null => new_null_array(&DataType::Null, 1),
        Literal::Bool(b) => Arc::new(BooleanArray::from(vec![*b])),
        Literal::Str(s) => Arc::new(StringArray::from(vec![s.as_str()])),
        Literal::Int(i) => match (i32::try_from(*i), i64::try_from(*i)) {
            (Ok(v), _) => Arc::new(Int32Array::from(vec![v])),
            (_, Ok(v)) => Arc::new(Int64Array::from(vec![v])),
            _ => decimal(*i, 0)?,
        },
        Literal::SizedInt(i, 8) => Arc::new(Int8Array::from(vec![i8::try_from(*i).ok()?])),
        Literal::SizedInt(i, 16) => Arc::new(Int16Array::from(vec![i16::try_from(*i).ok()?])),
        Literal::SizedInt(i, _) => Arc::new(Int64Array::from(vec![i64::try_from(*i).ok()?])),
        Literal::Decimal(d, s) => decimal(*d, *s)?,
        Literal::Float(x) => Arc::new(Float64Array::from(vec![*x])),
        Literal::Float32(x) => Arc::new(Float32Array::from(vec![*x])),
        Literal::Bytes(b) => Arc::new(BinaryArray::from_vec(vec![b.as_slice()])),
        Literal::Date(d) => Arc::new(Date32Array::from(vec![*d])),
        Literal::Timestamp(text) => Arc::new(
            TimestampMicrosecondArray::from(vec![parse_timestamp(text, tz)?])
                .with_timezone(tz.name()),
        ),
    })
}

/// Digits of `|v|`.
fn digits(v: i128) -> u32 {
    let mut n = 1;
    let mut x = v.unsigned_abs();
    while x >= 10 {
        x /= 10;
        n += 1;
    }
    n
}

/// A decimal literal as Spark types it: as many digits as it has, at least
/// its scale.
fn decimal(v: i128, scale: u32) -> Option<ArrayRef> {
    let precision = digits(v).max(scale).max(1);
    if precision > 38 {
        return None;
    }
    let a = Decimal128Array::from(vec![v])
        .with_precision_and_scale(precision as u8, scale as i8)
        .ok()?;
    Some(Arc::new(a))
}

/// Whether sluice casts `from` to `to` exactly as Spark does.
pub(crate) fn castable(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    if from == to || *from == Null {
        return true;
    }
    match (from, to) {
        (Utf8, t) => {
            is_integral(t)
                || is_fractional(t)
                || matches!(
                    t,
                    Decimal128(..) | Date32 | Timestamp(..) | Boolean | Binary
                )
        }
        (f, t) if is_integral(f) => {
            is_integral(t) || is_fractional(t) || matches!(t, Decimal128(..) | Boolean | Utf8)
        }
        (f, t) if is_fractional(f) => {
            is_integral(t) || is_fractional(t) || matches!(t, Boolean | Utf8)
        }
        (Decimal128(..), t) => {
            is_integral(t) || is_fractional(t) || matches!(t, Decimal128(..) | Utf8)
        }
        (Boolean, t) => is_integral(t) || is_fractional(t) || matches!(t, Utf8),
        (Date32, t) => matches!(t, Timestamp(..) | Utf8),
        (Timestamp(..), t) => matches!(t, Date32 | Timestamp(..) | Utf8),
        _ => false,
    }
}

/// `a` cast to `to`.
pub(crate) fn cast_to(a: &ArrayRef, to: &DataType, mode: CastMode) -> Result<ArrayRef, ArrowError> {
    use DataType::*;
    let from = a.data_type().clone();
    if &from == to {
        return Ok(a.clone());
    }
    let strict = mode != CastMode::Try;
    match &from {
        Null => Ok(new_null_array(to, a.len())),
        Utf8 => match to {
            Utf8 => Ok(a.clone()),
            t => from_strings(a.as_string::<i32>(), t, strict),
        },
        Decimal128(_, s) => from_decimals(a, *s, to, mode),
        Boolean => from_booleans(a, to, mode),
        f if is_integral(f) => from_integers(a, to, strict),
        f if is_fractional(f) => from_floats(a, to, strict),
        Date32 | Timestamp(..) => from_times(a, to),
        _ => Err(no_cast(&from, to)),
    }
}

/// The error for a cast sluice does not do.
fn no_cast(from: &DataType, to: &DataType) -> ArrowError {
    fail(format!(
        "[DATATYPE_MISMATCH.CAST_WITHOUT_SUGGESTION] cannot cast {from} to {to}"
    ))
}

/// `a` cast to `to` by arrow: safe (null where a value does not fit)
/// unless `strict`.
fn arrow_cast(a: &ArrayRef, to: &DataType, strict: bool) -> Result<ArrayRef, ArrowError> {
    cast_with_options(
        a,
        to,
        &CastOptions {
            safe: !strict,
            ..Default::default()
        },
    )
    .map_err(|e| fail(format!("[CAST_OVERFLOW] {e}")))
}

/// Decimals (at scale `s`) cast to `to`: a float or double of their text,
/// another decimal rounded half up, an integer truncated, or their text.
fn from_decimals(
    a: &ArrayRef,
    s: i8,
    to: &DataType,
    mode: CastMode,
) -> Result<ArrayRef, ArrowError> {
    use DataType::*;
    let strict = mode != CastMode::Try;
    match to {
        Float32 => {
            let d = a.as_primitive::<Decimal128Type>();
            let scale = d.scale();
            Ok(Arc::new(
                d.iter()
                    .map(|v| v.map(|v| decimal_text(v, scale).parse::<f32>().unwrap_or(f32::NAN)))
                    .collect::<Float32Array>(),
            ))
        }
        Float64 => {
            let d = a.as_primitive::<Decimal128Type>();
            let scale = d.scale();
            Ok(Arc::new(
                d.iter()
                    .map(|v| v.map(|v| decimal_text(v, scale).parse::<f64>().unwrap_or(f64::NAN)))
                    .collect::<Float64Array>(),
            ))
        }
        Decimal128(p, s2) => rescale(a, s, *p, *s2, strict),
        t if is_integral(t) => {
            let d = a.as_primitive::<Decimal128Type>();
            let div = 10i128.pow(s as u32);
            let longs: Vec<Option<i64>> = d
                .iter()
                .map(|v| match v {
                    None => Ok(None),
                    Some(v) => match i64::try_from(v / div) {
                        Ok(x) => Ok(Some(x)),
                        Err(_) if strict => Err(fail(format!(
                            "[CAST_OVERFLOW] the value {} cannot be cast to {t} due to an overflow",
                            decimal_text(v, s)
                        ))),
                        Err(_) => Ok(None),
                    },
                })
                .collect::<Result<_, _>>()?;
            let longs: ArrayRef = Arc::new(Int64Array::from(longs));
            cast_to(&longs, t, mode)
        }
        Utf8 => Ok(Arc::new(
            a.as_primitive::<Decimal128Type>()
                .iter()
                .map(|v| v.map(|v| decimal_text(v, s)))
                .collect::<StringArray>(),
        )),
        _ => Err(no_cast(a.data_type(), to)),
    }
}

/// Booleans cast to `to`: a number 1 or 0, or `true` or `false`.
fn from_booleans(a: &ArrayRef, to: &DataType, mode: CastMode) -> Result<ArrayRef, ArrowError> {
    match to {
        t if is_integral(t) || is_fractional(t) => {
            let b = a.as_boolean();
            let ints: ArrayRef =
                Arc::new(b.iter().map(|v| v.map(i32::from)).collect::<Int32Array>());
            cast_to(&ints, t, mode)
        }
        DataType::Utf8 => Ok(Arc::new(
            a.as_boolean()
                .iter()
                .map(|v| v.map(|b| if b { "true" } else { "false" }))
                .collect::<StringArray>(),
        )),
        _ => Err(no_cast(a.data_type(), to)),
    }
}

/// Integers cast to `to`: a boolean, their text, another number (out of
/// range failing when `strict`) or a decimal that holds them.
fn from_integers(a: &ArrayRef, to: &DataType, strict: bool) -> Result<ArrayRef, ArrowError> {
    match to {
        DataType::Boolean | DataType::Utf8 => arrow_cast(a, to, strict),
        t if is_integral(t) || is_fractional(t) => arrow_cast(a, to, strict),
        DataType::Decimal128(p, s) => {
            let (p, s) = (*p, *s);
            let longs = arrow::compute::cast(a, &DataType::Int64)?;
            let scale = 10i128.pow(s as u32);
            let out: Vec<Option<i128>> = longs
                .as_primitive::<Int64Type>()
                .iter()
                .map(|v| match v {
                    None => Ok(None),
                    Some(v) => {
                        let x = i128::from(v) * scale;
                        if digits(x) > p as u32 && x != 0 {
                            if strict {
                                return Err(fail(format!(
                                    "[NUMERIC_VALUE_OUT_OF_RANGE] {v} cannot be represented as decimal({p}, {s})"
                                )));
                            }
                            return Ok(None);
                        }
                        Ok(Some(x))
                    }
                })
                .collect::<Result<_, _>>()?;
            Ok(Arc::new(
                Decimal128Array::from(out).with_precision_and_scale(p, s)?,
            ))
        }
        _ => Err(no_cast(a.data_type(), to)),
    }
}

/// Floats and doubles cast to `to`: a boolean, their text as Java writes
/// it, or another number (an integer out of range failing when `strict`).
fn from_floats(a: &ArrayRef, to: &DataType, strict: bool) -> Result<ArrayRef, ArrowError> {
    use DataType::*;
    match (a.data_type(), to) {
        (_, Boolean) => arrow_cast(a, to, strict),
        (Float64, Utf8) => Ok(Arc::new(
            a.as_primitive::<Float64Type>()
                .iter()
                .map(|v| {
                    v.map(|x| {
                        java_double_text(format!("{x:e}"), x.is_nan(), x.is_infinite(), x < 0.0)
                    })
                })
                .collect::<StringArray>(),
        )),
        (Float32, Utf8) => Ok(Arc::new(
            a.as_primitive::<Float32Type>()
                .iter()
                .map(|v| {
                    v.map(|x| {
                        java_double_text(format!("{x:e}"), x.is_nan(), x.is_infinite(), x < 0.0)
                    })
                })
                .collect::<StringArray>(),
        )),
        (_, t) if is_integral(t) || is_fractional(t) => {
            if is_integral(t) && strict {
                check_float_range(a, t)?;
            }
            arrow_cast(a, to, strict)
        }
        _ => Err(no_cast(a.data_type(), to)),
    }
}

/// Dates and timestamps cast to `to`: a timestamp, a date or their text.
fn from_times(a: &ArrayRef, to: &DataType) -> Result<ArrayRef, ArrowError> {
    use DataType::*;
    match (a.data_type(), to) {
        (Date32, Timestamp(..)) | (Timestamp(..), Date32 | Timestamp(..) | Utf8) => {
            Ok(times(a, to))
        }
        (Date32, Utf8) => Ok(Arc::new(
            a.as_primitive::<Date32Type>()
                .iter()
                .map(|v| v.map(date_text))
                .collect::<StringArray>(),
        )),
        _ => Err(no_cast(a.data_type(), to)),
    }
}

/// A float or double outside an integer type's range (or NaN) fails the
/// cast in ANSI mode; arrow's cast would not say which value.
fn check_float_range(a: &ArrayRef, to: &DataType) -> Result<(), ArrowError> {
    let (lo, hi) = match to {
        DataType::Int8 => (i8::MIN as f64, i8::MAX as f64),
        DataType::Int16 => (i16::MIN as f64, i16::MAX as f64),
        DataType::Int32 => (i32::MIN as f64, i32::MAX as f64),
        _ => (i64::MIN as f64, 9_223_372_036_854_775_807.0),
    };
    let values: Vec<Option<f64>> = match a.data_type() {
        DataType::Float32 => a
            .as_primitive::<Float32Type>()
            .iter()
            .map(|v| v.map(f64::from))
            .collect(),
        _ => a.as_primitive::<Float64Type>().iter().collect(),
    };
    for v in values.into_iter().flatten() {
        let t = v.trunc();
        if v.is_nan() || t < lo || t > hi || (to == &DataType::Int64 && t >= hi) {
            return Err(fail(format!(
                "[CAST_OVERFLOW] the value {v} of the type double cannot be cast to {to} due to an overflow"
            )));
        }
    }
    Ok(())
}

/// A float or double as Java's `Double.toString` writes it (what Spark's
/// cast to string gives), from its shortest digits in Rust's scientific
/// form (`1.5e-7`): `NaN`, `Infinity`, plain digits with at least one
/// after the point from 10^-3 up to 10^7 (`0.001`, `1.0`, `1234567.0`),
/// `1.0E7` and `1.5E-7` outside.
fn java_double_text(sci: String, nan: bool, infinite: bool, negative: bool) -> String {
    if nan {
        return "NaN".into();
    }
    if infinite {
        return if negative { "-Infinity" } else { "Infinity" }.into();
    }
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if digits.chars().all(|c| c == '0') {
        return format!("{sign}0.0");
    }
    if (-3..7).contains(&exp) {
        // Plain: the point after digit `exp + 1`.
        let point = exp + 1;
        if point <= 0 {
            let zeros = "0".repeat((-point) as usize);
            return format!("{sign}0.{zeros}{digits}");
        }
        let point = point as usize;
        let padded = format!("{digits:0<point$}");
        let (int, frac) = padded.split_at(point);
        let frac = if frac.is_empty() { "0" } else { frac };
        return format!("{sign}{int}.{frac}");
    }
    let (first, rest) = digits.split_at(1);
    let rest = if rest.is_empty() { "0" } else { rest };
    format!("{sign}{first}.{rest}E{exp}")
}

/// A decimal's digits at `scale` as plain text (`-1.50`).
pub(crate) fn decimal_text(v: i128, scale: i8) -> String {
    if scale <= 0 {
        return format!("{v}");
    }
    let s = scale as usize;
    let text = v.unsigned_abs().to_string();
    let padded = format!("{text:0>width$}", width = s + 1);
    let (int, frac) = padded.split_at(padded.len() - s);
    let sign = if v < 0 { "-" } else { "" };
    format!("{sign}{int}.{frac}")
}

/// `v` at `from` scale brought to `to` scale, half up, as Spark's
/// `Decimal.changePrecision` rounds.
pub(crate) fn round_half_up(v: i128, from: i8, to: i8) -> Option<i128> {
    if to >= from {
        return v.checked_mul(10i128.checked_pow((to - from) as u32)?);
    }
    let div = 10i128.checked_pow((from - to) as u32)?;
    let q = v / div;
    let r = v % div;
    Some(if r.unsigned_abs() * 2 >= div.unsigned_abs() {
        q + v.signum()
    } else {
        q
    })
}

fn rescale(a: &ArrayRef, from: i8, p: u8, s: i8, strict: bool) -> Result<ArrayRef, ArrowError> {
    let d = a.as_primitive::<Decimal128Type>();
    let out: Vec<Option<i128>> = d
        .iter()
        .map(|v| match v {
            None => Ok(None),
            Some(v) => {
                match round_half_up(v, from, s).filter(|x| digits(*x) <= p as u32 || *x == 0) {
                    Some(x) => Ok(Some(x)),
                    None if strict => Err(fail(format!(
                    "[NUMERIC_VALUE_OUT_OF_RANGE] {} cannot be represented as decimal({p}, {s})",
                    decimal_text(v, from)
                ))),
                    None => Ok(None),
                }
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(Arc::new(
        Decimal128Array::from(out).with_precision_and_scale(p, s)?,
    ))
}

/// Spark's whitespace for casts from strings: trimmed at both ends.
fn trimmed(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || c.is_control())
}

/// A string as an integer the way ANSI casts read it: a sign and digits.
fn parse_integer(s: &str) -> Option<i128> {
    let t = trimmed(s);
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse::<i128>().ok()
}

/// A string as a double the way Spark reads it (`NaN`, `Infinity`, `inf`,
/// a `d` or `f` suffix).
pub(crate) fn parse_double(s: &str) -> Option<f64> {
    let t = trimmed(s);
    let lower = t.to_ascii_lowercase();
    match lower.as_str() {
        "nan" => return Some(f64::NAN),
        "inf" | "+inf" | "infinity" | "+infinity" => return Some(f64::INFINITY),
        "-inf" | "-infinity" => return Some(f64::NEG_INFINITY),
        _ => {}
    }
    let body = lower.strip_suffix(['d', 'f']).unwrap_or(&lower);
    if body.is_empty()
        || !body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'+' | b'-'))
        || !body.bytes().any(|b| b.is_ascii_digit())
    {
        return None;
    }
    body.parse::<f64>().ok()
}

/// Strings cast to `to` as Spark reads them: trimmed, a string that is no
/// value of `to` failing when `strict` (else null).
fn from_strings(
    s: &arrow::array::StringArray,
    to: &DataType,
    strict: bool,
) -> Result<ArrayRef, ArrowError> {
    use DataType::*;
    Ok(match to {
        Int8 => each::<_, Int8Array>(s, to, strict, |v| {
            parse_integer(v).and_then(|i| i8::try_from(i).ok())
        })?,
        Int16 => each::<_, Int16Array>(s, to, strict, |v| {
            parse_integer(v).and_then(|i| i16::try_from(i).ok())
        })?,
        Int32 => each::<_, Int32Array>(s, to, strict, |v| {
            parse_integer(v).and_then(|i| i32::try_from(i).ok())
        })?,
        Int64 => each::<_, Int64Array>(s, to, strict, |v| {
            parse_integer(v).and_then(|i| i64::try_from(i).ok())
        })?,
        Float64 => each::<_, Float64Array>(s, to, strict, parse_double)?,
        Float32 => each::<_, Float32Array>(s, to, strict, |v| parse_double(v).map(|x| x as f32))?,
        Boolean => each::<_, BooleanArray>(s, to, strict, |v: &str| {
            match trimmed(v).to_ascii_lowercase().as_str() {
                "t" | "true" | "y" | "yes" | "1" => Some(true),
                "f" | "false" | "n" | "no" | "0" => Some(false),
                _ => None,
            }
        })?,
        Date32 => each::<_, Date32Array>(s, to, strict, |v: &str| parse_date(trimmed(v)))?,
        Timestamp(_, zone) => strings_to_timestamps(s, to, zone, strict)?,
        Binary => Arc::new(
            s.iter()
                .map(|v| v.map(str::as_bytes))
                .collect::<BinaryArray>(),
        ),
        Decimal128(p, sc) => strings_to_decimals(s, to, *p, *sc, strict)?,
        other => return Err(fail(format!("cannot cast a string to {other}"))),
    })
}

/// The error for a string that is no value of `to`.
fn malformed(v: &str, to: &DataType) -> ArrowError {
    fail(format!(
        "[CAST_INVALID_INPUT] the value '{v}' of the type \"STRING\" cannot be cast to \"{}\" because it is malformed",
        super::types::spark_name(to).to_uppercase()
    ))
}

/// Each string read by `parse` into an array `A` of `to`'s values: null
/// for null, a string `parse` refuses failing when `strict` (else null).
fn each<T, A>(
    s: &StringArray,
    to: &DataType,
    strict: bool,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<ArrayRef, ArrowError>
where
    A: From<Vec<Option<T>>> + Array + 'static,
{
    let out: Vec<_> = s
        .iter()
        .map(|v| match v {
            None => Ok(None),
            Some(v) => match parse(v) {
                Some(x) => Ok(Some(x)),
                None if strict => Err(malformed(v, to)),
                None => Ok(None),
            },
        })
        .collect::<Result<_, ArrowError>>()?;
    Ok(Arc::new(A::from(out)) as ArrayRef)
}

/// Strings cast to a timestamp of `to` (in `zone`, else without a zone).
fn strings_to_timestamps(
    s: &StringArray,
    to: &DataType,
    zone: &Option<Arc<str>>,
    strict: bool,
) -> Result<ArrayRef, ArrowError> {
    let a = match SessionTz::of_type(to) {
        Some(tz) => each::<_, TimestampMicrosecondArray>(s, to, strict, |v: &str| {
            parse_timestamp(trimmed(v), &tz)
        })?,
        None => each::<_, TimestampMicrosecondArray>(s, to, strict, |v: &str| {
            parse_timestamp_ntz(trimmed(v))
        })?,
    };
    Ok(Arc::new(
        a.as_primitive::<TimestampMicrosecondType>()
            .clone()
            .with_timezone_opt(zone.clone()),
    ))
}

/// Strings cast to `decimal(p, sc)`, rounded half up to the scale.
fn strings_to_decimals(
    s: &StringArray,
    to: &DataType,
    p: u8,
    sc: i8,
    strict: bool,
) -> Result<ArrayRef, ArrowError> {
    let out: Vec<Option<i128>> = s
        .iter()
        .map(|v| match v {
            None => Ok(None),
            Some(v) => {
                let x = match parse_number(trimmed(v)) {
                    Some(Literal::Int(i)) => round_half_up(i, 0, sc),
                    Some(Literal::Decimal(d, ds)) => round_half_up(d, ds as i8, sc),
                    _ => None,
                }
                .filter(|x| digits(*x) <= p as u32 || *x == 0);
                match x {
                    Some(x) => Ok(Some(x)),
                    None if strict => Err(malformed(v, to)),
                    None => Ok(None),
                }
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(Arc::new(
        Decimal128Array::from(out).with_precision_and_scale(p, sc)?,
    ))
}

fn date_text(days: i32) -> String {
    let date = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
        .and_then(|e| e.checked_add_signed(chrono::Duration::days(i64::from(days))));
    match date {
        Some(d) => d.format("%Y-%m-%d").to_string(),
        None => days.to_string(),
    }
}

/// A wall-clock time as Spark shows a timestamp: `2026-01-01 10:00:00`,
/// with the fraction of a second where there is one (`.5`, `.123456`).
fn timestamp_text(local: chrono::NaiveDateTime) -> String {
    use chrono::Timelike;
    let base = local.format("%Y-%m-%d %H:%M:%S").to_string();
    let frac = local.nanosecond() / 1000;
    if frac == 0 {
        base
    } else {
        let f = format!("{frac:06}");
        format!("{base}.{}", f.trim_end_matches('0'))
    }
}

/// The wall-clock time of a timestamp's value: in `zone` for a
/// `timestamp`, as it is for a `timestamp_ntz` (`zone` `None`).
pub(crate) fn wall_clock(micros: i64, zone: Option<&SessionTz>) -> Option<chrono::NaiveDateTime> {
    match zone {
        Some(tz) => tz.local(micros),
        None => Some(chrono::DateTime::from_timestamp_micros(micros)?.naive_utc()),
    }
}

/// Casts between dates, timestamps (in their zone), timestamps without a
/// zone and strings, as Spark's session time zone has them: a date starts
/// at its midnight in the zone, a timestamp's date and text are those of
/// its wall-clock time there, a `timestamp_ntz` becomes the `timestamp`
/// of its wall-clock time in the zone and back.
fn times(a: &ArrayRef, to: &DataType) -> ArrayRef {
    let from = a.data_type();
    let (from_zone, to_zone) = (SessionTz::of_type(from), SessionTz::of_type(to));
    let out_ts = |values: Vec<Option<i64>>| -> ArrayRef {
        let zone = match to {
            DataType::Timestamp(_, z) => z.clone(),
            _ => None,
        };
        Arc::new(TimestampMicrosecondArray::from(values).with_timezone_opt(zone))
    };
    if let DataType::Date32 = from {
        let d = a.as_primitive::<Date32Type>();
        return out_ts(
            d.iter()
                .map(|v| match &to_zone {
                    Some(tz) => tz.day_start(v?),
                    None => i64::from(v?).checked_mul(DAY_MICROS),
                })
                .collect(),
        );
    }
    let t = a.as_primitive::<TimestampMicrosecondType>();
    let wall = |v: i64| wall_clock(v, from_zone.as_ref());
    match to {
        DataType::Date32 => Arc::new(
            t.iter()
                .map(|v| match &from_zone {
                    Some(tz) => tz.day_of(v?),
                    None => i32::try_from(v?.div_euclid(DAY_MICROS)).ok(),
                })
                .collect::<Date32Array>(),
        ),
        DataType::Utf8 => Arc::new(
            t.iter()
                .map(|v| wall(v?).map(timestamp_text))
                .collect::<StringArray>(),
        ),
        _ => out_ts(match (&from_zone, &to_zone) {
            (None, Some(tz)) => t.iter().map(|v| tz.instant(&wall(v?)?)).collect(),
            (Some(_), None) => t
                .iter()
                .map(|v| Some(wall(v?)?.and_utc().timestamp_micros()))
                .collect(),
            _ => t.iter().collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(x: f64) -> String {
        java_double_text(format!("{x:e}"), x.is_nan(), x.is_infinite(), x < 0.0)
    }

    #[test]
    fn doubles_as_java_writes_them() {
        let cases = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (1.5, "1.5"),
            (-2.25, "-2.25"),
            (0.001, "0.001"),
            (0.0001, "1.0E-4"),
            (1234567.0, "1234567.0"),
            (1.0e7, "1.0E7"),
            (1.2345e10, "1.2345E10"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (f64::MAX, "1.7976931348623157E308"),
            (1.0e-5, "1.0E-5"),
        ];
        for (x, want) in cases {
            assert_eq!(text(x), want, "{x:e}");
        }
        let f = 0.1f32;
        assert_eq!(
            java_double_text(format!("{f:e}"), false, false, false),
            "0.1"
        );
    }
}
