//! Merging the schemas of many files into one: missing columns become null,
//! integers widen; a real clash names both files and the column.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::error::{Error, Result};

/// Accumulates file schemas, remembering which file brought each column's type.
#[derive(Debug, Default)]
pub struct SchemaMerger {
    fields: Vec<Field>,
    origin: Vec<String>,
    index: HashMap<String, usize>,
}

impl SchemaMerger {
    /// Adds the schema of `file`.
    pub fn add(&mut self, file: &str, schema: &Schema) -> Result<()> {
        for field in schema.fields() {
            match self.index.get(field.name()) {
                None => {
                    self.index.insert(field.name().clone(), self.fields.len());
                    self.fields.push(field.as_ref().clone());
                    self.origin.push(file.to_string());
                }
                Some(&i) => {
                    let current = self.fields[i].data_type();
                    let merged =
                        widen(current, field.data_type()).ok_or_else(|| Error::SchemaClash {
                            column: field.name().clone(),
                            left: self.origin[i].clone(),
                            left_type: current.to_string(),
                            right: file.to_string(),
                            right_type: field.data_type().to_string(),
                        })?;
                    if &merged != current {
                        self.fields[i] = Field::new(field.name(), merged, true);
                    }
                }
            }
        }
        Ok(())
    }

    /// The merged schema; every column nullable, since a file may lack it.
    pub fn finish(self) -> SchemaRef {
        let fields: Vec<Field> = self
            .fields
            .into_iter()
            .map(|f| f.with_nullable(true))
            .collect();
        Arc::new(Schema::new(fields))
    }
}

/// The common type of a column seen as `a` in one file and `b` in another.
pub fn widen(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    if a == b {
        return Some(a.clone());
    }
    let int_rank = |t: &DataType| match t {
        Int8 => Some(1),
        Int16 => Some(2),
        Int32 => Some(3),
        Int64 => Some(4),
        UInt8 => Some(2),
        UInt16 => Some(3),
        UInt32 => Some(4),
        _ => None,
    };
    let float = |t: &DataType| matches!(t, Float16 | Float32 | Float64);
    match (a, b) {
        (Null, x) | (x, Null) => Some(x.clone()),
        (Utf8, LargeUtf8) | (LargeUtf8, Utf8) => Some(LargeUtf8),
        (Utf8View, Utf8) | (Utf8, Utf8View) => Some(Utf8),
        (Binary, LargeBinary) | (LargeBinary, Binary) => Some(LargeBinary),
        _ if float(a) && float(b) => Some(Float64),
        _ if (float(a) && int_rank(b).is_some()) || (float(b) && int_rank(a).is_some()) => {
            Some(Float64)
        }
        _ => match (int_rank(a), int_rank(b)) {
            (Some(x), Some(y)) => {
                Some([Int8, Int16, Int32, Int64][(x.max(y) - 1) as usize].clone())
            }
            _ => None,
        },
    }
}

/// The view type a string or binary type is read as (`None`: the type stays).
pub fn view_type(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::Utf8 | DataType::LargeUtf8 => Some(DataType::Utf8View),
        DataType::Binary | DataType::LargeBinary => Some(DataType::BinaryView),
        _ => None,
    }
}

/// The plain type a view type is handed on as (`None`: not a view).
pub fn plain_type(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::Utf8View => Some(DataType::Utf8),
        DataType::BinaryView => Some(DataType::Binary),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widens_and_fills_missing() {
        let mut m = SchemaMerger::default();
        m.add(
            "a",
            &Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("x", DataType::Int32, true),
            ]),
        )
        .expect("first");
        m.add(
            "b",
            &Schema::new(vec![
                Field::new("x", DataType::Int64, true),
                Field::new("y", DataType::Utf8, true),
            ]),
        )
        .expect("second");
        let s = m.finish();
        assert_eq!(s.field(1).data_type(), &DataType::Int64);
        assert_eq!(s.fields().len(), 3);
        assert!(s.field(0).is_nullable());
    }

    #[test]
    fn clash_names_both_files() {
        let mut m = SchemaMerger::default();
        m.add(
            "f1",
            &Schema::new(vec![Field::new("x", DataType::Int32, true)]),
        )
        .expect("first");
        let err = m
            .add(
                "f2",
                &Schema::new(vec![Field::new("x", DataType::Utf8, true)]),
            )
            .expect_err("clash");
        let msg = err.to_string();
        assert!(
            msg.contains("f1") && msg.contains("f2") && msg.contains("`x`"),
            "{msg}"
        );
    }
}
