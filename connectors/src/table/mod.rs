//! Tables: Delta Lake and Iceberg directories, read from their logs instead of
//! from a listing. A table's directory holds files that are no longer part of
//! it (overwritten, deleted, compacted away) and files that are only partly
//! live (deletion vectors, position deletes): only the log says which rows a
//! version holds. This module turns a version of a table into its live data
//! files, each with the rows deleted from it, so that the dataset plans tasks
//! from them exactly as it does from a listing.

pub mod delta;
pub mod iceberg;

use std::fmt;

use arrow::datatypes::{Field, SchemaRef};
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::store::Location;
use crate::types::Format;
pub use crate::types::{parquet_field_id_key, ColumnMapping, TableVersion};

/// The kind of table a directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableKind {
    /// Delta Lake: `_delta_log/` beside the data.
    Delta,
    /// Apache Iceberg: `metadata/*.metadata.json` beside the data.
    Iceberg,
}

impl TableKind {
    /// Every kind of table.
    pub const ALL: [TableKind; 2] = [TableKind::Delta, TableKind::Iceberg];

    /// The name users know.
    pub fn as_str(self) -> &'static str {
        match self {
            TableKind::Delta => "delta",
            TableKind::Iceberg => "iceberg",
        }
    }
}

impl fmt::Display for TableKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One live data file of a table version.
#[derive(Debug, Clone, PartialEq)]
pub struct TableFile {
    /// Its path in the store.
    pub path: Path,
    /// Its size in bytes.
    pub size: u64,
    /// Its format (Parquet for Delta; Parquet, ORC or Avro for Iceberg).
    pub format: Format,
    /// Rows in the file as the log records them, before deletes, when known.
    pub rows: Option<u64>,
    /// Partition values as strings (`None` for null), aligned with
    /// [`TableSnapshot::partition_fields`]: the values of columns the file
    /// itself does not hold.
    pub partition_values: Vec<Option<String>>,
    /// Positions (0-based, in file order) of the rows deleted from the file,
    /// sorted, without repeats.
    pub deleted: Vec<u64>,
    /// The version (Delta) or snapshot id (Iceberg) that added the file, when known.
    pub added_in: Option<i64>,
    /// The values of the file's identity partition fields by source column
    /// (Iceberg: from its manifest entry's partition tuple; `None` for
    /// null), which `--where` prunes on. Columns the file's partition spec
    /// does not partition by identity are absent. Empty for Delta, whose
    /// partition values are [`Self::partition_values`].
    pub identity_values: Vec<(String, Option<String>)>,
}

/// One version of a table, as its log describes it.
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    /// Delta or Iceberg.
    pub kind: TableKind,
    /// The Delta version, or the Iceberg snapshot id.
    pub version: i64,
    /// When the version was committed, in milliseconds since the epoch, when known.
    pub timestamp_ms: Option<i64>,
    /// A short description of the table's format (`delta reader 3 writer 7`,
    /// `iceberg format v2`), for `ls`.
    pub format_version: String,
    /// The table's data columns, named as the table names them (after any
    /// renames), excluding [`Self::partition_fields`].
    pub schema: SchemaRef,
    /// Columns whose values come from the log rather than the files (Delta's
    /// partition columns), typed. Empty for Iceberg, whose files hold every column.
    pub partition_fields: Vec<Field>,
    /// How file columns map to table columns.
    pub columns: ColumnMapping,
    /// The live data files.
    pub files: Vec<TableFile>,
    /// What `--where` may prune an Iceberg table's files on (empty for Delta).
    pub pruning: Pruning,
}

/// The columns of an Iceberg table that partition it: those `--where`
/// prunes on (identity partitions, whose values each file's manifest entry
/// holds) and those it cannot (other transforms: a day, a bucket, a
/// truncation of a column is not the column's value).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pruning {
    /// The source columns of identity partition fields, typed as the table
    /// types them.
    pub identity: Vec<Field>,
    /// (source column, transform) of the other partition fields whose
    /// column no identity field partitions.
    pub transformed: Vec<(String, String)>,
}

/// What one commit between two versions did, as far as incremental runs care.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitKind {
    /// Only added data.
    Append,
    /// Rewrote files without changing the data (compaction, `OPTIMIZE`,
    /// `rewrite_data_files`).
    Compaction,
    /// Removed or rewrote data (overwrite, delete, merge, update).
    Rewrite,
    /// Changed only metadata (schema, properties).
    Metadata,
}

/// One commit after the version an incremental run last trained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableCommit {
    /// The Delta version or Iceberg snapshot id.
    pub version: i64,
    /// The operation the log names (`WRITE`, `DELETE`, `append`, `overwrite`...).
    pub operation: String,
    /// What it did to the data.
    pub kind: CommitKind,
}

/// What changed in a table from one version to a later one.
#[derive(Debug, Clone)]
pub struct TableChanges {
    /// The later version, in full.
    pub snapshot: TableSnapshot,
    /// The commits after the earlier version up to the later one, oldest first.
    pub commits: Vec<TableCommit>,
    /// The files of the later version added by appends after the earlier
    /// version (with their deletes as of the later version).
    pub appended: Vec<TableFile>,
    /// The files of the later version added by commits that removed or
    /// rewrote rows (overwrite, delete, merge, update) after the earlier
    /// version; files such a commit only re-added with new deletes are not
    /// among them.
    pub rewritten: Vec<TableFile>,
}

/// Whether the directory at `location` is a table, and which kind. A root
/// that is itself an Iceberg `*.metadata.json` file counts as Iceberg.
pub async fn detect(location: &Location) -> Result<Option<TableKind>> {
    if iceberg::is_metadata_file(&location.root) {
        return Ok(Some(TableKind::Iceberg));
    }
    // One listing of the root answers both questions; a root that cannot be
    // listed is no table here: the listing that follows names the failure,
    // unless the object store cannot be reached at all, which fails once,
    // here, rather than again on each request that follows (a store that
    // never answers costs one request's timeouts, not several).
    let root = match location
        .store
        .list_with_delimiter(Some(&location.root))
        .await
    {
        Ok(root) => root,
        Err(e) => {
            let err = Error::from_store(location.url(), e);
            if location.bucket().is_some() && err.kind() == ErrorKind::Store {
                return Err(err);
            }
            return Ok(None);
        }
    };
    detect_in(location, &root.common_prefixes).await
}

/// [`detect`] from a listing of the root already taken.
pub async fn detect_listed(
    location: &Location,
    root: &crate::listing::RootListing,
) -> Result<Option<TableKind>> {
    if iceberg::is_metadata_file(&location.root) {
        return Ok(Some(TableKind::Iceberg));
    }
    detect_in(location, root.common_prefixes()).await
}

/// Which table the root's subdirectories `dirs` make it, if any.
async fn detect_in(location: &Location, dirs: &[Path]) -> Result<Option<TableKind>> {
    let holds = |name: &str| dirs.iter().any(|p| p.filename() == Some(name));
    if holds(delta::LOG_DIR) {
        return Ok(Some(TableKind::Delta));
    }
    if holds(iceberg::METADATA_DIR) && iceberg::has_metadata(location).await {
        return Ok(Some(TableKind::Iceberg));
    }
    Ok(None)
}

/// Reads version `at` of the table at `location`.
pub async fn snapshot(
    location: &Location,
    kind: TableKind,
    at: TableVersion,
) -> Result<TableSnapshot> {
    match kind {
        TableKind::Delta => delta::snapshot(location, at).await,
        TableKind::Iceberg => iceberg::snapshot(location, at).await,
    }
}

/// What changed after version `since` up to version `at`.
pub async fn changes(
    location: &Location,
    kind: TableKind,
    since: i64,
    at: TableVersion,
) -> Result<TableChanges> {
    let mut changes = match kind {
        TableKind::Delta => delta::changes(location, since, at).await?,
        TableKind::Iceberg => iceberg::changes(location, since, at).await?,
    };
    let compacted = compacted_appends(location, kind, since, &changes).await?;
    changes.appended.extend(compacted);
    Ok(changes)
}

/// Files appended after `since` whose rows a later compaction in the same
/// window moved into new files (which also hold rows trained before): they
/// are read as they were just before the compaction, when they still exist,
/// so their rows are trained once. Files a rewrite removed (delete,
/// overwrite) are not: their rows are gone from the table.
async fn compacted_appends(
    location: &Location,
    kind: TableKind,
    since: i64,
    changes: &TableChanges,
) -> Result<Vec<TableFile>> {
    let commits = &changes.commits;
    if !commits.iter().any(|c| c.kind == CommitKind::Compaction) {
        return Ok(Vec::new());
    }
    let live: std::collections::HashSet<&Path> =
        changes.snapshot.files.iter().map(|f| &f.path).collect();
    let mut snapshots = Snapshots {
        location,
        kind,
        taken: Default::default(),
    };
    let mut out = Vec::new();
    for (i, commit) in commits.iter().enumerate() {
        if commit.kind != CommitKind::Append {
            continue;
        }
        let before = if i == 0 {
            since
        } else {
            commits[i - 1].version
        };
        for version in [before, commit.version] {
            snapshots.take(version).await?;
        }
        let old: std::collections::HashSet<&Path> = snapshots.taken[&before]
            .files
            .iter()
            .map(|f| &f.path)
            .collect();
        let added: Vec<TableFile> = snapshots.taken[&commit.version]
            .files
            .iter()
            .filter(|f| !old.contains(&f.path) && !live.contains(&f.path))
            .cloned()
            .collect();
        for file in added {
            if let Some(f) = before_compaction(&mut snapshots, commits, i, &file.path).await? {
                out.push(f);
            }
        }
    }
    Ok(out)
}

/// The snapshots of one table, each taken once.
struct Snapshots<'a> {
    location: &'a Location,
    kind: TableKind,
    /// The snapshots taken, by Delta version or Iceberg snapshot id.
    taken: std::collections::HashMap<i64, TableSnapshot>,
}

impl Snapshots<'_> {
    /// Takes the snapshot at `version` unless it was taken already.
    async fn take(&mut self, version: i64) -> Result<()> {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.taken.entry(version) {
            let at = match self.kind {
                TableKind::Delta => TableVersion::Version(version.max(0) as u64),
                TableKind::Iceberg => TableVersion::SnapshotId(version),
            };
            slot.insert(snapshot(self.location, self.kind, at).await?);
        }
        Ok(())
    }
}

/// The file at `path`, appended by `commits[i]`, as it was just before the
/// first later commit it is gone after, where that commit is a compaction
/// and the file is still there; `None` otherwise.
async fn before_compaction(
    snapshots: &mut Snapshots<'_>,
    commits: &[TableCommit],
    i: usize,
    path: &Path,
) -> Result<Option<TableFile>> {
    // The first later commit it is gone after decides.
    let mut last_seen = commits[i].version;
    for later in &commits[i + 1..] {
        if later.kind == CommitKind::Append || later.kind == CommitKind::Metadata {
            last_seen = later.version;
            continue;
        }
        snapshots.take(later.version).await?;
        let found = snapshots.taken[&later.version]
            .files
            .iter()
            .any(|f| f.path == *path);
        if found {
            last_seen = later.version;
            continue;
        }
        if later.kind == CommitKind::Compaction {
            snapshots.take(last_seen).await?;
            if let Some(f) = snapshots.taken[&last_seen]
                .files
                .iter()
                .find(|f| f.path == *path)
            {
                return Ok(Some(f.clone()));
            }
        }
        break;
    }
    Ok(None)
}

/// The error for a table of `kind` whose log cannot be read as it should.
pub(crate) fn table_error(kind: TableKind, location: &Location, reason: String) -> Error {
    Error::Table {
        kind: kind.as_str(),
        path: location.url(),
        reason,
    }
}

/// A timestamp in milliseconds, as a person reads it.
pub(crate) fn show_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| format!("{ms} ms"))
}
