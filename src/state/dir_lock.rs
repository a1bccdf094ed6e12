//! The exclusive lock of a local state directory: `STATE/lock`, held with
//! flock(2) for as long as the process runs and naming its holder (pid, host,
//! since when). The kernel drops the lock when the holder dies, however it
//! dies, so a run killed with SIGKILL can be resumed at once.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::journal::sync_dir;
use crate::host::host_name;

/// The lock file's name inside the state directory.
pub const LOCK_FILE: &str = "lock";

/// How long a refused process waits for the holder to write its name.
const NAME_WAIT: Duration = Duration::from_secs(1);

/// How long a process refused by its own lock waits for forked copies of
/// the descriptor it dropped to close (see [`released_by_own_copy`]).
const OWN_COPY_WAIT: Duration = Duration::from_secs(2);

/// Errors taking the lock.
#[derive(Debug, thiserror::Error)]
pub enum DirLockError {
    /// Another live process holds it.
    #[error("state {dir} is in use by {holder}; not starting (wait for it to end, or stop it)")]
    Held {
        /// The state directory.
        dir: String,
        /// Who holds it, as the lock file names it.
        holder: String,
    },
    /// The lock file cannot be opened, locked or written.
    #[error("cannot lock state {path}: {cause}")]
    Io {
        /// The lock file.
        path: String,
        /// The failure.
        cause: std::io::Error,
    },
}

/// What the lock file says about its holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Its process id.
    pub pid: u32,
    /// Its host name.
    pub host: String,
    /// When it took the lock (RFC 3339).
    pub since: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} on host {} (since {})",
            self.pid, self.host, self.since
        )
    }
}

/// A held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct DirLock {
    #[cfg(test)]
    path: std::path::PathBuf,
    _file: File,
}

impl DirLock {
    /// Takes the lock of `dir` (which must exist) without waiting, writing
    /// this process's name into it; fails at once naming the holder when
    /// another process has it.
    pub fn acquire(dir: &Path) -> Result<DirLock, DirLockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| DirLockError::Io {
            path: path.display().to_string(),
            cause: source,
        };
        let created = !path.exists();
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(crate::sys::fd::PRIVATE_FILE)
            .open(&path)
            .map_err(io)?;
        if created {
            sync_dir(dir).map_err(io)?;
        }
        if !try_flock(&file).map_err(io)? && !released_by_own_copy(&mut file).map_err(io)? {
            return Err(DirLockError::Held {
                dir: dir.display().to_string(),
                holder: read_holder(&mut file),
            });
        }
        let me = Holder {
            pid: std::process::id(),
            host: host_name(),
            since: now_text(),
        };
        let mut line = serde_json::to_vec(&me).map_err(|e| io(e.into()))?;
        line.push(b'\n');
        file.set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(&line))
            .and_then(|_| file.sync_data())
            .map_err(io)?;
        Ok(DirLock {
            #[cfg(test)]
            path,
            _file: file,
        })
    }

    /// The lock file.
    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

use crate::wall::now_text;

/// Refused, and the lock file names this very process: the lock this
/// process dropped may still be held by a copy of its file descriptor in a
/// child forked a moment ago (by any thread) that has not run its program
/// yet, which closes it. Tries again for a moment; whether it was taken.
fn released_by_own_copy(file: &mut File) -> std::io::Result<bool> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_string(&mut text)?;
    let own = serde_json::from_str::<Holder>(text.trim())
        .is_ok_and(|h| h.pid == std::process::id() && h.host == host_name());
    if !own {
        return Ok(false);
    }
    let started = Instant::now();
    while started.elapsed() < OWN_COPY_WAIT {
        std::thread::sleep(Duration::from_millis(20));
        if try_flock(file)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// flock(LOCK_EX | LOCK_NB): whether the lock was taken.
fn try_flock(file: &File) -> std::io::Result<bool> {
    crate::sys::fd::try_lock_exclusive(file)
}

/// The holder named in a lock file; a holder that took the lock an instant
/// ago may not have written its name yet, so this waits for it a little.
fn read_holder(file: &mut File) -> String {
    let started = Instant::now();
    loop {
        let mut text = String::new();
        let read = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_string(&mut text));
        if let Ok(holder) = serde_json::from_str::<Holder>(text.trim()) {
            return holder.to_string();
        }
        if started.elapsed() >= NAME_WAIT {
            return match read {
                Err(e) => format!("another process (its lock file cannot be read: {e})"),
                Ok(_) => "another process (it has not written its name)".to_string(),
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = DirLock::acquire(dir.path()).expect("first");
        let err = DirLock::acquire(dir.path()).expect_err("second while held");
        let text = err.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(text.contains(&host_name()), "{text}");
        drop(first);
        let again = DirLock::acquire(dir.path()).expect("free once dropped");
        assert_eq!(again.path(), dir.path().join(LOCK_FILE));
    }
}
