//! The master's HTTP front: one per job, serving the job's state (see
//! [`crate::state`]) to workers over an HTTP API, with TLS, a status page and
//! Prometheus metrics.

pub mod http;
pub mod listen;
pub mod metrics;
pub mod page;
pub mod serve;
pub mod tls;
