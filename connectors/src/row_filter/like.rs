//! `LIKE`, `ILIKE` and `RLIKE` as Spark matches them: a `LIKE` pattern is
//! turned into an anchored regular expression the way Spark's
//! `StringUtils.escapeLikeRegex` does (`_` one character, `%` any run, the
//! escape character — `\` unless `ESCAPE` names another — before `_`, `%` or
//! itself a literal, before anything else or at the end an error); `ILIKE`
//! lower-cases both sides; `RLIKE` finds its regular expression anywhere.

use regex::Regex;

use super::parse::LikeKind;

/// A pattern ready to match, and the fixed text every match starts with
/// (for pruning by statistics).
#[derive(Debug, Clone)]
pub(crate) struct Matcher {
    pub regex: Regex,
    /// `LIKE 'abc%…'` starts with `abc` (none for `ILIKE` and `RLIKE`).
    pub prefix: Option<String>,
    /// Lower-case the value first (`ILIKE`).
    pub lower: bool,
}

impl Matcher {
    /// Whether `value` matches.
    pub(crate) fn matches(&self, value: &str) -> bool {
        if self.lower {
            self.regex.is_match(&value.to_lowercase())
        } else {
            self.regex.is_match(value)
        }
    }
}

/// The matcher of a `LIKE`, `ILIKE` (the `ESCAPE` character, `\\` when
/// none is given) or `RLIKE` pattern; the reason when Spark refuses it.
pub(crate) fn matcher(
    kind: LikeKind,
    pattern: &str,
    escape: Option<char>,
) -> Result<Matcher, String> {
    match kind {
        LikeKind::RLike => rlike(pattern),
        LikeKind::Like | LikeKind::ILike => {
            like(pattern, escape.unwrap_or('\\'), kind == LikeKind::ILike)
        }
    }
}

/// A `LIKE` pattern (`lower`: for `ILIKE`); the reason when Spark refuses it.
fn like(pattern: &str, escape: char, lower: bool) -> Result<Matcher, String> {
    let pattern = if lower {
        pattern.to_lowercase()
    } else {
        pattern.to_string()
    };
    let mut re = String::from("(?s)^");
    let mut prefix = String::new();
    let mut fixed = true;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == escape {
            match chars.next() {
                Some(next) if next == '_' || next == '%' || next == escape => {
                    re.push_str(&regex::escape(&next.to_string()));
                    if fixed {
                        prefix.push(next);
                    }
                }
                Some(next) => {
                    return Err(format!(
                        "the escape character is not allowed to precede '{next}' in the LIKE pattern '{pattern}'"
                    ))
                }
                None => {
                    return Err(format!(
                        "the escape character is not allowed to end the LIKE pattern '{pattern}'"
                    ))
                }
            }
        } else if c == '_' {
            re.push('.');
            fixed = false;
        } else if c == '%' {
            re.push_str(".*");
            fixed = false;
        } else {
            re.push_str(&regex::escape(&c.to_string()));
            if fixed {
                prefix.push(c);
            }
        }
    }
    re.push('$');
    let regex = Regex::new(&re).map_err(|e| format!("the LIKE pattern '{pattern}': {e}"))?;
    Ok(Matcher {
        regex,
        prefix: (!lower && !prefix.is_empty()).then_some(prefix),
        lower,
    })
}

/// An `RLIKE` regular expression, found anywhere in the value.
fn rlike(pattern: &str) -> Result<Matcher, String> {
    let regex = Regex::new(pattern).map_err(|e| {
        format!(
            "the RLIKE pattern '{pattern}' is no regular expression sluice reads: {}",
            one_line(&e.to_string())
        )
    })?;
    Ok(Matcher {
        regex,
        prefix: None,
        lower: false,
    })
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_as_spark_reads_them() {
        let m = like("ap%", '\\', false).expect("pattern");
        assert!(m.matches("apple") && !m.matches("grape"));
        assert_eq!(m.prefix.as_deref(), Some("ap"));
        let m = like("50\\%", '\\', false).expect("pattern");
        assert!(m.matches("50%") && !m.matches("500"));
        let m = like("a_c", '\\', false).expect("pattern");
        assert!(m.matches("abc") && m.matches("a\nc") && !m.matches("abbc"));
        let m = like("a.c*", '\\', false).expect("pattern");
        assert!(m.matches("a.c*") && !m.matches("abc"));
        let m = like("A%", '\\', true).expect("pattern");
        assert!(m.matches("apple") && m.matches("APPLE"));
        let m = like("x#%", '#', false).expect("pattern");
        assert!(m.matches("x%"));
        assert!(like("a\\b", '\\', false).is_err());
        assert!(like("a\\", '\\', false).is_err());
    }
}
