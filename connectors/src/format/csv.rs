//! CSV as Spark writes it: quotes `"`, escapes `\`, a header line only when
//! the files have one (told, or found out from the data as DuckDB's sniffer
//! does), inferred types, byte-range splits of uncompressed files.

mod columns;
mod types;

use std::io::{BufRead, Cursor};
use std::sync::Arc;

use arrow::csv::reader::Format as CsvFormat;
use arrow::csv::ReaderBuilder;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use self::columns::Columns;
use self::types::Numbers;
pub(crate) use self::types::{compatible as widen_types, widen_across_files};
use super::text_io::{self, decode_blocking, from_io, open_head};
use super::{FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest};
use crate::error::{Error, Result};
use crate::split::{Split, SplitRange};
use crate::store::Location;

/// The quote Spark's CSV writer and reader use.
const QUOTE: u8 = b'"';
/// The escape Spark's CSV writer puts before a quote inside a quoted value.
const ESCAPE: u8 = b'\\';

/// How a dataset's CSV files were taken to start: with a header line or not,
/// and who said so; `ls` shows it (`csv_header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CsvHeader {
    /// Found out from the data: the first line is a header (its values are
    /// not of the types the other lines hold).
    Detected,
    /// No header: the first line is data (Spark's reader default, taken
    /// also when the data cannot tell); columns are `_c0`, `_c1`, ...
    None,
    /// Given by `--csv-header` or `--csv-no-header`.
    Given,
}

impl CsvHeader {
    /// The name `ls` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            CsvHeader::Detected => "detected",
            CsvHeader::None => "none",
            CsvHeader::Given => "given",
        }
    }
}

/// What a CSV file's own first lines say of its first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderEvidence {
    /// A value of the first line is text where the other lines hold
    /// numbers, booleans, dates or timestamps.
    Header,
    /// The other lines type some column, and the first line fits every type.
    Data,
    /// Nothing to tell by: every column text, or no other line.
    Undecided,
}

/// A CSV file's head read both ways, for the dataset to decide once for all
/// of its files whether they start with a header line.
#[derive(Debug, Clone)]
pub struct CsvHead {
    pub(crate) evidence: HeaderEvidence,
    /// Names from the first line, types from the others.
    pub(crate) with_header: SchemaRef,
    /// Names `_c0`, `_c1`, ..., types from every line.
    pub(crate) without_header: SchemaRef,
}

/// The CSV dialect of Spark's writer, with `delimiter`.
fn dialect(delimiter: u8) -> CsvFormat {
    CsvFormat::default()
        .with_delimiter(delimiter)
        .with_quote(QUOTE)
        .with_escape(ESCAPE)
}

/// Spark's name of the `index`th column of a file without a header.
fn spark_column_name(index: usize) -> String {
    format!("_c{index}")
}

/// The most bytes of a file's head read to infer its schema, however long
/// its records are.
const HEAD_LIMIT: usize = 16 * 1024 * 1024;

/// Where a reader of CSV bytes stands: in a quoted value or not, and what
/// the byte before was.
#[derive(Default)]
struct Quoting {
    quoted: bool,
    /// After an escape inside quotes: the next byte is literal.
    escaped: bool,
    /// After a quote inside quotes: a second one is a literal quote,
    /// anything else ends the quoted value.
    quote_seen: bool,
    /// Nothing of the current field read yet: only there does a quote open
    /// a quoted value (`5" screen` is text).
    mid_field: bool,
}

impl Quoting {
    fn step(&mut self, byte: u8, delimiter: u8) {
        if self.quoted {
            if self.escaped {
                self.escaped = false;
                return;
            }
            if !self.quote_seen {
                match byte {
                    ESCAPE => self.escaped = true,
                    QUOTE => self.quote_seen = true,
                    _ => {}
                }
                return;
            }
            self.quote_seen = false;
            if byte == QUOTE {
                return;
            }
            self.quoted = false;
        }
        if byte == delimiter || byte == b'\n' {
            self.mid_field = false;
        } else if byte == QUOTE && !self.mid_field {
            self.quoted = true;
            self.mid_field = true;
        } else {
            self.mid_field = true;
        }
    }

    /// Whether the bytes so far end a record (no quoted value open).
    fn between_records(&self) -> bool {
        !self.quoted || self.quote_seen
    }
}

/// Reads up to `records` whole records of a file's head (a quoted value may
/// hold line breaks), at most [`HEAD_LIMIT`] bytes; returns them and where
/// the first record ends.
fn read_records(
    input: &mut impl BufRead,
    records: usize,
    delimiter: u8,
) -> std::io::Result<(Vec<u8>, usize)> {
    let mut head = Vec::new();
    let mut first_end = None;
    let mut count = 0;
    let mut quoting = Quoting::default();
    while count < records && head.len() < HEAD_LIMIT {
        let start = head.len();
        if input.read_until(b'\n', &mut head)? == 0 {
            break;
        }
        for &byte in &head[start..] {
            quoting.step(byte, delimiter);
        }
        if quoting.between_records() {
            count += 1;
            first_end.get_or_insert(head.len());
        }
    }
    let first_end = first_end.unwrap_or(head.len());
    Ok((head, first_end))
}

/// Weighs the first line's value types against the types of the other lines.
fn evidence(first: &Schema, others: &Schema, other_lines: usize) -> HeaderEvidence {
    if other_lines == 0 {
        return HeaderEvidence::Undecided;
    }
    let mut typed = false;
    for (column, value) in others.fields().iter().zip(first.fields()) {
        let column = column.data_type();
        if matches!(column, DataType::Utf8 | DataType::Null) {
            continue;
        }
        typed = true;
        if *value.data_type() == DataType::Utf8 {
            return HeaderEvidence::Header;
        }
    }
    if typed {
        HeaderEvidence::Data
    } else {
        HeaderEvidence::Undecided
    }
}

/// Infers the schema of a file's head with or without a header line.
fn infer(head: &[u8], delimiter: u8, header: bool, display: &str) -> Result<(Schema, usize)> {
    let (schema, records) = dialect(delimiter)
        .with_header(header)
        .infer_schema(Cursor::new(head), None)
        .map_err(|e| Error::corrupt(display, "csv", e))?;
    let schema = as_spark_infers(schema, head, delimiter, header);
    if header {
        return Ok((schema, records));
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| f.as_ref().clone().with_name(spark_column_name(i)))
        .collect();
    Ok((Schema::new(fields), records))
}

/// The inferred types brought to Spark's `inferSchema`: numbers as Spark
/// types them ([`types::Numbers`]: `int`, `bigint`, `decimal(p,0)` or
/// `double`, `NaN`, `Inf` and `Infinity` doubles), every timestamp an
/// instant in microseconds (however many digits of a second the head
/// showed).
fn as_spark_infers(schema: Schema, head: &[u8], delimiter: u8, header: bool) -> Schema {
    let candidates: Vec<usize> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| types::may_be_numbers(f.data_type()))
        .map(|(i, _)| i)
        .collect();
    let numbers = numbers_of(head, delimiter, header, &candidates);
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let found = candidates.iter().position(|&c| c == i).map(|k| numbers[k]);
            let spark = types::spark_type(f.data_type(), found);
            f.as_ref().clone().with_data_type(spark)
        })
        .collect();
    Schema::new(fields)
}

/// What the values of each of `columns` in the records of the head say of
/// it as Spark numbers.
fn numbers_of(head: &[u8], delimiter: u8, header: bool, columns: &[usize]) -> Vec<Numbers> {
    let mut numbers = vec![Numbers::default(); columns.len()];
    if columns.is_empty() {
        return numbers;
    }
    let mut reader = ::csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .quote(QUOTE)
        .escape(Some(ESCAPE))
        .has_headers(header)
        .flexible(true)
        .from_reader(head);
    for record in reader.records() {
        let Ok(record) = record else { break };
        for (k, &i) in columns.iter().enumerate() {
            if let Some(value) = record.get(i) {
                numbers[k] = numbers[k].with(value);
            }
        }
    }
    numbers
}

/// Reads the head of a CSV file: its schema with the header choice given,
/// or, to be decided, both schemas and what its first line looks like.
fn read_head(
    mut input: impl BufRead,
    opts: &FormatOptions,
    display: &str,
) -> Result<(SchemaRef, Option<CsvHead>)> {
    let (head, first_end) = read_records(
        &mut input,
        opts.infer_records.saturating_add(1),
        opts.csv_delimiter,
    )
    .map_err(|e| from_io(display, "csv", e))?;
    let delimiter = opts.csv_delimiter;
    if let Some(header) = opts.csv_header {
        let (schema, _) = infer(&head, delimiter, header, display)?;
        return Ok((Arc::new(schema), None));
    }
    let (with_header, other_lines) = infer(&head, delimiter, true, display)?;
    let (without_header, _) = infer(&head, delimiter, false, display)?;
    let (first, _) = infer(&head[..first_end], delimiter, false, display)?;
    let without_header = Arc::new(without_header);
    let csv = CsvHead {
        evidence: evidence(&first, &with_header, other_lines),
        with_header: Arc::new(with_header),
        without_header: without_header.clone(),
    };
    Ok((without_header, Some(csv)))
}

/// Decides for a dataset's CSV files whether they start with a header line,
/// from what each file's head says (`heads`, by file name): a header when
/// one file shows it and none shows otherwise, no header when none shows
/// one. Files that show both ways are an error naming one of each.
pub(crate) fn decide_header<'a>(
    heads: impl IntoIterator<Item = (&'a str, &'a CsvHead)>,
) -> Result<bool> {
    let mut header: Option<&str> = None;
    let mut data: Option<&str> = None;
    for (path, head) in heads {
        match head.evidence {
            HeaderEvidence::Header => header = header.or(Some(path)),
            HeaderEvidence::Data => data = data.or(Some(path)),
            HeaderEvidence::Undecided => {}
        }
        if let (Some(with), Some(without)) = (header, data) {
            return Err(Error::Format {
                path: with.to_string(),
                reason: format!(
                    "its first line is a header (text over columns of numbers, booleans or \
                     dates), but the first line of {without} is data: pass --csv-header or \
                     --csv-no-header"
                ),
            });
        }
    }
    Ok(header.is_some())
}

/// Reads the header line of a file (for splits that start past it).
fn header_names(loc: &Location, path: &Path, delimiter: u8) -> std::io::Result<Vec<String>> {
    let mut head = open_head(loc, path);
    let (line, _) = read_records(&mut head, 1, delimiter)?;
    let (schema, _) = dialect(delimiter)
        .with_header(true)
        .infer_schema(Cursor::new(line), Some(0))
        .map_err(std::io::Error::other)?;
    Ok(schema.fields().iter().map(|f| f.name().clone()).collect())
}

/// CSV: a schema inferred from the first records, files cut at byte ranges.
pub(super) struct Csv;

#[async_trait]
impl FileFormat for Csv {
    /// Infers the schema from the first records of the file; when whether
    /// it has a header is still to decide, also what its first line shows.
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        opts: &FormatOptions,
    ) -> Result<FileInfo> {
        let opts = opts.clone();
        let (schema, head) = text_io::read_head(loc, file, "csv", move |input, display| {
            read_head(input, &opts, display)
        })
        .await?;
        let mut info = FileInfo::schema_only(schema);
        info.csv_head = head;
        Ok(info)
    }

    /// Streams the rows of a split.
    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let opts = request.options.clone();
        // Planned datasets always say; Spark's reader default otherwise.
        let has_header = opts.csv_header.unwrap_or(false);
        let target = request.data_schema.clone();
        let zone = request.timezone;
        let display = loc.display(&split.object_path());
        let path = split.object_path();
        let starts_at_zero = !matches!(split.range, SplitRange::Bytes { start, .. } if start > 0);
        let loc2 = loc.clone();
        decode_blocking(loc, split, "csv", move |input, emit| {
            let names: Vec<String> = if has_header {
                header_names(&loc2, &path, opts.csv_delimiter)
                    .map_err(|e| from_io(&display, "csv", e))?
            } else {
                target.fields().iter().map(|f| f.name().clone()).collect()
            };
            let columns = Columns::new(&names, &target, zone, opts.infer_records);
            let reader = ReaderBuilder::new(columns.read.clone())
                .with_format(dialect(opts.csv_delimiter))
                .with_header(has_header && starts_at_zero)
                .with_batch_size(opts.batch_size)
                .build(input)
                .map_err(|e| Error::corrupt(&display, "csv", e))?;
            for batch in reader {
                let item = batch
                    .map_err(|e| columns.explain(&e))
                    .and_then(|b| columns.finish(b))
                    .map_err(|reason| Error::corrupt(&display, "csv", reason));
                let failed = item.is_err();
                if !emit(item) || failed {
                    break;
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests;
