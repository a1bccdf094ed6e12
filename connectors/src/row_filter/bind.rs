//! Binding: the parsed tree checked against the dataset's schema, each
//! literal typed as Spark types a comparison of it with its column.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Schema};

use super::expr::Expr;
use super::like::{self, Matcher};
use super::parse::{
    parse_date, parse_timestamp, parse_timestamp_ntz, CmpOp, Col, LikeKind, Lit, Literal, Node, Op,
};
use super::resolve::{literal_value, Resolver};
use super::tz::SessionTz;
use super::{Pos, RowFilterError};

/// A bound filter: columns resolved, literals typed.
#[derive(Debug, Clone)]
pub(crate) enum Pred {
    And(Vec<Pred>),
    Or(Vec<Pred>),
    Not(Box<Pred>),
    /// Always this (`None`: unknown, as a comparison with NULL).
    Const(Option<bool>),
    /// What cannot be decided here (a data column when only partition
    /// values are known): anything, for pruning; never evaluated on rows.
    Opaque,
    /// `column op value`: the column cast to `cast` when given (numbers
    /// compared after widening), else compared as its own type; `value` is
    /// one literal, cast to the column's type at evaluation where needed.
    Cmp {
        column: String,
        op: Op,
        cast: Option<DataType>,
        value: ArrayRef,
    },
    IsNull {
        column: String,
        negated: bool,
    },
    /// `column [NOT] LIKE pattern` (or `ILIKE`, `RLIKE`).
    Like {
        column: String,
        matcher: Arc<Matcher>,
        negated: bool,
    },
    /// Any other condition: computed on the rows, anything for pruning.
    Rows(Arc<Expr>),
}

impl Pred {
    /// The columns the predicate reads.
    pub(crate) fn columns(&self, out: &mut Vec<String>) {
        let mut stack = vec![self];
        while let Some(p) = stack.pop() {
            match p {
                Pred::And(list) | Pred::Or(list) => stack.extend(list.iter().rev()),
                Pred::Not(a) => stack.push(a),
                Pred::Const(_) | Pred::Opaque => {}
                Pred::Cmp { column, .. }
                | Pred::IsNull { column, .. }
                | Pred::Like { column, .. } => {
                    if !out.contains(column) {
                        out.push(column.clone());
                    }
                }
                Pred::Rows(e) => e.columns(out),
            }
        }
    }

    /// The top-level conjuncts (`a AND b AND c`).
    pub(crate) fn conjuncts(&self) -> Vec<&Pred> {
        match self {
            Pred::And(list) => list.iter().flat_map(|p| p.conjuncts()).collect(),
            other => vec![other],
        }
    }
}

pub(crate) fn bind(
    node: &Node,
    schema: &Schema,
    text: &str,
    tz: SessionTz,
) -> Result<Pred, RowFilterError> {
    // `NULL` alone is no condition (Spark: FILTER_NOT_BOOLEAN); inside one
    // (`a AND NULL`) it is an unknown boolean.
    if let Node::Lit(Lit {
        value: Literal::Null,
        at,
    }) = node
    {
        return Err(RowFilterError::Type {
            text: text.to_string(),
            reason: "NULL alone is no condition (a filter is a boolean expression)".to_string(),
            at: *at,
        });
    }
    Binder {
        schema,
        text,
        tz,
        lenient: false,
        partial: false,
    }
    .bind(node)
}

/// Binds what `schema` (the partition columns) can decide; every condition
/// on another column, or one that does not fit, is [`Pred::Opaque`].
pub(crate) fn bind_lenient(node: &Node, schema: &Schema, tz: SessionTz) -> Pred {
    let binder = Binder {
        schema,
        text: "",
        tz,
        lenient: true,
        partial: false,
    };
    binder.bind(node).unwrap_or(Pred::Opaque)
}

/// Binds as [`bind_lenient`] does, except that a condition on a column of
/// `schema` that does not fit it fails the whole: `None`, as strict binding
/// would fail on any schema where that column has that type.
pub(crate) fn bind_partial(node: &Node, schema: &Schema, tz: SessionTz) -> Option<Pred> {
    let binder = Binder {
        schema,
        text: "",
        tz,
        lenient: true,
        partial: true,
    };
    binder.bind(node).ok()
}

struct Binder<'a> {
    schema: &'a Schema,
    text: &'a str,
    /// The session time zone.
    tz: SessionTz,
    lenient: bool,
    /// With `lenient`: only unknown columns are opaque.
    partial: bool,
}

/// How a literal compares with a column.
enum Plan {
    /// Cast the column to this type; the literal is of it.
    Cast(DataType, ArrayRef),
    /// The column as it is; the literal is cast to it.
    Own(ArrayRef),
    /// A comparison with NULL: unknown for every row.
    Unknown,
}

/// `IN` lists up to this long are an `OR` of comparisons (pruned by
/// statistics and bloom filters); longer ones are searched in a sorted copy.
const SHORT_IN: usize = 64;

impl Binder<'_> {
    fn resolver(&self) -> Resolver<'_> {
        Resolver {
            schema: self.schema,
            text: self.text,
            tz: self.tz,
        }
    }

    fn bind(&self, node: &Node) -> Result<Pred, RowFilterError> {
        self.bind_in(node, true)
    }

    /// Binds `node`; `keeps` when it is in a predicate's position (not
    /// under a `NOT`), where a null filters like `false`.
    fn bind_in(&self, node: &Node, keeps: bool) -> Result<Pred, RowFilterError> {
        Ok(match node {
            Node::And(list) => Pred::And(
                list.iter()
                    .map(|n| self.bind_in(n, keeps))
                    .collect::<Result<_, _>>()?,
            ),
            Node::Or(list) => Pred::Or(
                list.iter()
                    .map(|n| self.bind_in(n, keeps))
                    .collect::<Result<_, _>>()?,
            ),
            Node::Not(a) => Pred::Not(Box::new(self.bind_in(a, false)?)),
            leaf if self.lenient => match self.leaf(leaf, keeps) {
                Ok(pred) => pred,
                Err(RowFilterError::UnknownColumn { .. }) => Pred::Opaque,
                Err(e) if self.partial => return Err(e),
                Err(_) => Pred::Opaque,
            },
            leaf => self.leaf(leaf, keeps)?,
        })
    }

    /// A condition that is no `AND`, `OR` or `NOT`: a comparison of a column
    /// with a literal (pruned by statistics), or anything else on the rows.
    fn leaf(&self, node: &Node, keeps: bool) -> Result<Pred, RowFilterError> {
        if let Some(pred) = self.simple(node)? {
            return Ok(pred);
        }
        let expr = self.resolver().condition(node)?;
        let expr = if keeps {
            super::unwrap::in_predicate(expr)
        } else {
            expr
        };
        Ok(match expr.literal() {
            Some(v) => {
                use arrow::array::AsArray;
                Pred::Const(v.is_valid(0).then(|| v.as_boolean().value(0)))
            }
            None => Pred::Rows(Arc::new(expr)),
        })
    }

    /// The shapes statistics can decide, bound as such; `None` for others.
    fn simple(&self, node: &Node) -> Result<Option<Pred>, RowFilterError> {
        match node {
            Node::Lit(Lit {
                value: Literal::Bool(b),
                ..
            }) => Ok(Some(Pred::Const(Some(*b)))),
            Node::Lit(Lit {
                value: Literal::Null,
                ..
            }) => Ok(Some(Pred::Const(None))),
            Node::Cmp(a, op, b, _) => self.simple_cmp(a, *op, b),
            Node::In(a, list, negated, _) if list.len() <= SHORT_IN => {
                self.simple_in(a, list, *negated)
            }
            Node::Between(a, low, high, negated, _) => self.simple_between(a, low, high, *negated),
            Node::IsNull(a, negated, _) => self.simple_is_null(a, *negated),
            Node::Like {
                expr,
                pattern,
                escape,
                kind,
                negated,
                ..
            } => self.simple_like(expr, pattern, *escape, *kind, *negated),
            Node::Column(col) => self.boolean_column(col).map(Some),
            _ => Ok(None),
        }
    }

    /// `column op literal` (either way round), `column <=> literal`.
    fn simple_cmp(&self, a: &Node, op: CmpOp, b: &Node) -> Result<Option<Pred>, RowFilterError> {
        let (col, op, lit) = match (column_of(a), literal_of(b), column_of(b), literal_of(a)) {
            (Some(c), Some(l), _, _) => (c, op, l),
            (_, _, Some(c), Some(l)) => (
                c,
                match op {
                    CmpOp::Plain(o) => CmpOp::Plain(o.flipped()),
                    other => other,
                },
                l,
            ),
            _ => return Ok(None),
        };
        Ok(Some(match op {
            CmpOp::Plain(op) => match self.compare(&col, op, &lit)? {
                Some(p) => p,
                None => return Ok(None),
            },
            // `c <=> v`: `c IS NOT NULL AND c = v`; `c <=> NULL`: `c IS NULL`.
            CmpOp::NullSafeEq => {
                let field = self.resolver().field(&col)?.name().clone();
                if lit.value == Literal::Null {
                    Pred::IsNull {
                        column: field,
                        negated: false,
                    }
                } else {
                    let Some(eq) = self.compare(&col, Op::Eq, &lit)? else {
                        return Ok(None);
                    };
                    Pred::And(vec![
                        Pred::IsNull {
                            column: field,
                            negated: true,
                        },
                        eq,
                    ])
                }
            }
        }))
    }

    /// `column [NOT] IN (literals)` of one kind of literal: an `OR` of
    /// equalities.
    fn simple_in(
        &self,
        a: &Node,
        list: &[Node],
        negated: bool,
    ) -> Result<Option<Pred>, RowFilterError> {
        let Some(col) = column_of(a) else {
            return Ok(None);
        };
        // Spark compares every member as the list's common type
        // (`l IN (1, 1e18)` in doubles): a list of mixed kinds of
        // literals is typed whole by the general path.
        let kind = |n: &Node| match n {
            Node::Lit(l) => Some(std::mem::discriminant(&literal_value(&l.value))),
            _ => None,
        };
        let kinds: std::collections::HashSet<_> = list
            .iter()
            .filter(|n| {
                !matches!(
                    n,
                    Node::Lit(Lit {
                        value: Literal::Null,
                        ..
                    })
                )
            })
            .map(kind)
            .collect();
        if kinds.len() > 1 || kinds.contains(&None) {
            return Ok(None);
        }
        let mut any = Vec::with_capacity(list.len());
        for item in list {
            let Some(lit) = literal_of(item) else {
                return Ok(None);
            };
            match self.compare(&col, Op::Eq, &lit)? {
                Some(p) => any.push(p),
                None => return Ok(None),
            }
        }
        let any = Pred::Or(any);
        Ok(Some(if negated {
            Pred::Not(Box::new(any))
        } else {
            any
        }))
    }

    /// `column [NOT] BETWEEN literal AND literal`.
    fn simple_between(
        &self,
        a: &Node,
        low: &Node,
        high: &Node,
        negated: bool,
    ) -> Result<Option<Pred>, RowFilterError> {
        let (Some(col), Some(lo), Some(hi)) = (column_of(a), literal_of(low), literal_of(high))
        else {
            return Ok(None);
        };
        let (Some(ge), Some(le)) = (
            self.compare(&col, Op::Ge, &lo)?,
            self.compare(&col, Op::Le, &hi)?,
        ) else {
            return Ok(None);
        };
        let both = Pred::And(vec![ge, le]);
        Ok(Some(if negated {
            Pred::Not(Box::new(both))
        } else {
            both
        }))
    }

    /// `column IS [NOT] NULL`.
    fn simple_is_null(&self, a: &Node, negated: bool) -> Result<Option<Pred>, RowFilterError> {
        let Some(col) = column_of(a) else {
            return Ok(None);
        };
        Ok(Some(Pred::IsNull {
            column: self.resolver().field(&col)?.name().clone(),
            negated,
        }))
    }

    /// `column [NOT] LIKE 'pattern'` of a string column.
    fn simple_like(
        &self,
        expr: &Node,
        pattern: &Node,
        escape: Option<char>,
        kind: LikeKind,
        negated: bool,
    ) -> Result<Option<Pred>, RowFilterError> {
        let (
            Some(col),
            Some(Lit {
                value: Literal::Str(p),
                ..
            }),
        ) = (column_of(expr), literal_of(pattern))
        else {
            return Ok(None);
        };
        let field = self.resolver().field(&col)?;
        if !is_string(field.data_type()) {
            // A number or date is matched as its text, on the rows.
            return Ok(None);
        }
        let matcher = like::matcher(kind, &p, escape)
            .map_err(|reason| self.mismatch(reason, pattern.pos()))?;
        Ok(Some(Pred::Like {
            column: field.name().clone(),
            matcher: Arc::new(matcher),
            negated,
        }))
    }

    /// A column alone: a boolean column, `column = true`; any other fails.
    fn boolean_column(&self, col: &Col) -> Result<Pred, RowFilterError> {
        let field = self.resolver().field(col)?;
        if field.data_type() != &DataType::Boolean {
            return Err(self.mismatch(
                format!(
                    "column {} ({}) stands alone where a condition is expected; only a boolean column can",
                    field.name(),
                    field.data_type()
                ),
                col.at,
            ));
        }
        Ok(Pred::Cmp {
            column: field.name().clone(),
            op: Op::Eq,
            cast: None,
            value: Arc::new(BooleanArray::from(vec![true])),
        })
    }

    fn mismatch(&self, reason: String, at: Pos) -> RowFilterError {
        RowFilterError::Type {
            text: self.text.to_string(),
            reason,
            at,
        }
    }

    /// `col op lit` where statistics can decide it; `None` where the
    /// general path types it (or refuses it).
    fn compare(&self, col: &Col, op: Op, lit: &Lit) -> Result<Option<Pred>, RowFilterError> {
        let field = self.resolver().field(col)?;
        let column = field.name().clone();
        Ok(match plan(field.data_type(), &lit.value, &self.tz) {
            Some(Plan::Cast(cast, value)) => Some(Pred::Cmp {
                column,
                op,
                cast: Some(cast),
                value,
            }),
            Some(Plan::Own(value)) => Some(Pred::Cmp {
                column,
                op,
                cast: None,
                value,
            }),
            Some(Plan::Unknown) => Some(Pred::Const(None)),
            None => None,
        })
    }
}

/// The column `n` names, where it is a column.
fn column_of(n: &Node) -> Option<Col> {
    match n {
        Node::Column(c) => Some(c.clone()),
        _ => None,
    }
}

/// The literal `n` is, as a number where it is one, where it is a literal.
fn literal_of(n: &Node) -> Option<Lit> {
    match n {
        Node::Lit(l) => Some(Lit {
            value: literal_value(&l.value),
            at: l.at,
        }),
        _ => None,
    }
}

pub(crate) fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn is_integer(t: &DataType) -> bool {
    t.is_integer()
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64)
}

fn one_f64(x: f64) -> ArrayRef {
    Arc::new(Float64Array::from(vec![x]))
}

fn one_decimal(digits: i128, scale: u32) -> Option<ArrayRef> {
    let array = Decimal128Array::from(vec![digits])
        .with_precision_and_scale(38, i8::try_from(scale).ok()?)
        .ok()?;
    Some(Arc::new(array))
}

/// An exact number (`digits` at `scale`) at a larger scale, if it fits.
fn rescale(digits: i128, scale: u32, to: u32) -> Option<i128> {
    digits.checked_mul(10i128.checked_pow(to.checked_sub(scale)?)?)
}

/// How a literal compares with a column of type `t`, as Spark widens the
/// two sides of a comparison (timestamps and dates in `tz`, the session's
/// zone); `None` when they do not compare here.
fn plan(t: &DataType, lit: &Literal, tz: &SessionTz) -> Option<Plan> {
    if *lit == Literal::Null {
        return Some(Plan::Unknown);
    }
    // A string compared with a number, date or timestamp column is cast to
    // the column's type, as Spark casts it.
    if let Literal::Str(s) = lit {
        if !is_string(t) {
            return plan(t, &typed_string(t, s)?, tz);
        }
    }
    match (t, lit) {
        (t, Literal::Str(s)) if is_string(t) => {
            Some(Plan::Own(Arc::new(StringArray::from(vec![s.as_str()]))))
        }
        (DataType::Boolean, Literal::Bool(b)) => {
            Some(Plan::Own(Arc::new(BooleanArray::from(vec![*b]))))
        }
        (t, Literal::Float(x)) if is_integer(t) || is_float(t) || is_decimal(t) => {
            Some(Plan::Cast(DataType::Float64, one_f64(*x)))
        }
        (t, Literal::Int(i) | Literal::Decimal(i, _)) if is_float(t) => {
            let scale = match lit {
                Literal::Decimal(_, s) => *s,
                _ => 0,
            };
            Some(Plan::Cast(
                DataType::Float64,
                one_f64(*i as f64 / 10f64.powi(scale as i32)),
            ))
        }
        (t, Literal::Int(i)) if is_integer(t) => match i64::try_from(*i) {
            Ok(v) => Some(Plan::Cast(
                DataType::Int64,
                Arc::new(Int64Array::from(vec![v])),
            )),
            Err(_) => exact(0, 20, *i, 0),
        },
        (t, Literal::Decimal(d, s)) if is_integer(t) => exact(0, 20, *d, *s),
        (DataType::Decimal128(p, s) | DataType::Decimal256(p, s), Literal::Int(i)) => {
            exact(u32::try_from(*s).ok()?, *p as u32, *i, 0)
        }
        (DataType::Decimal128(p, s) | DataType::Decimal256(p, s), Literal::Decimal(d, ls)) => {
            exact(u32::try_from(*s).ok()?, *p as u32, *d, *ls)
        }
        (_, Literal::Date(_) | Literal::Timestamp(_)) => temporal_plan(t, lit, tz),
        _ => None,
    }
}

/// How a date or timestamp literal compares with a column of type `t` (see
/// [`plan`]).
fn temporal_plan(t: &DataType, lit: &Literal, tz: &SessionTz) -> Option<Plan> {
    match (t, lit) {
        (DataType::Date32 | DataType::Date64, Literal::Date(d)) => Some(Plan::Cast(
            DataType::Date32,
            Arc::new(Date32Array::from(vec![*d])),
        )),
        // A date column meets a timestamp as a timestamp: its midnight in
        // UTC only where the session's zone is UTC (else on the rows).
        (DataType::Date32 | DataType::Date64, Literal::Timestamp(text)) if tz.is_utc() => {
            let us = parse_timestamp(text, tz)?;
            let utc =
                DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
            let value = TimestampMicrosecondArray::from(vec![us]).with_timezone("UTC");
            Some(Plan::Cast(utc, Arc::new(value)))
        }
        // A timestamp column: the literal's instant in the session's zone,
        // or its wall-clock time for a `timestamp_ntz`.
        (DataType::Timestamp(_, zone), Literal::Timestamp(text)) => {
            let us = match zone {
                Some(_) => parse_timestamp(text, tz)?,
                None => parse_timestamp_ntz(text)?,
            };
            Some(Plan::Own(Arc::new(
                TimestampMicrosecondArray::from(vec![us]).with_timezone_opt(zone.clone()),
            )))
        }
        (DataType::Timestamp(_, zone), Literal::Date(d)) => {
            let us = match zone {
                Some(_) => tz.day_start(*d)?,
                None => i64::from(*d) * 86_400_000_000,
            };
            Some(Plan::Own(Arc::new(
                TimestampMicrosecondArray::from(vec![us]).with_timezone_opt(zone.clone()),
            )))
        }
        _ => None,
    }
}

fn is_decimal(t: &DataType) -> bool {
    matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
}

/// An exact comparison of a column of `precision` digits at `col_scale`
/// with `digits` at `lit_scale`: both at the larger scale, as decimals of
/// 38 digits; where they do not fit, as doubles.
fn exact(col_scale: u32, precision: u32, digits: i128, lit_scale: u32) -> Option<Plan> {
    let scale = col_scale.max(lit_scale);
    let fits = precision - col_scale.min(precision) + scale <= 38;
    match (fits, rescale(digits, lit_scale, scale)) {
        (true, Some(v)) => Some(Plan::Cast(
            DataType::Decimal128(38, i8::try_from(scale).ok()?),
            one_decimal(v, scale)?,
        )),
        _ => Some(Plan::Cast(
            DataType::Float64,
            one_f64(digits as f64 / 10f64.powi(lit_scale as i32)),
        )),
    }
}

/// A string literal read as a value of a column of type `t` (Spark casts
/// it so); `None` when it is none.
fn typed_string(t: &DataType, s: &str) -> Option<Literal> {
    let s = s.trim();
    match t {
        DataType::Boolean => match s.to_ascii_lowercase().as_str() {
            "true" => Some(Literal::Bool(true)),
            "false" => Some(Literal::Bool(false)),
            _ => None,
        },
        DataType::Date32 | DataType::Date64 => parse_date(s).map(Literal::Date),
        DataType::Timestamp(..) => {
            parse_timestamp_ntz(s).map(|_| Literal::Timestamp(s.to_string()))
        }
        // Spark 4 promotes a string beside an integer to a `bigint` and
        // beside a float, double or decimal to a `double`.
        t if is_integer(t) => s.parse::<i128>().ok().map(Literal::Int),
        t if is_float(t) || is_decimal(t) => super::cast::parse_double(s).map(Literal::Float),
        _ => None,
    }
}
