//! Counts that are right (issue 53): a worker's last line counts the
//! batches of every join of the job, as it counts their rows. A worker whose
//! trainers keep checkpoints joins again while another worker's trainers
//! still hold rows in no checkpoint; its last line said "N rows in 0
//! batches", the batches of that last, empty join.

use std::path::Path;
use std::process::Stdio;

use crate::common::cluster::{clean_finish, wait_exit, Job};
use crate::common::python;

/// `(rows, batches)` of a worker's `worker done: N rows in M batches` line.
fn done_line(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.contains("worker done: "))
        .unwrap_or_else(|| panic!("no `worker done` line:\n{stderr}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "done:")
        .unwrap_or_else(|| panic!("{line}"));
    let number = |i: usize| -> u64 {
        words
            .get(i)
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no number at word {i}: {line}"))
    };
    (number(at + 1), number(at + 4))
}

#[test]
fn a_worker_that_joined_again_counts_every_batch_it_trained() {
    let job = Job::new("clicks", 1);
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/clicks");
    let mut master = job.start_master(&data);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/checkpoint_ids.py");
    let out = tempfile::tempdir().expect("tempdir");
    // The second worker's trainer waits before its final checkpoint: the
    // first, done before it, joins again to serve what it would lose.
    let workers: Vec<_> = [("a", ""), ("b", "--linger 3")]
        .iter()
        .map(|(name, extra)| {
            let dir = out.path().join(name);
            std::fs::create_dir_all(&dir).expect("mkdir");
            let exec = format!(
                "{} {} --out {} {extra}",
                python(),
                script.display(),
                dir.display()
            );
            job.worker_command(&exec)
                .args(["--batch-size", "100", "--name", name])
                .stderr(Stdio::piped())
                .spawn()
                .expect("start worker")
        })
        .collect();
    let mut rows = 0;
    for mut worker in workers {
        let status = wait_exit(&mut worker, "worker");
        let mut stderr = String::new();
        std::io::Read::read_to_string(worker.stderr.as_mut().expect("piped stderr"), &mut stderr)
            .expect("read stderr");
        assert!(status.success(), "a worker failed:\n{stderr}");
        let (trained, batches) = done_line(&stderr);
        assert!(
            batches * 100 >= trained,
            "{trained} rows in {batches} batches of at most 100:\n{stderr}"
        );
        rows += trained;
    }
    clean_finish(&mut master);
    assert!(rows >= 6000, "every row trained: {rows} acknowledged");
}
