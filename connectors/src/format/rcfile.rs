//! RCFile, Hive's record-columnar file (`org.apache.hadoop.hive.ql.io.RCFile`).
//!
//! A header (`RCF` and version 1, or the older SequenceFile header `SEQ` 6
//! naming `RCFile$KeyBuffer`; whether columns are compressed and by which
//! codec; metadata holding `hive.io.rcfile.column.number`; a 16-byte sync
//! marker), then row groups. Each row group is a record: its length, its key's
//! length plain and on disk, the key (rows, then per column the column's
//! length on disk and plain, and its fields' lengths run-length encoded),
//! then each column's bytes, compressed separately when the file is. A sync
//! escape (`-1` and the marker) comes before a row group every 2000 bytes or so.
//!
//! Fields are text (`ColumnarSerDe`: Hive's text forms, `\N` null) or
//! LazyBinary (`LazyBinaryColumnarSerDe`, see [`fields`]); read by name, a
//! table's schema types them, and read as files they are strings named
//! `_col0`, `_col1`... A byte-range split reads the row groups after the
//! first sync marker at or after its start, up to the first sync marker at
//! or after its end, as Hive's `RCFileRecordReader` does, so that every row
//! group is read by exactly one split.

mod fields;

use std::fmt::Display;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;

use super::text_io::{fetch, from_io, stream_blocking};
use super::{FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest};
use crate::codec::{self, Codec};
use crate::error::{Error, Result};
use crate::split::{Split, SplitRange};
use crate::store::Location;
use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::path::Path;

use self::fields::Encoding;

/// The format's name in messages.
const FORMAT: &str = "rcfile";
/// The record length that says a sync marker follows.
const SYNC_ESCAPE: i32 = -1;
/// The sync marker's length.
const SYNC_LEN: usize = 16;
/// The metadata key holding the number of columns.
const COLUMN_NUMBER: &str = "hive.io.rcfile.column.number";
/// The key class an RCFile with the old SequenceFile header names.
const KEY_CLASS: &str = "org.apache.hadoop.hive.ql.io.RCFile$KeyBuffer";
/// Bytes buffered between the store and the decoder.
const READ_BUFFER: usize = 256 * 1024;
/// The most items a length read from the file reserves room for at once
/// (a corrupt length fails when the bytes run out, not by reserving).
const PREALLOCATED: usize = 1 << 20;

/// The rcfile format.
pub(super) struct RcFile;

#[async_trait]
impl FileFormat for RcFile {
    /// The schema: the table's columns when read by name, else one string
    /// column per column the header counts.
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        opts: &FormatOptions,
    ) -> Result<FileInfo> {
        if file.size == 0 {
            return Ok(FileInfo::schema_only(schema(0, opts)).with_detail(detail(None, opts)));
        }
        let loc = loc.clone();
        let path = file.path.clone();
        let display = loc.display(&path);
        let header = tokio::task::spawn_blocking(move || {
            let mut input = Input::open(&loc, &path, 0);
            read_header(&mut input)
        })
        .await
        .map_err(|e| Error::corrupt(&display, FORMAT, e))??;
        Ok(FileInfo::schema_only(schema(header.columns, opts))
            .with_detail(detail(header.codec, opts)))
    }

    /// Streams the row groups of a split, a batch per row group (cut at the
    /// batch size).
    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let loc = loc.clone();
        let split = split.clone();
        let opts = request.options.clone();
        stream_blocking(move |emit| read_split(&loc, &split, &opts, emit))
    }
}

/// The columns read: the table's when read by name, else `_col0`... as
/// strings, one per column of the file.
fn schema(file_columns: usize, opts: &FormatOptions) -> SchemaRef {
    if let Some(delimited) = &opts.delimited {
        return Arc::new(Schema::new(delimited.columns.clone()));
    }
    let fields: Vec<Field> = (0..file_columns)
        .map(|i| Field::new(format!("_col{i}"), DataType::Utf8, true))
        .collect();
    Arc::new(Schema::new(fields))
}

/// What `ls` says of a file: how its fields are read (`columnar`: text,
/// `binary columnar`: LazyBinary) and its columns' codec.
fn detail(codec: Option<Codec>, opts: &FormatOptions) -> String {
    let serde = if binary(opts) {
        "binary columnar"
    } else {
        "columnar"
    };
    match codec {
        Some(codec) => format!("{serde}, {codec}"),
        None => serde.to_string(),
    }
}

/// Whether fields are read as LazyBinary: a table's, said so.
fn binary(opts: &FormatOptions) -> bool {
    opts.binary_columnar && opts.delimited.is_some()
}

/// What the header of an RCFile says.
#[derive(Debug, Clone, PartialEq)]
struct Header {
    /// The codec of keys and columns, when compressed.
    codec: Option<Codec>,
    /// Columns in each row group.
    columns: usize,
    /// The sync marker.
    sync: [u8; SYNC_LEN],
    /// Where the first row group starts.
    end: u64,
}

/// Bytes read in order, counting where they are.
struct Input<R> {
    inner: R,
    pos: u64,
    display: String,
}

impl Input<BufReader<super::text_io::ChannelReader>> {
    /// The bytes of `path` from `start`, fetched as they are read.
    fn open(loc: &Location, path: &Path, start: u64) -> Self {
        Input {
            inner: BufReader::with_capacity(READ_BUFFER, fetch(loc, path, start)),
            pos: start,
            display: loc.display(path),
        }
    }
}

impl<R: BufRead> Input<R> {
    /// The error for bad bytes here.
    fn corrupt(&self, reason: impl Display) -> Error {
        Error::corrupt(
            &self.display,
            FORMAT,
            format!("{reason} (at byte {})", self.pos),
        )
    }

    /// Fills `buf`; the end of the file here is a truncation.
    fn exact(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        match self.inner.read_exact(buf) {
            Ok(()) => {
                self.pos += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                Err(self.corrupt(format!("the file ends inside {what}")))
            }
            Err(e) => Err(from_io(&self.display, FORMAT, e)),
        }
    }

    /// The next `n` bytes.
    fn bytes(&mut self, n: usize, what: &str) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let got = (&mut self.inner)
            .take(n as u64)
            .read_to_end(&mut out)
            .map_err(|e| from_io(&self.display, FORMAT, e))?;
        self.pos += got as u64;
        if got < n {
            return Err(self.corrupt(format!("the file ends inside {what}")));
        }
        Ok(out)
    }

    fn byte(&mut self, what: &str) -> Result<u8> {
        let mut b = [0u8; 1];
        self.exact(&mut b, what)?;
        Ok(b[0])
    }

    fn int(&mut self, what: &str) -> Result<i32> {
        let mut b = [0u8; 4];
        self.exact(&mut b, what)?;
        Ok(i32::from_be_bytes(b))
    }

    /// A length (a non-negative int).
    fn length(&mut self, what: &str) -> Result<usize> {
        let n = self.int(what)?;
        usize::try_from(n).map_err(|_| self.corrupt(format!("{what} is negative ({n})")))
    }

    /// Whether no byte is left.
    fn at_end(&mut self) -> Result<bool> {
        let buf = self
            .inner
            .fill_buf()
            .map_err(|e| from_io(&self.display, FORMAT, e))?;
        Ok(buf.is_empty())
    }

    /// A Hadoop variable-length integer (`WritableUtils.readVLong`).
    fn vlong(&mut self, what: &str) -> Result<i64> {
        let first = self.byte(what)?;
        let size = vlong_size(first);
        let mut buf = [0u8; 9];
        buf[0] = first;
        self.exact(&mut buf[1..size], what)?;
        let mut at = 0;
        vlong_at(&buf[..size], &mut at).ok_or_else(|| self.corrupt(format!("bad {what}")))
    }

    /// A Hadoop `Text`: a vint length and its bytes.
    fn text(&mut self, what: &str) -> Result<String> {
        let n = self.vlong(what)?;
        let n = usize::try_from(n).map_err(|_| self.corrupt(format!("bad length of {what}")))?;
        let bytes = self.bytes(n, what)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Passes over bytes up to just past the first sync marker whose escape
    /// starts at or after here; where that escape starts, or `None` when no
    /// marker is left.
    fn skip_to_sync(&mut self, sync: &[u8; SYNC_LEN]) -> Result<Option<u64>> {
        let mut escape = [0u8; 4];
        for b in &mut escape {
            if self.at_end()? {
                return Ok(None);
            }
            *b = self.byte("a sync marker")?;
        }
        let mut window: Vec<u8> = Vec::with_capacity(READ_BUFFER + SYNC_LEN);
        loop {
            let chunk = self
                .inner
                .fill_buf()
                .map_err(|e| from_io(&self.display, FORMAT, e))?;
            if chunk.is_empty() {
                return Ok(None);
            }
            let kept = window.len();
            window.extend_from_slice(chunk);
            let n = chunk.len();
            if let Some(i) = window.windows(SYNC_LEN).position(|w| w == sync) {
                // The marker ends `i + 16 - kept` bytes into this chunk.
                let used = i + SYNC_LEN - kept;
                self.inner.consume(used);
                self.pos += used as u64;
                return Ok(Some(self.pos - (SYNC_LEN + 4) as u64));
            }
            self.inner.consume(n);
            self.pos += n as u64;
            let keep = window.len().min(SYNC_LEN - 1);
            window.drain(..window.len() - keep);
        }
    }
}

/// The bytes a vlong whose first byte is `first` takes.
fn vlong_size(first: u8) -> usize {
    let b = first as i8;
    if b >= -112 {
        1
    } else if b < -120 {
        (-119 - b as i32) as usize
    } else {
        (-111 - b as i32) as usize
    }
}

/// Reads a Hadoop vlong at `at` in `buf`, moving `at` past it.
pub(super) fn vlong_at(buf: &[u8], at: &mut usize) -> Option<i64> {
    let first = *buf.get(*at)?;
    let size = vlong_size(first);
    let bytes = buf.get(*at + 1..*at + size)?;
    *at += size;
    let b = first as i8;
    if size == 1 {
        return Some(i64::from(b));
    }
    let mut value: i64 = 0;
    for &byte in bytes {
        value = (value << 8) | i64::from(byte);
    }
    Some(if b < -120 { !value } else { value })
}

/// The codec a Hadoop codec class names.
fn codec_of(class: &str) -> Option<Codec> {
    let name = class.rsplit('.').next().unwrap_or(class);
    Some(match name {
        "DefaultCodec" | "DeflateCodec" => Codec::Deflate,
        "GzipCodec" => Codec::Gzip,
        "BZip2Codec" => Codec::Bzip2,
        "SnappyCodec" => Codec::Snappy,
        "Lz4Codec" => Codec::Lz4,
        "ZStandardCodec" => Codec::Zstd,
        _ => return None,
    })
}

/// Reads the header, leaving `input` at the first row group.
fn read_header<R: BufRead>(input: &mut Input<R>) -> Result<Header> {
    let mut magic = [0u8; 4];
    input.exact(&mut magic, "the header")?;
    let old = match magic {
        [b'R', b'C', b'F', 1] => false,
        [b'S', b'E', b'Q', 6] => true,
        [b'R', b'C', b'F', v] => {
            return Err(input.corrupt(format!("RCFile version {v} is not known (1 is)")))
        }
        _ => return Err(input.corrupt("not an RCFile: it does not start with RCF or SEQ")),
    };
    if old {
        let key = input.text("the key class")?;
        input.text("the value class")?;
        if key != KEY_CLASS {
            return Err(input.corrupt(format!(
                "a SequenceFile of {key}, not an RCFile (its keys are {KEY_CLASS})"
            )));
        }
    }
    let compressed = input.byte("the header")? != 0;
    if old && input.byte("the header")? != 0 {
        return Err(input.corrupt("block-compressed, which an RCFile never is"));
    }
    let codec = if compressed {
        let class = input.text("the codec class")?;
        let codec = codec_of(&class)
            .ok_or_else(|| input.corrupt(format!("compressed with {class}, which is not read")))?;
        Some(codec)
    } else {
        None
    };
    let entries = input.length("the metadata")?;
    let mut columns = None;
    for _ in 0..entries {
        let key = input.text("the metadata")?;
        let value = input.text("the metadata")?;
        if key == COLUMN_NUMBER {
            columns = value.trim().parse::<usize>().ok();
        }
    }
    let columns = columns.ok_or_else(|| {
        input.corrupt(format!(
            "the header has no number of columns ({COLUMN_NUMBER})"
        ))
    })?;
    let mut sync = [0u8; SYNC_LEN];
    input.exact(&mut sync, "the header's sync marker")?;
    Ok(Header {
        codec,
        columns,
        sync,
        end: input.pos,
    })
}

/// One column of a row group: its fields' lengths (none when the writer
/// nulled the column) and its plain bytes.
struct ColumnChunk {
    lengths: Option<Vec<u32>>,
    data: Vec<u8>,
}

/// What the key of a row group says of one column.
struct ColumnKey {
    on_disk: usize,
    plain: usize,
    lengths: Vec<u8>,
}

/// Decompresses `raw` with `codec`: exactly `plain` bytes, or an error.
fn decompress(codec: Codec, raw: Vec<u8>, plain: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(plain.min(PREALLOCATED));
    codec::decoder(codec, Box::new(io::Cursor::new(raw)))
        .take(plain as u64 + 1)
        .read_to_end(&mut out)?;
    if out.len() != plain {
        return Err(io::Error::other(format!(
            "{} bytes decompressed where the key says {plain}",
            out.len()
        )));
    }
    Ok(out)
}

/// Reads the rest of a row group, from its key on: its rows and columns.
fn read_group<R: BufRead>(
    input: &mut Input<R>,
    header: &Header,
    record_len: usize,
) -> Result<(usize, Vec<ColumnChunk>)> {
    let key_len = input.length("a row group's key length")?;
    let disk_key_len = input.length("a row group's key length")?;
    let raw = input.bytes(disk_key_len, "a row group's key")?;
    let key = match header.codec {
        Some(codec) => decompress(codec, raw, key_len)
            .map_err(|e| input.corrupt(format!("a row group's key: {e}")))?,
        None => raw,
    };
    let (rows, keys) = parse_key(&key, header.columns)
        .ok_or_else(|| input.corrupt("a row group's key is cut short or malformed"))?;
    let on_disk: usize = keys.iter().map(|k| k.on_disk).sum();
    if key_len.checked_add(on_disk) != Some(record_len) {
        return Err(input.corrupt(format!(
            "a row group of {record_len} bytes whose key ({key_len}) and columns ({on_disk}) do not add up"
        )));
    }
    let mut chunks = Vec::with_capacity(keys.len());
    for key in keys {
        let raw = input.bytes(key.on_disk, "a row group's columns")?;
        let data = match header.codec {
            Some(codec) => decompress(codec, raw, key.plain)
                .map_err(|e| input.corrupt(format!("a column of a row group: {e}")))?,
            None => raw,
        };
        let lengths = if key.lengths.is_empty() {
            None
        } else {
            Some(
                field_lengths(&key.lengths, rows, data.len())
                    .ok_or_else(|| input.corrupt("a column's field lengths are malformed"))?,
            )
        };
        chunks.push(ColumnChunk { lengths, data });
    }
    Ok((rows, chunks))
}

/// The rows and the columns' keys of a row group's (plain) key.
fn parse_key(key: &[u8], columns: usize) -> Option<(usize, Vec<ColumnKey>)> {
    let mut at = 0;
    let length = |at: &mut usize| usize::try_from(vlong_at(key, at)?).ok();
    // Hive counts rows in an int.
    let rows = length(&mut at).filter(|&n| i32::try_from(n).is_ok())?;
    let mut keys = Vec::with_capacity(columns.min(PREALLOCATED));
    for _ in 0..columns {
        let on_disk = length(&mut at)?;
        let plain = length(&mut at)?;
        let n = length(&mut at)?;
        let lengths = key.get(at..at.checked_add(n)?)?.to_vec();
        at += n;
        keys.push(ColumnKey {
            on_disk,
            plain,
            lengths,
        });
    }
    Some((rows, keys))
}

/// Each row's field length from a column's run-length encoded lengths: a
/// length, or the complement of how many more times the previous one
/// repeats. `None` when they are malformed or overrun the column's bytes.
fn field_lengths(buf: &[u8], rows: usize, data_len: usize) -> Option<Vec<u32>> {
    let mut out: Vec<u32> = Vec::with_capacity(rows.min(PREALLOCATED));
    let mut at = 0;
    let mut total: usize = 0;
    while out.len() < rows {
        let v = vlong_at(buf, &mut at)?;
        if v < 0 {
            let previous = *out.last()?;
            let run = usize::try_from(!v).ok()?.min(rows - out.len());
            total = total.checked_add(previous as usize * run)?;
            out.extend(std::iter::repeat_n(previous, run));
        } else {
            let len = u32::try_from(v).ok()?;
            total = total.checked_add(len as usize)?;
            out.push(len);
        }
    }
    (total <= data_len).then_some(out)
}

/// Reads the row groups of a split, handing `emit` their batches.
fn read_split(
    loc: &Location,
    split: &Split,
    opts: &FormatOptions,
    emit: &mut dyn FnMut(Result<RecordBatch>) -> bool,
) -> Result<()> {
    if split.size == 0 {
        return Ok(());
    }
    let path = split.object_path();
    let (start, end) = match split.range {
        SplitRange::Bytes { start, end } => (start, end),
        _ => (0, u64::MAX),
    };
    let mut input = Input::open(loc, &path, 0);
    let header = read_header(&mut input)?;
    // Only the first split reads the row groups before the first sync
    // marker; the others start at the first marker at or after their start
    // (the header's own marker is not one).
    if start > 0 {
        if start > header.end {
            input = Input::open(loc, &path, start);
        }
        match input.skip_to_sync(&header.sync)? {
            Some(at) if at < end => {}
            _ => return Ok(()),
        }
    }
    let layout = Layout::new(&header, opts);
    while let Some((rows, chunks)) = next_group(&mut input, &header, end)? {
        let batch = layout.batch(rows, &chunks).map_err(|e| input.corrupt(e))?;
        for (offset, n) in cuts(&chunks, rows, opts) {
            if !emit(Ok(batch.slice(offset, n))) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Where a row group's rows are cut into batches: at `--batch-size` rows,
/// or sooner where its fields' bytes reach `--batch-bytes`; (first row,
/// rows) of each.
fn cuts(chunks: &[ColumnChunk], rows: usize, opts: &FormatOptions) -> Vec<(usize, usize)> {
    let most_rows = opts.batch_size.max(1);
    let most_bytes = opts.batch_bytes.unwrap_or(u64::MAX);
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for row in 0..rows {
        bytes += chunks
            .iter()
            .filter_map(|c| c.lengths.as_ref()?.get(row))
            .map(|&n| u64::from(n))
            .sum::<u64>();
        if row + 1 - start >= most_rows || bytes >= most_bytes {
            out.push((start, row + 1 - start));
            (start, bytes) = (row + 1, 0);
        }
    }
    if start < rows {
        out.push((start, rows - start));
    }
    out
}

/// The next row group of a split that ends at the first sync marker at or
/// after `end`; `None` there, or at the end of the file.
fn next_group<R: BufRead>(
    input: &mut Input<R>,
    header: &Header,
    end: u64,
) -> Result<Option<(usize, Vec<ColumnChunk>)>> {
    if input.at_end()? {
        return Ok(None);
    }
    let mut record_len = input.int("a row group's length")?;
    if record_len == SYNC_ESCAPE {
        let at = input.pos - 4;
        let mut sync = [0u8; SYNC_LEN];
        input.exact(&mut sync, "a sync marker")?;
        if sync != header.sync {
            return Err(input.corrupt("a sync marker that is not the header's"));
        }
        if at >= end || input.at_end()? {
            return Ok(None);
        }
        record_len = input.int("a row group's length")?;
    }
    let record_len = usize::try_from(record_len)
        .map_err(|_| input.corrupt(format!("a row group of negative length ({record_len})")))?;
    read_group(input, header, record_len).map(Some)
}

/// How a file's columns become the columns read.
struct Layout {
    schema: SchemaRef,
    encoding: Encoding,
    null: Vec<u8>,
}

impl Layout {
    fn new(header: &Header, opts: &FormatOptions) -> Layout {
        let null = opts
            .delimited
            .as_ref()
            .and_then(|d| d.null.clone())
            .unwrap_or_else(|| "\\N".to_string());
        Layout {
            schema: schema(header.columns, opts),
            encoding: if binary(opts) {
                Encoding::Binary
            } else {
                Encoding::Text
            },
            null: null.into_bytes(),
        }
    }

    /// A row group's rows as a batch: column `i` from the file's column
    /// `i`, null where the file has fewer columns.
    fn batch(
        &self,
        rows: usize,
        chunks: &[ColumnChunk],
    ) -> std::result::Result<RecordBatch, String> {
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        for (i, field) in self.schema.fields().iter().enumerate() {
            let array = match chunks.get(i) {
                Some(ColumnChunk {
                    lengths: Some(lengths),
                    data,
                }) => fields::column(field, self.encoding, &self.null, lengths, data)
                    .map_err(|e| format!("column {}: {e}", field.name()))?,
                _ => arrow::array::new_null_array(field.data_type(), rows),
            };
            arrays.push(array);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(self.schema.clone(), arrays, &options)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests;
