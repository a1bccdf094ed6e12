//! Per-epoch totals that the trainers of one factory add to and report from.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::EpochStats;
use crate::epoch::Epoch;

/// What one batch (or one step) adds to its epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct EpochTotals {
    /// Rows applied.
    pub rows: u64,
    /// Rows skipped (null label).
    pub skipped: u64,
    /// Sum of the per-row training losses.
    pub loss_sum: f64,
    /// Rows classified correctly.
    pub correct: u64,
}

/// Totals by epoch, and which statistics they carry.
#[derive(Clone, Debug, Default)]
pub(crate) struct EpochLog {
    with_loss: bool,
    with_accuracy: bool,
    epochs: BTreeMap<Epoch, EpochTotals>,
}

impl EpochLog {
    /// A log reporting rows only.
    pub fn rows_only() -> Self {
        Self::default()
    }

    /// A log reporting rows, mean loss and, if `with_accuracy`, accuracy.
    pub fn with_loss(with_accuracy: bool) -> Self {
        EpochLog {
            with_loss: true,
            with_accuracy,
            epochs: BTreeMap::new(),
        }
    }

    /// Adds `totals` to `epoch`.
    pub fn add(&mut self, epoch: Epoch, totals: EpochTotals) {
        let entry = self.epochs.entry(epoch).or_default();
        entry.rows += totals.rows;
        entry.skipped += totals.skipped;
        entry.loss_sum += totals.loss_sum;
        entry.correct += totals.correct;
    }

    /// The totals of every epoch seen.
    pub fn totals(&self) -> &BTreeMap<Epoch, EpochTotals> {
        &self.epochs
    }

    /// The statistics of every epoch seen, in order.
    pub fn stats(&self) -> Vec<EpochStats> {
        self.epochs
            .iter()
            .map(|(&epoch, totals)| self.epoch_stats(epoch, totals))
            .collect()
    }

    fn epoch_stats(&self, epoch: Epoch, totals: &EpochTotals) -> EpochStats {
        let mean = |sum: f64| (totals.rows > 0).then(|| sum / totals.rows as f64);
        EpochStats {
            epoch,
            rows: totals.rows,
            loss: mean(totals.loss_sum).filter(|_| self.with_loss),
            accuracy: mean(totals.correct as f64).filter(|_| self.with_accuracy),
            skipped: totals.skipped,
        }
    }
}

/// An [`EpochLog`] shared by the trainers of one factory.
pub(crate) type SharedLog = Arc<Mutex<EpochLog>>;

/// Adds `rows` applied rows to `epoch` of a shared log.
pub(crate) fn add_rows(log: &SharedLog, epoch: Epoch, rows: u64) {
    let totals = EpochTotals {
        rows,
        ..EpochTotals::default()
    };
    log.lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .add(epoch, totals);
}

/// The statistics of a shared log.
pub(crate) fn stats(log: &SharedLog) -> Vec<EpochStats> {
    log.lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .stats()
}
