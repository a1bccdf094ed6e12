//! ORC: footer and stripes through orc-rust's async reader over the store.

use std::sync::{Arc, Mutex};

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use futures::FutureExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use orc_rust::reader::AsyncChunkReader;
use orc_rust::ArrowReaderBuilder;

use super::{FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest, Unit};
use crate::error::{store_error_within, Error, Result};
use crate::row_filter::Pred;
use crate::split::{Split, SplitRange};
use crate::store::Location;

/// The reads that opened an ORC file (its tail: postscript, footer,
/// metadata), kept to open it again without fetching them.
type Reads = Arc<Mutex<Vec<(u64, u64, Bytes)>>>;

/// Byte ranges of one ORC object.
struct StoreChunks {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
    /// The file as users see it, for store errors.
    display: String,
    /// Reads recorded (while opening) or answered from (opening again).
    reads: Option<Reads>,
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
            if let Some(reads) = &reads {
                let known = lock(reads)
                    .iter()
                    .find(|(o, l, _)| (*o, *l) == (offset, length))
                    .map(|(_, _, b)| b.clone());
                if let Some(bytes) = known {
                    return Ok(bytes);
                }
            }
            let bytes = store
                .get_range(&path, offset..offset + length)
                .await
                .map_err(|e| std::io::Error::other(Error::from_store(display, e)))?;
            if let Some(reads) = &reads {
                lock(reads).push((offset, length, bytes.clone()));
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
        reads: None,
    }
}

fn lock(reads: &Reads) -> std::sync::MutexGuard<'_, Vec<(u64, u64, Bytes)>> {
    reads
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A decoding error of `display`: the store's error where a read of the file
/// failed underneath, else corrupt data.
fn orc_error(display: &str, e: impl std::error::Error + 'static) -> Error {
    store_error_within(&e).unwrap_or_else(|| Error::corrupt(display, "orc", e))
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
        let builder = ArrowReaderBuilder::try_new_async(chunks(loc, &file.path, file.size))
            .await
            .map_err(|e| orc_error(&loc.display(&file.path), e))?;
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
            schema: builder.schema(),
            rows: Some(meta.number_of_rows()),
            units,
            csv_head: None,
            parquet_meta: None,
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
        let open = async move {
            let mut builder = ArrowReaderBuilder::try_new_async(reader)
                .await
                .map_err(|e| orc_error(&display, e))?
                .with_batch_size(batch_size);
            if let SplitRange::Stripes { start, end } = range {
                builder = builder.with_file_byte_range(start as usize..end as usize);
            }
            let d2 = display.clone();
            Ok::<_, Error>(builder.build_async().map_err(move |e| orc_error(&d2, e)))
        };
        futures::stream::once(open).try_flatten().boxed()
    }
}

/// Streams the stripes of a split that may hold a row `filter` keeps: the
/// others, ruled out by their statistics, are never fetched. Each run of
/// stripes kept is read by a reader of its own, opened on the reads that
/// opened the file (fetched once).
fn decode_filtered(
    mut reader: StoreChunks,
    range: SplitRange,
    batch_size: usize,
    filter: Arc<Pred>,
) -> BoxStream<'static, Result<RecordBatch>> {
    let display = reader.display.clone();
    let reads: Reads = Arc::default();
    reader.reads = Some(reads.clone());
    let template = StoreChunks {
        store: reader.store.clone(),
        path: reader.path.clone(),
        size: reader.size,
        display: reader.display.clone(),
        reads: Some(reads),
    };
    let open = async move {
        let probe = ArrowReaderBuilder::try_new_async(reader)
            .await
            .map_err(|e| orc_error(&display, e))?;
        let meta = probe.file_metadata();
        let within = |offset: u64| match &range {
            SplitRange::Stripes { start, end } => (*start..*end).contains(&offset),
            _ => true,
        };
        let stripes: Vec<usize> = (0..meta.stripe_metadatas().len())
            .filter(|&i| within(meta.stripe_metadatas()[i].offset()))
            .collect();
        let kept = crate::row_filter::orc::stripes_kept(meta, &probe.schema(), &filter, &stripes);
        let runs = runs(meta, &stripes, &kept);
        let streams = runs.into_iter().map(move |run| {
            let chunks = StoreChunks {
                store: template.store.clone(),
                path: template.path.clone(),
                size: template.size,
                display: template.display.clone(),
                reads: template.reads.clone(),
            };
            let display = template.display.clone();
            async move {
                let builder = ArrowReaderBuilder::try_new_async(chunks)
                    .await
                    .map_err(|e| orc_error(&display, e))?
                    .with_batch_size(batch_size)
                    .with_file_byte_range(run);
                let d2 = display.clone();
                Ok::<_, Error>(builder.build_async().map_err(move |e| orc_error(&d2, e)))
            }
        });
        Ok::<_, Error>(
            futures::stream::iter(streams)
                .then(|open| open)
                .try_flatten(),
        )
    };
    futures::stream::once(open).try_flatten().boxed()
}

/// The byte ranges of the runs of consecutive stripes kept, each from its
/// first stripe's offset to just past its last's.
fn runs(
    meta: &orc_rust::reader::metadata::FileMetadata,
    stripes: &[usize],
    kept: &[bool],
) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
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
