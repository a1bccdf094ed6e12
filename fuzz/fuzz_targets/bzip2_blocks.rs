//! The bzip2 block splitter (connectors/src/codec/bzip2_blocks.rs).
//!
//! Properties:
//! - no input panics it, whatever the bytes and the splits;
//! - text compressed as one or more streams, or as one stream of several blocks,
//!   and read split by split, at any cuts, gives the text (every line once, the
//!   first line in the split at 0), unless a block marker occurs by chance inside
//!   compressed data (a documented limitation, reported as an error);
//! - a split never returns other bytes than whole-stream decoding gives: it fails
//!   or agrees.

#![no_main]

use std::io::{Read, Write};

use bytes::Bytes;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../connectors/src/codec/bzip2_blocks.rs"]
mod bzip2_blocks;

/// Most splits one input is cut into.
const MAX_SPLITS: usize = 48;
/// The marker that begins each block, and the one that ends a stream.
const BLOCK_MAGIC: u64 = 0x3141_5926_5359;
const EOS_MAGIC: u64 = 0x1772_4538_5090;

#[derive(Debug, Arbitrary)]
enum Input {
    /// Any bytes taken for a file.
    Raw { file: Vec<u8>, cuts: Vec<u16> },
    /// Text cut into pieces at `piece_cuts`, each compressed at a level from 1 to
    /// 9, as one stream per piece or, with `one_stream`, the pieces' blocks
    /// spliced into one stream (blocks of a few bytes, at any bit offset).
    Text {
        text: Vec<u8>,
        piece_cuts: Vec<u16>,
        level: u8,
        one_stream: bool,
        cuts: Vec<u16>,
    },
}

/// `[0, len)` cut at the given points, as contiguous non-empty ranges.
fn ranges(len: usize, cuts: &[u16]) -> Vec<(u64, u64)> {
    let mut points: Vec<usize> = cuts
        .iter()
        .take(MAX_SPLITS)
        .map(|&c| usize::from(c) % (len + 1))
        .collect();
    points.extend([0, len]);
    points.sort_unstable();
    points.dedup();
    let out: Vec<(u64, u64)> = points
        .windows(2)
        .map(|w| (w[0] as u64, w[1] as u64))
        .collect();
    if out.is_empty() {
        vec![(0, 0)]
    } else {
        out
    }
}

fn compress(data: &[u8], level: u32) -> Vec<u8> {
    let mut encoder = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::new(level));
    encoder.write_all(data).expect("compressing to memory");
    encoder.finish().expect("compressing to memory")
}

/// Bits appended most significant first.
#[derive(Default)]
struct Bits {
    bytes: Vec<u8>,
    used: u32,
}

impl Bits {
    fn push(&mut self, value: u64, n: u32) {
        for k in (0..n).rev() {
            if self.used % 8 == 0 {
                self.bytes.push(0);
            }
            let bit = ((value >> k) & 1) as u8;
            if let Some(last) = self.bytes.last_mut() {
                *last |= bit << (7 - self.used % 8);
            }
            self.used += 1;
        }
    }
}

/// Bit `i` of `bytes`, most significant first.
fn bit(bytes: &[u8], i: usize) -> u64 {
    u64::from((bytes[i / 8] >> (7 - i % 8)) & 1)
}

/// `n` bits of `bytes` from bit `at`.
fn bits(bytes: &[u8], at: usize, n: usize) -> u64 {
    (at..at + n).fold(0, |acc, i| (acc << 1) | bit(bytes, i))
}

/// One stream holding the block of each non-empty piece, compressed on its own:
/// each block's bits (from its marker to the end-of-stream marker that followed
/// it) one after the other, then an end-of-stream marker with the combined CRC.
fn splice(pieces: &[&[u8]], level: u32) -> Vec<u8> {
    let mut out = Bits::default();
    for &b in b"BZh" {
        out.push(u64::from(b), 8);
    }
    out.push(u64::from(b'0') + u64::from(level), 8);
    let mut combined = 0u32;
    for piece in pieces.iter().filter(|p| !p.is_empty()) {
        let stream = compress(piece, level);
        let total = stream.len() * 8;
        // The end-of-stream marker, its CRC and at most 7 bits of padding close it.
        let eos = (total.saturating_sub(87)..=total - 80)
            .find(|&at| bits(&stream, at, 48) == EOS_MAGIC)
            .expect("a stream ends with its end-of-stream marker");
        let crc = bits(&stream, 32 + 48, 32) as u32;
        combined = combined.rotate_left(1) ^ crc;
        for i in 32..eos {
            out.push(bit(&stream, i), 1);
        }
    }
    out.push(EOS_MAGIC, 48);
    out.push(u64::from(combined), 32);
    out.bytes
}

/// Decodes the whole file as consecutive streams, where it decodes.
fn decode_whole(file: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    bzip2::read::MultiBzDecoder::new(file)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

/// Each split read on its own, in order; the first error stops.
fn read_splits(file: &Bytes, ranges: &[(u64, u64)]) -> std::io::Result<Vec<Vec<u8>>> {
    ranges
        .iter()
        .map(|&(start, end)| {
            let mut out = Vec::new();
            bzip2_blocks::split_reader(file.clone(), start, end)?.read_to_end(&mut out)?;
            Ok(out)
        })
        .collect()
}

/// How often the 48-bit `magic` begins at any bit of `bytes`.
fn count_magic(bytes: &[u8], magic: u64) -> usize {
    let mut window = 0u64;
    let mut count = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        for k in (0..8).rev() {
            window = ((window << 1) | u64::from((byte >> k) & 1)) & ((1 << 48) - 1);
            if i * 8 + (7 - k) >= 47 && window == magic {
                count += 1;
            }
        }
    }
    count
}

/// Splits that succeed give exactly what whole decoding gives, with the first
/// line in the split at 0.
fn check_agrees(plain: &[u8], parts: &[Vec<u8>]) {
    let joined = parts.concat();
    assert!(
        joined == plain,
        "splits give {} bytes, whole decoding {}",
        joined.len(),
        plain.len()
    );
    let first_line = plain.split_inclusive(|&b| b == b'\n').next().unwrap_or(b"");
    assert!(
        parts.first().is_some_and(|p| p.starts_with(first_line)),
        "the first line is not in the split at 0"
    );
}

fuzz_target!(|input: Input| match input {
    Input::Raw { file, cuts } => {
        let ranges = ranges(file.len(), &cuts);
        let file = Bytes::from(file);
        let split = read_splits(&file, &ranges);
        if let (Ok(parts), Some(plain)) = (split, decode_whole(&file)) {
            check_agrees(&plain, &parts);
        }
    }
    Input::Text {
        text,
        piece_cuts,
        level,
        one_stream,
        cuts,
    } => {
        let level = u32::from(level % 9) + 1;
        let mut points: Vec<usize> = piece_cuts
            .iter()
            .take(8)
            .map(|&c| usize::from(c) % (text.len() + 1))
            .collect();
        points.extend([0, text.len()]);
        points.sort_unstable();
        points.dedup();
        let pieces: Vec<&[u8]> = if points.len() < 2 {
            vec![&text[..]]
        } else {
            points.windows(2).map(|w| &text[w[0]..w[1]]).collect()
        };
        let (file, streams) = if one_stream {
            (splice(&pieces, level), 1)
        } else {
            let file = pieces.iter().flat_map(|p| compress(p, level)).collect();
            (file, pieces.len())
        };
        assert_eq!(decode_whole(&file).as_deref(), Some(&text[..]));
        // Every non-empty piece is one block (a fuzz input is far below 100 kB);
        // more markers than that are markers by chance inside compressed data.
        let blocks = pieces.iter().filter(|p| !p.is_empty()).count();
        let clean =
            count_magic(&file, BLOCK_MAGIC) == blocks && count_magic(&file, EOS_MAGIC) == streams;
        let ranges = ranges(file.len(), &cuts);
        match read_splits(&Bytes::from(file), &ranges) {
            Ok(parts) => check_agrees(&text, &parts),
            Err(e) if clean => panic!("a clean file fails to split: {e}"),
            Err(_) => {}
        }
    }
});
