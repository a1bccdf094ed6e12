//! Checkpoints of the built-in models across device threads: each device's
//! `checkpoint ID` mark comes after the acknowledgements of exactly the batches
//! the saved model holds, whatever the order in which the devices step and idle.

use crate::epoch::Epoch;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use arrow::array::{ArrayRef, Float64Array};
use arrow::record_batch::RecordBatch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

/// Rows per batch.
const ROWS: usize = 4;

/// Batch `id` of `count`: feature `x{id}` is 1 in each of its rows and every other
/// feature 0, so that the feature moments saved with a model tell which batches it
/// holds.
fn tagged(id: usize, count: usize) -> RecordBatch {
    let mut columns: Vec<(String, ArrayRef)> = (0..count)
        .map(|k| {
            let value = if k == id { 1.0 } else { 0.0 };
            let array = Float64Array::from(vec![value; ROWS]);
            (format!("x{k}"), Arc::new(array) as ArrayRef)
        })
        .collect();
    let labels: Vec<f64> = (0..ROWS).map(|r| (r % 2) as f64).collect();
    columns.push(("y".to_string(), Arc::new(Float64Array::from(labels))));
    RecordBatch::try_from_iter(columns).expect("batch")
}

/// The batches checkpoint file `path` holds, from its feature moments.
fn held_by(path: &Path, count: usize) -> BTreeSet<usize> {
    let text = std::fs::read_to_string(path).expect("read checkpoint");
    let json: serde_json::Value = serde_json::from_str(&text).expect("checkpoint json");
    let moments = &json["state"]["moments"];
    let rows = moments["count"].as_f64().unwrap_or(0.0);
    let mut held = BTreeSet::new();
    for k in 0..count {
        let mean = moments["mean"][k].as_f64().unwrap_or(0.0);
        let of_batch = (mean * rows).round() as usize;
        assert!(
            of_batch == 0 || of_batch == ROWS,
            "batch {k} half in {path:?}"
        );
        if of_batch == ROWS {
            held.insert(k);
        }
    }
    held
}

fn factory(dir: &Path, count: usize, every: u64) -> LinearFactory {
    let features = (0..count).map(|k| format!("x{k}")).collect();
    LinearFactory::new(LinearKind::Logistic, "y", features).with_checkpoints(ModelCheckpoints {
        dir: dir.to_path_buf(),
        every,
        resume: None,
    })
}

/// What one device thread saw.
#[derive(Default)]
struct Seen {
    /// Batch ids in the order they were acknowledged.
    acked: Vec<usize>,
    /// Checkpoint ID -> batches acknowledged before its mark.
    marks: BTreeMap<u64, BTreeSet<usize>>,
    /// Checkpoint ID -> batches its file holds (read for the newest mark of each
    /// `take_marks`, which no pruning can have removed yet).
    files: BTreeMap<u64, BTreeSet<usize>>,
}

fn take(trainer: &mut Box<dyn Trainer>, seen: &mut Seen, dir: &Path, count: usize) {
    let marks = trainer.take_marks();
    let mut newest = None;
    for mark in marks {
        let after = usize::try_from(mark.after).expect("after");
        assert!(
            after <= seen.acked.len(),
            "mark after unacknowledged batches"
        );
        match mark.kind {
            MarkKind::Declared => assert_eq!(after, 0, "declared before the first ack"),
            MarkKind::Checkpoint(id) => {
                let id: u64 = id.parse().expect("numeric id");
                let held = seen.acked[..after].iter().copied().collect();
                assert!(seen.marks.insert(id, held).is_none(), "ID {id} twice");
                newest = Some(id);
            }
            MarkKind::Restarted => panic!("a built-in model never restarts"),
        }
    }
    if let Some(id) = newest {
        let path = dir.join(format!("model-{id}.json"));
        seen.files.insert(id, held_by(&path, count));
    }
}

#[test]
fn each_device_marks_a_checkpoint_after_exactly_the_batches_it_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Unequal shares; each device's second half is epoch 1.
    let shares = [12usize, 7, 16];
    let count: usize = shares.iter().sum();
    let factory = Arc::new(factory(dir.path(), count, 3));
    factory
        .validate(&tagged(0, count).schema())
        .expect("validate");
    let (done, finished) = mpsc::channel();
    let mut first = 0;
    for (device, &share) in shares.iter().enumerate() {
        let mut trainer = factory.make(device, shares.len()).expect("make");
        let ids: Vec<usize> = (first..first + share).collect();
        first += share;
        let done = done.clone();
        let dir = dir.path().to_path_buf();
        thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(device as u64);
            let mut seen = Seen::default();
            for (seq, &id) in ids.iter().enumerate() {
                if rng.random_bool(0.4) {
                    // Waiting for data: steps complete without this device.
                    trainer.set_idle(true);
                    thread::sleep(Duration::from_millis(rng.random_range(0..4)));
                    trainer.set_idle(false);
                }
                let batch = Batch {
                    seq: seq as u64,
                    epoch: Epoch(u32::from(seq >= share / 2)),
                    data: tagged(id, count),
                };
                let acked = trainer.feed(batch).expect("feed");
                assert_eq!(acked, vec![seq as u64]);
                seen.acked.push(id);
                take(&mut trainer, &mut seen, &dir, count);
            }
            trainer.finish().expect("finish");
            take(&mut trainer, &mut seen, &dir, count);
            done.send((device, ids, seen)).expect("report done");
        });
    }
    let mut devices = BTreeMap::new();
    for _ in shares {
        let (device, ids, seen) = finished
            .recv_timeout(Duration::from_secs(60))
            .expect("training deadlocked");
        assert_eq!(seen.acked, ids, "every batch acknowledged, in order");
        devices.insert(device, seen);
    }
    let files: BTreeMap<u64, &BTreeSet<usize>> = devices
        .values()
        .flat_map(|s| &s.files)
        .map(|(id, held)| (*id, held))
        .collect();
    assert!(files.len() >= 3, "too few checkpoints checked: {files:?}");
    for (id, held) in files {
        // A device that never marked this ID had finished before it was taken:
        // all its batches are in it.
        let expected: BTreeSet<usize> = devices
            .values()
            .flat_map(|seen| {
                seen.marks
                    .get(&id)
                    .unwrap_or(&seen.acked.iter().copied().collect())
                    .clone()
            })
            .collect();
        assert_eq!(held, &expected, "checkpoint {id}");
    }
    // Every device marks the same IDs, until it finished.
    let ids = |seen: &Seen| seen.marks.keys().copied().collect::<Vec<u64>>();
    let longest = devices.values().map(ids).max_by_key(Vec::len).expect("ids");
    for seen in devices.values() {
        assert!(
            longest.starts_with(&ids(seen)),
            "IDs differ between devices"
        );
    }
}

#[test]
fn the_model_is_saved_as_each_epoch_left_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let factory = factory(dir.path(), 5, 100);
    factory.validate(&tagged(0, 5).schema()).expect("validate");
    let mut trainer = factory.make(0, 1).expect("make");
    let mut marks = Vec::new();
    for (seq, epoch) in [0, 0, 0, 1, 1].map(Epoch).into_iter().enumerate() {
        let batch = Batch {
            seq: seq as u64,
            epoch,
            data: tagged(seq, 5),
        };
        trainer.feed(batch).expect("feed");
        marks.extend(trainer.take_marks());
    }
    trainer.finish().expect("finish");
    let checkpoint = |after: u64, id: &str| Mark {
        after,
        kind: MarkKind::Checkpoint(id.to_string()),
    };
    let declared = Mark {
        after: 0,
        kind: MarkKind::Declared,
    };
    assert_eq!(marks, vec![declared, checkpoint(3, "3")]);
    let path = dir.path().join("model-3.json");
    assert_eq!(held_by(&path, 5), BTreeSet::from([0, 1, 2]));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    assert_eq!(json["checkpoint"]["id"], "3");
    assert_eq!(json["checkpoint"]["epochs"]["0"]["rows"], 3 * ROWS as u64);
    assert!(json["checkpoint"]["epochs"].get("1").is_none(), "{json}");
}

#[test]
fn a_resumed_model_continues_its_checkpoint_and_its_statistics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let batches: Vec<RecordBatch> = (0..6).map(|id| tagged(id, 6)).collect();
    let run = |factory: &LinearFactory, range: std::ops::Range<usize>| {
        factory.validate(&batches[0].schema()).expect("validate");
        let mut trainer = factory.make(0, 1).expect("make");
        let mut marks = Vec::new();
        for (seq, id) in range.enumerate() {
            let batch = Batch {
                seq: seq as u64,
                epoch: Epoch(0),
                data: batches[id].clone(),
            };
            trainer.feed(batch).expect("feed");
            marks.extend(trainer.take_marks());
        }
        trainer.finish().expect("finish");
        (factory.report(), marks)
    };
    let whole = run(&factory(dir.path(), 6, 0), 0..6).0;
    // Killed after batch 4 (checkpoint 4 saved), resumed from checkpoint 4: the
    // same model, and statistics of every row once.
    let killed = factory(dir.path(), 6, 2);
    let (_, marks) = run(&killed, 0..5);
    assert_eq!(
        marks.last(),
        Some(&Mark {
            after: 4,
            kind: MarkKind::Checkpoint("4".into())
        })
    );
    let resumed = factory(dir.path(), 6, 2).with_checkpoints(ModelCheckpoints {
        dir: dir.path().to_path_buf(),
        every: 2,
        resume: Some("4".into()),
    });
    let (report, marks) = run(&resumed, 4..6);
    let weights = |report: &TrainerReport| -> Vec<f64> {
        let model = report.model.as_ref().expect("model");
        let mut w: Vec<f64> = serde_json::from_value(model["weights"].clone()).expect("weights");
        w.push(model["bias"].as_f64().expect("bias"));
        w
    };
    let (got, want) = (weights(&report), weights(&whole));
    assert!(
        got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-9),
        "{got:?} != {want:?}"
    );
    assert_eq!(report.epochs, whole.epochs);
    assert_eq!(report.epochs[0].rows, 6 * ROWS as u64);
    // IDs go on from the step count of the checkpoint.
    assert_eq!(
        marks.last(),
        Some(&Mark {
            after: 2,
            kind: MarkKind::Checkpoint("6".into())
        })
    );
    let missing = factory(dir.path(), 6, 2).with_checkpoints(ModelCheckpoints {
        dir: dir.path().to_path_buf(),
        every: 2,
        resume: Some("5".into()),
    });
    let error = missing.validate(&batches[0].schema()).unwrap_err();
    assert!(error.to_string().contains("model-5.json"), "{error}");
}
