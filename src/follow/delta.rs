//! Following a Delta table (see [`super::table`] for what all tables
//! share): a version is one file of `_delta_log/`, looked for before the
//! log is read, and a streaming query creates the log before its first
//! commit.

use connectors::table::{self, TableKind, TableSnapshot, TableVersion};
use connectors::{Dataset, DatasetOptions, Location};
use object_store::ObjectStoreExt;

use super::{table as follow_table, FollowError, Taken};
use crate::config::OnRewrite;
use crate::protocol::follow::FollowPosition;

/// What a Delta table is to what all tables share.
const DELTA: follow_table::Kind = follow_table::Kind {
    table: TableKind::Delta,
    noun: "version",
    at,
};

/// What a Delta table holds at the start of its job: its current version,
/// once it has one.
pub(super) async fn first(
    location: &Location,
    options: &DatasetOptions,
) -> Result<Option<(Dataset, FollowPosition)>, connectors::Error> {
    if !has_version(location).await? {
        return Ok(None);
    }
    follow_table::first(location, options).await
}

/// Looks at the table once: nothing unless the version after `version` is
/// committed, else what the versions after it append.
pub(super) async fn poll(
    version: &mut Option<i64>,
    location: &Location,
    options: &DatasetOptions,
    on_rewrite: OnRewrite,
) -> Result<Option<Taken>, FollowError> {
    // A Delta table's next version is one file: look for it before
    // reading the log.
    if let Some(v) = *version {
        let next = v.saturating_add(1);
        let found = has(location, next)
            .await
            .map_err(FollowError::read(format!(
                "look for version {next} of the table"
            )))?;
        if !found {
            return Ok(None);
        }
    }
    follow_table::poll(&DELTA, version, location, options, on_rewrite).await
}

/// The version the changes up to `latest` are read at.
fn at(latest: &TableSnapshot) -> TableVersion {
    TableVersion::Version(latest.version.max(0) as u64)
}

/// Whether a Delta table's log holds a version yet (a streaming query
/// creates `_delta_log/` before its first commit).
async fn has_version(location: &Location) -> Result<bool, connectors::Error> {
    let log = location.root.clone().join(table::delta::LOG_DIR);
    let listed = location
        .store
        .list_with_delimiter(Some(&log))
        .await
        .map_err(|e| connectors::Error::from_store(location.display(&log), e))?;
    Ok(listed.objects.iter().any(|o| {
        let name = o.location.filename().unwrap_or_default();
        name.ends_with(".json") || name.ends_with(".parquet")
    }))
}

/// Whether version `version` of the Delta table at `location` is committed
/// (its log file exists).
async fn has(location: &Location, version: i64) -> Result<bool, connectors::Error> {
    let path = location
        .root
        .clone()
        .join(table::delta::LOG_DIR)
        .join(format!("{version:020}.json"));
    match location.store.head(&path).await {
        Ok(_) => Ok(true),
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(connectors::Error::from_store(location.display(&path), e)),
    }
}
