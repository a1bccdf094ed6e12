//! Batcher: re-cuts decoded batches into batches of exactly `batch_size` rows
//! (only the last one of an epoch may be short), optionally through a
//! shuffle buffer, keeping track of where every row came from.

use crate::epoch::Epoch;
use std::collections::VecDeque;

use arrow::array::ArrayRef;
use arrow::compute::{concat_batches, interleave};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{push_piece, Piece, Provenance};
use crate::queue::AttemptId;

/// A batch ready for a device, with the rows' origin.
#[derive(Debug, Clone)]
pub struct OutBatch {
    /// The rows.
    pub data: RecordBatch,
    /// Epoch of the rows.
    pub epoch: Epoch,
    /// Where the rows came from.
    pub provenance: Provenance,
}

/// Re-batches rows to an exact size.
pub struct Batcher {
    schema: SchemaRef,
    batch_size: usize,
    /// Most bytes per batch (`--batch-bytes`), if bounded.
    batch_bytes: Option<u64>,
    /// Rows per batch now: `batch_size`, or fewer where the rows last
    /// pushed are so large that `batch_bytes` comes first.
    size_now: usize,
    epoch: Epoch,
    mode: Mode,
}

enum Mode {
    InOrder {
        pending: VecDeque<(RecordBatch, Piece)>,
        rows: usize,
    },
    Shuffled(Box<Shuffle>),
}

impl Batcher {
    /// A batcher for `schema`; `shuffle_rows > 0` enables a shuffle buffer of that many rows.
    pub fn new(schema: SchemaRef, batch_size: usize, shuffle_rows: usize, seed: u64) -> Self {
        let mode = if shuffle_rows > 0 {
            Mode::Shuffled(Box::new(Shuffle::new(shuffle_rows, seed)))
        } else {
            Mode::InOrder {
                pending: VecDeque::new(),
                rows: 0,
            }
        };
        Batcher {
            schema,
            batch_size: batch_size.max(1),
            batch_bytes: None,
            size_now: batch_size.max(1),
            epoch: Epoch::FIRST,
            mode,
        }
    }

    /// Cuts batches at `batch_bytes` too, whichever of it and the batch
    /// size comes first, by the bytes per row of the rows last pushed.
    pub fn with_batch_bytes(self, batch_bytes: Option<u64>) -> Self {
        Batcher {
            batch_bytes,
            ..self
        }
    }

    /// Rows per batch for rows the size of `batch`'s.
    fn size_for(&self, batch: &RecordBatch) -> usize {
        let (Some(limit), n) = (self.batch_bytes, batch.num_rows()) else {
            return self.batch_size;
        };
        if n == 0 {
            return self.size_now;
        }
        let per_row = arrow_bytes(batch).div_ceil(n as u64).max(1);
        usize::try_from(limit / per_row)
            .unwrap_or(usize::MAX)
            .clamp(1, self.batch_size)
    }

    /// Rows held.
    pub fn buffered(&self) -> usize {
        match &self.mode {
            Mode::InOrder { rows, .. } => *rows,
            Mode::Shuffled(s) => s.rows.len(),
        }
    }

    /// Adds rows; returns the full batches now ready.
    pub fn push(
        &mut self,
        batch: RecordBatch,
        piece: Piece,
        epoch: Epoch,
    ) -> Result<Vec<OutBatch>, ArrowError> {
        self.epoch = epoch;
        self.size_now = self.size_for(&batch);
        let mut out = Vec::new();
        match &mut self.mode {
            Mode::InOrder { pending, rows } => {
                let size = self.size_now;
                let n = batch.num_rows();
                // Whole batches go out as slices of the reader's buffers, without a
                // copy; only a remainder (the tail of a task or row group) waits to
                // be joined with other tails. A task with rows already waiting keeps
                // its order by waiting behind them.
                let waiting = pending.iter().any(|(_, p)| p.attempt == piece.attempt);
                let whole = if waiting { 0 } else { n / size * size };
                for at in (0..whole).step_by(size) {
                    out.push(OutBatch {
                        data: batch.slice(at, size),
                        epoch,
                        provenance: vec![Piece {
                            start: piece.start + at as u64,
                            len: size as u64,
                            ..piece
                        }],
                    });
                }
                if whole < n {
                    let rest = if whole == 0 {
                        batch
                    } else {
                        batch.slice(whole, n - whole)
                    };
                    *rows += n - whole;
                    pending.push_back((
                        rest,
                        Piece {
                            start: piece.start + whole as u64,
                            len: (n - whole) as u64,
                            ..piece
                        },
                    ));
                }
            }
            Mode::Shuffled(s) => s.add(batch, piece),
        }
        out.extend(self.drain(false)?);
        Ok(out)
    }

    /// Forgets every row held of `attempt` (its lease was lost: the rows
    /// will be served again elsewhere). Returns how many rows were dropped.
    pub fn drop_attempt(&mut self, attempt: AttemptId) -> usize {
        match &mut self.mode {
            Mode::InOrder { pending, rows } => {
                let before = *rows;
                pending.retain(|(batch, piece)| {
                    let keep = piece.attempt != attempt;
                    if !keep {
                        *rows -= batch.num_rows();
                    }
                    keep
                });
                before - *rows
            }
            Mode::Shuffled(s) => s.drop_attempt(attempt),
        }
    }

    /// Emits everything held; the last batch may be short.
    pub fn flush(&mut self) -> Result<Vec<OutBatch>, ArrowError> {
        self.drain(true)
    }

    fn drain(&mut self, all: bool) -> Result<Vec<OutBatch>, ArrowError> {
        let mut out = Vec::new();
        loop {
            let size = self.size_now;
            let ready = match &self.mode {
                Mode::InOrder { rows, .. } => *rows >= size || (all && *rows > 0),
                Mode::Shuffled(s) => {
                    s.rows.len() >= s.capacity.max(size) || (all && !s.rows.is_empty())
                }
            };
            if !ready {
                return Ok(out);
            }
            let (data, provenance) = match &mut self.mode {
                Mode::InOrder { pending, rows } => {
                    take_in_order(&self.schema, pending, rows, size)?
                }
                Mode::Shuffled(s) => s.take(&self.schema, size)?,
            };
            out.push(OutBatch {
                data,
                epoch: self.epoch,
                provenance,
            });
        }
    }
}

/// The bytes `batch`'s rows take in Arrow (a slice counts its own rows'
/// bytes only; a view's out-of-line strings count).
pub fn arrow_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|column| {
            let data = column.to_data();
            let own = data
                .get_slice_memory_size()
                .unwrap_or_else(|_| column.get_array_memory_size());
            let views = match column.data_type() {
                arrow::datatypes::DataType::Utf8View | arrow::datatypes::DataType::BinaryView => {
                    data.buffer::<u128>(0)
                        .iter()
                        .map(|view| u64::from(*view as u32))
                        .filter(|&len| len > 12)
                        .sum()
                }
                _ => 0,
            };
            own as u64 + views
        })
        .sum()
}

/// The runs of rows of `out`, one per piece of its provenance, in row order.
pub(super) fn runs(out: &OutBatch) -> Vec<(RecordBatch, Piece)> {
    let mut runs = Vec::with_capacity(out.provenance.len());
    let mut at = 0usize;
    for piece in &out.provenance {
        let len = usize::try_from(piece.len).unwrap_or(usize::MAX);
        runs.push((out.data.slice(at, len), *piece));
        at += len;
    }
    runs
}

/// `out` without the rows of attempts for which `dead` is true: `None` when
/// none is left, the batch itself when none is dead.
pub fn without(
    out: OutBatch,
    dead: impl Fn(AttemptId) -> bool,
) -> Result<Option<OutBatch>, ArrowError> {
    if !out.provenance.iter().any(|p| dead(p.attempt)) {
        return Ok(Some(out));
    }
    // Provenance lists the rows' origins in row order: keep the live runs.
    let mut parts = Vec::new();
    let mut provenance = Provenance::new();
    let mut at = 0usize;
    for piece in &out.provenance {
        let len = usize::try_from(piece.len).unwrap_or(usize::MAX);
        if !dead(piece.attempt) {
            parts.push(out.data.slice(at, len));
            push_piece(&mut provenance, *piece);
        }
        at += len;
    }
    if parts.is_empty() {
        return Ok(None);
    }
    let data = concat_batches(&out.data.schema(), &parts)?;
    Ok(Some(OutBatch {
        data,
        epoch: out.epoch,
        provenance,
    }))
}

/// Takes up to `want` rows from the front of `pending` as one batch (an empty
/// one when `want` is 0), with their provenance.
pub(super) fn take_in_order(
    schema: &SchemaRef,
    pending: &mut VecDeque<(RecordBatch, Piece)>,
    rows: &mut usize,
    want: usize,
) -> Result<(RecordBatch, Provenance), ArrowError> {
    let mut parts = Vec::new();
    let mut provenance = Provenance::new();
    let mut need = want.min(*rows);
    while need > 0 {
        let Some((batch, piece)) = pending.pop_front() else {
            break;
        };
        let n = batch.num_rows();
        if n <= need {
            push_piece(&mut provenance, piece);
            parts.push(batch);
            need -= n;
            *rows -= n;
        } else {
            parts.push(batch.slice(0, need));
            push_piece(
                &mut provenance,
                Piece {
                    len: need as u64,
                    ..piece
                },
            );
            let rest = batch.slice(need, n - need);
            let rest_piece = Piece {
                attempt: piece.attempt,
                start: piece.start + need as u64,
                len: (n - need) as u64,
            };
            pending.push_front((rest, rest_piece));
            *rows -= need;
            need = 0;
        }
    }
    let data = if parts.len() == 1 {
        parts
            .pop()
            .unwrap_or_else(|| RecordBatch::new_empty(schema.clone()))
    } else {
        concat_batches(schema, &parts)?
    };
    Ok((data, provenance))
}

/// A shuffle buffer: rows are drawn at random from up to `capacity` held rows.
struct Shuffle {
    capacity: usize,
    rng: ChaCha8Rng,
    batches: Vec<Option<RecordBatch>>,
    refs: Vec<usize>,
    /// (batch index, row in batch, piece attempt, row in split)
    rows: Vec<(usize, usize, Piece)>,
}

impl Shuffle {
    fn new(capacity: usize, seed: u64) -> Self {
        Shuffle {
            capacity,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5eed),
            batches: Vec::new(),
            refs: Vec::new(),
            rows: Vec::new(),
        }
    }

    fn add(&mut self, batch: RecordBatch, piece: Piece) {
        let index = self.batches.len();
        let n = batch.num_rows();
        for i in 0..n {
            let row = Piece {
                attempt: piece.attempt,
                start: piece.start + i as u64,
                len: 1,
            };
            self.rows.push((index, i, row));
        }
        self.batches.push(Some(batch));
        self.refs.push(n);
    }

    fn drop_attempt(&mut self, attempt: AttemptId) -> usize {
        let before = self.rows.len();
        let refs = &mut self.refs;
        self.rows.retain(|(b, _, piece)| {
            let keep = piece.attempt != attempt;
            if !keep {
                refs[*b] -= 1;
            }
            keep
        });
        for (b, batch) in self.batches.iter_mut().enumerate() {
            if self.refs[b] == 0 {
                *batch = None;
            }
        }
        before - self.rows.len()
    }

    fn take(
        &mut self,
        schema: &SchemaRef,
        want: usize,
    ) -> Result<(RecordBatch, Provenance), ArrowError> {
        let n = want.min(self.rows.len());
        let mut picked = Vec::with_capacity(n);
        for _ in 0..n {
            let i = self.rng.random_range(0..self.rows.len());
            picked.push(self.rows.swap_remove(i));
        }
        let mut provenance = Provenance::new();
        let mut used: Vec<usize> = picked.iter().map(|p| p.0).collect();
        used.sort_unstable();
        used.dedup();
        let sources: Vec<&RecordBatch> = used
            .iter()
            .filter_map(|&b| self.batches[b].as_ref())
            .collect();
        let indices: Vec<(usize, usize)> = picked
            .iter()
            .map(|(b, r, _)| (used.partition_point(|u| u < b), *r))
            .collect();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for c in 0..schema.fields().len() {
            let arrays: Vec<&dyn arrow::array::Array> =
                sources.iter().map(|b| b.column(c).as_ref()).collect();
            columns.push(interleave(&arrays, &indices)?);
        }
        for (b, _, piece) in &picked {
            push_piece(&mut provenance, *piece);
            self.refs[*b] -= 1;
            if self.refs[*b] == 0 {
                self.batches[*b] = None;
            }
        }
        let data = RecordBatch::try_new(schema.clone(), columns)?;
        Ok((data, provenance))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::*;
    use crate::queue::AttemptId;

    fn input(start: i64, n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(start..start + n))],
        )
        .expect("batch")
    }

    fn run(shuffle: usize) -> Vec<OutBatch> {
        let schema = input(0, 1).schema();
        let mut b = Batcher::new(schema, 10, shuffle, 1);
        let mut out = Vec::new();
        let mut start = 0;
        for n in [3, 17, 4, 25, 1] {
            let piece = Piece {
                attempt: AttemptId(1),
                start: start as u64,
                len: n as u64,
            };
            out.extend(b.push(input(start, n), piece, Epoch(0)).expect("push"));
            start += n;
        }
        out.extend(b.flush().expect("flush"));
        out
    }

    #[test]
    fn exact_sizes_and_every_row_once() {
        for shuffle in [0, 16] {
            let out = run(shuffle);
            let sizes: Vec<usize> = out.iter().map(|b| b.data.num_rows()).collect();
            assert_eq!(sizes, vec![10, 10, 10, 10, 10], "shuffle {shuffle}");
            let mut ids: Vec<i64> = out
                .iter()
                .flat_map(|b| {
                    b.data
                        .column(0)
                        .as_primitive::<Int64Type>()
                        .values()
                        .to_vec()
                })
                .collect();
            let prov_rows: u64 = out
                .iter()
                .flat_map(|b| b.provenance.iter())
                .map(|p| p.len)
                .sum();
            assert_eq!(prov_rows, 50);
            ids.sort_unstable();
            assert_eq!(ids, (0..50).collect::<Vec<_>>());
        }
    }

    #[test]
    fn lost_attempts_leave_the_buffer_and_the_batches() {
        for shuffle in [0, 16] {
            let schema = input(0, 1).schema();
            let mut b = Batcher::new(schema, 10, shuffle, 1);
            let mut out = Vec::new();
            for (attempt, first, n) in [(1, 0, 7), (2, 1000, 6), (1, 7, 5), (2, 1006, 3)] {
                let piece = Piece {
                    attempt: AttemptId(attempt),
                    start: (first % 1000) as u64,
                    len: n as u64,
                };
                out.extend(b.push(input(first, n), piece, Epoch(0)).expect("push"));
            }
            let dropped = b.drop_attempt(AttemptId(2));
            out.extend(b.flush().expect("flush"));
            let mut ids = Vec::new();
            for batch in out {
                let Some(kept) = without(batch, |a| a == AttemptId(2)).expect("filter") else {
                    continue;
                };
                let values = kept
                    .data
                    .column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec();
                let rows: Vec<i64> = kept
                    .provenance
                    .iter()
                    .flat_map(|p| (p.start..p.start + p.len).map(|r| r as i64))
                    .collect();
                assert_eq!(values, rows, "provenance matches the kept rows");
                ids.extend(values);
            }
            ids.sort_unstable();
            assert_eq!(ids, (0..12).collect::<Vec<_>>(), "shuffle {shuffle}");
            assert!(
                dropped > 0,
                "shuffle {shuffle}: rows of attempt 2 were held"
            );
        }
    }

    #[test]
    fn provenance_matches_rows() {
        for batch in run(16) {
            let ids = batch
                .data
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec();
            let rows: Vec<i64> = batch
                .provenance
                .iter()
                .flat_map(|p| (p.start..p.start + p.len).map(|r| r as i64))
                .collect();
            assert_eq!(ids, rows);
        }
    }

    /// Two tasks read at once, each a run of reader batches ending in a tail.
    fn two_tasks(b: &mut Batcher) -> (Vec<OutBatch>, Vec<RecordBatch>) {
        let mut out = Vec::new();
        let mut inputs = Vec::new();
        // (attempt, first id, rows): task 1 holds ids 0..34, task 2 ids 1000..1027.
        let plan = [
            (1, 0, 10),
            (2, 1000, 10),
            (1, 10, 10),
            (2, 1010, 10),
            (1, 20, 10),
            (2, 1020, 7),
            (1, 30, 4),
        ];
        for (attempt, first, n) in plan {
            let batch = input(first, n);
            inputs.push(batch.clone());
            let start = (first % 1000) as u64;
            let piece = Piece {
                attempt: AttemptId(attempt),
                start,
                len: n as u64,
            };
            out.extend(b.push(batch, piece, Epoch(0)).expect("push"));
        }
        out.extend(b.flush().expect("flush"));
        (out, inputs)
    }

    #[test]
    fn whole_batches_pass_without_a_copy_and_tasks_keep_their_order() {
        let schema = input(0, 1).schema();
        let mut b = Batcher::new(schema, 10, 0, 1);
        let (out, inputs) = two_tasks(&mut b);
        let sizes: Vec<usize> = out.iter().map(|b| b.data.num_rows()).collect();
        assert_eq!(
            sizes,
            vec![10, 10, 10, 10, 10, 10, 1],
            "exact sizes, last short"
        );
        let values = |batch: &RecordBatch| {
            batch
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        };
        let ids: Vec<i64> = out.iter().flat_map(|b| values(&b.data)).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        let mut expected: Vec<i64> = (0..34).chain(1000..1027).collect();
        expected.sort_unstable();
        assert_eq!(sorted, expected, "every row once");
        for task in [0..1000, 1000..2000] {
            let order: Vec<i64> = ids.iter().copied().filter(|i| task.contains(i)).collect();
            assert!(
                order.windows(2).all(|w| w[0] < w[1]),
                "order kept: {order:?}"
            );
        }
        for batch in &out {
            let rows: Vec<i64> = batch
                .provenance
                .iter()
                .flat_map(|p| {
                    let base = if p.attempt == AttemptId(2) { 1000 } else { 0 };
                    (p.start..p.start + p.len).map(move |r| base + r as i64)
                })
                .collect();
            assert_eq!(values(&batch.data), rows, "provenance matches rows");
        }
        // The first reader batch of each task went out as it came: same buffer.
        let pointer = |batch: &RecordBatch| {
            batch
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .as_ptr() as usize
        };
        assert_eq!(pointer(&out[0].data), pointer(&inputs[0]));
        assert_eq!(pointer(&out[1].data), pointer(&inputs[1]));
    }
}
