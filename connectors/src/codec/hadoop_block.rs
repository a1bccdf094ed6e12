//! Reader of Hadoop's block framing (`BlockCompressorStream`), the container
//! of `SnappyCodec` and `Lz4Codec` files.
//!
//! A stream is a sequence of blocks. A block is a big-endian u32 holding its
//! uncompressed length, then chunks, each a big-endian u32 compressed length
//! and that many bytes, until the chunks' outputs add up to the block length.
//! A block of length 0 has no chunks (Hadoop writes one for an empty file).
//! Hadoop's reader stops at such a block; this one reads on, so files joined
//! with `cat` decode whole.
//!
//! The module uses nothing else of this crate outside its tests: the fuzz
//! targets (`fuzz/`) build it from source.

use std::error::Error;
use std::io::{self, Read};

/// Largest compressed chunk accepted; Hadoop's default chunks are 256 KiB.
pub(crate) const MAX_CHUNK_LEN: usize = 1 << 30;

/// Why a chunk failed to decompress.
#[derive(Debug)]
pub(crate) enum ChunkError {
    /// The chunk decompresses to more bytes than the output holds.
    OutputTooSmall,
    /// The chunk is not valid compressed data.
    Corrupt(Box<dyn Error + Send + Sync>),
}

/// Decompresses one framed chunk of a particular codec.
pub(crate) trait ChunkDecompressor {
    /// Codec name used in error messages.
    const NAME: &'static str;

    /// The most bytes `chunk` can decompress to (exact where the format
    /// records it).
    fn output_bound(&self, chunk: &[u8]) -> Result<usize, ChunkError>;

    /// Decompresses `chunk` into `out`, returning the bytes written.
    fn decompress(&mut self, chunk: &[u8], out: &mut [u8]) -> Result<usize, ChunkError>;
}

/// Chunks of raw snappy data (`SnappyCodec`).
#[derive(Debug, Default)]
pub(crate) struct SnappyChunks(snap::raw::Decoder);

/// Snappy emits at most 64 bytes per 2-3 input bytes; a header claiming more
/// than this ratio is corrupt.
const SNAPPY_MAX_RATIO: usize = 32;

impl ChunkDecompressor for SnappyChunks {
    const NAME: &'static str = "snappy";

    fn output_bound(&self, chunk: &[u8]) -> Result<usize, ChunkError> {
        let len = snap::raw::decompress_len(chunk).map_err(corrupt)?;
        if len > chunk.len().saturating_mul(SNAPPY_MAX_RATIO) {
            return Err(corrupt(format!(
                "snappy header claims {len} bytes from a {}-byte chunk",
                chunk.len()
            )));
        }
        Ok(len)
    }

    fn decompress(&mut self, chunk: &[u8], out: &mut [u8]) -> Result<usize, ChunkError> {
        self.0.decompress(chunk, out).map_err(|err| match err {
            snap::Error::BufferTooSmall { .. } => ChunkError::OutputTooSmall,
            other => corrupt(other),
        })
    }
}

/// Chunks of raw LZ4 block data (`Lz4Codec`).
#[derive(Debug, Default)]
pub(crate) struct Lz4Chunks;

/// An LZ4 input byte yields at most 255 output bytes.
const LZ4_MAX_RATIO: usize = 255;

impl ChunkDecompressor for Lz4Chunks {
    const NAME: &'static str = "lz4";

    fn output_bound(&self, chunk: &[u8]) -> Result<usize, ChunkError> {
        Ok(chunk.len().saturating_mul(LZ4_MAX_RATIO))
    }

    fn decompress(&mut self, chunk: &[u8], out: &mut [u8]) -> Result<usize, ChunkError> {
        lz4_flex::block::decompress_into(chunk, out).map_err(|err| match err {
            lz4_flex::block::DecompressError::OutputTooSmall { .. } => ChunkError::OutputTooSmall,
            other => corrupt(other),
        })
    }
}

fn corrupt<E: Into<Box<dyn Error + Send + Sync>>>(err: E) -> ChunkError {
    ChunkError::Corrupt(err.into())
}

/// A malformed Hadoop block stream.
#[derive(Debug, thiserror::Error)]
enum FramingError {
    #[error("hadoop {codec} block: stream ends inside a {field} length ({got} of 4 bytes)")]
    TruncatedLength {
        codec: &'static str,
        field: &'static str,
        got: usize,
    },
    #[error("hadoop {codec} block: stream ends with {left} bytes of its last block missing")]
    MissingChunk { codec: &'static str, left: usize },
    #[error("hadoop {codec} block: stream ends inside a chunk ({got} of {len} bytes)")]
    TruncatedChunk {
        codec: &'static str,
        got: usize,
        len: usize,
    },
    #[error("hadoop {codec} block: block length {len} is negative as a java int")]
    NegativeBlockLength { codec: &'static str, len: u32 },
    #[error("hadoop {codec} block: chunk of {len} bytes exceeds the {MAX_CHUNK_LEN}-byte limit")]
    ChunkTooLarge { codec: &'static str, len: usize },
    #[error(
        "hadoop {codec} block: chunk decompresses to more than the {left} bytes left in its block"
    )]
    Overflow { codec: &'static str, left: usize },
    #[error("hadoop {codec} block: chunk does not decompress: {cause}")]
    Corrupt {
        codec: &'static str,
        cause: Box<dyn Error + Send + Sync>,
    },
}

impl From<FramingError> for io::Error {
    fn from(err: FramingError) -> Self {
        io::Error::new(io::ErrorKind::InvalidData, err)
    }
}

/// Streaming decoder of a Hadoop block-framed stream, one chunk at a time.
pub(crate) struct HadoopBlockReader<R, F> {
    input: R,
    chunks: F,
    /// Uncompressed bytes of the current block not decoded yet.
    block_left: usize,
    /// The compressed chunk being decoded.
    chunk: Vec<u8>,
    /// Decoded bytes; only `out[out_pos..out_len]` are still unread.
    out: Vec<u8>,
    out_pos: usize,
    out_len: usize,
}

/// What a read of a 4-byte length found.
enum Length {
    /// The input ended before its first byte.
    End,
    /// The input ended after this many bytes.
    Partial(usize),
    Value(u32),
}

impl<R: Read, F: ChunkDecompressor> HadoopBlockReader<R, F> {
    /// Decodes `input`, decompressing each chunk with `chunks`.
    pub(crate) fn new(input: R, chunks: F) -> Self {
        Self {
            input,
            chunks,
            block_left: 0,
            chunk: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            out_len: 0,
        }
    }

    /// Decodes the next chunk into `out`; returns false at the clean end of
    /// the stream.
    fn decode_chunk(&mut self) -> io::Result<bool> {
        if !self.start_block()? {
            return Ok(false);
        }
        self.read_chunk()?;
        let bound = self
            .chunks
            .output_bound(&self.chunk)
            .map_err(|err| self.chunk_error(err))?;
        let room = bound.min(self.block_left);
        if self.out.len() < room {
            self.out.resize(room, 0);
        }
        let n = self
            .chunks
            .decompress(&self.chunk, &mut self.out[..room])
            .map_err(|err| self.chunk_error(err))?;
        self.block_left -= n;
        self.out_pos = 0;
        self.out_len = n;
        Ok(true)
    }

    /// Reads block headers until one has bytes left to decode; returns false
    /// at the clean end of the stream.
    fn start_block(&mut self) -> io::Result<bool> {
        while self.block_left == 0 {
            let len = match read_length(&mut self.input)? {
                Length::End => return Ok(false),
                Length::Partial(got) => return Err(self.truncated("block", got)),
                Length::Value(len) => len,
            };
            if i32::try_from(len).is_err() {
                let codec = F::NAME;
                return Err(FramingError::NegativeBlockLength { codec, len }.into());
            }
            self.block_left = len as usize;
        }
        Ok(true)
    }

    /// Reads the next compressed chunk of the current block into `chunk`.
    fn read_chunk(&mut self) -> io::Result<()> {
        let codec = F::NAME;
        let len = match read_length(&mut self.input)? {
            Length::End => {
                let left = self.block_left;
                return Err(FramingError::MissingChunk { codec, left }.into());
            }
            Length::Partial(got) => return Err(self.truncated("chunk", got)),
            Length::Value(len) => len as usize,
        };
        if len > MAX_CHUNK_LEN {
            return Err(FramingError::ChunkTooLarge { codec, len }.into());
        }
        self.chunk.clear();
        let got = (&mut self.input)
            .take(len as u64)
            .read_to_end(&mut self.chunk)?;
        if got < len {
            return Err(FramingError::TruncatedChunk { codec, got, len }.into());
        }
        Ok(())
    }

    fn truncated(&self, field: &'static str, got: usize) -> io::Error {
        let codec = F::NAME;
        FramingError::TruncatedLength { codec, field, got }.into()
    }

    fn chunk_error(&self, err: ChunkError) -> io::Error {
        let codec = F::NAME;
        match err {
            ChunkError::OutputTooSmall => FramingError::Overflow {
                codec,
                left: self.block_left,
            },
            ChunkError::Corrupt(source) => FramingError::Corrupt {
                codec,
                cause: source,
            },
        }
        .into()
    }
}

impl<R: Read, F: ChunkDecompressor> Read for HadoopBlockReader<R, F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.out_pos == self.out_len {
            if !self.decode_chunk()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.out_len - self.out_pos);
        buf[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
        self.out_pos += n;
        Ok(n)
    }
}

/// Reads a big-endian u32, telling a clean end of input from a cut-off one.
fn read_length(input: &mut impl Read) -> io::Result<Length> {
    let mut bytes = [0u8; 4];
    let mut got = 0;
    while got < bytes.len() {
        match input.read(&mut bytes[got..]) {
            Ok(0) if got == 0 => return Ok(Length::End),
            Ok(0) => return Ok(Length::Partial(got)),
            Ok(n) => got += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(Length::Value(u32::from_be_bytes(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test-only writer of Hadoop block framing: each block is a list of raw
    /// chunks, compressed one by one with `compress`.
    fn frame(blocks: &[Vec<&[u8]>], compress: fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
        let mut out = Vec::new();
        for block in blocks {
            let raw: usize = block.iter().map(|c| c.len()).sum();
            out.extend(u32::try_from(raw).unwrap().to_be_bytes());
            for chunk in block {
                let packed = compress(chunk);
                out.extend(u32::try_from(packed.len()).unwrap().to_be_bytes());
                out.extend(packed);
            }
        }
        out
    }

    fn snappy(raw: &[u8]) -> Vec<u8> {
        snap::raw::Encoder::new().compress_vec(raw).unwrap()
    }

    fn lz4(raw: &[u8]) -> Vec<u8> {
        lz4_flex::block::compress(raw)
    }

    fn decode<F: ChunkDecompressor>(chunks: F, bytes: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        HadoopBlockReader::new(bytes, chunks).read_to_end(&mut out)?;
        Ok(out)
    }

    fn decode_both(bytes_of: impl Fn(fn(&[u8]) -> Vec<u8>) -> Vec<u8>) -> [io::Result<Vec<u8>>; 2] {
        [
            decode(SnappyChunks::default(), &bytes_of(snappy)),
            decode(Lz4Chunks, &bytes_of(lz4)),
        ]
    }

    fn text(from: u32, to: u32) -> Vec<u8> {
        (from..to)
            .flat_map(|i| format!("{i}\tword{}\n", i % 13).into_bytes())
            .collect()
    }

    /// Three blocks, the first cut into two chunks, with an empty block
    /// between the second and third.
    fn sample() -> (Vec<u8>, Vec<Vec<u8>>) {
        let parts = vec![
            text(0, 400),
            text(400, 900),
            text(900, 1000),
            text(1000, 3000),
        ];
        (parts.concat(), parts)
    }

    fn sample_blocks(parts: &[Vec<u8>]) -> Vec<Vec<&[u8]>> {
        vec![
            vec![&parts[0], &parts[1]],
            vec![&parts[2]],
            vec![],
            vec![&parts[3]],
        ]
    }

    #[test]
    fn round_trips_blocks_and_split_chunks() {
        let (plain, parts) = sample();
        for got in decode_both(|c| frame(&sample_blocks(&parts), c)) {
            assert_eq!(got.unwrap(), plain);
        }
    }

    #[test]
    fn small_reads_see_every_byte() {
        let (plain, parts) = sample();
        let framed = frame(&sample_blocks(&parts), lz4);
        let mut reader = HadoopBlockReader::new(framed.as_slice(), Lz4Chunks);
        let (mut got, mut buf) = (Vec::new(), [0u8; 7]);
        loop {
            let n = reader.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, plain);
    }

    #[test]
    fn empty_inputs_decode_empty() {
        for got in decode_both(|_| Vec::new()) {
            assert_eq!(got.unwrap(), b"");
        }
        // What Hadoop writes for an empty file: one block of length 0.
        for got in decode_both(|c| frame(&[vec![]], c)) {
            assert_eq!(got.unwrap(), b"");
        }
    }

    /// Decodes every prefix of a framed stream: only cuts at block ends may
    /// succeed, and then with a prefix of the text.
    fn check_cuts<F: ChunkDecompressor + Default>(compress: fn(&[u8]) -> Vec<u8>) {
        let (plain, parts) = sample();
        let blocks = sample_blocks(&parts);
        let framed = frame(&blocks, compress);
        let ends: Vec<usize> = (0..=blocks.len())
            .map(|i| frame(&blocks[..i], compress).len())
            .collect();
        for cut in 0..framed.len() {
            match decode(F::default(), &framed[..cut]) {
                Ok(out) => {
                    assert!(ends.contains(&cut), "{} cut at {cut} decoded", F::NAME);
                    assert!(plain.starts_with(&out));
                }
                Err(err) => assert_eq!(err.kind(), io::ErrorKind::InvalidData),
            }
        }
    }

    #[test]
    fn every_cut_inside_a_block_is_an_error() {
        check_cuts::<SnappyChunks>(snappy);
        check_cuts::<Lz4Chunks>(lz4);
    }

    #[test]
    fn garbage_is_an_error() {
        let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7919 % 251) as u8).collect();
        assert!(decode(SnappyChunks::default(), &garbage).is_err());
        assert!(decode(Lz4Chunks, &garbage).is_err());
        // A plausible header followed by noise.
        let mut noisy = 1000u32.to_be_bytes().to_vec();
        noisy.extend(200u32.to_be_bytes());
        noisy.extend(&garbage[..200]);
        for err in [
            decode(SnappyChunks::default(), &noisy).unwrap_err(),
            decode(Lz4Chunks, &noisy).unwrap_err(),
        ] {
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            assert!(err.to_string().starts_with("hadoop "), "{err}");
        }
    }

    #[test]
    fn oversized_chunk_is_refused() {
        let mut framed = 10u32.to_be_bytes().to_vec();
        framed.extend(u32::MAX.to_be_bytes());
        let err = decode(SnappyChunks::default(), &framed).unwrap_err();
        assert_eq!(
            err.to_string(),
            "hadoop snappy block: chunk of 4294967295 bytes exceeds the 1073741824-byte limit"
        );
    }

    #[test]
    fn negative_block_length_is_refused() {
        let err = decode(Lz4Chunks, &0x8000_0000u32.to_be_bytes()).unwrap_err();
        assert!(err.to_string().contains("negative"), "{err}");
    }

    /// Declares one byte fewer than the chunk decompresses to.
    fn check_overflow<F: ChunkDecompressor + Default>(compress: fn(&[u8]) -> Vec<u8>) {
        let raw = text(0, 100);
        let mut framed = frame(&[vec![raw.as_slice()]], compress);
        let short = u32::try_from(raw.len() - 1).unwrap();
        framed[..4].copy_from_slice(&short.to_be_bytes());
        let err = decode(F::default(), &framed).unwrap_err();
        let want = format!(
            "hadoop {} block: chunk decompresses to more than the {short} bytes left in its block",
            F::NAME
        );
        assert_eq!(err.to_string(), want);
    }

    #[test]
    fn output_beyond_the_declared_length_is_refused() {
        check_overflow::<SnappyChunks>(snappy);
        check_overflow::<Lz4Chunks>(lz4);
    }

    #[test]
    fn missing_chunk_is_an_error() {
        let framed = 10u32.to_be_bytes();
        let err = decode(Lz4Chunks, &framed).unwrap_err();
        assert_eq!(
            err.to_string(),
            "hadoop lz4 block: stream ends with 10 bytes of its last block missing"
        );
    }
}
