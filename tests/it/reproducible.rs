//! The built-in models are the same from run to run: the same `--seed`, data and
//! options give the same loss to the last digit, on one device or several (tasks are
//! read in the order they are leased, and the devices step in lockstep, their
//! gradients summed in device order).

use crate::common;

use crate::common::{fixture, parse_json, sluice};

/// The per-epoch losses of one `sluice train --model logistic` run.
fn losses(devices: &str, seed: &str) -> Vec<f64> {
    let out = tempfile::tempdir().expect("tempdir");
    let summary = out.path().join("summary.json");
    let data = fixture("separable");
    sluice([
        "train",
        data.to_str().expect("utf-8"),
        "--model",
        "logistic",
        "--label",
        "label",
        "--features",
        "f1,f2,f3",
        "--devices",
        devices,
        "--epochs",
        "2",
        "--batch-size",
        "64",
        "--seed",
        seed,
        "--quiet",
        "--summary-json",
        summary.to_str().expect("utf-8"),
    ])
    .success();
    let text = std::fs::read_to_string(&summary).expect("summary");
    let json = parse_json(&text, "summary");
    json["trainer"]["epochs"]
        .as_array()
        .expect("epochs")
        .iter()
        .map(|e| e["loss"].as_f64().expect("a loss"))
        .collect()
}

#[test]
fn the_same_seed_gives_the_same_loss_to_the_last_digit() {
    for devices in ["1", "2", "3"] {
        let first = losses(devices, "7");
        assert_eq!(first.len(), 2);
        for _ in 0..2 {
            assert_eq!(losses(devices, "7"), first, "--devices {devices}");
        }
    }
    assert_ne!(
        losses("2", "8"),
        losses("2", "7"),
        "another seed, another order"
    );
}

/// The ids one `sluice train --devices 1 --seed SEED` run hands its trainer, in
/// the order it hands them.
fn id_sequence(name: &str, seed: &str, extra: &[&str]) -> Vec<i64> {
    let out = tempfile::tempdir().expect("tempdir");
    let data = fixture(name);
    let mut args = vec![
        "train",
        data.to_str().expect("utf-8"),
        "--devices",
        "1",
        "--epochs",
        "2",
        "--batch-size",
        "37",
        "--prefetch",
        "8",
        "--seed",
        seed,
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let trainer = common::recorder(out.path(), "");
    args.extend(["--exec", trainer.as_str()]);
    sluice(args).success();
    let files: Vec<_> = std::fs::read_dir(out.path())
        .expect("the trainer's directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ids-"))
        })
        .collect();
    assert_eq!(files.len(), 1, "one trainer process: {files:?}");
    std::fs::read_to_string(&files[0])
        .expect("the ids")
        .lines()
        .map(|l| l.trim().parse().expect("an id"))
        .collect()
}

/// `--seed` with one device is the same run again: the batch sequence is the
/// same, row for row, whatever order the readers of the tasks leased ahead
/// (`--prefetch`) deliver in; with the default order and a shuffle buffer.
#[test]
fn one_device_and_a_seed_hand_the_same_ids_in_the_same_order_every_run() {
    for (name, extra) in [
        ("parquet_small_files", &[][..]),
        ("parquet_small_files", &["--shuffle-buffer", "500"][..]),
        ("parquet_row_groups", &["--split-size", "64KiB"][..]),
    ] {
        let first = id_sequence(name, "42", extra);
        let rows = common::expected_dataset(name)["rows"]
            .as_u64()
            .expect("rows") as usize;
        assert_eq!(first.len(), 2 * rows, "{name} {extra:?}: two epochs");
        for run in 2..=3 {
            let again = id_sequence(name, "42", extra);
            let diverged = first.iter().zip(&again).position(|(a, b)| a != b);
            assert_eq!(
                diverged, None,
                "{name} {extra:?}: run {run} diverged from run 1 at row {diverged:?}"
            );
            assert_eq!(again.len(), first.len(), "{name} {extra:?}: run {run}");
        }
        assert_ne!(
            id_sequence(name, "43", extra),
            first,
            "{name} {extra:?}: another seed, another order"
        );
    }
}
