//! A memory file (`memfd_create`) and its shared, writable mapping.
//!
//! Another process maps the same file and may write to it at any time, so the
//! mapping is never seen as a Rust slice (`&[u8]` or `&mut [u8]`, whose contents
//! must not change behind them): bytes go in and out through raw pointers only.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use rustix::fs::MemfdFlags;
use rustix::mm::{MapFlags, ProtFlags};

/// A new, empty, close-on-exec memory file named `name` (the name shows in
/// `/proc/PID/fd`).
pub fn memory_file(name: &CStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC)?)
}

/// Sets the size of the file `fd` to `len` bytes.
pub fn set_len(fd: impl AsFd, len: usize) -> io::Result<()> {
    let len = u64::try_from(len).map_err(|_| io::Error::other("memory file too large"))?;
    Ok(rustix::fs::ftruncate(fd, len)?)
}

/// The first `len` bytes of a file, mapped shared and writable.
pub struct SharedMapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory that this value alone unmaps; it may move to
// another thread like any owned buffer (it is only accessed through raw pointers).
unsafe impl Send for SharedMapping {}

impl SharedMapping {
    /// Maps the first `len` bytes (more than 0) of the file `fd`, shared and writable.
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<SharedMapping> {
        if len == 0 {
            return Err(io::Error::other("an empty mapping"));
        }
        // SAFETY: a new mapping at an address the kernel chooses, so no memory of
        // this process is replaced; it is unmapped only when this value drops.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(SharedMapping { ptr, len })
    }

    /// Bytes mapped.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Copies `bytes` into the mapping at `offset`; fails (copying nothing) if they
    /// do not fit.
    pub fn write_at(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        let end = offset
            .checked_add(bytes.len())
            .filter(|&end| end <= self.len)
            .ok_or_else(|| io::Error::other("a write beyond the mapping"))?;
        debug_assert!(end <= self.len);
        // SAFETY: [offset, end) lies inside the mapping (checked above), which is
        // valid for writes while `self` lives; `bytes` is ordinary memory of this
        // process and cannot overlap a mapping made by mmap for this value.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.as_ptr().add(offset),
                bytes.len(),
            );
        }
        Ok(())
    }

    /// A copy of the `len` bytes at `offset`.
    #[cfg(test)]
    pub fn read_at(&self, offset: usize, len: usize) -> io::Result<Vec<u8>> {
        offset
            .checked_add(len)
            .filter(|&end| end <= self.len)
            .ok_or_else(|| io::Error::other("a read beyond the mapping"))?;
        let mut copy = vec![0u8; len];
        // SAFETY: [offset, offset + len) lies inside the mapping (checked above),
        // valid for reads while `self` lives; `copy` is a new buffer of `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), copy.as_mut_ptr(), len);
        }
        Ok(copy)
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: ptr and len describe a mapping made by mmap in `new` and not
        // unmapped since; nothing refers into it once this value is gone.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_written_into_the_file_are_read_back_and_bounds_are_kept() {
        let fd = memory_file(c"test").expect("memfd");
        set_len(&fd, 8192).expect("size");
        let map = SharedMapping::new(fd.as_fd(), 8192).expect("mapped");
        assert_eq!(map.len(), 8192);
        map.write_at(4090, b"abcdef").expect("fits");
        assert_eq!(map.read_at(4090, 6).expect("inside"), b"abcdef");
        assert!(map.write_at(8190, b"abc").is_err());
        assert!(map.read_at(usize::MAX, 2).is_err());
        let other = SharedMapping::new(fd.as_fd(), 8192).expect("mapped again");
        assert_eq!(other.read_at(4092, 2).expect("inside"), b"cd", "shared");
    }
}
