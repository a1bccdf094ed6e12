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
    assert_each_id_once_per_epoch, global_batches, logged, places, train, trained_at_their_steps,
    Draw, DATASET, G, ROWS,
};

/// One Spark file of 120,000 rows in row groups of many pages, with the
/// page index: what a worker fetches is measured on it.
const PAGES: &str = "parquet_pages";
/// Rows of [`PAGES`].
const PAGES_ROWS: usize = 120_000;

/// The trainer that logs each batch's step, rank and ids.
fn step_log() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/step_log.py")
}

/// The master of `job` for a world of `world` ranks.
pub(crate) fn master(job: &mut Job, world: u32) -> Master {
    master_of(job, world, &[])
}

/// The master of `job` for a world of `world` ranks, with more arguments.
fn master_of(job: &mut Job, world: u32, extra: &[&str]) -> Master {
    world_args(job, world, extra);
    job.start_master(fixture(DATASET))
}

/// Sets the flags of `job`'s master for a world of `world` ranks, with more
/// arguments.
pub(crate) fn world_args(job: &mut Job, world: u32, extra: &[&str]) {
    job.master_args = ["--split-size", "64KiB", "--seed", "7"]
        .into_iter()
        .chain(extra.iter().copied())
        .map(String::from)
        .chain(["--shuffle-window".into(), "5000".into()])
        .chain(["--global-batch-size".into(), G.to_string()])
        .chain(["--world-size".into(), world.to_string()])
        .collect();
}

/// A worker of `devices` devices whose trainers log their steps into `out`.
pub(crate) fn worker(job: &Job, out: &Path, devices: usize, sleep: f64) -> Child {
    worker_command(job, out, devices, sleep)
        .arg("-q")
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice worker")
}

/// The command of a worker of `devices` devices in lockstep whose trainers
/// log their steps into `out`, sleeping `sleep` seconds a batch.
pub(crate) fn worker_command(
    job: &Job,
    out: &Path,
    devices: usize,
    sleep: f64,
) -> std::process::Command {
    let exec = format!(
        "{} {} --sleep {sleep} --out {}",
        python(),
        step_log().display(),
        out.display()
    );
    let mut cmd = job.worker_command(&exec);
    cmd.args(["--devices", &devices.to_string(), "--lockstep"]);
    cmd
}

/// The global batches of one uninterrupted `sluice train` on one device.
pub(crate) fn one_worker(epochs: u32) -> std::collections::BTreeMap<(u64, u64), Vec<i64>> {
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
fn two_sources_mixed_by_weight_give_two_workers_of_a_master_the_global_batches_of_one() {
    // The same data twice: a source of 20,000 rows weighted 3, one weighted 1.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut one = train(dir.path(), 1, &["--lockstep", "--weights", "3,1"], 0.0);
    one.arg(fixture(DATASET));
    let done = run(&mut one);
    assert!(done.status.success(), "{done}");
    let reference = global_batches(dir.path());
    let rows: usize = reference.values().map(Vec::len).sum();
    assert_eq!(rows, 2 * ROWS, "one worker: rows of both sources");

    let mut job = Job::new(DATASET, 1);
    let out = job.ids.clone();
    let second = fixture(DATASET).display().to_string();
    let mut master = master_of(&mut job, 2, &[&second, "--weights", "3,1"]);
    let mut workers: Vec<Child> = (0..2).map(|_| worker(&job, &out, 1, 0.0)).collect();
    for w in &mut workers {
        assert!(wait_exit(w, "worker").success(), "a worker failed");
    }
    clean_finish(&mut master);
    let batches = global_batches(&out);
    assert!(
        batches == reference,
        "two workers of a mixed job cut other global batches than one worker"
    );
}

#[test]
fn ten_kills_resumed_on_other_world_sizes_go_on_with_the_same_global_batches() {
    let epochs = 2;
    let whole = one_worker(epochs);
    assert_each_id_once_per_epoch(&whole, u64::from(epochs));
    let place = places(&whole);
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
        // Workers of very different speeds: the first pauses 0.03 s a
        // batch, the others 0.2 s.
        let mut workers: Vec<Child> = (0..world)
            .map(|i| worker(&job, &out, 1, if i == 0 { 0.03 } else { 0.2 }))
            .collect();
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
        // A few steps per run, so that the job outlasts ten of them.
        let batches = 1 + draw.below(3 * u64::from(world));
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
    let trained = trained_at_their_steps(&out, &place);
    for epoch in 0..u64::from(epochs) {
        assert_eq!(
            trained.get(&epoch).map_or(0, HashSet::len),
            ROWS,
            "epoch {epoch}: ids trained across the runs (worlds {worlds:?})"
        );
    }
}

/// What a worker of a job of `--world-size` fetches from S3 (through its
/// own counting proxy) against the share of the data its ranks train: the
/// bytes one `sluice train` fetches reading every row once, times the
/// worker's share of the rows; at most 1.1x. A worker reading the windows of
/// the other's lanes would fetch about 2x. Beyond its share, each fetches
/// the footer and page index, and the pages that straddle its lanes' ends:
/// a page shared by two of its own lanes once (the second read takes it
/// from memory), one shared with the other worker's lane by both. The
/// figures are printed.
#[test]
fn each_worker_fetches_little_more_than_its_ranks_share_of_the_data_from_s3() {
    use crate::common::proxy::Proxy;
    use crate::object_stores::cloud::{Cloud, Kind};
    let s3 = Cloud::start(Kind::S3);
    let bucket = s3.new_bucket("world-reads");
    assert!(
        s3.upload(&bucket, &fixture(PAGES), "out") > 0,
        "the fixture uploaded"
    );
    let url = s3.url(&bucket, "out");
    let dir = tempfile::tempdir().expect("tempdir");
    for sub in ["whole", "w0", "w1"] {
        std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
    }
    let s3_env = |cmd: &mut std::process::Command, endpoint: &str| {
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("AWS_") {
                cmd.env_remove(key);
            }
        }
        cmd.envs(Kind::S3.env(endpoint));
    };

    // Every row read once, in task order, by one `sluice train`.
    let whole = Proxy::start(&s3.service.endpoint, &dir.path().join("whole"));
    let out = dir.path().join("train");
    std::fs::create_dir_all(&out).expect("mkdir");
    let mut cmd = crate::common::sluice_command(["train", &url, "--split-size", "64KiB", "-q"]);
    cmd.args([
        "--exec",
        &format!(
            "{} {} --out {}",
            python(),
            step_log().display(),
            out.display()
        ),
    ]);
    s3_env(&mut cmd, &whole.endpoint);
    let done = run(&mut cmd);
    assert!(done.status.success(), "{done}");
    let all = whole.bytes();
    assert!(all > 0, "the proxy counted what sluice train fetched");

    // Two workers of one device each, each through its own proxy.
    let mut job = Job::new(PAGES, 1);
    // Nothing fails here: a lease lost to a busy machine would have a task read
    // twice, which is not what this test counts.
    job.lease_timeout = "30s".to_string();
    job.env = Kind::S3
        .env(&s3.service.endpoint)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let ids = job.ids.clone();
    job.master_args = [
        "--split-size",
        "64KiB",
        "--seed",
        "7",
        "--shuffle-window",
        "5000",
    ]
    .into_iter()
    .map(String::from)
    .chain([
        "--global-batch-size".into(),
        G.to_string(),
        "--world-size".into(),
        "2".into(),
    ])
    .collect();
    let mut master = job.start_master(&url);
    let proxies: Vec<Proxy> = (0..2)
        .map(|i| Proxy::start(&s3.service.endpoint, &dir.path().join(format!("w{i}"))))
        .collect();
    let mut workers: Vec<Child> = proxies
        .iter()
        .enumerate()
        .map(|(i, proxy)| {
            let out = ids.join(format!("w{i}"));
            std::fs::create_dir_all(&out).expect("mkdir");
            let exec = format!(
                "{} {} --out {}",
                python(),
                step_log().display(),
                out.display()
            );
            let mut cmd = job.worker_command(&exec);
            s3_env(&mut cmd, &proxy.endpoint);
            cmd.args(["-q"]).spawn().expect("start sluice worker")
        })
        .collect();
    for w in &mut workers {
        assert!(wait_exit(w, "worker").success(), "a worker failed");
    }
    clean_finish(&mut master);
    let mut figures = Vec::new();
    for (i, proxy) in proxies.iter().enumerate() {
        // Each (epoch, step, rank) once: a batch sent again to a restarted
        // trainer is not a row of its own.
        let rows: usize = logged(&ids.join(format!("w{i}")))
            .into_values()
            .flat_map(|steps| {
                steps.into_iter().flat_map(|(at, ranks)| {
                    ranks
                        .into_iter()
                        .map(move |(rank, ids)| ((at, rank), ids.len()))
                })
            })
            .collect::<HashMap<_, _>>()
            .into_values()
            .sum();
        let share = all as f64 * rows as f64 / PAGES_ROWS as f64;
        let amplification = proxy.bytes() as f64 / share;
        figures.push(format!(
            "worker {i}: {rows} rows, {} bytes fetched, share {share:.0}: {amplification:.3}x",
            proxy.bytes()
        ));
        assert_eq!(rows, PAGES_ROWS / 2, "worker {i}: rows of its rank");
    }
    eprintln!("sluice train fetched {all} bytes; {}", figures.join("; "));
    for (i, proxy) in proxies.iter().enumerate() {
        let share = all as f64 / 2.0;
        assert!(
            proxy.bytes() as f64 <= 1.1 * share,
            "worker {i} fetched more than 1.1x its ranks' share: {}",
            figures.join("; ")
        );
    }
}

#[test]
fn a_world_the_lanes_cannot_share_is_refused_in_one_line() {
    let data = fixture(DATASET);
    let data = data.to_string_lossy();
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let state = state.to_string_lossy();
    let master = |more: &[&str]| {
        let mut cmd = crate::common::sluice_command(["master", &data, "--state", &state]);
        cmd.args(["--listen", "127.0.0.1:0"])
            .args(more)
            .env("SLUICE_TOKEN", crate::common::cluster::TOKEN);
        run(&mut cmd)
    };
    // G = 1500 is cut into 20 lanes: 3 ranks divide G, not the lanes.
    let uneven = master(&["--global-batch-size", "1500", "--world-size", "3"]);
    crate::common::assert_one_line_error(&uneven, &["--world-size", "20 lanes"]);
    let alone = master(&["--world-size", "2"]);
    crate::common::assert_one_line_error(&alone, &["--world-size", "--global-batch-size"]);
    let filtered = master(&[
        "--global-batch-size",
        "1536",
        "--world-size",
        "2",
        "--filter",
        "id < 100",
    ]);
    crate::common::assert_one_line_error(&filtered, &["--world-size 1"]);
}

/// `torchrun --nproc-per-node N` of `tests/trainers/dataset_loop.py world`:
/// each rank a `Dataset(master=...)` of the job, logging its slices into
/// `out`; in a process group of its own, to be killed whole.
fn torchrun(job: &Job, out: &Path, nproc: usize, sleep: f64) -> Child {
    use std::os::unix::process::CommandExt;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::process::Command::new(python())
        .args(["-m", "torch.distributed.run", "--standalone"])
        .args(["--nproc-per-node", &nproc.to_string()])
        .arg(repo.join("tests/trainers/dataset_loop.py"))
        .args(["world", &job.url()])
        .arg(out)
        .args(["--sleep", &sleep.to_string()])
        .env("PYTHONPATH", repo.join("python/sluice_trainer"))
        .env("SLUICE_BINARY", crate::common::SLUICE)
        .env("SLUICE_TOKEN", crate::common::cluster::TOKEN)
        .env("OMP_NUM_THREADS", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start torchrun")
}

#[test]
fn a_torchrun_job_of_two_ranks_killed_mid_epoch_goes_on_with_one() {
    let whole = one_worker(1);
    let place = places(&whole);
    let mut job = Job::new(DATASET, 1);
    job.lease_timeout = "3s".into();
    let out = job.ids.clone();
    let mut first_master = master(&mut job, 2);
    let mut two = torchrun(&job, &out, 2, 0.3);
    wait_until(
        "steps of two ranks logged",
        Duration::from_secs(240),
        || count_lines(&out, "steps-") >= 8 || two.try_wait().ok().flatten().is_some(),
    );
    assert!(
        two.try_wait().ok().flatten().is_none(),
        "torchrun ended before it was killed"
    );
    // SIGKILL to torchrun and its ranks (their sluice children follow), and to the master.
    // SAFETY: kill(2) on the process group of a child we started.
    unsafe {
        libc::kill(-(two.id() as i32), libc::SIGKILL);
    }
    let _ = two.wait();
    let _ = first_master.kill();
    let _ = first_master.wait();
    let before = count_lines(&out, "steps-");

    let mut second_master = master(&mut job, 1);
    let mut one = torchrun(&job, &out, 1, 0.0);
    assert!(
        wait_exit(&mut one, "torchrun").success(),
        "the resumed torchrun failed"
    );
    clean_finish(&mut second_master);
    assert!(
        count_lines(&out, "steps-") > before,
        "the resumed run trained"
    );

    let trained = trained_at_their_steps(&out, &place);
    let trained = trained.get(&0).cloned().unwrap_or_default();
    let ranks: HashSet<(String, u64)> = logged(&out)
        .into_iter()
        .flat_map(|(pid, steps)| {
            steps
                .into_values()
                .flat_map(|r| r.into_keys())
                .map(move |rank| (pid.clone(), rank))
        })
        .collect();
    assert_eq!(trained.len(), ROWS, "ids trained across the two runs");
    assert!(ranks.len() >= 3, "two ranks, then one: {ranks:?}");
}
