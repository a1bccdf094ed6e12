//! Where a request's time goes inside the master, as Prometheus histograms:
//! the wait for the state lock, the wait for the group commit to make its
//! change durable (nearly all of a handler's time), and the journal's writes
//! and syncs.
//! Recording is a few relaxed atomic additions, cheap enough to stay on.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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

    /// Writes the histogram in the Prometheus text format.
    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut count = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            count += bucket.load(Ordering::Relaxed);
            match BOUNDS_US.get(i) {
                Some(bound) => {
                    let le = *bound as f64 / 1e6;
                    let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {count}");
                }
                None => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
                }
            }
        }
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
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
    /// Appends every histogram to a Prometheus text exposition.
    pub fn write_metrics(&self, out: &mut String) {
        self.lock.write(
            out,
            "sluice_state_lock_wait_seconds",
            "Waits for the master state's lock before applying a command.",
        );
        self.durable.write(
            out,
            "sluice_durable_wait_seconds",
            "From a command applied to its change durable (group commit).",
        );
        self.write.write(
            out,
            "sluice_journal_write_seconds",
            "Journal writes of one group-commit batch.",
        );
        self.sync.write(
            out,
            "sluice_journal_sync_seconds",
            "Journal syncs of one group-commit batch.",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_end_in_inf() {
        let h = Histogram::default();
        h.record(Duration::from_micros(40));
        h.record(Duration::from_micros(50));
        h.record(Duration::from_micros(51));
        h.record(Duration::from_secs(10));
        let mut out = String::new();
        h.write(&mut out, "t", "test");
        assert!(out.contains("t_bucket{le=\"0.00005\"} 2\n"), "{out}");
        assert!(out.contains("t_bucket{le=\"0.0001\"} 3\n"), "{out}");
        assert!(out.contains("t_bucket{le=\"2\"} 3\n"), "{out}");
        assert!(out.contains("t_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("t_count 4\n"), "{out}");
    }
}
