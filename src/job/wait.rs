//! Waiting for `_SUCCESS`: the spark-submit handoff. The wait says what it
//! waits for when it starts and every minute after.

use std::time::{Duration, Instant};

use connectors::{Dataset, DatasetOptions, ErrorKind, Location};

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
    /// The process writing the output exited and no `_SUCCESS` came.
    #[error("the job writing {url} failed: its process (pid {pid}) exited and there is no _SUCCESS{detail}")]
    WriterFailed {
        /// The dataset.
        url: String,
        /// The writer's pid.
        pid: u32,
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

/// Lists the dataset until `_SUCCESS` appears or `timeout` passes. With `writer`,
/// the pid of the process writing the output (e.g. spark-submit), gives up as soon
/// as that process has exited without a `_SUCCESS` appearing.
pub async fn until_success(
    location: &Location,
    options: &DatasetOptions,
    timeout: Duration,
    writer: Option<u32>,
) -> Result<Dataset, WaitError> {
    let start = Instant::now();
    let mut wait = crate::logging::Wait::new(format!("_SUCCESS in {}", location.url()));
    loop {
        // Checked before listing: a writer that exited had written `_SUCCESS` by then.
        let writer_gone = writer.filter(|&pid| !crate::host::process_alive(pid, None));
        let detail = match Dataset::open(location.clone(), options.clone()).await {
            Ok(ds) if ds.complete => return Ok(ds),
            Ok(ds) if !ds.in_flight.is_empty() => {
                format!("; still in flight: {}", ds.in_flight.join(", "))
            }
            Ok(_) => "; output present but no _SUCCESS".to_string(),
            Err(connectors::Error::EmptyDir { .. }) => "; the directory is empty".to_string(),
            // A missing bucket will not appear by waiting: only a missing directory.
            Err(e) if e.kind() == ErrorKind::NotFound && !is_missing_bucket(&e) => {
                "; the directory does not exist yet".to_string()
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(pid) = writer_gone {
            return Err(WaitError::WriterFailed {
                url: location.url(),
                pid,
                detail,
            });
        }
        if start.elapsed() >= timeout {
            return Err(WaitError::Timeout {
                url: location.url(),
                waited: start.elapsed(),
                detail,
            });
        }
        // What it waits for, at once and then every minute.
        wait.say(detail.trim_start_matches("; "), Some(timeout));
        tokio::time::sleep(
            POLL.min(timeout.saturating_sub(start.elapsed()))
                .max(Duration::from_millis(10)),
        )
        .await;
    }
}
