//! Wall-clock time and its text: the one place that reads the system clock
//! for records that outlive the process (deadlines in a journal, times in a
//! lock file or a run's record). Everything else is handed the time.

/// Milliseconds since the Unix epoch on the wall clock, so deadlines survive
/// a restart (0 before the epoch).
pub fn wall_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Now as RFC 3339 text in UTC, to the second.
pub fn now_text() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    chrono::DateTime::from_timestamp(secs, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn now_is_rfc3339_in_utc_and_after_the_millis_it_follows() {
        let before = super::wall_millis();
        let text = super::now_text();
        let parsed = chrono::DateTime::parse_from_rfc3339(&text).expect("RFC 3339");
        assert!(text.ends_with('Z'), "{text}");
        assert!(parsed.timestamp() >= i64::try_from(before / 1000).expect("fits") - 1);
    }
}
