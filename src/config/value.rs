//! Values as users write them (durations, sizes, points in time, lists),
//! parsed alike from a flag and from a job file key.

use std::fmt::Display;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// The longest duration an option takes (100 years of 365.25 days): deadlines
/// computed from a duration (now plus it, in milliseconds) stay far from
/// overflowing.
pub const MAX_DURATION: Duration = Duration::from_secs(3_155_760_000);

/// Parses a duration: plain seconds (`90`), or a number with a unit (`500ms`, `30s`,
/// `10m`, `2h`, `1d`), several of them (`1h 30m`) or a fraction (`1.5h`). At most
/// [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let parsed = match s.parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(s),
    };
    let duration =
        parsed.map_err(|e| format!("`{s}` is not a duration like 30s, 10m or 2h ({e})"))?;
    if duration > MAX_DURATION {
        return Err(format!("`{s}` is too long: at most 100 years"));
    }
    Ok(duration)
}

/// Parses a time limit that may be switched off: a duration, or `off` (returned
/// as zero: no limit).
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

/// Parses a byte size: a number with an optional unit, decimal (`4MB`, `1k`) or
/// binary (`64KiB`, `128MiB`), in any case and with a fraction where wanted
/// (`1.5GiB`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let size = s
        .parse::<bytesize::ByteSize>()
        .map_err(|e| format!("`{s}` is not a size like 128MiB ({e})"))?;
    // The crate saturates on overflow: the largest value stands for "too large".
    match size.as_u64() {
        u64::MAX => Err(format!("`{s}` is too large")),
        bytes => Ok(bytes),
    }
}

/// Parses a point in time into milliseconds since the epoch: RFC 3339, a UTC
/// date with an optional time, or a plain number of milliseconds.
pub fn parse_timestamp(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    for format in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, format) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        if let Some(t) = d.and_hms_opt(0, 0, 0) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    Err(format!(
        "`{s}` is not a time: use RFC 3339 (2026-11-29T10:00:00Z), 2026-11-29 10:00:00 (UTC) or milliseconds since the epoch"
    ))
}

/// Parses a value with its [`FromStr`], the error as text (for clap's `value_parser`).
pub fn parse_with<T>(s: &str) -> Result<T, String>
where
    T: FromStr,
    T::Err: Display,
{
    s.parse::<T>().map_err(|e| e.to_string())
}

/// A scalar of a job file (string, number or boolean) as the text a flag
/// would carry, so that both go through one parser.
struct Text(String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl Visitor<'_> for TextVisitor {
            type Value = Text;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
        }
        deserializer.deserialize_any(TextVisitor)
    }
}

/// A list: an array of scalars, or one string of comma-separated items (as a
/// flag takes it).
#[derive(Deserialize)]
#[serde(
    untagged,
    expecting = "a list like [\"a\", \"b\"] or a string like \"a,b\""
)]
enum List {
    Items(Vec<Text>),
    One(Text),
}

/// `deserialize_with` forms of the options' fields: each reads the value a
/// job file gives with the parser of the matching flag.
pub mod form {
    use super::*;

    fn parsed<'de, D, T>(
        deserializer: D,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
    {
        let Text(text) = Text::deserialize(deserializer)?;
        parse(&text).map_err(de::Error::custom)
    }

    /// A duration like `30s`, or a number of seconds.
    pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        parsed(d, parse_duration)
    }

    /// A duration, present.
    pub fn some_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        parsed(d, parse_duration).map(Some)
    }

    /// A duration or `off` (zero).
    pub fn timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        parsed(d, parse_timeout)
    }

    /// A size like `64MiB`, or a number of bytes.
    pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        parsed(d, parse_size)
    }

    /// A size in bytes (see [`parse_size`]), present.
    pub fn some_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        parsed(d, parse_size).map(Some)
    }

    /// A point in time (see [`parse_timestamp`]), present.
    pub fn some_timestamp<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        parsed(d, parse_timestamp).map(Some)
    }

    /// A value of a type with its own [`FromStr`], present.
    pub fn some_parsed<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: FromStr,
        T::Err: Display,
    {
        parsed(d, parse_with::<T>).map(Some)
    }

    /// A list of names or ids, present.
    pub fn some_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
        Ok(Some(match List::deserialize(d)? {
            List::Items(items) => items.into_iter().map(|Text(t)| t).collect(),
            List::One(Text(text)) => text
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        }))
    }
}

/// The keys `T` reads: the field names its derived `Deserialize` asks for
/// (none for a type that is not a plain struct).
pub fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The probe answers every request with an error; only the field list matters.
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// A deserializer that records the field names a struct asks for.
struct Probe<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_every_accepted_form() {
        assert_eq!(parse_size("128MiB"), Ok(128 * 1024 * 1024));
        assert_eq!(parse_size("64KiB"), Ok(64 * 1024));
        assert_eq!(parse_size("16kib"), Ok(16 * 1024));
        assert_eq!(parse_size("2GiB"), Ok(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_size("4MB"), Ok(4_000_000));
        assert_eq!(parse_size("3k"), Ok(3000));
        assert_eq!(parse_size("1gb"), Ok(1_000_000_000));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size(" 8 MiB "), Ok(8 * 1024 * 1024));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn sizes_refused_with_the_value_named() {
        for bad in ["x", "", "-5", "12 parsecs", "1e3"] {
            let err = parse_size(bad).expect_err(bad);
            assert!(err.contains(&format!("`{}`", bad.trim())), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
        let err = parse_size("20000000000EiB").expect_err("overflow");
        assert!(err.contains("too large"), "{err}");
    }

    #[test]
    fn durations_in_every_accepted_form() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration(" 2h "), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_timeout("off"), Ok(Duration::ZERO));
        assert_eq!(parse_timeout("30s"), Ok(Duration::from_secs(30)));
    }

    #[test]
    fn durations_refused_with_the_value_named() {
        for bad in ["2x", "", "-5", "ten", "5 parsecs", "1.5"] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(err.contains(&format!("`{bad}`")), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn durations_that_would_overflow_are_refused() {
        // 2^64 / 3600 hours: a parser that multiplies unchecked wraps this around.
        for huge in [
            "5124095576030432h",
            "18446744073709551615",
            "18446744073709551615m",
            "99999999999999999999999s",
            "101y",
        ] {
            let err = parse_duration(huge).expect_err(huge);
            assert!(err.contains(&format!("`{huge}`")), "{err}");
        }
        assert_eq!(parse_duration("100y"), Ok(MAX_DURATION));
    }

    #[test]
    fn field_names_are_read_from_the_derived_deserialize() {
        #[derive(Deserialize)]
        #[serde(rename_all = "kebab-case")]
        #[allow(dead_code)]
        struct Two {
            batch_size: u32,
            #[serde(rename = "version")]
            table_version: u32,
        }
        assert_eq!(field_names::<Two>(), ["batch-size", "version"]);
        assert!(field_names::<u32>().is_empty());
    }
}
