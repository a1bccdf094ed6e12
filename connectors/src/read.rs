//! Reading a split into batches of the dataset's schema: file columns conformed
//! to the merged types, missing ones null, typed partition columns appended.

use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use futures::stream::{BoxStream, StreamExt};
use serde::{Deserialize, Serialize};

use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::{self, Format, FormatOptions, ReadRequest};
use crate::read_ahead::ReadAhead;
use crate::row_filter::{self, Pred, RowFilter};
pub use crate::schema::{plain_type, view_type};
use crate::split::Split;
use crate::store::Location;
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
    let unknown = |c: &str| Error::UnknownColumn {
        column: c.to_string(),
        path: dataset.location.url(),
        available: full
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect::<Vec<_>>()
            .join(", "),
    };
    if cols.iter().all(|c| full.field_with_name(c).is_ok()) {
        return Ok((cols.to_vec(), Vec::new()));
    }
    // A filter that left out every partition leaves no file whose columns
    // could be checked: nothing is read, and the columns asked stay as they
    // are (the job then says that the filter kept no row).
    if dataset.splits.is_empty() && dataset.data_schema.fields().is_empty() {
        return Ok((cols.to_vec(), Vec::new()));
    }
    let invalid = |reason: String| Error::InvalidOption {
        option: "--columns".to_string(),
        reason: reason
            .strip_prefix("--filter: ")
            .map(str::to_string)
            .unwrap_or(reason),
    };
    let items = row_filter::parse_columns(&cols.join(", ")).map_err(|e| match e {
        row_filter::RowFilterError::UnknownColumn { column, .. } => unknown(&column),
        other => invalid(other.to_string()),
    })?;
    let mut columns = Vec::with_capacity(items.len());
    let mut derived = Vec::new();
    for item in items {
        if columns.contains(&item.name) {
            return Err(invalid(format!("the column {} is named twice", item.name)));
        }
        match item.expr {
            None => {
                let field = full
                    .field_with_name(&item.name)
                    .ok()
                    .or_else(|| {
                        full.fields()
                            .iter()
                            .find(|f| f.name().eq_ignore_ascii_case(&item.name))
                            .map(|f| f.as_ref())
                    })
                    .ok_or_else(|| unknown(&item.name))?;
                columns.push(field.name().clone());
            }
            Some(expr) => {
                if full.field_with_name(&item.name).is_ok() {
                    return Err(invalid(format!(
                        "`{expr} AS {}`: the dataset has a column {} already; name the computed one otherwise",
                        item.name, item.name
                    )));
                }
                let computed =
                    row_filter::ComputedColumn::bind(&expr, full, dataset.options.timezone)
                        .map_err(|e| match e {
                            row_filter::RowFilterError::UnknownColumn { column, .. } => {
                                unknown(&column)
                            }
                            other => invalid(other.to_string()),
                        })?;
                columns.push(item.name.clone());
                derived.push(DerivedColumn {
                    name: item.name,
                    expr,
                    data_type: computed.data_type().clone(),
                });
            }
        }
    }
    Ok((columns, derived))
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
    fn filtered(&self) -> Result<Option<(Pred, ReadPlan)>> {
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
    fn computed(&self) -> Result<(ReadPlan, Vec<(String, row_filter::ComputedColumn)>)> {
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

    fn is_partition(&self, name: &str) -> bool {
        self.partition_fields.iter().any(|f| f.name() == name)
    }
}

/// Reads one split from row `skip` on, yielding batches of the plan's output schema.
pub fn read_split(
    loc: &Location,
    split: &Split,
    plan: &ReadPlan,
    skip: u64,
) -> BoxStream<'static, Result<RecordBatch>> {
    read_split_within(loc, split, plan, skip, &ReadAhead::unbounded())
}

/// [`read_split`] within a read-ahead budget shared with other readers: Parquet
/// row groups are fetched once their bytes fit in it, into its pooled buffers.
pub fn read_split_within(
    loc: &Location,
    split: &Split,
    plan: &ReadPlan,
    skip: u64,
    ahead: &ReadAhead,
) -> BoxStream<'static, Result<RecordBatch>> {
    if !plan.sources.is_empty() || split.window.is_some() {
        return crate::mixed::read(loc, split, plan, skip, ahead);
    }
    read_one(loc, split, plan, skip, ahead)
}

/// [`read_split_within`] of a split of one source, read whole.
pub(crate) fn read_one(
    loc: &Location,
    split: &Split,
    plan: &ReadPlan,
    skip: u64,
    ahead: &ReadAhead,
) -> BoxStream<'static, Result<RecordBatch>> {
    if plan.derived.is_empty() {
        return read_filtered(loc, split, plan, skip, ahead);
    }
    let (base, computed) = match plan.computed() {
        Ok(parts) => parts,
        Err(e) => return futures::stream::once(async move { Err(e) }).boxed(),
    };
    let output = plan.output_schema();
    let display = loc.display(&split.object_path());
    read_filtered(loc, split, &base, skip, ahead)
        .map(move |item| {
            let batch = item?;
            let fail = |e: arrow::error::ArrowError| Error::FilterFailed {
                path: display.clone(),
                what: "a computed column of --columns".to_string(),
                reason: e.to_string(),
            };
            let mut columns = Vec::with_capacity(output.fields().len());
            for field in output.fields() {
                let column = match computed.iter().find(|(name, _)| name == field.name()) {
                    Some((_, c)) => c.eval(&batch).map_err(fail)?,
                    None => batch.column_by_name(field.name()).cloned().ok_or_else(|| {
                        fail(arrow::error::ArrowError::SchemaError(format!(
                            "column {} not read",
                            field.name()
                        )))
                    })?,
                };
                columns.push(column);
            }
            RecordBatch::try_new_with_options(
                output.clone(),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
            )
            .map_err(fail)
        })
        .boxed()
}

/// [`read_one`] of the columns read as they are, the filter applied.
fn read_filtered(
    loc: &Location,
    split: &Split,
    plan: &ReadPlan,
    skip: u64,
    ahead: &ReadAhead,
) -> BoxStream<'static, Result<RecordBatch>> {
    match plan.filtered() {
        Ok(None) => read_plain(loc, split, plan, skip, ahead, None),
        Ok(Some((pred, wider))) => {
            let pred = Arc::new(pred);
            let width = plan.columns.len();
            let output = plan.output_schema();
            let read = read_plain(loc, split, &wider, 0, ahead, Some(pred.clone()));
            let display = loc.display(&split.object_path());
            let text = plan
                .filter
                .as_ref()
                .map(|f| f.as_str().to_string())
                .unwrap_or_default();
            let kept = read.map(move |item| {
                let batch = item?;
                let rows = batch.num_rows() as u64;
                let kept = row_filter::keep(&pred, &batch)
                    .and_then(|b| b.project(&(0..width).collect::<Vec<_>>()))
                    .and_then(|b| {
                        RecordBatch::try_new_with_options(
                            output.clone(),
                            b.columns().to_vec(),
                            &RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
                        )
                    })
                    .map_err(|e| Error::FilterFailed {
                        path: display.clone(),
                        what: format!("--filter `{text}`"),
                        reason: e.to_string(),
                    })?;
                row_filter::count_rows(rows, kept.num_rows() as u64);
                Ok(kept)
            });
            format::skip_rows(kept.boxed(), skip)
        }
        Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
    }
}

/// Reads a split as `plan` says, the `filter` given to the format to skip
/// what its statistics rule out.
fn read_plain(
    loc: &Location,
    split: &Split,
    plan: &ReadPlan,
    skip: u64,
    ahead: &ReadAhead,
    filter: Option<Arc<Pred>>,
) -> BoxStream<'static, Result<RecordBatch>> {
    let data_columns: Vec<String> = plan
        .columns
        .iter()
        .filter(|c| !plan.is_partition(c))
        .cloned()
        .collect();
    let request = ReadRequest {
        data_schema: plan.data_schema.clone(),
        columns: data_columns,
        options: plan.options.clone(),
        file_columns: plan.file_columns.clone(),
        read_ahead: ahead.clone(),
        string_view: plan.string_view,
        timezone: plan.timezone,
        // A window ends before its split does; under a filter, offsets
        // count kept rows, so the read goes on to the split's end.
        limit: match (&filter, split.window) {
            (None, Some((_, end))) => Some(end.saturating_sub(skip)),
            _ => None,
        },
        filter,
    };
    let raw = format::read_raw(loc, split, &request, skip);
    let conform = Conformer {
        schema: plan.output_schema(),
        plan: plan.clone(),
        values: split.partition_values.clone(),
        display: loc.display(&split.object_path()),
    };
    raw.map(move |item| item.and_then(|batch| conform.apply(&batch)))
        .boxed()
}

/// Turns a file's batch into a batch of the output schema.
struct Conformer {
    schema: SchemaRef,
    plan: ReadPlan,
    values: Vec<Option<String>>,
    display: String,
}

impl Conformer {
    fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let rows = batch.num_rows();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        for field in self.schema.fields() {
            let column = if let Some(i) = self
                .plan
                .partition_fields
                .iter()
                .position(|p| p.name() == field.name())
            {
                self.partition_column(i, field, rows)?
            } else {
                match batch.column_by_name(field.name()) {
                    Some(col) if col.data_type() == field.data_type() => col.clone(),
                    Some(col) => cast(col, field.data_type()).map_err(|e| {
                        Error::corrupt(
                            &self.display,
                            "data",
                            format!("column `{}`: {e}", field.name()),
                        )
                    })?,
                    None => new_null_array(field.data_type(), rows),
                }
            };
            columns.push(column);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)
            .map_err(|e| Error::corrupt(&self.display, "data", e))
    }

    fn partition_column(&self, i: usize, field: &Field, rows: usize) -> Result<ArrayRef> {
        let value = self.values.get(i).cloned().flatten();
        let strings: ArrayRef = Arc::new(StringArray::from(vec![value.as_deref(); rows]));
        cast(&strings, field.data_type()).map_err(|e| {
            Error::corrupt(
                &self.display,
                "partition",
                format!("value of `{}`: {e}", field.name()),
            )
        })
    }
}

/// Counts the rows of a split by reading it (for formats without metadata).
pub async fn count_rows(loc: &Location, split: &Split, plan: &ReadPlan) -> Result<u64> {
    let mut plan = plan.clone();
    plan.derived.clear();
    plan.columns = plan
        .data_schema
        .fields()
        .first()
        .map(|f| vec![f.name().clone()])
        .unwrap_or_default();
    let mut stream = read_split(loc, split, &plan, 0);
    let mut rows = 0u64;
    while let Some(batch) = stream.next().await {
        rows += batch?.num_rows() as u64;
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use futures::StreamExt;
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{ObjectStoreExt, PutPayload};
    use parquet::arrow::ArrowWriter;

    use super::*;
    use crate::dataset::DatasetOptions;

    async fn put(store: &InMemory, name: &str, bytes: Vec<u8>) {
        store
            .put(&Path::from(format!("d/{name}")), PutPayload::from(bytes))
            .await
            .expect("put");
    }

    fn parquet() -> Vec<u8> {
        parquet_of(2, 2)
    }

    /// A Parquet file of `rows` rows (`id`, and `s` = "v{id}"), row groups of `group` rows.
    fn parquet_of(rows: i64, group: usize) -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows)),
                Arc::new(StringArray::from_iter_values(
                    (0..rows).map(|i| format!("v{i}")),
                )),
            ],
        )
        .expect("batch");
        let mut out = Vec::new();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(group))
            .set_data_page_row_count_limit(64)
            .set_write_batch_size(64)
            .build();
        let mut writer = ArrowWriter::try_new(&mut out, schema, Some(props)).expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
        out
    }

    /// The string column's type in the plan and in the batches read.
    async fn string_types(name: &str, bytes: Vec<u8>) -> (DataType, DataType) {
        let store = Arc::new(InMemory::new());
        put(&store, name, bytes).await;
        let location = Location::new(store, Path::from("d"), "s3://b");
        let dataset = Dataset::open(location.clone(), DatasetOptions::default())
            .await
            .expect("opens");
        let plan = ReadPlan::new(&dataset, None, 100).expect("plan");
        let planned = plan
            .output_schema()
            .field_with_name("s")
            .expect("s")
            .data_type()
            .clone();
        let batch = read_split(&location, &dataset.splits[0], &plan, 0)
            .next()
            .await
            .expect("a batch")
            .expect("reads");
        let read = batch
            .schema()
            .field_with_name("s")
            .expect("s")
            .data_type()
            .clone();
        (planned, read)
    }

    #[tokio::test]
    async fn only_parquet_strings_are_read_as_views() {
        let parquet = string_types("part-0.parquet", parquet()).await;
        assert_eq!(parquet, (DataType::Utf8View, DataType::Utf8View));
        let csv = string_types("part-0.csv", b"id,s\n1,a\n2,b\n".to_vec()).await;
        assert_eq!(csv, (DataType::Utf8, DataType::Utf8));
    }

    /// Every `(id, s)` read from `skip` on, in batches of 128 rows; no batch
    /// spans two row groups of 300 rows (a damaged row group fails alone).
    async fn rows_of(location: &Location, skip: u64) -> Vec<(i64, String)> {
        let dataset = Dataset::open(location.clone(), DatasetOptions::default())
            .await
            .expect("opens");
        let plan = ReadPlan::new(&dataset, None, 128).expect("plan");
        let mut rows = Vec::new();
        for split in &dataset.splits {
            let mut stream = read_split(location, split, &plan, skip);
            while let Some(batch) = stream.next().await {
                let batch = batch.expect("reads");
                let ids = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("ids");
                let cast = cast(batch.column(1), &DataType::Utf8).expect("strings");
                let strings = cast.as_any().downcast_ref::<StringArray>().expect("s");
                for i in 0..batch.num_rows() {
                    rows.push((ids.value(i), strings.value(i).to_string()));
                }
            }
        }
        rows
    }

    #[tokio::test]
    async fn a_local_file_read_page_by_page_reads_what_the_store_reads() {
        let bytes = parquet_of(1000, 300);
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("part-0.parquet"), &bytes).expect("write");
        let local = crate::store::open(&dir.path().display().to_string()).expect("local");
        let store = Arc::new(InMemory::new());
        put(&store, "part-0.parquet", bytes).await;
        let remote = Location::new(store, Path::from("d"), "s3://b");
        for skip in [0, 1, 299, 300, 777] {
            let want: Vec<(i64, String)> =
                (skip as i64..1000).map(|i| (i, format!("v{i}"))).collect();
            assert_eq!(rows_of(&remote, skip).await, want, "store, skip {skip}");
            assert_eq!(rows_of(&local, skip).await, want, "local, skip {skip}");
        }
    }
}
