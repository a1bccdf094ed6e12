//! The `_spark_metadata` log of a file sink as names and bytes: which batch
//! files hold the state after a batch, and what each line of one says. No I/O.
//!
//! Spark writes one file per micro-batch, named by the batch id, and every few
//! batches (`spark.sql.streaming.fileSink.log.compactInterval`, 10 by default)
//! a `<id>.compact` file holding everything committed up to that batch. Each
//! file is a `v1` header line, then one JSON `SinkFileStatus` per line.

use serde::Deserialize;

/// The suffix of a compaction file.
const COMPACT_SUFFIX: &str = ".compact";

/// The newest log version this reader understands.
const VERSION: u32 = 1;

/// The name of one batch file of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct BatchFile {
    /// The batch id.
    pub id: u64,
    /// `<id>.compact`: everything committed up to this batch, not only by it.
    pub compact: bool,
}

impl BatchFile {
    /// Reads a file name of the log directory; other names (checksums,
    /// temporary files) are not batch files.
    pub fn parse(name: &str) -> Option<BatchFile> {
        let (digits, compact) = match name.strip_suffix(COMPACT_SUFFIX) {
            Some(digits) => (digits, true),
            None => (name, false),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(BatchFile {
            id: digits.parse().ok()?,
            compact,
        })
    }

    /// The file's name in the log directory.
    pub fn name(&self) -> String {
        match self.compact {
            true => format!("{}{COMPACT_SUFFIX}", self.id),
            false => self.id.to_string(),
        }
    }
}

/// The newest batch among the log's files.
pub(crate) fn newest(found: &[BatchFile]) -> Option<u64> {
    found.iter().map(|f| f.id).max()
}

/// The files that hold the state after batch `upto`, oldest first: the newest
/// compaction at or below it, then the file of every later batch up to it (or
/// every batch from 0 when there is no compaction). A batch with no file is
/// returned as the error.
pub(crate) fn files_for(found: &[BatchFile], upto: u64) -> Result<Vec<BatchFile>, BatchFile> {
    let compact = found
        .iter()
        .filter(|f| f.compact && f.id <= upto)
        .map(|f| f.id)
        .max();
    let mut files: Vec<BatchFile> = compact
        .map(|id| BatchFile { id, compact: true })
        .into_iter()
        .collect();
    let first = compact.map_or(0, |id| id + 1);
    for id in first..=upto {
        let delta = BatchFile { id, compact: false };
        if !found.contains(&delta) {
            return Err(delta);
        }
        files.push(delta);
    }
    Ok(files)
}

/// What a line says happened to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Committed by the batch.
    Add,
    /// Removed from the sink.
    Delete,
}

/// One line of a batch file: a `SinkFileStatus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The 1-based line number in its file.
    pub line: usize,
    /// The file, as the log records it (an absolute, URL-encoded URI).
    pub path: String,
    /// Its size in bytes when it was committed.
    pub size: u64,
    /// Whether it is a directory (Spark's reader skips those).
    pub is_dir: bool,
    /// Added or deleted.
    pub action: Action,
}

/// A line that is not what Spark writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadLine {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// The fields of a `SinkFileStatus` that decide what is read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEntry {
    path: String,
    size: u64,
    is_dir: bool,
    action: String,
}

/// Reads one batch file: the `v1` header, then one entry per line.
pub(crate) fn parse(bytes: &[u8]) -> Result<Vec<Entry>, BadLine> {
    let text = std::str::from_utf8(bytes).map_err(|e| BadLine {
        line: 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count(),
        reason: "not UTF-8 text".to_string(),
    })?;
    let mut lines = text.lines();
    let header = lines.next().ok_or_else(|| BadLine {
        line: 1,
        reason: format!("empty file: no `v{VERSION}` header"),
    })?;
    check_header(header).map_err(|reason| BadLine { line: 1, reason })?;
    lines
        .enumerate()
        .map(|(i, line)| {
            parse_line(i + 2, line).map_err(|reason| BadLine {
                line: i + 2,
                reason,
            })
        })
        .collect()
}

/// Checks the header line: `v1` (a newer version is refused, as Spark does).
fn check_header(header: &str) -> Result<(), String> {
    let version = header
        .strip_prefix('v')
        .and_then(|v| v.trim_end().parse::<u32>().ok())
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("bad header `{}`: expected `v{VERSION}`", clip(header)))?;
    if version > VERSION {
        return Err(format!(
            "log version v{version} is newer than this reader understands (v{VERSION})"
        ));
    }
    Ok(())
}

/// Reads the JSON entry on line `number`.
fn parse_line(number: usize, line: &str) -> Result<Entry, String> {
    let raw: RawEntry = serde_json::from_str(line).map_err(|e| {
        // The parser's own position is within this line: keep its column only.
        let text = e.to_string();
        let what = text
            .rsplit_once(" at line ")
            .map_or(text.as_str(), |(m, _)| m);
        format!("bad JSON `{}` (column {}): {what}", clip(line), e.column())
    })?;
    let action = match raw.action.as_str() {
        "add" => Action::Add,
        "delete" => Action::Delete,
        other => {
            return Err(format!(
                "unknown action `{}` (expected add or delete)",
                clip(other)
            ))
        }
    };
    Ok(Entry {
        line: number,
        path: raw.path,
        size: raw.size,
        is_dir: raw.is_dir,
        action,
    })
}

/// A line cut short for an error message.
fn clip(s: &str) -> String {
    const MAX: usize = 120;
    match s.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(id: u64, compact: bool) -> BatchFile {
        BatchFile { id, compact }
    }

    #[test]
    fn batch_file_names() {
        assert_eq!(BatchFile::parse("7"), Some(batch(7, false)));
        assert_eq!(BatchFile::parse("29.compact"), Some(batch(29, true)));
        for other in [
            ".7.crc",
            "7.tmp",
            ".compact",
            "",
            "-1",
            "x.compact",
            "7.compact.crc",
        ] {
            assert_eq!(BatchFile::parse(other), None, "{other}");
        }
        assert_eq!(batch(29, true).name(), "29.compact");
        assert_eq!(batch(3, false).name(), "3");
    }

    #[test]
    fn the_newest_compaction_then_every_later_batch() {
        let found = [
            batch(0, false),
            batch(1, false),
            batch(2, true),
            batch(3, false),
            batch(4, false),
            batch(5, true),
            batch(6, false),
        ];
        assert_eq!(
            files_for(&found, 6),
            Ok(vec![batch(5, true), batch(6, false)])
        );
        assert_eq!(files_for(&found, 5), Ok(vec![batch(5, true)]));
        assert_eq!(
            files_for(&found, 4),
            Ok(vec![batch(2, true), batch(3, false), batch(4, false)])
        );
        assert_eq!(
            files_for(&found, 1),
            Ok(vec![batch(0, false), batch(1, false)])
        );
        assert_eq!(newest(&found), Some(6));
    }

    #[test]
    fn a_missing_batch_is_named() {
        let found = [batch(2, true), batch(4, false)];
        assert_eq!(files_for(&found, 4), Err(batch(3, false)));
        // Batches before the newest compaction may be gone (the query deletes them).
        assert_eq!(files_for(&found, 2), Ok(vec![batch(2, true)]));
        // No compaction: every batch from 0 is needed.
        assert_eq!(files_for(&[batch(1, false)], 1), Err(batch(0, false)));
        assert_eq!(
            files_for(&[batch(2, true), batch(3, false)], 9),
            Err(batch(4, false))
        );
    }

    const ADD: &str = r#"{"path":"file:///d/part-0.parquet","size":10,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":33554432,"action":"add"}"#;

    #[test]
    fn header_then_one_entry_per_line() {
        let text = format!("v1\n{ADD}\n{}", ADD.replace("add", "delete"));
        let entries = parse(text.as_bytes()).expect("parses");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].line, 2);
        assert_eq!(entries[0].path, "file:///d/part-0.parquet");
        assert_eq!(entries[0].size, 10);
        assert_eq!(entries[0].action, Action::Add);
        assert_eq!(entries[1].line, 3);
        assert_eq!(entries[1].action, Action::Delete);
        assert_eq!(
            parse(b"v1"),
            Ok(Vec::new()),
            "a batch that committed nothing"
        );
        assert_eq!(
            parse(format!("v1\n{ADD}\n").as_bytes()).map(|e| e.len()),
            Ok(1)
        );
    }

    #[test]
    fn bad_lines_are_numbered() {
        let bad = |text: &str| parse(text.as_bytes()).expect_err(text);
        assert_eq!(bad("").line, 1);
        let header = bad(&format!("1\n{ADD}"));
        assert_eq!(header.line, 1);
        assert!(
            header.reason.contains("bad header `1`"),
            "{}",
            header.reason
        );
        let newer = bad(&format!("v2\n{ADD}"));
        assert!(newer.reason.contains("v2 is newer"), "{}", newer.reason);
        let json = bad(&format!("v1\n{ADD}\n{{\"path\": \"file:///d/x\"\n{ADD}"));
        assert_eq!(json.line, 3);
        assert!(json.reason.starts_with("bad JSON"), "{}", json.reason);
        let missing = bad(&format!("v1\n{}", ADD.replace(r#""size":10,"#, "")));
        assert_eq!(missing.line, 2);
        assert!(missing.reason.contains("size"), "{}", missing.reason);
        let action = bad(&format!("v1\n{ADD}\n{ADD}\n{}", ADD.replace("add", "move")));
        assert_eq!(action.line, 4);
        assert!(action.reason.contains("`move`"), "{}", action.reason);
        assert_eq!(bad(&format!("v1\n\n{ADD}")).line, 2, "an empty line");
        assert_eq!(parse(b"v1\n\xff\xfe").expect_err("binary").line, 2);
    }
}
