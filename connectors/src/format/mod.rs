//! File formats: detection from names, per-file inspection (schema, rows,
//! split units) and reading a split into Arrow record batches.

mod avro;
mod csv;
mod json;
mod lru;
mod orc;
mod parquet;
mod parquet_ahead;
mod parquet_edges;
pub(crate) mod parquet_footers;
mod rcfile;
mod sequencefile;
mod sniff;
mod spark_legacy;
mod text;
mod text_io;
mod tfrecord;

use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::split::{Split, SplitRange};
use crate::store::Location;
use crate::types::ColumnMapping;
pub use crate::types::{Format, Unit};
pub(crate) use csv::decide_header;
pub(crate) use csv::widen_across_files as widen_csv_types;
pub use csv::{CsvHead, CsvHeader};
pub(crate) use tfrecord::widen_across_files as widen_tfrecord_features;

/// How text formats are parsed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FormatOptions {
    /// CSV files start with a header line (`Some(true)`), or do not
    /// (`Some(false)`); `None` until decided from the data when a dataset
    /// is opened (see [`CsvHeader`]). A planned dataset's options always say.
    #[serde(default)]
    pub csv_header: Option<bool>,
    /// CSV field delimiter.
    pub csv_delimiter: u8,
    /// Split text lines at the first tab into `key` and `value` (MapReduce `TextOutputFormat`).
    pub text_key_value: bool,
    /// Rows per decoded batch.
    pub batch_size: usize,
    /// Most bytes per decoded batch, if bounded (`--batch-bytes`): Parquet
    /// cuts by its row groups' uncompressed bytes per row, SequenceFiles by
    /// their records' bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_bytes: Option<u64>,
    /// Records read per file to infer a CSV/JSON schema.
    pub infer_records: usize,
    /// Text lines are rows of delimited fields with these columns (a Hive
    /// text table's row format), not one `value` column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delimited: Option<DelimitedText>,
    /// RCFile fields are LazyBinary encoded (Hive's `LazyBinaryColumnarSerDe`,
    /// what Spark SQL's `STORED AS RCFILE` writes), typed by `delimited`'s
    /// columns; otherwise they are text (`ColumnarSerDe`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub binary_columnar: bool,
}

/// The row format of a Hive text table (`LazySimpleSerDe`, `ROW FORMAT
/// DELIMITED`, or `OpenCSVSerde` with its quotes): each line a row, its fields split at one byte, fields past
/// the columns ignored and missing ones null, the null text (`\N`) null, and
/// each field parsed as its column's type (a field that does not parse is
/// null, as Hive reads it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DelimitedText {
    /// The field delimiter (`field.delim`; Hive's default `\x01`).
    pub delimiter: u8,
    /// The escape byte (`escape.delim`), when the table has one: it makes the
    /// byte after it literal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escape: Option<u8>,
    /// The quote byte (OpenCSVSerde's `quoteChar`), when fields may be
    /// quoted: a delimiter inside quotes is part of the field, and a doubled
    /// quote inside quotes a quote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quote: Option<u8>,
    /// The text that stands for null (`serialization.null.format`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null: Option<String>,
    /// The columns, in the order of the fields of a line.
    pub columns: Vec<arrow::datatypes::Field>,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            csv_header: None,
            csv_delimiter: b',',
            text_key_value: false,
            batch_size: 8192,
            batch_bytes: None,
            infer_records: 1000,
            delimited: None,
            binary_columnar: false,
        }
    }
}

/// A file to inspect or read.
#[derive(Debug, Clone)]
pub struct FileRef {
    /// Its path in the store.
    pub path: Path,
    /// Its size in bytes.
    pub size: u64,
}

/// What inspecting a file tells.
#[derive(Debug, Clone)]
pub struct FileInfo {
    /// The file's own Arrow schema.
    pub schema: SchemaRef,
    /// Rows, when the footer or metadata says.
    pub rows: Option<u64>,
    /// Row groups or stripes; empty for formats read whole or by byte range.
    pub units: Vec<Unit>,
    /// A CSV file's head read with and without a header line, while the
    /// dataset is still to decide which (`csv_header` not given).
    pub csv_head: Option<CsvHead>,
    /// A Parquet file's footer, kept from inspection until a row filter has
    /// decided on its row groups' statistics (then dropped), and whether
    /// its dates need Spark's legacy calendar (statistics then unused).
    pub(crate) parquet_meta: Option<(
        std::sync::Arc<::parquet::file::metadata::ParquetMetaData>,
        bool,
    )>,
    /// What `ls` says of the file besides its format: a SequenceFile's
    /// classes and compression, say.
    pub detail: Option<String>,
}

impl FileInfo {
    /// What a format without a footer tells before reading: the schema only.
    pub(crate) fn schema_only(schema: SchemaRef) -> FileInfo {
        FileInfo {
            schema,
            rows: None,
            units: Vec::new(),
            csv_head: None,
            parquet_meta: None,
            detail: None,
        }
    }

    /// The same, with what `ls` says of the file.
    pub(crate) fn with_detail(self, detail: String) -> FileInfo {
        FileInfo {
            detail: Some(detail),
            ..self
        }
    }
}

/// What one file format does: inspect a file (its schema, rows and split
/// units) and decode a split of it into record batches. Each of the six
/// formats implements it; [`inspect`] and [`read_raw`] drive them, so that
/// what is common (unreadable splits, skipping rows) is done once.
#[async_trait]
pub(crate) trait FileFormat: Send + Sync {
    /// Reads a file's schema, row count and split units (footers only
    /// where the format has them).
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        opts: &FormatOptions,
    ) -> Result<FileInfo>;

    /// Decodes a split into batches of the file's own columns, from its
    /// first row.
    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>>;

    /// Decodes a split starting `skip` rows into it. The rows are decoded
    /// and dropped unless the format can pass them over unread (Parquet
    /// selects rows).
    fn decode_from(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
        skip: u64,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        skip_rows(self.decode(loc, split, request), skip)
    }
}

/// The implementation of a format.
fn driver(format: Format) -> &'static dyn FileFormat {
    match format {
        Format::Parquet => &parquet::Parquet,
        Format::Orc => &orc::Orc,
        Format::Avro => &avro::Avro,
        Format::Csv => &csv::Csv,
        Format::Json => &json::Json,
        Format::Text => &text::Text,
        Format::Sequencefile => &sequencefile::SequenceFile,
        Format::Rcfile => &rcfile::RcFile,
        Format::Tfrecord => &tfrecord::TfRecord,
    }
}

/// Whether a column that new files of `format` type as `found` is read as
/// `planned`, the type a job planned it as: the same type, or for CSV
/// (typed from each file's head) a type that Spark's inference widens to
/// `planned` (an `int` column as a `bigint`, an integer as a `double`).
pub fn reads_as(format: Option<Format>, found: &DataType, planned: &DataType) -> bool {
    found == planned
        || (format == Some(Format::Csv) && csv::widen_types(planned, found) == *planned)
}

/// Bytes read from a file's start to decide its format by content.
const SNIFF_BYTES: u64 = 4096;

/// The format a file holds by its first bytes (a SequenceFile, RCFile,
/// TFRecord records, Parquet, ORC or Avro by their magic), text when they
/// name none; for files whose names say nothing.
pub(crate) async fn format_by_content(
    loc: &Location,
    meta: &object_store::ObjectMeta,
) -> Result<Format> {
    if meta.size == 0 {
        return Ok(Format::Text);
    }
    let display = loc.display(&meta.location);
    let end = meta.size.min(SNIFF_BYTES);
    let head = object_store::ObjectStoreExt::get_range(&*loc.store, &meta.location, 0..end)
        .await
        .map_err(|e| Error::from_store(&display, e))?;
    Ok(sniff::format_of(&head).unwrap_or(Format::Text))
}

/// Reads a file's schema, row count and split units (footers only where the format has them).
pub async fn inspect(
    loc: &Location,
    file: &FileRef,
    format: Format,
    opts: &FormatOptions,
) -> Result<FileInfo> {
    driver(format).inspect(loc, file, opts).await
}

/// What a reader needs besides the split: the target schema of the data
/// columns (merged across files) and which of them to produce.
#[derive(Debug, Clone)]
pub struct ReadRequest {
    /// Merged schema of the data columns (no partition columns).
    pub data_schema: SchemaRef,
    /// Names of the data columns to read, in output order.
    pub columns: Vec<String>,
    /// Parsing options.
    pub options: FormatOptions,
    /// How file columns map to data columns (tables with renamed columns).
    pub file_columns: ColumnMapping,
    /// The budget of bytes read ahead (Parquet row groups are fetched within it).
    pub read_ahead: crate::read_ahead::ReadAhead,
    /// Decode string and binary columns as views where the format can
    /// (Parquet); the conforming step wraps the others.
    pub string_view: bool,
    /// A row filter whose statistics a format may skip row groups and pages
    /// on (Parquet); the rows it keeps are decided after decoding.
    pub(crate) filter: Option<std::sync::Arc<crate::row_filter::Pred>>,
    /// The session time zone (`--timezone`): CSV timestamps without an
    /// offset are wall-clock times in it, as Spark's
    /// `spark.sql.session.timeZone` reads them.
    pub timezone: crate::row_filter::SessionTz,
    /// Rows to decode after those skipped, where fewer than the rest of the
    /// split are wanted (a window of a split): a format may leave the rest
    /// unfetched (Parquet, with the offset index, fetches only their pages).
    pub(crate) limit: Option<u64>,
}

/// Decodes one split into batches of the file's own columns, starting `skip`
/// rows into the split. Batches are not yet conformed to the target schema.
pub fn read_raw(
    loc: &Location,
    split: &Split,
    request: &ReadRequest,
    skip: u64,
) -> BoxStream<'static, Result<RecordBatch>> {
    if let SplitRange::Unreadable { reason } = &split.range {
        let err = Error::corrupt(
            loc.display(&split.object_path()),
            split.format.as_str(),
            reason,
        );
        return futures::stream::once(async move { Err(err) }).boxed();
    }
    driver(split.format).decode_from(&loc.pinned(split), split, request, skip)
}

/// Drops the first `skip` rows of a stream of batches.
pub(crate) fn skip_rows(
    stream: BoxStream<'static, Result<RecordBatch>>,
    skip: u64,
) -> BoxStream<'static, Result<RecordBatch>> {
    if skip == 0 {
        return stream;
    }
    let mut left = skip;
    stream
        .filter_map(move |item| {
            let out = match item {
                Ok(batch) if left > 0 => {
                    let n = batch.num_rows() as u64;
                    if n <= left {
                        left -= n;
                        None
                    } else {
                        let start = left as usize;
                        left = 0;
                        Some(Ok(batch.slice(start, batch.num_rows() - start)))
                    }
                }
                other => Some(other),
            };
            futures::future::ready(out)
        })
        .boxed()
}

/// Gives each column of `infos` the type `merge` brings its files' types
/// to, in every file, each field rebuilt by `retype`; a column `merge`
/// finds no common type for (`None`, once for any two files) keeps each
/// file's own, for the schema merge to judge.
pub(crate) fn widen_columns(
    infos: &mut [FileInfo],
    merge: impl Fn(&DataType, &DataType) -> Option<DataType>,
    retype: impl Fn(&arrow::datatypes::Field, &DataType) -> arrow::datatypes::Field,
) {
    let mut wide: std::collections::HashMap<String, Option<DataType>> =
        std::collections::HashMap::new();
    for info in infos.iter() {
        for field in info.schema.fields() {
            wide.entry(field.name().clone())
                .and_modify(|t| *t = t.as_ref().and_then(|t| merge(t, field.data_type())))
                .or_insert_with(|| Some(field.data_type().clone()));
        }
    }
    for info in infos.iter_mut() {
        let fields: Vec<arrow::datatypes::Field> = info
            .schema
            .fields()
            .iter()
            .map(|f| match wide.get(f.name()) {
                Some(Some(t)) => retype(f, t),
                _ => f.as_ref().clone(),
            })
            .collect();
        info.schema = std::sync::Arc::new(arrow::datatypes::Schema::new(fields));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_from_names() {
        assert_eq!(
            Format::from_name("part-00000-x-c000.snappy.parquet"),
            Some(Format::Parquet)
        );
        assert_eq!(Format::from_name("part-00000-x.csv.gz"), Some(Format::Csv));
        assert_eq!(Format::from_name("part-00000.json"), Some(Format::Json));
        assert_eq!(
            Format::from_name("part-00000-x.zlib.orc"),
            Some(Format::Orc)
        );
        assert_eq!(Format::from_name("part-00000.gz"), None);
        assert_eq!(Format::from_name("part-r-00000"), None);
        assert_eq!("CSV".parse::<Format>().ok(), Some(Format::Csv));
        assert!("xls".parse::<Format>().is_err());
    }

    #[test]
    fn new_csv_files_read_as_the_wider_types_of_a_job() {
        let csv = Some(Format::Csv);
        assert!(reads_as(csv, &DataType::Int32, &DataType::Int64));
        assert!(reads_as(csv, &DataType::Int64, &DataType::Float64));
        assert!(reads_as(
            csv,
            &DataType::Int32,
            &DataType::Decimal128(23, 0)
        ));
        assert!(reads_as(csv, &DataType::Float64, &DataType::Utf8));
        assert!(!reads_as(csv, &DataType::Int64, &DataType::Int32));
        assert!(!reads_as(csv, &DataType::Utf8, &DataType::Int64));
        assert!(!reads_as(
            Some(Format::Parquet),
            &DataType::Int32,
            &DataType::Int64
        ));
    }
}
