//! Binding: the parsed tree checked against the dataset's schema, each
//! literal typed as Spark types a comparison of it with its column.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema};

use super::parse::{parse_date, parse_timestamp, Col, Lit, Literal, Node, Op};
use super::{Pos, RowFilterError};

/// A bound filter: columns resolved, literals typed.
#[derive(Debug, Clone)]
pub(crate) enum Pred {
    And(Box<Pred>, Box<Pred>),
    Or(Box<Pred>, Box<Pred>),
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
    Like {
        column: String,
        pattern: String,
        negated: bool,
    },
}

impl Pred {
    /// The columns the predicate reads.
    pub(crate) fn columns(&self, out: &mut Vec<String>) {
        match self {
            Pred::And(a, b) | Pred::Or(a, b) => {
                a.columns(out);
                b.columns(out);
            }
            Pred::Not(a) => a.columns(out),
            Pred::Const(_) | Pred::Opaque => {}
            Pred::Cmp { column, .. } | Pred::IsNull { column, .. } | Pred::Like { column, .. } => {
                if !out.contains(column) {
                    out.push(column.clone());
                }
            }
        }
    }

    /// The top-level conjuncts (`a AND b AND c`).
    pub(crate) fn conjuncts(&self) -> Vec<&Pred> {
        match self {
            Pred::And(a, b) => {
                let mut out = a.conjuncts();
                out.extend(b.conjuncts());
                out
            }
            other => vec![other],
        }
    }
}

pub(crate) fn bind(node: &Node, schema: &Schema, text: &str) -> Result<Pred, RowFilterError> {
    Binder {
        schema,
        text,
        lenient: false,
        partial: false,
    }
    .bind(node)
}

/// Binds what `schema` (the partition columns) can decide; every condition
/// on another column, or one that does not fit, is [`Pred::Opaque`].
pub(crate) fn bind_lenient(node: &Node, schema: &Schema) -> Pred {
    let binder = Binder {
        schema,
        text: "",
        lenient: true,
        partial: false,
    };
    binder.bind(node).unwrap_or(Pred::Opaque)
}

/// Binds as [`bind_lenient`] does, except that a condition on a column of
/// `schema` that does not fit it fails the whole: `None`, as strict binding
/// would fail on any schema where that column has that type.
pub(crate) fn bind_partial(node: &Node, schema: &Schema) -> Option<Pred> {
    let binder = Binder {
        schema,
        text: "",
        lenient: true,
        partial: true,
    };
    binder.bind(node).ok()
}

struct Binder<'a> {
    schema: &'a Schema,
    text: &'a str,
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

impl Binder<'_> {
    fn bind(&self, node: &Node) -> Result<Pred, RowFilterError> {
        Ok(match node {
            Node::And(a, b) => Pred::And(Box::new(self.bind(a)?), Box::new(self.bind(b)?)),
            Node::Or(a, b) => Pred::Or(Box::new(self.bind(a)?), Box::new(self.bind(b)?)),
            Node::Not(a) => Pred::Not(Box::new(self.bind(a)?)),
            leaf if self.lenient => match self.leaf(leaf) {
                Ok(pred) => pred,
                Err(RowFilterError::UnknownColumn { .. }) => Pred::Opaque,
                Err(e) if self.partial => return Err(e),
                Err(_) => Pred::Opaque,
            },
            leaf => self.leaf(leaf)?,
        })
    }

    fn leaf(&self, node: &Node) -> Result<Pred, RowFilterError> {
        Ok(match node {
            Node::And(..) | Node::Or(..) | Node::Not(..) => self.bind(node)?,
            Node::Cmp(col, op, lit) => self.compare(col, *op, lit)?,
            Node::In(col, list, negated) => {
                let mut any: Option<Pred> = None;
                for lit in list {
                    let eq = self.compare(col, Op::Eq, lit)?;
                    any = Some(match any {
                        None => eq,
                        Some(before) => Pred::Or(Box::new(before), Box::new(eq)),
                    });
                }
                let any = any.unwrap_or(Pred::Const(Some(false)));
                if *negated {
                    Pred::Not(Box::new(any))
                } else {
                    any
                }
            }
            Node::Between(col, low, high, negated) => {
                let both = Pred::And(
                    Box::new(self.compare(col, Op::Ge, low)?),
                    Box::new(self.compare(col, Op::Le, high)?),
                );
                if *negated {
                    Pred::Not(Box::new(both))
                } else {
                    both
                }
            }
            Node::IsNull(col, negated) => Pred::IsNull {
                column: self.field(col)?.name().clone(),
                negated: *negated,
            },
            Node::Like(col, pattern, negated) => self.like(col, pattern, *negated)?,
            Node::Column(col) => {
                let field = self.field(col)?;
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
                Pred::Cmp {
                    column: field.name().clone(),
                    op: Op::Eq,
                    cast: None,
                    value: Arc::new(BooleanArray::from(vec![true])),
                }
            }
        })
    }

    fn field(&self, col: &Col) -> Result<&Field, RowFilterError> {
        let fields = self.schema.fields();
        fields
            .iter()
            .find(|f| f.name() == &col.name)
            .or_else(|| {
                // Spark resolves names without regard to case.
                fields
                    .iter()
                    .find(|f| f.name().eq_ignore_ascii_case(&col.name))
            })
            .map(|f| f.as_ref())
            .ok_or_else(|| RowFilterError::UnknownColumn {
                text: self.text.to_string(),
                column: col.name.clone(),
                at: col.at,
                available: fields
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    fn mismatch(&self, reason: String, at: Pos) -> RowFilterError {
        RowFilterError::Type {
            text: self.text.to_string(),
            reason,
            at,
        }
    }

    fn compare(&self, col: &Col, op: Op, lit: &Lit) -> Result<Pred, RowFilterError> {
        let field = self.field(col)?;
        let column = field.name().clone();
        match plan(field.data_type(), &lit.value) {
            Some(Plan::Cast(cast, value)) => Ok(Pred::Cmp {
                column,
                op,
                cast: Some(cast),
                value,
            }),
            Some(Plan::Own(value)) => Ok(Pred::Cmp {
                column,
                op,
                cast: None,
                value,
            }),
            Some(Plan::Unknown) => Ok(Pred::Const(None)),
            None => Err(self.mismatch(
                format!(
                    "cannot compare column {} ({}) with {}",
                    field.name(),
                    field.data_type(),
                    lit.value
                ),
                lit.at,
            )),
        }
    }

    fn like(&self, col: &Col, pattern: &Lit, negated: bool) -> Result<Pred, RowFilterError> {
        let field = self.field(col)?;
        if !is_string(field.data_type()) {
            return Err(self.mismatch(
                format!(
                    "LIKE matches strings, and column {} is {}",
                    field.name(),
                    field.data_type()
                ),
                col.at,
            ));
        }
        match &pattern.value {
            Literal::Str(p) => Ok(Pred::Like {
                column: field.name().clone(),
                pattern: p.clone(),
                negated,
            }),
            Literal::Null => Ok(Pred::Const(None)),
            other => Err(self.mismatch(
                format!("LIKE takes a string pattern, not {other}"),
                pattern.at,
            )),
        }
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
/// two sides of a comparison; `None` when they do not compare.
fn plan(t: &DataType, lit: &Literal) -> Option<Plan> {
    if *lit == Literal::Null {
        return Some(Plan::Unknown);
    }
    // A string compared with a number, date or timestamp column is cast to
    // the column's type, as Spark casts it.
    if let Literal::Str(s) = lit {
        if !is_string(t) {
            return plan(t, &typed_string(t, s)?);
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
        (DataType::Date32 | DataType::Date64, Literal::Date(d)) => Some(Plan::Cast(
            DataType::Date32,
            Arc::new(Date32Array::from(vec![*d])),
        )),
        (DataType::Date32 | DataType::Date64, Literal::Timestamp(us)) => {
            let utc =
                DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
            let value = TimestampMicrosecondArray::from(vec![*us]).with_timezone("UTC");
            Some(Plan::Cast(utc, Arc::new(value)))
        }
        (DataType::Timestamp(_, tz), Literal::Timestamp(us)) => Some(Plan::Own(Arc::new(
            TimestampMicrosecondArray::from(vec![*us]).with_timezone_opt(tz.clone()),
        ))),
        (DataType::Timestamp(_, tz), Literal::Date(d)) => Some(Plan::Own(Arc::new(
            TimestampMicrosecondArray::from(vec![i64::from(*d) * 86_400_000_000])
                .with_timezone_opt(tz.clone()),
        ))),
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
        DataType::Timestamp(..) => parse_timestamp(s).map(Literal::Timestamp),
        t if is_integer(t) => s.parse::<i128>().ok().map(Literal::Int),
        t if is_float(t) => s.parse::<f64>().ok().map(Literal::Float),
        t if is_decimal(t) => match super::parse::parse_number(s)? {
            n @ (Literal::Int(_) | Literal::Decimal(..)) => Some(n),
            _ => None,
        },
        _ => None,
    }
}
