//! Hadoop SequenceFiles (`saveAsSequenceFile`, MapReduce's
//! `SequenceFileOutputFormat`, Hive's `STORED AS SEQUENCEFILE`): keys and
//! values as columns `key` and `value` typed by their Writable classes
//! ([`writable`]), uncompressed, record- or block-compressed with any of
//! Hadoop's codecs, files cut at sync markers as Hadoop cuts them
//! ([`records`]). A Hive table's rows are its values parsed as delimited
//! text. Pickled (`saveAsPickleFile`) and Java-serialized
//! (`saveAsObjectFile`) objects are refused.

mod header;
mod records;
mod wire;
mod writable;

use std::io::{BufRead, BufReader};
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::stream::BoxStream;

use self::header::{Header, HeaderError};
use self::records::{seek_sync, RecordError, Records};
use self::writable::{Column, Writable};
use super::text::DelimitedBatcher;
use super::text_io::{fetch, from_io, stream_blocking};
use super::{FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest};
use crate::error::{Error, Result};
use crate::split::{Split, SplitRange};
use crate::store::Location;

const FORMAT: &str = "sequencefile";

/// The SequenceFile format.
pub(super) struct SequenceFile;

#[async_trait]
impl FileFormat for SequenceFile {
    /// The header's classes give the schema; a file of pickled or
    /// Java-serialized objects is refused naming its writer.
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        opts: &FormatOptions,
    ) -> Result<FileInfo> {
        let loc = loc.clone();
        let path = file.path.clone();
        let display = loc.display(&path);
        let opts = opts.clone();
        let shown = display.clone();
        tokio::task::spawn_blocking(move || {
            let mut input = BufReader::new(fetch(&loc, &path, 0));
            let header = read_header(&mut input, &shown)?;
            refuse_objects(input, &header, &shown)?;
            let info = FileInfo::schema_only(schema(&header, &opts));
            Ok(info.with_detail(describe(&header)))
        })
        .await
        .map_err(|e| Error::corrupt(&display, FORMAT, e))?
    }

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

/// What `ls` says of a file: its classes and compression.
pub(crate) fn describe(header: &Header) -> String {
    format!(
        "key {}, value {}, {}",
        Writable::short_name(&header.key_class),
        Writable::short_name(&header.value_class),
        header.compression
    )
}

fn read_header(input: &mut dyn BufRead, display: &str) -> Result<Header> {
    Header::read(input).map_err(|e| match e {
        HeaderError::NotSequenceFile => Error::Format {
            path: display.to_string(),
            reason: match super::sniff::binary_format(input.fill_buf().unwrap_or_default()) {
                Some(found) => format!("it holds {found}, not a SequenceFile"),
                None => "it is not a SequenceFile (no `SEQ` header); pass --format".to_string(),
            },
        },
        other => Error::corrupt(display, FORMAT, other),
    })
}

/// The columns of a file: `key` and `value` by their classes (none for
/// `NullWritable`), or a Hive table's columns parsed from each value.
fn schema(header: &Header, opts: &FormatOptions) -> SchemaRef {
    if let Some(delimited) = &opts.delimited {
        return Arc::new(Schema::new(delimited.columns.clone()));
    }
    let fields: Vec<_> = [("key", &header.key_class), ("value", &header.value_class)]
        .into_iter()
        .filter_map(|(name, class)| Writable::field(class, name))
        .collect();
    Arc::new(Schema::new(fields))
}

/// Refuses what PySpark's `saveAsPickleFile` and Spark's `saveAsObjectFile`
/// write (null keys, values of pickled or Java-serialized objects), judged
/// by the first value.
fn refuse_objects(input: impl BufRead, header: &Header, display: &str) -> Result<()> {
    if Writable::of(&header.key_class) != Writable::Null
        || Writable::of(&header.value_class) != Writable::Bytes
    {
        return Ok(());
    }
    let mut records = Records::new(input, header.len, u64::MAX, header);
    let (mut key, mut value) = (Vec::new(), Vec::new());
    if !records
        .next_into(&mut key, &mut value)
        .map_err(|e| record_error(display, e))?
    {
        return Ok(());
    }
    let bytes = writable::length_prefixed(&value).unwrap_or_default();
    let pickled = |b: &[u8]| {
        b.windows(2)
            .any(|w| w[0] == 0x80 && (2..=5).contains(&w[1]))
    };
    let writer = match bytes {
        [0x80, 2..=5, ..] => "pickled Python objects",
        // PySpark hands its pickled batches to saveAsObjectFile as byte arrays.
        [0xac, 0xed, ..] if pickled(&bytes[..bytes.len().min(256)]) => {
            "pickled Python objects in Java-serialized byte arrays, as PySpark's saveAsPickleFile writes them"
        }
        [0xac, 0xed, ..] => "Java-serialized objects, as Spark's saveAsObjectFile writes them",
        _ => return Ok(()),
    };
    Err(Error::NotRows {
        path: display.to_string(),
        reason: format!(
            "its values are {writer}; sluice reads rows: write the data with a DataFrame writer (df.write.parquet)"
        ),
    })
}

fn record_error(display: &str, e: RecordError) -> Error {
    match e {
        // The file and the store's failure within, as every format tells them.
        RecordError::Io { cause, .. } => from_io(display, FORMAT, cause),
        corrupt => Error::corrupt(display, FORMAT, corrupt),
    }
}

/// Reads a split's records into batches handed to `emit`.
fn read_split(
    loc: &Location,
    split: &Split,
    opts: &FormatOptions,
    emit: &mut dyn FnMut(Result<RecordBatch>) -> bool,
) -> Result<()> {
    let path = split.object_path();
    let display = loc.display(&path);
    let (start, end) = match split.range {
        SplitRange::Bytes { start, end } => (start, end),
        _ => (0, u64::MAX),
    };
    let mut input = BufReader::new(fetch(loc, &path, 0));
    let header = read_header(&mut input, &display)?;
    let schema = schema(&header, opts);
    let mut batcher = Batcher::new(&header, opts, schema);
    if start == 0 {
        let records = Records::new(input, header.len, end, &header);
        return batcher.run(records, opts.batch_size, &display, emit);
    }
    drop(input);
    // A range starting inside the header (a split smaller than it) looks
    // for its first marker past the header, so no record is read twice.
    let start = start.max(header.len);
    let from = BufReader::new(fetch(loc, &path, start));
    match seek_sync(from, start, &header.sync).map_err(|e| from_io(&display, FORMAT, e))? {
        Some((input, at)) => {
            let records = Records::new(input, at, end, &header);
            batcher.run(records, opts.batch_size, &display, emit)
        }
        None => Ok(()),
    }
}

/// Rows being gathered into a batch: key and value columns, or a Hive
/// table's delimited columns.
struct Batcher<'a> {
    schema: SchemaRef,
    key: Option<Column>,
    value: Option<Column>,
    delimited: Option<(DelimitedBatcher<'a>, Writable)>,
    rows: usize,
    /// Bytes of the records gathered, for `--batch-bytes`.
    bytes: u64,
    batch_bytes: u64,
}

impl<'a> Batcher<'a> {
    fn new(header: &Header, opts: &'a FormatOptions, schema: SchemaRef) -> Batcher<'a> {
        let value_kind = Writable::of(&header.value_class);
        let delimited = opts
            .delimited
            .as_ref()
            .map(|d| (DelimitedBatcher::new(d, opts.batch_size), value_kind));
        let plain = delimited.is_none();
        Batcher {
            schema,
            key: Column::new(Writable::of(&header.key_class)).filter(|_| plain),
            value: Column::new(value_kind).filter(|_| plain),
            delimited,
            rows: 0,
            bytes: 0,
            batch_bytes: opts.batch_bytes.unwrap_or(u64::MAX),
        }
    }

    fn run<R: BufRead>(
        &mut self,
        mut records: Records<R>,
        batch_size: usize,
        display: &str,
        emit: &mut dyn FnMut(Result<RecordBatch>) -> bool,
    ) -> Result<()> {
        let (mut key, mut value) = (Vec::new(), Vec::new());
        while records
            .next_into(&mut key, &mut value)
            .map_err(|e| record_error(display, e))?
        {
            self.push(&key, &value)
                .map_err(|what| Error::corrupt(display, FORMAT, what))?;
            let full = self.rows >= batch_size.max(1) || self.bytes >= self.batch_bytes;
            if full && !emit(self.finish(display)) {
                return Ok(());
            }
        }
        if self.rows > 0 {
            emit(self.finish(display));
        }
        Ok(())
    }

    fn push(&mut self, key: &[u8], value: &[u8]) -> std::result::Result<(), String> {
        if let Some((rows, kind)) = &mut self.delimited {
            let line = match kind {
                Writable::Text => writable::text(value)?,
                Writable::Bytes => writable::length_prefixed(value)?,
                _ => value,
            };
            rows.push(line);
        }
        if let Some(column) = &mut self.key {
            column.push(key).map_err(|e| format!("a key: {e}"))?;
        }
        if let Some(column) = &mut self.value {
            column.push(value).map_err(|e| format!("a value: {e}"))?;
        }
        self.rows += 1;
        self.bytes += (key.len() + value.len()) as u64;
        Ok(())
    }

    fn finish(&mut self, display: &str) -> Result<RecordBatch> {
        let rows = std::mem::take(&mut self.rows);
        self.bytes = 0;
        if let Some((rows, _)) = &mut self.delimited {
            return rows.finish(&self.schema, display);
        }
        let columns: Vec<_> = [&mut self.key, &mut self.value]
            .into_iter()
            .flatten()
            .map(Column::finish)
            .collect();
        let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)
            .map_err(|e| Error::corrupt(display, FORMAT, e))
    }
}

#[cfg(test)]
mod tests;
