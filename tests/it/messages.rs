//! Messages that name the cause (issue 53): a filter that keeps no row says
//! so and names the filter, not "empty output"; `--cache` on a local source
//! says once that it is not used; an `--epoch-rows` error shows its file's
//! path whole.

use std::path::{Path, PathBuf};

use crate::common::{assert_one_line_error, sluice};

fn clicks() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/clicks")
        .display()
        .to_string()
}

#[test]
fn a_filter_that_keeps_no_row_is_named_instead_of_the_data() {
    let data = clicks();
    for (flag, filter, named) in [
        ("--filter", "id < 0", "the filter `id < 0` (--filter)"),
        (
            "--where",
            "dt = '2030-01-01'",
            "the partition filter `dt = '2030-01-01'` (--where)",
        ),
    ] {
        let run = sluice(["train", &data, flag, filter, "--model", "none", "--quiet"]);
        assert_one_line_error(&run, &[named, "kept no row", "--allow-empty"]);
        assert!(!run.stderr.contains("empty output"), "{run}");
        let allowed = sluice([
            "train",
            &data,
            flag,
            filter,
            "--model",
            "none",
            "--allow-empty",
        ])
        .success();
        assert!(allowed.stderr.contains(named), "{allowed}");
    }
}

#[test]
fn cache_on_a_local_source_says_once_that_it_is_not_used() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let run = sluice([
        "train",
        &clicks(),
        "--cache",
        &cache.display().to_string(),
        "--epochs",
        "2",
        "--model",
        "none",
        "--quiet",
    ])
    .success();
    let said: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("--cache is not used"))
        .collect();
    assert_eq!(said.len(), 1, "said once: {run}");
    assert!(said[0].contains("WARN"), "a warning: {run}");
    assert!(!cache.exists(), "no cache directory made: {run}");
}

/// A finished output `name` under `root`: one CSV file of three rows.
fn csv_source(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("part-00000.csv"), "1,2\n3,4\n5,6\n").expect("write");
    std::fs::write(dir.join("_SUCCESS"), "").expect("write");
    dir
}

#[test]
fn an_epoch_rows_error_shows_the_path_whole() {
    let root = tempfile::tempdir().expect("tempdir");
    let a = csv_source(root.path(), "a");
    let b = csv_source(root.path(), "b");
    let run = sluice([
        "train",
        &a.display().to_string(),
        &b.display().to_string(),
        "--epoch-rows",
        "10",
        "--model",
        "none",
    ]);
    let file = a.join("part-00000.csv").display().to_string();
    assert!(file.starts_with('/'), "{file}");
    assert_one_line_error(&run, &["--epoch-rows", &format!("file://{file} ")]);
}
