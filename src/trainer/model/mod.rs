//! The built-in learners: `--model none` counts rows; `--model linear|logistic`
//! trains one linear model shared by the device threads, with synchronous data
//! parallelism through an all-reduce, and saves checkpoints of it.

mod allreduce;
mod features;
mod linear;
mod none;
mod parallel;
mod scaling;
mod shared_model;

pub use linear::LinearKind;
pub use none::NoneFactory;
pub use parallel::LinearFactory;
pub use shared_model::{ModelCheckpoints, DEFAULT_CHECKPOINT_EVERY};
