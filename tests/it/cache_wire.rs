//! The cache (`--cache DIR`) measured from outside sluice and under kills:
//!
//! - the bytes on the wire, counted by a proxy in front of the S3 emulator
//!   (bench/count_proxy.py), not by sluice's own counter: three epochs carry
//!   the data about once with a cache as large as it, three times without;
//! - a train killed (SIGKILL) again and again while it fills the cache
//!   leaves no torn entry that is served later: the run after the kills
//!   trains every row once, and a further run reads every file from whole
//!   entries without fetching.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::proxy::Proxy;
use crate::common::{
    expected_dataset, fixture, recorded_ids, recorder, run, seed, sluice_command, Moments,
};
use crate::object_stores::cloud::{Cloud, Kind};
use serde_json::Value;

/// The Spark output trained on: one Parquet file of 20,000 rows in 73 row
/// groups (files small enough for a footer read to hold them whole would
/// come from the footers kept in memory, not the store, after planning).
const DATASET: &str = "parquet_row_groups";

/// A sluice command that reaches the store at `endpoint` with `s3`'s
/// credentials, and no other AWS setting of the environment.
pub(crate) fn through(endpoint: &str, s3: &Cloud, args: &[&str]) -> Command {
    let mut cmd = sluice_command(args);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("AWS_") {
            cmd.env_remove(key.as_ref());
        }
    }
    for (k, v) in s3.env() {
        cmd.env(k, v);
    }
    cmd.env("AWS_ENDPOINT_URL", endpoint);
    cmd
}

/// The fixture in a new bucket: its URL and its data files' bytes.
fn uploaded(s3: &Cloud, what: &str) -> (String, u64) {
    let bucket = s3.new_bucket(what);
    s3.upload(&bucket, &fixture(DATASET), "out");
    let url = s3.url(&bucket, "out");
    let ls = run(&mut through(
        &s3.service.endpoint,
        s3,
        &["ls", "--json", &url],
    ))
    .success();
    let bytes = ls.json()["bytes"].as_u64().expect("bytes in ls --json");
    (url, bytes)
}

fn rows() -> u64 {
    expected_dataset(DATASET)["rows"].as_u64().expect("rows")
}

/// Every id of the dataset `times` times, nothing else.
#[track_caller]
fn assert_each(ids: &HashMap<i64, u32>, times: u32, what: &str) {
    crate::cache::assert_each(ids, rows(), times, what);
}

/// `train URL --epochs E` through `endpoint`, with `cache` when given:
/// the ids trained and the summary.
fn train(
    endpoint: &str,
    s3: &Cloud,
    urls: &[&str],
    epochs: u32,
    cache: Option<&Path>,
) -> (HashMap<i64, u32>, Value) {
    let out = tempfile::tempdir().expect("tempdir");
    let summary = out.path().join("summary.json");
    let exec = recorder(out.path(), "");
    let epochs = epochs.to_string();
    let mut args = vec!["train"];
    args.extend(urls);
    args.extend([
        "--epochs",
        &epochs,
        "--exec",
        &exec,
        "--summary-json",
        summary.to_str().expect("utf-8 path"),
        "-q",
    ]);
    if let Some(cache) = cache {
        args.extend(["--cache", cache.to_str().expect("utf-8 path")]);
    }
    run(&mut through(endpoint, s3, &args)).success();
    let summary: Value =
        serde_json::from_slice(&std::fs::read(&summary).expect("summary")).expect("summary JSON");
    (recorded_ids(out.path(), "ids-"), summary)
}

#[test]
fn the_wire_carries_the_data_once_over_three_epochs_with_a_cache_and_three_times_without() {
    let s3 = Cloud::start(Kind::S3);
    let (url, bytes) = uploaded(&s3, "cache-wire");
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = Proxy::start(&s3.service.endpoint, dir.path());

    // What planning alone fetches (the listing, the footers): `ls` reads both.
    run(&mut through(&proxy.endpoint, &s3, &["ls", "--json", &url])).success();
    let planning = proxy.bytes();

    let before = proxy.bytes();
    let (ids, summary) = train(&proxy.endpoint, &s3, &[&url], 3, None);
    assert_each(&ids, 3, "no cache");
    let without = proxy.bytes() - before;
    assert!(summary["cache"].is_null(), "no cache, no cache figures");

    let before = proxy.bytes();
    let (ids, summary) = train(
        &proxy.endpoint,
        &s3,
        &[&url],
        3,
        Some(&dir.path().join("cache")),
    );
    assert_each(&ids, 3, "a cache as large as the data");
    let with = proxy.bytes() - before;
    let counted = summary["cache"]["fetched_bytes"]
        .as_u64()
        .expect("cache.fetched_bytes");

    let ratio = |b: u64| b.saturating_sub(planning) as f64 / bytes as f64;
    eprintln!(
        "data {bytes} B, planning {planning} B; 3 epochs on the wire: without a cache {without} B \
         ({:.2}x the data past planning), with one {with} B ({:.2}x); the cache counted {counted} B",
        ratio(without),
        ratio(with)
    );
    assert!(
        ratio(without) >= 2.5,
        "without a cache every epoch fetches the data: {:.2}x",
        ratio(without)
    );
    assert!(
        ratio(with) <= 1.1,
        "with a cache as large as the data, 3 epochs carry it about once: {:.2}x",
        ratio(with)
    );
    assert!(
        counted <= with,
        "the cache's own count ({counted} B) is no more than the wire carried ({with} B)"
    );
}

/// Temporary entries (being written) in a cache directory.
fn temporary_entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "tmp"))
            .count()
    })
}

#[test]
fn a_train_killed_while_it_fills_the_cache_never_serves_a_torn_entry() {
    let s3 = Cloud::start(Kind::S3);
    let (url, bytes) = uploaded(&s3, "cache-kill");
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let cache_arg = cache.to_str().expect("utf-8 path");
    let mut moments = Moments(seed());
    let mut torn = 0;
    for k in 0..10 {
        let out = tempfile::tempdir().expect("tempdir");
        let exec = recorder(out.path(), "");
        let mut child = through(
            &s3.service.endpoint,
            &s3,
            &["train", &url, "--exec", &exec, "--cache", cache_arg, "-q"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice train");
        let after = moments.next_ms(50, 1_500);
        std::thread::sleep(Duration::from_millis(after));
        let _ = child.kill();
        let _ = child.wait();
        let left = temporary_entries(&cache);
        eprintln!("kill {k} after {after} ms: {left} entries left half-written");
        torn += left;
    }
    eprintln!("{torn} half-written entries left by the kills in all");

    // The run after the kills: every row once, from whatever the cache holds.
    let (ids, summary) = train(&s3.service.endpoint, &s3, &[&url], 1, Some(&cache));
    assert_each(&ids, 1, "the run after 10 kills");
    assert_eq!(
        temporary_entries(&cache),
        0,
        "the entries the killed runs left half-written are removed"
    );
    eprintln!("after the kills: {}", summary["cache"]);

    // And a run on the cache it left: every file from a whole entry, nothing
    // from the store.
    let (ids, summary) = train(&s3.service.endpoint, &s3, &[&url], 1, Some(&cache));
    assert_each(&ids, 1, "a run on the cache");
    let fetched = summary["cache"]["fetched_bytes"].as_u64().expect("fetched");
    let hit = summary["cache"]["hit_bytes"].as_u64().expect("hits");
    assert_eq!(fetched, 0, "nothing fetched again: {}", summary["cache"]);
    assert!(
        hit > 0,
        "the files were read from the cache ({hit} bytes; the data is {bytes}): {}",
        summary["cache"]
    );
}

#[test]
fn several_sources_from_the_store_are_each_cached() {
    let s3 = Cloud::start(Kind::S3);
    let (first, bytes) = uploaded(&s3, "cache-mix-a");
    let (second, _) = uploaded(&s3, "cache-mix-b");
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = Proxy::start(&s3.service.endpoint, dir.path());
    run(&mut through(
        &proxy.endpoint,
        &s3,
        &["ls", "--json", &first],
    ))
    .success();
    run(&mut through(
        &proxy.endpoint,
        &s3,
        &["ls", "--json", &second],
    ))
    .success();
    let planning = proxy.bytes();
    let before = proxy.bytes();
    let (ids, summary) = train(
        &proxy.endpoint,
        &s3,
        &[&first, &second],
        2,
        Some(&dir.path().join("cache")),
    );
    // The same Spark output twice: each id once per source and epoch.
    assert_each(&ids, 4, "two sources, two epochs");
    let wire = proxy.bytes() - before;
    let fetched = summary["cache"]["fetched_bytes"].as_u64().expect("fetched");
    let hit = summary["cache"]["hit_bytes"].as_u64().expect("hits");
    let ratio = wire.saturating_sub(planning) as f64 / (2 * bytes) as f64;
    eprintln!("two sources of {bytes} B each, 2 epochs: {wire} B on the wire ({ratio:.2}x past planning), cache fetched {fetched} B, hits {hit} B");
    assert!(
        fetched >= 2 * bytes,
        "both sources' files go into the cache: {}",
        summary["cache"]
    );
    assert!(
        hit >= bytes,
        "the second epoch reads both sources from the cache (their footers stay in memory): {}",
        summary["cache"]
    );
    assert!(
        ratio <= 1.1,
        "two epochs of two cached sources carry them about once: {ratio:.2}x"
    );
}
