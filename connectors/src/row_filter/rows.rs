//! Rows computed on a selection of a batch, put back where they belong.

use arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use arrow::compute::take;
use arrow::error::ArrowError;

/// `values`, one for each row where `rows` is true, put back in those rows
/// (null elsewhere): the inverse of filtering by `rows`.
pub(crate) fn spread(values: &dyn Array, rows: &BooleanArray) -> Result<ArrayRef, ArrowError> {
    let mut next = 0u32;
    let indices: UInt32Array = (0..rows.len())
        .map(|i| {
            (rows.is_valid(i) && rows.value(i)).then(|| {
                next += 1;
                next - 1
            })
        })
        .collect();
    take(values, &indices, None)
}
