//! The master: one per job, holding the task queue behind an HTTP API with a
//! journal, a status page and Prometheus metrics.

pub mod commit;
pub mod dir_lock;
pub mod dir_log;
pub mod follow;
pub mod http;
pub mod identity;
pub mod inotify;
pub mod journal;
pub mod listen;
pub mod local;
pub mod metrics;
pub mod object_log;
pub mod page;
pub mod serve;
pub mod state;
pub mod timing;
pub mod tls;

pub use local::LocalQueue;
