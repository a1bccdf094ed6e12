//! How long a worker waits before asking for a lease again after the master
//! answered that there is nothing to lease yet (other workers hold the last
//! tasks of an epoch): from [`FIRST`], doubling with each such answer up to
//! [`LONGEST`], each wait drawn at random between half and all of it. Idle
//! workers so neither ask in step nor often; the first lease that brings
//! tasks starts the next wait short again. The waits are backon's
//! exponential backoff with jitter; [`Backoff::between`] gives other bounds
//! (the retries of an unreachable master, and of reads: [`super::read_retry`]).

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// The first wait, at most.
pub const FIRST: Duration = Duration::from_millis(50);
/// The longest wait.
pub const LONGEST: Duration = Duration::from_secs(1);
/// The longest wait in a job that follows its source: new tasks come at
/// any time, and should reach a trainer soon.
pub const FOLLOW_LONGEST: Duration = Duration::from_millis(100);

/// Waits that double from a first bound to the longest, each drawn between
/// half and all of its bound.
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    waits: ExponentialBackoff,
    longest: Duration,
}

impl Backoff {
    /// The waits between lease requests that found nothing to lease, drawn
    /// from `seed` (give each worker its own).
    pub fn new(seed: u64) -> Backoff {
        Backoff::between(FIRST, LONGEST, Some(seed))
    }

    /// Waits from `first` doubling to `longest`, drawn from `seed`, or from
    /// a random seed when `None`.
    pub fn between(first: Duration, longest: Duration, seed: Option<u64>) -> Backoff {
        // backon's jitter adds up to the current delay to it: a delay of
        // half the bound gives a wait between half and all of the bound.
        let mut builder = ExponentialBuilder::new()
            .with_min_delay(first / 2)
            .with_max_delay(longest / 2)
            .with_jitter()
            .without_max_times();
        if let Some(seed) = seed {
            builder = builder.with_jitter_seed(seed);
        }
        Backoff {
            builder,
            waits: builder.build(),
            longest,
        }
    }

    /// The next wait.
    pub fn next_wait(&mut self) -> Duration {
        // Never ends: no limit on the times nor on the total.
        self.waits.next().unwrap_or(self.longest)
    }

    /// Back to the first wait (a lease brought tasks).
    pub fn reset(&mut self) {
        self.waits = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_longest_each_between_half_and_all_of_its_bound() {
        let mut backoff = Backoff::new(7);
        let mut bound = FIRST;
        for _ in 0..12 {
            let wait = backoff.next_wait();
            assert!(wait >= bound / 2 && wait <= bound, "{wait:?} for {bound:?}");
            bound = (bound * 2).min(LONGEST);
        }
        assert_eq!(bound, LONGEST);
        backoff.reset();
        assert!(backoff.next_wait() <= FIRST, "back to short waits");
    }

    #[test]
    fn workers_with_other_seeds_wait_apart() {
        let waits = |seed| {
            let mut backoff = Backoff::new(seed);
            (0..8).map(|_| backoff.next_wait()).collect::<Vec<_>>()
        };
        assert_ne!(waits(1), waits(2));
    }
}
