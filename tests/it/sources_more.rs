//! Several sources, continued: a job file's `[[source]]` tables (each with
//! its own weight, `where` and `filter`) run by `sluice run` as cron would,
//! each source's new partitions trained once and its record kept apart;
//! `--epoch-rows` over filtered sources (the rows each keeps counted when
//! planned); one-line errors for `[[source]]` tables that are not sources;
//! and `--follow` of several sources. Real Spark output throughout.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{
    assert_one_line_error, copy_dir, fixture, parse_json, python, run, sluice, spark_java_options,
    SLUICE,
};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Real Spark (jobs/spark/etl.py) writes `rows` rows a day as ROOT/dt=DAY,
/// ids from `first_id` on, continuing across the days.
fn spark_etl(root: &Path, days: &[&str], rows: u64, first_id: u64) {
    let submit = Path::new(&python())
        .parent()
        .expect("python has a directory")
        .join("spark-submit");
    let mut cmd = Command::new(submit);
    cmd.env("PYSPARK_PYTHON", python())
        .env("PYSPARK_DRIVER_PYTHON", python())
        .args(["--master", "local[2]"])
        .arg("--driver-java-options")
        .arg(spark_java_options())
        .arg(repo().join("jobs/spark/etl.py"))
        .arg("--out")
        .arg(root)
        .args(["--rows", &rows.to_string()])
        .args(["--first-id", &first_id.to_string()]);
    for day in days {
        cmd.args(["--day", day]);
    }
    run(&mut cmd).success();
}

/// The columns etl.py writes for row `id`: (f1, f2, f3, label).
fn etl_row(id: u64) -> (f64, f64, f64, bool) {
    let f1 = (id % 7) as f64 / 7.0;
    let f2 = (id % 11) as f64 / 11.0;
    let f3 = (id % 13) as f64 / 13.0;
    (f1, f2, f3, f1 + f2 > 1.0)
}

/// One batch as tests/trainers/source_log.py logged it: its `sluice.source`,
/// `sluice.epoch` and the `SOURCE:ID` of each row.
struct Logged {
    source: Option<String>,
    epoch: Option<String>,
    rows: Vec<String>,
}

/// Every batch logged into `log`.
fn logged(log: &Path) -> Vec<Logged> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(log) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.to_string_lossy().ends_with(".jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read the log");
        for line in text.lines() {
            let value = parse_json(line, "a logged batch");
            let rows = value["rows"]
                .as_array()
                .expect("rows")
                .iter()
                .map(|r| r.as_str().expect("a row").to_string())
                .collect();
            out.push(Logged {
                source: value["source"].as_str().map(str::to_string),
                epoch: value["epoch"].as_str().map(str::to_string),
                rows,
            });
        }
    }
    out
}

/// How often each `SOURCE:ID` came over `batches`; also checks that a
/// batch's `sluice.source`, where it has one, names the source of every row.
fn row_counts<'a>(batches: impl IntoIterator<Item = &'a Logged>) -> HashMap<String, u32> {
    let mut counts = HashMap::new();
    for Logged { source, rows, .. } in batches {
        for row in rows {
            if let Some(source) = source {
                assert!(
                    row.starts_with(&format!("{source}:")),
                    "row {row} in a batch tagged sluice.source={source}"
                );
            }
            *counts.entry(row.clone()).or_insert(0) += 1;
        }
    }
    counts
}

/// Asserts that `counts` holds exactly the rows of `expected`, each once.
#[track_caller]
fn assert_rows_once(counts: &HashMap<String, u32>, expected: &[String], what: &str) {
    let twice: Vec<_> = counts.iter().filter(|(_, &n)| n > 1).take(5).collect();
    assert!(twice.is_empty(), "{what}: rows trained twice: {twice:?}");
    let missing: Vec<_> = expected
        .iter()
        .filter(|r| !counts.contains_key(*r))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: rows never trained: {missing:?}"
    );
    let extra: Vec<_> = counts
        .keys()
        .filter(|r| !expected.contains(r))
        .take(5)
        .collect();
    assert!(extra.is_empty(), "{what}: rows not expected: {extra:?}");
}

fn source_log() -> PathBuf {
    repo().join("tests/trainers/source_log.py")
}

/// A job file of two `[[source]]` tables over `clicks` and `views`.
fn mixed_job(dir: &Path, clicks: &Path, views: &Path, log: &Path) -> PathBuf {
    let job = dir.join("mixed.toml");
    let text = format!(
        r#"state = "state"
exec = "{python} {script} --out {log}"
batch-size = 64
source-column = "src"
filter = "f3 < 0.9"
quiet = true

[[source]]
url = "{clicks}/dt=*"
weight = 3
filter = "label = 1"

[[source]]
url = "{views}/dt=*"
weight = 1
where = "dt >= '2026-11-29'"
filter = "f1 < 0.5"
"#,
        python = python(),
        script = source_log().display(),
        log = log.display(),
        clicks = clicks.display(),
        views = views.display(),
    );
    std::fs::write(&job, text).expect("write the job file");
    job
}

fn run_job(job: &Path) -> Value {
    let out = sluice(["run", job.to_str().expect("utf-8 path"), "--json"]).success();
    parse_json(&out.stdout, "the run's report")
}

/// The rows of days `days` (each `rows` rows, ids from `first` on) that the
/// job's filters keep of `source`.
fn kept(source: &str, first: u64, rows: u64, keep: impl Fn(u64) -> bool) -> Vec<String> {
    (first..first + rows)
        .filter(|&id| keep(id))
        .map(|id| format!("{source}:{id}"))
        .collect()
}

#[test]
fn cron_runs_of_a_job_of_several_sources_train_each_new_partition_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let spark = tmp.path().join("spark");
    // Three days of each, written once by Spark and copied in as they "land".
    spark_etl(
        &spark.join("clicks"),
        &["2026-11-28", "2026-11-29", "2026-11-30"],
        600,
        0,
    );
    spark_etl(
        &spark.join("views"),
        &["2026-11-28", "2026-11-29"],
        400,
        100_000,
    );
    let clicks = tmp.path().join("data/clicks");
    let views = tmp.path().join("data/views");
    let land = |table: &str, to: &Path, day: &str| {
        copy_dir(
            &spark.join(table).join(format!("dt={day}")),
            &to.join(format!("dt={day}")),
        );
    };
    land("clicks", &clicks, "2026-11-28");
    land("views", &views, "2026-11-28");
    land("views", &views, "2026-11-29");
    let log = tmp.path().join("log");
    let job = mixed_job(tmp.path(), &clicks, &views, &log);

    let all = |id: u64| etl_row(id).2 < 0.9;
    let click = |id: u64| all(id) && etl_row(id).3;
    let view = |id: u64| all(id) && etl_row(id).0 < 0.5;

    // First run: clicks' first day; views' second day only (its `where`).
    let first = run_job(&job);
    assert_eq!(first["recorded"], true, "{first}");
    let mut expected = kept("clicks", 0, 600, click);
    expected.extend(kept("views", 100_400, 400, view));
    let batches = logged(&log);
    assert_rows_once(&row_counts(&batches), &expected, "first run");
    assert!(
        batches.iter().any(|b| b.source.as_deref() == Some("views")),
        "no batch tagged sluice.source=views"
    );
    let trained = parse_json(
        &std::fs::read_to_string(tmp.path().join("state/trained.json")).expect("trained.json"),
        "trained.json",
    );
    let per_source = trained["sources"].as_object().expect("sources kept apart");
    assert_eq!(per_source.len(), 2, "{trained}");
    for (url, partitions) in per_source {
        let names: Vec<&String> = partitions.as_object().expect("partitions").keys().collect();
        if url.contains("clicks") {
            assert_eq!(names, ["dt=2026-11-28"], "{trained}");
        } else {
            assert_eq!(names, ["dt=2026-11-28", "dt=2026-11-29"], "{trained}");
        }
    }

    // Second run: a new day of clicks only; views sits it out.
    land("clicks", &clicks, "2026-11-29");
    let second = run_job(&job);
    assert_eq!(second["new"].as_array().map(Vec::len), Some(1), "{second}");
    expected.extend(kept("clicks", 600, 600, click));
    assert_rows_once(&row_counts(&logged(&log)), &expected, "second run");

    // Third run: nothing new; fourth: a new day of clicks again.
    let third = run_job(&job);
    assert_eq!(third["new"].as_array().map(Vec::len), Some(0), "{third}");
    assert_eq!(third["rows"], 0);
    land("clicks", &clicks, "2026-11-30");
    run_job(&job);
    expected.extend(kept("clicks", 1_200, 600, click));
    let counts = row_counts(&logged(&log));
    assert_rows_once(&counts, &expected, "every run");
    let views_rows = counts.keys().filter(|r| r.starts_with("views:")).count();
    assert_eq!(views_rows, kept("views", 100_400, 400, view).len());
}

#[test]
fn epoch_rows_take_their_share_of_the_rows_a_filter_keeps() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = tmp.path().join("log");
    let out = Command::new(SLUICE)
        .arg("train")
        .arg(fixture("parquet_row_groups"))
        .arg(fixture("orc"))
        .args([
            "--weights",
            "3,1",
            "--epoch-rows",
            "4000",
            "--epochs",
            "2",
            "--lockstep",
        ])
        .args(["--filter", "id < 5000", "--columns", "id,x1,x2,label"])
        .args(["--source-column", "src", "--batch-size", "200", "--quiet"])
        .arg("--exec")
        .arg(format!(
            "{} {} --out {}",
            python(),
            source_log().display(),
            log.display()
        ))
        .output()
        .expect("run sluice train");
    assert!(
        out.status.success(),
        "sluice train failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let batches = logged(&log);
    for epoch in ["0", "1"] {
        let counts = row_counts(batches.iter().filter(|b| b.epoch.as_deref() == Some(epoch)));
        let twice: Vec<_> = counts.iter().filter(|(_, &n)| n > 1).take(5).collect();
        assert!(twice.is_empty(), "epoch {epoch}: rows twice: {twice:?}");
        let mut per_source: HashMap<&str, u64> = HashMap::new();
        for row in counts.keys() {
            let (source, id) = row.split_once(':').expect("SOURCE:ID");
            let id: u64 = id.parse().expect("an id");
            assert!(id < 5000, "row {row} is not kept by the filter");
            *per_source.entry(source).or_default() += 1;
        }
        // 3,000 of the first's 5,000 kept rows, 1,000 of the second's.
        assert_eq!(
            per_source.get("parquet_row_groups"),
            Some(&3_000),
            "epoch {epoch}"
        );
        assert_eq!(per_source.get("orc"), Some(&1_000), "epoch {epoch}");
    }
    let epochs = batches.iter().filter(|b| b.epoch.is_some()).count();
    assert_eq!(epochs, batches.len(), "a batch without sluice.epoch");
}

#[test]
fn source_tables_that_are_no_sources_are_refused_in_one_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = fixture("parquet_small_files");
    let data = data.display();
    let cases: [(&str, String, &[&str]); 6] = [
        (
            "no url",
            "[[source]]\nurl = \"DATA\"\n[[source]]\nweight = 2\n".to_string(),
            &["[[source]] 2", "has no `url`"],
        ),
        (
            "weight 0",
            "[[source]]\nurl = \"DATA\"\nweight = 0\n".to_string(),
            &["[[source]] 1 (parquet_small_files)", "weight 0"],
        ),
        (
            "weight a string",
            "[[source]]\nurl = \"DATA\"\nweight = \"x\"\n".to_string(),
            &["[[source]] 1", "weight"],
        ),
        (
            "bad filter",
            "[[source]]\nurl = \"DATA\"\n[[source]]\nurl = \"/tmp/views\"\nfilter = \"id >\"\n"
                .to_string(),
            &["[[source]] 2 (views)", "filter", "id >"],
        ),
        (
            "unknown key",
            "[[source]]\nurl = \"DATA\"\nwieght = 1\n".to_string(),
            &["[[source]] 1", "wieght"],
        ),
        (
            "epoch-rows alone",
            "source = \"DATA\"\nepoch-rows = 10\n".to_string(),
            &["epoch-rows", "[[source]]"],
        ),
    ];
    for (what, tables, mentions) in cases {
        let job = tmp.path().join("bad.toml");
        // Top-level keys come before the tables.
        let text = format!(
            "state = \"state\"\nexec = \"true\"\n{}",
            tables.replace("DATA", &data.to_string())
        );
        std::fs::write(&job, text).expect("write");
        let refused = sluice(["run", job.to_str().expect("utf-8"), "--dry-run"]);
        assert_eq!(refused.status.code(), Some(64), "{what}: {refused}");
        assert_one_line_error(&refused, mentions);
    }
    // A filter on a column one source lacks names that source.
    let job = tmp.path().join("unknown.toml");
    std::fs::write(
        &job,
        format!(
            "state = \"state\"\nexec = \"true\"\n[[source]]\nurl = \"{data}\"\n[[source]]\nurl = \"{}\"\nfilter = \"nope = 1\"\n",
            fixture("orc").display()
        ),
    )
    .expect("write");
    let refused = sluice(["run", job.to_str().expect("utf-8"), "--dry-run"]);
    assert_one_line_error(&refused, &["source orc", "nope"]);
}

/// The countries of the `parquet_partitioned` fixture (Spark's
/// `partitionBy("country", "city")`), as their directories are named.
fn countries() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixture("parquet_partitioned"))
        .expect("list the fixture")
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("country="))
        .collect();
    names.sort();
    names
}

/// `SOURCE:ID` of the fixture's rows under `country`.
fn rows_of(source: &str, country: &str) -> Vec<String> {
    crate::follow::ids_of(country)
        .into_iter()
        .map(|id| format!("{source}:{id}"))
        .collect()
}

/// Lands one country of the fixture in `root`, its files first and its
/// `_SUCCESS` after, as a writer commits a partition.
fn land_country(root: &Path, country: &str) {
    copy_dir(
        &fixture("parquet_partitioned").join(country),
        &root.join(country),
    );
    std::fs::write(root.join(country).join("_SUCCESS"), b"").expect("marker");
}

/// `sluice train clicks views --follow` into `state`, logging into `log`.
fn follow_both(clicks: &Path, views: &Path, state: &Path, log: &Path, idle: &str) -> Command {
    let mut cmd = Command::new(SLUICE);
    cmd.arg("train")
        .arg(clicks)
        .arg(views)
        .args(["--weights", "2,1", "--follow", "--poll", "200ms"])
        .args(["--idle-exit", idle, "--state"])
        .arg(state)
        .args(["--source-column", "src", "--batch-size", "10", "-q"])
        .arg("--exec")
        .arg(format!(
            "{} {} --out {}",
            python(),
            source_log().display(),
            log.display()
        ))
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    cmd
}

#[test]
fn follow_takes_what_each_source_commits_once_tagged_with_its_source() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clicks = tmp.path().join("clicks");
    let views = tmp.path().join("views");
    let state = tmp.path().join("state");
    let log = tmp.path().join("log");
    let countries = countries();
    assert!(
        countries.len() >= 4,
        "the fixture's countries: {countries:?}"
    );
    land_country(&clicks, &countries[0]);
    land_country(&views, &countries[1]);
    let mut expected = rows_of("clicks", &countries[0]);
    expected.extend(rows_of("views", &countries[1]));
    let mut child = follow_both(&clicks, &views, &state, &log, "4s")
        .spawn()
        .expect("start sluice train --follow");
    let trained = |log: &Path| logged(log).iter().map(|b| b.rows.len()).sum::<usize>();
    crate::common::wait_until(
        "the first partitions trained",
        std::time::Duration::from_secs(120),
        || trained(&log) >= expected.len(),
    );
    // A new partition in each source while the job follows.
    land_country(&clicks, &countries[2]);
    land_country(&views, &countries[3]);
    expected.extend(rows_of("clicks", &countries[2]));
    expected.extend(rows_of("views", &countries[3]));
    let status = crate::common::cluster::wait_exit(&mut child, "sluice train A B --follow");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "exit {status}: {err}");
    let batches = logged(&log);
    assert_rows_once(&row_counts(&batches), &expected, "followed sources");
    // Every row carries its source in the source column (checked above
    // against the batch's sluice.source, where the batch has one).
    assert!(
        batches.iter().any(|b| b.source.is_some()),
        "no batch of one source tagged with sluice.source"
    );
    // Closed at --idle-exit: the same command follows each source on from
    // where it was, and trains nothing twice.
    let again = run(&mut follow_both(&clicks, &views, &state, &log, "1s"));
    assert!(again.status.success(), "rerun: {again}");
    assert_rows_once(
        &row_counts(&logged(&log)),
        &expected,
        "followed sources, rerun",
    );
}

#[test]
fn a_following_master_serves_what_each_source_commits_and_counts_each() {
    use crate::common::cluster::{clean_finish, wait_exit, Job};
    let tmp = tempfile::tempdir().expect("tempdir");
    let clicks = tmp.path().join("clicks");
    let views = tmp.path().join("views");
    let countries = countries();
    land_country(&clicks, &countries[0]);
    land_country(&views, &countries[1]);
    let mut expected = rows_of("clicks", &countries[0]);
    expected.extend(rows_of("views", &countries[1]));
    let mut job = Job::new("parquet_partitioned", 1);
    job.linger = "1s".to_string();
    job.master_args = vec![views.display().to_string()];
    job.master_args.extend(
        [
            "--weights",
            "2,1",
            "--follow",
            "--poll",
            "200ms",
            "--idle-exit",
            "5s",
            "--source-column",
            "src",
        ]
        .map(str::to_string),
    );
    let mut master = job.start_master(&clicks);
    let log = job.ids.join("log");
    let trainer = format!(
        "{} {} --out {}",
        python(),
        source_log().display(),
        log.display()
    );
    let mut worker = job
        .worker_command(&trainer)
        .args(["--batch-size", "10", "-q"])
        .spawn()
        .expect("start worker");
    let trained = |log: &Path| logged(log).iter().map(|b| b.rows.len()).sum::<usize>();
    crate::common::wait_until(
        "the first partitions trained",
        std::time::Duration::from_secs(120),
        || trained(&log) >= expected.len(),
    );
    land_country(&clicks, &countries[2]);
    land_country(&views, &countries[3]);
    expected.extend(rows_of("clicks", &countries[2]));
    expected.extend(rows_of("views", &countries[3]));
    assert!(
        wait_exit(&mut worker, "worker").success(),
        "the worker failed"
    );
    let status = job.status();
    clean_finish(&mut master);
    assert_rows_once(&row_counts(&logged(&log)), &expected, "a following master");
    // The status counts each source's rows, those taken while following too.
    for source in status["sources"].as_array().expect("the status's sources") {
        let name = source["name"].as_str().expect("name");
        let want = expected
            .iter()
            .filter(|r| r.starts_with(&format!("{name}:")))
            .count() as u64;
        assert_eq!(source["rows"].as_u64(), Some(want), "{name}: {status}");
    }
}
