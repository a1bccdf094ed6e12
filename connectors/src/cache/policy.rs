//! Which files the cache keeps: a pure rule, no I/O.
//!
//! A training job reads the same files every epoch, in an order that may
//! change between epochs but always covers them all. For such a repeated
//! scan the best a cache of `C` bytes can do is to keep `C` bytes of the
//! files for good: each later epoch then fetches only the rest. Evicting to
//! make room (LRU, FIFO) throws out a file that the next epoch reads before
//! the newcomer, so on a cyclic scan LRU fetches everything every epoch.
//!
//! So: a file is admitted while it fits; files of the current job are never
//! evicted for one another; files of no current job (another dataset, a
//! rewritten file's old copy) are evicted, least recently used first, to
//! make room.

/// One entry as the rule sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The entry's name.
    pub name: String,
    /// Its bytes on disk.
    pub bytes: u64,
    /// Whether a file of the current job is in it.
    pub in_job: bool,
    /// When it was last used (any increasing measure).
    pub used: u64,
}

/// What to do with a file about to be fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Keep it, once these entries (none of the current job's) are removed.
    Admit {
        /// Entries to remove first, by name.
        evict: Vec<String>,
    },
    /// Do not keep it: the cache is full of the job's own files.
    Refuse,
}

/// Whether a file of `incoming` bytes is kept in a cache of `capacity`
/// bytes that holds `held`.
pub fn admit(capacity: u64, held: &[Held], incoming: u64) -> Admission {
    let mut used: u64 = held.iter().map(|h| h.bytes).sum();
    if used.saturating_add(incoming) <= capacity {
        return Admission::Admit { evict: Vec::new() };
    }
    let mut foreign: Vec<&Held> = held.iter().filter(|h| !h.in_job).collect();
    foreign.sort_by_key(|h| h.used);
    let mut evict = Vec::new();
    for h in foreign {
        if used.saturating_add(incoming) <= capacity {
            break;
        }
        used -= h.bytes;
        evict.push(h.name.clone());
    }
    if used.saturating_add(incoming) <= capacity {
        Admission::Admit { evict }
    } else {
        Admission::Refuse
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes fetched over `epochs` passes over files of `sizes`, each epoch
    /// in its own shuffled order, by a cache of `capacity` bytes run by
    /// `admit` (`lru`: evict the least recently used instead).
    fn fetched(sizes: &[u64], capacity: u64, epochs: u64, lru: bool) -> u64 {
        let mut held: Vec<Held> = Vec::new();
        let mut fetched = 0;
        let mut clock = 0;
        let mut order: Vec<usize> = (0..sizes.len()).collect();
        for epoch in 0..epochs {
            // A cheap deterministic shuffle per epoch.
            let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ epoch;
            for i in (1..order.len()).rev() {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                order.swap(i, (state >> 33) as usize % (i + 1));
            }
            for &file in &order {
                clock += 1;
                let name = file.to_string();
                if let Some(h) = held.iter_mut().find(|h| h.name == name) {
                    h.used = clock;
                    continue;
                }
                fetched += sizes[file];
                if lru {
                    while held.iter().map(|h| h.bytes).sum::<u64>() + sizes[file] > capacity
                        && !held.is_empty()
                    {
                        let oldest = (0..held.len()).min_by_key(|&i| held[i].used).unwrap();
                        held.remove(oldest);
                    }
                } else {
                    match admit(capacity, &held, sizes[file]) {
                        Admission::Refuse => continue,
                        Admission::Admit { evict } => held.retain(|h| !evict.contains(&h.name)),
                    }
                }
                if sizes[file] <= capacity {
                    held.push(Held {
                        name,
                        bytes: sizes[file],
                        in_job: true,
                        used: clock,
                    });
                }
            }
        }
        fetched
    }

    #[test]
    fn three_epochs_through_half_a_cache_fetch_twice_the_data_and_lru_three_times() {
        let sizes: Vec<u64> = (0..64).map(|i| 1000 + (i * 37) % 500).collect();
        let total: u64 = sizes.iter().sum();
        let ours = fetched(&sizes, total / 2, 3, false) as f64 / total as f64;
        let lru = fetched(&sizes, total / 2, 3, true) as f64 / total as f64;
        assert!(ours <= 2.05, "kept what fits: {ours:.3}x");
        assert!(lru >= 2.5, "LRU refetches on a cyclic scan: {lru:.3}x");
    }

    #[test]
    fn a_cache_as_large_as_the_data_fetches_it_once() {
        let sizes: Vec<u64> = (0..50).map(|i| 500 + i * 11).collect();
        let total: u64 = sizes.iter().sum();
        assert_eq!(fetched(&sizes, total, 3, false), total);
    }

    #[test]
    fn only_other_jobs_files_are_evicted_oldest_first() {
        let held = vec![
            Held {
                name: "job".into(),
                bytes: 60,
                in_job: true,
                used: 1,
            },
            Held {
                name: "old".into(),
                bytes: 20,
                in_job: false,
                used: 2,
            },
            Held {
                name: "older".into(),
                bytes: 20,
                in_job: false,
                used: 1,
            },
        ];
        assert_eq!(
            admit(100, &held, 15),
            Admission::Admit {
                evict: vec!["older".into()]
            }
        );
        assert_eq!(
            admit(100, &held, 40),
            Admission::Admit {
                evict: vec!["older".into(), "old".into()]
            }
        );
        assert_eq!(admit(100, &held, 41), Admission::Refuse);
        assert_eq!(admit(10, &[], 11), Admission::Refuse);
        assert_eq!(admit(10, &[], 10), Admission::Admit { evict: vec![] });
    }
}
