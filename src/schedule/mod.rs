//! Scheduled incremental jobs (`sluice run JOB.toml`): each run trains one model on
//! the complete partitions of a source that no earlier successful run trained on,
//! and records them in the job's state only once that training succeeded.
//!
//! One file per piece: [`job`] is the job a job file describes (its keys
//! deserialize into the same options as `sluice train`'s flags, see
//! [`crate::config::JobFile`]);
//! [`partitions`] expands the source's partition
//! pattern and tells complete partitions from waiting ones; [`state`] keeps
//! `trained.json`; [`lock`] keeps two runs of one job apart; [`checkpoint`] carries
//! the model from one run to the next; [`run`](mod@run) joins them, and
//! [`mixed`] runs a job of several sources (`[[source]]` tables); both end
//! with what [`common`] holds (a run's context and report, the training and
//! its record).

pub(crate) mod checkpoint;
pub(crate) mod common;
pub(crate) mod error;
pub(crate) mod job;
pub(crate) mod lock;
pub(crate) mod mixed;
pub(crate) mod partitions;
pub(crate) mod run;
pub(crate) mod state;

pub(crate) use common::RunOptions;
pub(crate) use error::RunError;
pub use job::Job;
pub(crate) use run::run;
