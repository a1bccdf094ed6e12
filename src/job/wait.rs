//! Waiting for `_SUCCESS`: the spark-submit handoff.

use std::time::{Duration, Instant};

use connectors::{Dataset, DatasetOptions, ErrorKind, Location};
use tracing::info;

/// How often the output is listed while waiting.
const POLL: Duration = Duration::from_secs(1);

/// Errors while waiting.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The timeout passed.
    #[error("gave up waiting for {url}/_SUCCESS after {waited:?}{detail}")]
    Timeout {
        /// The dataset.
        url: String,
        /// How long we waited.
        waited: Duration,
        /// What was there instead.
        detail: String,
    },
    /// Listing failed for a reason other than absence.
    #[error(transparent)]
    Connector(#[from] connectors::Error),
}

/// Whether the error is a missing bucket or container rather than a missing directory.
fn is_missing_bucket(e: &connectors::Error) -> bool {
    matches!(e, connectors::Error::NoSuchBucket { .. })
}

/// Lists the dataset until `_SUCCESS` appears or `timeout` passes.
pub async fn until_success(
    location: &Location,
    options: &DatasetOptions,
    timeout: Duration,
) -> Result<Dataset, WaitError> {
    let start = Instant::now();
    let mut announced = false;
    loop {
        let detail = match Dataset::open(location.clone(), options.clone()).await {
            Ok(ds) if ds.complete => return Ok(ds),
            Ok(ds) if !ds.in_flight.is_empty() => {
                format!("; still in flight: {}", ds.in_flight.join(", "))
            }
            Ok(_) => "; output present but no _SUCCESS".to_string(),
            // A missing bucket will not appear by waiting: only a missing directory.
            Err(e) if e.kind() == ErrorKind::NotFound && !is_missing_bucket(&e) => {
                "; the directory does not exist yet".to_string()
            }
            Err(e) => return Err(e.into()),
        };
        if start.elapsed() >= timeout {
            return Err(WaitError::Timeout {
                url: location.url(),
                waited: start.elapsed(),
                detail,
            });
        }
        if !announced {
            info!(url = %location.url(), "waiting for _SUCCESS");
            announced = true;
        }
        tokio::time::sleep(
            POLL.min(timeout.saturating_sub(start.elapsed()))
                .max(Duration::from_millis(10)),
        )
        .await;
    }
}
