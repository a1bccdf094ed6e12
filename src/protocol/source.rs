//! What a worker needs from a master, whether the embedded queue of `sluice
//! train` ([`crate::state::LocalQueue`]) or a remote one over HTTP
//! ([`crate::worker::remote::RemoteSource`]). A master whose queue is at
//! hand (the embedded queue, a simulation's) only says how it applies an
//! operation ([`AppliesOps`]): one impl here makes it a [`TaskSource`].

use crate::epoch::Epoch;
use crate::protocol::ops::{self, Operation};
use crate::queue::{
    AttemptId, CutPiece, EpochView, FailOutcome, LeaseReply, QueueError, QueueStatus, WorkerId,
};

/// Why a [`TaskSource`] request did not succeed: the queue said no, or no
/// answer came. The two are handled apart: a refusal concerns one request
/// (a stale attempt's rows are served again elsewhere) and the worker goes
/// on; without answers it cannot.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The queue answered and refused the request (a lease that lapsed, an
    /// offset behind the committed one, ...).
    #[error("the queue refused to {doing}")]
    Refused {
        /// What the request was to do (`commit acknowledged rows`).
        doing: &'static str,
        /// The queue's refusal.
        #[source]
        source: QueueError,
    },
    /// No answer: the master stayed unreachable past the worker's patience,
    /// refused the job token, or answered outside the protocol; or the
    /// embedded queue's journal could not be written.
    #[error("no answer to the request to {doing}")]
    Unavailable {
        /// What the request was to do (`lease tasks`).
        doing: &'static str,
        /// Why no answer came.
        #[source]
        source: Cause,
    },
}

impl SourceError {
    /// The queue's refusal of the request to do `doing`, for `map_err`.
    pub fn refused(doing: &'static str) -> impl FnOnce(QueueError) -> SourceError {
        move |source| SourceError::Refused { doing, source }
    }

    /// No answer to the request to do `doing`, because of a cause, for
    /// `map_err`.
    pub fn unavailable<E>(doing: &'static str) -> impl FnOnce(E) -> SourceError
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        move |cause| SourceError::Unavailable {
            doing,
            source: Cause(Box::new(cause)),
        }
    }
}

/// Set, once, when a source can no longer record what it is told (the
/// embedded queue's journal could not be written): from then on no batch
/// may reach a trainer, since nothing its trainer acknowledges could be
/// committed. Holds the first failure, for the run's error.
#[derive(Debug, Clone, Default)]
pub struct Halt(std::sync::Arc<std::sync::OnceLock<String>>);

impl Halt {
    /// Halts, for `why` (the first reason given stays).
    pub fn set(&self, why: String) {
        let _ = self.0.set(why);
    }

    /// Why the source halted, once it has.
    pub fn reason(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

/// The error that kept an answer from coming, of whatever type (shown as
/// itself; its sources follow it in an error's chain).
#[derive(Debug)]
pub struct Cause(Box<dyn std::error::Error + Send + Sync + 'static>);

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The operations a worker needs from a master.
#[async_trait::async_trait]
pub trait TaskSource: Send + Sync {
    /// The flag this source sets when it can no longer record anything
    /// (see [`Halt`]); `None` for sources that never halt the feed (a
    /// remote master's journal failing stops that master instead).
    fn halt(&self) -> Option<Halt> {
        None
    }
    /// Registers this worker.
    async fn register(&self) -> Result<WorkerId, SourceError>;
    /// Leases up to `max` tasks.
    async fn lease(&self, worker: WorkerId, max: usize) -> Result<LeaseReply, SourceError>;
    /// Takes ranks for `devices` devices in a job of `--world-size` (see
    /// [`crate::queue::Ranks`]), or says how many are free while too few
    /// are; no world where the source has none (the embedded queue).
    async fn take_ranks(
        &self,
        _worker: WorkerId,
        _devices: u32,
    ) -> Result<crate::queue::RanksReply, SourceError> {
        Ok(crate::queue::RanksReply::NoWorld)
    }
    /// Renews the worker's leases; `held` lists the attempts it is working on
    /// (a lease whose reply never reached it is taken back). Returns attempts it lost.
    async fn heartbeat(
        &self,
        worker: WorkerId,
        held: &[AttemptId],
    ) -> Result<Vec<AttemptId>, SourceError>;
    /// Commits acknowledged rows of an attempt `worker` leased: the first
    /// `offset` rows, and the sorted, disjoint `ranges` acknowledged past it.
    async fn commit(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        offset: u64,
        ranges: Vec<(u64, u64)>,
    ) -> Result<(), SourceError>;
    /// Reports an attempt `worker` leased read and acknowledged to the end.
    async fn finish(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        rows: u64,
    ) -> Result<(), SourceError>;
    /// Reports an attempt `worker` leased failed; `for_good` when no attempt
    /// can succeed (the task fails now).
    async fn fail(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        reason: String,
        for_good: bool,
    ) -> Result<FailOutcome, SourceError>;
    /// Gives an attempt back unfinished (the worker is stopping): the task is
    /// leased again at once, from its committed offset.
    async fn hand_back(&self, worker: WorkerId, attempt: AttemptId) -> Result<(), SourceError>;
    /// Records that the job's trainers keep checkpoints.
    async fn declare_checkpoints(&self, worker: WorkerId) -> Result<(), SourceError>;
    /// Records complete checkpoint `id`, holding `pieces` besides what the
    /// earlier ones held.
    async fn checkpoint(
        &self,
        worker: WorkerId,
        id: String,
        pieces: Vec<CutPiece>,
    ) -> Result<(), SourceError>;
    /// Whether the worker reports the rows its trainers hold outside any
    /// checkpoint ([`TaskSource::unsaved`]): a remote master serves them
    /// again if the worker goes silent. The embedded queue restores the
    /// whole job's checkpoint instead.
    fn keeps_unsaved(&self) -> bool {
        false
    }
    /// Reports the rows the worker's trainers acknowledged that are in none
    /// of its complete checkpoints (sent before the commits they cover).
    async fn unsaved(&self, _worker: WorkerId, _pieces: Vec<CutPiece>) -> Result<(), SourceError> {
        Ok(())
    }
    /// Reports, as the worker's trainers ended their streams, the rows they
    /// hold in no checkpoint (no `checkpoint ID` after their last batch):
    /// the master serves them once more, and fails the job when rows of an
    /// earlier such end are left in no checkpoint again.
    async fn unsaved_at_end(
        &self,
        _worker: WorkerId,
        _pieces: Vec<CutPiece>,
    ) -> Result<(), SourceError> {
        Ok(())
    }
    /// Counts for progress.
    async fn status(&self) -> Result<QueueStatus, SourceError>;
    /// The job's splits from index `from` on: a followed job adds splits
    /// while it runs, and a lease may name one the worker has not seen.
    async fn splits_from(&self, _from: usize) -> Result<Vec<connectors::Split>, SourceError> {
        Ok(Vec::new())
    }
    /// How epoch `epoch` hands out its splits, where the asking worker is
    /// the job's only one (the embedded queue of `sluice train`): its
    /// windows of `--shuffle global` then follow the epoch's order whatever
    /// order the leases come in, and a resumed run reads again the splits
    /// done before it. `None` where workers share the epoch (a master's).
    async fn epoch_view(&self, _epoch: Epoch) -> Result<Option<EpochView>, SourceError> {
        Ok(None)
    }
}

/// A master whose queue is at hand (the embedded queue of `sluice train`, a
/// simulation's): every request of a worker is an [`Operation`] applied to
/// it, and such a master is a [`TaskSource`] by what it says here.
#[async_trait::async_trait]
pub trait AppliesOps: Send + Sync {
    /// Applies `op`: the queue's answer, or why none came.
    async fn apply<O: Operation>(&self, op: O) -> Result<O::Output, SourceError>;
    /// Counts for progress.
    fn queue_status(&self) -> QueueStatus;
    /// The name the worker registers under (`None`: none).
    fn registers_as(&self) -> Option<String> {
        None
    }
    /// See [`TaskSource::halt`].
    fn halt_flag(&self) -> Option<Halt> {
        None
    }
    /// Whether it keeps the rows the worker's trainers hold in no
    /// checkpoint, as a remote master does: checkpoints are then the
    /// worker's, else the whole job's (see [`TaskSource::keeps_unsaved`]).
    fn keeps_unsaved_rows(&self) -> bool {
        false
    }
    /// See [`TaskSource::splits_from`].
    fn new_splits(&self, _from: usize) -> Vec<connectors::Split> {
        Vec::new()
    }
    /// See [`TaskSource::epoch_view`].
    fn view_of(&self, _epoch: Epoch) -> Option<EpochView> {
        None
    }
}

/// Records a checkpoint record at a master at hand: the declaration (no
/// `id`, no `unsaved`), complete checkpoint `id`, or the rows the trainers
/// hold in none (`unsaved`, and whether their streams ended). The worker's
/// own where the master keeps unsaved rows, else the whole job's.
async fn record<A: AppliesOps>(
    source: &A,
    worker: WorkerId,
    id: Option<String>,
    pieces: Vec<CutPiece>,
    unsaved: Option<(Vec<CutPiece>, bool)>,
) -> Result<(), SourceError> {
    if !source.keeps_unsaved_rows() {
        if unsaved.is_some() {
            return Ok(());
        }
        return source.apply(ops::JobCheckpoint { id, pieces }).await;
    }
    let (unsaved, ended) = match unsaved {
        Some((rows, ended)) => (Some(rows), ended),
        None => (None, false),
    };
    let checkpoint = ops::Checkpoint {
        worker,
        id,
        pieces,
        unsaved,
        ended,
    };
    source.apply(checkpoint).await
}

#[async_trait::async_trait]
impl<A: AppliesOps> TaskSource for A {
    fn halt(&self) -> Option<Halt> {
        self.halt_flag()
    }

    async fn register(&self) -> Result<WorkerId, SourceError> {
        let name = self.registers_as();
        self.apply(ops::Register { secret: None, name }).await
    }

    async fn lease(&self, worker: WorkerId, max: usize) -> Result<LeaseReply, SourceError> {
        self.apply(ops::Lease { worker, max }).await
    }

    async fn take_ranks(
        &self,
        worker: WorkerId,
        devices: u32,
    ) -> Result<crate::queue::RanksReply, SourceError> {
        self.apply(ops::TakeRanks { worker, devices }).await
    }

    async fn heartbeat(
        &self,
        worker: WorkerId,
        _held: &[AttemptId],
    ) -> Result<Vec<AttemptId>, SourceError> {
        let beat = ops::Heartbeat {
            worker,
            rows: 0,
            held: None,
            cached: None,
            cache: None,
        };
        self.apply(beat).await.map(|r| r.lost)
    }

    async fn commit(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        offset: u64,
        ranges: Vec<(u64, u64)>,
    ) -> Result<(), SourceError> {
        let commit = ops::Commit {
            worker,
            attempt,
            offset,
            ranges,
        };
        self.apply(commit).await
    }

    async fn finish(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        rows: u64,
    ) -> Result<(), SourceError> {
        let finish = ops::Finish {
            worker,
            attempt,
            rows,
        };
        self.apply(finish).await
    }

    async fn fail(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        reason: String,
        for_good: bool,
    ) -> Result<FailOutcome, SourceError> {
        let fail = ops::Fail {
            worker,
            attempt,
            reason,
            for_good,
        };
        self.apply(fail).await
    }

    async fn hand_back(&self, worker: WorkerId, attempt: AttemptId) -> Result<(), SourceError> {
        self.apply(ops::HandBack { worker, attempt }).await
    }

    async fn declare_checkpoints(&self, worker: WorkerId) -> Result<(), SourceError> {
        record(self, worker, None, Vec::new(), None).await
    }

    async fn checkpoint(
        &self,
        worker: WorkerId,
        id: String,
        pieces: Vec<CutPiece>,
    ) -> Result<(), SourceError> {
        record(self, worker, Some(id), pieces, None).await
    }

    fn keeps_unsaved(&self) -> bool {
        self.keeps_unsaved_rows()
    }

    async fn unsaved(&self, worker: WorkerId, pieces: Vec<CutPiece>) -> Result<(), SourceError> {
        let unsaved = Some((pieces, false));
        record(self, worker, None, Vec::new(), unsaved).await
    }

    async fn unsaved_at_end(
        &self,
        worker: WorkerId,
        pieces: Vec<CutPiece>,
    ) -> Result<(), SourceError> {
        let unsaved = Some((pieces, true));
        record(self, worker, None, Vec::new(), unsaved).await
    }

    async fn status(&self) -> Result<QueueStatus, SourceError> {
        Ok(self.queue_status())
    }

    async fn splits_from(&self, from: usize) -> Result<Vec<connectors::Split>, SourceError> {
        Ok(self.new_splits(from))
    }

    async fn epoch_view(&self, epoch: Epoch) -> Result<Option<EpochView>, SourceError> {
        Ok(self.view_of(epoch))
    }
}
