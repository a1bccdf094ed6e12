//! The session time zone (`--timezone`), as Spark's
//! `spark.sql.session.timeZone` applies it: a `timestamp` is an instant,
//! shown, cut into fields, truncated and cast to a date or a string in this
//! zone, and a date or a string without a zone is read in it; a
//! `timestamp_ntz` is a wall-clock time no zone touches.
//!
//! An instant's local time has one answer; a local time's instant follows
//! `java.time` as Spark does: in a gap (clocks set forward) the time is
//! moved on by the gap's length, in an overlap (clocks set back) the
//! earlier offset (summer time) is taken.
//!
//! In arrow's types the zone travels as the time zone of a
//! `Timestamp(Microsecond, Some(zone))`: every `timestamp` an expression
//! computes with carries the session's zone there, and a `timestamp_ntz`
//! carries none.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use arrow::datatypes::{DataType, TimeUnit};
use chrono::{Duration, FixedOffset, NaiveDateTime, Offset, TimeZone};

/// A session time zone: UTC, a fixed offset or a region of the IANA
/// database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SessionTz {
    /// UTC (the default).
    #[default]
    Utc,
    /// A fixed offset from UTC (`+05:30`, `-08:00`).
    Offset(FixedOffset),
    /// A region (`America/Los_Angeles`), its offsets as the IANA database
    /// has them.
    Region(chrono_tz::Tz),
}

/// A time zone that is none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--timezone: unknown time zone `{0}`; give a region as `America/Los_Angeles`, an offset as `+05:30`, or `UTC`")]
pub struct TimeZoneError(pub String);

const MICROS: i64 = 1_000_000;

impl SessionTz {
    /// Reads a zone as Spark's `spark.sql.session.timeZone` takes it: a
    /// region ID (`Europe/Berlin`), `UTC`, `Z`, `GMT`, or an offset
    /// (`+05:30`, `-8`, `+0530`, `UTC+5`, `GMT-08:00`).
    pub fn parse(text: &str) -> Result<SessionTz, TimeZoneError> {
        let err = || TimeZoneError(text.to_string());
        let t = text.trim();
        if matches!(t, "UTC" | "Z" | "GMT" | "UT" | "Etc/UTC" | "Etc/GMT") {
            return Ok(SessionTz::Utc);
        }
        for prefix in ["UTC", "GMT", "UT"] {
            if let Some(rest) = t.strip_prefix(prefix) {
                if rest.starts_with(['+', '-']) {
                    return offset(rest).map(SessionTz::from_offset).ok_or_else(err);
                }
            }
        }
        if t.starts_with(['+', '-']) {
            return offset(t).map(SessionTz::from_offset).ok_or_else(err);
        }
        chrono_tz::Tz::from_str(t)
            .map(SessionTz::Region)
            .map_err(|_| err())
    }

    fn from_offset(o: FixedOffset) -> SessionTz {
        if o.local_minus_utc() == 0 {
            SessionTz::Utc
        } else {
            SessionTz::Offset(o)
        }
    }

    /// Whether it is UTC.
    pub fn is_utc(&self) -> bool {
        *self == SessionTz::Utc
    }

    /// The zone's name: `UTC`, `+05:30` or the region's ID.
    pub fn name(&self) -> String {
        match self {
            SessionTz::Utc => "UTC".to_string(),
            SessionTz::Offset(o) => offset_text(o.local_minus_utc()),
            SessionTz::Region(tz) => tz.name().to_string(),
        }
    }

    /// The type of a `timestamp` in this zone.
    pub(crate) fn timestamp(&self) -> DataType {
        DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from(self.name())))
    }

    /// The zone a timestamp type is computed in: the session's for a
    /// `timestamp`, `None` for a `timestamp_ntz` (or no timestamp).
    pub(crate) fn of_type(t: &DataType) -> Option<SessionTz> {
        match t {
            DataType::Timestamp(_, Some(name)) => {
                Some(SessionTz::parse(name).unwrap_or(SessionTz::Utc))
            }
            _ => None,
        }
    }

    /// The offset from UTC, in seconds, at the instant `utc`.
    fn offset_at(&self, utc: &NaiveDateTime) -> i32 {
        match self {
            SessionTz::Utc => 0,
            SessionTz::Offset(o) => o.local_minus_utc(),
            SessionTz::Region(tz) => tz.offset_from_utc_datetime(utc).fix().local_minus_utc(),
        }
    }

    /// The wall-clock time of an instant (microseconds since the epoch).
    pub(crate) fn local(&self, micros: i64) -> Option<NaiveDateTime> {
        let utc = chrono::DateTime::from_timestamp_micros(micros)?.naive_utc();
        utc.checked_add_signed(Duration::seconds(i64::from(self.offset_at(&utc))))
    }

    /// The instant of a wall-clock time, as `java.time`'s
    /// `LocalDateTime.atZone`: the earlier offset in an overlap, moved on
    /// by the gap in a gap.
    pub(crate) fn instant(&self, local: &NaiveDateTime) -> Option<i64> {
        self.instant_preferring(local, None)
    }

    /// As [`SessionTz::instant`], keeping the offset `preferred` (seconds)
    /// in an overlap where it is one of the two (`ZonedDateTime`'s
    /// `truncatedTo` keeps the offset it had).
    pub(crate) fn instant_preferring(
        &self,
        local: &NaiveDateTime,
        preferred: Option<i32>,
    ) -> Option<i64> {
        let offset = match self {
            SessionTz::Utc => 0,
            SessionTz::Offset(o) => o.local_minus_utc(),
            SessionTz::Region(tz) => match tz.offset_from_local_datetime(local) {
                chrono::LocalResult::Single(o) => o.fix().local_minus_utc(),
                chrono::LocalResult::Ambiguous(early, late) => {
                    let (early, late) =
                        (early.fix().local_minus_utc(), late.fix().local_minus_utc());
                    // The earlier of the two instants has the larger offset.
                    match preferred {
                        Some(p) if p == early || p == late => p,
                        _ => early.max(late),
                    }
                }
                // In a gap: the offset before it, which moves the time on
                // by the gap's length.
                chrono::LocalResult::None => {
                    let before = local.checked_sub_signed(Duration::days(1))?;
                    tz.offset_from_utc_datetime(&before).fix().local_minus_utc()
                }
            },
        };
        let utc = local.checked_sub_signed(Duration::seconds(i64::from(offset)))?;
        Some(utc.and_utc().timestamp_micros())
    }

    /// The offset at an instant (microseconds), in seconds.
    pub(crate) fn offset_of(&self, micros: i64) -> Option<i32> {
        let utc = chrono::DateTime::from_timestamp_micros(micros)?.naive_utc();
        Some(self.offset_at(&utc))
    }

    /// The instant the day `days` (since the epoch) starts in this zone.
    pub(crate) fn day_start(&self, days: i32) -> Option<i64> {
        if self.is_utc() {
            return i64::from(days).checked_mul(86_400 * MICROS);
        }
        let date = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?
            .checked_add_signed(Duration::days(i64::from(days)))?;
        self.instant(&date.and_hms_opt(0, 0, 0)?)
    }

    /// The day (since the epoch) an instant falls on in this zone.
    pub(crate) fn day_of(&self, micros: i64) -> Option<i32> {
        if self.is_utc() {
            return i32::try_from(micros.div_euclid(86_400 * MICROS)).ok();
        }
        let local = self.local(micros)?;
        let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?;
        i32::try_from((local.date() - epoch).num_days()).ok()
    }
}

/// `+05:30` for 19800 seconds (`+05:30:15` where seconds remain).
fn offset_text(secs: i32) -> String {
    let sign = if secs < 0 { '-' } else { '+' };
    let a = secs.unsigned_abs();
    let (h, m, s) = (a / 3600, a / 60 % 60, a % 60);
    if s == 0 {
        format!("{sign}{h:02}:{m:02}")
    } else {
        format!("{sign}{h:02}:{m:02}:{s:02}")
    }
}

/// An offset as `java.time.ZoneOffset.of` reads it: `+h`, `+hh`, `+hh:mm`,
/// `+hhmm`, `+hh:mm:ss`, `+hhmmss` (at most 18 hours).
fn offset(text: &str) -> Option<FixedOffset> {
    let (sign, body) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let digits: String = body.chars().filter(|c| *c != ':').collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let colons = body.matches(':').count();
    let part = |s: &str| s.parse::<i32>().ok();
    let (h, m, s) = match (digits.len(), colons) {
        (1 | 2, 0) => (part(&digits)?, 0, 0),
        (4, 0) | (4, 1) => (part(&digits[..2])?, part(&digits[2..])?, 0),
        (6, 0) | (6, 2) => (
            part(&digits[..2])?,
            part(&digits[2..4])?,
            part(&digits[4..])?,
        ),
        _ => return None,
    };
    if colons == 1 && body.find(':') != Some(2) {
        return None;
    }
    if h > 18 || m > 59 || s > 59 || (h == 18 && (m > 0 || s > 0)) {
        return None;
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60 + s))
}

impl FromStr for SessionTz {
    type Err = TimeZoneError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SessionTz::parse(s)
    }
}

impl fmt::Display for SessionTz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl serde::Serialize for SessionTz {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> serde::Deserialize<'de> for SessionTz {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        SessionTz::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S").expect("a time")
    }

    fn utc(text: &str) -> i64 {
        at(text).and_utc().timestamp_micros()
    }

    #[test]
    fn zones_as_spark_takes_them() {
        assert_eq!(SessionTz::parse("UTC"), Ok(SessionTz::Utc));
        assert_eq!(SessionTz::parse("+00:00"), Ok(SessionTz::Utc));
        assert_eq!(
            SessionTz::parse("+05:30").map(|z| z.name()),
            Ok("+05:30".into())
        );
        assert_eq!(
            SessionTz::parse("-8").map(|z| z.name()),
            Ok("-08:00".into())
        );
        assert_eq!(
            SessionTz::parse("UTC+0530").map(|z| z.name()),
            Ok("+05:30".into())
        );
        assert_eq!(
            SessionTz::parse("America/Los_Angeles").map(|z| z.name()),
            Ok("America/Los_Angeles".into())
        );
        for bad in ["Mars/Base", "+25:00", "+5:3", "", "america/los_angeles"] {
            assert!(SessionTz::parse(bad).is_err(), "{bad}");
        }
        let err = SessionTz::parse("Mars/Base").expect_err("unknown");
        assert!(err.to_string().contains("`Mars/Base`"), "{err}");
    }

    #[test]
    fn gaps_and_overlaps_as_java_time() {
        let la = SessionTz::parse("America/Los_Angeles").expect("zone");
        // 2026-03-08 02:30 does not exist in Los Angeles: 03:30 PDT.
        assert_eq!(
            la.instant(&at("2026-03-08 02:30:00")),
            Some(utc("2026-03-08 10:30:00"))
        );
        // 2026-11-01 01:30 happens twice: the first (PDT) is taken.
        assert_eq!(
            la.instant(&at("2026-11-01 01:30:00")),
            Some(utc("2026-11-01 08:30:00"))
        );
        assert_eq!(
            la.instant_preferring(&at("2026-11-01 01:00:00"), Some(-8 * 3600)),
            Some(utc("2026-11-01 09:00:00"))
        );
        assert_eq!(
            la.local(utc("2026-11-01 09:30:00")),
            Some(at("2026-11-01 01:30:00"))
        );
        assert_eq!(la.day_of(utc("2026-01-02 07:59:59")), Some(20_454));
        let kolkata = SessionTz::parse("Asia/Kolkata").expect("zone");
        assert_eq!(kolkata.day_start(20_454), Some(utc("2025-12-31 18:30:00")));
    }
}
