//! `--filter`: the rows trained are exactly those Spark's `df.filter(EXPR)`
//! keeps (tests/fixtures/make_filter.py recorded them for each expression),
//! what cannot hold one is skipped unread, and a bad expression is one line
//! naming the place.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::common::{self, *};
use serde_json::Value;

/// Where make_filter.py wrote the dataset.
fn data_dir() -> PathBuf {
    fixtures_dir().join("filter/data")
}

/// make_filter.py's `expected.json`.
fn filter_expected() -> &'static Value {
    static EXPECTED: OnceLock<Value> = OnceLock::new();
    EXPECTED.get_or_init(|| fixture_json("filter/expected.json", "make_filter.py"))
}

/// Trains the filtered dataset with a trainer that records ids; the ids it
/// was handed (each with how often) and the summary.
fn train(filter: &str, extra: &[&str]) -> (HashMap<i64, u32>, Value) {
    train_dir(&data_dir(), filter, extra)
}

/// [`train`] of the dataset at `dir`.
fn train_dir(dir: &std::path::Path, filter: &str, extra: &[&str]) -> (HashMap<i64, u32>, Value) {
    let out = tempfile::tempdir().expect("tempdir");
    let summary = out.path().join("summary.json");
    let data = dir.display().to_string();
    let exec = recorder(out.path(), "");
    let summary_arg = summary.display().to_string();
    let mut args = vec![
        "train",
        data.as_str(),
        "--filter",
        filter,
        "--exec",
        &exec,
        "--devices",
        "2",
        "--batch-size",
        "64",
        "--allow-empty",
        "--summary-json",
        &summary_arg,
        "--quiet",
    ];
    args.extend_from_slice(extra);
    sluice(&args).success();
    let text = std::fs::read_to_string(&summary).expect("summary");
    (
        recorded_ids(out.path(), "ids-"),
        parse_json(&text, "summary"),
    )
}

#[test]
fn every_expression_trains_the_rows_spark_keeps() {
    let filters = filter_expected()["filters"].as_array().expect("filters");
    assert!(
        filters.len() >= 20,
        "make_filter.py lists 20 expressions or more"
    );
    let mut wrong = Vec::new();
    for case in filters {
        let expr = case["expr"].as_str().expect("expr");
        let want: Vec<i64> = case["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_i64().expect("id"))
            .collect();
        assert_eq!(want.len() as u64, case["count"].as_u64().expect("count"));
        let (ids, summary) = train(expr, &[]);
        let twice: Vec<_> = ids.iter().filter(|(_, &n)| n > 1).take(3).collect();
        assert!(twice.is_empty(), "`{expr}`: ids trained twice: {twice:?}");
        let mut got: Vec<i64> = ids.keys().copied().collect();
        got.sort_unstable();
        if got != want {
            let missing: Vec<_> = want
                .iter()
                .filter(|i| !ids.contains_key(i))
                .take(5)
                .collect();
            let extra: Vec<_> = got
                .iter()
                .filter(|i| want.binary_search(i).is_err())
                .take(5)
                .collect();
            wrong.push(format!(
                "`{expr}`: Spark keeps {} rows, sluice trained {} (missing {missing:?}, extra {extra:?})",
                want.len(),
                got.len()
            ));
        }
        assert_eq!(
            summary["rows"].as_u64(),
            Some(want.len() as u64),
            "`{expr}`: {summary}"
        );
        assert!(
            summary["filter"].is_object(),
            "`{expr}`: the summary tells what the filter did: {summary}"
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_selective_filter_on_the_sort_column_skips_row_groups_and_pages() {
    let total = filter_expected()["row_groups"]
        .as_u64()
        .expect("row_groups");
    let (ids, summary) = train("id >= 5000 AND id < 6000", &[]);
    assert_eq!(ids.len(), 1000);
    let f = &summary["filter"];
    let pruned = f["row_groups_pruned"].as_u64().expect("row_groups_pruned");
    let read = f["row_groups_read"].as_u64().expect("row_groups_read");
    assert!(pruned > 0, "no row group skipped: {f}");
    assert!(
        read * 4 <= total,
        "a 5% filter on the sort column read {read} of {total} row groups: {f}"
    );
    // Pages of the row groups read that hold no kept row are skipped on the
    // page index; what is left is decided row by row.
    let pages = f["page_rows_pruned"].as_u64().expect("page_rows_pruned");
    assert!(pages > 0, "no page skipped: {f}");
    let dropped = f["rows_filtered"].as_u64().expect("rows_filtered");
    assert!(dropped < 1_000, "{f}");
}

#[test]
fn a_partition_filter_reads_no_file_of_other_partitions() {
    let data = data_dir().display().to_string();
    let run = sluice([
        "ls",
        data.as_str(),
        "--json",
        "--filter",
        "ctry = 'DE' AND id < 1000",
    ])
    .success();
    let json = run.json();
    let parts = json["partitions"].as_array().expect("partitions");
    assert_eq!(parts.len(), 1, "only ctry=DE is listed: {json}");
    assert_eq!(parts[0]["values"]["ctry"], "DE");
    let want = filter_expected()["filters"]
        .as_array()
        .expect("filters")
        .iter()
        .find(|f| f["expr"] == "id < 2000")
        .map(|f| {
            f["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .filter(|i| {
                    i.as_i64()
                        .is_some_and(|i| i < 1000 && i % 10 >= 5 && i % 10 < 8)
                })
                .count() as u64
        })
        .expect("id < 2000 is listed");
    assert_eq!(
        json["rows"].as_u64(),
        Some(want),
        "ls counts the rows it would train: {json}"
    );
    let f = &json["filter"];
    assert_eq!(f["rows"].as_u64(), Some(want), "{f}");
    assert!(f["row_groups_pruned"].as_u64().expect("pruned") > 0, "{f}");
    let text = sluice(["ls", data.as_str(), "--filter", "ctry = 'DE' AND id < 1000"]).success();
    assert!(
        text.stdout.contains("filter: ctry = 'DE' AND id < 1000:"),
        "{text}"
    );
}

#[test]
fn bad_expressions_are_one_line_naming_the_place() {
    let data = data_dir().display().to_string();
    let cases: [(&str, &[&str]); 6] = [
        (
            "ctry2 = 'US'",
            &[
                "--filter: unknown column ctry2 at 1:1",
                "columns are: id, i, x",
            ],
        ),
        (
            "id > 3 AND\n dt = true",
            &[
                "--filter: cannot compare date with boolean",
                "at 2:2",
                "`id > 3 AND",
            ],
        ),
        ("id = = 3", &["--filter:", "at 1:6", "`id = = 3`"]),
        ("md5(id) = 'x'", &["--filter: the function md5", "at 1:1"]),
        (
            r"s LIKE 'a\\b'",
            &["--filter: the escape character", "at 1:8"],
        ),
        (
            "dt < DATE 'yesterday'",
            &["--filter:", "DATE 'yesterday' is no date", "at 1:6"],
        ),
    ];
    for (expr, mentions) in cases {
        for command in ["ls", "train"] {
            let run = sluice([command, data.as_str(), "--filter", expr]);
            assert_eq!(run.status.code(), Some(64), "`{expr}` ({command}): {run}");
            assert_one_line_error(&run, mentions);
        }
    }
}

#[test]
fn a_resume_with_another_filter_is_refused() {
    let state = tempfile::tempdir().expect("tempdir");
    let data = data_dir().display().to_string();
    let state_dir = state.path().join("state").display().to_string();
    let out = tempfile::tempdir().expect("tempdir");
    let exec = recorder(out.path(), "");
    let args = |filter: &'static str| {
        vec![
            "train".to_string(),
            data.clone(),
            "--filter".into(),
            filter.into(),
            "--exec".into(),
            exec.clone(),
            "--state".into(),
            state_dir.clone(),
            "--quiet".into(),
        ]
    };
    sluice(args("id < 100")).success();
    let again = sluice(args("id < 200"));
    assert_one_line_error(&again, &["--filter", "id < 100", "id < 200"]);
    assert_eq!(recorded_ids(out.path(), "ids-").len(), 100);
}

#[test]
fn batches_stay_full_between_filtered_rows() {
    let out = tempfile::tempdir().expect("tempdir");
    let data = data_dir().display().to_string();
    let exec = recorder(out.path(), "");
    // 9,273 rows kept, scattered over every row group: batches of 100 are
    // full but the last of the epoch.
    let summary = out.path().join("summary.json");
    let summary_arg = summary.display().to_string();
    sluice([
        "train",
        data.as_str(),
        "--filter",
        "NOT (i > 50)",
        "--exec",
        &exec,
        "--devices",
        "1",
        "--batch-size",
        "100",
        "--summary-json",
        &summary_arg,
        "--quiet",
    ])
    .success();
    let text = std::fs::read_to_string(&summary).expect("summary");
    let summary = parse_json(&text, "summary");
    assert_eq!(summary["rows"].as_u64(), Some(9273));
    assert_eq!(summary["batches"].as_u64(), Some(93), "{summary}");
}

#[test]
fn a_trainer_that_dies_gets_each_kept_row_once() {
    // Rows kept are counted from the split's first kept row: a task read
    // again after a death goes on from its committed offset among them.
    let out = tempfile::tempdir().expect("tempdir");
    let data = data_dir().display().to_string();
    let exec = recorder(out.path(), "--die-after 5");
    sluice([
        "train",
        data.as_str(),
        "--filter",
        "NOT (i > 50)",
        "--exec",
        &exec,
        "--devices",
        "2",
        "--batch-size",
        "50",
        "--quiet",
    ])
    .success();
    let want: Vec<i64> = filter_expected()["filters"]
        .as_array()
        .expect("filters")
        .iter()
        .find(|f| f["expr"] == "NOT (i > 50)")
        .expect("listed")["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_i64().expect("id"))
        .collect();
    let ids = recorded_ids(out.path(), "ids-");
    assert!(out.path().join("died-0").exists(), "the trainer died once");
    let twice: Vec<_> = ids.iter().filter(|(_, &n)| n > 1).take(3).collect();
    assert!(twice.is_empty(), "acknowledged twice: {twice:?}");
    let mut got: Vec<i64> = ids.keys().copied().collect();
    got.sort_unstable();
    assert_eq!(got, want);
}

#[test]
fn a_distributed_job_with_a_killed_worker_trains_every_kept_row() {
    use crate::common::cluster::{clean_finish, signal, wait_exit, Job};

    // The master plans with the filter; workers read with it from the plan,
    // and a task leased again after its worker is killed goes on from its
    // committed offset among the rows kept.
    // Spark's rows for `NOT (i > 50)`, less those under 4000: whole row
    // groups are left out when the master plans.
    let expr = "id >= 4000 AND NOT (i > 50)";
    let mut job = Job::new("filter", 1);
    job.master_args = vec!["--filter".into(), expr.into()];
    let mut master = job.start_master(data_dir());
    let dir = |n: usize| job.ids.join(format!("w{n}"));
    let mut victim = job.start_worker_into(&dir(0), "", &[]);
    let mut other = job.start_worker_into(&dir(1), "", &[]);
    wait_until(
        "the victim to train some batches",
        std::time::Duration::from_secs(90),
        || count_lines(&dir(0), "ids-") > 200,
    );
    signal(&victim, libc::SIGKILL);
    let _ = victim.wait();
    let metrics = job.metrics();
    let pruned = metrics
        .lines()
        .find_map(|l| l.strip_prefix("sluice_filter_row_groups_pruned_total "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(
        pruned.is_some_and(|n| n > 0),
        "the master counts what it pruned:\n{metrics}"
    );
    let mut late = job.start_worker_into(&dir(2), "", &[]);
    clean_finish(&mut master);
    wait_exit(&mut other, "worker");
    wait_exit(&mut late, "worker");
    let want: std::collections::BTreeSet<i64> = kept_ids("NOT (i > 50)")
        .into_iter()
        .filter(|&i| i >= 4000)
        .collect();
    let ids = job.recorded_ids();
    let missing: Vec<_> = want
        .iter()
        .filter(|i| !ids.contains_key(i))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "kept rows never trained: {missing:?}");
    let extra: Vec<_> = ids.keys().filter(|i| !want.contains(i)).take(5).collect();
    assert!(
        extra.is_empty(),
        "rows the filter drops were trained: {extra:?}"
    );
}

/// `--timezone`: with Spark's `spark.sql.session.timeZone` set to a region,
/// the hours, days, truncations and text of timestamps (and the strings and
/// dates compared with them) around the days its clocks change, and around
/// midnight, keep exactly the rows Spark keeps; `timestamp_ntz` is no zone's.
#[test]
fn timestamps_in_the_session_time_zone_as_spark() {
    let zones = filter_expected()["timezones"]
        .as_object()
        .expect("make_filter.py records answers per time zone");
    let dir = fixtures_dir().join("filter/tz/data");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (zone, cases) in zones {
        for case in cases.as_array().expect("cases") {
            let expr = case["expr"].as_str().expect("expr");
            let want: Vec<i64> = case["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|v| v.as_i64().expect("id"))
                .collect();
            let (ids, _) = train_dir(&dir, expr, &["--timezone", zone]);
            let mut got: Vec<i64> = ids.keys().copied().collect();
            got.sort_unstable();
            checked += 1;
            if got != want {
                wrong.push(format!(
                    "{zone}: `{expr}`: Spark keeps {want:?}, sluice {got:?}"
                ));
            }
        }
    }
    assert!(
        checked >= 40,
        "make_filter.py lists 20 predicates per zone or more"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // An unknown zone: one line naming it, a usage error.
    let out = sluice([
        "ls",
        &dir.display().to_string(),
        "--timezone",
        "Mars/Olympus",
    ])
    .failure();
    assert_eq!(out.status.code(), Some(64), "{}", out.stderr);
    let err = out.stderr;
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("`Mars/Olympus`"), "{err}");
}

/// The ids Spark keeps for `expr` (one of make_filter.py's expressions).
fn kept_ids(expr: &str) -> Vec<i64> {
    filter_expected()["filters"]
        .as_array()
        .expect("filters")
        .iter()
        .find(|f| f["expr"] == expr)
        .unwrap_or_else(|| panic!("make_filter.py lists no `{expr}`"))["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_i64().expect("id"))
        .collect()
}

#[test]
fn a_python_dataset_takes_a_filter() {
    let script = format!(
        "import sys\nfrom sluice_trainer import Dataset\nids = []\n\
         for batch in Dataset({:?}, batch_size=100, filter=\"ctry = 'US' AND id < 2000\"):\n    \
         ids.extend(batch.column('id').to_pylist())\nprint(len(ids), len(set(ids)), min(ids), max(ids))\n",
        data_dir().display().to_string()
    );
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = common::run(
        std::process::Command::new(python())
            .args(["-c", &script])
            .env("PYTHONPATH", repo.join("python/sluice_trainer"))
            .env("SLUICE_BINARY", SLUICE),
    );
    assert!(run.status.success(), "{run}");
    // ctry is US where id % 10 < 5: 1000 of the first 2000 ids.
    assert_eq!(run.stdout.trim(), "1000 1000 0 1994", "{run}");
}

#[test]
fn long_in_lists_and_or_chains_train_exactly_their_rows() {
    let total = filter_expected()["rows"].as_i64().expect("rows");
    // 10,000 values in IN and a chain of 6,000 ORs: flat lists, no stack
    // depth per term (3,000 crashed the process with a stack overflow).
    let evens: Vec<String> = (0..10_000).map(|i| (i * 2).to_string()).collect();
    let (ids, _) = train(&format!("id IN ({})", evens.join(",")), &[]);
    let mut got: Vec<i64> = ids.keys().copied().collect();
    got.sort_unstable();
    let want: Vec<i64> = (0..10_000).map(|i| i * 2).filter(|i| *i < total).collect();
    assert_eq!(got, want, "IN of 10,000 values");
    assert!(ids.values().all(|&n| n == 1), "an id trained twice");

    // (One argument holds at most 128 KiB: 6,000 terms fit.)
    let chain: Vec<String> = (0..6_000).map(|i| format!("id={}", i * 3)).collect();
    let (ids, _) = train(&chain.join(" OR "), &[]);
    let mut got: Vec<i64> = ids.keys().copied().collect();
    got.sort_unstable();
    let want: Vec<i64> = (0..6_000).map(|i| i * 3).filter(|i| *i < total).collect();
    assert_eq!(got, want, "OR chain of 6,000 terms");
}

#[test]
fn expressions_beyond_column_and_literal_keep_the_rows_spark_would() {
    // `i` is id % 100 (null where id % 11 = 0), `x` (id % 1000) / 1000.0
    // (null where id % 13 = 0): the rows each expression keeps are known.
    let total = filter_expected()["rows"].as_i64().expect("rows");
    type Keeps = fn(i64) -> bool;
    let cases: [(&str, Keeps); 4] = [
        ("i * 2 + 1 > 150 AND pmod(id, 7) = 3", |id| {
            id % 11 != 0 && (id % 100) * 2 + 1 > 150 && id % 7 == 3
        }),
        ("CASE WHEN i IS NULL THEN id < 50 ELSE i = 42 END", |id| {
            if id % 11 == 0 {
                id < 50
            } else {
                id % 100 == 42
            }
        }),
        ("coalesce(i, -1) < 0 AND NOT id <=> 0", |id| {
            id % 11 == 0 && id != 0
        }),
        // An integer division by zero would fail the query; AND leaves it
        // unevaluated where the left side is false, as Spark does.
        ("i <> 0 AND id DIV i = 101", |id| {
            let i = id % 100;
            id % 11 != 0 && i != 0 && id / i == 101
        }),
    ];
    for (expr, keeps) in cases {
        let (ids, _) = train(expr, &[]);
        let mut got: Vec<i64> = ids.keys().copied().collect();
        got.sort_unstable();
        let want: Vec<i64> = (0..total).filter(|id| keeps(*id)).collect();
        assert_eq!(got, want, "`{expr}`");
    }
}

#[test]
fn a_filter_that_fails_on_a_row_fails_its_task_naming_the_file() {
    // Spark's ANSI mode fails `id DIV (i - i)` on the first row where i is
    // not null; sluice fails the tasks, naming the filter and the file, and
    // the job exits 2 (failed tasks), never training rows as if it held.
    let data = data_dir().display().to_string();
    let run = sluice([
        "train",
        data.as_str(),
        "--model",
        "none",
        "--filter",
        "id DIV (i - i) > 0",
        "--quiet",
    ]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("id DIV (i - i) > 0") && run.stderr.contains("DIVIDE_BY_ZERO"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(".parquet"),
        "names the file: {}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}

#[test]
fn computed_columns_reach_the_trainer() {
    let out = tempfile::tempdir().expect("tempdir");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/row_dump.py");
    let exec = format!(
        "{} {} --out {}",
        python(),
        script.display(),
        out.path().display()
    );
    let data = data_dir().display().to_string();
    sluice([
        "train",
        data.as_str(),
        "--columns",
        "id, i * 2 + 1 AS j, upper(substring(s, 1, 2)) AS s2",
        "--filter",
        "id < 500",
        "--exec",
        &exec,
        "--devices",
        "1",
        "--quiet",
    ])
    .success();
    let mut rows = 0;
    for entry in std::fs::read_dir(out.path()).expect("list") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read");
        for line in text.lines() {
            let row: Value = serde_json::from_str(line).expect("row");
            let keys: Vec<&String> = row.as_object().expect("object").keys().collect();
            assert_eq!(keys.len(), 3, "{row}");
            let id = row["id"].as_i64().expect("id");
            let want = (id % 11 != 0).then(|| (id % 100) * 2 + 1);
            assert_eq!(row["j"].as_i64(), want, "{row}");
            if let Some(s2) = row["s2"].as_str() {
                assert!(s2.len() <= 2 && s2 == s2.to_uppercase(), "{row}");
            }
            rows += 1;
        }
    }
    assert_eq!(rows, 500);
}
