//! Help a newcomer can use: `-h` fits one screen with its options under
//! headings, `--help` keeps the long texts and ends with examples; shell
//! completions, man pages, the version line and `version --json` for bug
//! reports; and the committed CLI reference equals what the binary prints.

use std::path::Path;
use std::process::Command;

use crate::common::{assert_one_line_error, run, sluice_command, Run};

/// Runs sluice at a 100-column width (clap's widest), whatever the terminal.
fn sluice(args: &[&str]) -> Run {
    run(sluice_command(args).env("COLUMNS", "100"))
}

/// The headings each command's `-h` shows.
const HEADINGS: [(&str, &[&str]); 7] = [
    ("", &["Commands", "Logging", "Exit codes"]),
    (
        "train",
        &[
            "Source",
            "Rows",
            "Reading",
            "Training",
            "Trainers",
            "State and resume",
            "Following",
            "Output",
            "Logging",
        ],
    ),
    (
        "master",
        &[
            "Source",
            "Distributed",
            "State and resume",
            "Training",
            "Rows",
            "Following",
        ],
    ),
    (
        "worker",
        &[
            "Distributed",
            "Training",
            "Reading",
            "Trainers",
            "Output",
            "Logging",
        ],
    ),
    ("ls", &["Source", "Reading", "Rows", "Output"]),
    ("run", &["Arguments", "Output", "Logging"]),
    ("status", &["Distributed", "Output"]),
];

fn args<'a>(command: &'a str, flag: &'a str) -> Vec<&'a str> {
    [command, flag]
        .into_iter()
        .filter(|a| !a.is_empty())
        .collect()
}

#[test]
fn each_short_help_fits_one_screen_under_its_headings() {
    for (command, headings) in HEADINGS {
        let help = sluice(&args(command, "-h")).success().stdout;
        let lines = help.lines().count();
        assert!(
            lines <= 80,
            "`sluice {command} -h` is {lines} lines (at most 80): hide a rarely used option \
             from -h (hide_short_help) or shorten its `help`:\n{help}"
        );
        for heading in headings {
            assert!(
                help.lines().any(|l| l == format!("{heading}:")),
                "`sluice {command} -h` has no heading `{heading}:`:\n{help}"
            );
        }
    }
}

#[test]
fn short_help_leaves_rare_options_to_long_help_which_lists_every_one() {
    let short = sluice(&["train", "-h"]).success().stdout;
    let long = sluice(&["train", "--help"]).success().stdout;
    for rare in ["--csv-header", "--attach", "--catalog-token-file"] {
        assert!(!short.contains(rare), "`sluice train -h` shows {rare}");
        assert!(long.contains(rare), "`sluice train --help` lacks {rare}");
    }
    // The long text of an option, not only its one-line summary.
    assert!(
        long.contains("Failed reads per task before it is failed (after --read-retry"),
        "`sluice train --help` lost the long text of --max-attempts:\n{long}"
    );
    assert!(
        short.trim_end().ends_with("sluice train --help"),
        "`sluice train -h` does not point to --help:\n{short}"
    );
}

#[test]
fn each_long_help_ends_with_examples_that_start_with_no_flag() {
    for command in ["", "train", "master", "worker", "ls", "run", "status"] {
        let help = sluice(&args(command, "--help")).success().stdout;
        let lines: Vec<&str> = help.lines().collect();
        let start = lines
            .iter()
            .rposition(|l| *l == "Examples:")
            .unwrap_or_else(|| panic!("`sluice {command} --help` has no Examples:\n{help}"));
        let examples = &lines[start + 1..];
        assert!(
            examples.iter().any(|l| l.contains("sluice ")),
            "`sluice {command} --help`: no example runs sluice:\n{help}"
        );
        for line in examples {
            // Examples are the last section: indented to its end. A line
            // starting with a flag would read as one of the command's own
            // (sluice_trainer.spark routes options by what --help lists).
            assert!(
                line.starts_with("  ") && !line.trim_start().starts_with('-'),
                "`sluice {command} --help` does not end with its examples: `{line}`\n{help}"
            );
        }
    }
}

#[test]
fn bash_completion_parses_and_completes_subcommands_and_options() {
    let script = sluice(&["completions", "bash"]).success().stdout;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("sluice.bash");
    std::fs::write(&path, &script).expect("write the script");
    run(Command::new("bash").arg("-n").arg(&path)).success();
    let complete = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let probe = format!(
            "source {}; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT={}; \
             _sluice sluice '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            path.display(),
            line,
            words.len() - 1,
            line.len(),
            words[words.len() - 1],
            words[words.len() - 2],
        );
        run(Command::new("bash").arg("-c").arg(probe))
            .success()
            .stdout
    };
    let subcommands = complete("sluice tr");
    assert_eq!(subcommands.trim(), "train", "sluice tr<TAB>");
    let shells = complete("sluice completions p");
    assert_eq!(shells.trim(), "powershell", "sluice completions p<TAB>");
    let options = complete("sluice train --sta");
    assert!(
        options.lines().any(|l| l == "--state"),
        "sluice train --sta<TAB>: {options}"
    );
}

#[test]
fn zsh_fish_and_powershell_completions_name_the_subcommands() {
    for shell in ["zsh", "fish", "powershell"] {
        let script = sluice(&["completions", shell]).success().stdout;
        for command in ["train", "master", "worker", "ls", "run"] {
            assert!(
                script.contains(command),
                "the {shell} completion never names `{command}`"
            );
        }
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error_naming_it() {
    let out = run(&mut sluice_command(["completions", "tcsh"]));
    assert_eq!(out.status.code(), Some(64), "a usage error: {out}");
    assert_one_line_error(&out, &["tcsh", "bash, zsh, fish or powershell"]);
}

#[test]
fn man_prints_a_roff_page_and_writes_one_per_command() {
    let page = sluice(&["man"]).success().stdout;
    let title = page.lines().position(|l| l.starts_with(".TH sluice 1 "));
    let section = page.lines().position(|l| l.starts_with(".SH "));
    assert!(
        matches!((title, section), (Some(t), Some(s)) if t < s),
        "`sluice man` is no roff page starting with .TH:\n{page}"
    );
    assert!(page.contains("train"), "sluice.1 names no subcommand");

    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("man1");
    sluice(&["man", "--dir", out.to_str().expect("utf8")]).success();
    for name in ["sluice", "sluice-train", "sluice-master", "sluice-worker"] {
        let text = std::fs::read_to_string(out.join(format!("{name}.1")))
            .unwrap_or_else(|e| panic!("sluice man --dir wrote no {name}.1: {e}"));
        assert!(text.contains(".TH "), "{name}.1 has no .TH");
    }
    assert!(
        !out.join("sluice-reference.1").exists(),
        "a page for the hidden reference command"
    );
}

/// The commit git says HEAD is, abbreviated as build.rs does; `None`
/// without git.
fn head_commit() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short=7", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let commit = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !commit.is_empty()).then_some(commit)
}

#[test]
fn version_names_the_commit_build_date_and_profile() {
    let line = sluice(&["--version"]).success().stdout;
    let rest = line
        .strip_prefix(&format!("sluice {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|r| r.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("--version: {line:?}"));
    let (commit_date, profile) = rest.split_once(", ").expect("`, profile`");
    let (commit, date) = commit_date.split_once(' ').expect("commit and date");
    assert!(
        commit == "unknown" || (commit.len() == 7 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "commit `{commit}` in {line:?}"
    );
    if let Some(head) = head_commit() {
        assert_eq!(commit, head, "the commit built: {line:?}");
    }
    let digits: Vec<&str> = date.split('-').collect();
    assert!(
        digits.len() == 3
            && [4, 2, 2]
                .iter()
                .zip(&digits)
                .all(|(n, d)| d.len() == *n && d.chars().all(|c| c.is_ascii_digit())),
        "date `{date}` in {line:?}"
    );
    // Tests run the dev build.
    assert_eq!(profile, "debug", "{line:?}");
    for command in ["train", "version"] {
        let other = sluice(&[command, "--version"]).success().stdout;
        assert_eq!(other, line, "sluice {command} --version");
    }
    assert_eq!(
        sluice(&["version"]).success().stdout,
        line,
        "sluice version"
    );
}

#[test]
fn version_json_has_what_a_bug_report_needs() {
    let info = sluice(&["version", "--json"]).success().json();
    let line = sluice(&["--version"]).success().stdout;
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    for key in ["commit", "build_date", "profile"] {
        let value = info[key]
            .as_str()
            .unwrap_or_else(|| panic!("no {key}: {info}"));
        assert!(line.contains(value), "{key} {value} is not in {line:?}");
    }
    assert!(
        info["target"].as_str().is_some_and(|t| t.contains("linux")),
        "{info}"
    );
    let names = |key: &str| -> Vec<String> {
        info[key]
            .as_array()
            .unwrap_or_else(|| panic!("no {key} list: {info}"))
            .iter()
            .map(|v| v.as_str().expect("a name").to_string())
            .collect()
    };
    assert_eq!(names("stores"), ["file", "hdfs", "s3", "gs", "az"]);
    assert_eq!(
        names("formats"),
        [
            "parquet",
            "orc",
            "avro",
            "csv",
            "json",
            "text",
            "sequencefile",
            "rcfile",
            "tfrecord"
        ]
    );
    assert_eq!(names("tables"), ["delta", "iceberg"]);
}

#[test]
fn the_committed_cli_reference_is_what_the_binary_prints() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/cli.md");
    let printed = sluice(&["reference", "cli"]).success().stdout;
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if printed != committed {
        let line = printed
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(printed.lines().count().min(committed.lines().count()));
        panic!(
            "{} differs from `sluice reference cli` (first at line {}): refresh it with\n  \
             cargo run --bin sluice -- reference cli > docs/reference/cli.md",
            path.display(),
            line + 1
        );
    }
    for command in ["## sluice train", "## sluice master", "## sluice worker"] {
        assert!(printed.contains(command), "the reference lacks `{command}`");
    }
    assert!(
        printed.contains("--wait-success[=<TIMEOUT>]") && printed.contains("env: `SLUICE_CATALOG`"),
        "the reference lacks an option's spelling or env var"
    );
}
