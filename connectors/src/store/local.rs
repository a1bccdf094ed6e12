//! The local filesystem store (`file://` URLs and bare paths).

use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::path::Path;

use super::Location;
use crate::error::{Error, Result};

/// Opens a `file://` URL or a bare (absolute or relative) path.
pub(super) fn open(url: &str) -> Result<Location> {
    let raw = super::local_path_of(url).unwrap_or(url);
    if raw.is_empty() {
        return Err(Error::InvalidUrl {
            url: url.to_string(),
            reason: "empty path".to_string(),
        });
    }
    let absolute = std::path::absolute(raw).map_err(|e| Error::InvalidUrl {
        url: url.to_string(),
        reason: e.to_string(),
    })?;
    let normalized = normalize(&absolute);
    let root = Path::from_absolute_path(&normalized).map_err(|e| Error::InvalidUrl {
        url: url.to_string(),
        reason: e.to_string(),
    })?;
    let store = LocalFileSystem::new();
    Ok(Location::new(Arc::new(store), root, "file://"))
}

/// The filesystem path of a path of the local store (`None` when it has none).
pub(super) fn filesystem_path(path: &Path) -> Option<std::path::PathBuf> {
    LocalFileSystem::new().path_to_filesystem(path).ok()
}

/// An entry of a local directory that an object listing hides or misreports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Oddity {
    /// A symbolic link whose target does not exist: object listings skip it.
    DanglingLink {
        /// The link's name.
        name: String,
        /// Where it points.
        target: std::path::PathBuf,
    },
    /// Neither a regular file nor a directory (after following links): object
    /// listings show it as an empty file, and reading a FIFO would block.
    NotRegular {
        /// The entry's name.
        name: String,
        /// What it is (`a FIFO`, `a socket` ...).
        kind: &'static str,
    },
}

/// The odd entries of the directory `dir`; none when it does not exist.
pub fn oddities(dir: &std::path::Path) -> std::io::Result<Vec<Oddity>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let file_type = match std::fs::metadata(&path) {
            Ok(meta) => meta.file_type(),
            Err(_) if entry.file_type()?.is_symlink() => {
                let target = std::fs::read_link(&path).unwrap_or_default();
                found.push(Oddity::DanglingLink { name, target });
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue, // removed meanwhile
            Err(e) => return Err(e),
        };
        if !file_type.is_file() && !file_type.is_dir() {
            found.push(Oddity::NotRegular {
                name,
                kind: kind_of(&file_type),
            });
        }
    }
    found.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(found)
}

impl Oddity {
    /// The entry's name in its directory.
    pub fn name(&self) -> &str {
        match self {
            Oddity::DanglingLink { name, .. } | Oddity::NotRegular { name, .. } => name,
        }
    }
}

/// What a file that is neither regular nor a directory is.
fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "neither a file nor a directory"
    }
}

/// Removes `.` and `..` components without touching the filesystem.
fn normalize(path: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dangling_links_and_fifos_are_odd_and_files_and_dirs_are_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::write(d.join("part-0.parquet"), b"x").expect("file");
        std::fs::create_dir(d.join("sub")).expect("dir");
        std::os::unix::fs::symlink(d.join("part-0.parquet"), d.join("good-link")).expect("link");
        std::os::unix::fs::symlink(d.join("gone"), d.join("part-1.parquet")).expect("link");
        let made = std::process::Command::new("mkfifo")
            .arg(d.join("part-2.parquet"))
            .status()
            .expect("run mkfifo");
        assert!(made.success(), "mkfifo");
        let odd = oddities(d).expect("read_dir");
        assert_eq!(
            odd,
            vec![
                Oddity::DanglingLink {
                    name: "part-1.parquet".into(),
                    target: d.join("gone"),
                },
                Oddity::NotRegular {
                    name: "part-2.parquet".into(),
                    kind: "a FIFO",
                },
            ]
        );
        assert!(oddities(&d.join("missing")).expect("missing").is_empty());
    }

    #[test]
    fn bare_and_file_urls_resolve_to_the_same_root() {
        let a = open("/tmp/x/../y").expect("bare path");
        let b = open("file:///tmp/y").expect("file url");
        assert_eq!(a.root, b.root);
        assert_eq!(a.url(), "file:///tmp/y");
    }
}
