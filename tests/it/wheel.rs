//! The pip package: the wheel `tests/run.sh` builds with maturin (`pyproject.toml`
//! at the root, around the dev build) installs into a fresh venv, without cargo
//! and without network (pyarrow from the wheelhouse `.ci/run` caches), and puts
//! `sluice` on the venv's PATH beside the `sluice_trainer` module: `sluice
//! --version`, `sluice ls` and a trainer importing `sluice_trainer` all run from
//! it alone.
//!
//! The wheel is the newest `sluice_train-*.whl` in `$SLUICE_WHEEL_DIR` (default: the
//! `wheels` directory of the cargo target directory); the wheelhouse is
//! `$SLUICE_WHEELHOUSE` (default `~/.cache/sluice/wheelhouse`). Missing either,
//! the test fails naming what builds it.
//!
//! The wheel's platform tag must be a `manylinux` one (an index accepts it), and its
//! binary must need no glibc symbol newer than the tag promises. With
//! `SLUICE_WHEEL_GLIBC=2.17` the tag must promise that version exactly: the check of a
//! release wheel built with `maturin build --release --zig --compatibility
//! manylinux2014` (see the README), which runs on glibc 2.17 and later.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{
    assert_exactly_once, expected_dataset, fixture, python, recorded_ids, run, SLUICE,
};

/// A file of the repository.
fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The wheel to test: the newest `sluice_train-*.whl` where `tests/run.sh` builds it.
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
            name.starts_with("sluice_train-") && name.ends_with(".whl")
        })
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    newest.unwrap_or_else(|| {
        panic!(
            "no sluice_train-*.whl in {}: build it with `maturin build --profile dev --out {}` \
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

/// The glibc version a wheel's file name promises it runs on (`manylinux2014` is
/// 2.17, `manylinux_2_X` is 2.X, `manylinux2010` 2.12, `manylinux1` 2.5); `None`
/// for a platform tag no index accepts (`linux_x86_64`).
fn tagged_glibc(wheel_name: &str) -> Option<(u32, u32)> {
    let platform = wheel_name.strip_suffix(".whl")?.rsplit('-').next()?;
    platform
        .split('.')
        .filter_map(|tag| {
            let rest = tag.strip_prefix("manylinux")?;
            match rest.split('_').next()? {
                "2014" => Some((2, 17)),
                "2010" => Some((2, 12)),
                "1" => Some((2, 5)),
                "" => {
                    let mut numbers = rest.split('_').skip(1);
                    let major = numbers.next()?.parse().ok()?;
                    let minor = numbers.next()?.parse().ok()?;
                    Some((major, minor))
                }
                _ => None,
            }
        })
        .min()
}

/// The `GLIBC_X.Y` symbol versions an ELF64 little-endian executable needs (its
/// `.gnu.version_r` section), as numbers.
fn glibc_versions_needed(elf: &[u8]) -> Vec<(u32, u32)> {
    let u16_at = |at: usize| -> usize {
        u16::from_le_bytes(elf[at..at + 2].try_into().expect("2 bytes")).into()
    };
    let u32_at = |at: usize| -> usize {
        u32::from_le_bytes(elf[at..at + 4].try_into().expect("4 bytes")) as usize
    };
    let u64_at = |at: usize| -> usize {
        u64::from_le_bytes(elf[at..at + 8].try_into().expect("8 bytes")) as usize
    };
    assert_eq!(&elf[..5], b"\x7fELF\x02", "not an ELF64 file");
    let (sections, size, count) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c));
    let header = |i: usize| sections + i * size;
    const SHT_GNU_VERNEED: usize = 0x6fff_fffe;
    let verneed = (0..count)
        .map(header)
        .find(|&h| u32_at(h + 4) == SHT_GNU_VERNEED)
        .expect("a .gnu.version_r section (a dynamically linked binary)");
    let strings = u64_at(header(u32_at(verneed + 0x28)) + 0x18);
    let name = |offset: usize| -> String {
        let start = strings + offset;
        let end = elf[start..].iter().position(|&b| b == 0).expect("NUL") + start;
        String::from_utf8_lossy(&elf[start..end]).into_owned()
    };
    let mut versions = Vec::new();
    let mut need = u64_at(verneed + 0x18);
    loop {
        let mut aux = need + u32_at(need + 8);
        for _ in 0..u16_at(need + 2) {
            if let Some(version) = name(u32_at(aux + 8)).strip_prefix("GLIBC_") {
                let mut parts = version.split('.').map(|p| p.parse::<u32>());
                if let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) {
                    versions.push((major, minor));
                }
            }
            aux += u32_at(aux + 12);
        }
        match u32_at(need + 12) {
            0 => break,
            next => need += next,
        }
    }
    versions.sort_unstable();
    versions.dedup();
    versions
}

#[test]
fn the_tags_name_the_glibc_they_promise() {
    assert_eq!(
        tagged_glibc("sluice_train-0.1.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"),
        Some((2, 17))
    );
    assert_eq!(
        tagged_glibc("sluice_train-0.1.0-py3-none-manylinux_2_34_x86_64.whl"),
        Some((2, 34))
    );
    assert_eq!(
        tagged_glibc("sluice_train-0.1.0-py3-none-linux_x86_64.whl"),
        None
    );
}

#[test]
fn the_wheel_is_tagged_manylinux_and_its_binary_needs_no_newer_glibc() {
    let wheel = wheel();
    let name = wheel
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a wheel name");
    let promised = tagged_glibc(name)
        .unwrap_or_else(|| panic!("{name}: no manylinux tag (pip installs it from no index)"));
    if let Ok(wanted) = std::env::var("SLUICE_WHEEL_GLIBC") {
        assert_eq!(
            format!("{}.{}", promised.0, promised.1),
            wanted,
            "{name}: the glibc its tag promises (SLUICE_WHEEL_GLIBC)"
        );
    }
    // The binary, out of the wheel (a zip).
    let dir = tempfile::tempdir().expect("tempdir");
    let binary = dir.path().join("sluice");
    run(Command::new(python())
        .args([
            "-c",
            "import sys, zipfile\n\
             z = zipfile.ZipFile(sys.argv[1])\n\
             [path] = [n for n in z.namelist() if n.endswith('.data/scripts/sluice')]\n\
             open(sys.argv[2], 'wb').write(z.read(path))",
        ])
        .arg(&wheel)
        .arg(&binary))
    .success();
    let elf = std::fs::read(&binary).expect("the binary");
    let needed = glibc_versions_needed(&elf);
    assert!(
        !needed.is_empty(),
        "{name}: no GLIBC_ version needed at all?"
    );
    let newer: Vec<String> = needed
        .iter()
        .filter(|&&v| v > promised)
        .map(|(major, minor)| format!("GLIBC_{major}.{minor}"))
        .collect();
    assert!(
        newer.is_empty(),
        "{name} promises glibc {}.{}, but its binary needs {newer:?}",
        promised.0,
        promised.1
    );
}
