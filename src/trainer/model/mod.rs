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

pub use allreduce::{AllReduce, AllReduceError, Reduce};
pub use features::{FeatureLayout, Rows};
pub use linear::{LinearKind, DEFAULT_LEARNING_RATE};
pub use none::{NoneFactory, NoneTrainer};
pub use parallel::{LinearFactory, LinearTrainer};
pub use shared_model::{checkpoint_path, ModelCheckpoints, DEFAULT_CHECKPOINT_EVERY};
