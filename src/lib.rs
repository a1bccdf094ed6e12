//! sluice: hands Spark, Hive and MapReduce output to elastic training workers.
//!
//! The [`queue`] leases pieces of a dataset (found by the `connectors`
//! crate) to [`worker`]s, which feed Arrow record batches to [`trainer`]s on
//! device threads; [`job`] runs the whole thing on one machine.

// Library code says why each `unsafe` block is sound and never unwraps (tests may).
#![warn(clippy::undocumented_unsafe_blocks, clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod catalog;
pub mod cli;
pub mod config;
pub mod epoch;
pub mod exit;
pub mod exit_codes;
pub mod follow;
pub mod harden;
pub mod host;
pub mod job;
pub mod logging;
pub mod master;
pub mod mix;
pub mod percent;
pub mod plan;
pub mod protocol;
pub mod queue;
pub mod schedule;
pub mod state;
pub mod sys;
pub mod trainer;
pub mod wall;
pub mod worker;
