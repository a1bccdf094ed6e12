//! The shell under `--shuffle global`: leases placed in windows, the
//! windows' reads, their batches dealt to the devices, and rows read again
//! for a restarted trainer sent back to its device.

use super::{PipelineError, Shell};
use crate::queue::{Lease, RanksReply};
use crate::worker::batcher::OutBatch;
use crate::worker::coordinator::Event;
use crate::worker::reader::ReadEvent;
use crate::worker::shuffle::{Cut, GlobalShuffle};
use crate::worker::Piece;

impl Shell {
    /// Places a lease in the global shuffle, with the view of its epoch
    /// first where the source tells one.
    pub(super) async fn offer_global(&mut self, lease: Lease) -> Result<(), PipelineError> {
        if self
            .global
            .as_ref()
            .is_some_and(|g| g.needs_view(lease.epoch))
        {
            let view = self.view_of(lease.epoch).await?;
            if let Some(global) = &mut self.global {
                global.set_view(view, &self.splits);
            }
        }
        if let Some(global) = &mut self.global {
            global.offer(lease, &self.splits);
        }
        Ok(())
    }

    /// The source has nothing to lease now: a window of the leases as they
    /// came takes no more, and a planned window waiting for tasks looks
    /// again at which of them are done.
    pub(super) async fn global_waits(&mut self) -> Result<(), PipelineError> {
        let Some(global) = &mut self.global else {
            return Ok(());
        };
        global.nothing_to_lease();
        if let Some(epoch) = global.pending_epoch() {
            let view = self.view_of(epoch).await?;
            if let Some(global) = &mut self.global {
                global.set_view(view, &self.splits);
            }
        }
        Ok(())
    }

    /// Moves the global shuffle on: starts the reads of the window being
    /// read (up to `--prefetch` at a time), and takes its dealt batches to
    /// the devices' queues (under lockstep, to the stepper).
    pub(super) fn pump_global(&mut self) -> Result<(), PipelineError> {
        let Some(global) = &mut self.global else {
            return Ok(());
        };
        let room = self.config.prefetch.max(1).saturating_sub(global.reading());
        let orders = global.pump(&self.splits, room, self.coordinator.made_up_ids());
        for order in orders {
            let lease = order.lease;
            let Some(split) = self.splits.get(lease.split as usize).cloned() else {
                continue;
            };
            let attempt = lease.attempt;
            self.act(Event::WindowRead {
                lease: lease.clone(),
                context: order.context,
            })?;
            let handle = self.spawn_reader(split, lease, self.read_tx.clone());
            self.handles.insert(attempt, handle);
        }
        loop {
            // Under lockstep, batches that wait for more (to make a step,
            // or the epoch's end: a window's short last batch) never stop
            // the next ones.
            if self.delivery.full() {
                return Ok(());
            }
            let Some(global) = &mut self.global else {
                return Ok(());
            };
            if global.global_batches() {
                let Some(cut) = global.next_step()? else {
                    return Ok(());
                };
                self.take_cut(cut);
                continue;
            }
            let Some((device, out)) = global.next_batch()? else {
                return Ok(());
            };
            self.delivery.deal(device, out);
        }
    }

    /// A global batch cut: under lockstep a step for the stepper, else each
    /// rank's batch for its device in step order (none of 0 rows).
    fn take_cut(&mut self, cut: Cut) {
        match cut {
            Cut::Step(step) => self.delivery.deal_step(step),
            Cut::Dropped(batches) => self.delivery.dropped(batches),
        }
    }

    /// A read for the global shuffle's window: its rows join the window;
    /// rows it cuts that were not committed before are consumed.
    pub(super) fn on_global_read(&mut self, event: ReadEvent) -> Result<(), PipelineError> {
        let Some(global) = &mut self.global else {
            return Ok(());
        };
        match event {
            ReadEvent::Batch {
                attempt,
                start,
                batch,
                held,
                ..
            } => {
                global.add(attempt, start, batch);
                // The window holds the rows now: out of the read-ahead budget.
                drop(held);
                Ok(())
            }
            ReadEvent::Cut {
                attempt,
                start,
                len,
            } => {
                let runs = global.uncommitted(attempt, start, len);
                let window = true;
                self.act(Event::Cut {
                    attempt,
                    runs,
                    window,
                })
            }
            ReadEvent::Waiting { .. } => Ok(()),
            ReadEvent::LoginRefused { error } => Err(PipelineError::LoginRefused {
                source: Box::new(error),
            }),
            ReadEvent::Done { attempt, end } => {
                global.read_ended(attempt);
                self.handles.remove(&attempt);
                self.act(Event::ReadDone { attempt, end })
            }
            ReadEvent::Failed { attempt, at, error } => {
                global.read_ended(attempt);
                self.handles.remove(&attempt);
                self.read_failed(attempt, at, error, true)
            }
        }
    }

    /// Under `--shuffle global` without lockstep, rows read again for a
    /// trainer that restarted from its checkpoint go back to its device, in
    /// batches of their own. Returns whether `event` was such rows.
    pub(super) fn dealt_replay(&mut self, event: &ReadEvent) -> bool {
        let ReadEvent::Batch {
            attempt,
            epoch,
            start,
            batch,
            ..
        } = event
        else {
            return false;
        };
        let Some(device) = self.coordinator.replay_device(*attempt) else {
            return false;
        };
        let size = self.config.batch_size.max(1);
        for at in (0..batch.num_rows()).step_by(size) {
            let len = size.min(batch.num_rows() - at);
            let out = OutBatch {
                data: batch.slice(at, len),
                epoch: *epoch,
                provenance: vec![Piece {
                    attempt: *attempt,
                    start: start + at as u64,
                    len: len as u64,
                }],
            };
            self.delivery.deal(device, out);
        }
        true
    }
}

impl Shell {
    /// How `epoch` hands out its tasks, where windows follow it: the one
    /// worker of `sluice train`, or a worker of a job of `--world-size`
    /// (the other workers of a master window the leases as they come).
    async fn view_of(
        &self,
        epoch: crate::epoch::Epoch,
    ) -> Result<Option<crate::queue::EpochView>, PipelineError> {
        if !self.config.only_worker && self.config.world.is_none() {
            return Ok(None);
        }
        Ok(self.source.epoch_view(epoch).await?)
    }

    /// A master's job of `--world-size`: takes one rank per device before
    /// the first lease; false while too few are free (the lease waits, and
    /// says so once); true once the job is over (the lease ends the run).
    pub(super) async fn take_ranks(&mut self) -> Result<bool, PipelineError> {
        if !self
            .global
            .as_ref()
            .is_some_and(GlobalShuffle::awaits_ranks)
        {
            return Ok(true);
        }
        let devices = u32::try_from(self.config.devices.max(1)).unwrap_or(u32::MAX);
        let ranks = match self.source.take_ranks(self.worker, devices).await? {
            RanksReply::Taken(ranks) => ranks,
            RanksReply::Wait { free, world } => {
                if !self.waits_for_ranks {
                    // Said whatever the log level, as every wait is.
                    tracing::info!(
                        target: crate::logging::PROGRESS,
                        wanted = devices,
                        free,
                        world,
                        "waiting for ranks of the job's world: {free} of {world} free, \
                         this worker's {devices} devices want one each"
                    );
                    self.waits_for_ranks = true;
                }
                return Ok(false);
            }
            RanksReply::NoWorld => return Ok(false),
            // The lease says the job is over.
            RanksReply::JobOver => return Ok(true),
        };
        self.waits_for_ranks = false;
        tracing::info!(
            ranks = ?ranks.ranks,
            world = ranks.world,
            "ranks taken: this worker's devices train their slices of each step"
        );
        if let Some(global) = &mut self.global {
            global.set_ranks(&ranks.ranks);
        }
        self.delivery.set_world_ranks(&ranks.ranks);
        Ok(true)
    }
}
