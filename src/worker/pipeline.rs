//! The pipeline: leases tasks ahead, runs readers, re-batches, feeds the
//! device threads and turns acknowledgements into commits, until the source
//! says the job is over.
//!
//! One coordinator loop joins the stages (the [`Shell`] around the
//! coordinator), and it never waits on a stage that can be slow: batches for
//! the devices wait in its delivery, sent as the device queues have room, so
//! acknowledgements (and lost leases) are handled while data waits. Reports
//! to the master go through a committer task of their own, which sends
//! whatever is pending at once, merged per attempt, so an acknowledged batch
//! is committed within one round trip. This file starts the stages and joins
//! them at the end.

use std::sync::Arc;

use connectors::{Location, ReadPlan, Split};
use tokio::sync::mpsc;
use tracing::warn;

pub use super::coordinator::{Progress, RunOutcome};

use super::checkpoints::Completed;
use super::committer::{committer, Ending};
use super::coordinator::Report;
use super::delivery::Lanes;
use super::devices::{Brakes, DeviceEvent, Devices};
pub use super::pipeline_config::{PipelineConfig, Stop};
pub use super::pipeline_error::PipelineError;
use super::reader::ReadEvent;
use super::shell::edges::{StoreReaders, SystemClock};
use super::shell::{Job, Shell, Wiring};
use super::LeaseClock;
use crate::protocol::Halt;
use crate::protocol::TaskSource;
use crate::trainer::TrainerFactory;

/// without a final `checkpoint ID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalCheckpointRule {
    /// Exec trainers that sluice started: the rows after their last
    /// checkpoint are served once more, and a second such end fails the job
    /// ([`PipelineError::NoFinalCheckpoint`]).
    Enforced,
    /// A trainer that started sluice (`--attach`, `sluice_trainer.Dataset`)
    /// cannot be started again: a warning.
    Warned,
    /// A built-in model: its model is sluice's own, written at the end.
    Unchecked,
}

impl FinalCheckpointRule {
    /// The rule for `trainer`.
    pub fn of(trainer: &crate::config::TrainerChoice) -> FinalCheckpointRule {
        match trainer {
            crate::config::TrainerChoice::Exec { attach: None, .. } => {
                FinalCheckpointRule::Enforced
            }
            crate::config::TrainerChoice::Exec { .. } => FinalCheckpointRule::Warned,
            _ => FinalCheckpointRule::Unchecked,
        }
    }
}

/// The warning when a trainer that started sluice ended its stream without
/// a final `checkpoint ID`: it cannot be started again, and `rows` stay in
/// no checkpoint.
pub fn warn_attached_without_final_checkpoint(rows: u64) {
    warn!(
        rows,
        "the trainer keeps checkpoints but ended its stream without `checkpoint ID` after its \
         last batch: {rows} rows it acknowledged are in no checkpoint (it started sluice, so \
         it cannot be started again to be served them once more)"
    );
}

/// The warning, said once per job, when trainers that keep checkpoints end
/// their streams without a final `checkpoint ID`: `rows` acknowledged rows
/// are in no checkpoint, and are served once more.
pub fn warn_no_final_checkpoint(rows: u64) {
    warn!(
        rows,
        "the trainers keep checkpoints but ended their streams without `checkpoint ID` after \
         their last batch: {rows} rows they acknowledged are in no checkpoint; they are served \
         once more to trainers started from their last complete checkpoint, and the job fails \
         if the streams end that way again"
    );
}

/// Runs one worker until the job is over.
pub async fn run(
    source: Arc<dyn TaskSource>,
    location: Location,
    splits: Arc<Vec<Split>>,
    plan: Arc<ReadPlan>,
    factory: Arc<dyn TrainerFactory>,
    config: PipelineConfig,
    on_progress: impl Fn(&Progress) + Send,
) -> Result<RunOutcome, PipelineError> {
    let devices_n = config.devices.max(1);
    // Under `--shuffle global` (without lockstep) each batch goes to the
    // device its number deals it to.
    let dealt = config.shuffle_window.is_some() && !config.lockstep;
    let (lanes, queues) = Lanes::open(devices_n, config.lockstep, dealt);
    let (event_tx, mut event_rx) = mpsc::unbounded_channel::<DeviceEvent>();
    let clock = LeaseClock::new(config.lease_timeout);
    let halt = source.halt().unwrap_or_default();
    let abandon = Halt::default();
    let completed = Completed::default();
    let devices = Devices::start(
        factory,
        devices_n,
        queues,
        event_tx,
        clock.clone(),
        Brakes {
            halt: halt.clone(),
            abandon: abandon.clone(),
        },
        completed.clone(),
    )
    .map_err(PipelineError::Start)?;
    let worker = source.register().await?;
    let (report_tx, report_rx) = mpsc::unbounded_channel::<Report>();
    let ending = Ending::default();
    let committer = tokio::spawn(committer(
        source.clone(),
        worker,
        report_rx,
        completed,
        ending.clone(),
    ));
    let (read_tx, mut read_rx) = mpsc::channel::<ReadEvent>(config.prefetch.max(1) * 2);
    let (plan, readers) = store_readers(&location, plan, &config);
    let wiring = Wiring {
        read_tx,
        lanes,
        readers: Arc::new(readers),
        time: Arc::new(SystemClock),
        reports: report_tx,
        clock: clock.clone(),
        ending: ending.clone(),
    };
    let job = Job {
        source,
        location,
        splits,
        plan,
    };
    let mut state = Shell::new(job, config, worker, wiring);
    let (beats, mut beat_rx) = state.heartbeats(ending, clock);
    let result = state
        .drive(&mut read_rx, &mut event_rx, &mut beat_rx, &on_progress)
        .await;
    drop(beats);
    let (result, joined) = state
        .wind_down(result, devices, &mut event_rx, &abandon)
        .await;
    let outcome = state.finish(result.is_ok(), committer).await;
    if let Some(joined) = joined {
        let _ = joined.await;
    }
    result.map(|_| outcome)
}

/// The job's plan as this worker reads it (`--batch-bytes`), and the
/// readers of its store.
fn store_readers(
    location: &Location,
    plan: Arc<ReadPlan>,
    config: &PipelineConfig,
) -> (Arc<ReadPlan>, StoreReaders) {
    let plan = match config.batch_bytes {
        Some(bytes) => Arc::new((*plan).clone().with_batch_bytes(Some(bytes))),
        None => plan,
    };
    let readers = StoreReaders {
        location: location.clone(),
        plan: plan.clone(),
        select: config.select.clone(),
        read_retry: config.read_retry,
    };
    (plan, readers)
}
