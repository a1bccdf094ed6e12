//! Rust source as the tokens the import graph needs: identifiers, string
//! literals (for `#[path = "..."]`), `::` and single punctuation; comments
//! and every other literal dropped, each token with its line.

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An identifier or keyword (`r#name` as `name`), or a number.
    Ident,
    /// A string literal's contents (raw, byte and plain alike, escapes kept).
    Str,
    /// `::`, or one character of punctuation.
    Punct,
}

/// One token and the line it starts on (1-based).
#[derive(Clone, Debug)]
pub struct Token {
    /// What it is.
    pub kind: Kind,
    /// Its text.
    pub text: String,
    /// Its line.
    pub line: usize,
}

impl Token {
    /// Whether this is the identifier or keyword `word`.
    pub fn is(&self, word: &str) -> bool {
        self.kind == Kind::Ident && self.text == word
    }

    /// Whether this is the punctuation `p`.
    pub fn punct(&self, p: &str) -> bool {
        self.kind == Kind::Punct && self.text == p
    }
}

/// A cursor over the characters of one file.
struct Lexer {
    chars: Vec<char>,
    at: usize,
    line: usize,
    out: Vec<Token>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    /// Moves on one character, counting lines.
    fn bump(&mut self) {
        if self.peek(0) == Some('\n') {
            self.line += 1;
        }
        self.at += 1;
    }

    fn push(&mut self, kind: Kind, text: String, line: usize) {
        self.out.push(Token { kind, text, line });
    }

    /// Skips `// ...` to the end of the line.
    fn line_comment(&mut self) {
        while self.peek(0).is_some_and(|c| c != '\n') {
            self.bump();
        }
    }

    /// Skips `/* ... */`, nested ones included.
    fn block_comment(&mut self) {
        let mut depth = 0usize;
        while let Some(c) = self.peek(0) {
            if c == '/' && self.peek(1) == Some('*') {
                depth += 1;
                self.bump();
            } else if c == '*' && self.peek(1) == Some('/') {
                depth -= 1;
                self.bump();
                if depth == 0 {
                    self.bump();
                    return;
                }
            }
            self.bump();
        }
    }

    /// A `"..."` string starting at the opening quote.
    fn string(&mut self) {
        let line = self.line;
        self.bump();
        let mut text = String::new();
        while let Some(c) = self.peek(0) {
            self.bump();
            match c {
                '\\' => {
                    if let Some(next) = self.peek(0) {
                        text.push(c);
                        text.push(next);
                        self.bump();
                    }
                }
                '"' => break,
                _ => text.push(c),
            }
        }
        self.push(Kind::Str, text, line);
    }

    /// A raw string `r#"..."#` starting at its first `#` or quote.
    fn raw_string(&mut self) {
        let line = self.line;
        let mut hashes = 0;
        while self.peek(0) == Some('#') {
            hashes += 1;
            self.bump();
        }
        self.bump();
        let mut text = String::new();
        while let Some(c) = self.peek(0) {
            if c == '"' && (1..=hashes).all(|k| self.peek(k) == Some('#')) {
                for _ in 0..=hashes {
                    self.bump();
                }
                break;
            }
            text.push(c);
            self.bump();
        }
        self.push(Kind::Str, text, line);
    }

    /// A character literal or a lifetime, at its quote: a literal is skipped,
    /// a lifetime's quote dropped (its name reads as an identifier).
    fn quote(&mut self) {
        if self.peek(1) == Some('\\') {
            self.bump();
            self.bump();
            self.bump();
            while self.peek(0).is_some_and(|c| c != '\'') {
                self.bump();
            }
            self.bump();
        } else if self.peek(2) == Some('\'') {
            self.bump();
            self.bump();
            self.bump();
        } else {
            self.bump();
        }
    }

    /// Whether a raw string (`r"`, `r#"`, `r##"` ...) starts `ahead` characters on.
    fn raw_string_at(&self, ahead: usize) -> bool {
        let mut k = ahead;
        while self.peek(k) == Some('#') {
            k += 1;
        }
        self.peek(k) == Some('"') && (k > ahead || self.peek(ahead) == Some('"'))
    }

    /// An identifier, keyword or number; a string prefix (`r`, `b`, `br`)
    /// hands on to the string it starts.
    fn word(&mut self) {
        let c = self.peek(0);
        if c == Some('r') && self.raw_string_at(1) {
            self.bump();
            return self.raw_string();
        }
        if c == Some('b') && self.peek(1) == Some('r') && self.raw_string_at(2) {
            self.bump();
            self.bump();
            return self.raw_string();
        }
        if c == Some('b') && self.peek(1) == Some('"') {
            self.bump();
            return self.string();
        }
        if c == Some('b') && self.peek(1) == Some('\'') {
            self.bump();
            return self.quote();
        }
        if c == Some('r') && self.peek(1) == Some('#') {
            self.bump();
            self.bump();
        }
        let line = self.line;
        let mut text = String::new();
        while let Some(c) = self.peek(0).filter(|c| c.is_alphanumeric() || *c == '_') {
            text.push(c);
            self.bump();
        }
        self.push(Kind::Ident, text, line);
    }
}

/// The tokens of one Rust source file.
pub fn tokens(source: &str) -> Vec<Token> {
    let mut lx = Lexer {
        chars: source.chars().collect(),
        at: 0,
        line: 1,
        out: Vec::new(),
    };
    while let Some(c) = lx.peek(0) {
        match c {
            '/' if lx.peek(1) == Some('/') => lx.line_comment(),
            '/' if lx.peek(1) == Some('*') => lx.block_comment(),
            '"' => lx.string(),
            '\'' => lx.quote(),
            ':' if lx.peek(1) == Some(':') => {
                let line = lx.line;
                lx.bump();
                lx.bump();
                lx.push(Kind::Punct, "::".to_string(), line);
            }
            c if c.is_alphanumeric() || c == '_' => lx.word(),
            c if c.is_whitespace() => lx.bump(),
            c => {
                let line = lx.line;
                lx.bump();
                lx.push(Kind::Punct, c.to_string(), line);
            }
        }
    }
    lx.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(source: &str) -> Vec<String> {
        tokens(source).into_iter().map(|t| t.text).collect()
    }

    #[test]
    fn comments_and_literals_hide_paths() {
        let source = "// crate::a\n/* crate::b /* crate::c */ */ let s = \"crate::d\"; \
                      let r = r#\"crate::e\"#; let c = '\"'; let l: &'a str = b'x';";
        let words = texts(source);
        assert!(!words.iter().any(|w| w == "crate"), "{words:?}");
        assert!(words.iter().any(|w| w == "crate::d"), "{words:?}");
        assert!(
            words.iter().any(|w| w == "a"),
            "the lifetime's name: {words:?}"
        );
    }

    #[test]
    fn lines_are_counted() {
        let all = tokens("use\n/* x\n y */ crate\n::a;");
        let lines: Vec<usize> = all.iter().map(|t| t.line).collect();
        assert_eq!(lines, [1, 3, 4, 4, 4]);
    }
}
