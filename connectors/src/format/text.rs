//! Plain text lines: one `value` column, or MapReduce `key<TAB>value`, or
//! the delimited rows of a Hive text table ([`DelimitedText`]).

use std::io::BufRead;
use std::sync::Arc;

use arrow::array::{ArrayRef, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::stream::BoxStream;

use super::text_io::{decode_blocking, from_io};
use super::{DelimitedText, FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest};
use crate::error::{Error, Result};
use crate::split::Split;
use crate::store::Location;

/// The fixed schema of text files.
pub(super) fn schema(opts: &FormatOptions) -> SchemaRef {
    if let Some(delimited) = &opts.delimited {
        return Arc::new(Schema::new(delimited.columns.clone()));
    }
    let fields = if opts.text_key_value {
        vec![
            Field::new("key", DataType::Utf8, true),
            Field::new("value", DataType::Utf8, true),
        ]
    } else {
        vec![Field::new("value", DataType::Utf8, true)]
    };
    Arc::new(Schema::new(fields))
}

/// Plain text lines: a fixed schema, files cut at byte ranges.
pub(super) struct Text;

#[async_trait]
impl FileFormat for Text {
    /// Text files have a fixed schema and no metadata.
    /// The schema the options give; the file's head is looked at only to
    /// refuse a binary file taken for text.
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        opts: &FormatOptions,
    ) -> Result<FileInfo> {
        super::text_io::read_head(loc, file, "text", |_, _| Ok(())).await?;
        Ok(FileInfo::schema_only(schema(opts)))
    }

    /// Streams the lines of a split.
    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let opts = request.options.clone();
        let display = loc.display(&split.object_path());
        decode_blocking(loc, split, "text", move |mut input, emit| {
            let schema = schema(&opts);
            if let Some(delimited) = &opts.delimited {
                return read_delimited(input, emit, delimited, &schema, opts.batch_size, &display);
            }
            let mut lines = LineBatcher::new(opts.text_key_value, opts.batch_size);
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = input
                    .read_until(b'\n', &mut line)
                    .map_err(|e| from_io(&display, "text", e))?;
                if n == 0 {
                    break;
                }
                lines.push(&line);
                if lines.len() >= opts.batch_size && !emit(lines.finish(&schema, &display)) {
                    return Ok(());
                }
            }
            if lines.len() > 0 {
                emit(lines.finish(&schema, &display));
            }
            Ok(())
        })
    }
}

/// Reads delimited rows, a batch at a time.
fn read_delimited(
    mut input: impl BufRead,
    emit: &mut dyn FnMut(Result<RecordBatch>) -> bool,
    delimited: &DelimitedText,
    schema: &SchemaRef,
    batch_size: usize,
    display: &str,
) -> Result<()> {
    let mut rows = DelimitedBatcher::new(delimited, batch_size);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| from_io(display, "text", e))?;
        if n == 0 {
            break;
        }
        rows.push(&line);
        if rows.rows >= batch_size && !emit(rows.finish(schema, display)) {
            return Ok(());
        }
    }
    if rows.rows > 0 {
        emit(rows.finish(schema, display));
    }
    Ok(())
}

/// Builds a text table's columns from its lines: strings first, then each
/// parsed as its column's type.
pub(super) struct DelimitedBatcher<'a> {
    format: &'a DelimitedText,
    columns: Vec<StringBuilder>,
    field: Vec<u8>,
    /// Rows pushed since the last batch.
    pub(super) rows: usize,
}

impl<'a> DelimitedBatcher<'a> {
    /// A batcher for rows of `format`.
    pub(super) fn new(format: &'a DelimitedText, capacity: usize) -> Self {
        DelimitedBatcher {
            format,
            columns: format
                .columns
                .iter()
                .map(|_| StringBuilder::with_capacity(capacity, capacity * 8))
                .collect(),
            field: Vec::new(),
            rows: 0,
        }
    }

    /// Splits one line (its newline, if any, dropped) into the columns.
    pub(super) fn push(&mut self, raw: &[u8]) {
        let line = raw.strip_suffix(b"\n").unwrap_or(raw);
        let mut column = 0;
        let mut at = 0;
        while column < self.columns.len() && at <= line.len() {
            self.field.clear();
            let mut quoted = false;
            while at < line.len() && (quoted || line[at] != self.format.delimiter) {
                let byte = line[at];
                if Some(byte) == self.format.escape && at + 1 < line.len() {
                    at += 1;
                } else if Some(byte) == self.format.quote {
                    // A doubled quote inside quotes is a quote.
                    if quoted && line.get(at + 1) == Some(&byte) {
                        at += 1;
                    } else {
                        quoted = !quoted;
                        at += 1;
                        continue;
                    }
                }
                self.field.push(line[at]);
                at += 1;
            }
            let text = String::from_utf8_lossy(&self.field);
            if self.format.null.as_deref() == Some(&*text) {
                self.columns[column].append_null();
            } else {
                self.columns[column].append_value(&text);
            }
            column += 1;
            // Past the delimiter; a line ending here has no further fields.
            at += 1;
        }
        for missing in &mut self.columns[column..] {
            missing.append_null();
        }
        self.rows += 1;
    }

    /// The rows so far as a batch of `schema`, each column parsed as its type.
    pub(super) fn finish(&mut self, schema: &SchemaRef, display: &str) -> Result<RecordBatch> {
        self.rows = 0;
        let options = arrow::compute::CastOptions {
            safe: true,
            ..Default::default()
        };
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.columns.len());
        for (builder, field) in self.columns.iter_mut().zip(schema.fields()) {
            let strings: ArrayRef = Arc::new(builder.finish());
            let array = if field.data_type() == &DataType::Utf8 {
                strings
            } else {
                arrow::compute::cast_with_options(&strings, field.data_type(), &options)
                    .map_err(|e| Error::corrupt(display, "text", e))?
            };
            arrays.push(array);
        }
        RecordBatch::try_new(schema.clone(), arrays).map_err(|e| Error::corrupt(display, "text", e))
    }
}

/// Builds string columns from lines.
struct LineBatcher {
    key_value: bool,
    keys: StringBuilder,
    values: StringBuilder,
    rows: usize,
}

impl LineBatcher {
    fn new(key_value: bool, capacity: usize) -> Self {
        LineBatcher {
            key_value,
            keys: StringBuilder::with_capacity(capacity, capacity * 8),
            values: StringBuilder::with_capacity(capacity, capacity * 32),
            rows: 0,
        }
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn push(&mut self, raw: &[u8]) {
        let mut line = raw.strip_suffix(b"\n").unwrap_or(raw);
        line = line.strip_suffix(b"\r").unwrap_or(line);
        let text = String::from_utf8_lossy(line);
        if self.key_value {
            match text.split_once('\t') {
                Some((k, v)) => {
                    self.keys.append_value(k);
                    self.values.append_value(v);
                }
                None => {
                    self.keys.append_value(&text);
                    self.values.append_null();
                }
            }
        } else {
            self.values.append_value(&text);
        }
        self.rows += 1;
    }

    fn finish(&mut self, schema: &SchemaRef, display: &str) -> Result<RecordBatch> {
        self.rows = 0;
        let mut columns: Vec<ArrayRef> = Vec::new();
        if self.key_value {
            columns.push(Arc::new(self.keys.finish()));
        }
        columns.push(Arc::new(self.values.finish()));
        RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| Error::corrupt(display, "text", e))
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, Int32Array};
    use arrow::datatypes::Int64Type;

    use super::*;

    #[test]
    fn delimited_lines_split_into_typed_columns() {
        let format = DelimitedText {
            delimiter: b',',
            escape: Some(b'\\'),
            quote: None,
            null: Some("\\N".to_string()),
            columns: vec![
                Field::new("id", DataType::Int64, true),
                Field::new("n", DataType::Int32, true),
                Field::new("s", DataType::Utf8, true),
            ],
        };
        let schema = Arc::new(Schema::new(format.columns.clone()));
        let mut rows = DelimitedBatcher::new(&format, 8);
        for line in ["1,2,a\n", "2,\\N,b\\,c,ignored\n", "3,x\n", "4", ""] {
            rows.push(line.as_bytes());
        }
        let batch = rows.finish(&schema, "t").expect("a batch");
        let ids: Vec<Option<i64>> = batch.column(0).as_primitive::<Int64Type>().iter().collect();
        assert_eq!(ids, [Some(1), Some(2), Some(3), Some(4), None]);
        let n = batch
            .column(1)
            .as_any()
            .downcast_ref::<Int32Array>()
            .expect("int32");
        assert_eq!(
            n.iter().collect::<Vec<_>>(),
            [Some(2), None, None, None, None]
        );
        let s: Vec<Option<&str>> = batch.column(2).as_string::<i32>().iter().collect();
        assert_eq!(s, [Some("a"), Some("b,c"), None, None, None]);
    }

    #[test]
    fn quoted_fields_keep_their_delimiters() {
        // OpenCSVSerde: every field quoted, no null text.
        let format = DelimitedText {
            delimiter: b';',
            escape: Some(b'\\'),
            quote: Some(b'"'),
            null: None,
            columns: vec![
                Field::new("id", DataType::Int64, true),
                Field::new("s", DataType::Utf8, true),
            ],
        };
        let schema = Arc::new(Schema::new(format.columns.clone()));
        let mut rows = DelimitedBatcher::new(&format, 8);
        for line in ["\"1\";\"a;b \"\"q\"\"\"\n", "\"2\";\"\\N\"\n", "3;\n"] {
            rows.push(line.as_bytes());
        }
        let batch = rows.finish(&schema, "t").expect("a batch");
        let ids: Vec<Option<i64>> = batch.column(0).as_primitive::<Int64Type>().iter().collect();
        assert_eq!(ids, [Some(1), Some(2), Some(3)]);
        let s: Vec<Option<&str>> = batch.column(1).as_string::<i32>().iter().collect();
        assert_eq!(s, [Some("a;b \"q\""), Some("N"), Some("")]);
    }
}
