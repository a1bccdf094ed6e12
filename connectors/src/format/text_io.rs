//! Byte plumbing for the line-based formats: an object's bytes fetched
//! asynchronously, decompressed and decoded on a blocking thread, with the
//! split's line boundaries applied as Hadoop's `LineRecordReader` does.

use std::io::{self, BufRead, BufReader, Read};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStoreExt};
use tokio::sync::mpsc;

use super::{FileInfo, FileRef};
use crate::codec::{self, Codec};
use crate::error::{Error, Result};
use crate::split::{Split, SplitRange};
use crate::store::Location;

/// Chunks of raw bytes buffered between the fetcher and the decoder.
const BYTE_CHUNKS_IN_FLIGHT: usize = 8;
/// Decoded batches buffered between the decoder and the consumer.
const BATCHES_IN_FLIGHT: usize = 2;

/// A blocking `Read` over chunks that an async task fetches from the store.
pub(crate) struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    chunk: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(chunk)) => self.chunk = chunk,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk = self.chunk.slice(n..);
        Ok(n)
    }
}

/// Starts fetching `path` from byte `start` to the end; the returned reader
/// must be used from a blocking thread.
pub(crate) fn fetch(loc: &Location, path: &Path, start: u64) -> ChannelReader {
    let (tx, rx) = mpsc::channel(BYTE_CHUNKS_IN_FLIGHT);
    let store = loc.store.clone();
    let path = path.clone();
    let display = loc.display(&path);
    tokio::spawn(async move {
        let options = GetOptions {
            range: (start > 0).then_some(GetRange::Offset(start)),
            ..Default::default()
        };
        let result = match store.get_opts(&path, options).await {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(to_io(&display, e))).await;
                return;
            }
        };
        let mut stream = result.into_stream();
        while let Some(chunk) = stream.next().await {
            let item = chunk.map_err(|e| to_io(&display, e));
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                return;
            }
        }
    });
    ChannelReader {
        rx,
        chunk: Bytes::new(),
    }
}

/// Byte ranges of one object, read from a blocking thread (a bzip2 split
/// looks back for the block before its own and fetches ahead as it decodes).
struct StoreRanges {
    loc: Location,
    path: Path,
    size: u64,
    runtime: tokio::runtime::Handle,
}

impl codec::RangeSource for StoreRanges {
    fn size(&self) -> u64 {
        self.size
    }

    fn get(&mut self, start: u64, end: u64) -> io::Result<Bytes> {
        let read = self.loc.store.get_range(&self.path, start..end);
        self.runtime
            .block_on(read)
            .map_err(|e| to_io(&self.loc.display(&self.path), e))
    }
}

/// Wraps a store error so that it can cross an `io::Read`.
fn to_io(display: &str, e: object_store::Error) -> io::Error {
    io::Error::other(Error::from_store(display, e))
}

/// Turns an I/O error from the read chain back into the right [`Error`].
pub(crate) fn from_io(path: &str, format: &str, e: io::Error) -> Error {
    let kind = e.kind();
    match e.into_inner() {
        Some(inner) => match inner.downcast::<Error>() {
            Ok(err) => *err,
            Err(other) => {
                if kind == io::ErrorKind::PermissionDenied {
                    Error::corrupt(path, format, format!("permission denied: {other}"))
                } else {
                    Error::corrupt(path, format, other)
                }
            }
        },
        None => Error::corrupt(path, format, kind),
    }
}

/// Yields only the lines of a byte range that belong to it: when the range
/// does not start at 0 the first (partial) line is skipped, and every line
/// starting at or before `end` is read whole.
pub(crate) struct LineRange<R> {
    inner: R,
    pos: u64,
    end: u64,
    line: Vec<u8>,
    offset: usize,
    done: bool,
}

impl<R: BufRead> LineRange<R> {
    pub(crate) fn new(mut inner: R, start: u64, end: u64) -> io::Result<Self> {
        let mut pos = start;
        if start != 0 {
            let mut skipped = Vec::new();
            pos += inner.read_until(b'\n', &mut skipped)? as u64;
        }
        Ok(LineRange {
            inner,
            pos,
            end,
            line: Vec::new(),
            offset: 0,
            done: false,
        })
    }
}

impl<R: BufRead> Read for LineRange<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.offset == self.line.len() {
            if self.done || self.pos > self.end {
                return Ok(0);
            }
            self.line.clear();
            self.offset = 0;
            let n = self.inner.read_until(b'\n', &mut self.line)?;
            if n == 0 {
                self.done = true;
                return Ok(0);
            }
            self.pos += n as u64;
        }
        let n = buf.len().min(self.line.len() - self.offset);
        buf[..n].copy_from_slice(&self.line[self.offset..self.offset + n]);
        self.offset += n;
        Ok(n)
    }
}

/// The split's bytes as decoded text: fetched, decompressed, cut to its lines.
pub(crate) fn open_split(loc: &Location, split: &Split) -> io::Result<Box<dyn BufRead + Send>> {
    let path = split.object_path();
    match split.range {
        SplitRange::Bytes { start, end } if split.codec == Codec::None => {
            let raw = BufReader::with_capacity(256 * 1024, fetch(loc, &path, start));
            Ok(Box::new(BufReader::new(LineRange::new(raw, start, end)?)))
        }
        SplitRange::Bytes { start, end } if split.codec == Codec::Bzip2 => {
            let source = StoreRanges {
                loc: loc.clone(),
                path,
                size: split.size,
                runtime: tokio::runtime::Handle::try_current().map_err(io::Error::other)?,
            };
            let lines = codec::bzip2_split(source, start, end)?;
            Ok(Box::new(BufReader::with_capacity(256 * 1024, lines)))
        }
        _ => {
            let raw: Box<dyn Read + Send> = Box::new(fetch(loc, &path, 0));
            let decoded = codec::decoder(split.codec, raw);
            Ok(Box::new(BufReader::with_capacity(256 * 1024, decoded)))
        }
    }
}

/// Hands every batch of a decoder to `emit`, stopping at the first error
/// (reported naming the file) or when the consumer has gone.
pub(crate) fn emit_all(
    batches: impl Iterator<Item = Result<RecordBatch, arrow::error::ArrowError>>,
    display: &str,
    format: &str,
    emit: &mut dyn FnMut(Result<RecordBatch>) -> bool,
) {
    for batch in batches {
        let item = batch.map_err(|e| Error::corrupt(display, format, e));
        let failed = item.is_err();
        if !emit(item) || failed {
            break;
        }
    }
}

/// Runs `decode` on a blocking thread over the split's text and streams the
/// batches it emits. `emit` returns `false` once the consumer has gone.
pub(crate) fn decode_blocking<F>(
    loc: &Location,
    split: &Split,
    format: &'static str,
    decode: F,
) -> BoxStream<'static, Result<RecordBatch>>
where
    F: FnOnce(Box<dyn BufRead + Send>, &mut dyn FnMut(Result<RecordBatch>) -> bool) -> Result<()>
        + Send
        + 'static,
{
    let loc = loc.clone();
    let split = split.clone();
    let display = loc.display(&split.object_path());
    stream_blocking(move |emit| match open_split(&loc, &split) {
        Ok(input) => decode(input, emit),
        Err(e) => Err(from_io(&display, format, e)),
    })
}

/// Runs `decode` on a blocking thread and streams the batches it emits; an
/// error it returns is the stream's last item. `emit` returns `false` once
/// the consumer has gone.
pub(crate) fn stream_blocking<F>(decode: F) -> BoxStream<'static, Result<RecordBatch>>
where
    F: FnOnce(&mut dyn FnMut(Result<RecordBatch>) -> bool) -> Result<()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Result<RecordBatch>>(BATCHES_IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        let mut emit = |item: Result<RecordBatch>| tx.blocking_send(item).is_ok();
        if let Err(e) = decode(&mut emit) {
            emit(Err(e));
        }
    });
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed()
}

/// The decompressed bytes of a file from its start (for schema inference).
pub(crate) fn open_head(loc: &Location, path: &Path) -> BufReader<Box<dyn Read + Send>> {
    let raw: Box<dyn Read + Send> = Box::new(fetch(loc, path, 0));
    BufReader::new(codec::decoder(Codec::from_path(path.as_ref()), raw))
}

/// Inspects a file with no footer (CSV, JSON, Avro): `infer` reads the
/// schema from the decompressed head of the file on a blocking thread, given
/// the file's name as users see it; nothing else is known before reading.
pub(crate) async fn inspect_head<F>(
    loc: &Location,
    file: &FileRef,
    format: &'static str,
    infer: F,
) -> Result<FileInfo>
where
    F: FnOnce(BufReader<Box<dyn Read + Send>>, &str) -> Result<SchemaRef> + Send + 'static,
{
    let schema = read_head(loc, file, format, infer).await?;
    Ok(FileInfo::schema_only(schema))
}

/// Runs `read` on the decompressed head of a file on a blocking thread,
/// given the file's name as users see it.
pub(crate) async fn read_head<T, F>(
    loc: &Location,
    file: &FileRef,
    format: &'static str,
    read: F,
) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(BufReader<Box<dyn Read + Send>>, &str) -> Result<T> + Send + 'static,
{
    let loc = loc.clone();
    let path = file.path.clone();
    let display = loc.display(&path);
    let shown = display.clone();
    tokio::task::spawn_blocking(move || {
        let mut input = open_head(&loc, &path);
        // Lines are never read out of a binary file (a SequenceFile named
        // part-00000, say).
        if matches!(format, "text" | "csv" | "json") {
            super::sniff::refuse_binary(&mut input, &shown, format)?;
        }
        read(input, &shown)
    })
    .await
    .map_err(|e| Error::corrupt(&display, format, e))?
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::format::Format;

    fn lines_of(text: &str, start: u64, end: u64) -> String {
        let bytes = text.as_bytes()[start as usize..].to_vec();
        let mut r = LineRange::new(io::Cursor::new(bytes), start, end).expect("open");
        let mut out = String::new();
        r.read_to_string(&mut out).expect("read");
        out
    }

    #[test]
    fn every_line_in_exactly_one_range() {
        let text = "aaa\nbb\ncccc\nd\neeeee\n";
        for size in 1..=text.len() as u64 {
            let ranges = crate::split::byte_ranges(text.len() as u64, size);
            let joined: String = ranges.iter().map(|&(s, e)| lines_of(text, s, e)).collect();
            assert_eq!(joined, text, "split size {size}");
        }
    }

    #[test]
    fn no_trailing_newline() {
        let text = "a\nb\nc";
        for size in 1..=text.len() as u64 {
            let ranges = crate::split::byte_ranges(text.len() as u64, size);
            let joined: String = ranges.iter().map(|&(s, e)| lines_of(text, s, e)).collect();
            assert_eq!(joined, text, "split size {size}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bzip2_byte_ranges_through_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let plain: Vec<u8> = (0..60_000u32)
            .flat_map(|i| format!("{i}\t{}\n", i.wrapping_mul(2_654_435_761)).into_bytes())
            .collect();
        let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::new(1));
        enc.write_all(&plain).unwrap();
        let encoded = enc.finish().unwrap();
        std::fs::write(dir.path().join("part-00000.bz2"), &encoded).unwrap();
        let loc = crate::store::open(dir.path().to_str().unwrap()).unwrap();
        let size = encoded.len() as u64;
        let ranges = crate::split::byte_ranges(size, 50_000);
        assert!(ranges.len() > 3, "{ranges:?}");
        let mut joined = Vec::new();
        for (start, end) in ranges {
            let split = Split {
                path: loc.root.clone().join("part-00000.bz2").to_string(),
                size,
                format: Format::Text,
                codec: Codec::Bzip2,
                partition_dir: String::new(),
                partition_values: Vec::new(),
                range: SplitRange::Bytes { start, end },
                rows: None,
                deleted: Vec::new(),
                stamp: Default::default(),
                source: 0,
                window: None,
            };
            let loc = loc.clone();
            let part = tokio::task::spawn_blocking(move || {
                let mut out = Vec::new();
                open_split(&loc, &split)?.read_to_end(&mut out)?;
                io::Result::Ok(out)
            })
            .await
            .unwrap()
            .unwrap();
            joined.extend(part);
        }
        assert!(
            joined == plain,
            "{} bytes, expected {}",
            joined.len(),
            plain.len()
        );
    }
}
