//! Keeps sluice's secrets (the job token, store credentials, TLS keys) inside its own
//! process: no other process of the same user may read its memory or environment,
//! and its trainers cannot read the job's `--token-file` where the kernel lets it be
//! hidden from them.

use std::io;

use crate::trainer::exec::hide::{self, Hidden, HIDE_ARG};
use crate::trainer::protocol::SECRET_ENV;

/// Makes this process non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, as ssh-agent and
/// gpg-agent do): its `/proc/PID/environ`, `mem`, `maps` and `fd` are then owned by
/// root, and no process of the same user may read them or attach to it (only root
/// still can). Trainers are unaffected: a process that runs a program (`execve`) is
/// dumpable again. No core file is written if sluice crashes.
pub fn keep_secrets_private() -> io::Result<()> {
    crate::sys::process::set_not_dumpable()
}

/// Hides `path` from every trainer this process will start: each is run by
/// this binary again ([`hide_if_asked`]), which enters a user and mount
/// namespace of its own where the file reads as empty, then runs the trainer.
/// Tried first on a shell; where the kernel allows no unprivileged user
/// namespaces, or the file still reads there, returns why and hides nothing.
pub fn hide_from_trainers(path: &std::path::Path) -> Result<(), String> {
    let path = std::path::absolute(path).map_err(|e| e.to_string())?;
    let program = std::env::current_exe().map_err(|e| e.to_string())?;
    let hidden = Hidden {
        program,
        path: path.clone(),
    };
    let check = [
        std::ffi::OsStr::new("sh"),
        std::ffi::OsStr::new("-c"),
        std::ffi::OsStr::new("exec test ! -s \"$0\""),
        path.as_os_str(),
    ];
    let mut command = std::process::Command::new(&hidden.program);
    command.args(hidden.args(&check));
    for secret in SECRET_ENV {
        command.env_remove(secret);
    }
    let hides = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !hides {
        return Err("the kernel allows no unprivileged user namespaces here".to_string());
    }
    hide::set(hidden);
    Ok(())
}

/// Hides the files and runs the program that follow, if this process was
/// started so (`HIDE_ARG N PATH... PROGRAM ARG...`); returns at once
/// otherwise. A process of its own, freshly started (run as the trainer's
/// program), so that it holds no secret while the namespaces are set up:
/// writing its user namespace's maps needs it dumpable, and sluice is not.
pub fn hide_if_asked(args: &[std::ffi::OsString]) {
    let [_, flag, count, rest @ ..] = args else {
        return;
    };
    if flag != HIDE_ARG {
        return;
    }
    let count = count.to_str().and_then(|c| c.parse::<usize>().ok());
    let Some((paths, command)) = count.and_then(|n| (rest.len() > n).then(|| rest.split_at(n)))
    else {
        eprintln!("sluice: {HIDE_ARG} N PATH... PROGRAM ARG...");
        std::process::exit(126);
    };
    let paths: Vec<std::path::PathBuf> = paths.iter().map(std::path::PathBuf::from).collect();
    let hidden = crate::sys::post_fork::HiddenPaths::new(&paths)
        .and_then(|plan| crate::sys::post_fork::hide_paths(&plan));
    if let Err(e) = hidden {
        eprintln!("sluice: cannot hide the job token file from the trainer: {e}");
        std::process::exit(126);
    }
    use std::os::unix::process::CommandExt;
    let error = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    eprintln!(
        "sluice: cannot run {}: {error}",
        command[0].to_string_lossy()
    );
    std::process::exit(127);
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
