//! The embedded queue of `sluice train`: the master's state in-process
//! (journaled when it has a state directory), behind the same
//! [`crate::protocol::TaskSource`] trait as a remote master (a master at
//! hand: see [`AppliesOps`]).

use connectors::Report;
use std::sync::{Arc, Mutex};

use super::master_state::MasterState;
use crate::epoch::Epoch;
use crate::protocol::ops::Operation;
use crate::protocol::source::AppliesOps;
use crate::protocol::{Halt, SourceError};
use crate::queue::{Command, EpochView, Queue, QueueStatus, Reply};
use crate::wall::wall_millis;

/// The queue held in this process; every change goes through the master
/// state's journal (in memory, or on disk with `--state`).
/// The first journal write that fails halts it: nothing more is applied
/// or written (a later write that succeeded would leave a gap in the
/// journal), and the pipeline hands no further batch to a trainer.
#[derive(Clone)]
pub struct LocalQueue {
    state: Arc<Mutex<MasterState>>,
    halt: Halt,
}

impl LocalQueue {
    /// Wraps a master state.
    pub fn new(state: MasterState) -> Self {
        LocalQueue {
            state: Arc::new(Mutex::new(state)),
            halt: Halt::default(),
        }
    }

    /// Applies `command`, which is to do `doing` (`lease tasks`), journaled
    /// when the state has a journal; refused once a journal write failed.
    pub fn run(&self, doing: &'static str, command: Command) -> Result<Reply, SourceError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = self.halt.reason() {
            return Err(SourceError::unavailable(doing)(Halted(why.to_string())));
        }
        state.execute(command).map_err(|e| {
            self.halt.set(Report(&e).to_string());
            tracing::debug!(error = %Report(&e), "the journal cannot be written: no further batch is handed to a trainer");
            SourceError::unavailable(doing)(e)
        })
    }

    /// Counts for progress, without waiting.
    pub fn status_now(&self) -> QueueStatus {
        self.snapshot(|q| q.status())
    }

    /// The job's splits now (a followed job's grow while it runs).
    pub fn splits_now(&self) -> Vec<connectors::Split> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.spec.splits.clone()
    }

    /// A followed job's position and lag now (`None` for a job that does
    /// not follow).
    pub fn follow_now(&self) -> Option<crate::protocol::follow::FollowStatus> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.follow_status(wall_millis())
    }

    /// Whether tasks the job took wait to be trained (to do or leased).
    pub fn has_work(&self) -> bool {
        self.snapshot(Queue::has_work)
    }

    /// Goes back to the last complete checkpoint (see [`Queue::rewind`]):
    /// the rows after it are served again. Returns the checkpoint's ID, if
    /// any was complete.
    pub fn rewind(&self) -> Result<Option<String>, SourceError> {
        self.run(
            "go back to the last complete checkpoint",
            Command::Rewind { now: wall_millis() },
        )?;
        Ok(self.snapshot(|q| q.cut().id.clone()))
    }

    /// A look at the queue's state (for summaries).
    pub fn snapshot<T>(&self, f: impl FnOnce(&Queue) -> T) -> T {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(state.queue())
    }
}

/// A request after the journal failed: refused, nothing applied.
#[derive(Debug, thiserror::Error)]
#[error("nothing recorded since the journal failed: {0}")]
struct Halted(String);

/// A reply of the wrong kind: cannot happen, reported rather than panicking.
#[derive(Debug, thiserror::Error)]
#[error("the queue answered a different request")]
struct Mismatch;

#[async_trait::async_trait]
impl AppliesOps for LocalQueue {
    /// Applies `op`, made now.
    async fn apply<O: Operation>(&self, op: O) -> Result<O::Output, SourceError> {
        let reply = self.run(O::DOING, op.command(wall_millis()))?;
        match O::output(reply) {
            Some(result) => result.map_err(SourceError::refused(O::DOING)),
            None => Err(SourceError::unavailable(O::DOING)(Mismatch)),
        }
    }

    fn queue_status(&self) -> QueueStatus {
        self.status_now()
    }

    fn halt_flag(&self) -> Option<Halt> {
        Some(self.halt.clone())
    }

    fn new_splits(&self, from: usize) -> Vec<connectors::Split> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.splits_from(from)
    }

    fn view_of(&self, epoch: Epoch) -> Option<EpochView> {
        self.snapshot(|q| q.epoch_view(epoch))
    }
}
