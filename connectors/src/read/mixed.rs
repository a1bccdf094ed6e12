//! Reading a split of a job that mixes several sources: from its source's
//! location with its source's plan, only the rows of its window, and with the
//! source's name appended as a column when the plan asks (`--source-column`).

use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use futures::stream::{self, BoxStream, StreamExt};

use super::one::read_one;
use super::plan::ReadPlan;
use crate::error::{Error, Result};
use crate::read_ahead::ReadAhead;
use crate::split::Split;
use crate::store::Location;

impl ReadPlan {
    /// How source `index` is read, on its own (no other source, no source
    /// column): this plan when it has no sources.
    pub fn of_source(&self, index: u32) -> ReadPlan {
        let mut own = self
            .sources
            .get(index as usize)
            .cloned()
            .unwrap_or_else(|| self.clone());
        own.sources.clear();
        own.source_names.clear();
        own.source_column = None;
        own
    }
}

/// Reads rows from `skip` on of `split` (counted from its window's start):
/// the rows of its window only, from its source, as `plan` says.
pub(super) fn read(
    loc: &Location,
    split: &Split,
    plan: &ReadPlan,
    skip: u64,
    ahead: &ReadAhead,
) -> BoxStream<'static, Result<RecordBatch>> {
    let own = plan.of_source(split.source);
    let location = loc.of_source(split.source);
    let (base, left) = match split.window {
        Some((start, end)) => (start, Some(end.saturating_sub(start).saturating_sub(skip))),
        None => (0, None),
    };
    if left == Some(0) {
        return stream::empty().boxed();
    }
    let rows = read_one(location, split, &own, base + skip, ahead);
    let windowed = rows.scan(left, |left, item| {
        let out = match (item, left.as_mut()) {
            (Ok(_), Some(0)) => None,
            (Ok(batch), Some(left)) => {
                let n = (batch.num_rows() as u64).min(*left);
                *left -= n;
                Some(Ok(batch.slice(0, n as usize)))
            }
            (item, _) => Some(item),
        };
        futures::future::ready(out)
    });
    let Some(column) = &plan.source_column else {
        return windowed.boxed();
    };
    let name = plan
        .source_names
        .get(split.source as usize)
        .cloned()
        .unwrap_or_default();
    let schema = plan.output_schema();
    let display = location.display(&split.object_path());
    let column = column.clone();
    windowed
        .map(move |item| {
            let batch = item?;
            let rows = batch.num_rows();
            let mut columns = batch.columns().to_vec();
            let names: ArrayRef = Arc::new(StringArray::from(vec![name.as_str(); rows]));
            columns.push(names);
            RecordBatch::try_new_with_options(
                schema.clone(),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(rows)),
            )
            .map_err(|e| Error::corrupt(&display, "data", format!("--source-column {column}: {e}")))
        })
        .boxed()
}
