//! `--cache DIR`: what later epochs read from a remote store (the S3 emulator,
//! real Spark output uploaded key by key) comes from local disk. Bytes
//! fetched are the cache's own count (the summary's `cache.fetched_bytes`,
//! the master's `sluice_cache_fetched_bytes`), held against the data's bytes
//! as `sluice ls` counts them; every row arrives once per epoch.
//!
//! - a cache as large as the data: 3 epochs fetch it about once;
//! - a cache of half the data: 3 epochs fetch it about twice (LRU: 3 times);
//! - a file rewritten in the store between runs is read anew, never from
//!   the cache; a cache entry damaged on disk is fetched again;
//! - a local source writes nothing into the cache directory;
//! - two workers of a master, each caching at least half the data: epochs
//!   2 and 3 fetch next to nothing (affinity leasing), every row once per
//!   epoch, and `/metrics` and `sluice status` show the cache.

use crate::common;
use crate::object_stores::cloud;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::cluster::{metric, wait_exit, Job};
use crate::common::{expected_dataset, fixture, recorded_ids, recorder, run, sluice_command};
use cloud::{Cloud, Kind};
use serde_json::Value;

/// The Spark output trained on: 50 Parquet files in Hive partitions.
const DATASET: &str = "parquet_partitioned";

/// A sluice command pointed at the emulator and nothing else.
fn sluice_with(args: &[&str], env: &[(&str, String)]) -> Command {
    let mut cmd = sluice_command(args);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("AWS_") {
            cmd.env_remove(key.as_ref());
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// The fixture (or `dir`) uploaded to a new bucket: its URL and the data's bytes.
fn uploaded(s3: &Cloud, what: &str, dir: &Path) -> (String, u64) {
    let bucket = s3.new_bucket(what);
    s3.upload(&bucket, dir, "out");
    let url = s3.url(&bucket, "out");
    let ls = run(&mut sluice_with(&["ls", "--json", &url], &s3.env())).success();
    let bytes = ls.json()["bytes"].as_u64().expect("bytes in ls --json");
    (url, bytes)
}

/// What one `sluice train` run with a cache did.
struct Trained {
    ids: HashMap<i64, u32>,
    cache: Value,
}

/// `sluice train URL --epochs E --cache DIR --cache-size SIZE` with a
/// trainer recording the ids it gets.
fn train(s3: &Cloud, url: &str, epochs: u32, cache: &Path, size: u64) -> Trained {
    let out = tempfile::tempdir().expect("tempdir");
    let summary = out.path().join("summary.json");
    let exec = recorder(out.path(), "");
    let (epochs, size) = (epochs.to_string(), size.to_string());
    let args = [
        "train",
        url,
        "--epochs",
        &epochs,
        "--exec",
        &exec,
        "--cache",
        cache.to_str().expect("utf-8 path"),
        "--cache-size",
        &size,
        "--summary-json",
        summary.to_str().expect("utf-8 path"),
        "-q",
    ];
    run(&mut sluice_with(&args, &s3.env())).success();
    let summary: Value =
        serde_json::from_slice(&std::fs::read(&summary).expect("summary")).expect("summary JSON");
    Trained {
        ids: recorded_ids(out.path(), "ids-"),
        cache: summary["cache"].clone(),
    }
}

/// Every id of the dataset `times` times, nothing else.
#[track_caller]
pub(crate) fn assert_each(ids: &HashMap<i64, u32>, rows: u64, times: u32, what: &str) {
    let wrong: Vec<_> = (0..rows as i64)
        .filter(|i| ids.get(i).copied().unwrap_or(0) != times)
        .take(5)
        .map(|i| (i, ids.get(&i).copied().unwrap_or(0)))
        .collect();
    assert!(
        wrong.is_empty(),
        "{what}: ids not delivered {times}x: {wrong:?}"
    );
    assert_eq!(ids.len() as u64, rows, "{what}: ids outside the dataset");
}

fn fetched(cache: &Value) -> u64 {
    cache["fetched_bytes"]
        .as_u64()
        .expect("cache.fetched_bytes")
}

fn rows() -> u64 {
    expected_dataset(DATASET)["rows"].as_u64().expect("rows")
}

#[test]
fn three_epochs_with_a_whole_or_a_half_cache_fetch_the_data_once_or_twice() {
    let s3 = Cloud::start(Kind::S3);
    let (url, bytes) = uploaded(&s3, "cache-whole", &fixture(DATASET));
    let dir = tempfile::tempdir().expect("tempdir");

    let whole = train(&s3, &url, 3, &dir.path().join("whole"), 2 * bytes);
    assert_each(&whole.ids, rows(), 3, "whole cache");
    let ratio = fetched(&whole.cache) as f64 / bytes as f64;
    eprintln!("whole cache: 3 epochs fetched {ratio:.3}x the data ({bytes} bytes)");
    assert!(
        ratio <= 1.1,
        "a cache as large as the data fetched {ratio:.3}x"
    );
    assert!(ratio >= 0.99, "every file is fetched once: {ratio:.3}x");
    // Epochs 2 and 3 read the column chunks from the cache (the footers,
    // read when the job was planned, are kept in memory).
    let hits = whole.cache["hit_bytes"].as_u64().expect("hit_bytes");
    assert!(hits >= bytes / 2, "{hits} bytes read from the cache");
    assert!(whole.cache["bytes"].as_u64().expect("bytes") >= bytes);

    let half = train(&s3, &url, 3, &dir.path().join("half"), bytes / 2);
    assert_each(&half.ids, rows(), 3, "half cache");
    let ratio = fetched(&half.cache) as f64 / bytes as f64;
    eprintln!("half cache: 3 epochs fetched {ratio:.3}x the data");
    assert!(ratio <= 2.1, "a cache of half the data fetched {ratio:.3}x");
    let held = half.cache["bytes"].as_u64().expect("bytes");
    assert!(
        held <= bytes / 2,
        "the cache holds {held} of {} bytes",
        bytes / 2
    );

    // A second run finds the whole cache full: it fetches nothing.
    let again = train(&s3, &url, 1, &dir.path().join("whole"), 2 * bytes);
    assert_each(&again.ids, rows(), 1, "second run");
    assert_eq!(fetched(&again.cache), 0, "everything was cached");
}

#[test]
fn a_file_rewritten_in_the_store_is_read_anew_not_from_the_cache() {
    let s3 = Cloud::start(Kind::S3);
    let data = tempfile::tempdir().expect("tempdir");
    let local = data.path().join("out");
    common::copy_dir(&fixture(DATASET), &local);
    let (url, bytes) = uploaded(&s3, "cache-rewrite", &local);
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let first = train(&s3, &url, 1, &cache, 2 * bytes);
    assert_each(&first.ids, rows(), 1, "first run");

    // One part file is replaced by another's rows (the same schema), in the
    // store and in the local copy that says what a run must deliver now.
    let parts = parquet_parts(&local);
    let (from, to) = (&parts[0], &parts[parts.len() - 1]);
    std::fs::copy(from, to).expect("rewrite the local copy");
    let rel = to.strip_prefix(&local).expect("under the copy");
    let bucket = url
        .trim_start_matches("s3://")
        .split('/')
        .next()
        .expect("bucket");
    let store = s3.store(bucket);
    let key = object_store::path::Path::parse(format!("out/{}", rel.display())).expect("key");
    let bytes_now = std::fs::read(from).expect("read part");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            use object_store::ObjectStoreExt;
            store
                .put(&key, object_store::PutPayload::from(bytes_now))
                .await
                .expect("rewrite in the store");
        });

    let expected = {
        let out = tempfile::tempdir().expect("tempdir");
        let exec = recorder(out.path(), "");
        let local_dir = local.to_str().expect("utf-8");
        run(&mut sluice_command([
            "train", local_dir, "--exec", &exec, "-q",
        ]))
        .success();
        recorded_ids(out.path(), "ids-")
    };
    let second = train(&s3, &url, 1, &cache, 2 * bytes);
    assert_eq!(
        second.ids, expected,
        "the rewritten file's new rows, not the cached ones"
    );
    assert!(
        fetched(&second.cache) > 0,
        "the rewritten file was fetched: {}",
        second.cache
    );
}

#[test]
fn a_cache_entry_damaged_on_disk_is_fetched_again_and_the_rows_are_right() {
    let s3 = Cloud::start(Kind::S3);
    let (url, bytes) = uploaded(&s3, "cache-damage", &fixture(DATASET));
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let first = train(&s3, &url, 1, &cache, 2 * bytes);
    assert_each(&first.ids, rows(), 1, "first run");

    let entries = cache_entries(&cache);
    assert!(!entries.is_empty(), "the first run cached its files");
    // Flip bytes in every entry's data; cut the last one short.
    for path in &entries {
        let mut raw = std::fs::read(path).expect("read entry");
        for at in [10, raw.len() / 3] {
            raw[at] ^= 0x5a;
        }
        std::fs::write(path, &raw).expect("damage entry");
    }
    let last = entries.last().expect("an entry");
    let raw = std::fs::read(last).expect("read entry");
    std::fs::write(last, &raw[..raw.len() / 2]).expect("truncate entry");

    let second = train(&s3, &url, 1, &cache, 2 * bytes);
    assert_each(&second.ids, rows(), 1, "after damage");
    let ratio = fetched(&second.cache) as f64 / bytes as f64;
    assert!(
        ratio >= 0.99,
        "every damaged file fetched again: {ratio:.3}x"
    );

    let third = train(&s3, &url, 1, &cache, 2 * bytes);
    assert_each(&third.ids, rows(), 1, "repaired cache");
    assert_eq!(fetched(&third.cache), 0, "the entries were written again");
}

#[test]
fn a_local_source_is_never_cached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let out = tempfile::tempdir().expect("tempdir");
    let exec = recorder(out.path(), "");
    let data = fixture(DATASET);
    let args = [
        "train",
        data.to_str().expect("utf-8"),
        "--epochs",
        "2",
        "--exec",
        &exec,
        "--cache",
        cache.to_str().expect("utf-8"),
        "-q",
    ];
    run(&mut sluice_command(args)).success();
    assert_each(&recorded_ids(out.path(), "ids-"), rows(), 2, "local");
    assert!(!cache.exists(), "nothing written into the cache directory");
}

#[test]
fn two_workers_with_affinity_fetch_next_to_nothing_after_the_first_epoch() {
    let s3 = Cloud::start(Kind::S3);
    let (url, bytes) = uploaded(&s3, "cache-affinity", &fixture(DATASET));
    let mut job = Job::new(DATASET, 3);
    // Long enough to read /metrics and the status once the workers are done.
    job.linger = "15s".to_string();
    job.env = s3
        .env()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = job.start_master(&url);
    // Each caches three quarters of the data: what it reads in the first
    // epoch, even when it reads more than its half.
    let size = (bytes * 3 / 4).to_string();
    let mut workers: Vec<_> = ["a", "b"]
        .iter()
        .map(|name| {
            let cache = dir.path().join(name);
            let args = [
                "--cache",
                cache.to_str().expect("utf-8"),
                "--cache-size",
                &size,
                "--name",
                name,
            ];
            job.start_worker_with("", &args)
        })
        .collect();
    for (i, worker) in workers.iter_mut().enumerate() {
        let status = wait_exit(worker, &format!("worker {i}"));
        assert!(status.success(), "worker {i} failed: {status}");
    }
    let metrics = job.metrics();
    let status = job.status();
    let status_text = {
        let out = sluice_with(
            &["status", "--master", &job.url()],
            &[("SLUICE_TOKEN", common::cluster::TOKEN.to_string())],
        )
        .output()
        .expect("sluice status");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let master_exit = wait_exit(&mut master, "master");
    assert!(master_exit.success(), "master failed");

    assert_each(&job.recorded_ids(), rows(), 3, "two workers");
    for name in [
        "sluice_cache_hit_bytes",
        "sluice_cache_fetched_bytes",
        "sluice_cache_bytes",
    ] {
        assert!(metric(&metrics, name).is_some(), "{name} not in /metrics");
    }
    let fetched_total = metric(&metrics, "sluice_cache_fetched_bytes").expect("metric");
    let hits = metric(&metrics, "sluice_cache_hit_bytes").expect("metric");
    assert_eq!(
        status["cache"]["fetched_bytes"].as_f64(),
        Some(fetched_total),
        "status and /metrics agree"
    );
    assert!(status_text.contains("cache: "), "{status_text}");
    // The first epoch fetches the data once; the two after it, at most a
    // tenth of it between them.
    let ratio = fetched_total / bytes as f64;
    eprintln!(
        "two workers: 3 epochs fetched {ratio:.3}x the data, {:.3}x served from their caches",
        hits / bytes as f64
    );
    assert!(
        ratio <= 1.1,
        "epochs 2 and 3 fetched {:.3}x the data",
        ratio - 1.0
    );
    assert!(hits >= 0.9 * bytes as f64, "later epochs read the caches");
}

#[test]
fn a_worker_killed_in_the_second_epoch_leaves_its_cached_tasks_to_the_other() {
    let s3 = Cloud::start(Kind::S3);
    let (url, bytes) = uploaded(&s3, "cache-killed", &fixture(DATASET));
    let mut job = Job::new(DATASET, 3);
    job.env = s3
        .env()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = job.start_master(&url);
    let size = (bytes * 3 / 4).to_string();
    let mut workers: Vec<_> = ["a", "b"]
        .iter()
        .map(|name| {
            let cache = dir.path().join(name);
            let args = [
                "--cache",
                cache.to_str().expect("utf-8"),
                "--cache-size",
                &size,
                "--name",
                name,
            ];
            job.start_worker_with("", &args)
        })
        .collect();
    common::wait_until("the second epoch", common::cluster::DEADLINE, || {
        job.try_status()
            .and_then(|s| s["queue"]["epoch"].as_u64())
            .is_some_and(|e| e >= 1)
    });
    let mut killed = workers.pop().expect("worker b");
    killed.kill().expect("SIGKILL worker b");
    let _ = killed.wait();
    let status = wait_exit(&mut workers[0], "worker a");
    assert!(status.success(), "worker a failed: {status}");
    let master_exit = wait_exit(&mut master, "master");
    assert!(master_exit.success(), "master failed");
    // Rows worker b's trainers held unacknowledged may come twice; none is lost.
    common::cluster::undelivered(&job.recorded_ids(), rows(), 3);
}

/// The Parquet part files under `dir`, sorted.
fn parquet_parts(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("list").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("part-") && n.ends_with(".parquet"))
            {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The whole entries of a cache directory.
fn cache_entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list cache")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "entry"))
        .collect();
    out.sort();
    out
}

#[test]
fn a_python_dataset_takes_cache_and_cache_size() {
    let s3 = Cloud::start(Kind::S3);
    let (url, bytes) = uploaded(&s3, "cache-python", &fixture(DATASET));
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let script = r#"
import sys, collections
import sluice_trainer
url, cache, size = sys.argv[1], sys.argv[2], sys.argv[3]
seen = collections.Counter()
ds = sluice_trainer.Dataset(url, epochs=2, columns=["id"], cache=cache, cache_size=size)
for batch in ds:
    seen.update(batch.column(0).to_pylist())
print(len(seen), min(seen.values()), max(seen.values()))
"#;
    let size = (2 * bytes).to_string();
    let mut cmd = Command::new(common::python());
    cmd.args(["-c", script, &url, cache.to_str().expect("utf-8"), &size])
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("python/sluice_trainer"),
        )
        .env("SLUICE_BINARY", common::SLUICE);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("AWS_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(s3.env());
    let out = run(&mut cmd).success();
    assert_eq!(
        out.stdout.trim(),
        format!("{} 2 2", rows()),
        "each id twice"
    );
    let held: u64 = cache_entries(&cache)
        .iter()
        .map(|p| std::fs::metadata(p).expect("entry").len())
        .sum();
    assert!(
        held >= bytes,
        "the Dataset's files were cached: {held} bytes"
    );
}
