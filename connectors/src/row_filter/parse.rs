//! From the text to our tree: `sqlparser` parses the expression (its
//! generic dialect, which reads Spark's operators), and each node it gives
//! is taken if a filter can use it, or refused naming its place.

use sqlparser::ast::{
    BinaryOperator, DataType as SqlType, Expr, Ident, InTarget, Spanned, UnaryOperator, Value,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};

use super::{Pos, RowFilterError};

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    /// The operator with its sides swapped (`5 < x` is `x > 5`).
    fn flipped(self) -> Op {
        match self {
            Op::Lt => Op::Gt,
            Op::Le => Op::Ge,
            Op::Gt => Op::Lt,
            Op::Ge => Op::Le,
            other => other,
        }
    }
}

/// A column named, and where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Col {
    pub name: String,
    pub at: Pos,
}

/// A literal as written, and where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Lit {
    pub value: Literal,
    pub at: Pos,
}

/// The literals of Spark SQL a filter takes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Literal {
    Null,
    Bool(bool),
    Str(String),
    /// An integer.
    Int(i128),
    /// An exact decimal: unscaled digits and scale (`1.50` is `(150, 2)`).
    Decimal(i128, u32),
    /// A number with an exponent (`1e3`): a double, as in Spark.
    Float(f64),
    /// `DATE '2026-11-01'`: days since the epoch.
    Date(i32),
    /// `TIMESTAMP '2026-11-01 10:00:00'`: microseconds since the epoch, UTC.
    Timestamp(i64),
}

impl std::fmt::Display for Literal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(b) => write!(f, "{b}"),
            Literal::Str(s) => write!(f, "'{s}'"),
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Decimal(d, s) => {
                let text = d.unsigned_abs().to_string();
                let s = *s as usize;
                let padded = format!("{text:0>width$}", width = s + 1);
                let (int, frac) = padded.split_at(padded.len() - s);
                let sign = if *d < 0 { "-" } else { "" };
                write!(f, "{sign}{int}.{frac}")
            }
            Literal::Float(x) => write!(f, "{x:e}"),
            Literal::Date(d) => write!(f, "DATE {d}"),
            Literal::Timestamp(t) => write!(f, "TIMESTAMP {t}"),
        }
    }
}

/// The parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Cmp(Col, Op, Lit),
    In(Col, Vec<Lit>, bool),
    Between(Col, Lit, Lit, bool),
    IsNull(Col, bool),
    Like(Col, Lit, bool),
    /// A boolean column on its own (`WHERE flag`).
    Column(Col),
}

impl Node {
    pub(crate) fn columns(&self, out: &mut Vec<String>) {
        let mut add = |c: &Col| {
            if !out.iter().any(|n| n == &c.name) {
                out.push(c.name.clone());
            }
        };
        match self {
            Node::And(a, b) | Node::Or(a, b) => {
                a.columns(out);
                b.columns(out);
            }
            Node::Not(a) => a.columns(out),
            Node::Cmp(c, ..)
            | Node::In(c, ..)
            | Node::Between(c, ..)
            | Node::IsNull(c, _)
            | Node::Like(c, ..)
            | Node::Column(c) => add(c),
        }
    }
}

/// Parses `text` as one expression.
pub(crate) fn parse(text: &str) -> Result<Node, RowFilterError> {
    let dialect = GenericDialect {};
    let syntax = |reason: String, at: Pos| RowFilterError::Syntax {
        text: text.to_string(),
        reason,
        at,
    };
    if text.trim().is_empty() {
        return Err(syntax(
            "an empty expression".to_string(),
            Pos { line: 1, column: 1 },
        ));
    }
    let parsed = Parser::new(&dialect)
        .try_with_sql(text)
        .and_then(|mut p| {
            let expr = p.parse_expr()?;
            let next = p.peek_token();
            if next.token != sqlparser::tokenizer::Token::EOF {
                return Err(ParserError::ParserError(format!(
                    "unexpected {} after the expression at Line: {}, Column: {}",
                    next.token, next.span.start.line, next.span.start.column
                )));
            }
            Ok(expr)
        })
        .map_err(|e| {
            let (reason, at) = parser_message(&e);
            syntax(reason, at)
        })?;
    Build { text }.node(&parsed)
}

/// sqlparser's message without its prefix, and the place it names.
fn parser_message(e: &ParserError) -> (String, Pos) {
    let raw = match e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m.clone(),
        ParserError::RecursionLimitExceeded => "the expression nests too deeply".to_string(),
    };
    let Some(i) = raw.find(" at Line: ") else {
        return (raw, Pos { line: 1, column: 1 });
    };
    let tail = &raw[i + " at Line: ".len()..];
    let mut parts = tail.split(", Column: ");
    let line = parts
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(1);
    let column = parts
        .next()
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(1);
    (raw[..i].to_string(), Pos { line, column })
}

fn pos_of(expr: &Expr) -> Pos {
    let start = expr.span().start;
    Pos {
        line: start.line.max(1),
        column: start.column.max(1),
    }
}

fn ident_pos(ident: &Ident) -> Pos {
    Pos {
        line: ident.span.start.line.max(1),
        column: ident.span.start.column.max(1),
    }
}

struct Build<'a> {
    text: &'a str,
}

impl Build<'_> {
    fn refuse(&self, reason: impl Into<String>, at: Pos) -> RowFilterError {
        RowFilterError::Syntax {
            text: self.text.to_string(),
            reason: reason.into(),
            at,
        }
    }

    fn node(&self, expr: &Expr) -> Result<Node, RowFilterError> {
        match expr {
            Expr::Nested(inner) => self.node(inner),
            Expr::BinaryOp { left, op, right } => self.binary(expr, left, op, right),
            Expr::UnaryOp {
                op: UnaryOperator::Not | UnaryOperator::BangNot,
                expr: inner,
            } => Ok(Node::Not(Box::new(self.node(inner)?))),
            Expr::IsNull(inner) => Ok(Node::IsNull(self.column(inner)?, false)),
            Expr::IsNotNull(inner) => Ok(Node::IsNull(self.column(inner)?, true)),
            Expr::In {
                expr: inner,
                target: InTarget::List(list),
                negated,
                ..
            } => {
                let list = list
                    .iter()
                    .map(|e| self.literal(e))
                    .collect::<Result<_, _>>()?;
                Ok(Node::In(self.column(inner)?, list, *negated))
            }
            Expr::Between {
                expr: inner,
                negated,
                low,
                high,
            } => Ok(Node::Between(
                self.column(inner)?,
                self.literal(low)?,
                self.literal(high)?,
                *negated,
            )),
            Expr::Like {
                negated,
                any: false,
                expr: inner,
                pattern,
                escape_char: None,
            } => Ok(Node::Like(
                self.column(inner)?,
                self.literal(pattern)?,
                *negated,
            )),
            Expr::Like { .. } => Err(self.refuse(
                "LIKE with ESCAPE or ANY is not supported (LIKE 'pattern' is)",
                pos_of(expr),
            )),
            Expr::Identifier(ident) if ident.quote_style != Some('"') => Ok(Node::Column(Col {
                name: ident.value.clone(),
                at: ident_pos(ident),
            })),
            other => Err(self.refuse(
                format!(
                    "`{other}` is not a condition a filter takes (comparisons, IN, BETWEEN, \
                     IS [NOT] NULL, LIKE, AND, OR, NOT)"
                ),
                pos_of(other),
            )),
        }
    }

    fn binary(
        &self,
        whole: &Expr,
        left: &Expr,
        op: &BinaryOperator,
        right: &Expr,
    ) -> Result<Node, RowFilterError> {
        let cmp = match op {
            BinaryOperator::And => {
                return Ok(Node::And(
                    Box::new(self.node(left)?),
                    Box::new(self.node(right)?),
                ))
            }
            BinaryOperator::Or => {
                return Ok(Node::Or(
                    Box::new(self.node(left)?),
                    Box::new(self.node(right)?),
                ))
            }
            BinaryOperator::Eq => Op::Eq,
            BinaryOperator::NotEq => Op::Ne,
            BinaryOperator::Lt => Op::Lt,
            BinaryOperator::LtEq => Op::Le,
            BinaryOperator::Gt => Op::Gt,
            BinaryOperator::GtEq => Op::Ge,
            other => {
                return Err(self.refuse(
                    format!("the operator {other} is not one a filter takes"),
                    pos_of(whole),
                ))
            }
        };
        match (self.is_column(left), self.is_column(right)) {
            (true, false) => Ok(Node::Cmp(self.column(left)?, cmp, self.literal(right)?)),
            (false, true) => Ok(Node::Cmp(
                self.column(right)?,
                cmp.flipped(),
                self.literal(left)?,
            )),
            (true, true) => Err(self.refuse(
                "a comparison of two columns; a filter compares a column with a literal",
                pos_of(whole),
            )),
            (false, false) => Err(self.refuse(
                "a comparison without a column; a filter compares a column with a literal",
                pos_of(whole),
            )),
        }
    }

    fn is_column(&self, expr: &Expr) -> bool {
        match expr {
            Expr::Nested(inner) => self.is_column(inner),
            Expr::Identifier(ident) => ident.quote_style != Some('"'),
            Expr::CompoundIdentifier(_) => true,
            _ => false,
        }
    }

    fn column(&self, expr: &Expr) -> Result<Col, RowFilterError> {
        match expr {
            Expr::Nested(inner) => self.column(inner),
            Expr::Identifier(ident) if ident.quote_style != Some('"') => Ok(Col {
                name: ident.value.clone(),
                at: ident_pos(ident),
            }),
            Expr::CompoundIdentifier(parts) => Err(self.refuse(
                format!(
                    "`{}`: nested fields are not filtered on; name a top-level column",
                    parts
                        .iter()
                        .map(|p| p.value.as_str())
                        .collect::<Vec<_>>()
                        .join(".")
                ),
                pos_of(expr),
            )),
            other => Err(self.refuse(
                format!("expected a column but found `{other}`"),
                pos_of(other),
            )),
        }
    }

    fn literal(&self, expr: &Expr) -> Result<Lit, RowFilterError> {
        let at = pos_of(expr);
        let value = match expr {
            Expr::Nested(inner) => return self.literal(inner),
            Expr::Value(v) => match &v.value {
                Value::Null => Literal::Null,
                Value::Boolean(b) => Literal::Bool(*b),
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => {
                    Literal::Str(s.clone())
                }
                Value::Number(n, _) => number(n, false).ok_or_else(|| {
                    self.refuse(format!("`{n}` is not a number a filter reads"), at)
                })?,
                other => {
                    return Err(self.refuse(format!("the literal {other} is not supported"), at))
                }
            },
            // Spark reads a double-quoted text as a string.
            Expr::Identifier(ident) if ident.quote_style == Some('"') => {
                Literal::Str(ident.value.clone())
            }
            Expr::UnaryOp {
                op: op @ (UnaryOperator::Minus | UnaryOperator::Plus),
                expr: inner,
            } => match inner.as_ref() {
                Expr::Value(v) => match &v.value {
                    Value::Number(n, _) => {
                        number(n, *op == UnaryOperator::Minus).ok_or_else(|| {
                            self.refuse(format!("`{n}` is not a number a filter reads"), at)
                        })?
                    }
                    _ => return Err(self.refuse("a sign before what is not a number", at)),
                },
                _ => return Err(self.refuse("a sign before what is not a number", at)),
            },
            Expr::TypedString(typed) => {
                let Some(text) = typed.value.value.clone().into_string() else {
                    return Err(self.refuse("a typed literal without a string", at));
                };
                match &typed.data_type {
                    SqlType::Date => Literal::Date(parse_date(&text).ok_or_else(|| {
                        self.refuse(format!("DATE '{text}' is no date (YYYY-MM-DD)"), at)
                    })?),
                    SqlType::Timestamp(..) | SqlType::Datetime(_) => {
                        Literal::Timestamp(parse_timestamp(&text).ok_or_else(|| {
                            self.refuse(
                                format!(
                                    "TIMESTAMP '{text}' is no timestamp (YYYY-MM-DD[ HH:MM:SS[.ffffff]])"
                                ),
                                at,
                            )
                        })?)
                    }
                    other => {
                        return Err(self.refuse(
                            format!("{other} literals are not supported (DATE and TIMESTAMP are)"),
                            at,
                        ))
                    }
                }
            }
            other => return Err(self.refuse(format!("expected a literal but found `{other}`"), at)),
        };
        Ok(Lit { value, at })
    }
}

/// A number as Spark types its literal: an integer, an exact decimal when
/// it has a point, a double when it has an exponent.
/// A number in a string, as a literal of its own.
pub(crate) fn parse_number(text: &str) -> Option<Literal> {
    match text.strip_prefix('-') {
        Some(rest) => number(rest, true),
        None => number(text, false),
    }
}

fn number(text: &str, negative: bool) -> Option<Literal> {
    let sign = if negative { -1 } else { 1 };
    if text.contains(['e', 'E']) {
        let x: f64 = text.parse().ok()?;
        return Some(Literal::Float(x * sign as f64));
    }
    match text.split_once('.') {
        None => text.parse::<i128>().ok().map(|i| Literal::Int(i * sign)),
        Some((int, frac)) => {
            let digits: i128 = format!("{int}{frac}").parse().ok()?;
            Some(Literal::Decimal(digits * sign, frac.len() as u32))
        }
    }
}

/// Days since the epoch of `YYYY-MM-DD`.
pub(crate) fn parse_date(text: &str) -> Option<i32> {
    let date = chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d").ok()?;
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?;
    i32::try_from((date - epoch).num_days()).ok()
}

/// Microseconds since the epoch of a timestamp read in UTC (the session
/// time zone): `YYYY-MM-DD`, `YYYY-MM-DD HH:MM[:SS[.f]]` (or with `T`), or
/// RFC 3339 with its own offset.
pub(crate) fn parse_timestamp(text: &str) -> Option<i64> {
    let text = text.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp_micros());
    }
    for format in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(text, format) {
            return Some(t.and_utc().timestamp_micros());
        }
    }
    let days = parse_date(text)?;
    Some(i64::from(days) * 86_400_000_000)
}
