//! Iceberg tables, read from their metadata per the Iceberg table spec: the
//! metadata JSON, its snapshots, manifest lists and manifests (Avro).

use object_store::path::Path;

use super::{has_child, TableChanges, TableSnapshot, TableVersion};
use crate::error::{Error, Result};
use crate::store::Location;

/// Whether `path` names an Iceberg metadata file (`*.metadata.json`).
pub fn is_metadata_file(path: &Path) -> bool {
    path.filename()
        .is_some_and(|name| name.ends_with(".metadata.json"))
}

/// Whether the directory at `location` holds an Iceberg table: a `metadata`
/// directory with at least one `*.metadata.json`.
pub async fn is_table(location: &Location) -> Result<bool> {
    if !has_child(location, &location.root, "metadata").await {
        return Ok(false);
    }
    let dir = location.root.clone().join("metadata");
    match location.store.list_with_delimiter(Some(&dir)).await {
        Ok(listed) => Ok(listed.objects.iter().any(|o| is_metadata_file(&o.location))),
        Err(_) => Ok(false),
    }
}

/// Reads snapshot `at` of the Iceberg table at `location`.
pub async fn snapshot(location: &Location, _at: TableVersion) -> Result<TableSnapshot> {
    Err(Error::Table {
        kind: "iceberg",
        path: location.url(),
        reason: "reading Iceberg tables is not built yet".to_string(),
    })
}

/// What changed after snapshot `since` up to snapshot `at`.
pub async fn changes(location: &Location, _since: i64, _at: TableVersion) -> Result<TableChanges> {
    Err(Error::Table {
        kind: "iceberg",
        path: location.url(),
        reason: "reading Iceberg tables is not built yet".to_string(),
    })
}
