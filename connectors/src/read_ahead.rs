//! Read-ahead bounded in bytes: one budget shared by the readers of a worker.
//!
//! A reader takes its share of the budget for the bytes of a row group before
//! fetching them, and holds it for as long as the decoder holds them; decoded
//! batches waiting for the consumer hold their share until it takes them. The
//! fetch buffers themselves go back to a pool once the decoder drops them, so
//! the next row group is read into memory already mapped instead of a fresh
//! allocation.
//!
//! A fetch waiting for bytes goes before decoded batches: while one waits, a
//! reader with batches already waiting for the consumer takes no more for
//! new ones than leaves room for the fetch. Decoded batches ahead of the
//! consumer only buffer; a fetch under way hides a round trip to the store,
//! so the next row group arrives while the current one decodes instead of
//! after it.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arrow::array::{Array, AsArray, GenericByteViewArray};
use arrow::datatypes::{ByteViewType, DataType};
use arrow::record_batch::RecordBatch;
use tokio::sync::Notify;

/// One request counted as waiting while this lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn count(counter: &'a AtomicUsize) -> Waiting<'a> {
        counter.fetch_add(1, Ordering::SeqCst);
        Waiting(counter)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A budget of bytes for what is read ahead of the consumer, and a pool of
/// fetch buffers. Cheap to clone: clones share the budget.
#[derive(Clone)]
pub struct ReadAhead {
    inner: Arc<Inner>,
    /// The reader's turn, for a consumer that takes readers' batches in a
    /// fixed order (see [`ReadAhead::with_turn`]).
    turn: Option<Turn>,
}

/// Whether a reader's batches are the ones its consumer takes now. A
/// consumer that takes readers in a fixed order holds the batches of the
/// others meanwhile, each with its share of the budget; the reader whose turn
/// it is must never wait for those bytes, or neither would ever move. Given
/// once, for good.
#[derive(Debug, Clone, Default)]
pub struct Turn(Arc<std::sync::atomic::AtomicBool>);

impl Turn {
    /// A turn not yet given.
    pub fn new() -> Turn {
        Turn::default()
    }

    /// Gives the turn: from now on the reader's requests go at once, over the
    /// budget when they must (wake its waits with [`ReadAhead::wake`]).
    pub fn give(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the turn was given.
    pub fn is_given(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

struct Inner {
    /// Bytes that may be held at once (`None`: no bound, no pool).
    limit: Option<u64>,
    state: Mutex<State>,
    /// Wakes the waiters when bytes are given back.
    released: Notify,
    /// Requests waiting for bytes to fit.
    waiting: AtomicUsize,
}

#[derive(Default)]
struct State {
    /// Bytes held by reservations.
    used: u64,
    /// Bytes of fetches waiting for room (see [`ReadAhead::reserve`]).
    wanted: u64,
    /// Fetch buffers not in use, each fully initialized.
    idle: Vec<Vec<u8>>,
    /// Their capacity, in bytes.
    idle_bytes: u64,
}

impl fmt::Debug for ReadAhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadAhead")
            .field("limit", &self.inner.limit)
            .field("used", &self.used())
            .finish()
    }
}

impl Default for ReadAhead {
    fn default() -> Self {
        ReadAhead::unbounded()
    }
}

impl ReadAhead {
    /// A budget of `limit` bytes (at least 1). A single request larger than
    /// the whole budget waits until nothing else is held, then goes alone.
    pub fn new(limit: u64) -> Self {
        Self::with_limit(Some(limit.max(1)))
    }

    /// No bound and no pooled buffers: every request goes at once (reading
    /// one split on its own, counting rows).
    pub fn unbounded() -> Self {
        Self::with_limit(None)
    }

    fn with_limit(limit: Option<u64>) -> Self {
        ReadAhead {
            inner: Arc::new(Inner {
                limit,
                state: Mutex::new(State::default()),
                released: Notify::new(),
                waiting: AtomicUsize::new(0),
            }),
            turn: None,
        }
    }

    /// The same budget for a reader whose batches its consumer takes only in
    /// its `turn`: once the turn is given, its requests no longer wait for
    /// bytes (see [`Turn`]).
    pub fn with_turn(&self, turn: Turn) -> ReadAhead {
        ReadAhead {
            inner: self.inner.clone(),
            turn: Some(turn),
        }
    }

    /// Wakes every request waiting for bytes to look again (after a
    /// [`Turn::give`]).
    pub fn wake(&self) {
        self.inner.released.notify_waiters();
    }

    /// The budget in bytes (`None`: unbounded).
    pub fn limit(&self) -> Option<u64> {
        self.inner.limit
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.inner.lock().used
    }

    /// Takes `bytes` of the budget, waiting until they fit.
    pub async fn reserve(&self, bytes: u64) -> Reservation {
        self.reserve_where(bytes, None).await
    }

    /// Takes `bytes` of the budget for a decoded batch of a reader whose
    /// batches not yet consumed are counted by `queued`. It waits until they
    /// fit, except when none of that reader's batches wait: then it goes over
    /// the budget at once. So a reader holding fetched bytes never waits for
    /// bytes that only its own progress would free: the waits of readers on
    /// each other always end as the consumer takes their batches.
    pub async fn reserve_queued(&self, bytes: u64, queued: &Queued) -> Reservation {
        self.reserve_where(bytes, Some(queued)).await
    }

    async fn reserve_where(&self, bytes: u64, queued: Option<&Queued>) -> Reservation {
        if let Some(reservation) = self.try_reserve(bytes, queued) {
            return reservation;
        }
        let _waiting = Waiting::count(&self.inner.waiting);
        let _wanted = queued.is_none().then(|| Wanted::add(&self.inner, bytes));
        loop {
            let released = self.inner.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Some(reservation) = self.try_reserve(bytes, queued) {
                return reservation;
            }
            released.await;
        }
    }

    /// Requests waiting for their bytes to fit.
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::SeqCst)
    }

    fn try_reserve(&self, bytes: u64, queued: Option<&Queued>) -> Option<Reservation> {
        let mut state = self.inner.lock();
        let fits = match self.inner.limit {
            None => true,
            Some(limit) => {
                // Batches leave room for the fetches waiting; a fetch
                // waiting itself counts its own bytes as wanted.
                let wanted = match queued {
                    Some(_) => state.wanted.min(limit),
                    None => 0,
                };
                state.used + wanted + bytes.min(limit) <= limit
                    || queued.is_some_and(|q| q.count() == 0)
                    || self.turn.as_ref().is_some_and(Turn::is_given)
            }
        };
        if !fits {
            return None;
        }
        state.used += bytes;
        if let Some(queued) = queued {
            queued.0.fetch_add(1, Ordering::AcqRel);
        }
        Some(Reservation {
            inner: self.inner.clone(),
            bytes,
            queued: queued.cloned(),
        })
    }

    /// A fetch buffer of at least `len` initialized bytes: a pooled one when
    /// one is idle (the smallest that holds `len`, else the largest, grown),
    /// else a new one. Its contents are stale: the caller overwrites them.
    pub(crate) fn take_buffer(&self, len: usize) -> Vec<u8> {
        let mut buf = {
            let mut state = self.inner.lock();
            let pick = state
                .idle
                .iter()
                .enumerate()
                .filter(|(_, b)| b.len() >= len)
                .min_by_key(|(_, b)| b.len())
                .or_else(|| state.idle.iter().enumerate().max_by_key(|(_, b)| b.len()))
                .map(|(i, _)| i);
            match pick {
                Some(i) => {
                    let buf = state.idle.swap_remove(i);
                    state.idle_bytes -= buf.capacity() as u64;
                    buf
                }
                None => Vec::new(),
            }
        };
        if buf.len() < len {
            buf.resize(len, 0);
        }
        buf
    }

    /// Keeps `buf` for a later fetch while what is held and pooled stays
    /// within the budget; frees it otherwise.
    pub(crate) fn give_back(&self, buf: Vec<u8>) {
        let Some(limit) = self.inner.limit else {
            return;
        };
        let cap = buf.capacity() as u64;
        let mut state = self.inner.lock();
        if state.used + state.idle_bytes + cap <= limit {
            state.idle_bytes += cap;
            state.idle.push(buf);
        }
    }
}

/// A fetch's bytes counted as wanted while it waits for room.
struct Wanted<'a> {
    inner: &'a Inner,
    bytes: u64,
}

impl<'a> Wanted<'a> {
    fn add(inner: &'a Inner, bytes: u64) -> Wanted<'a> {
        inner.lock().wanted += bytes;
        Wanted { inner, bytes }
    }
}

impl Drop for Wanted<'_> {
    fn drop(&mut self) {
        let mut state = self.inner.lock();
        state.wanted = state.wanted.saturating_sub(self.bytes);
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A share of a [`ReadAhead`] budget, given back when dropped.
pub struct Reservation {
    inner: Arc<Inner>,
    bytes: u64,
    queued: Option<Queued>,
}

impl Reservation {
    /// The bytes it holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        {
            let mut state = self.inner.lock();
            state.used = state.used.saturating_sub(self.bytes);
            if let Some(queued) = &self.queued {
                queued.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.inner.released.notify_waiters();
    }
}

/// One reader's decoded batches not yet consumed (see
/// [`ReadAhead::reserve_queued`]).
#[derive(Debug, Clone, Default)]
pub struct Queued(Arc<AtomicUsize>);

impl Queued {
    /// Batches reserved and not yet consumed.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// A fetched byte range in a pooled buffer: the budget it holds is given back,
/// and the buffer returned to the pool, once every slice of it is dropped.
pub(crate) struct Fetched {
    buf: Vec<u8>,
    len: usize,
    ahead: ReadAhead,
    /// Shared by the ranges of one fetch.
    reservation: Option<Arc<Reservation>>,
}

impl Fetched {
    /// `buf[..len]` holds the bytes; `reservation` is the share of the budget
    /// the fetch took.
    pub(crate) fn new(
        buf: Vec<u8>,
        len: usize,
        ahead: ReadAhead,
        reservation: Arc<Reservation>,
    ) -> Self {
        Fetched {
            len: len.min(buf.len()),
            buf,
            ahead,
            reservation: Some(reservation),
        }
    }
}

impl AsRef<[u8]> for Fetched {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Fetched {
    fn drop(&mut self) {
        // The budget first: the pool keeps the buffer only within it.
        drop(self.reservation.take());
        self.ahead.give_back(std::mem::take(&mut self.buf));
    }
}

/// The bytes a decoded batch holds for the budget. View columns share the
/// decompressed pages their values point into with the batches before and
/// after them, so they count their views and the values they point to
/// rather than every page they reference (which would count a page once
/// per batch that touches it); in a long column those values are estimated
/// from a sample of its views.
pub fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|column| match column.data_type() {
            DataType::Utf8View => view_bytes(column.as_string_view()),
            DataType::BinaryView => view_bytes(column.as_binary_view()),
            _ => column.get_array_memory_size() as u64,
        })
        .sum()
}

/// Views of a column up to this many are all read to count its long values;
/// a longer column reads every [`SAMPLE_STRIDE`]th view and scales up.
const EXACT_VIEWS: usize = 1024;
/// One view in this many is read to estimate the long values of a long column:
/// reading all of them cost 6% of a whole read of Criteo-like data, for a
/// figure that only bounds what is read ahead.
const SAMPLE_STRIDE: usize = 16;

fn view_bytes<T: ByteViewType + ?Sized>(array: &GenericByteViewArray<T>) -> u64 {
    let views = array.views();
    let long = |view: &u128| u64::from(*view as u32);
    let out_of_line: u64 = if views.len() <= EXACT_VIEWS {
        views.iter().map(long).filter(|&len| len > 12).sum()
    } else {
        let sampled: u64 = views
            .iter()
            .step_by(SAMPLE_STRIDE)
            .map(long)
            .filter(|&len| len > 12)
            .sum();
        // Never more than the pages the values lie in.
        let pages: u64 = array.data_buffers().iter().map(|b| b.len() as u64).sum();
        (sampled * SAMPLE_STRIDE as u64).min(pages)
    };
    let nulls = array.nulls().map_or(0, |n| n.buffer().len() as u64);
    (views.len() * std::mem::size_of::<u128>()) as u64 + out_of_line + nulls
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Until `n` requests wait for bytes (bounded: a test that never gets
    /// there fails).
    async fn waiting_for(ahead: &ReadAhead, n: usize) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while ahead.waiting() != n {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the request waits");
    }

    #[tokio::test]
    async fn a_reader_whose_turn_is_given_stops_waiting_for_bytes_others_hold() {
        let ahead = ReadAhead::new(100);
        let held = ahead.reserve(100).await;
        let turn = Turn::new();
        let mine = ahead.with_turn(turn.clone());
        let other = ahead.clone();
        let first = tokio::spawn(async move { mine.reserve(60).await.bytes() });
        let second = tokio::spawn(async move { other.reserve(60).await.bytes() });
        waiting_for(&ahead, 2).await;
        turn.give();
        ahead.wake();
        let got = tokio::time::timeout(Duration::from_secs(10), first)
            .await
            .expect("the reader whose turn it is goes on")
            .expect("joined");
        assert_eq!(got, 60);
        // Everyone else still waits for the bytes held to be given back.
        waiting_for(&ahead, 1).await;
        assert!(!second.is_finished());
        drop(held);
        let got = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("the other goes on once bytes are given back")
            .expect("joined");
        assert_eq!(got, 60);
    }

    #[test]
    fn view_columns_count_their_values_not_every_page_they_share() {
        use arrow::array::{ArrayRef, Int64Array, StringViewArray};
        use arrow::datatypes::{Field, Schema};
        let long = "x".repeat(100);
        let values: Vec<Option<&str>> = vec![Some("short"), None, Some(long.as_str())];
        let views: ArrayRef = Arc::new(StringViewArray::from(values));
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8View, true),
            Field::new("n", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(schema, vec![views.clone(), ints.clone()]).expect("batch");
        let nulls = views.nulls().map_or(0, |n| n.buffer().len() as u64);
        // Three 16-byte views, the one value longer than 12 bytes, the validity bits.
        let want = 3 * 16 + 100 + nulls + ints.get_array_memory_size() as u64;
        assert_eq!(batch_bytes(&batch), want);
        // A one-row slice shares the buffers but counts only its own value.
        assert_eq!(
            batch_bytes(&batch.slice(0, 1)),
            16 + nulls + ints.slice(0, 1).get_array_memory_size() as u64
        );
    }

    #[test]
    fn long_view_columns_estimate_their_values_from_a_sample_within_their_pages() {
        use arrow::array::{ArrayRef, StringViewArray};
        use arrow::datatypes::{Field, Schema};
        let values: Vec<String> = (0..8192).map(|i| format!("{i:0>20}")).collect();
        let views: ArrayRef = Arc::new(StringViewArray::from_iter_values(values.iter()));
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Utf8View,
            false,
        )]));
        let batch = RecordBatch::try_new(schema, vec![views]).expect("batch");
        // Every value is 20 bytes: the sample sees them all alike.
        assert_eq!(batch_bytes(&batch), 8192 * 16 + 8192 * 20);
        // A slice of a few rows counts its own values exactly.
        assert_eq!(batch_bytes(&batch.slice(0, 3)), 3 * 16 + 3 * 20);
        // Half the rows count half the views and values.
        let half = batch.slice(0, 4096);
        assert_eq!(batch_bytes(&half), 4096 * 16 + 4096 * 20);
    }

    #[tokio::test]
    async fn a_request_waits_until_the_bytes_fit() {
        let ahead = ReadAhead::new(100);
        let first = ahead.reserve(60).await;
        assert_eq!(ahead.used(), 60);
        let second = tokio::time::timeout(Duration::from_millis(50), ahead.reserve(60)).await;
        assert!(second.is_err(), "60 + 60 bytes exceed a budget of 100");
        let waiting = tokio::spawn({
            let ahead = ahead.clone();
            async move { ahead.reserve(60).await.bytes() }
        });
        waiting_for(&ahead, 1).await;
        drop(first);
        assert_eq!(waiting.await.ok(), Some(60));
        assert_eq!(ahead.used(), 0, "every reservation was dropped");
    }

    #[tokio::test]
    async fn a_request_over_the_whole_budget_goes_alone() {
        let ahead = ReadAhead::new(100);
        let small = ahead.reserve(10).await;
        let big = tokio::spawn({
            let ahead = ahead.clone();
            async move { ahead.reserve(500).await.bytes() }
        });
        waiting_for(&ahead, 1).await;
        assert!(!big.is_finished(), "it waits while anything else is held");
        drop(small);
        assert_eq!(big.await.ok(), Some(500));
    }

    #[tokio::test]
    async fn a_reader_with_no_batch_waiting_is_never_held_back() {
        let ahead = ReadAhead::new(100);
        let fetched = ahead.reserve(100).await;
        let queued = Queued::default();
        // The budget is full, but none of this reader's batches wait.
        let batch = ahead.reserve_queued(30, &queued).await;
        assert_eq!(queued.count(), 1);
        assert_eq!(ahead.used(), 130);
        // Its second batch waits until the first is consumed.
        let next = tokio::spawn({
            let ahead = ahead.clone();
            let queued = queued.clone();
            async move { ahead.reserve_queued(30, &queued).await }
        });
        waiting_for(&ahead, 1).await;
        assert!(!next.is_finished());
        drop(batch);
        let next = next.await.ok();
        assert_eq!(next.as_ref().map(Reservation::bytes), Some(30));
        assert_eq!(queued.count(), 1);
        drop((next, fetched));
        assert_eq!((ahead.used(), queued.count()), (0, 0));
    }

    #[tokio::test]
    async fn a_waiting_fetch_goes_before_more_decoded_batches() {
        let ahead = ReadAhead::new(100);
        let decoding = ahead.reserve(50).await;
        let queued = Queued::default();
        let first = ahead.reserve_queued(20, &queued).await;
        // A fetch of 40 bytes waits: 50 + 20 + 40 exceed the budget.
        let fetch = tokio::spawn({
            let ahead = ahead.clone();
            async move { ahead.reserve(40).await }
        });
        waiting_for(&ahead, 1).await;
        // A second batch would fit (90 bytes) but leaves no room for the fetch.
        let second = tokio::spawn({
            let ahead = ahead.clone();
            let queued = queued.clone();
            async move { ahead.reserve_queued(20, &queued).await }
        });
        waiting_for(&ahead, 2).await;
        // The consumer takes the first batch: the fetch goes, then the batch.
        drop(first);
        let fetch = tokio::time::timeout(Duration::from_secs(10), fetch)
            .await
            .expect("the fetch goes first")
            .expect("joined");
        assert_eq!(fetch.bytes(), 40);
        let second = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("the batch goes once none of its reader's wait")
            .expect("joined");
        assert_eq!(second.bytes(), 20);
        drop((decoding, fetch, second));
        assert_eq!((ahead.used(), ahead.inner.lock().wanted), (0, 0));
    }

    #[test]
    fn buffers_are_reused_within_the_budget() {
        let ahead = ReadAhead::new(1000);
        let buf = ahead.take_buffer(300);
        assert_eq!(buf.len(), 300);
        let ptr = buf.as_ptr();
        ahead.give_back(buf);
        // A smaller fetch gets the same buffer, its length unchanged.
        let again = ahead.take_buffer(200);
        assert_eq!((again.as_ptr(), again.len()), (ptr, 300));
        ahead.give_back(again);
        // A bigger one grows it.
        assert!(ahead.take_buffer(400).len() >= 400);
        // Nothing is pooled past the budget, or without one.
        ahead.give_back(vec![0; 2000]);
        assert_eq!(ahead.inner.lock().idle_bytes, 0);
        let unbounded = ReadAhead::unbounded();
        unbounded.give_back(vec![0; 10]);
        assert!(unbounded.inner.lock().idle.is_empty());
    }

    #[tokio::test]
    async fn fetched_bytes_hold_their_share_until_dropped() {
        let ahead = ReadAhead::new(1000);
        let reservation = Arc::new(ahead.reserve(300).await);
        let mut buf = ahead.take_buffer(300);
        buf[..3].copy_from_slice(b"abc");
        let bytes = bytes::Bytes::from_owner(Fetched::new(buf, 300, ahead.clone(), reservation));
        let slice = bytes.slice(0..3);
        drop(bytes);
        assert_eq!(ahead.used(), 300, "a slice still holds the fetch");
        assert_eq!(&slice[..], b"abc");
        drop(slice);
        assert_eq!(ahead.used(), 0);
        assert_eq!(ahead.inner.lock().idle.len(), 1, "the buffer is pooled");
    }
}
