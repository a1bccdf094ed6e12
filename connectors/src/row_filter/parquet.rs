//! Parquet's statistics for [`super::prune`]: each row group's column chunk
//! statistics, and each page's from the page index where the file has one.

use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{Array, UInt64Array};
use arrow::datatypes::Schema;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use parquet::file::metadata::ParquetMetaData;

use super::prune::{may_match, ColumnStats, Stats};
use super::Pred;

/// Counts of what filters skipped in this process, for the summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FilterCounts {
    /// Row groups read by filtered reads.
    pub row_groups_read: u64,
    /// Row groups skipped on their statistics (when the dataset was planned,
    /// or when read).
    pub row_groups_pruned: u64,
    /// Files none of whose row groups may hold a kept row: never read.
    pub files_pruned: u64,
    /// Row groups statistics kept that their bloom filters ruled out.
    pub row_groups_pruned_bloom: u64,
    /// Rows of kept row groups skipped on the page index.
    pub page_rows_pruned: u64,
    /// ORC stripes read by filtered reads.
    pub stripes_read: u64,
    /// ORC stripes skipped on their statistics: never fetched.
    pub stripes_pruned: u64,
    /// Partition directories never listed: their values rule out every row.
    pub partition_dirs_pruned: u64,
    /// Rows decoded and dropped by the row-level filter.
    pub rows_filtered: u64,
    /// Rows kept.
    pub rows_kept: u64,
}

static GROUPS_READ: AtomicU64 = AtomicU64::new(0);
static GROUPS_PRUNED: AtomicU64 = AtomicU64::new(0);
static PAGE_ROWS_PRUNED: AtomicU64 = AtomicU64::new(0);
static GROUPS_PRUNED_BLOOM: AtomicU64 = AtomicU64::new(0);
pub(crate) static ROWS_FILTERED: AtomicU64 = AtomicU64::new(0);
pub(crate) static ROWS_KEPT: AtomicU64 = AtomicU64::new(0);

/// What filters skipped in this process so far.
pub fn filter_counts() -> FilterCounts {
    FilterCounts {
        row_groups_read: GROUPS_READ.load(Ordering::Relaxed),
        row_groups_pruned: GROUPS_PRUNED.load(Ordering::Relaxed),
        files_pruned: FILES_PRUNED.load(Ordering::Relaxed),
        page_rows_pruned: PAGE_ROWS_PRUNED.load(Ordering::Relaxed),
        row_groups_pruned_bloom: GROUPS_PRUNED_BLOOM.load(Ordering::Relaxed),
        partition_dirs_pruned: DIRS_PRUNED.load(Ordering::Relaxed),
        stripes_read: super::orc::STRIPES_READ.load(Ordering::Relaxed),
        stripes_pruned: super::orc::STRIPES_PRUNED.load(Ordering::Relaxed),
        rows_filtered: ROWS_FILTERED.load(Ordering::Relaxed),
        rows_kept: ROWS_KEPT.load(Ordering::Relaxed),
    }
}

/// The statistics of a file's columns, named as the dataset names them.
pub(crate) struct FileStats<'a> {
    pub meta: &'a ParquetMetaData,
    /// The file's Arrow schema.
    pub schema: &'a Schema,
    /// The dataset's name of each of the file's columns.
    pub names: &'a [String],
}

impl FileStats<'_> {
    fn converter(&self, column: &str) -> Option<StatisticsConverter<'_>> {
        let i = self.names.iter().position(|n| n == column)?;
        let name = self.schema.fields().get(i)?.name();
        StatisticsConverter::try_new(name, self.schema, self.meta.file_metadata().schema_descr())
            .ok()
    }

    /// The index of `column`'s leaf in the file's Parquet schema.
    pub(crate) fn leaf_index(&self, column: &str) -> Option<usize> {
        self.converter(column)?.parquet_column_index()
    }

    /// The Arrow type of `column` in the file.
    pub(crate) fn column_type(&self, column: &str) -> Option<&arrow::datatypes::DataType> {
        let i = self.names.iter().position(|n| n == column)?;
        Some(self.schema.fields().get(i)?.data_type())
    }

    /// Which of `groups` may hold a kept row.
    pub(crate) fn groups_kept(&self, pred: &Pred, groups: &[usize]) -> Vec<bool> {
        may_match(pred, &Groups { file: self, groups })
    }

    /// The rows of row group `group` the page index says may hold a kept
    /// row, from each conjunct of one column; `None` when it says nothing.
    pub(crate) fn pages_kept(&self, pred: &Pred, group: usize) -> Option<RowSelection> {
        let mut out: Option<RowSelection> = None;
        for conjunct in pred.conjuncts() {
            let mut columns = Vec::new();
            conjunct.columns(&mut columns);
            let [column] = columns.as_slice() else {
                continue;
            };
            let Some(pages) = self.pages(column, group) else {
                continue;
            };
            let kept = may_match(conjunct, &pages);
            let selectors: Vec<RowSelector> = kept
                .iter()
                .zip(pages.rows.values().iter())
                .map(|(&k, &rows)| {
                    if k {
                        RowSelector::select(rows as usize)
                    } else {
                        RowSelector::skip(rows as usize)
                    }
                })
                .collect();
            let selection = RowSelection::from(selectors);
            out = Some(match out {
                Some(before) => before.intersection(&selection),
                None => selection,
            });
        }
        out
    }

    fn pages(&self, column: &str, group: usize) -> Option<Pages> {
        let conv = self.converter(column)?;
        let index = self.meta.column_index()?;
        let offsets = self.meta.offset_index()?;
        let groups = [group];
        let rows = conv
            .data_page_row_counts(offsets, self.meta.row_groups(), &groups)
            .ok()??;
        let mins = conv.data_page_mins(index, offsets, &groups).ok()?;
        let maxes = conv.data_page_maxes(index, offsets, &groups).ok()?;
        let nulls = conv.data_page_null_counts(index, offsets, &groups).ok();
        (mins.len() == rows.len() && rows.null_count() == 0).then_some(Pages {
            stats: ColumnStats {
                mins,
                maxes,
                null_counts: nulls,
                rows: Some(rows.clone()),
                nan_free: false,
            },
            rows,
            column: column.to_string(),
        })
    }
}

struct Groups<'a, 'b> {
    file: &'a FileStats<'b>,
    groups: &'a [usize],
}

impl Stats for Groups<'_, '_> {
    fn len(&self) -> usize {
        self.groups.len()
    }

    fn column(&self, column: &str) -> Option<ColumnStats> {
        let conv = self.file.converter(column)?;
        let metas = || {
            self.groups
                .iter()
                .filter_map(|&g| self.file.meta.row_groups().get(g))
        };
        let mins = conv.row_group_mins(metas()).ok()?;
        let maxes = conv.row_group_maxes(metas()).ok()?;
        (mins.len() == self.groups.len()).then(|| ColumnStats {
            mins,
            maxes,
            null_counts: conv.row_group_null_counts(metas()).ok(),
            rows: conv.row_group_row_counts(metas()).ok().flatten(),
            nan_free: false,
        })
    }
}

struct Pages {
    stats: ColumnStats,
    rows: UInt64Array,
    column: String,
}

impl Stats for Pages {
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn column(&self, column: &str) -> Option<ColumnStats> {
        (column == self.column).then(|| ColumnStats {
            mins: self.stats.mins.clone(),
            maxes: self.stats.maxes.clone(),
            null_counts: self.stats.null_counts.clone(),
            rows: self.stats.rows.clone(),
            nan_free: false,
        })
    }
}

static FILES_PRUNED: AtomicU64 = AtomicU64::new(0);
static DIRS_PRUNED: AtomicU64 = AtomicU64::new(0);

/// Counts partition directories left unlisted.
pub(crate) fn count_dirs_pruned(dirs: usize) {
    DIRS_PRUNED.fetch_add(dirs as u64, Ordering::Relaxed);
}

/// Counts what planning left out: `groups` row groups of a file, and the
/// file when none of it is left.
pub(crate) fn count_planned(groups: usize, whole_file: bool) {
    GROUPS_PRUNED.fetch_add(groups as u64, Ordering::Relaxed);
    if whole_file && groups > 0 {
        FILES_PRUNED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts a filtered read's row groups: `read` kept, `pruned` skipped on
/// statistics, `bloom` on bloom filters, and `page_rows` rows of kept ones
/// skipped on the page index.
pub(crate) fn count_pruned(read: u64, pruned: u64, bloom: u64, page_rows: u64) {
    GROUPS_READ.fetch_add(read, Ordering::Relaxed);
    GROUPS_PRUNED.fetch_add(pruned, Ordering::Relaxed);
    GROUPS_PRUNED_BLOOM.fetch_add(bloom, Ordering::Relaxed);
    PAGE_ROWS_PRUNED.fetch_add(page_rows, Ordering::Relaxed);
}
