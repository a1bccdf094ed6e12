//! Reader: one leased task's split decoded into batches, sent downstream with
//! the row numbers they carry, within the worker's read-ahead budget: the
//! fetched bytes hold their share of it until decoded, each batch sent until
//! the coordinator takes it.
//!
//! Readers run on a runtime of their own ([`decode_pool`]): fetching and
//! decoding take whole cores, and apart from them the coordinator, the
//! heartbeats and the master client never wait behind a decode.

use std::sync::{Arc, OnceLock};

use arrow::record_batch::RecordBatch;
use connectors::read_ahead::{Queued, Reservation};
use connectors::{read_split_within, Location, ReadAhead, ReadPlan, Split};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::task::{AttemptId, Lease};

/// What a reader reports.
#[derive(Debug)]
pub enum ReadEvent {
    /// Rows `start..start + batch.num_rows()` of the attempt's split.
    Batch {
        /// The attempt.
        attempt: AttemptId,
        /// The task's epoch.
        epoch: u32,
        /// First row of the batch in the split.
        start: u64,
        /// The rows.
        batch: RecordBatch,
        /// Its share of the read-ahead budget, given back once it is taken.
        held: Reservation,
    },
    /// The split is read to its end, which is row `end`.
    Done {
        /// The attempt.
        attempt: AttemptId,
        /// Rows in the split.
        end: u64,
    },
    /// Reading failed at row `at` of the split: every row before it was sent
    /// in `Batch` events, none after; the error names the file.
    Failed {
        /// The attempt.
        attempt: AttemptId,
        /// The row the read failed at (rows before it were delivered).
        at: u64,
        /// The read's failure.
        error: connectors::Error,
    },
    /// The store refused this process's login (see
    /// [`connectors::Error::is_login`]): no read can succeed until it is fixed.
    LoginRefused {
        /// The read's failure.
        error: connectors::Error,
    },
}

/// Reads the split of `lease` from its committed offset on a task of its own,
/// within the budget `ahead`; the handle stops the read (a lost lease).
pub fn spawn(
    location: Location,
    split: Split,
    plan: Arc<ReadPlan>,
    lease: Lease,
    ahead: ReadAhead,
    tx: mpsc::Sender<ReadEvent>,
) -> AbortHandle {
    let task = decode_pool().spawn(async move {
        let attempt = lease.attempt;
        let mut row = lease.offset;
        let queued = Queued::default();
        let mut stream = read_split_within(&location, &split, &plan, lease.offset, &ahead);
        while let Some(item) = stream.next().await {
            match item {
                Ok(batch) if batch.num_rows() == 0 => {}
                Ok(batch) => {
                    let start = row;
                    row += batch.num_rows() as u64;
                    let bytes = batch.get_array_memory_size() as u64;
                    for (from, to) in unskipped(start, row, &lease.skip) {
                        let rows = if (from, to) == (start, row) {
                            batch.clone()
                        } else {
                            batch.slice((from - start) as usize, (to - from) as usize)
                        };
                        // Slices share the batch's buffers: each holds its rows' part.
                        let share = bytes * (to - from) / (row - start);
                        let held = ahead.reserve_queued(share, &queued).await;
                        let event = ReadEvent::Batch {
                            attempt,
                            epoch: lease.epoch,
                            start: from,
                            batch: rows,
                            held,
                        };
                        if tx.send(event).await.is_err() {
                            return;
                        }
                    }
                    // Nothing wanted past a final skip to the end (a replay).
                    if lease
                        .skip
                        .last()
                        .is_some_and(|&(s, e)| e == u64::MAX && row >= s)
                    {
                        break;
                    }
                }
                Err(error) => {
                    let failed = if error.is_login() {
                        ReadEvent::LoginRefused { error }
                    } else {
                        ReadEvent::Failed {
                            attempt,
                            at: row,
                            error,
                        }
                    };
                    let _ = tx.send(failed).await;
                    return;
                }
            }
        }
        let _ = tx.send(ReadEvent::Done { attempt, end: row }).await;
    });
    task.abort_handle()
}

/// The runtime readers run on: one thread per core, started with the first
/// reader and kept for the life of the process. Where its threads cannot
/// start, readers run on the caller's runtime.
pub fn decode_pool() -> tokio::runtime::Handle {
    static POOL: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let built = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("sluice-decode")
            .enable_all()
            .build();
        match built {
            Ok(runtime) => Some(runtime),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the decoding threads; reading on the main runtime");
                None
            }
        }
    });
    match pool {
        Some(runtime) => runtime.handle().clone(),
        None => tokio::runtime::Handle::current(),
    }
}

/// The runs of rows `start..end` outside the `skip` ranges (sorted, disjoint).
fn unskipped(start: u64, end: u64, skip: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut runs = Vec::new();
    let mut at = start;
    for &(s, e) in skip {
        if e <= at || s >= end {
            continue;
        }
        if s > at {
            runs.push((at, s));
        }
        at = at.max(e);
    }
    if at < end {
        runs.push((at, end));
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::unskipped;

    #[test]
    fn skipped_rows_are_cut_out() {
        assert_eq!(unskipped(0, 10, &[]), vec![(0, 10)]);
        assert_eq!(
            unskipped(0, 10, &[(2, 4), (6, 7)]),
            vec![(0, 2), (4, 6), (7, 10)]
        );
        assert_eq!(unskipped(5, 10, &[(0, 6), (9, 20)]), vec![(6, 9)]);
        assert_eq!(unskipped(5, 10, &[(0, 20)]), vec![]);
    }
}
