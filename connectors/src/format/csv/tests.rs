use super::*;

#[test]
fn non_finite_doubles_and_fine_timestamps_as_spark_infers_them() {
    let head = b"d,ts,s\n1.0E-5,2026-01-01 00:00:00.123,a\nNaN,2026-01-01 00:00:00.123456,b\nInfinity,,c\n-Infinity,2026-01-02 10:00:00.5,Infinity\n";
    let (schema, _) = infer(head, b',', true, "x.csv").expect("infers");
    assert_eq!(schema.field(0).data_type(), &DataType::Float64);
    assert!(matches!(
        schema.field(1).data_type(),
        DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, _)
    ));
    assert_eq!(schema.field(2).data_type(), &DataType::Utf8);
    let mut reader = ReaderBuilder::new(Arc::new(schema))
        .with_header(true)
        .build(Cursor::new(&head[..]))
        .expect("reader");
    let batch = reader.next().expect("a batch").expect("decodes");
    let d = batch
        .column(0)
        .as_any()
        .downcast_ref::<arrow::array::Float64Array>()
        .expect("doubles");
    assert_eq!(d.value(0), 1e-5);
    assert!(d.value(1).is_nan());
    assert_eq!(d.value(2), f64::INFINITY);
    assert_eq!(d.value(3), f64::NEG_INFINITY);
    let ts = batch
        .column(1)
        .as_any()
        .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
        .expect("micros");
    assert_eq!(ts.value(1) % 1_000_000, 123_456);
}

fn head_of(text: &str) -> CsvHead {
    let opts = FormatOptions::default();
    let (_, head) = read_head(text.as_bytes(), &opts, "f.csv").expect("a head");
    head.expect("a head to decide from")
}

#[test]
fn a_header_over_typed_columns_is_detected() {
    let head = head_of("id,name,score\n1,a,0.5\n2,b,1.5\n");
    assert_eq!(head.evidence, HeaderEvidence::Header);
    let names: Vec<&str> = head
        .with_header
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["id", "name", "score"]);
    assert_eq!(
        head.with_header.field(0).data_type(),
        &DataType::Int32,
        "{:?}",
        head.with_header
    );
}

#[test]
fn data_in_the_first_line_is_data() {
    let head = head_of("6134,n6134,876.2857142857143\n1,a,0.5\n2,b,1.5\n");
    assert_eq!(head.evidence, HeaderEvidence::Data);
    let names: Vec<&str> = head
        .without_header
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["_c0", "_c1", "_c2"]);
    // An integer over a column of floats is data too.
    assert_eq!(head_of("1,2\n1.5,x\n").evidence, HeaderEvidence::Data);
}

#[test]
fn text_only_or_one_line_cannot_tell() {
    assert_eq!(
        head_of("name,city\nann,rome\nbob,oslo\n").evidence,
        HeaderEvidence::Undecided
    );
    assert_eq!(head_of("id,x\n").evidence, HeaderEvidence::Undecided);
    // An empty value over a typed column says nothing.
    assert_eq!(head_of(",a\n1,b\n").evidence, HeaderEvidence::Data);
}

#[test]
fn quoted_line_breaks_stay_in_their_record() {
    let text = "id,s\n1,\"a\nb\"\n2,\"say \\\"hi\\\"\"\n3,x\n";
    let (head, first_end) = read_records(&mut text.as_bytes(), 3, b',').expect("read");
    assert_eq!(first_end, 5);
    assert_eq!(
        std::str::from_utf8(&head).expect("utf8"),
        &text[..text.len() - 4]
    );
    assert_eq!(head_of(text).evidence, HeaderEvidence::Header);
    // Doubled quotes inside quotes, and a quote inside an unquoted value.
    let text = "1,\"a \"\"q\"\"\nb\"\n2,5\" screen\n3,x\n4,y\n";
    let (head, first_end) = read_records(&mut text.as_bytes(), 3, b',').expect("read");
    assert_eq!(&text[..first_end], "1,\"a \"\"q\"\"\nb\"\n");
    assert_eq!(
        std::str::from_utf8(&head).expect("utf8"),
        &text[..text.len() - 4]
    );
}

#[test]
fn files_that_disagree_are_named() {
    let header = head_of("id,s\n1,a\n");
    let data = head_of("0,z\n1,a\n");
    let text = head_of("a,b\nc,d\n");
    let decide = |heads: &[(&str, &CsvHead)]| decide_header(heads.iter().copied());
    assert!(decide(&[("a", &header), ("b", &text)]).expect("decided"));
    assert!(!decide(&[("a", &data), ("b", &text)]).expect("decided"));
    assert!(!decide(&[("a", &text)]).expect("decided"));
    let err = decide(&[("a", &header), ("b", &text), ("c", &data)])
        .expect_err("files disagree")
        .to_string();
    assert!(err.contains("a:") && err.contains(" c "), "{err}");
}

/// The types of the columns of `text` (with a header line).
fn types_of(text: &str) -> Vec<DataType> {
    let (schema, _) = infer(text.as_bytes(), b',', true, "t.csv").expect("infers");
    schema
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect()
}

#[test]
fn integers_are_int_bigint_or_decimal_as_spark_infers_them() {
    // Each column as Spark 4's inferSchema typed it.
    let head = "i,l,d,big,sign,e\n\
                1,1,1,1,+5,5.\n\
                -2147483648,2147483648,12345678901234567890,11111111111111111111111111111111111111111,7,1.2345678E7\n\
                2147483647,-9223372036854775808,9223372036854775807,1,0001,1.5E1\n";
    assert_eq!(
        types_of(head),
        [
            DataType::Int32,
            DataType::Int64,
            DataType::Decimal128(20, 0),
            DataType::Float64,
            DataType::Int32,
            DataType::Decimal128(8, 0),
        ]
    );
    // A fraction or an exponent that leaves one makes a double; `1E10`
    // (a negative scale) too; `1,000` is text, `nan` (not `NaN`) too.
    let head = "a,b,c,d,e,f\n1,12345678901234567890,1E10,\"1,000\",nan,Inf\n2,1.5,2,3,1.0,-Inf\n";
    assert_eq!(
        types_of(head),
        [
            DataType::Int32,
            DataType::Float64,
            DataType::Float64,
            DataType::Utf8,
            DataType::Utf8,
            DataType::Float64,
        ]
    );
}

#[test]
fn a_value_is_typed_from_the_type_so_far_as_spark_does() {
    use types::{infer_number, Number};
    let fold = |values: &[&str]| {
        values
            .iter()
            .try_fold(None, |t, v| infer_number(t, v).map(Some))
            .flatten()
    };
    assert_eq!(fold(&["5", "1.5E1"]), Some(Number::Decimal(10)));
    assert_eq!(fold(&["1.5E1", "5"]), Some(Number::Decimal(2)));
    assert_eq!(
        fold(&["5", "12345678901234567890123"]),
        Some(Number::Decimal(23))
    );
    assert_eq!(
        fold(&["12345678901234567890", "9223372036854775807"]),
        Some(Number::Decimal(20))
    );
    assert_eq!(fold(&["12345678901234567890", "1.5"]), Some(Number::Double));
    assert_eq!(fold(&[&"1".repeat(38)]), Some(Number::Decimal(38)));
    assert_eq!(fold(&[&"1".repeat(39)]), Some(Number::Double));
    assert_eq!(fold(&[&format!("{}1", "0".repeat(41))]), Some(Number::Int));
    assert_eq!(fold(&["1", "x"]), None);
}

/// A dataset of CSV files (name, text) in a store of its own.
async fn dataset_of(files: &[(&str, &str)], options: crate::DatasetOptions) -> crate::Dataset {
    use object_store::ObjectStoreExt;
    let store = Arc::new(object_store::memory::InMemory::new());
    for (name, text) in files {
        let path = Path::from(format!("d/{name}"));
        store
            .put(&path, text.as_bytes().to_vec().into())
            .await
            .expect("put");
    }
    let location = Location::new(store, Path::from("d"), "s3://b");
    crate::Dataset::open(location, options)
        .await
        .expect("opens")
}

/// Every split of the dataset read: the batches, or the first error.
async fn read_all(dataset: &crate::Dataset) -> Result<Vec<RecordBatch>> {
    use futures::StreamExt;
    let plan = crate::ReadPlan::new(dataset, None, 3).expect("a plan");
    let mut batches = Vec::new();
    for split in &dataset.splits {
        let mut stream = crate::read_split(&dataset.location, split, &plan, 0);
        while let Some(batch) = stream.next().await {
            batches.push(batch?);
        }
    }
    Ok(batches)
}

#[tokio::test]
async fn an_int_file_and_a_bigint_file_make_a_bigint_column() {
    let dataset = dataset_of(
        &[
            (
                "part-00000.csv",
                "id,n,x,d\n1,5,1,2024-01-01\n2,6,2,2024-01-02\n",
            ),
            (
                "part-00001.csv",
                "id,n,x,d\n3000000000,12345678901234567890123,a,2024-01-03 10:00:00\n4,7,3,\n",
            ),
        ],
        crate::DatasetOptions::default(),
    )
    .await;
    let types: Vec<DataType> = dataset
        .data_schema
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    let instant = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
    assert_eq!(
        types,
        [
            DataType::Int64,
            DataType::Decimal128(23, 0),
            DataType::Utf8,
            instant
        ]
    );
    let batches = read_all(&dataset).await.expect("reads");
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, 4);
}

#[tokio::test]
async fn a_value_past_the_int_of_the_head_fails_naming_file_and_column() {
    let mut options = crate::DatasetOptions::default();
    options.format_options.infer_records = 2;
    let text = "id,s\n1,a\n2,b\n3,c\n3000000000,d\n";
    let dataset = dataset_of(&[("part-00000.csv", text)], options).await;
    assert_eq!(dataset.data_schema.field(0).data_type(), &DataType::Int32);
    let err = read_all(&dataset).await.expect_err("3000000000 is no int");
    let text = err.to_string();
    assert!(
        text.contains("part-00000.csv")
            && text.contains("value `3000000000` of column `id` is no int")
            && text.contains("first 2 records")
            && !text.contains('\n'),
        "{text}"
    );
    // Past a bigint: the value and the column named, as for an int.
    let text = "id\n3000000000\n2\n3\n9223372036854775808\n";
    let mut options = crate::DatasetOptions::default();
    options.format_options.infer_records = 2;
    let dataset = dataset_of(&[("part-00000.csv", text)], options).await;
    let err = read_all(&dataset).await.expect_err("no int").to_string();
    assert!(
        err.contains("value `9223372036854775808` of column `id` is no bigint"),
        "{err}"
    );
}

/// The instants (microseconds) of the `ts` column, read in `zone`.
async fn instants_in(zone: &str, text: &str) -> Vec<Option<i64>> {
    let options = crate::DatasetOptions {
        timezone: crate::SessionTz::parse(zone).expect("a zone"),
        ..crate::DatasetOptions::default()
    };
    let dataset = dataset_of(&[("part-00000.csv", text)], options).await;
    let instant = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
    assert_eq!(dataset.data_schema.field(1).data_type(), &instant);
    let mut out = Vec::new();
    for batch in read_all(&dataset).await.expect("reads") {
        assert_eq!(batch.column(1).data_type(), &instant);
        let ts = batch
            .column(1)
            .as_any()
            .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
            .expect("micros");
        out.extend(ts.iter());
    }
    out
}

#[tokio::test]
async fn timestamps_without_an_offset_are_wall_clock_times_in_the_session_zone() {
    let text = "id,ts\n\
                1,2024-01-01 10:00:00\n\
                2,2024-01-01T10:00:00.000Z\n\
                3,\n\
                4,2024-03-10 02:30:00\n\
                5,2024-11-03 01:30:00.5\n";
    let micros = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .expect("a time")
            .timestamp_micros()
    };
    // As Spark reads them under spark.sql.session.timeZone: in a gap the
    // time moves on, in an overlap the earlier instant.
    assert_eq!(
        instants_in("America/Los_Angeles", text).await,
        [
            Some(micros("2024-01-01T18:00:00Z")),
            Some(micros("2024-01-01T10:00:00Z")),
            None,
            Some(micros("2024-03-10T10:30:00Z")),
            Some(micros("2024-11-03T08:30:00.5Z")),
        ]
    );
    assert_eq!(
        instants_in("+05:30", text).await,
        [
            Some(micros("2024-01-01T04:30:00Z")),
            Some(micros("2024-01-01T10:00:00Z")),
            None,
            Some(micros("2024-03-09T21:00:00Z")),
            Some(micros("2024-11-02T20:00:00.5Z")),
        ]
    );
    assert_eq!(
        instants_in("UTC", text).await[0],
        Some(micros("2024-01-01T10:00:00Z"))
    );
}

#[test]
fn arrow_errors_name_the_column() {
    let columns = Columns::new(
        &["a".to_string(), "ts".to_string()],
        &Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("ts", DataType::Date32, true),
        ]),
        crate::SessionTz::Utc,
        10,
    );
    let err = arrow::error::ArrowError::ParseError(
        "Error while parsing value 'x' as type 'Int32' for column 0 at line 7. Row data: '[x,1]'"
            .into(),
    );
    assert_eq!(
        columns.explain(&err),
        "value `x` of column `a` is no int, the type the first 10 records of each file gave \
         the column (Spark infers it from all of them)"
    );
    let err = arrow::error::ArrowError::ParseError(
        "Error parsing column 1 at line 3: Parser error: Error parsing timestamp from 'x'".into(),
    );
    assert!(
        columns.explain(&err).starts_with(
            "a value of column `ts` (Parser error: Error parsing timestamp from 'x') is no date"
        ),
        "{}",
        columns.explain(&err)
    );
    let other = arrow::error::ArrowError::ParseError("something else".into());
    assert_eq!(columns.explain(&other), "Parser error: something else");
}

#[tokio::test]
async fn numbers_read_as_the_types_spark_gives_them() {
    let text = "sign,dot,e,inf,big,blank\n\
                +5,5.,1.2345678E7,Inf,12345678901234567890123, 5\n\
                7,6.,1.5E1,-Inf,-1,6\n\
                -8,,,+Infinity,,\n\
                ,,,NaN,,\n";
    let dataset = dataset_of(
        &[("part-00000.csv", text)],
        crate::DatasetOptions::default(),
    )
    .await;
    let types: Vec<DataType> = dataset
        .data_schema
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    assert_eq!(
        types,
        [
            DataType::Int32,
            DataType::Decimal128(1, 0),
            DataType::Decimal128(8, 0),
            DataType::Float64,
            DataType::Decimal128(23, 0),
            DataType::Float64,
        ]
    );
    let batches = read_all(&dataset).await.expect("reads");
    let batch = arrow::compute::concat_batches(&batches[0].schema(), &batches).expect("concat");
    let shown: Vec<String> = (0..batch.num_columns())
        .map(|c| {
            let column = batch.column(c);
            let options = arrow::util::display::FormatOptions::default().with_null("null");
            let format = arrow::util::display::ArrayFormatter::try_new(column.as_ref(), &options)
                .expect("a formatter");
            (0..batch.num_rows())
                .map(|r| format.value(r).to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(
        shown,
        [
            "5 7 -8 null",
            "5 6 null null",
            "12345678 15 null null",
            "inf -inf inf NaN",
            "12345678901234567890123 -1 null null",
            "5.0 6.0 null null",
        ]
    );
}

#[tokio::test]
async fn a_fraction_in_a_whole_decimal_column_fails_the_read() {
    let mut options = crate::DatasetOptions::default();
    options.format_options.infer_records = 2;
    let text = "n\n12345678901234567890123\n1\n1.5E1\n7\n1.5\n";
    let dataset = dataset_of(&[("part-00000.csv", text)], options).await;
    assert_eq!(
        dataset.data_schema.field(0).data_type(),
        &DataType::Decimal128(23, 0)
    );
    let err = read_all(&dataset)
        .await
        .expect_err("1.5 is no decimal(23,0)");
    let text = err.to_string();
    assert!(
        text.contains("part-00000.csv")
            && text.contains("value `1.5` of column `n` is no decimal(23,0)"),
        "{text}"
    );
}

#[test]
fn a_timestamp_text_that_is_none_fails_naming_its_column() {
    let instant = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
    let zone = crate::SessionTz::parse("Europe/Berlin").expect("a zone");
    let columns = Columns::new(
        &["ts".to_string()],
        &Schema::new(vec![Field::new("ts", instant, true)]),
        zone,
        1000,
    );
    assert_eq!(columns.read.field(0).data_type(), &DataType::Utf8);
    let texts: arrow::array::ArrayRef = Arc::new(arrow::array::StringArray::from(vec![
        Some("2024-03-31 02:30:00"),
        Some("soon"),
    ]));
    let batch = RecordBatch::try_new(columns.read.clone(), vec![texts]).expect("a batch");
    let err = columns.finish(batch).expect_err("soon is no timestamp");
    assert!(
        err.starts_with("value `soon` of column `ts` is no timestamp, the type the first 1000"),
        "{err}"
    );
}
