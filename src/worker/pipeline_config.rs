//! What one worker pipeline is set to do ([`PipelineConfig`]) and how it is
//! asked to stop early ([`Stop`]): what the pipeline ([`super::pipeline`])
//! and the count of an epoch's steps ([`super::epoch_steps`]) both read.

use std::sync::Arc;
use std::time::Duration;

/// Settings of one worker pipeline.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Rows per batch handed to a trainer.
    pub batch_size: usize,
    /// Most bytes per batch handed to a trainer, if bounded.
    pub batch_bytes: Option<u64>,
    /// Device threads.
    pub devices: usize,
    /// Tasks leased and read ahead.
    pub prefetch: usize,
    /// Bytes read ahead by all readers together: fetched row groups until
    /// decoded, decoded batches until the coordinator takes them (`None`:
    /// [`crate::config::pipeline::default_read_ahead`] for the source).
    pub read_ahead: Option<u64>,
    /// How long a read that fails for a reason that may pass is tried again
    /// before it counts as a failed attempt (see [`super::read_retry`]).
    pub read_retry: Duration,
    /// Rows of the shuffle buffer (0: no shuffle).
    pub shuffle_buffer: usize,
    /// `--shuffle global`: the rows of a window (`None`: tasks in the
    /// order they are leased, see [`super::shuffle`]).
    pub shuffle_window: Option<u64>,
    /// `--global-batch-size`: rows of each step of the global shuffle's
    /// order, cut into one slice per device (see [`super::shuffle::steps`]).
    pub global_batch_size: Option<u64>,
    /// The lanes of a job of `--global-batch-size` whose rows are all known
    /// ([`crate::queue::Lanes`]); `None`: the epoch's order is one lane.
    pub lanes: Option<Arc<crate::queue::Lanes>>,
    /// A master's job of `--world-size`: the worker takes one rank per
    /// device before it leases, and cuts its ranks' slices of each step.
    pub world: Option<u32>,
    /// Seed of the shuffle buffer and of the global shuffle.
    pub seed: u64,
    /// The master's lease timeout, when known: a lease not renewed for that
    /// long is dead on this worker too, even before the master says so.
    pub lease_timeout: Option<Duration>,
    /// Asks the pipeline to stop before the job is over (pre-emption).
    pub stop: Option<Stop>,
    /// `--lockstep`: every step hands each device one batch, and every device
    /// gets the same number of steps per epoch (see [`super::stepper`]).
    pub lockstep: bool,
    /// With `lockstep`, the epoch's last partial step is dropped: its rows
    /// are consumed (committed) without reaching a trainer.
    pub drop_last: bool,
    /// The job follows its source (`--follow`): with nothing to lease, ask
    /// again within [`super::backoff::FOLLOW_LONGEST`], so that what the
    /// source commits reaches a trainer soon.
    pub follow: bool,
    /// The rows the job trains (`--split`, `--sample`, `--limit`): the
    /// readers cut the others.
    pub select: Arc<crate::protocol::select::Selection>,
    /// The job's one worker (`sluice train`): with one device, rows reach the
    /// batcher in the order their tasks were leased (see
    /// [`super::in_order::InOrder`]), so that a seed gives the same batches
    /// run after run. A worker of a master, whose lease order depends on the
    /// other workers, takes rows as they come.
    pub only_worker: bool,
}

/// A request to stop early, as Kubernetes makes one before pre-empting a pod
/// (SIGTERM, then SIGKILL after its grace period): the worker leases nothing
/// more, drops the rows no trainer holds yet, lets the trainers finish the
/// batches they hold within `grace`, commits what they acknowledged and hands
/// every lease back so the master leases those tasks again at once.
#[derive(Debug, Clone)]
pub struct Stop {
    /// Turns true when the pipeline should stop.
    pub signal: tokio::sync::watch::Receiver<bool>,
    /// How long the trainers may take to finish the batches they hold.
    pub grace: Duration,
}
