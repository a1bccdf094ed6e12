//! Plain text lines: one `value` column, or MapReduce `key<TAB>value`.

use std::io::BufRead;
use std::sync::Arc;

use arrow::array::{ArrayRef, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use futures::stream::BoxStream;

use super::text_io::{decode_blocking, from_io};
use super::{FileInfo, FormatOptions, ReadRequest};
use crate::error::{Error, Result};
use crate::split::Split;
use crate::store::Location;

/// The fixed schema of text files.
pub(super) fn schema(opts: &FormatOptions) -> SchemaRef {
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

/// Text files have a fixed schema and no metadata.
pub(super) fn inspect(opts: &FormatOptions) -> FileInfo {
    FileInfo {
        schema: schema(opts),
        rows: None,
        units: Vec::new(),
    }
}

/// Streams the lines of a split.
pub(super) fn read(
    loc: &Location,
    split: &Split,
    request: &ReadRequest,
    skip: u64,
) -> BoxStream<'static, Result<RecordBatch>> {
    let opts = request.options.clone();
    let display = loc.display(&split.object_path());
    let stream = decode_blocking(loc, split, "text", move |mut input, emit| {
        let schema = schema(&opts);
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
    });
    super::skip_rows(stream, skip)
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
