//! Jobs: a whole training run from a dataset URL to a summary.

pub mod progress;
pub mod summary;
pub mod train;
pub mod wait;
pub mod worker;
