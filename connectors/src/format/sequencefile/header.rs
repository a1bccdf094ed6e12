//! A SequenceFile's header, as Hadoop's `SequenceFile.Reader` reads it:
//! `SEQ` and a version (4–6 read here), the key and value class names,
//! whether values (or whole blocks) are compressed and with which codec,
//! the metadata (version 6) and the 16-byte sync marker.

use std::fmt;
use std::io::Read;

use super::wire::{read_bool, read_exact, read_i32, read_text};
use crate::codec::Codec;

/// The compression of a file's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    /// Keys and values as written.
    None,
    /// Each value compressed on its own (keys not).
    Record(Codec),
    /// Blocks of records, their key and value lengths, keys and values
    /// compressed in four buffers each.
    Block(Codec),
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::None => f.write_str("uncompressed"),
            Compression::Record(codec) => write!(f, "record {}", codec_label(*codec)),
            Compression::Block(codec) => write!(f, "block {}", codec_label(*codec)),
        }
    }
}

/// A codec as Hadoop users know it (`DefaultCodec` is zlib).
fn codec_label(codec: Codec) -> &'static str {
    match codec {
        Codec::Deflate => "zlib",
        other => other.name(),
    }
}

/// What a SequenceFile's header says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Header {
    /// The format version (4, 5 or 6).
    pub(crate) version: u8,
    /// The key's Writable class.
    pub(crate) key_class: String,
    /// The value's Writable class.
    pub(crate) value_class: String,
    /// How records are compressed.
    pub(crate) compression: Compression,
    /// The file's metadata (version 6).
    pub(crate) metadata: Vec<(String, String)>,
    /// The marker written before every block and every ~2,000 bytes of records.
    pub(crate) sync: [u8; 16],
    /// Bytes the header takes: the first record starts here.
    pub(crate) len: u64,
}

/// Why a header cannot be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeaderError {
    /// The file does not start with `SEQ`.
    #[error("not a SequenceFile: it does not start with `SEQ`")]
    NotSequenceFile,
    /// A version this reader does not read.
    #[error("SequenceFile version {0} is not read (versions 4 to 6 are, as Hadoop 0.20 and later write them)")]
    Version(u8),
    /// A codec class with no decoder here.
    #[error("values are compressed with {0}, which sluice does not decode (DefaultCodec, DeflateCodec, GzipCodec, BZip2Codec, SnappyCodec, Lz4Codec and ZStandardCodec are)")]
    Codec(String),
    /// The header ends early or holds bad lengths.
    #[error("its header is cut short or malformed: {0}")]
    Malformed(String),
}

/// Hadoop's codec classes and the decoder of each.
const CODECS: [(&str, Codec); 7] = [
    ("org.apache.hadoop.io.compress.DefaultCodec", Codec::Deflate),
    ("org.apache.hadoop.io.compress.DeflateCodec", Codec::Deflate),
    ("org.apache.hadoop.io.compress.GzipCodec", Codec::Gzip),
    ("org.apache.hadoop.io.compress.BZip2Codec", Codec::Bzip2),
    ("org.apache.hadoop.io.compress.SnappyCodec", Codec::Snappy),
    ("org.apache.hadoop.io.compress.Lz4Codec", Codec::Lz4),
    ("org.apache.hadoop.io.compress.ZStandardCodec", Codec::Zstd),
];

/// Metadata entries read at most (Hadoop writes a handful).
const MAX_METADATA: i32 = 1 << 16;

impl Header {
    /// Reads a header from the start of a file.
    pub(crate) fn read(input: &mut dyn Read) -> Result<Header, HeaderError> {
        let mut counted = Counting { inner: input, n: 0 };
        let header = Header::read_fields(&mut counted)?;
        Ok(Header {
            len: counted.n,
            ..header
        })
    }

    fn read_fields(input: &mut Counting<'_>) -> Result<Header, HeaderError> {
        let malformed = |e: std::io::Error| HeaderError::Malformed(e.to_string());
        let mut magic = [0u8; 4];
        input
            .read_exact(&mut magic)
            .map_err(|_| HeaderError::NotSequenceFile)?;
        if &magic[..3] != b"SEQ" {
            return Err(HeaderError::NotSequenceFile);
        }
        let version = magic[3];
        if !(4..=6).contains(&version) {
            return Err(HeaderError::Version(version));
        }
        let key_class = read_text(input).map_err(malformed)?;
        let value_class = read_text(input).map_err(malformed)?;
        let compressed = read_bool(input).map_err(malformed)?;
        let block = read_bool(input).map_err(malformed)?;
        let codec = if !compressed {
            None
        } else if version >= 5 {
            let class = read_text(input).map_err(malformed)?;
            Some(codec_of(&class)?)
        } else {
            Some(Codec::Deflate)
        };
        let compression = match (codec, block) {
            (None, _) => Compression::None,
            (Some(codec), false) => Compression::Record(codec),
            (Some(codec), true) => Compression::Block(codec),
        };
        let mut metadata = Vec::new();
        if version >= 6 {
            let count = read_i32(input).map_err(malformed)?;
            if !(0..=MAX_METADATA).contains(&count) {
                return Err(HeaderError::Malformed(format!("{count} metadata entries")));
            }
            for _ in 0..count {
                let key = read_text(input).map_err(malformed)?;
                let value = read_text(input).map_err(malformed)?;
                metadata.push((key, value));
            }
        }
        let mut sync = [0u8; 16];
        read_exact(input, &mut sync).map_err(malformed)?;
        Ok(Header {
            version,
            key_class,
            value_class,
            compression,
            metadata,
            sync,
            len: 0,
        })
    }
}

/// The decoder of a codec class.
fn codec_of(class: &str) -> Result<Codec, HeaderError> {
    CODECS
        .iter()
        .find(|(name, _)| *name == class)
        .map(|&(_, codec)| codec)
        .ok_or_else(|| HeaderError::Codec(class.to_string()))
}

/// A reader that counts the bytes read through it.
struct Counting<'a> {
    inner: &'a mut dyn Read,
    n: u64,
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A header as Hadoop writes it.
    pub(crate) fn header_bytes(key: &str, value: &str, codec: Option<(&str, bool)>) -> Vec<u8> {
        let mut out = b"SEQ\x06".to_vec();
        for class in [key, value] {
            out.push(class.len() as u8);
            out.extend_from_slice(class.as_bytes());
        }
        match codec {
            None => out.extend_from_slice(&[0, 0]),
            Some((class, block)) => {
                out.extend_from_slice(&[1, u8::from(block)]);
                out.push(class.len() as u8);
                out.extend_from_slice(class.as_bytes());
            }
        }
        out.extend_from_slice(&1i32.to_be_bytes());
        for text in ["writer", "sluice"] {
            out.push(text.len() as u8);
            out.extend_from_slice(text.as_bytes());
        }
        out.extend_from_slice(&SYNC);
        out
    }

    pub(crate) const SYNC: [u8; 16] = *b"0123456789abcdef";

    #[test]
    fn reads_classes_codec_metadata_and_sync() {
        let bytes = header_bytes(
            "org.apache.hadoop.io.IntWritable",
            "org.apache.hadoop.io.Text",
            Some(("org.apache.hadoop.io.compress.DefaultCodec", true)),
        );
        let header = Header::read(&mut bytes.as_slice()).expect("header");
        assert_eq!(header.key_class, "org.apache.hadoop.io.IntWritable");
        assert_eq!(header.value_class, "org.apache.hadoop.io.Text");
        assert_eq!(header.compression, Compression::Block(Codec::Deflate));
        assert_eq!(header.compression.to_string(), "block zlib");
        assert_eq!(header.metadata, vec![("writer".into(), "sluice".into())]);
        assert_eq!(header.sync, SYNC);
        assert_eq!(header.len, bytes.len() as u64);
    }

    #[test]
    fn unknown_codecs_versions_and_cut_headers_are_refused() {
        let lzo = header_bytes(
            "a",
            "b",
            Some(("com.hadoop.compression.lzo.LzoCodec", false)),
        );
        let err = Header::read(&mut lzo.as_slice()).expect_err("lzo");
        assert!(err.to_string().contains("LzoCodec"), "{err}");
        let err = Header::read(&mut &b"SEQ\x03abc"[..]).expect_err("version 3");
        assert!(err.to_string().contains("version 3"), "{err}");
        let full = header_bytes("a", "b", None);
        for cut in 4..full.len() {
            let err = Header::read(&mut &full[..cut]).expect_err("cut");
            assert!(matches!(err, HeaderError::Malformed(_)), "{cut}: {err}");
        }
        let err = Header::read(&mut &b"PAR1"[..]).expect_err("parquet");
        assert!(matches!(err, HeaderError::NotSequenceFile));
    }
}
