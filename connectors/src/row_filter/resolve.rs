//! Resolving a parsed expression against the dataset's columns into a typed
//! [`Expr`], the implicit casts Spark's analyzer adds made explicit: the
//! wider of two numbers, a string read as the date or timestamp it is
//! compared with, a `CASE`'s branches brought to one type. What Spark
//! refuses, or sluice cannot compute exactly as Spark does, is refused here,
//! naming the place.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};

use super::cast::{castable, CastMode};
use super::expr::{fold, lit, Expr, Kind};
use super::func;
use super::like;
use super::parse::{Arith, CmpOp, Col, LikeKind, Literal, Node, TypeName};
use super::types::{self, comparison_type, engine_type, spark_name};
use super::tz::SessionTz;
use super::{Pos, RowFilterError};

/// Resolves expressions against one schema.
pub(crate) struct Resolver<'a> {
    pub schema: &'a Schema,
    pub text: &'a str,
    /// The session time zone every `timestamp` is computed in.
    pub tz: SessionTz,
}

impl<'a> Resolver<'a> {
    fn mismatch(&self, reason: String, at: Pos) -> RowFilterError {
        RowFilterError::Type {
            text: self.text.to_string(),
            reason,
            at,
        }
    }

    /// The field `col` names: exactly, else without regard to case (as
    /// Spark resolves names).
    pub(crate) fn field(&self, col: &Col) -> Result<&'a Field, RowFilterError> {
        let fields = self.schema.fields();
        fields
            .iter()
            .find(|f| f.name() == &col.name)
            .or_else(|| {
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
                    .map(|f| quoted_name(f.name()))
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// A condition: an expression of type boolean.
    pub(crate) fn condition(&self, node: &Node) -> Result<Expr, RowFilterError> {
        let e = self.expr(node)?;
        match e.ty {
            DataType::Boolean => Ok(e),
            DataType::Null => Ok(e.implicit(&DataType::Boolean)),
            ref other => Err(self.mismatch(
                format!(
                    "a condition is a boolean, and this is {} ; compare it with something (`= …`, `> …`)",
                    spark_name(other)
                ),
                node.pos(),
            )),
        }
    }

    /// Any expression.
    pub(crate) fn expr(&self, node: &Node) -> Result<Expr, RowFilterError> {
        let e = self.expr_unfolded(node)?;
        Ok(match fold(&e) {
            Some(value) => Expr::new(Kind::Lit(value), e.ty),
            None => e,
        })
    }

    fn expr_unfolded(&self, node: &Node) -> Result<Expr, RowFilterError> {
        Ok(match node {
            Node::Column(col) => self.column(col)?,
            Node::Lit(l) => lit(&l.value, &self.tz).ok_or_else(|| {
                self.mismatch(
                    format!("the literal {} is out of its type's range", l.value),
                    l.at,
                )
            })?,
            Node::And(list) | Node::Or(list) => {
                let list = list
                    .iter()
                    .map(|n| self.condition(n))
                    .collect::<Result<Vec<_>, _>>()?;
                let kind = if matches!(node, Node::And(_)) {
                    Kind::And(list)
                } else {
                    Kind::Or(list)
                };
                Expr::new(kind, DataType::Boolean)
            }
            Node::Not(a) => Expr::new(Kind::Not(Box::new(self.condition(a)?)), DataType::Boolean),
            Node::Neg(a, at) => self.neg(a, *at)?,
            Node::BitNot(a, at) => self.bit_not(a, *at)?,
            Node::Arith(a, op, b, at) => self.arith(a, *op, b, *at)?,
            Node::Cmp(a, op, b, at) => self.compare(a, *op, b, *at)?,
            Node::Distinct(a, b, negated, at) => {
                let eq = self.compare(a, CmpOp::NullSafeEq, b, *at)?;
                if *negated {
                    eq
                } else {
                    Expr::new(Kind::Not(Box::new(eq)), DataType::Boolean)
                }
            }
            Node::In(a, list, negated, at) => self.in_list(a, list, *negated, *at)?,
            Node::Between(x, low, high, negated, at) => {
                // `x BETWEEN a AND b` is `x >= a AND x <= b` in Spark.
                let ge = self.compare(x, CmpOp::Plain(super::parse::Op::Ge), low, *at)?;
                let le = self.compare(x, CmpOp::Plain(super::parse::Op::Le), high, *at)?;
                let both = Expr::new(Kind::And(vec![ge, le]), DataType::Boolean);
                if *negated {
                    Expr::new(Kind::Not(Box::new(both)), DataType::Boolean)
                } else {
                    both
                }
            }
            Node::Like {
                expr,
                pattern,
                escape,
                kind,
                negated,
                at,
            } => self.like(expr, pattern, *escape, *kind, *negated, *at)?,
            Node::IsNull(a, negated, _) => Expr::new(
                Kind::IsNull(Box::new(self.expr(a)?), *negated),
                DataType::Boolean,
            ),
            Node::IsBool(a, value, negated, _) => self.is_bool(a, *value, *negated)?,
            Node::Case {
                operand,
                arms,
                otherwise,
                at,
            } => self.case(operand.as_deref(), arms, otherwise.as_deref(), *at)?,
            Node::Cast(a, to, try_cast, at) => {
                let x = self.expr(a)?;
                let ty = self.type_of(to)?;
                let mode = if *try_cast {
                    CastMode::Try
                } else {
                    CastMode::Ansi
                };
                self.cast(x, ty, mode, *at)?
            }
            Node::Call(name, args, at) => self.call(name, args, *at)?,
        })
    }

    /// A column, typed as a filter computes with it.
    fn column(&self, col: &Col) -> Result<Expr, RowFilterError> {
        let field = self.field(col)?;
        let ty = engine_type(field.data_type()).ok_or_else(|| {
            self.mismatch(
                format!(
                    "column {} is {}, which a filter does not compute with",
                    field.name(),
                    field.data_type()
                ),
                col.at,
            )
        })?;
        // A `timestamp` is computed in the session's zone.
        let ty = match ty {
            DataType::Timestamp(_, Some(_)) => self.tz.timestamp(),
            other => other,
        };
        Ok(Expr::new(Kind::Column(field.name().clone()), ty))
    }

    /// `-a`: a number (a string as the double it holds).
    fn neg(&self, a: &Node, at: Pos) -> Result<Expr, RowFilterError> {
        let e = self.expr(a)?;
        let e = match e.ty {
            DataType::Null => e.implicit(&DataType::Int32),
            // `-s` of a string is of the double it holds.
            DataType::Utf8 => e.implicit(&DataType::Float64),
            _ => e,
        };
        if !types::is_numeric(&e.ty) {
            return Err(self.mismatch(format!("`-` takes a number, not {}", spark_name(&e.ty)), at));
        }
        let ty = e.ty.clone();
        Ok(Expr::new(Kind::Neg(Box::new(e)), ty))
    }

    /// `~a`: an integer.
    fn bit_not(&self, a: &Node, at: Pos) -> Result<Expr, RowFilterError> {
        let e = self.expr(a)?;
        if !types::is_integral(&e.ty) {
            return Err(self.mismatch(
                format!("`~` takes an integer, not {}", spark_name(&e.ty)),
                at,
            ));
        }
        let ty = e.ty.clone();
        Ok(Expr::new(Kind::BitNot(Box::new(e)), ty))
    }

    /// `a [NOT] IN (list)`: every member brought to the list's common type.
    fn in_list(
        &self,
        a: &Node,
        list: &[Node],
        negated: bool,
        at: Pos,
    ) -> Result<Expr, RowFilterError> {
        let x = self.expr(a)?;
        let items = list
            .iter()
            .map(|n| self.expr(n))
            .collect::<Result<Vec<_>, _>>()?;
        let ty = self.common(
            std::iter::once(&x.ty).chain(items.iter().map(|e| &e.ty)),
            at,
            "IN",
        )?;
        self.literal_fits(&x, &ty, a.pos())?;
        for (e, n) in items.iter().zip(list) {
            self.literal_fits(e, &ty, n.pos())?;
        }
        let items: Vec<Expr> = items.into_iter().map(|e| e.implicit(&ty)).collect();
        let x = Box::new(x.implicit(&ty));
        let literals: Option<Vec<arrow::array::ArrayRef>> =
            items.iter().map(|e| e.literal().cloned()).collect();
        let kind = match literals.map(|l| super::expr::Members::new(&l)) {
            Some(Ok(members)) => Kind::InSet(x, Arc::new(members), negated),
            _ => Kind::In(x, items, negated),
        };
        Ok(Expr::new(kind, DataType::Boolean))
    }

    /// `expr [NOT] LIKE pattern` (or `ILIKE`, `RLIKE`): a string (a number,
    /// date or timestamp as its text) matched with a literal pattern.
    fn like(
        &self,
        expr: &Node,
        pattern: &Node,
        escape: Option<char>,
        kind: LikeKind,
        negated: bool,
        at: Pos,
    ) -> Result<Expr, RowFilterError> {
        let x = self.expr(expr)?;
        let x = match x.ty {
            DataType::Utf8 => x,
            DataType::Null => x.implicit(&DataType::Utf8),
            // A number, date or timestamp is matched as its text.
            ref t if *t != DataType::Binary && castable(t, &DataType::Utf8) => {
                x.implicit(&DataType::Utf8)
            }
            ref other => {
                return Err(self.mismatch(
                    format!("LIKE matches strings, and this is {}", spark_name(other)),
                    at,
                ))
            }
        };
        let p = self.expr(pattern)?;
        let text =
            match p.literal() {
                Some(v) if v.data_type() == &DataType::Null || v.is_null(0) => {
                    return Ok(Expr::new(
                        Kind::Lit(arrow::array::new_null_array(&DataType::Boolean, 1)),
                        DataType::Boolean,
                    ))
                }
                Some(v) if *v.data_type() == DataType::Utf8 => {
                    use arrow::array::AsArray;
                    v.as_string::<i32>().value(0).to_string()
                }
                _ => return Err(self.mismatch(
                    "a pattern is a string literal here (a pattern from a column is not supported)"
                        .to_string(),
                    pattern.pos(),
                )),
            };
        let matcher = like::matcher(kind, &text, escape)
            .map_err(|reason| self.mismatch(reason, pattern.pos()))?;
        Ok(Expr::new(
            Kind::Like(Box::new(x), Arc::new(matcher), negated),
            DataType::Boolean,
        ))
    }

    /// `a IS [NOT] TRUE`, `FALSE` (`value`) or `UNKNOWN` (`None`).
    fn is_bool(
        &self,
        a: &Node,
        value: Option<bool>,
        negated: bool,
    ) -> Result<Expr, RowFilterError> {
        let x = self.condition(a)?;
        // `x IS TRUE` is `x <=> true`; `x IS UNKNOWN` is `x IS NULL`.
        let e = match value {
            None => Expr::new(Kind::IsNull(Box::new(x), false), DataType::Boolean),
            Some(b) => {
                let v = Expr::new(
                    Kind::Lit(Arc::new(arrow::array::BooleanArray::from(vec![b]))),
                    DataType::Boolean,
                );
                Expr::new(
                    Kind::Cmp(CmpOp::NullSafeEq, Box::new(x), Box::new(v)),
                    DataType::Boolean,
                )
            }
        };
        Ok(if negated {
            Expr::new(Kind::Not(Box::new(e)), DataType::Boolean)
        } else {
            e
        })
    }

    /// `x` cast to `ty` (as it is where it is of `ty` already); a cast
    /// sluice does not do as Spark does is refused.
    fn cast(&self, x: Expr, ty: DataType, mode: CastMode, at: Pos) -> Result<Expr, RowFilterError> {
        if !castable(&x.ty, &ty) {
            return Err(self.mismatch(
                format!(
                    "a cast from {} to {} is not supported",
                    spark_name(&x.ty),
                    spark_name(&ty)
                ),
                at,
            ));
        }
        Ok(if x.ty == ty {
            x
        } else {
            Expr::new(Kind::Cast(Box::new(x), mode), ty)
        })
    }

    fn common<'t>(
        &self,
        types: impl IntoIterator<Item = &'t DataType>,
        at: Pos,
        what: &str,
    ) -> Result<DataType, RowFilterError> {
        let types: Vec<&DataType> = types.into_iter().collect();
        types::common_type(types.iter().copied()).ok_or_else(|| {
            self.mismatch(
                format!(
                    "the values of {what} are of types that do not compare ({})",
                    types
                        .iter()
                        .map(|t| spark_name(t))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                at,
            )
        })
    }

    fn arith(&self, a: &Node, op: Arith, b: &Node, at: Pos) -> Result<Expr, RowFilterError> {
        let (x, y) = (self.expr(a)?, self.expr(b)?);
        // `date + n`, `n + date` and `date - n` are `date_add` and `date_sub`,
        // as Spark's analyzer rewrites them.
        let days = |t: &DataType| types::is_integral(t) && *t != DataType::Int64;
        let shift = match (op, &x.ty, &y.ty) {
            (Arith::Add, DataType::Date32, t) if days(t) => Some((func::Func::DateAdd, false)),
            (Arith::Add, t, DataType::Date32) if days(t) => Some((func::Func::DateAdd, true)),
            (Arith::Sub, DataType::Date32, t) if days(t) => Some((func::Func::DateSub, false)),
            _ => None,
        };
        if let Some((f, swapped)) = shift {
            let (date, n) = if swapped { (y, x) } else { (x, y) };
            return Ok(Expr::new(
                Kind::Call(f, vec![date, n.implicit(&DataType::Int32)]),
                DataType::Date32,
            ));
        }
        let (x, y) = promote_strings(x, y);
        // An integer literal beside a decimal is the decimal of its digits
        // (Spark's `DecimalType.fromLiteral`: `d / 2` divides by a
        // `decimal(1,0)`).
        let (xt, yt) = (x.ty.clone(), y.ty.clone());
        let (x, y) = (literal_as_decimal(x, &yt), literal_as_decimal(y, &xt));
        let Some((result, operand)) = super::arith::types(op, &x.ty, &y.ty) else {
            return Err(self.mismatch(
                format!(
                    "`{}` of {} and {} is not supported",
                    op.symbol(),
                    spark_name(&x.ty),
                    spark_name(&y.ty)
                ),
                at,
            ));
        };
        let (x, y) = if operand == DataType::Null {
            // Decimals keep their own scale: integers as their decimal.
            let as_decimal = |e: Expr| {
                let t = if e.ty == DataType::Null {
                    &result
                } else {
                    &e.ty
                };
                match types::integral_as_decimal(t) {
                    Some((p, s)) => e.implicit(&DataType::Decimal128(p, s)),
                    None => e,
                }
            };
            (as_decimal(x), as_decimal(y))
        } else {
            (x.implicit(&operand), y.implicit(&operand))
        };
        Ok(Expr::new(Kind::Arith(op, Box::new(x), Box::new(y)), result))
    }

    /// `a op b`, both sides brought to the type Spark compares them as.
    pub(crate) fn compare(
        &self,
        a: &Node,
        op: CmpOp,
        b: &Node,
        at: Pos,
    ) -> Result<Expr, RowFilterError> {
        let (x, y) = (self.expr(a)?, self.expr(b)?);
        let ty = self.comparison(&x, &y).ok_or_else(|| {
            self.mismatch(
                format!(
                    "cannot compare {} with {}",
                    spark_name(&x.ty),
                    spark_name(&y.ty)
                ),
                at,
            )
        })?;
        self.literal_fits(&x, &ty, a.pos())?;
        self.literal_fits(&y, &ty, b.pos())?;
        Ok(Expr::new(
            Kind::Cmp(op, Box::new(x.implicit(&ty)), Box::new(y.implicit(&ty))),
            DataType::Boolean,
        ))
    }

    /// A literal that is no value of the type it is compared as: refused
    /// here (Spark fails the query when it runs: `CAST_INVALID_INPUT`).
    fn literal_fits(&self, e: &Expr, ty: &DataType, at: Pos) -> Result<(), RowFilterError> {
        let Some(v) = e.literal() else {
            return Ok(());
        };
        if &e.ty == ty {
            return Ok(());
        }
        super::cast::cast_to(v, ty, CastMode::Implicit)
            .map(drop)
            .map_err(|err| {
                let shown = arrow::util::display::array_value_to_string(v, 0)
                    .unwrap_or_else(|_| "the literal".to_string());
                self.mismatch(
                    format!(
                        "'{shown}' is no {} value, and Spark fails a query comparing them ({})",
                        spark_name(ty),
                        err.to_string()
                            .split(']')
                            .next()
                            .unwrap_or("")
                            .trim_start_matches("Cast error: ")
                            .trim_start_matches('[')
                    ),
                    at,
                )
            })
    }

    /// The type two sides compare as: a string beside a number is read as
    /// a `bigint` or a `double` (Spark 4's string promotion).
    fn comparison(&self, x: &Expr, y: &Expr) -> Option<DataType> {
        comparison_type(&x.ty, &y.ty)
    }

    fn case(
        &self,
        operand: Option<&Node>,
        arms: &[(Node, Node)],
        otherwise: Option<&Node>,
        at: Pos,
    ) -> Result<Expr, RowFilterError> {
        let mut conds = Vec::new();
        for (when, _) in arms {
            conds.push(match operand {
                // `CASE x WHEN v` is `CASE WHEN x = v`.
                Some(x) => self.compare(x, CmpOp::Plain(super::parse::Op::Eq), when, when.pos())?,
                None => self.condition(when)?,
            });
        }
        let values = arms
            .iter()
            .map(|(_, then)| self.expr(then))
            .collect::<Result<Vec<_>, _>>()?;
        let otherwise = otherwise.map(|n| self.expr(n)).transpose()?;
        let ty = self.common(
            values
                .iter()
                .map(|e| &e.ty)
                .chain(otherwise.iter().map(|e| &e.ty)),
            at,
            "CASE",
        )?;
        let arms = conds
            .into_iter()
            .zip(values)
            .map(|(c, v)| (c, v.implicit(&ty)))
            .collect();
        Ok(Expr::new(
            Kind::Case(arms, otherwise.map(|e| Box::new(e.implicit(&ty)))),
            ty,
        ))
    }

    /// A function call: the conditional functions, casts by a type's name
    /// and null tests here, the others as [`func`] types them.
    fn call(&self, name: &str, args: &[Node], at: Pos) -> Result<Expr, RowFilterError> {
        let values = args
            .iter()
            .map(|n| self.expr(n))
            .collect::<Result<Vec<_>, _>>()?;
        match name {
            "coalesce" | "nvl" | "ifnull" => self.coalesce(name, values, at),
            "if" | "iff" => self.if_call(name, values, at),
            "nullif" => self.nullif(args, values, at),
            // `double(x)`, `int(x)`, `date(x)`...: Spark's casts by type name.
            "boolean" | "tinyint" | "smallint" | "int" | "bigint" | "float" | "double"
            | "decimal" | "string" | "binary" | "date" | "timestamp"
                if values.len() == 1 =>
            {
                self.cast_by_name(name, values, at)
            }
            "isnull" | "isnotnull" => self.is_null_call(name, values, at),
            _ => self.function(name, values, at),
        }
    }

    /// `coalesce(...)`, `nvl(a, b)`, `ifnull(a, b)`: the first value not
    /// null, all brought to their common type.
    fn coalesce(&self, name: &str, values: Vec<Expr>, at: Pos) -> Result<Expr, RowFilterError> {
        if values.is_empty() || (name != "coalesce" && values.len() != 2) {
            return Err(self.mismatch(format!("{name} takes arguments"), at));
        }
        let ty = self.common(values.iter().map(|e| &e.ty), at, name)?;
        let list = values.into_iter().map(|e| e.implicit(&ty)).collect();
        Ok(Expr::new(Kind::Coalesce(list), ty))
    }

    /// `if(c, a, b)`: a `CASE WHEN c THEN a ELSE b END`.
    fn if_call(&self, name: &str, values: Vec<Expr>, at: Pos) -> Result<Expr, RowFilterError> {
        if values.len() != 3 {
            return Err(self.mismatch("if takes 3 arguments".to_string(), at));
        }
        let mut it = values.into_iter();
        let (c, a, b) = (it.next(), it.next(), it.next());
        let (Some(c), Some(a), Some(b)) = (c, a, b) else {
            return Err(self.mismatch("if takes 3 arguments".to_string(), at));
        };
        let c = if c.ty == DataType::Boolean || c.ty == DataType::Null {
            c.implicit(&DataType::Boolean)
        } else {
            return Err(self.mismatch("if's first argument is a condition".into(), at));
        };
        let ty = self.common([&a.ty, &b.ty], at, name)?;
        Ok(Expr::new(
            Kind::Case(vec![(c, a.implicit(&ty))], Some(Box::new(b.implicit(&ty)))),
            ty,
        ))
    }

    /// `nullif(a, b)`: null where `a = b`, else `a`.
    fn nullif(&self, args: &[Node], values: Vec<Expr>, at: Pos) -> Result<Expr, RowFilterError> {
        if values.len() != 2 {
            return Err(self.mismatch("nullif takes 2 arguments".to_string(), at));
        }
        let cmp = self.compare(&args[0], CmpOp::Plain(super::parse::Op::Eq), &args[1], at)?;
        let ty = values[0].ty.clone();
        let null = Expr::new(Kind::Lit(arrow::array::new_null_array(&ty, 1)), ty.clone());
        let first = values
            .into_iter()
            .next()
            .ok_or_else(|| self.mismatch("nullif takes 2 arguments".to_string(), at))?;
        Ok(Expr::new(
            Kind::Case(vec![(cmp, null)], Some(Box::new(first))),
            ty,
        ))
    }

    /// `double(x)`, `int(x)`, `date(x)`...: a cast to the type `name` names.
    fn cast_by_name(&self, name: &str, values: Vec<Expr>, at: Pos) -> Result<Expr, RowFilterError> {
        let ty = self.type_of(&TypeName {
            name: name.to_string(),
            params: Vec::new(),
            at,
        })?;
        let Some(x) = values.into_iter().next() else {
            return Err(self.mismatch(format!("{name} takes 1 argument"), at));
        };
        self.cast(x, ty, CastMode::Ansi, at)
    }

    /// `isnull(x)`, `isnotnull(x)`.
    fn is_null_call(&self, name: &str, values: Vec<Expr>, at: Pos) -> Result<Expr, RowFilterError> {
        if values.len() != 1 {
            return Err(self.mismatch(format!("{name} takes 1 argument"), at));
        }
        let e = values
            .into_iter()
            .next()
            .ok_or_else(|| self.mismatch(format!("{name} takes 1 argument"), at))?;
        Ok(Expr::new(
            Kind::IsNull(Box::new(e), name == "isnotnull"),
            DataType::Boolean,
        ))
    }

    /// A function [`func`] computes, its arguments cast to its signature.
    fn function(&self, name: &str, values: Vec<Expr>, at: Pos) -> Result<Expr, RowFilterError> {
        if let ("round", Some(DataType::Decimal128(p, s))) =
            (name, values.first().map(|e| e.ty.clone()))
        {
            return self.round_decimal(values, p, s, at);
        }
        let types: Vec<DataType> = values.iter().map(|e| e.ty.clone()).collect();
        let sig =
            func::resolve(name, &types, &self.tz).map_err(|reason| RowFilterError::Syntax {
                text: self.text.to_string(),
                reason,
                at,
            })?;
        let args = values
            .into_iter()
            .zip(&sig.args)
            .map(|(e, t)| {
                if e.ty != *t && !castable(&e.ty, t) {
                    return Err(
                        self.mismatch(format!("{name} cannot take {} here", spark_name(&e.ty)), at)
                    );
                }
                Ok(e.implicit(t))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Expr::new(Kind::Call(sig.func, args), sig.ret))
    }

    /// `round(x, d)` of a decimal `x`, typed as Spark types it: the scale `d`
    /// (a literal), the precision one digit more in the whole part.
    fn round_decimal(
        &self,
        values: Vec<Expr>,
        p: u8,
        s: i8,
        at: Pos,
    ) -> Result<Expr, RowFilterError> {
        use arrow::array::AsArray;
        let d: i32 = match values.get(1) {
            None => 0,
            Some(e) => match e.literal() {
                Some(v) if types::is_integral(v.data_type()) && v.is_valid(0) => {
                    let v = arrow::compute::cast(v, &DataType::Int64)
                        .map_err(|e| self.mismatch(e.to_string(), at))?;
                    i32::try_from(v.as_primitive::<arrow::datatypes::Int64Type>().value(0))
                        .map_err(|_| self.mismatch("round's scale is out of range".into(), at))?
                }
                _ => {
                    return Err(self.mismatch("round's scale is an integer literal".to_string(), at))
                }
            },
        };
        if values.len() > 2 {
            return Err(self.mismatch("round takes 1 or 2 arguments".to_string(), at));
        }
        let whole = i32::from(p) - i32::from(s) + 1;
        let ty = if d < 0 {
            DataType::Decimal128(whole.max(1 - d).min(38) as u8, 0)
        } else {
            let scale = i32::from(s).min(d);
            DataType::Decimal128((whole + scale).min(38) as u8, scale as i8)
        };
        let Some(x) = values.into_iter().next() else {
            return Err(self.mismatch("round takes 1 or 2 arguments".to_string(), at));
        };
        Ok(Expr::new(
            Kind::Call(func::Func::RoundDecimal(d), vec![x]),
            ty,
        ))
    }

    /// A type named in a cast.
    fn type_of(&self, t: &TypeName) -> Result<DataType, RowFilterError> {
        let p = |i: usize, default: u32| t.params.get(i).copied().unwrap_or(default);
        Ok(match t.name.as_str() {
            "boolean" | "bool" => DataType::Boolean,
            "tinyint" | "byte" => DataType::Int8,
            "smallint" | "short" => DataType::Int16,
            "int" | "integer" => DataType::Int32,
            "bigint" | "long" => DataType::Int64,
            "float" | "real" => DataType::Float32,
            "double" => DataType::Float64,
            "decimal" | "dec" | "numeric" => {
                let (precision, scale) = (p(0, 10), p(1, 0));
                if precision == 0 || precision > 38 || scale > precision {
                    return Err(self.mismatch(
                        format!("decimal({precision}, {scale}) is no decimal type"),
                        t.at,
                    ));
                }
                DataType::Decimal128(precision as u8, scale as i8)
            }
            "string" | "varchar" | "char" => DataType::Utf8,
            "binary" => DataType::Binary,
            "date" => DataType::Date32,
            "timestamp" | "timestamp_ltz" => self.tz.timestamp(),
            "timestamp_ntz" => DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
            other => return Err(self.mismatch(format!("a cast to {other} is not supported"), t.at)),
        })
    }
}

/// A column name as a filter writes it: in backquotes where it is not a
/// plain name.
pub(crate) fn quoted_name(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("`{}`", name.replace('`', "``"))
    }
}

/// `e` as the decimal of its digits where it is an integer literal (not a
/// `tinyint`) and `other` a decimal; else `e`.
fn literal_as_decimal(e: Expr, other: &DataType) -> Expr {
    use arrow::array::Array;
    if !matches!(other, DataType::Decimal128(..))
        || !matches!(e.ty, DataType::Int16 | DataType::Int32 | DataType::Int64)
    {
        return e;
    }
    let Some(v) = e.literal().filter(|v| v.is_valid(0)) else {
        return e;
    };
    let Ok(long) = arrow::compute::cast(v, &DataType::Int64) else {
        return e;
    };
    use arrow::array::AsArray;
    let n = long.as_primitive::<arrow::datatypes::Int64Type>().value(0);
    let digits = n.unsigned_abs().checked_ilog10().map_or(1, |d| d + 1) as u8;
    let ty = DataType::Decimal128(digits, 0);
    match super::cast::cast_to(v, &ty, CastMode::Implicit) {
        Ok(array) => Expr::new(Kind::Lit(array), ty),
        Err(_) => e,
    }
}

/// A literal's value as a number, for the comparisons of [`super::bind`].
pub(crate) fn literal_value(l: &Literal) -> Literal {
    match l {
        Literal::SizedInt(i, _) => Literal::Int(*i),
        Literal::Float32(x) => Literal::Float(f64::from(*x)),
        other => other.clone(),
    }
}

/// Both sides of an arithmetic operator where one is a string: cast to
/// the `bigint` or `double` Spark 4 promotes them to (two strings are
/// refused, as Spark refuses them).
fn promote_strings(x: Expr, y: Expr) -> (Expr, Expr) {
    let to = match (&x.ty, &y.ty) {
        (DataType::Utf8, t) | (t, DataType::Utf8) if types::is_numeric(t) => {
            types::string_promotion(t)
        }
        _ => None,
    };
    match to {
        Some(t) => (x.implicit(&t), y.implicit(&t)),
        None => (x, y),
    }
}
