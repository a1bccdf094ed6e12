//! Keeping rows: the bound filter evaluated on a batch with arrow's kernels,
//! whose null handling is SQL's (a comparison with null is null, `AND` and
//! `OR` are Kleene's); only rows where the result is true are kept.

use arrow::array::{Array, ArrayRef, BooleanArray, Datum, Scalar};
use arrow::compute::kernels::cmp;
use arrow::compute::{and_kleene, cast, filter_record_batch, is_not_null, is_null, not, or_kleene};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::bind::Pred;
use super::parse::Op;

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

/// `left op right` with arrow's comparison kernels.
pub(crate) fn compare(
    left: &dyn Datum,
    op: Op,
    right: &dyn Datum,
) -> Result<BooleanArray, ArrowError> {
    match op {
        Op::Eq => cmp::eq(left, right),
        Op::Ne => cmp::neq(left, right),
        Op::Lt => cmp::lt(left, right),
        Op::Le => cmp::lt_eq(left, right),
        Op::Gt => cmp::gt(left, right),
        Op::Ge => cmp::gt_eq(left, right),
    }
}

/// The filter's value for every row of `batch`: true, false or null (unknown).
pub(crate) fn eval(pred: &Pred, batch: &RecordBatch) -> Result<BooleanArray, ArrowError> {
    let rows = batch.num_rows();
    let column = |name: &str| {
        batch.column_by_name(name).cloned().ok_or_else(|| {
            ArrowError::SchemaError(format!("the filter's column {name} is not read"))
        })
    };
    match pred {
        Pred::And(a, b) => and_kleene(&eval(a, batch)?, &eval(b, batch)?),
        Pred::Or(a, b) => or_kleene(&eval(a, batch)?, &eval(b, batch)?),
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
            pattern,
            negated,
        } => {
            let col = column(name)?;
            let pattern: ArrayRef =
                std::sync::Arc::new(arrow::array::StringArray::from(vec![pattern.as_str()]));
            let pattern = literal_for(&pattern, col.as_ref())?;
            if *negated {
                arrow::compute::kernels::comparison::nlike(&col, &pattern)
            } else {
                arrow::compute::kernels::comparison::like(&col, &pattern)
            }
        }
    }
}

/// The rows of `batch` the filter keeps (those where it is true).
pub(crate) fn keep(pred: &Pred, batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let mask = eval(pred, batch)?;
    if mask.null_count() == 0 && mask.true_count() == batch.num_rows() {
        return Ok(batch.clone());
    }
    filter_record_batch(batch, &mask)
}
