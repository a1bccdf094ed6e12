//! Arithmetic as Spark 4 computes it in ANSI mode: integers in their own
//! width, failing on overflow (`[ARITHMETIC_OVERFLOW]`); `/` in doubles
//! (or decimals), `DIV` in longs, both failing on a zero divisor
//! (`[DIVIDE_BY_ZERO]`), as `%` does; `%` keeps the dividend's sign (Java's
//! remainder); decimals exact, at the precision and scale Spark gives the
//! result (`DecimalPrecision` with precision loss allowed, its default), an
//! integer literal beside a decimal as the decimal of its digits.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Decimal128Array, Float32Array, Float64Array, Int64Array, StringArray,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Decimal128Type, Float32Type, Float64Type, Int64Type};
use arrow::error::ArrowError;

use super::cast::round_half_up;
use super::parse::Arith;
use super::types::{is_fractional, is_integral};

fn overflow(what: &str) -> ArrowError {
    ArrowError::ComputeError(format!(
        "[ARITHMETIC_OVERFLOW] {what} caused overflow (Spark's ANSI mode fails the query here too)"
    ))
}

fn divide_by_zero(op: Arith) -> ArrowError {
    ArrowError::ComputeError(if op == Arith::Rem {
        "[REMAINDER_BY_ZERO] remainder by zero".to_string()
    } else {
        "[DIVIDE_BY_ZERO] division by zero".to_string()
    })
}

fn as_longs(a: &ArrayRef) -> Result<Vec<Option<i64>>, ArrowError> {
    Ok(cast(a, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .iter()
        .collect())
}

fn as_doubles(a: &ArrayRef) -> Result<Vec<Option<f64>>, ArrowError> {
    Ok(cast(a, &DataType::Float64)?
        .as_primitive::<Float64Type>()
        .iter()
        .collect())
}

/// The least and greatest value of an integer type.
fn range(t: &DataType) -> (i64, i64) {
    match t {
        DataType::Int8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::Int16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => (i32::MIN.into(), i32::MAX.into()),
        _ => (i64::MIN, i64::MAX),
    }
}

/// Longs of type `t` (checked to fit) as an array of `t`.
fn typed_longs(values: Vec<Option<i64>>, t: &DataType) -> Result<ArrayRef, ArrowError> {
    let longs: ArrayRef = Arc::new(Int64Array::from(values));
    if t == &DataType::Int64 {
        return Ok(longs);
    }
    cast(&longs, t)
}

/// `a op b`: both of the operation's type (the binder cast them), the
/// result of `result`.
pub(crate) fn apply(
    op: Arith,
    a: &ArrayRef,
    b: &ArrayRef,
    result: &DataType,
) -> Result<ArrayRef, ArrowError> {
    let t = a.data_type().clone();
    if op == Arith::Concat {
        let (x, y) = (a.as_string::<i32>(), b.as_string::<i32>());
        let out: StringArray = x
            .iter()
            .zip(y.iter())
            .map(|(x, y)| Some(format!("{}{}", x?, y?)))
            .collect();
        return Ok(Arc::new(out));
    }
    match t {
        _ if is_integral(&t) => integral(op, a, b, &t, result),
        DataType::Float64 | DataType::Float32 => fractional(op, a, b, &t),
        DataType::Decimal128(..) => decimal(op, a, b, result),
        other => Err(ArrowError::InvalidArgumentError(format!(
            "no arithmetic on {other}"
        ))),
    }
}

fn integral(
    op: Arith,
    a: &ArrayRef,
    b: &ArrayRef,
    t: &DataType,
    result: &DataType,
) -> Result<ArrayRef, ArrowError> {
    let (lo, hi) = range(if op == Arith::IntDiv {
        &DataType::Int64
    } else {
        t
    });
    let (x, y) = (as_longs(a)?, as_longs(b)?);
    let mut out = Vec::with_capacity(x.len());
    for (x, y) in x.into_iter().zip(y) {
        let (Some(x), Some(y)) = (x, y) else {
            out.push(None);
            continue;
        };
        let v: Option<i64> = match op {
            Arith::Add => x.checked_add(y),
            Arith::Sub => x.checked_sub(y),
            Arith::Mul => x.checked_mul(y),
            Arith::Rem | Arith::IntDiv if y == 0 => return Err(divide_by_zero(op)),
            // Java's remainder: MIN % -1 is 0.
            Arith::Rem => Some(x.wrapping_rem(y)),
            Arith::IntDiv => x.checked_div(y),
            Arith::BitAnd => Some(x & y),
            Arith::BitOr => Some(x | y),
            Arith::BitXor => Some(x ^ y),
            Arith::Div | Arith::Concat => None,
        };
        match v.filter(|v| (lo..=hi).contains(v)) {
            Some(v) => out.push(Some(v)),
            None => return Err(overflow(&format!("{x} {} {y}", op.symbol()))),
        }
    }
    typed_longs(out, result)
}

fn fractional(op: Arith, a: &ArrayRef, b: &ArrayRef, t: &DataType) -> Result<ArrayRef, ArrowError> {
    let (x, y) = (as_doubles(a)?, as_doubles(b)?);
    let single = t == &DataType::Float32;
    let mut out = Vec::with_capacity(x.len());
    for (x, y) in x.into_iter().zip(y) {
        let (Some(x), Some(y)) = (x, y) else {
            out.push(None);
            continue;
        };
        // In single precision, each operation rounds to a float.
        let r = |v: f64| if single { v as f32 as f64 } else { v };
        out.push(Some(match op {
            Arith::Add => r(x + y),
            Arith::Sub => r(x - y),
            Arith::Mul => r(x * y),
            Arith::Div | Arith::Rem if y == 0.0 => return Err(divide_by_zero(op)),
            Arith::Div => r(x / y),
            Arith::Rem => r(x % y),
            _ => {
                return Err(ArrowError::InvalidArgumentError(format!(
                    "{} takes integers",
                    op.symbol()
                )))
            }
        }));
    }
    if single {
        return Ok(Arc::new(
            out.into_iter()
                .map(|v| v.map(|v| v as f32))
                .collect::<Float32Array>(),
        ));
    }
    Ok(Arc::new(Float64Array::from(out)))
}

/// Decimal `+`, `-`, `*`, `/` and `%`: exact (a quotient to the result's
/// scale, half up, as Spark's `Decimal./` then `changePrecision`), then at
/// the result's scale (half up where Spark cuts digits) and checked against
/// its precision; a zero divisor fails.
fn decimal(
    op: Arith,
    a: &ArrayRef,
    b: &ArrayRef,
    result: &DataType,
) -> Result<ArrayRef, ArrowError> {
    let DataType::Decimal128(p, s) = result else {
        return Err(ArrowError::InvalidArgumentError(
            "a decimal result expected".into(),
        ));
    };
    let (x, y) = (
        a.as_primitive::<Decimal128Type>(),
        b.as_primitive::<Decimal128Type>(),
    );
    let (sx, sy) = (x.scale(), y.scale());
    let limit = 10i128.pow(*p as u32);
    let mut out = Vec::with_capacity(x.len());
    for (u, v) in x.iter().zip(y.iter()) {
        let (Some(u), Some(v)) = (u, v) else {
            out.push(None);
            continue;
        };
        let exact: Option<(i128, i8)> = match op {
            Arith::Add | Arith::Sub => {
                let scale = sx.max(sy);
                let u2 = round_half_up(u, sx, scale);
                let v2 = round_half_up(v, sy, scale);
                match (u2, v2) {
                    (Some(u2), Some(v2)) => if op == Arith::Add {
                        u2.checked_add(v2)
                    } else {
                        u2.checked_sub(v2)
                    }
                    .map(|r| (r, scale)),
                    _ => None,
                }
            }
            Arith::Mul => u.checked_mul(v).map(|r| (r, sx + sy)),
            Arith::Div | Arith::Rem if v == 0 => return Err(divide_by_zero(op)),
            Arith::Div => quotient(u, sx, v, sy, *s).map(|q| (q, *s)),
            Arith::Rem => {
                // Java's `BigDecimal.remainder`: the dividend's sign, exact
                // at the larger scale.
                let scale = sx.max(sy);
                match (round_half_up(u, sx, scale), round_half_up(v, sy, scale)) {
                    (Some(u2), Some(v2)) => Some((u2 % v2, scale)),
                    _ => None,
                }
            }
            _ => None,
        };
        let value = exact
            .and_then(|(r, scale)| round_half_up(r, scale, *s))
            .filter(|r| r.abs() < limit);
        match value {
            Some(r) => out.push(Some(r)),
            None => {
                return Err(overflow(&format!(
                    "{} {} {}",
                    super::cast::decimal_text(u, sx),
                    op.symbol(),
                    super::cast::decimal_text(v, sy)
                )))
            }
        }
    }
    Ok(Arc::new(
        Decimal128Array::from(out).with_precision_and_scale(*p, *s)?,
    ))
}

/// `u / v` (at scales `su` and `sv`) at `scale`, rounded half up; `None`
/// where it does not fit 256 bits on the way.
fn quotient(u: i128, su: i8, v: i128, sv: i8, scale: i8) -> Option<i128> {
    use arrow::datatypes::i256;
    // u / 10^su / (v / 10^sv) * 10^scale = u * 10^(scale + sv - su) / v.
    let shift = i32::from(scale) + i32::from(sv) - i32::from(su);
    let ten = i256::from_i128(10);
    let (mut num, mut den) = (i256::from_i128(u), i256::from_i128(v));
    if shift >= 0 {
        num = num.checked_mul(ten.checked_pow(shift as u32)?)?;
    } else {
        den = den.checked_mul(ten.checked_pow((-shift) as u32)?)?;
    }
    let q = num.checked_div(den)?;
    let r = num.checked_rem(den)?;
    // Half up: away from zero where the remainder is half the divisor or more.
    let twice = r.checked_mul(i256::from_i128(2))?.wrapping_abs();
    let q = if twice >= den.wrapping_abs() {
        let away = if (num < i256::ZERO) != (den < i256::ZERO) {
            i256::MINUS_ONE
        } else {
            i256::ONE
        };
        q.checked_add(away)?
    } else {
        q
    };
    q.to_i128()
}

/// `-x`, failing on the least integer.
pub(crate) fn negate(a: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let t = a.data_type().clone();
    if is_integral(&t) {
        let (lo, _) = range(&t);
        let out = as_longs(a)?
            .into_iter()
            .map(|v| match v {
                Some(v) if v == lo => Err(overflow(&format!("-({v})"))),
                other => Ok(other.map(|v| -v)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        return typed_longs(out, &t);
    }
    match t {
        DataType::Float64 => Ok(Arc::new(
            a.as_primitive::<Float64Type>()
                .unary::<_, Float64Type>(|v| -v),
        )),
        DataType::Float32 => Ok(Arc::new(
            a.as_primitive::<Float32Type>()
                .unary::<_, Float32Type>(|v| -v),
        )),
        DataType::Decimal128(..) => Ok(Arc::new(
            a.as_primitive::<Decimal128Type>()
                .unary::<_, Decimal128Type>(|v| -v)
                .with_data_type(t.clone()),
        )),
        other => Err(ArrowError::InvalidArgumentError(format!(
            "no negation of {other}"
        ))),
    }
}

/// `~x` on an integer.
pub(crate) fn bit_not(a: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let t = a.data_type().clone();
    let out = as_longs(a)?.into_iter().map(|v| v.map(|v| !v)).collect();
    typed_longs(out, &t)
}

/// The result type of `a op b`, and the type both sides are cast to first;
/// `None` where Spark refuses it or sluice does not compute it exactly.
pub(crate) fn types(op: Arith, a: &DataType, b: &DataType) -> Option<(DataType, DataType)> {
    use DataType::*;
    let a = if *a == Null { b } else { a };
    let b = if *b == Null { a } else { b };
    match op {
        Arith::Concat => (*a == Utf8 && *b == Utf8).then_some((Utf8, Utf8)),
        Arith::BitAnd | Arith::BitOr | Arith::BitXor => {
            let t = super::types::wider_numeric(a, b)?;
            is_integral(&t).then(|| (t.clone(), t))
        }
        Arith::IntDiv => (is_integral(a) && is_integral(b)).then_some((Int64, Int64)),
        Arith::Div => {
            if !(super::types::is_numeric(a) && super::types::is_numeric(b)) {
                return None;
            }
            let decimal = matches!(a, Decimal128(..)) || matches!(b, Decimal128(..));
            if !decimal || is_fractional(a) || is_fractional(b) {
                return Some((Float64, Float64));
            }
            // Spark's `Divide` of decimals: the whole digits of the dividend
            // and the scale of the divisor, a scale of at least 6.
            let (p1, s1) = super::types::integral_as_decimal(a)?;
            let (p2, s2) = super::types::integral_as_decimal(b)?;
            let (p1, s1, p2, s2) = (p1 as i32, s1 as i32, p2 as i32, s2 as i32);
            let scale = (s1 + p2 + 1).max(6);
            let (p, s) = adjust(p1 - s1 + s2 + scale, scale);
            Some((Decimal128(p as u8, s as i8), Null))
        }
        Arith::Add | Arith::Sub | Arith::Mul | Arith::Rem => {
            if !(super::types::is_numeric(a) && super::types::is_numeric(b)) {
                return None;
            }
            let t = super::types::wider_numeric(a, b)?;
            let Decimal128(..) = t else {
                return Some((t.clone(), t));
            };
            if is_fractional(a) || is_fractional(b) {
                return None;
            }
            let (p1, s1) = super::types::integral_as_decimal(a)?;
            let (p2, s2) = super::types::integral_as_decimal(b)?;
            let (p1, s1, p2, s2) = (p1 as i32, s1 as i32, p2 as i32, s2 as i32);
            let (p, s) = match op {
                Arith::Mul => (p1 + p2 + 1, s1 + s2),
                Arith::Rem => {
                    let s = s1.max(s2);
                    ((p1 - s1).min(p2 - s2) + s, s)
                }
                _ => {
                    let s = s1.max(s2);
                    (s + (p1 - s1).max(p2 - s2) + 1, s)
                }
            };
            let (p, s) = adjust(p, s);
            // Operands stay at their own precision and scale.
            Some((Decimal128(p as u8, s as i8), Null))
        }
    }
}

/// Spark's `DecimalType.adjustPrecisionScale` (precision loss allowed): at
/// most 38 digits, the whole digits kept, at least 6 of scale where there
/// were so many.
fn adjust(p: i32, s: i32) -> (i32, i32) {
    if p <= 38 {
        return (p, s);
    }
    let whole = p - s;
    let min_scale = s.min(6);
    (38, (38 - whole).max(min_scale))
}
