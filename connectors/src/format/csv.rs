//! CSV: header names, inferred types, byte-range splits of uncompressed files.

use std::io::BufRead;
use std::sync::Arc;

use arrow::csv::reader::Format as CsvFormat;
use arrow::csv::ReaderBuilder;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use futures::stream::BoxStream;
use object_store::path::Path;

use super::text_io::{decode_blocking, emit_all, from_io, open_head};
use super::{FileInfo, FileRef, FormatOptions, ReadRequest};
use crate::error::{Error, Result};
use crate::split::{Split, SplitRange};
use crate::store::Location;

/// Infers the schema from the first records of the file.
pub(super) async fn inspect(
    loc: &Location,
    file: &FileRef,
    opts: &FormatOptions,
) -> Result<FileInfo> {
    let loc = loc.clone();
    let path = file.path.clone();
    let opts = opts.clone();
    let display = loc.display(&path);
    let schema = tokio::task::spawn_blocking(move || {
        let input = open_head(&loc, &path);
        let format = CsvFormat::default()
            .with_header(opts.csv_header)
            .with_delimiter(opts.csv_delimiter);
        format
            .infer_schema(input, Some(opts.infer_records))
            .map(|(schema, _)| schema)
    })
    .await
    .map_err(|e| Error::corrupt(&display, "csv", e))?
    .map_err(|e| Error::corrupt(&display, "csv", e))?;
    Ok(FileInfo {
        schema: Arc::new(schema),
        rows: None,
        units: Vec::new(),
    })
}

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

/// Streams the rows of a split.
pub(super) fn read(
    loc: &Location,
    split: &Split,
    request: &ReadRequest,
    skip: u64,
) -> BoxStream<'static, Result<RecordBatch>> {
    let opts = request.options.clone();
    let target = request.data_schema.clone();
    let display = loc.display(&split.object_path());
    let path = split.object_path();
    let starts_at_zero = !matches!(split.range, SplitRange::Bytes { start, .. } if start > 0);
    let loc2 = loc.clone();
    let stream = decode_blocking(loc, split, "csv", move |input, emit| {
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
    });
    super::skip_rows(stream, skip)
}
