//! An Arrow IPC stream whose record batch messages carry custom metadata: the
//! `sluice.*` keys of a batch's schema metadata (see
//! [`crate::worker::stepper`]) travel as the metadata of its message, where
//! `pyarrow`'s `read_next_batch_with_custom_metadata` finds them and plain
//! readers ignore them. The stream's schema message never carries them.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ipc::writer::{
    write_message, DictionaryTracker, EncodedData, IpcDataGenerator, IpcWriteContext,
    IpcWriteOptions,
};
use arrow::ipc::{
    root_as_message, BodyCompression, BodyCompressionArgs, KeyValue, KeyValueArgs, Message,
    MessageArgs, MessageHeader, RecordBatchArgs,
};
use arrow::record_batch::RecordBatch;
use flatbuffers::FlatBufferBuilder;

/// Schema metadata keys with this prefix go with the batch, not the schema.
pub use super::protocol::KEY_PREFIX as BATCH_KEY_PREFIX;

/// Writes an IPC stream, one message per batch, with per-batch metadata.
pub struct TaggedStreamWriter<W: Write> {
    writer: W,
    generator: IpcDataGenerator,
    tracker: DictionaryTracker,
    options: IpcWriteOptions,
    context: IpcWriteContext,
}

impl<W: Write> TaggedStreamWriter<W> {
    /// Starts a stream of `schema` (without its `sluice.*` keys).
    /// The schema carries `stream` metadata besides its own (untagged) keys:
    /// what holds for the whole stream.
    pub fn try_new_with(
        mut writer: W,
        schema: &Schema,
        stream: &[(String, String)],
    ) -> Result<Self, ArrowError> {
        let generator = IpcDataGenerator::default();
        let mut tracker = DictionaryTracker::new(false);
        let options = IpcWriteOptions::default();
        let mut schema = untagged(schema);
        if !stream.is_empty() {
            let mut metadata = schema.metadata().clone();
            metadata.extend(stream.iter().cloned());
            schema = Arc::new(Schema::new_with_metadata(schema.fields().clone(), metadata));
        }
        let message =
            generator.schema_to_bytes_with_dictionary_tracker(&schema, &mut tracker, &options);
        write_message(&mut writer, message, &options)?;
        Ok(TaggedStreamWriter {
            writer,
            generator,
            tracker,
            options,
            context: IpcWriteContext::default(),
        })
    }

    /// Writes one batch, its `sluice.*` schema metadata as the message's.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), ArrowError> {
        let (dictionaries, mut message) =
            self.generator
                .encode(batch, &mut self.tracker, &self.options, &mut self.context)?;
        for dictionary in dictionaries {
            write_message(&mut self.writer, dictionary, &self.options)?;
        }
        let tags: Vec<(&String, &String)> = batch
            .schema_ref()
            .metadata()
            .iter()
            .filter(|(k, _)| k.starts_with(BATCH_KEY_PREFIX))
            .collect();
        if !tags.is_empty() {
            message = EncodedData {
                ipc_message: with_metadata(&message.ipc_message, &tags)?,
                arrow_data: message.arrow_data,
            };
        }
        write_message(&mut self.writer, message, &self.options)?;
        Ok(())
    }

    /// Flushes what was written.
    pub fn flush(&mut self) -> Result<(), ArrowError> {
        self.writer.flush()?;
        Ok(())
    }

    /// Ends the stream (the end-of-stream marker) and flushes it.
    pub fn finish(&mut self) -> Result<(), ArrowError> {
        // Continuation marker, then a zero length.
        self.writer
            .write_all(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0])?;
        self.writer.flush()?;
        Ok(())
    }
}

/// `schema` without the keys that belong to batches.
pub fn untagged(schema: &Schema) -> SchemaRef {
    if !schema
        .metadata()
        .keys()
        .any(|k| k.starts_with(BATCH_KEY_PREFIX))
    {
        return Arc::new(schema.clone());
    }
    let metadata: HashMap<String, String> = schema
        .metadata()
        .iter()
        .filter(|(k, _)| !k.starts_with(BATCH_KEY_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Arc::new(Schema::new_with_metadata(schema.fields().clone(), metadata))
}

/// The record batch message `message` again, with `tags` as its custom metadata.
fn with_metadata(message: &[u8], tags: &[(&String, &String)]) -> Result<Vec<u8>, ArrowError> {
    let bad = |what: &str| ArrowError::IpcError(format!("cannot tag a batch message: {what}"));
    let parsed = root_as_message(message).map_err(|e| bad(&e.to_string()))?;
    let batch = parsed
        .header_as_record_batch()
        .ok_or_else(|| bad("not a record batch"))?;
    let mut fbb = FlatBufferBuilder::new();
    let nodes = batch
        .nodes()
        .map(|n| fbb.create_vector(&n.iter().copied().collect::<Vec<_>>()));
    let buffers = batch
        .buffers()
        .map(|b| fbb.create_vector(&b.iter().copied().collect::<Vec<_>>()));
    let variadic = batch
        .variadicBufferCounts()
        .map(|v| fbb.create_vector(&v.iter().collect::<Vec<i64>>()));
    let compression = batch.compression().map(|c| {
        BodyCompression::create(
            &mut fbb,
            &BodyCompressionArgs {
                codec: c.codec(),
                method: c.method(),
            },
        )
    });
    let header = arrow::ipc::RecordBatch::create(
        &mut fbb,
        &RecordBatchArgs {
            length: batch.length(),
            nodes,
            buffers,
            compression,
            variadicBufferCounts: variadic,
        },
    );
    let pairs: Vec<_> = tags
        .iter()
        .map(|(k, v)| {
            let key = fbb.create_string(k);
            let value = fbb.create_string(v);
            KeyValue::create(
                &mut fbb,
                &KeyValueArgs {
                    key: Some(key),
                    value: Some(value),
                },
            )
        })
        .collect();
    let custom_metadata = Some(fbb.create_vector(&pairs));
    let root = Message::create(
        &mut fbb,
        &MessageArgs {
            version: parsed.version(),
            header_type: MessageHeader::RecordBatch,
            header: Some(header.as_union_value()),
            bodyLength: parsed.bodyLength(),
            custom_metadata,
        },
    );
    fbb.finish(root, None);
    Ok(fbb.finished_data().to_vec())
}
