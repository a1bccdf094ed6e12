//! The local filesystem store (`file://` URLs and bare paths).

use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::path::Path;

use super::Location;
use crate::error::{Error, Result};

/// Opens a `file://` URL or a bare (absolute or relative) path.
pub(super) fn open(url: &str) -> Result<Location> {
    let raw = url.strip_prefix("file://").unwrap_or(url);
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
    fn bare_and_file_urls_resolve_to_the_same_root() {
        let a = open("/tmp/x/../y").expect("bare path");
        let b = open("file:///tmp/y").expect("file url");
        assert_eq!(a.root, b.root);
        assert_eq!(a.url(), "file:///tmp/y");
    }
}
