//! The ranks of a master's world (`--world-size`) as its workers come and
//! go: a worker stopped by SIGTERM mid-epoch hands its leases back and a
//! new worker takes its ranks; workers with caches; workers of 1, 2 and 3
//! devices, killed and replaced by workers of other device counts, the
//! last of them taking ranks that do not follow each other. Each job cuts
//! the global batches of one `sluice train` on one device.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common::cluster::{clean_finish, signal, wait_exit, Job};
use crate::common::{count_lines, fixture, wait_until};
use crate::global_batches::{
    global_batches, logged, places, trained_at_their_steps, DATASET, G, ROWS,
};
use crate::global_world::{master, one_worker, worker, worker_command, world_args};

/// How many times each id of each epoch was trained, by every trainer
/// process that logged into `out`.
fn times_trained(out: &Path) -> HashMap<(u64, i64), usize> {
    let mut times = HashMap::new();
    for steps in logged(out).into_values() {
        for ((epoch, _), ranks) in steps {
            for id in ranks.into_values().flatten() {
                *times.entry((epoch, id)).or_default() += 1;
            }
        }
    }
    times
}

/// Asserts that every id of each of `epochs` epochs was trained once.
#[track_caller]
fn each_id_once(out: &Path, epochs: u64, what: &str) {
    let times = times_trained(out);
    for epoch in 0..epochs {
        let ids = (0..ROWS as i64).filter(|&id| times.get(&(epoch, id)) == Some(&1));
        assert_eq!(ids.count(), ROWS, "{what}: epoch {epoch}, ids trained once");
    }
    assert_eq!(times.len(), ROWS * epochs as usize, "{what}: ids trained");
}

/// The ranks each live worker of the job holds, as `sluice status --json`
/// lists them.
fn ranks_held(job: &Job) -> Vec<Vec<u64>> {
    let Some(status) = job.try_status() else {
        return Vec::new();
    };
    let workers = status["workers"].as_array().cloned().unwrap_or_default();
    workers
        .iter()
        .filter_map(|w| w["ranks"].as_array())
        .map(|ranks| ranks.iter().filter_map(|r| r.as_u64()).collect())
        .collect()
}

/// Waits until a live worker holds exactly `ranks`.
fn wait_for_ranks(job: &Job, ranks: &[u64]) {
    wait_until(
        &format!("a worker holding ranks {ranks:?}"),
        Duration::from_secs(60),
        || ranks_held(job).iter().any(|held| held == ranks),
    );
}

/// A worker like [`worker`] whose log (info and up) goes to `log`.
fn logging_worker(job: &Job, out: &Path, devices: usize, sleep: f64, log: &Path) -> Child {
    let file = std::fs::File::create(log).expect("create the worker's log");
    worker_command(job, out, devices, sleep)
        .stderr(Stdio::from(file))
        .spawn()
        .expect("start sluice worker")
}

/// A world job of one epoch whose workers are killed and replaced, with
/// the places of a one-device run's rows to check its steps against.
struct World {
    place: HashMap<(u64, i64), (u64, usize)>,
    job: Job,
    out: std::path::PathBuf,
    logs: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let place = places(&one_worker(1));
        let mut job = Job::new(DATASET, 1);
        job.lease_timeout = "3s".into();
        let out = job.ids.clone();
        let logs = tempfile::tempdir().expect("tempdir");
        World {
            place,
            job,
            out,
            logs,
        }
    }
}

#[test]
fn a_worker_stopped_by_sigterm_mid_epoch_hands_its_ranks_to_a_new_one() {
    let World {
        place,
        mut job,
        out,
        logs,
    } = World::new();
    let mut master = master(&mut job, 2);
    let mut stays = worker(&job, &out, 1, 0.3);
    wait_for_ranks(&job, &[0]);
    let stopped_log = logs.path().join("stopped.log");
    let mut stopped = logging_worker(&job, &out, 1, 0.3, &stopped_log);
    wait_for_ranks(&job, &[1]);
    wait_until("steps of both workers", Duration::from_secs(60), || {
        count_lines(&out, "steps-") >= 6
    });
    signal(&stopped, libc::SIGTERM);
    let status = wait_exit(&mut stopped, "the stopped worker");
    let log = std::fs::read_to_string(&stopped_log).unwrap_or_default();
    assert_eq!(
        status.code(),
        Some(130),
        "a SIGTERMed worker exits 130: {log}"
    );
    assert!(log.contains("handed back"), "its leases went back: {log}");
    let before = count_lines(&out, "steps-");
    assert!(
        (before as usize) < 2 * ROWS.div_ceil(G),
        "the job was over before the SIGTERM"
    );

    // Its rank is free once its heartbeats stop past the lease timeout.
    let mut new = worker(&job, &out, 1, 0.0);
    wait_for_ranks(&job, &[1]);
    for (w, what) in [
        (&mut stays, "the worker that stayed"),
        (&mut new, "the new worker"),
    ] {
        assert!(wait_exit(w, what).success(), "{what} failed");
    }
    clean_finish(&mut master);
    assert!(
        count_lines(&out, "steps-") > before,
        "the new worker trained"
    );
    trained_at_their_steps(&out, &place);
    each_id_once(&out, 1, "a worker stopped and replaced");
}

#[test]
fn a_world_of_two_workers_with_caches_cuts_the_same_global_batches() {
    use crate::object_stores::cloud::{Cloud, Kind};
    let epochs = 2;
    let whole = one_worker(epochs);
    let s3 = Cloud::start(Kind::S3);
    let bucket = s3.new_bucket("world-cache");
    let bytes = s3.upload(&bucket, &fixture(DATASET), "out");
    assert!(bytes > 0, "the fixture uploaded");
    let mut job = Job::new(DATASET, epochs);
    job.env = s3
        .env()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let out = job.ids.clone();
    let caches = tempfile::tempdir().expect("tempdir");
    world_args(&mut job, 2, &[]);
    let mut master = job.start_master(s3.url(&bucket, "out"));
    let mut workers: Vec<Child> = ["a", "b"]
        .iter()
        .map(|name| {
            let cache = caches.path().join(name);
            worker_command(&job, &out, 1, 0.0)
                .args(["--cache", &cache.to_string_lossy()])
                .args(["--cache-size", &bytes.max(1 << 20).to_string()])
                .args(["--name", name, "-q"])
                .spawn()
                .expect("start sluice worker")
        })
        .collect();
    for (i, w) in workers.iter_mut().enumerate() {
        assert!(wait_exit(w, "worker").success(), "worker {i} failed");
    }
    clean_finish(&mut master);
    assert!(
        global_batches(&out) == whole,
        "two workers with caches cut other global batches than one worker"
    );
    each_id_once(&out, u64::from(epochs), "two workers with caches");
    for name in ["a", "b"] {
        let cached = walk_bytes(&caches.path().join(name));
        assert!(cached > 0, "worker {name} cached nothing");
    }
}

/// Bytes of the files under `dir`.
fn walk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => walk_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

#[test]
fn workers_of_one_two_and_three_devices_replaced_by_others_take_ranks_apart() {
    let World {
        place,
        mut job,
        out,
        logs,
    } = World::new();
    let mut master = master(&mut job, 6);
    let sleep = 0.3;
    let mut one = worker(&job, &out, 1, sleep);
    wait_for_ranks(&job, &[0]);
    let mut two = worker(&job, &out, 2, sleep);
    wait_for_ranks(&job, &[1, 2]);
    let mut three = worker(&job, &out, 3, sleep);
    wait_for_ranks(&job, &[3, 4, 5]);
    wait_until("steps of every worker", Duration::from_secs(60), || {
        count_lines(&out, "steps-") >= 9
    });
    // The worker of 3 is killed; one of 2 takes ranks 3 and 4 once they
    // are free, and 5 stays free.
    let _ = three.kill();
    let _ = three.wait();
    let mut replaced = worker(&job, &out, 2, sleep);
    wait_for_ranks(&job, &[3, 4]);
    // The worker of 2 is killed: 1, 2 and 5 are free, and a worker of 3
    // takes them, though they do not follow each other.
    let _ = two.kill();
    let _ = two.wait();
    let log = logs.path().join("last.log");
    let mut last = logging_worker(&job, &out, 3, 0.0, &log);
    wait_for_ranks(&job, &[1, 2, 5]);
    for (w, what) in [
        (&mut one, "the worker of 1"),
        (
            &mut replaced,
            "the worker of 2 that replaced the worker of 3",
        ),
        (&mut last, "the worker of 3 that replaced the worker of 2"),
    ] {
        assert!(wait_exit(w, what).success(), "{what} failed");
    }
    clean_finish(&mut master);
    // Every batch holds ids of its step in the uninterrupted run, in its
    // order; rows the killed workers' trainers held unacknowledged may
    // come twice, none is lost.
    let trained = trained_at_their_steps(&out, &place);
    assert_eq!(
        trained.get(&0).map_or(0, HashSet::len),
        ROWS,
        "ids trained across the workers"
    );
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    let waits: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("waiting for ranks"))
        .collect();
    assert_eq!(waits.len(), 1, "one line while it waits: {log}");
    assert!(
        waits[0].contains("1 of 6 free") && waits[0].contains("3 devices"),
        "{}",
        waits[0]
    );
}
