//! Output of Spark's RDD API for Hadoop (tests/fixtures/make_hadoop.py):
//! SequenceFiles and pickle files whose part files have no extension. They
//! are never read as lines of text: a SequenceFile is read as one (its records
//! are compared with `sc.sequenceFile` in tests/it/sequencefile.rs), and a
//! pickle file (a SequenceFile of pickled batches) is refused by `ls` and
//! `train` in one line naming the file and what wrote it.

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
fn sequence_files_are_read_as_sequence_files_not_text() {
    let rows = fixture_json("hadoop/expected.json", "make_hadoop.py")["rows"]
        .as_u64()
        .expect("rows");
    for name in ["seq", "seq_zlib"] {
        let dir = hadoop_dir(name);
        let listing = sluice(["ls", "--json", dir.as_str()]).success().json();
        assert_eq!(listing["format"], "sequencefile", "{name}: {listing}");
        let columns: Vec<&str> = listing["schema"]
            .as_array()
            .expect("schema")
            .iter()
            .map(|c| c["name"].as_str().expect("name"))
            .collect();
        assert_eq!(columns, ["key", "value"], "{name}: {listing}");
        let run = sluice(["train", dir.as_str(), "--model", "none"]).success();
        assert!(
            run.stderr.contains(&format!("trained {rows} rows")),
            "{name}: every record: {run}"
        );
    }
}

#[test]
fn pickle_files_are_refused_in_one_line_naming_save_as_pickle_file() {
    let dir = hadoop_dir("pickle");
    for command in [
        vec!["ls", dir.as_str()],
        vec!["train", dir.as_str(), "--model", "none", "--quiet"],
    ] {
        let run = sluice(&command);
        assert!(!run.status.success(), "{run}");
        assert_ne!(run.status.code(), Some(101), "a panic: {run}");
        let lines: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert_eq!(lines.len(), 1, "one line: {run}");
        assert!(
            lines[0].contains("saveAsPickleFile"),
            "says what wrote it: {run}"
        );
        assert!(lines[0].contains("part-0000"), "names the file: {run}");
        assert!(
            run.stdout.is_empty() || !run.stdout.contains("rows"),
            "no rows: {run}"
        );
    }
}
