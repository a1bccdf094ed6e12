//! What a worker needs from a master, whether the embedded queue of `sluice
//! train` ([`crate::master::LocalQueue`]) or a remote one over HTTP
//! ([`crate::worker::remote::RemoteSource`]).

use crate::task::{
    AttemptId, CutPiece, FailOutcome, LeaseReply, QueueError, QueueStatus, WorkerId,
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
