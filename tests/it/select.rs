//! `--split`, `--sample` and `--limit`: rows chosen by a stable hash of a key
//! column (the same rows in every run, and after a table append), or the first
//! rows; the rows left out are never shipped to a trainer, and the choice is
//! part of the job's identity in `--state`.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::common::{
    expected_dataset, fixture, python, recorded_ids, recorder, sluice, table_dir, table_ids,
    table_version, tables_expected,
};

/// The ids a `sluice train` of `data` with `flags` hands its trainer, each once.
fn trained_ids(data: &Path, flags: &[&str]) -> HashSet<i64> {
    let out = tempfile::tempdir().expect("tempdir");
    let exec = recorder(out.path(), "");
    let mut args = vec!["train", data.to_str().expect("utf-8 path"), "--exec", &exec];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--devices", "2", "--batch-size", "97", "--quiet"]);
    sluice(&args).success();
    let counts: HashMap<i64, u32> = recorded_ids(out.path(), "ids-");
    let twice: Vec<_> = counts.iter().filter(|(_, c)| **c > 1).take(5).collect();
    assert!(twice.is_empty(), "{flags:?}: ids trained twice: {twice:?}");
    counts.into_keys().collect()
}

#[test]
fn splits_are_disjoint_cover_every_row_and_stay_put_across_runs_and_appends() {
    let table = &tables_expected()["tables"]["delta/appends"];
    let dir = table_dir(table);
    let split = ["--split", "train=0.8,valid=0.2", "--split-key", "id"];
    let take = |name: &str, version: &str| {
        let mut flags = split.to_vec();
        flags.extend_from_slice(&["--take", name, "--table-version", version]);
        trained_ids(&dir, &flags)
    };
    let first: HashSet<i64> = table_ids(table_version("delta/appends", 0))
        .into_keys()
        .collect();
    let train = take("train", "0");
    let valid = take("valid", "0");
    assert!(train.is_disjoint(&valid), "a row in both splits");
    let union: HashSet<i64> = train.union(&valid).copied().collect();
    assert_eq!(union, first, "the splits cover every row of version 0");
    let share = valid.len() as f64 / first.len() as f64;
    assert!(
        (0.1..0.3).contains(&share),
        "valid holds {share} of the rows"
    );
    assert_eq!(take("valid", "0"), valid, "the same split in a second run");
    // After two appends, the rows of version 0 are in the same splits.
    let last: HashSet<i64> = table_ids(table_version("delta/appends", -1))
        .into_keys()
        .collect();
    let later_valid = take("valid", "2");
    let later_train = take("train", "2");
    assert!(later_train.is_disjoint(&later_valid));
    let union: HashSet<i64> = later_train.union(&later_valid).copied().collect();
    assert_eq!(union, last);
    let old_valid: HashSet<i64> = later_valid.intersection(&first).copied().collect();
    assert_eq!(old_valid, valid, "version 0's rows kept their split");
}

#[test]
fn a_sample_keeps_its_fraction_of_the_rows_the_same_ones_each_run() {
    // 100k rows written by pyarrow: enough for a 1% tolerance.
    let data = tempfile::tempdir().expect("tempdir");
    let script = format!(
        "import pyarrow as pa, pyarrow.parquet as pq\n\
         for part in range(4):\n\
         \x20   ids = pa.array(range(part * 25000, (part + 1) * 25000), pa.int64())\n\
         \x20   pq.write_table(pa.table({{'id': ids, 'name': pa.array(['row-%d' % i for i in ids.to_pylist()])}}),\n\
         \x20                  '{dir}/part-0000%d.parquet' % part, row_group_size=5000)\n\
         open('{dir}/_SUCCESS', 'w').close()\n",
        dir = data.path().display()
    );
    let made = std::process::Command::new(python())
        .args(["-c", &script])
        .status()
        .expect("python runs");
    assert!(made.success(), "writing the 100k rows failed");
    let flags = ["--sample", "0.1", "--split-key", "id"];
    let sample = trained_ids(data.path(), &flags);
    let share = sample.len() as f64 / 100_000.0;
    assert!((0.09..=0.11).contains(&share), "the sample holds {share}");
    assert_eq!(
        trained_ids(data.path(), &flags),
        sample,
        "the same rows again"
    );
    let other_key = trained_ids(data.path(), &["--sample", "0.1", "--split-key", "name"]);
    assert_ne!(other_key, sample, "another key draws other rows");
}

#[test]
fn a_limit_reads_that_many_rows_the_first_ones() {
    let name = "parquet_row_groups";
    let data = fixture(name);
    let rows = expected_dataset(name)["rows"].as_u64().expect("rows");
    assert!(rows > 1000);
    let out = tempfile::tempdir().expect("tempdir");
    let summary = out.path().join("summary.json");
    let ids = trained_ids(
        &data,
        &[
            "--limit",
            "1000",
            "--summary-json",
            summary.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(ids.len(), 1000, "--limit 1000 trains 1000 rows");
    assert_eq!(
        trained_ids(&data, &["--limit", "1000"]),
        ids,
        "the same first rows each run"
    );
    let text = std::fs::read_to_string(&summary).expect("summary");
    let json = common::parse_json(&text, "summary");
    assert_eq!(json["rows"], 1000, "{json}");
}

#[test]
fn the_rows_chosen_are_part_of_the_state_s_identity() {
    let data = fixture("parquet_row_groups");
    let data = data.to_str().expect("utf-8");
    let state = tempfile::tempdir().expect("tempdir");
    let state = state.path().to_str().expect("utf-8");
    sluice(["train", data, "--state", state, "--limit", "500", "--quiet"]).success();
    let changed = sluice(["train", data, "--state", state, "--limit", "600", "--quiet"]).failure();
    common::assert_one_line_error(&changed, &["--limit", "500", "600"]);
}

#[test]
fn choices_that_cannot_be_made_are_usage_errors() {
    let data = fixture("parquet_row_groups");
    let data = data.to_str().expect("utf-8");
    for (flags, mentions) in [
        (
            vec!["--split", "a=0.5,b=0.4", "--split-key", "id", "--take", "a"],
            vec!["--split", "add up to 0.9"],
        ),
        (
            vec!["--split", "a=0.5,b=0.5", "--split-key", "id", "--take", "c"],
            vec!["--take", "c"],
        ),
        (
            vec![
                "--split",
                "a=0.5,b=0.5",
                "--split-key",
                "nope",
                "--take",
                "a",
            ],
            vec!["nope"],
        ),
        (
            vec!["--split", "a=0.5,b=0.5", "--split-key", "x1", "--take", "a"],
            vec!["x1"],
        ),
        (vec!["--sample", "0.1"], vec!["--split-key"]),
        (
            vec!["--sample", "1.5", "--split-key", "id"],
            vec!["--sample"],
        ),
    ] {
        let mut args = vec!["train", data, "--model", "none", "--quiet"];
        args.extend_from_slice(&flags);
        let run = sluice(&args);
        assert_eq!(run.status.code(), Some(64), "{flags:?}: {}", run.stderr);
        assert!(!run.stderr.contains("panicked"), "{run}");
        let first = run.stderr.lines().next().unwrap_or_default();
        for m in mentions {
            assert!(first.contains(m), "{flags:?}: the error names {m}: {run}");
        }
    }
}
