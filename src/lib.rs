//! sluice: hands Spark, Hive and MapReduce output to elastic training workers.
//!
//! The [`queue`] leases pieces of a dataset (found by the `connectors`
//! crate) to [`worker`]s, which feed Arrow record batches to [`trainer`]s on
//! device threads; [`job`] runs the whole thing on one machine.

// Library code says why each `unsafe` block is sound and never unwraps (tests may).
#![warn(clippy::undocumented_unsafe_blocks, clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]
// Most modules are pub(crate): the docs are read with `cargo doc
// --document-private-items`, where a public item's links to private ones resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod catalog;
pub mod cli;
pub(crate) mod config;
pub(crate) mod epoch;
pub mod exit;
pub(crate) mod exit_codes;
pub(crate) mod follow;
pub mod harden;
pub(crate) mod host;
pub mod job;
pub mod logging;
pub(crate) mod master;
pub(crate) mod mix;
pub(crate) mod percent;
pub(crate) mod plan;
pub mod protocol;
pub mod queue;
pub mod schedule;
pub mod state;
pub(crate) mod sys;
pub mod trainer;
pub(crate) mod wall;
pub(crate) mod worker;
