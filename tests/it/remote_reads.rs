//! Reading Parquet from a remote store (the S3 emulator, behind
//! bench/count_proxy.py, which logs every request it relays): each file's
//! footer is fetched once, when the job is planned, and kept for every
//! epoch's reads of the file; every row arrives once per epoch.

use std::collections::HashMap;

use crate::common::proxy::Proxy;
use crate::common::{expected_dataset, fixture, recorded_ids, recorder, run, sluice_command};
use crate::object_stores::cloud::{Cloud, Kind};

/// Spark output of 50 Parquet files in Hive partitions.
const DATASET: &str = "parquet_partitioned";

/// Ranged GETs per object in the proxy's log: for each path, how many
/// reached its last byte asked for by anyone (footer reads) and how many
/// did not (column chunks).
fn ranged_gets(text: &str) -> HashMap<String, (u32, u32)> {
    let mut ranges: HashMap<String, Vec<u64>> = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let [_, _, "GET", path, range, _] = fields[..] else {
            continue;
        };
        let Some(end) = range
            .strip_prefix("bytes=")
            .and_then(|r| r.split('-').nth(1))
            .and_then(|e| e.parse::<u64>().ok())
        else {
            continue;
        };
        ranges.entry(path.to_string()).or_default().push(end);
    }
    ranges
        .into_iter()
        .filter(|(path, _)| path.ends_with(".parquet"))
        .map(|(path, ends)| {
            let last = ends.iter().copied().max().unwrap_or(0);
            let footers = ends.iter().filter(|&&e| e == last).count() as u32;
            (path, (footers, ends.len() as u32 - footers))
        })
        .collect()
}

#[test]
fn three_epochs_from_s3_fetch_each_footer_once_and_every_row_three_times() {
    let s3 = Cloud::start(Kind::S3);
    let bucket = s3.new_bucket("remote-reads");
    let files = s3.upload(&bucket, &fixture(DATASET), "out");
    assert!(files > 0, "the fixture uploaded");
    let url = s3.url(&bucket, "out");
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = Proxy::start(&s3.service.endpoint, dir.path());
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).expect("out dir");
    let exec = recorder(&out, "");
    let mut cmd = sluice_command(["train", &url, "--epochs", "3", "--exec", &exec, "-q"]);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("AWS_") {
            cmd.env_remove(key.as_ref());
        }
    }
    for (key, value) in Kind::S3.env(&proxy.endpoint) {
        cmd.env(key, value);
    }
    run(&mut cmd).success();
    let log = proxy.log();
    drop(proxy);

    let rows = expected_dataset(DATASET)["rows"].as_u64().expect("rows");
    let ids = recorded_ids(&out, "ids-");
    assert_eq!(ids.len() as u64, rows, "every id, none outside the dataset");
    let wrong: Vec<_> = ids.iter().filter(|(_, &n)| n != 3).take(5).collect();
    assert!(
        wrong.is_empty(),
        "ids not delivered once per epoch: {wrong:?}"
    );

    let gets = ranged_gets(&log);
    assert!(!gets.is_empty(), "the proxy saw the Parquet files read");
    for (path, (footers, chunks)) in &gets {
        assert_eq!(
            *footers, 1,
            "{path}: its footer fetched {footers} times over 3 epochs"
        );
        assert!(
            *chunks >= 3,
            "{path}: its column chunks fetched in {chunks} requests over 3 epochs"
        );
    }
}
