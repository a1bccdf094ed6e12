//! The shell: the async side of one worker around its [`Coordinator`]. It
//! feeds the coordinator what happens (replies of the master, readers' rows,
//! devices' acknowledgements), performs every [`Action`] it asks for, and
//! holds the rows themselves on their way to the devices (batcher, global
//! shuffle, [`Delivery`]).
//!
//! One file per side of it: [`drive`] (the loop, and its end), [`leases`]
//! (leasing, heartbeats' list, lapses), [`heartbeats`] (the leases renewed
//! from a task of their own), [`reads`] (readers and their events),
//! [`global`] (`--shuffle global`'s windows), [`sources`] (a mixed job's
//! sources), [`edges`] (where reads run, what time it is and when heartbeats go,
//! which a simulation replaces); this file holds the shell itself and what it does
//! for the coordinator. `sim.rs` drives several workers' real shells
//! through seeded schedules over an in-memory world (`sim_world.rs`: the
//! real queue behind a master that may be unreachable, readers and a clock
//! the simulation moves; `sim_worker.rs`: a worker, its readers and
//! trainers; `sim_checks.rs`: what is checked at the end).

mod drive;
pub(super) mod edges;
mod global;
mod heartbeats;
mod leases;
mod reads;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod sim_checks;
#[cfg(test)]
mod sim_ranks;
#[cfg(test)]
pub(super) mod sim_worker;
#[cfg(test)]
mod sim_world;
mod sources;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use connectors::{Location, ReadAhead, ReadPlan, Split, SplitRange};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tracing::{debug, warn};

use self::edges::{Clock, Readers};
use super::backoff::Backoff;
use super::batcher::{Batcher, OutBatch};
use super::committer::Ending;
use super::coordinator::{Action, Coordinator, Event, Report, Settings};
use super::delivery::{Delivery, Lanes, Room};
use super::devices::DeviceEvent;
use super::epoch_steps::{epoch_steps, EpochSteps};
use super::in_order::InOrder;
use super::ledger;
use super::pipeline_config::PipelineConfig;
use super::pipeline_error::PipelineError;
use super::reader::ReadEvent;
use super::shuffle::GlobalShuffle;
use super::stepper::Stepper;
use super::{LeaseClock, Piece};
use crate::epoch::Epoch;
use crate::protocol::TaskSource;
use crate::queue::{AttemptId, Lease, WorkerId};

/// How soon a worker waiting to lease asks again once a task of its own ended:
/// its end is what most often changes the master's answer (the epoch, or the
/// job, is over once the last task finishes), and the committer hands it on
/// within a moment. Without it the worker would wait out its backoff, up to a
/// second, at the end of every epoch.
const AFTER_OWN_END: Duration = Duration::from_millis(2);

/// What a worker reads: the source of its tasks and the job's data.
pub(in crate::worker) struct Job {
    pub(in crate::worker) source: Arc<dyn TaskSource>,
    pub(in crate::worker) location: Location,
    pub(in crate::worker) splits: Arc<Vec<Split>>,
    pub(in crate::worker) plan: Arc<ReadPlan>,
}

/// The channels and shared state the shell talks through.
pub(in crate::worker) struct Wiring {
    pub(in crate::worker) read_tx: mpsc::Sender<ReadEvent>,
    pub(in crate::worker) lanes: Lanes,
    pub(in crate::worker) reports: mpsc::UnboundedSender<Report>,
    pub(in crate::worker) clock: LeaseClock,
    pub(in crate::worker) ending: Ending,
    /// Where reads run.
    pub(in crate::worker) readers: Arc<dyn Readers>,
    /// The time.
    pub(in crate::worker) time: Arc<dyn Clock>,
}

/// The rows of one read event, waiting for the coordinator's word.
struct Arrived {
    batch: arrow::record_batch::RecordBatch,
    piece: Piece,
    epoch: Epoch,
    /// Its share of the read-ahead budget, given back once it is taken.
    held: connectors::read_ahead::Reservation,
}

/// The async shell around the [`Coordinator`]: it feeds it what happens
/// (replies of the master, readers' rows, devices' acknowledgements) and
/// performs what it asks, and holds the rows themselves on their way to the
/// devices.
pub(in crate::worker) struct Shell {
    /// The rules of this worker's leases and rows.
    coordinator: Coordinator,
    /// The rows of the read event at hand, until the coordinator says
    /// whether they go to the batcher ([`Action::Feed`]).
    arrived: Option<Arrived>,
    /// The error of the failed read at hand, until the coordinator says
    /// whether it ends the run ([`Action::ReplayFailed`]).
    failure: Option<connectors::Error>,
    source: Arc<dyn TaskSource>,
    worker: WorkerId,
    /// Where reads run.
    readers: Arc<dyn Readers>,
    /// The time.
    time: Arc<dyn Clock>,
    /// The source is on a remote store: the worker keeps reads beyond its
    /// devices under way (see [`Shell::hungry`]).
    remote: bool,
    splits: Arc<Vec<Split>>,
    plan: Arc<ReadPlan>,
    config: PipelineConfig,
    batcher: Batcher,
    /// How to stop each running read (leased, replayed, context).
    handles: HashMap<AttemptId, AbortHandle>,
    /// With one device: reads taken in lease order (see [`InOrder`]).
    in_order: Option<InOrder>,
    /// To the shell, from readers.
    read_tx: mpsc::Sender<ReadEvent>,
    /// The bytes all readers may hold ahead of the shell.
    ahead: ReadAhead,
    /// `--shuffle global`: leases to place in a window (see `offer_global`).
    to_offer: Vec<Lease>,
    /// The attempts held changed since the heartbeats were told.
    unsynced: bool,
    /// `--shuffle global`: windows read, permuted and cut into batches.
    global: Option<GlobalShuffle>,
    /// Batches on their way to the device threads (the shared queue, dealt
    /// to devices, or in steps); closed to end them.
    delivery: Delivery,
    /// Stopping early: the time the trainers must be done by.
    draining: Option<Instant>,
    /// Every device thread ended.
    devices_done: bool,
    /// Rows acknowledged of each source of a mixed job (empty for one).
    source_rows: Vec<u64>,
    /// To the committer.
    reports: mpsc::UnboundedSender<Report>,
    clock: LeaseClock,
    /// No lease request before this (after a reply with nothing to do).
    next_lease: Instant,
    /// How long to wait after each reply with nothing to do.
    backoff: Backoff,
    /// The attempts this worker holds, as its heartbeats report them. A lease
    /// and the update of this list happen under its lock, so a heartbeat
    /// never reports a list that misses a lease already granted.
    held: Arc<tokio::sync::Mutex<Vec<AttemptId>>>,
    /// Attempts whose end is on its way to the master (see [`Ending`]).
    ending: Ending,
    /// The steps of an epoch on each process, or why they are not known
    /// (`sluice.epoch_steps`).
    epoch_steps: EpochSteps,
    /// Without lockstep: the next step of each epoch (`sluice.step`).
    next_step: HashMap<Epoch, u64>,
    /// A master's job of `--world-size`: too few ranks were free when last
    /// asked, and the worker said it waits.
    waits_for_ranks: bool,
}

/// The bytes of the largest split: its byte range, or its whole file where
/// it is cut by row groups.
fn largest(splits: &[Split]) -> u64 {
    splits
        .iter()
        .map(|split| match &split.range {
            SplitRange::Bytes { start, end } | SplitRange::Stripes { start, end } => {
                end.saturating_sub(*start)
            }
            SplitRange::Whole | SplitRange::RowGroups(_) | SplitRange::Unreadable { .. } => {
                split.size
            }
        })
        .max()
        .unwrap_or(0)
}

/// The delivery of a shell with `config`: in steps under lockstep.
fn delivery(
    config: &PipelineConfig,
    schema: arrow::datatypes::SchemaRef,
    lanes: Lanes,
) -> Delivery {
    let devices = config.devices.max(1);
    let stepper = config
        .lockstep
        .then(|| Stepper::new(schema, devices, config.batch_size, config.drop_last));
    // Under lockstep the stepper holds one step back, and one more waits.
    let max = devices * if config.lockstep { 3 } else { 2 };
    Delivery::new(lanes, stepper, max)
}

impl Shell {
    pub(in crate::worker) fn new(
        job: Job,
        config: PipelineConfig,
        worker: WorkerId,
        wiring: Wiring,
    ) -> Shell {
        let devices_n = config.devices.max(1);
        let coordinator = Coordinator::new(Settings {
            devices: devices_n,
            splits: job.splits.len(),
            keeps_unsaved: job.source.keeps_unsaved(),
            global: config.shuffle_window.is_some(),
            replay_to_device: config.shuffle_window.is_some() && !config.lockstep,
        });
        let schema = job.plan.output_schema();
        let remote = !job.location.is_local();
        let read_ahead = config.read_ahead.unwrap_or_else(|| {
            crate::config::pipeline::default_read_ahead(remote, devices_n, largest(&job.splits))
        });
        let epoch_steps = epoch_steps(&job.splits, &job.plan, &config);
        Shell {
            epoch_steps,
            next_step: HashMap::new(),
            waits_for_ranks: false,
            coordinator,
            arrived: None,
            failure: None,
            read_tx: wiring.read_tx,
            ahead: ReadAhead::new(read_ahead),
            remote,
            to_offer: Vec::new(),
            unsynced: false,
            worker,
            source: job.source,
            splits: job.splits,
            plan: job.plan,
            batcher: Batcher::new(
                schema.clone(),
                config.batch_size,
                config.shuffle_buffer,
                config.seed,
            )
            .with_batch_bytes(config.batch_bytes),
            handles: HashMap::new(),
            // With several devices the batch each gets depends on their speed
            // anyway; the global shuffle orders its windows itself.
            in_order: (config.only_worker && devices_n == 1 && config.shuffle_window.is_none())
                .then(InOrder::default),
            delivery: delivery(&config, schema, wiring.lanes),
            global: GlobalShuffle::of(&config),
            draining: None,
            devices_done: false,
            source_rows: Vec::new(),
            reports: wiring.reports,
            clock: wiring.clock,
            next_lease: wiring.time.now(),
            backoff: if config.follow {
                Backoff::between(
                    super::backoff::FIRST,
                    super::backoff::FOLLOW_LONGEST,
                    Some(wiring.time.backoff_seed(worker)),
                )
            } else {
                Backoff::new(wiring.time.backoff_seed(worker))
            },
            held: Arc::new(tokio::sync::Mutex::new(Vec::new())),
            ending: wiring.ending,
            readers: wiring.readers,
            time: wiring.time,
            config,
        }
    }

    /// Tells the coordinator `event` and does what it asks.
    pub(super) fn act(&mut self, event: Event) -> Result<(), PipelineError> {
        let actions = self.coordinator.handle(event);
        self.perform_all(actions)
    }

    pub(super) fn perform_all(&mut self, actions: Vec<Action>) -> Result<(), PipelineError> {
        actions
            .into_iter()
            .try_for_each(|action| self.perform(action))
    }

    /// Does what the coordinator asks. `Feed` and `ReplayFailed` concern the
    /// read event at hand, whose rows or error wait in `arrived` and
    /// `failure` while the coordinator decides.
    pub(super) fn perform(&mut self, action: Action) -> Result<(), PipelineError> {
        match action {
            Action::Read(lease) => self.start_read(lease)?,
            Action::Replay { lease, .. } => self.replay(lease),
            Action::Report(report) => self.report(report),
            Action::Drop(attempt) => self.drop_lost(attempt)?,
            Action::Forget(attempt) => self.clock.forget(attempt),
            Action::Suspend(attempt) => {
                warn!(%attempt, "lease lapsed before a heartbeat renewed it: its rows wait for the master's answer");
            }
            Action::Drain => self.drain(),
            Action::SyncHeld => self.unsynced = true,
            Action::RollBack(why) => return Err(PipelineError::RolledBack(why)),
            Action::Feed(attempt) => self.feed(attempt)?,
            Action::ReplayFailed => {
                if let Some(error) = self.failure.take() {
                    return Err(PipelineError::Replay {
                        source: Box::new(error),
                    });
                }
            }
        }
        Ok(())
    }

    /// Gives the rows of the read event at hand to the batcher.
    pub(super) fn feed(&mut self, attempt: AttemptId) -> Result<(), PipelineError> {
        let Some(arrived) = self.arrived.take_if(|a| a.piece.attempt == attempt) else {
            return Ok(());
        };
        let ready = self
            .batcher
            .push(arrived.batch, arrived.piece, arrived.epoch)?;
        // Taken: the batch's bytes leave the read-ahead budget.
        drop(arrived.held);
        self.ready(ready);
        Ok(())
    }

    /// Sends a report to the committer.
    pub(super) fn report(&mut self, report: Report) {
        if let Report::Ledger(
            ledger::Action::Finish { attempt, .. } | ledger::Action::Fail { attempt, .. },
        ) = &report
        {
            self.clock.forget(*attempt);
            self.backoff.reset();
            self.next_lease = self.next_lease.min(self.time.now() + AFTER_OWN_END);
        }
        if let Some(attempt) = report.ends() {
            self.ending.add(attempt);
        }
        // The committer ends only after the shell: the send cannot fail
        // while it runs.
        let _ = self.reports.send(report);
    }

    /// Batches out of the batcher: to the devices' queue, or under lockstep
    /// to the stepper.
    pub(super) fn ready(&mut self, batches: Vec<OutBatch>) {
        batches.into_iter().for_each(|b| self.delivery.push(b));
    }

    /// Room came for the next batch (or step): it goes, tagged.
    pub(super) fn send(&mut self, room: Room<'_>) -> Result<(), PipelineError> {
        for (permit, out) in self.delivery.take(room)? {
            permit.send(self.tagged(out));
        }
        self.consume_dropped()
    }

    /// Rows `--drop-last` dropped: consumed (committed, and part of the next
    /// checkpoint of device 0) without reaching a trainer.
    pub(super) fn consume_dropped(&mut self) -> Result<(), PipelineError> {
        for out in self.delivery.take_dropped() {
            debug!(
                rows = out.data.num_rows(),
                epoch = out.epoch.number(),
                "rows of the epoch's partial step dropped (--drop-last)"
            );
            self.act(Event::Dropped {
                provenance: out.provenance,
            })?;
        }
        Ok(())
    }

    /// Reads rows of `lease` again (for the trainer of `device`, which
    /// restarted from its checkpoint), outside any lease: the rows were
    /// committed already.
    pub(super) fn replay(&mut self, lease: Lease) {
        let Some(split) = self.splits.get(lease.split as usize).cloned() else {
            return;
        };
        let attempt = lease.attempt;
        let handle = self.spawn_reader(split, lease, self.read_tx.clone());
        self.handles.insert(attempt, handle);
    }

    /// Starts reading a lease, or under `--shuffle global` places it in a
    /// window (see `offer_global`).
    pub(super) fn start_read(&mut self, lease: Lease) -> Result<(), PipelineError> {
        if self.global.is_some() {
            self.to_offer.push(lease);
            return Ok(());
        }
        let Some(split) = self.splits.get(lease.split as usize).cloned() else {
            return Ok(());
        };
        let attempt = lease.attempt;
        let handle = match &mut self.in_order {
            Some(order) => {
                let ahead = self.ahead.with_turn(order.queue(attempt));
                self.spawn_reader_within(split, lease, self.read_tx.clone(), ahead)
            }
            None => self.spawn_reader(split, lease, self.read_tx.clone()),
        };
        self.handles.insert(attempt, handle);
        self.take_in_order()
    }

    /// The lease of `attempt` is lost: stop reading it and drop its rows
    /// wherever they wait, so no trainer gets them; they are served again
    /// elsewhere.
    pub(super) fn drop_lost(&mut self, attempt: AttemptId) -> Result<(), PipelineError> {
        self.clock.lose(attempt);
        if let Some(reader) = self.handles.remove(&attempt) {
            reader.abort();
        }
        let dropped = self.batcher.drop_attempt(attempt);
        if let Some(global) = &mut self.global {
            global.drop_attempt(attempt);
        }
        let dropped = dropped + self.delivery.drop_attempt(attempt)?;
        if let Some(order) = &mut self.in_order {
            order.drop_attempt(attempt);
        }
        self.take_in_order()?;
        debug!(%attempt, dropped, "rows of a lost lease dropped");
        Ok(())
    }

    /// Stops early (see [`super::pipeline_config::Stop`]): no more leases or reads; rows that no
    /// trainer holds are dropped; the device threads finish what they hold.
    pub(super) fn begin_drain(&mut self) -> Result<(), PipelineError> {
        let grace = self
            .config
            .stop
            .as_ref()
            .map_or(Duration::ZERO, |s| s.grace);
        warn!(
            grace_secs = grace.as_secs_f64(),
            "stopping: the trainers finish the batches they hold, the rest is handed back"
        );
        self.draining = Some(self.time.now() + grace);
        self.act(Event::Stop)
    }

    /// Drops every row no trainer holds, and ends the device queues.
    pub(super) fn drain(&mut self) {
        self.stop_readers();
        self.delivery.clear();
        if let Some(global) = &mut self.global {
            global.clear();
        }
        for attempt in self.coordinator.attempts() {
            self.batcher.drop_attempt(attempt);
        }
        // Batches still queued for the devices are dropped by them, unfed
        // (under lockstep the last step sent is fed whole, on every device).
        self.clock.stop_all();
        self.delivery.close();
    }

    /// Hands every attempt still held back to the master, after committing
    /// what was acknowledged.
    pub(super) async fn hand_back_all(&mut self) -> Result<(), PipelineError> {
        self.act(Event::DrainOver)?;
        self.sync_if_changed().await;
        Ok(())
    }

    pub(super) fn on_device(&mut self, event: DeviceEvent) -> Result<(), PipelineError> {
        match event {
            DeviceEvent::Mark { device, kind } => self.act(Event::Mark { device, kind }),
            DeviceEvent::Applied {
                device,
                epoch,
                rows,
                provenance,
            } => {
                self.count_sources(&provenance);
                self.act(Event::Applied {
                    device,
                    epoch,
                    rows: rows as u64,
                    provenance,
                })
            }
            DeviceEvent::Failed { device, error } => Err(PipelineError::Trainer {
                device,
                source: error,
            }),
        }
    }
}
