//! HDFS files kept open between range reads.
//!
//! Reading a range through `hdfs-native-object-store` costs three round trips
//! one after the other: the file's status, its block locations (both from the
//! namenode), then the datanode. A Parquet row group is read in several
//! ranges, and a file's row groups by several tasks, so on a cluster a few
//! milliseconds away most of a read's time went to asking the namenode the
//! same thing again. Here the block locations of a file are kept once asked
//! for, together with the status they went with. A later range asks the
//! namenode for the status (the file's size and modification time, which any
//! rewrite or append changes) while its first bytes come from the datanode,
//! and keeps them only when the status still matches: one round trip, as on
//! an object store. The first range of a file asks for the status and the
//! locations side by side, then reads.
//!
//! What is kept is dropped when the status no longer matches, and when a read
//! through it fails (a datanode gone, a block moved, a block access token
//! expired): the next read asks the namenode again, and a range whose first
//! bytes failed that way is asked for again at once. At most [`MAX_OPEN`]
//! files are kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use hdfs_native::file::FileReader;
use object_store::ObjectMeta;

/// How many files' block locations are kept; past that, all are dropped.
const MAX_OPEN: usize = 4096;

/// Files whose block locations are known, by absolute path.
#[derive(Debug, Default)]
pub(super) struct OpenFiles {
    files: Mutex<HashMap<String, Kept>>,
}

/// A kept reader and the status it went with.
#[derive(Clone)]
pub(super) struct Kept {
    /// The file's size then.
    pub size: u64,
    /// Its modification time then.
    pub modified: DateTime<Utc>,
    /// The reader, with the file's block locations.
    pub reader: Arc<FileReader>,
}

impl Kept {
    /// Whether the file still has the status `meta` says.
    pub fn matches(&self, meta: &ObjectMeta) -> bool {
        self.size == meta.size && self.modified == meta.last_modified
    }
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("size", &self.size)
            .field("modified", &self.modified)
            .finish_non_exhaustive()
    }
}

impl OpenFiles {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Kept>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The reader kept for `path`, and the status it went with.
    pub fn kept(&self, path: &str) -> Option<Kept> {
        self.lock().get(path).cloned()
    }

    /// Keeps `reader` for `path`, opened with the status `meta` (the caller
    /// has checked that the two agree on the file's size).
    pub fn keep(&self, path: &str, meta: &ObjectMeta, reader: Arc<FileReader>) {
        let mut files = self.lock();
        if files.len() >= MAX_OPEN {
            files.clear();
        }
        let kept = Kept {
            size: meta.size,
            modified: meta.last_modified,
            reader,
        };
        files.insert(path.to_string(), kept);
    }

    /// Drops what is kept for `path` (a read through it failed).
    pub fn forget(&self, path: &str) {
        self.lock().remove(path);
    }
}
