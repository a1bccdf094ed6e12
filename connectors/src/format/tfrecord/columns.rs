//! Rows of `Example` records built into the columns of the merged schema:
//! a scalar column takes a feature's one value, a list column all of them,
//! a list-of-lists column a feature list's steps, and a feature missing from
//! a record is null there.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, Float32Builder, Int64Builder, ListArray, ListBuilder, StringBuilder,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, FieldRef, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use super::wire::{Record, Values};
use super::FORMAT;
use crate::error::{Error, Result};

/// The builder of one column, by its type.
enum Column {
    Int64(Int64Builder),
    Float(Float32Builder),
    Utf8(StringBuilder),
    Binary(BinaryBuilder),
    Int64s(ListBuilder<Int64Builder>),
    Floats(ListBuilder<Float32Builder>),
    Utf8s(ListBuilder<StringBuilder>),
    Binaries(ListBuilder<BinaryBuilder>),
    /// A list of lists: a feature list's steps.
    Steps(Box<Steps>),
}

/// The steps of feature lists: a list column of the steps' values, and
/// where each row's steps start.
struct Steps {
    field: FieldRef,
    inner: Column,
    offsets: Vec<i32>,
    valid: Vec<bool>,
}

impl Steps {
    /// Appends one record's steps.
    fn push(&mut self, steps: &[Values<'_>]) -> std::result::Result<(), String> {
        for step in steps {
            self.inner.push(step)?;
        }
        self.end_row(steps.len(), true)
    }

    fn end_row(&mut self, steps: usize, valid: bool) -> std::result::Result<(), String> {
        let last = self.offsets.last().copied().unwrap_or(0);
        let next = i32::try_from(steps)
            .ok()
            .and_then(|n| last.checked_add(n))
            .ok_or_else(|| "more steps than a batch holds".to_string())?;
        self.offsets.push(next);
        self.valid.push(valid);
        Ok(())
    }

    fn finish(&mut self) -> std::result::Result<ArrayRef, String> {
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        let valid = std::mem::take(&mut self.valid);
        let array = ListArray::try_new(
            self.field.clone(),
            OffsetBuffer::new(offsets.into()),
            self.inner.finish()?,
            Some(NullBuffer::from(valid)),
        )
        .map_err(|e| e.to_string())?;
        Ok(Arc::new(array))
    }
}

impl Column {
    /// A builder for a column of `data_type`; `None` for a type no
    /// feature reads as.
    fn new(data_type: &DataType) -> Option<Column> {
        Some(match data_type {
            DataType::Int64 => Column::Int64(Int64Builder::new()),
            DataType::Float32 => Column::Float(Float32Builder::new()),
            DataType::Utf8 => Column::Utf8(StringBuilder::new()),
            DataType::Binary => Column::Binary(BinaryBuilder::new()),
            DataType::List(item) if matches!(item.data_type(), DataType::List(_)) => {
                let DataType::List(inner) = item.data_type() else {
                    return None;
                };
                Column::Steps(Box::new(Steps {
                    field: item.clone(),
                    inner: Self::list(inner)?,
                    offsets: vec![0],
                    valid: Vec::new(),
                }))
            }
            DataType::List(item) => Self::list(item)?,
            _ => return None,
        })
    }

    fn list(item: &FieldRef) -> Option<Column> {
        let field = item.clone();
        Some(match item.data_type() {
            DataType::Int64 => {
                Column::Int64s(ListBuilder::new(Int64Builder::new()).with_field(field))
            }
            DataType::Float32 => {
                Column::Floats(ListBuilder::new(Float32Builder::new()).with_field(field))
            }
            DataType::Utf8 => {
                Column::Utf8s(ListBuilder::new(StringBuilder::new()).with_field(field))
            }
            DataType::Binary => {
                Column::Binaries(ListBuilder::new(BinaryBuilder::new()).with_field(field))
            }
            _ => return None,
        })
    }

    fn is_list(&self) -> bool {
        matches!(
            self,
            Column::Int64s(_) | Column::Floats(_) | Column::Utf8s(_) | Column::Binaries(_)
        )
    }

    fn push_null(&mut self) {
        match self {
            Column::Int64(b) => b.append_null(),
            Column::Float(b) => b.append_null(),
            Column::Utf8(b) => b.append_null(),
            Column::Binary(b) => b.append_null(),
            Column::Int64s(b) => b.append_null(),
            Column::Floats(b) => b.append_null(),
            Column::Utf8s(b) => b.append_null(),
            Column::Binaries(b) => b.append_null(),
            Column::Steps(s) => {
                // A null row: no steps, so the offset cannot overflow.
                let _ = s.end_row(0, false);
            }
        }
    }

    /// Appends one record's values; `Err` with what does not fit.
    fn push(&mut self, values: &Values<'_>) -> std::result::Result<(), String> {
        if !self.is_list() && values.len() > 1 {
            return Err(format!("{} values", values.len()));
        }
        match (self, values) {
            (column, Values::Unset) => column.push_null(),
            (Column::Int64(b), Values::Int64(v)) => b.append_option(v.first().copied()),
            (Column::Float(b), Values::Float(v)) => b.append_option(v.first().copied()),
            (Column::Binary(b), Values::Bytes(v)) => b.append_option(v.first()),
            (Column::Utf8(b), Values::Bytes(v)) => match v.first() {
                Some(bytes) => b.append_value(utf8(bytes)?),
                None => b.append_null(),
            },
            (Column::Int64s(b), Values::Int64(v)) => {
                b.values().append_slice(v);
                b.append(true);
            }
            (Column::Floats(b), Values::Float(v)) => {
                b.values().append_slice(v);
                b.append(true);
            }
            (Column::Binaries(b), Values::Bytes(v)) => {
                for bytes in v {
                    b.values().append_value(bytes);
                }
                b.append(true);
            }
            (Column::Utf8s(b), Values::Bytes(v)) => {
                for bytes in v {
                    b.values().append_value(utf8(bytes)?);
                }
                b.append(true);
            }
            (Column::Steps(_), _) => return Err("a feature, not a feature list".to_string()),
            (_, other) => return Err(format!("{} values", kind_name(other))),
        }
        Ok(())
    }

    /// Appends one record's feature list.
    fn push_steps(&mut self, steps: &[Values<'_>]) -> std::result::Result<(), String> {
        match self {
            Column::Steps(s) => s.push(steps),
            _ => Err("a feature list".to_string()),
        }
    }

    fn finish(&mut self) -> std::result::Result<ArrayRef, String> {
        Ok(match self {
            Column::Steps(s) => return s.finish(),
            Column::Int64(b) => Arc::new(b.finish()),
            Column::Float(b) => Arc::new(b.finish()),
            Column::Utf8(b) => Arc::new(b.finish()),
            Column::Binary(b) => Arc::new(b.finish()),
            Column::Int64s(b) => Arc::new(b.finish()),
            Column::Floats(b) => Arc::new(b.finish()),
            Column::Utf8s(b) => Arc::new(b.finish()),
            Column::Binaries(b) => Arc::new(b.finish()),
        })
    }
}

fn utf8(bytes: &[u8]) -> std::result::Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|_| "bytes that are not UTF-8".to_string())
}

fn kind_name(values: &Values<'_>) -> &'static str {
    match values {
        Values::Int64(_) => "int64",
        Values::Float(_) => "float",
        Values::Bytes(_) => "bytes",
        Values::Unset => "no",
    }
}

/// Rows being built into a batch of the merged schema.
pub(super) struct Rows {
    schema: SchemaRef,
    columns: Vec<Column>,
    index: HashMap<String, usize>,
    filled: Vec<bool>,
    rows: usize,
    display: String,
}

impl Rows {
    /// Builders for every column of `schema`; an error naming the file
    /// when a column has a type no feature reads as.
    pub(super) fn new(schema: &SchemaRef, display: &str) -> Result<Rows> {
        let mut columns = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let column = Column::new(field.data_type()).ok_or_else(|| {
                Error::corrupt(
                    display,
                    FORMAT,
                    format!(
                        "column `{}` is {} in the schema, which no feature reads as",
                        field.name(),
                        field.data_type()
                    ),
                )
            })?;
            columns.push(column);
        }
        let index = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name().clone(), i))
            .collect();
        Ok(Rows {
            schema: schema.clone(),
            filled: vec![false; columns.len()],
            columns,
            index,
            rows: 0,
            display: display.to_string(),
        })
    }

    /// Rows pushed since the last batch.
    pub(super) fn len(&self) -> usize {
        self.rows
    }

    /// Appends record number `number`.
    pub(super) fn push(&mut self, record: &Record<'_>, number: u64) -> Result<()> {
        self.filled.iter_mut().for_each(|f| *f = false);
        for (key, values) in &record.features {
            self.fill(key, number, |column| column.push(values))?;
        }
        for (key, steps) in &record.lists {
            self.fill(key, number, |column| column.push_steps(steps))?;
        }
        for (column, filled) in self.columns.iter_mut().zip(&self.filled) {
            if !filled {
                column.push_null();
            }
        }
        self.rows += 1;
        Ok(())
    }

    /// Fills the column of feature `key` (if the schema has it) with `push`.
    fn fill(
        &mut self,
        key: &[u8],
        record: u64,
        push: impl FnOnce(&mut Column) -> std::result::Result<(), String>,
    ) -> Result<()> {
        let name = String::from_utf8_lossy(key);
        let Some(&i) = self.index.get(&*name) else {
            return Ok(());
        };
        push(&mut self.columns[i]).map_err(|why| {
            Error::corrupt(
                &self.display,
                FORMAT,
                format!(
                    "record {record}: feature `{name}` has {why}, but its column is {} (the file changed after it was inspected?)",
                    self.schema.field(i).data_type()
                ),
            )
        })?;
        self.filled[i] = true;
        Ok(())
    }

    /// The rows pushed so far as a batch; the builders start again.
    pub(super) fn finish(&mut self) -> Result<RecordBatch> {
        let rows = std::mem::take(&mut self.rows);
        let arrays = self
            .columns
            .iter_mut()
            .map(Column::finish)
            .collect::<std::result::Result<Vec<ArrayRef>, String>>()
            .map_err(|e| Error::corrupt(&self.display, FORMAT, e))?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(self.schema.clone(), arrays, &options)
            .map_err(|e| Error::corrupt(&self.display, FORMAT, e))
    }
}
