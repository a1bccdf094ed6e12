//! Percent-encoding of URL path segments and query values: RFC 3986's
//! unreserved characters (`A-Z a-z 0-9 - _ . ~`) kept, every other byte `%XX`.

/// `text` percent-encoded, safe in a path segment or a query value.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn unreserved_kept_the_rest_escaped() {
        assert_eq!(super::encode("a-Z_0.~"), "a-Z_0.~");
        assert_eq!(super::encode("pod a/1"), "pod%20a%2F1");
        assert_eq!(super::encode("é"), "%C3%A9");
    }
}
