//! This process and others: the parent's death, dumpability, whether a process
//! exists, a thread's priority.

use std::io;

use rustix::io::Errno;
use rustix::process::{DumpableBehavior, Pid, Signal};

/// Has the kernel send `SIGKILL` to this process when the thread that started it
/// ends (`PR_SET_PDEATHSIG`).
pub fn die_with_parent() -> io::Result<()> {
    Ok(rustix::process::set_parent_process_death_signal(Some(
        Signal::KILL,
    ))?)
}

/// Whether this process was adopted by init (its parent is process 1).
pub fn adopted_by_init() -> bool {
    rustix::process::getppid().is_some_and(|pid| pid.as_raw_nonzero().get() == 1)
}

/// Makes this process non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`).
pub fn set_not_dumpable() -> io::Result<()> {
    Ok(rustix::process::set_dumpable_behavior(
        DumpableBehavior::NotDumpable,
    )?)
}

/// Whether this process is dumpable (`prctl(PR_GET_DUMPABLE)`).
#[cfg(test)]
pub fn is_dumpable() -> io::Result<bool> {
    Ok(rustix::process::dumpable_behavior()? != DumpableBehavior::NotDumpable)
}

/// Whether process `pid` exists (signal 0: nothing is sent). A process of another
/// user exists too.
pub fn process_exists(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) | Err(Errno::PERM) => true,
        Err(_) => false,
    }
}

/// Sets the calling thread's nice value to `nice` (on Linux a thread's own).
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    let tid = rustix::thread::gettid();
    Ok(rustix::process::setpriority_process(Some(tid), nice)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_exists_and_a_huge_pid_does_not() {
        assert!(process_exists(std::process::id()));
        assert!(!process_exists(u32::MAX));
        assert!(!adopted_by_init() || std::process::id() == 1);
    }
}
