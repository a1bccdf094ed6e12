//! The pip package: the wheel `tests/run.sh` builds with maturin (`pyproject.toml`
//! at the root, around the dev build) installs into a fresh venv, without cargo
//! and without network (pyarrow from the wheelhouse `.ci/run` caches), and puts
//! `sluice` on the venv's PATH beside the `sluice_trainer` module: `sluice
//! --version`, `sluice ls` and a trainer importing `sluice_trainer` all run from
//! it alone.
//!
//! The wheel is the newest `sluice-*.whl` in `$SLUICE_WHEEL_DIR` (default: the
//! `wheels` directory of the cargo target directory); the wheelhouse is
//! `$SLUICE_WHEELHOUSE` (default `~/.cache/sluice/wheelhouse`). Missing either,
//! the test fails naming what builds it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_exactly_once, expected_dataset, fixture, python, recorded_ids, run, SLUICE};

/// A file of the repository.
fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The wheel to test: the newest `sluice-*.whl` where `tests/run.sh` builds it.
fn wheel() -> PathBuf {
    let dir = std::env::var_os("SLUICE_WHEEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // SLUICE is <target>/debug/sluice; maturin writes <target>/wheels.
            Path::new(SLUICE)
                .ancestors()
                .nth(2)
                .expect("the target directory")
                .join("wheels")
        });
    let newest = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("sluice-") && name.ends_with(".whl")
        })
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    newest.unwrap_or_else(|| {
        panic!(
            "no sluice-*.whl in {}: build it with `maturin build --profile dev --out {}` \
             (tests/run.sh does)",
            dir.display(),
            dir.display()
        )
    })
}

/// Where pyarrow's wheel waits for an offline install.
fn wheelhouse() -> PathBuf {
    let dir = std::env::var_os("SLUICE_WHEELHOUSE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("HOME")).join(".cache/sluice/wheelhouse"));
    assert!(
        dir.is_dir(),
        "no wheelhouse at {}: .ci/run downloads pyarrow's wheel there",
        dir.display()
    );
    dir
}

/// `sh -c SCRIPT` with only the venv's bin and the system's on the PATH: no
/// cargo, no other sluice, no PYTHONPATH.
fn in_venv(venv: &Path, script: &str) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script])
        .env_clear()
        .env("PATH", format!("{}/bin:/usr/bin:/bin", venv.display()))
        .env("HOME", env!("HOME"));
    cmd
}

#[test]
fn the_wheel_installs_sluice_and_sluice_trainer_into_a_fresh_venv() {
    let wheel = wheel();
    let dir = tempfile::tempdir().expect("tempdir");
    let venv = dir.path().join("venv");
    run(Command::new(python()).args(["-m", "venv"]).arg(&venv)).success();
    run(Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
        ])
        .arg(wheelhouse())
        .arg(&wheel)
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"))
    .success();

    // `sluice` resolves to the venv's copy and is the binary of this build.
    let which = run(&mut in_venv(&venv, "command -v sluice")).success();
    assert_eq!(
        which.stdout.trim(),
        venv.join("bin/sluice").display().to_string(),
        "sluice on the PATH"
    );
    let version = run(&mut in_venv(&venv, "sluice --version")).success();
    let built = run(Command::new(SLUICE).arg("--version")).success();
    assert_eq!(version.stdout, built.stdout, "the wheel's sluice --version");
    assert!(
        version.stdout.starts_with("sluice "),
        "sluice --version: {version}"
    );

    // `sluice ls` reads a Spark output.
    let data = fixture("parquet_small_files");
    let rows = expected_dataset("parquet_small_files")["rows"]
        .as_u64()
        .expect("rows");
    let ls = run(&mut in_venv(
        &venv,
        &format!("sluice ls --json {}", data.display()),
    ))
    .success();
    assert_eq!(ls.json()["rows"].as_u64(), Some(rows), "{ls}");

    // The module comes from the wheel, and finds the wheel's binary.
    let found = run(&mut in_venv(
        &venv,
        "python -c 'import sluice_trainer, sluice_trainer.spark as s; \
         print(sluice_trainer.__file__); print(sluice_trainer.find_sluice_bin())'",
    ))
    .success();
    let lines: Vec<&str> = found.stdout.lines().collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with(&*venv.to_string_lossy())),
        "sluice_trainer imported from outside the venv: {found}"
    );
    assert_eq!(
        lines.get(1).copied(),
        Some(&*venv.join("bin/sluice").to_string_lossy()),
        "find_sluice_bin(): {found}"
    );

    // A trainer importing sluice_trainer, under the wheel's sluice, on two devices.
    let out = dir.path().join("ids");
    std::fs::create_dir(&out).expect("ids dir");
    let exec = format!(
        "python {} --out {}",
        repo("tests/trainers/package_ids.py").display(),
        out.display()
    );
    let train = run(&mut in_venv(
        &venv,
        &format!(
            "sluice train {} --devices 2 --batch-size 64 --quiet --exec '{exec}'",
            data.display()
        ),
    ));
    train.success();
    assert_exactly_once(&recorded_ids(&out, "ids-"), rows, "the wheel's trainer");
}
