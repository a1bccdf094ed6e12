use std::sync::Arc;

use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};

use super::*;

fn rows(first: i64, n: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from_iter_values(first..first + n))],
    )
    .expect("batch")
}

fn split(rows: u64) -> Split {
    Split {
        path: "part".to_string(),
        size: 1,
        format: connectors::Format::Parquet,
        codec: connectors::codec::Codec::None,
        partition_dir: String::new(),
        partition_values: Vec::new(),
        range: connectors::SplitRange::Whole,
        rows: Some(rows),
        deleted: Vec::new(),
        stamp: Default::default(),
        source: 0,
        window: None,
    }
}

fn lease(attempt: u64, split: u32, offset: u64, skip: Vec<(u64, u64)>) -> Lease {
    Lease {
        attempt: AttemptId(attempt),
        epoch: 0,
        split,
        offset,
        deadline: 0,
        skip,
        repaired: false,
    }
}

/// A lease given: its split, offset and skipped ranges.
type Leased = (u32, u64, Vec<(u64, u64)>);

/// Splits of 100 rows each: split `s` holds ids `s * 1000 ..`.
const ROWS: u64 = 100;

/// Runs a shuffle over `splits` splits leased in `leased` order (offset and
/// skip per lease), with `done` splits done before; returns the batches
/// dealt as (device, ids).
fn deal(
    seed: u64,
    splits: u32,
    window: u64,
    leased: &[Leased],
    done: &[u32],
) -> Vec<(usize, Vec<i64>)> {
    let all: Vec<Split> = (0..splits).map(|_| split(ROWS)).collect();
    let mut shuffle = GlobalShuffle::new(seed, window, 32, 3);
    let view = EpochView {
        epoch: 0,
        order: (0..splits).rev().collect(),
        done: done.to_vec(),
        failed: Vec::new(),
    };
    assert!(shuffle.needs_view(0));
    shuffle.set_view(Some(view), &all);
    for (i, (split, offset, skip)) in leased.iter().enumerate() {
        shuffle.offer(lease(i as u64 + 1, *split, *offset, skip.clone()), &all);
    }
    let mut next_id = u64::MAX;
    let mut out = Vec::new();
    loop {
        let orders = shuffle.pump(&all, 2, &mut next_id);
        for order in &orders {
            assert_eq!(order.lease.offset, 0, "read whole");
            assert!(order.lease.skip.is_empty(), "read whole");
            let first = i64::from(order.lease.split) * 1000;
            // Two reads per split, in order.
            shuffle.add(order.lease.attempt, 0, rows(first, 40));
            shuffle.add(order.lease.attempt, 40, rows(first + 40, 60));
            shuffle.read_ended(order.lease.attempt);
        }
        let mut dealt = false;
        while let Some((device, batch)) = shuffle.next_batch().expect("batch") {
            let ids = batch
                .data
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec();
            let from_provenance: usize = batch.provenance.iter().map(|p| p.len as usize).sum();
            assert_eq!(from_provenance, ids.len());
            out.push((device, ids));
            dealt = true;
        }
        if orders.is_empty() && !dealt {
            break;
        }
    }
    assert!(shuffle.is_empty(), "everything dealt");
    out
}

fn whole(splits: u32) -> Vec<Leased> {
    (0..splits).map(|s| (s, 0, Vec::new())).collect()
}

#[test]
fn windows_are_permuted_across_tasks_the_same_for_the_same_seed() {
    let first = deal(7, 6, 250, &whole(6), &[]);
    // Windows of two splits (200 rows): 3 windows, 7 batches each (6 of 32, one of 8).
    assert_eq!(first.len(), 21);
    let mut ids: Vec<i64> = first.iter().flat_map(|(_, ids)| ids.clone()).collect();
    ids.sort_unstable();
    let expected: Vec<i64> = (0..6)
        .flat_map(|s| (0..ROWS as i64).map(move |r| s * 1000 + r))
        .collect();
    assert_eq!(ids, expected, "every row once");
    assert_eq!(first, deal(7, 6, 250, &whole(6), &[]), "the same seed");
    assert_ne!(first, deal(8, 6, 250, &whole(6), &[]), "another seed");
    // Each window mixes its two tasks (the epoch's order: 5 and 4 first).
    let tasks: HashSet<i64> = first[0].1.iter().map(|id| id / 1000).collect();
    assert_eq!(tasks, HashSet::from([5, 4]), "{:?}", first[0]);
    // The i-th batch of window w goes to device (w + i) mod 3.
    let devices: Vec<usize> = first.iter().map(|(d, _)| *d).collect();
    assert_eq!(&devices[..8], &[0, 1, 2, 0, 1, 2, 0, 1]);
}

#[test]
fn leases_in_another_order_deal_the_same_batches() {
    let mut leased = whole(6);
    leased.reverse();
    leased.swap(0, 3);
    assert_eq!(
        deal(7, 6, 250, &leased, &[]),
        deal(7, 6, 250, &whole(6), &[])
    );
}

#[test]
fn a_resumed_run_goes_on_with_the_same_batches() {
    let full = deal(3, 6, 250, &whole(6), &[]);
    // Stopped in the second window (splits 3 and 2) once its first three
    // batches were committed, the first window done.
    let committed: Vec<i64> = full[7..10]
        .iter()
        .flat_map(|(_, ids)| ids.clone())
        .collect();
    let skip_of = |split: i64| {
        let mut rows: Vec<u64> = committed
            .iter()
            .filter(|id| *id / 1000 == split)
            .map(|id| (id % 1000) as u64)
            .collect();
        rows.sort_unstable();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for row in rows {
            match ranges.last_mut() {
                Some(last) if last.1 == row => last.1 += 1,
                _ => ranges.push((row, row + 1)),
            }
        }
        ranges
    };
    let offset_and_skip = |split: i64| {
        let ranges = skip_of(split);
        match ranges.first() {
            Some(&(0, end)) => (end, ranges[1..].to_vec()),
            _ => (0, ranges),
        }
    };
    let (o3, s3) = offset_and_skip(3);
    let (o2, s2) = offset_and_skip(2);
    let leased = vec![(3, o3, s3), (2, o2, s2), (1, 0, vec![]), (0, 0, vec![])];
    let resumed = deal(3, 6, 250, &leased, &[5, 4]);
    assert_eq!(resumed, full[10..].to_vec());
}

#[test]
fn a_task_of_unknown_rows_is_a_window_of_its_own() {
    let mut all: Vec<Split> = (0..3).map(|_| split(ROWS)).collect();
    all[1].rows = None;
    let shuffle = GlobalShuffle::new(1, 1000, 10, 1);
    let plan = shuffle.plan_of(
        EpochView {
            epoch: 0,
            order: vec![0, 1, 2],
            ..EpochView::default()
        },
        &all,
    );
    assert_eq!(plan.windows, vec![vec![0], vec![1], vec![2]]);
    let all: Vec<Split> = (0..5).map(|_| split(ROWS)).collect();
    let plan = GlobalShuffle::new(1, 250, 10, 1).plan_of(
        EpochView {
            epoch: 0,
            order: vec![4, 3, 2, 1, 0],
            ..EpochView::default()
        },
        &all,
    );
    assert_eq!(plan.windows, vec![vec![4, 3], vec![2, 1], vec![0]]);
}

#[test]
fn without_a_view_windows_are_the_leases_as_they_come() {
    let all: Vec<Split> = (0..4).map(|_| split(ROWS)).collect();
    let mut shuffle = GlobalShuffle::new(5, 200, 50, 2);
    shuffle.set_view(None, &all);
    assert!(!shuffle.needs_view(0));
    for s in 0..4 {
        shuffle.offer(lease(u64::from(s) + 1, s, 0, Vec::new()), &all);
    }
    shuffle.nothing_to_lease();
    let mut next_id = u64::MAX;
    let mut batches = Vec::new();
    for _ in 0..4 {
        for order in shuffle.pump(&all, 4, &mut next_id) {
            assert!(!order.context);
            let first = i64::from(order.lease.split) * 1000;
            shuffle.add(order.lease.attempt, 0, rows(first, 100));
            shuffle.read_ended(order.lease.attempt);
        }
        while let Some((_, out)) = shuffle.next_batch().expect("batch") {
            let ids = out
                .data
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec();
            batches.push(ids);
        }
    }
    assert_eq!(batches.len(), 8);
    let first: HashSet<i64> = batches[..4].iter().flatten().map(|id| id / 1000).collect();
    assert_eq!(first, HashSet::from([0, 1]));
}
