//! Compression codecs of Hadoop text output: picking one from a file name and
//! wrapping a byte stream in its streaming decoder.
//!
//! The codec is chosen by the file name's final suffix, as Hadoop's
//! `CompressionCodecFactory` does, so `part-00000.snappy.parquet` is plain
//! Parquet (the format compresses its pages itself) and is never decoded here.
//!
//! Only uncompressed and bzip2 files are splittable in Hadoop. A byte range of
//! a bzip2 file is read block by block from the block markers it holds, as
//! Hadoop's `SplittableCompressionCodec` does (module `bzip2_blocks`).

mod bzip2_blocks;
mod hadoop_block;
mod zlib;

use std::fmt;
use std::io::{self, BufRead, BufReader, Read};

use serde::{Deserialize, Serialize};

pub(crate) use self::bzip2_blocks::{split_reader as bzip2_split, RangeSource};
use self::hadoop_block::{HadoopBlockReader, Lz4Chunks, SnappyChunks};
use self::zlib::MultiZlibDecoder;

/// A compression codec of a Hadoop or Spark text output file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// Not compressed.
    #[default]
    None,
    /// `GzipCodec` (`.gz`): gzip, possibly several concatenated members.
    Gzip,
    /// `BZip2Codec` (`.bz2`): bzip2, possibly several concatenated streams.
    Bzip2,
    /// `DefaultCodec` (`.deflate`): zlib-wrapped deflate.
    Deflate,
    /// `ZStandardCodec` (`.zst`, also `.zstd`): zstd frames.
    Zstd,
    /// `SnappyCodec` (`.snappy`): raw snappy in Hadoop block framing.
    Snappy,
    /// `Lz4Codec` (`.lz4`): raw LZ4 blocks in Hadoop block framing.
    Lz4,
}

/// Final file-name suffixes and the codec each one selects.
const SUFFIXES: [(&str, Codec); 7] = [
    (".gz", Codec::Gzip),
    (".bz2", Codec::Bzip2),
    (".deflate", Codec::Deflate),
    (".zst", Codec::Zstd),
    (".zstd", Codec::Zstd),
    (".snappy", Codec::Snappy),
    (".lz4", Codec::Lz4),
];

impl Codec {
    /// The codec of a file, judged by the final suffix of its name or path.
    ///
    /// Matching is case-sensitive, as in Hadoop. Anything without a known
    /// final suffix is [`Codec::None`], including `x.snappy.parquet`,
    /// `x.zstd.orc` and `x.lz4.parquet`.
    pub fn from_path(name: &str) -> Codec {
        SUFFIXES
            .iter()
            .find(|(suffix, _)| name.ends_with(suffix))
            .map_or(Codec::None, |&(_, codec)| codec)
    }

    /// Whether a file in this codec can be cut into byte-range splits
    /// (uncompressed and bzip2 only).
    pub fn is_splittable(self) -> bool {
        matches!(self, Codec::None | Codec::Bzip2)
    }

    /// The lowercase name used in configuration and messages.
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Bzip2 => "bzip2",
            Codec::Deflate => "deflate",
            Codec::Zstd => "zstd",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Wraps `input` in a streaming decoder for `codec`; [`Codec::None`] returns
/// `input` unchanged.
///
/// Data is decoded as it is read, never buffered whole. Empty input reads as
/// empty for every codec, as in Hadoop. Corrupt or truncated input surfaces as
/// an `io::Error` from `read`.
pub fn decoder(codec: Codec, input: Box<dyn Read + Send>) -> Box<dyn Read + Send> {
    match codec {
        Codec::None => input,
        Codec::Gzip | Codec::Bzip2 | Codec::Zstd => {
            Box::new(LazyDecoder::Waiting(codec, BufReader::new(input)))
        }
        Codec::Deflate => Box::new(MultiZlibDecoder::new(input)),
        Codec::Snappy => Box::new(HadoopBlockReader::new(
            BufReader::new(input),
            SnappyChunks::default(),
        )),
        Codec::Lz4 => Box::new(HadoopBlockReader::new(BufReader::new(input), Lz4Chunks)),
    }
}

type BoxedInput = BufReader<Box<dyn Read + Send>>;

/// A gzip, bzip2 or zstd decoder built on the first read, once the input is
/// known not to be empty: these decoders take empty input for a truncated
/// stream, while Hadoop reads an empty file as empty.
enum LazyDecoder {
    Waiting(Codec, BoxedInput),
    Decoding(Box<dyn Read + Send>),
    /// The decoder could not be created; every read fails.
    Broken(Codec),
}

impl LazyDecoder {
    fn build(codec: Codec, input: BoxedInput) -> io::Result<Box<dyn Read + Send>> {
        Ok(match codec {
            Codec::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(input)),
            Codec::Bzip2 => Box::new(bzip2::bufread::MultiBzDecoder::new(input)),
            Codec::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(input)?),
            Codec::None | Codec::Deflate | Codec::Snappy | Codec::Lz4 => Box::new(input),
        })
    }

    /// Replaces `Waiting` by the decoder once input is available; returns
    /// false if the input is empty.
    fn start(&mut self) -> io::Result<bool> {
        let LazyDecoder::Waiting(codec, input) = self else {
            return Ok(true);
        };
        if input.fill_buf()?.is_empty() {
            return Ok(false);
        }
        let codec = *codec;
        let LazyDecoder::Waiting(_, input) = std::mem::replace(self, LazyDecoder::Broken(codec))
        else {
            return Ok(true);
        };
        *self = LazyDecoder::Decoding(Self::build(codec, input)?);
        Ok(true)
    }
}

impl Read for LazyDecoder {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.start()? {
            return Ok(0);
        }
        match self {
            LazyDecoder::Decoding(decoder) => decoder.read(buf),
            LazyDecoder::Waiting(..) => Ok(0),
            LazyDecoder::Broken(codec) => Err(io::Error::other(format!(
                "{codec} decoder could not be created"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn decode(codec: Codec, bytes: Vec<u8>) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        decoder(codec, Box::new(io::Cursor::new(bytes))).read_to_end(&mut out)?;
        Ok(out)
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn bzip2(data: &[u8]) -> Vec<u8> {
        let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn zstd(data: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(data, 3).unwrap()
    }

    type Encode = fn(&[u8]) -> Vec<u8>;

    const STREAM_ENCODERS: [(Codec, Encode); 4] = [
        (Codec::Gzip, gzip),
        (Codec::Bzip2, bzip2),
        (Codec::Deflate, zlib),
        (Codec::Zstd, zstd),
    ];

    fn lines(from: u32, to: u32) -> Vec<u8> {
        (from..to)
            .flat_map(|i| format!("{i}\tword{}\n", i % 17).into_bytes())
            .collect()
    }

    /// Two members/streams/frames of the same codec, back to back.
    fn two_parts(encode: Encode) -> (Vec<u8>, Vec<u8>) {
        let (first, second) = (lines(0, 5000), lines(5000, 9000));
        let mut encoded = encode(&first);
        encoded.extend(encode(&second));
        ([first, second].concat(), encoded)
    }

    #[test]
    fn codec_from_final_suffix() {
        let cases = [
            ("part-00000.gz", Codec::Gzip),
            ("s3://b/out/part-00000.bz2", Codec::Bzip2),
            ("part-r-00000.deflate", Codec::Deflate),
            ("part-00000.zst", Codec::Zstd),
            ("part-00000.zstd", Codec::Zstd),
            ("part-00000.snappy", Codec::Snappy),
            ("part-00000.lz4", Codec::Lz4),
            ("part-00000", Codec::None),
            ("part-00000.csv", Codec::None),
            ("part-00000.csv.gz", Codec::Gzip),
            ("part-00000-1b2c-c000.snappy.parquet", Codec::None),
            ("part-00000-1b2c-c000.snappy.orc", Codec::None),
            ("part-00000-1b2c-c000.zstd.parquet", Codec::None),
            ("part-00000-1b2c-c000.lz4.parquet", Codec::None),
            ("part-00000.gz.crc", Codec::None),
            ("dir.gz/part-00000", Codec::None),
            ("part-00000.GZ", Codec::None),
        ];
        for (name, want) in cases {
            assert_eq!(Codec::from_path(name), want, "{name}");
        }
    }

    #[test]
    fn only_none_and_bzip2_split() {
        let splittable: Vec<Codec> = SUFFIXES
            .iter()
            .map(|&(_, c)| c)
            .chain([Codec::None])
            .filter(|c| c.is_splittable())
            .collect();
        assert_eq!(splittable, [Codec::Bzip2, Codec::None]);
    }

    #[test]
    fn names_in_display_and_serde() {
        assert_eq!(Codec::Bzip2.to_string(), "bzip2");
        assert_eq!(serde_json::to_string(&Codec::Lz4).unwrap(), "\"lz4\"");
        let back: Codec = serde_json::from_str("\"deflate\"").unwrap();
        assert_eq!(back, Codec::Deflate);
    }

    #[test]
    fn none_passes_bytes_through() {
        let data = lines(0, 10);
        assert_eq!(decode(Codec::None, data.clone()).unwrap(), data);
    }

    #[test]
    fn gzip_concatenated_members() {
        let (plain, encoded) = two_parts(gzip);
        assert_eq!(decode(Codec::Gzip, encoded).unwrap(), plain);
    }

    #[test]
    fn bzip2_concatenated_streams() {
        let (plain, encoded) = two_parts(bzip2);
        assert_eq!(decode(Codec::Bzip2, encoded).unwrap(), plain);
    }

    #[test]
    fn deflate_single_and_concatenated_zlib() {
        let data = lines(0, 3000);
        assert_eq!(decode(Codec::Deflate, zlib(&data)).unwrap(), data);
        let (plain, encoded) = two_parts(zlib);
        assert_eq!(decode(Codec::Deflate, encoded).unwrap(), plain);
    }

    #[test]
    fn zstd_two_frames() {
        let (plain, encoded) = two_parts(zstd);
        assert_eq!(decode(Codec::Zstd, encoded).unwrap(), plain);
    }

    #[test]
    fn zero_bytes_decode_empty() {
        for (_, codec) in SUFFIXES {
            assert_eq!(decode(codec, Vec::new()).unwrap(), b"", "{codec}");
        }
    }

    #[test]
    fn compressed_empty_input_decodes_empty() {
        for (codec, encode) in STREAM_ENCODERS {
            assert_eq!(decode(codec, encode(b"")).unwrap(), b"", "{codec}");
        }
    }

    #[test]
    fn garbage_is_an_error_for_every_codec() {
        let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
        for (_, codec) in SUFFIXES {
            assert!(decode(codec, garbage.clone()).is_err(), "{codec}");
        }
    }

    #[test]
    fn truncated_streams_are_errors() {
        let data = lines(0, 3000);
        for (codec, encode) in STREAM_ENCODERS {
            let mut encoded = encode(&data);
            encoded.truncate(encoded.len() / 2);
            assert!(decode(codec, encoded).is_err(), "{codec}");
        }
    }
}
