//! Several sources mixed by weight (`sluice train A B C --weights 3,1,1`): three
//! Spark outputs (Parquet of 20,000 rows in row groups, Parquet of 2,000 rows in
//! 40 small files, ORC of 6,000 rows), every row known by its source (the
//! `--source-column`) and id. Without `--epoch-rows` an epoch is every row of
//! every source once; with it each source gives its share of the epoch, no row
//! twice where it has enough; in every window of ten batches each source's
//! share is within a few points of its weight; a trainer killed mid-run loses
//! and repeats nothing; `--shuffle global` with a seed deals the same batches
//! run to run, and a run killed and resumed from `--state` goes on with them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{
    assert_one_line_error, count_lines, fixture, parse_json, python, run, sluice, wait_until,
    SLUICE,
};

/// The sources, their rows (ids `0..rows`) and weights.
const SOURCES: [(&str, u64, f64); 3] = [
    ("parquet_row_groups", 20_000, 3.0),
    ("parquet_small_files", 2_000, 1.0),
    ("orc", 6_000, 1.0),
];
const BATCH: usize = 400;

/// One batch as the trainer logged it.
struct Batch {
    epoch: Option<u32>,
    source: Option<String>,
    /// `SOURCE:ID` of each row.
    rows: Vec<String>,
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/trainers")
        .join(name)
}

/// `sluice train` of the three sources with `args`, each batch handed to
/// `trainer` (its command line, without the interpreter).
fn train(args: &[&str], trainer: &str) -> Command {
    let mut cmd = Command::new(SLUICE);
    cmd.arg("train");
    for (name, _, _) in SOURCES {
        cmd.arg(fixture(name));
    }
    cmd.args(["--weights", "3,1,1", "--columns", "id,x1,x2,label"])
        .args(["--source-column", "src", "--quiet"])
        .args(["--batch-size", &BATCH.to_string()])
        .args(args)
        .args(["--exec", &format!("{} {trainer}", python())])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Trains with tests/trainers/source_log.py logging into `out`; returns the
/// batches it acknowledged, in order, and the summary.
fn logged_run(out: &Path, args: &[&str], trainer_args: &str) -> (Vec<Batch>, Value) {
    let summary = out.join("summary.json");
    let log = out.join("log");
    let trainer = format!(
        "{} --out {} {trainer_args}",
        script("source_log.py").display(),
        log.display()
    );
    let mut cmd = train(args, &trainer);
    cmd.arg("--summary-json").arg(&summary);
    run(&mut cmd).success();
    let text = std::fs::read_to_string(&summary).expect("summary");
    (batches(&log), parse_json(&text, "the summary"))
}

/// The batches logged in `log`, the files of processes in the order they
/// started (a restarted trainer's after the one it replaced).
fn batches(log: &Path) -> Vec<Batch> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(log)
        .expect("list the log")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".jsonl"))
        .collect();
    files.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.created()).ok());
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read the log");
        for line in text.lines() {
            let value = parse_json(line, "a logged batch");
            out.push(Batch {
                epoch: value["epoch"].as_str().and_then(|e| e.parse().ok()),
                source: value["source"].as_str().map(str::to_string),
                rows: value["rows"]
                    .as_array()
                    .expect("rows")
                    .iter()
                    .map(|r| r.as_str().expect("a row").to_string())
                    .collect(),
            });
        }
    }
    out
}

fn source_of(row: &str) -> &str {
    row.split_once(':').map_or(row, |(s, _)| s)
}

/// How often each row came, over `batches`.
fn counts<'a>(batches: impl Iterator<Item = &'a Batch>) -> HashMap<&'a str, u32> {
    let mut counts = HashMap::new();
    for row in batches.flat_map(|b| &b.rows) {
        *counts.entry(row.as_str()).or_insert(0) += 1;
    }
    counts
}

/// Asserts that every row of every source came exactly once.
#[track_caller]
fn assert_every_row_once(counts: &HashMap<&str, u32>, what: &str) {
    let twice: Vec<_> = counts.iter().filter(|(_, &n)| n > 1).take(5).collect();
    assert!(twice.is_empty(), "{what}: rows served twice: {twice:?}");
    for (name, rows, _) in SOURCES {
        let missing: Vec<String> = (0..rows)
            .map(|id| format!("{name}:{id}"))
            .filter(|row| !counts.contains_key(row.as_str()))
            .take(5)
            .collect();
        assert!(missing.is_empty(), "{what}: rows never served: {missing:?}");
    }
    let all: u64 = SOURCES.iter().map(|(_, rows, _)| rows).sum();
    assert_eq!(counts.len() as u64, all, "{what}: rows from no source");
}

/// Asserts that in every window of ten batches whose rows all lie in the
/// first `rows` rows of its epoch, each source's share is within 5 points of
/// its weight; returns how many windows were checked.
#[track_caller]
fn assert_shares(batches: &[&Batch], rows: usize) -> usize {
    let total: f64 = SOURCES.iter().map(|(_, _, w)| w).sum();
    let within = rows / BATCH;
    let mut checked = 0;
    for window in batches[..within.min(batches.len())].windows(10) {
        let mut shares: BTreeMap<&str, usize> = BTreeMap::new();
        let all: usize = window.iter().map(|b| b.rows.len()).sum();
        for row in window.iter().flat_map(|b| &b.rows) {
            *shares.entry(source_of(row)).or_default() += 1;
        }
        for (name, _, weight) in SOURCES {
            let share = shares.get(name).copied().unwrap_or(0) as f64 / all as f64;
            let expected = weight / total;
            assert!(
                (share - expected).abs() <= 0.05,
                "{name}: {share:.3} of a window of ten batches, for a weight of {expected:.3}: {shares:?}"
            );
        }
        checked += 1;
    }
    checked
}

#[test]
fn every_row_of_every_source_once_an_epoch_interleaved_by_weight() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (batches, summary) = logged_run(dir.path(), &["--epochs", "2", "--lockstep"], "");
    for epoch in 0..2 {
        let of_epoch: Vec<&Batch> = batches.iter().filter(|b| b.epoch == Some(epoch)).collect();
        assert_every_row_once(&counts(of_epoch.iter().copied()), &format!("epoch {epoch}"));
        // The smallest source (2,000 rows at a fifth) lasts 10,000 rows.
        let windows = assert_shares(&of_epoch, 9_600);
        assert!(windows >= 10, "only {windows} windows checked");
    }
    for batch in &batches {
        let sources: Vec<&str> = batch.rows.iter().map(|r| source_of(r)).collect();
        let one = sources.iter().all(|s| *s == sources[0]);
        let expected = one.then(|| sources[0].to_string());
        assert_eq!(
            batch.source, expected,
            "sluice.source of a batch of {sources:?}"
        );
    }
    assert!(
        batches.iter().any(|b| b.source.is_some()),
        "no batch held one source only: sluice.source never checked"
    );
    let trained: Vec<(String, u64)> = summary["sources"]
        .as_array()
        .expect("the summary's sources")
        .iter()
        .map(|s| {
            let name = s["name"].as_str().expect("name").to_string();
            (name, s["rows"].as_u64().expect("rows"))
        })
        .collect();
    let expected: Vec<(String, u64)> = SOURCES
        .iter()
        .map(|(name, rows, _)| (name.to_string(), rows * 2))
        .collect();
    assert_eq!(trained, expected, "rows per source in the summary");
}

#[test]
fn epoch_rows_give_each_source_its_share_without_repeats_where_it_has_enough() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 15,000 rows at 3:1:1: 9,000 of 20,000, 3,000 of 2,000 (a whole pass
    // and half of another), 3,000 of 6,000.
    let args = ["--epochs", "2", "--lockstep", "--epoch-rows", "15000"];
    let (batches, summary) = logged_run(dir.path(), &args, "");
    let mut chosen = Vec::new();
    for epoch in 0..2 {
        let of_epoch: Vec<&Batch> = batches.iter().filter(|b| b.epoch == Some(epoch)).collect();
        let counts = counts(of_epoch.iter().copied());
        let mut per_source: BTreeMap<&str, u64> = BTreeMap::new();
        for (row, n) in &counts {
            *per_source.entry(source_of(row)).or_default() += u64::from(*n);
        }
        let expected: BTreeMap<&str, u64> = [
            ("parquet_row_groups", 9_000),
            ("parquet_small_files", 3_000),
            ("orc", 3_000),
        ]
        .into();
        assert_eq!(per_source, expected, "epoch {epoch}: rows per source");
        for (row, n) in &counts {
            let most = if source_of(row) == "parquet_small_files" {
                2
            } else {
                1
            };
            assert!(*n <= most, "epoch {epoch}: {row} came {n} times");
        }
        let small = counts
            .keys()
            .filter(|r| source_of(r) == "parquet_small_files")
            .count();
        assert_eq!(
            small, 2_000,
            "epoch {epoch}: a whole pass over the small source first"
        );
        let windows = assert_shares(&of_epoch, 14_000);
        assert!(windows >= 20, "only {windows} windows checked");
        let mut rows: Vec<&str> = counts
            .keys()
            .copied()
            .filter(|r| source_of(r) == "parquet_row_groups")
            .collect();
        rows.sort_unstable();
        chosen.push(rows.into_iter().map(str::to_string).collect::<Vec<_>>());
    }
    assert_ne!(chosen[0], chosen[1], "each epoch draws its rows afresh");
    let rows: Vec<u64> = summary["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| s["rows"].as_u64().expect("rows"))
        .collect();
    assert_eq!(
        rows,
        [18_000, 6_000, 6_000],
        "rows per source in the summary"
    );
}

#[test]
fn a_trainer_killed_mid_run_loses_and_repeats_no_row_of_any_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (batches, _) = logged_run(dir.path(), &[], "--die-after 20");
    assert!(
        dir.path().join("log/died").exists(),
        "the trainer never died: the test proved nothing"
    );
    assert_every_row_once(&counts(batches.iter()), "one epoch with a trainer killed");
}

/// A `--shuffle global` run of the mix with `--epoch-rows`, its trainer
/// (tests/trainers/batch_log.py) keeping checkpoints of its batches.
fn global(out: &Path, state: Option<&Path>, trainer_args: &str) -> Command {
    let trainer = format!(
        "{} --out {} --source src {trainer_args}",
        script("batch_log.py").display(),
        out.display()
    );
    let args = [
        "--epochs",
        "2",
        "--epoch-rows",
        "15000",
        "--shuffle",
        "global",
        "--shuffle-window",
        "3000",
        "--seed",
        "11",
    ];
    let mut cmd = train(&args, &trainer);
    if let Some(state) = state {
        cmd.arg("--state").arg(state);
    }
    cmd
}

/// The batches of the one device's final model, in order.
fn final_model(out: &Path) -> Vec<Vec<String>> {
    let entry = std::fs::read_dir(out)
        .expect("list")
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("final-"))
        .expect("a final model");
    let text = std::fs::read_to_string(entry.path()).expect("read final");
    let value = parse_json(&text, "the final model");
    value["batches"]
        .as_array()
        .expect("batches")
        .iter()
        .map(|b| {
            let rows = b.as_array().expect("rows");
            rows.iter()
                .map(|r| r.as_str().expect("a row").to_string())
                .collect()
        })
        .collect()
}

#[test]
fn the_same_seed_deals_the_same_mix_and_a_killed_run_resumed_goes_on_with_it() {
    let first = tempfile::tempdir().expect("tempdir");
    run(&mut global(first.path(), None, "--every 0")).success();
    let uninterrupted = final_model(first.path());
    let second = tempfile::tempdir().expect("tempdir");
    run(&mut global(second.path(), None, "--every 0")).success();
    assert!(
        final_model(second.path()) == uninterrupted,
        "two runs with the same seed dealt different batches"
    );
    let rows: usize = uninterrupted.iter().map(Vec::len).sum();
    assert_eq!(rows, 30_000, "rows over two epochs");

    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let out = dir.path().join("model");
    std::fs::create_dir(&out).expect("mkdir");
    // Killed within the first epoch, and within the second.
    for seen in [15u64, 50] {
        let mut child = global(&out, Some(&state), "--every 3 --sleep 0.02")
            .spawn()
            .expect("start sluice train");
        wait_until("batches seen", Duration::from_secs(120), || {
            count_lines(&out, "seen-") >= seen
        });
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }
    let finished = std::fs::read_dir(&out)
        .expect("list")
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("final-"));
    assert!(
        !finished,
        "a killed run reached its end: the kills proved nothing"
    );
    run(&mut global(&out, Some(&state), "--every 3")).success();
    let resumed = final_model(&out);
    let first_difference = resumed.iter().zip(&uninterrupted).position(|(a, b)| a != b);
    assert_eq!(
        first_difference, None,
        "the resumed run's batches differ from the uninterrupted run's"
    );
    assert_eq!(resumed.len(), uninterrupted.len(), "batches in the model");
}

#[test]
fn sources_whose_columns_disagree_are_refused_in_one_line() {
    // `id2` is a double in one Spark output, a string in the other.
    let run = sluice([
        "train".into(),
        fixture("widen_num").into_os_string(),
        fixture("widen_str").into_os_string(),
        "--columns".into(),
        std::ffi::OsString::from("id,id2"),
    ]);
    assert_one_line_error(
        &run,
        &["column id2", "widen_num", "widen_str", "Float64", "Utf8"],
    );
    assert_eq!(run.status.code(), Some(64), "{run}");
    // Without --columns every column is read: `s` is in one source only.
    let run = sluice([
        "train".into(),
        fixture("parquet_row_groups").into_os_string(),
        fixture("parquet_small_files").into_os_string(),
    ]);
    assert_one_line_error(
        &run,
        &[
            "column s",
            "parquet_row_groups",
            "parquet_small_files",
            "--columns",
        ],
    );
    assert_eq!(run.status.code(), Some(64), "{run}");
}

#[test]
fn options_a_mix_cannot_take_are_refused_in_one_line() {
    let two = |extra: &[&str]| {
        let mut args: Vec<std::ffi::OsString> = vec!["train".into()];
        args.push(fixture("parquet_small_files").into_os_string());
        args.push(fixture("orc").into_os_string());
        args.extend(extra.iter().map(|a| a.into()));
        sluice(args)
    };
    let run = two(&["--weights", "1,2,3"]);
    assert_one_line_error(&run, &["--weights", "3 weights for 2 sources"]);
    assert_eq!(run.status.code(), Some(64), "{run}");
    let run = two(&["--follow", "--epoch-rows", "100"]);
    assert_one_line_error(&run, &["--epoch-rows", "--follow"]);
    assert_eq!(run.status.code(), Some(64), "{run}");
}

#[test]
fn a_master_with_two_workers_gives_every_epoch_each_sources_share() {
    use crate::common::cluster::{clean_finish, wait_exit, Job};
    let mut job = Job::new("parquet_row_groups", 2);
    for (name, _, _) in &SOURCES[1..] {
        job.master_args.push(fixture(name).display().to_string());
    }
    job.master_args.extend(
        [
            "--weights",
            "3,1,1",
            "--epoch-rows",
            "15000",
            "--columns",
            "id,x1,x2,label",
            "--source-column",
            "src",
        ]
        .map(str::to_string),
    );
    let mut master = job.start_master(fixture(SOURCES[0].0));
    let log = job.ids.join("log");
    let trainer = format!(
        "{} {} --out {}",
        python(),
        script("source_log.py").display(),
        log.display()
    );
    let mut workers: Vec<_> = (0..2)
        .map(|_| {
            job.worker_command(&trainer)
                .args(["--batch-size", "200", "--lockstep", "-q"])
                .spawn()
                .expect("start worker")
        })
        .collect();
    for worker in &mut workers {
        let status = wait_exit(worker, "worker");
        assert!(status.success(), "a worker failed");
    }
    let status = job.status();
    let metrics = job.metrics();
    clean_finish(&mut master);
    for (name, _, _) in SOURCES {
        let line = format!("sluice_source_rows{{source=\"{name}\"}}");
        assert!(metrics.contains(&line), "/metrics has no {line}: {metrics}");
    }
    let batches = batches(&log);
    for epoch in 0..2 {
        let mut per_source: BTreeMap<String, u64> = BTreeMap::new();
        let mut seen: HashMap<&str, u32> = HashMap::new();
        for batch in batches.iter().filter(|b| b.epoch == Some(epoch)) {
            for row in &batch.rows {
                *per_source.entry(source_of(row).to_string()).or_default() += 1;
                *seen.entry(row.as_str()).or_default() += 1;
            }
        }
        let expected: BTreeMap<String, u64> = [
            ("parquet_row_groups".to_string(), 9_000),
            ("parquet_small_files".to_string(), 3_000),
            ("orc".to_string(), 3_000),
        ]
        .into();
        assert_eq!(per_source, expected, "epoch {epoch}: rows per source");
        let twice = seen
            .iter()
            .filter(|(row, n)| **n > 1 && source_of(row) != "parquet_small_files")
            .count();
        assert_eq!(twice, 0, "epoch {epoch}: rows of a large source twice");
    }
    let sources = status["sources"].as_array().expect("the status's sources");
    let names: Vec<&str> = sources
        .iter()
        .map(|s| s["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["parquet_row_groups", "parquet_small_files", "orc"]);
}

#[test]
fn a_python_dataset_mixes_sources_by_weight() {
    // Each batch's source metadata and rows, as "SOURCE:ID" lists; then
    // every row of every source once.
    let script = "import json, sys, sluice_trainer\n\
                  ds = sluice_trainer.Dataset(sources=sys.argv[1:4], weights=[3, 1, 1],\n\
                  \x20   epoch_rows=15000, source_column='src', columns=['id', 'x1', 'x2', 'label'],\n\
                  \x20   batch_size=500)\n\
                  for b in ds:\n\
                  \x20   src = b.column('src').to_pylist()\n\
                  \x20   ids = b.column('id').to_pylist()\n\
                  \x20   print(json.dumps([f'{s}:{i}' for s, i in zip(src, ids)]))\n";
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(python());
    cmd.args(["-c", script])
        .args(SOURCES.map(|(name, _, _)| fixture(name)))
        .env("PYTHONPATH", repo.join("python/sluice_trainer"))
        .env("SLUICE_BINARY", SLUICE)
        .env_remove("RUST_LOG");
    let out = crate::common::run(&mut cmd).success();
    let mut per_source: BTreeMap<String, u64> = BTreeMap::new();
    let mut seen: HashMap<String, u32> = HashMap::new();
    for line in out.stdout.lines() {
        let rows: Vec<String> = serde_json::from_str(line).expect("a batch's rows");
        for row in rows {
            *per_source.entry(source_of(&row).to_string()).or_default() += 1;
            *seen.entry(row).or_default() += 1;
        }
    }
    let expected: BTreeMap<String, u64> = [
        ("parquet_row_groups".to_string(), 9_000),
        ("parquet_small_files".to_string(), 3_000),
        ("orc".to_string(), 3_000),
    ]
    .into();
    assert_eq!(per_source, expected, "rows per source: {out}");
    let twice = seen
        .iter()
        .filter(|(row, n)| **n > 1 && source_of(row) != "parquet_small_files")
        .count();
    assert_eq!(twice, 0, "rows of a large source twice");
}
