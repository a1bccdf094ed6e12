//! `--batch-bytes`: rows of large values (the seed's audio segments) are cut
//! into batches by bytes as well as rows, whichever limit comes first.

use std::collections::HashMap;
use std::path::Path;

use crate::common::*;

const ROWS: i64 = 48;
const VALUE_BYTES: usize = 256 * 1024;

/// A Parquet file of `ROWS` rows, each an `id` and a `blob` of 256 KiB,
/// written by pyarrow in row groups of 16 rows.
fn large_rows(dir: &Path) -> String {
    let data = dir.join("segments");
    std::fs::create_dir_all(&data).expect("mkdir");
    let script = format!(
        "import pyarrow as pa, pyarrow.parquet as pq\n\
         ids = list(range({ROWS}))\n\
         blobs = [bytes([i % 251]) * {VALUE_BYTES} for i in ids]\n\
         t = pa.table({{'id': pa.array(ids, pa.int64()), 'blob': pa.array(blobs, pa.binary())}})\n\
         pq.write_table(t, '{}', row_group_size=16)\n",
        data.join("part-00000.parquet").display()
    );
    let out = std::process::Command::new(python())
        .args(["-c", &script])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    data.display().to_string()
}

/// The batches the trainer was handed, each as its ids.
fn batches(out: &Path) -> Vec<Vec<i64>> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(out).expect("list") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !name.starts_with("seen-") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        for line in text.lines() {
            all.push(serde_json::from_str::<Vec<i64>>(line).expect("a list of ids"));
        }
    }
    all
}

fn train(data: &str, out: &Path, extra: &[&str]) -> Run {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/batch_log.py");
    let exec = format!(
        "{} {} --out {} --every 100000",
        python(),
        script.display(),
        out.display()
    );
    let mut args = vec![
        "train",
        data,
        "--exec",
        &exec,
        "--quiet",
        "--batch-size",
        "1000",
    ];
    args.extend_from_slice(extra);
    sluice(&args)
}

#[test]
fn large_rows_are_cut_by_bytes_and_every_row_arrives_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = large_rows(dir.path());
    let bounded = dir.path().join("bounded");
    std::fs::create_dir_all(&bounded).expect("mkdir");
    train(&data, &bounded, &["--batch-bytes", "1MiB"]).success();
    let cut = batches(&bounded);
    // 256 KiB rows under 1 MiB: at most 4 rows a batch, at least one.
    assert!(
        cut.iter().all(|b| !b.is_empty() && b.len() <= 4),
        "batch sizes {:?}",
        cut.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let mut counts: HashMap<i64, u32> = HashMap::new();
    for id in cut.iter().flatten() {
        *counts.entry(*id).or_default() += 1;
    }
    assert_exactly_once(&counts, ROWS as u64, "--batch-bytes 1MiB");
    // Without the bound the rows go out as --batch-size allows: one batch.
    let whole = dir.path().join("whole");
    std::fs::create_dir_all(&whole).expect("mkdir");
    train(&data, &whole, &[]).success();
    let lens: Vec<usize> = batches(&whole).iter().map(Vec::len).collect();
    assert_eq!(lens, vec![ROWS as usize], "one batch of every row");
}

#[test]
fn batch_bytes_with_lockstep_or_a_global_shuffle_is_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().display().to_string();
    for extra in [
        vec!["--lockstep"],
        vec!["--shuffle", "global", "--seed", "1"],
    ] {
        let mut args = vec!["train", &data, "--model", "none", "--batch-bytes", "1MiB"];
        args.extend(extra.iter().copied());
        let run = sluice(&args);
        assert_one_line_error(&run, &["--batch-bytes", "--batch-size"]);
        assert_eq!(run.status.code(), Some(64), "{run}");
    }
    let run = sluice(["train", &data, "--model", "none", "--batch-bytes", "0"]);
    assert_one_line_error(&run, &["--batch-bytes"]);
    assert_eq!(run.status.code(), Some(64), "{run}");
}
