//! Where a request's time goes inside the master, as Prometheus histograms:
//! the wait for the state lock, the wait for the group commit to make its
//! change durable (nearly all of a handler's time), and the journal's writes
//! and syncs.
//! Recording is a few relaxed atomic additions, cheap enough to stay on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// Upper bounds of the buckets, in microseconds (the last bucket is `+Inf`).
const BOUNDS_US: [u64; 24] = [
    50, 100, 200, 300, 500, 750, 1_000, 1_500, 2_000, 3_000, 4_000, 5_000, 7_500, 10_000, 15_000,
    20_000, 30_000, 50_000, 75_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000,
];

/// A histogram of durations with fixed buckets, filled without locks.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Counts one duration.
    pub fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let i = BOUNDS_US.partition_point(|&bound| bound < us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        // Per-bucket counts, the last bucket's bound `+Inf` (written for `f64::MAX`).
        let buckets: Vec<(f64, u64)> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let bound = BOUNDS_US.get(i).map_or(f64::MAX, |&us| us as f64 / 1e6);
                (bound, n.load(Ordering::Relaxed))
            })
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The master's timing histograms.
#[derive(Debug, Default)]
pub struct Timings {
    /// Waits for the master state's lock before applying a command.
    pub lock: Histogram,
    /// From a command applied to its change durable (the group commit).
    pub durable: Histogram,
    /// Journal writes of one batch (taking the changes and writing them).
    pub write: Histogram,
    /// Journal syncs of one batch (`fdatasync`, or the object's upload).
    pub sync: Histogram,
}

impl Timings {
    /// Adds every histogram to a `/metrics` exposition.
    pub fn encode(&self, e: &mut DescriptorEncoder) -> std::fmt::Result {
        for (histogram, name, help) in [
            (
                &self.lock,
                "sluice_state_lock_wait_seconds",
                "Waits for the master state's lock before applying a command.",
            ),
            (
                &self.durable,
                "sluice_durable_wait_seconds",
                "From a command applied to its change durable (group commit).",
            ),
            (
                &self.write,
                "sluice_journal_write_seconds",
                "Journal writes of one group-commit batch.",
            ),
            (
                &self.sync,
                "sluice_journal_sync_seconds",
                "Journal syncs of one group-commit batch.",
            ),
        ] {
            histogram.encode(e.encode_descriptor(name, help, None, MetricType::Histogram)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The timings alone, as a scrape would show them.
    #[derive(Debug)]
    struct Only(Timings);

    impl prometheus_client::collector::Collector for Only {
        fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
            self.0.encode(&mut e)
        }
    }

    #[test]
    fn buckets_are_cumulative_and_end_in_inf() {
        let h = Histogram::default();
        h.record(Duration::from_micros(40));
        h.record(Duration::from_micros(50));
        h.record(Duration::from_micros(51));
        h.record(Duration::from_secs(10));
        let timings = Timings {
            lock: h,
            ..Timings::default()
        };
        let out = crate::master::metrics::encode_collector(Only(timings)).expect("encode");
        assert!(
            out.contains("sluice_state_lock_wait_seconds_bucket{le=\"0.00005\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("sluice_state_lock_wait_seconds_bucket{le=\"0.0001\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("sluice_state_lock_wait_seconds_bucket{le=\"2.0\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("sluice_state_lock_wait_seconds_bucket{le=\"+Inf\"} 4\n"),
            "{out}"
        );
        assert!(
            out.contains("sluice_state_lock_wait_seconds_count 4\n"),
            "{out}"
        );
    }
}
