//! A followed job's follower: made again from the job's state on every
//! start, and run beside the work that trains or serves what it takes.

use std::cell::RefCell;
use std::time::SystemTime;

use connectors::Location;

use super::{PlanError, PlanRequest};
use crate::follow::{Ends, FollowError, Follower, Grow};
use crate::queue::Command;
use crate::state::{MasterState, StateError};

/// A follower, with the number of its next growth and what ends it.
pub type Following = (Follower, u32, Ends);

impl PlanRequest {
    /// A followed job resumed from `state` after a stop (`--idle-exit`,
    /// `--follow-until`, a signal or a crash): its queue, closed by the
    /// options that ended the last run, is opened again, so this run
    /// follows on from where it stopped.
    pub fn reopen(&self, state: &mut MasterState) -> Result<(), StateError> {
        if self.follow.is_some() && !state.queue().is_open() {
            let doing =
                StateError::journal(state.describe(), "reopen the queue of its followed job");
            state
                .execute(Command::Reopen {
                    now: crate::wall::wall_millis(),
                })
                .map_err(doing)?;
        }
        Ok(())
    }

    /// The follower of a followed job whose queue is open, from where its
    /// `state` stands in each source; `location` opens the source of a job
    /// with one. `started`: when the job started (`--follow-until` counts
    /// from then). `None` for a job that follows nothing (any more).
    pub async fn follower(
        &self,
        state: &MasterState,
        location: impl FnOnce() -> Result<Location, connectors::Error>,
        started: SystemTime,
    ) -> Result<Option<Following>, PlanError> {
        let (Some(follow), Some(_)) = (self.follow, &state.spec.follow) else {
            return Ok(None);
        };
        if !state.queue().is_open() {
            return Ok(None);
        }
        let following = match &self.mix {
            Some(mix) => Follower::resume_several(state, mix, &self.dataset, follow, started)
                .await
                .map_err(PlanError::read("resume following the sources"))?,
            None => Follower::resume(
                state,
                location().map_err(PlanError::read("open the source"))?,
                self.dataset.clone(),
                follow,
                started,
                self.table.clone(),
            )
            .await
            .map_err(PlanError::read("resume following the source"))?,
        };
        Ok(Some(following))
    }
}

/// How following beside a job's work ended, if it did.
#[derive(Default)]
pub struct Followed(RefCell<Option<Result<(), FollowError>>>);

impl Followed {
    /// Follows with `following` (when there is a follower), growing the
    /// job through `grow`, and keeps how it ended; `on_error` is told a
    /// failure as it happens. Never resolves: run beside the job's work,
    /// and dropped (not closed: a resumed job follows on) when the work
    /// ends first.
    pub async fn follow(
        &self,
        following: Option<Following>,
        grow: &dyn Grow,
        on_error: impl FnOnce(&FollowError),
    ) -> std::convert::Infallible {
        if let Some((follower, next, ends)) = following {
            let result = crate::follow::run(follower, grow, next, ends).await;
            if let Err(e) = &result {
                on_error(e);
            }
            *self.0.borrow_mut() = Some(result);
        }
        std::future::pending().await
    }

    /// The failure that stopped following, if one did.
    pub fn failed(self) -> Result<(), PlanError> {
        match self.0.into_inner() {
            Some(Err(e)) => Err(PlanError::follow("go on following the source")(e)),
            _ => Ok(()),
        }
    }
}
