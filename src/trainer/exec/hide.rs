//! Trainers started where the job's token file is hidden from them: each
//! trainer's program is this binary again ([`HIDE_ARG`], see
//! [`crate::harden::hide_if_asked`]), which hides the file, then runs the
//! trainer. [`crate::harden::hide_from_trainers`] decides whether the kernel
//! allows it and says so here ([`set`]); every trainer started after asks
//! ([`hidden_from_trainers`]).

/// The first argument that makes the `sluice` binary hide files and run a
/// trainer: `HIDE_ARG N PATH... PROGRAM ARG...`.
pub const HIDE_ARG: &str = "--sluice-hide-paths";

/// A file the trainers this process starts must not read, and the program
/// (this binary) that hides it before it runs a trainer.
#[derive(Debug)]
pub struct Hidden {
    /// This binary.
    pub program: std::path::PathBuf,
    /// The file.
    pub path: std::path::PathBuf,
}

impl Hidden {
    /// The arguments that make [`Hidden::program`] hide the file, then run
    /// `command` (program and arguments).
    pub fn args<'a>(
        &'a self,
        command: &'a [&'a std::ffi::OsStr],
    ) -> impl Iterator<Item = &'a std::ffi::OsStr> {
        [
            std::ffi::OsStr::new(HIDE_ARG),
            std::ffi::OsStr::new("1"),
            self.path.as_os_str(),
        ]
        .into_iter()
        .chain(command.iter().copied())
    }
}

/// What [`crate::harden::hide_from_trainers`] hides, once the kernel was
/// found to allow it.
static HIDDEN: std::sync::OnceLock<std::sync::Arc<Hidden>> = std::sync::OnceLock::new();

/// Hides `hidden` from every trainer started from now on (once: a second
/// call changes nothing).
pub fn set(hidden: Hidden) {
    let _ = HIDDEN.set(std::sync::Arc::new(hidden));
}

/// What the trainers must not read, if anything is hidden from them.
pub fn hidden_from_trainers() -> Option<std::sync::Arc<Hidden>> {
    HIDDEN.get().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_paths_come_before_the_trainers_command() {
        let hidden = Hidden {
            program: "/bin/sluice".into(),
            path: "/run/token".into(),
        };
        let command = [std::ffi::OsStr::new("sh"), std::ffi::OsStr::new("-c")];
        let args: Vec<_> = hidden.args(&command).collect();
        assert_eq!(args, [HIDE_ARG, "1", "/run/token", "sh", "-c"]);
    }
}
