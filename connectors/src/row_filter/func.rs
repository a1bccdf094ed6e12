//! The functions a filter calls, each typed and computed as Spark 4 does:
//! strings (`lower`, `upper`, `length`, `substring`, `trim`, `concat`, …),
//! dates and times in the session time zone (`year`, `month`, `hour`, `to_date`,
//! `date_trunc`, `datediff`, …), numbers (`abs`, `pmod`, `round`, `floor`,
//! `ceil`, `isnan`, …) and hashes (`hash`, `xxhash64`).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Date32Array, Float64Array, Int32Array, Int64Array,
    StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, TimestampMicrosecondType,
};
use arrow::error::ArrowError;
use chrono::{Datelike, Timelike};

use super::hash::{murmur3, xxhash64, Hashed, SEED};
use super::types::{is_fractional, is_integral, is_numeric};
use super::tz::SessionTz;

/// A function sluice computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    Lower,
    Upper,
    Length,
    Substring,
    Trim,
    LTrim,
    RTrim,
    Concat,
    StartsWith,
    EndsWith,
    Contains,
    Abs,
    Pmod,
    Round,
    Floor,
    Ceil,
    IsNan,
    Year,
    Quarter,
    Month,
    Day,
    DayOfWeek,
    Hour,
    Minute,
    Second,
    ToDate,
    ToTimestamp,
    DateTrunc,
    Trunc,
    DateDiff,
    DateAdd,
    DateSub,
    Hash,
    XxHash64,
    Greatest,
    Least,
    /// `round(decimal, d)`: half up to `d` digits (the scale a literal).
    RoundDecimal(i32),
}

/// What a call's arguments must be cast to, and what it returns.
pub(crate) struct Signature {
    pub func: Func,
    pub args: Vec<DataType>,
    pub ret: DataType,
}

/// The signature of `name` called with arguments of `types`, timestamps in
/// `tz`; `Err` says why not (an unknown function, wrong arguments).
pub(crate) fn resolve(name: &str, types: &[DataType], tz: &SessionTz) -> Result<Signature, String> {
    let call = Call { name, types, tz };
    let families: [fn(&Call) -> Resolved; 4] = [
        strings_signature,
        numbers_signature,
        dates_signature,
        hashes_signature,
    ];
    for family in families {
        if let Some(sig) = family(&call)? {
            return Ok(sig);
        }
    }
    Err(format!(
        "the function {name} is not one a filter computes (see the filter page of the docs for those that are)"
    ))
}

/// A family's signature of a call: `None` where the function is not one of
/// the family's.
type Resolved = Result<Option<Signature>, String>;

/// A call being resolved: the function's name, its arguments' types and the
/// session time zone.
struct Call<'a> {
    name: &'a str,
    types: &'a [DataType],
    tz: &'a SessionTz,
}

impl Call<'_> {
    /// The number of arguments.
    fn n(&self) -> usize {
        self.types.len()
    }

    /// Fails unless there are `min` to `max` arguments.
    fn arity(&self, min: usize, max: usize) -> Result<(), String> {
        let (name, n) = (self.name, self.n());
        if n < min || n > max {
            let want = if min == max {
                format!("{min}")
            } else {
                format!("{min} to {max}")
            };
            return Err(format!("{name} takes {want} arguments, not {n}"));
        }
        Ok(())
    }

    /// A string argument: a number, boolean, date or timestamp is cast to
    /// its text (Spark's implicit cast to `StringType`).
    fn string_arg(&self, i: usize) -> Result<DataType, String> {
        use DataType::*;
        match &self.types[i] {
            Utf8 | Null => Ok(Utf8),
            t if *t != Binary && super::cast::castable(t, &Utf8) => Ok(Utf8),
            other => Err(format!(
                "{} takes a string, not {}",
                self.name,
                super::types::spark_name(other)
            )),
        }
    }

    /// An integer argument, as an `int`.
    fn int_arg(&self, i: usize) -> Result<DataType, String> {
        use DataType::*;
        match &self.types[i] {
            t if is_integral(t) => Ok(Int32),
            Null => Ok(Int32),
            other => Err(format!(
                "{} takes an integer here, not {}",
                self.name,
                super::types::spark_name(other)
            )),
        }
    }

    /// A date argument: a date, a timestamp (its day) or a string (cast).
    fn date_arg(&self, i: usize) -> Result<DataType, String> {
        use DataType::*;
        match &self.types[i] {
            Date32 | Timestamp(..) | Utf8 | Null => Ok(Date32),
            other => Err(format!(
                "{} takes a date, not {}",
                self.name,
                super::types::spark_name(other)
            )),
        }
    }

    /// A timestamp argument: a timestamp (with or without a zone) as it is,
    /// a date or a string as a timestamp in the session's zone.
    fn ts_arg(&self, i: usize) -> Result<DataType, String> {
        use DataType::*;
        match &self.types[i] {
            t @ Timestamp(..) => Ok(t.clone()),
            Date32 | Utf8 | Null => Ok(self.tz.timestamp()),
            other => Err(format!(
                "{} takes a timestamp, not {}",
                self.name,
                super::types::spark_name(other)
            )),
        }
    }
}

/// A signature found: `func` taking `args`, returning `ret`.
fn sig(func: Func, args: Vec<DataType>, ret: DataType) -> Resolved {
    Ok(Some(Signature { func, args, ret }))
}

/// The signatures of the string functions.
fn strings_signature(c: &Call) -> Resolved {
    use DataType::*;
    let (name, n) = (c.name, c.n());
    match name {
        "lower" | "lcase" | "upper" | "ucase" => {
            c.arity(1, 1)?;
            let f = if name.starts_with('l') {
                Func::Lower
            } else {
                Func::Upper
            };
            sig(f, vec![c.string_arg(0)?], Utf8)
        }
        "length" | "char_length" | "character_length" | "len" => {
            c.arity(1, 1)?;
            match &c.types[0] {
                Binary => sig(Func::Length, vec![Binary], Int32),
                _ => sig(Func::Length, vec![c.string_arg(0)?], Int32),
            }
        }
        "substring" | "substr" => {
            c.arity(2, 3)?;
            let mut args = vec![c.string_arg(0)?, c.int_arg(1)?];
            if n == 3 {
                args.push(c.int_arg(2)?);
            }
            sig(Func::Substring, args, Utf8)
        }
        "trim" | "ltrim" | "rtrim" => {
            c.arity(1, 1)?;
            let f = match name {
                "trim" => Func::Trim,
                "ltrim" => Func::LTrim,
                _ => Func::RTrim,
            };
            sig(f, vec![c.string_arg(0)?], Utf8)
        }
        "concat" => {
            c.arity(1, 255)?;
            let args = (0..n).map(|i| c.string_arg(i)).collect::<Result<_, _>>()?;
            sig(Func::Concat, args, Utf8)
        }
        "startswith" | "endswith" | "contains" => {
            c.arity(2, 2)?;
            let f = match name {
                "startswith" => Func::StartsWith,
                "endswith" => Func::EndsWith,
                _ => Func::Contains,
            };
            sig(f, vec![c.string_arg(0)?, c.string_arg(1)?], Boolean)
        }
        _ => Ok(None),
    }
}

/// The signatures of the math functions (`greatest` and `least` among them).
fn numbers_signature(c: &Call) -> Resolved {
    use DataType::*;
    let (name, types, n) = (c.name, c.types, c.n());
    match name {
        "abs" => {
            c.arity(1, 1)?;
            let t = numeric(name, &types[0])?;
            sig(Func::Abs, vec![t.clone()], t)
        }
        "pmod" => {
            c.arity(2, 2)?;
            // `pmod` is arithmetic: a string beside a number is promoted.
            let promoted = |i: usize, other: usize| match (&types[i], &types[other]) {
                (Utf8, t) if is_numeric(t) => super::types::string_promotion(t)
                    .ok_or_else(|| format!("{name} takes a number, not string")),
                (t, _) => numeric(name, t),
            };
            let t = super::types::wider_numeric(&promoted(0, 1)?, &promoted(1, 0)?)
                .filter(|t| !matches!(t, Decimal128(..)))
                .ok_or_else(|| format!("{name} of decimals is not supported"))?;
            sig(Func::Pmod, vec![t.clone(), t.clone()], t)
        }
        "round" => {
            c.arity(1, 2)?;
            let t = numeric(name, &types[0])?;
            if matches!(t, Decimal128(..)) {
                return Err("round of a decimal is not supported".into());
            }
            let mut args = vec![t.clone()];
            if n == 2 {
                args.push(c.int_arg(1)?);
            }
            sig(Func::Round, args, t)
        }
        "floor" | "ceil" | "ceiling" => {
            c.arity(1, 1)?;
            let t = numeric(name, &types[0])?;
            if matches!(t, Decimal128(..)) {
                return Err(format!("{name} of a decimal is not supported"));
            }
            let f = if name == "floor" {
                Func::Floor
            } else {
                Func::Ceil
            };
            sig(f, vec![Float64], Int64)
        }
        "isnan" => {
            c.arity(1, 1)?;
            let t = numeric(name, &types[0])?;
            sig(
                Func::IsNan,
                vec![if is_fractional(&t) { t } else { Float64 }],
                Boolean,
            )
        }
        "greatest" | "least" => {
            c.arity(2, 255)?;
            let t = super::types::common_type(types.iter())
                .filter(|t| *t != Null)
                .ok_or_else(|| format!("{name} of these types is not supported"))?;
            let f = if name == "greatest" {
                Func::Greatest
            } else {
                Func::Least
            };
            sig(f, vec![t.clone(); n], t)
        }
        _ => Ok(None),
    }
}

/// The signatures of the date and time functions.
fn dates_signature(c: &Call) -> Resolved {
    use DataType::*;
    let (name, n) = (c.name, c.n());
    match name {
        "year" | "quarter" | "month" | "day" | "dayofmonth" | "dayofweek" => {
            c.arity(1, 1)?;
            let f = match name {
                "year" => Func::Year,
                "quarter" => Func::Quarter,
                "month" => Func::Month,
                "dayofweek" => Func::DayOfWeek,
                _ => Func::Day,
            };
            sig(f, vec![c.date_arg(0)?], Int32)
        }
        "hour" | "minute" | "second" => {
            c.arity(1, 1)?;
            let f = match name {
                "hour" => Func::Hour,
                "minute" => Func::Minute,
                _ => Func::Second,
            };
            sig(f, vec![c.ts_arg(0)?], Int32)
        }
        "to_date" => {
            if n != 1 {
                return Err("to_date with a format is not supported (to_date(x) is)".into());
            }
            sig(Func::ToDate, vec![c.date_arg(0)?], Date32)
        }
        "to_timestamp" => {
            if n != 1 {
                return Err(
                    "to_timestamp with a format is not supported (to_timestamp(x) is)".into(),
                );
            }
            let t = c.ts_arg(0)?;
            sig(Func::ToTimestamp, vec![t.clone()], t)
        }
        "date_trunc" => {
            c.arity(2, 2)?;
            let t = c.ts_arg(1)?;
            sig(Func::DateTrunc, vec![c.string_arg(0)?, t.clone()], t)
        }
        "trunc" => {
            c.arity(2, 2)?;
            sig(Func::Trunc, vec![c.date_arg(0)?, c.string_arg(1)?], Date32)
        }
        "datediff" | "date_diff" => {
            c.arity(2, 2)?;
            sig(Func::DateDiff, vec![c.date_arg(0)?, c.date_arg(1)?], Int32)
        }
        "date_add" | "date_sub" => {
            c.arity(2, 2)?;
            let f = if name == "date_add" {
                Func::DateAdd
            } else {
                Func::DateSub
            };
            sig(f, vec![c.date_arg(0)?, c.int_arg(1)?], Date32)
        }
        _ => Ok(None),
    }
}

/// The signatures of the hashes.
fn hashes_signature(c: &Call) -> Resolved {
    use DataType::*;
    let (name, types) = (c.name, c.types);
    match name {
        "hash" | "xxhash64" => {
            c.arity(1, 255)?;
            for t in types {
                hashable(t).ok_or_else(|| {
                    format!("{name} of {} is not supported", super::types::spark_name(t))
                })?;
            }
            let (f, ret) = if name == "hash" {
                (Func::Hash, Int32)
            } else {
                (Func::XxHash64, Int64)
            };
            sig(f, types.to_vec(), ret)
        }
        _ => Ok(None),
    }
}

/// A numeric argument's type; a string is read as the double it holds
/// (Spark's implicit cast to `NumericType`).
fn numeric(name: &str, t: &DataType) -> Result<DataType, String> {
    match t {
        DataType::Null => Ok(DataType::Int32),
        DataType::Utf8 => Ok(DataType::Float64),
        t if is_numeric(t) => Ok(t.clone()),
        other => Err(format!(
            "{name} takes a number, not {}",
            super::types::spark_name(other)
        )),
    }
}

fn hashable(t: &DataType) -> Option<()> {
    match t {
        t if is_numeric(t) => Some(()),
        DataType::Boolean
        | DataType::Utf8
        | DataType::Binary
        | DataType::Date32
        | DataType::Timestamp(..)
        | DataType::Null => Some(()),
        _ => None,
    }
}

fn strings(a: &ArrayRef) -> &StringArray {
    a.as_string::<i32>()
}

fn ints(a: &ArrayRef) -> &Int32Array {
    a.as_primitive::<Int32Type>()
}

fn map_str(a: &ArrayRef, f: impl Fn(&str) -> String) -> ArrayRef {
    Arc::new(
        strings(a)
            .iter()
            .map(|v| v.map(&f))
            .collect::<StringArray>(),
    )
}

fn map_date(a: &ArrayRef, f: impl Fn(chrono::NaiveDate) -> i32) -> ArrayRef {
    let out: Int32Array = a
        .as_primitive::<Date32Type>()
        .iter()
        .map(|v| v.and_then(day).map(&f))
        .collect();
    Arc::new(out)
}

/// `f` of each timestamp's wall-clock time (in its zone).
fn map_ts(a: &ArrayRef, f: impl Fn(chrono::NaiveDateTime) -> i32) -> ArrayRef {
    let zone = SessionTz::of_type(a.data_type());
    let out: Int32Array = a
        .as_primitive::<TimestampMicrosecondType>()
        .iter()
        .map(|v| super::cast::wall_clock(v?, zone.as_ref()).map(&f))
        .collect();
    Arc::new(out)
}

fn day(days: i32) -> Option<chrono::NaiveDate> {
    chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?
        .checked_add_signed(chrono::Duration::days(i64::from(days)))
}

fn days_of(d: chrono::NaiveDate) -> i32 {
    d.num_days_from_ce() - 719_163
}

/// Spark's `substring`: 1-based, 0 taken as 1, a negative position counted
/// from the end, in characters.
fn substring(s: &str, pos: i32, len: Option<i32>) -> String {
    let chars: Vec<char> = s.chars().collect();
    let n = chars.len() as i64;
    let len = i64::from(len.unwrap_or(i32::MAX));
    let start: i64 = if pos > 0 {
        i64::from(pos) - 1
    } else if pos < 0 {
        n + i64::from(pos)
    } else {
        0
    };
    let end = if len < 0 {
        start
    } else {
        start.saturating_add(len)
    };
    let (start, end) = (start.clamp(0, n), end.clamp(0, n));
    if start >= end {
        return String::new();
    }
    chars[start as usize..end as usize].iter().collect()
}

/// `round(x, d)` of a double as Spark does it: the shortest decimal that
/// reads back as `x`, rounded half up.
fn round_double(x: f64, d: i32) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let text = format!("{x:e}");
    let Some((mantissa, exp)) = text.split_once('e') else {
        return x;
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    // x = 0.digits * 10^(exp + 1)
    let point = exp + 1;
    let keep = point + d;
    if keep < 0 {
        return 0.0f64.copysign(x);
    }
    let keep = keep as usize;
    if keep >= digits.len() {
        return x;
    }
    let mut kept: Vec<u8> = digits.as_bytes()[..keep].iter().map(|b| b - b'0').collect();
    let up = digits.as_bytes()[keep] >= b'5';
    let mut point = point;
    if up {
        let mut i = kept.len();
        loop {
            if i == 0 {
                kept.insert(0, 1);
                point += 1;
                break;
            }
            i -= 1;
            if kept[i] == 9 {
                kept[i] = 0;
            } else {
                kept[i] += 1;
                break;
            }
        }
    }
    if kept.is_empty() {
        return 0.0f64.copysign(x);
    }
    let body: String = kept.iter().map(|d| char::from(b'0' + d)).collect();
    let text = format!("{}0.{body}e{point}", if negative { "-" } else { "" });
    text.parse().unwrap_or(x)
}

fn round_long(v: i64, d: i32) -> Option<i64> {
    if d >= 0 {
        return Some(v);
    }
    let div = 10i64.checked_pow((-d) as u32)?;
    let q = v / div;
    let r = v % div;
    let q = if r.unsigned_abs() * 2 >= div.unsigned_abs() {
        q + v.signum()
    } else {
        q
    };
    q.checked_mul(div)
}

/// The microseconds of `t` cut to `unit` (Spark's `date_trunc`).
fn trunc_ts(t: chrono::NaiveDateTime, unit: &str) -> Option<chrono::NaiveDateTime> {
    let d = t.date();
    let midnight = |d: chrono::NaiveDate| d.and_hms_opt(0, 0, 0);
    match unit.to_ascii_lowercase().as_str() {
        "year" | "yyyy" | "yy" => midnight(chrono::NaiveDate::from_ymd_opt(d.year(), 1, 1)?),
        "quarter" => midnight(chrono::NaiveDate::from_ymd_opt(
            d.year(),
            (d.month() - 1) / 3 * 3 + 1,
            1,
        )?),
        "month" | "mon" | "mm" => {
            midnight(chrono::NaiveDate::from_ymd_opt(d.year(), d.month(), 1)?)
        }
        "week" => {
            midnight(d - chrono::Duration::days(i64::from(d.weekday().num_days_from_monday())))
        }
        "day" | "dd" => midnight(d),
        "hour" => d.and_hms_opt(t.hour(), 0, 0),
        "minute" => d.and_hms_opt(t.hour(), t.minute(), 0),
        "second" => d.and_hms_opt(t.hour(), t.minute(), t.second()),
        "millisecond" => Some(t.with_nanosecond(t.nanosecond() / 1_000_000 * 1_000_000)?),
        "microsecond" => Some(t),
        _ => None,
    }
}

/// `date_trunc(unit, t)` of a timestamp's value as Spark's
/// `truncTimestamp`: its wall-clock time in `zone` cut to `unit`, and the
/// instant of that (the offset it had kept where the time is twice);
/// without a zone (`timestamp_ntz`), the wall-clock time cut.
fn trunc_instant(t: i64, unit: &str, zone: Option<&SessionTz>) -> Option<i64> {
    let local = super::cast::wall_clock(t, zone)?;
    let cut = trunc_ts(local, unit)?;
    match zone {
        Some(tz) => tz.instant_preferring(&cut, tz.offset_of(t)),
        None => Some(cut.and_utc().timestamp_micros()),
    }
}

/// Evaluates `f` on its (already cast) arguments.
pub(crate) fn call(
    f: Func,
    values: &[ArrayRef],
    rows: usize,
    ret: &DataType,
) -> Result<ArrayRef, ArrowError> {
    let a = values
        .first()
        .cloned()
        .unwrap_or_else(|| arrow::array::new_null_array(ret, rows));
    let family = match f {
        Func::Lower
        | Func::Upper
        | Func::Length
        | Func::Substring
        | Func::Trim
        | Func::LTrim
        | Func::RTrim
        | Func::Concat
        | Func::StartsWith
        | Func::EndsWith
        | Func::Contains => strings_call,
        Func::Year
        | Func::Quarter
        | Func::Month
        | Func::Day
        | Func::DayOfWeek
        | Func::Hour
        | Func::Minute
        | Func::Second
        | Func::ToDate
        | Func::ToTimestamp
        | Func::DateTrunc
        | Func::Trunc
        | Func::DateDiff
        | Func::DateAdd
        | Func::DateSub => dates_call,
        Func::Hash | Func::XxHash64 => hashes_call,
        Func::Abs
        | Func::Pmod
        | Func::Round
        | Func::Floor
        | Func::Ceil
        | Func::IsNan
        | Func::RoundDecimal(_)
        | Func::Greatest
        | Func::Least => numbers_call,
    };
    family(f, &a, values, rows, ret)
}

/// The string functions.
fn strings_call(
    f: Func,
    a: &ArrayRef,
    values: &[ArrayRef],
    rows: usize,
    _ret: &DataType,
) -> Result<ArrayRef, ArrowError> {
    Ok(match f {
        Func::Lower => map_str(a, str::to_lowercase),
        Func::Upper => map_str(a, str::to_uppercase),
        Func::Length => match a.data_type() {
            DataType::Binary => Arc::new(
                a.as_binary::<i32>()
                    .iter()
                    .map(|v| v.map(|b| b.len() as i32))
                    .collect::<Int32Array>(),
            ),
            _ => Arc::new(
                strings(a)
                    .iter()
                    .map(|v| v.map(|s| s.chars().count() as i32))
                    .collect::<Int32Array>(),
            ),
        },
        Func::Substring => {
            let pos = ints(&values[1]);
            let len = values.get(2).map(ints);
            Arc::new(
                (0..rows)
                    .map(|i| {
                        let s = strings(a);
                        if s.is_null(i) || pos.is_null(i) || len.is_some_and(|l| l.is_null(i)) {
                            return None;
                        }
                        Some(substring(s.value(i), pos.value(i), len.map(|l| l.value(i))))
                    })
                    .collect::<StringArray>(),
            )
        }
        Func::Trim => map_str(a, |s| s.trim_matches(' ').to_string()),
        Func::LTrim => map_str(a, |s| s.trim_start_matches(' ').to_string()),
        Func::RTrim => map_str(a, |s| s.trim_end_matches(' ').to_string()),
        Func::Concat => Arc::new(
            (0..rows)
                .map(|i| {
                    let mut out = String::new();
                    for v in values {
                        let s = strings(v);
                        if s.is_null(i) {
                            return None;
                        }
                        out.push_str(s.value(i));
                    }
                    Some(out)
                })
                .collect::<StringArray>(),
        ),
        Func::StartsWith | Func::EndsWith | Func::Contains => {
            let (x, y) = (strings(a), strings(&values[1]));
            Arc::new(
                x.iter()
                    .zip(y.iter())
                    .map(|(x, y)| {
                        let (x, y) = (x?, y?);
                        Some(match f {
                            Func::StartsWith => x.starts_with(y),
                            Func::EndsWith => x.ends_with(y),
                            _ => x.contains(y),
                        })
                    })
                    .collect::<BooleanArray>(),
            )
        }
        other => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "{other:?} is no string function"
            )))
        }
    })
}

/// The math functions.
fn numbers_call(
    f: Func,
    a: &ArrayRef,
    values: &[ArrayRef],
    rows: usize,
    ret: &DataType,
) -> Result<ArrayRef, ArrowError> {
    Ok(match f {
        Func::Abs => abs(a)?,
        Func::Pmod => pmod(a, &values[1])?,
        Func::Round => round_call(a, values, rows)?,
        Func::Floor | Func::Ceil => floor_ceil(f, a)?,
        Func::IsNan => {
            let x = arrow::compute::cast(&a, &DataType::Float64)?;
            Arc::new(
                x.as_primitive::<Float64Type>()
                    .iter()
                    .map(|v| Some(v.is_some_and(f64::is_nan)))
                    .collect::<BooleanArray>(),
            )
        }
        Func::RoundDecimal(d) => round_decimal(a, d, ret)?,
        Func::Greatest | Func::Least => greatest_least(f, a, values, rows)?,
        other => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "{other:?} is no math function"
            )))
        }
    })
}

/// `round(x, d)` of a float, double or integer, half up (`d` 0 where not
/// given); an integer that overflows fails.
fn round_call(a: &ArrayRef, values: &[ArrayRef], rows: usize) -> Result<ArrayRef, ArrowError> {
    let d: Vec<Option<i32>> = match values.get(1) {
        Some(d) => ints(d).iter().collect(),
        None => vec![Some(0); rows],
    };
    Ok(match a.data_type() {
        DataType::Float64 | DataType::Float32 => {
            let x = arrow::compute::cast(&a, &DataType::Float64)?;
            let out: Float64Array = x
                .as_primitive::<Float64Type>()
                .iter()
                .zip(d)
                .map(|(x, d)| Some(round_double(x?, d?)))
                .collect();
            arrow::compute::cast(&(Arc::new(out) as ArrayRef), a.data_type())?
        }
        t => {
            let x = arrow::compute::cast(&a, &DataType::Int64)?;
            let out = x
                .as_primitive::<Int64Type>()
                .iter()
                .zip(d)
                .map(|(x, d)| match (x, d) {
                    (Some(x), Some(d)) => round_long(x, d)
                        .map(Some)
                        .ok_or_else(|| overflow(&format!("round({x}, {d})"))),
                    _ => Ok(None),
                })
                .collect::<Result<Int64Array, _>>()?;
            super::cast::cast_to(&(Arc::new(out) as ArrayRef), t, super::cast::CastMode::Ansi)?
        }
    })
}

/// `floor(x)` or `ceil(x)` of a double, as a `bigint`.
fn floor_ceil(f: Func, a: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let out = a
        .as_primitive::<Float64Type>()
        .iter()
        .map(|v| match v {
            None => Ok(None),
            Some(v) => {
                let r = if f == Func::Floor {
                    v.floor()
                } else {
                    v.ceil()
                };
                // Java's Math.floor then a cast to long: NaN is 0,
                // out of range the nearest long.
                Ok(Some(if r.is_nan() { 0 } else { r as i64 }))
            }
        })
        .collect::<Result<Int64Array, ArrowError>>()?;
    Ok(Arc::new(out))
}

/// `greatest(...)` or `least(...)` of values of one type, nulls skipped.
fn greatest_least(
    f: Func,
    a: &ArrayRef,
    values: &[ArrayRef],
    rows: usize,
) -> Result<ArrayRef, ArrowError> {
    let mut out = a.clone();
    for v in &values[1..] {
        let (o, v2) = (
            super::types::normalize_floats(&out),
            super::types::normalize_floats(v),
        );
        // Nulls are skipped: take v where out is null or v wins.
        let wins = if f == Func::Greatest {
            arrow::compute::kernels::cmp::gt(&v2, &o)?
        } else {
            arrow::compute::kernels::cmp::lt(&v2, &o)?
        };
        let take_v: BooleanArray = (0..rows)
            .map(|i| Some(v.is_valid(i) && (out.is_null(i) || (wins.is_valid(i) && wins.value(i)))))
            .collect();
        out = arrow::compute::kernels::zip::zip(&take_v, v, &out)?;
    }
    Ok(out)
}

/// The date and time functions (UTC).
fn dates_call(
    f: Func,
    a: &ArrayRef,
    values: &[ArrayRef],
    _rows: usize,
    _ret: &DataType,
) -> Result<ArrayRef, ArrowError> {
    Ok(match f {
        Func::Year => map_date(a, |d| d.year()),
        Func::Quarter => map_date(a, |d| (d.month() as i32 - 1) / 3 + 1),
        Func::Month => map_date(a, |d| d.month() as i32),
        Func::Day => map_date(a, |d| d.day() as i32),
        Func::DayOfWeek => map_date(a, |d| d.weekday().num_days_from_sunday() as i32 + 1),
        Func::Hour => map_ts(a, |t| t.hour() as i32),
        Func::Minute => map_ts(a, |t| t.minute() as i32),
        Func::Second => map_ts(a, |t| t.second() as i32),
        Func::ToDate | Func::ToTimestamp => a.clone(),
        Func::DateTrunc => {
            let units = strings(a);
            let zone = SessionTz::of_type(values[1].data_type());
            let ts = values[1].as_primitive::<TimestampMicrosecondType>();
            let out: TimestampMicrosecondArray = units
                .iter()
                .zip(ts.iter())
                .map(|(u, t)| trunc_instant(t?, u?, zone.as_ref()))
                .collect();
            Arc::new(out.with_timezone_opt(ts.timezone().map(Arc::from)))
        }
        Func::Trunc => trunc_dates(a, values),
        Func::DateDiff => {
            let (x, y) = (
                a.as_primitive::<Date32Type>(),
                values[1].as_primitive::<Date32Type>(),
            );
            Arc::new(
                x.iter()
                    .zip(y.iter())
                    .map(|(x, y)| Some(x? - y?))
                    .collect::<Int32Array>(),
            )
        }
        Func::DateAdd | Func::DateSub => shift_days(f, a, values)?,
        other => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "{other:?} is no date function"
            )))
        }
    })
}

/// `trunc(date, unit)`: the date's year, quarter, month or week start
/// (null for another unit).
fn trunc_dates(a: &ArrayRef, values: &[ArrayRef]) -> ArrayRef {
    let units = strings(&values[1]);
    let d = a.as_primitive::<Date32Type>();
    let out: Date32Array = d
        .iter()
        .zip(units.iter())
        .map(|(d, u)| {
            let u = u?.to_ascii_lowercase();
            if !matches!(
                u.as_str(),
                "year" | "yyyy" | "yy" | "quarter" | "month" | "mon" | "mm" | "week"
            ) {
                return None;
            }
            let t = trunc_ts(day(d?)?.and_hms_opt(0, 0, 0)?, &u)?;
            Some(days_of(t.date()))
        })
        .collect();
    Arc::new(out)
}

/// `date_add(date, n)` or `date_sub(date, n)`: the date `n` days later or
/// earlier.
fn shift_days(f: Func, a: &ArrayRef, values: &[ArrayRef]) -> Result<ArrayRef, ArrowError> {
    let (x, n) = (a.as_primitive::<Date32Type>(), ints(&values[1]));
    let out = x
        .iter()
        .zip(n.iter())
        .map(|(x, n)| match (x, n) {
            (Some(x), Some(n)) => {
                let r = if f == Func::DateAdd {
                    x.checked_add(n)
                } else {
                    x.checked_sub(n)
                };
                r.map(Some).ok_or_else(|| overflow("date_add"))
            }
            _ => Ok(None),
        })
        .collect::<Result<Date32Array, _>>()?;
    Ok(Arc::new(out))
}

/// Spark's hashes, chained over the arguments.
fn hashes_call(
    f: Func,
    _a: &ArrayRef,
    values: &[ArrayRef],
    rows: usize,
    _ret: &DataType,
) -> Result<ArrayRef, ArrowError> {
    Ok(match f {
        Func::Hash => {
            let mut h = vec![SEED as i32; rows];
            for v in values {
                hash_column(v, |i, value| h[i] = murmur3(value, h[i]))?;
            }
            Arc::new(Int32Array::from(h))
        }
        Func::XxHash64 => {
            let mut h = vec![SEED as i64; rows];
            for v in values {
                hash_column(v, |i, value| h[i] = xxhash64(value, h[i]))?;
            }
            Arc::new(Int64Array::from(h))
        }
        other => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "{other:?} is no hash function"
            )))
        }
    })
}

/// Spark's `round` of a decimal: half up to `d` digits after the point (or
/// to a multiple of `10^-d`), in the precision and scale of `ret`.
fn round_decimal(a: &ArrayRef, d: i32, ret: &DataType) -> Result<ArrayRef, ArrowError> {
    use super::cast::round_half_up;
    let DataType::Decimal128(p, to) = ret else {
        return Err(ArrowError::InvalidArgumentError(
            "round of a decimal".into(),
        ));
    };
    let x = a.as_primitive::<Decimal128Type>();
    let s = x.scale();
    let limit = 10i128.pow(u32::from(*p));
    let out = x
        .iter()
        .map(|v| {
            let Some(v) = v else { return Ok(None) };
            let r = if d >= 0 {
                round_half_up(v, s, *to)
            } else {
                let step = i8::try_from(d).ok();
                step.and_then(|step| round_half_up(v, s, step))
                    .and_then(|r| r.checked_mul(10i128.checked_pow(d.unsigned_abs())?))
            };
            match r.filter(|r| r.abs() < limit) {
                Some(r) => Ok(Some(r)),
                None => Err(overflow(&format!(
                    "round({}, {d})",
                    super::cast::decimal_text(v, s)
                ))),
            }
        })
        .collect::<Result<arrow::array::Decimal128Array, ArrowError>>()?;
    Ok(Arc::new(out.with_precision_and_scale(*p, *to)?))
}

fn overflow(what: &str) -> ArrowError {
    ArrowError::ComputeError(format!(
        "[ARITHMETIC_OVERFLOW] {what} caused overflow (Spark's ANSI mode fails the query here too)"
    ))
}

fn abs(a: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let t = a.data_type().clone();
    if is_integral(&t) {
        let negated = super::arith::negate(a)?;
        let lt0 = arrow::compute::kernels::cmp::lt(
            &arrow::compute::cast(a, &DataType::Int64)?,
            &arrow::array::Scalar::new(Int64Array::from(vec![0])),
        )?;
        return arrow::compute::kernels::zip::zip(&lt0, &negated, a);
    }
    Ok(match t {
        DataType::Float64 => Arc::new(
            a.as_primitive::<Float64Type>()
                .unary::<_, Float64Type>(f64::abs),
        ),
        DataType::Float32 => Arc::new(
            a.as_primitive::<Float32Type>()
                .unary::<_, Float32Type>(f32::abs),
        ),
        DataType::Decimal128(..) => Arc::new(
            a.as_primitive::<Decimal128Type>()
                .unary::<_, Decimal128Type>(i128::abs)
                .with_data_type(t.clone()),
        ),
        other => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "no abs of {other}"
            )))
        }
    })
}

/// Spark's `pmod`: the remainder made positive (`((a % n) + n) % n` where
/// the remainder is negative).
fn pmod(a: &ArrayRef, n: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let t = a.data_type().clone();
    let r = super::arith::apply(super::parse::Arith::Rem, a, n, &t)?;
    let negative = match &t {
        t if is_integral(t) => arrow::compute::kernels::cmp::lt(
            &arrow::compute::cast(&r, &DataType::Int64)?,
            &arrow::array::Scalar::new(Int64Array::from(vec![0])),
        )?,
        _ => arrow::compute::kernels::cmp::lt(
            &arrow::compute::cast(&r, &DataType::Float64)?,
            &arrow::array::Scalar::new(Float64Array::from(vec![0.0])),
        )?,
    };
    if negative.true_count() == 0 {
        return Ok(r);
    }
    // Only the negative remainders are shifted (an addition elsewhere could
    // overflow where Spark adds nothing).
    let shifted = {
        let part_r = arrow::compute::filter(&r, &negative)?;
        let part_n = arrow::compute::filter(n, &negative)?;
        let sum = super::arith::apply(super::parse::Arith::Add, &part_r, &part_n, &t)?;
        super::arith::apply(super::parse::Arith::Rem, &sum, &part_n, &t)?
    };
    let spread = super::rows::spread(shifted.as_ref(), &negative)?;
    arrow::compute::kernels::zip::zip(&negative, &spread, &r)
}

/// `v` in the fewest big-endian two's complement bytes that hold its sign
/// (Java's `BigInteger.toByteArray`: `0` is `[0]`, `128` is `[0, 128]`).
fn big_integer_bytes(v: i128) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let mut start = 0;
    while start + 1 < bytes.len() {
        let (b, next) = (bytes[start], bytes[start + 1]);
        let redundant = (b == 0x00 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0);
        if !redundant {
            break;
        }
        start += 1;
    }
    bytes[start..].to_vec()
}

/// Calls `f` with each non-null value of `v` as Spark's hashes see it.
fn hash_column(v: &ArrayRef, mut f: impl FnMut(usize, Hashed<'_>)) -> Result<(), ArrowError> {
    let rows = v.len();
    macro_rules! ints {
        ($t:ty, $conv:expr) => {{
            let a = v.as_primitive::<$t>();
            for i in 0..rows {
                if a.is_valid(i) {
                    f(i, $conv(a.value(i)));
                }
            }
        }};
    }
    match v.data_type() {
        DataType::Null => {}
        DataType::Boolean => {
            let a = v.as_boolean();
            for i in 0..rows {
                if a.is_valid(i) {
                    f(i, Hashed::Int(i32::from(a.value(i))));
                }
            }
        }
        DataType::Int8 => ints!(Int8Type, |x: i8| Hashed::Int(i32::from(x))),
        DataType::Int16 => ints!(Int16Type, |x: i16| Hashed::Int(i32::from(x))),
        DataType::Int32 => ints!(Int32Type, Hashed::Int),
        DataType::Date32 => ints!(Date32Type, Hashed::Int),
        DataType::Int64 => ints!(Int64Type, Hashed::Long),
        DataType::Timestamp(..) => ints!(TimestampMicrosecondType, Hashed::Long),
        DataType::Float32 => ints!(Float32Type, |x: f32| Hashed::Int(if x == 0.0 {
            0
        } else if x.is_nan() {
            f32::NAN.to_bits() as i32
        } else {
            x.to_bits() as i32
        })),
        DataType::Float64 => ints!(Float64Type, |x: f64| Hashed::Long(if x == 0.0 {
            0
        } else if x.is_nan() {
            f64::NAN.to_bits() as i64
        } else {
            x.to_bits() as i64
        })),
        DataType::Decimal128(p, _) if *p <= 18 => {
            ints!(Decimal128Type, |x: i128| Hashed::Long(x as i64))
        }
        // Wider decimals hash the bytes of their unscaled value as Java's
        // `BigInteger.toByteArray` writes them.
        DataType::Decimal128(..) => {
            let a = v.as_primitive::<Decimal128Type>();
            for i in 0..rows {
                if a.is_valid(i) {
                    let bytes = big_integer_bytes(a.value(i));
                    f(i, Hashed::Bytes(&bytes));
                }
            }
        }
        DataType::Utf8 => {
            let a = v.as_string::<i32>();
            for i in 0..rows {
                if a.is_valid(i) {
                    f(i, Hashed::Bytes(a.value(i).as_bytes()));
                }
            }
        }
        DataType::Binary => {
            let a = v.as_binary::<i32>();
            for i in 0..rows {
                if a.is_valid(i) {
                    f(i, Hashed::Bytes(a.value(i)));
                }
            }
        }
        other => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "no hash of {other}"
            )))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_integers_in_as_few_bytes_as_java_writes() {
        assert_eq!(big_integer_bytes(0), vec![0]);
        assert_eq!(big_integer_bytes(127), vec![127]);
        assert_eq!(big_integer_bytes(128), vec![0, 128]);
        assert_eq!(big_integer_bytes(-1), vec![0xff]);
        assert_eq!(big_integer_bytes(-128), vec![0x80]);
        assert_eq!(big_integer_bytes(-129), vec![0xff, 0x7f]);
        assert_eq!(big_integer_bytes(1 << 70).len(), 9);
    }

    #[test]
    fn substring_as_spark_counts() {
        assert_eq!(substring("Spark SQL", 5, None), "k SQL");
        assert_eq!(substring("Spark SQL", -3, None), "SQL");
        assert_eq!(substring("Spark SQL", 5, Some(1)), "k");
        assert_eq!(substring("Spark SQL", 0, Some(2)), "Sp");
        assert_eq!(substring("Spark SQL", -20, Some(22)), "Spark SQL");
        assert_eq!(substring("Spark SQL", -20, Some(12)), "S");
        assert_eq!(substring("héllo", 2, Some(2)), "él");
    }

    #[test]
    fn round_half_up_on_the_shortest_decimal() {
        assert_eq!(round_double(2.5, 0), 3.0);
        assert_eq!(round_double(-2.5, 0), -3.0);
        assert_eq!(round_double(1.005, 2), 1.01);
        assert_eq!(round_double(0.125, 2), 0.13);
        assert_eq!(round_double(9.99, 1), 10.0);
        assert_eq!(round_double(1234.5, -2), 1200.0);
        assert_eq!(round_long(1250, -2), Some(1300));
        assert_eq!(round_long(-1250, -2), Some(-1300));
    }
}
