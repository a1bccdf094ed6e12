//! The records of a byte range of a SequenceFile, as Hadoop's
//! `SequenceFileRecordReader` reads them: a range that does not start at the
//! file's start begins at the first sync marker at or after its start, and
//! it ends before the first sync marker at or after its end. Every record
//! thus belongs to exactly one range: the one holding the last sync marker
//! before it (the first range for the records before any marker).

use std::io::{self, BufRead, Cursor, Read};

use super::header::{Compression, Header};
use super::wire::{read_i32, read_vlong, vlong_at};
use crate::codec::{self, Codec};

/// The escape that precedes a sync marker where a record length would be.
const SYNC_ESCAPE: i32 = -1;
/// Bytes a record, a block buffer or a decompressed buffer may take.
const MAX_LEN: usize = 1 << 30;

/// Why records cannot be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    /// The bytes break the format at an offset.
    #[error("at byte {at}: {what}")]
    Corrupt {
        /// Where the record or block starts.
        at: u64,
        /// What is wrong.
        what: String,
    },
    /// Reading the bytes of a record or block failed (the store, the
    /// stream): a foreign error, told in the message.
    #[error("cannot read the record or block at byte {at}: {cause}")]
    Io {
        /// Where the record or block starts.
        at: u64,
        /// The read's failure.
        cause: io::Error,
    },
}

fn corrupt(at: u64, what: impl Into<String>) -> RecordError {
    RecordError::Corrupt {
        at,
        what: what.into(),
    }
}

/// A block's records, decompressed, being handed out.
#[derive(Default)]
struct Block {
    key_lens: Vec<usize>,
    value_lens: Vec<usize>,
    keys: Vec<u8>,
    values: Vec<u8>,
    next: usize,
    key_at: usize,
    value_at: usize,
}

/// Reads the records of one range; `input` is at `pos`, the start of a
/// record or of a sync marker.
pub(crate) struct Records<R> {
    input: R,
    pos: u64,
    end: u64,
    sync: [u8; 16],
    compression: Compression,
    block: Block,
    done: bool,
}

impl<R: BufRead> Records<R> {
    /// Records from `pos` (where `input` is) to the first sync marker at or
    /// after `end`.
    pub(crate) fn new(input: R, pos: u64, end: u64, header: &Header) -> Records<R> {
        Records {
            input,
            pos,
            end,
            sync: header.sync,
            compression: header.compression,
            block: Block::default(),
            done: false,
        }
    }

    /// The next record's key and value bytes (values decompressed), or
    /// `false` at the end of the range.
    pub(crate) fn next_into(
        &mut self,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<bool, RecordError> {
        if self.done {
            return Ok(false);
        }
        let more = match self.compression {
            Compression::Block(codec) => self.next_in_block(codec, key, value)?,
            Compression::None | Compression::Record(_) => self.next_record(key, value)?,
        };
        self.done = !more;
        Ok(more)
    }

    fn next_record(&mut self, key: &mut Vec<u8>, value: &mut Vec<u8>) -> Result<bool, RecordError> {
        let at = self.pos;
        if self.at_eof()? {
            return Ok(false);
        }
        let mut length = self.int(at)?;
        if length == SYNC_ESCAPE {
            self.check_sync(at)?;
            if at >= self.end || self.at_eof()? {
                return Ok(false);
            }
            length = self.int(at)?;
        }
        let key_len = self.int(at)?;
        if length < 0 || key_len < 0 || key_len > length || length as usize > MAX_LEN {
            return Err(corrupt(
                at,
                format!("a record of {length} bytes with a key of {key_len}"),
            ));
        }
        self.bytes(at, key_len as usize, key)?;
        self.bytes(at, (length - key_len) as usize, value)?;
        if let Compression::Record(codec) = self.compression {
            let compressed = std::mem::take(value);
            *value = decompress(codec, compressed, at)?;
        }
        Ok(true)
    }

    fn next_in_block(
        &mut self,
        codec: Codec,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<bool, RecordError> {
        if self.block.next == self.block.key_lens.len() {
            let at = self.pos;
            if self.at_eof()? {
                return Ok(false);
            }
            if self.int(at)? != SYNC_ESCAPE {
                return Err(corrupt(at, "a block does not start with a sync marker"));
            }
            self.check_sync(at)?;
            if at >= self.end {
                return Ok(false);
            }
            self.block = self.read_block(codec, at)?;
        }
        let block = &mut self.block;
        let (k, v) = (block.key_lens[block.next], block.value_lens[block.next]);
        key.clear();
        key.extend_from_slice(&block.keys[block.key_at..block.key_at + k]);
        value.clear();
        value.extend_from_slice(&block.values[block.value_at..block.value_at + v]);
        block.key_at += k;
        block.value_at += v;
        block.next += 1;
        Ok(true)
    }

    /// A block after its sync marker: the record count, then the key
    /// lengths, keys, value lengths and values, each compressed.
    fn read_block(&mut self, codec: Codec, at: u64) -> Result<Block, RecordError> {
        let count = self.vlong(at)?;
        let count = usize::try_from(count)
            .ok()
            .filter(|&n| n <= MAX_LEN)
            .ok_or_else(|| corrupt(at, format!("a block of {count} records")))?;
        let key_lens = lengths(&self.buffer(codec, at)?, count, at)?;
        let keys = self.buffer(codec, at)?;
        let value_lens = lengths(&self.buffer(codec, at)?, count, at)?;
        let values = self.buffer(codec, at)?;
        if key_lens.iter().sum::<usize>() != keys.len()
            || value_lens.iter().sum::<usize>() != values.len()
        {
            return Err(corrupt(
                at,
                "a block's lengths do not add up to its keys and values",
            ));
        }
        Ok(Block {
            key_lens,
            value_lens,
            keys,
            values,
            ..Block::default()
        })
    }

    /// One compressed buffer of a block: a vint length, then its bytes.
    fn buffer(&mut self, codec: Codec, at: u64) -> Result<Vec<u8>, RecordError> {
        let len = self.vlong(at)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= MAX_LEN)
            .ok_or_else(|| corrupt(at, format!("a block buffer of {len} bytes")))?;
        let mut raw = Vec::new();
        self.bytes(at, len, &mut raw)?;
        decompress(codec, raw, at)
    }

    fn at_eof(&mut self) -> Result<bool, RecordError> {
        let at = self.pos;
        let buf = self
            .input
            .fill_buf()
            .map_err(|cause| RecordError::Io { at, cause })?;
        Ok(buf.is_empty())
    }

    fn int(&mut self, at: u64) -> Result<i32, RecordError> {
        let v = read_i32(&mut self.input).map_err(|e| cut(at, e))?;
        self.pos += 4;
        Ok(v)
    }

    fn vlong(&mut self, at: u64) -> Result<i64, RecordError> {
        let mut counted = (&mut self.input).take(u64::MAX);
        let v = read_vlong(&mut counted).map_err(|e| cut(at, e))?;
        self.pos += u64::MAX - counted.limit();
        Ok(v)
    }

    fn bytes(&mut self, at: u64, len: usize, out: &mut Vec<u8>) -> Result<(), RecordError> {
        out.clear();
        out.resize(len, 0);
        self.input.read_exact(out).map_err(|e| cut(at, e))?;
        self.pos += len as u64;
        Ok(())
    }

    fn check_sync(&mut self, at: u64) -> Result<(), RecordError> {
        let mut found = [0u8; 16];
        self.input.read_exact(&mut found).map_err(|e| cut(at, e))?;
        self.pos += 16;
        if found != self.sync {
            return Err(corrupt(at, "the sync marker does not match the header's"));
        }
        Ok(())
    }
}

/// A short read is a file cut short; other errors pass.
fn cut(at: u64, e: io::Error) -> RecordError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        corrupt(at, "the file ends inside a record or block")
    } else {
        RecordError::Io { at, cause: e }
    }
}

/// `count` vint lengths from a decompressed buffer.
fn lengths(buf: &[u8], count: usize, at: u64) -> Result<Vec<usize>, RecordError> {
    let mut out = Vec::with_capacity(count.min(1 << 20));
    let mut pos = 0;
    for _ in 0..count {
        let len = vlong_at(buf, &mut pos)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| corrupt(at, "a block's lengths are cut short or negative"))?;
        out.push(len);
    }
    Ok(out)
}

/// One compressed stream decoded whole.
fn decompress(codec: Codec, raw: Vec<u8>, at: u64) -> Result<Vec<u8>, RecordError> {
    let mut out = Vec::new();
    codec::decoder(codec, Box::new(Cursor::new(raw)))
        .take(MAX_LEN as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(at, format!("{codec} data does not decode: {e}")))?;
    if out.len() > MAX_LEN {
        return Err(corrupt(at, "a value decompresses to more than 1 GiB"));
    }
    Ok(out)
}

/// Positions a stream at the first sync marker at or after `from` (an
/// offset into the file; `input` starts there): returns the stream from
/// that marker and its offset, or `None` when none follows.
pub(crate) fn seek_sync(
    mut input: impl BufRead,
    from: u64,
    sync: &[u8; 16],
) -> io::Result<Option<(impl BufRead, u64)>> {
    let mut marker = SYNC_ESCAPE.to_be_bytes().to_vec();
    marker.extend_from_slice(sync);
    let mut window: Vec<u8> = Vec::new();
    let mut base = from;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(None);
        }
        window.extend_from_slice(chunk);
        let n = chunk.len();
        input.consume(n);
        if let Some(i) = window
            .windows(marker.len())
            .position(|w| w == marker.as_slice())
        {
            let rest = window.split_off(i);
            let reader = Cursor::new(rest).chain(input);
            return Ok(Some((io::BufReader::new(reader), base + i as u64)));
        }
        // Keep what may be the start of a marker cut by the chunk's end.
        let keep = window.len().min(marker.len() - 1);
        base += (window.len() - keep) as u64;
        window.drain(..window.len() - keep);
    }
}
