//! `--exec CMD` trainers: external processes fed an Arrow IPC stream, supervised
//! (restarted from their checkpoints, timed out, killed with everything they
//! started) and heard through their ack lines. [`protocol`] names every variable,
//! descriptor, line and metadata key of the exchange.

mod child;
mod factory;
pub mod hide;
mod ipc;
mod line;
mod lockstep;
pub mod protocol;
mod shm;
mod watcher;

pub use child::{die_with_parent, Attach};
pub use factory::{ExecFactory, DEFAULT_MAX_RESTARTS, DEFAULT_TRAINER_TIMEOUT};
pub use watcher::{run_watchers_as, watch_if_asked};
