//! Bare decode: read every Parquet file under a directory with the parquet crate's
//! synchronous `ParquetRecordBatchReaderBuilder`, all columns, batches of `--batch-size`
//! rows, on `--threads` threads that pull (file, row group) pieces from a shared
//! counter. Prints one JSON line: rows, batches, seconds, threads, files, row_groups.
//!
//!     sluice-bench-decode DIR [--threads 2] [--batch-size 8192] [--string-view]
//!
//! `--string-view` reads string columns as Utf8View (views into the decoded pages,
//! short strings inline) instead of Utf8 (values copied into one buffer per batch):
//! what sluice's reader would gain by asking for views.
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use std::sync::Arc;

use arrow_array::Array;
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::file::reader::{FileReader, SerializedFileReader};

fn parquet_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with('_') || name.starts_with('.') {
            continue;
        }
        if p.is_dir() {
            parquet_files(&p, out);
        } else if name.ends_with(".parquet") {
            out.push(p);
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir = None;
    let mut threads = 2usize;
    let mut batch_size = 8192usize;
    let mut string_view = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--threads" => threads = args.next().unwrap().parse().unwrap(),
            "--batch-size" => batch_size = args.next().unwrap().parse().unwrap(),
            "--string-view" => string_view = true,
            _ => dir = Some(PathBuf::from(a)),
        }
    }
    let dir = dir.expect("usage: sluice-bench-decode DIR [--threads N] [--batch-size B]");
    let t0 = Instant::now();
    let mut files = Vec::new();
    parquet_files(&dir, &mut files);
    // One piece per row group, as sluice's splits are.
    let mut pieces = Vec::new();
    for f in &files {
        let n = SerializedFileReader::new(File::open(f).unwrap())
            .unwrap()
            .metadata()
            .num_row_groups();
        pieces.extend((0..n).map(|rg| (f.clone(), rg)));
    }
    let next = AtomicUsize::new(0);
    let (rows, batches) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let (mut rows, mut batches) = (0usize, 0usize);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((path, rg)) = pieces.get(i) else {
                            break;
                        };
                        let file = File::open(path).unwrap();
                        let mut options = ArrowReaderOptions::new();
                        if string_view {
                            let meta = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
                                .unwrap();
                            let fields: Vec<Field> = meta
                                .schema()
                                .fields()
                                .iter()
                                .map(|f| match f.data_type() {
                                    DataType::Utf8 => {
                                        f.as_ref().clone().with_data_type(DataType::Utf8View)
                                    }
                                    _ => f.as_ref().clone(),
                                })
                                .collect();
                            options = options.with_schema(Arc::new(Schema::new(fields)));
                        }
                        let reader =
                            ParquetRecordBatchReaderBuilder::try_new_with_options(file, options)
                                .unwrap()
                                .with_row_groups(vec![*rg])
                                .with_batch_size(batch_size)
                                .build()
                                .unwrap();
                        for batch in reader {
                            let batch = batch.unwrap();
                            // Touch every column so that nothing could be skipped.
                            let touched: usize = batch
                                .columns()
                                .iter()
                                .map(|c| c.len() - c.null_count() + c.null_count())
                                .sum();
                            assert_eq!(touched, batch.num_rows() * batch.num_columns());
                            rows += batch.num_rows();
                            batches += 1;
                        }
                    }
                    (rows, batches)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{{\"rows\": {rows}, \"batches\": {batches}, \"seconds\": {secs:.6}, \"threads\": {threads}, \"string_view\": {string_view}, \"files\": {}, \"row_groups\": {}}}",
        files.len(),
        pieces.len()
    );
}
