//! Usage errors are usage errors: a mistake on the command line or in a job
//! file exits 64 at once with one line naming the thing, however long the
//! command would otherwise have retried or run. And a broken JSON-lines
//! record is named by its own line.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{assert_one_line_error, sluice, sluice_command, Run};

/// Runs sluice and checks it refused the command line: exit 64 within a
/// few seconds, one line naming each of `mentions`.
#[track_caller]
fn refused(args: &[&str], mentions: &[&str]) -> Run {
    let started = Instant::now();
    let out = common::run(sluice_command(args).env("SLUICE_TOKEN", common::cluster::TOKEN));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused only after {:?}: {out}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(64), "a usage error: {out}");
    assert_one_line_error(&out, mentions);
    out
}

fn clicks() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/clicks")
        .display()
        .to_string()
}

#[test]
fn a_master_url_without_its_scheme_says_how_to_write_it() {
    refused(
        &["worker", "--master", "127.0.0.1:7071", "--exec", "true"],
        &["--master 127.0.0.1:7071", "http://127.0.0.1:7071"],
    );
    refused(
        &["status", "--master", "127.0.0.1:7071"],
        &["--master", "http://127.0.0.1:7071"],
    );
    refused(
        &["worker", "--master", "ftp://host:7071", "--exec", "true"],
        &["unknown scheme `ftp`"],
    );
}

#[test]
fn an_unknown_url_scheme_and_an_empty_column_list_are_refused() {
    refused(
        &["train", "foo://bucket/data", "--quiet"],
        &["foo://bucket/data", "unknown scheme `foo`"],
    );
    refused(&["ls", "foo://bucket/data"], &["unknown scheme `foo`"]);
    refused(
        &["train", &clicks(), "--columns", "", "--quiet"],
        &["--columns", "empty column name"],
    );
    refused(
        &[
            "train",
            &clicks(),
            "--model",
            "linear",
            "--label",
            "label",
            "--features",
            "",
            "--quiet",
        ],
        &["--features"],
    );
    refused(&["train", &clicks(), "--log-every", "0s"], &["--log-every"]);
}

#[test]
fn a_column_the_data_lacks_is_a_usage_error_naming_it() {
    refused(
        &["train", &clicks(), "--columns", "f1,nope", "--quiet"],
        &["`nope`"],
    );
    refused(
        &[
            "train",
            &clicks(),
            "--model",
            "logistic",
            "--label",
            "label",
            "--features",
            "f1,f9",
            "--quiet",
        ],
        &["`f9`"],
    );
}

#[test]
fn wait_success_with_a_space_gets_a_hint() {
    let out = refused(
        &["train", &clicks(), "--wait-success", "10m"],
        &["'10m'", "--wait-success=10m"],
    );
    assert!(out.stderr.contains("after `=`"), "{out}");
    // Before the URL, the value is taken for the URL: the hint still comes.
    refused(
        &["train", "--wait-success", "10m", &clicks()],
        &["--wait-success=10m"],
    );
}

/// A job file over one complete day of examples/clicks, with `extra` keys.
fn job(dir: &Path, extra: &str) -> std::path::PathBuf {
    let day = dir.join("clicks/dt=2024-03-01");
    if !day.exists() {
        common::copy_dir(&Path::new(&clicks()).join("dt=2024-03-01"), &day);
        std::fs::write(day.join("_SUCCESS"), b"").expect("_SUCCESS");
    }
    let file = dir.join("job.toml");
    let text = format!(
        "source = \"{}\"\nstate = \"{}\"\n{extra}",
        dir.join("clicks/dt=*").display(),
        dir.join("state").display()
    );
    std::fs::write(&file, text).expect("job file");
    file
}

#[test]
fn job_file_mistakes_are_usage_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = job(tmp.path(), "batch_sise = 3\n");
    refused(
        &["run", file.to_str().expect("utf8")],
        &["unknown key `batch_sise`", "job.toml"],
    );
    let file = job(tmp.path(), "epochs = \"many\"\n");
    refused(
        &["run", file.to_str().expect("utf8")],
        &["`epochs`", "job.toml"],
    );
    let file = job(tmp.path(), "on-rewrite = \"sometimes\"\n");
    refused(&["run", file.to_str().expect("utf8")], &["`on-rewrite`"]);
    // A job file that cannot be read is no usage error.
    let out = sluice([
        "run",
        tmp.path().join("missing.toml").to_str().expect("utf8"),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out}");
}

#[test]
fn a_dry_run_that_would_fail_fails_naming_the_column() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = "model = \"logistic\"\nlabel = \"label\"\nquiet = true\n";
    let file = job(tmp.path(), &format!("{model}features = [\"f1\", \"f9\"]\n"));
    let path = file.to_str().expect("utf8");
    refused(&["run", path, "--dry-run"], &["`f9`"]);
    refused(&["run", path], &["`f9`"]);
    let file = job(
        tmp.path(),
        &format!("{model}features = [\"f1\"]\ncolumns = [\"f1\", \"nope\"]\n"),
    );
    refused(
        &["run", file.to_str().expect("utf8"), "--dry-run"],
        &["`nope`"],
    );
    // The same job with columns that exist: the dry run lists the day.
    let file = job(tmp.path(), &format!("{model}features = [\"f1\", \"f2\"]\n"));
    let out = sluice(["run", file.to_str().expect("utf8"), "--dry-run", "--json"]).success();
    assert_eq!(out.json()["new"][0]["path"], "dt=2024-03-01", "{out}");
    assert!(!tmp.path().join("state").join("trained.json").exists());
}

#[test]
fn a_broken_json_lines_record_is_named_by_its_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("events");
    std::fs::create_dir(&data).expect("mkdir");
    let mut text = String::new();
    for id in 1..=300 {
        text.push_str(&format!("{{\"id\": {id}, \"x\": {id}.5}}\n"));
    }
    text.push_str("{\"id\": 301, \"x\": }\n");
    for id in 302..=400 {
        text.push_str(&format!("{{\"id\": {id}, \"x\": {id}.5}}\n"));
    }
    let file = data.join("part-00000.json");
    std::fs::write(&file, text).expect("write");
    std::fs::write(data.join("_SUCCESS"), b"").expect("_SUCCESS");
    let out = sluice(["train", data.to_str().expect("utf8"), "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{out}");
    assert_one_line_error(&out, &["part-00000.json", "line 301 column"]);
    assert!(!out.stderr.contains("line 1 column"), "{out}");
}

#[test]
fn a_model_file_for_an_exec_trainer_is_refused_not_ignored() {
    let clicks = clicks();
    refused(
        &[
            "train",
            &clicks,
            "--exec",
            "true",
            "--output",
            "/tmp/m.json",
        ],
        &["--output", "--exec"],
    );
    refused(
        &[
            "train",
            &clicks,
            "--model",
            "none",
            "--init-model",
            "/tmp/m.json",
        ],
        &["--init-model", "built-in model"],
    );
}
