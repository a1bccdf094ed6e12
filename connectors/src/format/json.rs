//! JSON lines: schema inferred from the first records, decoded by name.

use std::sync::Arc;

use arrow::json::reader::infer_json_schema;
use arrow::json::ReaderBuilder;
use arrow::record_batch::RecordBatch;
use futures::stream::BoxStream;

use super::text_io::open_head;
use super::text_io::{decode_blocking, emit_all};
use super::{FileInfo, FileRef, FormatOptions, ReadRequest};
use crate::error::{Error, Result};
use crate::split::Split;
use crate::store::Location;

/// Infers the schema from the first records of the file.
pub(super) async fn inspect(
    loc: &Location,
    file: &FileRef,
    opts: &FormatOptions,
) -> Result<FileInfo> {
    let loc = loc.clone();
    let path = file.path.clone();
    let records = opts.infer_records;
    let display = loc.display(&path);
    let schema = tokio::task::spawn_blocking(move || {
        infer_json_schema(open_head(&loc, &path), Some(records)).map(|(s, _)| s)
    })
    .await
    .map_err(|e| Error::corrupt(&display, "json", e))?
    .map_err(|e| Error::corrupt(&display, "json", e))?;
    Ok(FileInfo {
        schema: Arc::new(schema),
        rows: None,
        units: Vec::new(),
    })
}

/// Streams the rows of a split, decoded into the merged schema.
pub(super) fn read(
    loc: &Location,
    split: &Split,
    request: &ReadRequest,
    skip: u64,
) -> BoxStream<'static, Result<RecordBatch>> {
    let schema = request.data_schema.clone();
    let batch_size = request.options.batch_size;
    let display = loc.display(&split.object_path());
    let stream = decode_blocking(loc, split, "json", move |input, emit| {
        let reader = ReaderBuilder::new(schema)
            .with_batch_size(batch_size)
            .build(input)
            .map_err(|e| Error::corrupt(&display, "json", e))?;
        emit_all(reader, &display, "json", emit);
        Ok(())
    });
    super::skip_rows(stream, skip)
}
