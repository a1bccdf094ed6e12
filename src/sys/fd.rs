//! File descriptors: flags, copies, pipes, waiting to write, locks.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{FlockOperation, OFlags};
use rustix::io::{Errno, FdFlags};
use rustix::pipe::PipeFlags;

/// Takes ownership of descriptor `fd`, handed to this process by number (on its
/// command line) for it to own; fails if it is not open. It is made close-on-exec.
pub fn adopt(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(Errno::BADF.into());
    }
    // SAFETY: fcntl on a descriptor number only reads its flags; a number that is
    // not open fails with EBADF, and the borrow ends with the call.
    let flags = rustix::io::fcntl_getfd(unsafe { BorrowedFd::borrow_raw(fd) })?;
    // SAFETY: the descriptor is open (F_GETFD succeeded) and was handed to this
    // process to own: nothing else in it owns or closes it.
    let owned = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    // Best effort, as before: a descriptor left inheritable is no failure.
    let _ = rustix::io::fcntl_setfd(&owned, flags | FdFlags::CLOEXEC);
    Ok(owned)
}

/// Makes `fd` non-blocking (`O_NONBLOCK`).
pub fn set_nonblocking(fd: impl AsFd) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags | OFlags::NONBLOCK)?;
    Ok(())
}

/// A close-on-exec copy of `fd` numbered `min` or above (`F_DUPFD_CLOEXEC`).
pub fn copy_above(fd: impl AsFd, min: RawFd) -> io::Result<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, min)?)
}

/// A close-on-exec pipe: (read end, write end).
pub fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?)
}

/// Waits up to `timeout` until `fd` can take a write (or has failed). An interrupted
/// wait returns early, without error.
pub fn wait_writable(fd: impl AsFd, timeout: Duration) -> io::Result<()> {
    let fd = fd.as_fd();
    let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::OUT)];
    let timeout = Timespec::try_from(timeout).unwrap_or(Timespec {
        tv_sec: 0,
        tv_nsec: 100_000_000,
    });
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(_) | Err(Errno::INTR) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Takes an exclusive `flock` on `file` without waiting: whether it was taken.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    loop {
        match rustix::fs::flock(file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(true),
            Err(Errno::WOULDBLOCK) => return Ok(false),
            Err(Errno::INTR) => continue,
            Err(error) => return Err(error.into()),
        }
    }
}

/// The modes of files only sluice's user may read (the job's state: its
/// journal holds worker secrets) and of the state's directory; one rule
/// with the cache's ([`connectors::private`]).
pub(crate) use connectors::private::PRIVATE_FILE;
/// The mode of outputs (a model, a summary): as any new file (the umask applies).
pub const PUBLIC_FILE: u32 = 0o666;

/// Writes `bytes` to `path` so that no reader ever finds part of them, and a
/// crash or a full disk leaves the old file or the whole new one: written to
/// a temporary file beside it (created with `mode`, less the umask), synced,
/// renamed over `path`, and the directory synced. On failure the temporary
/// file is removed and `path` is as it was.
pub fn write_replacing(path: &std::path::Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_pipe_carries_bytes_and_a_copy_lies_above_the_minimum() {
        let (read, write) = cloexec_pipe().expect("pipe");
        let copy = copy_above(&write, 20).expect("copy");
        assert!(std::os::fd::AsRawFd::as_raw_fd(&copy) >= 20);
        set_nonblocking(&copy).expect("non-blocking");
        wait_writable(&copy, Duration::from_millis(10)).expect("writable");
        File::from(copy).write_all(b"hi").expect("write");
        drop(write);
        let mut text = String::new();
        File::from(read).read_to_string(&mut text).expect("read");
        assert_eq!(text, "hi");
    }

    #[test]
    fn a_second_lock_of_a_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lock");
        let first = File::create(&path).expect("create");
        let second = File::open(&path).expect("open");
        assert!(try_lock_exclusive(&first).expect("lock"));
        assert!(!try_lock_exclusive(&second).expect("lock"));
    }

    #[test]
    fn a_file_is_replaced_whole_with_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("job.json");
        std::fs::write(&path, "old").expect("write");
        write_replacing(&path, b"new", PRIVATE_FILE).expect("replace");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "new");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
        assert_eq!(names.len(), 1, "no temporary file left");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("model.json");
        std::fs::write(&path, "old").expect("write");
        // A directory where the temporary file would go: it cannot be opened.
        std::fs::create_dir(dir.path().join("model.json.tmp")).expect("mkdir");
        assert!(write_replacing(&path, b"new", PUBLIC_FILE).is_err());
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "old");
    }

    #[test]
    fn a_closed_descriptor_is_not_adopted() {
        assert!(adopt(1_000_000).is_err());
    }
}
