//! Facts about this machine and its processes: the host name, and whether a
//! process recorded in a lock (by pid and start time) still runs.

/// This machine's host name (`unknown` when it is empty).
pub fn host_name() -> String {
    let name = gethostname::gethostname().to_string_lossy().into_owned();
    if name.is_empty() {
        "unknown".to_string()
    } else {
        name
    }
}

/// The start time of process `pid` (field 22 of `/proc/PID/stat`), where readable.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Whether process `pid` runs (and is the same process that started at `start`).
pub fn process_alive(pid: u32, start: Option<u64>) -> bool {
    if pid == 0 {
        return false;
    }
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        let zombie = stat
            .rfind(')')
            .and_then(|i| stat.get(i + 2..i + 3))
            .is_some_and(|s| s == "Z");
        let reused = match (start, process_start(pid)) {
            (Some(then), Some(now)) => then != now,
            _ => false,
        };
        return !zombie && !reused;
    }
    if std::path::Path::new("/proc/self/stat").exists() {
        return false;
    }
    crate::sys::process::process_exists(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_a_dead_one_is_not() {
        let me = std::process::id();
        assert!(process_alive(me, process_start(me)));
        assert!(!process_alive(me, process_start(me).map(|s| s + 1)));
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait");
        assert!(!process_alive(pid, None));
    }

    #[test]
    fn host_name_is_the_one_uname_prints() {
        let out = std::process::Command::new("uname")
            .arg("-n")
            .output()
            .expect("run uname -n");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert_eq!(host_name(), printed.trim());
    }
}
