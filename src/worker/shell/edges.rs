//! The shell's edges that a simulation replaces: where its reads run
//! ([`Readers`]) and what time it is ([`Clock`]). The master is the other
//! edge, behind [`crate::protocol::TaskSource`]; the device threads are
//! reached through the queues of [`crate::worker::delivery`] and answer with
//! [`crate::worker::devices::DeviceEvent`]s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use connectors::{Location, ReadAhead, ReadPlan, Split};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::protocol::select::Selection;
use crate::queue::{Lease, WorkerId};
use crate::worker::reader::{ReadEvent, ReadTask};

/// Starts the reads of leased splits.
pub trait Readers: Send + Sync {
    /// Starts reading `split` from where `lease` says, holding its batches
    /// within `ahead`, and sending what happens to `tx`. Returns how to stop
    /// the read.
    fn start(
        &self,
        split: Split,
        lease: Lease,
        ahead: ReadAhead,
        tx: mpsc::Sender<ReadEvent>,
    ) -> AbortHandle;
}

/// The readers of the job's store: a [`ReadTask`] per read.
pub struct StoreReaders {
    /// Where the job's files are.
    pub location: Location,
    /// How they are read.
    pub plan: Arc<ReadPlan>,
    /// The rows chosen (`--split`, `--sample`, `--limit`).
    pub select: Arc<Selection>,
    /// How long a read that fails for a reason that may pass tries again.
    pub read_retry: Duration,
}

impl Readers for StoreReaders {
    fn start(
        &self,
        split: Split,
        lease: Lease,
        ahead: ReadAhead,
        tx: mpsc::Sender<ReadEvent>,
    ) -> AbortHandle {
        ReadTask {
            location: self.location.clone(),
            split,
            plan: self.plan.clone(),
            select: self.select.clone(),
            lease,
            ahead,
            read_retry: self.read_retry,
            tx,
        }
        .spawn()
    }
}

/// The shell's time.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Instant;
    /// A seed for `worker`'s lease backoff, so that workers of one job wait
    /// apart.
    fn backoff_seed(&self, worker: WorkerId) -> u64;
}

/// The system's clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    /// The worker's id and this process's time.
    fn backoff_seed(&self, worker: WorkerId) -> u64 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        worker.0.rotate_left(32) ^ u64::from(nanos) ^ u64::from(std::process::id())
    }
}
