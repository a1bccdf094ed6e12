//! The shell's edges that a simulation replaces: where its reads run
//! ([`Readers`]), what time it is and when heartbeats go ([`Clock`],
//! [`Ticks`]). The master is the other
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
    /// When the worker's heartbeats go, from now on.
    fn heartbeats(&self) -> Box<dyn Ticks>;
}

/// How often the system's clock has the leases renewed.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// When a worker's heartbeats go.
#[async_trait::async_trait]
pub trait Ticks: Send {
    /// Resolves when the next heartbeat is due.
    async fn tick(&mut self);
}

/// A heartbeat every [`HEARTBEAT`], the first one [`HEARTBEAT`] from now; a
/// late one does not make the next ones come sooner.
struct Every(tokio::time::Interval);

#[async_trait::async_trait]
impl Ticks for Every {
    async fn tick(&mut self) {
        self.0.tick().await;
    }
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

    fn heartbeats(&self) -> Box<dyn Ticks> {
        let first = tokio::time::Instant::now() + HEARTBEAT;
        let mut every = tokio::time::interval_at(first, HEARTBEAT);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Box::new(Every(every))
    }
}
