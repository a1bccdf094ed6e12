//! Following an Iceberg table (see [`super::table`] for what all tables
//! share): its snapshots after the job's, named by snapshot id; a table
//! by name is asked of its catalog again on each poll (see
//! [`super::catalog`]), whose current metadata file is the one read.

use connectors::table::{TableKind, TableSnapshot, TableVersion};
use connectors::{Dataset, DatasetOptions, Location};

use super::{table as follow_table, FollowError, Taken};
use crate::config::OnRewrite;
use crate::protocol::follow::FollowPosition;

/// What an Iceberg table is to what all tables share.
const ICEBERG: follow_table::Kind = follow_table::Kind {
    table: TableKind::Iceberg,
    noun: "snapshot",
    at,
};

/// What an Iceberg table holds at the start of its job: its current snapshot.
pub(super) async fn first(
    location: &Location,
    options: &DatasetOptions,
) -> Result<Option<(Dataset, FollowPosition)>, connectors::Error> {
    follow_table::first(location, options).await
}

/// Looks at the table once: what the snapshots after `version` append.
pub(super) async fn poll(
    version: &mut Option<i64>,
    location: &Location,
    options: &DatasetOptions,
    on_rewrite: OnRewrite,
) -> Result<Option<Taken>, FollowError> {
    follow_table::poll(&ICEBERG, version, location, options, on_rewrite).await
}

/// The snapshot the changes up to `latest` are read at.
fn at(latest: &TableSnapshot) -> TableVersion {
    TableVersion::SnapshotId(latest.version)
}
