//! Keeping rows: the bound filter evaluated on a batch with arrow's kernels,
//! whose null handling is SQL's (a comparison with null is null, `AND` and
//! `OR` are Kleene's); only rows where the result is true are kept.

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Datum, Scalar};
use arrow::compute::kernels::cmp;
use arrow::compute::{and_kleene, cast, filter_record_batch, is_not_null, is_null, not, or_kleene};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::bind::Pred;
use super::parse::Op;
use super::types::normalize_floats;

/// The column `name` of `batch` as the comparison wants it: cast to `to`
/// when given and different.
pub(crate) fn column_as(
    column: &ArrayRef,
    to: Option<&arrow::datatypes::DataType>,
) -> Result<ArrayRef, ArrowError> {
    match to {
        Some(t) if column.data_type() != t => cast(column, t),
        _ => Ok(column.clone()),
    }
}

/// The literal as a scalar of `column`'s type.
pub(crate) fn literal_for(
    value: &ArrayRef,
    column: &dyn Array,
) -> Result<Scalar<ArrayRef>, ArrowError> {
    let value = if value.data_type() == column.data_type() {
        value.clone()
    } else {
        cast(value, column.data_type())?
    };
    Ok(Scalar::new(value))
}

/// `left op right` with arrow's comparison kernels, floats first made
/// ready to compare as Spark does (`-0.0 = 0.0`, NaN equal to itself and
/// above every number).
pub(crate) fn compare(
    left: &dyn Datum,
    op: Op,
    right: &dyn Datum,
) -> Result<BooleanArray, ArrowError> {
    let (l, l_scalar) = left.get();
    let (r, r_scalar) = right.get();
    if !matches!(
        l.data_type(),
        arrow::datatypes::DataType::Float32 | arrow::datatypes::DataType::Float64
    ) {
        return compare_raw(left, op, right);
    }
    let norm = |a: &dyn Array| normalize_floats(&arrow::array::make_array(a.to_data()));
    let (l, r) = (norm(l), norm(r));
    let side = |a: ArrayRef, scalar: bool| -> Box<dyn Datum> {
        if scalar {
            Box::new(Scalar::new(a))
        } else {
            Box::new(a)
        }
    };
    compare_raw(side(l, l_scalar).as_ref(), op, side(r, r_scalar).as_ref())
}

fn compare_raw(left: &dyn Datum, op: Op, right: &dyn Datum) -> Result<BooleanArray, ArrowError> {
    match op {
        Op::Eq => cmp::eq(left, right),
        Op::Ne => cmp::neq(left, right),
        Op::Lt => cmp::lt(left, right),
        Op::Le => cmp::lt_eq(left, right),
        Op::Gt => cmp::gt(left, right),
        Op::Ge => cmp::gt_eq(left, right),
    }
}

/// The filter's value for every row of `batch`: true, false or null
/// (unknown). The operands of `AND` and `OR` after the first are computed
/// only on the rows still open, as Spark leaves them unevaluated.
pub(crate) fn eval(pred: &Pred, batch: &RecordBatch) -> Result<BooleanArray, ArrowError> {
    let rows = batch.num_rows();
    let column = |name: &str| {
        batch.column_by_name(name).cloned().ok_or_else(|| {
            ArrowError::SchemaError(format!("the filter's column {name} is not read"))
        })
    };
    match pred {
        Pred::And(list) => connective(list, batch, false),
        Pred::Or(list) => connective(list, batch, true),
        Pred::Not(a) => not(&eval(a, batch)?),
        Pred::Const(value) => Ok(BooleanArray::from(vec![*value; rows])),
        Pred::Opaque => Err(ArrowError::InvalidArgumentError(
            "a filter bound for pruning only is evaluated on rows".to_string(),
        )),
        Pred::Cmp {
            column: name,
            op,
            cast: to,
            value,
        } => {
            let col = column_as(&column(name)?, to.as_ref())?;
            let lit = literal_for(value, col.as_ref())?;
            compare(&col, *op, &lit)
        }
        Pred::IsNull {
            column: name,
            negated,
        } => {
            let col = column(name)?;
            if *negated {
                is_not_null(col.as_ref())
            } else {
                is_null(col.as_ref())
            }
        }
        Pred::Like {
            column: name,
            matcher,
            negated,
        } => {
            let col = cast(&column(name)?, &arrow::datatypes::DataType::Utf8)?;
            Ok(col
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(|s| matcher.matches(s) != *negated))
                .collect())
        }
        Pred::Rows(expr) => Ok(super::expr::eval(expr, batch)?.as_boolean().clone()),
    }
}

/// Whether a predicate is cheap and cannot fail: evaluated on every row
/// without regard to the operands before it.
fn plain(pred: &Pred) -> bool {
    !matches!(
        pred,
        Pred::Rows(_) | Pred::And(_) | Pred::Or(_) | Pred::Not(_)
    )
}

fn connective(list: &[Pred], batch: &RecordBatch, or: bool) -> Result<BooleanArray, ArrowError> {
    let mut acc: Option<BooleanArray> = None;
    for p in list {
        let next = match &acc {
            Some(before) if !plain(p) => {
                let open: BooleanArray = before.iter().map(|v| Some(v != Some(or))).collect();
                if open.true_count() == 0 {
                    break;
                }
                if open.true_count() == batch.num_rows() {
                    eval(p, batch)?
                } else {
                    let part = filter_record_batch(batch, &open)?;
                    super::rows::spread(&eval(p, &part)?, &open)?
                        .as_boolean()
                        .clone()
                }
            }
            _ => eval(p, batch)?,
        };
        acc = Some(match acc {
            None => next,
            Some(before) if or => or_kleene(&before, &next)?,
            Some(before) => and_kleene(&before, &next)?,
        });
    }
    Ok(acc.unwrap_or_else(|| BooleanArray::from(vec![!or; batch.num_rows()])))
}

/// The rows of `batch` the filter keeps (those where it is true).
pub(crate) fn keep(pred: &Pred, batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let mask = eval(pred, batch)?;
    if mask.null_count() == 0 && mask.true_count() == batch.num_rows() {
        return Ok(batch.clone());
    }
    filter_record_batch(batch, &mask)
}
