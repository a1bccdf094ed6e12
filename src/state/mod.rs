//! The job's durable state: [`MasterState`] (the queue behind its journal),
//! the job's record ([`JobRecord`], `job.json`) and its identity, journals in
//! a directory or on an object store, the directory lock, the group commit,
//! and [`LocalQueue`], the state in-process for `sluice train`. Both the HTTP
//! front (`crate::master`) and `sluice train` build on it; it knows neither.

pub mod commit;
pub mod dir_lock;
pub mod dir_log;
pub mod identity;
pub mod journal;
pub mod local;
pub mod master_state;
pub mod object_log;
pub mod timing;

pub use local::LocalQueue;
pub use master_state::{JobRecord, MasterState, StateError, StateLocation, STATE_FORMAT};
