//! The plan of a read ([`ReadPlan`]): which columns every split of a dataset
//! is read as, computed columns and the row filter included; a plain value
//! that travels with the job.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};

use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::{Format, FormatOptions};
use crate::row_filter::{self, Pred, RowFilter};
use crate::schema::view_type;
use crate::types::ColumnMapping;

/// What to read from every split of a dataset: a plain value that travels with the job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadPlan {
    /// Merged data columns (before projection).
    pub data_schema: SchemaRef,
    /// Partition columns, typed.
    pub partition_fields: Vec<Field>,
    /// Output columns in order; data and partition columns may be mixed.
    pub columns: Vec<String>,
    /// Parsing options.
    pub options: FormatOptions,
    /// How the files' columns map to the data columns (tables with renamed columns).
    #[serde(default, skip_serializing_if = "ColumnMapping::is_identity")]
    pub file_columns: ColumnMapping,
    /// String and binary data columns come out as views (`Utf8View`,
    /// `BinaryView`): Parquet decodes them so without copying each value
    /// into one contiguous buffer. Planned only for Parquet data (and
    /// tables of Parquet files): other formats decode to plain strings,
    /// which a wrap into views and a copy back for an exec trainer would
    /// only make slower. Partition columns keep their types.
    #[serde(default = "views_by_default")]
    pub string_view: bool,
    /// Only rows this filter keeps are read (`--filter`); offsets into a
    /// split then count the rows kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<RowFilter>,
    /// A job that mixes several sources: how each is read, by the index a
    /// split names (`Split::source`), the first one included; empty for one
    /// source (this plan is its plan). Every plan's output has one schema.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<ReadPlan>,
    /// The sources' names, by index (the values of `source_column`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_names: Vec<String>,
    /// The column, appended last, that holds each row's source name
    /// (`--source-column`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_column: Option<String>,
    /// Output columns computed from others (`--columns "label, hash(user) %
    /// 1000 AS user_bucket"`), each named in `columns` where it stands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub derived: Vec<DerivedColumn>,
    /// The session time zone the computed columns compute timestamps in
    /// (`--timezone`).
    #[serde(default, skip_serializing_if = "row_filter::SessionTz::is_utc")]
    pub timezone: row_filter::SessionTz,
}

/// A column computed from the dataset's columns with a Spark SQL expression.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DerivedColumn {
    /// Its name in the output.
    pub name: String,
    /// The expression, as written.
    pub expr: String,
    /// The type of its values.
    pub data_type: DataType,
}

/// The output columns `columns` asks for, and those it computes: plain
/// names as they are; a list with expressions parsed as Spark reads a
/// select list (the items were cut at commas, so they are joined again).
fn plan_columns(
    cols: &[String],
    full: &Schema,
    dataset: &Dataset,
) -> Result<(Vec<String>, Vec<DerivedColumn>)> {
    if cols.iter().all(|c| full.field_with_name(c).is_ok()) {
        return Ok((cols.to_vec(), Vec::new()));
    }
    // A filter that left out every partition leaves no file whose columns
    // could be checked: nothing is read, and the columns asked stay as they
    // are (the job then says that the filter kept no row).
    if dataset.splits.is_empty() && dataset.data_schema.fields().is_empty() {
        return Ok((cols.to_vec(), Vec::new()));
    }
    let items = row_filter::parse_columns(&cols.join(", ")).map_err(|e| match e {
        row_filter::RowFilterError::UnknownColumn { column, .. } => {
            unknown_column(&column, full, dataset)
        }
        other => invalid_columns(other.to_string()),
    })?;
    let mut columns = Vec::with_capacity(items.len());
    let mut derived = Vec::new();
    for item in items {
        if columns.contains(&item.name) {
            return Err(invalid_columns(format!(
                "the column {} is named twice",
                item.name
            )));
        }
        match item.expr {
            None => {
                let field = column_named(full, &item.name)
                    .ok_or_else(|| unknown_column(&item.name, full, dataset))?;
                columns.push(field.name().clone());
            }
            Some(expr) => {
                let column = derived_column(item.name, expr, full, dataset)?;
                columns.push(column.name.clone());
                derived.push(column);
            }
        }
    }
    Ok((columns, derived))
}

/// The error for a column `c` that `full` does not have.
fn unknown_column(c: &str, full: &Schema, dataset: &Dataset) -> Error {
    Error::UnknownColumn {
        column: c.to_string(),
        path: dataset.location.url(),
        available: full
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The error for a `--columns` that cannot be read, saying `reason`.
fn invalid_columns(reason: String) -> Error {
    Error::InvalidOption {
        option: "--columns".to_string(),
        reason: reason
            .strip_prefix("--filter: ")
            .map(str::to_string)
            .unwrap_or(reason),
    }
}

/// The column of `full` named `name`: exactly, else without regard to case.
fn column_named<'a>(full: &'a Schema, name: &str) -> Option<&'a Field> {
    full.field_with_name(name).ok().or_else(|| {
        full.fields()
            .iter()
            .find(|f| f.name().eq_ignore_ascii_case(name))
            .map(|f| f.as_ref())
    })
}

/// The column `name` computed by `expr` (`expr AS name`), typed; a name the
/// dataset has already is refused.
fn derived_column(
    name: String,
    expr: String,
    full: &Schema,
    dataset: &Dataset,
) -> Result<DerivedColumn> {
    if full.field_with_name(&name).is_ok() {
        return Err(invalid_columns(format!(
            "`{expr} AS {}`: the dataset has a column {} already; name the computed one otherwise",
            name, name
        )));
    }
    let computed = row_filter::ComputedColumn::bind(&expr, full, dataset.options.timezone)
        .map_err(|e| match e {
            row_filter::RowFilterError::UnknownColumn { column, .. } => {
                unknown_column(&column, full, dataset)
            }
            other => invalid_columns(other.to_string()),
        })?;
    Ok(DerivedColumn {
        name,
        expr,
        data_type: computed.data_type().clone(),
    })
}

fn views_by_default() -> bool {
    true
}

/// Whether a dataset's strings are read as views: its files are Parquet
/// (a dataset with no file yet, a followed source, goes by its format).
fn reads_views(dataset: &Dataset) -> bool {
    match dataset.format {
        Some(format) => format == Format::Parquet,
        None => dataset.splits.iter().all(|s| s.format == Format::Parquet),
    }
}

impl ReadPlan {
    /// The same plan, its readers cutting decoded batches at `batch_bytes`
    /// too (each source of a mix alike).
    pub fn with_batch_bytes(mut self, batch_bytes: Option<u64>) -> Self {
        self.options.batch_bytes = batch_bytes;
        self.sources = self
            .sources
            .into_iter()
            .map(|s| s.with_batch_bytes(batch_bytes))
            .collect();
        self
    }

    /// Plans the read of `dataset`'s `columns` (all when `None`) in decoded
    /// batches of `batch_size` rows.
    pub fn new(dataset: &Dataset, columns: Option<&[String]>, batch_size: usize) -> Result<Self> {
        let full = dataset.schema();
        let (columns, derived) = match columns {
            Some(cols) => plan_columns(cols, &full, dataset)?,
            None => (
                full.fields().iter().map(|f| f.name().clone()).collect(),
                Vec::new(),
            ),
        };
        let filter = dataset.options.row_filter.clone();
        // With every partition left out there is no file to name the data
        // columns the filter names: nothing is read, nothing to check.
        let pruned_whole = dataset.splits.is_empty() && dataset.data_schema.fields().is_empty();
        if let Some(filter) = &filter {
            match filter.check(&full) {
                Err(row_filter::RowFilterError::UnknownColumn { .. }) if pruned_whole => {}
                checked => checked?,
            }
        }
        let mut options = dataset.options.format_options.clone();
        options.batch_size = batch_size.max(1);
        Ok(ReadPlan {
            filter,
            data_schema: dataset.data_schema.clone(),
            partition_fields: dataset.partition_fields.clone(),
            columns,
            options,
            file_columns: dataset.columns.clone(),
            string_view: reads_views(dataset),
            sources: Vec::new(),
            source_names: Vec::new(),
            source_column: None,
            derived,
            timezone: dataset.options.timezone,
        })
    }

    /// The schema of every batch the plan produces.
    pub fn output_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self.columns.iter().filter_map(|c| self.field(c)).collect();
        if let Some(name) = &self.source_column {
            fields.push(Field::new(name, DataType::Utf8, false));
        }
        Arc::new(Schema::new(fields))
    }

    fn field(&self, name: &str) -> Option<Field> {
        if let Some(d) = self.derived.iter().find(|d| d.name == name) {
            return Some(Field::new(&d.name, d.data_type.clone(), true));
        }
        self.partition_fields
            .iter()
            .find(|f| f.name() == name)
            .cloned()
            .or_else(|| {
                self.data_schema.field_with_name(name).ok().map(|f| {
                    let f = f.clone().with_nullable(true);
                    match view_type(f.data_type()).filter(|_| self.string_view) {
                        Some(view) => f.with_data_type(view),
                        None => f,
                    }
                })
            })
    }

    /// Every column of the dataset, data then partition columns, as the
    /// filter names them.
    fn full_schema(&self) -> Schema {
        let mut fields: Vec<Field> = self
            .data_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(self.partition_fields.iter().cloned());
        Schema::new(fields)
    }

    /// The filter bound to the dataset's columns, and the plan that reads
    /// the columns it needs beside the output columns.
    pub(super) fn filtered(&self) -> Result<Option<(Pred, ReadPlan)>> {
        let Some(filter) = &self.filter else {
            return Ok(None);
        };
        let pred = filter.bind(&self.full_schema())?;
        let mut wider = self.clone();
        let mut needed = Vec::new();
        pred.columns(&mut needed);
        for column in needed {
            if !wider.columns.contains(&column) {
                wider.columns.push(column);
            }
        }
        Ok(Some((pred, wider)))
    }

    /// The plan without computed columns, reading what they need (after
    /// the columns read as they are), and the computed columns bound.
    pub(super) fn computed(&self) -> Result<(ReadPlan, Vec<(String, row_filter::ComputedColumn)>)> {
        let full = self.full_schema();
        let mut base = self.clone();
        base.derived.clear();
        base.columns
            .retain(|c| !self.derived.iter().any(|d| &d.name == c));
        let mut bound = Vec::with_capacity(self.derived.len());
        for d in &self.derived {
            let computed = row_filter::ComputedColumn::bind(&d.expr, &full, self.timezone)?;
            for column in computed.columns() {
                if !base.columns.contains(&column) {
                    base.columns.push(column);
                }
            }
            bound.push((d.name.clone(), computed));
        }
        Ok((base, bound))
    }

    pub(super) fn is_partition(&self, name: &str) -> bool {
        self.partition_fields.iter().any(|f| f.name() == name)
    }
}
