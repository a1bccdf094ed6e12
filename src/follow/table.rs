//! What follows a Delta or Iceberg table has in common (each format's own
//! part is in [`super::delta`] and [`super::iceberg`]): the files its new
//! versions append, read from its log; compactions add nothing, and a
//! commit that rewrote rows stops the job (or as `on-rewrite` says).

use connectors::table::{self, CommitKind, TableFile, TableKind, TableSnapshot, TableVersion};
use connectors::{Dataset, DatasetOptions, Location};
use tracing::{info, warn};

use super::{delta, has_schema, iceberg, FollowError, Taken};
use crate::config::OnRewrite;
use crate::protocol::follow::FollowPosition;

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
    kind: TableKind,
    version: &mut Option<i64>,
    location: &Location,
    options: &DatasetOptions,
    on_rewrite: OnRewrite,
) -> Result<Option<Taken>, FollowError> {
    let latest = table::snapshot(location, kind, TableVersion::Latest)
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
            noun(kind)
        )))?;
    let from = *version;
    *version = Some(to);
    info!(from = ?from, to, files = dataset.files.len(), "following: new {} of the table", noun(kind));
    Ok(Some(Taken {
        dataset,
        position: FollowPosition::Table { version: Some(to) },
        committed_ms,
        what: format!("{} {to}", noun(kind)),
    }))
}

/// The files to take of the versions after `since` up to `latest`, and
/// the snapshot they are read from: the appends, unless a commit rewrote
/// rows, which `on_rewrite` decides.
async fn since_version(
    kind: TableKind,
    since: i64,
    latest: TableSnapshot,
    location: &Location,
    on_rewrite: OnRewrite,
) -> Result<(Vec<TableFile>, TableSnapshot), FollowError> {
    let at = match kind {
        TableKind::Delta => delta::at(&latest),
        TableKind::Iceberg => iceberg::at(&latest),
    };
    let changes = table_changes(location.clone(), kind, since, at)
        .await
        .map_err(FollowError::read(format!(
            "read the table's commits after {} {since}",
            noun(kind)
        )))?;
    let rewrite = changes
        .commits
        .iter()
        .find(|c| c.kind == CommitKind::Rewrite);
    match (rewrite, on_rewrite) {
        (None, _) => Ok((changes.appended, changes.snapshot)),
        (Some(bad), OnRewrite::Fail) => Err(FollowError::Rewrite {
            url: location.url(),
            noun: noun(kind),
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

/// What the table's log calls one of its versions.
fn noun(kind: TableKind) -> &'static str {
    match kind {
        TableKind::Delta => delta::NOUN,
        TableKind::Iceberg => iceberg::NOUN,
    }
}
