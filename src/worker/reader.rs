//! Reader: one leased task's split decoded into batches, sent downstream with
//! the row numbers they carry, within the worker's read-ahead budget: the
//! fetched bytes hold their share of it until decoded, each batch sent until
//! the coordinator takes it.
//!
//! Readers run on a runtime of their own ([`decode_pool`]): fetching and
//! decoding take whole cores, and apart from them the coordinator, the
//! heartbeats and the master client never wait behind a decode.

use crate::epoch::Epoch;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use connectors::read_ahead::{Queued, Reservation};
use connectors::{read_split_within, Location, ReadAhead, ReadPlan, Split};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tracing::warn;

use super::read_retry::ReadRetry;
use crate::protocol::select::Selection;
use crate::queue::{AttemptId, Lease};
use crate::trainer::hashing;

/// What a reader reports.
#[derive(Debug)]
pub enum ReadEvent {
    /// Rows `start..start + batch.num_rows()` of the attempt's split.
    Batch {
        /// The attempt.
        attempt: AttemptId,
        /// The task's epoch.
        epoch: Epoch,
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
    /// in `Batch` events, none after; the error names the file. A failure
    /// that may pass comes only once `--read-retry` is spent.
    Failed {
        /// The attempt.
        attempt: AttemptId,
        /// The row the read failed at (rows before it were delivered).
        at: u64,
        /// The read's failure.
        error: connectors::Error,
    },
    /// Rows `start..start + len` of the attempt's split, read and cut by the
    /// job's selection (`--split`, `--sample`): consumed, never shipped.
    Cut {
        /// The attempt.
        attempt: AttemptId,
        /// First row cut.
        start: u64,
        /// Rows cut.
        len: u64,
    },
    /// A read failed for a reason that may pass; the reader tries again
    /// after a wait (see [`super::read_retry`]), holding its lease.
    Waiting {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The store refused this process's login (see
    /// [`connectors::Error::is_login`]): no read can succeed until it is fixed.
    LoginRefused {
        /// The read's failure.
        error: connectors::Error,
    },
}

/// One read of a lease's split: from its committed offset, on a task of its
/// own, within the budget `ahead`, trying again for up to `read_retry` a read
/// that fails for a reason that may pass ([`super::read_retry`]). Rows the
/// job's `select`ion cuts are reported as cut, and a split is read no further
/// than its `--limit`.
pub struct ReadTask {
    /// Where the split's file is.
    pub location: Location,
    /// The split to read.
    pub split: Split,
    /// What is read of it.
    pub plan: Arc<ReadPlan>,
    /// The job's selection (`--split`, `--sample`, `--limit`, `--epoch-rows`).
    pub select: Arc<Selection>,
    /// The lease (or a replay's made-up one).
    pub lease: Lease,
    /// The read-ahead budget.
    pub ahead: ReadAhead,
    /// How long a read that fails for a reason that may pass is tried again.
    pub read_retry: Duration,
    /// Where the rows go.
    pub tx: mpsc::Sender<ReadEvent>,
}

impl ReadTask {
    /// Starts the read; the handle stops it (a lost lease, a stop), a wait
    /// to read again included.
    pub fn spawn(mut self) -> AbortHandle {
        // A file declared repaired is read as it is now: its size is checked,
        // not the entity tag or modification time it had when planned.
        if self.lease.repaired {
            self.split.stamp = connectors::split::FileStamp::default();
        }
        decode_pool().spawn(self.run()).abort_handle()
    }
}

/// How one pass over the split ended.
enum Pass {
    /// At its end (or the cap, or a final skip): the read is done.
    Done,
    /// A failure that may pass: read again after this wait.
    Again(Duration),
    /// Reported failed, or nobody listens any more.
    Over,
}

impl ReadTask {
    async fn run(self) {
        let queued = Queued::default();
        let mut retry = ReadRetry::new(self.read_retry);
        // From the first row not yet sent: the lease's offset, or where
        // a failed read stopped.
        let mut row = self.lease.offset;
        loop {
            match self.pass(&mut row, &mut retry, &queued).await {
                Pass::Done => break,
                Pass::Again(wait) => tokio::time::sleep(wait).await,
                Pass::Over => return,
            }
        }
        let attempt = self.lease.attempt;
        let _ = self.tx.send(ReadEvent::Done { attempt, end: row }).await;
    }

    /// Reads from `row` on, until the end, the cap or a failure.
    async fn pass(&self, row: &mut u64, retry: &mut ReadRetry, queued: &Queued) -> Pass {
        let (lease, select) = (&self.lease, &self.select);
        let cap = select.cap(lease.split);
        let key = select
            .key
            .as_ref()
            .filter(|_| select.by_key())
            .and_then(|k| self.plan.output_schema().index_of(k).ok());
        let mut stream =
            read_split_within(&self.location, &self.split, &self.plan, *row, &self.ahead);
        while let Some(item) = stream.next().await {
            let batch = match item {
                Ok(batch) => batch,
                Err(error) => {
                    drop(stream);
                    return self.failed(error, *row, retry).await;
                }
            };
            if batch.num_rows() == 0 {
                continue;
            }
            retry.read_rows();
            let batch = match cap {
                Some(cap) if *row >= cap => return Pass::Done,
                Some(cap) if *row + batch.num_rows() as u64 > cap => {
                    batch.slice(0, (cap - *row) as usize)
                }
                _ => batch,
            };
            let start = *row;
            *row += batch.num_rows() as u64;
            let sent = Sent {
                lease,
                ahead: &self.ahead,
                queued,
                tx: &self.tx,
            };
            let shipped = match (key, &select.epoch_rows) {
                (None, None) => sent.rows(start, *row, batch).await,
                (key, epoch_rows) => {
                    let mut kept = vec![true; batch.num_rows()];
                    if let Some(column) = key {
                        kept_by_key(&mut kept, &batch, column, select);
                    }
                    if let Some(plan) = epoch_rows {
                        for (i, keep) in kept.iter_mut().enumerate() {
                            *keep &= plan.keeps(lease.split, lease.epoch, start + i as u64);
                        }
                    }
                    sent.selected(start, batch, &kept).await
                }
            };
            if shipped.is_err() {
                return Pass::Over;
            }
            if cap.is_some_and(|cap| *row >= cap) {
                return Pass::Done;
            }
            // Nothing wanted past a final skip to the end (a replay).
            if lease
                .skip
                .last()
                .is_some_and(|&(s, e)| e == u64::MAX && *row >= s)
            {
                return Pass::Done;
            }
        }
        Pass::Done
    }

    /// A read failed at `row`: refused logins stop the job, a failure that
    /// may pass is read again after a wait, any other fails the attempt.
    async fn failed(&self, error: connectors::Error, row: u64, retry: &mut ReadRetry) -> Pass {
        let attempt = self.lease.attempt;
        if error.is_login() {
            let _ = self.tx.send(ReadEvent::LoginRefused { error }).await;
            return Pass::Over;
        }
        let Some(wait) = retry.wait_after(&error, Instant::now()) else {
            let failed = ReadEvent::Failed {
                attempt,
                at: row,
                error,
            };
            let _ = self.tx.send(failed).await;
            return Pass::Over;
        };
        warn!(%attempt, row, %error, wait_secs = wait.as_secs_f64(), "read failed; reading again after a wait (--read-retry)");
        if self.tx.send(ReadEvent::Waiting { attempt }).await.is_err() {
            return Pass::Over;
        }
        Pass::Again(wait)
    }
}

/// Where a reader sends the rows it read.
struct Sent<'a> {
    lease: &'a Lease,
    ahead: &'a ReadAhead,
    queued: &'a Queued,
    tx: &'a mpsc::Sender<ReadEvent>,
}

impl Sent<'_> {
    /// Sends the rows of `batch` (from row `start`) marked `kept`, and
    /// reports the others cut.
    async fn selected(&self, start: u64, batch: RecordBatch, kept: &[bool]) -> Result<(), ()> {
        let mut run = 0;
        while run < kept.len() {
            let keep = kept[run];
            let mut end = run + 1;
            while end < kept.len() && kept[end] == keep {
                end += 1;
            }
            let (from, to) = (start + run as u64, start + end as u64);
            if keep {
                self.rows(from, to, batch.slice(run, end - run)).await?;
            } else {
                for (s, e) in unskipped(from, to, &self.lease.skip) {
                    let cut = ReadEvent::Cut {
                        attempt: self.lease.attempt,
                        start: s,
                        len: e - s,
                    };
                    self.tx.send(cut).await.map_err(drop)?;
                }
            }
            run = end;
        }
        Ok(())
    }

    /// Sends rows `start..end` of the split (`batch`), less the lease's
    /// skipped rows, each run holding its share of the read-ahead budget;
    /// `Err` when nobody listens any more.
    async fn rows(&self, start: u64, end: u64, batch: RecordBatch) -> Result<(), ()> {
        let bytes = connectors::read_ahead::batch_bytes(&batch);
        for (from, to) in unskipped(start, end, &self.lease.skip) {
            let rows = if (from, to) == (start, end) {
                batch.clone()
            } else {
                batch.slice((from - start) as usize, (to - from) as usize)
            };
            // Slices share the batch's buffers: each holds its rows' part.
            let share = bytes * (to - from) / (end - start);
            let held = self.ahead.reserve_queued(share, self.queued).await;
            let event = ReadEvent::Batch {
                attempt: self.lease.attempt,
                epoch: self.lease.epoch,
                start: from,
                batch: rows,
                held,
            };
            self.tx.send(event).await.map_err(drop)?;
        }
        Ok(())
    }
}

/// Clears `kept` for the rows of `batch` that `select` cuts by the hash of
/// their `key` column (a key it cannot hash keeps every row rather than guess;
/// the plan checked it is hashable).
fn kept_by_key(kept: &mut [bool], batch: &RecordBatch, key: usize, select: &Selection) {
    if let Some(hashes) = hashing::hashes(batch.column(key).as_ref()) {
        for (keep, hash) in kept.iter_mut().zip(hashes) {
            *keep &= select.keeps(hash);
        }
    }
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
pub(super) fn unskipped(start: u64, end: u64, skip: &[(u64, u64)]) -> Vec<(u64, u64)> {
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
