//! Reads a label and numeric feature columns out of record batches as `f64` rows.
//!
//! Features are numeric columns (any Arrow integer, float, decimal or boolean type, cast to
//! `f64`) or fixed-size lists of them (one feature per list element, named `col[i]`). A
//! null feature reads as 0; a row whose label is null is skipped and counted.

use arrow::array::{Array, ArrayRef, AsArray, FixedSizeListArray, Float64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Schema};
use arrow::record_batch::RecordBatch;

use crate::trainer::TrainerError;

/// Where the label and features are in a schema, and the expanded feature names.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureLayout {
    /// The label column.
    pub label: String,
    /// Feature columns with the number of features each holds (1, or the list size).
    pub columns: Vec<(String, usize)>,
    /// One name per feature: the column name, or `col[i]` for list elements.
    pub names: Vec<String>,
}

/// Rows of one batch with a non-null label.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    /// Row-major features, `labels.len() * width` values.
    pub features: Vec<f64>,
    /// One label per kept row.
    pub labels: Vec<f64>,
    /// Rows dropped because their label was null.
    pub skipped: u64,
}

impl FeatureLayout {
    /// Checks that `label` and `features` are numeric columns of `schema` and expands the
    /// feature names.
    pub fn resolve(
        schema: &Schema,
        label: &str,
        features: &[String],
    ) -> Result<Self, TrainerError> {
        let label_type = column_type(schema, label)?;
        if !is_number(label_type) {
            return Err(not_numeric(label, label_type));
        }
        let mut columns = Vec::with_capacity(features.len());
        let mut names = Vec::new();
        for feature in features {
            let data_type = column_type(schema, feature)?;
            let width = feature_width(feature, data_type)?;
            if matches!(data_type, DataType::FixedSizeList(..)) {
                names.extend((0..width).map(|i| format!("{feature}[{i}]")));
            } else {
                names.push(feature.clone());
            }
            columns.push((feature.clone(), width));
        }
        Ok(FeatureLayout {
            label: label.to_owned(),
            columns,
            names,
        })
    }

    /// Number of features per row.
    pub fn width(&self) -> usize {
        self.names.len()
    }

    /// The rows of `batch` whose label is not null.
    pub fn rows(&self, batch: &RecordBatch) -> Result<Rows, TrainerError> {
        let label = to_f64(column(batch, &self.label)?, &self.label)?;
        let keep: Vec<usize> = (0..label.len()).filter(|&i| label.is_valid(i)).collect();
        let width = self.width();
        let mut features = vec![0.0; keep.len() * width];
        let mut offset = 0;
        for (name, columns) in &self.columns {
            let array = column(batch, name)?;
            let view = Columns::new(array, name, *columns)?;
            for (row, &source) in keep.iter().enumerate() {
                view.copy_row(source, &mut features[row * width + offset..][..*columns]);
            }
            offset += columns;
        }
        Ok(Rows {
            features,
            labels: keep.iter().map(|&i| label.value(i)).collect(),
            skipped: (label.len() - keep.len()) as u64,
        })
    }
}

/// A feature column cast to `f64`, scalar or fixed-size list.
enum Columns {
    Scalar(Float64Array),
    List {
        list: FixedSizeListArray,
        values: Float64Array,
    },
}

impl Columns {
    fn new(array: &ArrayRef, name: &str, width: usize) -> Result<Self, TrainerError> {
        match array.data_type() {
            DataType::FixedSizeList(_, size) if *size as usize == width => {
                let list = array.as_fixed_size_list().clone();
                let values = to_f64(list.values(), name)?;
                Ok(Columns::List { list, values })
            }
            data_type if is_number(data_type) && width == 1 => {
                Ok(Columns::Scalar(to_f64(array, name)?))
            }
            data_type => Err(not_numeric(name, data_type)),
        }
    }

    /// Writes row `row`'s features into `out`; nulls read as 0.
    fn copy_row(&self, row: usize, out: &mut [f64]) {
        match self {
            Columns::Scalar(values) => out[0] = value_or_zero(values, row),
            Columns::List { list, values } if list.is_valid(row) => {
                let start = list.value_offset(row) as usize;
                for (i, slot) in out.iter_mut().enumerate() {
                    *slot = value_or_zero(values, start + i);
                }
            }
            Columns::List { .. } => out.fill(0.0),
        }
    }
}

fn value_or_zero(values: &Float64Array, index: usize) -> f64 {
    if values.is_valid(index) {
        values.value(index)
    } else {
        0.0
    }
}

/// Features in a column of `data_type`: 1 for a number, the list size for a list of numbers.
fn feature_width(name: &str, data_type: &DataType) -> Result<usize, TrainerError> {
    match data_type {
        DataType::FixedSizeList(item, size) if is_number(item.data_type()) => Ok(*size as usize),
        data_type if is_number(data_type) => Ok(1),
        data_type => Err(not_numeric(name, data_type)),
    }
}

fn is_number(data_type: &DataType) -> bool {
    data_type.is_numeric() || *data_type == DataType::Boolean
}

fn column_type<'a>(schema: &'a Schema, name: &str) -> Result<&'a DataType, TrainerError> {
    match schema.field_with_name(name) {
        Ok(field) => Ok(field.data_type()),
        Err(_) => Err(unknown_column(name, schema)),
    }
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, TrainerError> {
    batch
        .column_by_name(name)
        .ok_or_else(|| unknown_column(name, &batch.schema()))
}

fn to_f64(array: &ArrayRef, name: &str) -> Result<Float64Array, TrainerError> {
    let array = cast(array, &DataType::Float64).map_err(|source| TrainerError::Arrow {
        action: format!("read column `{name}` as float64"),
        cause: source,
    })?;
    Ok(array.as_primitive::<Float64Type>().clone())
}

fn unknown_column(name: &str, schema: &Schema) -> TrainerError {
    let available: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    TrainerError::UnknownColumn {
        column: name.to_owned(),
        available: available.join(", "),
    }
}

fn not_numeric(name: &str, data_type: &DataType) -> TrainerError {
    TrainerError::NotNumeric {
        column: name.to_owned(),
        data_type: data_type.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        BooleanArray, Decimal128Array, Float32Array, Int64Array, StringArray, UInt8Array,
    };
    use arrow::datatypes::{Field, Float32Type};
    use std::sync::Arc;

    fn batch() -> RecordBatch {
        let list = FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(
            vec![
                Some(vec![Some(1.0), Some(2.0)]),
                None,
                Some(vec![Some(5.0), None]),
            ],
            2,
        );
        let decimal = Decimal128Array::from(vec![Some(150), None, Some(-25)])
            .with_precision_and_scale(5, 2)
            .expect("decimal type");
        RecordBatch::try_from_iter(vec![
            (
                "y",
                Arc::new(Int64Array::from(vec![Some(1), Some(0), None])) as ArrayRef,
            ),
            ("a", Arc::new(Float32Array::from(vec![0.5, 1.5, 2.5]))),
            ("b", Arc::new(BooleanArray::from(vec![true, false, true]))),
            (
                "c",
                Arc::new(UInt8Array::from(vec![Some(7), None, Some(9)])),
            ),
            ("d", Arc::new(decimal)),
            ("v", Arc::new(list)),
            ("s", Arc::new(StringArray::from(vec!["x", "y", "z"]))),
        ])
        .expect("batch")
    }

    fn names(columns: &[&str]) -> Vec<String> {
        columns.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn reads_numbers_lists_and_nulls() {
        let batch = batch();
        let features = names(&["a", "b", "c", "d", "v"]);
        let layout = FeatureLayout::resolve(&batch.schema(), "y", &features).expect("layout");
        assert_eq!(layout.names, names(&["a", "b", "c", "d", "v[0]", "v[1]"]));
        let rows = layout.rows(&batch).expect("rows");
        assert_eq!(rows.labels, vec![1.0, 0.0]);
        assert_eq!(rows.skipped, 1);
        assert_eq!(
            rows.features,
            vec![0.5, 1.0, 7.0, 1.5, 1.0, 2.0, 1.5, 0.0, 0.0, 0.0, 0.0, 0.0]
        );
    }

    #[test]
    fn reads_sliced_lists() {
        let batch = batch().slice(2, 1);
        let layout = FeatureLayout::resolve(&batch.schema(), "a", &names(&["v"])).expect("layout");
        let rows = layout.rows(&batch).expect("rows");
        assert_eq!(rows.features, vec![5.0, 0.0]);
    }

    #[test]
    fn unknown_column_lists_available_ones() {
        let schema = batch().schema();
        let error = FeatureLayout::resolve(&schema, "y", &names(&["nope"])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown column `nope`; available columns: y, a, b, c, d, v, s"
        );
        let error = FeatureLayout::resolve(&schema, "label", &names(&["a"])).unwrap_err();
        assert!(error.to_string().starts_with("unknown column `label`"));
    }

    #[test]
    fn non_numeric_column_names_type() {
        let schema = batch().schema();
        let error = FeatureLayout::resolve(&schema, "y", &names(&["s"])).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("column `s` has type Utf8, which is not numeric"),
            "{error}"
        );
        let error = FeatureLayout::resolve(&schema, "v", &names(&["a"])).unwrap_err();
        assert!(error
            .to_string()
            .starts_with("column `v` has type FixedSizeList"));
        let nested = Schema::new(vec![Field::new_fixed_size_list(
            "l",
            Field::new("item", DataType::Utf8, true),
            2,
            true,
        )]);
        let error = FeatureLayout::resolve(&nested, "l", &names(&["l"])).unwrap_err();
        assert!(matches!(error, TrainerError::NotNumeric { .. }));
    }
}
