//! Column transforms applied to every batch before a trainer sees it
//! (`--hash-buckets`, `--fill-nulls`), so that a Python trainer does no work per row:
//! categorical columns arrive as int64 buckets, numeric columns without nulls, and
//! both wrap as numpy arrays or tensors without a copy.
//!
//! [`TransformFactory`] wraps any [`TrainerFactory`]: it checks the transform
//! against the dataset's schema, hands the inner factory the transformed schema,
//! and its trainers transform each batch on the device thread before feeding it.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use arrow::compute::cast;
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Field, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, Schema, SchemaRef, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use connectors::read::plain_type;

use super::hashing::{hash_column, is_categorical, is_hashable};
use super::plain::plain_of_view;
use super::{Batch, Mark, Trainer, TrainerError, TrainerFactory, TrainerReport};

/// Field metadata key set on a hashed column: the number of buckets. Python's
/// `sluice_trainer.to_torch` reads it and leaves the column as it is.
pub use super::exec::protocol::HASH_BUCKETS_KEY;

/// Which columns `--hash-buckets` hashes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HashBuckets {
    /// None.
    #[default]
    Off,
    /// Every string, binary and dictionary column, into this many buckets.
    All(u64),
    /// Exactly these columns (integer ones too), each into its number of buckets.
    Columns(Vec<(String, u64)>),
}

impl FromStr for HashBuckets {
    type Err = String;

    /// `N`, or `COL=N,COL=N,...`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let count = |s: &str| -> Result<u64, String> {
            match s.trim().parse::<u64>() {
                Ok(0) => Err("a column needs at least 1 bucket".to_string()),
                Ok(n) => Ok(n),
                Err(_) => Err(format!("`{s}` is not a whole number of buckets")),
            }
        };
        if !text.contains('=') {
            return count(text).map(HashBuckets::All);
        }
        let mut columns: Vec<(String, u64)> = Vec::new();
        for part in text.split(',').filter(|p| !p.trim().is_empty()) {
            let (name, n) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not COL=N"))?;
            let name = name.trim();
            if name.is_empty() {
                return Err(format!("`{part}` names no column"));
            }
            if columns.iter().any(|(c, _)| c == name) {
                return Err(format!("column `{name}` is given twice"));
            }
            columns.push((name.to_string(), count(n)?));
        }
        Ok(HashBuckets::Columns(columns))
    }
}

impl fmt::Display for HashBuckets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HashBuckets::Off => f.write_str("off"),
            HashBuckets::All(n) => write!(f, "{n}"),
            HashBuckets::Columns(columns) => {
                let parts: Vec<String> = columns.iter().map(|(c, n)| format!("{c}={n}")).collect();
                f.write_str(&parts.join(","))
            }
        }
    }
}

/// What happens to each batch before its trainer gets it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transform {
    /// `--hash-buckets`.
    pub hash_buckets: HashBuckets,
    /// `--fill-nulls V`: nulls of integer and floating point columns become `V`.
    pub fill_nulls: Option<f64>,
    /// `--string-view`: the trainer takes string and binary columns as the
    /// views they are read as (`Utf8View`, `BinaryView`); otherwise they are
    /// handed on as `Utf8` and `Binary`.
    pub string_view: bool,
}

/// What one column becomes.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Keep,
    Hash(u64),
    Fill(f64),
    /// A view column handed on as its plain type.
    Plain(DataType),
}

/// A [`Transform`] resolved against one schema: a step per column.
#[derive(Debug, Clone)]
struct Plan {
    steps: Vec<Step>,
    output: SchemaRef,
    /// Every step keeps its column: batches pass as they are.
    identity: bool,
}

impl Transform {
    /// Whether it changes nothing, whatever the schema.
    pub fn is_identity(&self) -> bool {
        self.hash_buckets == HashBuckets::Off && self.fill_nulls.is_none() && self.string_view
    }

    /// The steps for `schema`, or why the transform does not fit it.
    fn plan(&self, schema: &Schema) -> Result<Plan, TrainerError> {
        let bad = |reason: String| TrainerError::Transform { reason };
        let named: HashMap<&str, u64> = match &self.hash_buckets {
            HashBuckets::Columns(columns) => {
                for (name, _) in columns {
                    let field =
                        schema
                            .field_with_name(name)
                            .map_err(|_| TrainerError::UnknownColumn {
                                column: name.clone(),
                                available: column_names(schema),
                            })?;
                    if !is_hashable(field.data_type()) {
                        return Err(bad(format!(
                            "--hash-buckets {name}=...: column `{name}` has type {}, which cannot be hashed (strings, binary, dictionaries, integers and booleans can)",
                            field.data_type()
                        )));
                    }
                }
                columns.iter().map(|(c, n)| (c.as_str(), *n)).collect()
            }
            _ => HashMap::new(),
        };
        if let Some(v) = self.fill_nulls {
            if !v.is_finite() {
                return Err(bad(format!(
                    "--fill-nulls {v}: the value must be a finite number"
                )));
            }
        }
        let mut steps = Vec::with_capacity(schema.fields().len());
        let mut fields = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let kind = field.data_type();
            let hash = match &self.hash_buckets {
                HashBuckets::Off => None,
                HashBuckets::All(n) => is_categorical(kind).then_some(*n),
                HashBuckets::Columns(_) => named.get(field.name().as_str()).copied(),
            };
            let step = match (hash, self.fill_nulls) {
                (Some(n), _) => Step::Hash(n),
                (None, Some(v)) if field.is_nullable() && fillable(kind) => {
                    if kind.is_integer() && v.fract() != 0.0 {
                        return Err(bad(format!(
                            "--fill-nulls {v}: column `{}` holds integers ({kind}); give a whole number",
                            field.name()
                        )));
                    }
                    Step::Fill(v)
                }
                _ => match plain_type(kind).filter(|_| !self.string_view) {
                    Some(plain) => Step::Plain(plain),
                    None => Step::Keep,
                },
            };
            fields.push(match &step {
                Step::Keep => field.as_ref().clone(),
                Step::Hash(n) => {
                    let mut metadata = field.metadata().clone();
                    metadata.insert(HASH_BUCKETS_KEY.to_string(), n.to_string());
                    Field::new(field.name(), DataType::Int64, false).with_metadata(metadata)
                }
                Step::Fill(_) => field.as_ref().clone().with_nullable(false),
                Step::Plain(plain) => field.as_ref().clone().with_data_type(plain.clone()),
            });
            steps.push(step);
        }
        let output = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        let identity = steps.iter().all(|s| *s == Step::Keep);
        Ok(Plan {
            steps,
            output,
            identity,
        })
    }
}

fn column_names(schema: &Schema) -> String {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    names.join(", ")
}

/// Integer and floating point columns: what `--fill-nulls` fills.
fn fillable(kind: &DataType) -> bool {
    kind.is_integer() || matches!(kind, DataType::Float32 | DataType::Float64)
}

impl Plan {
    /// `batch` transformed; its schema's metadata (the `sluice.*` batch tags) is kept.
    fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch, TrainerError> {
        if self.steps.len() != batch.num_columns() {
            return Err(TrainerError::Transform {
                reason: format!(
                    "a batch has {} columns where the dataset has {}",
                    batch.num_columns(),
                    self.steps.len()
                ),
            });
        }
        if self.identity {
            return Ok(batch.clone());
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.steps.len());
        for (step, column) in self.steps.iter().zip(batch.columns()) {
            columns.push(match step {
                Step::Keep => Arc::clone(column),
                Step::Hash(n) => {
                    hash_column(column.as_ref(), *n).ok_or_else(|| TrainerError::Transform {
                        reason: format!("cannot hash values of type {}", column.data_type()),
                    })?
                }
                Step::Fill(v) => fill(column, *v),
                Step::Plain(plain) => match plain_of_view(column.as_ref()) {
                    Some(flat) => flat,
                    None => cast(column, plain).map_err(|e| TrainerError::Transform {
                        reason: format!("cannot hand on {} as {plain}: {e}", column.data_type()),
                    })?,
                },
            });
        }
        let schema = Arc::new(Schema::new_with_metadata(
            self.output.fields().clone(),
            batch.schema_ref().metadata().clone(),
        ));
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        RecordBatch::try_new_with_options(schema, columns, &options).map_err(|e| {
            TrainerError::Transform {
                reason: e.to_string(),
            }
        })
    }
}

/// `column` with its nulls replaced by `value` (the same column when it has none).
fn fill(column: &ArrayRef, value: f64) -> ArrayRef {
    if column.null_count() == 0 {
        return match column.logical_nulls() {
            // A validity buffer with no null in it: drop it so the schema's
            // non-nullable field holds.
            Some(_) => arrow::array::make_array(
                column
                    .to_data()
                    .into_builder()
                    .nulls(None)
                    .build()
                    .unwrap_or_else(|_| column.to_data()),
            ),
            None => Arc::clone(column),
        };
    }
    macro_rules! fill_as {
        ($t:ty, $v:expr) => {
            fill_primitive::<$t>(column.as_primitive::<$t>(), $v)
        };
    }
    match column.data_type() {
        DataType::Int8 => fill_as!(Int8Type, value as i8),
        DataType::Int16 => fill_as!(Int16Type, value as i16),
        DataType::Int32 => fill_as!(Int32Type, value as i32),
        DataType::Int64 => fill_as!(Int64Type, value as i64),
        DataType::UInt8 => fill_as!(UInt8Type, value as u8),
        DataType::UInt16 => fill_as!(UInt16Type, value as u16),
        DataType::UInt32 => fill_as!(UInt32Type, value as u32),
        DataType::UInt64 => fill_as!(UInt64Type, value as u64),
        DataType::Float32 => fill_as!(Float32Type, value as f32),
        DataType::Float64 => fill_as!(Float64Type, value),
        _ => Arc::clone(column),
    }
}

fn fill_primitive<T: ArrowPrimitiveType>(array: &PrimitiveArray<T>, value: T::Native) -> ArrayRef {
    // One copy of the values, then the value written at each null: the validity
    // bits are read 64 at a time, and a word with no null in it is skipped whole.
    let mut filled: Vec<T::Native> = array.values().to_vec();
    if let Some(nulls) = array.nulls() {
        let chunks = nulls.inner().bit_chunks();
        let words = chunks
            .iter()
            .chain(std::iter::once(chunks.remainder_bits()));
        let tail = chunks.remainder_len();
        for (word, bits) in words.enumerate() {
            let mut missing = !bits;
            if word == chunks.chunk_len() {
                missing &= if tail == 0 {
                    0
                } else {
                    u64::MAX >> (64 - tail)
                };
            }
            while missing != 0 {
                let index = word * 64 + missing.trailing_zeros() as usize;
                filled[index] = value;
                missing &= missing - 1;
            }
        }
    }
    Arc::new(
        PrimitiveArray::<T>::new(filled.into(), None).with_data_type(array.data_type().clone()),
    )
}

/// A factory whose trainers get transformed batches.
pub struct TransformFactory {
    inner: Arc<dyn TrainerFactory>,
    transform: Transform,
    plan: std::sync::Mutex<Option<Arc<Plan>>>,
}

impl TransformFactory {
    /// Wraps `inner`; an identity transform returns `inner` itself.
    pub fn wrap(inner: Arc<dyn TrainerFactory>, transform: &Transform) -> Arc<dyn TrainerFactory> {
        if transform.is_identity() {
            return inner;
        }
        Arc::new(TransformFactory {
            inner,
            transform: transform.clone(),
            plan: std::sync::Mutex::new(None),
        })
    }

    fn plan(&self) -> Option<Arc<Plan>> {
        self.plan
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl TrainerFactory for TransformFactory {
    fn validate(&self, schema: &Schema) -> Result<(), TrainerError> {
        let plan = self.transform.plan(schema)?;
        self.inner.validate(&plan.output)?;
        *self
            .plan
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Arc::new(plan));
        Ok(())
    }

    fn make(&self, device: usize, devices: usize) -> Result<Box<dyn Trainer>, TrainerError> {
        let plan = self.plan().ok_or(TrainerError::NotValidated)?;
        Ok(Box::new(TransformTrainer {
            inner: self.inner.make(device, devices)?,
            plan,
        }))
    }

    fn report(&self) -> TrainerReport {
        self.inner.report()
    }

    fn current_loss(&self) -> Option<f64> {
        self.inner.current_loss()
    }
}

/// Transforms each batch, then hands it to the trainer it wraps.
struct TransformTrainer {
    inner: Box<dyn Trainer>,
    plan: Arc<Plan>,
}

impl Trainer for TransformTrainer {
    fn feed(&mut self, batch: Batch) -> Result<Vec<u64>, TrainerError> {
        let data = self.plan.apply(&batch.data)?;
        self.inner.feed(Batch { data, ..batch })
    }

    fn flush(&mut self) -> Result<Vec<u64>, TrainerError> {
        self.inner.flush()
    }

    fn make_room(&mut self) -> Result<Vec<u64>, TrainerError> {
        self.inner.make_room()
    }

    fn flush_some(&mut self) -> Result<(Vec<u64>, bool), TrainerError> {
        self.inner.flush_some()
    }

    fn set_idle(&mut self, idle: bool) {
        self.inner.set_idle(idle)
    }

    fn finish(&mut self) -> Result<Vec<u64>, TrainerError> {
        self.inner.finish()
    }

    fn take_marks(&mut self) -> Vec<Mark> {
        self.inner.take_marks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int32Array, Int64Array, StringArray};

    fn batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("x", DataType::Float64, true),
            Field::new("n", DataType::Int32, true),
            Field::new("c", DataType::Utf8, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(Float64Array::from(vec![Some(1.5), None, Some(2.5)])),
                Arc::new(Int32Array::from(vec![None, Some(4), Some(5)])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("b")])),
            ],
        )
        .expect("a valid batch")
    }

    #[test]
    fn parses_counts_and_columns() {
        assert_eq!("1024".parse(), Ok(HashBuckets::All(1024)));
        assert_eq!(
            "C1=10, C2=20".parse(),
            Ok(HashBuckets::Columns(vec![
                ("C1".into(), 10),
                ("C2".into(), 20)
            ]))
        );
        assert!("0".parse::<HashBuckets>().is_err());
        assert!("C1=x".parse::<HashBuckets>().is_err());
        assert!("C1=1,C1=2".parse::<HashBuckets>().is_err());
    }

    #[test]
    fn fills_every_null_of_a_sliced_column_and_nothing_else() {
        // 200 values, every third one null, sliced at an offset that is not a
        // multiple of 8: the words of validity bits start mid-byte and end short.
        let values: Vec<Option<i64>> = (0..200)
            .map(|i| if i % 3 == 0 { None } else { Some(i) })
            .collect();
        let column: ArrayRef = Arc::new(Int64Array::from(values.clone()));
        let sliced = column.slice(5, 190);
        let filled = fill(&sliced, -7.0);
        let filled = filled.as_primitive::<Int64Type>();
        assert_eq!(filled.null_count(), 0);
        let expected: Vec<i64> = values[5..195].iter().map(|v| v.unwrap_or(-7)).collect();
        assert_eq!(filled.values().to_vec(), expected);
    }

    #[test]
    fn hashes_strings_and_fills_numbers() {
        let transform = Transform {
            hash_buckets: HashBuckets::All(100),
            fill_nulls: Some(-1.0),
            string_view: false,
        };
        let input = batch();
        let plan = transform.plan(&input.schema()).expect("fits");
        let out = plan.apply(&input).expect("applies");
        assert_eq!(out.schema().field(3).data_type(), &DataType::Int64);
        assert_eq!(
            out.schema().field(3).metadata().get(HASH_BUCKETS_KEY),
            Some(&"100".to_string())
        );
        let x = out.column(1).as_primitive::<Float64Type>();
        assert_eq!(x.values().to_vec(), vec![1.5, -1.0, 2.5]);
        assert_eq!(x.null_count(), 0);
        let n = out.column(2).as_primitive::<Int32Type>();
        assert_eq!(n.values().to_vec(), vec![-1, 4, 5]);
        let c = out.column(3).as_primitive::<Int64Type>();
        assert!(c.values().iter().all(|b| (0..100).contains(b)));
        assert_eq!(c.null_count(), 0);
    }

    #[test]
    fn views_reach_trainers_as_plain_strings_unless_asked_for() {
        use arrow::array::{BinaryViewArray, StringViewArray};
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8View, true),
            Field::new("b", DataType::BinaryView, true),
            Field::new("n", DataType::Int32, true),
        ]));
        let input = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringViewArray::from(vec![
                    Some("short"),
                    None,
                    Some("a string longer than twelve bytes"),
                ])),
                Arc::new(BinaryViewArray::from(vec![
                    Some(b"x".as_slice()),
                    Some(b"".as_slice()),
                    None,
                ])),
                Arc::new(Int32Array::from(vec![1, 2, 3])),
            ],
        )
        .expect("batch");
        let plain = Transform::default().plan(&schema).expect("fits");
        let out = plain.apply(&input).expect("applies");
        assert_eq!(out.schema().field(0).data_type(), &DataType::Utf8);
        assert_eq!(out.schema().field(1).data_type(), &DataType::Binary);
        assert_eq!(out.schema().field(2).data_type(), &DataType::Int32);
        let s = out.column(0).as_string::<i32>();
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            vec![
                Some("short"),
                None,
                Some("a string longer than twelve bytes")
            ]
        );
        let b = out.column(1).as_binary::<i32>();
        assert_eq!(
            b.iter().collect::<Vec<_>>(),
            vec![Some(b"x".as_slice()), Some(b"".as_slice()), None]
        );
        let asked = Transform {
            string_view: true,
            ..Transform::default()
        };
        assert!(asked.is_identity());
        let kept = asked.plan(&schema).expect("fits");
        assert_eq!(kept.apply(&input).expect("applies").schema(), schema);
        // Hashing reads the views themselves: the same buckets as from plain strings.
        let hashed = Transform {
            hash_buckets: "s=1000".parse().expect("parses"),
            ..Transform::default()
        }
        .plan(&schema)
        .expect("fits")
        .apply(&input)
        .expect("applies");
        let plain_schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
        let from_plain = Transform {
            hash_buckets: "s=1000".parse().expect("parses"),
            ..Transform::default()
        }
        .plan(&plain_schema)
        .expect("fits")
        .apply(
            &RecordBatch::try_new(plain_schema.clone(), vec![out.column(0).clone()])
                .expect("batch"),
        )
        .expect("applies");
        assert_eq!(
            hashed.column(0).as_primitive::<Int64Type>().values(),
            from_plain.column(0).as_primitive::<Int64Type>().values()
        );
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let schema = batch().schema();
        let unknown = Transform {
            hash_buckets: "nope=3".parse().expect("parses"),
            fill_nulls: None,
            string_view: false,
        };
        assert!(unknown
            .plan(&schema)
            .unwrap_err()
            .to_string()
            .contains("nope"));
        let floats = Transform {
            hash_buckets: "x=3".parse().expect("parses"),
            fill_nulls: None,
            string_view: false,
        };
        assert!(floats
            .plan(&schema)
            .unwrap_err()
            .to_string()
            .contains("`x`"));
        let fraction = Transform {
            hash_buckets: HashBuckets::Off,
            fill_nulls: Some(0.5),
            string_view: false,
        };
        assert!(fraction
            .plan(&schema)
            .unwrap_err()
            .to_string()
            .contains("`n`"));
    }
}
