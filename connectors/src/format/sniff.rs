//! What a file's first bytes say it holds. A line-based file (text, CSV,
//! JSON lines) whose content is one of the binary formats Hadoop, Hive,
//! Spark and TensorFlow write is refused naming the file and what it holds,
//! never read as lines: a SequenceFile (`SEQ` and its version), Parquet
//! (`PAR1`), ORC (`ORC`), Avro (`Obj` 1), RCFile (`RCF`), and TFRecord
//! framing (a length whose masked CRC32C follows it).

use std::io::BufRead;

use crate::error::{Error, Result};
use crate::types::Format;

/// Looks at the start of `input` (nothing is consumed) and fails when it
/// holds a binary format, naming `display` and what it holds.
pub(crate) fn refuse_binary(input: &mut dyn BufRead, display: &str, read_as: &str) -> Result<()> {
    let head = input
        .fill_buf()
        .map_err(|e| Error::corrupt(display, read_as, e))?;
    match binary_format(head) {
        Some(found) => Err(Error::Format {
            path: display.to_string(),
            reason: format!("it holds {found}, not {read_as} lines; {}", advice(&found)),
        }),
        None => Ok(()),
    }
}

fn advice(found: &str) -> &'static str {
    if found.contains("saveAsPickleFile") || found.contains("saveAsObjectFile") {
        "sluice does not read pickled or Java-serialized objects: write the data with a DataFrame writer (df.write.parquet)"
    } else if found.starts_with("Parquet") {
        "pass --format parquet"
    } else if found.starts_with("ORC") {
        "pass --format orc"
    } else if found.starts_with("Avro") {
        "pass --format avro"
    } else if found.starts_with("a Hadoop SequenceFile") {
        "pass --format sequencefile"
    } else if found.starts_with("a Hive RCFile") {
        "pass --format rcfile"
    } else if found.starts_with("TFRecord") {
        "pass --format tfrecord"
    } else {
        "give the file a name ending in .gz, or pass --format tfrecord for TensorFlow's GZIP records"
    }
}

/// The key class an RCFile with the old SequenceFile header names.
const RCFILE_KEY_CLASS: &[u8] = b"org.apache.hadoop.hive.ql.io.RCFile$KeyBuffer";

/// The format a file starting with `head` holds by its magic bytes; `None`
/// when they name none (text, CSV or JSON lines).
pub(crate) fn format_of(head: &[u8]) -> Option<Format> {
    if head.len() >= 4 && head.starts_with(b"SEQ") && (4..=6).contains(&head[3]) {
        // RCFiles written before Hive 0.9 carry a SequenceFile header
        // naming the RCFile key class.
        if head
            .get(5..)
            .is_some_and(|c| c.starts_with(RCFILE_KEY_CLASS))
        {
            return Some(Format::Rcfile);
        }
        return Some(Format::Sequencefile);
    }
    if head.starts_with(b"PAR1") {
        return Some(Format::Parquet);
    }
    if head.starts_with(b"ORC") {
        return Some(Format::Orc);
    }
    if head.starts_with(b"Obj\x01") {
        return Some(Format::Avro);
    }
    if head.starts_with(b"RCF") && head.len() >= 4 && head[3] <= 1 {
        return Some(Format::Rcfile);
    }
    if is_tfrecord(head) {
        return Some(Format::Tfrecord);
    }
    // TensorFlow's GZIP records under a name without `.gz`.
    if is_gzip(head) && is_tfrecord(&gunzip_head(head)) {
        return Some(Format::Tfrecord);
    }
    None
}

/// Whether `head` starts with gzip's magic.
fn is_gzip(head: &[u8]) -> bool {
    head.starts_with(&[0x1f, 0x8b, 0x08])
}

/// As much of a gzip stream's content as `head` (its start) holds.
fn gunzip_head(head: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    let mut decoder = flate2::read::GzDecoder::new(head);
    let mut buf = [0u8; 64];
    while let Ok(n) = decoder.read(&mut buf) {
        if n == 0 || out.len() >= 64 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// Whether `head` starts with TFRecord framing: a length whose masked
/// CRC32C follows it.
fn is_tfrecord(head: &[u8]) -> bool {
    head.len() >= 12
        && head[..8]
            .try_into()
            .map(|length: [u8; 8]| {
                masked_crc32c(&length) == u32::from_le_bytes([head[8], head[9], head[10], head[11]])
            })
            .unwrap_or(false)
}

/// The binary format `head` starts with, described; `None` for text.
pub(crate) fn binary_format(head: &[u8]) -> Option<String> {
    if head.len() >= 4 && head.starts_with(b"SEQ") && (4..=6).contains(&head[3]) {
        return Some(sequence_file(head));
    }
    if head.starts_with(b"PAR1") {
        return Some("Parquet".to_string());
    }
    if head.starts_with(b"ORC") {
        return Some("ORC".to_string());
    }
    if head.starts_with(b"Obj\x01") {
        return Some("Avro".to_string());
    }
    if head.starts_with(b"RCF") && head.len() >= 4 && head[3] <= 1 {
        return Some("a Hive RCFile".to_string());
    }
    if is_tfrecord(head) {
        return Some("TFRecord records".to_string());
    }
    // A name without `.gz` is read as it is: gzip's bytes are no text.
    if is_gzip(head) {
        return Some("gzip-compressed data under a name without .gz".to_string());
    }
    None
}

/// A SequenceFile's header: its key and value classes where they read.
fn sequence_file(head: &[u8]) -> String {
    let mut at = 4;
    let key = read_text(head, &mut at);
    let value = read_text(head, &mut at);
    match (key, value) {
        (Some(k), Some(v)) => {
            let writer = match (k.as_str(), v.as_str()) {
                ("org.apache.hadoop.io.NullWritable", "org.apache.hadoop.io.BytesWritable") => {
                    " (as PySpark's saveAsPickleFile or Spark's saveAsObjectFile write it)"
                }
                _ => "",
            };
            format!("a Hadoop SequenceFile (key {k}, value {v}){writer}")
        }
        _ => "a Hadoop SequenceFile".to_string(),
    }
}

/// A Hadoop `Text` string: a variable-length length, then UTF-8 bytes.
fn read_text(bytes: &[u8], at: &mut usize) -> Option<String> {
    let len = read_vlong(bytes, at)?;
    let len = usize::try_from(len).ok()?;
    let end = at.checked_add(len)?;
    let text = std::str::from_utf8(bytes.get(*at..end)?).ok()?.to_string();
    *at = end;
    Some(text)
}

/// Hadoop's `WritableUtils.readVLong`.
fn read_vlong(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let first = *bytes.get(*at)? as i8;
    *at += 1;
    if first >= -112 {
        return Some(i64::from(first));
    }
    let negative = first < -120;
    let len = if negative {
        -119 - i32::from(first)
    } else {
        -111 - i32::from(first)
    };
    let mut value: i64 = 0;
    for _ in 1..len {
        value = (value << 8) | i64::from(*bytes.get(*at)?);
        *at += 1;
    }
    Some(if negative { !value } else { value })
}

/// TFRecord's masked CRC32C.
pub(crate) fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    (crc.rotate_right(15)).wrapping_add(0xa282_ead8)
}

/// CRC-32C (Castagnoli), bit by bit: only headers are checked here.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_heads_are_named() {
        let mut seq = b"SEQ\x06".to_vec();
        for class in [
            "org.apache.hadoop.io.IntWritable",
            "org.apache.hadoop.io.Text",
        ] {
            seq.push(class.len() as u8);
            seq.extend_from_slice(class.as_bytes());
        }
        seq.extend_from_slice(&[0, 0]);
        assert_eq!(
            binary_format(&seq).as_deref(),
            Some("a Hadoop SequenceFile (key org.apache.hadoop.io.IntWritable, value org.apache.hadoop.io.Text)")
        );
        assert_eq!(binary_format(b"PAR1\x15\x00").as_deref(), Some("Parquet"));
        assert_eq!(binary_format(b"ORC\x0a").as_deref(), Some("ORC"));
        assert_eq!(binary_format(b"Obj\x01\x04").as_deref(), Some("Avro"));
        let mut tf = 17u64.to_le_bytes().to_vec();
        tf.extend_from_slice(&masked_crc32c(&17u64.to_le_bytes()).to_le_bytes());
        tf.extend_from_slice(b"payload");
        assert_eq!(binary_format(&tf).as_deref(), Some("TFRecord records"));
        for text in [
            &b"id,name\n1,a\n"[..],
            b"{\"a\": 1}\n",
            b"SEQUENCE of lines\n",
            b"",
        ] {
            assert_eq!(binary_format(text), None, "{text:?}");
        }
    }

    #[test]
    fn rcfiles_with_a_sequencefile_header_are_rcfiles() {
        let mut head = b"SEQ\x06".to_vec();
        head.push(RCFILE_KEY_CLASS.len() as u8);
        head.extend_from_slice(RCFILE_KEY_CLASS);
        assert_eq!(format_of(&head), Some(Format::Rcfile));
        assert_eq!(format_of(b"RCF\x01\x00"), Some(Format::Rcfile));
        assert_eq!(
            format_of(b"SEQ\x06\x19org.apache.hadoop.io.Text"),
            Some(Format::Sequencefile)
        );
    }

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn gzip_under_a_plain_name_is_never_text() {
        use std::io::Write;
        let gzip = |data: &[u8]| {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(data).expect("gzip");
            enc.finish().expect("gzip")
        };
        let payload = b"\x0a\x03abc";
        let mut record = (payload.len() as u64).to_le_bytes().to_vec();
        let length_crc = masked_crc32c(&record);
        record.extend_from_slice(&length_crc.to_le_bytes());
        record.extend_from_slice(payload);
        record.extend_from_slice(&masked_crc32c(payload).to_le_bytes());
        assert_eq!(format_of(&gzip(&record)), Some(Format::Tfrecord));
        let text = gzip(b"id,name\n1,a\n");
        assert_eq!(format_of(&text), None);
        let found = binary_format(&text).expect("gzip is not text");
        assert!(advice(&found).contains(".gz"), "{found}");
        assert_eq!(binary_format(b"id,name\n1,a\n"), None);
    }
}
