//! What an ORC footer says that orc-rust's `FileMetadata` leaves out: the
//! calendar its dates and timestamps are in, and the attributes of its
//! types (Spark marks a `bigint` holding a `timestamp_ntz` there). Read
//! from the file's tail with a few lines of protobuf: the postscript and
//! the footer are the messages orc-rust has already decoded once.

use std::io::Read;

use bytes::Bytes;
use orc_rust::compression::Compression;

/// The footer's `calendar` (field 11): `PROLEPTIC_GREGORIAN`.
const PROLEPTIC_GREGORIAN: u64 = 2;
/// Spark's attribute naming the Spark type a column holds.
const SPARK_TYPE: &str = "spark.sql.catalyst.type";

/// A tail that does not parse as the ORC specification says.
#[derive(Debug, thiserror::Error)]
pub(super) enum FooterError {
    /// The bytes end inside a field.
    #[error("orc {message} is cut short")]
    Truncated {
        /// The message being read.
        message: &'static str,
    },
    /// A wire type protobuf does not define.
    #[error("orc {message} holds a field of unknown wire type {wire}")]
    WireType {
        /// The message being read.
        message: &'static str,
        /// The wire type found.
        wire: u64,
    },
    /// The postscript gives no footer length, or one past the file's start.
    #[error("orc postscript gives no footer within the file")]
    NoFooter,
    /// The footer could not be decompressed.
    #[error("orc footer does not decompress: {0}")]
    Decompress(#[source] std::io::Error),
}

/// The calendar and type attributes of one ORC file.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct FooterExtras {
    /// Its dates and timestamps are proleptic Gregorian (the footer says
    /// so); otherwise, as Spark's reader takes them (the calendar written by
    /// ORC Java's default, and by files that name none), hybrid Julian.
    pub(super) proleptic: bool,
    /// For each column id, the Spark type its attributes name (`timestamp`,
    /// `timestamp_ntz`), if any.
    pub(super) spark_types: Vec<Option<String>>,
}

/// The byte range of the footer in a file of `size` bytes whose last
/// `tail.len()` bytes are `tail` (they must hold the postscript).
pub(super) fn footer_range(tail: &[u8], size: u64) -> Result<std::ops::Range<u64>, FooterError> {
    let (&ps_len, rest) = tail.split_last().ok_or(FooterError::Truncated {
        message: "postscript",
    })?;
    let ps_len = usize::from(ps_len);
    let start = rest
        .len()
        .checked_sub(ps_len)
        .ok_or(FooterError::Truncated {
            message: "postscript",
        })?;
    let mut footer_len = None;
    for field in Fields::new(&rest[start..], "postscript") {
        if let (1, Value::Varint(v)) = field? {
            footer_len = Some(v);
        }
    }
    let end = size
        .checked_sub(1 + ps_len as u64)
        .ok_or(FooterError::NoFooter)?;
    let begin = footer_len
        .and_then(|len| end.checked_sub(len))
        .ok_or(FooterError::NoFooter)?;
    Ok(begin..end)
}

/// Reads the calendar and type attributes of a footer as stored (compressed
/// as the file says).
pub(super) fn parse_footer(
    stored: Bytes,
    compression: Option<Compression>,
) -> Result<FooterExtras, FooterError> {
    let mut footer = Vec::new();
    orc_rust::compression::Decompressor::new(stored, compression, Vec::new())
        .read_to_end(&mut footer)
        .map_err(FooterError::Decompress)?;
    let mut extras = FooterExtras::default();
    for field in Fields::new(&footer, "footer") {
        match field? {
            (4, Value::Bytes(ty)) => extras.spark_types.push(spark_type(ty)?),
            (11, Value::Varint(calendar)) => extras.proleptic = calendar == PROLEPTIC_GREGORIAN,
            _ => {}
        }
    }
    Ok(extras)
}

/// The Spark type one `Type` message's attributes name.
fn spark_type(ty: &[u8]) -> Result<Option<String>, FooterError> {
    for field in Fields::new(ty, "type") {
        if let (7, Value::Bytes(pair)) = field? {
            let (mut key, mut value) = (None, None);
            for field in Fields::new(pair, "attribute") {
                match field? {
                    (1, Value::Bytes(k)) => key = Some(k),
                    (2, Value::Bytes(v)) => value = Some(v),
                    _ => {}
                }
            }
            if key == Some(SPARK_TYPE.as_bytes()) {
                return Ok(value.map(|v| String::from_utf8_lossy(v).into_owned()));
            }
        }
    }
    Ok(None)
}

/// One protobuf field's value (groups, long deprecated, are refused).
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one protobuf message, in order: (number, value).
struct Fields<'a> {
    bytes: &'a [u8],
    message: &'static str,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8], message: &'static str) -> Self {
        Fields { bytes, message }
    }

    fn varint(&mut self) -> Result<u64, FooterError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.bytes.split_first().ok_or(FooterError::Truncated {
                message: self.message,
            })?;
            self.bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(FooterError::Truncated {
            message: self.message,
        })
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], FooterError> {
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.bytes.len())
            .ok_or(FooterError::Truncated {
                message: self.message,
            })?;
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn field(&mut self) -> Result<(u64, Value<'a>), FooterError> {
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => self.take(8).map(|_| Value::Fixed)?,
            2 => {
                let len = self.varint()?;
                Value::Bytes(self.take(len)?)
            }
            5 => self.take(4).map(|_| Value::Fixed)?,
            wire => {
                return Err(FooterError::WireType {
                    message: self.message,
                    wire,
                })
            }
        };
        Ok((key >> 3, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), FooterError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.bytes.is_empty() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            self.bytes = &[];
        }
        Some(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn bytes_field(number: u64, body: &[u8], out: &mut Vec<u8>) {
        varint(number << 3 | 2, out);
        varint(body.len() as u64, out);
        out.extend_from_slice(body);
    }

    fn type_with(attribute: Option<(&str, &str)>) -> Vec<u8> {
        let mut ty = vec![0x08, 0x04]; // kind: LONG
        if let Some((k, v)) = attribute {
            let mut pair = Vec::new();
            bytes_field(1, k.as_bytes(), &mut pair);
            bytes_field(2, v.as_bytes(), &mut pair);
            bytes_field(7, &pair, &mut ty);
        }
        ty
    }

    #[test]
    fn calendar_and_spark_types_are_read() {
        let mut footer = Vec::new();
        varint(6 << 3, &mut footer); // numberOfRows
        varint(300, &mut footer);
        bytes_field(4, &type_with(None), &mut footer);
        bytes_field(
            4,
            &type_with(Some((SPARK_TYPE, "timestamp_ntz"))),
            &mut footer,
        );
        bytes_field(4, &type_with(Some(("other", "x"))), &mut footer);
        let extras = parse_footer(Bytes::from(footer.clone()), None).expect("parses");
        assert!(!extras.proleptic, "no calendar is the hybrid one");
        assert_eq!(
            extras.spark_types,
            [None, Some("timestamp_ntz".to_string()), None]
        );
        varint(11 << 3, &mut footer);
        varint(PROLEPTIC_GREGORIAN, &mut footer);
        assert!(
            parse_footer(Bytes::from(footer), None)
                .expect("parses")
                .proleptic
        );
    }

    #[test]
    fn the_footer_is_found_from_the_postscript() {
        // postscript: footerLength 40, compression NONE; then its length.
        let mut tail = vec![0u8; 50];
        let ps = [0x08, 40, 0x10, 0x00];
        tail.extend_from_slice(&ps);
        tail.push(ps.len() as u8);
        let size = 1000;
        assert_eq!(
            footer_range(&tail, size).expect("found"),
            (size - 1 - 4 - 40)..(size - 1 - 4)
        );
        assert!(footer_range(&[9, 1], 2).is_err(), "a postscript cut short");
        assert!(
            footer_range(&[0x08, 90, 2], 3).is_err(),
            "a footer before the file"
        );
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        for bytes in [
            &[0x0a, 0x05, 1][..],
            &[0x08][..],
            &[0x0b][..],
            &[0xff; 12][..],
        ] {
            assert!(
                Fields::new(bytes, "footer").any(|f| f.is_err()),
                "{bytes:?}"
            );
        }
    }
}
