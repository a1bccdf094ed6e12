//! Keeps sluice's secrets (the job token, store credentials, TLS keys) inside its own
//! process: no other process of the same user may read its memory or environment.

use std::io;

/// Makes this process non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, as ssh-agent and
/// gpg-agent do): its `/proc/PID/environ`, `mem`, `maps` and `fd` are then owned by
/// root, and no process of the same user may read them or attach to it (only root
/// still can). Trainers are unaffected: a process that runs a program (`execve`) is
/// dumpable again. No core file is written if sluice crashes.
pub fn keep_secrets_private() -> io::Result<()> {
    crate::sys::process::set_not_dumpable()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_is_no_longer_dumpable() {
        // A forked child runs the check so the test process stays as it was.
        use crate::sys::post_fork;
        // SAFETY: the child only makes system calls (prctl) and exits at once.
        let pid = unsafe { post_fork::fork() }.expect("fork");
        if pid == 0 {
            let ok = keep_secrets_private().is_ok()
                && crate::sys::process::is_dumpable().is_ok_and(|dumpable| !dumpable);
            post_fork::exit_now(if ok { 0 } else { 1 });
        }
        let (_, status) = post_fork::reap(pid, true)
            .expect("wait")
            .expect("the child ended");
        assert_eq!(status, 0, "the child was not made non-dumpable");
    }
}
