//! `sluice train --lockstep`: every step gives each device one batch, every
//! device gets the same number of steps per epoch, the epoch's last partial
//! step is split evenly (or dropped with `--drop-last`, its rows still
//! committed), each batch message carries `sluice.epoch`, `sluice.step` and,
//! on a device's last batch of an epoch, `sluice.epoch_end`, and exec trainers
//! get what `torch.distributed` needs. The PyTorch example then trains with
//! DistributedDataParallel (gloo) and every rank ends with the same model. A
//! device process that dies stops the group and the run, and `--state`
//! resumes it with every row once.
//!
//! Every run is bounded: `timeout` kills sluice, `--trainer-timeout` a hung
//! trainer, `--group-timeout` a torch collective.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::{copy_dir, expected_dataset, fixture, parse_json, python, run, Run, SLUICE};

/// Seconds a whole `sluice train` may take.
const LIMIT: &str = "300";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `sluice train DATA --quiet --exec EXEC OPTIONS`, killed after [`LIMIT`].
fn train(data: &Path, exec: &str, options: &[&str]) -> Run {
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=10", LIMIT, SLUICE, "train"])
        .arg(data)
        .args(["--quiet", "--trainer-timeout", "120s", "--exec", exec])
        .args(options)
        .env_remove("RUST_LOG");
    let done = run(&mut cmd);
    assert_ne!(done.status.code(), Some(124), "the run hung: {done}");
    done
}

/// The `--exec` command of tests/trainers/lockstep_log.py writing into `out`.
fn logger(out: &Path, extra: &str) -> String {
    format!(
        "{} {} --out {} {extra}",
        python(),
        repo("tests/trainers/lockstep_log.py").display(),
        out.display()
    )
}

/// The lines of the files in `dir` named `<prefix><device>-<pid>.<ext>`, by device.
fn by_device(dir: &Path, prefix: &str) -> BTreeMap<usize, Vec<String>> {
    let mut out: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("list the trainers' output") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let device: usize = rest
            .split('-')
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or_else(|| panic!("no device in {name}"));
        let text = std::fs::read_to_string(&path).expect("read a trainer's log");
        out.entry(device)
            .or_default()
            .extend(text.lines().map(str::to_string));
    }
    out
}

/// How often each (epoch, id) was acknowledged, from the `acked-*` logs.
fn acked(dir: &Path) -> HashMap<(String, i64), u32> {
    let mut counts = HashMap::new();
    for line in by_device(dir, "acked-").into_values().flatten() {
        let (epoch, id) = line.split_once(' ').expect("`<epoch> <id>`");
        let id = id.parse().expect("an id");
        *counts.entry((epoch.to_string(), id)).or_insert(0) += 1;
    }
    counts
}

/// Each device's batches, one JSON object each, in the order they came.
fn batches(dir: &Path) -> BTreeMap<usize, Vec<Value>> {
    by_device(dir, "steps-")
        .into_iter()
        .map(|(device, lines)| {
            let parsed = lines.iter().map(|l| parse_json(l, "a step line")).collect();
            (device, parsed)
        })
        .collect()
}

/// The metadata value `key` of a logged batch, as a number.
fn tag(batch: &Value, key: &str) -> Option<u64> {
    batch[key].as_str().map(|s| s.parse().expect("a number"))
}

/// Checks the steps of `devices` devices over `epochs` epochs of `rows` rows
/// each, batches of `size`; returns the rows each epoch gave the devices.
#[track_caller]
fn check_steps(out: &Path, devices: usize, epochs: u64, size: u64, rows: u64, drop_last: bool) {
    let logged = batches(out);
    assert_eq!(logged.len(), devices, "one log per device");
    let full_steps = rows / (size * devices as u64);
    let rest = rows - full_steps * size * devices as u64;
    for epoch in 0..epochs {
        let mut tails = Vec::new();
        let mut counts = Vec::new();
        for (device, batches) in &logged {
            let mine: Vec<&Value> = batches
                .iter()
                .filter(|b| tag(b, "epoch") == Some(epoch))
                .collect();
            counts.push(mine.len());
            for (k, batch) in mine.iter().enumerate() {
                assert_eq!(
                    tag(batch, "step"),
                    Some(k as u64),
                    "device {device}: {batch}"
                );
                let last = k + 1 == mine.len();
                let end = tag(batch, "epoch_end");
                assert_eq!(
                    end,
                    last.then_some(epoch),
                    "device {device} step {k}: {batch}"
                );
                if !last {
                    assert_eq!(
                        batch["rows"], size,
                        "device {device}: a full batch: {batch}"
                    );
                }
            }
            let tail = mine.last().expect("a batch per epoch")["rows"].as_u64();
            tails.push(tail.expect("rows"));
        }
        assert!(
            counts.iter().all(|&c| c == counts[0]),
            "epoch {epoch}: batches per device differ: {counts:?}"
        );
        let (lo, hi) = (tails.iter().min(), tails.iter().max());
        if drop_last || rest == 0 {
            assert_eq!(counts[0] as u64, full_steps, "epoch {epoch}: steps");
            assert!(tails.iter().all(|&t| t == size), "{tails:?}");
        } else {
            assert_eq!(counts[0] as u64, full_steps + 1, "epoch {epoch}: steps");
            assert!(
                hi.zip(lo).is_some_and(|(h, l)| h - l <= 1),
                "epoch {epoch}: last batches differ by more than a row: {tails:?}"
            );
            assert_eq!(tails.iter().sum::<u64>(), rest, "epoch {epoch}: {tails:?}");
        }
    }
}

/// What each device's process was told: one process per device, ranks in
/// device order, one rendezvous port.
#[track_caller]
fn check_env(out: &Path, devices: usize) {
    let envs = by_device(out, "env-");
    assert_eq!(envs.len(), devices, "{envs:?}");
    let mut ports = Vec::new();
    for (device, lines) in envs {
        assert_eq!(lines.len(), 1, "one process for device {device}");
        let env = parse_json(&lines[0], "env");
        assert_eq!(env["SLUICE_LOCKSTEP"], "1", "{env}");
        assert_eq!(env["RANK"], device.to_string(), "{env}");
        assert_eq!(env["LOCAL_RANK"], device.to_string(), "{env}");
        assert_eq!(env["WORLD_SIZE"], devices.to_string(), "{env}");
        assert_eq!(env["MASTER_ADDR"], "127.0.0.1", "{env}");
        let port: u16 = env["MASTER_PORT"]
            .as_str()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no MASTER_PORT: {env}"));
        ports.push(port);
    }
    ports.dedup();
    assert_eq!(ports.len(), 1, "one MASTER_PORT for the group: {ports:?}");
}

#[test]
fn every_device_gets_the_same_steps_and_the_last_one_is_split_evenly() {
    // 2000 rows in 40 files, 3 devices, batches of 64: 10 full steps of 192
    // rows, then 80 rows as 27 + 27 + 26, in each of 2 epochs.
    let dataset = "parquet_small_files";
    let rows = expected_dataset(dataset)["rows"].as_u64().expect("rows");
    let out = tempfile::tempdir().expect("tempdir");
    let options = ["--devices", "3", "--batch-size", "64", "--epochs", "2"];
    let done = train(
        &fixture(dataset),
        &logger(out.path(), ""),
        &[&options[..], &["--lockstep"]].concat(),
    );
    assert!(done.status.success(), "{done}");
    check_env(out.path(), 3);
    check_steps(out.path(), 3, 2, 64, rows, false);
    let counts = acked(out.path());
    for epoch in ["0", "1"] {
        for id in 0..rows as i64 {
            assert_eq!(
                counts.get(&(epoch.to_string(), id)),
                Some(&1),
                "id {id} in epoch {epoch}"
            );
        }
    }
    assert_eq!(counts.len() as u64, 2 * rows, "no other ids");
}

#[test]
fn drop_last_drops_the_partial_step_and_commits_its_rows() {
    let dataset = "parquet_small_files";
    let rows = expected_dataset(dataset)["rows"].as_u64().expect("rows");
    let work = tempfile::tempdir().expect("tempdir");
    let (out, state) = (work.path().join("out"), work.path().join("state"));
    std::fs::create_dir(&out).expect("mkdir");
    let summary = work.path().join("summary.json");
    let args = [
        "--devices",
        "3",
        "--batch-size",
        "64",
        "--epochs",
        "2",
        "--lockstep",
        "--drop-last",
        "--state",
        state.to_str().expect("utf8"),
        "--summary-json",
        summary.to_str().expect("utf8"),
    ];
    let done = train(&fixture(dataset), &logger(&out, ""), &args);
    assert!(done.status.success(), "{done}");
    check_steps(&out, 3, 2, 64, rows, true);
    let trained_per_epoch = rows / 192 * 192;
    let dropped = 2 * (rows - trained_per_epoch);
    let report = parse_json(
        &std::fs::read_to_string(&summary).expect("summary"),
        "summary",
    );
    assert_eq!(report["rows"], 2 * trained_per_epoch, "{report}");
    assert_eq!(report["dropped_rows"], dropped, "{report}");
    assert!(
        done.stderr
            .contains(&format!("{dropped} rows dropped (--drop-last)")),
        "the summary line names the dropped rows: {done}"
    );
    let counts = acked(&out);
    assert!(counts.values().all(|&c| c == 1), "an id twice in an epoch");
    assert_eq!(counts.len() as u64, 2 * trained_per_epoch);
    // The dropped rows were committed: every task is done, nothing is left
    // to resume.
    let again = train(&fixture(dataset), &logger(&out, ""), &args);
    assert!(
        again.status.success() && again.stderr.contains("already finished"),
        "{again}"
    );
}

#[test]
fn a_device_process_that_dies_stops_the_group_and_state_resumes_each_row_once() {
    let dataset = "parquet_small_files";
    let rows = expected_dataset(dataset)["rows"].as_u64().expect("rows");
    let work = tempfile::tempdir().expect("tempdir");
    let (out, state) = (work.path().join("out"), work.path().join("state"));
    std::fs::create_dir(&out).expect("mkdir");
    let args = [
        "--devices",
        "2",
        "--batch-size",
        "64",
        "--lockstep",
        "--state",
        state.to_str().expect("utf8"),
    ];
    let data = fixture(dataset);
    let died = train(&data, &logger(&out, "--die-after 4"), &args);
    assert!(!died.status.success(), "the run should stop: {died}");
    assert!(
        died.stderr.contains("--lockstep") && died.stderr.contains("device 1"),
        "the error names the device and lockstep: {died}"
    );
    assert!(out.join("died").exists(), "device 1 never died: {died}");
    let resumed = train(&data, &logger(&out, "--die-after 4"), &args);
    assert!(resumed.status.success(), "{resumed}");
    let counts = acked(&out);
    // An ack the surviving device wrote that sluice had not read when the
    // group was stopped is served again on resume: at most the in-flight
    // window, two batches per device (README, "Exactly once").
    let twice = counts.values().filter(|&&c| c > 1).count();
    assert!(
        counts.values().all(|&c| c <= 2) && twice <= 2 * 2 * 64,
        "acknowledged again beyond the in-flight bound: {twice} rows"
    );
    assert_eq!(counts.len() as u64, rows, "every row acknowledged");
}

/// Where `pip install` put the sluice_trainer package (once per test run).
fn package_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("lockstep-sluice_trainer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let source = root.join("source");
        copy_dir(&repo("python/sluice_trainer"), &source);
        let site = root.join("site");
        run(Command::new(python())
            .args(["-m", "pip", "install", "--quiet", "--no-deps"])
            .args(["--no-build-isolation", "--target"])
            .arg(&site)
            .arg(&source))
        .success();
        site
    })
}

#[test]
fn torch_example_trains_with_ddp_under_lockstep_to_one_model() {
    ddp_run("separable", &[], true);
}

/// The fast path of the example: strings hashed and nulls filled by sluice, batches
/// in shared memory, under DDP: the same guarantees.
#[test]
fn torch_example_under_lockstep_with_hashing_in_sluice_keeps_every_id_once() {
    let summaries = ddp_run(
        "parquet_partitioned",
        &["--hash-buckets", "97", "--fill-nulls", "0"],
        false,
    );
    for s in &summaries {
        assert_eq!(s["categorical"], 2, "country and city are embedded: {s}");
    }
}

/// Trains examples/torch/train_ctr.py under `--lockstep` on two ranks for two
/// epochs; checks one model, equal steps, every id once per epoch (and, if
/// `loss_falls`, the loss halving). Returns the ranks' summaries.
fn ddp_run(dataset: &str, extra: &[&str], loss_falls: bool) -> Vec<Value> {
    crate::common::require_torch();
    let rows = expected_dataset(dataset)["rows"].as_u64().expect("rows");
    let out = tempfile::tempdir().expect("tempdir");
    let exec = format!(
        "PYTHONPATH={} {} {} --summary-dir {} --id-column id --window 10 --lr 0.02 \
         --group-timeout 60",
        package_dir().display(),
        python(),
        repo("examples/torch/train_ctr.py").display(),
        out.path().display()
    );
    let options = ["--devices", "2", "--batch-size", "64", "--epochs", "2"];
    let done = train(
        &fixture(dataset),
        &exec,
        &[&options[..], &["--lockstep"], extra].concat(),
    );
    assert!(done.status.success(), "{done}");
    let summaries: Vec<Value> = by_device(out.path(), "summary-")
        .into_values()
        .flatten()
        .map(|l| parse_json(&l, "summary"))
        .collect();
    assert_eq!(summaries.len(), 2, "one summary per rank: {done}");
    let digests: Vec<&Value> = summaries.iter().map(|s| &s["digest"]).collect();
    assert!(
        digests[0].is_string() && digests[0] == digests[1],
        "the ranks' final models differ: {digests:?}"
    );
    let mut ranks: Vec<u64> = summaries
        .iter()
        .filter_map(|s| s["rank"].as_u64())
        .collect();
    ranks.sort_unstable();
    assert_eq!(ranks, [0, 1]);
    for s in &summaries {
        assert_eq!(s["world_size"], 2, "{s}");
        assert_eq!(s["steps"], summaries[0]["steps"], "equal steps: {s}");
        assert_eq!(s["epochs_ended"], serde_json::json!([0, 1]), "{s}");
        if loss_falls {
            let (first, last) = (s["first_loss"].as_f64(), s["last_loss"].as_f64());
            let (first, last) = first.zip(last).expect("losses");
            assert!(
                last < first / 2.0,
                "loss did not fall: {first:.4} -> {last:.4}"
            );
        }
    }
    let mut counts: HashMap<String, u32> = HashMap::new();
    for line in by_device(out.path(), "ids-").into_values().flatten() {
        *counts.entry(line).or_insert(0) += 1;
    }
    assert!(counts.values().all(|&c| c == 1), "an id twice in an epoch");
    for epoch in 0..2 {
        for id in 0..rows {
            assert!(
                counts.contains_key(&format!("{epoch} {id}")),
                "id {id} missing from epoch {epoch}"
            );
        }
    }
    assert_eq!(counts.len() as u64, 2 * rows);
    summaries
}
