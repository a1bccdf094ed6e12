//! CSV: header names, inferred types, byte-range splits of uncompressed files.

use std::io::BufRead;
use std::sync::Arc;

use arrow::csv::reader::Format as CsvFormat;
use arrow::csv::ReaderBuilder;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::path::Path;

use super::text_io::{decode_blocking, emit_all, from_io, inspect_head, open_head};
use super::{FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest};
use crate::error::{Error, Result};
use crate::split::{Split, SplitRange};
use crate::store::Location;

/// Reads the header line of a file (for splits that start past it).
fn header_names(loc: &Location, path: &Path, delimiter: u8) -> std::io::Result<Vec<String>> {
    let mut head = open_head(loc, path);
    let mut line = Vec::new();
    head.read_until(b'\n', &mut line)?;
    let (schema, _) = CsvFormat::default()
        .with_header(true)
        .with_delimiter(delimiter)
        .infer_schema(std::io::Cursor::new(line), Some(0))
        .map_err(std::io::Error::other)?;
    Ok(schema.fields().iter().map(|f| f.name().clone()).collect())
}

/// CSV: a schema inferred from the first records, files cut at byte ranges.
pub(super) struct Csv;

#[async_trait]
impl FileFormat for Csv {
    /// Infers the schema from the first records of the file.
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        opts: &FormatOptions,
    ) -> Result<FileInfo> {
        let opts = opts.clone();
        inspect_head(loc, file, "csv", move |input, display| {
            let format = CsvFormat::default()
                .with_header(opts.csv_header)
                .with_delimiter(opts.csv_delimiter);
            format
                .infer_schema(input, Some(opts.infer_records))
                .map(|(schema, _)| Arc::new(schema))
                .map_err(|e| Error::corrupt(display, "csv", e))
        })
        .await
    }

    /// Streams the rows of a split.
    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let opts = request.options.clone();
        let target = request.data_schema.clone();
        let display = loc.display(&split.object_path());
        let path = split.object_path();
        let starts_at_zero = !matches!(split.range, SplitRange::Bytes { start, .. } if start > 0);
        let loc2 = loc.clone();
        decode_blocking(loc, split, "csv", move |input, emit| {
            let names: Vec<String> = if opts.csv_header {
                header_names(&loc2, &path, opts.csv_delimiter)
                    .map_err(|e| from_io(&display, "csv", e))?
            } else {
                target.fields().iter().map(|f| f.name().clone()).collect()
            };
            let fields: Vec<Field> = names
                .iter()
                .map(|n| {
                    let ty = target
                        .field_with_name(n)
                        .map(|f| f.data_type().clone())
                        .unwrap_or(DataType::Utf8);
                    Field::new(n, ty, true)
                })
                .collect();
            let reader = ReaderBuilder::new(Arc::new(Schema::new(fields)))
                .with_header(opts.csv_header && starts_at_zero)
                .with_delimiter(opts.csv_delimiter)
                .with_batch_size(opts.batch_size)
                .build(input)
                .map_err(|e| Error::corrupt(&display, "csv", e))?;
            emit_all(reader, &display, "csv", emit);
            Ok(())
        })
    }
}
