//! Parquet: footers read with one suffix request; local files decoded page by
//! page with positioned reads, other stores' row groups fetched with
//! concurrent range requests through our own `AsyncFileReader`, into pooled
//! buffers, within the reader's [`ReadAhead`] budget.

use std::ops::Range;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::datatypes::{DataType, FieldRef, Schema, TimeUnit};
use arrow::record_batch::RecordBatchOptions;
use arrow::record_batch::{RecordBatch, RecordBatchReader};
use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use futures::FutureExt;
use object_store::path::Path;
use object_store::{GetOptions, GetResultPayload, ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::{
    ArrowReaderBuilder, ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
    RowSelection, RowSelector,
};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::basic::Type as PhysicalType;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::reader::{ChunkReader, Length};

use super::parquet_edges;
use super::parquet_footers::{self, FooterKey};
use super::{spark_legacy, FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest, Unit};
use crate::error::{Error, Result};
use crate::read_ahead::{Fetched, ReadAhead};
use crate::schema::view_type;
use crate::split::{Split, SplitRange};
use crate::store::Location;
use crate::types::ColumnMapping;

/// Bytes fetched from the end of a file in the first footer request.
const FOOTER_HINT: usize = 64 * 1024;
/// Range requests in flight at once per file.
const RANGE_CONCURRENCY: usize = 8;
/// Ranges closer than this are fetched in one request.
const COALESCE_GAP: u64 = 1024 * 1024;
/// A request grows by near neighbours up to about this many bytes; a row
/// group's column chunks so come in several requests in flight at once
/// (each waits its round trip side by side, and a store serves several
/// connections faster than one), never a range cut in two.
const REQUEST_BYTES: u64 = 8 * 1024 * 1024;

/// Reads byte ranges of one object for the Parquet decoder.
#[derive(Clone)]
pub(crate) struct StoreReader {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
    metadata: Option<Arc<ParquetMetaData>>,
    /// The budget row groups are fetched within, and the buffer pool.
    ahead: ReadAhead,
    /// Read the page index with the footer, where the file has one.
    page_index: bool,
    /// The file, when the read is a window of a split's rows: the pages at
    /// the ends of its runs are kept for the windows beside it, and only
    /// adjacent ranges are fetched together ([`super::parquet_edges`]).
    window_of: Option<FooterKey>,
}

impl StoreReader {
    pub(crate) fn new(store: Arc<dyn ObjectStore>, path: Path, size: u64) -> Self {
        StoreReader {
            store,
            path,
            size,
            metadata: None,
            ahead: ReadAhead::unbounded(),
            page_index: false,
            window_of: None,
        }
    }
}

fn store_err(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for StoreReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        let store = self.store.clone();
        let path = self.path.clone();
        async move { store.get_range(&path, range).await.map_err(store_err) }.boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        let store = self.store.clone();
        let path = self.path.clone();
        let ahead = self.ahead.clone();
        let window_of = self.window_of.clone();
        async move { fetch_coalesced(store, path, ranges, ahead, window_of).await }.boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            if let Some(m) = &self.metadata {
                return Ok(m.clone());
            }
            let size = self.size;
            let policy = if self.page_index {
                PageIndexPolicy::Optional
            } else {
                PageIndexPolicy::Skip
            };
            let metadata = ParquetMetaDataReader::new()
                .with_prefetch_hint(Some(FOOTER_HINT))
                .with_page_index_policy(policy)
                .load_and_finish(&mut *self, size)
                .await?;
            let metadata = Arc::new(metadata);
            self.metadata = Some(metadata.clone());
            Ok(metadata)
        }
        .boxed()
    }
}

/// Fetches ranges for the decoder. For a window of a split's rows
/// (`window_of`), pages kept from the windows beside it are taken from
/// memory, only adjacent ranges are merged (a gap is other windows' rows),
/// and the pages at the ends of its runs are kept in turn.
async fn fetch_coalesced(
    store: Arc<dyn ObjectStore>,
    path: Path,
    ranges: Vec<Range<u64>>,
    ahead: ReadAhead,
    window_of: Option<FooterKey>,
) -> parquet::errors::Result<Vec<Bytes>> {
    let Some(file) = window_of else {
        return fetch_merged(store, path, &ranges, ahead, COALESCE_GAP).await;
    };
    let mut out: Vec<Option<Bytes>> = ranges
        .iter()
        .map(|r| parquet_edges::get(&file, r))
        .collect();
    let missing: Vec<usize> = (0..ranges.len()).filter(|&i| out[i].is_none()).collect();
    let wanted: Vec<Range<u64>> = missing.iter().map(|&i| ranges[i].clone()).collect();
    let fetched = fetch_merged(store, path, &wanted, ahead, 0).await?;
    let ends = parquet_edges::at_run_ends(&ranges);
    for (&i, bytes) in missing.iter().zip(fetched) {
        if ends[i] {
            parquet_edges::keep(&file, &ranges[i], &bytes);
        }
        out[i] = Some(bytes);
    }
    Ok(out.into_iter().flatten().collect())
}

/// Fetches ranges, merging neighbours up to `gap` bytes apart and running
/// the requests concurrently, once their bytes fit in the read-ahead budget;
/// they hold their share of it, and their pooled buffers, until the decoder
/// drops them.
async fn fetch_merged(
    store: Arc<dyn ObjectStore>,
    path: Path,
    ranges: &[Range<u64>],
    ahead: ReadAhead,
    gap: u64,
) -> parquet::errors::Result<Vec<Bytes>> {
    if ranges.is_empty() {
        return Ok(Vec::new());
    }
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| ranges[i].start);
    let mut merged: Vec<Range<u64>> = Vec::new();
    for &i in &order {
        let r = &ranges[i];
        match merged.last_mut() {
            Some(last)
                if r.start < last.end
                    || (r.start <= last.end + gap && last.end - last.start < REQUEST_BYTES) =>
            {
                last.end = last.end.max(r.end)
            }
            _ => merged.push(r.clone()),
        }
    }
    let total = merged.iter().map(|r| r.end - r.start).sum();
    let reservation = Arc::new(ahead.reserve(total).await);
    let fetched: Vec<Bytes> = futures::stream::iter(merged.iter().cloned().map(|r| {
        let store = store.clone();
        let path = path.clone();
        let ahead = ahead.clone();
        let reservation = reservation.clone();
        async move {
            let buf = ahead.take_buffer((r.end - r.start) as usize);
            let (buf, len) = fetch_into(store.as_ref(), &path, r, buf)
                .await
                .map_err(store_err)?;
            Ok::<_, ParquetError>(Bytes::from_owner(Fetched::new(
                buf,
                len,
                ahead,
                reservation,
            )))
        }
    }))
    .buffered(RANGE_CONCURRENCY)
    .try_collect()
    .await?;
    drop(reservation);
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let idx = merged.partition_point(|m| m.end < r.end);
        let idx = idx.min(merged.len().saturating_sub(1));
        let m = &merged[idx];
        let start = (r.start - m.start) as usize;
        let end = (r.end - m.start) as usize;
        if end > fetched[idx].len() {
            return Err(ParquetError::EOF(format!(
                "bytes {}..{} requested, the file ends at byte {}",
                r.start,
                r.end,
                m.start + fetched[idx].len() as u64
            )));
        }
        out.push(fetched[idx].slice(start..end));
    }
    Ok(out)
}

/// Reads `range` of the object into `buf` (at least as long as the range),
/// returning it and the bytes read: fewer than asked when the object ends
/// first. A local file is read in place, without a buffer of its own.
async fn fetch_into(
    store: &dyn ObjectStore,
    path: &Path,
    range: Range<u64>,
    mut buf: Vec<u8>,
) -> object_store::Result<(Vec<u8>, usize)> {
    let result = store
        .get_opts(path, GetOptions::new().with_range(Some(range)))
        .await?;
    let len = (result.range.end - result.range.start) as usize;
    if len > buf.len() {
        return Err(object_store::Error::Generic {
            store: "parquet reader",
            source: format!("{len} bytes returned for a request of {}", buf.len()).into(),
        });
    }
    match result.payload {
        GetResultPayload::File(file, local) => {
            let start = result.range.start;
            let read = tokio::task::spawn_blocking(move || {
                use std::os::unix::fs::FileExt;
                file.read_exact_at(&mut buf[..len], start).map(|()| buf)
            })
            .await
            .map_err(|source| object_store::Error::JoinError { source })?;
            let buf = read.map_err(|source| object_store::Error::Generic {
                store: "LocalFileSystem",
                source: format!("cannot read {}: {source}", local.display()).into(),
            })?;
            Ok((buf, len))
        }
        GetResultPayload::Stream(mut chunks) => {
            let mut at = 0;
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk?;
                let end = at + chunk.len();
                if end > len {
                    return Err(object_store::Error::Generic {
                        store: "parquet reader",
                        source: format!("more than the {len} bytes asked for returned").into(),
                    });
                }
                buf[at..end].copy_from_slice(&chunk);
                at = end;
            }
            Ok((buf, at))
        }
    }
}

/// Parquet: a footer with the schema, rows and row groups; files cut at
/// row groups, rows skipped by selection rather than decoded.
pub(super) struct Parquet;

#[async_trait]
impl FileFormat for Parquet {
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        _opts: &FormatOptions,
    ) -> Result<FileInfo> {
        inspect(loc, file).await
    }

    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        read(loc, split, request, 0)
    }

    /// The rows before `skip` are left out of the row selection, never decoded.
    fn decode_from(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
        skip: u64,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        read(loc, split, request, skip)
    }
}

fn corrupt(loc: &Location, path: &Path, e: impl ToString) -> Error {
    Error::corrupt(loc.display(path), "parquet", e)
}

/// Reads the footer: schema, rows and row groups (anchored at their midpoints).
async fn inspect(loc: &Location, file: &FileRef) -> Result<FileInfo> {
    let mut reader = StoreReader::new(loc.store.clone(), file.path.clone(), file.size);
    let meta = ArrowReaderMetadata::load_async(&mut reader, ArrowReaderOptions::new())
        .await
        .map_err(|e| map_err(loc, &file.path, e))?;
    let meta = int96_as_micros(meta).map_err(|e| map_err(loc, &file.path, e))?;
    let units = meta
        .metadata()
        .row_groups()
        .iter()
        .enumerate()
        .map(|(index, rg)| {
            let start = rg
                .columns()
                .first()
                .map(|c| {
                    let (s, _) = c.byte_range();
                    s
                })
                .unwrap_or(0);
            Unit {
                index,
                anchor: start + rg.compressed_size().max(0) as u64 / 2,
                rows: rg.num_rows().max(0) as u64,
            }
        })
        .collect::<Vec<_>>();
    let legacy = !legacy_calendar_columns(&meta).is_empty();
    Ok(FileInfo {
        schema: meta.schema().clone(),
        rows: Some(units.iter().map(|u| u.rows).sum()),
        units,
        csv_head: None,
        parquet_meta: Some((meta.metadata().clone(), legacy)),
        detail: None,
    })
}

/// A store failure stays a store error; anything else means the file is bad.
fn map_err(loc: &Location, path: &Path, e: ParquetError) -> Error {
    if let ParquetError::External(inner) = &e {
        if inner.downcast_ref::<object_store::Error>().is_some() {
            if let ParquetError::External(inner) = e {
                if let Ok(store_err) = inner.downcast::<object_store::Error>() {
                    return Error::from_store(loc.display(path), *store_err);
                }
            }
            return corrupt(loc, path, "store error");
        }
    }
    corrupt(loc, path, e)
}

/// Streams the row groups of a split, skipping `skip` rows, projecting the requested columns.
///
/// A file of the local filesystem is decoded page by page as the decoder
/// asks (see [`LocalChunks`]): nothing but the pages in use is held, so
/// readers of large row groups decode side by side within the read-ahead
/// budget. Other stores fetch each row group's column chunks whole, with
/// concurrent range requests, once their bytes fit in the budget.
fn read(
    loc: &Location,
    split: &Split,
    request: &ReadRequest,
    skip: u64,
) -> BoxStream<'static, Result<RecordBatch>> {
    let loc = loc.clone();
    let path = split.object_path();
    let shape = Shape {
        range: split.range.clone(),
        deleted: split.deleted.clone(),
        columns: request.columns.clone(),
        mapping: request.file_columns.clone(),
        batch_size: request.options.batch_size,
        batch_bytes: request.options.batch_bytes,
        skip,
        limit: request.limit,
        pruned: None,
    };
    let filter = request.filter.clone();
    let ahead = request.read_ahead.clone();
    let string_view = request.string_view;
    let planned = split.clone();
    let open = async move {
        let mut shape = shape;
        let mut reader = StoreReader::new(loc.store.clone(), path.clone(), planned.size);
        reader.ahead = ahead;
        // The offset index lets a window fetch only the pages of its rows.
        reader.page_index = filter.is_some() || shape.limit.is_some();
        if shape.limit.is_some() {
            reader.window_of = FooterKey::new(loc.display(&path), planned.size, &planned.stamp);
        }
        let opened = open_footer(&loc, &path, &planned, &mut reader, string_view).await?;
        let names: Vec<String> = opened
            .schema
            .fields()
            .iter()
            .map(|f| shape.mapping.logical_name(f).to_string())
            .collect();
        if let (Some(filter), true) = (&filter, opened.legacy.is_empty()) {
            let stats = crate::row_filter::parquet::FileStats {
                meta: opened.meta.metadata(),
                schema: &opened.schema,
                names: &names,
            };
            prune_groups(&mut shape, &stats, filter, &mut reader).await;
        }
        let (batches, out_schema) = match loc.local_path(&path) {
            Some(file) => local_batches(&loc, &path, &file, &planned, &shape, &opened, &names)?,
            None => store_batches(&loc, &path, reader, &shape, &opened, &names)?,
        };
        Ok::<_, Error>(as_planned(
            batches,
            &out_schema,
            &shape,
            opened.legacy,
            loc,
            path,
        ))
    };
    futures::stream::once(open).try_flatten().boxed()
}

/// A file's footer as a split decodes it.
struct Opened {
    /// The footer, INT96 read as microseconds, strings as views if asked.
    meta: ArrowReaderMetadata,
    /// The file's own schema (before views).
    schema: SchemaRef,
    /// Columns written in Spark's legacy calendar.
    legacy: Vec<String>,
}

/// Reads a split's footer: the one the planner or an earlier epoch kept, or
/// fetched (and kept).
async fn open_footer(
    loc: &Location,
    path: &Path,
    planned: &Split,
    reader: &mut StoreReader,
    string_view: bool,
) -> Result<Opened> {
    let key = FooterKey::new(loc.display(path), planned.size, &planned.stamp);
    reader.metadata = key
        .as_ref()
        .and_then(|k| parquet_footers::get(k, reader.page_index));
    let fetched = reader.metadata.is_none();
    let meta = ArrowReaderMetadata::load_async(reader, ArrowReaderOptions::new())
        .await
        .map_err(|e| map_err(loc, path, e))?;
    if let (Some(key), true) = (key, fetched) {
        parquet_footers::keep(key, meta.metadata().clone(), reader.page_index);
    }
    let legacy = legacy_calendar_columns(&meta);
    let meta = int96_as_micros(meta).map_err(|e| map_err(loc, path, e))?;
    // The file's own schema names its columns; views change types only.
    let schema = meta.schema().clone();
    let meta = if string_view {
        as_views(meta).map_err(|e| map_err(loc, path, e))?
    } else {
        meta
    };
    Ok(Opened {
        meta,
        schema,
        legacy,
    })
}

/// Leaves out of `shape` the row groups, pages and rows a row filter rules
/// out by statistics, the page index and bloom filters.
async fn prune_groups(
    shape: &mut Shape,
    stats: &crate::row_filter::parquet::FileStats<'_>,
    filter: &crate::row_filter::Pred,
    reader: &mut StoreReader,
) {
    let groups = shape.split_groups(stats.meta);
    let kept = stats.groups_kept(filter, &groups);
    let candidates: Vec<usize> = groups
        .into_iter()
        .zip(kept)
        .filter(|(_, k)| *k)
        .map(|(g, _)| g)
        .collect();
    let bloom = crate::row_filter::bloom::ruled_out(stats, filter, &candidates, reader).await;
    shape.prune(stats, filter, &bloom);
}

type Batches = BoxStream<'static, Result<RecordBatch>>;

/// A local file decoded page by page: one decoder per row group, one after
/// the other, so a batch never spans two row groups and a damaged row group
/// fails at its own first row with every row before it sent.
fn local_batches(
    loc: &Location,
    path: &Path,
    file: &std::path::Path,
    planned: &Split,
    shape: &Shape,
    opened: &Opened,
    names: &[String],
) -> Result<(Batches, SchemaRef)> {
    let chunks = LocalChunks::open(file).map_err(|e| Error::from_store(loc.display(path), e))?;
    // Read from here on by its descriptor, not through the store.
    if let Some(reason) = chunks.differs(planned) {
        return Err(Error::Changed {
            path: loc.display(path),
            reason,
        });
    }
    let meta = &opened.meta;
    let err = |e| map_err(loc, path, e);
    let decoder = |groups: Vec<usize>, part: Option<RowSelection>| {
        let builder =
            ParquetRecordBatchReaderBuilder::new_with_metadata(chunks.clone(), meta.clone());
        let rows = shape.rows_per_batch(builder.metadata(), &groups);
        let builder = shape
            .project(builder, names)
            .with_row_groups(groups)
            .with_batch_size(rows);
        match part {
            Some(part) => builder.with_row_selection(part),
            None => builder,
        }
        .build()
    };
    let out_schema = decoder(Vec::new(), None).map_err(err)?.schema();
    let groups = shape.groups(meta.metadata());
    let mut rest = shape.selection(meta.metadata(), &groups);
    let mut decoders = Vec::with_capacity(groups.len());
    for g in groups {
        let rows = meta
            .metadata()
            .row_groups()
            .get(g)
            .map_or(0, |rg| rg.num_rows().max(0) as usize);
        let part = rest.as_mut().map(|s| s.split_off(rows));
        if part.as_ref().is_some_and(|p| !p.selects_any()) {
            continue;
        }
        decoders.push(decoder(vec![g], part).map_err(err)?);
    }
    let (loc, path) = (loc.clone(), path.clone());
    let batches = futures::stream::iter(decoders.into_iter().flatten())
        .map(move |item| item.map_err(|e| corrupt(&loc, &path, e)))
        .boxed();
    Ok((batches, out_schema))
}

/// A file of another store, its row groups' column chunks fetched whole
/// within the read-ahead budget, one row group ahead.
fn store_batches(
    loc: &Location,
    path: &Path,
    mut reader: StoreReader,
    shape: &Shape,
    opened: &Opened,
    names: &[String],
) -> Result<(Batches, SchemaRef)> {
    reader.metadata = Some(opened.meta.metadata().clone());
    let builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, opened.meta.clone());
    let stream = shape
        .apply(builder, names)
        .build()
        .map_err(|e| map_err(loc, path, e))?;
    let out_schema = stream.schema().clone();
    let (loc, path) = (loc.clone(), path.clone());
    let batches = super::parquet_ahead::one_ahead(stream)
        .map_err(move |e| map_err(&loc, &path, e))
        .boxed();
    Ok((batches, out_schema))
}

/// Decoded batches as the plan wants them: legacy-calendar columns rebased,
/// the file's columns under the names the dataset gives them.
fn as_planned(
    batches: Batches,
    out_schema: &SchemaRef,
    shape: &Shape,
    legacy: Vec<String>,
    loc: Location,
    path: Path,
) -> Batches {
    let renamed = (!shape.mapping.is_identity()).then(|| {
        let fields: Vec<FieldRef> = out_schema
            .fields()
            .iter()
            .map(|f| Arc::new(f.as_ref().clone().with_name(shape.mapping.logical_name(f))))
            .collect();
        Arc::new(Schema::new(fields))
    });
    let (legacy_loc, legacy_path) = (loc.clone(), path.clone());
    let batches = batches.and_then(move |batch| {
        let out =
            spark_legacy::rebase(batch, &legacy).map_err(|e| corrupt(&legacy_loc, &legacy_path, e));
        futures::future::ready(out)
    });
    batches
        .and_then(move |batch| {
            let out = match &renamed {
                Some(schema) => RecordBatch::try_new_with_options(
                    schema.clone(),
                    batch.columns().to_vec(),
                    &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
                )
                .map_err(|e| corrupt(&loc, &path, e)),
                None => Ok(batch),
            };
            futures::future::ready(out)
        })
        .boxed()
}

/// What of a file a split decodes: which row groups and columns, which rows,
/// in batches of which size. The same for the local and the store decoder.
struct Shape {
    range: SplitRange,
    deleted: Vec<(u64, u64)>,
    columns: Vec<String>,
    mapping: ColumnMapping,
    batch_size: usize,
    /// Most bytes per decoded batch, if bounded.
    batch_bytes: Option<u64>,
    skip: u64,
    /// Rows to decode after `skip` (a window), the rest left out.
    limit: Option<u64>,
    /// What a row filter left of the split: the row groups that may hold a
    /// kept row, and the rows of them to decode.
    pruned: Option<(Vec<usize>, Option<RowSelection>)>,
}

impl Shape {
    /// Rows per decoded batch of `groups`: the batch size, or fewer where
    /// their rows are so large (by the row groups' uncompressed bytes) that
    /// `batch_bytes` comes first.
    fn rows_per_batch(&self, metadata: &ParquetMetaData, groups: &[usize]) -> usize {
        let Some(limit) = self.batch_bytes else {
            return self.batch_size;
        };
        let (bytes, rows) = groups
            .iter()
            .filter_map(|&g| metadata.row_groups().get(g))
            .fold((0u64, 0u64), |(b, r), rg| {
                (
                    b + rg.total_byte_size().max(0) as u64,
                    r + rg.num_rows().max(0) as u64,
                )
            });
        let per_row = bytes.checked_div(rows).unwrap_or(0).max(1);
        usize::try_from(limit / per_row)
            .unwrap_or(usize::MAX)
            .clamp(1, self.batch_size)
    }

    /// The row groups the split decodes.
    fn groups(&self, metadata: &ParquetMetaData) -> Vec<usize> {
        if let Some((groups, _)) = &self.pruned {
            return groups.clone();
        }
        self.split_groups(metadata)
    }

    /// The row groups of the split.
    fn split_groups(&self, metadata: &ParquetMetaData) -> Vec<usize> {
        match &self.range {
            SplitRange::RowGroups(g) => g.clone(),
            _ => (0..metadata.num_row_groups()).collect(),
        }
    }

    /// Leaves out the row groups, and the pages of the others, whose
    /// statistics say no row of them passes `filter`, and the row groups
    /// `bloom` lists (their bloom filters say so); the rows deleted stay
    /// unread. Reads under a filter start at the split's first row.
    fn prune(
        &mut self,
        stats: &crate::row_filter::parquet::FileStats<'_>,
        filter: &crate::row_filter::Pred,
        bloom: &[usize],
    ) {
        let metadata = stats.meta;
        let groups = self.split_groups(metadata);
        let kept = stats.groups_kept(filter, &groups);
        let rows_of = |g: usize| {
            metadata
                .row_groups()
                .get(g)
                .map_or(0, |rg| rg.num_rows().max(0) as usize)
        };
        let total: u64 = groups.iter().map(|&g| rows_of(g) as u64).sum();
        let mut deleted = selection(total, &self.deleted, 0);
        let (mut out_groups, mut selectors) = (Vec::new(), Vec::new());
        let (mut pruned, mut by_bloom, mut page_rows) = (0u64, 0u64, 0u64);
        let mut narrowed = deleted.is_some();
        for (&g, keep) in groups.iter().zip(kept) {
            let rows = rows_of(g);
            let live = deleted.as_mut().map(|d| d.split_off(rows));
            if !keep {
                pruned += 1;
                continue;
            }
            if bloom.contains(&g) {
                by_bloom += 1;
                continue;
            }
            let pages = stats.pages_kept(filter, g);
            if let Some(p) = &pages {
                page_rows += p.skipped_row_count() as u64;
            }
            let part = match (live, pages) {
                (Some(l), Some(p)) => Some(l.intersection(&p)),
                (l, p) => l.or(p),
            };
            if part.as_ref().is_some_and(|p| !p.selects_any()) {
                continue;
            }
            narrowed |= part.is_some();
            out_groups.push(g);
            match part {
                Some(p) => selectors.extend(p.iter().copied()),
                None => selectors.push(RowSelector::select(rows)),
            }
        }
        crate::row_filter::parquet::count_pruned(
            out_groups.len() as u64,
            pruned,
            by_bloom,
            page_rows,
        );
        let selection = narrowed.then(|| RowSelection::from(selectors));
        self.pruned = Some((out_groups, selection));
    }

    /// The rows of `groups` to decode (`None`: all of them).
    fn selection(&self, metadata: &ParquetMetaData, groups: &[usize]) -> Option<RowSelection> {
        if let Some((_, selection)) = &self.pruned {
            return selection.clone();
        }
        let total: u64 = groups
            .iter()
            .filter_map(|&g| metadata.row_groups().get(g))
            .map(|rg| rg.num_rows().max(0) as u64)
            .sum();
        let skipped = selection(total, &self.deleted, self.skip);
        match self.limit {
            Some(limit) => Some(limited(skipped, total, limit)),
            None => skipped,
        }
    }

    /// Projects a decoder onto the requested columns of the file whose
    /// columns the dataset names `names`.
    fn project<T>(
        &self,
        builder: ArrowReaderBuilder<T>,
        names: &[String],
    ) -> ArrowReaderBuilder<T> {
        let roots: Vec<usize> = self
            .columns
            .iter()
            .filter_map(|c| names.iter().position(|n| n == c))
            .collect();
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        builder.with_projection(mask)
    }

    /// Configures a decoder of the whole split.
    fn apply<T>(&self, builder: ArrowReaderBuilder<T>, names: &[String]) -> ArrowReaderBuilder<T> {
        let groups = self.groups(builder.metadata());
        let selection = self.selection(builder.metadata(), &groups);
        let rows = self.rows_per_batch(builder.metadata(), &groups);
        let builder = self
            .project(builder, names)
            .with_row_groups(groups)
            .with_batch_size(rows);
        match selection {
            Some(selection) => builder.with_row_selection(selection),
            None => builder,
        }
    }
}

/// A local Parquet file read where the decoder asks, with positioned reads
/// (`pread`) on one shared descriptor: a page header through a small
/// buffer, then the page itself. The decoder so holds the pages it is
/// decoding, never a whole column chunk, and nothing is copied through the
/// object store's buffers.
#[derive(Clone)]
struct LocalChunks {
    file: Arc<std::fs::File>,
    len: u64,
    display: std::path::PathBuf,
}

/// Bytes read ahead for a page header (headers are tens of bytes; the rest
/// of the buffer is the page's first bytes, read again with the page).
const HEADER_READ: usize = 16 * 1024;

impl LocalChunks {
    fn open(path: &std::path::Path) -> object_store::Result<Self> {
        let io = |e: std::io::Error| local_err(path, e);
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Ok(LocalChunks {
            file: Arc::new(file),
            len,
            display: path.to_path_buf(),
        })
    }

    /// How the open file differs from the one `split` planned, if it does.
    fn differs(&self, split: &Split) -> Option<String> {
        match self.file.metadata() {
            Ok(metadata) => crate::store::pinned::local_file_differs(split, &metadata),
            Err(e) => Some(format!("cannot be described: {e}")),
        }
    }
}

/// An I/O error on a local file as the store would report it (a missing
/// file is `NotFound`, so it reads as one whichever way it was opened).
fn local_err(path: &std::path::Path, e: std::io::Error) -> object_store::Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        return object_store::Error::NotFound {
            path: path.display().to_string(),
            source: Box::new(e),
        };
    }
    object_store::Error::Generic {
        store: "LocalFileSystem",
        source: format!("cannot read {}: {e}", path.display()).into(),
    }
}

impl Length for LocalChunks {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for LocalChunks {
    type T = std::io::BufReader<Positioned>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(std::io::BufReader::with_capacity(
            HEADER_READ,
            Positioned {
                file: self.file.clone(),
                at: start,
            },
        ))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; length];
        self.file
            .read_exact_at(&mut buf, start)
            .map_err(|e| store_err(local_err(&self.display, e)))?;
        Ok(Bytes::from(buf))
    }
}

/// A reader of a local file from an offset on, by positioned reads: readers
/// of one descriptor never move each other's position.
struct Positioned {
    file: Arc<std::fs::File>,
    at: u64,
}

impl std::io::Read for Positioned {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// The reader's metadata with top-level string and binary columns decoded as
/// views: the values stay in the decompressed pages instead of being copied
/// into one buffer per batch.
/// The top-level INT96 columns of a file, by name.
fn int96_columns(meta: &ArrowReaderMetadata) -> Vec<String> {
    meta.metadata()
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .filter(|c| c.physical_type() == PhysicalType::INT96 && c.path().parts().len() == 1)
        .map(|c| c.name().to_string())
        .collect()
}

/// INT96 timestamps (Spark's default Parquet timestamps) decoded as
/// microseconds since the epoch in UTC, as Spark reads them: as nanoseconds
/// (the decoder's default) every instant before 1677 or after 2262 would
/// wrap around into another.
fn int96_as_micros(meta: ArrowReaderMetadata) -> parquet::errors::Result<ArrowReaderMetadata> {
    let int96 = int96_columns(&meta);
    if int96.is_empty() {
        return Ok(meta);
    }
    let schema = meta.schema();
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|f| {
            if int96.contains(f.name()) {
                let micros = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
                Arc::new(f.as_ref().clone().with_data_type(micros))
            } else {
                f.clone()
            }
        })
        .collect();
    let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    ArrowReaderMetadata::try_new(
        meta.metadata().clone(),
        ArrowReaderOptions::new().with_schema(schema),
    )
}

/// The top-level columns of a file whose dates and timestamps Spark wrote
/// in its legacy hybrid Julian calendar, to be rebased as Spark reads them:
/// every date and timestamp of a file marked `legacyDateTime` but its INT96
/// ones, which the `legacyINT96` mark says of.
fn legacy_calendar_columns(meta: &ArrowReaderMetadata) -> Vec<String> {
    let marked = |key: &str| {
        meta.metadata()
            .file_metadata()
            .key_value_metadata()
            .is_some_and(|kv| kv.iter().any(|e| e.key == key))
    };
    let (dates, int96_marked) = (
        marked(spark_legacy::LEGACY_DATETIME),
        marked(spark_legacy::LEGACY_INT96),
    );
    if !dates && !int96_marked {
        return Vec::new();
    }
    let int96 = int96_columns(meta);
    meta.schema()
        .fields()
        .iter()
        .filter(|f| {
            if int96.contains(f.name()) {
                int96_marked
            } else {
                dates && matches!(f.data_type(), DataType::Date32 | DataType::Timestamp(..))
            }
        })
        .map(|f| f.name().clone())
        .collect()
}

fn as_views(meta: ArrowReaderMetadata) -> parquet::errors::Result<ArrowReaderMetadata> {
    let schema = meta.schema();
    if !schema
        .fields()
        .iter()
        .any(|f| view_type(f.data_type()).is_some())
    {
        return Ok(meta);
    }
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|f| match view_type(f.data_type()) {
            Some(view) => Arc::new(f.as_ref().clone().with_data_type(view)),
            None => f.clone(),
        })
        .collect();
    let viewed = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    ArrowReaderMetadata::try_new(
        meta.metadata().clone(),
        ArrowReaderOptions::new().with_schema(viewed),
    )
}

/// The rows of a split to decode: all but the `deleted` ranges (positions
/// in the split, sorted), less the first `skip` of those left. `None` when
/// every row is read.
/// `selection` (all `total` rows when `None`) with only its first `limit`
/// selected rows still selected.
fn limited(selection: Option<RowSelection>, total: u64, limit: u64) -> RowSelection {
    let selectors: Vec<RowSelector> = match selection {
        Some(s) => s.iter().copied().collect(),
        None => vec![RowSelector::select(total as usize)],
    };
    let mut left = limit as usize;
    let mut out = Vec::with_capacity(selectors.len() + 1);
    for s in selectors {
        if s.skip {
            out.push(s);
        } else {
            let take = s.row_count.min(left);
            left -= take;
            if take > 0 {
                out.push(RowSelector::select(take));
            }
            if take < s.row_count {
                out.push(RowSelector::skip(s.row_count - take));
            }
        }
    }
    RowSelection::from(out)
}

fn selection(total: u64, deleted: &[(u64, u64)], skip: u64) -> Option<RowSelection> {
    if deleted.is_empty() && skip == 0 {
        return None;
    }
    let mut selectors: Vec<RowSelector> = Vec::new();
    let mut push = |skip: bool, rows: u64| {
        if rows == 0 {
            return;
        }
        match selectors.last_mut() {
            Some(last) if last.skip == skip => last.row_count += rows as usize,
            _ => selectors.push(if skip {
                RowSelector::skip(rows as usize)
            } else {
                RowSelector::select(rows as usize)
            }),
        }
    };
    let mut at = 0u64;
    let mut to_skip = skip;
    for &(start, end) in deleted {
        let (start, end) = (start.min(total), end.min(total));
        if start > at {
            let live = start - at;
            let skipped = live.min(to_skip);
            to_skip -= skipped;
            push(true, skipped);
            push(false, live - skipped);
        }
        push(true, end.saturating_sub(start.max(at)));
        at = at.max(end);
    }
    if total > at {
        let live = total - at;
        let skipped = live.min(to_skip);
        push(true, skipped);
        push(false, live - skipped);
    }
    Some(RowSelection::from(selectors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_row_group_comes_in_requests_of_about_eight_mib_every_range_whole() {
        use object_store::memory::InMemory;
        use object_store::PutPayload;
        let bytes: Vec<u8> = (0..20_000_000u32).map(|i| (i % 251) as u8).collect();
        let store = Arc::new(InMemory::new());
        let path = Path::from("f.parquet");
        store
            .put(&path, PutPayload::from(bytes.clone()))
            .await
            .expect("put");
        // Column chunks of 3 MB side by side, one 1 KB apart, asked out of order.
        let mb = 1_000_000u64;
        let mut ranges: Vec<Range<u64>> = (0..6).map(|i| i * 3 * mb..(i + 1) * 3 * mb).collect();
        ranges.push(18 * mb + 1000..19 * mb);
        ranges.swap(0, 4);
        let ahead = ReadAhead::new(64 << 20);
        let got = fetch_coalesced(store, path, ranges.clone(), ahead.clone(), None)
            .await
            .expect("fetched");
        for (range, data) in ranges.iter().zip(&got) {
            let want = &bytes[range.start as usize..range.end as usize];
            assert!(data[..] == *want, "bytes {range:?}");
        }
        assert_eq!(ahead.used(), 19 * mb - 1000, "held until dropped");
        drop(got);
        assert_eq!(ahead.used(), 0);
    }

    #[tokio::test]
    async fn a_window_takes_the_pages_at_its_neighbours_ends_from_memory() {
        use object_store::memory::InMemory;
        use object_store::PutPayload;
        let store = Arc::new(InMemory::new());
        let path = Path::from("w.parquet");
        let put = |byte: u8| {
            let (store, path) = (store.clone(), path.clone());
            async move {
                let payload = PutPayload::from(vec![byte; 100]);
                store.put(&path, payload).await.expect("put");
            }
        };
        put(1).await;
        let stamp = crate::split::FileStamp {
            e_tag: Some("window-test".into()),
            ..Default::default()
        };
        let file = FooterKey::new("mem://w.parquet".into(), 100, &stamp);
        let ahead = ReadAhead::new(1 << 20);
        // One window's pages of a column: 10..40 in three pages.
        let first = vec![10..20, 20..30, 30..40];
        let got = fetch_coalesced(
            store.clone(),
            path.clone(),
            first,
            ahead.clone(),
            file.clone(),
        )
        .await
        .expect("fetched");
        assert!(got
            .iter()
            .all(|b| b.len() == 10 && b.iter().all(|&x| x == 1)));
        // The object now holds other bytes: what comes from memory still
        // holds the first ones, what is fetched the new ones.
        put(2).await;
        let next = vec![30..40, 20..30, 10..20];
        let got = fetch_coalesced(store, path, next, ahead, file)
            .await
            .expect("fetched");
        let firsts: Vec<u8> = got.iter().map(|b| b[0]).collect();
        assert_eq!(firsts, vec![1, 2, 1], "the run's ends kept, its middle not");
    }

    fn rows(selection: RowSelection, total: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut at = 0;
        for s in selection.iter() {
            if !s.skip {
                out.extend(at..at + s.row_count);
            }
            at += s.row_count;
        }
        assert_eq!(at, total, "the selection covers every row");
        out
    }

    #[test]
    fn deleted_rows_are_never_selected_and_skip_counts_live_rows() {
        let deleted = [(0, 2), (5, 6), (9, 10)];
        assert_eq!(
            rows(selection(10, &deleted, 0).unwrap(), 10),
            vec![2, 3, 4, 6, 7, 8]
        );
        assert_eq!(rows(selection(10, &deleted, 4).unwrap(), 10), vec![7, 8]);
        assert_eq!(
            rows(selection(10, &deleted, 6).unwrap(), 10),
            Vec::<usize>::new()
        );
        assert_eq!(
            rows(selection(10, &[], 3).unwrap(), 10),
            (3..10).collect::<Vec<_>>()
        );
        assert!(selection(10, &[], 0).is_none());
    }

    #[test]
    fn a_window_selects_its_live_rows_and_nothing_after() {
        let deleted = [(0, 2), (5, 6), (9, 10)];
        let window = limited(selection(10, &deleted, 1), 10, 3);
        assert_eq!(rows(window, 10), vec![3, 4, 6]);
        assert_eq!(rows(limited(None, 10, 4), 10), vec![0, 1, 2, 3]);
        assert_eq!(rows(limited(None, 10, 20), 10), (0..10).collect::<Vec<_>>());
    }
}
