//! `sluice master --global-batch-size G --world-size W`: the workers' devices
//! take the world's ranks as they join, and together cut the global batches
//! one `sluice train` worker cuts, whatever the number of workers and
//! devices; a job killed (SIGKILL, master and workers) ten times and resumed
//! each time with another world size goes on with them.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common::cluster::{clean_finish, wait_exit, Job, Master};
use crate::common::{count_lines, fixture, python, run, wait_until};
use crate::global_batches::{
    assert_each_id_once_per_epoch, global_batches, logged, train, Draw, DATASET, G, ROWS,
};

/// The master of `job` for a world of `world` ranks.
fn master(job: &mut Job, world: u32) -> Master {
    job.master_args = ["--split-size", "64KiB", "--seed", "7"]
        .into_iter()
        .map(String::from)
        .chain(["--shuffle-window".into(), "5000".into()])
        .chain(["--global-batch-size".into(), G.to_string()])
        .chain(["--world-size".into(), world.to_string()])
        .collect();
    job.start_master(fixture(DATASET))
}

/// A worker of `devices` devices whose trainers log their steps into `out`.
fn worker(job: &Job, out: &Path, devices: usize, sleep: f64) -> Child {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/step_log.py");
    let exec = format!(
        "{} {} --sleep {sleep} --out {}",
        python(),
        script.display(),
        out.display()
    );
    job.worker_command(&exec)
        .args(["--devices", &devices.to_string(), "--lockstep", "-q"])
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice worker")
}

/// The global batches of one uninterrupted `sluice train` on one device.
fn one_worker(epochs: u32) -> std::collections::BTreeMap<(u64, u64), Vec<i64>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let epochs = epochs.to_string();
    let done = run(&mut train(
        dir.path(),
        1,
        &["--lockstep", "--epochs", &epochs],
        0.0,
    ));
    assert!(done.status.success(), "{done}");
    global_batches(dir.path())
}

#[test]
fn one_two_or_three_workers_of_a_master_cut_the_global_batches_of_one() {
    let reference = one_worker(1);
    assert_each_id_once_per_epoch(&reference, 1);
    for devices in [vec![2], vec![2, 1], vec![1, 1, 2]] {
        let world: usize = devices.iter().sum();
        let mut job = Job::new(DATASET, 1);
        let out = job.ids.clone();
        let mut master = master(&mut job, world as u32);
        let mut workers: Vec<Child> = devices
            .iter()
            .map(|&d| worker(&job, &out, d, 0.0))
            .collect();
        for w in &mut workers {
            assert!(
                wait_exit(w, "worker").success(),
                "a worker of {devices:?} failed"
            );
        }
        clean_finish(&mut master);
        let batches = global_batches(&out);
        assert!(
            batches == reference,
            "workers of {devices:?} devices cut other global batches than one worker"
        );
        // Each rank of the world got its slice of every step: G / W rows
        // of a full one.
        let mut ranks = HashSet::new();
        for steps in logged(&out).into_values() {
            for ((_, step), slices) in steps {
                for (rank, ids) in slices {
                    ranks.insert(rank);
                    if (step as usize) < ROWS / G {
                        assert_eq!(ids.len(), G / world, "{devices:?}: step {step} rank {rank}");
                    }
                }
            }
        }
        assert_eq!(ranks.len(), world, "{devices:?}: ranks that trained");
    }
}

#[test]
fn ten_kills_resumed_on_other_world_sizes_go_on_with_the_same_global_batches() {
    let epochs = 2;
    let whole = one_worker(epochs);
    assert_each_id_once_per_epoch(&whole, u64::from(epochs));
    let place: HashMap<(u64, i64), (u64, usize)> = whole
        .iter()
        .flat_map(|(&(epoch, step), ids)| {
            ids.iter()
                .enumerate()
                .map(move |(at, &id)| ((epoch, id), (step, at)))
        })
        .collect();
    let mut job = Job::new(DATASET, epochs);
    job.lease_timeout = "3s".into();
    let out = job.ids.clone();
    let mut draw = Draw(19);
    let (mut killed, mut worlds) = (0, Vec::new());
    for run in 0..11 {
        // The first run has W = 2; each resumed one a world drawn from 1..=3.
        let world = if run == 0 {
            2
        } else {
            1 + draw.below(3) as u32
        };
        worlds.push(world);
        let mut master = master(&mut job, world);
        let mut workers: Vec<Child> = (0..world).map(|_| worker(&job, &out, 1, 0.03)).collect();
        if run == 10 {
            for w in &mut workers {
                assert!(
                    wait_exit(w, "worker").success(),
                    "a worker failed (worlds {worlds:?})"
                );
            }
            clean_finish(&mut master);
            break;
        }
        let before = count_lines(&out, "steps-");
        let batches = 1 + draw.below(12);
        wait_until("batches logged", Duration::from_secs(120), || {
            count_lines(&out, "steps-") >= before + batches
                || master.try_wait().ok().flatten().is_some()
        });
        if master.try_wait().ok().flatten().is_none() {
            killed += 1;
        }
        let _ = master.kill();
        let _ = master.wait();
        for w in &mut workers {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
    assert!(
        killed >= 8,
        "only {killed} of 10 runs were killed before they ended"
    );
    // Every worker handed out slices of the uninterrupted steps (or what of
    // them was not committed before), each in the step's order.
    let mut trained: HashMap<u64, HashSet<i64>> = HashMap::new();
    for (pid, steps) in logged(&out) {
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
                    "process {pid} rank {rank}, epoch {epoch} step {step}: ids of other steps (worlds {worlds:?})"
                );
                assert!(
                    places.windows(2).all(|w| w[0].1 < w[1].1),
                    "process {pid} rank {rank}, epoch {epoch} step {step}: not in the step's order"
                );
                trained.entry(epoch).or_default().extend(ids);
            }
        }
    }
    for epoch in 0..u64::from(epochs) {
        assert_eq!(
            trained.get(&epoch).map_or(0, HashSet::len),
            ROWS,
            "epoch {epoch}: ids trained across the runs (worlds {worlds:?})"
        );
    }
}
