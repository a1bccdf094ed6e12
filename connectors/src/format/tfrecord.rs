//! TfRecord: not yet read.

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};

use super::{FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest};
use crate::error::{Error, Result};
use crate::split::Split;
use crate::store::Location;

/// The tfrecord format.
pub(super) struct TfRecord;

#[async_trait]
impl FileFormat for TfRecord {
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        _opts: &FormatOptions,
    ) -> Result<FileInfo> {
        Err(Error::Format {
            path: loc.display(&file.path),
            reason: "tfrecord files are not read yet".to_string(),
        })
    }

    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        _request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let err = Error::Format {
            path: loc.display(&split.object_path()),
            reason: "tfrecord files are not read yet".to_string(),
        };
        futures::stream::once(async move { Err(err) }).boxed()
    }
}
