//! The built-in models are the same from run to run: the same `--seed`, data and
//! options give the same loss to the last digit, on one device or several (tasks are
//! read in the order they are leased, and the devices step in lockstep, their
//! gradients summed in device order).

mod common;

use common::{fixture, parse_json, sluice};

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
