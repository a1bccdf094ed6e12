//! Byte-range splits of bzip2 files: block markers found at any bit offset,
//! blocks decoded one at a time, and lines assigned to exactly one split.
//!
//! A bzip2 stream is `BZh` and a level digit, then blocks that each begin with
//! the 48-bit marker `0x314159265359` (at any bit offset, not byte aligned)
//! and the block's 32-bit CRC, then the end-of-stream marker `0x177245385090`
//! with the combined CRC, padded to a byte. A file may hold several streams.
//!
//! Like Hadoop's `BZip2Codec`, a split `[start, end)` owns the blocks whose
//! marker begins at a bit in `[start * 8, end * 8)`, except that the file's
//! first block always belongs to the split at byte 0 (so the file's first
//! line, a CSV header, is read by the split that starts at 0). In decoded
//! coordinates, where block `k` covers `[D_k, D_{k+1})`, a split owning blocks
//! `a..b` applies `LineRecordReader` rules to the range `[D_a - 1, D_b - 1]`:
//! it skips the line holding byte `D_a - 1` (the last byte of block `a - 1`,
//! decoded for that purpose) and reads every line starting before `D_b`,
//! decoding following blocks as far as needed to finish its last line.
//!
//! Each block is decoded on its own by wrapping its bits in a one-block
//! stream: `BZh9`, the block re-aligned to a byte, the end-of-stream marker
//! and, as combined CRC, the block's own CRC. Level 9 is used whatever the
//! stream's level: the level only bounds the block size a decoder accepts.
//!
//! Limitation (shared with Hadoop): the 48-bit marker can occur by chance
//! inside compressed data. Such a false boundary makes the blocks on either
//! side fail to decode, which is reported as an error naming the offset.
//!
//! The module uses nothing else of this crate outside its tests: the fuzz
//! targets (`fuzz/`) build it from source.

use std::io::{self, Read};
use std::ops::Range;

use bytes::Bytes;
use thiserror::Error;

/// The block marker, the first 48 bits of every block.
const BLOCK_MAGIC: u64 = 0x3141_5926_5359;
/// The end-of-stream marker, followed by the combined CRC.
const EOS_MAGIC: u64 = 0x1772_4538_5090;
const MAGIC_BITS: u64 = 48;
const MAGIC_MASK: u64 = (1 << MAGIC_BITS) - 1;
/// Bits of the CRC that follows each marker.
const CRC_BITS: u64 = 32;
/// Bytes fetched at a time when scanning forward.
const FETCH_CHUNK: u64 = 1 << 20;
/// First look-back for the block before a split's first block: more than the
/// largest compressed block (level 9 blocks hold at most 900 kB of input).
const BACK_WINDOW: u64 = (1 << 20) + (64 << 10);

/// Random access to the bytes of one file.
pub(crate) trait RangeSource {
    /// The file's size in bytes.
    fn size(&self) -> u64;
    /// The bytes `[start, end)`, both within the file.
    fn get(&mut self, start: u64, end: u64) -> io::Result<Bytes>;
}

impl RangeSource for Bytes {
    fn size(&self) -> u64 {
        self.len() as u64
    }

    fn get(&mut self, start: u64, end: u64) -> io::Result<Bytes> {
        Ok(self.slice(start as usize..end as usize))
    }
}

/// What went wrong while splitting a bzip2 file.
#[derive(Debug, Error)]
enum BlockError {
    #[error("bzip2 block at byte {byte} (bit {bit}) does not decode, possibly a false block marker: {cause}")]
    Undecodable {
        byte: u64,
        bit: u64,
        cause: io::Error,
    },
    #[error(
        "bzip2 block at byte {byte} (bit {bit}) is followed by no block or end-of-stream marker"
    )]
    Unterminated { byte: u64, bit: u64 },
    #[error("bzip2 block at byte {byte} (bit {bit}) decodes to nothing")]
    EmptyBlock { byte: u64, bit: u64 },
    #[error("not a bzip2 file: no `BZh` header at byte 0")]
    BadHeader,
    #[error("short read of bytes {start}..{end}: got {got} bytes")]
    ShortRead { start: u64, end: u64, got: usize },
}

impl From<BlockError> for io::Error {
    fn from(e: BlockError) -> Self {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

impl BlockError {
    fn undecodable(bit: u64, source: io::Error) -> Self {
        BlockError::Undecodable {
            byte: bit / 8,
            bit,
            cause: source,
        }
    }
}

/// Which marker was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Block,
    EndOfStream,
}

/// A marker and the bit offset in the file where it begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Marker {
    bit: u64,
    kind: Kind,
}

/// For each byte value, the bit shifts `s` at which a marker starting at bit
/// `s` of the previous byte has this value as its second byte: a filter that
/// spares testing every shift at every byte.
const SECOND_BYTE: [u8; 256] = second_byte_table();

const fn second_byte_table() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut s = 0;
    while s < 8 {
        table[((BLOCK_MAGIC >> (32 + s)) & 0xff) as usize] |= 1 << s;
        table[((EOS_MAGIC >> (32 + s)) & 0xff) as usize] |= 1 << s;
        s += 1;
    }
    table
}

/// A contiguous, growable stretch `[base, base + buf.len())` of the file.
struct Window<S> {
    source: S,
    base: u64,
    buf: Vec<u8>,
}

impl<S: RangeSource> Window<S> {
    fn new(source: S, base: u64) -> Self {
        Window {
            source,
            base,
            buf: Vec::new(),
        }
    }

    /// One past the last bit held.
    fn end_bit(&self) -> u64 {
        (self.base + self.buf.len() as u64) * 8
    }

    fn fetch(&mut self, start: u64, end: u64) -> io::Result<Bytes> {
        let got = self.source.get(start, end)?;
        if got.len() as u64 != end - start {
            return Err(BlockError::ShortRead {
                start,
                end,
                got: got.len(),
            }
            .into());
        }
        Ok(got)
    }

    /// Appends up to `want` more bytes of the file; false at its end.
    fn grow_forward(&mut self, want: u64) -> io::Result<bool> {
        let from = self.base + self.buf.len() as u64;
        let to = self.source.size().min(from + want.max(1));
        if from >= to {
            return Ok(false);
        }
        let chunk = self.fetch(from, to)?;
        self.buf.extend_from_slice(&chunk);
        Ok(true)
    }

    /// Prepends the bytes from `lo` to the current base.
    fn grow_back(&mut self, lo: u64) -> io::Result<()> {
        if lo < self.base {
            let mut joined = self.fetch(lo, self.base)?.to_vec();
            joined.extend_from_slice(&self.buf);
            self.buf = joined;
            self.base = lo;
        }
        Ok(())
    }

    /// Drops the bytes before `byte`.
    fn trim_to(&mut self, byte: u64) {
        if byte > self.base {
            let n = ((byte - self.base) as usize).min(self.buf.len());
            self.buf.drain(..n);
            self.base += n as u64;
        }
    }

    /// The 64 bits from byte `i` of the buffer, zero past its end.
    fn word_at(&self, i: usize) -> u64 {
        let mut word = [0u8; 8];
        let avail = self.buf.len().saturating_sub(i).min(8);
        word[..avail].copy_from_slice(&self.buf[i..i + avail]);
        u64::from_be_bytes(word)
    }

    /// The marker beginning at bit `s` of buffer byte `i`, if any; the whole
    /// marker must lie in the buffer.
    fn marker_at(&self, i: usize, s: u32) -> Option<Kind> {
        let bit = (self.base + i as u64) * 8 + u64::from(s);
        if bit + MAGIC_BITS > self.end_bit() {
            return None;
        }
        match (self.word_at(i) >> (16 - s)) & MAGIC_MASK {
            BLOCK_MAGIC => Some(Kind::Block),
            EOS_MAGIC => Some(Kind::EndOfStream),
            _ => None,
        }
    }

    /// The markers of a wanted kind beginning in buffer byte `i` at a bit in
    /// `bits`, in bit order (reversed if `backward`). A table lookup on the
    /// following byte rules out most bytes at once.
    fn markers_in_byte(
        &self,
        i: usize,
        bits: &Range<u64>,
        want: fn(Kind) -> bool,
        backward: bool,
    ) -> Option<Marker> {
        let candidates = self.buf.get(i + 1).map_or(0, |&b| SECOND_BYTE[b as usize]);
        if candidates == 0 {
            return None;
        }
        let first_bit = (self.base + i as u64) * 8;
        let mut shifts = (0..8u32).filter(|s| candidates & (1 << s) != 0);
        let mut check = |s: u32| {
            let bit = first_bit + u64::from(s);
            let kind = self.marker_at(i, s).filter(|&k| want(k));
            kind.filter(|_| bits.contains(&bit))
                .map(|kind| Marker { bit, kind })
        };
        if backward {
            shifts.rev().find_map(&mut check)
        } else {
            shifts.find_map(&mut check)
        }
    }

    /// The buffer bytes holding the bits `[from, to)`, clipped to the buffer.
    fn bytes_of(&self, from: u64, to: u64) -> Option<(Range<u64>, Range<usize>)> {
        let (from, to) = (from.max(self.base * 8), to.min(self.end_bit()));
        if from >= to {
            return None;
        }
        let first = (from / 8 - self.base) as usize;
        let last = ((to - 1) / 8 - self.base) as usize;
        Some((from..to, first..last + 1))
    }

    /// The first marker of a wanted kind beginning in `[from, to)` (bits)
    /// within the buffer.
    fn scan(&self, from: u64, to: u64, want: fn(Kind) -> bool) -> Option<Marker> {
        let (bits, bytes) = self.bytes_of(from, to)?;
        bytes
            .into_iter()
            .find_map(|i| self.markers_in_byte(i, &bits, want, false))
    }

    /// The last block marker beginning in `[from, to)` (bits) within the buffer.
    fn scan_back(&self, from: u64, to: u64) -> Option<u64> {
        let (bits, bytes) = self.bytes_of(from, to)?;
        bytes
            .rev()
            .find_map(|i| self.markers_in_byte(i, &bits, is_block, true))
            .map(|m| m.bit)
    }

    /// The first marker of a wanted kind beginning in `[from, limit)` (bits),
    /// fetching forward as needed; `None` if there is none before `limit` or
    /// the end of the file.
    fn find_forward(
        &mut self,
        from: u64,
        limit: u64,
        want: fn(Kind) -> bool,
    ) -> io::Result<Option<Marker>> {
        let mut from = from;
        loop {
            // Markers beginning before `ready` lie wholly in the buffer.
            let ready = (self.end_bit() + 1).saturating_sub(MAGIC_BITS).max(from);
            let to = ready.min(limit);
            if let Some(marker) = self.scan(from, to, want) {
                return Ok(Some(marker));
            }
            if to >= limit {
                return Ok(None);
            }
            from = to;
            // No more than the search needs: a split may be tiny.
            let want = (limit / 8 + 8).saturating_sub(self.end_bit() / 8);
            if !self.grow_forward(want.min(FETCH_CHUNK))? {
                return Ok(None);
            }
        }
    }

    /// The last block marker beginning before bit `to`, looking back from the
    /// window's base further and further; `None` if there is none in the file.
    fn find_back(&mut self, to: u64) -> io::Result<Option<u64>> {
        let mut span = BACK_WINDOW;
        let mut scanned_from = to;
        loop {
            let lo = self.base.saturating_sub(span);
            self.grow_back(lo)?;
            if let Some(bit) = self.scan_back(lo * 8, scanned_from) {
                return Ok(Some(bit));
            }
            if lo == 0 {
                return Ok(None);
            }
            scanned_from = lo * 8;
            span = span.saturating_mul(2);
        }
    }

    /// `n` (at most 64) bits from bit `bit` of the file, which must be held.
    fn bits(&self, bit: u64, n: u32) -> u64 {
        (0..u64::from(n)).fold(0, |acc, k| {
            let b = bit + k;
            let byte = self.buf[(b / 8 - self.base) as usize];
            (acc << 1) | u64::from((byte >> (7 - b % 8)) & 1)
        })
    }

    /// A one-block stream holding the block bits `[from, to)`.
    fn single_block_stream(&self, from: u64, to: u64) -> Vec<u8> {
        let mut out = BitWriter::default();
        out.bytes.extend_from_slice(b"BZh9");
        let nbits = to - from;
        let first = (from / 8 - self.base) as usize;
        let shift = (from % 8) as u32;
        let whole = (nbits / 8) as usize;
        out.bytes.reserve(whole + 16);
        for j in first..first + whole {
            let pair =
                (u16::from(self.buf[j]) << 8) | u16::from(*self.buf.get(j + 1).unwrap_or(&0));
            out.bytes.push(((pair << shift) >> 8) as u8);
        }
        let tail = (nbits % 8) as u32;
        out.push(self.bits(from + whole as u64 * 8, tail), tail);
        out.push(EOS_MAGIC, MAGIC_BITS as u32);
        out.push(
            self.bits(from + MAGIC_BITS, CRC_BITS as u32),
            CRC_BITS as u32,
        );
        out.finish()
    }

    /// Decodes the block whose marker begins at bit `bit`; returns its bytes
    /// and the marker that ends it.
    fn decode_block(&mut self, bit: u64) -> io::Result<(Vec<u8>, Marker)> {
        let unterminated = BlockError::Unterminated { byte: bit / 8, bit };
        let end = self
            .find_forward(bit + MAGIC_BITS, u64::MAX, |_| true)?
            .ok_or(unterminated)?;
        if end.bit < bit + MAGIC_BITS + CRC_BITS {
            let short = io::Error::new(io::ErrorKind::InvalidData, "block shorter than its header");
            return Err(BlockError::undecodable(bit, short).into());
        }
        let stream = self.single_block_stream(bit, end.bit);
        let mut decoded = Vec::new();
        bzip2::bufread::BzDecoder::new(stream.as_slice())
            .read_to_end(&mut decoded)
            .map_err(|e| BlockError::undecodable(bit, e))?;
        Ok((decoded, end))
    }

    /// The block that follows one ending at `end`, skipping to the next
    /// stream's first block after an end-of-stream marker.
    fn block_after(&mut self, end: Marker) -> io::Result<Option<u64>> {
        match end.kind {
            Kind::Block => Ok(Some(end.bit)),
            Kind::EndOfStream => Ok(self
                .find_forward(end.bit + MAGIC_BITS, u64::MAX, is_block)?
                .map(|m| m.bit)),
        }
    }
}

fn is_block(kind: Kind) -> bool {
    kind == Kind::Block
}

/// Bits appended most significant first, padded with zeros to a byte.
#[derive(Default)]
struct BitWriter {
    bytes: Vec<u8>,
    acc: u8,
    used: u32,
}

impl BitWriter {
    /// Appends the low `n` bits of `value`.
    fn push(&mut self, value: u64, n: u32) {
        for k in (0..n).rev() {
            self.acc = (self.acc << 1) | ((value >> k) & 1) as u8;
            self.used += 1;
            if self.used == 8 {
                self.bytes.push(self.acc);
                (self.acc, self.used) = (0, 0);
            }
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.used > 0 {
            self.bytes.push(self.acc << (8 - self.used));
        }
        self.bytes
    }
}

/// The decoded blocks of a split in file order: its own, then the following
/// ones as long as its last line needs them.
struct Blocks<S> {
    window: Window<S>,
    /// Bit offset of the next block's marker; `None` past the last block.
    next: Option<u64>,
    /// Blocks whose marker begins before this bit are owned.
    end_bit: u64,
    /// The next block is owned wherever it begins (the file's first block,
    /// for the split at byte 0).
    force_owned: bool,
}

impl<S: RangeSource> Blocks<S> {
    /// The next block's bytes and whether the split owns it.
    fn next_block(&mut self) -> io::Result<Option<(Vec<u8>, bool)>> {
        let Some(bit) = self.next else {
            return Ok(None);
        };
        let owned = self.force_owned || bit < self.end_bit;
        self.force_owned = false;
        let (decoded, end) = self.window.decode_block(bit)?;
        self.window.trim_to(end.bit / 8);
        self.next = self.window.block_after(end)?;
        Ok(Some((decoded, owned)))
    }
}

/// Where a split's reader stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Dropping the line that holds the last byte of the previous block.
    Skipping,
    /// Copying lines out.
    Reading,
    /// Every line of the split has been read.
    Done,
}

/// The decoded lines of one byte-range split of a bzip2 file.
pub(crate) struct Bzip2SplitReader<S> {
    blocks: Blocks<S>,
    block: Vec<u8>,
    offset: usize,
    /// Whether the current block is owned.
    owned: bool,
    /// Whether the next byte to copy begins a line.
    at_line_start: bool,
    state: State,
}

/// Opens the split `[start, end)` of a bzip2 file: every line of the file is
/// read by exactly one of the splits that cover it.
pub(crate) fn split_reader<S: RangeSource>(
    source: S,
    start: u64,
    end: u64,
) -> io::Result<Bzip2SplitReader<S>> {
    let size = source.size();
    let (start, end) = (start.min(size), end.min(size));
    let mut window = Window::new(source, start);
    let end_bit = end * 8;
    let reader = |window, next, force_owned, state| Bzip2SplitReader {
        blocks: Blocks {
            window,
            next,
            end_bit,
            force_owned,
        },
        block: Vec::new(),
        offset: 0,
        owned: false,
        at_line_start: true,
        state,
    };
    if start == 0 {
        if size > 0 {
            check_header(&mut window)?;
        }
        let first = window.find_forward(0, u64::MAX, is_block)?.map(|m| m.bit);
        return Ok(reader(window, first, true, State::Reading));
    }
    let Some(mut own) = window.find_forward(start * 8, end_bit, is_block)? else {
        return Ok(reader(window, None, false, State::Done));
    };
    let previous = match window.find_back(own.bit)? {
        Some(bit) => bit,
        // `own` is the file's first block: it belongs to the split at 0.
        None => match window.find_forward(own.bit + MAGIC_BITS, end_bit, is_block)? {
            Some(next) => std::mem::replace(&mut own, next).bit,
            None => return Ok(reader(window, None, false, State::Done)),
        },
    };
    let (decoded, _) = window.decode_block(previous)?;
    let Some(&last) = decoded.last() else {
        return Err(BlockError::EmptyBlock {
            byte: previous / 8,
            bit: previous,
        }
        .into());
    };
    window.trim_to(own.bit / 8);
    let state = if last == b'\n' {
        State::Reading
    } else {
        State::Skipping
    };
    Ok(reader(window, Some(own.bit), false, state))
}

/// Checks that the file begins with a bzip2 stream header.
fn check_header<S: RangeSource>(window: &mut Window<S>) -> io::Result<()> {
    while window.buf.len() < 4 && window.grow_forward(4)? {}
    match window.buf.get(..4) {
        Some([b'B', b'Z', b'h', b'1'..=b'9']) => Ok(()),
        _ => Err(BlockError::BadHeader.into()),
    }
}

impl<S: RangeSource> Bzip2SplitReader<S> {
    /// Moves to the next block; false past the last one.
    fn advance(&mut self) -> io::Result<bool> {
        match self.blocks.next_block()? {
            Some((block, owned)) => {
                (self.block, self.offset, self.owned) = (block, 0, owned);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Copies up to `n` bytes of the current block into `buf`.
    fn copy(&mut self, buf: &mut [u8], n: usize) -> usize {
        let n = n.min(buf.len());
        buf[..n].copy_from_slice(&self.block[self.offset..self.offset + n]);
        self.offset += n;
        self.at_line_start = buf[n - 1] == b'\n';
        n
    }
}

impl<S: RangeSource> Read for Bzip2SplitReader<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.state == State::Done {
                return Ok(0);
            }
            if self.offset == self.block.len() {
                if !self.advance()? {
                    self.state = State::Done;
                }
                continue;
            }
            let rest = &self.block[self.offset..];
            let newline = rest.iter().position(|&b| b == b'\n');
            match self.state {
                State::Skipping => match newline {
                    Some(i) => {
                        self.offset += i + 1;
                        self.state = State::Reading;
                        self.at_line_start = true;
                    }
                    None => self.offset = self.block.len(),
                },
                // Every line starting in an owned block is the split's.
                State::Reading if self.owned => return Ok(self.copy(buf, rest.len())),
                // In a following block only the end of the last line is.
                State::Reading if self.at_line_start => self.state = State::Done,
                State::Reading => {
                    let n = self.copy(buf, newline.map_or(rest.len(), |i| i + 1));
                    if self.at_line_start {
                        self.state = State::Done;
                    }
                    return Ok(n);
                }
                State::Done => return Ok(0),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn compress(data: &[u8], level: u32) -> Vec<u8> {
        let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::new(level));
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    /// A small deterministic generator, so the tests need no dependency.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    /// Varied lines: ids, words, numbers, some empty lines and one line of
    /// several blocks, after a run of 63-byte lines with no four equal bytes
    /// in a row, so that the first level-1 blocks (99981 bytes each) end with
    /// a newline.
    fn sample_text(lines: usize) -> Vec<u8> {
        let mut rng = Lcg(7);
        let mut out = Vec::new();
        let alphabet = b"abcdefghijklmnopqrstuvwxyz";
        for _ in 0..1587 * 3 {
            let mut line = Vec::with_capacity(63);
            while line.len() < 62 {
                let c = alphabet[(rng.next() % 26) as usize];
                if line.last() != Some(&c) {
                    line.push(c);
                }
            }
            line.push(b'\n');
            out.extend(line);
        }
        let words = ["spark", "hadoop", "split", "block", "ärger", "x", ""];
        for i in 0..lines {
            if i == lines / 2 {
                out.extend((0..250_000).map(|k| alphabet[(k * 7 + k / 26) % 26]));
            } else if rng.next() % 50 != 0 {
                out.extend(format!("{i}\t{}", rng.next()).bytes());
                for _ in 0..rng.next() % 12 {
                    let w = words[(rng.next() % words.len() as u64) as usize];
                    out.extend(format!(",{w}{}", rng.next() % 1000).bytes());
                }
            }
            out.push(b'\n');
        }
        out
    }

    fn read_split(file: &Bytes, start: u64, end: u64) -> Vec<u8> {
        let mut out = Vec::new();
        split_reader(file.clone(), start, end)
            .and_then(|mut r| r.read_to_end(&mut out))
            .unwrap_or_else(|e| panic!("split {start}..{end}: {e}"));
        out
    }

    /// Reads every range and checks that together they give `plain` once,
    /// with the file's first line read by the range at 0.
    fn check(plain: &[u8], file: &Bytes, ranges: &[(u64, u64)], what: &str) {
        let mut joined = Vec::new();
        for &(start, end) in ranges {
            let part = read_split(file, start, end);
            if start == 0 {
                let first = plain.split_inclusive(|&b| b == b'\n').next().unwrap_or(b"");
                assert!(part.starts_with(first), "{what}: first line not at 0");
            }
            joined.extend(part);
        }
        assert!(
            joined == plain,
            "{what}: {} bytes, expected {}",
            joined.len(),
            plain.len()
        );
    }

    fn check_sizes(plain: &[u8], file: &Bytes, sizes: &[u64]) {
        for &size in sizes {
            let ranges = crate::split::byte_ranges(file.len() as u64, size);
            check(plain, file, &ranges, &format!("split size {size}"));
        }
    }

    /// Every marker of a file, in order.
    fn markers(file: &Bytes) -> Vec<Marker> {
        let mut window = Window::new(file.clone(), 0);
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(m) = window.find_forward(from, u64::MAX, |_| true).unwrap() {
            out.push(m);
            from = m.bit + 1;
        }
        out
    }

    /// Splits cut at every block marker's byte, and one byte after it.
    fn cuts_at_markers(file: &Bytes, delta: u64) -> Vec<(u64, u64)> {
        let mut cuts: Vec<u64> = markers(file)
            .iter()
            .filter(|m| m.kind == Kind::Block)
            .map(|m| m.bit / 8 + delta)
            .collect();
        cuts.insert(0, 0);
        cuts.push(file.len() as u64);
        cuts.dedup();
        cuts.windows(2).map(|w| (w[0], w[1])).collect()
    }

    #[test]
    fn markers_found_at_every_shift() {
        for shift in 0..8u32 {
            let mut w = BitWriter::default();
            w.push(0b101, 3 + shift);
            w.push(BLOCK_MAGIC, 48);
            w.push(0xdead_beef, 32);
            w.push(EOS_MAGIC, 48);
            let bytes = Bytes::from(w.finish());
            let found = markers(&bytes);
            let want = [
                Marker {
                    bit: u64::from(3 + shift),
                    kind: Kind::Block,
                },
                Marker {
                    bit: u64::from(3 + shift) + 80,
                    kind: Kind::EndOfStream,
                },
            ];
            assert_eq!(found, want, "shift {shift}");
        }
    }

    #[test]
    fn blocks_decode_one_at_a_time() {
        let plain = sample_text(30_000);
        let file = Bytes::from(compress(&plain, 1));
        let mut window = Window::new(file.clone(), 0);
        let (mut decoded, mut ends_with_newline) = (Vec::new(), [false, false]);
        let mut next = window.find_forward(0, u64::MAX, is_block).unwrap();
        let mut count = 0;
        while let Some(m) = next {
            let (block, end) = window.decode_block(m.bit).unwrap();
            ends_with_newline[usize::from(block.last() == Some(&b'\n'))] = true;
            decoded.extend(block);
            next = window.block_after(end).unwrap().map(|bit| Marker {
                bit,
                kind: Kind::Block,
            });
            count += 1;
        }
        assert!(count > 10, "only {count} blocks");
        assert!(decoded == plain);
        assert_eq!(
            ends_with_newline,
            [true, true],
            "both block endings covered"
        );
    }

    #[test]
    fn every_line_once_for_many_split_sizes() {
        let plain = sample_text(30_000);
        let file = Bytes::from(compress(&plain, 1));
        check_sizes(
            &plain,
            &file,
            &[1000, 4096, 33_333, 100_000, 1 << 20, 1 << 30],
        );
        check(&plain, &file, &cuts_at_markers(&file, 0), "cuts at markers");
        check(
            &plain,
            &file,
            &cuts_at_markers(&file, 1),
            "cuts after markers",
        );
    }

    #[test]
    fn concatenated_streams_of_different_levels() {
        let (first, second) = (sample_text(8_000), sample_text(12_000));
        let mut encoded = compress(&first, 1);
        encoded.extend(compress(b"", 9));
        encoded.extend(compress(&second, 2));
        let file = Bytes::from(encoded);
        let plain = [first, second].concat();
        check_sizes(&plain, &file, &[1000, 50_000, 1 << 30]);
        check(&plain, &file, &cuts_at_markers(&file, 0), "cuts at markers");
        check(
            &plain,
            &file,
            &cuts_at_markers(&file, 1),
            "cuts after markers",
        );
    }

    #[test]
    fn text_without_final_newline() {
        let mut plain = sample_text(10_000);
        plain.extend(b"last line without newline");
        let file = Bytes::from(compress(&plain, 1));
        check_sizes(&plain, &file, &[2000, 70_000]);
    }

    #[test]
    fn tiny_splits_keep_the_first_line_at_zero() {
        let plain: Vec<u8> = (0..300)
            .flat_map(|i| format!("{i},name{}\n", i * 37 % 101).into_bytes())
            .collect();
        let plain = [b"id,name\n".as_slice(), &plain].concat();
        let file = Bytes::from(compress(&plain, 9));
        check_sizes(&plain, &file, &[1, 2, 3, 5, 64]);
        let plain = sample_text(0);
        let file = Bytes::from(compress(&plain, 1));
        check_sizes(&plain, &file, &[997]);
    }

    #[test]
    fn empty_and_small_files() {
        let empty = Bytes::new();
        assert!(read_split(&empty, 0, 0).is_empty());
        let file = Bytes::from(compress(b"", 9));
        check_sizes(b"", &file, &[1, 4, 100]);
        let file = Bytes::from(compress(b"a\nb\nc", 9));
        check_sizes(b"a\nb\nc", &file, &[1, 7, 100]);
    }

    /// The Spark-written fixture, when `SLUICE_FIXTURES` names the fixtures.
    #[test]
    fn hadoop_written_file() {
        let Some(dir) = std::env::var_os("SLUICE_FIXTURES") else {
            return;
        };
        let dir = std::path::Path::new(&dir).join("text_bz2_big");
        let Some(path) = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "bz2"))
        else {
            panic!("no .bz2 file in {}", dir.display());
        };
        let file = Bytes::from(std::fs::read(&path).unwrap());
        let mut plain = Vec::new();
        bzip2::read::MultiBzDecoder::new(&file[..])
            .read_to_end(&mut plain)
            .unwrap();
        assert_eq!(plain.iter().filter(|&&b| b == b'\n').count(), 50_000);
        check_sizes(&plain, &file, &[64 << 10, 256 << 10, 1 << 20]);
        check(&plain, &file, &cuts_at_markers(&file, 0), "cuts at markers");
        check(
            &plain,
            &file,
            &cuts_at_markers(&file, 1),
            "cuts after markers",
        );
    }

    #[test]
    fn garbage_and_false_markers_are_errors() {
        let garbage = Bytes::from_static(b"PK\x03\x04 not bzip2 at all");
        assert!(split_reader(garbage, 0, 10).is_err());
        // A block cut short by a marker inside its data.
        let plain = sample_text(5_000);
        let mut w = BitWriter::default();
        let encoded = compress(&plain, 1);
        for &b in &encoded[..5000] {
            w.push(u64::from(b), 8);
        }
        w.push(BLOCK_MAGIC, 48);
        for &b in &encoded[5000..] {
            w.push(u64::from(b), 8);
        }
        let file = Bytes::from(w.finish());
        let mut out = Vec::new();
        let err = split_reader(file, 0, 100)
            .and_then(|mut r| r.read_to_end(&mut out))
            .expect_err("false marker");
        assert!(err.to_string().contains("at byte 4 (bit 32)"), "{err}");
    }
}
