//! The process exit codes of `sluice`: one meaning each, so scripts and
//! schedulers can tell a failed run from a refused or mistyped one.

/// Done: every task was done (or there was nothing to do).
pub const DONE: u8 = 0;
/// An error stopped the command; stderr holds one line saying which.
pub const ERROR: u8 = 1;
/// The job ran to its end but tasks failed; the summary names their files.
/// Also `sluice run` stopped by a table rewrite (`on-rewrite = "fail"`):
/// data the job should train is left untrained.
pub const TASKS_FAILED: u8 = 2;
/// Another run or master holds the job's state or lock; nothing was changed.
pub const HELD: u8 = 3;
/// The command line or job file is wrong, found before anything runs: an
/// unknown flag, a bad value, a missing argument, a master URL without
/// `http://`, an unknown URL scheme, a column the dataset does not have, an
/// unknown key in a job file (`EX_USAGE` of sysexits.h).
pub const USAGE: u8 = 64;
/// Stopped by SIGINT before the job was over, after committing what was
/// acknowledged (128 + SIGINT, as shells report it; SIGTERM gives 143 for a
/// master, and the same 130 for `sluice train`).
pub const INTERRUPTED: u8 = 130;

/// The table of exit codes, as `sluice --help` ends.
pub const TABLE: &str = "\
Exit codes:
  0   done (every task done, or nothing to do)
  1   error (one line on stderr says which)
  2   tasks failed (the summary names their files), or sluice run stopped
      by a table rewrite (on-rewrite = \"fail\", the default)
  3   another run or master holds the job's state or lock
  64  usage error (unknown flag, bad value, missing argument, a master URL
      without http://, an unknown URL scheme or column, a job file's
      unknown key or bad value)
  130 stopped by SIGINT or SIGTERM before the job was over (sluice train;
      143 for a master stopped by SIGTERM; a stopped worker exits 0, or
      its --stopped-exit-code)";
