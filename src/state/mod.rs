//! The job's durable state: [`MasterState`] (the queue behind its journal),
//! the job's record ([`JobRecord`], `job.json`) and its identity, journals in
//! a directory or on an object store, the directory lock, the group commit,
//! and [`LocalQueue`], the state in-process for `sluice train`. Both the HTTP
//! front (`crate::master`) and `sluice train` build on it; it knows neither.

pub(crate) mod commit;
pub(crate) mod dir_lock;
pub(crate) mod dir_log;
pub mod identity;
pub(crate) mod journal;
pub(crate) mod local;
pub mod master_state;
pub(crate) mod object_log;
pub(crate) mod timing;

pub(crate) use local::LocalQueue;
pub(crate) use master_state::{JobRecord, MasterState, StateError, StateLocation};
