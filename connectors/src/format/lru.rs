//! A map bounded in bytes whose entry used least recently leaves first: the
//! footers ([`super::parquet_footers`]) and pages ([`super::parquet_edges`])
//! a process keeps of the Parquet files it reads.

use std::collections::HashMap;
use std::hash::Hash;

struct Entry<V> {
    value: V,
    bytes: usize,
    used_at: u64,
}

/// Values of `bytes` each, at most a bound's worth together.
pub(super) struct Lru<K, V> {
    entries: HashMap<K, Entry<V>>,
    bytes: usize,
    clock: u64,
}

impl<K, V> Default for Lru<K, V> {
    fn default() -> Self {
        Lru {
            entries: HashMap::new(),
            bytes: 0,
            clock: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// The value of `key`, now the one used most recently.
    pub(super) fn get(&mut self, key: &K) -> Option<&V> {
        self.clock += 1;
        let now = self.clock;
        let entry = self.entries.get_mut(key)?;
        entry.used_at = now;
        Some(&entry.value)
    }

    /// The value of `key`, its use not counted.
    pub(super) fn peek(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|e| &e.value)
    }

    /// Keeps `value` (`bytes` of memory) under `key`, then drops the values
    /// used least recently until at most `limit` bytes are kept.
    pub(super) fn insert(&mut self, key: K, value: V, bytes: usize, limit: usize) {
        self.clock += 1;
        let entry = Entry {
            value,
            bytes,
            used_at: self.clock,
        };
        if let Some(old) = self.entries.insert(key, entry) {
            self.bytes -= old.bytes;
        }
        self.bytes += bytes;
        while self.bytes > limit {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used_at)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(gone) = self.entries.remove(&oldest) {
                self.bytes -= gone.bytes;
            }
        }
    }

    /// Bytes kept.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;

    #[test]
    fn the_value_used_least_recently_leaves_first() {
        let mut lru: Lru<&str, u8> = Lru::default();
        lru.insert("a", 1, 4, 10);
        lru.insert("b", 2, 4, 10);
        assert_eq!(lru.get(&"a"), Some(&1));
        lru.insert("c", 3, 4, 10);
        assert_eq!(lru.peek(&"b"), None, "b was used least recently");
        assert_eq!((lru.peek(&"a"), lru.peek(&"c")), (Some(&1), Some(&3)));
        assert_eq!(lru.bytes(), 8);
        lru.insert("a", 4, 2, 10);
        assert_eq!((lru.peek(&"a"), lru.bytes()), (Some(&4), 6), "replaced");
    }
}
