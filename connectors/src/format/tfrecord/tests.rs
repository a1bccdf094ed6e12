use std::io::Cursor;

use arrow::array::{Array, AsArray, ListArray};
use arrow::datatypes::{Float32Type, Int64Type};

use super::framing::tests::frame;
use super::wire::tests::{example, feature_list, field, int64s, sequence_example};
use super::*;

fn list(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(item, true)))
}

fn bytes(values: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        field(1, v, &mut out);
    }
    out
}

fn floats(values: &[f32]) -> Vec<u8> {
    let body: Vec<u8> = values.iter().flat_map(|f| f.to_le_bytes()).collect();
    let mut out = Vec::new();
    field(1, &body, &mut out);
    out
}

/// Three records: `id` always one value, `f` a list in one, `s` text,
/// `b` one invalid UTF-8 value, `m` missing from the second record.
fn sample() -> Vec<u8> {
    let records = [
        example(&[
            ("id", 3, int64s(&[0], true)),
            ("f", 2, floats(&[0.5])),
            ("s", 1, bytes(&[b"a"])),
            ("b", 1, bytes(&[b"ok"])),
            ("m", 3, int64s(&[10], false)),
        ]),
        example(&[
            ("s", 1, bytes(&[b"b"])),
            ("id", 3, int64s(&[1], true)),
            ("f", 2, floats(&[1.0, 2.0])),
            ("b", 1, bytes(&[b"\xff"])),
        ]),
        example(&[
            ("id", 3, int64s(&[2], true)),
            ("f", 2, floats(&[])),
            ("s", 1, bytes(&[b"c"])),
            ("b", 1, bytes(&[b""])),
            ("m", 3, int64s(&[12], true)),
        ]),
    ];
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    frame(&refs)
}

fn records(bytes: Vec<u8>) -> Records<Box<dyn BufRead + Send>> {
    framing::open(Box::new(Cursor::new(bytes)), Codec::None).expect("open")
}

#[test]
fn schema_is_inferred_from_every_record() {
    let (schema, rows) = infer(records(sample()), "f").expect("infer");
    assert_eq!(rows, 3);
    let fields: Vec<(String, DataType)> = schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect();
    assert_eq!(
        fields,
        vec![
            ("b".to_string(), DataType::Binary),
            ("f".to_string(), list(DataType::Float32)),
            ("id".to_string(), DataType::Int64),
            ("m".to_string(), DataType::Int64),
            ("s".to_string(), DataType::Utf8),
        ]
    );
}

#[test]
fn rows_decode_into_the_schema() {
    let (schema, _) = infer(records(sample()), "f").expect("infer");
    let mut batches = Vec::new();
    let mut emit = |b: Result<RecordBatch>| {
        batches.push(b.expect("a batch"));
        true
    };
    read_rows(records(sample()), &schema, 2, "f", &mut emit).expect("read");
    assert_eq!(
        batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
        [2, 1]
    );
    let batch = arrow::compute::concat_batches(&schema, &batches).expect("concat");
    let id: Vec<_> = batch.column(2).as_primitive::<Int64Type>().iter().collect();
    assert_eq!(id, [Some(0), Some(1), Some(2)]);
    let m: Vec<_> = batch.column(3).as_primitive::<Int64Type>().iter().collect();
    assert_eq!(m, [Some(10), None, Some(12)]);
    let f = batch
        .column(1)
        .as_any()
        .downcast_ref::<ListArray>()
        .expect("list");
    let lists: Vec<Vec<f32>> = (0..3)
        .map(|i| f.value(i).as_primitive::<Float32Type>().values().to_vec())
        .collect();
    assert_eq!(lists, vec![vec![0.5], vec![1.0, 2.0], vec![]]);
    let b = batch.column(0).as_binary::<i32>();
    assert_eq!(b.value(1), b"\xff");
    let s: Vec<_> = batch.column(4).as_string::<i32>().iter().collect();
    assert_eq!(s, [Some("a"), Some("b"), Some("c")]);
}

#[test]
fn files_widen_to_lists_and_binary() {
    let schema = |fields: Vec<Field>| FileInfo::schema_only(Arc::new(Schema::new(fields)));
    let mut infos = vec![
        schema(vec![
            Field::new("x", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("k", DataType::Int64, true),
        ]),
        schema(vec![
            Field::new("x", list(DataType::Int64), true),
            Field::new("s", DataType::Binary, true),
            Field::new("k", DataType::Float32, true),
        ]),
    ];
    widen_across_files(&mut infos);
    for info in &infos {
        assert_eq!(info.schema.field(0).data_type(), &list(DataType::Int64));
        assert_eq!(info.schema.field(1).data_type(), &DataType::Binary);
    }
    // Kinds that differ are left for the merge to refuse.
    assert_eq!(infos[0].schema.field(2).data_type(), &DataType::Int64);
    assert_eq!(infos[1].schema.field(2).data_type(), &DataType::Float32);
}

#[test]
fn a_scalar_column_takes_lists_widened_from_other_files() {
    let target = Arc::new(Schema::new(vec![Field::new(
        "id",
        list(DataType::Int64),
        true,
    )]));
    let mut batches = Vec::new();
    let mut emit = |b: Result<RecordBatch>| {
        batches.push(b.expect("a batch"));
        true
    };
    let bytes = frame(&[&example(&[("id", 3, int64s(&[4], true))]), &example(&[])]);
    read_rows(records(bytes), &target, 10, "f", &mut emit).expect("read");
    let ids = batches[0].column(0).as_list::<i32>();
    assert_eq!(
        ids.value(0).as_primitive::<Int64Type>().values().to_vec(),
        vec![4]
    );
    assert!(ids.is_null(1));
}

#[test]
fn damaged_records_and_sequence_examples_are_refused() {
    let mut flipped = sample();
    let at = flipped.len() - 8;
    flipped[at] ^= 0x10;
    let err = infer(records(flipped), "dir/part-0.tfrecord").expect_err("bad crc");
    let text = err.to_string();
    assert!(matches!(err, Error::Corrupt { .. }), "{text}");
    assert!(
        text.contains("dir/part-0.tfrecord") && text.contains("record 3"),
        "{text}"
    );

    let mut not_a_record = example(&[("x", 3, int64s(&[1], true))]);
    not_a_record.push(0x0a);
    let err = infer(records(frame(&[&not_a_record])), "x.tfrecord").expect_err("refused");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("record 1 is not a tf.train.Example"),
        "{err}"
    );

    // A feature in one record, a feature list of the same name in another.
    let both = frame(&[
        &example(&[("x", 3, int64s(&[1], true))]),
        &sequence_example(&[], &[("x", feature_list(&[(3, int64s(&[1], true))]))]),
    ]);
    let err = infer(records(both), "both.tfrecord").expect_err("clash");
    assert!(err.to_string().contains("a feature list of int64"), "{err}");

    let mixed = frame(&[
        &example(&[("x", 3, int64s(&[1], true))]),
        &example(&[("x", 2, floats(&[1.0]))]),
    ]);
    let err = infer(records(mixed), "mixed.tfrecord").expect_err("clash");
    assert!(matches!(err, Error::SchemaClash { .. }), "{err}");
}

#[test]
fn sequence_examples_read_as_context_and_lists_of_lists() {
    let data = frame(&[
        &sequence_example(
            &[("id", 3, int64s(&[0], true))],
            &[
                (
                    "steps",
                    feature_list(&[(3, int64s(&[1, 2], true)), (3, int64s(&[3], true))]),
                ),
                ("words", feature_list(&[(1, bytes(&[b"a", b"b"]))])),
            ],
        ),
        &sequence_example(
            &[("id", 3, int64s(&[1], true))],
            &[("steps", feature_list(&[]))],
        ),
        &example(&[("id", 3, int64s(&[2], true))]),
    ]);
    let (schema, rows) = infer(records(data.clone()), "f").expect("infer");
    assert_eq!(rows, 3);
    let types: Vec<DataType> = schema
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    assert_eq!(
        types,
        [
            DataType::Int64,
            list(list(DataType::Int64)),
            list(list(DataType::Utf8)),
        ]
    );
    let mut batches = Vec::new();
    let mut emit = |b: Result<RecordBatch>| {
        batches.push(b.expect("a batch"));
        true
    };
    read_rows(records(data), &schema, 10, "f", &mut emit).expect("read");
    let steps = batches[0].column(1).as_list::<i32>();
    let row0 = steps.value(0);
    let row0 = row0.as_list::<i32>();
    assert_eq!(row0.len(), 2);
    assert_eq!(
        row0.value(0).as_primitive::<Int64Type>().values().to_vec(),
        vec![1, 2]
    );
    assert_eq!(
        row0.value(1).as_primitive::<Int64Type>().values().to_vec(),
        vec![3]
    );
    assert_eq!(steps.value(1).len(), 0, "no steps: an empty list");
    assert!(!steps.is_null(1));
    assert!(steps.is_null(2), "an Example has no feature lists");
    let words = batches[0].column(2).as_list::<i32>();
    let row0 = words.value(0);
    let step0 = row0.as_list::<i32>().value(0);
    let words0: Vec<_> = step0.as_string::<i32>().iter().collect();
    assert_eq!(words0, [Some("a"), Some("b")]);
    assert!(words.is_null(1) && words.is_null(2));
}

#[test]
fn lists_of_lists_widen_their_items_only() {
    let ll = |t| list(list(t));
    assert_eq!(
        widen_pair(&ll(DataType::Utf8), &ll(DataType::Binary)),
        Some(ll(DataType::Binary))
    );
    assert_eq!(widen_pair(&ll(DataType::Int64), &DataType::Int64), None);
    assert_eq!(
        widen_pair(&ll(DataType::Int64), &list(DataType::Int64)),
        None
    );
    assert_eq!(
        widen_pair(&DataType::Utf8, &list(DataType::Binary)),
        Some(list(DataType::Binary))
    );
}
