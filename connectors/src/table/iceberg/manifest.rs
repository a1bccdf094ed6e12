//! Manifest lists and manifests (Avro object container files), decoded with
//! arrow-avro and read back by field name, so that the fields each format
//! version adds or drops are simply absent or present.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StructArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use arrow_avro::reader::{read_header_info, ReaderBuilder};
use arrow_avro::schema::AvroSchema;
use serde_json::Value;

use super::plan::{Entry, ManifestFile, CONTENT_DATA};

/// The batches of an Avro file and the key/value metadata of its header.
pub(crate) type Decoded = (Vec<RecordBatch>, Vec<(String, String)>);

/// Decodes an Avro object container file: its batches and the key/value
/// metadata of its header.
pub(crate) fn decode_avro(bytes: &[u8]) -> Result<Decoded, String> {
    let mut builder = ReaderBuilder::new().with_batch_size(8192);
    let writer_schema = read_header_info(bytes)
        .and_then(|h| h.writer_schema())
        .map_err(|e| e.to_string())?;
    if let Some(pruned) = without_empty_records(&writer_schema.json_string) {
        builder = builder.with_reader_schema(AvroSchema::new(pruned));
    }
    let reader = builder.build(bytes).map_err(|e| e.to_string())?;
    let header = reader
        .avro_header()
        .metadata()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect();
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    Ok((batches, header))
}

/// The writer schema without the fields whose type is a record of no fields
/// (the `partition` of an unpartitioned table), which Arrow cannot hold; the
/// schema to read with then, or `None` when there are none.
pub(crate) fn without_empty_records(schema: &str) -> Option<String> {
    let mut value: Value = serde_json::from_str(schema).ok()?;
    if prune(&mut value) {
        Some(value.to_string())
    } else {
        None
    }
}

/// Drops fields of empty record type from the records in `ty`; whether any went.
fn prune(ty: &mut Value) -> bool {
    match ty {
        Value::Array(branches) => branches.iter_mut().fold(false, |any, b| prune(b) | any),
        Value::Object(object) => {
            let mut pruned = false;
            for key in ["items", "values"] {
                if let Some(inner) = object.get_mut(key) {
                    pruned |= prune(inner);
                }
            }
            if object.get("type").and_then(Value::as_str) == Some("record") {
                if let Some(Value::Array(fields)) = object.get_mut("fields") {
                    for field in fields.iter_mut() {
                        if let Some(inner) = field.get_mut("type") {
                            pruned |= prune(inner);
                        }
                    }
                    let before = fields.len();
                    fields.retain(|f| !f.get("type").is_some_and(is_empty_record));
                    pruned |= fields.len() != before;
                }
            }
            pruned
        }
        _ => false,
    }
}

/// Whether a type is a record of no fields (or a union of null and one).
fn is_empty_record(ty: &Value) -> bool {
    match ty {
        Value::Object(object) => {
            object.get("type").and_then(Value::as_str) == Some("record")
                && object
                    .get("fields")
                    .and_then(Value::as_array)
                    .is_some_and(|f| f.is_empty())
        }
        Value::Array(branches) => {
            branches.iter().any(is_empty_record)
                && branches
                    .iter()
                    .all(|b| is_empty_record(b) || b.as_str() == Some("null"))
        }
        _ => false,
    }
}

/// Reads a manifest list.
pub(crate) fn read_manifest_list(bytes: &[u8]) -> Result<Vec<ManifestFile>, String> {
    let (batches, _) = decode_avro(bytes)?;
    let mut out = Vec::new();
    for batch in &batches {
        let n = batch.num_rows();
        let columns = Columns::of_batch(batch);
        let paths = columns.strings("manifest_path")?;
        let specs = columns.ints("partition_spec_id")?;
        let contents = columns.ints("content")?;
        let sequences = columns.ints("sequence_number")?;
        let added = columns.ints("added_snapshot_id")?;
        for row in 0..n {
            let path = paths
                .get(row)
                .cloned()
                .flatten()
                .ok_or("a manifest without a path")?;
            out.push(ManifestFile {
                path,
                spec_id: at(&specs, row).unwrap_or(0) as i32,
                content: at(&contents, row).unwrap_or(0) as i32,
                sequence_number: at(&sequences, row).unwrap_or(0),
                added_snapshot_id: at(&added, row),
            });
        }
    }
    Ok(out)
}

/// Reads a manifest's entries. `manifest` gives what entries inherit; a spec
/// id the manifest's header names wins over the list's (v1 inline manifests
/// have no list).
pub(crate) fn read_manifest(bytes: &[u8], manifest: &ManifestFile) -> Result<Vec<Entry>, String> {
    let (batches, header) = decode_avro(bytes)?;
    let spec_id = header
        .iter()
        .find(|(k, _)| k == "partition-spec-id")
        .and_then(|(_, v)| v.trim().parse::<i32>().ok())
        .unwrap_or(manifest.spec_id);
    let mut out = Vec::new();
    for batch in &batches {
        let n = batch.num_rows();
        let columns = Columns::of_batch(batch);
        let statuses = columns.ints("status")?;
        let snapshots = columns.ints("snapshot_id")?;
        let sequences = columns.ints("sequence_number")?;
        let data_file = batch
            .column_by_name("data_file")
            .and_then(|c| c.as_struct_opt())
            .ok_or("an entry without data_file")?;
        let file = Columns::of_struct(data_file);
        let contents = file.ints("content")?;
        let paths = file.strings("file_path")?;
        let formats = file.strings("file_format")?;
        let records = file.ints("record_count")?;
        let sizes = file.ints("file_size_in_bytes")?;
        let referenced = file.strings("referenced_data_file")?;
        let partitions = partition_tuples(file.get("partition"), n);
        for row in 0..n {
            let status = at(&statuses, row).ok_or("an entry without a status")? as i32;
            let file_path = paths
                .get(row)
                .cloned()
                .flatten()
                .ok_or("an entry without a file_path")?;
            out.push(Entry {
                status,
                snapshot_id: at(&snapshots, row).or(manifest.added_snapshot_id),
                sequence_number: at(&sequences, row).unwrap_or(manifest.sequence_number),
                content: at(&contents, row).unwrap_or(CONTENT_DATA as i64) as i32,
                file_path,
                file_format: formats
                    .get(row)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| "PARQUET".to_string()),
                record_count: at(&records, row).unwrap_or(0),
                file_size: at(&sizes, row).unwrap_or(0),
                referenced_data_file: referenced.get(row).cloned().flatten(),
                spec_id,
                partition: partitions.get(row).cloned().unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

/// The partition tuple of each of `rows` entries, from the `partition`
/// struct column (absent for an unpartitioned table).
fn partition_tuples(column: Option<&ArrayRef>, rows: usize) -> Vec<Vec<(String, Option<String>)>> {
    let mut out = vec![Vec::new(); rows];
    let Some(partition) = column.and_then(|c| c.as_struct_opt()) else {
        return out;
    };
    for (field, values) in partition.fields().iter().zip(partition.columns()) {
        let Ok(strings) = cast(values, &DataType::Utf8) else {
            continue;
        };
        let strings = strings.as_string::<i32>();
        for (row, tuple) in out.iter_mut().enumerate() {
            let value = (!strings.is_null(row) && !partition.is_null(row))
                .then(|| strings.value(row).to_string());
            tuple.push((field.name().clone(), value));
        }
    }
    out
}

/// The value of an optional column at `row`.
fn at(values: &[Option<i64>], row: usize) -> Option<i64> {
    values.get(row).copied().flatten()
}

/// The named columns of a batch or a struct.
struct Columns<'a> {
    names: Vec<&'a str>,
    arrays: &'a [ArrayRef],
}

impl<'a> Columns<'a> {
    fn of_batch(batch: &'a RecordBatch) -> Self {
        Columns {
            names: batch
                .schema_ref()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect(),
            arrays: batch.columns(),
        }
    }

    fn of_struct(array: &'a StructArray) -> Self {
        Columns {
            names: array.fields().iter().map(|f| f.name().as_str()).collect(),
            arrays: array.columns(),
        }
    }

    fn get(&self, name: &str) -> Option<&'a ArrayRef> {
        self.names
            .iter()
            .position(|n| *n == name)
            .map(|i| &self.arrays[i])
    }

    /// An integer column as i64s; an absent column is all nulls (empty).
    fn ints(&self, name: &str) -> Result<Vec<Option<i64>>, String> {
        let Some(array) = self.get(name) else {
            return Ok(Vec::new());
        };
        let array = cast(array, &DataType::Int64).map_err(|e| format!("{name}: {e}"))?;
        Ok(array.as_primitive::<Int64Type>().iter().collect())
    }

    /// A string column; an absent column is all nulls (empty).
    fn strings(&self, name: &str) -> Result<Vec<Option<String>>, String> {
        let Some(array) = self.get(name) else {
            return Ok(Vec::new());
        };
        let array = cast(array, &DataType::Utf8).map_err(|e| format!("{name}: {e}"))?;
        Ok(array
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect())
    }
}

/// The rows of a position delete file: (data file path, position).
pub(crate) fn position_deletes(batches: &[RecordBatch]) -> Result<Vec<(String, u64)>, String> {
    let mut out = Vec::new();
    for batch in batches {
        let columns = Columns::of_batch(batch);
        if columns.get("file_path").is_none() || columns.get("pos").is_none() {
            return Err("a position delete file without file_path and pos columns".to_string());
        }
        let paths = columns.strings("file_path")?;
        let positions = columns.ints("pos")?;
        for (path, pos) in paths.into_iter().zip(positions) {
            if let (Some(path), Some(pos)) = (path, pos) {
                out.push((path, pos.max(0) as u64));
            }
        }
    }
    Ok(out)
}
