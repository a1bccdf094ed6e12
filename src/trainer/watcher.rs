//! The watcher of one exec trainer: a process between sluice and the trainer's
//! `sh -c CMD`, so that nothing the trainer starts outlives it.
//!
//! The watcher forks the trainer and waits. As the trainer's parent and a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`), it adopts every descendant of the trainer that
//! loses its parent, even one that left the trainer's process group and session with
//! `setsid`. It ends them all once the trainer exits, once sluice lets the trainer go or
//! dies (the lifeline, a pipe only sluice holds open, reaches end of file), or at
//! `SIGTERM`, `SIGINT` or `SIGHUP`: it kills the trainer's process group, then every
//! process it has adopted, until it has no child left. Then it exits as the trainer did,
//! so that the watcher's exit status is the trainer's.
//!
//! Once it forked the trainer, the watcher runs the `sluice` binary again as
//! `sluice --sluice-trainer-watcher LIFELINE_FD TRAINER_PID` (see
//! [`run_watchers_as`]), so that it holds no copy of sluice's memory; where that cannot
//! be (a test binary), it stays a fork of sluice.
//!
//! Until it runs that program, the watcher is a process forked from a multi-threaded
//! one: only async-signal-safe system calls, no allocation, no lock, no panic.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::OnceLock;

/// The first argument that makes the `sluice` binary a trainer's watcher.
pub const WATCHER_ARG: &str = "--sluice-trainer-watcher";

/// [`WATCHER_ARG`] as a C string.
const WATCHER_ARG_C: &[u8] = b"--sluice-trainer-watcher\0";

/// The program watchers run (the `sluice` binary), once [`run_watchers_as`] named it.
static PROGRAM: OnceLock<CString> = OnceLock::new();

/// Has every watcher run `program` (the `sluice` binary, which calls [`watch_if_asked`]
/// first thing) once it forked its trainer.
pub fn run_watchers_as(program: &Path) {
    if let Ok(program) = CString::new(program.as_os_str().as_bytes()) {
        let _ = PROGRAM.set(program);
    }
}

/// Watches a trainer and exits, if this process was started as a watcher
/// (`WATCHER_ARG LIFELINE_FD TRAINER_PID`); returns at once otherwise.
pub fn watch_if_asked(args: &[OsString]) {
    let [_, flag, lifeline, trainer] = args else {
        return;
    };
    if flag.as_bytes() != WATCHER_ARG.as_bytes() {
        return;
    }
    let number = |arg: &OsString| arg.to_str().and_then(|s| s.parse::<libc::c_int>().ok());
    let (Some(lifeline), Some(trainer)) = (number(lifeline), number(trainer)) else {
        std::process::exit(2);
    };
    // SAFETY: this process is the trainer's watcher, single-threaded and the trainer's
    // parent: the calls below only wait for, signal and reap its own children.
    unsafe {
        let signals = signal_set(libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &signals, ptr::null_mut());
        let events = libc::signalfd(-1, &signals, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if events != -1 {
            wait_for_an_end(trainer, lifeline, events);
        }
        let status = end_all(trainer);
        exit_as(status)
    }
}

/// Signals that end the trainer, besides its own end and the lifeline's.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// The watcher's list of its children (Linux 3.5 and later).
const CHILDREN: &[u8] = b"/proc/thread-self/children\0";

/// Rounds of killing adopted processes (10 ms apart) before the watcher gives up on
/// those that do not die.
const KILL_ROUNDS: u32 = 300;

/// A `pre_exec` hook: forks the trainer, which returns `Ok` and goes on to run its
/// command; the calling process becomes the trainer's watcher and never returns.
///
/// # Safety
/// Only for a child forked by `std::process::Command` (a `pre_exec` hook), with
/// `lifeline` the read end of the lifeline pipe.
pub(crate) unsafe fn fork_watched(lifeline: RawFd) -> io::Result<()> {
    let signals = signal_set(libc::SIGCHLD);
    check(libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))?;
    check(libc::sigprocmask(
        libc::SIG_BLOCK,
        &signals,
        ptr::null_mut(),
    ))?;
    let events = check(libc::signalfd(
        -1,
        &signals,
        libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
    ))?;
    let watcher = libc::getpid();
    let trainer = check(libc::fork())?;
    if trainer == 0 {
        // The trainer: a process group of its own, the signals of a new process, and
        // death with its watcher (which may have died before the prctl).
        check(libc::sigprocmask(
            libc::SIG_UNBLOCK,
            &signals,
            ptr::null_mut(),
        ))?;
        check(libc::setpgid(0, 0))?;
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        if libc::getppid() != watcher {
            libc::_exit(1);
        }
        return Ok(());
    }
    close_all_but(lifeline, events);
    if let Some(program) = PROGRAM.get() {
        run_program(program, lifeline, trainer);
    }
    wait_for_an_end(trainer, lifeline, events);
    let status = end_all(trainer);
    exit_as(status)
}

/// Runs `program WATCHER_ARG LIFELINE TRAINER` with an empty environment; returns only
/// if that fails. The blocked signals, the subreaper and the children stay.
unsafe fn run_program(program: &CString, lifeline: RawFd, trainer: libc::pid_t) {
    // The lifeline stays open across exec; the signalfd is made again there.
    if libc::fcntl(lifeline, libc::F_SETFD, 0) == -1 {
        return;
    }
    let mut fd_text = [0u8; 24];
    let mut pid_text = [0u8; 24];
    let argv = [
        program.as_ptr(),
        WATCHER_ARG_C.as_ptr().cast(),
        decimal(lifeline, &mut fd_text),
        decimal(trainer, &mut pid_text),
        ptr::null(),
    ];
    let envp = [ptr::null()];
    libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
    libc::fcntl(lifeline, libc::F_SETFD, libc::FD_CLOEXEC);
}

/// `n` (not negative) in decimal, NUL-terminated, in `buf`.
fn decimal(n: libc::c_int, buf: &mut [u8; 24]) -> *const libc::c_char {
    let mut digits = [0u8; 12];
    let mut len = 0;
    let mut rest = n.unsigned_abs();
    loop {
        digits[len] = b'0' + (rest % 10) as u8;
        len += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for (i, digit) in digits[..len].iter().rev().enumerate() {
        buf[i] = *digit;
    }
    buf[len] = 0;
    buf.as_ptr().cast()
}

/// The set of [`STOP_SIGNALS`] and `more`.
unsafe fn signal_set(more: libc::c_int) -> libc::sigset_t {
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigaddset(&mut set, more);
    for signal in STOP_SIGNALS {
        libc::sigaddset(&mut set, signal);
    }
    set
}

/// Closes every descriptor but `a` and `b` (the stdin pipe, the ack pipe, the other
/// trainers' lifelines, the pipe on which std waits for the trainer's exec).
unsafe fn close_all_but(a: RawFd, b: RawFd) {
    let (low, high) = (a.min(b), a.max(b));
    let ranges = [
        (0, low - 1),
        (low + 1, high - 1),
        (high + 1, libc::c_int::MAX),
    ];
    for (first, last) in ranges {
        if first > last {
            continue;
        }
        // Both ends as unsigned ints, as close_range(2) takes them.
        let closed = libc::syscall(libc::SYS_close_range, first as u32, last as u32, 0);
        if closed == -1 {
            let mut limit: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            let end = libc::c_int::try_from(limit.rlim_cur).unwrap_or(65_536);
            for fd in first..=last.min(end) {
                libc::close(fd);
            }
        }
    }
}

/// Waits until the trainer exits (without reaping it), the lifeline closes or a stop
/// signal comes; reaps adopted processes that end meanwhile.
unsafe fn wait_for_an_end(trainer: libc::pid_t, lifeline: RawFd, events: RawFd) {
    // Checked before each wait: the trainer may have exited before the signalfd.
    while !trainer_exited(trainer) {
        let mut fds = [
            libc::pollfd {
                fd: lifeline,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: events,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if libc::poll(fds.as_mut_ptr(), 2, -1) == -1 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if fds[0].revents != 0 || stop_signalled(events) {
            return;
        }
    }
}

/// Whether the trainer exited (it is left unreaped); reaps adopted processes that ended.
unsafe fn trainer_exited(trainer: libc::pid_t) -> bool {
    loop {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_ALL, 0, &mut info, flags) == -1 {
            return true;
        }
        match info.si_pid() {
            0 => return false,
            pid if pid == trainer => return true,
            adopted => {
                libc::waitpid(adopted, ptr::null_mut(), 0);
            }
        }
    }
}

/// Reads the pending signals; whether one was a stop signal.
unsafe fn stop_signalled(events: RawFd) -> bool {
    let mut stop = false;
    let mut info: libc::signalfd_siginfo = std::mem::zeroed();
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    while libc::read(events, ptr::addr_of_mut!(info).cast(), size) == size as isize {
        stop |= info.ssi_signo != libc::SIGCHLD as u32;
    }
    stop
}

/// Kills the trainer and its group, reaps it, then kills every adopted process until
/// none is left; returns the trainer's wait status.
unsafe fn end_all(trainer: libc::pid_t) -> libc::c_int {
    // The trainer is not reaped yet: neither its id nor its group's can be reused.
    libc::kill(-trainer, libc::SIGKILL);
    libc::kill(trainer, libc::SIGKILL);
    let mut status = libc::SIGKILL;
    while libc::waitpid(trainer, &mut status, 0) == -1 {
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    for _ in 0..KILL_ROUNDS {
        loop {
            match libc::waitpid(-1, ptr::null_mut(), libc::WNOHANG) {
                0 => break,
                -1 => return status,
                _ => {}
            }
        }
        // An adopted process is not reaped: its id is not reused.
        if !kill_children() {
            return status;
        }
        libc::poll(ptr::null_mut(), 0, 10);
    }
    status
}

/// Sends `SIGKILL` to every child listed in [`CHILDREN`]; false if it cannot be read.
unsafe fn kill_children() -> bool {
    let fd = libc::open(CHILDREN.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
    if fd == -1 {
        return false;
    }
    let mut buf = [0u8; 1024];
    let mut pid: libc::pid_t = 0;
    loop {
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 {
            break;
        }
        for &byte in buf.get(..n).unwrap_or_default() {
            if byte.is_ascii_digit() {
                pid = pid
                    .saturating_mul(10)
                    .saturating_add(libc::pid_t::from(byte - b'0'));
            } else {
                if pid > 0 {
                    libc::kill(pid, libc::SIGKILL);
                }
                pid = 0;
            }
        }
    }
    if pid > 0 {
        libc::kill(pid, libc::SIGKILL);
    }
    libc::close(fd);
    true
}

/// Exits with the trainer's wait status: its exit code, or killed by its signal.
unsafe fn exit_as(status: libc::c_int) -> ! {
    if libc::WIFEXITED(status) {
        libc::_exit(libc::WEXITSTATUS(status));
    }
    let signal = libc::WTERMSIG(status);
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    libc::setrlimit(libc::RLIMIT_CORE, &no_core);
    libc::signal(signal, libc::SIG_DFL);
    let mut none: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut none);
    libc::sigprocmask(libc::SIG_SETMASK, &none, ptr::null_mut());
    libc::kill(libc::getpid(), signal);
    libc::_exit(128 + signal)
}

/// A system call's result, or its error.
fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watcher_argument_is_the_same_in_both_spellings() {
        assert_eq!(WATCHER_ARG_C, format!("{WATCHER_ARG}\0").as_bytes());
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0, 7, 42, 1_000_000, libc::c_int::MAX] {
            let mut buf = [0u8; 24];
            let text = decimal(n, &mut buf);
            // SAFETY: decimal wrote a NUL-terminated string into buf.
            let text = unsafe { std::ffi::CStr::from_ptr(text) };
            assert_eq!(text.to_str(), Ok(n.to_string().as_str()));
        }
    }
}
