//! Several sources mixed by weight in one job (`sluice train A B --weights 3,1`):
//! each source opened and split as it would be alone, their columns checked to
//! agree, and one dataset made of all their splits (each naming its source),
//! whose location reads every split from its own source. How the splits are
//! cut, passed over and interleaved is [`plan`].

pub mod plan;

use arrow::datatypes::SchemaRef;
use connectors::{Dataset, DatasetOptions, ReadPlan};

use crate::config::mix::MixSource;
use crate::config::MixConfig;

pub use plan::apply;

/// Sources whose columns cannot be read as one.
#[derive(Debug, thiserror::Error)]
pub enum MixError {
    /// A column has another type in another source.
    #[error("several sources: column {} is {} in {} but {} in {}; the sources must agree on each column read (or name the columns to read with --columns)", .0.column, .0.first_type, .0.first, .0.other_type, .0.other)]
    TypeClash(Box<Clash>),
    /// A column of one source is not in another.
    #[error("several sources: column {column} is in {has} but not in {lacks} (whose columns are {columns}); name the columns every source has with --columns")]
    Missing {
        /// The column.
        column: String,
        /// A source that has it.
        has: String,
        /// A source that has not.
        lacks: String,
        /// The columns of `lacks`.
        columns: String,
    },
    /// `--epoch-rows` over a source whose rows are not known before reading
    /// (found when the sources are opened, the file shown whole).
    #[error("--epoch-rows: the rows of {path} (source {name}) are not known before it is read (text files); --epoch-rows needs row counts (Parquet, ORC, tables)")]
    UnknownRows {
        /// The source.
        name: String,
        /// A file of it.
        path: String,
    },
    /// A source cannot be planned (a column `--columns` names that it lacks).
    #[error("cannot plan the read of source {name}")]
    Plan {
        /// The source.
        name: String,
        /// Why, naming the column or file (boxed: it is large).
        #[source]
        source: Box<connectors::Error>,
    },
    /// A source cannot be opened or listed.
    #[error("cannot open source {name}")]
    Open {
        /// The source.
        name: String,
        /// Why, naming the path (boxed: it is large).
        #[source]
        source: Box<connectors::Error>,
    },
    /// No source at all.
    #[error("several sources: none given")]
    NoSource,
    /// A source with a `where` or `filter` of its own cannot be opened.
    #[error("source {name}: {cause}")]
    Source {
        /// The source.
        name: String,
        /// Why.
        cause: Box<connectors::Error>,
    },
}

/// A column whose type differs between two sources.
#[derive(Debug)]
pub struct Clash {
    /// The column.
    pub column: String,
    /// The first source.
    pub first: String,
    /// Its type in the first source.
    pub first_type: String,
    /// The source that disagrees.
    pub other: String,
    /// Its type there.
    pub other_type: String,
}

/// The sources of a mixed job, opened: how each is read.
#[derive(Debug, Clone)]
pub struct Mixed {
    /// Each source's plan, in the order of the sources.
    pub plans: Vec<ReadPlan>,
    /// Each source's URL as opened.
    pub urls: Vec<String>,
}

/// Lists every source of `mix`, each read with `options` and its own
/// `where` and `filter`, and makes one dataset of them (see [`combine`]);
/// `check` is asked of each source's dataset once listed (that it is
/// finished, say), and its error ends the opening. With `--epoch-rows`, the
/// rows a source's row filter keeps are counted here, by reading it (see
/// [`count_kept`]). `sluice train` and `sluice master` open their sources so.
pub async fn open<E>(
    mix: &MixConfig,
    options: &DatasetOptions,
    columns: Option<&[String]>,
    batch_size: usize,
    check: impl Fn(&Dataset) -> Result<(), E>,
) -> Result<(Dataset, Mixed), E>
where
    E: From<MixError>,
{
    let mut datasets = Vec::with_capacity(mix.sources.len());
    for source in &mix.sources {
        let opening = |cause| MixError::Open {
            name: source.name.clone(),
            source: Box::new(cause),
        };
        let fail = |cause| match source.has_own_filter() {
            true => E::from(named(source, cause)),
            false => E::from(opening(cause)),
        };
        let own = source.options(options).map_err(fail)?;
        let location = connectors::store::open(&source.url).map_err(opening)?;
        let dataset = Dataset::open(location, own).await.map_err(fail)?;
        check(&dataset)?;
        datasets.push(dataset);
    }
    Ok(finish(mix, datasets, columns, batch_size).await?)
}

/// Makes one dataset of `datasets`, the sources of `mix` opened (each with
/// [`MixSource::options`]): with `--epoch-rows`, the rows each filtered
/// source keeps are counted first (see [`count_kept`]); then [`combine`].
pub async fn finish(
    mix: &MixConfig,
    mut datasets: Vec<Dataset>,
    columns: Option<&[String]>,
    batch_size: usize,
) -> Result<(Dataset, Mixed), MixError> {
    for (source, dataset) in mix.sources.iter().zip(&mut datasets) {
        if source.has_own_filter() {
            // The filter checked against this source's columns, the error naming it.
            ReadPlan::new(dataset, columns, batch_size).map_err(|cause| named(source, cause))?;
        }
        if mix.epoch_rows.is_some() && dataset.options.row_filter.is_some() {
            count_kept(dataset, columns, batch_size)
                .await
                .map_err(|cause| named(source, cause))?;
        }
        if let (Some(_), Some(split)) = (
            mix.epoch_rows,
            dataset.splits.iter().find(|s| s.rows.is_none()),
        ) {
            return Err(MixError::UnknownRows {
                name: source.name.clone(),
                path: dataset.location.display(&split.object_path()),
            });
        }
    }
    combine(mix, datasets, columns, batch_size)
}

/// `cause` of opening `source`, naming it where it has a filter of its own
/// (whose column or syntax the error may be about).
pub fn named(source: &MixSource, cause: connectors::Error) -> MixError {
    match source.has_own_filter() {
        true => MixError::Source {
            name: source.name.clone(),
            cause: Box::new(cause),
        },
        false => MixError::Plan {
            name: source.name.clone(),
            source: Box::new(cause),
        },
    }
}

/// How many splits [`count_kept`] reads at once.
const COUNTING: usize = 8;

/// Sets each split's rows to those the dataset's row filter keeps, counted
/// by reading them (the columns the filter names and one more): what
/// `--epoch-rows` needs of a filtered source to draw its share.
pub async fn count_kept(
    dataset: &mut Dataset,
    columns: Option<&[String]>,
    batch_size: usize,
) -> Result<(), connectors::Error> {
    use futures::stream::{self, StreamExt, TryStreamExt};
    let plan = ReadPlan::new(dataset, columns, batch_size)?;
    let location = &dataset.location;
    let plan = &plan;
    let counts: Vec<u64> = stream::iter(dataset.splits.iter())
        .map(|split| connectors::read::count_rows(location, split, plan))
        .buffered(COUNTING)
        .try_collect()
        .await?;
    for (split, kept) in dataset.splits.iter_mut().zip(counts) {
        split.rows = Some(kept);
    }
    Ok(())
}

/// Makes one dataset of `datasets` (the sources of `mix`, in order) and
/// checks that the `columns` read (all when `None`) agree across them;
/// `batch_size` is the plans' decoding batch.
pub fn combine(
    mix: &MixConfig,
    datasets: Vec<Dataset>,
    columns: Option<&[String]>,
    batch_size: usize,
) -> Result<(Dataset, Mixed), MixError> {
    let mut plans = Vec::with_capacity(datasets.len());
    for (index, dataset) in datasets.iter().enumerate() {
        let plan = ReadPlan::new(dataset, columns, batch_size).map_err(|cause| MixError::Plan {
            name: mix
                .sources
                .get(index)
                .map_or_else(|| dataset.location.url(), |s| s.name.clone()),
            source: Box::new(cause),
        })?;
        plans.push(plan);
    }
    let names: Vec<&str> = mix.sources.iter().map(|s| s.name.as_str()).collect();
    check_columns(&plans, &names)?;
    // Every source's batches in the first one's column order.
    let order = plans.first().map(|p| p.columns.clone()).unwrap_or_default();
    for plan in &mut plans {
        plan.columns = order.clone();
    }
    let urls: Vec<String> = datasets.iter().map(|d| d.location.url()).collect();
    let mut all = datasets.into_iter().enumerate();
    let Some((_, mut one)) = all.next() else {
        return Err(MixError::NoSource);
    };
    let mut locations = vec![one.location.clone()];
    for (index, dataset) in all {
        let source = u32::try_from(index).unwrap_or(u32::MAX);
        locations.push(dataset.location.clone());
        one.splits.extend(dataset.splits.into_iter().map(|mut s| {
            s.source = source;
            s
        }));
        one.files.extend(dataset.files);
        one.ignored.extend(dataset.ignored);
        one.corrupt.extend(dataset.corrupt);
    }
    one.location = one.location.clone().with_sources(locations);
    Ok((one, Mixed { plans, urls }))
}

/// Checks that every plan reads the columns of the first with the same types.
fn check_columns(plans: &[ReadPlan], names: &[&str]) -> Result<(), MixError> {
    let schemas: Vec<SchemaRef> = plans.iter().map(ReadPlan::output_schema).collect();
    let Some(first) = schemas.first() else {
        return Ok(());
    };
    for (index, other) in schemas.iter().enumerate().skip(1) {
        for (has, lacks, a, b) in [(0, index, first, other), (index, 0, other, first)] {
            for field in a.fields() {
                match b.field_with_name(field.name()) {
                    Err(_) => {
                        let columns: Vec<&str> =
                            b.fields().iter().map(|f| f.name().as_str()).collect();
                        return Err(MixError::Missing {
                            column: field.name().clone(),
                            has: names[has].to_string(),
                            lacks: names[lacks].to_string(),
                            columns: columns.join(", "),
                        });
                    }
                    Ok(theirs) if theirs.data_type() != field.data_type() => {
                        return Err(MixError::TypeClash(Box::new(Clash {
                            column: field.name().clone(),
                            first: names[has].to_string(),
                            first_type: field.data_type().to_string(),
                            other: names[lacks].to_string(),
                            other_type: theirs.data_type().to_string(),
                        })));
                    }
                    Ok(_) => {}
                }
            }
        }
    }
    Ok(())
}
