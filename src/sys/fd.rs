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
    fn a_closed_descriptor_is_not_adopted() {
        assert!(adopt(1_000_000).is_err());
    }
}
