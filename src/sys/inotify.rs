//! Watching directories (Linux inotify).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::inotify::{CreateFlags, ReadFlags, WatchFlags};

/// The size of an event's header (`struct inotify_event` without its name).
const HEADER: usize = 16;

/// A new inotify instance, non-blocking and close-on-exec.
pub fn new_instance() -> io::Result<OwnedFd> {
    Ok(rustix::fs::inotify::init(
        CreateFlags::NONBLOCK | CreateFlags::CLOEXEC,
    )?)
}

/// Watches directory `dir` for changes to what it holds (created, moved in or out,
/// written and closed, deleted, attributes changed); returns the watch descriptor.
pub fn watch_dir(instance: impl AsFd, dir: &Path) -> io::Result<i32> {
    let flags = WatchFlags::CREATE
        | WatchFlags::MOVED_TO
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::ATTRIB;
    Ok(rustix::fs::inotify::add_watch(instance, dir, flags)?)
}

/// Reads the pending events into `buf` (whole events); the bytes read.
pub fn read_events(instance: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    Ok(rustix::io::read(instance, buf)?)
}

/// An event read by [`read_events`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    /// The watch descriptor of the directory it happened in.
    pub watch: i32,
    /// Whether it made a directory appear (created or moved in).
    pub dir_made: bool,
    /// The name in the directory, if any.
    pub name: &'a OsStr,
}

/// The events in `buf` (as [`read_events`] filled it), in order; a truncated last
/// event is left out.
pub fn events(mut buf: &[u8]) -> impl Iterator<Item = Event<'_>> {
    std::iter::from_fn(move || {
        let header = buf.get(..HEADER)?;
        let word = |at: usize| {
            let mut bytes = [0u8; 4];
            bytes.copy_from_slice(header.get(at..at + 4)?);
            Some(bytes)
        };
        let watch = i32::from_ne_bytes(word(0)?);
        let mask = ReadFlags::from_bits_retain(u32::from_ne_bytes(word(4)?));
        let len = usize::try_from(u32::from_ne_bytes(word(12)?)).ok()?;
        let name = buf.get(HEADER..HEADER + len)?;
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(len)];
        buf = buf.get(HEADER + len..)?;
        Some(Event {
            watch,
            dir_made: mask.contains(ReadFlags::ISDIR)
                && mask.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO),
            name: OsStr::from_bytes(name),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_made_in_a_watched_one_is_seen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let instance = new_instance().expect("inotify");
        let watch = watch_dir(&instance, dir.path()).expect("watch");
        std::fs::create_dir(dir.path().join("dt=1")).expect("mkdir");
        std::fs::write(dir.path().join("file"), b"x").expect("write");
        let mut buf = [0u8; 4096];
        let n = read_events(&instance, &mut buf).expect("events");
        let seen: Vec<Event<'_>> = events(&buf[..n]).collect();
        assert!(seen.iter().all(|e| e.watch == watch));
        assert_eq!(seen[0].name, "dt=1");
        assert!(seen[0].dir_made);
        assert!(seen.iter().any(|e| e.name == "file" && !e.dir_made));
        assert!(events(&buf[..n - 1]).count() < seen.len());
    }
}
