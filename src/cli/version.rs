//! `sluice --version` and `sluice version [--json]`: the version, the commit
//! and day it was built from and the cargo profile (written by build.rs), and
//! for bug reports what this build reads.

use clap::Args;
use serde::Serialize;

/// The crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit built, abbreviated (`unknown` when built without git).
pub const COMMIT: &str = env!("SLUICE_COMMIT");
/// The day of the build, YYYY-MM-DD in UTC (`SOURCE_DATE_EPOCH`'s when set).
pub const BUILD_DATE: &str = env!("SLUICE_BUILD_DATE");
/// The cargo profile built with: `debug`, `release` or `dist`.
pub const PROFILE: &str = env!("SLUICE_PROFILE");
/// The target triple built for.
pub const TARGET: &str = env!("SLUICE_TARGET");

/// Arguments of `sluice version`.
#[derive(Debug, Args)]
pub struct VersionArgs {
    /// Print one JSON object (version, commit, build date, profile, target,
    /// the stores, formats and tables this build reads), for bug reports.
    #[arg(long)]
    pub json: bool,
}

/// What `sluice version --json` prints.
#[derive(Debug, Serialize)]
pub struct VersionInfo {
    /// The crate's version.
    pub version: &'static str,
    /// The commit built, abbreviated, or `unknown`.
    pub commit: &'static str,
    /// The day of the build, YYYY-MM-DD.
    pub build_date: &'static str,
    /// The cargo profile: `debug`, `release` or `dist`.
    pub profile: &'static str,
    /// The target triple.
    pub target: &'static str,
    /// The URL schemes of the stores this build reads.
    pub stores: Vec<&'static str>,
    /// The file formats this build reads.
    pub formats: Vec<&'static str>,
    /// The table formats this build reads from their logs.
    pub tables: Vec<&'static str>,
}

impl VersionInfo {
    /// This build's.
    pub fn current() -> Self {
        use connectors::store::Scheme;
        use connectors::table::TableKind;
        VersionInfo {
            version: VERSION,
            commit: COMMIT,
            build_date: BUILD_DATE,
            profile: PROFILE,
            target: TARGET,
            stores: Scheme::ALL.iter().map(|s| s.as_str()).collect(),
            formats: connectors::Format::ALL.iter().map(|f| f.as_str()).collect(),
            tables: TableKind::ALL.iter().map(|t| t.as_str()).collect(),
        }
    }
}

/// `sluice 0.1.0 (3c88b29 2026-12-03, dist)`: what `--version` prints.
pub fn line() -> String {
    format!("sluice {VERSION} ({COMMIT} {BUILD_DATE}, {PROFILE})")
}

/// Runs `sluice version`: the line of `--version`, or with `--json` one JSON
/// object.
pub fn run(args: &VersionArgs) -> anyhow::Result<()> {
    let text = if args.json {
        serde_json::to_string(&VersionInfo::current())?
    } else {
        line()
    };
    super::to_stdout(format!("{text}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use connectors::store::Scheme;

    use super::*;

    #[test]
    fn the_stores_and_formats_listed_are_names_sluice_reads() {
        let info = VersionInfo::current();
        for (name, scheme) in info.stores.iter().zip(Scheme::ALL) {
            let url = format!("{name}://host/data");
            assert_eq!(Scheme::of(&url).expect(name), scheme, "{url}");
        }
        for name in &info.formats {
            let format: connectors::Format = name.parse().expect(name);
            assert_eq!(format.as_str(), *name);
        }
        assert_eq!(info.stores.len(), Scheme::ALL.len());
    }

    #[test]
    fn the_version_line_names_commit_date_and_profile() {
        let date: Vec<&str> = BUILD_DATE.split('-').collect();
        assert_eq!(date.iter().map(|p| p.len()).collect::<Vec<_>>(), [4, 2, 2]);
        assert!(line().contains(&format!("({COMMIT} {BUILD_DATE}, {PROFILE})")));
        assert!(["debug", "release", "dist"].contains(&PROFILE), "{PROFILE}");
    }
}
