//! The `--model none` trainer: counts rows per epoch and acknowledges every batch at once.

use std::sync::{Arc, Mutex};

use arrow::datatypes::Schema;

use crate::trainer::stats::{self, EpochLog, SharedLog};
use crate::trainer::{Batch, Trainer, TrainerError, TrainerFactory, TrainerReport};

/// Builds [`NoneTrainer`]s sharing one row count per epoch.
#[derive(Default)]
pub struct NoneFactory {
    log: SharedLog,
}

impl NoneFactory {
    /// A factory with no rows counted yet.
    pub fn new() -> Self {
        NoneFactory {
            log: Arc::new(Mutex::new(EpochLog::rows_only())),
        }
    }
}

impl TrainerFactory for NoneFactory {
    fn validate(&self, _schema: &Schema) -> Result<(), TrainerError> {
        Ok(())
    }

    fn make(&self, _device: usize, _devices: usize) -> Result<Box<dyn Trainer>, TrainerError> {
        Ok(Box::new(NoneTrainer {
            log: Arc::clone(&self.log),
        }))
    }

    fn report(&self) -> TrainerReport {
        TrainerReport {
            epochs: stats::stats(&self.log),
            model: None,
        }
    }
}

/// Counts each batch's rows and reports it applied immediately.
pub struct NoneTrainer {
    log: SharedLog,
}

impl Trainer for NoneTrainer {
    fn feed(&mut self, batch: Batch) -> Result<Vec<u64>, TrainerError> {
        stats::add_rows(&self.log, batch.epoch, batch.data.num_rows() as u64);
        Ok(vec![batch.seq])
    }

    fn flush(&mut self) -> Result<Vec<u64>, TrainerError> {
        Ok(Vec::new())
    }

    fn finish(&mut self) -> Result<Vec<u64>, TrainerError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epoch::Epoch;
    use arrow::array::{ArrayRef, Int32Array};
    use arrow::record_batch::RecordBatch;

    fn batch(seq: u64, epoch: Epoch, rows: i32) -> Batch {
        let column = Arc::new(Int32Array::from_iter_values(0..rows)) as ArrayRef;
        let data = RecordBatch::try_from_iter(vec![("x", column)]).expect("batch");
        Batch { seq, epoch, data }
    }

    #[test]
    fn counts_rows_per_epoch_and_acks_at_once() {
        let factory = NoneFactory::new();
        let mut first = factory.make(0, 2).expect("make");
        let mut second = factory.make(1, 2).expect("make");
        assert_eq!(first.feed(batch(0, Epoch(0), 3)).expect("feed"), vec![0]);
        assert_eq!(second.feed(batch(0, Epoch(0), 4)).expect("feed"), vec![0]);
        assert_eq!(first.feed(batch(1, Epoch(1), 5)).expect("feed"), vec![1]);
        assert!(first.finish().expect("finish").is_empty());
        let report = factory.report();
        let rows: Vec<(Epoch, u64)> = report.epochs.iter().map(|e| (e.epoch, e.rows)).collect();
        assert_eq!(rows, vec![(Epoch(0), 7), (Epoch(1), 5)]);
        assert!(report.epochs.iter().all(|e| e.loss.is_none()));
        assert!(report.model.is_none());
    }
}
