//! Avro object container files, decoded by arrow-avro on a blocking thread.

use arrow::record_batch::RecordBatch;
use arrow_avro::reader::ReaderBuilder;
use futures::stream::BoxStream;

use super::text_io::open_head;
use super::text_io::{decode_blocking, emit_all};
use super::{FileInfo, FileRef, ReadRequest};
use crate::error::{Error, Result};
use crate::split::Split;
use crate::store::Location;

/// Reads the header for the schema; rows are counted by reading.
pub(super) async fn inspect(loc: &Location, file: &FileRef) -> Result<FileInfo> {
    let loc = loc.clone();
    let path = file.path.clone();
    let display = loc.display(&path);
    let schema = tokio::task::spawn_blocking(move || {
        ReaderBuilder::new()
            .build(open_head(&loc, &path))
            .map(|r| r.schema())
    })
    .await
    .map_err(|e| Error::corrupt(&display, "avro", e))?
    .map_err(|e| Error::corrupt(&display, "avro", e))?;
    Ok(FileInfo {
        schema,
        rows: None,
        units: Vec::new(),
    })
}

/// Streams the records of a file.
pub(super) fn read(
    loc: &Location,
    split: &Split,
    request: &ReadRequest,
    skip: u64,
) -> BoxStream<'static, Result<RecordBatch>> {
    let batch_size = request.options.batch_size;
    let display = loc.display(&split.object_path());
    let stream = decode_blocking(loc, split, "avro", move |input, emit| {
        let reader = ReaderBuilder::new()
            .with_batch_size(batch_size)
            .build(input)
            .map_err(|e| Error::corrupt(&display, "avro", e))?;
        emit_all(reader, &display, "avro", emit);
        Ok(())
    });
    super::skip_rows(stream, skip)
}
