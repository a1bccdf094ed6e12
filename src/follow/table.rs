//! What follows a Delta or Iceberg table has in common (each format's own
//! part is in [`super::delta`] and [`super::iceberg`], which hand what
//! differs down as a [`Kind`]): the files its new versions append, read
//! from its log; compactions add nothing, and a commit that rewrote rows
//! stops the job (or as `on-rewrite` says).

use connectors::table::{self, CommitKind, TableFile, TableKind, TableSnapshot, TableVersion};
use connectors::{Dataset, DatasetOptions, Location};
use tracing::{info, warn};

use super::{has_schema, FollowError, Taken};
use crate::config::OnRewrite;
use crate::protocol::follow::FollowPosition;

/// What differs between the kinds of table followed; each kind's module
/// has one.
pub(super) struct Kind {
    /// Which kind of table.
    pub table: TableKind,
    /// What the table's log calls one of its versions.
    pub noun: &'static str,
    /// The version the changes up to the latest snapshot are read at.
    pub at: fn(&TableSnapshot) -> TableVersion,
}

/// What a table holds at the start of its job: its current version.
pub(super) async fn first(
    location: &Location,
    options: &DatasetOptions,
) -> Result<Option<(Dataset, FollowPosition)>, connectors::Error> {
    let dataset = Dataset::open(location.clone(), options.clone()).await?;
    let version = dataset.table.as_ref().map(|t| t.version);
    Ok(has_schema(dataset).map(|d| (d, FollowPosition::Table { version })))
}

/// Looks at the table once: what its versions after `version` append,
/// taken (`version` moves to the latest).
pub(super) async fn poll(
    kind: &Kind,
    version: &mut Option<i64>,
    location: &Location,
    options: &DatasetOptions,
    on_rewrite: OnRewrite,
) -> Result<Option<Taken>, FollowError> {
    let latest = table::snapshot(location, kind.table, TableVersion::Latest)
        .await
        .map_err(FollowError::read("read the table's latest version"))?;
    if *version == Some(latest.version) {
        return Ok(None);
    }
    let (files, snapshot) = match *version {
        None => (latest.files.clone(), latest),
        Some(since) => since_version(kind, since, latest, location, on_rewrite).await?,
    };
    let to = snapshot.version;
    let committed_ms = snapshot.timestamp_ms;
    let dataset = Dataset::from_table(location.clone(), snapshot, Some(files), options.clone())
        .await
        .map_err(FollowError::read(format!(
            "list the files of {} {to}",
            kind.noun
        )))?;
    let from = *version;
    *version = Some(to);
    info!(from = ?from, to, files = dataset.files.len(), "following: new {} of the table", kind.noun);
    Ok(Some(Taken {
        dataset,
        position: FollowPosition::Table { version: Some(to) },
        committed_ms,
        what: format!("{} {to}", kind.noun),
    }))
}

/// The files to take of the versions after `since` up to `latest`, and
/// the snapshot they are read from: the appends, unless a commit rewrote
/// rows, which `on_rewrite` decides.
async fn since_version(
    kind: &Kind,
    since: i64,
    latest: TableSnapshot,
    location: &Location,
    on_rewrite: OnRewrite,
) -> Result<(Vec<TableFile>, TableSnapshot), FollowError> {
    let at = (kind.at)(&latest);
    let changes = table_changes(location.clone(), kind.table, since, at)
        .await
        .map_err(FollowError::read(format!(
            "read the table's commits after {} {since}",
            kind.noun
        )))?;
    let rewrite = changes
        .commits
        .iter()
        .find(|c| c.kind == CommitKind::Rewrite);
    match (rewrite, on_rewrite) {
        (None, _) => Ok((changes.appended, changes.snapshot)),
        (Some(bad), OnRewrite::Fail) => Err(FollowError::Rewrite {
            url: location.url(),
            noun: kind.noun,
            version: bad.version,
            operation: bad.operation.clone(),
        }),
        (Some(bad), OnRewrite::Skip) => {
            let skipped: u64 = changes.rewritten.iter().filter_map(|f| f.rows).sum();
            warn!(version = bad.version, operation = %bad.operation, skipped_rows = skipped, "following: a commit rewrote rows; only the appends are trained (on-rewrite = \"skip\")");
            Ok((changes.appended, changes.snapshot))
        }
        (Some(bad), OnRewrite::Retrain) => {
            warn!(version = bad.version, operation = %bad.operation, "following: a commit rewrote rows; the whole new version is trained again (on-rewrite = \"retrain\")");
            let files = changes.snapshot.files.clone();
            Ok((files, changes.snapshot))
        }
    }
}

/// [`table::changes`] on owned inputs.
async fn table_changes(
    location: Location,
    kind: TableKind,
    since: i64,
    at: TableVersion,
) -> Result<table::TableChanges, connectors::Error> {
    table::changes(&location, kind, since, at).await
}
