use std::sync::Arc;

use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};

use super::*;
use crate::worker::shell::sim_worker::split;

fn rows(first: i64, n: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from_iter_values(first..first + n))],
    )
    .expect("batch")
}

fn lease(attempt: u64, split: u32, offset: u64, skip: Vec<(u64, u64)>) -> Lease {
    Lease {
        attempt: AttemptId(attempt),
        epoch: Epoch(0),
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
        epoch: Epoch(0),
        order: (0..splits).rev().collect(),
        done: done.to_vec(),
        failed: Vec::new(),
    };
    assert!(shuffle.needs_view(Epoch(0)));
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
            epoch: Epoch(0),
            order: vec![0, 1, 2],
            ..EpochView::default()
        },
        &all,
    );
    assert_eq!(plan.windows, vec![vec![0], vec![1], vec![2]]);
    let all: Vec<Split> = (0..5).map(|_| split(ROWS)).collect();
    let plan = GlobalShuffle::new(1, 250, 10, 1).plan_of(
        EpochView {
            epoch: Epoch(0),
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
    assert!(!shuffle.needs_view(Epoch(0)));
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

/// A step's number and each rank's ids.
type CutStep = (u64, Vec<Vec<i64>>);

/// Runs a shuffle cut into global batches of `size` rows for `ranks` ranks
/// over 6 splits leased whole but for `offsets` (rows committed before, per
/// split); returns each step as (step, ranks' ids), and the rows dropped.
fn global_steps(
    ranks: usize,
    size: u64,
    offsets: &[(u32, u64)],
    drop_last: bool,
) -> (Vec<CutStep>, usize) {
    let all: Vec<Split> = (0..6).map(|_| split(ROWS)).collect();
    let mut shuffle =
        GlobalShuffle::new(7, 250, 32, ranks).with_global_batches(size, ranks, drop_last);
    let view = EpochView {
        epoch: Epoch(0),
        order: (0..6).rev().collect(),
        done: Vec::new(),
        failed: Vec::new(),
    };
    shuffle.set_view(Some(view), &all);
    for s in 0..6u32 {
        let offset = offsets.iter().find(|(o, _)| *o == s).map_or(0, |(_, n)| *n);
        shuffle.offer(lease(u64::from(s) + 1, s, offset, Vec::new()), &all);
    }
    run_steps(&mut shuffle, &all, |lease| {
        rows(i64::from(lease.split) * 1000, ROWS as i64)
    })
}

/// Reads every window of `shuffle` over `all` (`read`: a lease's rows) and
/// cuts its steps: each as (step, ranks' ids), and the rows dropped.
fn run_steps(
    shuffle: &mut GlobalShuffle,
    all: &[Split],
    read: impl Fn(&Lease) -> RecordBatch,
) -> (Vec<CutStep>, usize) {
    let (mut next_id, mut steps, mut dropped) = (u64::MAX, Vec::new(), 0);
    loop {
        let orders = shuffle.pump(all, 3, &mut next_id);
        for order in &orders {
            shuffle.add(order.lease.attempt, 0, read(&order.lease));
            shuffle.read_ended(order.lease.attempt);
        }
        if orders.is_empty() && shuffle.building.is_none() {
            shuffle.end_epoch();
        }
        let mut cut = false;
        while let Some(next) = shuffle.next_step().expect("a step") {
            cut = true;
            match next {
                Cut::Step(step) => {
                    let number = step.batches[0].data.schema().metadata()
                        [crate::trainer::protocol::STEP_KEY]
                        .parse()
                        .expect("a step number");
                    let ids = step.batches.iter().map(ids_of).collect();
                    steps.push((number, ids));
                }
                Cut::Dropped(batches) => {
                    dropped += batches.iter().map(|b| b.data.num_rows()).sum::<usize>()
                }
            }
        }
        if orders.is_empty() && !cut && shuffle.building.is_none() {
            break;
        }
    }
    (steps, dropped)
}

/// The ids of a batch.
fn ids_of(batch: &OutBatch) -> Vec<i64> {
    batch
        .data
        .column(0)
        .as_primitive::<Int64Type>()
        .values()
        .to_vec()
}

#[test]
fn global_batches_are_the_same_for_any_number_of_ranks() {
    let (one, _) = global_steps(1, 96, &[], false);
    // 600 rows: 6 steps of 96 across windows of 200 rows, and one of 24.
    let sizes: Vec<usize> = one.iter().map(|(_, r)| r.concat().len()).collect();
    assert_eq!(sizes, [96, 96, 96, 96, 96, 96, 24]);
    let mut ids: Vec<i64> = one.iter().flat_map(|(_, r)| r.concat()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 600, "every row once");
    for ranks in [2, 3, 4] {
        let (steps, _) = global_steps(ranks, 96, &[], false);
        let joined: Vec<(u64, Vec<i64>)> = steps.iter().map(|(k, r)| (*k, r.concat())).collect();
        let first: Vec<(u64, Vec<i64>)> = one.iter().map(|(k, r)| (*k, r.concat())).collect();
        assert_eq!(joined, first, "{ranks} ranks");
        for (k, slices) in &steps {
            let (min, max) = slices
                .iter()
                .map(Vec::len)
                .fold((usize::MAX, 0), |(a, b), n| (a.min(n), b.max(n)));
            assert!(
                max - min <= 1,
                "step {k} with {ranks} ranks: slices of {min} to {max} rows"
            );
        }
    }
}

#[test]
fn rows_committed_before_keep_their_steps_and_places() {
    let (whole, _) = global_steps(2, 96, &[], false);
    // Splits 5 and 4 (the first window) half committed, split 0 whole.
    let (resumed, _) = global_steps(3, 96, &[(5, 50), (4, 50), (0, 100)], false);
    let committed =
        |id: &i64| (id / 1000 == 5 || id / 1000 == 4) && id % 1000 < 50 || id / 1000 == 0;
    let expected: Vec<(u64, Vec<i64>)> = whole
        .iter()
        .map(|(k, r)| {
            (
                *k,
                r.concat()
                    .into_iter()
                    .filter(|id| !committed(id))
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, ids)| !ids.is_empty())
        .collect();
    let got: Vec<(u64, Vec<i64>)> = resumed.iter().map(|(k, r)| (*k, r.concat())).collect();
    assert_eq!(got, expected);
}

#[test]
fn drop_last_drops_the_epochs_short_step() {
    let (steps, dropped) = global_steps(2, 96, &[], true);
    assert_eq!(steps.len(), 6);
    assert_eq!(dropped, 24);
}

/// The splits of [`lane_steps`]: 6 splits of 100 rows cut into the tasks of
/// 24 lanes (split `g` holds ids `g * 1000 ..`), and the lanes.
fn laned() -> (Vec<Split>, Arc<Lanes>, Vec<i64>) {
    let cut = crate::queue::cut_lanes(&[ROWS; 6], 24, 10);
    let lanes = Lanes {
        count: 24,
        window_rows: 10,
        rows: cut.iter().map(|&(_, s, e)| e - s).collect(),
        group: cut.iter().map(|&(g, _, _)| g).collect(),
        ..Lanes::default()
    };
    let splits = cut
        .iter()
        .map(|&(_, s, e)| Split {
            window: Some((s, e)),
            ..split(e - s)
        })
        .collect();
    let first = cut
        .iter()
        .map(|&(g, s, _)| i64::from(g) * 1000 + s as i64)
        .collect();
    (splits, Arc::new(lanes), first)
}

/// Global batches of 96 rows over [`laned`] for a worker of `ranks` ranks
/// holding lanes `mine` (in its ranks' order), leased only its lanes'
/// tasks: each step as (step, ranks' ids).
fn lane_steps(ranks: usize, mine: impl IntoIterator<Item = u32>) -> Vec<CutStep> {
    let mine: Vec<u32> = mine.into_iter().collect();
    let (all, lanes, first) = laned();
    let lane_of = lanes.lane_of();
    let mut shuffle = GlobalShuffle::new(7, 250, 32, ranks)
        .with_global_batches(96, ranks, false)
        .with_lanes(lanes.clone(), mine.clone());
    let order = lanes.order(7, Epoch(0));
    let view = EpochView {
        epoch: Epoch(0),
        order: order.clone(),
        done: Vec::new(),
        failed: Vec::new(),
    };
    shuffle.set_view(Some(view), &all);
    for &task in order
        .iter()
        .filter(|&&t| mine.contains(&lane_of[t as usize]))
    {
        shuffle.offer(lease(u64::from(task) + 1, task, 0, Vec::new()), &all);
    }
    run_steps(&mut shuffle, &all, |lease| {
        let task = lease.split as usize;
        rows(first[task], all[task].rows.unwrap_or(0) as i64)
    })
    .0
}

#[test]
fn lanes_give_the_same_global_batches_to_any_ranks_and_any_workers() {
    let one = lane_steps(1, 0..24u32);
    let sizes: Vec<usize> = one.iter().map(|(_, r)| r.concat().len()).collect();
    assert_eq!(sizes, [96, 96, 96, 96, 96, 96, 24]);
    let mut ids: Vec<i64> = one.iter().flat_map(|(_, r)| r.concat()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 600, "every row once");
    let joined = |steps: &[CutStep]| -> Vec<(u64, Vec<i64>)> {
        steps.iter().map(|(k, r)| (*k, r.concat())).collect()
    };
    // Lane l holds ids of rows [25l, 25l + 25) of the splits in order.
    let lane = |id: i64| ((id / 1000) * 100 + id % 1000) / 25;
    for ranks in [2, 3, 4, 6, 5] {
        let steps = lane_steps(ranks, 0..24u32);
        assert_eq!(joined(&steps), joined(&one), "{ranks} ranks");
        if 24 % ranks == 0 {
            let per = 24 / ranks as i64;
            for (k, slices) in &steps {
                for (r, slice) in slices.iter().enumerate() {
                    let r = r as i64;
                    assert!(
                        slice
                            .iter()
                            .all(|&id| (r * per..(r + 1) * per).contains(&lane(id))),
                        "step {k}, rank {r} of {ranks}: a row of another rank's lanes"
                    );
                }
            }
        }
    }
    // Workers holding ranks [0, 2) and [2, 3) of 3, each leased only its
    // lanes' tasks, cut the same slices as one worker of 3 ranks.
    let three = lane_steps(3, 0..24u32);
    let first = lane_steps(2, 0..16u32);
    let second = lane_steps(1, 16..24u32);
    let together: Vec<CutStep> = first
        .iter()
        .zip(&second)
        .map(|((k, a), (j, b))| {
            assert_eq!(k, j);
            (*k, a.iter().chain(b).cloned().collect())
        })
        .collect();
    assert_eq!(together, three);
    // Of a world of 6 (4 lanes a rank), workers holding ranks {0, 2, 3} and
    // {1, 4, 5}, ranks that do not follow each other, cut the slices of one
    // worker of 6 ranks, each device its own rank's.
    let six = lane_steps(6, 0..24u32);
    let lanes_of =
        |ranks: &[u32]| -> Vec<u32> { ranks.iter().flat_map(|&r| r * 4..(r + 1) * 4).collect() };
    let a = lane_steps(3, lanes_of(&[0, 2, 3]));
    let b = lane_steps(3, lanes_of(&[1, 4, 5]));
    assert_eq!(a.len(), six.len());
    for (((k, whole), (j, a)), (i, b)) in six.iter().zip(&a).zip(&b) {
        assert_eq!((k, k), (j, i));
        let by_rank = [&a[0], &b[0], &a[1], &a[2], &b[1], &b[2]];
        for (rank, slice) in by_rank.into_iter().enumerate() {
            assert_eq!(slice, &whole[rank], "step {k}, rank {rank}");
        }
    }
}
