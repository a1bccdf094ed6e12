//! `--global-batch-size G` with `--shuffle global`: step `k` of an epoch is
//! rows `[kG, (k+1)G)` of the epoch's order and rank `r` of `W` gets the
//! `r`-th slice of it. The same seed and data give the same global batches
//! on 1, 2 or 3 devices, with or without `--lockstep`, and a job killed
//! (SIGKILL) ten times and resumed each time on another number of devices
//! goes on with them, every id of every epoch trained. The trainer
//! (tests/trainers/step_log.py) logs each batch's epoch, step, rank and ids.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{count_lines, fixture, parse_json, python, run, sluice, wait_until, SLUICE};

/// One Spark part file of 20,000 rows (ids 0..20000), cut into 9 tasks.
pub(crate) const DATASET: &str = "parquet_row_groups";
pub(crate) const ROWS: usize = 20_000;
pub(crate) const G: usize = 1536;

/// Each (epoch, step)'s batches by rank, as one run logged them.
pub(crate) type Steps = BTreeMap<(u64, u64), BTreeMap<u64, Vec<i64>>>;

pub(crate) fn train(out: &Path, devices: usize, extra: &[&str], sleep: f64) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/step_log.py");
    let mut cmd = Command::new(SLUICE);
    cmd.arg("train")
        .arg(fixture(DATASET))
        .args(["--quiet", "--split-size", "64KiB", "--seed", "7"])
        .args(["--shuffle", "global", "--shuffle-window", "5000"])
        .args(["--global-batch-size", &G.to_string()])
        .args(["--devices", &devices.to_string()])
        .args(extra)
        .args([
            "--exec",
            &format!(
                "{} {} --sleep {sleep} --out {}",
                python(),
                script.display(),
                out.display()
            ),
        ])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// What the trainers logged, one `Steps` per trainer process id.
pub(crate) fn logged(out: &Path) -> HashMap<String, Steps> {
    let mut runs: HashMap<String, Steps> = HashMap::new();
    for entry in std::fs::read_dir(out).expect("list").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("steps-") {
            continue;
        }
        let pid = name.rsplit('-').next().unwrap_or_default().to_string();
        let text = std::fs::read_to_string(entry.path()).expect("read log");
        let steps = runs.entry(pid).or_default();
        for line in text.lines() {
            let value = parse_json(line, &name);
            let at = |key: &str| value[key].as_u64().expect("a number");
            let ids = value["ids"].as_array().expect("ids").iter();
            steps
                .entry((at("epoch"), at("step")))
                .or_default()
                .insert(at("rank"), ids.map(|i| i.as_i64().expect("id")).collect());
        }
    }
    runs
}

/// The global batches of one uninterrupted run: each step's ids, rank by rank.
pub(crate) fn global_batches(out: &Path) -> BTreeMap<(u64, u64), Vec<i64>> {
    let mut all = BTreeMap::new();
    for steps in logged(out).into_values() {
        for (at, ranks) in steps {
            let batch: &mut BTreeMap<u64, Vec<i64>> = all.entry(at).or_default();
            batch.extend(ranks);
        }
    }
    all.into_iter()
        .map(|(at, ranks)| (at, ranks.into_values().flatten().collect()))
        .collect()
}

#[track_caller]
pub(crate) fn assert_each_id_once_per_epoch(batches: &BTreeMap<(u64, u64), Vec<i64>>, epochs: u64) {
    for epoch in 0..epochs {
        let ids: Vec<i64> = batches
            .range((epoch, 0)..(epoch + 1, 0))
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect();
        let distinct: HashSet<i64> = ids.iter().copied().collect();
        assert_eq!(ids.len(), ROWS, "epoch {epoch}: rows trained");
        assert_eq!(distinct.len(), ROWS, "epoch {epoch}: an id trained twice");
    }
}

#[test]
fn one_to_three_devices_get_the_same_global_batches() {
    let mut reference = None;
    for (devices, lockstep) in [(1, true), (2, true), (3, true), (2, false)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let extra: &[&str] = if lockstep { &["--lockstep"] } else { &[] };
        let done = run(&mut train(dir.path(), devices, extra, 0.0));
        assert!(done.status.success(), "{done}");
        let batches = global_batches(dir.path());
        assert_each_id_once_per_epoch(&batches, 1);
        let sizes: Vec<usize> = batches.values().map(Vec::len).collect();
        let mut expected = vec![G; ROWS / G];
        expected.push(ROWS % G);
        assert_eq!(sizes, expected, "{devices} devices: rows per step");
        if lockstep {
            // Every rank gets a slice of every step; the last step's
            // slices differ by at most one row, and carry the epoch's end.
            for steps in logged(dir.path()).into_values() {
                let last = steps.keys().max().copied();
                for (at, ranks) in &steps {
                    assert_eq!(ranks.len(), 1, "one rank per trainer process");
                    let rows = ranks.values().next().map_or(0, Vec::len);
                    let want = if Some(*at) == last {
                        (ROWS % G) / devices..=(ROWS % G).div_ceil(devices)
                    } else {
                        G / devices..=G / devices
                    };
                    assert!(
                        want.contains(&rows),
                        "{devices} devices, step {at:?}: {rows} rows"
                    );
                }
            }
        }
        match &reference {
            None => reference = Some(batches),
            Some(first) => assert!(
                *first == batches,
                "{devices} devices (lockstep: {lockstep}) gave other global batches than 1"
            ),
        }
    }
}

/// Checks that every batch the trainers under `out` logged holds ids of its
/// step in the uninterrupted run (`place`: (epoch, id) -> (step, place in
/// it)), in that step's order; returns the ids trained of each epoch.
pub(crate) fn trained_at_their_steps(
    out: &Path,
    place: &HashMap<(u64, i64), (u64, usize)>,
) -> HashMap<u64, HashSet<i64>> {
    let mut trained: HashMap<u64, HashSet<i64>> = HashMap::new();
    for (pid, steps) in logged(out) {
        for ((epoch, step), ranks) in steps {
            for (rank, ids) in ranks {
                let places: Vec<(u64, usize)> = ids
                    .iter()
                    .map(|id| {
                        place
                            .get(&(epoch, *id))
                            .copied()
                            .expect("an id of the dataset")
                    })
                    .collect();
                assert!(
                    places.iter().all(|&(s, _)| s == step),
                    "process {pid} rank {rank}, epoch {epoch} step {step}: ids of other steps"
                );
                assert!(
                    places.windows(2).all(|w| w[0].1 < w[1].1),
                    "process {pid} rank {rank}, epoch {epoch} step {step}: not in the step's order"
                );
                trained.entry(epoch).or_default().extend(ids);
            }
        }
    }
    trained
}

/// Where each id is in an uninterrupted run: (epoch, id) -> (step, place).
pub(crate) fn places(whole: &BTreeMap<(u64, u64), Vec<i64>>) -> HashMap<(u64, i64), (u64, usize)> {
    whole
        .iter()
        .flat_map(|(&(epoch, step), ids)| {
            ids.iter()
                .enumerate()
                .map(move |(at, &id)| ((epoch, id), (step, at)))
        })
        .collect()
}

/// A small deterministic generator for the kills' moments and world sizes.
pub(crate) struct Draw(pub(crate) u64);

impl Draw {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn ten_kills_resumed_on_other_device_counts_go_on_with_the_same_global_batches() {
    let epochs = 2;
    let reference = tempfile::tempdir().expect("tempdir");
    let done = run(&mut train(
        reference.path(),
        2,
        &["--lockstep", "--epochs", "2"],
        0.0,
    ));
    assert!(done.status.success(), "{done}");
    let whole = global_batches(reference.path());
    assert_each_id_once_per_epoch(&whole, epochs);
    let place = places(&whole);

    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let state_arg = state.to_string_lossy().into_owned();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    let args = ["--lockstep", "--epochs", "2", "--state", &state_arg];
    let mut draw = Draw(56);
    let mut sizes = Vec::new();
    let mut killed = 0;
    for _ in 0..10 {
        let devices = 1 + draw.below(3) as usize;
        sizes.push(devices);
        let before = count_lines(&out, "steps-");
        let batches = 1 + draw.below(4 * devices as u64);
        let mut child = train(&out, devices, &args, 0.05)
            .spawn()
            .expect("start sluice train");
        wait_until("batches logged", Duration::from_secs(120), || {
            count_lines(&out, "steps-") >= before + batches
                || child.try_wait().ok().flatten().is_some()
        });
        if child.try_wait().ok().flatten().is_none() {
            killed += 1;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(
        killed >= 8,
        "only {killed} of 10 runs were killed before they ended"
    );
    let last = 1 + draw.below(3) as usize;
    let done = run(&mut train(&out, last, &args, 0.0));
    assert!(done.status.success(), "{done}");

    // Every run handed out whole steps of the uninterrupted sequence (or
    // what of them was not committed before), in its order.
    let trained = trained_at_their_steps(&out, &place);
    for epoch in 0..epochs {
        assert_eq!(
            trained.get(&epoch).map_or(0, HashSet::len),
            ROWS,
            "epoch {epoch}: ids trained across the runs (devices {sizes:?}, then {last})"
        );
    }
}

#[test]
fn global_batches_devices_cannot_share_evenly_are_refused_in_one_line() {
    let data = fixture(DATASET);
    let data = data.to_string_lossy();
    let uneven = sluice([
        "train",
        &data,
        "--shuffle",
        "global",
        "--global-batch-size",
        "1000",
        "--devices",
        "3",
        "--exec",
        "true",
    ])
    .failure();
    let line = uneven.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{uneven}");
    assert!(
        line.contains("--global-batch-size") && line.contains("3 equal slices"),
        "{uneven}"
    );
    let without = sluice([
        "train",
        &data,
        "--global-batch-size",
        "1024",
        "--exec",
        "true",
    ])
    .failure();
    assert!(
        without.stderr.contains("--global-batch-size")
            && without.stderr.contains("--shuffle global"),
        "{without}"
    );
    // The workers of a master lease tasks as they come: no global batches there.
    let worker = sluice([
        "worker",
        "--master",
        "http://127.0.0.1:9",
        "--shuffle",
        "global",
        "--global-batch-size",
        "1024",
        "--exec",
        "true",
    ])
    .failure();
    assert_eq!(worker.stderr.trim().lines().count(), 1, "{worker}");
    assert!(worker.stderr.contains("--global-batch-size"), "{worker}");
}

#[test]
fn two_sources_mixed_by_weight_give_the_same_global_batches_on_one_or_three_devices() {
    let mut seen = Vec::new();
    for devices in [1, 3] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = train(
            dir.path(),
            devices,
            &["--lockstep", "--weights", "3,1"],
            0.0,
        );
        // The same data twice: a source of 20,000 rows weighted 3, one weighted 1.
        cmd.arg(fixture(DATASET));
        let done = run(&mut cmd);
        assert!(done.status.success(), "{done}");
        let batches = global_batches(dir.path());
        let rows: usize = batches.values().map(Vec::len).sum();
        assert_eq!(rows, 2 * ROWS, "{devices} devices: rows of both sources");
        seen.push(batches);
    }
    assert!(
        seen[0] == seen[1],
        "3 devices gave other global batches than 1"
    );
}
