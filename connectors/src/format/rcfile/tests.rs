use std::io::Write;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Date32Type, Decimal128Type, Float64Type, Int32Type, Int64Type};
use arrow::datatypes::{TimeUnit, TimestampMicrosecondType};

use super::*;
use crate::format::{DelimitedText, Format};

/// Writes a Hadoop vlong as `WritableUtils.writeVLong` does.
fn put_vlong(out: &mut Vec<u8>, v: i64) {
    if (-112..=127).contains(&v) {
        out.push(v as u8);
        return;
    }
    let (mut len, magnitude) = if v < 0 { (-120i32, !v) } else { (-112, v) };
    let mut tmp = magnitude;
    while tmp != 0 {
        tmp >>= 8;
        len -= 1;
    }
    out.push(len as i8 as u8);
    let n = if len < -120 {
        -(len + 120)
    } else {
        -(len + 112)
    };
    for i in (0..n).rev() {
        out.push((magnitude >> (i * 8)) as u8);
    }
}

fn put_text(out: &mut Vec<u8>, s: &str) {
    put_vlong(out, s.len() as i64);
    out.extend_from_slice(s.as_bytes());
}

const SYNC: [u8; 16] = *b"0123456789abcdef";

/// A small RCFile writer: a sync marker before every row group but the first.
struct Writer {
    out: Vec<u8>,
    zlib: bool,
    groups: usize,
}

impl Writer {
    fn new(columns: usize, old_header: bool, zlib: bool) -> Writer {
        let mut out = Vec::new();
        if old_header {
            out.extend_from_slice(b"SEQ\x06");
            put_text(&mut out, KEY_CLASS);
            put_text(&mut out, "org.apache.hadoop.hive.ql.io.RCFile$ValueBuffer");
            out.extend_from_slice(&[u8::from(zlib), 0]);
        } else {
            out.extend_from_slice(b"RCF\x01");
            out.push(u8::from(zlib));
        }
        if zlib {
            put_text(&mut out, "org.apache.hadoop.io.compress.DefaultCodec");
        }
        out.extend_from_slice(&1i32.to_be_bytes());
        put_text(&mut out, COLUMN_NUMBER);
        put_text(&mut out, &columns.to_string());
        out.extend_from_slice(&SYNC);
        Writer {
            out,
            zlib,
            groups: 0,
        }
    }

    fn pack(&self, bytes: &[u8]) -> Vec<u8> {
        if !self.zlib {
            return bytes.to_vec();
        }
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    /// Appends a row group of `rows`, each a cell per column.
    fn group(&mut self, rows: &[Vec<Vec<u8>>]) {
        if self.groups > 0 {
            self.out.extend_from_slice(&(-1i32).to_be_bytes());
            self.out.extend_from_slice(&SYNC);
        }
        self.groups += 1;
        let columns = rows.first().map_or(0, Vec::len);
        let mut key = Vec::new();
        put_vlong(&mut key, rows.len() as i64);
        let mut values = Vec::new();
        for c in 0..columns {
            let plain: Vec<u8> = rows.iter().flat_map(|r| r[c].clone()).collect();
            let packed = self.pack(&plain);
            let lengths = run_lengths(rows.iter().map(|r| r[c].len() as i64));
            put_vlong(&mut key, packed.len() as i64);
            put_vlong(&mut key, plain.len() as i64);
            put_vlong(&mut key, lengths.len() as i64);
            key.extend_from_slice(&lengths);
            values.extend_from_slice(&packed);
        }
        let disk_key = self.pack(&key);
        let record = (key.len() + values.len()) as i32;
        self.out.extend_from_slice(&record.to_be_bytes());
        self.out
            .extend_from_slice(&(key.len() as i32).to_be_bytes());
        self.out
            .extend_from_slice(&(disk_key.len() as i32).to_be_bytes());
        self.out.extend_from_slice(&disk_key);
        self.out.extend_from_slice(&values);
    }
}

/// Field lengths run-length encoded as Hive's writer does.
fn run_lengths(lengths: impl Iterator<Item = i64>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut previous: Option<(i64, i64)> = None;
    for len in lengths {
        match previous {
            Some((p, run)) if p == len => previous = Some((p, run + 1)),
            _ => {
                if let Some((p, run)) = previous {
                    put_vlong(&mut out, p);
                    if run > 0 {
                        put_vlong(&mut out, !run);
                    }
                }
                previous = Some((len, 0));
            }
        }
    }
    if let Some((p, run)) = previous {
        put_vlong(&mut out, p);
        if run > 0 {
            put_vlong(&mut out, !run);
        }
    }
    out
}

fn text_rows(from: usize, to: usize) -> Vec<Vec<Vec<u8>>> {
    (from..to)
        .map(|i| {
            let name = if i % 5 == 0 {
                "\\N".to_string()
            } else {
                format!("v{}", i % 3)
            };
            vec![i.to_string().into_bytes(), name.into_bytes()]
        })
        .collect()
}

fn split_of(loc: &Location, name: &str, size: u64, range: SplitRange) -> Split {
    Split {
        path: loc.root.clone().join(name).to_string(),
        size,
        format: Format::Rcfile,
        codec: Codec::None,
        partition_dir: String::new(),
        partition_values: Vec::new(),
        range,
        rows: None,
        deleted: Vec::new(),
        stamp: Default::default(),
        source: 0,
        window: None,
    }
}

/// Every batch a split reads, or its error.
async fn read(loc: &Location, split: Split, opts: FormatOptions) -> Result<Vec<RecordBatch>> {
    let loc = loc.clone();
    tokio::task::spawn_blocking(move || {
        let mut batches = Vec::new();
        let mut failed = None;
        read_split(&loc, &split, &opts, &mut |item| match item {
            Ok(b) => {
                batches.push(b);
                true
            }
            Err(e) => {
                failed = Some(e);
                false
            }
        })?;
        failed.map_or(Ok(batches), Err)
    })
    .await
    .unwrap()
}

fn write_file(dir: &std::path::Path, name: &str, bytes: &[u8]) -> Location {
    std::fs::write(dir.join(name), bytes).unwrap();
    crate::store::open(dir.to_str().unwrap()).unwrap()
}

fn strings(batches: &[RecordBatch], column: usize) -> Vec<Option<String>> {
    batches
        .iter()
        .flat_map(|b| {
            b.column(column)
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn vlongs_read_as_hadoop_writes_them() {
    for v in [
        0,
        1,
        -1,
        127,
        -112,
        128,
        -113,
        255,
        1 << 20,
        -(1 << 40),
        i64::MAX,
        i64::MIN,
    ] {
        let mut buf = Vec::new();
        put_vlong(&mut buf, v);
        let mut at = 0;
        assert_eq!(vlong_at(&buf, &mut at), Some(v), "{v}");
        assert_eq!(at, buf.len(), "{v}");
    }
    assert_eq!(vlong_at(&[0x8c, 1], &mut 0), None, "cut short");
}

#[test]
fn run_length_field_lengths() {
    let buf = run_lengths([1, 1, 1, 2, 3, 3].into_iter());
    assert_eq!(field_lengths(&buf, 6, 11), Some(vec![1, 1, 1, 2, 3, 3]));
    assert_eq!(field_lengths(&buf, 6, 10), None, "overruns the column");
    assert_eq!(
        field_lengths(&[!2u8], 3, 10),
        None,
        "a run with nothing before it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_in_exactly_one_byte_range_split() {
    for (old, zlib) in [(false, false), (true, false), (false, true)] {
        let mut w = Writer::new(2, old, zlib);
        for g in 0..6 {
            w.group(&text_rows(g * 10, g * 10 + 10));
        }
        let dir = tempfile::tempdir().unwrap();
        let loc = write_file(dir.path(), "part-00000", &w.out);
        let size = w.out.len() as u64;
        let want: Vec<Option<String>> = (0..60).map(|i| Some(i.to_string())).collect();
        for split_size in [1, 7, 40, 100, 333, size] {
            let mut got = Vec::new();
            for (start, end) in crate::split::byte_ranges(size, split_size) {
                let split = split_of(&loc, "part-00000", size, SplitRange::Bytes { start, end });
                let batches = read(&loc, split, FormatOptions::default()).await.unwrap();
                got.extend(strings(&batches, 0));
            }
            assert_eq!(got, want, "old {old} zlib {zlib} split size {split_size}");
        }
        let split = split_of(&loc, "part-00000", size, SplitRange::Whole);
        let batches = read(&loc, split, FormatOptions::default()).await.unwrap();
        assert_eq!(batches[0].schema().field(1).name(), "_col1");
        let names = strings(&batches, 1);
        assert_eq!(names[0], None, "\\N is null");
        assert_eq!(names[1].as_deref(), Some("v1"));
    }
}

#[test]
fn row_groups_are_cut_at_the_batch_size_or_batch_bytes() {
    let chunk = |lengths: Vec<u32>| ColumnChunk {
        data: vec![0; lengths.iter().sum::<u32>() as usize],
        lengths: Some(lengths),
    };
    let chunks = [chunk(vec![1, 1, 8, 1, 1]), chunk(vec![1, 1, 1, 1, 1])];
    let opts = |rows: usize, bytes: Option<u64>| FormatOptions {
        batch_size: rows,
        batch_bytes: bytes,
        ..FormatOptions::default()
    };
    assert_eq!(cuts(&chunks, 5, &opts(2, None)), [(0, 2), (2, 2), (4, 1)]);
    assert_eq!(
        cuts(&chunks, 5, &opts(100, Some(4))),
        [(0, 2), (2, 1), (3, 2)]
    );
    assert_eq!(cuts(&chunks, 5, &opts(100, None)), [(0, 5)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_fields_are_typed_by_the_table() {
    let mut w = Writer::new(2, false, false);
    let cell = |s: &str| s.as_bytes().to_vec();
    w.group(&[
        vec![cell("7"), cell("true")],
        vec![cell("x"), cell("\\N")],
        vec![cell(""), cell("false")],
    ]);
    let dir = tempfile::tempdir().unwrap();
    let loc = write_file(dir.path(), "t.rc", &w.out);
    let opts = FormatOptions {
        delimited: Some(DelimitedText {
            delimiter: 1,
            escape: None,
            quote: None,
            null: Some("\\N".into()),
            columns: vec![
                Field::new("n", DataType::Int32, true),
                Field::new("b", DataType::Boolean, true),
                Field::new("missing", DataType::Utf8, true),
            ],
        }),
        ..FormatOptions::default()
    };
    let split = split_of(&loc, "t.rc", w.out.len() as u64, SplitRange::Whole);
    let batches = read(&loc, split, opts).await.unwrap();
    let b = &batches[0];
    let n: Vec<Option<i32>> = b.column(0).as_primitive::<Int32Type>().iter().collect();
    assert_eq!(n, [Some(7), None, None]);
    let flags: Vec<Option<bool>> = b.column(1).as_boolean().iter().collect();
    assert_eq!(flags, [Some(true), None, Some(false)]);
    assert_eq!(
        b.column(2).null_count(),
        3,
        "a column the file lacks is null"
    );
}

fn vlong_cell(v: i64) -> Vec<u8> {
    let mut out = Vec::new();
    put_vlong(&mut out, v);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_binary_fields_are_decoded_by_type() {
    // 2023-11-14 22:13:20.123456 UTC, and 1969-12-31 23:59:59.5.
    let mut ts = (1_700_000_000u32 | 0x8000_0000).to_be_bytes().to_vec();
    put_vlong(&mut ts, 654_321);
    let mut old_ts = (0x7FFF_FFFFu32 | 0x8000_0000).to_be_bytes().to_vec();
    put_vlong(&mut old_ts, -5 - 1);
    put_vlong(&mut old_ts, -1);
    let mut dec = vlong_cell(1); // -12.5 at scale 1
    dec.extend(vlong_cell(1));
    dec.push((-125i8) as u8);
    let rows = vec![
        vec![
            vlong_cell(-7),
            vlong_cell(-(1 << 40)),
            2.5f64.to_be_bytes().to_vec(),
            b"hi".to_vec(),
            vlong_cell(-6),
            vec![1],
            dec,
            ts,
        ],
        vec![
            vec![],
            vec![],
            vec![],
            vec![0xBF],
            vlong_cell(20_000),
            vec![0],
            vec![],
            old_ts,
        ],
        vec![
            vlong_cell(300),
            vlong_cell(5),
            vec![],
            vec![],
            vec![],
            vec![],
            vec![],
            vec![],
        ],
    ];
    let mut w = Writer::new(8, false, false);
    w.group(&rows);
    let dir = tempfile::tempdir().unwrap();
    let loc = write_file(dir.path(), "t.rc", &w.out);
    let columns = vec![
        Field::new("n", DataType::Int32, true),
        Field::new("big", DataType::Int64, true),
        Field::new("x", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("d", DataType::Date32, true),
        Field::new("b", DataType::Boolean, true),
        Field::new("amount", DataType::Decimal128(10, 2), true),
        Field::new("t", DataType::Timestamp(TimeUnit::Microsecond, None), true),
    ];
    let opts = FormatOptions {
        delimited: Some(DelimitedText {
            delimiter: 1,
            escape: None,
            quote: None,
            null: Some("\\N".into()),
            columns,
        }),
        binary_columnar: true,
        ..FormatOptions::default()
    };
    let split = split_of(&loc, "t.rc", w.out.len() as u64, SplitRange::Whole);
    let b = &read(&loc, split, opts).await.unwrap()[0];
    let col = |i: usize| b.column(i).clone();
    assert_eq!(
        col(0)
            .as_primitive::<Int32Type>()
            .iter()
            .collect::<Vec<_>>(),
        [Some(-7), None, Some(300)]
    );
    assert_eq!(
        col(1)
            .as_primitive::<Int64Type>()
            .iter()
            .collect::<Vec<_>>(),
        [Some(-(1 << 40)), None, Some(5)]
    );
    assert_eq!(
        col(2)
            .as_primitive::<Float64Type>()
            .iter()
            .collect::<Vec<_>>(),
        [Some(2.5), None, None]
    );
    assert_eq!(
        strings(std::slice::from_ref(b), 3),
        [Some("hi".into()), Some(String::new()), None]
    );
    assert_eq!(
        col(4)
            .as_primitive::<Date32Type>()
            .iter()
            .collect::<Vec<_>>(),
        [Some(-6), Some(20_000), None]
    );
    assert_eq!(
        col(5).as_boolean().iter().collect::<Vec<_>>(),
        [Some(true), Some(false), None]
    );
    assert_eq!(
        col(6)
            .as_primitive::<Decimal128Type>()
            .iter()
            .collect::<Vec<_>>(),
        [Some(-1250), None, None]
    );
    let t: Vec<Option<i64>> = col(7)
        .as_primitive::<TimestampMicrosecondType>()
        .iter()
        .collect();
    assert_eq!(t, [Some(1_700_000_000_123_456), Some(-500_000), None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_file_is_a_one_line_error_naming_it() {
    let mut w = Writer::new(2, false, false);
    w.group(&text_rows(0, 10));
    let cut = &w.out[..w.out.len() - 3];
    let dir = tempfile::tempdir().unwrap();
    let loc = write_file(dir.path(), "part-00007", cut);
    let split = split_of(&loc, "part-00007", cut.len() as u64, SplitRange::Whole);
    let err = read(&loc, split, FormatOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("part-00007") && err.contains("rcfile"),
        "{err}"
    );
    assert!(err.contains("ends inside"), "{err}");
    assert!(!err.contains('\n'), "{err}");
    let loc = write_file(dir.path(), "part-00008", b"RCF\x01\x00");
    let split = split_of(&loc, "part-00008", 5, SplitRange::Whole);
    let err = read(&loc, split, FormatOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("part-00008") && err.contains("ends inside"),
        "{err}"
    );
    let loc = write_file(dir.path(), "part-00009", b"SEQ\x06\x02ab\x02cd\x00\x00");
    let split = split_of(&loc, "part-00009", 13, SplitRange::Whole);
    let err = read(&loc, split, FormatOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not an RCFile"), "{err}");
}
