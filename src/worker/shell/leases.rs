//! The shell's leases: when to lease more, the lease itself (and the splits
//! a followed job added), the attempts its heartbeats report, and leases
//! lapsed by this worker's clock.

use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::{PipelineError, Shell};
use crate::queue::LeaseReply;
use crate::worker::coordinator::Event;
use crate::worker::in_order::InOrder;
use crate::worker::reader::ReadEvent;

impl Shell {
    /// Whether to lease more: fewer readers run than devices (up to
    /// `prefetch`), or the stages after the readers are waiting for rows
    /// (nothing decoded waits for them) and the read-ahead budget has room
    /// (no reader waits for bytes to fit: a task leased then would only
    /// wait, held from other workers). Readers so multiply while reading is
    /// the bottleneck, up to `prefetch`, as far as the bytes they hold allow;
    /// a worker whose trainers are the bottleneck holds one task per device,
    /// and a worker joining later finds the other tasks still in the queue.
    pub(super) fn hungry(&self, read_rx: &mpsc::Receiver<ReadEvent>) -> bool {
        if let Some(global) = &self.global {
            return global.wants_lease();
        }
        // At least one read per device (up to --prefetch), and on a remote
        // store two more: while every device decodes a task, the next ones'
        // fetches, a round trip and a transfer each, are already on their
        // way. (The default read-ahead there holds that many row groups.)
        let extra = usize::from(self.remote) * crate::config::pipeline::REMOTE_EXTRA_READS;
        let floor = self
            .config
            .prefetch
            .max(1)
            .min(self.config.devices.max(1) + extra);
        self.coordinator.leased_reads() < floor
            || (self.coordinator.none_starting()
                && self.coordinator.leased_reads() < self.config.prefetch.max(1)
                && self.ahead.waiting() == 0
                && read_rx.is_empty()
                && !self.backed_up()
                && self.batcher.buffered() < self.config.batch_size
                && self.in_order.as_ref().is_none_or(InOrder::holds_nothing))
    }

    /// Leases tasks until `prefetch` are being read.
    pub(super) async fn top_up(&mut self) -> Result<(), PipelineError> {
        let held = self.held.clone();
        let mut held = held.lock().await;
        let result = self.lease_more().await;
        *held = self.coordinator.attempts();
        self.unsynced = false;
        result
    }

    /// Publishes the attempts held to the heartbeat task.
    pub(super) async fn sync_held(&mut self) {
        *self.held.lock().await = self.coordinator.attempts();
        self.unsynced = false;
    }

    /// Publishes the attempts held, if they changed.
    pub(super) async fn sync_if_changed(&mut self) {
        if self.unsynced {
            self.sync_held().await;
        }
    }

    pub(super) async fn lease_more(&mut self) -> Result<(), PipelineError> {
        let prefetch = self.config.prefetch.max(1);
        // One task at a time: the next only once this one delivers rows and
        // the pipeline still waits for more (see `hungry`).
        if self.global.is_none() && self.coordinator.leased_reads() >= prefetch {
            return Ok(());
        }
        if !self.take_ranks().await? {
            self.next_lease = self.time.now() + self.backoff.next_wait();
            return Ok(());
        }
        let sent = self.time.now();
        match self.source.lease(self.worker, 1).await? {
            LeaseReply::Tasks(leases) if !leases.is_empty() => {
                self.backoff.reset();
                for lease in leases {
                    self.clock.granted(lease.attempt, sent);
                    let reachable = (lease.split as usize) < self.coordinator.splits()
                        || self.learn_splits().await;
                    self.act(Event::Granted { lease, reachable })?;
                    for lease in std::mem::take(&mut self.to_offer) {
                        // Read once its window is (see `pump_global`).
                        self.offer_global(lease).await?;
                    }
                }
            }
            LeaseReply::Tasks(_) | LeaseReply::Wait => {
                self.next_lease = self.time.now() + self.backoff.next_wait();
                self.global_waits().await?;
            }
            LeaseReply::JobOver => {
                self.act(Event::NothingToLease { over: true })?;
                self.global_waits().await?;
            }
        }
        Ok(())
    }

    /// Fetches the splits a followed job added since this worker last
    /// looked (a lease named one it lacks); false when the master could
    /// not be asked (the lease is then handed back, to be leased again).
    pub(super) async fn learn_splits(&mut self) -> bool {
        match self.source.splits_from(self.splits.len()).await {
            Ok(more) => {
                if !more.is_empty() {
                    debug!(added = more.len(), "the job grew: new splits");
                    Arc::make_mut(&mut self.splits).extend(more);
                    let count = self.splits.len();
                    self.coordinator.handle(Event::Splits { count });
                }
                true
            }
            Err(e) => {
                warn!(error = %connectors::Report(&e), "cannot fetch the job's new splits");
                false
            }
        }
    }

    /// Leases that lapsed by this worker's clock (no heartbeat got through in
    /// time: the master is unreachable, or the process was paused) are
    /// suspended, not dropped: no row of theirs reaches a trainer until the
    /// master renews them (a restarted master renews every lease) or says
    /// they are lost (then their rows are dropped).
    pub(super) fn drop_lapsed(&mut self) -> Result<(), PipelineError> {
        let attempts = self.clock.lapsed(self.time.now());
        self.act(Event::Lapsed { attempts })
    }
}
