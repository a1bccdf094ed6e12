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

use std::ffi::{c_char, c_int, CString, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::OnceLock;

use crate::sys::post_fork::{self as sys, Pid, SignalSet};

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
    let number = |arg: &OsString| arg.to_str().and_then(|s| s.parse::<c_int>().ok());
    let (Some(lifeline), Some(trainer)) = (number(lifeline), number(trainer)) else {
        std::process::exit(2);
    };
    // This process is the trainer's watcher, single-threaded and the trainer's
    // parent: the calls below only wait for, signal and reap its own children.
    let signals = signal_set(sys::SIGCHLD);
    let _ = signals.block();
    if let Ok(events) = signals.signalfd() {
        wait_for_an_end(trainer, lifeline, events);
    }
    let status = end_all(trainer);
    sys::exit_as(status)
}

/// Signals that end the trainer, besides its own end and the lifeline's.
const STOP_SIGNALS: [c_int; 3] = [sys::SIGTERM, sys::SIGINT, sys::SIGHUP];

/// The watcher's list of its children (Linux 3.5 and later).
const CHILDREN: &std::ffi::CStr = c"/proc/thread-self/children";

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
    let signals = signal_set(sys::SIGCHLD);
    sys::become_subreaper()?;
    signals.block()?;
    let events = signals.signalfd()?;
    let watcher = sys::pid();
    // Both processes only make the calls of `sys` until the trainer returns to std's
    // pre_exec, which runs its program.
    let trainer = sys::fork()?;
    if trainer == 0 {
        // The trainer: a process group of its own, the signals of a new process, and
        // death with its watcher (which may have died before the prctl).
        signals.unblock()?;
        sys::new_process_group()?;
        sys::die_with_parent()?;
        if sys::parent_pid() != watcher {
            sys::exit_now(1);
        }
        return Ok(());
    }
    sys::close_all_but(lifeline, events);
    if let Some(program) = PROGRAM.get() {
        run_program(program, lifeline, trainer);
    }
    wait_for_an_end(trainer, lifeline, events);
    let status = end_all(trainer);
    sys::exit_as(status)
}

/// Runs `program WATCHER_ARG LIFELINE TRAINER` with an empty environment; returns only
/// if that fails. The blocked signals, the subreaper and the children stay.
fn run_program(program: &CString, lifeline: RawFd, trainer: Pid) {
    // The lifeline stays open across exec; the signalfd is made again there.
    if sys::set_cloexec(lifeline, false).is_err() {
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
    // SAFETY: argv's strings are NUL-terminated (the program, WATCHER_ARG_C and the
    // two buffers `decimal` wrote), live until the call returns, and both arrays end
    // with a null pointer.
    unsafe { sys::execve(program, &argv, &envp) };
    let _ = sys::set_cloexec(lifeline, true);
}

/// `n` (not negative) in decimal, NUL-terminated, in `buf`.
fn decimal(n: c_int, buf: &mut [u8; 24]) -> *const c_char {
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
fn signal_set(more: c_int) -> SignalSet {
    let [a, b, c] = STOP_SIGNALS;
    SignalSet::of(&[more, a, b, c])
}

/// Waits until the trainer exits (without reaping it), the lifeline closes or a stop
/// signal comes; reaps adopted processes that end meanwhile.
fn wait_for_an_end(trainer: Pid, lifeline: RawFd, events: RawFd) {
    // Checked before each wait: the trainer may have exited before the signalfd.
    while !trainer_exited(trainer) {
        match sys::wait_readable(lifeline, events) {
            Ok((lifeline_ended, signalled)) => {
                if lifeline_ended || (signalled && sys::read_signals(events)) {
                    return;
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
    }
}

/// Whether the trainer exited (it is left unreaped); reaps adopted processes that ended.
fn trainer_exited(trainer: Pid) -> bool {
    loop {
        match sys::exited_child() {
            Err(_) => return true,
            Ok(None) => return false,
            Ok(Some(pid)) if pid == trainer => return true,
            Ok(Some(adopted)) => {
                let _ = sys::reap(adopted, true);
            }
        }
    }
}

/// Kills the trainer and its group, reaps it, then kills every adopted process until
/// none is left; returns the trainer's wait status.
fn end_all(trainer: Pid) -> c_int {
    // The trainer is not reaped yet: neither its id nor its group's can be reused.
    sys::kill(-trainer, sys::SIGKILL);
    sys::kill(trainer, sys::SIGKILL);
    let status = loop {
        match sys::reap(trainer, true) {
            Ok(Some((_, status))) => break status,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            _ => break sys::SIGKILL,
        }
    };
    for _ in 0..KILL_ROUNDS {
        loop {
            match sys::reap(-1, false) {
                Ok(None) => break,
                Err(_) => return status,
                Ok(Some(_)) => {}
            }
        }
        // An adopted process is not reaped: its id is not reused.
        if !kill_children() {
            return status;
        }
        sys::sleep_ms(10);
    }
    status
}

/// Sends `SIGKILL` to every child listed in [`CHILDREN`]; false if it cannot be read.
fn kill_children() -> bool {
    let Ok(fd) = sys::open_read(CHILDREN) else {
        return false;
    };
    let mut buf = [0u8; 1024];
    let mut pid: Pid = 0;
    while let Ok(n) = sys::read(fd, &mut buf) {
        if n == 0 {
            break;
        }
        for &byte in buf.get(..n).unwrap_or_default() {
            if byte.is_ascii_digit() {
                pid = pid
                    .saturating_mul(10)
                    .saturating_add(Pid::from(byte - b'0'));
            } else {
                if pid > 0 {
                    sys::kill(pid, sys::SIGKILL);
                }
                pid = 0;
            }
        }
    }
    if pid > 0 {
        sys::kill(pid, sys::SIGKILL);
    }
    // SAFETY: the descriptor was opened above and is used no more.
    unsafe { sys::close(fd) };
    true
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
        for n in [0, 7, 42, 1_000_000, c_int::MAX] {
            let mut buf = [0u8; 24];
            let text = decimal(n, &mut buf);
            // SAFETY: decimal wrote a NUL-terminated string into buf.
            let text = unsafe { std::ffi::CStr::from_ptr(text) };
            assert_eq!(text.to_str(), Ok(n.to_string().as_str()));
        }
    }
}
