//! `--filter` and `--where` on partition columns leave the directories they
//! reject unlisted: seen from outside sluice, through a proxy in front of
//! the S3 emulator (bench/count_proxy.py `--log`), no LIST request names a
//! rejected partition directory, and the rows trained are still exactly
//! Spark's `df.filter`.

use std::collections::HashMap;

use crate::cache_wire::through;
use crate::common::proxy::Proxy;
use crate::common::*;
use crate::object_stores::cloud::{Cloud, Kind};
use serde_json::Value;

/// The `prefix` of every LIST request `proxy` relayed so far, decoded.
fn listed_prefixes(proxy: &Proxy) -> Vec<String> {
    let text = proxy.log();
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let method = fields.nth(2)?;
            let path = fields.next()?;
            let query = path.split_once('?')?.1;
            if method != "GET" || !query.contains("list-type=") {
                return None;
            }
            let prefix = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("prefix="))
                .unwrap_or("");
            Some(decode(prefix))
        })
        .collect()
}

/// Undoes a query string's percent-encoding (twice encoded `%25` included:
/// a Hive-escaped name is escaped again in the URL).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The ids Spark's `df.filter(expr)` kept (tests/fixtures/make_filter.py).
fn spark_ids(expr: &str) -> Vec<i64> {
    let expected = fixture_json("filter/expected.json", "make_filter.py");
    let case = expected["filters"]
        .as_array()
        .expect("filters")
        .iter()
        .find(|f| f["expr"] == expr)
        .unwrap_or_else(|| panic!("make_filter.py records `{expr}`"));
    case["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_i64().expect("id"))
        .collect()
}

/// Trains `url` with `args` through a new proxy: the ids trained (sorted,
/// each once), the prefixes listed, and the summary.
fn train(s3: &Cloud, url: &str, args: &[&str]) -> (Vec<i64>, Vec<String>, Value) {
    let out = tempfile::tempdir().expect("tempdir");
    let proxy = Proxy::start(&s3.service.endpoint, out.path());
    let summary = out.path().join("summary.json");
    let exec = recorder(out.path(), "");
    let summary_arg = summary.display().to_string();
    let mut all = vec![
        "train",
        url,
        "--exec",
        &exec,
        "--batch-size",
        "64",
        "--summary-json",
        &summary_arg,
        "-q",
    ];
    all.extend_from_slice(args);
    run(&mut through(&proxy.endpoint, s3, &all)).success();
    let ids: HashMap<i64, u32> = recorded_ids(out.path(), "ids-");
    assert!(ids.values().all(|&n| n == 1), "a row trained twice");
    let mut ids: Vec<i64> = ids.into_keys().collect();
    ids.sort_unstable();
    let text = std::fs::read_to_string(&summary).expect("summary");
    (ids, listed_prefixes(&proxy), parse_json(&text, "summary"))
}

fn lists(prefixes: &[String], dir: &str) -> bool {
    prefixes.iter().any(|p| p.contains(dir))
}

#[test]
fn rejected_partition_directories_are_never_listed() {
    let s3 = Cloud::start(Kind::S3);
    let bucket = s3.new_bucket("filter-listing");
    s3.upload(&bucket, &fixtures_dir().join("filter/data"), "out");
    let url = s3.url(&bucket, "out");
    let other = ["ctry=DE/", "ctry=__HIVE_DEFAULT_PARTITION__/"];

    // Without a filter every partition directory is listed: what the
    // proxy logs is what sluice asks for.
    let (ids, listed, _) = train(&s3, &url, &[]);
    assert_eq!(ids.len(), 20_000);
    for dir in other {
        assert!(
            lists(&listed, dir),
            "{dir} is listed unfiltered: {listed:?}"
        );
    }

    let want = spark_ids("ctry = 'US'");
    let (ids, listed, summary) = train(&s3, &url, &["--filter", "ctry = 'US'"]);
    assert_eq!(ids, want, "--filter trains what df.filter keeps");
    assert!(lists(&listed, "ctry=US/"), "{listed:?}");
    for dir in other {
        assert!(!lists(&listed, dir), "--filter listed {dir}: {listed:?}");
    }
    let f = &summary["filter"];
    assert_eq!(f["partition_dirs_pruned"].as_u64(), Some(2), "{f}");

    let (ids, listed, _) = train(&s3, &url, &["--where", "ctry = 'US'"]);
    assert_eq!(ids, want, "--where keeps the partition --filter keeps");
    for dir in other {
        assert!(!lists(&listed, dir), "--where listed {dir}: {listed:?}");
    }

    // A null partition is kept by IS NULL, and only it is listed; a
    // condition on data columns beside it changes nothing of that.
    let want = spark_ids("ctry IS NULL OR (ctry = 'DE' AND flag)");
    let (ids, listed, _) = train(
        &s3,
        &url,
        &["--filter", "ctry IS NULL OR (ctry = 'DE' AND flag)"],
    );
    assert_eq!(ids, want);
    assert!(!lists(&listed, "ctry=US/"), "{listed:?}");
    assert!(
        lists(&listed, "ctry=__HIVE_DEFAULT_PARTITION__/"),
        "{listed:?}"
    );
}
