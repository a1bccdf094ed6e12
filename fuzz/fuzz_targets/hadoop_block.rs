//! Hadoop's block framing (connectors/src/codec/hadoop_block.rs), with snappy and
//! LZ4 chunks.
//!
//! Properties:
//! - no input panics the reader, nor makes it allocate beyond what the input can
//!   decompress to;
//! - what is read does not depend on the sizes of the reads;
//! - text framed in blocks and chunks of any sizes decodes to the text;
//! - a framed stream cut anywhere gives a prefix of the text and, unless the cut
//!   falls between blocks, an error.

#![no_main]

use std::io::Read;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../connectors/src/codec/hadoop_block.rs"]
mod hadoop_block;

use hadoop_block::{ChunkDecompressor, HadoopBlockReader, Lz4Chunks, SnappyChunks};

#[derive(Debug, Arbitrary)]
enum Input {
    /// Any bytes taken for a stream, read with reads of the given sizes.
    Raw {
        lz4: bool,
        stream: Vec<u8>,
        reads: Vec<u8>,
    },
    /// Text framed in blocks (cut at `block_cuts`) of chunks (cut at
    /// `chunk_cuts`), then the stream cut at `cut`.
    Framed {
        lz4: bool,
        text: Vec<u8>,
        block_cuts: Vec<u16>,
        chunk_cuts: Vec<u16>,
        cut: u16,
    },
}

/// Reads to the end with reads of the given sizes (cycled; 0 stands for 1); the
/// bytes read and the error that stopped it, if any.
fn read_all<F: ChunkDecompressor>(
    chunks: F,
    stream: &[u8],
    reads: &[u8],
) -> (Vec<u8>, Option<String>) {
    let mut reader = HadoopBlockReader::new(stream, chunks);
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    let mut sizes = reads.iter().map(|&n| usize::from(n.max(1))).cycle();
    loop {
        let size = if reads.is_empty() {
            buf.len()
        } else {
            sizes.next().unwrap_or(1)
        };
        match reader.read(&mut buf[..size]) {
            Ok(0) => return (out, None),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => return (out, Some(e.to_string())),
        }
    }
}

fn decode<F: ChunkDecompressor>(chunks: F, stream: &[u8]) -> (Vec<u8>, Option<String>) {
    let mut out = Vec::new();
    let result = HadoopBlockReader::new(stream, chunks).read_to_end(&mut out);
    (out, result.err().map(|e| e.to_string()))
}

/// Sorted distinct cut points in `[0, len]`, 0 and `len` included.
fn points(len: usize, cuts: &[u16], most: usize) -> Vec<usize> {
    let mut points: Vec<usize> = cuts
        .iter()
        .take(most)
        .map(|&c| usize::from(c) % (len + 1))
        .collect();
    points.extend([0, len]);
    points.sort_unstable();
    points.dedup();
    points
}

/// The text in Hadoop's framing: a big-endian u32 raw length per block, then
/// each chunk's big-endian u32 compressed length and bytes; a block of no bytes
/// has no chunks. Also returns the stream offsets where blocks end.
fn frame(
    text: &[u8],
    block_cuts: &[u16],
    chunk_cuts: &[u16],
    compress: fn(&[u8]) -> Vec<u8>,
) -> (Vec<u8>, Vec<usize>) {
    let mut stream = Vec::new();
    let mut block_ends = vec![0];
    let blocks = points(text.len(), block_cuts, 8);
    let chunk_points = points(text.len(), chunk_cuts, 32);
    for w in blocks.windows(2) {
        let (from, to) = (w[0], w[1]);
        stream.extend(u32::try_from(to - from).unwrap_or(u32::MAX).to_be_bytes());
        let mut inner: Vec<usize> = chunk_points
            .iter()
            .copied()
            .filter(|&p| p > from && p < to)
            .collect();
        inner.insert(0, from);
        inner.push(to);
        for c in inner.windows(2) {
            let packed = compress(&text[c[0]..c[1]]);
            stream.extend(
                u32::try_from(packed.len())
                    .unwrap_or(u32::MAX)
                    .to_be_bytes(),
            );
            stream.extend(packed);
        }
        block_ends.push(stream.len());
    }
    (stream, block_ends)
}

fn snappy(raw: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new()
        .compress_vec(raw)
        .expect("snappy compresses any input")
}

fn check_framed<F: ChunkDecompressor + Default>(
    text: &[u8],
    block_cuts: &[u16],
    chunk_cuts: &[u16],
    cut: u16,
    compress: fn(&[u8]) -> Vec<u8>,
) {
    let (stream, block_ends) = frame(text, block_cuts, chunk_cuts, compress);
    let (whole, error) = decode(F::default(), &stream);
    assert_eq!(error, None);
    assert!(
        whole == text,
        "decoded {} bytes of {}",
        whole.len(),
        text.len()
    );
    let cut = usize::from(cut) % (stream.len() + 1);
    let (part, error) = decode(F::default(), &stream[..cut]);
    assert!(
        text.starts_with(&part),
        "a cut stream gives bytes not in the text"
    );
    assert_eq!(
        error.is_none(),
        block_ends.contains(&cut),
        "cut at {cut} of {} (blocks end at {block_ends:?}): {error:?}",
        stream.len()
    );
}

fuzz_target!(|input: Input| match input {
    Input::Raw { lz4, stream, reads } => {
        let (whole, by_reads) = if lz4 {
            (
                decode(Lz4Chunks, &stream),
                read_all(Lz4Chunks, &stream, &reads),
            )
        } else {
            (
                decode(SnappyChunks::default(), &stream),
                read_all(SnappyChunks::default(), &stream, &reads),
            )
        };
        assert_eq!(whole, by_reads);
    }
    Input::Framed {
        lz4,
        text,
        block_cuts,
        chunk_cuts,
        cut,
    } => {
        if lz4 {
            check_framed::<Lz4Chunks>(
                &text,
                &block_cuts,
                &chunk_cuts,
                cut,
                lz4_flex::block::compress,
            );
        } else {
            check_framed::<SnappyChunks>(&text, &block_cuts, &chunk_cuts, cut, snappy);
        }
    }
});
