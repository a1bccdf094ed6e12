//! Reads taken in lease order, for a worker with one device.

use std::collections::{HashMap, VecDeque};

use connectors::read_ahead::Turn;

use super::reader::ReadEvent;
use crate::queue::AttemptId;

/// With one device, rows reach the batcher in the order their tasks were
/// leased, whatever order their readers deliver in: with a seed, the same
/// data gives the same batches run after run. Readers still read ahead side
/// by side; the events of every read but the first in line wait here (their
/// batches keeping their share of the read-ahead budget), and the first in
/// line has its [`Turn`] given, so its requests never wait for bytes the
/// others hold.
#[derive(Default)]
pub(super) struct InOrder {
    /// Attempts in lease order, each with its reader's turn.
    lined: VecDeque<(AttemptId, Turn)>,
    /// Events of attempts not first in line, in the order they came.
    held: HashMap<AttemptId, Vec<ReadEvent>>,
}

impl InOrder {
    /// Puts `attempt` last in line; the turn to give its reader.
    pub(super) fn queue(&mut self, attempt: AttemptId) -> Turn {
        let turn = Turn::new();
        self.lined.push_back((attempt, turn.clone()));
        turn
    }

    pub(super) fn holds(&self, attempt: AttemptId) -> bool {
        self.lined.iter().any(|(a, _)| *a == attempt)
    }

    pub(super) fn is_first(&self, attempt: AttemptId) -> bool {
        self.first() == Some(attempt)
    }

    pub(super) fn first(&self) -> Option<AttemptId> {
        self.lined.front().map(|(a, _)| *a)
    }

    /// Gives the first in line its turn; whether it was not given before.
    pub(super) fn give_turn(&self) -> bool {
        match self.lined.front() {
            Some((_, turn)) if !turn.is_given() => {
                turn.give();
                true
            }
            _ => false,
        }
    }

    pub(super) fn forget_first(&mut self) {
        if let Some((attempt, _)) = self.lined.pop_front() {
            self.held.remove(&attempt);
        }
    }

    pub(super) fn wait(&mut self, attempt: AttemptId, event: ReadEvent) {
        self.held.entry(attempt).or_default().push(event);
    }

    /// No read's events wait for their turn: nothing is read ahead of the
    /// trainers here (a worker bound by its trainers leases no more).
    pub(super) fn holds_nothing(&self) -> bool {
        self.held.is_empty()
    }

    pub(super) fn take_held(&mut self, attempt: AttemptId) -> Vec<ReadEvent> {
        self.held.remove(&attempt).unwrap_or_default()
    }

    /// A lost attempt leaves the line with every event it held.
    pub(super) fn drop_attempt(&mut self, attempt: AttemptId) {
        self.lined.retain(|(a, _)| *a != attempt);
        self.held.remove(&attempt);
    }
}
