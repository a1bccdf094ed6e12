use std::sync::Arc;

use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};

use super::*;
use crate::epoch::Epoch;
use crate::worker::Piece;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]))
}

/// A batch of ids `start..start + n` of attempt 1 (row = id).
fn batch(start: u64, n: u64, epoch: Epoch) -> OutBatch {
    let ids = Int64Array::from_iter_values(start as i64..(start + n) as i64);
    OutBatch {
        data: RecordBatch::try_new(schema(), vec![Arc::new(ids)]).expect("batch"),
        epoch,
        provenance: vec![Piece {
            attempt: AttemptId(1),
            start,
            len: n,
        }],
    }
}

/// Feeds `rows` rows of one epoch in batches of `size` (the last one short),
/// ends the epoch, and returns every step's batch sizes and the dropped rows.
fn steps(devices: usize, size: u64, rows: u64, drop_last: bool) -> (Vec<Vec<usize>>, usize) {
    let mut s = Stepper::new(schema(), devices, size as usize, drop_last);
    let mut out = Vec::new();
    let mut ids = Vec::new();
    let mut at = 0;
    let take = |s: &mut Stepper, out: &mut Vec<Step>| {
        while let Some(step) = s.next_step().expect("step") {
            out.push(step);
        }
    };
    while at < rows {
        let n = size.min(rows - at);
        s.push(batch(at, n, Epoch(0)));
        at += n;
        take(&mut s, &mut out);
    }
    s.end_epoch();
    take(&mut s, &mut out);
    assert!(
        s.is_empty() || !s.dropped.is_empty(),
        "everything handed out"
    );
    let dropped: usize = s.take_dropped().iter().map(|b| b.data.num_rows()).sum();
    for (k, step) in out.iter().enumerate() {
        assert_eq!(step.batches.len(), devices, "one batch per device");
        for b in &step.batches {
            let md = b.data.schema().metadata().clone();
            assert_eq!(md.get(EPOCH_KEY).map(String::as_str), Some("0"));
            assert_eq!(md.get(STEP_KEY), Some(&k.to_string()));
            let last = k + 1 == out.len();
            assert_eq!(
                md.contains_key(EPOCH_END_KEY),
                last,
                "step {k} of {}",
                out.len()
            );
            let col = b
                .data
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec();
            let prov: Vec<i64> = b
                .provenance
                .iter()
                .flat_map(|p| (p.start..p.start + p.len).map(|r| r as i64))
                .collect();
            assert_eq!(col, prov, "provenance matches the rows");
            ids.extend(col);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len() + dropped,
        rows as usize,
        "no row lost or repeated"
    );
    let sizes = out
        .iter()
        .map(|s| s.batches.iter().map(|b| b.data.num_rows()).collect())
        .collect();
    (sizes, dropped)
}

#[test]
fn the_last_partial_step_is_split_evenly() {
    // 2 devices, batches of 10, 73 rows: 3 full steps, then 13 rows as 7 + 6.
    let (sizes, dropped) = steps(2, 10, 73, false);
    assert_eq!(
        sizes,
        vec![vec![10, 10], vec![10, 10], vec![10, 10], vec![7, 6]]
    );
    assert_eq!(dropped, 0);
    // 3 devices, 4096 rows of 1000: one full step, then 1096 rows as 366+365+365.
    let (sizes, _) = steps(3, 1000, 4096, false);
    assert_eq!(sizes, vec![vec![1000; 3], vec![366, 365, 365]]);
}

#[test]
fn a_remainder_smaller_than_the_devices_joins_the_last_full_step() {
    // 4 devices, batches of 10, 81 rows: 2 full steps and 1 row; the second
    // step and that row make 41 rows as 11 + 10 + 10 + 10.
    let (sizes, _) = steps(4, 10, 81, false);
    assert_eq!(sizes, vec![vec![10; 4], vec![11, 10, 10, 10]]);
    // Exactly whole steps: the last full step carries the epoch's end.
    let (sizes, _) = steps(2, 10, 40, false);
    assert_eq!(sizes, vec![vec![10, 10], vec![10, 10]]);
}

#[test]
fn drop_last_drops_the_partial_step() {
    let (sizes, dropped) = steps(2, 10, 73, true);
    assert_eq!(sizes, vec![vec![10, 10]; 3]);
    assert_eq!(dropped, 13);
    let (sizes, dropped) = steps(4, 10, 39, true);
    assert!(sizes.is_empty());
    assert_eq!(dropped, 39);
}

#[test]
fn a_lost_lease_leaves_steps_whole() {
    let mut s = Stepper::new(schema(), 2, 10, false);
    for k in 0..5 {
        s.push(batch(k * 10, 10, Epoch(0)));
    }
    let mut other = batch(1000, 10, Epoch(0));
    other.provenance[0].attempt = AttemptId(2);
    s.push(other);
    let first = s.next_step().expect("step").expect("ready");
    assert_eq!(first.batches.len(), 2);
    assert_eq!(s.drop_attempt(AttemptId(2)).expect("drop"), 10);
    s.end_epoch();
    let mut sizes = Vec::new();
    while let Some(step) = s.next_step().expect("step") {
        sizes.push(
            step.batches
                .iter()
                .map(|b| b.data.num_rows())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(sizes, vec![vec![10, 10], vec![5, 5]]);
    assert!(s.is_empty());
}

#[test]
fn a_new_epoch_ends_the_last_one() {
    let mut s = Stepper::new(schema(), 2, 10, false);
    s.push(batch(0, 10, Epoch(0)));
    s.push(batch(10, 10, Epoch(0)));
    assert!(!s.ready(), "the only full step waits for the epoch's end");
    s.push(batch(0, 10, Epoch(1)));
    let step = s.next_step().expect("step").expect("epoch 0 ended");
    assert_eq!(step.epoch, Epoch(0));
    assert!(step.batches[0]
        .data
        .schema()
        .metadata()
        .contains_key(EPOCH_END_KEY));
    assert!(s.next_step().expect("step").is_none());
    assert!(s.open());
}

#[test]
fn on_a_worker_of_a_world_every_batch_says_its_devices_rank_those_of_no_rows_too() {
    let mut s = Stepper::new(schema(), 3, 10, false);
    s.set_world_ranks(&[1, 4, 5]);
    for k in 0..3 {
        s.push(batch(k * 10, 10, Epoch(0)));
    }
    // 2 rows left for 3 devices: they join the last full step.
    s.push(batch(30, 1, Epoch(0)));
    s.push(batch(31, 1, Epoch(0)));
    s.end_epoch();
    let mut sizes = Vec::new();
    while let Some(step) = s.next_step().expect("step") {
        let mut said = Vec::new();
        for b in &step.batches {
            sizes.push(b.data.num_rows());
            said.push(b.data.schema().metadata().get(RANK_KEY).cloned());
        }
        let ranks = ["1", "4", "5"].map(|r| Some(r.to_string()));
        assert_eq!(said, ranks);
    }
    assert_eq!(sizes, [11, 11, 10]);
    // Fewer rows than devices alone in an epoch: a device gets none.
    let mut s = Stepper::new(schema(), 3, 10, false);
    s.set_world_ranks(&[0, 2, 3]);
    s.push(batch(0, 2, Epoch(1)));
    s.end_epoch();
    let step = s.next_step().expect("step").expect("the epoch's last");
    let empty = &step.batches[2];
    assert_eq!(empty.data.num_rows(), 0);
    let md = empty.data.schema().metadata().clone();
    assert_eq!(md.get(RANK_KEY).map(String::as_str), Some("3"));
    assert_eq!(md.get(EPOCH_END_KEY).map(String::as_str), Some("1"));
}
