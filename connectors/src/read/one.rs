//! The read of a split of one source: file columns conformed to the merged
//! types, missing ones null, typed partition columns appended, the row
//! filter and computed columns applied.

use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{Field, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use futures::stream::{BoxStream, StreamExt};

use super::plan::ReadPlan;
use crate::error::{Error, Result};
use crate::format::{self, ReadRequest};
use crate::read_ahead::ReadAhead;
use crate::row_filter::{self, Pred};
use crate::split::Split;
use crate::store::Location;

/// [`super::read_split_within`] of a split of one source, read whole.
pub(super) fn read_one(
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
