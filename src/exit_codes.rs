//! The process exit codes of `sluice`, one meaning each (which error decides
//! which code is [`crate::exit`]'s to say). A leaf: any module may name a
//! code, a default of an option included, without importing the errors
//! `exit` reads. `sluice_trainer.airflow` repeats them; a test compares the
//! two.

/// Done: every task was done (or there was nothing to do).
pub const DONE: u8 = 0;
/// An error stopped the command; stderr holds one line saying which.
pub const ERROR: u8 = 1;
/// The job ran to its end but tasks failed; the summary names their files.
/// Also `sluice run` stopped by a table rewrite (`on-rewrite = "fail"`):
/// data the job should train is left untrained; and trainers that keep
/// checkpoints and end their streams twice without a final one.
pub const TASKS_FAILED: u8 = 2;
/// Another run or master holds the job's state or lock; nothing was changed.
pub const HELD: u8 = 3;
/// The command line or job file is wrong, found before anything runs: an
/// unknown flag, a bad value, a missing argument, a master URL without
/// `http://`, an unknown URL scheme, a column the dataset does not have, an
/// unknown key in a job file, a malformed setting of a store (an endpoint
/// without a scheme, a region with a space) (`EX_USAGE` of sysexits.h).
pub const USAGE: u8 = 64;
/// Stopped by SIGINT or SIGTERM before the job was over, after committing
/// what was acknowledged (128 + SIGINT, as shells report it), whatever the
/// command: one code a supervisor tells from a failure, resumable with the
/// same `--state`.
pub const INTERRUPTED: u8 = 130;

/// The table of exit codes, as `sluice --help` ends.
pub const TABLE: &str = "\
Exit codes:
  0   done (every task done, or nothing to do)
  1   error (one line on stderr says which)
  2   tasks failed (the summary names their files), sluice run stopped
      by a table rewrite (on-rewrite = \"fail\", the default), or trainers
      that keep checkpoints ended their streams twice without a final
      `checkpoint ID`
  3   another run or master holds the job's state or lock
  64  usage error (unknown flag, bad value, missing argument, a master URL
      without http://, an unknown URL scheme or column, a job file's
      unknown key or bad value, a malformed store setting such as
      AWS_ENDPOINT_URL or HTTPS_PROXY)
  130 stopped by SIGINT or SIGTERM before the job was over (any command; a
      worker exits with its --stopped-exit-code when given one)";

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    /// `NAME: u8 = code` of each `pub const` line of `text` (this file).
    fn sluice_codes(text: &str) -> BTreeMap<String, u8> {
        text.lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("pub const ")?;
                let (name, value) = rest.split_once(": u8 = ")?;
                let value = value.strip_suffix(';')?.parse().ok()?;
                Some((name.to_string(), value))
            })
            .collect()
    }

    /// `NAME = code` of each `EXIT_NAME = code` line of `sluice_trainer.airflow`.
    fn airflow_codes(text: &str) -> BTreeMap<String, u8> {
        text.lines()
            .filter_map(|line| {
                let (name, value) = line.strip_prefix("EXIT_")?.split_once(" = ")?;
                Some((name.to_string(), value.trim().parse().ok()?))
            })
            .collect()
    }

    /// Both ways: every code sluice has, the Airflow operator names alike;
    /// every code the operator names is one sluice has.
    #[test]
    fn the_airflow_operator_knows_every_exit_code_and_no_other() {
        let sluice = sluice_codes(include_str!("exit_codes.rs"));
        let airflow = airflow_codes(include_str!(
            "../python/sluice_trainer/sluice_trainer/airflow.py"
        ));
        assert_eq!(
            sluice.get("INTERRUPTED"),
            Some(&super::INTERRUPTED),
            "{sluice:?}"
        );
        let mut wrong = Vec::new();
        for (name, code) in &sluice {
            match airflow.get(name) {
                Some(c) if c == code => {}
                Some(c) => wrong.push(format!("EXIT_{name} is {c} there, {code} in sluice")),
                None => wrong.push(format!("EXIT_{name} = {code} is missing there")),
            }
        }
        for (name, code) in &airflow {
            if !sluice.contains_key(name) {
                wrong.push(format!("EXIT_{name} = {code} is no exit code of sluice's"));
            }
        }
        assert!(
            wrong.is_empty(),
            "sluice_trainer/airflow.py: {}",
            wrong.join("; ")
        );
    }
}
