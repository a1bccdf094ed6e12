//! Output of Spark's RDD API for Hadoop (tests/fixtures/make_hadoop.py):
//! SequenceFiles and pickle files whose part files have no extension. They
//! are never read as lines of text: `ls` and `train` refuse them in one
//! line naming the file and what it holds.

use crate::common::*;

fn hadoop_dir(name: &str) -> String {
    let _ = fixture_json("hadoop/expected.json", "make_hadoop.py");
    fixtures_dir()
        .join("hadoop")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn sequence_and_pickle_files_are_never_read_as_text() {
    let cases = [
        ("seq", "a Hadoop SequenceFile (key org.apache.hadoop.io.IntWritable, value org.apache.hadoop.io.Text)"),
        ("seq_zlib", "a Hadoop SequenceFile"),
        ("pickle", "saveAsPickleFile"),
    ];
    for (name, holds) in cases {
        let dir = hadoop_dir(name);
        for command in [
            vec!["ls", dir.as_str()],
            vec!["train", dir.as_str(), "--model", "none", "--quiet"],
        ] {
            let run = sluice(&command);
            assert!(!run.status.success(), "{name}: {run}");
            assert_ne!(run.status.code(), Some(101), "{name}: a panic: {run}");
            let lines: Vec<&str> = run
                .stderr
                .lines()
                .filter(|l| !l.trim().is_empty())
                .collect();
            assert_eq!(lines.len(), 1, "{name}: one line: {run}");
            assert!(
                lines[0].contains(holds),
                "{name}: says what it holds: {run}"
            );
            assert!(
                lines[0].contains("part-0000"),
                "{name}: names the file: {run}"
            );
            assert!(
                run.stdout.is_empty() || !run.stdout.contains("rows"),
                "{name}: no rows: {run}"
            );
        }
    }
}
