//! Read retry: a read that fails for a reason that may pass (see
//! [`connectors::Error::is_transient`]: the file not found or refused, a
//! connection error or timeout, HTTP 5xx or 429) is tried again by its
//! reader, from the row it failed at, after jittered waits from
//! [`FIRST_WAIT`] doubling up to [`LONGEST_WAIT`], for up to `--read-retry`
//! from the first failure; only then is it a failed attempt of its task.
//! Rows read meanwhile start the count afresh. Corrupt data, and any error
//! with a zero `--read-retry`, fail at once.
//!
//! The lease stays this worker's while its reader waits: the heartbeats
//! renew every lease the worker holds, whatever its reader is doing, and a
//! stop (SIGTERM) ends the reader, wait included.

use std::time::{Duration, Instant};

use super::backoff::Backoff;

/// The first wait, at most.
pub const FIRST_WAIT: Duration = Duration::from_millis(500);
/// The longest wait.
pub const LONGEST_WAIT: Duration = Duration::from_secs(30);

/// The read retries of one reader.
#[derive(Debug)]
pub struct ReadRetry {
    /// How long failures may go on before one counts (`--read-retry`).
    limit: Duration,
    waits: Backoff,
    /// The first failure since rows were last read.
    since: Option<Instant>,
}

impl ReadRetry {
    /// Retries for up to `limit` (zero: none).
    pub fn new(limit: Duration) -> ReadRetry {
        ReadRetry {
            limit,
            waits: Backoff::between(FIRST_WAIT, LONGEST_WAIT, None),
            since: None,
        }
    }

    /// How long to wait before reading again after `error` failed a read at
    /// `now`; `None` when the failure counts now: it will not pass by
    /// waiting, or `limit` has passed since the first failure. The last wait
    /// ends at that limit, so the last try is made then.
    pub fn wait_after(&mut self, error: &connectors::Error, now: Instant) -> Option<Duration> {
        if self.limit.is_zero() || !error.is_transient() {
            return None;
        }
        let since = *self.since.get_or_insert(now);
        let left = self
            .limit
            .saturating_sub(now.saturating_duration_since(since));
        if left.is_zero() {
            return None;
        }
        Some(self.waits.next_wait().min(left))
    }

    /// Rows were read: a later failure starts from the first wait again.
    pub fn read_rows(&mut self) {
        if self.since.take().is_some() {
            self.waits.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing() -> connectors::Error {
        connectors::Error::NotFound {
            path: "file:///data/part-00001.parquet".into(),
        }
    }

    #[test]
    fn transient_failures_wait_doubling_until_the_limit_then_count() {
        let mut retry = ReadRetry::new(Duration::from_secs(120));
        let start = Instant::now();
        let mut now = start;
        let mut bound = FIRST_WAIT;
        let mut waits = 0;
        while let Some(wait) = retry.wait_after(&missing(), now) {
            let left = Duration::from_secs(120) - (now - start);
            assert!(wait <= bound && wait <= left, "{wait:?} for {bound:?}");
            assert!(wait >= bound / 2 || wait == left, "{wait:?} for {bound:?}");
            now += wait;
            bound = (bound * 2).min(LONGEST_WAIT);
            waits += 1;
        }
        assert_eq!(
            now - start,
            Duration::from_secs(120),
            "the last try is at the limit"
        );
        assert!((6..=20).contains(&waits), "{waits} waits");
    }

    #[test]
    fn rows_read_start_the_count_afresh() {
        let mut retry = ReadRetry::new(Duration::from_secs(2));
        let start = Instant::now();
        assert!(retry.wait_after(&missing(), start).is_some());
        assert!(retry
            .wait_after(&missing(), start + Duration::from_secs(2))
            .is_none());
        retry.read_rows();
        let later = start + Duration::from_secs(10);
        let wait = retry.wait_after(&missing(), later).expect("a fresh wait");
        assert!(wait <= FIRST_WAIT, "{wait:?}");
    }

    #[test]
    fn corrupt_data_and_a_zero_limit_count_at_once() {
        let corrupt =
            connectors::Error::corrupt("file:///data/part-00000.parquet", "parquet", "bad magic");
        let now = Instant::now();
        assert!(ReadRetry::new(Duration::from_secs(120))
            .wait_after(&corrupt, now)
            .is_none());
        assert!(ReadRetry::new(Duration::ZERO)
            .wait_after(&missing(), now)
            .is_none());
    }
}
