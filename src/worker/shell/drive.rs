//! The shell's loop: what it does before each wait, what it waits for
//! (devices' events, heartbeats' word, room for the next batch, a stop,
//! readers' rows), and its end (the trainers' last words, the outcome).

use std::time::Duration;

use tokio::sync::mpsc;

use super::heartbeats::{Beat, Heartbeats};
use super::{PipelineError, Shell};
use crate::protocol::Halt;
use crate::worker::committer::Ending;
use crate::worker::coordinator::{Event, Progress, Report, RunOutcome};
use crate::worker::devices::{DeviceEvent, Devices};
use crate::worker::reader::ReadEvent;
use crate::worker::shuffle::GlobalShuffle;
use crate::worker::LeaseClock;

/// How often the coordinator looks again when nothing else wakes it.
const IDLE_TICK: Duration = Duration::from_millis(50);

/// Device events handled in one go before the loop looks at anything else.
const EVENTS_PER_ROUND: usize = 4096;

/// How a run's loop ended, for its trainers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Close {
    /// Rolled back: the trainers are killed, nothing they still say counts.
    RolledBack,
    /// Stopped: the trainers end with the process.
    Left,
    /// The trainers end their streams; what they still say counts.
    Tail,
}

/// Resolves once the stop signal turns true (never without a signal).
async fn stopped(signal: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match signal {
        Some(rx) => {
            if rx.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

impl Shell {
    /// Starts the heartbeats of the leases this shell holds.
    pub(in crate::worker) fn heartbeats(
        &self,
        ending: Ending,
        clock: LeaseClock,
    ) -> (Heartbeats, mpsc::UnboundedReceiver<Beat>) {
        let (beat_tx, beat_rx) = mpsc::unbounded_channel();
        let source = self.source.clone();
        let beats = Heartbeats::spawn(
            source,
            self.worker,
            self.held.clone(),
            ending,
            clock,
            self.time.clone(),
            beat_tx,
        );
        (beats, beat_rx)
    }

    /// What a heartbeat said: a lease lost, or the master's refusal.
    pub(super) async fn on_beat(&mut self, beat: Beat) -> Result<(), PipelineError> {
        let attempt = beat?;
        self.act(Event::Lost { attempt })?;
        self.sync_if_changed().await;
        Ok(())
    }

    /// After the loop: rolls the trainers back, or lets them end their
    /// streams (their last acknowledgements and checkpoints still count), or,
    /// stopped early, leaves them to end with the process. The run's result,
    /// and the join of the device threads to wait for.
    pub(in crate::worker) async fn wind_down(
        &mut self,
        result: Result<(), PipelineError>,
        devices: Devices,
        event_rx: &mut mpsc::UnboundedReceiver<DeviceEvent>,
        abandon: &Halt,
    ) -> (
        Result<(), PipelineError>,
        Option<tokio::task::JoinHandle<()>>,
    ) {
        let (mut result, close) = self.close(result, abandon);
        match close {
            Close::RolledBack => {
                // The trainers are killed; nothing they still say counts.
                let joined = tokio::task::spawn_blocking(move || devices.join());
                while event_rx.recv().await.is_some() {}
                return (result, Some(joined));
            }
            // Stopped, leases handed back (or a stop was asked for and the
            // run failed meanwhile): trainers still busy past the grace
            // period end with the process (their process groups are killed).
            Close::Left => return (result, None),
            Close::Tail => {}
        }
        let joined = tokio::task::spawn_blocking(move || devices.join());
        while let Some(event) = event_rx.recv().await {
            if let (Err(e), true) = (self.on_device(event), result.is_ok()) {
                result = Err(e);
            }
        }
        (result, Some(joined))
    }

    /// The end of the loop, before the trainers' last words: rolls back
    /// (abandoning the trainers before their queues close, so that none ends
    /// its stream and writes a checkpoint after it), or stops the readers
    /// and closes the device queues, and unless the worker stopped lets the
    /// coordinator take the trainers' last acknowledgements and checkpoints.
    pub(super) fn close(
        &mut self,
        result: Result<(), PipelineError>,
        abandon: &Halt,
    ) -> (Result<(), PipelineError>, Close) {
        let result = match result {
            Err(e) if e.is_gone() && self.coordinator.rolls_back() => {
                Err(PipelineError::RolledBack(
                    "the master counted this worker gone (silent past the lease timeout)"
                        .to_string(),
                ))
            }
            result => result,
        };
        let rolled_back = matches!(result, Err(PipelineError::RolledBack(_)));
        if rolled_back {
            abandon.set("rolled back".to_string());
            self.clock.stop_all();
            self.delivery.clear();
        }
        self.stop_readers();
        self.delivery.close();
        if rolled_back {
            return (result, Close::RolledBack);
        }
        let stop_requested = self
            .config
            .stop
            .as_ref()
            .is_some_and(|s| *s.signal.borrow());
        if self.coordinator.stopped() || stop_requested {
            return (result, Close::Left);
        }
        // The trainers end their streams: their last acknowledgements and
        // checkpoints (a trainer's final one) still count.
        self.coordinator.handle(Event::Tail);
        (result, Close::Tail)
    }

    pub(in crate::worker) async fn drive(
        &mut self,
        read_rx: &mut mpsc::Receiver<ReadEvent>,
        events: &mut mpsc::UnboundedReceiver<DeviceEvent>,
        beats: &mut mpsc::UnboundedReceiver<Beat>,
        on_progress: &(impl Fn(&Progress) + Send),
    ) -> Result<(), PipelineError> {
        let mut flushed = false;
        let mut stop = self.config.stop.as_ref().map(|s| s.signal.clone());
        loop {
            if self.step(read_rx, &mut flushed).await? {
                return Ok(());
            }
            let door = self.delivery.door();
            tokio::select! {
                biased;
                event = events.recv(), if !self.devices_done => match event {
                    Some(event) => self.on_devices(event, events, on_progress)?,
                    None => self.devices_done = true,
                },
                Some(beat) = beats.recv() => self.on_beat(beat).await?,
                room = door.room(), if door.is_open() => self.send(room)?,
                _ = stopped(&mut stop), if self.draining.is_none() => self.begin_drain()?,
                Some(event) = read_rx.recv(), if self.draining.is_none() && !self.backed_up() => {
                    flushed = false;
                    self.on_read(event)?;
                }
                _ = tokio::time::sleep(self.idle_wait()) => {}
            }
        }
    }

    /// What the loop does before it waits: stops if the source halted,
    /// hands back once drained, leases more, moves the global shuffle on,
    /// and lets the short batch go once nothing more is read. True when the
    /// run is over.
    pub(super) async fn step(
        &mut self,
        read_rx: &mpsc::Receiver<ReadEvent>,
        flushed: &mut bool,
    ) -> Result<bool, PipelineError> {
        if let Some(why) = self.source.halt().as_ref().and_then(Halt::reason) {
            // Nothing more can be committed: no queued row reaches a
            // trainer, and no more is read.
            self.clock.stop_all();
            self.stop_readers();
            self.delivery.clear();
            return Err(PipelineError::Halted(why.to_string()));
        }
        self.drop_lapsed()?;
        if let Some(deadline) = self.draining {
            if self.devices_done || self.time.now() >= deadline {
                self.hand_back_all().await?;
                return Ok(true);
            }
        } else {
            // Lease while the pipeline is hungry: at the start every device's
            // first task (and on a remote store the reads kept beyond them)
            // side by side, not one per turn of the loop (a turn can wait a
            // round trip to the store).
            for _ in 0..self.config.prefetch.max(1) {
                if self.coordinator.is_over()
                    || self.time.now() < self.next_lease
                    || !self.hungry(read_rx)
                {
                    break;
                }
                let before = self.coordinator.leased_reads();
                self.top_up().await?;
                if self.coordinator.leased_reads() <= before {
                    break;
                }
            }
        }
        self.consume_dropped()?;
        self.pump_global()?;
        // Rows read again for a restarted trainer may still wait in the
        // batcher: they are in no lease, so the coordinator is done without
        // them.
        if self.coordinator.is_done()
            && self.batcher.buffered() == 0
            && self.global.as_ref().is_none_or(GlobalShuffle::is_empty)
            && self.delivery.is_empty()
        {
            return Ok(true);
        }
        let open_step = self.delivery.open();
        if self.coordinator.reads_none()
            && self.global.as_ref().is_none_or(|g| !g.holds_rows())
            && (self.batcher.buffered() > 0 || open_step)
            && !*flushed
        {
            // Nothing more to read for now: let the short batch go so
            // that its tasks can end (under lockstep: the epoch ends here).
            let tail = self.batcher.flush()?;
            self.ready(tail);
            self.delivery.end_epoch();
            if let Some(global) = &mut self.global {
                global.end_epoch();
            }
            self.pump_global()?;
            self.consume_dropped()?;
            *flushed = true;
        }
        Ok(false)
    }

    /// A device event and those that came with it (a round at most).
    pub(super) fn on_devices(
        &mut self,
        first: DeviceEvent,
        events: &mut mpsc::UnboundedReceiver<DeviceEvent>,
        on_progress: &(impl Fn(&Progress) + Send),
    ) -> Result<(), PipelineError> {
        self.on_device(first)?;
        for _ in 0..EVENTS_PER_ROUND {
            let Ok(event) = events.try_recv() else { break };
            self.on_device(event)?;
        }
        on_progress(self.coordinator.progress());
        Ok(())
    }

    /// How long the loop may sleep with nothing to do: until the next lease
    /// request is due, at most [`IDLE_TICK`].
    pub(super) fn idle_wait(&self) -> Duration {
        let due = self.next_lease.saturating_duration_since(self.time.now());
        if due.is_zero() {
            IDLE_TICK
        } else {
            due.min(IDLE_TICK)
        }
    }

    /// Whether enough batches wait for the devices that reading pauses.
    /// Under lockstep only while a step can go: rows that wait for more rows
    /// (to make a step) never stop the reading.
    pub(super) fn backed_up(&self) -> bool {
        if self.global.is_some() && !self.delivery.in_steps() {
            // Reads fill the window, whose rows are bounded by its size.
            return false;
        }
        self.delivery.full()
    }

    /// The run's outcome, once every report made so far has reached the
    /// master (the committer ended): rows left in no checkpoint at the end
    /// are sent back to be served once more.
    pub(in crate::worker) async fn finish(
        self,
        ok: bool,
        committer: tokio::task::JoinHandle<()>,
    ) -> RunOutcome {
        let Shell {
            reports,
            coordinator,
            source_rows,
            ..
        } = self;
        let mut outcome = coordinator.into_outcome(ok);
        outcome.source_rows = source_rows;
        if !outcome.unsaved_pieces_at_end.is_empty() {
            // The master serves them once more, and fails the job should rows
            // of them be left in no checkpoint at an end again.
            let pieces = std::mem::take(&mut outcome.unsaved_pieces_at_end);
            let _ = reports.send(Report::UnsavedAtEnd(pieces));
        }
        drop(reports);
        let _ = committer.await;
        outcome
    }
}
