//! Where a worker gets its tasks: the embedded queue of `sluice train`
//! (and, behind the same trait, a remote master).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::task::{
    AttemptId, FailOutcome, LeaseReply, Millis, Queue, QueueError, QueueStatus, WorkerId,
};

/// The operations a worker needs from a master.
pub trait TaskSource: Send + Sync {
    /// Registers this worker.
    fn register(&self) -> Result<WorkerId, QueueError>;
    /// Leases up to `max` tasks.
    fn lease(&self, worker: WorkerId, max: usize) -> Result<LeaseReply, QueueError>;
    /// Renews the worker's leases; returns attempts it lost.
    fn heartbeat(&self, worker: WorkerId) -> Result<Vec<AttemptId>, QueueError>;
    /// Commits acknowledged rows of an attempt.
    fn commit(&self, attempt: AttemptId, offset: u64) -> Result<(), QueueError>;
    /// Reports an attempt read and acknowledged to the end.
    fn finish(&self, attempt: AttemptId, rows: u64) -> Result<(), QueueError>;
    /// Reports an attempt failed.
    fn fail(&self, attempt: AttemptId, reason: String) -> Result<FailOutcome, QueueError>;
    /// Counts for progress.
    fn status(&self) -> QueueStatus;
}

/// The queue held in this process, on a monotonic clock.
#[derive(Clone)]
pub struct LocalQueue {
    queue: Arc<Mutex<Queue>>,
    start: Instant,
}

impl LocalQueue {
    /// Wraps a queue.
    pub fn new(queue: Queue) -> Self {
        LocalQueue {
            queue: Arc::new(Mutex::new(queue)),
            start: Instant::now(),
        }
    }

    fn now(&self) -> Millis {
        self.start.elapsed().as_millis() as Millis
    }

    fn with<T>(&self, f: impl FnOnce(&mut Queue, Millis) -> T) -> T {
        let now = self.now();
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.tick(now);
        f(&mut queue, now)
    }

    /// A copy of the queue's state (for summaries).
    pub fn snapshot<T>(&self, f: impl FnOnce(&Queue) -> T) -> T {
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        f(&queue)
    }
}

impl TaskSource for LocalQueue {
    fn register(&self) -> Result<WorkerId, QueueError> {
        Ok(self.with(|q, now| q.register(now)))
    }

    fn lease(&self, worker: WorkerId, max: usize) -> Result<LeaseReply, QueueError> {
        self.with(|q, now| q.lease(now, worker, max))
    }

    fn heartbeat(&self, worker: WorkerId) -> Result<Vec<AttemptId>, QueueError> {
        self.with(|q, now| q.heartbeat(now, worker))
    }

    fn commit(&self, attempt: AttemptId, offset: u64) -> Result<(), QueueError> {
        self.with(|q, now| q.commit(now, attempt, offset))
    }

    fn finish(&self, attempt: AttemptId, rows: u64) -> Result<(), QueueError> {
        self.with(|q, now| q.finish(now, attempt, rows))
    }

    fn fail(&self, attempt: AttemptId, reason: String) -> Result<FailOutcome, QueueError> {
        self.with(|q, now| q.fail(now, attempt, reason))
    }

    fn status(&self) -> QueueStatus {
        self.with(|q, _| q.status())
    }
}
