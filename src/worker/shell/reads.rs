//! The shell's readers: starting and stopping them, and their events, taken
//! as they come or, with one device, in lease order.

use connectors::{ReadAhead, Split};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::{Arrived, PipelineError, Shell};
use crate::queue::{AttemptId, Lease};
use crate::worker::coordinator::Event;
use crate::worker::in_order::InOrder;
use crate::worker::reader::ReadEvent;
use crate::worker::Piece;

impl Shell {
    /// Starts reading `split` from where `lease` says, sending to `tx`.
    pub(super) fn spawn_reader(
        &self,
        split: Split,
        lease: Lease,
        tx: mpsc::Sender<ReadEvent>,
    ) -> AbortHandle {
        self.spawn_reader_within(split, lease, tx, self.ahead.clone())
    }

    pub(super) fn spawn_reader_within(
        &self,
        split: Split,
        lease: Lease,
        tx: mpsc::Sender<ReadEvent>,
        ahead: ReadAhead,
    ) -> AbortHandle {
        self.readers.start(split, lease, ahead, tx)
    }

    /// A reader's event, taken now or, with one device, once the reads
    /// leased before its attempt are taken (see [`InOrder`]).
    pub(super) fn on_read(&mut self, event: ReadEvent) -> Result<(), PipelineError> {
        let Some(order) = &mut self.in_order else {
            return self.take_read(event);
        };
        let attempt = match &event {
            ReadEvent::Batch { attempt, .. }
            | ReadEvent::Cut { attempt, .. }
            | ReadEvent::Done { attempt, .. }
            | ReadEvent::Failed { attempt, .. } => *attempt,
            // They change no row's order.
            ReadEvent::Waiting { .. } | ReadEvent::LoginRefused { .. } => {
                return self.take_read(event)
            }
        };
        if !order.holds(attempt) || order.is_first(attempt) {
            return self.take_read(event).and_then(|()| self.take_in_order());
        }
        if let ReadEvent::Batch { .. } = &event {
            // Started: the next task may be leased meanwhile.
            self.coordinator.handle(Event::Started { attempt });
        }
        order.wait(attempt, event);
        Ok(())
    }

    /// Takes the events of the reads whose turn it is now: while the first
    /// read in lease order is over (done, failed, lost), the next one's
    /// events held so far, and gives the read first in line its turn.
    pub(super) fn take_in_order(&mut self) -> Result<(), PipelineError> {
        loop {
            let Some(order) = &mut self.in_order else {
                return Ok(());
            };
            let Some(first) = order.first() else {
                return Ok(());
            };
            if !self.coordinator.is_reading(first) {
                // Over: what it still held was of a read stopped meanwhile.
                order.forget_first();
                continue;
            }
            if order.give_turn() {
                self.ahead.wake();
            }
            let held = order.take_held(first);
            if held.is_empty() {
                return Ok(());
            }
            for event in held {
                self.take_read(event)?;
            }
        }
    }

    pub(super) fn take_read(&mut self, event: ReadEvent) -> Result<(), PipelineError> {
        let attempt = match &event {
            ReadEvent::Batch { attempt, .. }
            | ReadEvent::Cut { attempt, .. }
            | ReadEvent::Waiting { attempt }
            | ReadEvent::Done { attempt, .. }
            | ReadEvent::Failed { attempt, .. } => Some(*attempt),
            ReadEvent::LoginRefused { .. } => None,
        };
        if let (Some(global), Some(attempt)) = (&self.global, attempt) {
            if global.owns(attempt) {
                return self.on_global_read(event);
            }
            if self.dealt_replay(&event) {
                return Ok(());
            }
        }
        match event {
            ReadEvent::Batch {
                attempt,
                epoch,
                start,
                batch,
                held,
            } => {
                let piece = Piece {
                    attempt,
                    start,
                    len: batch.num_rows() as u64,
                };
                self.arrived = Some(Arrived {
                    batch,
                    piece,
                    epoch,
                    held,
                });
                let done = self.act(Event::Rows { attempt });
                // Rows the coordinator did not take are dropped here.
                self.arrived = None;
                done
            }
            ReadEvent::Cut {
                attempt,
                start,
                len,
            } => self.act(Event::Cut {
                attempt,
                runs: vec![(start, start + len)],
                window: false,
            }),
            // Not starting any more: other tasks may be leased and read
            // meanwhile (within `--prefetch`).
            ReadEvent::Waiting { attempt } => self.act(Event::Started { attempt }),
            ReadEvent::LoginRefused { error } => Err(PipelineError::LoginRefused {
                source: Box::new(error),
            }),
            ReadEvent::Done { attempt, end } => {
                self.handles.remove(&attempt);
                self.act(Event::ReadDone { attempt, end })
            }
            ReadEvent::Failed { attempt, at, error } => {
                self.handles.remove(&attempt);
                self.read_failed(attempt, at, error, false)
            }
        }
    }

    /// A read failed: the coordinator decides (a replay that fails stops
    /// the run).
    pub(super) fn read_failed(
        &mut self,
        attempt: AttemptId,
        at: u64,
        error: connectors::Error,
        window: bool,
    ) -> Result<(), PipelineError> {
        let event = Event::ReadFailed {
            attempt,
            at,
            reason: connectors::Report(&error).to_string(),
            for_good: error.is_for_good(),
            window,
        };
        self.failure = Some(error);
        let done = self.act(event);
        self.failure = None;
        done
    }

    pub(super) fn stop_readers(&mut self) {
        if let Some(order) = &mut self.in_order {
            *order = InOrder::default();
        }
        for (_, reader) in self.handles.drain() {
            reader.abort();
        }
    }
}
