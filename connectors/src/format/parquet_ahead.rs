//! A remote file's row groups fetched one ahead of the decoder.
//!
//! The parquet crate's stream fetches a row group's column chunks only once
//! the previous row group is decoded, so every row group of a split waits a
//! whole round trip to the store with the CPU idle. Here a task of its own
//! fetches the next row group while the current one decodes: one row group
//! ahead, no more, its bytes taken from the read-ahead budget as any fetch's
//! are. Batches come out in the same order, and a failed fetch is reported
//! after every batch of the row groups before it.

use arrow::record_batch::RecordBatch;
use futures::stream::{BoxStream, StreamExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReader;
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStream};
use parquet::errors::{ParquetError, Result};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// Stops the fetching task when the batches are dropped (a lost lease, a stop).
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The batches of `stream`, the next row group fetched while the current one
/// decodes. Off a Tokio runtime, the stream as it is.
pub(super) fn one_ahead<T>(
    mut stream: ParquetRecordBatchStream<T>,
) -> BoxStream<'static, Result<RecordBatch>>
where
    T: AsyncFileReader + Unpin + Send + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return stream.boxed();
    };
    // One slot: the fetch of a row group starts once the decoder has taken
    // the one before it.
    let (tx, rx) = mpsc::channel::<Result<ParquetRecordBatchReader>>(1);
    let fetcher = runtime.spawn(async move {
        loop {
            let Ok(slot) = tx.reserve().await else {
                return;
            };
            match stream.next_row_group().await {
                Ok(Some(group)) => slot.send(Ok(group)),
                Ok(None) => return,
                Err(e) => {
                    slot.send(Err(e));
                    return;
                }
            }
        }
    });
    let state = Decoding {
        groups: rx,
        current: None,
        _fetcher: AbortOnDrop(fetcher.abort_handle()),
    };
    futures::stream::unfold(state, |mut state| async move {
        let item = state.next().await?;
        Some((item, state))
    })
    .boxed()
}

/// The row group being decoded and the ones fetched after it.
struct Decoding {
    groups: mpsc::Receiver<Result<ParquetRecordBatchReader>>,
    current: Option<ParquetRecordBatchReader>,
    _fetcher: AbortOnDrop,
}

impl Decoding {
    async fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some(group) = self.current.as_mut() {
                match group.next() {
                    Some(batch) => {
                        return Some(batch.map_err(|e| ParquetError::ArrowError(e.to_string())))
                    }
                    // Its fetched bytes go back to the budget here.
                    None => self.current = None,
                }
            }
            match self.groups.recv().await? {
                Ok(group) => self.current = Some(group),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
