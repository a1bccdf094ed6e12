//! Splits: the pieces of a dataset that become tasks, and how files are cut into them.

use serde::{Deserialize, Serialize};

use crate::codec::Codec;
use crate::types::{Format, Unit};

/// Hadoop's `SPLIT_SLOP`: a file is cut while what remains exceeds 1.1 splits.
const SPLIT_SLOP: f64 = 1.1;

/// Which part of a file a split covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitRange {
    /// The whole file.
    Whole,
    /// These Parquet row groups.
    RowGroups(Vec<usize>),
    /// ORC stripes whose start offset lies in `[start, end)`.
    Stripes {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// Lines whose start lies in the byte range, by the rules of Hadoop's `LineRecordReader`.
    Bytes {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// Nothing: the file could not be planned (a corrupt footer, say) and the
    /// dataset was opened with `ignore_corrupt_files`. Reading it fails at once
    /// with `reason`, without touching the file, so its task fails naming it.
    Unreadable {
        /// What inspecting the file found.
        reason: String,
    },
}

/// One piece of a dataset: a plain, serializable value that travels to workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Split {
    /// The file's path inside the store.
    pub path: String,
    /// The file's size in bytes.
    pub size: u64,
    /// How to decode it.
    pub format: Format,
    /// Text compression (by final suffix).
    pub codec: Codec,
    /// The partition directory as on disk (`a=1/b=x`), empty when unpartitioned.
    pub partition_dir: String,
    /// Partition values, unescaped, `None` for null; aligned with the dataset's partition columns.
    pub partition_values: Vec<Option<String>>,
    /// The part of the file.
    pub range: SplitRange,
    /// Rows in the split when known from metadata (deleted rows not counted).
    pub rows: Option<u64>,
    /// Rows of a table's data file deleted by the table's log (deletion
    /// vectors, position deletes) that fall in this split: half-open ranges of
    /// row positions counted from the split's first row, sorted. They are
    /// never read, and offsets into the split count only the rows that are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<(u64, u64)>,
    /// What the file was when the dataset was planned, beside its size: a
    /// read that finds it otherwise fails (see [`FileStamp`]). Splits planned
    /// before stamps were recorded have none, and only their size is checked.
    #[serde(default, skip_serializing_if = "FileStamp::is_empty")]
    pub stamp: FileStamp,
    /// The source of a job that mixes several (`sluice train URL URL...`):
    /// its index, 0 for the first (and only) one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub source: u32,
    /// Only rows `start..end` of the range above (counted as offsets into
    /// it are: deleted rows left out): a split cut finer so that the tasks
    /// of several sources interleave. Offsets into the split count from
    /// `start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<(u64, u64)>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What a file was when it was planned, beyond its size: the store's entity
/// tag (S3, GCS and Azure ETags; the local store and HDFS make one of the
/// file's inode or modification time and length) and its modification time.
/// Every read of a split checks it: a file changed since planning is never
/// read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStamp {
    /// The entity tag the store listed, as it gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e_tag: Option<String>,
    /// The modification time the store listed, in nanoseconds since the
    /// epoch; none where the planner did not list the file (tables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_ns: Option<i64>,
}

impl FileStamp {
    /// The stamp of a listed object: its tag and modification time (a time
    /// of zero, what a table's planner gives the files its log names, is none).
    pub fn of(meta: &object_store::ObjectMeta) -> FileStamp {
        FileStamp {
            e_tag: meta.e_tag.clone(),
            modified_ns: (meta.last_modified.timestamp() != 0)
                .then(|| meta.last_modified.timestamp_nanos_opt())
                .flatten(),
        }
    }

    /// Whether nothing beyond the size was recorded.
    pub fn is_empty(&self) -> bool {
        self.e_tag.is_none() && self.modified_ns.is_none()
    }
}

impl Split {
    /// The file's path in the store (the stored string is already encoded).
    pub fn object_path(&self) -> object_store::path::Path {
        object_store::path::Path::parse(&self.path)
            .unwrap_or_else(|_| object_store::path::Path::from(self.path.as_str()))
    }
}

/// How a file is cut: its identity and what inspection found.
pub struct FileToSplit<'a> {
    /// Path in the store.
    pub path: &'a str,
    /// Size in bytes.
    pub size: u64,
    /// Format.
    pub format: Format,
    /// Codec.
    pub codec: Codec,
    /// Partition directory.
    pub partition_dir: &'a str,
    /// Partition values.
    pub partition_values: &'a [Option<String>],
    /// Row groups or stripes.
    pub units: &'a [Unit],
    /// Rows when known.
    pub rows: Option<u64>,
    /// What the file was when listed.
    pub stamp: &'a FileStamp,
}

/// Cuts one file into splits of about `split_size` bytes.
pub fn split_file(file: &FileToSplit<'_>, split_size: u64) -> Vec<Split> {
    let split_size = split_size.max(1);
    let make = |range: SplitRange, rows: Option<u64>| Split {
        path: file.path.to_string(),
        size: file.size,
        format: file.format,
        codec: file.codec,
        partition_dir: file.partition_dir.to_string(),
        partition_values: file.partition_values.to_vec(),
        range,
        rows,
        deleted: Vec::new(),
        stamp: file.stamp.clone(),
        source: 0,
        window: None,
    };
    match file.format {
        Format::Parquet | Format::Orc => by_units(file, split_size)
            .into_iter()
            .map(|(bucket, units)| {
                let rows = units.iter().map(|u| u.rows).sum();
                let range = if file.format == Format::Parquet {
                    SplitRange::RowGroups(units.iter().map(|u| u.index).collect())
                } else {
                    SplitRange::Stripes {
                        start: bucket * split_size,
                        end: (bucket + 1) * split_size,
                    }
                };
                make(range, Some(rows))
            })
            .collect(),
        // Uncompressed and bzip2 text, SequenceFiles and RCFiles (at their
        // sync markers): byte ranges, as Hadoop cuts them.
        f if f.is_line_based() && file.codec.is_splittable()
            || matches!(f, Format::Sequencefile | Format::Rcfile) =>
        {
            byte_ranges(file.size, split_size)
                .into_iter()
                .map(|(start, end)| {
                    let rows = (start == 0 && end == file.size)
                        .then_some(file.rows)
                        .flatten();
                    make(SplitRange::Bytes { start, end }, rows)
                })
                .collect()
        }
        _ => vec![make(SplitRange::Whole, file.rows)],
    }
}

/// Groups units by the split-size bucket their anchor falls in (half-open intervals).
fn by_units(file: &FileToSplit<'_>, split_size: u64) -> Vec<(u64, Vec<Unit>)> {
    let mut groups: Vec<(u64, Vec<Unit>)> = Vec::new();
    for unit in file.units {
        let bucket = unit.anchor / split_size;
        match groups.last_mut() {
            Some((b, units)) if *b == bucket => units.push(*unit),
            _ => groups.push((bucket, vec![*unit])),
        }
    }
    groups
}

/// Hadoop `FileInputFormat.getSplits` for one file.
pub fn byte_ranges(size: u64, split_size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut remaining = size;
    while remaining as f64 / split_size as f64 > SPLIT_SLOP {
        let start = size - remaining;
        out.push((start, start + split_size));
        remaining -= split_size;
    }
    if remaining > 0 || size == 0 {
        out.push((size - remaining, size));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    static NO_STAMP: FileStamp = FileStamp {
        e_tag: None,
        modified_ns: None,
    };

    #[test]
    fn a_split_journaled_before_stamps_reads_with_none() {
        let old = r#"{"path":"d/part-0.csv","size":7,"format":"csv","codec":"none",
            "partition_dir":"","partition_values":[],"range":"whole","rows":null}"#;
        let split: Split = serde_json::from_str(old).expect("an old split reads");
        assert!(split.stamp.is_empty());
        let stamped = Split {
            stamp: FileStamp {
                e_tag: Some("\"abc\"".into()),
                modified_ns: Some(5),
            },
            ..split
        };
        let text = serde_json::to_string(&stamped).expect("json");
        let back: Split = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back, stamped);
    }

    #[test]
    fn hadoop_split_slop() {
        assert_eq!(byte_ranges(100, 100), vec![(0, 100)]);
        assert_eq!(byte_ranges(109, 100), vec![(0, 109)]);
        assert_eq!(byte_ranges(111, 100), vec![(0, 100), (100, 111)]);
        assert_eq!(
            byte_ranges(250, 100),
            vec![(0, 100), (100, 200), (200, 250)]
        );
        assert_eq!(byte_ranges(205, 100), vec![(0, 100), (100, 205)]);
    }

    fn text_file(codec: Codec, size: u64) -> FileToSplit<'static> {
        FileToSplit {
            path: "part-00000",
            size,
            format: Format::Text,
            codec,
            partition_dir: "",
            partition_values: &[],
            units: &[],
            rows: Some(7),
            stamp: &NO_STAMP,
        }
    }

    #[test]
    fn bzip2_text_is_cut_like_uncompressed_text() {
        for codec in [Codec::None, Codec::Bzip2] {
            let ranges: Vec<_> = split_file(&text_file(codec, 205), 100)
                .into_iter()
                .map(|s| (s.range, s.rows))
                .collect();
            let bytes = |start, end| SplitRange::Bytes { start, end };
            assert_eq!(
                ranges,
                [(bytes(0, 100), None), (bytes(100, 205), None)],
                "{codec}"
            );
        }
    }

    #[test]
    fn other_codecs_are_read_whole() {
        for codec in [
            Codec::Gzip,
            Codec::Deflate,
            Codec::Zstd,
            Codec::Snappy,
            Codec::Lz4,
        ] {
            let splits = split_file(&text_file(codec, 250), 100);
            assert_eq!(splits.len(), 1, "{codec}");
            assert_eq!(splits[0].range, SplitRange::Whole, "{codec}");
            assert_eq!(splits[0].rows, Some(7), "{codec}");
        }
    }

    #[test]
    fn row_groups_go_by_midpoint() {
        let units: Vec<Unit> = (0..5)
            .map(|i| Unit {
                index: i,
                anchor: i as u64 * 40 + 20,
                rows: 10,
            })
            .collect();
        let f = FileToSplit {
            path: "p",
            size: 200,
            format: Format::Parquet,
            codec: Codec::None,
            partition_dir: "",
            partition_values: &[],
            units: &units,
            rows: Some(50),
            stamp: &NO_STAMP,
        };
        let splits = split_file(&f, 100);
        let groups: Vec<_> = splits.iter().map(|s| s.range.clone()).collect();
        assert_eq!(
            groups,
            vec![
                SplitRange::RowGroups(vec![0, 1]),
                SplitRange::RowGroups(vec![2, 3, 4])
            ]
        );
        assert_eq!(splits.iter().map(|s| s.rows.unwrap_or(0)).sum::<u64>(), 50);
    }
}
