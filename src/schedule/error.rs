//! What stops a scheduled run.

use super::lock::LockError;
use super::state::StoreError;
use crate::job::train::TrainError;

/// Errors of `sluice run`.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Another run of the job holds the lock, or the lock could not be handled.
    #[error("cannot {doing}")]
    Lock {
        /// What was being done (`take the job's lock`).
        doing: &'static str,
        /// Why the lock refused, naming it.
        #[source]
        source: LockError,
    },
    /// The state location could not be read or written.
    #[error("cannot {doing}")]
    State {
        /// What was being done (`read what earlier runs trained`).
        doing: &'static str,
        /// The store's failure, naming the object.
        #[source]
        source: StoreError,
    },
    /// The source pattern is not usable.
    #[error("invalid source {source_url}: {reason}")]
    Source {
        /// The source as written in the job file.
        source_url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The source matches no directory (a typo, or the data was never written),
    /// and the job does not allow that.
    #[error("source {source_url} matches nothing (no such directory, or it is empty); pass --allow-empty, or set `allow-empty = true` in the job file, if that is expected")]
    NoMatch {
        /// The source as written in the job file.
        source_url: String,
    },
    /// What a run would train holds no data rows, and the job does not allow that.
    #[error("{what} is empty output: no data rows (pass --allow-empty, or set `allow-empty = true` in the job file, if that is expected)")]
    Empty {
        /// The partitions or the table version, named.
        what: String,
    },
    /// A table commit after the last trained version removed or rewrote data,
    /// and the job's `on-rewrite` policy is `fail` (the default).
    #[error("the {kind} table {source_url} was rewritten after {noun} {since}: {commits}; nothing was trained or recorded; set on-rewrite = \"retrain\" (train the whole table again) or on-rewrite = \"skip\" (train only the appends; the rows the rewrites added are never trained) in the job file")]
    Rewritten {
        /// `delta` or `iceberg`.
        kind: &'static str,
        /// The source.
        source_url: String,
        /// What the table calls a version (`version`, `snapshot`).
        noun: &'static str,
        /// The version trained last.
        since: i64,
        /// The rewriting commits, as `version N (OPERATION)` (or `snapshot N`).
        commits: String,
    },
    /// Listing or reading the source failed.
    #[error("cannot {doing}")]
    Connector {
        /// What was being done (`list the new partitions of SOURCE`).
        doing: String,
        /// The failure, naming the path (boxed: it is large).
        #[source]
        source: Box<connectors::Error>,
    },
    /// Training failed before it finished.
    #[error("cannot train {what}")]
    Train {
        /// What was being trained (`the new partitions of SOURCE`).
        what: String,
        /// Why the training stopped (boxed: it is large).
        #[source]
        source: Box<TrainError>,
    },
    /// A local working file could not be written or read.
    #[error("cannot use {path}: {cause}")]
    Local {
        /// The local path.
        path: String,
        /// The failure.
        cause: std::io::Error,
    },
}

impl RunError {
    /// The error of the lock, which refused while `doing`, for `map_err`.
    pub(super) fn lock(doing: &'static str) -> impl FnOnce(LockError) -> RunError {
        move |source| RunError::Lock { doing, source }
    }

    /// The error of the state store, which failed while `doing`, for `map_err`.
    pub(super) fn state(doing: &'static str) -> impl FnOnce(StoreError) -> RunError {
        move |source| RunError::State { doing, source }
    }

    /// The error of the source, which failed while `doing`, for `map_err`.
    pub(super) fn read(doing: impl Into<String>) -> impl FnOnce(connectors::Error) -> RunError {
        let doing = doing.into();
        move |source| RunError::Connector {
            doing,
            source: Box::new(source),
        }
    }

    /// The error of training `what`, for `map_err`.
    pub(super) fn train(what: impl Into<String>) -> impl FnOnce(TrainError) -> RunError {
        let what = what.into();
        move |source| RunError::Train {
            what,
            source: Box::new(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use connectors::Report;

    use super::*;
    use crate::plan::PlanError;
    use crate::state::journal::JournalError;
    use crate::state::master_state::StateError;

    /// Each wrapper says what was being done, its cause follows once, and
    /// a foreign cause (I/O) ends the line inside the message that met it.
    #[test]
    fn a_chain_reads_as_one_line_saying_each_step_once() {
        let journal = JournalError::Io {
            path: "/s/journal".into(),
            cause: std::io::Error::other("disk on fire"),
        };
        let state = StateError::journal("/s", "replay its journal")(journal);
        let run = RunError::train("what is new in /data/dt=*")(TrainError::state("open")(state));
        assert_eq!(
            Report(&run).to_string(),
            "cannot train what is new in /data/dt=*: cannot open the job's state: \
             state /s: cannot replay its journal: journal /s/journal: disk on fire"
        );
    }

    /// A pass-through shows the error it wraps as itself, once.
    #[test]
    fn a_plan_error_shows_through_a_training_error_once() {
        let unknown = connectors::Error::UnknownColumn {
            column: "nope".into(),
            path: "/d".into(),
            available: "a, b".into(),
        };
        let train = TrainError::from(PlanError::read("plan the read")(unknown));
        assert_eq!(
            Report(&train).to_string(),
            "cannot plan the read: unknown column `nope` in /d; columns are: a, b"
        );
    }
}
