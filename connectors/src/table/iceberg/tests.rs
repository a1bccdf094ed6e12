//! Tables built by hand in an in-memory store: metadata JSON, manifest lists
//! and manifests written with arrow-avro, position deletes with the Parquet
//! writer. The table's metadata says it lived elsewhere (`file:/warehouse/...`)
//! so every path goes through the mapping onto the table's root now.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, StructArray};
use arrow::datatypes::{DataType, Field, Fields, Schema, TimeUnit};
use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use parquet::arrow::ArrowWriter;
use serde_json::{json, Value};

use super::plan::{join, uri_path};
use super::*;
use crate::table::{self, CommitKind, TableVersion};
use crate::types::Format;

/// Where the metadata says the table was written.
const WRITTEN_AT: &str = "file:/warehouse/db/t";

/// A data or delete file entry of a hand-made manifest.
struct FileEntry {
    status: i32,
    snapshot_id: Option<i64>,
    sequence_number: Option<i64>,
    content: i32,
    path: String,
    format: &'static str,
    records: i64,
}

fn entry(
    status: i32,
    snapshot_id: Option<i64>,
    content: i32,
    name: &str,
    records: i64,
) -> FileEntry {
    FileEntry {
        status,
        snapshot_id,
        sequence_number: None,
        content,
        path: format!("{WRITTEN_AT}/data/{name}"),
        format: if name.ends_with(".orc") {
            "ORC"
        } else {
            "PARQUET"
        },
        records,
    }
}

/// An Avro object container file of one batch.
fn avro(batch: &RecordBatch) -> Bytes {
    let mut writer =
        arrow_avro::writer::AvroWriter::new(Vec::new(), batch.schema().as_ref().clone())
            .expect("avro writer");
    writer.write(batch).expect("write avro");
    writer.finish().expect("finish avro");
    Bytes::from(writer.into_inner())
}

fn manifest_bytes(entries: &[FileEntry], v1: bool) -> Bytes {
    let file_fields = {
        let mut fields = Vec::new();
        if !v1 {
            fields.push(Field::new("content", DataType::Int32, false));
        }
        fields.extend([
            Field::new("file_path", DataType::Utf8, false),
            Field::new("file_format", DataType::Utf8, false),
            Field::new(
                "partition",
                DataType::Struct(Fields::from(vec![Field::new("p", DataType::Int32, true)])),
                false,
            ),
            Field::new("record_count", DataType::Int64, false),
            Field::new("file_size_in_bytes", DataType::Int64, false),
        ]);
        Fields::from(fields)
    };
    let n = entries.len();
    let mut file_columns: Vec<ArrayRef> = Vec::new();
    if !v1 {
        file_columns.push(Arc::new(Int32Array::from_iter_values(
            entries.iter().map(|e| e.content),
        )));
    }
    let partition = StructArray::from(vec![(
        Arc::new(Field::new("p", DataType::Int32, true)),
        Arc::new(Int32Array::from(vec![Some(1); n])) as ArrayRef,
    )]);
    file_columns.extend([
        Arc::new(StringArray::from_iter_values(
            entries.iter().map(|e| e.path.clone()),
        )) as ArrayRef,
        Arc::new(StringArray::from_iter_values(
            entries.iter().map(|e| e.format),
        )),
        Arc::new(partition),
        Arc::new(Int64Array::from_iter_values(
            entries.iter().map(|e| e.records),
        )),
        Arc::new(Int64Array::from_iter_values(
            entries.iter().map(|e| e.records * 10),
        )),
    ]);
    let data_file = StructArray::new(file_fields.clone(), file_columns, None);
    let schema = Schema::new(vec![
        Field::new("status", DataType::Int32, false),
        Field::new("snapshot_id", DataType::Int64, !v1),
        Field::new("sequence_number", DataType::Int64, true),
        Field::new("data_file", DataType::Struct(file_fields), false),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int32Array::from_iter_values(
                entries.iter().map(|e| e.status),
            )),
            Arc::new(Int64Array::from(
                entries.iter().map(|e| e.snapshot_id).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                entries
                    .iter()
                    .map(|e| e.sequence_number)
                    .collect::<Vec<_>>(),
            )),
            Arc::new(data_file),
        ],
    )
    .expect("manifest batch");
    avro(&batch)
}

/// (manifest file name, content, sequence number, added snapshot)
fn manifest_list_bytes(manifests: &[(&str, i32, i64, i64)]) -> Bytes {
    let schema = Schema::new(vec![
        Field::new("manifest_path", DataType::Utf8, false),
        Field::new("manifest_length", DataType::Int64, false),
        Field::new("partition_spec_id", DataType::Int32, false),
        Field::new("content", DataType::Int32, false),
        Field::new("sequence_number", DataType::Int64, false),
        Field::new("added_snapshot_id", DataType::Int64, false),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(StringArray::from_iter_values(
                manifests
                    .iter()
                    .map(|m| format!("{WRITTEN_AT}/metadata/{}", m.0)),
            )),
            Arc::new(Int64Array::from_iter_values(manifests.iter().map(|_| 100))),
            Arc::new(Int32Array::from_iter_values(manifests.iter().map(|_| 0))),
            Arc::new(Int32Array::from_iter_values(manifests.iter().map(|m| m.1))),
            Arc::new(Int64Array::from_iter_values(manifests.iter().map(|m| m.2))),
            Arc::new(Int64Array::from_iter_values(manifests.iter().map(|m| m.3))),
        ],
    )
    .expect("manifest list batch");
    avro(&batch)
}

/// A position delete file (Parquet) deleting `rows` (data file name, position).
fn position_delete_bytes(rows: &[(&str, i64)]) -> Bytes {
    let schema = Arc::new(Schema::new(vec![
        Field::new("file_path", DataType::Utf8, false),
        Field::new("pos", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| format!("{WRITTEN_AT}/data/{}", r.0)),
            )),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
        ],
    )
    .expect("delete batch");
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, None).expect("parquet writer");
    writer.write(&batch).expect("write parquet");
    writer.close().expect("close parquet");
    Bytes::from(out)
}

struct Fixture {
    store: Arc<InMemory>,
    root: Path,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            store: Arc::new(InMemory::new()),
            root: Path::from("copied/t"),
        }
    }

    fn location(&self) -> Location {
        Location::new(self.store.clone(), self.root.clone(), "memory://")
    }

    async fn put(&self, rel: &str, bytes: Bytes) {
        let path = join(&self.root, rel);
        self.store
            .put(&path, PutPayload::from_bytes(bytes))
            .await
            .expect("put");
    }

    async fn put_json(&self, rel: &str, value: &Value) {
        self.put(rel, Bytes::from(value.to_string())).await;
    }
}

fn schema_json() -> Value {
    json!({
        "type": "struct", "schema-id": 0,
        "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "label", "required": false, "type": "string"},
        ]
    })
}

fn snapshot_json(id: i64, parent: Option<i64>, seq: i64, ts: i64, op: &str) -> Value {
    json!({
        "snapshot-id": id,
        "parent-snapshot-id": parent,
        "sequence-number": seq,
        "timestamp-ms": ts,
        "manifest-list": format!("{WRITTEN_AT}/metadata/snap-{id}.avro"),
        "summary": {"operation": op},
        "schema-id": 0,
    })
}

/// A v2 table of three snapshots:
/// 1 (t=1000, append): a.parquet (10 rows)
/// 2 (t=2000, delete): position deletes of a rows 1, 3, 3, 12 (beyond its
///   end) and of b row 0 — b comes later, so not deleted by it
/// 3 (t=3000, append): b.parquet (5 rows)
async fn v2_table() -> Fixture {
    let fx = Fixture::new();
    let mut a = entry(1, None, 0, "a.parquet", 10);
    a.sequence_number = None;
    fx.put("metadata/m1.avro", manifest_bytes(&[a], false))
        .await;
    fx.put(
        "metadata/snap-1.avro",
        manifest_list_bytes(&[("m1.avro", 0, 1, 1)]),
    )
    .await;

    let mut a_existing = entry(0, Some(1), 0, "a.parquet", 10);
    a_existing.sequence_number = Some(1);
    fx.put(
        "metadata/m1-existing.avro",
        manifest_bytes(&[a_existing], false),
    )
    .await;
    fx.put(
        "metadata/d2.avro",
        manifest_bytes(&[entry(1, None, 1, "delete-2.parquet", 5)], false),
    )
    .await;
    fx.put(
        "data/delete-2.parquet",
        position_delete_bytes(&[
            ("a.parquet", 3),
            ("a.parquet", 1),
            ("a.parquet", 3),
            ("b.parquet", 0),
        ]),
    )
    .await;
    fx.put(
        "metadata/snap-2.avro",
        manifest_list_bytes(&[("m1-existing.avro", 0, 1, 1), ("d2.avro", 1, 2, 2)]),
    )
    .await;

    fx.put(
        "metadata/m3.avro",
        manifest_bytes(&[entry(1, None, 0, "b.parquet", 5)], false),
    )
    .await;
    // The delete manifest carried over: its entry is existing now.
    let mut d_existing = entry(0, Some(2), 1, "delete-2.parquet", 5);
    d_existing.sequence_number = Some(2);
    fx.put(
        "metadata/d2-existing.avro",
        manifest_bytes(&[d_existing], false),
    )
    .await;
    fx.put(
        "metadata/snap-3.avro",
        manifest_list_bytes(&[
            ("m3.avro", 0, 3, 3),
            ("m1-existing.avro", 0, 1, 1),
            ("d2-existing.avro", 1, 2, 2),
        ]),
    )
    .await;

    let metadata = json!({
        "format-version": 2,
        "table-uuid": "00000000-0000-0000-0000-000000000000",
        "location": WRITTEN_AT,
        "last-sequence-number": 3,
        "last-updated-ms": 3000,
        "last-column-id": 2,
        "current-schema-id": 0,
        "schemas": [schema_json()],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "current-snapshot-id": 3,
        "snapshots": [
            snapshot_json(1, None, 1, 1000, "append"),
            snapshot_json(2, Some(1), 2, 2000, "delete"),
            snapshot_json(3, Some(2), 3, 3000, "append"),
        ],
        "snapshot-log": [
            {"timestamp-ms": 1000, "snapshot-id": 1},
            {"timestamp-ms": 2000, "snapshot-id": 2},
            {"timestamp-ms": 3000, "snapshot-id": 3},
        ],
    });
    // An older metadata file beside the current one: the highest number wins.
    let mut older = metadata.clone();
    older["current-snapshot-id"] = json!(1);
    fx.put_json("metadata/00001-aaaa.metadata.json", &older)
        .await;
    fx.put_json("metadata/00002-bbbb.metadata.json", &metadata)
        .await;
    fx
}

/// (path, rows, deleted, added in) of each file.
type FileSummary = (String, Option<u64>, Vec<u64>, Option<i64>);

fn summary(s: &TableSnapshot) -> Vec<FileSummary> {
    s.files
        .iter()
        .map(|f| (f.path.to_string(), f.rows, f.deleted.clone(), f.added_in))
        .collect()
}

#[tokio::test]
async fn v2_snapshot_applies_position_deletes_by_sequence_number() {
    let fx = v2_table().await;
    let loc = fx.location();
    assert_eq!(
        table::detect(&loc).await.expect("detect"),
        Some(TableKind::Iceberg)
    );
    let s = snapshot(&loc, TableVersion::Latest).await.expect("latest");
    assert_eq!(s.version, 3);
    assert_eq!(s.timestamp_ms, Some(3000));
    assert_eq!(s.format_version, "iceberg format v2, snapshot 3");
    assert!(s.partition_fields.is_empty());
    assert_eq!(
        summary(&s),
        vec![
            (
                "copied/t/data/a.parquet".to_string(),
                Some(10),
                vec![1, 3],
                Some(1)
            ),
            (
                "copied/t/data/b.parquet".to_string(),
                Some(5),
                vec![],
                Some(3)
            ),
        ]
    );
    assert_eq!(s.files[0].size, 100);
    assert_eq!(s.files[0].format, Format::Parquet);
    assert!(s.files.iter().all(|f| f.partition_values.is_empty()));
    assert_eq!(
        s.columns.by_field_id,
        vec![(1, "id".to_string()), (2, "label".to_string())]
    );
    assert!(s.schema.fields().iter().all(|f| f.is_nullable()));
}

#[tokio::test]
async fn v2_time_travel_by_snapshot_id_and_timestamp() {
    let fx = v2_table().await;
    let loc = fx.location();
    let s1 = snapshot(&loc, TableVersion::SnapshotId(1))
        .await
        .expect("s1");
    assert_eq!(
        summary(&s1),
        vec![(
            "copied/t/data/a.parquet".to_string(),
            Some(10),
            vec![],
            Some(1)
        )]
    );
    let s2 = snapshot(&loc, TableVersion::Timestamp(2999))
        .await
        .expect("t2");
    assert_eq!(s2.version, 2);
    assert_eq!(s2.files.len(), 1);
    assert_eq!(s2.files[0].deleted, vec![1, 3]);
    let s3 = snapshot(&loc, TableVersion::Timestamp(3000))
        .await
        .expect("t3");
    assert_eq!(s3.version, 3);

    let missing = snapshot(&loc, TableVersion::SnapshotId(99)).await;
    match missing {
        Err(Error::NoSuchVersion { reason, .. }) => {
            assert!(reason.contains("there is no snapshot 99"), "{reason}");
            assert!(reason.contains("3 ("), "{reason}");
        }
        other => panic!("expected NoSuchVersion, got {other:?}"),
    }
    assert!(matches!(
        snapshot(&loc, TableVersion::Timestamp(999)).await,
        Err(Error::NoSuchVersion { .. })
    ));
    match snapshot(&loc, TableVersion::Version(2)).await {
        Err(Error::InvalidOption { reason, .. }) => {
            assert!(reason.contains("--snapshot-id"), "{reason}")
        }
        other => panic!("expected InvalidOption, got {other:?}"),
    }
}

#[tokio::test]
async fn v2_changes_walk_the_ancestry() {
    let fx = v2_table().await;
    let loc = fx.location();
    let c = changes(&loc, 1, TableVersion::Latest)
        .await
        .expect("changes");
    assert_eq!(
        c.commits
            .iter()
            .map(|c| (c.version, c.operation.as_str(), c.kind.clone()))
            .collect::<Vec<_>>(),
        vec![
            (2, "delete", CommitKind::Rewrite),
            (3, "append", CommitKind::Append)
        ]
    );
    assert_eq!(
        c.appended
            .iter()
            .map(|f| f.path.to_string())
            .collect::<Vec<_>>(),
        vec!["copied/t/data/b.parquet".to_string()]
    );
    let none = changes(&loc, 3, TableVersion::Latest).await.expect("none");
    assert!(none.commits.is_empty() && none.appended.is_empty());
    match changes(&loc, 42, TableVersion::Latest).await {
        Err(Error::NoSuchVersion { reason, .. }) => {
            assert!(reason.contains("not an ancestor"), "{reason}")
        }
        other => panic!("expected NoSuchVersion, got {other:?}"),
    }
}

#[tokio::test]
async fn metadata_file_given_as_the_location() {
    let fx = v2_table().await;
    let older = Location::new(
        fx.store.clone(),
        Path::from("copied/t/metadata/00001-aaaa.metadata.json"),
        "memory://",
    );
    assert_eq!(
        table::detect(&older).await.expect("detect"),
        Some(TableKind::Iceberg)
    );
    let s = snapshot(&older, TableVersion::Latest).await.expect("older");
    assert_eq!(s.version, 1);
    assert_eq!(s.files[0].path.to_string(), "copied/t/data/a.parquet");
}

#[tokio::test]
async fn equality_deletes_are_refused_in_one_line() {
    let fx = v2_table().await;
    fx.put(
        "metadata/e4.avro",
        manifest_bytes(&[entry(1, None, 2, "eq-4.parquet", 1)], false),
    )
    .await;
    fx.put(
        "metadata/snap-4.avro",
        manifest_list_bytes(&[
            ("m3.avro", 0, 3, 3),
            ("m1-existing.avro", 0, 1, 1),
            ("e4.avro", 1, 4, 4),
        ]),
    )
    .await;
    let mut metadata: Value = serde_json::from_slice(
        &get(
            &fx.location(),
            &join(&fx.root, "metadata/00002-bbbb.metadata.json"),
        )
        .await
        .expect("get"),
    )
    .expect("json");
    metadata["current-snapshot-id"] = json!(4);
    metadata["snapshots"]
        .as_array_mut()
        .expect("snapshots")
        .push(snapshot_json(4, Some(3), 4, 4000, "overwrite"));
    fx.put_json("metadata/00003-cccc.metadata.json", &metadata)
        .await;
    let err = snapshot(&fx.location(), TableVersion::Latest)
        .await
        .expect_err("equality deletes");
    let text = err.to_string();
    assert!(matches!(
        err,
        Error::Table {
            kind: "iceberg",
            ..
        }
    ));
    assert!(text.contains("equality deletes"), "{text}");
    assert!(text.contains("copied/t/data/eq-4.parquet"), "{text}");
    assert!(!text.contains('\n'), "{text}");
    // The snapshot before them still reads.
    assert_eq!(
        snapshot(&fx.location(), TableVersion::SnapshotId(3))
            .await
            .expect("s3")
            .version,
        3
    );
}

#[tokio::test]
async fn v1_hadoop_table_with_inline_manifests_and_version_hint() {
    let fx = Fixture::new();
    // Snapshot 7 added x and y; snapshot 8 deleted y (status 2) and added z (ORC).
    fx.put(
        "metadata/m7.avro",
        manifest_bytes(
            &[
                entry(1, Some(7), 0, "x.parquet", 4),
                entry(1, Some(7), 0, "y.parquet", 6),
            ],
            true,
        ),
    )
    .await;
    fx.put(
        "metadata/m8.avro",
        manifest_bytes(
            &[
                entry(0, Some(7), 0, "x.parquet", 4),
                entry(2, Some(8), 0, "y.parquet", 6),
                entry(1, Some(8), 0, "z.orc", 2),
            ],
            true,
        ),
    )
    .await;
    let snap = |id: i64, parent: Option<i64>, ts: i64, op: &str, manifest: &str| {
        json!({
            "snapshot-id": id, "parent-snapshot-id": parent, "timestamp-ms": ts,
            "manifests": [format!("{WRITTEN_AT}/metadata/{manifest}")],
            "summary": {"operation": op},
        })
    };
    let metadata = json!({
        "format-version": 1,
        "location": WRITTEN_AT,
        "last-updated-ms": 8000,
        "last-column-id": 3,
        "schema": {"type": "struct", "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "amount", "required": false, "type": "decimal(10, 2)"},
            {"id": 3, "name": "at", "required": false, "type": "timestamptz"},
        ]},
        "partition-spec": [],
        "current-snapshot-id": 8,
        "snapshots": [
            snap(7, None, 7000, "append", "m7.avro"),
            snap(8, Some(7), 8000, "overwrite", "m8.avro"),
        ],
    });
    let mut stale = metadata.clone();
    stale["current-snapshot-id"] = json!(7);
    fx.put_json("metadata/v1.metadata.json", &stale).await;
    fx.put_json("metadata/v2.metadata.json", &stale).await;
    // The hint says 2, but v3 was written after it: v3 is current.
    fx.put_json("metadata/v3.metadata.json", &metadata).await;
    // A higher number that the hint does not lead to is not taken.
    fx.put_json("metadata/v10-unrelated.metadata.json", &stale)
        .await;
    fx.put("metadata/version-hint.text", Bytes::from("2\n"))
        .await;

    let loc = fx.location();
    let s = snapshot(&loc, TableVersion::Latest)
        .await
        .expect("v1 table");
    assert_eq!(s.format_version, "iceberg format v1, snapshot 8");
    assert_eq!(
        summary(&s),
        vec![
            (
                "copied/t/data/x.parquet".to_string(),
                Some(4),
                vec![],
                Some(7)
            ),
            ("copied/t/data/z.orc".to_string(), Some(2), vec![], Some(8)),
        ]
    );
    assert_eq!(s.files[1].format, Format::Orc);
    let fields: Vec<(String, DataType)> = s
        .schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect();
    assert_eq!(
        fields,
        vec![
            ("id".to_string(), DataType::Int64),
            ("amount".to_string(), DataType::Decimal128(10, 2)),
            (
                "at".to_string(),
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
            ),
        ]
    );
    // No snapshot log: time travel goes by the snapshots' own times.
    let s7 = snapshot(&loc, TableVersion::Timestamp(7500))
        .await
        .expect("t7");
    assert_eq!(s7.version, 7);
    assert_eq!(s7.files.len(), 2);
    let c = changes(&loc, 7, TableVersion::Latest)
        .await
        .expect("changes");
    assert_eq!(c.commits.len(), 1);
    assert_eq!(c.commits[0].kind, CommitKind::Rewrite);
    assert!(c.appended.is_empty());
}

#[tokio::test]
async fn a_table_without_snapshots_has_no_files() {
    let fx = Fixture::new();
    let metadata = json!({
        "format-version": 2,
        "location": WRITTEN_AT,
        "current-schema-id": 0,
        "schemas": [schema_json()],
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "current-snapshot-id": -1,
        "snapshots": [],
    });
    fx.put_json("metadata/00000-aaaa.metadata.json", &metadata)
        .await;
    let loc = fx.location();
    let s = snapshot(&loc, TableVersion::Latest).await.expect("empty");
    assert!(s.files.is_empty());
    assert_eq!(s.format_version, "iceberg format v2, no snapshot yet");
    assert_eq!(s.schema.fields().len(), 2);
    assert!(matches!(
        snapshot(&loc, TableVersion::SnapshotId(1)).await,
        Err(Error::NoSuchVersion { .. })
    ));
}

#[test]
fn nested_and_primitive_types_map_to_arrow() {
    let ty = json!({
        "type": "struct",
        "fields": [
            {"id": 10, "name": "tags", "required": false,
             "type": {"type": "list", "element-id": 11, "element": "string", "element-required": false}},
            {"id": 12, "name": "attrs", "required": false,
             "type": {"type": "map", "key-id": 13, "key": "string", "value-id": 14, "value": "double", "value-required": false}},
            {"id": 15, "name": "u", "required": true, "type": "uuid"},
            {"id": 16, "name": "f", "required": true, "type": "fixed[3]"},
            {"id": 17, "name": "d", "required": true, "type": "date"},
            {"id": 18, "name": "t", "required": true, "type": "time"},
            {"id": 19, "name": "ts", "required": true, "type": "timestamp"},
        ]
    });
    let DataType::Struct(fields) = metadata::arrow_type(&ty).expect("struct") else {
        panic!("not a struct")
    };
    let types: Vec<&DataType> = fields.iter().map(|f| f.data_type()).collect();
    assert!(matches!(types[0], DataType::List(e) if e.data_type() == &DataType::Utf8));
    assert!(matches!(types[1], DataType::Map(e, false) if e.name() == "key_value"));
    assert_eq!(types[2], &DataType::FixedSizeBinary(16));
    assert_eq!(types[3], &DataType::FixedSizeBinary(3));
    assert_eq!(types[4], &DataType::Date32);
    assert_eq!(types[5], &DataType::Time64(TimeUnit::Microsecond));
    assert_eq!(types[6], &DataType::Timestamp(TimeUnit::Microsecond, None));
    let bad = metadata::arrow_type(&json!("variant")).expect_err("variant");
    assert!(bad.contains("variant"), "{bad}");
}

#[test]
fn uris_map_onto_the_table_root() {
    assert_eq!(uri_path("file:/a/b"), "/a/b");
    assert_eq!(uri_path("file:///a/b"), "/a/b");
    assert_eq!(uri_path("s3://bucket/a/b"), "/a/b");
    assert_eq!(uri_path("s3a://bucket/a/b"), "/a/b");
    assert_eq!(uri_path("hdfs://nn:8020/a/b"), "/a/b");
    assert_eq!(uri_path("/a/b"), "/a/b");
    assert_eq!(metadata_version("v12.metadata.json"), Some(12));
    assert_eq!(metadata_version("00003-1f2e.metadata.json"), Some(3));
    assert_eq!(metadata_version("00004-1f2e.gz.metadata.json"), Some(4));
    assert_eq!(metadata_version("x.metadata.json"), None);
    assert_eq!(
        root_of_metadata_file(&Path::from("w/t/metadata/v1.metadata.json")),
        Path::from("w/t")
    );
    assert_eq!(
        root_of_metadata_file(&Path::from("w/elsewhere/v1.metadata.json")),
        Path::from("w/elsewhere")
    );
}

#[test]
fn empty_partition_records_are_left_out_of_the_read_schema() {
    let writer = json!({
        "type": "record", "name": "manifest_entry", "fields": [
            {"name": "status", "type": "int"},
            {"name": "data_file", "type": {"type": "record", "name": "r2", "fields": [
                {"name": "file_path", "type": "string"},
                {"name": "partition", "type": {"type": "record", "name": "r102", "fields": []}},
                {"name": "old", "type": ["null", {"type": "record", "name": "r103", "fields": []}]},
                {"name": "lower_bounds", "type": ["null", {"type": "array", "items":
                    {"type": "record", "name": "k126_v127", "fields": [
                        {"name": "key", "type": "int"}, {"name": "value", "type": "bytes"}]}}]},
            ]}},
        ]
    });
    let pruned: Value = serde_json::from_str(
        &manifest::without_empty_records(&writer.to_string()).expect("pruned"),
    )
    .expect("json");
    let names: Vec<&str> = pruned["fields"][1]["type"]["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert_eq!(names, vec!["file_path", "lower_bounds"]);
    let kept = json!({"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]});
    assert_eq!(manifest::without_empty_records(&kept.to_string()), None);
}
