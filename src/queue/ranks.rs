//! The ranks of a job of `--world-size W`: each worker holds a run of
//! ranks, one per device, while it is live; a rank whose worker went silent
//! past the lease timeout goes to the next worker that asks. A worker holding
//! ranks `[a, b)` is leased only the tasks of their lanes
//! ([`super::Lanes::of_ranks`]).

use serde::{Deserialize, Serialize};

/// A run of ranks of a world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ranks {
    /// The first rank held.
    pub first: u32,
    /// Ranks held, one per device of the worker.
    pub count: u32,
    /// Ranks in the world (`--world-size`).
    pub world: u32,
}

impl Ranks {
    /// The ranks held, `first..first + count`.
    pub fn range(&self) -> std::ops::Range<u32> {
        self.first..self.first + self.count
    }
}

/// The first run of `count` ranks of `world` that none of `held` overlaps.
pub(super) fn free_run(held: &[std::ops::Range<u32>], world: u32, count: u32) -> Option<u32> {
    (0..=world.checked_sub(count)?).find(|&first| {
        let run = first..first + count;
        !held.iter().any(|h| h.start < run.end && run.start < h.end)
    })
}

#[cfg(test)]
mod tests {
    use super::free_run;
    use std::ops::Range;

    fn held(start: u32, end: u32) -> [Range<u32>; 1] {
        [Range { start, end }]
    }

    #[test]
    fn a_worker_takes_the_first_run_left_free() {
        assert_eq!(free_run(&[], 3, 2), Some(0));
        assert_eq!(free_run(&held(0, 2), 3, 1), Some(2));
        assert_eq!(free_run(&held(0, 1), 3, 2), Some(1));
        assert_eq!(free_run(&held(1, 2), 3, 2), None);
        assert_eq!(free_run(&[], 2, 3), None);
    }
}
