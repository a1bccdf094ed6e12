//! Hive partition directories: unescaping `col=value` and Spark's type inference.

use arrow::datatypes::{DataType, TimeUnit};

/// The value Hive writes for a null or empty partition value.
pub const DEFAULT_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// Undoes Hive's `%XX` escaping; an invalid escape is kept as it is, and bytes
/// that are not UTF-8 become U+FFFD.
pub fn unescape(raw: &str) -> String {
    percent_encoding::percent_decode_str(raw)
        .decode_utf8_lossy()
        .into_owned()
}

/// A partition value as read from a directory name: unescaped, `None` for null.
pub fn parse_value(raw: &str) -> Option<String> {
    if raw == DEFAULT_PARTITION || raw.is_empty() {
        None
    } else {
        Some(unescape(raw))
    }
}

/// The type Spark infers for one partition value (the first that parses of
/// Int, Long, Decimal(p,0), Double, Timestamp, Date, String).
pub fn infer_type(value: &str) -> DataType {
    if value.parse::<i32>().is_ok() && is_plain_integer(value) {
        return DataType::Int32;
    }
    if value.parse::<i64>().is_ok() && is_plain_integer(value) {
        return DataType::Int64;
    }
    if is_plain_integer(value) {
        let digits = value.trim_start_matches(['+', '-']).len() as u8;
        if digits <= 38 {
            return DataType::Decimal128(digits.max(1), 0);
        }
    }
    if is_plain_float(value) && value.parse::<f64>().is_ok() {
        return DataType::Float64;
    }
    if is_timestamp(value) {
        return DataType::Timestamp(TimeUnit::Microsecond, None);
    }
    if is_date(value) {
        return DataType::Date32;
    }
    DataType::Utf8
}

fn is_plain_integer(v: &str) -> bool {
    let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn is_plain_float(v: &str) -> bool {
    !v.is_empty()
        && v.bytes().any(|b| b.is_ascii_digit())
        && v.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
}

/// `yyyy-MM-dd`, a valid calendar date.
fn is_date(v: &str) -> bool {
    chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d").is_ok() && v.len() == 10
}

/// `yyyy-MM-dd HH:mm:ss[.S...]`.
fn is_timestamp(v: &str) -> bool {
    chrono::NaiveDateTime::parse_from_str(v, "%Y-%m-%d %H:%M:%S%.f").is_ok()
}

/// Widens two inferred partition types the way Spark does
/// (numbers to the wider number, date and timestamp to timestamp, anything else to string).
pub fn widen(a: &DataType, b: &DataType) -> DataType {
    use DataType::*;
    if a == b {
        return a.clone();
    }
    let rank = |t: &DataType| match t {
        Int32 => Some(0),
        Int64 => Some(1),
        Decimal128(..) => Some(2),
        Float64 => Some(3),
        _ => None,
    };
    match (a, b) {
        (Null, x) | (x, Null) => x.clone(),
        (Decimal128(p1, _), Decimal128(p2, _)) => Decimal128(*p1.max(p2), 0),
        (Decimal128(p, _), Int32 | Int64) | (Int32 | Int64, Decimal128(p, _)) => {
            Decimal128((*p).max(19), 0)
        }
        (Date32, Timestamp(u, z)) | (Timestamp(u, z), Date32) => Timestamp(*u, z.clone()),
        _ => match (rank(a), rank(b)) {
            (Some(x), Some(y)) => {
                if x >= y {
                    a.clone()
                } else {
                    b.clone()
                }
            }
            _ => Utf8,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_hive_escapes() {
        assert_eq!(unescape("a%3Db%2Fc%25"), "a=b/c%");
        assert_eq!(unescape("x%3Ay"), "x:y");
        assert_eq!(unescape("100%"), "100%");
        assert_eq!(unescape("%zz"), "%zz");
        assert_eq!(unescape("S%C3%A3o"), "São");
        assert_eq!(unescape("%3D"), "=");
        assert_eq!(unescape("a%3"), "a%3");
        assert_eq!(unescape("%"), "%");
        assert_eq!(unescape("%FF"), "\u{FFFD}");
        assert_eq!(unescape("2026-11-29%2010%3A00%3A00"), "2026-11-29 10:00:00");
    }

    #[test]
    fn null_partition() {
        assert_eq!(parse_value(DEFAULT_PARTITION), None);
        assert_eq!(parse_value("x"), Some("x".to_string()));
    }

    #[test]
    fn infers_like_spark() {
        assert_eq!(infer_type("007"), DataType::Int32);
        assert_eq!(infer_type("3000000000"), DataType::Int64);
        assert_eq!(
            infer_type("123456789012345678901"),
            DataType::Decimal128(21, 0)
        );
        assert_eq!(infer_type("1.5"), DataType::Float64);
        assert_eq!(infer_type("2024-01-01"), DataType::Date32);
        assert_eq!(
            infer_type("2024-01-02 10:00:00"),
            DataType::Timestamp(TimeUnit::Microsecond, None)
        );
        assert_eq!(infer_type("abc"), DataType::Utf8);
        assert_eq!(infer_type("inf"), DataType::Utf8);
    }

    #[test]
    fn widens_like_spark() {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        assert_eq!(widen(&DataType::Date32, &ts), ts);
        assert_eq!(
            widen(&DataType::Int32, &DataType::Float64),
            DataType::Float64
        );
        assert_eq!(widen(&DataType::Int32, &DataType::Int64), DataType::Int64);
        assert_eq!(widen(&DataType::Float64, &DataType::Utf8), DataType::Utf8);
        assert_eq!(widen(&DataType::Date32, &DataType::Int32), DataType::Utf8);
    }
}
