//! Hadoop's `DataOutput` encodings: big-endian integers, `WritableUtils`'
//! variable-length integers and `Text` strings, read from a stream or a
//! slice.

use std::io::{self, Read};

/// Bytes a `Text` string may take in a header (class names, metadata).
const MAX_HEADER_TEXT: i64 = 1 << 20;

/// Fills `buf`, failing on a short read.
pub(crate) fn read_exact(input: &mut dyn Read, buf: &mut [u8]) -> io::Result<()> {
    input.read_exact(buf)
}

/// A `DataInput.readBoolean`.
pub(crate) fn read_bool(input: &mut dyn Read) -> io::Result<bool> {
    let mut b = [0u8; 1];
    input.read_exact(&mut b)?;
    Ok(b[0] != 0)
}

/// A `DataInput.readInt`: four bytes, big-endian.
pub(crate) fn read_i32(input: &mut dyn Read) -> io::Result<i32> {
    let mut b = [0u8; 4];
    input.read_exact(&mut b)?;
    Ok(i32::from_be_bytes(b))
}

/// `WritableUtils.readVLong` from a stream.
pub(crate) fn read_vlong(input: &mut dyn Read) -> io::Result<i64> {
    let mut b = [0u8; 1];
    input.read_exact(&mut b)?;
    let first = b[0] as i8;
    let len = vlong_len(first);
    if len == 1 {
        return Ok(i64::from(first));
    }
    let mut value: i64 = 0;
    for _ in 1..len {
        input.read_exact(&mut b)?;
        value = (value << 8) | i64::from(b[0]);
    }
    Ok(if first < -120 { !value } else { value })
}

/// Bytes a vlong takes, its first byte included.
fn vlong_len(first: i8) -> usize {
    if first >= -112 {
        1
    } else if first < -120 {
        (-119 - i32::from(first)) as usize
    } else {
        (-111 - i32::from(first)) as usize
    }
}

/// `WritableUtils.readVLong` from a slice at `*at`, advancing it; `None`
/// when the slice ends first.
pub(crate) fn vlong_at(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let first = *bytes.get(*at)? as i8;
    let len = vlong_len(first);
    let rest = bytes.get(*at + 1..*at + len)?;
    *at += len;
    if len == 1 {
        return Some(i64::from(first));
    }
    let value = rest.iter().fold(0i64, |v, &b| (v << 8) | i64::from(b));
    Some(if first < -120 { !value } else { value })
}

/// A `Text.readString` from a stream: a vint length, then UTF-8.
pub(crate) fn read_text(input: &mut dyn Read) -> io::Result<String> {
    let len = read_vlong(input)?;
    if !(0..=MAX_HEADER_TEXT).contains(&len) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a string of {len} bytes"),
        ));
    }
    let mut buf = vec![0u8; len as usize];
    input.read_exact(&mut buf)?;
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `WritableUtils.writeVLong`.
    pub(crate) fn vlong(mut i: i64) -> Vec<u8> {
        if (-112..=127).contains(&i) {
            return vec![i as u8];
        }
        let mut len: i32 = -112;
        if i < 0 {
            i = !i;
            len = -120;
        }
        let mut tmp = i;
        while tmp != 0 {
            tmp >>= 8;
            len -= 1;
        }
        let mut out = vec![len as u8];
        let bytes = if len < -120 {
            -(len + 120)
        } else {
            -(len + 112)
        };
        for idx in (0..bytes).rev() {
            out.push(((i >> (idx * 8)) & 0xff) as u8);
        }
        out
    }

    #[test]
    fn vlongs_round_trip_on_every_length() {
        let values = [
            0,
            1,
            -1,
            127,
            -112,
            128,
            -113,
            255,
            256,
            -129,
            65_535,
            1 << 40,
            i64::MAX,
            i64::MIN,
            i64::from(i32::MIN),
        ];
        for v in values {
            let bytes = vlong(v);
            assert_eq!(read_vlong(&mut bytes.as_slice()).expect("read"), v, "{v}");
            let mut at = 0;
            assert_eq!(vlong_at(&bytes, &mut at), Some(v), "{v}");
            assert_eq!(at, bytes.len());
            if bytes.len() > 1 {
                assert_eq!(vlong_at(&bytes[..bytes.len() - 1], &mut 0), None, "{v}");
            }
        }
    }
}
