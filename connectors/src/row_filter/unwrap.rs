//! The comparisons Spark's optimizer decides without computing their
//! operand (`UnwrapCastInBinaryComparison`, then
//! `ReplaceNullWithFalseInPredicate`): an integer expression widened to be
//! compared with a literal no integer of its type equals (`n = 1.5`, `i =
//! 1e20`) is `false` where a null would filter the row out anyway, and `n
//! <=> 1.5` is `false` everywhere. Spark never evaluates the operand then,
//! so a value that would fail it (a string that is no number) fails
//! nothing; sluice answers the same.

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{DataType, Decimal128Type, Float64Type};
use std::sync::Arc;

use super::cast::CastMode;
use super::expr::{Expr, Kind};
use super::parse::{CmpOp, Op};
use super::types::is_integral;

/// `e`, a condition that keeps the rows where it is true, with the
/// comparisons above decided: through `AND` and `OR`, where a null and a
/// `false` filter alike.
pub(crate) fn in_predicate(e: Expr) -> Expr {
    match e.kind {
        Kind::And(list) => Expr::new(
            Kind::And(list.into_iter().map(in_predicate).collect()),
            e.ty,
        ),
        Kind::Or(list) => Expr::new(Kind::Or(list.into_iter().map(in_predicate).collect()), e.ty),
        Kind::Cmp(op @ (CmpOp::Plain(Op::Eq) | CmpOp::NullSafeEq), a, b) => {
            if never_equal(&a, &b) || never_equal(&b, &a) {
                Expr::new(
                    Kind::Lit(Arc::new(BooleanArray::from(vec![false]))),
                    DataType::Boolean,
                )
            } else {
                Expr::new(Kind::Cmp(op, a, b), e.ty)
            }
        }
        kind => Expr::new(kind, e.ty),
    }
}

/// `x` is an integer expression cast to a wider number, and `lit` a
/// literal no value of that integer type equals.
fn never_equal(x: &Expr, lit: &Expr) -> bool {
    let Kind::Cast(inner, CastMode::Implicit) = &x.kind else {
        return false;
    };
    let Some(value) = lit.literal() else {
        return false;
    };
    if !is_integral(&inner.ty) || value.is_null(0) {
        return false;
    }
    let (lo, hi) = match inner.ty {
        DataType::Int8 => (i8::MIN as i128, i8::MAX as i128),
        DataType::Int16 => (i16::MIN as i128, i16::MAX as i128),
        DataType::Int32 => (i32::MIN as i128, i32::MAX as i128),
        _ => (i64::MIN as i128, i64::MAX as i128),
    };
    match whole(value) {
        Some(Some(n)) => n < lo || n > hi,
        Some(None) => true,
        None => false,
    }
}

/// The literal as a whole number: `Some(Some(n))`, `Some(None)` when it has
/// a fraction (or is NaN or infinite), `None` for a type not looked at.
fn whole(value: &ArrayRef) -> Option<Option<i128>> {
    match value.data_type() {
        DataType::Decimal128(_, scale) => {
            let v = value.as_primitive::<Decimal128Type>().value(0);
            let div = 10i128.checked_pow(u32::try_from(*scale).ok()?)?;
            Some((v % div == 0).then_some(v / div))
        }
        DataType::Float64 => {
            let x = value.as_primitive::<Float64Type>().value(0);
            Some((x.is_finite() && x.fract() == 0.0 && x.abs() < 1e38).then_some(x as i128))
        }
        _ => None,
    }
}
