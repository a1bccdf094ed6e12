//! Every name of the exec trainer protocol, in one place: the environment a trainer
//! process starts with, its file descriptors, the lines it writes on the ack
//! descriptor, and the custom metadata keys of the batches it reads.
//!
//! The Python side (`sluice_trainer/_protocol.py`) spells the same names; a test
//! below reads that file and fails on any difference.
//!
//! The protocol (see "The exec trainer protocol" in the design notes): sluice starts
//! `sh -c CMD` once per device with the variables below and writes an Arrow IPC
//! stream to its stdin. One line [`ACK_LINE`] on descriptor [`ACK_FD`] acknowledges
//! the oldest batch not yet acknowledged, once it is applied.

use std::os::fd::RawFd;

/// The protocol's version, given to every trainer as [`VERSION_ENV`]. A change
/// that an older trainer library would misread raises it.
pub const VERSION: u32 = 1;

/// The protocol version sluice speaks (`SLUICE_PROTOCOL_VERSION`).
pub const VERSION_ENV: &str = "SLUICE_PROTOCOL_VERSION";
/// The 0-based index of the process's device (`SLUICE_DEVICE`).
pub const DEVICE_ENV: &str = "SLUICE_DEVICE";
/// The number of device processes on this machine (`SLUICE_DEVICES`).
pub const DEVICES_ENV: &str = "SLUICE_DEVICES";
/// The descriptor on which to acknowledge batches (`SLUICE_ACK_FD`).
pub const ACK_FD_ENV: &str = "SLUICE_ACK_FD";
/// The descriptor of the shared-memory file, when offered (`SLUICE_SHM_FD`).
pub const SHM_FD_ENV: &str = "SLUICE_SHM_FD";
/// `1` when a trainer may ask for lone record batch messages in shared memory
/// (`SLUICE_SHM_MESSAGES`).
pub const SHM_MESSAGES_ENV: &str = "SLUICE_SHM_MESSAGES";
/// The ID of the checkpoint a restarted trainer must load first
/// (`SLUICE_RESUME_CHECKPOINT`).
pub const RESUME_CHECKPOINT_ENV: &str = "SLUICE_RESUME_CHECKPOINT";
/// `1` when the device processes are one `torch.distributed` group
/// (`--lockstep`, `SLUICE_LOCKSTEP`).
pub const LOCKSTEP_ENV: &str = "SLUICE_LOCKSTEP";
/// The local directory of an exec trainer's checkpoint in a scheduled job
/// (`sluice run`): filled with the previous run's checkpoint before the
/// trainer starts, saved once the run succeeded (`SLUICE_CHECKPOINT_DIR`).
pub const CHECKPOINT_DIR_ENV: &str = "SLUICE_CHECKPOINT_DIR";
/// The job token in sluice's own environment, where neither `--token-file`
/// nor `--token-fd` gives it (`SLUICE_TOKEN`); never passed on to a trainer.
pub const TOKEN_ENV: &str = "SLUICE_TOKEN";
/// Variables of sluice's own environment that no trainer may see (secrets).
pub const SECRET_ENV: [&str; 1] = [TOKEN_ENV];

/// The trainer's descriptor for acknowledgements.
pub const ACK_FD: RawFd = 3;
/// The trainer's descriptor of the shared-memory file.
pub const SHM_FD: RawFd = 4;

/// Acknowledges the oldest batch not yet acknowledged.
pub const ACK_LINE: &str = "ack";
/// Declares that the trainer keeps checkpoints (once, before its first ack).
pub const CHECKPOINTS_LINE: &str = "checkpoints";
/// Starts `checkpoint ID`: a checkpoint holding every batch acknowledged so far.
pub const CHECKPOINT_PREFIX: &str = "checkpoint ";
/// Asks for batches in shared memory, as whole IPC streams.
pub const SHM_LINE: &str = "shm";
/// Asks for batches in shared memory, as lone record batch messages.
pub const SHM_MESSAGE_LINE: &str = "shm message";
/// The longest checkpoint ID, in characters of `[A-Za-z0-9._-]`.
pub const MAX_CHECKPOINT_ID: usize = 128;

/// The prefix of every key sluice puts in a batch's custom metadata.
pub const KEY_PREFIX: &str = "sluice.";
/// The batch's epoch, 0-based, on every batch (as the queue and the state count
/// epochs; lines and the status page show them from 1).
pub const EPOCH_KEY: &str = "sluice.epoch";
/// The batch's step in its epoch, 0-based, on every batch: under `--lockstep`
/// the step every device is at, otherwise the batch's place among the batches
/// this worker cut of its epoch in this run.
pub const STEP_KEY: &str = "sluice.step";
/// The steps of the batch's epoch on this process, on every batch when they
/// are known before the epoch starts (the row count of every task is, and
/// nothing decides at read time which rows or batches there are).
pub const EPOCH_STEPS_KEY: &str = "sluice.epoch_steps";
/// Why the steps of the batch's epoch are not known before it starts, on
/// every batch that has no [`EPOCH_STEPS_KEY`].
pub const EPOCH_STEPS_UNKNOWN_KEY: &str = "sluice.epoch_steps_unknown";
/// The rank of the world a global batch's slice is for, 0-based, on every
/// batch of a master's job of `--world-size` (`--global-batch-size`): the
/// slices of a step, in rank order, are the step's rows in order.
pub const RANK_KEY: &str = "sluice.rank";
/// Present on a process's last batch of an epoch (`--lockstep`).
pub const EPOCH_END_KEY: &str = "sluice.epoch_end";
/// The newest checkpoint ID that is complete (every device of its worker wrote it
/// and the master recorded it): older ones are never resumed from again, so the
/// trainer may prune them. Carried on the first batch after it became complete.
pub const CHECKPOINT_COMPLETE_KEY: &str = "sluice.checkpoint_complete";
/// The name of the source every row of the batch came from, in a job that
/// mixes several (`sluice train A B --weights ...`); absent when the batch
/// holds rows of more than one.
pub const SOURCE_KEY: &str = "sluice.source";
/// Schema metadata of an attached trainer's stream: the checkpoint to load.
pub const RESUME_KEY: &str = "sluice.resume_checkpoint";
/// A zero-row batch standing for "OFFSET LENGTH" of a whole stream in shared memory.
pub const SHM_KEY: &str = "sluice.shm";
/// A zero-row batch standing for "OFFSET LENGTH" of a lone message in shared memory.
pub const SHM_MESSAGE_KEY: &str = "sluice.shm_message";
/// Field metadata of a hashed column: its number of buckets (`--hash-buckets`).
pub const HASH_BUCKETS_KEY: &str = "sluice.hash_buckets";

/// Every name above with the name the Python library gives it, for the check that
/// the two agree.
#[cfg(test)]
pub const NAMES: &[(&str, &str)] = &[
    ("VERSION_ENV", VERSION_ENV),
    ("DEVICE_ENV", DEVICE_ENV),
    ("DEVICES_ENV", DEVICES_ENV),
    ("ACK_FD_ENV", ACK_FD_ENV),
    ("SHM_FD_ENV", SHM_FD_ENV),
    ("SHM_MESSAGES_ENV", SHM_MESSAGES_ENV),
    ("RESUME_ENV", RESUME_CHECKPOINT_ENV),
    ("LOCKSTEP_ENV", LOCKSTEP_ENV),
    ("CHECKPOINT_DIR_ENV", CHECKPOINT_DIR_ENV),
    ("TOKEN_ENV", TOKEN_ENV),
    ("ACK_LINE", ACK_LINE),
    ("CHECKPOINTS_LINE", CHECKPOINTS_LINE),
    ("CHECKPOINT_PREFIX", CHECKPOINT_PREFIX),
    ("SHM_LINE", SHM_LINE),
    ("SHM_MESSAGE_LINE", SHM_MESSAGE_LINE),
    ("EPOCH_KEY", EPOCH_KEY),
    ("STEP_KEY", STEP_KEY),
    ("EPOCH_END_KEY", EPOCH_END_KEY),
    ("RANK_KEY", RANK_KEY),
    ("EPOCH_STEPS_KEY", EPOCH_STEPS_KEY),
    ("EPOCH_STEPS_UNKNOWN_KEY", EPOCH_STEPS_UNKNOWN_KEY),
    ("CHECKPOINT_COMPLETE_KEY", CHECKPOINT_COMPLETE_KEY),
    ("SOURCE_KEY", SOURCE_KEY),
    ("RESUME_KEY", RESUME_KEY),
    ("SHM_KEY", SHM_KEY),
    ("SHM_MESSAGE_KEY", SHM_MESSAGE_KEY),
    ("HASH_BUCKETS_KEY", HASH_BUCKETS_KEY),
];

/// Every number of the protocol with the name the Python library gives it.
#[cfg(test)]
pub const NUMBERS: &[(&str, u64)] = &[
    ("VERSION", VERSION as u64),
    ("ACK_FD", ACK_FD as u64),
    ("SHM_FD", SHM_FD as u64),
    ("MAX_CHECKPOINT_ID", MAX_CHECKPOINT_ID as u64),
];

/// Whether `id` is a valid checkpoint ID: 1 to [`MAX_CHECKPOINT_ID`] characters of
/// `[A-Za-z0-9._-]`.
pub fn is_checkpoint_id(id: &str) -> bool {
    (1..=MAX_CHECKPOINT_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// `NAME = "value"` and `NAME = number` lines of the Python protocol module.
    fn python_names() -> BTreeMap<String, String> {
        let text = include_str!("../../../python/sluice_trainer/sluice_trainer/_protocol.py");
        text.lines()
            .filter_map(|line| {
                let (name, value) = line.split_once(" = ")?;
                let is_constant = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
                let value = value.trim();
                let value = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .or_else(|| value.parse::<i64>().is_ok().then_some(value))?;
                is_constant.then(|| (name.to_string(), value.to_string()))
            })
            .collect()
    }

    /// Every name and number of the protocol, as [`NAMES`] and [`NUMBERS`]
    /// hold them.
    fn sluice_names() -> BTreeMap<String, String> {
        let names = NAMES.iter().map(|(n, v)| (n.to_string(), v.to_string()));
        let numbers = NUMBERS.iter().map(|(n, v)| (n.to_string(), v.to_string()));
        names.chain(numbers).collect()
    }

    /// Both ways: every name sluice has, the Python library spells the same;
    /// every constant of the Python library is one sluice has.
    #[test]
    fn python_library_spells_every_name_as_sluice_does() {
        let (sluice, python) = (sluice_names(), python_names());
        let mut wrong = Vec::new();
        for (name, value) in &sluice {
            match python.get(name) {
                Some(v) if v == value => {}
                Some(v) => wrong.push(format!("{name} is {v:?} there, {value:?} in sluice")),
                None => wrong.push(format!("{name} = {value:?} is missing there")),
            }
        }
        for (name, value) in &python {
            if !sluice.contains_key(name) {
                wrong.push(format!(
                    "{name} = {value:?} is not a name of sluice's (NAMES, NUMBERS)"
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "sluice_trainer/_protocol.py: {}",
            wrong.join("; ")
        );
        for key in NAMES
            .iter()
            .map(|(_, v)| v)
            .filter(|v| v.starts_with("sluice."))
        {
            assert!(key.starts_with(KEY_PREFIX));
        }
        assert_eq!(SECRET_ENV, [TOKEN_ENV]);
    }

    #[test]
    fn checkpoint_ids() {
        assert!(is_checkpoint_id("step-1000.pt_2"));
        assert!(is_checkpoint_id(&"a".repeat(MAX_CHECKPOINT_ID)));
        assert!(!is_checkpoint_id(""));
        assert!(!is_checkpoint_id(&"a".repeat(MAX_CHECKPOINT_ID + 1)));
        assert!(!is_checkpoint_id("a b"));
        assert!(!is_checkpoint_id("a/b"));
    }
}
