//! Avro object container files, decoded by arrow-avro on a blocking thread.

use arrow::record_batch::RecordBatch;
use arrow_avro::reader::ReaderBuilder;
use async_trait::async_trait;
use futures::stream::BoxStream;

use super::text_io::{decode_blocking, emit_all, inspect_head};
use super::{spark_legacy, FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest};
use crate::error::{Error, Result};
use crate::split::Split;
use crate::store::Location;

/// Avro: the header holds the schema; rows are counted by reading.
pub(super) struct Avro;

#[async_trait]
impl FileFormat for Avro {
    /// Reads the header for the schema.
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        _opts: &FormatOptions,
    ) -> Result<FileInfo> {
        inspect_head(loc, file, "avro", |head, display| {
            ReaderBuilder::new()
                .build(head)
                .map(|r| r.schema())
                .map_err(|e| Error::corrupt(display, "avro", e))
        })
        .await
    }

    /// Streams the records of a file.
    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let batch_size = request.options.batch_size;
        let display = loc.display(&split.object_path());
        decode_blocking(loc, split, "avro", move |input, emit| {
            let reader = ReaderBuilder::new()
                .with_batch_size(batch_size)
                .build(input)
                .map_err(|e| Error::corrupt(&display, "avro", e))?;
            // Spark's legacy calendar: every date and timestamp is rebased.
            let legacy: Vec<String> = if reader
                .avro_header()
                .get(spark_legacy::LEGACY_DATETIME)
                .is_some()
            {
                reader
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect()
            } else {
                Vec::new()
            };
            let batches = reader.map(move |batch| spark_legacy::rebase(batch?, &legacy));
            emit_all(batches, &display, "avro", emit);
            Ok(())
        })
    }
}
