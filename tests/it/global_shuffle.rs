//! `--shuffle global`: the same seed, data and devices give every device the
//! same batches in the same order, rows permuted across tasks; another seed
//! another order; a run killed (SIGKILL) and resumed from `--state` goes on
//! with the sequence an uninterrupted run gives, every id once in the model.
//! The trainer (tests/trainers/batch_log.py) keeps checkpoints of the batches
//! it applied, in order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::cluster::{clean_finish, wait_exit, Job};
use crate::common::{count_lines, fixture, parse_json, python, run, wait_until, SLUICE};

/// One Spark part file of 20,000 rows (ids 0..20000), cut into 9 tasks.
const DATASET: &str = "parquet_row_groups";
const ROWS: i64 = 20_000;
const DEVICES: usize = 2;

/// Each device's batches, in order: lists of ids.
type Sequences = Vec<Vec<Vec<i64>>>;

fn train(out: &Path, state: Option<&Path>, seed: &str, epochs: u32, trainer: &str) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/batch_log.py");
    let mut cmd = Command::new(SLUICE);
    cmd.arg("train")
        .arg(fixture(DATASET))
        .args(["--quiet", "--batch-size", "100", "--split-size", "64KiB"])
        .args(["--shuffle", "global", "--shuffle-window", "5000"])
        .args(["--devices", &DEVICES.to_string()])
        .args(["--epochs", &epochs.to_string(), "--seed", seed])
        .args([
            "--exec",
            &format!(
                "{} {} --out {} {trainer}",
                python(),
                script.display(),
                out.display()
            ),
        ])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(state) = state {
        cmd.arg("--state").arg(state);
    }
    cmd
}

/// The final model of each device: its batches, in order.
fn finals(out: &Path) -> Sequences {
    let mut sequences: Sequences = vec![Vec::new(); DEVICES];
    let mut found = [false; DEVICES];
    for entry in std::fs::read_dir(out).expect("list").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("final-") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).expect("read final");
        let value = parse_json(&text, &name);
        let device = value["device"].as_u64().expect("device") as usize;
        assert!(!found[device], "two final models of device {device}");
        found[device] = true;
        sequences[device] = value["batches"]
            .as_array()
            .expect("batches")
            .iter()
            .map(|b| {
                b.as_array()
                    .expect("ids")
                    .iter()
                    .map(|id| id.as_i64().expect("an id"))
                    .collect()
            })
            .collect();
    }
    assert!(found.iter().all(|f| *f), "a device wrote no final model");
    sequences
}

/// A whole run's sequences, without state.
fn sequences(seed: &str) -> Sequences {
    let dir = tempfile::tempdir().expect("tempdir");
    run(&mut train(dir.path(), None, seed, 1, "--every 0")).success();
    finals(dir.path())
}

#[track_caller]
fn assert_every_id_times(sequences: &Sequences, times: u64) {
    let mut counts: HashMap<i64, u64> = HashMap::new();
    for id in sequences.iter().flatten().flatten() {
        *counts.entry(*id).or_default() += 1;
    }
    let wrong: Vec<(i64, u64)> = (0..ROWS)
        .map(|id| (id, counts.get(&id).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != times)
        .take(8)
        .collect();
    assert!(
        wrong.is_empty(),
        "ids not {times} times (id, times): {wrong:?}"
    );
    assert_eq!(counts.len() as i64, ROWS, "ids from outside the dataset");
}

#[test]
fn the_same_seed_deals_the_same_batches_to_each_device() {
    let first = sequences("7");
    assert_every_id_times(&first, 1);
    for (device, batches) in first.iter().enumerate() {
        assert!(
            batches.len() >= 90,
            "device {device} got {} batches of 200: the batches are dealt evenly",
            batches.len()
        );
    }
    assert_eq!(sequences("7"), first, "the same seed, another order");
    assert_ne!(sequences("8"), first, "another seed, the same order");
    // A task holds about 2,222 consecutive ids: a batch whose ids spread
    // wider holds rows of several tasks, and its ids are out of order. Windows
    // of up to 5,000 rows hold two tasks each, but for the epoch's last (9
    // tasks), whose batches cannot mix.
    let batches: Vec<&Vec<i64>> = first.iter().flatten().collect();
    let mixed = batches
        .iter()
        .filter(|ids| {
            let (min, max) = (ids.iter().min(), ids.iter().max());
            min.zip(max).is_some_and(|(min, max)| max - min > 2_500)
                && ids.windows(2).any(|w| w[0] > w[1])
        })
        .count();
    assert!(
        mixed * 4 >= batches.len() * 3,
        "only {mixed} of {} batches mix rows of several tasks",
        batches.len()
    );
}

fn remove_finals(out: &Path) {
    for entry in std::fs::read_dir(out).expect("list").flatten() {
        if entry.file_name().to_string_lossy().starts_with("final-") {
            std::fs::remove_file(entry.path()).expect("remove");
        }
    }
}

#[test]
fn a_killed_run_resumed_goes_on_with_the_same_batches() {
    let epochs = 2;
    let whole = tempfile::tempdir().expect("tempdir");
    let state = whole.path().join("state");
    let out: PathBuf = whole.path().join("model");
    std::fs::create_dir(&out).expect("mkdir");
    run(&mut train(&out, Some(&state), "11", epochs, "--every 3")).success();
    let uninterrupted = finals(&out);
    assert_every_id_times(&uninterrupted, u64::from(epochs));

    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let out: PathBuf = dir.path().join("model");
    std::fs::create_dir(&out).expect("mkdir");
    // Killed within the first epoch, and within the second.
    for seen in [70u64, 290] {
        let mut child = train(&out, Some(&state), "11", epochs, "--every 3 --sleep 0.02")
            .spawn()
            .expect("start sluice train");
        wait_until("batches seen", Duration::from_secs(120), || {
            count_lines(&out, "seen-") >= seen
        });
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }
    remove_finals(&out);
    run(&mut train(&out, Some(&state), "11", epochs, "--every 3")).success();
    let resumed = finals(&out);
    for device in 0..DEVICES {
        assert_eq!(
            resumed[device].len(),
            uninterrupted[device].len(),
            "device {device}: batches in the model"
        );
        let first_difference = resumed[device]
            .iter()
            .zip(&uninterrupted[device])
            .position(|(a, b)| a != b);
        assert_eq!(
            first_difference, None,
            "device {device}: the resumed run's batches differ from the uninterrupted run's"
        );
    }
    assert_every_id_times(&resumed, u64::from(epochs));
    let started_from_checkpoint = std::fs::read_dir(&out)
        .expect("list")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("start-"))
        .filter(|e| {
            let text = std::fs::read_to_string(e.path()).expect("read start");
            !parse_json(&text, "start")["resume"].is_null()
        })
        .count();
    assert!(
        started_from_checkpoint > 0,
        "no trainer was started from a checkpoint"
    );
    // The kills came where batches had been seen but not yet checkpointed:
    // those were dealt again, to the same device, in the same place.
    assert!(
        count_lines(&out, "seen-") > (ROWS as u64 / 100) * u64::from(epochs),
        "no batch was dealt twice: the kills proved nothing"
    );
}

#[test]
fn the_workers_of_a_master_each_shuffle_what_they_lease_every_id_once() {
    let mut job = Job::new(DATASET, 2);
    job.master_args
        .extend(["--split-size".to_string(), "64KiB".to_string()]);
    let mut master = job.start_master(fixture(DATASET));
    let global = ["--shuffle", "global", "--shuffle-window", "5000"];
    let mut workers: Vec<_> = (0..2)
        .map(|_| job.start_worker_with("--sleep 0.005", &global))
        .collect();
    for worker in &mut workers {
        assert!(wait_exit(worker, "worker").success(), "a worker failed");
    }
    clean_finish(&mut master);
    let ids = job.recorded_ids();
    let wrong: Vec<(i64, u32)> = (0..ROWS)
        .map(|id| (id, ids.get(&id).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != 2)
        .take(8)
        .collect();
    assert!(
        wrong.is_empty(),
        "ids not once per epoch (id, times): {wrong:?}"
    );
    assert_eq!(ids.len() as i64, ROWS, "ids from outside the dataset");
}
