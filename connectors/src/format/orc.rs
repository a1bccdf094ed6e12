//! ORC: footer and stripes through orc-rust's async reader over the store;
//! dates and timestamps as Spark's ORC reader reads them ([`shape`]).

mod footer;
mod shape;

use std::ops::Range;
use std::sync::{Arc, Mutex};

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::{BoxStream, Stream, StreamExt, TryStreamExt};
use futures::FutureExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use orc_rust::reader::AsyncChunkReader;
use orc_rust::ArrowReaderBuilder;

use super::{spark_legacy, FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest, Unit};
use crate::error::{store_error_within, Error, Result};
use crate::row_filter::Pred;
use crate::split::{Split, SplitRange};
use crate::store::Location;
use shape::Shape;

/// The reads that opened an ORC file (its tail: postscript, footer,
/// metadata), kept to open it again without fetching them.
type Reads = Arc<Mutex<Recorded>>;

/// Byte ranges read from a file while it was opened.
#[derive(Default)]
struct Recorded {
    /// Each read: its offset and bytes.
    reads: Vec<(u64, Bytes)>,
    /// The file is open: later reads (stripes) are not kept.
    sealed: bool,
}

impl Recorded {
    /// The bytes `offset..offset + length`, if the reads kept cover them.
    fn covering(&self, offset: u64, length: u64) -> Option<Bytes> {
        let end = offset.checked_add(length)?;
        let within = |at: u64| {
            self.reads
                .iter()
                .find(|(o, b)| *o <= at && at < o + b.len() as u64)
        };
        let (o, first) = within(offset)?;
        if end <= o + first.len() as u64 {
            return Some(first.slice((offset - o) as usize..(end - o) as usize));
        }
        // Across reads that meet (a tail read in two).
        let mut out = BytesMut::with_capacity(usize::try_from(length).ok()?);
        let mut at = offset;
        while at < end {
            let (o, bytes) = within(at)?;
            let stop = end.min(o + bytes.len() as u64);
            out.extend_from_slice(&bytes[(at - o) as usize..(stop - o) as usize]);
            at = stop;
        }
        Some(out.freeze())
    }
}

/// Byte ranges of one ORC object.
#[derive(Clone)]
struct StoreChunks {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
    /// The file as users see it, for store errors.
    display: String,
    /// Reads recorded (while opening) and answered from (opening again).
    reads: Reads,
}

impl AsyncChunkReader for StoreChunks {
    fn len(&mut self) -> BoxFuture<'_, std::io::Result<u64>> {
        let size = self.size;
        async move { Ok(size) }.boxed()
    }

    fn get_bytes(&mut self, offset: u64, length: u64) -> BoxFuture<'_, std::io::Result<Bytes>> {
        let store = self.store.clone();
        let path = self.path.clone();
        let display = self.display.clone();
        let reads = self.reads.clone();
        async move {
            if let Some(bytes) = lock(&reads).covering(offset, length) {
                return Ok(bytes);
            }
            let bytes = store
                .get_range(&path, offset..offset + length)
                .await
                .map_err(|e| std::io::Error::other(Error::from_store(display, e)))?;
            let mut recorded = lock(&reads);
            if !recorded.sealed {
                recorded.reads.push((offset, bytes.clone()));
            }
            Ok(bytes)
        }
        .boxed()
    }
}

fn chunks(loc: &Location, path: &Path, size: u64) -> StoreChunks {
    StoreChunks {
        store: loc.store.clone(),
        path: path.clone(),
        size,
        display: loc.display(path),
        reads: Reads::default(),
    }
}

fn lock(reads: &Reads) -> std::sync::MutexGuard<'_, Recorded> {
    reads
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A decoding error of `display`: the store's error where a read of the file
/// failed underneath, else corrupt data.
fn orc_error(display: &str, e: impl std::error::Error + 'static) -> Error {
    store_error_within(&e).unwrap_or_else(|| Error::corrupt(display, "orc", e))
}

/// Opens an ORC file: orc-rust's reader of it, set to decode the columns
/// as `shape.read` says, and its shape (read from its footer unless given).
/// The reads that opened it are kept (for opening it again), no others.
async fn open(
    chunks: StoreChunks,
    shape: Option<Arc<Shape>>,
) -> Result<(ArrowReaderBuilder<StoreChunks>, Arc<Shape>)> {
    let mut tail = chunks.clone();
    let builder = ArrowReaderBuilder::try_new_async(chunks)
        .await
        .map_err(|e| orc_error(&tail.display, e))?;
    let shape = match shape {
        Some(shape) => shape,
        None => Arc::new(shape_of(&mut tail, &builder).await?),
    };
    lock(&tail.reads).sealed = true;
    Ok((builder.with_schema(shape.read.clone()), shape))
}

/// The shape of an opened file, from what its footer says besides what
/// orc-rust reads (from the reads that opened it: nothing is fetched again).
async fn shape_of(
    tail: &mut StoreChunks,
    builder: &ArrowReaderBuilder<StoreChunks>,
) -> Result<Shape> {
    let display = tail.display.clone();
    let size = tail.size;
    // The postscript (at most 255 bytes) and its length byte.
    let last = size.min(256);
    let end = tail
        .get_bytes(size - last, last)
        .await
        .map_err(|e| orc_error(&display, e))?;
    let bad = |e: footer::FooterError| Error::corrupt(&display, "orc", e);
    let range = footer::footer_range(&end, size).map_err(bad)?;
    let stored = tail
        .get_bytes(range.start, range.end - range.start)
        .await
        .map_err(|e| orc_error(&display, e))?;
    let meta = builder.file_metadata();
    let extras = footer::parse_footer(stored, meta.compression()).map_err(bad)?;
    Ok(Shape::new(
        meta.root_data_type(),
        &builder.schema(),
        &extras,
    ))
}

/// The batches of an opened reader, as its shape hands them on.
fn batches(
    builder: ArrowReaderBuilder<StoreChunks>,
    shape: Arc<Shape>,
    display: String,
) -> impl Stream<Item = Result<RecordBatch>> {
    let d2 = display.clone();
    builder
        .build_async()
        .map_err(move |e| orc_error(&d2, e))
        .and_then(move |batch| {
            let out = shape
                .convert(batch)
                .map_err(|e| Error::corrupt(&display, "orc", e));
            futures::future::ready(out)
        })
}

/// ORC: a footer with the schema, rows and stripes; files cut at stripes.
pub(super) struct Orc;

#[async_trait]
impl FileFormat for Orc {
    /// Reads the footer: schema, rows and stripes (anchored at their start).
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        _opts: &FormatOptions,
    ) -> Result<FileInfo> {
        let (builder, shape) = open(chunks(loc, &file.path, file.size), None).await?;
        let meta = builder.file_metadata();
        let units = meta
            .stripe_metadatas()
            .iter()
            .enumerate()
            .map(|(index, s)| Unit {
                index,
                anchor: s.offset(),
                rows: s.number_of_rows(),
            })
            .collect();
        Ok(FileInfo {
            schema: shape.out.clone(),
            rows: Some(meta.number_of_rows()),
            units,
            csv_head: None,
            parquet_meta: None,
            detail: None,
        })
    }

    /// Streams the stripes of a split.
    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let path = split.object_path();
        let display = loc.display(&path);
        let reader = chunks(loc, &path, split.size);
        let range = split.range.clone();
        let batch_size = request.options.batch_size;
        if let Some(filter) = request.filter.clone() {
            return decode_filtered(reader, range, batch_size, filter);
        }
        let opened = async move {
            let (builder, shape) = open(reader, None).await?;
            let mut builder = builder.with_batch_size(batch_size);
            if let SplitRange::Stripes { start, end } = range {
                builder = builder.with_file_byte_range(start as usize..end as usize);
            }
            Ok::<_, Error>(batches(builder, shape, display))
        };
        futures::stream::once(opened).try_flatten().boxed()
    }
}

/// Streams the stripes of a split that may hold a row `filter` keeps: the
/// others, ruled out by their statistics, are never fetched. Each run of
/// stripes kept is read by a reader of its own, opened on the reads that
/// opened the file (fetched once).
fn decode_filtered(
    reader: StoreChunks,
    range: SplitRange,
    batch_size: usize,
    filter: Arc<Pred>,
) -> BoxStream<'static, Result<RecordBatch>> {
    let template = reader.clone();
    let open_all = async move {
        let (probe, shape) = open(reader, None).await?;
        let meta = probe.file_metadata();
        let within = |offset: u64| match &range {
            SplitRange::Stripes { start, end } => (*start..*end).contains(&offset),
            _ => true,
        };
        let stripes: Vec<usize> = (0..meta.stripe_metadatas().len())
            .filter(|&i| within(meta.stripe_metadatas()[i].offset()))
            .collect();
        // Statistics hold the values as stored: rebased as the values are.
        let rebase_days = shape
            .hybrid
            .then_some(spark_legacy::julian_to_gregorian_days as fn(i64) -> i64);
        let kept =
            crate::row_filter::orc::stripes_kept(meta, &shape.out, &filter, &stripes, rebase_days);
        let runs = runs(meta, &stripes, &kept);
        let streams = runs.into_iter().map(move |run| {
            let chunks = template.clone();
            let shape = shape.clone();
            async move {
                let display = chunks.display.clone();
                let (builder, shape) = open(chunks, Some(shape)).await?;
                let builder = builder
                    .with_batch_size(batch_size)
                    .with_file_byte_range(run);
                Ok::<_, Error>(batches(builder, shape, display))
            }
        });
        Ok::<_, Error>(
            futures::stream::iter(streams)
                .then(|open| open)
                .try_flatten(),
        )
    };
    futures::stream::once(open_all).try_flatten().boxed()
}

/// The byte ranges of the runs of consecutive stripes kept, each from its
/// first stripe's offset to just past its last's.
fn runs(
    meta: &orc_rust::reader::metadata::FileMetadata,
    stripes: &[usize],
    kept: &[bool],
) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut last: Option<usize> = None;
    for (&s, &k) in stripes.iter().zip(kept) {
        if !k {
            continue;
        }
        let offset = meta.stripe_metadatas()[s].offset() as usize;
        match (out.last_mut(), last) {
            (Some(run), Some(l)) if l + 1 == s => run.end = offset + 1,
            _ => out.push(offset..offset + 1),
        }
        last = Some(s);
    }
    out
}
