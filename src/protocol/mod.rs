//! What the master, its workers and the embedded queue of `sluice train` share:
//! the job's description ([`spec`]), the queue operations a worker asks for
//! ([`ops`]), the HTTP API's requests and replies ([`api`]),
//! and the operations a worker needs from a master ([`source`]).
//!
//! It depends on the queue's types ([`crate::queue`]) and the connectors' plan
//! only, so that the master and the worker depend on it and not on each other.

pub mod api;
pub(crate) mod epoch_rows;
pub(crate) mod follow;
pub mod ops;
pub(crate) mod select;
pub(crate) mod source;
pub mod spec;
mod splitmix;

pub(crate) use source::{Halt, SourceError, TaskSource};
