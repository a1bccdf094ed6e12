//! `--epoch-rows`: which rows of each source of a mixed job an epoch takes.
//!
//! A source of `R` rows that gives `T` rows an epoch is planned as
//! `ceil(T / R)` passes over its splits (see `crate::mix`). Every pass but
//! the last keeps every row; the last keeps the `T mod R` rows (all, when it
//! divides) whose places in a permutation of `0..R` of its own per (seed,
//! epoch, source) come first: exactly `T` rows an epoch, none twice within it
//! while `T <= R`, whole passes first otherwise, and another choice (and order
//! of tasks) every epoch. The permutation is a Feistel network walked back
//! into `0..R`, so a row's place is computed alone, in any reader, after any
//! resume.

use crate::epoch::Epoch;
use serde::{Deserialize, Serialize};

use super::splitmix::mix;

/// Salt of the permutations, apart from every other seeded stream.
const SALT: u64 = 0x6570_6f63_6872_6f77;

/// The rows each epoch takes of each source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochRows {
    /// The job's seed.
    pub seed: u64,
    /// Per source: its rows, and the rows an epoch takes of it.
    pub sources: Vec<(u64, u64)>,
    /// Per split: its source, its first row among its source's rows, and
    /// the pass over its source it belongs to.
    pub splits: Vec<(u32, u64, u32)>,
}

impl EpochRows {
    /// Whether epoch `epoch` trains row `row` of split `split` (counted from
    /// the split's first row).
    pub fn keeps(&self, split: u32, epoch: Epoch, row: u64) -> bool {
        let Some(&(source, first, pass)) = self.splits.get(split as usize) else {
            return true;
        };
        let Some(&(rows, taken)) = self.sources.get(source as usize) else {
            return true;
        };
        if rows == 0 {
            return false;
        }
        let whole = taken / rows;
        match u64::from(pass).cmp(&whole) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => {
                let key = mix(self.seed ^ SALT ^ (u64::from(epoch.0) << 32) ^ u64::from(source));
                place(key, rows, first + row) < taken % rows
            }
        }
    }
}

/// The place of `x` (`< domain`) in the permutation of `0..domain` keyed by
/// `key`: a four-round Feistel network on the smallest even number of bits
/// that holds `domain`, applied again until the value falls inside it.
pub fn place(key: u64, domain: u64, x: u64) -> u64 {
    if domain <= 1 {
        return 0;
    }
    let bits = 64 - (domain - 1).leading_zeros();
    let half = bits.div_ceil(2);
    let mask = (1u64 << half) - 1;
    let mut y = x;
    loop {
        let (mut left, mut right) = (y >> half, y & mask);
        for round in 0..4u64 {
            let f = mix(key ^ (round << 58) ^ right) & mask;
            (left, right) = (right, left ^ f);
        }
        y = (left << half) | right;
        if y < domain {
            return y;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_a_permutation() {
        for domain in [1u64, 2, 3, 7, 64, 100, 1000] {
            let mut seen: Vec<u64> = (0..domain).map(|x| place(42, domain, x)).collect();
            seen.sort_unstable();
            assert!(seen.iter().copied().eq(0..domain), "domain {domain}");
        }
    }

    #[test]
    fn an_epoch_takes_exactly_its_rows() {
        // A source of 100 rows in two splits of 50, taking 30 an epoch; and
        // one of 20 rows in one split, taking 50: two whole passes and 10.
        let plan = EpochRows {
            seed: 9,
            sources: vec![(100, 30), (20, 50)],
            splits: vec![(0, 0, 0), (0, 50, 0), (1, 0, 0), (1, 0, 1), (1, 0, 2)],
        };
        for epoch in Epoch::all(3) {
            let first: u64 = (0..2)
                .map(|s| (0..50).filter(|&r| plan.keeps(s, epoch, r)).count() as u64)
                .sum();
            assert_eq!(first, 30);
            let second: u64 = (2..5)
                .map(|s| (0..20).filter(|&r| plan.keeps(s, epoch, r)).count() as u64)
                .sum();
            assert_eq!(second, 50);
        }
        let kept = |epoch| {
            (0..50)
                .filter(|&r| plan.keeps(0, epoch, r))
                .collect::<Vec<_>>()
        };
        assert_ne!(kept(Epoch(0)), kept(Epoch(1)), "each epoch chooses again");
    }
}
