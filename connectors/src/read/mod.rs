//! Reading a split into batches of the dataset's schema: file columns conformed
//! to the merged types, missing ones null, typed partition columns appended.
//!
//! [`ReadPlan`] (`plan.rs`) says what every split is read as; `one.rs` reads
//! a split of one source; `mixed.rs` reads a split of a job that mixes
//! several, through `one.rs`, from its source and within its window;
//! [`read_split_within`] hands a split to the one that reads it.

mod mixed;
mod one;
mod plan;

use arrow::record_batch::RecordBatch;
use futures::stream::{BoxStream, StreamExt};

use crate::error::Result;
use crate::read_ahead::ReadAhead;
pub use crate::schema::{plain_type, view_type};
use crate::split::Split;
use crate::store::Location;
pub use plan::{DerivedColumn, ReadPlan};

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
        return mixed::read(loc, split, plan, skip, ahead);
    }
    one::read_one(loc, split, plan, skip, ahead)
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
    use crate::dataset::{Dataset, DatasetOptions};
    use arrow::compute::cast;

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
