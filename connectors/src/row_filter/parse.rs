//! From the text to our tree, by Spark SQL's grammar for a boolean
//! expression (`booleanExpression` in Spark's `SqlBaseParser.g4`): `OR` below
//! `AND` below `NOT`, then one predicate (`BETWEEN`, `IN`, `LIKE`, `ILIKE`,
//! `RLIKE`, `IS …`) on a value expression, whose operators bind as Spark's
//! do (comparisons, `|`, `^`, `&`, `+ - ||`, `* / % DIV`, unary signs).
//!
//! `AND` and `OR` chains become one node with a list of operands, and `IN`
//! one node with its list, so a chain of ten thousand terms or a list of a
//! hundred thousand values is a flat vector: nothing in parsing, binding,
//! pruning or evaluation recurses once per term. Only parentheses and calls
//! nest, to at most [`MAX_DEPTH`] levels.

use chrono::NaiveDateTime;

use super::lex::{lex, Tok, Token};
use super::tz::SessionTz;
use super::{Pos, RowFilterError};

/// How deeply parentheses, calls and `NOT`s may nest.
pub(crate) const MAX_DEPTH: usize = 64;

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
    pub(crate) fn flipped(self) -> Op {
        match self {
            Op::Lt => Op::Gt,
            Op::Le => Op::Ge,
            Op::Gt => Op::Lt,
            Op::Ge => Op::Le,
            other => other,
        }
    }
}

/// A comparison as written: one of [`Op`], or null-safe equality (`<=>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Plain(Op),
    NullSafeEq,
}

/// An arithmetic or bitwise operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    /// `DIV`: integral division.
    IntDiv,
    /// `||`: string concatenation.
    Concat,
    BitAnd,
    BitOr,
    BitXor,
}

impl Arith {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            Arith::Add => "+",
            Arith::Sub => "-",
            Arith::Mul => "*",
            Arith::Div => "/",
            Arith::Rem => "%",
            Arith::IntDiv => "DIV",
            Arith::Concat => "||",
            Arith::BitAnd => "&",
            Arith::BitOr => "|",
            Arith::BitXor => "^",
        }
    }
}

/// Which pattern match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LikeKind {
    Like,
    ILike,
    RLike,
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
    /// An integer without a suffix: an `int` where it fits, else a `bigint`,
    /// else a `decimal(38,0)`.
    Int(i128),
    /// An integer with a suffix: `7Y` tinyint (8 bits), `7S` smallint (16),
    /// `7L` bigint (64).
    SizedInt(i128, u8),
    /// An exact decimal: unscaled digits and scale (`1.50` is `(150, 2)`).
    Decimal(i128, u32),
    /// A number with an exponent (`1e3`) or `D`: a double, as in Spark.
    Float(f64),
    /// `1.5F`: a float.
    Float32(f32),
    /// `X'0AFF'`.
    Bytes(Vec<u8>),
    /// `DATE '2026-11-01'`: days since the epoch.
    Date(i32),
    /// `TIMESTAMP '2026-11-01 10:00:00'`: its text (a valid timestamp),
    /// read in the session time zone when bound.
    Timestamp(String),
}

impl std::fmt::Display for Literal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(b) => write!(f, "{b}"),
            Literal::Str(s) => write!(f, "'{s}'"),
            Literal::Int(i) | Literal::SizedInt(i, _) => write!(f, "{i}"),
            Literal::Decimal(d, s) => {
                let text = d.unsigned_abs().to_string();
                let s = *s as usize;
                let padded = format!("{text:0>width$}", width = s + 1);
                let (int, frac) = padded.split_at(padded.len() - s);
                let sign = if *d < 0 { "-" } else { "" };
                write!(f, "{sign}{int}.{frac}")
            }
            Literal::Float(x) => write!(f, "{x:e}"),
            Literal::Float32(x) => write!(f, "{x:e}F"),
            Literal::Bytes(b) => write!(f, "X'{}'", hex(b)),
            Literal::Date(d) => write!(f, "DATE {d}"),
            Literal::Timestamp(t) => write!(f, "TIMESTAMP '{t}'"),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// A type named in `CAST(x AS type)`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TypeName {
    /// Lower case (`int`, `decimal`, `timestamp`).
    pub name: String,
    /// Its parameters (`decimal(10, 2)`).
    pub params: Vec<u32>,
    pub at: Pos,
}

/// The parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Column(Col),
    Lit(Lit),
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
    /// `-x`, `+x` (no change) and `~x`.
    Neg(Box<Node>, Pos),
    BitNot(Box<Node>, Pos),
    Arith(Box<Node>, Arith, Box<Node>, Pos),
    Cmp(Box<Node>, CmpOp, Box<Node>, Pos),
    In(Box<Node>, Vec<Node>, bool, Pos),
    Between(Box<Node>, Box<Node>, Box<Node>, bool, Pos),
    Like {
        expr: Box<Node>,
        pattern: Box<Node>,
        escape: Option<char>,
        kind: LikeKind,
        negated: bool,
        at: Pos,
    },
    IsNull(Box<Node>, bool, Pos),
    /// `x IS [NOT] TRUE | FALSE | UNKNOWN` (`None` for unknown).
    IsBool(Box<Node>, Option<bool>, bool, Pos),
    /// `x IS [NOT] DISTINCT FROM y`.
    Distinct(Box<Node>, Box<Node>, bool, Pos),
    Case {
        operand: Option<Box<Node>>,
        arms: Vec<(Node, Node)>,
        otherwise: Option<Box<Node>>,
        at: Pos,
    },
    Cast(Box<Node>, TypeName, bool, Pos),
    /// A function call, its name in lower case.
    Call(String, Vec<Node>, Pos),
}

impl Node {
    /// The columns named, each once, in order of appearance.
    pub(crate) fn columns(&self, out: &mut Vec<String>) {
        let mut stack = vec![self];
        while let Some(node) = stack.pop() {
            let mut children: Vec<&Node> = Vec::new();
            match node {
                Node::Column(c) => {
                    if !out.iter().any(|n| n == &c.name) {
                        out.push(c.name.clone());
                    }
                }
                Node::Lit(_) => {}
                Node::And(list) | Node::Or(list) | Node::Call(_, list, _) => {
                    children.extend(list.iter())
                }
                Node::Not(a) | Node::Neg(a, _) | Node::BitNot(a, _) => children.push(a),
                Node::IsNull(a, ..) | Node::IsBool(a, ..) | Node::Cast(a, ..) => children.push(a),
                Node::Arith(a, _, b, _) | Node::Cmp(a, _, b, _) | Node::Distinct(a, b, ..) => {
                    children.extend([a.as_ref(), b.as_ref()])
                }
                Node::In(a, list, ..) => {
                    children.push(a);
                    children.extend(list.iter());
                }
                Node::Between(a, b, c, ..) => children.extend([a.as_ref(), b.as_ref(), c.as_ref()]),
                Node::Like { expr, pattern, .. } => {
                    children.extend([expr.as_ref(), pattern.as_ref()])
                }
                Node::Case {
                    operand,
                    arms,
                    otherwise,
                    ..
                } => {
                    children.extend(operand.as_deref());
                    for (w, t) in arms {
                        children.extend([w, t]);
                    }
                    children.extend(otherwise.as_deref());
                }
            }
            stack.extend(children.into_iter().rev());
        }
    }

    /// Where the node starts.
    pub(crate) fn pos(&self) -> Pos {
        match self {
            Node::Column(c) => c.at,
            Node::Lit(l) => l.at,
            Node::And(list) | Node::Or(list) => list.first().map(Node::pos).unwrap_or_default(),
            Node::Not(a) => a.pos(),
            Node::Neg(_, at)
            | Node::BitNot(_, at)
            | Node::Arith(.., at)
            | Node::Cmp(.., at)
            | Node::In(.., at)
            | Node::Between(.., at)
            | Node::Like { at, .. }
            | Node::IsNull(.., at)
            | Node::IsBool(.., at)
            | Node::Distinct(.., at)
            | Node::Case { at, .. }
            | Node::Cast(.., at)
            | Node::Call(.., at) => *at,
        }
    }
}

/// Words that end or continue an expression where a name could stand;
/// anywhere else, Spark takes them as names (`user`, `date`, `order` are
/// columns as any other).
const STOP_WORDS: [&str; 16] = [
    "AND", "OR", "NOT", "IN", "IS", "LIKE", "ILIKE", "RLIKE", "REGEXP", "BETWEEN", "DIV", "ESCAPE",
    "WHEN", "THEN", "ELSE", "END",
];

/// Parses `text` as one expression.
pub(crate) fn parse(text: &str) -> Result<Node, RowFilterError> {
    if text.trim().is_empty() {
        return Err(RowFilterError::Syntax {
            text: text.to_string(),
            reason: "an empty expression".to_string(),
            at: Pos { line: 1, column: 1 },
        });
    }
    let mut p = Parser::new(text)?;
    let node = p.or()?;
    p.finish("the expression")?;
    Ok(node)
}

/// An item of a column list: an expression, its name when given (`AS
/// name`, or a name right after it), and its text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SelectItem {
    pub node: Node,
    pub alias: Option<String>,
    pub text: String,
}

/// Parses a comma-separated list of expressions, each with an optional name
/// (`label, hash(user) % 1000 AS user_bucket`).
pub(crate) fn parse_select(text: &str) -> Result<Vec<SelectItem>, RowFilterError> {
    let mut p = Parser::new(text)?;
    let mut items = Vec::new();
    loop {
        let start = p.peek().offset;
        let node = p.or()?;
        let end = p.peek().offset;
        let alias = if p.eat_word("AS") {
            let t = p.next();
            match t.kind {
                Tok::Word(w) | Tok::Quoted(w) => Some(w),
                other => {
                    return Err(p.error(format!("expected a name after AS but found {other}"), t.at))
                }
            }
        } else {
            match &p.peek().kind {
                Tok::Quoted(w) => {
                    let w = w.clone();
                    p.next();
                    Some(w)
                }
                Tok::Word(w) if !STOP_WORDS.contains(&w.to_ascii_uppercase().as_str()) => {
                    let w = w.clone();
                    p.next();
                    Some(w)
                }
                _ => None,
            }
        };
        items.push(SelectItem {
            node,
            alias,
            text: text[start..end].trim().to_string(),
        });
        if !p.eat_sym(",") {
            break;
        }
    }
    p.finish("the column list")?;
    Ok(items)
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    i: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Result<Parser<'a>, RowFilterError> {
        Ok(Parser {
            text,
            tokens: lex(text)?,
            i: 0,
            depth: 0,
        })
    }

    /// Fails unless every token was taken (`what` was all the text).
    fn finish(&self, what: &str) -> Result<(), RowFilterError> {
        let next = self.peek();
        if next.kind == Tok::End {
            return Ok(());
        }
        Err(self.error(format!("unexpected {} after {what}", next.kind), next.at))
    }

    fn peek(&self) -> &Token {
        self.peek_at(0)
    }

    fn peek_at(&self, ahead: usize) -> &Token {
        let last = self.tokens.len() - 1;
        &self.tokens[(self.i + ahead).min(last)]
    }

    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if self.i < self.tokens.len() - 1 {
            self.i += 1;
        }
        t
    }

    fn error(&self, reason: String, at: Pos) -> RowFilterError {
        RowFilterError::Syntax {
            text: self.text.to_string(),
            reason,
            at,
        }
    }

    /// Whether the next token is the keyword `word` (any case).
    fn at_word(&self, word: &str) -> bool {
        self.word_at(0, word)
    }

    fn word_at(&self, ahead: usize, word: &str) -> bool {
        matches!(&self.peek_at(ahead).kind, Tok::Word(w) if w.eq_ignore_ascii_case(word))
    }

    fn eat_word(&mut self, word: &str) -> bool {
        let yes = self.at_word(word);
        if yes {
            self.next();
        }
        yes
    }

    fn at_sym(&self, sym: &str) -> bool {
        matches!(&self.peek().kind, Tok::Sym(s) if *s == sym)
    }

    fn eat_sym(&mut self, sym: &str) -> bool {
        let yes = self.at_sym(sym);
        if yes {
            self.next();
        }
        yes
    }

    fn expect_sym(&mut self, sym: &str) -> Result<(), RowFilterError> {
        if self.eat_sym(sym) {
            return Ok(());
        }
        let t = self.peek();
        Err(self.error(format!("expected `{sym}` but found {}", t.kind), t.at))
    }

    fn expect_word(&mut self, word: &str) -> Result<(), RowFilterError> {
        if self.eat_word(word) {
            return Ok(());
        }
        let t = self.peek();
        Err(self.error(format!("expected {word} but found {}", t.kind), t.at))
    }

    fn deeper(&mut self, at: Pos) -> Result<(), RowFilterError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(
                format!("the expression nests more than {MAX_DEPTH} levels deep"),
                at,
            ));
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Node, RowFilterError> {
        let mut terms = vec![self.and()?];
        while self.eat_word("OR") {
            terms.push(self.and()?);
        }
        Ok(flatten(terms, true))
    }

    fn and(&mut self) -> Result<Node, RowFilterError> {
        let mut terms = vec![self.not()?];
        while self.eat_word("AND") {
            terms.push(self.not()?);
        }
        Ok(flatten(terms, false))
    }

    fn not(&mut self) -> Result<Node, RowFilterError> {
        let mut nots = 0;
        while self.at_word("NOT") || self.at_sym("!") {
            let at = self.next().at;
            self.deeper(at)?;
            nots += 1;
        }
        let mut node = self.predicate()?;
        for _ in 0..nots {
            node = Node::Not(Box::new(node));
            self.depth -= 1;
        }
        Ok(node)
    }

    /// A value expression and at most one predicate on it.
    fn predicate(&mut self) -> Result<Node, RowFilterError> {
        let left = self.value(0)?;
        let at = left.pos();
        if self.eat_word("IS") {
            return self.is_predicate(left, at);
        }
        let negated = if self.at_word("NOT")
            && ["IN", "BETWEEN", "LIKE", "ILIKE", "RLIKE", "REGEXP"]
                .iter()
                .any(|w| self.word_at(1, w))
        {
            self.next();
            true
        } else {
            false
        };
        if self.eat_word("IN") {
            return self.in_list(left, negated, at);
        }
        if self.eat_word("BETWEEN") {
            let low = self.value(0)?;
            self.expect_word("AND")?;
            let high = self.value(0)?;
            return Ok(Node::Between(
                Box::new(left),
                Box::new(low),
                Box::new(high),
                negated,
                at,
            ));
        }
        let kind = if self.eat_word("LIKE") {
            Some(LikeKind::Like)
        } else if self.eat_word("ILIKE") {
            Some(LikeKind::ILike)
        } else if self.eat_word("RLIKE") || self.eat_word("REGEXP") {
            Some(LikeKind::RLike)
        } else {
            None
        };
        if let Some(kind) = kind {
            if kind != LikeKind::RLike
                && (self.at_word("ANY") || self.at_word("ALL") || self.at_word("SOME"))
            {
                return self.like_quantified(left, kind, negated, at);
            }
            return self.like(left, kind, negated, at);
        }
        if negated {
            let t = self.peek();
            return Err(self.error(
                format!(
                    "expected IN, BETWEEN or LIKE after NOT but found {}",
                    t.kind
                ),
                t.at,
            ));
        }
        Ok(left)
    }

    /// What follows `left IS`: `[NOT] NULL`, `TRUE`, `FALSE`, `UNKNOWN` or
    /// `DISTINCT FROM right`.
    fn is_predicate(&mut self, left: Node, at: Pos) -> Result<Node, RowFilterError> {
        let negated = self.eat_word("NOT");
        let t = self.next();
        let word = match &t.kind {
            Tok::Word(w) => w.to_ascii_uppercase(),
            other => {
                return Err(self.error(
                    format!("expected NULL, TRUE, FALSE, UNKNOWN or DISTINCT FROM after IS but found {other}"),
                    t.at,
                ))
            }
        };
        match word.as_str() {
            "NULL" => Ok(Node::IsNull(Box::new(left), negated, at)),
            "TRUE" => Ok(Node::IsBool(Box::new(left), Some(true), negated, at)),
            "FALSE" => Ok(Node::IsBool(Box::new(left), Some(false), negated, at)),
            "UNKNOWN" => Ok(Node::IsBool(Box::new(left), None, negated, at)),
            "DISTINCT" => {
                self.expect_word("FROM")?;
                let right = self.value(0)?;
                Ok(Node::Distinct(Box::new(left), Box::new(right), negated, at))
            }
            _ => Err(self.error(
                format!(
                    "expected NULL, TRUE, FALSE, UNKNOWN or DISTINCT FROM after IS but found {}",
                    t.kind
                ),
                t.at,
            )),
        }
    }

    /// What follows `left [NOT] IN`: a parenthesized list.
    fn in_list(&mut self, left: Node, negated: bool, at: Pos) -> Result<Node, RowFilterError> {
        self.expect_sym("(")?;
        let mut list = vec![self.or()?];
        while self.eat_sym(",") {
            list.push(self.or()?);
        }
        self.expect_sym(")")?;
        Ok(Node::In(Box::new(left), list, negated, at))
    }

    /// What follows `left [NOT] LIKE` (or `ILIKE`, `RLIKE`) but a quantifier:
    /// the pattern and its `ESCAPE` character.
    fn like(
        &mut self,
        left: Node,
        kind: LikeKind,
        negated: bool,
        at: Pos,
    ) -> Result<Node, RowFilterError> {
        let pattern = self.value(0)?;
        let escape = if kind != LikeKind::RLike && self.eat_word("ESCAPE") {
            let t = self.next();
            match &t.kind {
                Tok::Str(s) if s.chars().count() == 1 => s.chars().next(),
                _ => {
                    return Err(
                        self.error("ESCAPE takes a string of one character".to_string(), t.at)
                    )
                }
            }
        } else {
            None
        };
        Ok(Node::Like {
            expr: Box::new(left),
            pattern: Box::new(pattern),
            escape,
            kind,
            negated,
            at,
        })
    }

    /// Binary operators by precedence climbing: each loop takes a chain of
    /// one level, so a long chain never deepens the stack.
    fn value(&mut self, min: u8) -> Result<Node, RowFilterError> {
        let mut left = self.unary()?;
        loop {
            let Some((prec, op)) = self.binary_op() else {
                return Ok(left);
            };
            if prec < min {
                return Ok(left);
            }
            self.next();
            let at = left.pos();
            let right = self.value(prec + 1)?;
            let l = Box::new(left);
            left = match op {
                Bin::Cmp(c) => Node::Cmp(l, c, Box::new(right), at),
                Bin::Arith(a) => Node::Arith(l, a, Box::new(right), at),
            };
        }
    }

    /// The binary operator next, with its precedence (higher binds tighter).
    fn binary_op(&self) -> Option<(u8, Bin)> {
        use Arith::*;
        let t = &self.peek().kind;
        Some(match t {
            Tok::Sym(s) => match *s {
                "=" | "==" => (1, Bin::Cmp(CmpOp::Plain(Op::Eq))),
                "<>" | "!=" => (1, Bin::Cmp(CmpOp::Plain(Op::Ne))),
                "<" => (1, Bin::Cmp(CmpOp::Plain(Op::Lt))),
                "<=" => (1, Bin::Cmp(CmpOp::Plain(Op::Le))),
                ">" => (1, Bin::Cmp(CmpOp::Plain(Op::Gt))),
                ">=" => (1, Bin::Cmp(CmpOp::Plain(Op::Ge))),
                "<=>" => (1, Bin::Cmp(CmpOp::NullSafeEq)),
                "|" => (2, Bin::Arith(BitOr)),
                "^" => (3, Bin::Arith(BitXor)),
                "&" => (4, Bin::Arith(BitAnd)),
                "+" => (5, Bin::Arith(Add)),
                "-" => (5, Bin::Arith(Sub)),
                "||" => (5, Bin::Arith(Concat)),
                "*" => (6, Bin::Arith(Mul)),
                "/" => (6, Bin::Arith(Div)),
                "%" => (6, Bin::Arith(Rem)),
                _ => return None,
            },
            Tok::Word(w) if w.eq_ignore_ascii_case("DIV") => (6, Bin::Arith(IntDiv)),
            _ => return None,
        })
    }

    fn unary(&mut self) -> Result<Node, RowFilterError> {
        let mut signs = Vec::new();
        while self.at_sym("-") || self.at_sym("+") || self.at_sym("~") {
            let t = self.next();
            self.deeper(t.at)?;
            signs.push(t);
        }
        let mut node = self.primary()?;
        for sign in signs.into_iter().rev() {
            self.depth -= 1;
            node = match (&sign.kind, node) {
                (Tok::Sym("+"), n) => n,
                (Tok::Sym("-"), Node::Lit(lit)) if negatable(&lit.value) => Node::Lit(Lit {
                    value: negate(lit.value),
                    at: sign.at,
                }),
                (Tok::Sym("-"), n) => Node::Neg(Box::new(n), sign.at),
                (_, n) => Node::BitNot(Box::new(n), sign.at),
            };
        }
        Ok(node)
    }

    fn primary(&mut self) -> Result<Node, RowFilterError> {
        let t = self.next();
        let at = t.at;
        let lit = |value| Ok(Node::Lit(Lit { value, at }));
        match t.kind {
            Tok::Str(s) => lit(Literal::Str(s)),
            Tok::Bytes(b) => lit(Literal::Bytes(b)),
            Tok::Number(n) => match number_literal(&n) {
                Some(value) => lit(value),
                None => Err(self.error(format!("`{n}` is not a number Spark reads"), at)),
            },
            Tok::Sym("(") => {
                self.deeper(at)?;
                let inner = self.or()?;
                self.expect_sym(")")?;
                self.depth -= 1;
                Ok(inner)
            }
            Tok::Quoted(name) => self.after_name(name, at),
            Tok::Word(w) => self.word(w, at),
            other => Err(self.error(format!("expected a value but found {other}"), at)),
        }
    }

    /// `x [NOT] LIKE ANY|SOME|ALL (p1, p2, ...)` (and `ILIKE`): the
    /// patterns' matches joined by `OR` (any, some) or `AND` (all), each
    /// negated under `NOT`, which is Spark's `LikeAny`, `LikeAll`,
    /// `NotLikeAny` and `NotLikeAll` with their nulls.
    fn like_quantified(
        &mut self,
        left: Node,
        kind: LikeKind,
        negated: bool,
        at: Pos,
    ) -> Result<Node, RowFilterError> {
        let all = self.eat_word("ALL");
        if !all && !self.eat_word("ANY") {
            self.eat_word("SOME");
        }
        self.expect_sym("(")?;
        if self.at_sym(")") {
            let t = self.peek();
            return Err(self.error("LIKE ANY/ALL takes at least one pattern".to_string(), t.at));
        }
        let mut likes = Vec::new();
        loop {
            let pattern = self.value(0)?;
            likes.push(Node::Like {
                expr: Box::new(left.clone()),
                pattern: Box::new(pattern),
                escape: None,
                kind,
                negated,
                at,
            });
            if !self.eat_sym(",") {
                break;
            }
        }
        self.expect_sym(")")?;
        Ok(if all {
            Node::And(likes)
        } else {
            Node::Or(likes)
        })
    }

    fn word(&mut self, w: String, at: Pos) -> Result<Node, RowFilterError> {
        let lit = |value| Ok(Node::Lit(Lit { value, at }));
        let upper = w.to_ascii_uppercase();
        let next_is_str = matches!(self.peek().kind, Tok::Str(_));
        match upper.as_str() {
            "NULL" => return lit(Literal::Null),
            "TRUE" => return lit(Literal::Bool(true)),
            "FALSE" => return lit(Literal::Bool(false)),
            "DATE" if next_is_str => {
                let Tok::Str(s) = self.next().kind else {
                    unreachable!("checked above")
                };
                return match parse_date(&s) {
                    Some(d) => lit(Literal::Date(d)),
                    None => Err(self.error(format!("DATE '{s}' is no date (YYYY-MM-DD)"), at)),
                };
            }
            "TIMESTAMP" | "TIMESTAMP_LTZ" if next_is_str => {
                let Tok::Str(s) = self.next().kind else {
                    unreachable!("checked above")
                };
                return match parse_timestamp(&s, &SessionTz::Utc) {
                    Some(_) => lit(Literal::Timestamp(s)),
                    None => Err(self.error(
                        format!("TIMESTAMP '{s}' is no timestamp (YYYY-MM-DD[ HH:MM:SS[.ffffff]])"),
                        at,
                    )),
                };
            }
            "CASE" => return self.case(at),
            "CAST" | "TRY_CAST" if self.at_sym("(") => {
                self.next();
                self.deeper(at)?;
                let inner = self.or()?;
                self.expect_word("AS")?;
                let ty = self.type_name()?;
                self.expect_sym(")")?;
                self.depth -= 1;
                return Ok(Node::Cast(Box::new(inner), ty, upper == "TRY_CAST", at));
            }
            "INTERVAL" if next_is_str || matches!(self.peek().kind, Tok::Number(_)) => {
                return Err(self.error("INTERVAL literals are not supported".to_string(), at));
            }
            _ => {}
        }
        if STOP_WORDS.contains(&upper.as_str()) {
            return Err(self.error(
                format!(
                    "expected a value but found the keyword {upper}; a column named so is written `{w}` (in backquotes)"
                ),
                at,
            ));
        }
        if self.at_sym("(") {
            self.next();
            self.deeper(at)?;
            let mut args = Vec::new();
            if !self.at_sym(")") {
                if self.at_word("DISTINCT") {
                    let t = self.peek();
                    return Err(self.error("DISTINCT in a call is not supported".to_string(), t.at));
                }
                args.push(self.call_arg()?);
                while self.eat_sym(",") {
                    args.push(self.call_arg()?);
                }
            }
            self.expect_sym(")")?;
            self.depth -= 1;
            return Ok(Node::Call(w.to_ascii_lowercase(), args, at));
        }
        self.after_name(w, at)
    }

    /// A call's argument; `*` alone (`count(*)`) is refused.
    fn call_arg(&mut self) -> Result<Node, RowFilterError> {
        if self.at_sym("*") {
            let t = self.peek();
            return Err(self.error("`*` is no argument a filter takes".to_string(), t.at));
        }
        self.or()
    }

    /// A column, refusing `a.b` (nested fields).
    fn after_name(&mut self, name: String, at: Pos) -> Result<Node, RowFilterError> {
        if self.at_sym(".") || self.at_sym("[") {
            let mut path = name.clone();
            while self.eat_sym(".") {
                match self.next().kind {
                    Tok::Word(w) | Tok::Quoted(w) => {
                        path.push('.');
                        path.push_str(&w);
                    }
                    other => {
                        return Err(
                            self.error(format!("expected a field name but found {other}"), at)
                        )
                    }
                }
            }
            return Err(self.error(
                format!("`{path}`: nested fields are not filtered on; name a top-level column (a name with a dot in it is written in backquotes)"),
                at,
            ));
        }
        if self.at_sym("::") {
            let t = self.next();
            let ty = self.type_name()?;
            return Ok(Node::Cast(
                Box::new(Node::Column(Col { name, at })),
                ty,
                false,
                t.at,
            ));
        }
        Ok(Node::Column(Col { name, at }))
    }

    fn case(&mut self, at: Pos) -> Result<Node, RowFilterError> {
        self.deeper(at)?;
        let operand = if self.at_word("WHEN") {
            None
        } else {
            Some(Box::new(self.or()?))
        };
        let mut arms = Vec::new();
        while self.eat_word("WHEN") {
            let when = self.or()?;
            self.expect_word("THEN")?;
            let then = self.or()?;
            arms.push((when, then));
        }
        if arms.is_empty() {
            let t = self.peek();
            return Err(self.error(format!("expected WHEN but found {}", t.kind), t.at));
        }
        let otherwise = if self.eat_word("ELSE") {
            Some(Box::new(self.or()?))
        } else {
            None
        };
        self.expect_word("END")?;
        self.depth -= 1;
        Ok(Node::Case {
            operand,
            arms,
            otherwise,
            at,
        })
    }

    fn type_name(&mut self) -> Result<TypeName, RowFilterError> {
        let t = self.next();
        let Tok::Word(name) = t.kind else {
            return Err(self.error(format!("expected a type but found {}", t.kind), t.at));
        };
        let mut params = Vec::new();
        if self.eat_sym("(") {
            loop {
                let p = self.next();
                match p.kind {
                    Tok::Number(n) if n.parse::<u32>().is_ok() => {
                        params.push(n.parse::<u32>().unwrap_or(0));
                    }
                    other => {
                        return Err(self.error(format!("expected a number but found {other}"), p.at))
                    }
                }
                if !self.eat_sym(",") {
                    break;
                }
            }
            self.expect_sym(")")?;
        }
        Ok(TypeName {
            name: name.to_ascii_lowercase(),
            params,
            at: t.at,
        })
    }
}

enum Bin {
    Cmp(CmpOp),
    Arith(Arith),
}

/// One operand, or an `AND`/`OR` of several, nested chains of the same
/// connective merged.
fn flatten(terms: Vec<Node>, or: bool) -> Node {
    if terms.len() == 1 {
        return terms.into_iter().next().unwrap_or(Node::And(Vec::new()));
    }
    let mut out = Vec::with_capacity(terms.len());
    for t in terms {
        match t {
            Node::Or(inner) if or => out.extend(inner),
            Node::And(inner) if !or => out.extend(inner),
            other => out.push(other),
        }
    }
    if or {
        Node::Or(out)
    } else {
        Node::And(out)
    }
}

fn negatable(lit: &Literal) -> bool {
    matches!(
        lit,
        Literal::Int(_)
            | Literal::SizedInt(..)
            | Literal::Decimal(..)
            | Literal::Float(_)
            | Literal::Float32(_)
    )
}

fn negate(lit: Literal) -> Literal {
    match lit {
        Literal::Int(i) => Literal::Int(-i),
        Literal::SizedInt(i, bits) => Literal::SizedInt(-i, bits),
        Literal::Decimal(d, s) => Literal::Decimal(-d, s),
        Literal::Float(x) => Literal::Float(-x),
        Literal::Float32(x) => Literal::Float32(-x),
        other => other,
    }
}

/// A number token as Spark types it: an integer, an exact decimal when it
/// has a point, a double with an exponent or `D`, a float with `F`, a
/// decimal with `BD`, a sized integer with `Y`, `S` or `L`.
fn number_literal(text: &str) -> Option<Literal> {
    let upper = text.to_ascii_uppercase();
    let split = upper
        .find(|c: char| c.is_ascii_alphabetic() && c != 'E')
        .unwrap_or(upper.len());
    let (digits, suffix) = upper.split_at(split);
    match suffix {
        "" => number(digits, false),
        "D" => digits.parse::<f64>().ok().map(Literal::Float),
        "F" => digits.parse::<f32>().ok().map(Literal::Float32),
        "BD" => match number(digits, false)? {
            Literal::Float(_) => None,
            n => Some(n),
        },
        "L" | "S" | "Y" if !digits.contains(['.', 'E']) => {
            let v: i128 = digits.parse().ok()?;
            let bits = match suffix {
                "L" => 64,
                "S" => 16,
                _ => 8,
            };
            Some(Literal::SizedInt(v, bits))
        }
        _ => None,
    }
}

/// A number in a string, as a literal of its own.
pub(crate) fn parse_number(text: &str) -> Option<Literal> {
    let text = text.trim();
    match text.strip_prefix('-') {
        Some(rest) => number(rest, true),
        None => number(text.strip_prefix('+').unwrap_or(text), false),
    }
}

fn number(text: &str, negative: bool) -> Option<Literal> {
    let sign = if negative { -1 } else { 1 };
    if text.is_empty() || !text.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    if text.contains(['e', 'E']) {
        let x: f64 = text.parse().ok()?;
        return Some(Literal::Float(x * sign as f64));
    }
    match text.split_once('.') {
        None => text.parse::<i128>().ok().map(|i| Literal::Int(i * sign)),
        Some((int, frac)) => {
            if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
                return None;
            }
            let digits: i128 = format!("{int}{frac}").parse().ok()?;
            Some(Literal::Decimal(digits * sign, frac.len() as u32))
        }
    }
}

/// Days since the epoch of `YYYY-MM-DD` (also `YYYY-MM` and `YYYY`, and a
/// time after the day, as Spark's cast reads them).
pub(crate) fn parse_date(text: &str) -> Option<i32> {
    let text = text.trim();
    let day = text.split_once([' ', 'T']).map(|(d, _)| d).unwrap_or(text);
    let date = chrono::NaiveDate::parse_from_str(day, "%Y-%m-%d")
        .or_else(|_| chrono::NaiveDate::parse_from_str(&format!("{day}-01"), "%Y-%m-%d"))
        .or_else(|_| chrono::NaiveDate::parse_from_str(&format!("{day}-01-01"), "%Y-%m-%d"))
        .ok()?;
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?;
    i32::try_from((date - epoch).num_days()).ok()
}

/// A timestamp's text as Spark's cast reads it: `YYYY-MM-DD`,
/// `YYYY-MM-DD HH:MM[:SS[.f]]` (or with `T`), optionally followed by a zone
/// (`Z`, an offset as `+05:30`, or a region after a space); the wall-clock
/// time and the zone it names, if any.
pub(crate) fn parse_timestamp_parts(text: &str) -> Option<(NaiveDateTime, Option<SessionTz>)> {
    let text = text.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        let zone = SessionTz::parse(&t.offset().to_string()).ok()?;
        return Some((t.naive_local(), Some(zone)));
    }
    let (plain, zone) = split_zone(text);
    for format in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(plain, format) {
            return Some((t, zone));
        }
    }
    if text.contains([' ', 'T']) {
        return None;
    }
    let days = parse_date(text)?;
    let date = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?
        .checked_add_signed(chrono::Duration::days(i64::from(days)))?;
    Some((date.and_hms_opt(0, 0, 0)?, None))
}

/// A timestamp's text cut before the zone it ends with, if any.
fn split_zone(text: &str) -> (&str, Option<SessionTz>) {
    if let Some(plain) = text.strip_suffix('Z') {
        return (plain, Some(SessionTz::Utc));
    }
    if let Some((plain, zone)) = text.rsplit_once(' ') {
        if plain.contains(':') {
            if let Ok(z) = SessionTz::parse(zone) {
                return (plain, Some(z));
            }
        }
    }
    // An offset right after the time: `10:00:00+05:30`, `10:00-08`.
    if let Some(i) = text.rfind(['+', '-']) {
        let (plain, zone) = text.split_at(i);
        if plain.contains(':') && plain.len() > 10 {
            if let Ok(z) = SessionTz::parse(zone) {
                return (plain, Some(z));
            }
        }
    }
    (text, None)
}

/// Microseconds since the epoch of a timestamp's text read in `tz` (the
/// session time zone), unless it names its own.
pub(crate) fn parse_timestamp(text: &str, tz: &SessionTz) -> Option<i64> {
    let (local, zone) = parse_timestamp_parts(text)?;
    zone.as_ref().unwrap_or(tz).instant(&local)
}

/// A `timestamp_ntz`'s microseconds from a timestamp's text: its wall-clock
/// time, any zone it names left aside.
pub(crate) fn parse_timestamp_ntz(text: &str) -> Option<i64> {
    let (local, _) = parse_timestamp_parts(text)?;
    Some(local.and_utc().timestamp_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_as_in_spark() {
        let n = parse("NOT a = 1 AND b + 2 * c > 3 OR d IS NULL").expect("parses");
        let Node::Or(terms) = n else {
            panic!("an OR on top: {n:?}")
        };
        assert_eq!(terms.len(), 2);
        let Node::And(and) = &terms[0] else {
            panic!("AND under OR")
        };
        assert!(matches!(&and[0], Node::Not(inner) if matches!(**inner, Node::Cmp(..))));
        let Node::Cmp(left, _, _, _) = &and[1] else {
            panic!("a comparison")
        };
        assert!(
            matches!(**left, Node::Arith(_, Arith::Add, ref r, _) if matches!(**r, Node::Arith(_, Arith::Mul, ..)))
        );
    }

    #[test]
    fn long_chains_are_flat() {
        let chain = (0..20_000)
            .map(|i| format!("id = {i}"))
            .collect::<Vec<_>>()
            .join(" OR ");
        match parse(&chain).expect("parses") {
            Node::Or(terms) => assert_eq!(terms.len(), 20_000),
            other => panic!("{other:?}"),
        }
        let list = (0..100_000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        match parse(&format!("id IN ({list})")).expect("parses") {
            Node::In(_, list, false, _) => assert_eq!(list.len(), 100_000),
            other => panic!("{other:?}"),
        }
        let deep = format!("{}a{}", "(".repeat(1000), ")".repeat(1000));
        let err = parse(&deep).expect_err("too deep").to_string();
        assert!(err.contains("nests more than"), "{err}");
    }

    #[test]
    fn keywords_are_names_where_spark_takes_them_so() {
        let n = parse("user IS NULL AND `order` > 1 AND date = DATE '2026-01-01'").expect("parses");
        let mut cols = Vec::new();
        n.columns(&mut cols);
        assert_eq!(cols, ["user", "order", "date"]);
        let err = parse("in = 1").expect_err("a stop word").to_string();
        assert!(err.contains("`in` (in backquotes)"), "{err}");
    }

    #[test]
    fn numbers_typed_by_their_form() {
        assert_eq!(number_literal("7"), Some(Literal::Int(7)));
        assert_eq!(number_literal("7L"), Some(Literal::SizedInt(7, 64)));
        assert_eq!(number_literal("1.50"), Some(Literal::Decimal(150, 2)));
        assert_eq!(number_literal("1e3"), Some(Literal::Float(1000.0)));
        assert_eq!(number_literal("2.5D"), Some(Literal::Float(2.5)));
        assert_eq!(number_literal("1.5BD"), Some(Literal::Decimal(15, 1)));
        assert_eq!(number_literal("1x"), None);
    }
}
