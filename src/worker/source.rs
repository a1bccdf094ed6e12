//! Where a worker gets its tasks: the embedded queue of `sluice train`
//! (journaled when it has a state directory) and, behind the same trait, a
//! remote master.

use std::sync::{Arc, Mutex};

use crate::master::state::{wall_millis, MasterState};
use crate::task::{
    AttemptId, Command, CutPiece, FailOutcome, LeaseReply, Queue, QueueError, QueueStatus, Reply,
    WorkerId,
};

/// The operations a worker needs from a master.
#[async_trait::async_trait]
pub trait TaskSource: Send + Sync {
    /// Registers this worker.
    async fn register(&self) -> Result<WorkerId, QueueError>;
    /// Leases up to `max` tasks.
    async fn lease(&self, worker: WorkerId, max: usize) -> Result<LeaseReply, QueueError>;
    /// Renews the worker's leases; `held` lists the attempts it is working on
    /// (a lease whose reply never reached it is taken back). Returns attempts it lost.
    async fn heartbeat(
        &self,
        worker: WorkerId,
        held: &[AttemptId],
    ) -> Result<Vec<AttemptId>, QueueError>;
    /// Commits acknowledged rows of an attempt `worker` leased.
    async fn commit(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        offset: u64,
    ) -> Result<(), QueueError>;
    /// Reports an attempt `worker` leased read and acknowledged to the end.
    async fn finish(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        rows: u64,
    ) -> Result<(), QueueError>;
    /// Reports an attempt `worker` leased failed.
    async fn fail(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        reason: String,
    ) -> Result<FailOutcome, QueueError>;
    /// Gives an attempt back unfinished (the worker is stopping): the task is
    /// leased again at once, from its committed offset.
    async fn hand_back(&self, worker: WorkerId, attempt: AttemptId) -> Result<(), QueueError>;
    /// Records that the job's trainers keep checkpoints.
    async fn declare_checkpoints(&self, worker: WorkerId) -> Result<(), QueueError>;
    /// Records complete checkpoint `id`, holding `pieces` besides what the
    /// earlier ones held.
    async fn checkpoint(
        &self,
        worker: WorkerId,
        id: String,
        pieces: Vec<CutPiece>,
    ) -> Result<(), QueueError>;
    /// Whether the worker reports the rows its trainers hold outside any
    /// checkpoint ([`TaskSource::unsaved`]): a remote master serves them
    /// again if the worker goes silent. The embedded queue restores the
    /// whole job's checkpoint instead.
    fn keeps_unsaved(&self) -> bool {
        false
    }
    /// Reports the rows the worker's trainers acknowledged that are in none
    /// of its complete checkpoints (sent before the commits they cover).
    async fn unsaved(&self, _worker: WorkerId, _pieces: Vec<CutPiece>) -> Result<(), QueueError> {
        Ok(())
    }
    /// Counts for progress.
    async fn status(&self) -> Result<QueueStatus, QueueError>;
}

/// The queue held in this process; every change goes through the master
/// state's journal (in memory, or on disk with `--state`).
#[derive(Clone)]
pub struct LocalQueue {
    state: Arc<Mutex<MasterState>>,
}

impl LocalQueue {
    /// Wraps a master state.
    pub fn new(state: MasterState) -> Self {
        LocalQueue {
            state: Arc::new(Mutex::new(state)),
        }
    }

    fn run(&self, command: Command) -> Result<Reply, QueueError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.execute(command).map_err(|e| QueueError::Transport {
            reason: e.to_string(),
        })
    }

    /// Counts for progress, without waiting.
    pub fn status_now(&self) -> QueueStatus {
        self.snapshot(|q| q.status())
    }

    /// A look at the queue's state (for summaries).
    pub fn snapshot<T>(&self, f: impl FnOnce(&Queue) -> T) -> T {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&state.queue)
    }
}

/// A reply of the wrong kind: cannot happen, reported rather than panicking.
fn mismatch() -> QueueError {
    QueueError::Transport {
        reason: "the queue answered a different request".to_string(),
    }
}

#[async_trait::async_trait]
impl TaskSource for LocalQueue {
    async fn register(&self) -> Result<WorkerId, QueueError> {
        let command = Command::Register {
            now: wall_millis(),
            secret: None,
            name: None,
        };
        match self.run(command)? {
            Reply::Register(w) => Ok(w),
            _ => Err(mismatch()),
        }
    }

    async fn lease(&self, worker: WorkerId, max: usize) -> Result<LeaseReply, QueueError> {
        match self.run(Command::Lease {
            now: wall_millis(),
            worker,
            max,
        })? {
            Reply::Lease(r) => r,
            _ => Err(mismatch()),
        }
    }

    async fn heartbeat(
        &self,
        worker: WorkerId,
        _held: &[AttemptId],
    ) -> Result<Vec<AttemptId>, QueueError> {
        match self.run(Command::Heartbeat {
            now: wall_millis(),
            worker,
        })? {
            Reply::Heartbeat(r) => r,
            _ => Err(mismatch()),
        }
    }

    async fn commit(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        offset: u64,
    ) -> Result<(), QueueError> {
        match self.run(Command::Commit {
            now: wall_millis(),
            worker: Some(worker),
            attempt,
            offset,
        })? {
            Reply::Commit(r) => r,
            _ => Err(mismatch()),
        }
    }

    async fn finish(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        rows: u64,
    ) -> Result<(), QueueError> {
        match self.run(Command::Finish {
            now: wall_millis(),
            worker: Some(worker),
            attempt,
            rows,
        })? {
            Reply::Finish(r) => r,
            _ => Err(mismatch()),
        }
    }

    async fn fail(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        reason: String,
    ) -> Result<FailOutcome, QueueError> {
        match self.run(Command::Fail {
            now: wall_millis(),
            worker: Some(worker),
            attempt,
            reason,
        })? {
            Reply::Fail(r) => r,
            _ => Err(mismatch()),
        }
    }

    async fn hand_back(&self, worker: WorkerId, attempt: AttemptId) -> Result<(), QueueError> {
        match self.run(Command::HandBack {
            now: wall_millis(),
            worker,
            attempt,
        })? {
            Reply::HandBack(r) => r,
            _ => Err(mismatch()),
        }
    }

    async fn declare_checkpoints(&self, _worker: WorkerId) -> Result<(), QueueError> {
        self.run(Command::DeclareCheckpoints { now: wall_millis() })
            .map(|_| ())
    }

    async fn checkpoint(
        &self,
        _worker: WorkerId,
        id: String,
        pieces: Vec<CutPiece>,
    ) -> Result<(), QueueError> {
        self.run(Command::Checkpoint {
            now: wall_millis(),
            id,
            pieces,
            worker: None,
        })
        .map(|_| ())
    }

    async fn status(&self) -> Result<QueueStatus, QueueError> {
        Ok(self.status_now())
    }
}
