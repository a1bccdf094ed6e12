//! The table metadata file (`*.metadata.json`) of the Iceberg spec, format
//! versions 1 to 3: schemas, partition specs, snapshots and the snapshot log,
//! and the conversion of an Iceberg schema to Arrow.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema, TimeUnit};
use serde::Deserialize;
use serde_json::Value;

/// The parts of a table metadata file that reading a snapshot needs.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct TableMetadata {
    /// 1, 2 or 3.
    pub format_version: u8,
    /// The table's location when the metadata was written.
    #[serde(default)]
    pub location: String,
    /// Every schema the table had (v2; optional in v1).
    #[serde(default)]
    pub schemas: Vec<IcebergSchema>,
    /// The v1 table schema.
    #[serde(default)]
    pub schema: Option<IcebergSchema>,
    /// The id of the current schema in [`Self::schemas`].
    #[serde(default)]
    pub current_schema_id: Option<i32>,
    /// Every partition spec the table had (v2; optional in v1).
    #[serde(default)]
    pub partition_specs: Vec<PartitionSpec>,
    /// The v1 partition spec's fields.
    #[serde(default)]
    pub partition_spec: Option<Vec<Value>>,
    /// The snapshot that is current, if any (`-1` or absent: none).
    #[serde(default)]
    pub current_snapshot_id: Option<i64>,
    /// The snapshots that are kept.
    #[serde(default)]
    pub snapshots: Vec<Snapshot>,
    /// When each snapshot became current, oldest first.
    #[serde(default)]
    pub snapshot_log: Vec<SnapshotLogEntry>,
}

/// One schema of the table.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct IcebergSchema {
    /// Its id (absent in old v1 metadata: 0).
    #[serde(default)]
    pub schema_id: i32,
    /// Its top-level fields.
    pub fields: Vec<NestedField>,
}

/// A field of a schema or a struct.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct NestedField {
    /// The field id (the Parquet field id in data files).
    pub id: i32,
    /// Its current name.
    pub name: String,
    /// Its type: a primitive name or a nested type object.
    #[serde(rename = "type")]
    pub ty: Value,
    /// The value rows written before the field existed hold (v3).
    #[serde(default)]
    pub initial_default: Option<Value>,
}

/// One partition spec.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct PartitionSpec {
    /// Its id, named by manifests.
    pub spec_id: i32,
    /// Its fields (transforms of source columns).
    #[serde(default)]
    pub fields: Vec<PartitionField>,
}

/// One field of a partition spec.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct PartitionField {
    /// `identity`, `bucket[N]`, `day`, `void`...
    pub transform: String,
    /// The field's name (the partition tuple's field name).
    #[serde(default)]
    pub name: String,
    /// The schema field it is computed from.
    #[serde(default)]
    pub source_id: i32,
}

/// One snapshot of the table.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct Snapshot {
    /// Its id.
    pub snapshot_id: i64,
    /// The snapshot it was committed on top of.
    #[serde(default)]
    pub parent_snapshot_id: Option<i64>,
    /// When it was committed, in milliseconds since the epoch.
    pub timestamp_ms: i64,
    /// Its manifest list (Avro).
    #[serde(default)]
    pub manifest_list: Option<String>,
    /// Its manifests, listed inline (v1 only, instead of a manifest list).
    #[serde(default)]
    pub manifests: Option<Vec<String>>,
    /// `operation` and statistics.
    #[serde(default)]
    pub summary: BTreeMap<String, Value>,
    /// The schema current when it was written.
    #[serde(default)]
    pub schema_id: Option<i32>,
}

impl Snapshot {
    /// The operation the summary names (`append`, `replace`, `overwrite`, `delete`).
    pub fn operation(&self) -> &str {
        self.summary
            .get("operation")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// One entry of the snapshot log.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct SnapshotLogEntry {
    /// When the snapshot became current.
    pub timestamp_ms: i64,
    /// The snapshot.
    pub snapshot_id: i64,
}

impl TableMetadata {
    /// Parses a metadata file.
    pub fn parse(bytes: &[u8]) -> Result<TableMetadata, String> {
        let metadata: TableMetadata = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if !(1..=3).contains(&metadata.format_version) {
            return Err(format!(
                "format version {} is not supported (1, 2 and 3 are)",
                metadata.format_version
            ));
        }
        Ok(metadata)
    }

    /// The snapshot with this id, if it is kept.
    pub fn snapshot(&self, id: i64) -> Option<&Snapshot> {
        self.snapshots.iter().find(|s| s.snapshot_id == id)
    }

    /// The schema a snapshot was written with (the current one when it names none).
    pub fn schema_for(&self, snapshot: Option<&Snapshot>) -> Option<&IcebergSchema> {
        if let Some(id) = snapshot.and_then(|s| s.schema_id) {
            if let Some(schema) = self.schemas.iter().find(|s| s.schema_id == id) {
                return Some(schema);
            }
        }
        self.current_schema()
    }

    /// The current schema.
    pub fn current_schema(&self) -> Option<&IcebergSchema> {
        let by_id = self
            .current_schema_id
            .and_then(|id| self.schemas.iter().find(|s| s.schema_id == id));
        by_id
            .or(self.schema.as_ref())
            .or_else(|| self.schemas.last())
    }

    /// The fields of partition spec `spec_id` (the v1 `partition-spec` for
    /// spec 0 when the table lists no specs); `None` when it is unknown.
    pub fn spec_fields(&self, spec_id: i32) -> Option<Vec<PartitionField>> {
        if let Some(spec) = self.partition_specs.iter().find(|s| s.spec_id == spec_id) {
            return Some(spec.fields.clone());
        }
        if spec_id == 0 {
            if let Some(fields) = &self.partition_spec {
                return fields
                    .iter()
                    .map(|f| serde_json::from_value(f.clone()).ok())
                    .collect();
            }
        }
        None
    }

    /// Whether the partition spec `spec_id` partitions nothing (no fields, or
    /// only `void` ones). An unknown spec counts as partitioned.
    pub fn is_unpartitioned(&self, spec_id: i32) -> bool {
        if let Some(spec) = self.partition_specs.iter().find(|s| s.spec_id == spec_id) {
            return spec.fields.iter().all(|f| f.transform == "void");
        }
        if spec_id == 0 {
            if let Some(fields) = &self.partition_spec {
                return fields
                    .iter()
                    .all(|f| f.get("transform").and_then(Value::as_str) == Some("void"));
            }
        }
        false
    }

    /// The snapshot that was current at `ms`: the last in the snapshot log at
    /// or before it (or, without a log, the last committed at or before it).
    pub fn snapshot_as_of(&self, ms: i64) -> Option<i64> {
        if self.snapshot_log.is_empty() {
            return self
                .snapshots
                .iter()
                .filter(|s| s.timestamp_ms <= ms)
                .max_by_key(|s| s.timestamp_ms)
                .map(|s| s.snapshot_id);
        }
        self.snapshot_log
            .iter()
            .rfind(|e| e.timestamp_ms <= ms)
            .map(|e| e.snapshot_id)
    }

    /// The snapshots from `id` back through its parents, newest first, as far
    /// as they are kept.
    pub fn ancestry(&self, id: i64) -> Vec<&Snapshot> {
        let mut out: Vec<&Snapshot> = Vec::new();
        let mut next = Some(id);
        while let Some(id) = next {
            match self.snapshot(id) {
                Some(s) if !out.iter().any(|o| o.snapshot_id == id) => {
                    out.push(s);
                    next = s.parent_snapshot_id;
                }
                _ => break,
            }
        }
        out
    }
}

impl IcebergSchema {
    /// The Arrow schema of the table's columns (every field nullable, as
    /// rows of old files may lack them), and each top-level field's id.
    pub fn to_arrow(&self) -> Result<(Schema, Vec<(i32, String)>), String> {
        let mut fields = Vec::with_capacity(self.fields.len());
        let mut ids = Vec::with_capacity(self.fields.len());
        for field in &self.fields {
            if field.initial_default.as_ref().is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "column `{}` has a default value for rows written before it existed (format v3), which is not read",
                    field.name
                ));
            }
            let ty = arrow_type(&field.ty).map_err(|e| format!("column `{}`: {e}", field.name))?;
            fields.push(Field::new(&field.name, ty, true));
            ids.push((field.id, field.name.clone()));
        }
        Ok((Schema::new(fields), ids))
    }
}

/// The Arrow type of an Iceberg type.
pub(crate) fn arrow_type(ty: &Value) -> Result<DataType, String> {
    match ty {
        Value::String(name) => primitive(name),
        Value::Object(object) => match object.get("type").and_then(Value::as_str) {
            Some("struct") => {
                let fields: Vec<NestedField> = serde_json::from_value(
                    object
                        .get("fields")
                        .cloned()
                        .unwrap_or(Value::Array(vec![])),
                )
                .map_err(|e| format!("bad struct type: {e}"))?;
                let fields = fields
                    .iter()
                    .map(|f| {
                        arrow_type(&f.ty)
                            .map(|t| Field::new(&f.name, t, true))
                            .map_err(|e| format!("{}: {e}", f.name))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(DataType::Struct(Fields::from(fields)))
            }
            Some("list") => {
                let element = object.get("element").ok_or("a list without an element")?;
                Ok(DataType::List(Arc::new(Field::new(
                    "element",
                    arrow_type(element)?,
                    true,
                ))))
            }
            Some("map") => {
                let key = object.get("key").ok_or("a map without a key")?;
                let value = object.get("value").ok_or("a map without a value")?;
                let entries = Field::new(
                    "key_value",
                    DataType::Struct(Fields::from(vec![
                        Field::new("key", arrow_type(key)?, false),
                        Field::new("value", arrow_type(value)?, true),
                    ])),
                    false,
                );
                Ok(DataType::Map(Arc::new(entries), false))
            }
            other => Err(format!("unknown type {}", other.unwrap_or("(none)"))),
        },
        other => Err(format!("unknown type {other}")),
    }
}

/// The Arrow type of an Iceberg primitive type.
fn primitive(name: &str) -> Result<DataType, String> {
    let ty = match name {
        "boolean" => DataType::Boolean,
        "int" => DataType::Int32,
        "long" => DataType::Int64,
        "float" => DataType::Float32,
        "double" => DataType::Float64,
        "date" => DataType::Date32,
        "time" => DataType::Time64(TimeUnit::Microsecond),
        "timestamp" => DataType::Timestamp(TimeUnit::Microsecond, None),
        "timestamptz" => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        "timestamp_ns" => DataType::Timestamp(TimeUnit::Nanosecond, None),
        "timestamptz_ns" => DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        "string" => DataType::Utf8,
        "uuid" => DataType::FixedSizeBinary(16),
        "binary" => DataType::Binary,
        "unknown" => DataType::Null,
        _ => {
            if let Some(args) = name
                .strip_prefix("decimal(")
                .and_then(|r| r.strip_suffix(')'))
            {
                let (p, s) = args
                    .split_once(',')
                    .ok_or_else(|| format!("bad decimal type {name}"))?;
                let p: u8 = p
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad decimal type {name}"))?;
                let s: i8 = s
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad decimal type {name}"))?;
                DataType::Decimal128(p, s)
            } else if let Some(n) = name
                .strip_prefix("fixed[")
                .and_then(|r| r.strip_suffix(']'))
            {
                let n: i32 = n
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad fixed type {name}"))?;
                DataType::FixedSizeBinary(n)
            } else {
                return Err(format!("type {name} is not supported"));
            }
        }
    };
    Ok(ty)
}
