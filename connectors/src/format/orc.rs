//! ORC: footer and stripes through orc-rust's async reader over the store.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use futures::FutureExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use orc_rust::reader::AsyncChunkReader;
use orc_rust::ArrowReaderBuilder;

use super::{FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest, Unit};
use crate::error::{store_error_within, Error, Result};
use crate::split::{Split, SplitRange};
use crate::store::Location;

/// Byte ranges of one ORC object.
struct StoreChunks {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
    /// The file as users see it, for store errors.
    display: String,
}

impl AsyncChunkReader for StoreChunks {
    fn len(&mut self) -> BoxFuture<'_, std::io::Result<u64>> {
        let size = self.size;
        async move { Ok(size) }.boxed()
    }

    fn get_bytes(&mut self, offset: u64, length: u64) -> BoxFuture<'_, std::io::Result<Bytes>> {
        let store = self.store.clone();
        let path = self.path.clone();
        let display = self.display.clone();
        async move {
            store
                .get_range(&path, offset..offset + length)
                .await
                .map_err(|e| std::io::Error::other(Error::from_store(display, e)))
        }
        .boxed()
    }
}

fn chunks(loc: &Location, path: &Path, size: u64) -> StoreChunks {
    StoreChunks {
        store: loc.store.clone(),
        path: path.clone(),
        size,
        display: loc.display(path),
    }
}

/// A decoding error of `display`: the store's error where a read of the file
/// failed underneath, else corrupt data.
fn orc_error(display: &str, e: impl std::error::Error + 'static) -> Error {
    store_error_within(&e).unwrap_or_else(|| Error::corrupt(display, "orc", e))
}

/// ORC: a footer with the schema, rows and stripes; files cut at stripes.
pub(super) struct Orc;

#[async_trait]
impl FileFormat for Orc {
    /// Reads the footer: schema, rows and stripes (anchored at their start).
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        _opts: &FormatOptions,
    ) -> Result<FileInfo> {
        let builder = ArrowReaderBuilder::try_new_async(chunks(loc, &file.path, file.size))
            .await
            .map_err(|e| orc_error(&loc.display(&file.path), e))?;
        let meta = builder.file_metadata();
        let units = meta
            .stripe_metadatas()
            .iter()
            .enumerate()
            .map(|(index, s)| Unit {
                index,
                anchor: s.offset(),
                rows: s.number_of_rows(),
            })
            .collect();
        Ok(FileInfo {
            schema: builder.schema(),
            rows: Some(meta.number_of_rows()),
            units,
            csv_head: None,
            parquet_meta: None,
        })
    }

    /// Streams the stripes of a split.
    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let path = split.object_path();
        let display = loc.display(&path);
        let reader = chunks(loc, &path, split.size);
        let range = split.range.clone();
        let batch_size = request.options.batch_size;
        let open = async move {
            let mut builder = ArrowReaderBuilder::try_new_async(reader)
                .await
                .map_err(|e| orc_error(&display, e))?
                .with_batch_size(batch_size);
            if let SplitRange::Stripes { start, end } = range {
                builder = builder.with_file_byte_range(start as usize..end as usize);
            }
            let d2 = display.clone();
            Ok::<_, Error>(builder.build_async().map_err(move |e| orc_error(&d2, e)))
        };
        futures::stream::once(open).try_flatten().boxed()
    }
}
