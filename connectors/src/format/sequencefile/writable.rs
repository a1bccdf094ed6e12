//! Hadoop Writables as Arrow columns: each class a key or value may have,
//! the column it becomes, and its serialized bytes decoded into that column.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int16Builder,
    Int32Builder, Int64Builder, Int8Builder, StringBuilder,
};
use arrow::datatypes::{DataType, Field};

use super::wire::vlong_at;

/// The field metadata key that names a key's or value's Writable class when
/// its bytes are kept as they were serialized.
pub const CLASS_METADATA: &str = "hadoop.writable.class";

/// The Writables read into typed columns; any other class keeps its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writable {
    /// `Text` → Utf8.
    Text,
    /// `IntWritable` → Int32.
    Int,
    /// `LongWritable` → Int64.
    Long,
    /// `VIntWritable` → Int32.
    VInt,
    /// `VLongWritable` → Int64.
    VLong,
    /// `ShortWritable` → Int16.
    Short,
    /// `ByteWritable` → Int8.
    Byte,
    /// `FloatWritable` → Float32.
    Float,
    /// `DoubleWritable` → Float64.
    Double,
    /// `BooleanWritable` → Boolean.
    Boolean,
    /// `BytesWritable` → Binary.
    Bytes,
    /// `NullWritable`: no column.
    Null,
    /// Another class: its serialized bytes as Binary.
    Other,
}

const CLASSES: [(&str, Writable); 12] = [
    ("org.apache.hadoop.io.Text", Writable::Text),
    ("org.apache.hadoop.io.IntWritable", Writable::Int),
    ("org.apache.hadoop.io.LongWritable", Writable::Long),
    ("org.apache.hadoop.io.VIntWritable", Writable::VInt),
    ("org.apache.hadoop.io.VLongWritable", Writable::VLong),
    ("org.apache.hadoop.io.ShortWritable", Writable::Short),
    ("org.apache.hadoop.io.ByteWritable", Writable::Byte),
    ("org.apache.hadoop.io.FloatWritable", Writable::Float),
    ("org.apache.hadoop.io.DoubleWritable", Writable::Double),
    ("org.apache.hadoop.io.BooleanWritable", Writable::Boolean),
    ("org.apache.hadoop.io.BytesWritable", Writable::Bytes),
    ("org.apache.hadoop.io.NullWritable", Writable::Null),
];

impl Writable {
    /// The Writable of a class name.
    pub(crate) fn of(class: &str) -> Writable {
        CLASSES
            .iter()
            .find(|(name, _)| *name == class)
            .map_or(Writable::Other, |&(_, w)| w)
    }

    /// The Arrow type of its column; `None` for `NullWritable`.
    fn data_type(self) -> Option<DataType> {
        Some(match self {
            Writable::Text => DataType::Utf8,
            Writable::Int | Writable::VInt => DataType::Int32,
            Writable::Long | Writable::VLong => DataType::Int64,
            Writable::Short => DataType::Int16,
            Writable::Byte => DataType::Int8,
            Writable::Float => DataType::Float32,
            Writable::Double => DataType::Float64,
            Writable::Boolean => DataType::Boolean,
            Writable::Bytes | Writable::Other => DataType::Binary,
            Writable::Null => return None,
        })
    }

    /// The column `name` of a key or value of `class`; `None` for
    /// `NullWritable`. A class kept as bytes is named in the field's
    /// metadata.
    pub(crate) fn field(class: &str, name: &str) -> Option<Field> {
        let writable = Writable::of(class);
        let field = Field::new(name, writable.data_type()?, true);
        Some(if writable == Writable::Other {
            field.with_metadata(HashMap::from([(
                CLASS_METADATA.to_string(),
                class.to_string(),
            )]))
        } else {
            field
        })
    }

    /// The short name users know (`IntWritable`).
    pub(crate) fn short_name(class: &str) -> &str {
        class.rsplit(['.', '$']).next().unwrap_or(class)
    }
}

/// One column being built from serialized Writables.
pub(crate) enum Column {
    Text(StringBuilder),
    Int32(Int32Builder, bool),
    Int64(Int64Builder, bool),
    Int16(Int16Builder),
    Int8(Int8Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Boolean(BooleanBuilder),
    /// `BytesWritable` (length-prefixed) when true, else the bytes whole.
    Binary(BinaryBuilder, bool),
}

impl Column {
    /// A builder for a Writable's column; `None` for `NullWritable`.
    pub(crate) fn new(writable: Writable) -> Option<Column> {
        Some(match writable {
            Writable::Text => Column::Text(StringBuilder::new()),
            Writable::Int => Column::Int32(Int32Builder::new(), false),
            Writable::VInt => Column::Int32(Int32Builder::new(), true),
            Writable::Long => Column::Int64(Int64Builder::new(), false),
            Writable::VLong => Column::Int64(Int64Builder::new(), true),
            Writable::Short => Column::Int16(Int16Builder::new()),
            Writable::Byte => Column::Int8(Int8Builder::new()),
            Writable::Float => Column::Float32(Float32Builder::new()),
            Writable::Double => Column::Float64(Float64Builder::new()),
            Writable::Boolean => Column::Boolean(BooleanBuilder::new()),
            Writable::Bytes => Column::Binary(BinaryBuilder::new(), true),
            Writable::Other => Column::Binary(BinaryBuilder::new(), false),
            Writable::Null => return None,
        })
    }

    /// Decodes one serialized Writable into the column; an error says
    /// what the bytes lack.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<(), String> {
        match self {
            Column::Text(b) => b.append_value(String::from_utf8_lossy(text(bytes)?)),
            Column::Int32(b, false) => b.append_value(i32::from_be_bytes(fixed(bytes)?)),
            Column::Int32(b, true) => {
                let v = vint(bytes)?;
                b.append_value(i32::try_from(v).map_err(|_| format!("VIntWritable {v} overflows"))?)
            }
            Column::Int64(b, false) => b.append_value(i64::from_be_bytes(fixed(bytes)?)),
            Column::Int64(b, true) => b.append_value(vint(bytes)?),
            Column::Int16(b) => b.append_value(i16::from_be_bytes(fixed(bytes)?)),
            Column::Int8(b) => b.append_value(i8::from_be_bytes(fixed(bytes)?)),
            Column::Float32(b) => b.append_value(f32::from_be_bytes(fixed(bytes)?)),
            Column::Float64(b) => b.append_value(f64::from_be_bytes(fixed(bytes)?)),
            Column::Boolean(b) => b.append_value(fixed::<1>(bytes)?[0] != 0),
            Column::Binary(b, true) => b.append_value(length_prefixed(bytes)?),
            Column::Binary(b, false) => b.append_value(bytes),
        }
        Ok(())
    }

    /// The values so far, as an array; the builder starts again.
    pub(crate) fn finish(&mut self) -> ArrayRef {
        match self {
            Column::Text(b) => Arc::new(b.finish()),
            Column::Int32(b, _) => Arc::new(b.finish()),
            Column::Int64(b, _) => Arc::new(b.finish()),
            Column::Int16(b) => Arc::new(b.finish()),
            Column::Int8(b) => Arc::new(b.finish()),
            Column::Float32(b) => Arc::new(b.finish()),
            Column::Float64(b) => Arc::new(b.finish()),
            Column::Boolean(b) => Arc::new(b.finish()),
            Column::Binary(b, _) => Arc::new(b.finish()),
        }
    }
}

/// The bytes of a serialized `Text`: a vint length, then as many bytes.
pub(crate) fn text(bytes: &[u8]) -> Result<&[u8], String> {
    let mut at = 0;
    let len = vlong_at(bytes, &mut at).ok_or("a Text value is cut short")?;
    usize::try_from(len)
        .ok()
        .and_then(|len| bytes.get(at..at.checked_add(len)?))
        .ok_or_else(|| format!("a Text value of {len} bytes is cut short"))
}

/// The bytes of a serialized `BytesWritable`: a four-byte length, then as
/// many bytes.
pub(crate) fn length_prefixed(bytes: &[u8]) -> Result<&[u8], String> {
    let len = i32::from_be_bytes(fixed(bytes)?);
    usize::try_from(len)
        .ok()
        .and_then(|len| bytes.get(4..4 + len))
        .ok_or_else(|| format!("a BytesWritable of {len} bytes is cut short"))
}

/// The first `N` bytes, which a fixed-width Writable needs.
fn fixed<const N: usize>(bytes: &[u8]) -> Result<[u8; N], String> {
    bytes
        .get(..N)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| format!("a value of {} bytes where {N} are needed", bytes.len()))
}

fn vint(bytes: &[u8]) -> Result<i64, String> {
    vlong_at(bytes, &mut 0).ok_or_else(|| "a variable-length integer is cut short".to_string())
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Int32Type, Int64Type};

    use super::super::wire::tests::vlong;
    use super::*;

    #[test]
    fn classes_map_to_columns() {
        let int = Writable::field("org.apache.hadoop.io.IntWritable", "key").expect("int");
        assert_eq!(int.data_type(), &DataType::Int32);
        assert!(Writable::field("org.apache.hadoop.io.NullWritable", "key").is_none());
        let other = Writable::field("com.example.Point", "value").expect("other");
        assert_eq!(other.data_type(), &DataType::Binary);
        assert_eq!(other.metadata()[CLASS_METADATA], "com.example.Point");
        assert_eq!(Writable::short_name("org.apache.hadoop.io.Text"), "Text");
    }

    #[test]
    fn serialized_writables_decode() {
        let mut text = Column::new(Writable::Text).expect("text");
        let mut encoded = vlong(6);
        encoded.extend_from_slice("héllo".as_bytes());
        text.push(&encoded).expect("text");
        assert!(text.push(&encoded[..4]).is_err(), "cut short");
        assert_eq!(text.finish().as_string::<i32>().value(0), "héllo");
    }

    #[test]
    fn variable_length_and_fixed_integers() {
        let mut vint = Column::new(Writable::VInt).expect("vint");
        vint.push(&vlong(-1_000_000)).expect("vint");
        assert!(vint.push(&vlong(1 << 40)).is_err(), "past i32");
        assert_eq!(
            vint.finish().as_primitive::<Int32Type>().value(0),
            -1_000_000
        );
        let mut long = Column::new(Writable::Long).expect("long");
        long.push(&(-5i64).to_be_bytes()).expect("long");
        assert!(long.push(&[1, 2, 3]).is_err(), "short");
        assert_eq!(long.finish().as_primitive::<Int64Type>().value(0), -5);
        let mut bytes = Column::new(Writable::Bytes).expect("bytes");
        let mut encoded = 3i32.to_be_bytes().to_vec();
        encoded.extend_from_slice(&[9, 8, 7]);
        bytes.push(&encoded).expect("bytes");
        let array = bytes.finish();
        assert_eq!(array.as_binary::<i32>().value(0), &[9, 8, 7]);
        assert_eq!(array.len(), 1);
    }
}
