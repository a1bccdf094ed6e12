//! Pages that the windows of one row group share, kept for the next window
//! read by the same process.
//!
//! A split cut into windows of rows (the lanes of `--global-batch-size`, a
//! mix's windows) reads, for each column, the pages that hold its rows: a
//! page that straddles two windows' rows is fetched by both, and so is the
//! column's dictionary page. On a file whose pages are large next to its
//! windows, that is a good part of the bytes. Here the pages at the ends of
//! a window's reads (the first and last range of every run of adjacent
//! ranges it asks for; a dictionary page is a run of its own) are kept, so
//! the window beside it, read later by the same worker, takes them from
//! memory. Pages inside a run belong to that window alone and are not kept.
//!
//! Keyed by the file's identity ([`FooterKey`]: URL, size, entity tag,
//! modification time) and the byte range; bounded in bytes, the page used
//! least recently leaving first. The bytes are copied out of the fetched
//! buffers, so that keeping them holds none of the read-ahead budget.

use std::ops::Range;
use std::sync::{Mutex, MutexGuard, OnceLock};

use bytes::Bytes;

use super::lru::Lru;
use super::parquet_footers::FooterKey;

/// Bytes of pages kept by one process.
const KEPT_BYTES: usize = 32 << 20;

/// A page of a file.
type PageKey = (FooterKey, u64, u64);

type Pages = Lru<PageKey, Bytes>;

fn pages() -> MutexGuard<'static, Pages> {
    static PAGES: OnceLock<Mutex<Pages>> = OnceLock::new();
    PAGES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The bytes of `range` of the file `file`, when kept.
pub(super) fn get(file: &FooterKey, range: &Range<u64>) -> Option<Bytes> {
    pages()
        .get(&(file.clone(), range.start, range.end))
        .cloned()
}

/// Keeps a copy of `bytes`, the bytes of `range` of `file`.
pub(super) fn keep(file: &FooterKey, range: &Range<u64>, bytes: &[u8]) {
    keep_within(&mut pages(), file, range, bytes, KEPT_BYTES);
}

fn keep_within(
    pages: &mut Pages,
    file: &FooterKey,
    range: &Range<u64>,
    bytes: &[u8],
    limit: usize,
) {
    if bytes.len() > limit / 2 {
        return;
    }
    let key = (file.clone(), range.start, range.end);
    pages.insert(key, Bytes::copy_from_slice(bytes), bytes.len(), limit);
}

/// Which of `ranges` are at the ends of a run of adjacent ranges (the
/// pages a window may share with the windows beside it).
pub(super) fn at_run_ends(ranges: &[Range<u64>]) -> Vec<bool> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| (ranges[i].start, ranges[i].end));
    let mut edge = vec![false; ranges.len()];
    for (at, &i) in order.iter().enumerate() {
        let joined_before = at > 0 && ranges[order[at - 1]].end >= ranges[i].start;
        let joined_after = order
            .get(at + 1)
            .is_some_and(|&next| ranges[i].end >= ranges[next].start);
        edge[i] = !joined_before || !joined_after;
    }
    edge
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::FileStamp;

    fn file(name: &str) -> FooterKey {
        let stamp = FileStamp {
            e_tag: Some("e".into()),
            ..FileStamp::default()
        };
        FooterKey::new(name.into(), 100, &stamp).expect("stamped")
    }

    #[test]
    fn the_ends_of_each_run_of_adjacent_pages_are_kept_not_their_middle() {
        // A dictionary page alone, then pages 10..40 of one column, then
        // pages 70..80 of another; asked out of order.
        let ranges = vec![30..40, 0..5, 10..20, 20..30, 70..80];
        assert_eq!(at_run_ends(&ranges), vec![true, true, true, false, true]);
        assert!(at_run_ends(&[]).is_empty());
    }

    #[test]
    fn pages_are_kept_per_file_and_the_least_recently_used_leave_first() {
        let mut pages = Pages::default();
        let (a, b) = (file("s3://b/a"), file("s3://b/b"));
        keep_within(&mut pages, &a, &(0..4), b"aaaa", 12);
        keep_within(&mut pages, &b, &(0..4), b"bbbb", 12);
        keep_within(&mut pages, &a, &(4..7), b"ccc", 12);
        assert_eq!(pages.bytes(), 11);
        assert!(
            pages.get(&(a.clone(), 0, 4)).is_some(),
            "a's first page kept"
        );
        // The next page pushes out the one used least recently: b's.
        keep_within(&mut pages, &a, &(8..11), b"ddd", 12);
        assert!(pages.peek(&(b.clone(), 0, 4)).is_none());
        assert!(pages.peek(&(a.clone(), 0, 4)).is_some());
        assert_eq!(pages.bytes(), 10);
        // A page larger than half the bound is not kept.
        keep_within(&mut pages, &a, &(20..27), b"eeeeeee", 12);
        assert!(pages.peek(&(a, 20, 27)).is_none());
    }
}
