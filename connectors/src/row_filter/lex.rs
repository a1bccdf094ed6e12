//! Spark SQL's lexical rules for an expression: string literals as Spark's
//! parser reads them (backslash escapes, `''` ending one literal and opening
//! the next, adjacent literals joined, `r'…'` raw), double-quoted text a
//! string, backquoted names (a doubled backquote inside), numbers with
//! their type suffixes, and every operator a filter may use.

use super::{Pos, RowFilterError};

/// One token, and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub kind: Tok,
    pub at: Pos,
    /// Where it starts in the text, in bytes.
    pub offset: usize,
}

/// What a token is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// A name as written (a keyword too: the parser decides by position).
    Word(String),
    /// A backquoted name: never a keyword.
    Quoted(String),
    /// A string literal, escapes applied and adjacent literals joined.
    Str(String),
    /// A number as written, suffix included (`12`, `1.5`, `1e3`, `7L`, `2.0BD`).
    Number(String),
    /// `X'0AFF'`: bytes.
    Bytes(Vec<u8>),
    /// An operator or punctuation.
    Sym(&'static str),
    /// The end of the text.
    End,
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Word(w) => write!(f, "`{w}`"),
            Tok::Quoted(w) => write!(f, "`{w}`"),
            Tok::Str(s) => write!(f, "'{s}'"),
            Tok::Number(n) => f.write_str(n),
            Tok::Bytes(_) => f.write_str("a binary literal"),
            Tok::Sym(s) => write!(f, "`{s}`"),
            Tok::End => f.write_str("the end"),
        }
    }
}

/// Operators, longest first.
const SYMBOLS: [&str; 23] = [
    "<=>", "<>", "!=", "<=", ">=", "==", "||", "::", "=", "<", ">", "+", "-", "*", "/", "%", "&",
    "|", "^", "~", "!", "(", ")",
];

struct Lexer<'a> {
    text: &'a str,
    chars: Vec<(usize, char)>,
    i: usize,
    line: u64,
    column: u64,
}

/// Splits `text` into tokens, ending with [`Tok::End`].
pub(crate) fn lex(text: &str) -> Result<Vec<Token>, RowFilterError> {
    let mut lexer = Lexer {
        text,
        chars: text.char_indices().collect(),
        i: 0,
        line: 1,
        column: 1,
    };
    let mut out: Vec<Token> = Vec::new();
    loop {
        lexer.skip_space()?;
        let at = lexer.pos();
        let offset = lexer.chars.get(lexer.i).map_or(text.len(), |(o, _)| *o);
        let Some(c) = lexer.peek(0) else {
            out.push(Token {
                kind: Tok::End,
                at,
                offset,
            });
            return Ok(out);
        };
        let kind = lexer.token(c, at)?;
        // Adjacent string literals are one (`'a' 'b'` is 'ab').
        if let (
            Tok::Str(s),
            Some(Token {
                kind: Tok::Str(before),
                ..
            }),
        ) = (&kind, out.last_mut())
        {
            before.push_str(s);
            continue;
        }
        out.push(Token { kind, at, offset });
    }
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.i + ahead).map(|(_, c)| *c)
    }

    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            column: self.column,
        }
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn error(&self, reason: String, at: Pos) -> RowFilterError {
        RowFilterError::Syntax {
            text: self.text.to_string(),
            reason,
            at,
        }
    }

    /// Whitespace and comments (`-- …` to the end of the line, `/* … */`).
    fn skip_space(&mut self) -> Result<(), RowFilterError> {
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some(c), _) if c.is_whitespace() => {
                    self.bump();
                }
                (Some('-'), Some('-')) => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                (Some('/'), Some('*')) => {
                    let at = self.pos();
                    self.bump();
                    self.bump();
                    loop {
                        match (self.peek(0), self.peek(1)) {
                            (Some('*'), Some('/')) => {
                                self.bump();
                                self.bump();
                                break;
                            }
                            (Some(_), _) => {
                                self.bump();
                            }
                            (None, _) => {
                                return Err(self.error("a comment is never closed".into(), at))
                            }
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn token(&mut self, c: char, at: Pos) -> Result<Tok, RowFilterError> {
        let next = self.peek(1);
        match c {
            '\'' | '"' => self.string(c, at).map(Tok::Str),
            'r' | 'R' if matches!(next, Some('\'' | '"')) => {
                self.bump();
                self.raw(at).map(Tok::Str)
            }
            'x' | 'X' if next == Some('\'') => {
                self.bump();
                self.hex(at)
            }
            '`' => self.backquoted(at).map(Tok::Quoted),
            c if c.is_ascii_digit() || (c == '.' && next.is_some_and(|d| d.is_ascii_digit())) => {
                Ok(Tok::Number(self.number()))
            }
            c if c.is_alphabetic() || c == '_' => {
                let mut word = String::new();
                while let Some(d) = self.peek(0).filter(|d| d.is_alphanumeric() || *d == '_') {
                    word.push(d);
                    self.bump();
                }
                Ok(Tok::Word(word))
            }
            ',' | '.' | '[' | ']' => {
                self.bump();
                Ok(Tok::Sym(match c {
                    ',' => ",",
                    '.' => ".",
                    '[' => "[",
                    _ => "]",
                }))
            }
            _ => {
                let rest: String = self.chars[self.i..]
                    .iter()
                    .take(3)
                    .map(|(_, c)| *c)
                    .collect();
                match SYMBOLS.iter().find(|s| rest.starts_with(**s)) {
                    Some(sym) => {
                        for _ in 0..sym.len() {
                            self.bump();
                        }
                        Ok(Tok::Sym(sym))
                    }
                    None => Err(self.error(format!("unexpected character `{c}`"), at)),
                }
            }
        }
    }

    /// A quoted string with Spark's escapes (`unescapeSQLString`): `\n`,
    /// `\t`, `\r`, `\b`, `\0`, `\Z`, `\'`, `\"`, `\\`, `\uXXXX`, three octal
    /// digits; `\%` and `\_` keep their backslash (for `LIKE`); a backslash
    /// before any other character is that character.
    fn string(&mut self, quote: char, at: Pos) -> Result<String, RowFilterError> {
        self.bump();
        let mut out = String::new();
        loop {
            let Some(c) = self.bump() else {
                return Err(self.error(format!("a string opened with {quote} is never closed"), at));
            };
            // A doubled quote is the quote itself (`'O''Brien'`), as Spark 4.1
            // and later read it.
            if c == quote && self.peek(0) == Some(quote) {
                self.bump();
                out.push(quote);
                continue;
            }
            if c == quote {
                return Ok(out);
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some(e) = self.bump() else {
                return Err(self.error(format!("a string opened with {quote} is never closed"), at));
            };
            match e {
                'u' => {
                    let hex: String = (0..4).filter_map(|k| self.peek(k)).collect();
                    match (hex.len() == 4)
                        .then(|| u32::from_str_radix(&hex, 16).ok())
                        .flatten()
                        .and_then(char::from_u32)
                    {
                        Some(ch) => {
                            for _ in 0..4 {
                                self.bump();
                            }
                            out.push(ch);
                        }
                        None => out.push('u'),
                    }
                }
                '0'..='3'
                    if self.peek(0).is_some_and(|d| ('0'..='7').contains(&d))
                        && self.peek(1).is_some_and(|d| ('0'..='7').contains(&d)) =>
                {
                    let digits: String =
                        [e, self.peek(0).unwrap_or('0'), self.peek(1).unwrap_or('0')]
                            .iter()
                            .collect();
                    self.bump();
                    self.bump();
                    let code = u32::from_str_radix(&digits, 8).unwrap_or(0);
                    out.push(char::from_u32(code).unwrap_or('\0'));
                }
                '0' => out.push('\0'),
                'b' => out.push('\u{8}'),
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'Z' => out.push('\u{1A}'),
                '%' => out.push_str("\\%"),
                '_' => out.push_str("\\_"),
                other => out.push(other),
            }
        }
    }

    /// `r'…'`: the text as it is, no escapes.
    fn raw(&mut self, at: Pos) -> Result<String, RowFilterError> {
        let quote = self.bump().unwrap_or('\'');
        let mut out = String::new();
        loop {
            match self.bump() {
                Some(c) if c == quote => return Ok(out),
                Some(c) => out.push(c),
                None => {
                    return Err(
                        self.error(format!("a string opened with {quote} is never closed"), at)
                    )
                }
            }
        }
    }

    /// `X'0AFF'`: an even number of hex digits.
    fn hex(&mut self, at: Pos) -> Result<Tok, RowFilterError> {
        let text = self.raw(at)?;
        let digits: Vec<u32> = text.chars().filter_map(|c| c.to_digit(16)).collect();
        if digits.len() != text.chars().count() || digits.len() % 2 != 0 {
            return Err(self.error(
                format!("X'{text}' is no binary literal (hex digits in pairs)"),
                at,
            ));
        }
        Ok(Tok::Bytes(
            digits.chunks(2).map(|p| (p[0] * 16 + p[1]) as u8).collect(),
        ))
    }

    fn backquoted(&mut self, at: Pos) -> Result<String, RowFilterError> {
        self.bump();
        let mut out = String::new();
        loop {
            match self.bump() {
                Some('`') if self.peek(0) == Some('`') => {
                    self.bump();
                    out.push('`');
                }
                Some('`') => return Ok(out),
                Some(c) => out.push(c),
                None => return Err(self.error("a name opened with ` is never closed".into(), at)),
            }
        }
    }

    /// Digits, a point, an exponent, and a type suffix (`L`, `S`, `Y`, `D`,
    /// `F`, `BD`).
    fn number(&mut self) -> String {
        let mut out = String::new();
        while let Some(d) = self.peek(0).filter(|d| d.is_ascii_digit() || *d == '.') {
            out.push(d);
            self.bump();
        }
        if matches!(self.peek(0), Some('e' | 'E'))
            && (self.peek(1).is_some_and(|d| d.is_ascii_digit())
                || (matches!(self.peek(1), Some('+' | '-'))
                    && self.peek(2).is_some_and(|d| d.is_ascii_digit())))
        {
            for _ in 0..2 {
                if let Some(c) = self.bump() {
                    out.push(c);
                }
            }
            while let Some(d) = self.peek(0).filter(|d| d.is_ascii_digit()) {
                out.push(d);
                self.bump();
            }
        }
        // A suffix is letters right after the digits (`7L`, `1.5BD`).
        while let Some(d) = self.peek(0).filter(|d| d.is_ascii_alphabetic()) {
            out.push(d);
            self.bump();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(text: &str) -> Vec<String> {
        lex(text)
            .expect("lexes")
            .into_iter()
            .filter_map(|t| match t.kind {
                Tok::Str(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn strings_as_sparks_parser_reads_them() {
        assert_eq!(strings(r"'\\'"), ["\\"]);
        assert_eq!(strings("'O''Brien'"), ["O'Brien"]);
        assert_eq!(strings("'O' 'Brien'"), ["OBrien"]);
        assert_eq!(strings(r#"'a' "b" 'c'"#), ["abc"]);
        assert_eq!(strings(r"'it\'s'"), ["it's"]);
        assert_eq!(strings(r"'a\nb\tc'"), ["a\nb\tc"]);
        assert_eq!(strings(r"'\u00e9\101'"), ["éA"]);
        assert_eq!(strings(r"'50\%'"), ["50\\%"]);
        assert_eq!(strings(r"'\q'"), ["q"]);
        assert_eq!(strings(r"r'\n\\'"), ["\\n\\\\"]);
    }

    #[test]
    fn names_numbers_and_operators() {
        let kinds: Vec<Tok> = lex("`a``b` <=> 7L AND x<>1.5e-3 -- note\n OR y")
            .expect("lexes")
            .into_iter()
            .map(|t| t.kind)
            .collect();
        assert_eq!(
            kinds,
            [
                Tok::Quoted("a`b".into()),
                Tok::Sym("<=>"),
                Tok::Number("7L".into()),
                Tok::Word("AND".into()),
                Tok::Word("x".into()),
                Tok::Sym("<>"),
                Tok::Number("1.5e-3".into()),
                Tok::Word("OR".into()),
                Tok::Word("y".into()),
                Tok::End,
            ]
        );
    }
}
