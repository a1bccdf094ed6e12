//! The order in which an epoch hands out its splits: a seeded, reproducible shuffle.
//!
//! The shuffle is written here rather than taken from `rand::seq` because a journal
//! replayed by a newer build must hand out the same splits under the same attempt ids;
//! `rand` may change its shuffle between versions, while the ChaCha8 stream is fixed.

use crate::epoch::Epoch;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Splits `0..splits` in the order epoch `epoch` of a job seeded with `seed` leases them.
///
/// Each epoch reads its own ChaCha8 stream (stream number = epoch) of the generator
/// seeded with `seed`, so epochs differ from each other and no two `(seed, epoch)`
/// pairs share a stream. Splits beyond `u32::MAX` are not listed.
pub fn epoch_order(seed: u64, epoch: Epoch, splits: usize) -> Vec<u32> {
    let splits = u32::try_from(splits).unwrap_or(u32::MAX);
    let mut order: Vec<u32> = (0..splits).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(u64::from(epoch.0));
    // Fisher-Yates: position i takes a uniform pick among positions 0..=i.
    for i in (1..order.len()).rev() {
        let j = below(&mut rng, i as u64 + 1);
        order.swap(i, j as usize);
    }
    order
}

/// How the tasks of a job that mixes several sources take turns in an epoch's
/// order: each source's splits keep their shuffled order among themselves,
/// and a split's place is where its middle row falls in its source's rows,
/// over its source's `pace`: `(2 × rows before it + its rows) / pace`. A
/// source of pace 3 so goes three times as fast as one of pace 1, and
/// sources of pace equal to their rows each spread over the whole epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interleave {
    /// Each split's source.
    pub source: Vec<u32>,
    /// Each split's rows (as planned).
    pub rows: Vec<u64>,
    /// Each source's pace (at least 1).
    pub pace: Vec<u64>,
}

impl Interleave {
    /// `order` (every split once) with the sources' splits interleaved.
    pub fn arrange(&self, order: Vec<u32>) -> Vec<u32> {
        let mut before = vec![0u64; self.pace.len()];
        let mut placed: Vec<(u128, u128, u32)> = order
            .into_iter()
            .map(|split| {
                let source = self.source.get(split as usize).copied().unwrap_or(0) as usize;
                let rows = self.rows.get(split as usize).copied().unwrap_or(0);
                let at = before.get(source).copied().unwrap_or(0);
                if let Some(b) = before.get_mut(source) {
                    *b = b.saturating_add(rows);
                }
                let pace = self.pace.get(source).copied().unwrap_or(1).max(1);
                (
                    u128::from(at) * 2 + u128::from(rows),
                    u128::from(pace),
                    split,
                )
            })
            .collect();
        // Stable: splits at the same place keep the shuffled order.
        placed.sort_by(|a, b| (a.0 * b.1).cmp(&(b.0 * a.1)));
        placed.into_iter().map(|(_, _, split)| split).collect()
    }
}

/// Salt of the stream [`window_order`] draws from, apart from the epochs' orders.
const WINDOW_SALT: u64 = 0x676c_6f62_616c_5f77;

/// Positions `0..rows` in the order `--shuffle global` deals the rows of
/// window `window` (counted from 0 within the epoch) of epoch `epoch` of a job
/// seeded with `seed`: a Fisher-Yates shuffle on a ChaCha8 stream of its own
/// per (epoch, window), pinned like [`epoch_order`] so that a run resumed by a
/// later build deals the same batches. Windows beyond `u32::MAX` share streams.
pub fn window_order(seed: u64, epoch: Epoch, window: u64, rows: usize) -> Vec<u32> {
    let rows = u32::try_from(rows).unwrap_or(u32::MAX);
    let mut order: Vec<u32> = (0..rows).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ WINDOW_SALT);
    rng.set_stream((u64::from(epoch.0) << 32) | (window & 0xffff_ffff));
    for i in (1..order.len()).rev() {
        let j = below(&mut rng, i as u64 + 1);
        order.swap(i, j as usize);
    }
    order
}

/// A uniform draw from `0..bound` (`bound >= 1`), by multiply-shift with rejection.
fn below(rng: &mut ChaCha8Rng, bound: u64) -> u64 {
    let threshold = bound.wrapping_neg() % bound;
    loop {
        let wide = u128::from(rng.next_u64()) * u128::from(bound);
        if (wide as u64) >= threshold {
            return (wide >> 64) as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_take_turns_by_pace() {
        // Source 0: 6 splits of 10 rows at pace 3; source 1: 2 of 10 at pace 2.
        let mix = Interleave {
            source: vec![0, 0, 0, 0, 0, 0, 1, 1],
            rows: vec![10; 8],
            pace: vec![3, 2],
        };
        let order = mix.arrange(epoch_order(7, Epoch(0), 8));
        let sources: Vec<u32> = order.iter().map(|&s| mix.source[s as usize]).collect();
        assert_eq!(sources, vec![0, 1, 0, 1, 0, 0, 0, 0], "{order:?}");
        assert!(is_permutation(&order));
    }

    fn is_permutation(order: &[u32]) -> bool {
        let mut sorted = order.to_vec();
        sorted.sort_unstable();
        sorted.iter().copied().eq(0..order.len() as u32)
    }

    #[test]
    fn every_epoch_is_a_permutation() {
        for splits in [0, 1, 2, 7, 100] {
            for epoch in Epoch::all(4) {
                let order = epoch_order(42, epoch, splits);
                assert_eq!(order.len(), splits);
                assert!(is_permutation(&order), "splits {splits} epoch {epoch}");
            }
        }
    }

    #[test]
    fn epochs_differ_and_seeds_reproduce() {
        let first = epoch_order(7, Epoch(0), 50);
        assert_ne!(first, epoch_order(7, Epoch(1), 50));
        assert_ne!(first, epoch_order(8, Epoch(0), 50));
        assert_eq!(first, epoch_order(7, Epoch(0), 50));
    }

    #[test]
    fn order_is_pinned_across_builds() {
        // A journal replayed by a later build depends on this exact order.
        assert_eq!(epoch_order(1, Epoch(0), 8), PINNED);
    }

    const PINNED: [u32; 8] = [5, 6, 2, 4, 1, 7, 0, 3];
    const WINDOW_PINNED: [u32; 8] = [1, 4, 2, 7, 0, 6, 3, 5];

    #[test]
    fn window_orders_are_seeded_permutations_of_their_own() {
        let first = window_order(7, Epoch(0), 0, 1000);
        assert!(is_permutation(&first));
        assert_eq!(first, window_order(7, Epoch(0), 0, 1000), "the same seed");
        assert_ne!(first, window_order(8, Epoch(0), 0, 1000), "another seed");
        assert_ne!(first, window_order(7, Epoch(1), 0, 1000), "another epoch");
        assert_ne!(first, window_order(7, Epoch(0), 1, 1000), "another window");
        let moved = first
            .iter()
            .enumerate()
            .filter(|(i, p)| *i as u32 != **p)
            .count();
        assert!(moved > 900, "hardly shuffled: {moved} of 1000 moved");
        assert!(window_order(7, Epoch(0), 0, 0).is_empty());
        assert_eq!(window_order(7, Epoch(0), 0, 1), vec![0]);
        // A resumed run of a later build deals the same batches.
        assert_eq!(window_order(1, Epoch(0), 0, 8), WINDOW_PINNED);
    }

    #[test]
    fn draws_cover_the_range() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut seen = [false; 5];
        for _ in 0..200 {
            seen[below(&mut rng, 5) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(below(&mut rng, 1), 0);
    }
}
