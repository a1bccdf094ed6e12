//! Partition filters (`--where`): a boolean expression over partition
//! columns, evaluated on each partition's values before anything is read.
//! `=`, `!=` (`<>`), `<`, `<=`, `>`, `>=`, `[NOT] IN (...)`, `IS [NOT] NULL`,
//! `AND`, `OR`, `NOT`, parentheses; string (`'x'`), number and date
//! (`DATE '2026-11-01'`, or a string compared with a date column) literals,
//! each typed by the partition column it is compared with. Comparisons with
//! a null value are unknown (SQL's three-valued logic): a partition is kept
//! only when the whole filter is true.

use std::cmp::Ordering;
use std::fmt;

use arrow::datatypes::{DataType, Field};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A parsed `--where` expression.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionFilter {
    text: String,
    expr: Expr,
}

/// Why a `--where` expression was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FilterError {
    /// The expression does not parse.
    #[error("invalid --where `{text}`: {reason}")]
    Syntax {
        /// The expression.
        text: String,
        /// What is wrong, and where.
        reason: String,
    },
    /// A column that is no partition column.
    #[error("--where filters partitions, and `{column}` is not a partition column ({}); row filters are not partition pruning", partition_list(.partitions))]
    NotPartition {
        /// The column named.
        column: String,
        /// The partition columns there are.
        partitions: Vec<String>,
    },
    /// A literal that is no value of its column's type.
    #[error("--where compares `{column}` ({ty}) with {literal}, which is not a {ty}")]
    Type {
        /// The column.
        column: String,
        /// Its type.
        ty: String,
        /// The literal as written.
        literal: String,
    },
}

fn partition_list(names: &[String]) -> String {
    if names.is_empty() {
        "the source has no partition columns".to_string()
    } else {
        format!("partition columns: {}", names.join(", "))
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Compare(String, Op, Literal),
    In(String, Vec<Literal>, bool),
    IsNull(String, bool),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Literal {
    Str(String),
    Num(String),
    Date(String),
    Bool(bool),
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Str(s) => write!(f, "'{s}'"),
            Literal::Num(n) => f.write_str(n),
            Literal::Date(d) => write!(f, "DATE '{d}'"),
            Literal::Bool(b) => write!(f, "{b}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Num(String),
    Op(&'static str),
    LParen,
    RParen,
    Comma,
}

impl PartitionFilter {
    /// Parses a `--where` expression.
    pub fn parse(text: &str) -> Result<PartitionFilter, FilterError> {
        let syntax = |reason: String| FilterError::Syntax {
            text: text.to_string(),
            reason,
        };
        let tokens = tokenize(text).map_err(syntax)?;
        let mut parser = Parser { tokens, at: 0 };
        let expr = parser.or().map_err(syntax)?;
        if let Some(t) = parser.tokens.get(parser.at) {
            return Err(syntax(format!(
                "unexpected {} after the expression",
                show(t)
            )));
        }
        Ok(PartitionFilter {
            text: text.to_string(),
            expr,
        })
    }

    /// The expression as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Checks that every column named is one of `fields` (the partition
    /// columns) and every literal fits its column's type.
    pub fn check(&self, fields: &[Field]) -> Result<(), FilterError> {
        check(&self.expr, fields)
    }

    /// The columns the expression names, each once, in order of appearance.
    pub fn columns(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut stack = vec![&self.expr];
        while let Some(expr) = stack.pop() {
            match expr {
                Expr::And(a, b) | Expr::Or(a, b) => {
                    stack.push(b);
                    stack.push(a);
                }
                Expr::Not(a) => stack.push(a),
                Expr::Compare(name, _, _) | Expr::In(name, _, _) | Expr::IsNull(name, _) => {
                    if !out.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                        out.push(name.clone());
                    }
                }
            }
        }
        out
    }

    /// Whether a partition with these values (aligned with `fields`, `None`
    /// for null) is kept. Call [`PartitionFilter::check`] first.
    pub fn matches(&self, fields: &[Field], values: &[Option<String>]) -> bool {
        eval(&self.expr, fields, values) == Some(true)
    }

    /// Whether a directory whose partition columns so far are `fields`
    /// (values aligned, `None` for null) may hold a partition this filter
    /// keeps: false only when a conjunct of the filter's top-level `AND`
    /// that names no other column is not true there.
    pub fn may_match_known(&self, fields: &[Field], values: &[Option<String>]) -> bool {
        let mut conjuncts = vec![&self.expr];
        while let Some(expr) = conjuncts.pop() {
            if let Expr::And(a, b) = expr {
                conjuncts.push(a);
                conjuncts.push(b);
                continue;
            }
            let known = named(expr).iter().all(|name| column(fields, name).is_ok());
            if known && eval(expr, fields, values) != Some(true) {
                return false;
            }
        }
        true
    }
}

impl Serialize for PartitionFilter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for PartitionFilter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        PartitionFilter::parse(&text).map_err(serde::de::Error::custom)
    }
}

fn show(t: &Token) -> String {
    match t {
        Token::Ident(s) => format!("`{s}`"),
        Token::Str(s) => format!("'{s}'"),
        Token::Num(n) => n.clone(),
        Token::Op(o) => format!("`{o}`"),
        Token::LParen => "`(`".to_string(),
        Token::RParen => "`)`".to_string(),
        Token::Comma => "`,`".to_string(),
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '(' => {
                out.push(Token::LParen);
                i += 1;
            }
            ')' => {
                out.push(Token::RParen);
                i += 1;
            }
            ',' => {
                out.push(Token::Comma);
                i += 1;
            }
            '\'' | '"' => {
                let quote = c;
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => {
                            return Err(format!("a string opened with {quote} is never closed"))
                        }
                        Some(&q) if q == quote && chars.get(i + 1) == Some(&quote) => {
                            s.push(quote);
                            i += 2;
                        }
                        Some(&q) if q == quote => {
                            i += 1;
                            break;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                out.push(Token::Str(s));
            }
            '`' => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|&ch| ch == '`')
                    .ok_or("a name opened with ` is never closed")?;
                out.push(Token::Ident(chars[i + 1..i + 1 + end].iter().collect()));
                i += end + 2;
            }
            '=' => {
                out.push(Token::Op("="));
                i += if chars.get(i + 1) == Some(&'=') { 2 } else { 1 };
            }
            '!' if chars.get(i + 1) == Some(&'=') => {
                out.push(Token::Op("!="));
                i += 2;
            }
            '<' | '>' => {
                let next = chars.get(i + 1);
                let op = match (c, next) {
                    ('<', Some('=')) => "<=",
                    ('<', Some('>')) => "!=",
                    ('>', Some('=')) => ">=",
                    ('<', _) => "<",
                    _ => ">",
                };
                i += if next == Some(&'=') || (c == '<' && next == Some(&'>')) {
                    2
                } else {
                    1
                };
                out.push(Token::Op(op));
            }
            c if c.is_ascii_digit()
                || ((c == '-' || c == '.')
                    && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) =>
            {
                let start = i;
                i += 1;
                while chars
                    .get(i)
                    .is_some_and(|d| d.is_ascii_digit() || *d == '.' || *d == 'e' || *d == 'E')
                {
                    i += 1;
                }
                out.push(Token::Num(chars[start..i].iter().collect()));
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while chars
                    .get(i)
                    .is_some_and(|d| d.is_alphanumeric() || *d == '_')
                {
                    i += 1;
                }
                out.push(Token::Ident(chars[start..i].iter().collect()));
            }
            other => return Err(format!("unexpected character `{other}` at position {i}")),
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn keyword(&mut self, word: &str) -> bool {
        match self.peek() {
            Some(Token::Ident(w)) if w.eq_ignore_ascii_case(word) => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    fn expect(&mut self, want: Token) -> Result<(), String> {
        match self.peek() {
            Some(t) if *t == want => {
                self.at += 1;
                Ok(())
            }
            Some(t) => Err(format!("expected {} but found {}", show(&want), show(t))),
            None => Err(format!("expected {} at the end", show(&want))),
        }
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut left = self.and()?;
        while self.keyword("OR") {
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut left = self.not()?;
        while self.keyword("AND") {
            left = Expr::And(Box::new(left), Box::new(self.not()?));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Expr, String> {
        if self.keyword("NOT") {
            return Ok(Expr::Not(Box::new(self.not()?)));
        }
        if self.peek() == Some(&Token::LParen) {
            self.at += 1;
            let inner = self.or()?;
            self.expect(Token::RParen)?;
            return Ok(inner);
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, String> {
        let column = match self.peek().cloned() {
            Some(Token::Ident(name)) if !is_keyword(&name) => {
                self.at += 1;
                name
            }
            Some(t) => {
                return Err(format!(
                    "expected a partition column but found {}",
                    show(&t)
                ))
            }
            None => return Err("expected a partition column at the end".to_string()),
        };
        if self.keyword("IS") {
            let negated = self.keyword("NOT");
            if !self.keyword("NULL") {
                return Err(format!("expected NULL after `{column} IS`"));
            }
            return Ok(Expr::IsNull(column, negated));
        }
        let negated = self.keyword("NOT");
        if self.keyword("IN") {
            self.expect(Token::LParen)?;
            let mut list = vec![self.literal()?];
            while self.peek() == Some(&Token::Comma) {
                self.at += 1;
                list.push(self.literal()?);
            }
            self.expect(Token::RParen)?;
            return Ok(Expr::In(column, list, negated));
        }
        if negated {
            return Err(format!("expected IN after `{column} NOT`"));
        }
        let op = match self.peek() {
            Some(Token::Op(o)) => match *o {
                "=" => Op::Eq,
                "!=" => Op::Ne,
                "<" => Op::Lt,
                "<=" => Op::Le,
                ">" => Op::Gt,
                _ => Op::Ge,
            },
            Some(t) => {
                return Err(format!(
                    "expected a comparison after `{column}` but found {}",
                    show(t)
                ))
            }
            None => return Err(format!("expected a comparison after `{column}`")),
        };
        self.at += 1;
        Ok(Expr::Compare(column, op, self.literal()?))
    }

    fn literal(&mut self) -> Result<Literal, String> {
        let token = self.peek().cloned();
        self.at += 1;
        match token {
            Some(Token::Str(s)) => Ok(Literal::Str(s)),
            Some(Token::Num(n)) => Ok(Literal::Num(n)),
            Some(Token::Ident(w)) if w.eq_ignore_ascii_case("DATE") => match self.peek().cloned() {
                Some(Token::Str(s)) => {
                    self.at += 1;
                    Ok(Literal::Date(s))
                }
                _ => Err("expected a string after DATE ('2026-11-01')".to_string()),
            },
            Some(Token::Ident(w)) if w.eq_ignore_ascii_case("true") => Ok(Literal::Bool(true)),
            Some(Token::Ident(w)) if w.eq_ignore_ascii_case("false") => Ok(Literal::Bool(false)),
            Some(t) => Err(format!(
                "expected a literal ('text', 12, DATE '2026-11-01') but found {}",
                show(&t)
            )),
            None => Err("expected a literal at the end".to_string()),
        }
    }
}

fn is_keyword(word: &str) -> bool {
    ["AND", "OR", "NOT", "IN", "IS", "NULL"]
        .iter()
        .any(|k| k.eq_ignore_ascii_case(word))
}

/// A partition value or literal as its column's type.
#[derive(Debug, PartialEq, PartialOrd)]
enum Typed {
    Int(i128),
    Float(f64),
    Date(chrono::NaiveDate),
    Bool(bool),
    Str(String),
}

fn typed(ty: &DataType, text: &str) -> Option<Typed> {
    let text = text.trim();
    match ty {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => text.parse().ok().map(Typed::Int),
        DataType::Float32
        | DataType::Float64
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => text.parse().ok().map(Typed::Float),
        DataType::Date32 | DataType::Date64 => chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .ok()
            .map(Typed::Date),
        DataType::Boolean => text.parse().ok().map(Typed::Bool),
        _ => Some(Typed::Str(text.to_string())),
    }
}

fn literal_text(literal: &Literal) -> String {
    match literal {
        Literal::Str(s) | Literal::Num(s) | Literal::Date(s) => s.clone(),
        Literal::Bool(b) => b.to_string(),
    }
}

/// A literal as the type of `field`; an integer column compared with a
/// fractional number compares as floating point.
fn typed_literal(field: &Field, literal: &Literal) -> Option<Typed> {
    let text = literal_text(literal);
    match (field.data_type(), typed(field.data_type(), &text)) {
        (_, Some(t)) => Some(t),
        (DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64, None) => {
            text.parse().ok().map(Typed::Float)
        }
        _ => None,
    }
}

fn column<'a>(fields: &'a [Field], name: &str) -> Result<(usize, &'a Field), FilterError> {
    fields
        .iter()
        .enumerate()
        .find(|(_, f)| f.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| FilterError::NotPartition {
            column: name.to_string(),
            partitions: fields.iter().map(|f| f.name().clone()).collect(),
        })
}

fn check(expr: &Expr, fields: &[Field]) -> Result<(), FilterError> {
    let fits = |name: &str, literal: &Literal| -> Result<(), FilterError> {
        let (_, field) = column(fields, name)?;
        match typed_literal(field, literal) {
            Some(_) => Ok(()),
            None => Err(FilterError::Type {
                column: field.name().clone(),
                ty: field.data_type().to_string(),
                literal: literal.to_string(),
            }),
        }
    };
    match expr {
        Expr::And(a, b) | Expr::Or(a, b) => {
            check(a, fields)?;
            check(b, fields)
        }
        Expr::Not(a) => check(a, fields),
        Expr::Compare(name, _, literal) => fits(name, literal),
        Expr::In(name, list, _) => list.iter().try_for_each(|l| fits(name, l)),
        Expr::IsNull(name, _) => column(fields, name).map(drop),
    }
}

/// The columns `expr` names.
fn named(expr: &Expr) -> Vec<&str> {
    match expr {
        Expr::And(a, b) | Expr::Or(a, b) => {
            let mut out = named(a);
            out.extend(named(b));
            out
        }
        Expr::Not(a) => named(a),
        Expr::Compare(name, _, _) | Expr::In(name, _, _) | Expr::IsNull(name, _) => vec![name],
    }
}

fn compare(
    fields: &[Field],
    values: &[Option<String>],
    name: &str,
    literal: &Literal,
) -> Option<Ordering> {
    let (i, field) = column(fields, name).ok()?;
    let value = values.get(i)?.as_deref()?;
    let want = typed_literal(field, literal)?;
    let have = match (&want, typed(field.data_type(), value)?) {
        (Typed::Float(_), Typed::Int(v)) => Typed::Float(v as f64),
        (_, have) => have,
    };
    have.partial_cmp(&want)
}

fn eval(expr: &Expr, fields: &[Field], values: &[Option<String>]) -> Option<bool> {
    match expr {
        Expr::And(a, b) => match (eval(a, fields, values), eval(b, fields, values)) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
        Expr::Or(a, b) => match (eval(a, fields, values), eval(b, fields, values)) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
        Expr::Not(a) => eval(a, fields, values).map(|v| !v),
        Expr::Compare(name, op, literal) => {
            let ord = compare(fields, values, name, literal)?;
            Some(match op {
                Op::Eq => ord == Ordering::Equal,
                Op::Ne => ord != Ordering::Equal,
                Op::Lt => ord == Ordering::Less,
                Op::Le => ord != Ordering::Greater,
                Op::Gt => ord == Ordering::Greater,
                Op::Ge => ord != Ordering::Less,
            })
        }
        Expr::In(name, list, negated) => {
            let mut unknown = false;
            for literal in list {
                match compare(fields, values, name, literal) {
                    Some(Ordering::Equal) => return Some(!negated),
                    Some(_) => {}
                    None => unknown = true,
                }
            }
            (!unknown).then_some(*negated)
        }
        Expr::IsNull(name, negated) => {
            let (i, _) = column(fields, name).ok()?;
            let null = values.get(i).is_none_or(|v| v.is_none());
            Some(null != *negated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Vec<Field> {
        vec![
            Field::new("dt", DataType::Date32, true),
            Field::new("hour", DataType::Int32, true),
            Field::new("country", DataType::Utf8, true),
        ]
    }

    fn keeps(text: &str, values: [Option<&str>; 3]) -> bool {
        let filter = PartitionFilter::parse(text).expect("parses");
        filter.check(&fields()).expect("checks");
        let values: Vec<Option<String>> = values.iter().map(|v| v.map(String::from)).collect();
        filter.matches(&fields(), &values)
    }

    #[test]
    fn comparisons_are_typed_by_the_column() {
        let p = [Some("2026-11-02"), Some("9"), Some("DE")];
        assert!(keeps("dt >= '2026-11-02'", p));
        assert!(keeps("dt = DATE '2026-11-02'", p));
        assert!(!keeps("dt > '2026-11-02'", p));
        // 9 < 10 as numbers, though "9" > "10" as strings.
        assert!(keeps("hour < 10", p));
        assert!(keeps("hour IN (1, 9)", p));
        assert!(keeps("hour NOT IN (1, 2)", p));
        assert!(keeps("country = 'DE' AND NOT (hour = 3 OR hour <> 9)", p));
        assert!(keeps("hour = 9.0", p));
        assert!(keeps("hour != 8", p));
    }

    #[test]
    fn null_partitions_match_only_is_null() {
        let p = [Some("2026-11-02"), None, Some("DE")];
        assert!(!keeps("hour = 9", p));
        assert!(!keeps("NOT hour = 9", p));
        assert!(keeps("hour IS NULL", p));
        assert!(keeps("hour IS NULL OR hour = 1", p));
        assert!(!keeps("hour IS NOT NULL", p));
    }

    #[test]
    fn other_columns_and_misfit_literals_are_refused_by_name() {
        let filter = PartitionFilter::parse("n > 3 AND dt = '2026-11-01'").expect("parses");
        let err = filter
            .check(&fields())
            .expect_err("n is no partition column");
        assert!(
            err.to_string().contains("`n` is not a partition column"),
            "{err}"
        );
        assert!(err.to_string().contains("dt, hour, country"), "{err}");
        let filter = PartitionFilter::parse("hour = 'noon'").expect("parses");
        let err = filter.check(&fields()).expect_err("noon is no int");
        assert!(err.to_string().contains("`hour`"), "{err}");
    }

    #[test]
    fn columns_are_named_once_in_order() {
        let filter = PartitionFilter::parse("(b = 1 OR a IN (2)) AND NOT b IS NULL AND c < 3")
            .expect("parses");
        assert_eq!(filter.columns(), ["b", "a", "c"]);
    }

    #[test]
    fn syntax_errors_say_what_was_expected() {
        for bad in [
            "dt >",
            "dt = 'x",
            "(dt = 1",
            "dt = 1 extra",
            "= 3",
            "dt NOT 3",
        ] {
            let err = PartitionFilter::parse(bad).expect_err(bad);
            assert!(err.to_string().starts_with("invalid --where"), "{err}");
        }
    }
}
