//! Following a table by name (`--catalog`): the catalog is asked again on
//! each poll (an Iceberg table's current metadata file becomes the
//! location read, see [`super::iceberg`]); a partitioned Hive table's new
//! partitions are those its metastore lists, each taken once it holds files.

use std::collections::BTreeSet;

use connectors::{Dataset, DatasetOptions, Location, Report};
use tracing::{info, warn};

use super::{has_schema, FollowError, Follower, Taken};
use crate::catalog::{CatalogError, CatalogTable};
use crate::config::TableRef;
use crate::protocol::follow::FollowPosition;

/// What a Hive table by name holds at the start of its job: the partitions
/// its metastore lists that hold files now (the others are taken once they
/// do).
pub(super) async fn first(
    location: &Location,
    options: &DatasetOptions,
) -> Result<Option<(Dataset, FollowPosition)>, connectors::Error> {
    let dataset = Dataset::open(location.clone(), options.clone()).await?;
    if dataset.files.is_empty() {
        // Its schema is the metastore's partition columns only: wait
        // for a partition that holds files.
        return Ok(None);
    }
    let taken: BTreeSet<String> = dataset
        .files
        .iter()
        .map(|f| f.partition_dir.clone())
        .collect();
    Ok(has_schema(dataset).map(|d| {
        (
            d,
            FollowPosition::Partitions {
                taken: taken.into_iter().collect(),
            },
        )
    }))
}

/// Looks at the metastore's partition list once (as the catalog last
/// answered, in `options`): the partitions not in `taken` that hold files,
/// taken.
pub(super) async fn poll(
    taken: &mut BTreeSet<String>,
    location: &Location,
    options: &DatasetOptions,
) -> Result<Option<Taken>, FollowError> {
    let Some(catalog) = options.catalog_partitions.clone() else {
        return Ok(None);
    };
    let mut fresh = catalog.clone();
    fresh
        .partitions
        .retain(|p| !taken.contains(&partition_name(&catalog.fields, &p.values)));
    if let Some(filter) = &options.partition_filter {
        fresh
            .partitions
            .retain(|p| filter.matches(&catalog.fields, &p.values));
    }
    if fresh.partitions.is_empty() {
        return Ok(None);
    }
    let mut options = options.clone();
    options.catalog_partitions = None;
    let dataset = Dataset::open_partitions(location.clone(), fresh, options)
        .await
        .map_err(FollowError::read("list the table's new partitions"))?;
    let names: BTreeSet<String> = dataset
        .files
        .iter()
        .map(|f| f.partition_dir.clone())
        .collect();
    if names.is_empty() {
        return Ok(None);
    }
    taken.extend(names.iter().cloned());
    let names: Vec<String> = names.into_iter().collect();
    let what = match names.as_slice() {
        [one] => one.clone(),
        many => format!("{} partitions", many.len()),
    };
    info!(partitions = %names.join(", "), files = dataset.files.len(), "following: new partitions in the metastore");
    Ok(Some(Taken {
        dataset,
        position: FollowPosition::Partitions { taken: names },
        committed_ms: None,
        what,
    }))
}

/// How a followed job names a catalog partition: `col=value/col2=value2`,
/// as the dataset names its partition directory.
fn partition_name(fields: &[arrow::datatypes::Field], values: &[Option<String>]) -> String {
    fields
        .iter()
        .zip(values)
        .map(|(f, v)| format!("{}={}", f.name(), v.as_deref().unwrap_or("null")))
        .collect::<Vec<_>>()
        .join("/")
}

/// Takes what the catalog says of the table now: a Hive table's partition
/// list into `options`, or an Iceberg table's current metadata file as the
/// `location` read.
pub(super) fn take(
    found: &CatalogTable,
    location: &mut Location,
    options: &mut DatasetOptions,
) -> Result<(), connectors::Error> {
    let mut fresh = options.clone();
    found.apply(&mut fresh);
    if fresh.catalog_partitions.is_some() {
        options.catalog_partitions = fresh.catalog_partitions;
    } else if found.read_url != location.url() {
        *location = connectors::store::open(&found.read_url)?;
    }
    Ok(())
}

/// Asks the catalog about `table` again while a job waits for its first
/// data: a catalog that does not answer is asked again at the next look.
pub(super) async fn ask_waiting(
    table: &TableRef,
    location: &mut Location,
    options: &mut DatasetOptions,
) -> Result<(), connectors::Error> {
    match crate::catalog::resolve(&table.catalog, &table.name).await {
        Ok(found) => take(&found, location, options),
        Err(e) => {
            warn!(error = %Report(&e), "following: the catalog did not answer; asking again at the next poll");
            Ok(())
        }
    }
}

impl Follower {
    /// Asks the catalog about the followed table again: an Iceberg table's
    /// current metadata file becomes the location read, a Hive table's
    /// partition list the one new partitions are found in.
    pub(super) async fn ask_catalog(&mut self) -> Result<(), FollowError> {
        let Some(table) = &self.table else {
            return Ok(());
        };
        let found = match crate::catalog::resolve(&table.catalog, &table.name).await {
            Ok(found) => found,
            // Down for a while: asked again at the next poll.
            Err(e @ CatalogError::Unreachable { .. }) => {
                warn!(error = %Report(&e), "following: the catalog did not answer; asking again at the next poll");
                return Ok(());
            }
            Err(e) => return Err(FollowError::Catalog(Report(&e).to_string())),
        };
        take(&found, &mut self.location, &mut self.options).map_err(FollowError::read(
            "take the table's new location from the catalog",
        ))?;
        Ok(())
    }
}
