//! Expressions over rows, typed and evaluated as Spark 4 evaluates them in
//! ANSI mode: arithmetic that fails on overflow and on division by zero,
//! comparisons of floats with `-0.0 = 0.0` and NaN equal to itself and
//! greater than every number, `AND`, `OR`, `CASE` and `COALESCE` that leave
//! unevaluated what Spark leaves unevaluated (so `b <> 0 AND a / b > 1`
//! never divides by zero), and the functions of [`super::func`].

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, BooleanArray, UInt32Array};
use arrow::compute::kernels::cmp;
use arrow::compute::{and_kleene, filter_record_batch, is_not_null, is_null, not, or_kleene, take};
use arrow::datatypes::{DataType, Schema};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::cast::{cast_to, literal_array, CastMode};
use super::func::Func;
use super::like::Matcher;
use super::parse::{Arith, CmpOp, Op};
use super::types::{engine_array, normalize_floats};

/// A typed expression.
#[derive(Debug, Clone)]
pub(crate) struct Expr {
    pub kind: Kind,
    /// The type of its value (arrow's form of a Spark type, see
    /// [`types::engine_type`]).
    pub ty: DataType,
}

/// What an expression computes.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// A column of the batch, by name.
    Column(String),
    /// One value (an array of length 1).
    Lit(ArrayRef),
    /// Its operand as [`Expr::ty`].
    Cast(Box<Expr>, CastMode),
    Neg(Box<Expr>),
    BitNot(Box<Expr>),
    Arith(Arith, Box<Expr>, Box<Expr>),
    /// Both sides of one type.
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    IsNull(Box<Expr>, bool),
    /// `x IN (list)`, every member of `x`'s type.
    In(Box<Expr>, Vec<Expr>, bool),
    /// `x IN (literals)`: the literals sorted once, when bound.
    InSet(Box<Expr>, Arc<Members>, bool),
    Like(Box<Expr>, Arc<Matcher>, bool),
    /// `CASE WHEN c THEN v … ELSE e END`.
    Case(Vec<(Expr, Expr)>, Option<Box<Expr>>),
    Coalesce(Vec<Expr>),
    Call(Func, Vec<Expr>),
}

impl Expr {
    pub(crate) fn new(kind: Kind, ty: DataType) -> Expr {
        Expr { kind, ty }
    }

    /// `self` as `to`, with Spark's implicit cast (no cast where it is one).
    pub(crate) fn implicit(self, to: &DataType) -> Expr {
        if &self.ty == to {
            return self;
        }
        if let Kind::Lit(value) = &self.kind {
            if let Ok(array) = cast_to(value, to, CastMode::Implicit) {
                return Expr::new(Kind::Lit(array), to.clone());
            }
        }
        Expr::new(Kind::Cast(Box::new(self), CastMode::Implicit), to.clone())
    }

    /// The columns it reads.
    pub(crate) fn columns(&self, out: &mut Vec<String>) {
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            match &e.kind {
                Kind::Column(name) => {
                    if !out.contains(name) {
                        out.push(name.clone());
                    }
                }
                Kind::Lit(_) => {}
                Kind::Cast(a, _) | Kind::Neg(a) | Kind::BitNot(a) | Kind::Not(a) => stack.push(a),
                Kind::IsNull(a, _) | Kind::Like(a, ..) | Kind::InSet(a, ..) => stack.push(a),
                Kind::Arith(_, a, b) | Kind::Cmp(_, a, b) => stack.extend([a.as_ref(), b.as_ref()]),
                Kind::And(list) | Kind::Or(list) | Kind::Coalesce(list) | Kind::Call(_, list) => {
                    stack.extend(list.iter())
                }
                Kind::In(a, list, _) => {
                    stack.push(a);
                    stack.extend(list.iter());
                }
                Kind::Case(arms, otherwise) => {
                    for (w, t) in arms {
                        stack.extend([w, t]);
                    }
                    stack.extend(otherwise.as_deref());
                }
            }
        }
    }

    /// Whether it is one value whatever the row.
    pub(crate) fn literal(&self) -> Option<&ArrayRef> {
        match &self.kind {
            Kind::Lit(v) => Some(v),
            _ => None,
        }
    }
}

/// A value repeated for every row.
pub(crate) fn repeat(value: &ArrayRef, rows: usize) -> Result<ArrayRef, ArrowError> {
    if value.len() == rows {
        return Ok(value.clone());
    }
    let indices = UInt32Array::from(vec![0u32; rows]);
    take(value.as_ref(), &indices, None)
}

/// The schema's column `name` of the batch, as the engine computes with it
/// (of type `ty`: a `timestamp` labelled with the session's zone).
fn column(batch: &RecordBatch, name: &str, ty: &DataType) -> Result<ArrayRef, ArrowError> {
    let col = batch.column_by_name(name).ok_or_else(|| {
        ArrowError::SchemaError(format!("the filter's column {name} is not read"))
    })?;
    let col = engine_array(col)?;
    match (col.data_type(), ty) {
        (DataType::Timestamp(_, Some(have)), DataType::Timestamp(_, Some(want)))
            if have != want =>
        {
            Ok(Arc::new(
                col.as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                    .clone()
                    .with_timezone(want.clone()),
            ))
        }
        _ => Ok(col),
    }
}

/// The value of `expr` for every row of `batch`.
pub(crate) fn eval(expr: &Expr, batch: &RecordBatch) -> Result<ArrayRef, ArrowError> {
    let rows = batch.num_rows();
    Ok(match &expr.kind {
        Kind::Column(name) => column(batch, name, &expr.ty)?,
        Kind::Lit(v) => repeat(v, rows)?,
        Kind::Cast(a, mode) => cast_to(&eval(a, batch)?, &expr.ty, *mode)?,
        Kind::Neg(a) => super::arith::negate(&eval(a, batch)?)?,
        Kind::BitNot(a) => super::arith::bit_not(&eval(a, batch)?)?,
        Kind::Arith(op, a, b) => {
            let (x, y) = null_intolerant(a, b, batch)?;
            super::arith::apply(*op, &x, &y, &expr.ty)?
        }
        Kind::Cmp(op @ CmpOp::NullSafeEq, a, b) => {
            Arc::new(compare(*op, &eval(a, batch)?, &eval(b, batch)?)?)
        }
        Kind::Cmp(op, a, b) => {
            let (x, y) = null_intolerant(a, b, batch)?;
            Arc::new(compare(*op, &x, &y)?)
        }
        Kind::And(list) => Arc::new(connective(list, batch, false)?),
        Kind::Or(list) => Arc::new(connective(list, batch, true)?),
        Kind::Not(a) => Arc::new(not(eval(a, batch)?.as_boolean())?),
        Kind::IsNull(a, negated) => {
            let v = eval(a, batch)?;
            Arc::new(if *negated {
                is_not_null(&v)?
            } else {
                is_null(&v)?
            })
        }
        Kind::In(a, list, negated) => {
            let v = eval(a, batch)?;
            let found = in_list(&v, list, batch)?;
            Arc::new(if *negated { not(&found)? } else { found })
        }
        Kind::InSet(a, members, negated) => {
            let found = members.contains(&eval(a, batch)?)?;
            Arc::new(if *negated { not(&found)? } else { found })
        }
        Kind::Like(a, matcher, negated) => {
            let v = eval(a, batch)?;
            let strings = v.as_string::<i32>();
            let out: BooleanArray = strings
                .iter()
                .map(|s| s.map(|s| matcher.matches(s) != *negated))
                .collect();
            Arc::new(out)
        }
        Kind::Case(arms, otherwise) => case(arms, otherwise.as_deref(), &expr.ty, batch)?,
        Kind::Coalesce(list) => coalesce(list, &expr.ty, batch)?,
        Kind::Call(f, args) => {
            let values = args
                .iter()
                .map(|a| eval(a, batch))
                .collect::<Result<Vec<_>, _>>()?;
            super::func::call(*f, &values, batch.num_rows(), &expr.ty)?
        }
    })
}

/// Both operands of an operator whose value is null where either is:
/// the right one computed only on the rows where the left one is not null,
/// as Spark leaves it unevaluated there (a string that is no number
/// fails no cast on a row whose other side is null).
fn null_intolerant(
    a: &Expr,
    b: &Expr,
    batch: &RecordBatch,
) -> Result<(ArrayRef, ArrayRef), ArrowError> {
    let x = eval(a, batch)?;
    let y = if x.null_count() > 0 && !matches!(b.kind, Kind::Column(_) | Kind::Lit(_)) {
        eval_where(b, batch, &is_not_null(&x)?)?
    } else {
        eval(b, batch)?
    };
    Ok((x, y))
}

/// `a op b`, both of one type, floats compared as Spark compares them.
pub(crate) fn compare(op: CmpOp, a: &ArrayRef, b: &ArrayRef) -> Result<BooleanArray, ArrowError> {
    let (a, b) = (normalize_floats(a), normalize_floats(b));
    match op {
        CmpOp::NullSafeEq => cmp::not_distinct(&a, &b),
        CmpOp::Plain(Op::Eq) => cmp::eq(&a, &b),
        CmpOp::Plain(Op::Ne) => cmp::neq(&a, &b),
        CmpOp::Plain(Op::Lt) => cmp::lt(&a, &b),
        CmpOp::Plain(Op::Le) => cmp::lt_eq(&a, &b),
        CmpOp::Plain(Op::Gt) => cmp::gt(&a, &b),
        CmpOp::Plain(Op::Ge) => cmp::gt_eq(&a, &b),
    }
}

/// `list` evaluated only on the rows of `batch` where `rows` is true; null
/// elsewhere.
pub(crate) fn eval_where(
    expr: &Expr,
    batch: &RecordBatch,
    rows: &BooleanArray,
) -> Result<ArrayRef, ArrowError> {
    let selected = rows.true_count();
    if selected == batch.num_rows() && rows.null_count() == 0 {
        return eval(expr, batch);
    }
    if selected == 0 {
        return Ok(new_null_array(&expr.ty, batch.num_rows()));
    }
    let part = filter_record_batch(batch, rows)?;
    super::rows::spread(eval(expr, &part)?.as_ref(), rows)
}

/// `AND` (`or` false) or `OR` of `list`: each operand evaluated only where
/// the operands before it left the answer open, as Spark evaluates them.
fn connective(list: &[Expr], batch: &RecordBatch, or: bool) -> Result<BooleanArray, ArrowError> {
    let mut acc: Option<BooleanArray> = None;
    for e in list {
        let next = match &acc {
            None => eval(e, batch)?,
            Some(acc) => {
                // Open: not yet decided (true for AND, false for OR, or null).
                let open: BooleanArray = acc.iter().map(|v| Some(v != Some(or))).collect();
                if open.true_count() == 0 {
                    break;
                }
                eval_where(e, batch, &open)?
            }
        };
        let next = next.as_boolean().clone();
        acc = Some(match acc {
            None => next,
            Some(before) if or => or_kleene(&before, &next)?,
            Some(before) => and_kleene(&before, &next)?,
        });
    }
    Ok(acc.unwrap_or_else(|| BooleanArray::from(vec![!or; batch.num_rows()])))
}

fn in_list(v: &ArrayRef, list: &[Expr], batch: &RecordBatch) -> Result<BooleanArray, ArrowError> {
    let rows = batch.num_rows();
    let mut acc: Option<BooleanArray> = None;
    for e in list {
        let other = eval(e, batch)?;
        let eq = compare(CmpOp::Plain(Op::Eq), v, &other)?;
        acc = Some(match acc {
            None => eq,
            Some(a) => or_kleene(&a, &eq)?,
        });
    }
    Ok(acc.unwrap_or_else(|| BooleanArray::from(vec![false; rows])))
}

/// The literal members of an `IN` list, sorted once: each row is found by
/// binary search, so a list of any length costs a logarithm per row.
#[derive(Debug)]
pub(crate) struct Members {
    /// The members that are not null, sorted (floats normalized).
    sorted: ArrayRef,
    /// Whether the list holds a null.
    has_null: bool,
}

impl Members {
    /// Sorts `values` (one-value arrays of one type).
    pub(crate) fn new(values: &[ArrayRef]) -> Result<Members, ArrowError> {
        let refs: Vec<&dyn Array> = values.iter().map(|a| a.as_ref()).collect();
        let all = normalize_floats(&arrow::compute::concat(&refs)?);
        let has_null = all.null_count() > 0;
        let sorted = arrow::compute::sort(&all, None)?;
        // Nulls sort first by default.
        let members = sorted.len() - sorted.null_count();
        Ok(Members {
            sorted: sorted.slice(sorted.null_count(), members),
            has_null,
        })
    }

    /// `v IN (members)`: true where found, null where not found and `v` or
    /// a member is null, false otherwise.
    pub(crate) fn contains(&self, v: &ArrayRef) -> Result<BooleanArray, ArrowError> {
        let v = normalize_floats(v);
        let n = self.sorted.len();
        let cmp =
            arrow::array::make_comparator(v.as_ref(), self.sorted.as_ref(), Default::default())?;
        Ok((0..v.len())
            .map(|i| {
                if v.is_null(i) {
                    return None;
                }
                let (mut lo, mut hi) = (0usize, n);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    match cmp(i, mid) {
                        std::cmp::Ordering::Equal => return Some(true),
                        std::cmp::Ordering::Less => hi = mid,
                        std::cmp::Ordering::Greater => lo = mid + 1,
                    }
                }
                if self.has_null {
                    None
                } else {
                    Some(false)
                }
            })
            .collect())
    }
}

fn case(
    arms: &[(Expr, Expr)],
    otherwise: Option<&Expr>,
    ty: &DataType,
    batch: &RecordBatch,
) -> Result<ArrayRef, ArrowError> {
    let rows = batch.num_rows();
    let mut out = new_null_array(ty, rows);
    // Rows no arm has taken yet.
    let mut open = BooleanArray::from(vec![true; rows]);
    for (when, then) in arms {
        if open.true_count() == 0 {
            break;
        }
        let cond = eval_where(when, batch, &open)?;
        let cond = cond.as_boolean();
        let taken: BooleanArray = (0..rows)
            .map(|i| Some(open.value(i) && cond.is_valid(i) && cond.value(i)))
            .collect();
        if taken.true_count() > 0 {
            let values = eval_where(then, batch, &taken)?;
            out = arrow::compute::kernels::zip::zip(&taken, &values, &out)?;
        }
        open = (0..rows)
            .map(|i| Some(open.value(i) && !taken.value(i)))
            .collect();
    }
    if let Some(e) = otherwise {
        if open.true_count() > 0 {
            let values = eval_where(e, batch, &open)?;
            out = arrow::compute::kernels::zip::zip(&open, &values, &out)?;
        }
    }
    Ok(out)
}

fn coalesce(list: &[Expr], ty: &DataType, batch: &RecordBatch) -> Result<ArrayRef, ArrowError> {
    let rows = batch.num_rows();
    let mut out = new_null_array(ty, rows);
    for e in list {
        let open = is_null(&out)?;
        if open.true_count() == 0 {
            break;
        }
        let values = eval_where(e, batch, &open)?;
        out = arrow::compute::kernels::zip::zip(&open, &values, &out)?;
    }
    Ok(out)
}

/// A one-row batch of nothing: to evaluate expressions of literals once.
pub(crate) fn one_row() -> RecordBatch {
    let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(1));
    RecordBatch::try_new_with_options(Arc::new(Schema::empty()), Vec::new(), &options)
        .unwrap_or_else(|_| RecordBatch::new_empty(Arc::new(Schema::empty())))
}

/// An expression without columns evaluated once, to a literal; `None` where
/// it reads a column, or fails (the failure then comes with the rows, as in
/// Spark, where a filter that fails fails only when it runs).
pub(crate) fn fold(expr: &Expr) -> Option<ArrayRef> {
    let mut cols = Vec::new();
    expr.columns(&mut cols);
    if !cols.is_empty() || matches!(expr.kind, Kind::Lit(_)) {
        return None;
    }
    let value = eval(expr, &one_row()).ok()?;
    (value.len() == 1).then_some(value)
}

/// A literal of `ty` built from a parsed literal (see [`literal_array`]),
/// a timestamp read in `tz`.
pub(crate) fn lit(value: &super::parse::Literal, tz: &super::tz::SessionTz) -> Option<Expr> {
    let array = literal_array(value, tz)?;
    let ty = array.data_type().clone();
    Some(Expr::new(Kind::Lit(array), ty))
}
