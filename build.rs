//! What `sluice --version` says beyond the crate's version: the commit, the
//! build date and the cargo profile, as `SLUICE_COMMIT`, `SLUICE_BUILD_DATE`,
//! `SLUICE_PROFILE` and `SLUICE_TARGET` for `env!`. Never fails: without git
//! (a source tarball, an sdist) the commit is `unknown`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let commit = git(&["rev-parse", "--short=7", "HEAD"]).unwrap_or_else(|| "unknown".into());
    for path in git_files() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rustc-env=SLUICE_COMMIT={commit}");
    println!("cargo:rustc-env=SLUICE_BUILD_DATE={}", build_date());
    println!("cargo:rustc-env=SLUICE_PROFILE={}", profile());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=SLUICE_TARGET={target}");
}

/// The output of `git ARGS` in the crate's directory, if git runs and succeeds.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

/// The files whose change means another commit: HEAD, the branch it names and
/// the packed refs. Only paths that exist (a missing one would rerun this
/// script at every build): a branch packed in packed-refs (a fresh clone) is
/// watched through its directory, where its next commit writes it. A missing
/// packed-refs is left out, not watched through `.git`: that directory
/// changes at every `git status` or `git add` (the index is written beside
/// it), which would compile the crate again each time.
fn git_files() -> Vec<PathBuf> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    let absolute = |p: String| match &dir {
        Some(dir) if Path::new(&p).is_relative() => dir.join(p),
        _ => PathBuf::from(p),
    };
    let mut paths = Vec::new();
    paths.extend(git(&["rev-parse", "--git-path", "HEAD"]).map(absolute));
    paths.extend(git(&["rev-parse", "--git-path", "packed-refs"]).map(absolute));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        let refs = git(&["rev-parse", "--git-path", "refs"]).map(absolute);
        let branch = git(&["rev-parse", "--git-path", &branch]).map(absolute);
        // The branch's file, or the nearest folder of it under refs/.
        if let (Some(branch), Some(refs)) = (branch, refs) {
            paths.extend(
                branch
                    .ancestors()
                    .take_while(|a| a.starts_with(&refs))
                    .find(|a| a.exists())
                    .map(Path::to_path_buf),
            );
        }
    }
    paths.retain(|p| p.exists());
    paths
}

/// Today as YYYY-MM-DD (UTC), or the day of `SOURCE_DATE_EPOCH` when set.
fn build_date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        });
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The cargo profile's name (`debug` for dev and test builds, `release`,
/// `dist`): the directory under the target dir that OUT_DIR sits in
/// (`<target>/<profile>/build/<pkg>/out`); cargo's `PROFILE` says only debug or
/// release.
fn profile() -> String {
    std::env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .and_then(|out| {
            out.ancestors()
                .nth(3)
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
        })
        .or_else(|| std::env::var("PROFILE").ok())
        .unwrap_or_else(|| "unknown".into())
}
