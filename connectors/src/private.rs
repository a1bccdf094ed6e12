//! Files and directories only their owner may read: the job's state (its
//! journal holds worker secrets) and the cache (`--cache`: rows fetched from
//! stores that need credentials). Each is created with its mode, never made
//! private after, and one an older build left readable by others is made
//! private when opened.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use tracing::warn;

/// The mode of files only their owner may read.
pub const PRIVATE_FILE: u32 = 0o600;
/// The mode of directories only their owner may enter.
pub const PRIVATE_DIR: u32 = 0o700;

/// Creates the directory `dir` (and any parent missing) with
/// [`PRIVATE_DIR`], or makes the existing one private ([`tighten_path`];
/// `what` names it in the warning when it cannot be). Whether it was created.
pub fn create_dir(dir: &Path, what: &str) -> io::Result<bool> {
    if dir.is_dir() {
        tighten_path(dir, what);
        return Ok(false);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR)
        .create(dir)?;
    Ok(true)
}

/// `options` creating files with [`PRIVATE_FILE`] (less the umask).
pub fn file_options(options: &mut OpenOptions) -> &mut OpenOptions {
    options.mode(PRIVATE_FILE)
}

/// Makes the open file `file` (at `path`, `what` naming it in the warning
/// when it cannot be) private, if an older build left it readable by others:
/// its group's and others' permissions are taken away.
pub fn tighten_file(file: &File, path: &Path, what: &str) {
    let Ok(meta) = file.metadata() else {
        return;
    };
    let Some(private) = tightened(meta.permissions().mode()) else {
        return;
    };
    if let Err(e) = file.set_permissions(std::fs::Permissions::from_mode(private)) {
        warn!(path = %path.display(), error = %e, "cannot make the {what} private to its user");
    }
}

/// Makes `path` (a file or directory; a link is left alone) private, as
/// [`tighten_file`] does.
pub fn tighten_path(path: &Path, what: &str) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    let private = tightened(meta.permissions().mode());
    let Some(private) = private.filter(|_| !meta.file_type().is_symlink()) else {
        return;
    };
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(private)) {
        warn!(path = %path.display(), error = %e, "cannot make the {what} private to its user");
    }
}

/// `mode` without its group's and others' permissions, when it has any.
fn tightened(mode: u32) -> Option<u32> {
    (mode & 0o077 != 0).then_some(mode & 0o7700)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
    }

    #[test]
    fn a_directory_is_created_private_and_an_open_one_made_private() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("a/b");
        assert!(create_dir(&dir, "test directory").expect("create"));
        assert_eq!(mode(&dir), PRIVATE_DIR);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(!create_dir(&dir, "test directory").expect("open"));
        assert_eq!(mode(&dir), PRIVATE_DIR);
    }

    #[test]
    fn a_file_is_created_private_and_an_old_one_made_private() {
        let root = tempfile::tempdir().expect("tempdir");
        let path = root.path().join("f");
        let file = file_options(OpenOptions::new().write(true).create(true))
            .open(&path)
            .expect("create");
        assert_eq!(mode(&path), PRIVATE_FILE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        tighten_file(&file, &path, "test file");
        assert_eq!(mode(&path), PRIVATE_FILE);
    }
}
