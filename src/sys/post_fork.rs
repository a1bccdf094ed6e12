//! The system calls of a process forked from a multi-threaded one (the exec trainer's
//! watcher, see `trainer::watcher`): each is async-signal-safe, allocates nothing,
//! takes no lock and does not panic. On `libc` (fork, signal masks, signalfd and
//! execve are glibc's business; every function used here is in glibc 2.17).

use std::ffi::{c_char, c_int, CStr};
use std::io;
use std::os::fd::RawFd;
use std::ptr;

/// A process id, as the kernel takes it.
pub type Pid = libc::pid_t;

/// `SIGCHLD`.
pub const SIGCHLD: c_int = libc::SIGCHLD;
/// `SIGTERM`.
pub const SIGTERM: c_int = libc::SIGTERM;
/// `SIGINT`.
pub const SIGINT: c_int = libc::SIGINT;
/// `SIGHUP`.
pub const SIGHUP: c_int = libc::SIGHUP;
/// `SIGKILL`.
pub const SIGKILL: c_int = libc::SIGKILL;

/// A system call's result, or its error.
fn check(result: c_int) -> io::Result<c_int> {
    if result == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// A set of signals.
#[derive(Clone, Copy)]
pub struct SignalSet(libc::sigset_t);

impl SignalSet {
    /// The set of `signals`.
    pub fn of(signals: &[c_int]) -> SignalSet {
        // SAFETY: sigset_t is plain data, for which all zeroes is a valid value.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both write only the set they are given, which lives on this stack.
        unsafe {
            libc::sigemptyset(&mut set);
            for &signal in signals {
                libc::sigaddset(&mut set, signal);
            }
        }
        SignalSet(set)
    }

    /// Blocks the signals of the set for the calling thread.
    pub fn block(&self) -> io::Result<()> {
        // SAFETY: reads the set it is given; the old mask is not asked for.
        check(unsafe { libc::sigprocmask(libc::SIG_BLOCK, &self.0, ptr::null_mut()) }).map(drop)
    }

    /// Unblocks the signals of the set for the calling thread.
    pub fn unblock(&self) -> io::Result<()> {
        // SAFETY: as in `block`.
        check(unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &self.0, ptr::null_mut()) }).map(drop)
    }

    /// A new non-blocking, close-on-exec signalfd for the set (its signals must be
    /// blocked); the descriptor is the caller's to close.
    pub fn signalfd(&self) -> io::Result<RawFd> {
        // SAFETY: -1 asks for a new descriptor; the set is only read.
        check(unsafe { libc::signalfd(-1, &self.0, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) })
    }
}

/// Reads the signals pending on signalfd `fd`; whether one of them was not `SIGCHLD`.
pub fn read_signals(fd: RawFd) -> bool {
    let mut other = false;
    // SAFETY: signalfd_siginfo is plain data, for which all zeroes is a valid value.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: read writes at most `size` bytes into `info`, which has that size.
    while unsafe { libc::read(fd, ptr::addr_of_mut!(info).cast(), size) } == size as isize {
        other |= info.ssi_signo != SIGCHLD as u32;
    }
    other
}

/// Forks: the child's id in the parent, 0 in the child.
///
/// # Safety
/// The child of a multi-threaded process may only make async-signal-safe calls (those
/// of this module) until it runs a program or exits.
pub unsafe fn fork() -> io::Result<Pid> {
    check(libc::fork())
}

/// Runs `program` with `argv` and `envp`; returns only if that fails.
///
/// # Safety
/// `argv` and `envp` must be null-terminated arrays of pointers to NUL-terminated
/// strings, all valid for the call.
pub unsafe fn execve(program: &CStr, argv: &[*const c_char], envp: &[*const c_char]) {
    libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
}

/// Ends this process at once with `code` (`_exit`: no handler, no flush).
pub fn exit_now(code: c_int) -> ! {
    // SAFETY: _exit ends the process; nothing of it runs afterwards.
    unsafe { libc::_exit(code) }
}

/// This process's id.
pub fn pid() -> Pid {
    // SAFETY: getpid cannot fail and touches no memory.
    unsafe { libc::getpid() }
}

/// The parent process's id.
pub fn parent_pid() -> Pid {
    // SAFETY: getppid cannot fail and touches no memory.
    unsafe { libc::getppid() }
}

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`).
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: this prctl takes a flag and reads no memory.
    check(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }).map(drop)
}

/// `SIGKILL` for this process when its parent ends (`PR_SET_PDEATHSIG`).
pub fn die_with_parent() -> io::Result<()> {
    // SAFETY: this prctl takes a signal number and reads no memory.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) }).map(drop)
}

/// Makes this process the leader of a new process group.
pub fn new_process_group() -> io::Result<()> {
    // SAFETY: setpgid on this process touches no memory.
    check(unsafe { libc::setpgid(0, 0) }).map(drop)
}

/// Sets or clears close-on-exec on `fd`.
pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    let flags = if on { libc::FD_CLOEXEC } else { 0 };
    // SAFETY: fcntl on a descriptor number; one that is not open fails with EBADF.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, flags) }).map(drop)
}

/// Copies descriptor `fd` onto number `target` (`dup2`), which stays open across exec.
///
/// # Safety
/// Whatever `target` was is closed: it must be no descriptor that something of this
/// process still uses.
pub unsafe fn copy_onto(fd: RawFd, target: RawFd) -> io::Result<()> {
    check(libc::dup2(fd, target)).map(drop)
}

/// A close-on-exec copy of `fd` numbered `min` or above.
pub fn copy_above(fd: RawFd, min: RawFd) -> io::Result<RawFd> {
    // SAFETY: fcntl on a descriptor number; one that is not open fails with EBADF.
    check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) })
}

/// Closes every descriptor but `a` and `b`.
///
/// # Safety
/// Nothing of this process may use another descriptor afterwards.
pub unsafe fn close_all_but(a: RawFd, b: RawFd) {
    let (low, high) = (a.min(b), a.max(b));
    let ranges = [(0, low - 1), (low + 1, high - 1), (high + 1, c_int::MAX)];
    for (first, last) in ranges {
        if first > last {
            continue;
        }
        // Both ends as unsigned ints, as close_range(2) takes them.
        let closed = libc::syscall(libc::SYS_close_range, first as u32, last as u32, 0);
        if closed == -1 {
            let mut limit: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            let end = c_int::try_from(limit.rlim_cur).unwrap_or(65_536);
            for fd in first..=last.min(end) {
                libc::close(fd);
            }
        }
    }
}

/// Waits until `a` or `b` is readable (or closed): which of them are.
pub fn wait_readable(a: RawFd, b: RawFd) -> io::Result<(bool, bool)> {
    let mut fds = [
        libc::pollfd {
            fd: a,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: b,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: poll reads and writes the two pollfds it is given.
    check(unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) })?;
    Ok((fds[0].revents != 0, fds[1].revents != 0))
}

/// Sleeps `millis` milliseconds (a poll on nothing).
pub fn sleep_ms(millis: c_int) {
    // SAFETY: a poll of no descriptor touches no memory.
    unsafe { libc::poll(ptr::null_mut(), 0, millis) };
}

/// A child that exited, left unreaped (`waitid(P_ALL, WEXITED | WNOHANG | WNOWAIT)`):
/// `Ok(None)` when none did, an error when there is no child.
pub fn exited_child() -> io::Result<Option<Pid>> {
    // SAFETY: siginfo_t is plain data, for which all zeroes is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    // SAFETY: waitid writes only the siginfo_t it is given.
    check(unsafe { libc::waitid(libc::P_ALL, 0, &mut info, flags) })?;
    // SAFETY: waitid filled a child's state (si_pid), or left it zeroed (none).
    match unsafe { info.si_pid() } {
        0 => Ok(None),
        pid => Ok(Some(pid)),
    }
}

/// Waits for child `pid` (`-1`: any) to end and reaps it: its wait status. With
/// `hang` false, `Ok(None)` when no such child has ended yet.
pub fn reap(pid: Pid, hang: bool) -> io::Result<Option<(Pid, c_int)>> {
    let mut status = 0;
    let flags = if hang { 0 } else { libc::WNOHANG };
    // SAFETY: waitpid writes only the status it is given.
    match check(unsafe { libc::waitpid(pid, &mut status, flags) })? {
        0 => Ok(None),
        pid => Ok(Some((pid, status))),
    }
}

/// Sends `signal` to process `pid` (a negative `pid`: to that process group);
/// best effort.
pub fn kill(pid: Pid, signal: c_int) {
    // SAFETY: kill touches no memory of this process.
    unsafe { libc::kill(pid, signal) };
}

/// Opens `path` for reading.
pub fn open_read(path: &CStr) -> io::Result<RawFd> {
    // SAFETY: the path is a NUL-terminated string valid for the call.
    check(unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })
}

/// Reads into `buf`: the bytes read.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: read writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Closes `fd`.
///
/// # Safety
/// Nothing may use `fd` afterwards.
pub unsafe fn close(fd: RawFd) {
    libc::close(fd);
}

/// Ends this process as wait status `status` says its child ended: with its exit
/// code, or killed by its signal (without a core file).
pub fn exit_as(status: c_int) -> ! {
    if libc::WIFEXITED(status) {
        exit_now(libc::WEXITSTATUS(status));
    }
    let signal = libc::WTERMSIG(status);
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: each call reads only the values it is given, on this stack; the
    // signal's default action ends the process, or _exit does.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(signal, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, ptr::null_mut());
        libc::kill(libc::getpid(), signal);
    }
    exit_now(128 + signal)
}

/// Files hidden from a process: what [`hide_paths`] needs, made before the fork
/// (the forked process allocates nothing).
#[derive(Debug, Clone)]
pub struct HiddenPaths {
    /// The files, each to read as empty.
    paths: Vec<std::ffi::CString>,
    /// `/proc/self/uid_map` of a new user namespace: this process's user as itself.
    uid_map: Vec<u8>,
    /// `/proc/self/gid_map`: its group as itself.
    gid_map: Vec<u8>,
}

impl HiddenPaths {
    /// The plan to hide `paths` from a process of this user.
    pub fn new(paths: &[std::path::PathBuf]) -> io::Result<HiddenPaths> {
        use std::os::unix::ffi::OsStrExt;
        let paths = paths
            .iter()
            .map(|p| std::ffi::CString::new(p.as_os_str().as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(io::Error::other)?;
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ok(HiddenPaths {
            paths,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        })
    }
}

/// Writes `bytes` to the file at `path` (a `/proc/self` control file).
fn write_control(path: &CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: the path is a NUL-terminated string valid for the call.
    let fd = check(unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) })?;
    // SAFETY: write reads at most `bytes.len()` bytes of `bytes`.
    let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    let result = match usize::try_from(written) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(_) => Err(io::Error::from_raw_os_error(libc::EIO)),
        Err(_) => Err(io::Error::last_os_error()),
    };
    // SAFETY: `fd` was opened above and is not used again.
    unsafe { libc::close(fd) };
    result
}

/// Enters a new user namespace, where this process is its own user and group,
/// and a new mount namespace owned by it.
fn enter_own_namespaces(plan: &HiddenPaths) -> io::Result<()> {
    // SAFETY: unshare touches no memory of this process.
    check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) })?;
    write_control(c"/proc/self/setgroups", b"deny")?;
    write_control(c"/proc/self/uid_map", &plan.uid_map)?;
    write_control(c"/proc/self/gid_map", &plan.gid_map)
}

/// In a forked process (before it runs a program): hides `plan`'s files from
/// it and everything it starts. It enters a user and mount namespace of its
/// own (mounts no longer shared with the rest of the system), binds
/// `/dev/null` over each file (reading it gives nothing), then enters a
/// second pair, which locks those mounts: a process there cannot unmount
/// them to find the files underneath. Needs unprivileged user namespaces;
/// an error where the kernel refuses them.
pub fn hide_paths(plan: &HiddenPaths) -> io::Result<()> {
    enter_own_namespaces(plan)?;
    // SAFETY: mount reads the NUL-terminated strings given, valid for the call.
    check(unsafe {
        libc::mount(
            ptr::null(),
            c"/".as_ptr(),
            ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            ptr::null(),
        )
    })?;
    for path in &plan.paths {
        // SAFETY: as above.
        check(unsafe {
            libc::mount(
                c"/dev/null".as_ptr(),
                path.as_ptr(),
                ptr::null(),
                libc::MS_BIND,
                ptr::null(),
            )
        })?;
    }
    enter_own_namespaces(plan)
}
