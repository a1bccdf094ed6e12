//! Waiting for `_SUCCESS`: the spark-submit handoff. A local directory is
//! watched with inotify, so the marker is seen as soon as it is written; other
//! stores are listed every second. The wait says what it waits for when it
//! starts and every minute after.

use std::time::{Duration, Instant};

use connectors::{Dataset, DatasetOptions, ErrorKind, Location};

use crate::follow::inotify::LocalWatch;

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
    #[error("cannot wait for {url}/_SUCCESS")]
    Connector {
        /// The dataset.
        url: String,
        /// Why listing it failed (boxed: it is large).
        #[source]
        source: Box<connectors::Error>,
    },
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
    let mut said = crate::logging::Wait::new(format!("_SUCCESS in {}", location.url()));
    let mut watch = LocalWatch::new(location);
    let marker = location.local_dir().map(|dir| dir.join("_SUCCESS"));
    let mut listed: Option<Instant> = None;
    loop {
        // Checked before listing: a writer that exited had written `_SUCCESS` by then.
        let writer_gone = writer.filter(|&pid| !crate::host::process_alive(pid, None));
        // Between listings a watched local directory is only checked for
        // its marker: a write of many files wakes the watch many times.
        let due = listed.is_none_or(|t| t.elapsed() >= POLL)
            || writer_gone.is_some()
            || start.elapsed() >= timeout
            || marker.as_ref().is_some_and(|m| m.exists());
        if !due {
            wait(&mut watch, start, timeout).await;
            continue;
        }
        listed = Some(Instant::now());
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
            Err(source) => {
                return Err(WaitError::Connector {
                    url: location.url(),
                    source: Box::new(source),
                })
            }
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
        said.say(detail.trim_start_matches("; "), Some(timeout));
        wait(&mut watch, start, timeout).await;
    }
}

/// Waits for the next look: a change of a watched local directory, or the
/// next listing of another store (never past the timeout).
async fn wait(watch: &mut Option<LocalWatch>, start: Instant, timeout: Duration) {
    let pause = POLL
        .min(timeout.saturating_sub(start.elapsed()))
        .max(Duration::from_millis(10));
    match watch {
        Some(watch) => watch.changed(pause).await,
        None => tokio::time::sleep(pause).await,
    }
}
