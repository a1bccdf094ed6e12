//! Jobs: a whole training run from a dataset URL to a summary.

pub(crate) mod progress;
pub(crate) mod summary;
pub mod train;
pub(crate) mod wait;
pub(crate) mod worker;
