//! Every system call sluice makes itself, in one place.
//!
//! The wrappers are built on `rustix`, whose Linux backend makes the system calls
//! directly: no `libc` function is linked for them, so the binary needs no symbol of
//! a recent glibc (the wheel runs on glibc 2.17 and later, see the README). What rustix
//! does not offer (fork, signal masks, signalfd, execve) is in [`post_fork`], on `libc`,
//! with the functions of glibc 2.17.
//!
//! The rest of the crate calls these and holds no `unsafe` system call of its own.
//!
//! - [`fd`]: descriptor flags, copies, pipes, waiting to write, `flock`.
//! - [`memory`]: a memory file (`memfd_create`) and its shared mapping, written
//!   through raw pointers only (another process writes it too).
//! - [`process`]: this process and others: parent death signal, dumpability,
//!   whether a process exists, a thread's priority.
//! - [`inotify`]: watching directories.
//! - [`host`]: a host's canonical name (reverse lookup, `getnameinfo`).
//! - [`post_fork`]: the async-signal-safe calls of a process forked from a
//!   multi-threaded one (the exec trainer's watcher).

pub mod fd;
pub mod host;
pub mod inotify;
pub mod memory;
pub mod post_fork;
pub mod process;
