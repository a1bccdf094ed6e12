//! Parquet footers kept in memory once read, for the reads of the same file
//! that follow: the planner inspects every file's footer, then each epoch
//! reads each split of it, and on a remote store every footer fetched again
//! is one more round trip before the first row group.
//!
//! Keyed by the file's identity: its URL, size, entity tag and modification
//! time ([`FileStamp`]), so a rewritten file is never decoded with an old
//! footer; a file known only by its size is not kept. Bounded in bytes
//! (the decoded metadata's size in memory): the footer used least recently
//! leaves first.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use parquet::file::metadata::ParquetMetaData;

use super::lru::Lru;
use crate::split::FileStamp;

/// Bytes of decoded footers kept by one process.
const KEPT_BYTES: usize = 64 << 20;

/// A file's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FooterKey {
    url: String,
    size: u64,
    e_tag: Option<String>,
    modified_ns: Option<i64>,
}

impl FooterKey {
    /// The identity of the file at `url` of `size` bytes stamped `stamp`;
    /// `None` when the stamp is empty (a size alone cannot tell a rewrite).
    pub(crate) fn new(url: String, size: u64, stamp: &FileStamp) -> Option<FooterKey> {
        if stamp.is_empty() {
            return None;
        }
        Some(FooterKey {
            url,
            size,
            e_tag: stamp.e_tag.clone(),
            modified_ns: stamp.modified_ns,
        })
    }
}

/// A footer kept, and whether its page index was read with it.
type Kept = (Arc<ParquetMetaData>, bool);

type Footers = Lru<FooterKey, Kept>;

fn footers() -> MutexGuard<'static, Footers> {
    static FOOTERS: OnceLock<Mutex<Footers>> = OnceLock::new();
    FOOTERS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The footer of `key` when kept, with its page index if `page_index` asks.
pub(crate) fn get(key: &FooterKey, page_index: bool) -> Option<Arc<ParquetMetaData>> {
    let mut footers = footers();
    let (meta, with_index) = footers.peek(key)?;
    if page_index && !with_index {
        return None;
    }
    let meta = meta.clone();
    footers.get(key);
    Some(meta)
}

/// Keeps the footer of `key` (read with its page index when `page_index`),
/// evicting the least recently used ones past the bound. A footer larger
/// than the whole bound is not kept; one with a page index is not replaced
/// by one without.
pub(crate) fn keep(key: FooterKey, meta: Arc<ParquetMetaData>, page_index: bool) {
    keep_within(&mut footers(), key, meta, page_index, KEPT_BYTES);
}

fn keep_within(
    footers: &mut Footers,
    key: FooterKey,
    meta: Arc<ParquetMetaData>,
    page_index: bool,
    limit: usize,
) {
    let bytes = meta.memory_size();
    if bytes > limit {
        return;
    }
    if footers
        .peek(&key)
        .is_some_and(|(_, with)| *with && !page_index)
    {
        return;
    }
    footers.insert(key, (meta, page_index), bytes, limit);
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::metadata::FileMetaData;
    use parquet::schema::types::{SchemaDescriptor, Type};

    fn meta() -> Arc<ParquetMetaData> {
        let schema = Type::group_type_builder("schema").build().expect("schema");
        let descr = Arc::new(SchemaDescriptor::new(Arc::new(schema)));
        let file = FileMetaData::new(1, 0, None, None, descr, None);
        Arc::new(ParquetMetaData::new(file, Vec::new()))
    }

    fn key(name: &str, e_tag: &str) -> FooterKey {
        let stamp = FileStamp {
            e_tag: Some(e_tag.to_string()),
            modified_ns: None,
        };
        FooterKey::new(format!("s3://b/{name}"), 100, &stamp).expect("stamped")
    }

    #[test]
    fn a_file_without_a_stamp_is_not_kept() {
        assert!(FooterKey::new("s3://b/f".into(), 1, &FileStamp::default()).is_none());
    }

    #[test]
    fn a_rewritten_file_misses_and_the_least_recently_used_leaves_first() {
        let mut footers = Footers::default();
        let size = meta().memory_size();
        let limit = 2 * size;
        keep_within(&mut footers, key("a", "1"), meta(), false, limit);
        keep_within(&mut footers, key("b", "1"), meta(), false, limit);
        assert!(footers.peek(&key("a", "1")).is_some());
        assert!(footers.peek(&key("a", "2")).is_none(), "a new entity tag");
        // `a` used last: `b` leaves for `c`.
        assert!(footers.get(&key("a", "1")).is_some());
        keep_within(&mut footers, key("c", "1"), meta(), false, limit);
        assert!(footers.peek(&key("a", "1")).is_some());
        assert!(footers.peek(&key("b", "1")).is_none());
        assert_eq!(footers.bytes(), limit);
    }

    #[test]
    fn a_footer_without_its_page_index_does_not_answer_for_one_with_it() {
        let k = key("page-index", "1");
        keep(k.clone(), meta(), false);
        assert!(get(&k, false).is_some());
        assert!(get(&k, true).is_none());
        keep(k.clone(), meta(), true);
        keep(k.clone(), meta(), false);
        assert!(get(&k, true).is_some(), "the page index is kept");
    }
}
