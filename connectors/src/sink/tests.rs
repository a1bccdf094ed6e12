//! The sink log read from an in-memory store: which files a batch holds, and
//! the errors that name the batch file and line.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use object_store::memory::InMemory;
use object_store::{ObjectMeta, PutPayload};
use parquet::arrow::ArrowWriter;

use super::*;
use crate::dataset::{Dataset, DatasetOptions};

/// A sink at `s3://b/out` in memory; its log records files as `s3a://b/out/...`.
struct Sink {
    store: Arc<InMemory>,
}

impl Sink {
    fn new() -> Sink {
        Sink {
            store: Arc::new(InMemory::new()),
        }
    }

    fn location(&self) -> Location {
        Location::new(self.store.clone(), Path::from("out"), "s3://b")
    }

    async fn put(&self, rel: &str, bytes: impl Into<Bytes>) {
        self.store
            .put(
                &Path::from(format!("out/{rel}")),
                PutPayload::from_bytes(bytes.into()),
            )
            .await
            .expect("put");
    }

    /// Writes batch file `name` holding `lines` after the header.
    async fn batch(&self, name: &str, lines: &[String]) {
        let text = std::iter::once("v1".to_string())
            .chain(lines.iter().cloned())
            .collect::<Vec<_>>()
            .join("\n");
        self.put(&format!("{METADATA_DIR}/{name}"), text).await;
    }
}

fn line(name: &str, action: &str) -> String {
    format!(
        r#"{{"path":"s3a://b/out/{name}","size":100,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":33554432,"action":"{action}"}}"#
    )
}

fn add(name: &str) -> String {
    line(name, "add")
}

fn names(files: &BTreeMap<Path, Source>) -> Vec<String> {
    files
        .keys()
        .map(|p| p.as_ref().trim_start_matches("out/").to_string())
        .collect()
}

/// 2.compact (a, b), 3 (c), 4 (d): batches 0 and 1 deleted by the query.
async fn compacted() -> Sink {
    let sink = Sink::new();
    sink.batch("2.compact", &[add("a"), add("b")]).await;
    sink.batch("3", &[add("c")]).await;
    sink.batch("4", &[add("d")]).await;
    sink
}

#[tokio::test]
async fn the_newest_compaction_and_the_batches_after_it() {
    let sink = compacted().await;
    // An old batch left behind holds a file the compaction dropped.
    sink.batch("1", &[add("gone")]).await;
    sink.put(&format!("{METADATA_DIR}/.4.crc"), "x").await;
    let loc = sink.location();
    assert!(is_sink(&loc).await.expect("listing"));
    assert_eq!(newest_batch(&loc).await.expect("listing"), Some(4));
    let all = committed(&loc, None, 4).await.expect("log");
    assert_eq!(names(&all.files), ["a", "b", "c", "d"]);
    assert_eq!((all.batch, all.newest), (4, 4));
    let upto3 = committed(&loc, None, 3).await.expect("log");
    assert_eq!(names(&upto3.files), ["a", "b", "c"]);
}

#[tokio::test]
async fn batches_after_one_already_read() {
    let sink = compacted().await;
    let loc = sink.location();
    let new = committed(&loc, Some(2), 4).await.expect("log");
    assert_eq!(names(&new.files), ["c", "d"]);
    assert_eq!(new.earlier.len(), 2);
    assert_eq!(
        names(&committed(&loc, Some(3), 4).await.expect("log").files),
        ["d"]
    );
    assert!(committed(&loc, Some(4), 4)
        .await
        .expect("log")
        .files
        .is_empty());
    // Batch 1 is gone: what batches 2..4 added cannot be told apart.
    let err = committed(&loc, Some(1), 4)
        .await
        .expect_err("batch 1 deleted");
    assert!(
        err.to_string().contains("s3://b/out/_spark_metadata/0"),
        "{err}"
    );
    let err = committed(&loc, Some(5), 4).await.expect_err("after > upto");
    assert!(
        err.to_string().contains("batch 5 is after batch 4"),
        "{err}"
    );
}

#[tokio::test]
async fn deleted_files_are_left_out() {
    let sink = Sink::new();
    sink.batch("0", &[add("a"), add("b")]).await;
    sink.batch("1", &[line("a", "delete"), add("c")]).await;
    let dir = r#""path":"s3a://b/out/sub","size":0,"isDir":true"#;
    sink.batch(
        "2",
        &[add("sub").replace(r#""path":"s3a://b/out/sub","size":100,"isDir":false"#, dir)],
    )
    .await;
    let all = committed(&sink.location(), None, 2).await.expect("log");
    assert_eq!(
        names(&all.files),
        ["b", "c"],
        "a deleted, the directory skipped"
    );
    assert!(all.deleted.contains(&Path::from("out/a")));
}

#[tokio::test]
async fn a_missing_batch_names_its_file() {
    let sink = Sink::new();
    sink.batch("2.compact", &[add("a")]).await;
    sink.batch("4", &[add("c")]).await;
    let err = committed(&sink.location(), None, 4)
        .await
        .expect_err("3 is missing");
    let text = err.to_string();
    assert!(text.contains("s3://b/out/_spark_metadata/3"), "{text}");
    assert!(text.contains("after 2.compact"), "{text}");
    assert_eq!(err.kind(), ErrorKind::Dataset);
    let err = committed(&sink.location(), None, 7)
        .await
        .expect_err("no batch 7");
    assert!(err.to_string().contains("the newest batch is 4"), "{err}");
}

#[tokio::test]
async fn a_bad_line_names_file_and_line() {
    let sink = compacted().await;
    sink.batch("3", &[add("c"), "{\"path\": ".to_string()])
        .await;
    let err = committed(&sink.location(), None, 4)
        .await
        .expect_err("bad JSON");
    let text = err.to_string();
    assert!(
        text.contains("s3://b/out/_spark_metadata/3, line 3: bad JSON"),
        "{text}"
    );
    sink.batch("3", &[add("c")]).await;
    sink.put(&format!("{METADATA_DIR}/4"), "v9\n").await;
    let err = committed(&sink.location(), None, 4)
        .await
        .expect_err("bad header");
    assert!(
        err.to_string()
            .contains("_spark_metadata/4, line 1: log version v9"),
        "{err}"
    );
}

#[tokio::test]
async fn files_in_another_bucket_or_outside_the_directory_fail() {
    let sink = Sink::new();
    let other = add("a").replace("s3a://b/", "s3a://other/");
    sink.batch("0", &[add("x"), other]).await;
    let err = committed(&sink.location(), None, 0)
        .await
        .expect_err("another bucket");
    let text = err.to_string();
    assert!(text.contains("_spark_metadata/0, line 3"), "{text}");
    assert!(
        text.contains("s3a://other/out/a is in another store than s3://b"),
        "{text}"
    );
    let outside = add("a").replace("s3a://b/out/", "s3a://b/elsewhere/");
    sink.batch("0", &[outside]).await;
    let err = committed(&sink.location(), None, 0)
        .await
        .expect_err("outside");
    assert!(
        err.to_string()
            .contains("outside the sink directory s3://b/out"),
        "{err}"
    );
}

#[tokio::test]
async fn no_log_directory_and_an_empty_one() {
    let sink = Sink::new();
    sink.put("part-0.parquet", "x").await;
    let loc = sink.location();
    assert!(!is_sink(&loc).await.expect("listing"));
    assert_eq!(newest_batch(&loc).await.expect("listing"), None);
    sink.put(&format!("{METADATA_DIR}/.0.tmp"), "x").await;
    assert!(is_sink(&loc).await.expect("listing"));
    assert_eq!(newest_batch(&loc).await.expect("listing"), None);
}

fn listed(name: &str, size: u64) -> ListedFile {
    ListedFile {
        meta: ObjectMeta {
            location: Path::from(format!("out/{name}")),
            last_modified: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
            size,
            e_tag: None,
            version: None,
        },
        dirs: Vec::new(),
        class: FileClass::Data,
    }
}

#[tokio::test]
async fn a_listing_sorted_by_the_log() {
    let sink = Sink::new();
    sink.batch("0", &[add("a"), add("b")]).await;
    sink.batch("1", &[line("a", "delete"), add("c"), add("empty")])
        .await;
    sink.batch("2", &[add("later")]).await;
    let loc = sink.location();
    let files = ["a", "b", "c", "empty", "later", "stray"]
        .map(|n| listed(n, if n == "empty" { 0 } else { 100 }))
        .to_vec();
    let mut ignored = Vec::new();
    let got = committed(&loc, Some(0), 1).await.expect("log");
    let kept = committed_listing(&loc, got, files, &mut ignored).expect("all present");
    let kept: Vec<_> = kept.iter().map(|f| f.meta.location.to_string()).collect();
    assert_eq!(kept, ["out/c"], "b was read up to batch 0");
    let reasons: Vec<(String, String)> = ignored.into_iter().map(|i| (i.path, i.reason)).collect();
    assert_eq!(
        reasons,
        [
            (
                "s3://b/out/a".into(),
                "deleted by the streaming query".into()
            ),
            ("s3://b/out/empty".into(), "zero bytes".into()),
            (
                "s3://b/out/later".into(),
                format!("{NOT_COMMITTED} by batch 1")
            ),
            (
                "s3://b/out/stray".into(),
                format!("{NOT_COMMITTED} by batch 1")
            ),
        ]
    );
    let got = committed(&loc, None, 2).await.expect("log");
    let err = committed_listing(&loc, got, vec![listed("b", 100)], &mut Vec::new())
        .expect_err("c and later are missing");
    let text = err.to_string();
    assert!(text.contains("_spark_metadata/1, line 3"), "{text}");
    assert!(
        text.contains("s3://b/out/c is committed but not in the directory"),
        "{text}"
    );
}

/// A Parquet file of `ids`.
fn parquet(ids: std::ops::Range<i64>) -> Bytes {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from_iter_values(ids))],
    )
    .expect("batch");
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, None).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    out.into()
}

#[tokio::test]
async fn a_partitioned_sink_reads_only_committed_files() {
    let sink = Sink::new();
    for (name, ids) in [
        ("p=1/part-0.parquet", 0..10),
        ("p=2/part-1.parquet", 10..25),
        ("p=2/part-9.parquet", 0..25), // a retried batch's first attempt
    ] {
        sink.put(name, parquet(ids)).await;
    }
    sink.batch("0", &[add("p=1/part-0.parquet")]).await;
    sink.batch("1", &[add("p=2/part-1.parquet")]).await;
    let options = DatasetOptions::default();
    let dataset = Dataset::open(sink.location(), options.clone())
        .await
        .expect("opens");
    assert_eq!(dataset.sink, Some(SinkInfo { batch: Some(1) }));
    assert!(dataset.complete);
    let rows: u64 = dataset.files.iter().filter_map(|f| f.rows).sum();
    assert_eq!(rows, 25);
    assert_eq!(dataset.partition_fields.len(), 1);
    assert_eq!(dataset.ignored.len(), 1);
    assert_eq!(dataset.ignored[0].path, "s3://b/out/p=2/part-9.parquet");
    assert_eq!(dataset.ignored[0].reason, NOT_COMMITTED);
    let first = Dataset::open_sink_batches(sink.location(), None, 0, options.clone())
        .await
        .expect("batch 0");
    assert_eq!(first.files.len(), 1);
    assert_eq!(first.sink, Some(SinkInfo { batch: Some(0) }));
    let second = Dataset::open_sink_batches(sink.location(), Some(0), 1, options)
        .await
        .expect("batch 1");
    let paths: Vec<_> = second.files.iter().map(|f| f.path.to_string()).collect();
    assert_eq!(paths, ["out/p=2/part-1.parquet"]);
}

#[tokio::test]
async fn a_sink_without_a_batch_is_known_empty() {
    let sink = Sink::new();
    sink.put("part-9.parquet", parquet(0..5)).await;
    sink.put(&format!("{METADATA_DIR}/.0.tmp"), "x").await;
    let dataset = Dataset::open(sink.location(), DatasetOptions::default())
        .await
        .expect("opens");
    assert_eq!(dataset.sink, Some(SinkInfo { batch: None }));
    assert!(dataset.files.is_empty() && dataset.known_empty());
    assert_eq!(dataset.ignored[0].reason, NOT_COMMITTED);
}
