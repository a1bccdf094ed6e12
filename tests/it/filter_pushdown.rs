//! `--filter` pushdown past row-group statistics, on data Spark wrote
//! (tests/fixtures/make_filter_pushdown.py): Parquet bloom filters skip row
//! groups of unsorted data that statistics keep, and the rows trained are
//! still exactly Spark's `df.filter`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::common::*;
use serde_json::Value;

fn dir() -> PathBuf {
    fixtures_dir().join("filter_pushdown")
}

/// make_filter_pushdown.py's `expected.json`.
fn expected() -> &'static Value {
    static EXPECTED: OnceLock<Value> = OnceLock::new();
    EXPECTED
        .get_or_init(|| fixture_json("filter_pushdown/expected.json", "make_filter_pushdown.py"))
}

/// Trains `data` under `filter`: the ids trained (sorted, each once) and
/// the summary's `"filter"` counts.
fn train(data: &str, filter: &str) -> (Vec<i64>, Value) {
    let out = tempfile::tempdir().expect("tempdir");
    let summary = out.path().join("summary.json");
    let exec = recorder(out.path(), "");
    let summary_arg = summary.display().to_string();
    sluice([
        "train",
        data,
        "--filter",
        filter,
        "--exec",
        &exec,
        "--batch-size",
        "16",
        "--allow-empty",
        "--summary-json",
        &summary_arg,
        "--quiet",
    ])
    .success();
    let ids: HashMap<i64, u32> = recorded_ids(out.path(), "ids-");
    assert!(
        ids.values().all(|&n| n == 1),
        "{filter}: a row trained twice"
    );
    let mut ids: Vec<i64> = ids.into_keys().collect();
    ids.sort_unstable();
    let text = std::fs::read_to_string(&summary).expect("summary");
    let summary = parse_json(&text, "summary");
    (ids, summary["filter"].clone())
}

fn want(case: &Value) -> Vec<i64> {
    case["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_i64().expect("id"))
        .collect()
}

#[test]
fn bloom_filters_skip_row_groups_statistics_keep() {
    let bloom = &expected()["bloom"];
    let total = bloom["row_groups"].as_u64().expect("row_groups");
    assert!(
        total >= 20,
        "make_filter_pushdown.py writes small row groups"
    );
    let data = dir().join("bloom").display().to_string();
    for case in bloom["filters"].as_array().expect("filters") {
        let expr = case["expr"].as_str().expect("expr");
        let (ids, f) = train(&data, expr);
        assert_eq!(ids, want(case), "{expr}: the rows df.filter keeps");
        let stats = f["row_groups_pruned"].as_u64().expect("row_groups_pruned");
        let bloom = f["row_groups_pruned_bloom"]
            .as_u64()
            .expect("row_groups_pruned_bloom");
        let read = f["row_groups_read"].as_u64().expect("row_groups_read");
        assert_eq!(read + stats + bloom, total, "{expr}: {f}");
        if expr.starts_with("n = 4242") || expr.starts_with("key = ") || expr.starts_with("n IN") {
            // Unsorted: statistics span every value; the bloom filters
            // leave about the row groups holding the values.
            assert!(
                bloom * 2 >= total && read <= 4,
                "{expr}: bloom filters skipped {bloom} of {total} row groups: {f}"
            );
        }
    }
}

#[test]
fn without_an_equality_no_bloom_filter_is_asked() {
    let data = dir().join("bloom").display().to_string();
    let (ids, f) = train(&data, "n < 3");
    assert_eq!(ids.len(), 3);
    assert_eq!(f["row_groups_pruned_bloom"].as_u64(), Some(0), "{f}");
}

#[test]
fn orc_stripes_are_skipped_on_their_statistics() {
    let orc = &expected()["orc"];
    let data = dir().join("orc").display().to_string();
    for case in orc["filters"].as_array().expect("filters") {
        let expr = case["expr"].as_str().expect("expr");
        let (ids, f) = train(&data, expr);
        assert_eq!(ids, want(case), "{expr}: the rows df.filter keeps");
        let pruned = f["stripes_pruned"].as_u64().expect("stripes_pruned");
        let read = f["stripes_read"].as_u64().expect("stripes_read");
        if expr.starts_with("id ") {
            // Sorted by id: the stripes outside the range are never read.
            assert!(
                pruned > 0 && read * 4 <= pruned + read,
                "{expr}: {read} stripes read, {pruned} skipped: {f}"
            );
        } else {
            assert_eq!(pruned, 0, "{expr}: every stripe holds an 'x': {f}");
        }
    }
}
