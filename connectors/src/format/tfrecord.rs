//! TFRecord files of `tf.train.Example` records, as TensorFlow's
//! `tf.io.TFRecordWriter` writes them: uncompressed, GZIP or ZLIB, every
//! record's framing checked by its masked CRC32C.
//!
//! Features become columns as spark-tfrecord infers them, over every record
//! of the file (inspection reads the whole file once) and then across the
//! files ([`widen_across_files`]): a feature with one value in every record
//! that has it is a scalar, otherwise a list; `int64` is Int64, `float`
//! Float32, `bytes` Utf8 when every value is valid UTF-8, else Binary. A
//! feature missing from a record is null there. Columns are in the order of
//! their names. A `tf.train.SequenceExample` reads as its context's
//! features, as an `Example`'s, and its feature lists as lists of lists (a
//! list a step).

mod columns;
mod framing;
mod wire;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::stream::BoxStream;

use self::framing::{FrameError, Records};
use self::wire::{Record, Values, WireError};
use super::text_io::{decode_blocking, from_io, read_head};
use super::{FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest};
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::split::Split;
use crate::store::Location;

/// The format's name in messages.
const FORMAT: &str = "tfrecord";

/// TFRecord files of `tf.train.Example` records.
pub(super) struct TfRecord;

#[async_trait]
impl FileFormat for TfRecord {
    /// Reads every record of the file: its schema as inferred from all of
    /// them, and its row count.
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        _opts: &FormatOptions,
    ) -> Result<FileInfo> {
        let named = Codec::from_path(file.path.as_ref());
        let (schema, rows, codec) = read_head(loc, file, FORMAT, move |input, display| {
            let records =
                framing::open(Box::new(input), named).map_err(|e| from_io(display, FORMAT, e))?;
            let codec = records.codec();
            let (schema, rows) = infer(records, display)?;
            Ok((schema, rows, codec))
        })
        .await?;
        let mut info = FileInfo::schema_only(schema.clone()).with_detail(detail(codec, &schema));
        info.rows = Some(rows);
        Ok(info)
    }

    /// Streams the records of a file as rows of the merged schema.
    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let schema = request.data_schema.clone();
        let batch_size = request.options.batch_size.max(1);
        let display = loc.display(&split.object_path());
        let codec = split.codec;
        decode_blocking(loc, split, FORMAT, move |input, emit| {
            let records = framing::open(input, codec).map_err(|e| from_io(&display, FORMAT, e))?;
            read_rows(records, &schema, batch_size, &display, emit)
        })
    }
}

/// What `ls` says of a file: its records (`SequenceExample` when it has
/// feature lists, read as lists of lists) and their compression, as
/// TensorFlow names it.
fn detail(codec: Codec, schema: &Schema) -> String {
    let records = if schema.fields().iter().any(|f| nested(f.data_type())) {
        "SequenceExample"
    } else {
        "Example"
    };
    match codec {
        Codec::None => records.to_string(),
        Codec::Deflate => format!("{records}, zlib"),
        other => format!("{records}, {other}"),
    }
}

/// Decodes every record into rows of `schema`, `batch_size` rows a batch.
fn read_rows(
    mut records: Records<Box<dyn BufRead + Send>>,
    schema: &SchemaRef,
    batch_size: usize,
    display: &str,
    emit: &mut dyn FnMut(Result<RecordBatch>) -> bool,
) -> Result<()> {
    let mut rows = columns::Rows::new(schema, display)?;
    let mut count = 0u64;
    loop {
        let data = match records.next_record() {
            Ok(Some(data)) => data,
            Ok(None) => break,
            Err(e) => return Err(frame_error(display, e)),
        };
        count += 1;
        let record = wire::parse_record(data).map_err(|e| wire_error(display, count, e))?;
        rows.push(&record, count)?;
        if rows.len() >= batch_size && !emit(rows.finish()) {
            return Ok(());
        }
    }
    if rows.len() > 0 {
        emit(rows.finish());
    }
    Ok(())
}

/// A framing error as the crate's error, naming the file.
fn frame_error(display: &str, e: FrameError) -> Error {
    match e {
        FrameError::Io(e) => from_io(display, FORMAT, e),
        FrameError::Damaged(why) => Error::corrupt(display, FORMAT, why),
    }
}

/// A record that is not an `Example`, naming the file and the record.
fn wire_error(display: &str, record: u64, e: WireError) -> Error {
    Error::corrupt(display, FORMAT, format!("record {record} is {e}"))
}

/// The kind of a feature's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int64,
    Float,
    Bytes,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Int64 => "int64",
            Kind::Float => "float",
            Kind::Bytes => "bytes",
        }
    }
}

/// What the records of a file showed of one feature.
#[derive(Debug)]
struct Seen {
    kind: Kind,
    /// The record it was first seen in.
    first: u64,
    /// Some record held other than one value.
    list: bool,
    /// Some value was not valid UTF-8.
    binary: bool,
    /// It is a feature list of a `SequenceExample` (a list a step).
    sequence: bool,
}

impl Seen {
    fn data_type(&self) -> DataType {
        let item = match self.kind {
            Kind::Int64 => DataType::Int64,
            Kind::Float => DataType::Float32,
            Kind::Bytes if self.binary => DataType::Binary,
            Kind::Bytes => DataType::Utf8,
        };
        if self.sequence {
            list_of(list_of(item))
        } else if self.list {
            list_of(item)
        } else {
            item
        }
    }

    /// What it is, in messages.
    fn describe(&self) -> String {
        let kind = self.kind.name();
        if self.sequence {
            format!("a feature list of {kind}")
        } else {
            kind.to_string()
        }
    }
}

/// Whether a column is a list of lists (a feature list's steps).
fn nested(data_type: &DataType) -> bool {
    match data_type {
        DataType::List(item) => matches!(item.data_type(), DataType::List(_)),
        _ => false,
    }
}

/// A list of `item`s, nullable.
fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(item, true)))
}

/// Reads every record: the schema they show (columns by name) and how many
/// there are.
fn infer<R: std::io::Read>(mut records: Records<R>, display: &str) -> Result<(SchemaRef, u64)> {
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let mut count = 0u64;
    loop {
        let record = match records.next_record() {
            Ok(Some(data)) => data,
            Ok(None) => break,
            Err(e) => return Err(frame_error(display, e)),
        };
        count += 1;
        let parsed = wire::parse_record(record).map_err(|e| wire_error(display, count, e))?;
        observe_record(&mut seen, &parsed, count, display)?;
    }
    let (file, codec) = (display, records.codec());
    tracing::debug!(
        path = file,
        records = count,
        %codec,
        features = seen.len(),
        "tfrecord inspected"
    );
    let fields: Vec<Field> = seen
        .iter()
        .map(|(name, s)| Field::new(name, s.data_type(), true))
        .collect();
    Ok((Arc::new(Schema::new(fields)), count))
}

/// Adds what record number `number` holds to what was seen.
fn observe_record(
    seen: &mut BTreeMap<String, Seen>,
    record: &Record<'_>,
    number: u64,
    display: &str,
) -> Result<()> {
    for (key, values) in &record.features {
        observe(seen, key, values, false, number, display)?;
    }
    for (key, steps) in &record.lists {
        for values in steps {
            observe(seen, key, values, true, number, display)?;
        }
    }
    Ok(())
}

/// Adds one record's values of feature `key` (a step of a feature list
/// when `sequence`) to what was seen of it.
fn observe(
    seen: &mut BTreeMap<String, Seen>,
    key: &[u8],
    values: &Values<'_>,
    sequence: bool,
    record: u64,
    display: &str,
) -> Result<()> {
    let (kind, binary) = match values {
        Values::Int64(_) => (Kind::Int64, false),
        Values::Float(_) => (Kind::Float, false),
        Values::Bytes(v) => (
            Kind::Bytes,
            v.iter().any(|b| std::str::from_utf8(b).is_err()),
        ),
        Values::Unset => return Ok(()),
    };
    let name = String::from_utf8_lossy(key);
    let list = values.len() != 1;
    let new = Seen {
        kind,
        first: record,
        list,
        binary,
        sequence,
    };
    match seen.get_mut(&*name) {
        Some(s) if s.kind != kind || s.sequence != sequence => Err(Error::SchemaClash {
            column: name.into_owned(),
            left: format!("{display} (record {})", s.first),
            left_type: s.describe(),
            right: format!("{display} (record {record})"),
            right_type: new.describe(),
        }),
        Some(s) => {
            s.list |= list;
            s.binary |= binary;
            Ok(())
        }
        None => {
            seen.insert(name.into_owned(), new);
            Ok(())
        }
    }
}

/// The type both `a` and `b` read as: a list if either is (a scalar is a
/// list of one), Binary if either is Binary and the other Utf8; `None` when
/// their kinds differ, or a feature list meets a feature.
fn widen_pair(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::{Binary, List, Utf8};
    match (a, b) {
        (x, y) if x == y => Some(x.clone()),
        (Utf8, Binary) | (Binary, Utf8) => Some(Binary),
        (List(x), List(y)) if nested(a) == nested(b) => {
            Some(list_of(widen_pair(x.data_type(), y.data_type())?))
        }
        (List(x), y) | (y, List(x)) if !nested(a) && !nested(b) && !matches!(y, List(_)) => {
            Some(list_of(widen_pair(x.data_type(), y)?))
        }
        _ => None,
    }
}

/// Infers the features' types across the files, as spark-tfrecord does
/// across all records: a feature that is a list in one file is a list in
/// all, and bytes that are Binary in one file are Binary in all. Features
/// whose kinds differ between files are left as they are, for the schema
/// merge to refuse naming both files.
pub(crate) fn widen_across_files(infos: &mut [FileInfo]) {
    super::widen_columns(infos, widen_pair, |f, t| {
        Field::new(f.name(), t.clone(), true)
    });
}

#[cfg(test)]
mod tests;
