//! Keeps sluice's secrets (the job token, store credentials, TLS keys) inside its own
//! process: no other process of the same user may read its memory or environment.

use std::io;

/// Makes this process non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, as ssh-agent and
/// gpg-agent do): its `/proc/PID/environ`, `mem`, `maps` and `fd` are then owned by
/// root, and no process of the same user may read them or attach to it (only root
/// still can). Trainers are unaffected: a process that runs a program (`execve`) is
/// dumpable again. No core file is written if sluice crashes.
pub fn keep_secrets_private() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_DUMPABLE reads no memory of this process.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_is_no_longer_dumpable() {
        // A forked child runs the check so the test process stays as it was.
        // SAFETY: the child only calls prctl and _exit (async-signal-safe).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = keep_secrets_private().is_ok()
                // SAFETY: as above.
                && unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) } == 0;
            // SAFETY: ends the forked child without running the test harness's code.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
}
