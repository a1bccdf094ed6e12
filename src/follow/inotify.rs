//! Seeing a local directory change at once (Linux inotify): a followed job
//! or `--wait-success` on a local directory looks again as soon as a file
//! appears, is renamed into place or finishes being written, rather than at
//! the next poll. Every directory under the root is watched (new ones as
//! they appear), up to [`MAX_WATCHES`]; where inotify is unavailable or the
//! limit is reached, the poll still sees everything, only later.
//! `SLUICE_INOTIFY=off` turns the watch off (polling only): for a directory
//! that other machines write over NFS, whose changes inotify never sees.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use connectors::Location;
use tokio::io::unix::AsyncFd;

use crate::sys::inotify;

/// The most directories one watch follows.
pub const MAX_WATCHES: usize = 4096;

/// An inotify watch of a local directory tree.
pub struct LocalWatch {
    fd: AsyncFd<OwnedFd>,
    root: PathBuf,
    /// Watch descriptor -> directory.
    dirs: HashMap<i32, PathBuf>,
    /// The root did not exist: its nearest existing parent is watched.
    root_missing: bool,
}

impl LocalWatch {
    /// A watch of `location`'s root when it is a local directory (or will
    /// be one: a missing root's nearest existing parent is watched until it
    /// appears); `None` for other stores or where inotify is unavailable.
    pub fn new(location: &Location) -> Option<LocalWatch> {
        let root = location.local_dir()?;
        LocalWatch::of(&root)
    }

    /// A watch of the local directory `root` (see [`LocalWatch::new`]).
    pub fn of(root: &Path) -> Option<LocalWatch> {
        if std::env::var("SLUICE_INOTIFY").is_ok_and(|v| v.eq_ignore_ascii_case("off")) {
            return None;
        }
        let owned = match inotify::new_instance() {
            Ok(owned) => owned,
            Err(error) => {
                tracing::debug!(%error, "no inotify: polling only");
                return None;
            }
        };
        // SAFETY: `owned` is an open descriptor that the AsyncFd owns and
        // keeps open for as long as it lives; its `as_raw_fd` is that descriptor.
        let fd = unsafe { AsyncFd::register(owned) }.ok()?;
        let mut watch = LocalWatch {
            fd,
            root: root.to_path_buf(),
            dirs: HashMap::new(),
            root_missing: false,
        };
        watch.arm();
        Some(watch)
    }

    /// Watches the root and every directory under it (or, while the root is
    /// missing, its nearest existing parent).
    fn arm(&mut self) {
        if self.root.is_dir() {
            self.root_missing = false;
            let root = self.root.clone();
            self.add_tree(&root);
            return;
        }
        self.root_missing = true;
        let mut parent = self.root.parent().map(Path::to_path_buf);
        while let Some(dir) = parent {
            if dir.is_dir() {
                self.add(&dir);
                return;
            }
            parent = dir.parent().map(Path::to_path_buf);
        }
    }

    fn add_tree(&mut self, dir: &Path) {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(dir) = stack.pop() {
            if self.dirs.len() >= MAX_WATCHES {
                return;
            }
            self.add(&dir);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(entry.path());
                }
            }
        }
    }

    fn add(&mut self, dir: &Path) {
        if self.dirs.values().any(|d| d == dir) {
            return;
        }
        if let Ok(wd) = inotify::watch_dir(self.fd.get_ref(), dir) {
            self.dirs.insert(wd, dir.to_path_buf());
        }
    }

    /// Returns when something in the tree changed, or after `timeout`.
    pub async fn changed(&mut self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.next_change()).await;
    }

    async fn next_change(&mut self) {
        loop {
            let Ok(mut guard) = self.fd.readable().await else {
                // The descriptor failed: fall back to the timeout.
                return std::future::pending().await;
            };
            let mut buf = [0u8; 8192];
            let read = guard.try_io(|fd| inotify::read_events(fd.get_ref(), &mut buf));
            let n = match read {
                Ok(Ok(n)) => n,
                Ok(Err(_)) | Err(_) => continue,
            };
            let new_dirs = self.parse(&buf[..n]);
            if self.root_missing && self.root.is_dir() {
                self.arm();
                return;
            }
            for dir in new_dirs {
                self.add_tree(&dir);
            }
            if n > 0 {
                return;
            }
        }
    }

    /// The directories created or moved in that the events name.
    fn parse(&self, buf: &[u8]) -> Vec<PathBuf> {
        inotify::events(buf)
            .filter(|event| event.dir_made)
            .filter_map(|event| Some(self.dirs.get(&event.watch)?.join(event.name)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_in_a_new_subdirectory_wakes_the_watch_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("out");
        let mut watch = LocalWatch::of(&root).expect("inotify");
        // The root appears.
        std::fs::create_dir(&root).expect("mkdir");
        let t = std::time::Instant::now();
        watch.changed(Duration::from_secs(10)).await;
        assert!(t.elapsed() < Duration::from_secs(5), "root creation seen");
        std::fs::create_dir(root.join("dt=1")).expect("mkdir");
        watch.changed(Duration::from_secs(10)).await;
        let t = std::time::Instant::now();
        std::fs::write(root.join("dt=1").join("_SUCCESS"), b"").expect("write");
        watch.changed(Duration::from_secs(10)).await;
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "a marker in a new partition seen"
        );
        // The marker's write makes more than one event (created, then closed),
        // and the last may come after the wait above returned: let them pass.
        for _ in 0..20 {
            let t = std::time::Instant::now();
            watch.changed(Duration::from_millis(50)).await;
            if t.elapsed() >= Duration::from_millis(40) {
                break;
            }
        }
        // Nothing changes: the timeout ends the wait.
        let t = std::time::Instant::now();
        watch.changed(Duration::from_millis(200)).await;
        assert!(t.elapsed() >= Duration::from_millis(150));
    }
}
