//! The worker's heartbeats: its leases renewed from a task of their own.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::edges::Clock;
use crate::protocol::{SourceError, TaskSource};
use crate::queue::{AttemptId, WorkerId};
use crate::worker::committer::Ending;
use crate::worker::LeaseClock;

/// What the heartbeat task tells the coordinator.
pub(super) type Beat = Result<AttemptId, SourceError>;

/// Heartbeats in a task of their own: leases are renewed on time even while
/// the coordinator is busy.
pub(in crate::worker) struct Heartbeats(tokio::task::JoinHandle<()>);

impl Heartbeats {
    /// Starts renewing the leases of `held` (and those `ending`) whenever
    /// `time` says (every second), telling `to_coordinator` the ones
    /// lost.
    pub(super) fn spawn(
        source: Arc<dyn TaskSource>,
        worker: WorkerId,
        held: Arc<tokio::sync::Mutex<Vec<AttemptId>>>,
        ending: Ending,
        clock: LeaseClock,
        time: Arc<dyn Clock>,
        to_coordinator: mpsc::UnboundedSender<Beat>,
    ) -> Heartbeats {
        let mut ticks = time.heartbeats();
        Heartbeats(tokio::spawn(async move {
            loop {
                ticks.tick().await;
                let sent = time.now();
                let (result, renewed) = {
                    let held = held.lock().await;
                    let listed = ending.with(&held);
                    (source.heartbeat(worker, &listed).await, held.clone())
                };
                let beats: Vec<Beat> = match result {
                    Ok(lost) => {
                        for attempt in &lost {
                            clock.lose(*attempt);
                        }
                        let live: Vec<AttemptId> =
                            renewed.into_iter().filter(|a| !lost.contains(a)).collect();
                        clock.renewed(&live, sent);
                        lost.into_iter().map(Ok).collect()
                    }
                    Err(e) => vec![Err(e)],
                };
                for beat in beats {
                    if to_coordinator.send(beat).is_err() {
                        return;
                    }
                }
            }
        }))
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.0.abort();
    }
}
