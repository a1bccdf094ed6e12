//! Following an output directory: each new partition directory, once the
//! write that made it is committed: its own `_SUCCESS` (or one of a
//! partition directory above it), or a root `_SUCCESS` written after the
//! partition's files, or where the writer leaves no marker at all, once it
//! has not changed for `--settle`. A directory that is not partitioned is
//! taken whole at the start, once committed; nothing follows.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use connectors::layout::names::{classify_dir, DirClass, FileClass};
use connectors::{Dataset, DatasetOptions, Location};
use object_store::path::Path;
use tracing::{info, warn};

use super::{has_schema, nothing_yet, FollowError, Taken};
use crate::protocol::follow::FollowPosition;
use crate::wall::wall_millis;

/// Where a followed job is in a directory source.
#[derive(Debug)]
pub(super) struct DirWatch {
    /// Partition directories taken (relative, as on disk).
    pub(super) taken: BTreeSet<String>,
    /// Partitions seen and not yet committed: their files, and since
    /// when they have been as they are.
    pending: BTreeMap<String, Pending>,
    /// The root holds data files of its own, outside any partition:
    /// warned once.
    warned_root: bool,
}

impl DirWatch {
    /// A watch that has taken the partition directories `taken`.
    pub(super) fn new(taken: BTreeSet<String>) -> DirWatch {
        DirWatch {
            taken,
            pending: BTreeMap::new(),
            warned_root: false,
        }
    }

    /// When files last landed or changed in a partition not committed yet.
    pub(super) fn last_landed(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.since).max()
    }

    /// Looks at the directory once: the partitions committed since the
    /// last look, taken.
    pub(super) async fn poll(
        &mut self,
        location: &Location,
        options: &DatasetOptions,
        settle: Duration,
    ) -> Result<Option<Taken>, FollowError> {
        let listing = match connectors::listing::list(location).await {
            Ok(listing) => listing,
            Err(e) if nothing_yet(&e) => return Ok(None),
            Err(e) => return Err(FollowError::read("list the followed directory")(e)),
        };
        let units = units(&listing);
        if units.root_files && !self.warned_root {
            warn!(url = %location.url(), "files directly in the followed directory are not followed: only new partition directories are taken");
            self.warned_root = true;
        }
        let ready = self.ready(&units, settle);
        if ready.is_empty() {
            return Ok(None);
        }
        let roots: Vec<Path> = ready.iter().map(|u| u.path.clone()).collect();
        let names: Vec<String> = ready.iter().map(|u| u.name.clone()).collect();
        let committed_ms = ready.iter().map(|u| u.committed_ms(&units)).max().flatten();
        let dataset = open_roots(location.clone(), roots, options.clone())
            .await
            .map_err(FollowError::read("list the new partition directories"))?;
        for name in &names {
            self.pending.remove(name);
            self.taken.insert(name.clone());
        }
        let what = match names.as_slice() {
            [one] => one.clone(),
            many => format!("{} partitions", many.len()),
        };
        info!(partitions = %names.join(", "), files = dataset.files.len(), "following: new partitions committed");
        Ok(Some(Taken {
            dataset,
            position: FollowPosition::Partitions { taken: names },
            committed_ms,
            what,
        }))
    }

    /// The partitions of `units` not taken yet that are committed (or,
    /// without markers, have not changed for `settle`); every one not taken
    /// is remembered as pending, with since when it is as it is.
    fn ready<'u>(&mut self, units: &'u Units, settle: Duration) -> Vec<&'u Unit> {
        let now = Instant::now();
        let mut ready: Vec<&Unit> = Vec::new();
        for unit in &units.list {
            if self.taken.contains(&unit.name) {
                continue;
            }
            let files: Vec<(String, u64)> = unit.files.clone();
            let entry = self.pending.entry(unit.name.clone()).or_insert(Pending {
                files: files.clone(),
                since: now,
            });
            if entry.files != files {
                entry.files = files;
                entry.since = now;
            }
            let settled = units.no_markers && entry.since.elapsed() >= settle;
            if units.committed(unit) || settled {
                ready.push(unit);
            }
        }
        ready
    }
}

/// What a directory source holds committed at the start of its job: its
/// committed partitions, or where it is not partitioned, the whole
/// directory once committed (or, without markers, settled).
pub(super) async fn first(
    location: &Location,
    options: &DatasetOptions,
    settle: Duration,
) -> Result<Option<(Dataset, FollowPosition)>, connectors::Error> {
    let listing = connectors::listing::list(location).await?;
    let units = units(&listing);
    if units.root_files {
        // Not partitioned: the directory as a whole once its write is
        // committed (or, without markers, settled); nothing follows.
        let settled = units.no_markers
            && wall_millis() as i64 - units.root_newest_ms >= settle.as_millis() as i64;
        let committed = units.root_success_ms.is_some() && !units.root_in_flight;
        if !committed && !settled {
            return Ok(None);
        }
        let dataset = Dataset::open(location.clone(), options.clone()).await?;
        return Ok(
            has_schema(dataset).map(|d| (d, FollowPosition::Partitions { taken: Vec::new() }))
        );
    }
    let committed: Vec<&Unit> = units
        .list
        .iter()
        .filter(|u| units.committed(u) || (units.no_markers && settled_by_mtime(u, settle)))
        .collect();
    if committed.is_empty() {
        return Ok(None);
    }
    let roots: Vec<Path> = committed.iter().map(|u| u.path.clone()).collect();
    let dataset = open_roots(location.clone(), roots, options.clone()).await?;
    let taken = committed.iter().map(|u| u.name.clone()).collect();
    Ok(has_schema(dataset).map(|d| (d, FollowPosition::Partitions { taken })))
}

/// [`Dataset::open_roots`] on owned inputs.
async fn open_roots(
    location: Location,
    roots: Vec<Path>,
    options: DatasetOptions,
) -> Result<Dataset, connectors::Error> {
    Dataset::open_roots(location, &roots, options).await
}

/// Whether the newest file of `unit` was written at least `settle` ago.
fn settled_by_mtime(unit: &Unit, settle: Duration) -> bool {
    let newest = unit.newest_ms;
    let now = wall_millis() as i64;
    now.saturating_sub(newest) >= settle.as_millis() as i64
}

#[derive(Debug, Clone, PartialEq)]
struct Pending {
    /// (name, size) of every file, sorted: what "unchanged" compares.
    files: Vec<(String, u64)>,
    since: Instant,
}

/// A partition directory holding data files: what a directory source's
/// follower takes, once.
#[derive(Debug)]
struct Unit {
    /// Relative path, as on disk (`dt=2026-11-29/hour=03`).
    name: String,
    /// Its path in the store.
    path: Path,
    /// (name, size) of each data file, sorted.
    files: Vec<(String, u64)>,
    /// The newest file's time (ms since the epoch).
    newest_ms: i64,
    /// `_SUCCESS` in it or in a partition directory above it: its time.
    own_success_ms: Option<i64>,
    /// In-flight output inside it.
    in_flight: bool,
}

impl Unit {
    fn committed_ms(&self, units: &Units) -> Option<i64> {
        self.own_success_ms.or(units.root_success_ms)
    }
}

/// The partition directories of a listing, and the markers that decide them.
#[derive(Debug, Default)]
struct Units {
    list: Vec<Unit>,
    /// The root `_SUCCESS`'s time.
    root_success_ms: Option<i64>,
    /// In-flight output at the root (a write of the whole directory under way).
    root_in_flight: bool,
    /// No `_SUCCESS` anywhere: the writer leaves no markers.
    no_markers: bool,
    /// Data files directly in the root.
    root_files: bool,
    /// The newest of them (ms since the epoch).
    root_newest_ms: i64,
}

impl Units {
    /// Committed by a marker: its own (or a partition's above it), or the
    /// root's written after its files with no whole-directory write under way.
    fn committed(&self, unit: &Unit) -> bool {
        if unit.in_flight {
            return false;
        }
        if unit.own_success_ms.is_some() {
            return true;
        }
        match self.root_success_ms {
            Some(at) => !self.root_in_flight && at >= unit.newest_ms,
            None => false,
        }
    }
}

/// Groups a listing's data files by partition directory.
fn units(listing: &connectors::listing::Listing) -> Units {
    let mut out = Units::default();
    let mut successes: BTreeMap<String, i64> = BTreeMap::new();
    let mut by_dir: BTreeMap<String, Unit> = BTreeMap::new();
    for file in &listing.files {
        let ms = file.meta.last_modified.timestamp_millis();
        let dir = file.dirs.join("/");
        match file.class {
            FileClass::Success => {
                if file.dirs.is_empty() {
                    out.root_success_ms = Some(ms);
                } else {
                    successes.insert(dir, ms);
                }
            }
            FileClass::Data => {
                if file.dirs.is_empty() {
                    out.root_files = true;
                    out.root_newest_ms = out.root_newest_ms.max(ms);
                    continue;
                }
                if !file
                    .dirs
                    .iter()
                    .all(|d| matches!(classify_dir(d), DirClass::Partition { .. }))
                {
                    continue;
                }
                let unit = by_dir.entry(dir.clone()).or_insert_with(|| Unit {
                    name: dir.clone(),
                    path: parent(&file.meta.location),
                    files: Vec::new(),
                    newest_ms: i64::MIN,
                    own_success_ms: None,
                    in_flight: false,
                });
                let name = file
                    .meta
                    .location
                    .filename()
                    .unwrap_or_default()
                    .to_string();
                unit.files.push((name, file.meta.size));
                unit.newest_ms = unit.newest_ms.max(ms);
            }
            _ => {}
        }
    }
    for name in &listing.in_flight {
        match name.rsplit_once('/') {
            Some((dir, _)) => {
                for (unit_name, unit) in by_dir.iter_mut() {
                    if unit_name == dir || unit_name.starts_with(&format!("{dir}/")) {
                        unit.in_flight = true;
                    }
                }
            }
            None => out.root_in_flight = true,
        }
    }
    for unit in by_dir.values_mut() {
        unit.files.sort();
        // Its own `_SUCCESS`, or one of a partition directory above it.
        let mut prefix = String::new();
        for segment in unit.name.split('/') {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(segment);
            if let Some(ms) = successes.get(&prefix) {
                unit.own_success_ms = Some(unit.own_success_ms.map_or(*ms, |m: i64| m.max(*ms)));
            }
        }
    }
    out.no_markers = out.root_success_ms.is_none() && successes.is_empty();
    out.list = by_dir.into_values().collect();
    out
}

/// The directory holding `path`.
fn parent(path: &Path) -> Path {
    let parts: Vec<_> = path.parts().collect();
    let n = parts.len().saturating_sub(1);
    Path::from_iter(parts.into_iter().take(n))
}

#[cfg(test)]
mod tests {
    use connectors::listing::{ListedFile, Listing};
    use object_store::ObjectMeta;

    use super::*;

    fn file(path: &str, ms: i64) -> ListedFile {
        let location = Path::from(path);
        let name = location.filename().unwrap_or_default().to_string();
        let parts: Vec<String> = location.parts().map(|p| p.as_ref().to_string()).collect();
        ListedFile {
            meta: ObjectMeta {
                location,
                last_modified: chrono::DateTime::from_timestamp_millis(ms).expect("time"),
                size: 10,
                e_tag: None,
                version: None,
            },
            dirs: parts[1..parts.len() - 1].to_vec(),
            class: connectors::layout::names::classify_file(&name),
        }
    }

    fn listing(files: Vec<ListedFile>, in_flight: &[&str]) -> Listing {
        Listing {
            files,
            in_flight: in_flight.iter().map(|s| s.to_string()).collect(),
            ..Listing::default()
        }
    }

    fn committed(units: &Units) -> Vec<&str> {
        units
            .list
            .iter()
            .filter(|u| units.committed(u))
            .map(|u| u.name.as_str())
            .collect()
    }

    #[test]
    fn a_partition_is_committed_by_its_own_marker_or_one_above_it() {
        let units = units(&listing(
            vec![
                file("t/dt=1/hour=0/part-0.parquet", 10),
                file("t/dt=1/_SUCCESS", 20),
                file("t/dt=2/part-0.parquet", 10),
                file("t/dt=3/part-0.parquet", 10),
                file("t/dt=3/_SUCCESS", 20),
            ],
            &["dt=3/_temporary"],
        ));
        assert_eq!(committed(&units), ["dt=1/hour=0"]);
        assert!(!units.no_markers);
    }

    #[test]
    fn the_root_marker_commits_only_partitions_written_before_it() {
        let files = vec![
            file("t/dt=1/part-0.parquet", 10),
            file("t/dt=2/part-0.parquet", 30),
            file("t/_SUCCESS", 20),
        ];
        let units = units(&listing(files.clone(), &[]));
        assert_eq!(committed(&units), ["dt=1"]);
        // A write of the whole directory under way commits nothing by the root's marker.
        let units_in_flight = super::units(&listing(files, &["_temporary"]));
        assert!(committed(&units_in_flight).is_empty());
    }

    #[test]
    fn without_any_marker_partitions_wait_for_the_settle_time() {
        let units = units(&listing(vec![file("t/dt=1/part-0.parquet", 10)], &[]));
        assert!(units.no_markers);
        assert!(committed(&units).is_empty());
        assert!(settled_by_mtime(&units.list[0], Duration::from_secs(30)));
        let now = wall_millis() as i64;
        let fresh = super::units(&listing(vec![file("t/dt=1/part-0.parquet", now)], &[]));
        assert!(!settled_by_mtime(&fresh.list[0], Duration::from_secs(30)));
    }
}
