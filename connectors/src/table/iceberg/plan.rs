//! Planning a read of an Iceberg table from its decoded metadata, with no
//! I/O and no Avro: which snapshot a version names, the snapshot's schema
//! and the columns `--where` prunes on, which data files are live, which
//! position delete files apply to which of them (and which deletes are
//! refused), and what each commit after a trained snapshot did.
//!
//! The reading half (the parent module) fetches the metadata file, the
//! manifest lists, manifests and delete files, decodes them into the plain
//! structs here ([`ManifestFile`], [`Entry`], delete rows) and hands them in.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::Schema;
use object_store::path::{Path, PathPart};

use super::metadata::{Snapshot, TableMetadata};
use crate::error::{Error, Result};
use crate::store::Location;
use crate::table::{
    show_ms, CommitKind, Pruning, TableChanges, TableCommit, TableFile, TableKind, TableSnapshot,
    TableVersion,
};
use crate::types::{ColumnMapping, Format};

/// A manifest's content: data files.
pub(crate) const CONTENT_DATA: i32 = 0;
/// A file's content: position deletes.
pub(crate) const CONTENT_POSITION_DELETES: i32 = 1;
/// A file's content: equality deletes.
pub(crate) const CONTENT_EQUALITY_DELETES: i32 = 2;
/// A manifest entry's status: the file was deleted in that snapshot.
pub(crate) const STATUS_DELETED: i32 = 2;
/// Snapshot ids named in a message about a missing one.
const IDS_SHOWN: usize = 5;

/// One manifest of a snapshot, as its manifest list describes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ManifestFile {
    /// Where it is (an absolute URI, as written).
    pub path: String,
    /// The partition spec its files were written with.
    pub spec_id: i32,
    /// Data (0) or deletes (1).
    pub content: i32,
    /// The sequence number of the snapshot that added it (0 in v1).
    pub sequence_number: i64,
    /// The snapshot that added it.
    pub added_snapshot_id: Option<i64>,
}

impl ManifestFile {
    /// A manifest a v1 snapshot lists inline (no manifest list says more).
    pub(crate) fn inline(path: &str) -> ManifestFile {
        ManifestFile {
            path: path.to_string(),
            spec_id: 0,
            content: CONTENT_DATA,
            sequence_number: 0,
            added_snapshot_id: None,
        }
    }
}

/// One entry of a manifest, with inherited values filled in.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    /// 0 existing, 1 added, 2 deleted.
    pub status: i32,
    /// The snapshot that added the file (or deleted it, when status is 2).
    pub snapshot_id: Option<i64>,
    /// The data sequence number of the file.
    pub sequence_number: i64,
    /// Data (0), position deletes (1) or equality deletes (2).
    pub content: i32,
    /// The file's absolute URI, as written.
    pub file_path: String,
    /// `PARQUET`, `ORC`, `AVRO` or `PUFFIN`.
    pub file_format: String,
    /// Rows in the file.
    pub record_count: i64,
    /// Bytes in the file.
    pub file_size: i64,
    /// The single data file a delete file applies to, when it says so.
    pub referenced_data_file: Option<String>,
    /// The partition spec it was written with.
    pub spec_id: i32,
    /// Its partition tuple: each field's name and value as a string (`None`
    /// for null), in the spec's order; a field whose type has no string
    /// form is left out.
    pub partition: Vec<(String, Option<String>)>,
}

/// A table's current metadata, and where its files are now. Its location
/// only names files and the table in messages; nothing here reads it.
pub(super) struct Table {
    /// Where the table was found.
    pub location: Location,
    /// The table's directory in the store (where its `location` now is).
    pub root: Path,
    /// The metadata file read.
    pub metadata_path: Path,
    /// What the metadata file holds.
    pub metadata: TableMetadata,
}

/// What a snapshot's schema says: its columns, how file columns map to
/// them, and what `--where` may prune on.
pub(super) struct Columns {
    schema: Schema,
    mapping: ColumnMapping,
    pruning: Pruning,
}

/// The files a snapshot's manifests list, sorted out: its live data files
/// and the position delete files that apply to at least one of them, whose
/// rows are to be read.
pub(super) struct Scan {
    snapshot_id: i64,
    data: Vec<DataFile>,
    by_path: HashMap<Path, usize>,
    deletes: Vec<Entry>,
}

impl Scan {
    /// The position delete files whose rows [`Table::live_files`] needs, in order.
    pub(super) fn deletes(&self) -> &[Entry] {
        &self.deletes
    }
}

/// A live data file while the deletes are gathered.
struct DataFile {
    entry: Entry,
    path: Path,
    deleted: Vec<u64>,
}

impl Table {
    /// The error for metadata that cannot be read as it should.
    pub(super) fn error(&self, reason: String) -> Error {
        super::table_error(&self.location, reason)
    }

    fn no_such(&self, reason: String) -> Error {
        Error::NoSuchVersion {
            kind: "iceberg",
            path: self.location.url(),
            reason,
        }
    }

    /// The snapshot asked for; `None` for the latest of a table without one.
    pub(super) fn select(&self, at: TableVersion) -> Result<Option<&Snapshot>> {
        let metadata = &self.metadata;
        match at {
            TableVersion::Latest => match metadata.current_snapshot_id.filter(|id| *id != -1) {
                None => Ok(None),
                Some(id) => metadata.snapshot(id).map(Some).ok_or_else(|| {
                    self.error(format!(
                        "the current snapshot {id} is not among the table's snapshots in {}",
                        self.location.display(&self.metadata_path)
                    ))
                }),
            },
            TableVersion::SnapshotId(id) => match metadata.snapshot(id) {
                Some(s) => Ok(Some(s)),
                None => Err(self.no_such(format!(
                    "there is no snapshot {id}; {}",
                    self.known_snapshots()
                ))),
            },
            TableVersion::Timestamp(ms) => match metadata.snapshot_as_of(ms) {
                Some(id) => match metadata.snapshot(id) {
                    Some(s) => Ok(Some(s)),
                    None => Err(self.no_such(format!(
                        "snapshot {id} was current at {} but has expired; {}",
                        show_ms(ms),
                        self.known_snapshots()
                    ))),
                },
                None => Err(self.no_such(format!(
                    "no snapshot was committed at or before {}; {}",
                    show_ms(ms),
                    self.first_commit()
                ))),
            },
            TableVersion::Version(v) => Err(Error::InvalidOption {
                option: "--version".to_string(),
                reason: format!(
                    "{} is an Iceberg table, which has snapshot ids, not versions (asked for {v}); pass --snapshot-id",
                    self.location.url()
                ),
            }),
        }
    }

    /// A few of the table's snapshot ids, newest first, for messages.
    fn known_snapshots(&self) -> String {
        let mut snapshots: Vec<&Snapshot> = self.metadata.snapshots.iter().collect();
        if snapshots.is_empty() {
            return "the table has no snapshots".to_string();
        }
        snapshots.sort_by_key(|s| std::cmp::Reverse(s.timestamp_ms));
        let ids: Vec<String> = snapshots
            .iter()
            .take(IDS_SHOWN)
            .map(|s| format!("{} ({})", s.snapshot_id, show_ms(s.timestamp_ms)))
            .collect();
        let more = snapshots.len().saturating_sub(IDS_SHOWN);
        let more = if more > 0 {
            format!(" and {more} older")
        } else {
            String::new()
        };
        format!("its snapshots are {}{more}", ids.join(", "))
    }

    /// When the table's first kept snapshot was committed, for messages.
    fn first_commit(&self) -> String {
        let first = self
            .metadata
            .snapshot_log
            .iter()
            .map(|e| e.timestamp_ms)
            .chain(self.metadata.snapshots.iter().map(|s| s.timestamp_ms))
            .min();
        match first {
            Some(ms) => format!("the first was committed at {}", show_ms(ms)),
            None => "the table has no snapshots".to_string(),
        }
    }

    /// The snapshot `at` names, and the commits in its ancestry after
    /// snapshot `since`, oldest first.
    pub(super) fn commits_since(
        &self,
        since: i64,
        at: TableVersion,
    ) -> Result<(&Snapshot, Vec<TableCommit>)> {
        let Some(target) = self.select(at)? else {
            return Err(self.no_such(format!(
                "snapshot {since} was trained before, but the table has no snapshot now: was it recreated?"
            )));
        };
        let ancestry = self.metadata.ancestry(target.snapshot_id);
        let Some(newer) = ancestry.iter().position(|s| s.snapshot_id == since) else {
            return Err(self.no_such(format!(
                "snapshot {since} was trained before, but it is not an ancestor of snapshot {} \
                 (the table was rolled back or recreated, or the snapshot expired)",
                target.snapshot_id
            )));
        };
        let commits = ancestry[..newer]
            .iter()
            .rev()
            .map(|s| TableCommit {
                version: s.snapshot_id,
                operation: s.operation().to_string(),
                kind: commit_kind(s.operation()),
            })
            .collect();
        Ok((target, commits))
    }

    /// The columns of a snapshot (the current schema's when there is none).
    pub(super) fn columns(&self, snapshot: Option<&Snapshot>) -> Result<Columns> {
        let schema = self.metadata.schema_for(snapshot).ok_or_else(|| {
            self.error(format!(
                "metadata file {} has no schema",
                self.location.display(&self.metadata_path)
            ))
        })?;
        let (schema, by_field_id) = schema.to_arrow().map_err(|e| self.error(e))?;
        let pruning = self.pruning(&schema, &by_field_id);
        Ok(Columns {
            schema,
            mapping: ColumnMapping {
                by_field_id,
                by_physical_name: Vec::new(),
            },
            pruning,
        })
    }

    /// The snapshot as the dataset reads it: its columns and live files
    /// (none for a table without a snapshot).
    pub(super) fn snapshot(
        &self,
        snapshot: Option<&Snapshot>,
        columns: Columns,
        files: Vec<TableFile>,
    ) -> TableSnapshot {
        let format_version = self.metadata.format_version;
        let (version, timestamp_ms, format_version) = match snapshot {
            None => (
                -1,
                None,
                format!("iceberg format v{format_version}, no snapshot yet"),
            ),
            Some(s) => (
                s.snapshot_id,
                Some(s.timestamp_ms),
                format!(
                    "iceberg format v{format_version}, snapshot {}",
                    s.snapshot_id
                ),
            ),
        };
        TableSnapshot {
            kind: TableKind::Iceberg,
            version,
            timestamp_ms,
            format_version,
            schema: Arc::new(columns.schema),
            partition_fields: Vec::new(),
            columns: columns.mapping,
            files,
            pruning: columns.pruning,
        }
    }

    /// The columns the table's partition specs partition by identity (what
    /// `--where` prunes on) and those only other transforms partition.
    fn pruning(&self, schema: &Schema, names: &[(i32, String)]) -> Pruning {
        let mut specs: Vec<i32> = self
            .metadata
            .partition_specs
            .iter()
            .map(|s| s.spec_id)
            .collect();
        if specs.is_empty() && self.metadata.partition_spec.is_some() {
            specs.push(0);
        }
        let mut pruning = Pruning::default();
        let mut other: Vec<(String, String)> = Vec::new();
        for field in specs
            .into_iter()
            .filter_map(|id| self.metadata.spec_fields(id))
            .flatten()
        {
            let Some((_, name)) = names.iter().find(|(id, _)| *id == field.source_id) else {
                continue;
            };
            if field.transform == "identity" {
                if !pruning.identity.iter().any(|f| f.name() == name) {
                    if let Ok(column) = schema.field_with_name(name) {
                        pruning.identity.push(column.clone());
                    }
                }
            } else if field.transform != "void"
                && !other
                    .iter()
                    .any(|(n, t)| n == name && *t == field.transform)
            {
                other.push((name.clone(), field.transform.clone()));
            }
        }
        other.retain(|(name, _)| !pruning.identity.iter().any(|f| f.name() == name));
        pruning.transformed = other;
        pruning
    }

    /// A manifest entry's identity partition values, by source column.
    fn identity_values(
        &self,
        names: &[(i32, String)],
        entry: &Entry,
    ) -> Vec<(String, Option<String>)> {
        let Some(fields) = self.metadata.spec_fields(entry.spec_id) else {
            return Vec::new();
        };
        let by_position = fields.len() == entry.partition.len();
        fields
            .iter()
            .enumerate()
            .filter(|(_, f)| f.transform == "identity")
            .filter_map(|(i, f)| {
                let column = names.iter().find(|(id, _)| *id == f.source_id)?.1.clone();
                let value = if by_position {
                    entry.partition.get(i).map(|(_, v)| v.clone())
                } else {
                    entry
                        .partition
                        .iter()
                        .find(|(n, _)| *n == f.name)
                        .map(|(_, v)| v.clone())
                }?;
                Some((column, value))
            })
            .collect()
    }

    /// Sorts the entries of snapshot `id`'s manifests: the live data files
    /// (each path once) and the position delete files that apply to one of
    /// them. Equality deletes that apply, deletion vectors and unknown
    /// contents are refused.
    pub(super) fn scan(&self, id: i64, entries: Vec<Entry>) -> Result<Scan> {
        let mut data: Vec<DataFile> = Vec::new();
        let mut by_path: HashMap<Path, usize> = HashMap::new();
        let mut position_deletes: Vec<Entry> = Vec::new();
        let mut equality_deletes: Vec<Entry> = Vec::new();
        for entry in entries {
            if entry.status == STATUS_DELETED {
                continue;
            }
            match entry.content {
                CONTENT_DATA => {
                    let path = self.store_path(&entry.file_path);
                    if by_path.contains_key(&path) {
                        continue;
                    }
                    by_path.insert(path.clone(), data.len());
                    data.push(DataFile {
                        entry,
                        path,
                        deleted: Vec::new(),
                    });
                }
                CONTENT_POSITION_DELETES => position_deletes.push(entry),
                CONTENT_EQUALITY_DELETES => equality_deletes.push(entry),
                other => {
                    return Err(self.error(format!(
                        "snapshot {id} lists {} with content {other}, which is not known",
                        entry.file_path
                    )))
                }
            }
        }
        self.refuse_equality_deletes(id, &data, &equality_deletes)?;
        if let Some(dv) = position_deletes
            .iter()
            .find(|d| d.file_format.eq_ignore_ascii_case("PUFFIN"))
        {
            return Err(self.error(format!(
                "snapshot {id} has deletion vectors (format v3, e.g. {}), which are not read",
                self.location.display(&self.store_path(&dv.file_path))
            )));
        }
        let deletes: Vec<Entry> = position_deletes
            .into_iter()
            .filter(|d| {
                data.iter()
                    .any(|f| self.position_delete_applies(d, &f.entry))
            })
            .collect();
        Ok(Scan {
            snapshot_id: id,
            data,
            by_path,
            deletes,
        })
    }

    /// The live data files of a scan, each with the rows its position
    /// deletes remove: `rows[i]` holds the (data file, position) rows of
    /// `scan.deletes()[i]`.
    pub(super) fn live_files(
        &self,
        scan: Scan,
        rows: Vec<Vec<(String, u64)>>,
        columns: &Columns,
    ) -> Result<Vec<TableFile>> {
        let names = &columns.mapping.by_field_id;
        let Scan {
            snapshot_id: id,
            mut data,
            by_path,
            deletes,
        } = scan;
        let mut removed = 0usize;
        for (delete, rows) in deletes.iter().zip(rows) {
            let mut last: Option<(String, Option<usize>)> = None;
            for (file_path, pos) in rows {
                let target = match &last {
                    Some((p, target)) if *p == file_path => *target,
                    _ => {
                        let target = by_path.get(&self.store_path(&file_path)).copied();
                        last = Some((file_path, target));
                        target
                    }
                };
                if let Some(i) = target {
                    if self.position_delete_applies(delete, &data[i].entry) {
                        data[i].deleted.push(pos);
                        removed += 1;
                    }
                }
            }
        }
        let mut files = Vec::with_capacity(data.len());
        for mut file in data {
            file.deleted.sort_unstable();
            file.deleted.dedup();
            let format = match file.entry.file_format.to_ascii_uppercase().as_str() {
                "PARQUET" => Format::Parquet,
                "ORC" => Format::Orc,
                "AVRO" => Format::Avro,
                other => {
                    return Err(self.error(format!(
                        "data file {} is in format {other}, which is not read",
                        file.entry.file_path
                    )))
                }
            };
            files.push(TableFile {
                path: file.path,
                size: file.entry.file_size.max(0) as u64,
                format,
                rows: u64::try_from(file.entry.record_count).ok(),
                partition_values: Vec::new(),
                deleted: file.deleted,
                added_in: file.entry.snapshot_id,
                identity_values: self.identity_values(names, &file.entry),
            });
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        tracing::debug!(
            snapshot = id,
            files = files.len(),
            deleted_rows = removed,
            "iceberg snapshot read"
        );
        Ok(files)
    }

    /// Whether a position delete file applies to a data file: a data
    /// sequence number not after the delete's, and the same partition spec
    /// (or an unpartitioned delete), and the data file it names if it names one.
    fn position_delete_applies(&self, delete: &Entry, data: &Entry) -> bool {
        data.sequence_number <= delete.sequence_number
            && (data.spec_id == delete.spec_id || self.metadata.is_unpartitioned(delete.spec_id))
            && delete
                .referenced_data_file
                .as_ref()
                .is_none_or(|r| self.store_path(r) == self.store_path(&data.file_path))
    }

    /// Fails when an equality delete file applies to a live data file (one
    /// with an earlier data sequence number in the same partition spec).
    fn refuse_equality_deletes(&self, id: i64, data: &[DataFile], deletes: &[Entry]) -> Result<()> {
        let applying: Vec<&Entry> = deletes
            .iter()
            .filter(|d| {
                data.iter().any(|f| {
                    f.entry.sequence_number < d.sequence_number
                        && (f.entry.spec_id == d.spec_id
                            || self.metadata.is_unpartitioned(d.spec_id))
                })
            })
            .collect();
        match applying.first() {
            None => Ok(()),
            Some(first) => Err(self.error(format!(
                "snapshot {id} has equality deletes ({} file(s), e.g. {}), which are not applied; \
                 compact the table (rewrite_data_files) or read an older snapshot",
                applying.len(),
                self.location.display(&self.store_path(&first.file_path))
            ))),
        }
    }

    /// Where a file the metadata names (an absolute URI, written when the
    /// table was at its metadata's `location`) is in the store now.
    pub(super) fn store_path(&self, uri: &str) -> Path {
        let path = uri_path(uri);
        let base = uri_path(&self.metadata.location).trim_end_matches('/');
        if !base.is_empty() {
            if let Some(rest) = path.strip_prefix(base).and_then(|r| r.strip_prefix('/')) {
                return join(&self.root, rest);
            }
        }
        join(&Path::default(), path)
    }
}

/// What changed up to a snapshot: its files that the commits after the
/// trained snapshot added, by appends and by rewrites.
pub(super) fn changes(snapshot: TableSnapshot, commits: Vec<TableCommit>) -> TableChanges {
    let of_kind = |kind: CommitKind| -> HashSet<i64> {
        commits
            .iter()
            .filter(|c| c.kind == kind)
            .map(|c| c.version)
            .collect()
    };
    let appends = of_kind(CommitKind::Append);
    let rewrites = of_kind(CommitKind::Rewrite);
    let added_by = |ids: &HashSet<i64>| -> Vec<TableFile> {
        snapshot
            .files
            .iter()
            .filter(|f| f.added_in.is_some_and(|id| ids.contains(&id)))
            .cloned()
            .collect()
    };
    let appended = added_by(&appends);
    let rewritten = added_by(&rewrites);
    TableChanges {
        snapshot,
        commits,
        appended,
        rewritten,
    }
}

/// What a snapshot's operation did to the data.
fn commit_kind(operation: &str) -> CommitKind {
    match operation {
        "append" => CommitKind::Append,
        "replace" => CommitKind::Compaction,
        "overwrite" | "delete" => CommitKind::Rewrite,
        _ => CommitKind::Metadata,
    }
}

/// The path part of a URI (`file:/a/b`, `file:///a/b`, `s3://bucket/a/b`,
/// `hdfs://nn:8020/a/b` → `/a/b`), or the string itself when it has no scheme.
pub(super) fn uri_path(uri: &str) -> &str {
    if let Some((_, rest)) = uri.split_once("://") {
        return rest.find('/').map_or("", |i| &rest[i..]);
    }
    match uri.split_once(':') {
        Some((scheme, rest))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.') =>
        {
            rest
        }
        _ => uri,
    }
}

/// `base` with the `/`-separated parts of `rest` appended, each taken as
/// the file's own name (as a listing of the store names it: a `%` in a
/// partition directory stays a `%`).
pub(super) fn join(base: &Path, rest: &str) -> Path {
    rest.split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .fold(base.clone(), |path, part| {
            path.join(PathPart::parse(part).unwrap_or_else(|_| PathPart::from(part)))
        })
}

#[cfg(test)]
mod tests {
    //! The plan over structs built by hand: no store is read and no Avro
    //! written (the location only names files).

    use std::collections::BTreeMap;

    use object_store::memory::InMemory;
    use serde_json::json;

    use super::super::metadata::{
        IcebergSchema, NestedField, PartitionField, PartitionSpec, SnapshotLogEntry,
    };
    use super::*;

    /// Where the metadata says the table was written.
    const WRITTEN_AT: &str = "file:/warehouse/db/t";

    fn field(id: i32, name: &str, ty: &str) -> NestedField {
        NestedField {
            id,
            name: name.to_string(),
            ty: json!(ty),
            initial_default: None,
        }
    }

    fn spec(spec_id: i32, fields: &[(&str, &str, i32)]) -> PartitionSpec {
        PartitionSpec {
            spec_id,
            fields: fields
                .iter()
                .map(|(transform, name, source_id)| PartitionField {
                    transform: transform.to_string(),
                    name: name.to_string(),
                    source_id: *source_id,
                })
                .collect(),
        }
    }

    fn snapshot(id: i64, parent: Option<i64>, ts: i64, op: &str) -> Snapshot {
        Snapshot {
            snapshot_id: id,
            parent_snapshot_id: parent,
            timestamp_ms: ts,
            manifest_list: Some(format!("{WRITTEN_AT}/metadata/snap-{id}.avro")),
            manifests: None,
            summary: BTreeMap::from([("operation".to_string(), json!(op))]),
            schema_id: Some(0),
        }
    }

    /// A v2 table of columns `id` and `label`, partitioned by `label`
    /// (spec 1; spec 0 is unpartitioned), with snapshots 1 (append, t=1000),
    /// 2 (delete, t=2000), 3 (append, t=3000) and 4 (overwrite, t=4000,
    /// not in the ancestry of the current snapshot 3).
    fn table() -> Table {
        Table {
            location: Location::new(
                Arc::new(InMemory::new()),
                Path::from("copied/t"),
                "memory://",
            ),
            root: Path::from("copied/t"),
            metadata_path: Path::from("copied/t/metadata/v3.metadata.json"),
            metadata: TableMetadata {
                format_version: 2,
                location: WRITTEN_AT.to_string(),
                schemas: vec![IcebergSchema {
                    schema_id: 0,
                    fields: vec![field(1, "id", "long"), field(2, "label", "string")],
                }],
                schema: None,
                current_schema_id: Some(0),
                partition_specs: vec![
                    spec(0, &[]),
                    spec(
                        1,
                        &[("identity", "label", 2), ("bucket[4]", "id_bucket", 1)],
                    ),
                ],
                partition_spec: None,
                current_snapshot_id: Some(3),
                snapshots: vec![
                    snapshot(1, None, 1000, "append"),
                    snapshot(2, Some(1), 2000, "delete"),
                    snapshot(3, Some(2), 3000, "append"),
                    snapshot(4, Some(1), 4000, "overwrite"),
                ],
                snapshot_log: [(1000, 1), (2000, 2), (3000, 3)]
                    .into_iter()
                    .map(|(timestamp_ms, snapshot_id)| SnapshotLogEntry {
                        timestamp_ms,
                        snapshot_id,
                    })
                    .collect(),
            },
        }
    }

    /// A live entry of spec 1 with `label` = `label`.
    fn entry(content: i32, name: &str, sequence_number: i64, added: i64) -> Entry {
        Entry {
            status: 1,
            snapshot_id: Some(added),
            sequence_number,
            content,
            file_path: format!("{WRITTEN_AT}/data/{name}"),
            file_format: "PARQUET".to_string(),
            record_count: 10,
            file_size: 100,
            referenced_data_file: None,
            spec_id: 1,
            partition: vec![
                ("label".to_string(), Some("x".to_string())),
                ("id_bucket".to_string(), Some("3".to_string())),
            ],
        }
    }

    fn data(name: &str, sequence_number: i64, added: i64) -> Entry {
        entry(CONTENT_DATA, name, sequence_number, added)
    }

    fn delete(name: &str, sequence_number: i64) -> Entry {
        entry(CONTENT_POSITION_DELETES, name, sequence_number, 2)
    }

    fn row(name: &str, pos: u64) -> (String, u64) {
        (format!("file:///warehouse/db/t/data/{name}"), pos)
    }

    /// The (file name, deleted rows) of each live file the plan keeps.
    fn plan(
        table: &Table,
        entries: Vec<Entry>,
        rows: impl Fn(&Entry) -> Vec<(String, u64)>,
    ) -> Result<Vec<(String, Vec<u64>)>> {
        let scan = table.scan(3, entries)?;
        let read = scan.deletes().iter().map(rows).collect();
        let columns = table.columns(table.metadata.snapshot(3))?;
        let files = table.live_files(scan, read, &columns)?;
        Ok(files
            .into_iter()
            .map(|f| (f.path.filename().unwrap_or("").to_string(), f.deleted))
            .collect())
    }

    #[test]
    fn a_version_chooses_its_snapshot() {
        let table = table();
        let id = |at| table.select(at).map(|s| s.map(|s| s.snapshot_id));
        assert_eq!(id(TableVersion::Latest).expect("latest"), Some(3));
        assert_eq!(id(TableVersion::SnapshotId(2)).expect("by id"), Some(2));
        assert_eq!(id(TableVersion::Timestamp(2500)).expect("as of"), Some(2));
        assert_eq!(id(TableVersion::Timestamp(3000)).expect("as of"), Some(3));

        let missing = id(TableVersion::SnapshotId(9)).expect_err("no snapshot 9");
        let message = missing.to_string();
        assert!(message.contains("there is no snapshot 9"), "{message}");
        assert!(message.contains("its snapshots are 4 ("), "{message}");
        let early = id(TableVersion::Timestamp(500)).expect_err("before the first");
        assert!(
            early
                .to_string()
                .contains("no snapshot was committed at or before"),
            "{early}"
        );
        let version = id(TableVersion::Version(3)).expect_err("not a Delta table");
        assert!(version.to_string().contains("--snapshot-id"), "{version}");

        let mut empty = table;
        empty.metadata.current_snapshot_id = Some(-1);
        assert_eq!(
            empty
                .select(TableVersion::Latest)
                .expect("none")
                .map(|s| s.snapshot_id),
            None
        );
    }

    #[test]
    fn position_deletes_apply_by_sequence_number() {
        let table = table();
        let entries = vec![
            data("a.parquet", 1, 1),
            delete("d.parquet", 2),
            data("b.parquet", 3, 3),
            // Deleted in this snapshot, and a second entry of a live file.
            Entry {
                status: STATUS_DELETED,
                ..data("gone.parquet", 1, 1)
            },
            data("a.parquet", 1, 1),
        ];
        let files = plan(&table, entries, |_| {
            vec![
                row("a.parquet", 3),
                row("a.parquet", 1),
                row("a.parquet", 3),
                // b came after the delete: not deleted by it.
                row("b.parquet", 0),
                // Not a live file.
                row("gone.parquet", 0),
            ]
        })
        .expect("planned");
        assert_eq!(
            files,
            vec![
                ("a.parquet".to_string(), vec![1, 3]),
                ("b.parquet".to_string(), vec![]),
            ]
        );
    }

    #[test]
    fn a_delete_applies_within_its_spec_and_to_the_file_it_names() {
        let table = table();
        let other_spec = Entry {
            spec_id: 0,
            partition: Vec::new(),
            ..data("u.parquet", 1, 1)
        };
        let named = Entry {
            referenced_data_file: Some(format!("{WRITTEN_AT}/data/b.parquet")),
            ..delete("named.parquet", 5)
        };
        // A delete of spec 1 skips the file of spec 0; the unpartitioned
        // spec's delete applies to every spec.
        let unpartitioned = Entry {
            spec_id: 0,
            ..delete("all.parquet", 5)
        };
        let entries = vec![
            data("a.parquet", 1, 1),
            data("b.parquet", 1, 1),
            other_spec,
            named,
            unpartitioned,
        ];
        let files = plan(&table, entries, |d| {
            if d.file_path.ends_with("named.parquet") {
                vec![
                    row("a.parquet", 0),
                    row("b.parquet", 0),
                    row("u.parquet", 0),
                ]
            } else {
                vec![row("u.parquet", 7)]
            }
        })
        .expect("planned");
        assert_eq!(
            files,
            vec![
                ("a.parquet".to_string(), vec![]),
                ("b.parquet".to_string(), vec![0]),
                ("u.parquet".to_string(), vec![7]),
            ]
        );

        // A delete that applies to no live file is not read at all.
        let late = table
            .scan(3, vec![data("a.parquet", 6, 3), delete("early.parquet", 2)])
            .expect("scanned");
        assert!(late.deletes().is_empty());
    }

    #[test]
    fn equality_deletes_and_deletion_vectors_are_refused() {
        let table = table();
        let equality = entry(CONTENT_EQUALITY_DELETES, "eq.parquet", 2, 2);
        let err = table
            .scan(3, vec![data("a.parquet", 1, 1), equality.clone()])
            .err()
            .expect("refused");
        let message = err.to_string();
        assert!(message.contains("equality deletes (1 file(s)"), "{message}");
        assert!(message.contains("copied/t/data/eq.parquet"), "{message}");
        // Written before every data file: nothing to apply it to.
        assert!(table
            .scan(3, vec![data("a.parquet", 3, 3), equality])
            .is_ok());

        let puffin = Entry {
            file_format: "puffin".to_string(),
            ..delete("dv.puffin", 2)
        };
        let err = table
            .scan(3, vec![data("a.parquet", 1, 1), puffin])
            .err()
            .expect("refused");
        assert!(err.to_string().contains("deletion vectors"), "{err}");

        let unknown = Entry {
            file_format: "LANCE".to_string(),
            ..data("a.lance", 1, 1)
        };
        let err = plan(&table, vec![unknown], |_| Vec::new()).expect_err("refused");
        assert!(err.to_string().contains("in format LANCE"), "{err}");
    }

    #[test]
    fn identity_partitions_are_pruned_on_and_other_transforms_named() {
        let table = table();
        let columns = table.columns(table.metadata.snapshot(3)).expect("columns");
        let names: Vec<&str> = columns
            .pruning
            .identity
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["label"]);
        assert_eq!(
            columns.pruning.transformed,
            [("id".to_string(), "bucket[4]".to_string())]
        );

        let scan = table.scan(3, vec![data("a.parquet", 1, 1)]).expect("scan");
        let files = table
            .live_files(scan, Vec::new(), &columns)
            .expect("planned");
        assert_eq!(
            files[0].identity_values,
            [("label".to_string(), Some("x".to_string()))]
        );
        assert_eq!(files[0].path, Path::from("copied/t/data/a.parquet"));
        assert_eq!((files[0].rows, files[0].size), (Some(10), 100));
    }

    #[test]
    fn commits_since_a_snapshot_walk_its_ancestry() {
        let table = table();
        let (target, commits) = table
            .commits_since(1, TableVersion::Latest)
            .expect("ancestor");
        assert_eq!(target.snapshot_id, 3);
        let kinds: Vec<(i64, CommitKind)> = commits
            .iter()
            .map(|c| (c.version, c.kind.clone()))
            .collect();
        assert_eq!(kinds, [(2, CommitKind::Rewrite), (3, CommitKind::Append)]);

        // Snapshot 4 branched off 1: 2 is not among its ancestors.
        let err = table
            .commits_since(2, TableVersion::SnapshotId(4))
            .expect_err("not an ancestor");
        assert!(
            err.to_string().contains("not an ancestor of snapshot 4"),
            "{err}"
        );

        // Files by the commit that added them.
        let file = |name: &str, added: i64| TableFile {
            path: Path::from(name),
            size: 1,
            format: Format::Parquet,
            rows: None,
            partition_values: Vec::new(),
            deleted: Vec::new(),
            added_in: Some(added),
            identity_values: Vec::new(),
        };
        let columns = table.columns(Some(target)).expect("columns");
        let snapshot = table.snapshot(
            Some(target),
            columns,
            vec![file("old", 1), file("rewritten", 2), file("new", 3)],
        );
        let changes = changes(snapshot, commits);
        let paths = |files: &[TableFile]| -> Vec<String> {
            files.iter().map(|f| f.path.to_string()).collect()
        };
        assert_eq!(paths(&changes.appended), ["new"]);
        assert_eq!(paths(&changes.rewritten), ["rewritten"]);
        assert_eq!(changes.snapshot.version, 3);
    }
}
