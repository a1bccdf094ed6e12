//! What the shell's simulation checks at the end of a seed, and the paths
//! some seed must take.

use std::collections::HashMap;

use super::sim::Sim;
use super::sim_worker::{id, Row};
use crate::epoch::Epoch;

/// Every path some seed takes.
pub(super) const PATHS: [&str; 41] = [
    "lockstep",
    "global shuffle",
    "global shuffle in lockstep",
    "several devices",
    "checkpoints",
    "a trainer restarts from its checkpoint",
    "replayed after a restart",
    "a read fails",
    "a read again fails",
    "a failed read again ends the run",
    "rows cut",
    "master unreachable",
    "requests waited",
    "worker killed",
    "stopped",
    "handed back",
    "lease lapsed",
    "lease lost",
    "rows held back",
    "report refused",
    "a seed without loss",
    "replayed on a seed without loss",
    // Where the master keeps the rows trainers hold in no checkpoint:
    "rolled back",
    "rolled back on a lost lease",
    "rolled back when counted gone",
    "counted gone",
    "checkpoint refused",
    "unsaved rows served again",
    "rows served again committed again",
    "resumed from a checkpoint",
    "ended with a final checkpoint",
    "joined again after its run ended",
    "several workers",
    "one worker alone",
    "a worker joins beside others",
    // A master's job of `--world-size`:
    "world: ranks taken",
    "world: in lockstep",
    "world: no ranks free, the lease waits",
    "world: workers of unequal devices",
    "world: ranks taken that lie apart",
    "world: a name joins again with another number of devices",
];

impl Sim {
    /// At the end: the job is over, every row of every epoch committed (by
    /// one attempt, as checked on the way) or in the job's checkpoint, and
    /// reached a trainer, exactly once on a seed where nothing was lost;
    /// where the master keeps unsaved rows, in exactly one name's last
    /// recorded checkpoint.
    pub(super) fn check_end(&mut self) {
        let seed = self.seed;
        let books = self.master.books();
        assert!(books.queue.is_over(), "seed {seed}: the job did not end");
        let lossy = self.lossy || books.lossy;
        let cut = books.queue.cut();
        for epoch in (0..self.epochs).map(Epoch) {
            for (split, &rows) in self.rows.iter().enumerate() {
                let split = split as u32;
                let owners = books.owners.get(&(epoch, split));
                let covered = cut.covered(epoch, split);
                for row in 0..rows {
                    let in_cut = epoch.0 < cut.full_epochs
                        || covered.iter().any(|&(s, e)| s <= row && row < e);
                    assert!(
                        in_cut || owners.is_some_and(|o| o.contains_key(&row)),
                        "seed {seed}: row {row} of split {split} in epoch {epoch} never committed"
                    );
                    let times = self.trained.get(&(epoch, id(split, row))).copied();
                    let times = times.unwrap_or(0);
                    assert!(
                        self.rollback || lossy || times == 1,
                        "seed {seed}: row {row} of split {split} in epoch {epoch} trained {times} times"
                    );
                }
            }
        }
        let seen = books.seen.clone();
        drop(books);
        self.seen.extend(seen);
        if self.rollback {
            return self.check_saved();
        }
        if !lossy && self.trained.values().any(|n| *n > 0) {
            self.seen.insert("a seed without loss");
            if self.seen.contains("replayed after a restart") {
                self.seen.insert("replayed on a seed without loss");
            }
        }
    }

    /// Where the master keeps unsaved rows: every row of every epoch is in
    /// exactly one name's last recorded checkpoint (the model its trainers
    /// end with: what they trained after it is lost).
    fn check_saved(&self) {
        let seed = self.seed;
        let mut saved: HashMap<Row, u32> = HashMap::new();
        for name in &self.names {
            for row in name.saved.iter().flat_map(|(_, rows)| rows) {
                *saved.entry(*row).or_default() += 1;
            }
        }
        for epoch in (0..self.epochs).map(Epoch) {
            for (split, &rows) in self.rows.iter().enumerate() {
                for row in 0..rows {
                    let n = saved.remove(&(epoch, id(split as u32, row))).unwrap_or(0);
                    assert_eq!(
                        n, 1,
                        "seed {seed}: row {row} of split {split} in epoch {epoch} is in {n} checkpoints"
                    );
                }
            }
        }
        assert!(
            saved.is_empty(),
            "seed {seed}: rows of no split saved: {saved:?}"
        );
    }
}
