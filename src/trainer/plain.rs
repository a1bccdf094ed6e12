//! String and binary views handed on as plain offsets and bytes (`Utf8View` to
//! `Utf8`, `BinaryView` to `Binary`) for exec trainers that do not read views.
//!
//! This runs on every batch of such a trainer, over every string column, so it is
//! one tight pass per column: the bytes are counted first (one allocation), then
//! each value is copied from its view (short values lie in the view itself) and its
//! offset written, and the bytes are not checked for UTF-8 again. Arrow's
//! general `cast` goes through a builder that checks capacity and validity per
//! value: in a numpy hand-off's profile it took 18% of
//! the CPU, this pass 15% (bench/results/findings.md). The pass is bound by
//! memory: it reads each batch's views once more.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, ByteView, StringArray};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::DataType;

/// Values up to this many bytes lie in the view itself, after its length.
const INLINE: usize = 12;

/// `array` (a `Utf8View` or `BinaryView` column) as `Utf8` or `Binary`; `None` for
/// any other type, or when its bytes do not fit 32-bit offsets (the caller then
/// falls back to Arrow's cast, which says why).
pub(super) fn plain_of_view(array: &dyn Array) -> Option<ArrayRef> {
    match array.data_type() {
        DataType::Utf8View => {
            let views = array.as_string_view();
            let (offsets, data) = flatten(views.views(), views.data_buffers(), views.nulls())?;
            let nulls = views.nulls().cloned();
            // SAFETY: what `try_new` would check holds without a pass over the
            // bytes: the offsets rise from 0 to the end of `data`, one per view
            // plus one, as many as the validity bits; and every value is the
            // whole of a value of a valid `StringViewArray`, so UTF-8 (nulls
            // add no bytes).
            let plain = unsafe { StringArray::new_unchecked(offsets, data, nulls) };
            Some(Arc::new(plain))
        }
        DataType::BinaryView => {
            let views = array.as_binary_view();
            let (offsets, data) = flatten(views.views(), views.data_buffers(), views.nulls())?;
            let nulls = views.nulls().cloned();
            Some(Arc::new(BinaryArray::try_new(offsets, data, nulls).ok()?))
        }
        _ => None,
    }
}

/// The offsets and bytes of the values the views point to (a null counts as empty).
fn flatten(
    views: &ScalarBuffer<u128>,
    buffers: &[Buffer],
    nulls: Option<&NullBuffer>,
) -> Option<(OffsetBuffer<i32>, Buffer)> {
    let nulls = nulls.filter(|n| n.null_count() > 0);
    let length = |i: usize, view: u128| -> usize {
        match nulls {
            Some(n) if n.is_null(i) => 0,
            _ => view as u32 as usize,
        }
    };
    let total: usize = views
        .iter()
        .enumerate()
        .map(|(i, &view)| length(i, view))
        .sum();
    i32::try_from(total).ok()?;
    // Room for a whole inline value past the last byte: every short value is
    // copied as the view's 12 bytes (a fixed-size copy, no call per value) and
    // the cursor moves by its length, so the next value overwrites the excess.
    let mut data = vec![0u8; total + INLINE];
    let mut offsets: Vec<i32> = Vec::with_capacity(views.len() + 1);
    offsets.push(0);
    let mut at = 0usize;
    for (i, &view) in views.iter().enumerate() {
        let len = length(i, view);
        if len <= INLINE {
            let bytes = view.to_le_bytes();
            data[at..at + INLINE].copy_from_slice(&bytes[4..]);
        } else {
            let long = ByteView::from(view);
            let buffer = buffers.get(long.buffer_index as usize)?;
            let start = long.offset as usize;
            data[at..at + len].copy_from_slice(buffer.get(start..start + len)?);
        }
        at += len;
        // `total` fits an i32, and so does every running sum up to it.
        offsets.push(at as i32);
    }
    data.truncate(total);
    Some((
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        Buffer::from_vec(data),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BinaryViewArray, StringViewArray};
    use arrow::compute::cast;

    #[test]
    fn strings_match_arrows_cast_with_nulls_short_and_long_values_and_slices() {
        let values: Vec<Option<String>> = (0..300)
            .map(|i| match i % 7 {
                0 => None,
                1 => Some(String::new()),
                2 => Some(format!("exactly12b{:02}", i % 100)),
                3 => Some(format!("a value longer than twelve bytes {i}")),
                _ => Some(format!("v{i}")),
            })
            .collect();
        let array = StringViewArray::from_iter(values.iter().map(|v| v.as_deref()));
        for sliced in [array.clone(), array.slice(5, 200), array.slice(299, 1)] {
            let plain = plain_of_view(&sliced).expect("a string view column");
            let expected = cast(&sliced, &DataType::Utf8).expect("arrow casts views");
            assert_eq!(plain.as_ref(), expected.as_ref());
            assert_eq!(plain.data_type(), &DataType::Utf8);
        }
    }

    #[test]
    fn binary_without_nulls_matches_arrows_cast() {
        let values: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; (i % 30) as usize]).collect();
        let array = BinaryViewArray::from_iter_values(values.iter());
        let plain = plain_of_view(&array).expect("a binary view column");
        let expected = cast(&array, &DataType::Binary).expect("arrow casts views");
        assert_eq!(plain.as_ref(), expected.as_ref());
    }

    #[test]
    fn other_types_are_not_views() {
        let array = StringArray::from(vec!["a"]);
        assert!(plain_of_view(&array).is_none());
    }
}
