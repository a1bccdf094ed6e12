//! Following a Spark Structured Streaming file sink: the batches its log
//! (`_spark_metadata/`) adds; the files of a batch are those its log line
//! names, never a listing of the directory.

use connectors::{Dataset, DatasetOptions, Location};
use object_store::ObjectStoreExt;
use tracing::info;

use super::{has_schema, FollowError, Taken};
use crate::protocol::follow::FollowPosition;

/// What a sink holds committed at the start of its job: every batch up to
/// its newest.
pub(super) async fn first(
    location: &Location,
    options: &DatasetOptions,
) -> Result<Option<(Dataset, FollowPosition)>, connectors::Error> {
    let Some(batch) = connectors::sink::newest_batch(location).await? else {
        return Ok(None);
    };
    let dataset =
        Dataset::open_sink_batches(location.clone(), None, batch, options.clone()).await?;
    Ok(has_schema(dataset).map(|d| (d, FollowPosition::Sink { batch: Some(batch) })))
}

/// Looks at the sink once: the batches committed after `batch`, taken
/// (`batch` moves to the newest).
pub(super) async fn poll(
    batch: &mut Option<u64>,
    location: &Location,
    options: &DatasetOptions,
) -> Result<Option<Taken>, FollowError> {
    let newest = connectors::sink::newest_batch(location)
        .await
        .map_err(FollowError::read("find the sink's newest batch"))?;
    let Some(newest) = newest else {
        return Ok(None);
    };
    if batch.is_some_and(|b| newest <= b) {
        return Ok(None);
    }
    let dataset = Dataset::open_sink_batches(location.clone(), *batch, newest, options.clone())
        .await
        .map_err(FollowError::read(format!(
            "list the sink's batches up to {newest}"
        )))?;
    *batch = Some(newest);
    info!(
        batch = newest,
        files = dataset.files.len(),
        "following: new batch of the streaming sink"
    );
    let committed_ms = commit_ms(location, newest).await;
    Ok(Some(Taken {
        dataset,
        position: FollowPosition::Sink {
            batch: Some(newest),
        },
        committed_ms,
        what: format!("batch {newest}"),
    }))
}

/// When the sink's log file of `batch` was written (`_spark_metadata/N`,
/// or `N.compact`), if it can be told.
async fn commit_ms(location: &Location, batch: u64) -> Option<i64> {
    let dir = location.root.clone().join("_spark_metadata");
    for name in [batch.to_string(), format!("{batch}.compact")] {
        if let Ok(meta) = location.store.head(&dir.clone().join(name)).await {
            return Some(meta.last_modified.timestamp_millis());
        }
    }
    None
}
