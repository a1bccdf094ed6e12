//! The process exit codes of `sluice`: one meaning each, so scripts and
//! schedulers can tell a failed run from a refused or mistyped one.
//!
//! Every code is decided here. An error says through [`ExitCode`] only what
//! it decides itself; [`decided`] asks each error of a cause chain in turn,
//! outermost first, and the first that decides gives the code ([`of_chain`]);
//! a chain where none decides exits [`ERROR`]. A wrapper that names what was
//! being done leaves the decision to the error it wraps, which its `source()`
//! hands on; one that shows the error it wraps as itself (`transparent`, which
//! hands on only that error's own causes) asks it ([`decided`]).
//!
//! This module sits above the modules whose errors it reads (`job`,
//! `master`, `schedule`, `config`, `catalog`, `trainer`, `protocol`): only
//! `cli` and `main` import it. The codes themselves are in
//! [`crate::exit_codes`], a leaf that any module may name (a default of an
//! option, say), re-exported here.

use std::error::Error;

use crate::catalog::CatalogError;
use crate::config::{JobFileError, OptionError};
use crate::follow::FollowError;
use crate::job::train::TrainError;
use crate::job::wait::WaitError;
use crate::job::worker::WorkerError;
use crate::master::serve::{MasterError, StopSignal};
use crate::plan::PlanError;
use crate::protocol::select::SelectError;
use crate::schedule::lock::LockError;
use crate::schedule::RunError;
use crate::state::commit::CommitError;
use crate::state::dir_lock::DirLockError;
use crate::state::journal::JournalError;
use crate::state::master_state::StateError;
use crate::trainer::TrainerError;

pub use crate::exit_codes::{DONE, ERROR, INTERRUPTED, USAGE};
pub(crate) use crate::exit_codes::{HELD, TABLE, TASKS_FAILED};

/// The exit code an error decides by itself.
pub trait ExitCode {
    /// `Some(code)` where this error decides the exit code of the command
    /// it stopped; `None` where the error it wraps (its `source()`) decides,
    /// or, with nothing further, [`ERROR`].
    fn exit_code(&self) -> Option<u8>;
}

/// A command line that asks for something impossible, found once it was parsed
/// (a bad value, a missing companion flag, a column named twice): the command
/// exits with [`USAGE`] instead of [`ERROR`].
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct UsageError {
    /// What is wrong, on one line.
    pub message: String,
}

/// The code of a job that ran to its end: [`TASKS_FAILED`] when tasks failed,
/// each named on stderr (`failed task: FILE (epoch N): REASON`), else [`DONE`].
/// `sluice train`, `sluice master` and `sluice run` end through it.
pub fn of_failed_tasks<T: std::fmt::Display>(failed: &[T]) -> u8 {
    for task in failed {
        crate::logging::result_warning(format!("failed task: {task}"));
    }
    if failed.is_empty() {
        DONE
    } else {
        TASKS_FAILED
    }
}

/// The exit code of a command stopped by an error whose causes, outermost
/// first, are `chain`: the first that decides, else [`ERROR`].
pub fn of_chain<'a>(chain: impl IntoIterator<Item = &'a (dyn Error + 'static)>) -> u8 {
    chain.into_iter().find_map(decided).unwrap_or(ERROR)
}

/// The exit code of a command stopped by `error`, walking its `source()`s.
pub fn of_error(error: &(dyn Error + 'static)) -> u8 {
    of_chain(std::iter::successors(Some(error), |&e| e.source()))
}

/// The exit code one error of a chain decides by itself ([`ExitCode`]), if
/// it is of a type that decides any.
pub fn decided(cause: &(dyn Error + 'static)) -> Option<u8> {
    macro_rules! ask {
        ($($t:ty),* $(,)?) => {
            $(
                if let Some(e) = cause.downcast_ref::<$t>() {
                    return e.exit_code();
                }
            )*
        };
    }
    ask!(
        UsageError,
        OptionError,
        JobFileError,
        CatalogError,
        connectors::Error,
        TrainerError,
        SelectError,
        crate::mix::MixError,
        PlanError,
        TrainError,
        RunError,
        MasterError,
        WorkerError,
        StateError,
        CommitError,
        JournalError,
        DirLockError,
        LockError,
        WaitError,
        FollowError,
    );
    None
}

/// The exit code of a master that `signal` stopped before the job was over:
/// [`INTERRUPTED`], for SIGTERM as for SIGINT.
pub fn stopped_by(signal: StopSignal) -> u8 {
    match signal {
        StopSignal::Term | StopSignal::Int => INTERRUPTED,
    }
}

/// `code` where `decides`, else `None`.
fn when(decides: bool, code: u8) -> Option<u8> {
    decides.then_some(code)
}

impl ExitCode for UsageError {
    fn exit_code(&self) -> Option<u8> {
        Some(USAGE)
    }
}

/// Sources whose columns disagree, or that `--epoch-rows` cannot count: the
/// same command fails the same way.
impl ExitCode for crate::mix::MixError {
    fn exit_code(&self) -> Option<u8> {
        match self {
            crate::mix::MixError::Plan { source, .. }
            | crate::mix::MixError::Open { source, .. } => source.exit_code(),
            _ => Some(USAGE),
        }
    }
}

impl ExitCode for OptionError {
    fn exit_code(&self) -> Option<u8> {
        Some(USAGE)
    }
}

/// A job file that cannot be read is an error; one that says something
/// wrong is the user's.
impl ExitCode for JobFileError {
    fn exit_code(&self) -> Option<u8> {
        when(!matches!(self, JobFileError::Read { .. }), USAGE)
    }
}

/// A wrong name or catalog URI is the user's; a catalog that cannot answer
/// leaves it to its cause.
impl ExitCode for CatalogError {
    fn exit_code(&self) -> Option<u8> {
        when(self.is_usage(), USAGE)
    }
}

/// A URL that cannot be read as one, a column the dataset does not have, a
/// bad reading option or filter: running again as is cannot help.
impl ExitCode for connectors::Error {
    fn exit_code(&self) -> Option<u8> {
        use connectors::Error as E;
        when(
            matches!(
                self,
                E::InvalidUrl { .. }
                    | E::UnknownColumn { .. }
                    | E::InvalidOption { .. }
                    | E::InvalidSetting { .. }
                    | E::Filter(_)
                    | E::RowFilter(_)
            ),
            USAGE,
        )
    }
}

/// A label or feature the dataset does not have, or cannot read as numbers.
impl ExitCode for TrainerError {
    fn exit_code(&self) -> Option<u8> {
        when(
            matches!(
                self,
                TrainerError::UnknownColumn { .. } | TrainerError::NotNumeric { .. }
            ),
            USAGE,
        )
    }
}

/// A `--split-key` the data read cannot place rows by.
impl ExitCode for SelectError {
    fn exit_code(&self) -> Option<u8> {
        Some(USAGE)
    }
}

/// A signal stopped the run ([`INTERRUPTED`]); everything else is its cause's.
/// Trainers that keep checkpoints ended their streams twice without a final
/// `checkpoint ID`: rows are left in no checkpoint, as failed tasks leave
/// them untrained ([`TASKS_FAILED`]), in `sluice train` and `sluice worker`
/// alike.
impl ExitCode for TrainError {
    fn exit_code(&self) -> Option<u8> {
        use crate::worker::pipeline::PipelineError;
        match self {
            TrainError::Stopped { .. } => Some(INTERRUPTED),
            TrainError::Pipeline {
                source: PipelineError::NoFinalCheckpoint { .. },
            } => Some(TASKS_FAILED),
            TrainError::Connector { source, .. } => decided(source.as_ref()),
            TrainError::Plan(e) => decided(e.as_ref()),
            TrainError::Wait { source } => decided(source),
            TrainError::Trainer { source, .. } => decided(source),
            TrainError::State { source, .. } => decided(source.as_ref()),
            TrainError::Pipeline { source } => decided(source),
            _ => None,
        }
    }
}

/// A job that cannot be planned: its causes decide.
impl ExitCode for PlanError {
    fn exit_code(&self) -> Option<u8> {
        match self {
            PlanError::Connector { source, .. } => decided(source.as_ref()),
            PlanError::Options { source } => decided(source),
            PlanError::Select { source } => decided(source),
            PlanError::Follow { source, .. } => decided(source),
            PlanError::Mix { source } => decided(source),
            PlanError::World { .. } => Some(USAGE),
            PlanError::Unfinished { .. } | PlanError::Empty { .. } | PlanError::Filtered { .. } => {
                None
            }
        }
    }
}

/// `sluice run`: a source pattern that cannot be used is the user's; a table
/// rewrite under `on-rewrite = "fail"` leaves data untrained, as failed
/// tasks do. The boxed errors are asked here: a box hides their type from
/// the chain (their own causes follow in it).
impl ExitCode for RunError {
    fn exit_code(&self) -> Option<u8> {
        match self {
            RunError::Source { .. } => Some(USAGE),
            RunError::Rewritten { .. } => Some(TASKS_FAILED),
            RunError::Connector { source, .. } => source.exit_code(),
            RunError::Train { source, .. } => source.exit_code(),
            RunError::Lock { source, .. } => source.exit_code(),
            _ => None,
        }
    }
}

/// The master's errors are their causes'. A failed journal is told in the
/// master's own message (its advice comes after it), so it is asked here.
impl ExitCode for MasterError {
    fn exit_code(&self) -> Option<u8> {
        match self {
            MasterError::Plan(e) => decided(e.as_ref()),
            MasterError::State { source, .. } => decided(source.as_ref()),
            MasterError::Journal(e) => Some(of_error(e)),
            MasterError::NoFinalCheckpoint { .. } => Some(TASKS_FAILED),
            _ => None,
        }
    }
}

/// A worker's errors are their causes', except trainers that keep
/// checkpoints and end their streams twice without a final one
/// ([`TASKS_FAILED`], as in `sluice train`).
impl ExitCode for WorkerError {
    fn exit_code(&self) -> Option<u8> {
        use crate::worker::pipeline::PipelineError;
        match self {
            WorkerError::Remote { .. } => None,
            WorkerError::Pipeline {
                source: PipelineError::NoFinalCheckpoint { .. },
            } => Some(TASKS_FAILED),
            WorkerError::Pipeline { .. } => None,
            WorkerError::Train { source, .. } => decided(source),
            WorkerError::Connector { source } => decided(source.as_ref()),
            WorkerError::World { .. } => Some(USAGE),
        }
    }
}

/// A state that another process holds ([`HELD`]), or whose journal another
/// master wrote; any other state that cannot be used is an [`ERROR`],
/// whatever the cause (a state URL that cannot be opened included).
impl ExitCode for StateError {
    fn exit_code(&self) -> Option<u8> {
        match self {
            StateError::Locked(e) => e.exit_code(),
            StateError::Journal { source, .. } => source.exit_code(),
            _ => None,
        }
        .or(Some(ERROR))
    }
}

/// The journal's own error is asked here: the `Arc` hides its type from the
/// chain.
impl ExitCode for CommitError {
    fn exit_code(&self) -> Option<u8> {
        match self {
            CommitError::Journal { source } => source.exit_code(),
            CommitError::Panicked => None,
        }
    }
}

/// Another master wrote the record this one meant to write.
impl ExitCode for JournalError {
    fn exit_code(&self) -> Option<u8> {
        when(matches!(self, JournalError::Taken { .. }), HELD)
    }
}

/// Another live process holds the state directory.
impl ExitCode for DirLockError {
    fn exit_code(&self) -> Option<u8> {
        when(matches!(self, DirLockError::Held { .. }), HELD)
    }
}

/// Another run of the job holds its lock, or took it over.
impl ExitCode for LockError {
    fn exit_code(&self) -> Option<u8> {
        when(
            matches!(self, LockError::Held { .. } | LockError::Lost { .. }),
            HELD,
        )
    }
}

/// Waiting for `_SUCCESS` decides nothing itself: a listing that failed
/// leaves it to its cause (asked here: the box hides its type).
impl ExitCode for WaitError {
    fn exit_code(&self) -> Option<u8> {
        match self {
            WaitError::Connector { source, .. } => decided(source.as_ref()),
            _ => None,
        }
    }
}

/// Following a source decides nothing itself: a source that cannot be read
/// leaves it to its cause (asked here: the box hides its type).
impl ExitCode for FollowError {
    fn exit_code(&self) -> Option<u8> {
        match self {
            FollowError::Connector { source, .. } => decided(source.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn held_dir() -> StateError {
        StateError::Locked(DirLockError::Held {
            dir: "/state".into(),
            holder: "pid 7 on host".into(),
        })
    }

    fn invalid_url() -> connectors::Error {
        connectors::Error::InvalidUrl {
            url: "foo://x".into(),
            reason: "unknown scheme `foo`".into(),
        }
    }

    fn stopped() -> TrainError {
        TrainError::Stopped {
            rows: 3,
            resume: String::new(),
        }
    }

    /// `sluice run` stopped by `e` while it trained.
    fn trained(e: TrainError) -> RunError {
        RunError::Train {
            what: "what is new in /data/dt=*".into(),
            source: Box::new(e),
        }
    }

    fn taken() -> JournalError {
        JournalError::Taken {
            location: "s3://b/state/journal-1".into(),
        }
    }

    #[test]
    fn a_lock_held_inside_a_state_error_is_held_however_deep() {
        assert_eq!(of_error(&held_dir()), HELD);
        assert_eq!(of_error(&TrainError::state("open")(held_dir())), HELD);
        let master = MasterError::State {
            doing: "open",
            source: Box::new(held_dir()),
        };
        assert_eq!(of_error(&master), HELD);
        let run = trained(TrainError::state("open")(held_dir()));
        assert_eq!(of_error(&run), HELD);
        let worker = WorkerError::Train {
            doing: "start training the job",
            source: TrainError::state("open")(held_dir()),
        };
        assert_eq!(of_error(&worker), HELD);
    }

    #[test]
    fn a_journal_another_master_wrote_is_held() {
        let state = StateError::Journal {
            state: "s3://b/state".into(),
            doing: "replay its journal",
            source: Box::new(taken()),
        };
        assert_eq!(of_error(&state), HELD);
        let commit = CommitError::Journal {
            source: Arc::new(taken()),
        };
        assert_eq!(of_error(&MasterError::Journal(commit)), HELD);
        let failed = CommitError::Journal {
            source: Arc::new(JournalError::Io {
                path: "/state/journal".into(),
                cause: std::io::Error::other("no space left on device"),
            }),
        };
        assert_eq!(of_error(&MasterError::Journal(failed)), ERROR);
        assert_eq!(of_error(&CommitError::Panicked), ERROR);
    }

    #[test]
    fn a_train_error_inside_a_run_error_decides() {
        assert_eq!(of_error(&stopped()), INTERRUPTED);
        assert_eq!(of_error(&trained(stopped())), INTERRUPTED);
        let column = TrainError::trainer("set the trainer up for the columns read")(
            TrainerError::UnknownColumn {
                column: "labl".into(),
                available: "label".into(),
            },
        );
        assert_eq!(of_error(&trained(column)), USAGE);
        let url = TrainError::read("open the source")(invalid_url());
        assert_eq!(of_error(&trained(url)), USAGE);
        let missing = TrainError::read("open the source")(connectors::Error::NotFound {
            path: "/data".into(),
        });
        assert_eq!(of_error(&trained(missing)), ERROR);
    }

    #[test]
    fn a_scheduled_run_decides_its_own_codes() {
        let rewritten = RunError::Rewritten {
            kind: "delta",
            source_url: "/t".into(),
            noun: "version",
            since: 3,
            commits: "version 4 (DELETE)".into(),
        };
        assert_eq!(of_error(&rewritten), TASKS_FAILED);
        let source = RunError::Source {
            source_url: "/x/*/*".into(),
            reason: "two stars".into(),
        };
        assert_eq!(of_error(&source), USAGE);
        assert_eq!(
            of_error(&RunError::Connector {
                doing: "open the source".into(),
                source: Box::new(invalid_url()),
            }),
            USAGE
        );
        let held = LockError::Held {
            path: "/state/lock.json".into(),
            holder: Box::new(crate::schedule::lock::Holder {
                run: "r1".into(),
                pid: 7,
                host: "h".into(),
                acquired_at: "2026-01-01T00:00:00Z".into(),
                expires_in: 60,
            }),
        };
        assert_eq!(
            of_error(&RunError::Lock {
                doing: "take the job's lock",
                source: held,
            }),
            HELD
        );
        let lost = LockError::Lost {
            path: "/state/lock.json".into(),
            run: "r2".into(),
        };
        assert_eq!(
            of_error(&RunError::Lock {
                doing: "record the run",
                source: lost,
            }),
            HELD
        );
    }

    #[test]
    fn usage_errors_are_found_through_every_wrapper() {
        let option = || crate::config::OptionError::new("epochs", "must be at least 1");
        assert_eq!(
            of_error(&TrainError::from(PlanError::from(option()))),
            USAGE
        );
        assert_eq!(
            of_error(&MasterError::from(PlanError::from(option()))),
            USAGE
        );
        assert_eq!(
            of_error(&MasterError::from(PlanError::read("open the source")(
                invalid_url()
            ))),
            USAGE
        );
        let worker = WorkerError::Train {
            doing: "start training the job",
            source: TrainError::read("open the source")(invalid_url()),
        };
        assert_eq!(of_error(&worker), USAGE);
        let select = SelectError::UnknownKey {
            column: "user".into(),
            available: "a, b".into(),
        };
        assert_eq!(of_error(&TrainError::from(PlanError::from(select))), USAGE);
        let waited = TrainError::Wait {
            source: WaitError::Connector {
                url: "foo://x".into(),
                source: Box::new(invalid_url()),
            },
        };
        assert_eq!(of_error(&waited), USAGE);
        let missing = JobFileError::Missing {
            path: "job.toml".into(),
            key: "source",
        };
        assert_eq!(of_error(&missing), USAGE);
        let unread = JobFileError::Read {
            path: "job.toml".into(),
            cause: std::io::Error::other("permission denied"),
        };
        assert_eq!(of_error(&unread), ERROR);
    }

    #[test]
    fn a_state_that_cannot_be_used_is_an_error_whatever_the_cause() {
        let url = StateError::Location {
            url: "foo://x".into(),
            source: Box::new(invalid_url()),
        };
        assert_eq!(of_error(&url), ERROR);
        let master = MasterError::State {
            doing: "open",
            source: Box::new(url),
        };
        assert_eq!(of_error(&master), ERROR);
    }

    #[test]
    fn context_added_at_the_command_line_keeps_the_code() {
        let e = anyhow::Error::new(trained(stopped())).context("sluice run job.toml");
        assert_eq!(of_chain(e.chain()), INTERRUPTED);
        let usage = anyhow::Error::new(UsageError {
            message: "--grace needs --state".into(),
        });
        assert_eq!(of_chain(usage.chain()), USAGE);
        let plain = anyhow::anyhow!("the job file was not loaded");
        assert_eq!(of_chain(plain.chain()), ERROR);
    }

    #[test]
    fn a_stopped_master_exits_with_its_signal() {
        assert_eq!(stopped_by(StopSignal::Term), 130);
        assert_eq!(stopped_by(StopSignal::Int), 130);
    }
}
