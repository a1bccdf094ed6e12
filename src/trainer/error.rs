//! The errors trainers and trainer factories report (the built-in models'
//! all-reduce's among them, which [`super::model`] re-exports).

use std::process::ExitStatus;

use arrow::datatypes::DataType;
use arrow::error::ArrowError;

/// Why a trainer could not be built or could not apply its batches.
#[derive(thiserror::Error, Debug)]
pub enum TrainerError {
    /// A label or feature column is not in the dataset.
    #[error("unknown column `{column}`; available columns: {available}")]
    UnknownColumn {
        /// The column asked for.
        column: String,
        /// The dataset's columns, comma separated.
        available: String,
    },
    /// A label or feature column cannot be read as numbers.
    #[error("column `{column}` has type {data_type}, which is not numeric (expected an integer, float, decimal or boolean, or a fixed-size list of those for features)")]
    NotNumeric {
        /// The column.
        column: String,
        /// Its Arrow type.
        data_type: DataType,
    },
    /// A model name other than `linear` or `logistic`.
    #[error("unknown model `{name}`; expected linear or logistic")]
    UnknownModel {
        /// The name given.
        name: String,
    },
    /// The model has no feature columns.
    #[error("no feature columns given for the {kind} model")]
    NoFeatures {
        /// `linear` or `logistic`.
        kind: &'static str,
    },
    /// The learning rate is not a positive finite number.
    #[error("learning rate must be a positive number, got {learning_rate}")]
    BadLearningRate {
        /// The rejected rate.
        learning_rate: f64,
    },
    /// The model to start from (`--init-model`) does not fit this model or is damaged.
    #[error("cannot start from the saved model: {reason}")]
    InitModel {
        /// What does not fit.
        reason: String,
    },
    /// The saved model's `state` is missing or is not a model's state.
    #[error("cannot start from the saved model: its `state` is missing or damaged: {cause}")]
    InitModelState {
        /// What the JSON decoder found.
        cause: serde_json::Error,
    },
    /// A model checkpoint in the job's state is not what sluice wrote.
    #[error("cannot start from the saved model: checkpoint {path} is damaged: {cause}")]
    CheckpointDamaged {
        /// The checkpoint file.
        path: String,
        /// What the JSON decoder found.
        cause: serde_json::Error,
    },
    /// `make` was called before `validate` told the factory the dataset schema.
    #[error("trainer factory used before the dataset schema was validated")]
    NotValidated,
    /// Two trainers of one factory were built for different device counts.
    #[error(
        "trainer for device {device} built for {devices} devices, but the factory runs {expected}"
    )]
    DeviceCountChanged {
        /// The device being built.
        device: usize,
        /// Device count passed now.
        devices: usize,
        /// Device count passed first.
        expected: usize,
    },
    /// A device number is not below the device count.
    #[error("device {device} out of range for {devices} devices")]
    DeviceOutOfRange {
        /// The device.
        device: usize,
        /// The device count.
        devices: usize,
    },
    /// The synchronous all-reduce refused a step.
    #[error("device {device} cannot take part in the model's {doing}")]
    AllReduce {
        /// The device.
        device: usize,
        /// What it was doing (`step`, `next step`).
        doing: &'static str,
        /// Why the all-reduce refused.
        #[source]
        source: AllReduceError,
    },
    /// `--device-ids` lists fewer ids than there are devices.
    #[error("no device id for device {device}: {given} device ids given for {devices} devices")]
    MissingDeviceId {
        /// The device lacking an id.
        device: usize,
        /// Number of ids given.
        given: usize,
        /// Device count.
        devices: usize,
    },
    /// `--hash-buckets` or `--fill-nulls` does not fit the data.
    #[error("{reason}")]
    Transform {
        /// What does not fit.
        reason: String,
    },
    /// The exec trainer's command is empty.
    #[error("exec trainer command is empty")]
    EmptyCommand,
    /// The window of batches in flight must hold at least one batch.
    #[error("exec trainer window must be at least 1 batch")]
    ZeroWindow,
    /// The exec trainer's command could not be spawned.
    #[error("cannot start exec trainer `{command}`: {cause}")]
    ExecStart {
        /// The command.
        command: String,
        /// Why spawning failed.
        cause: std::io::Error,
    },
    /// The shell could not find or run the command (exit status 126 or 127 before any ack).
    #[error("exec trainer `{command}` could not be run on device {device}: command not found or not executable ({status})")]
    ExecNotRunnable {
        /// The command.
        command: String,
        /// The device.
        device: usize,
        /// The shell's exit status.
        status: ExitStatus,
    },
    /// The exec trainer exited unsuccessfully after acknowledging every batch.
    #[error("exec trainer `{command}` on device {device} failed: {status}")]
    ExecFailed {
        /// The command.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// The device.
        device: usize,
    },
    /// Under `--lockstep`, an exec trainer died (or hung and was killed):
    /// its group cannot take a new process, so the run stops.
    #[error("exec trainer `{command}` on device {device} ended ({status}) with {unacknowledged} unacknowledged batches; under --lockstep the device processes form one torch.distributed group that cannot go on without it, so every process of the group was stopped (the unacknowledged rows are not committed: run again with the same --state to resume)")]
    LockstepDied {
        /// The command.
        command: String,
        /// The device.
        device: usize,
        /// How it ended.
        status: ExitStatus,
        /// Batches it held unacknowledged.
        unacknowledged: usize,
    },
    /// Under `--lockstep`, another trainer of the group failed first.
    #[error("device {device}'s trainer was stopped because a trainer of its --lockstep group failed ({reason})")]
    LockstepStopped {
        /// The device.
        device: usize,
        /// The first failure in the group.
        reason: String,
    },
    /// The process that started sluice (`--attach`) closed its pipes before
    /// its stream ended.
    #[error("the trainer that started sluice (--attach) stopped reading with {unacknowledged} batches unacknowledged; they are served again when the job resumes")]
    AttachedGone {
        /// Batches it held without acknowledging them.
        unacknowledged: usize,
    },
    /// The exec trainer kept dying.
    #[error("exec trainer `{command}` on device {device} died {deaths} times ({restarts} restarts allowed); last {status}")]
    RestartsExhausted {
        /// The command.
        command: String,
        /// The device.
        device: usize,
        /// How many times it died.
        deaths: u32,
        /// The restart limit.
        restarts: u32,
        /// The last exit status.
        status: ExitStatus,
    },
    /// The exec trainer kept holding batches without acknowledging them, and was killed
    /// each time, until no restart was left.
    #[error("exec trainer `{command}` on device {device} sent no ack for {timeout:?} (--trainer-timeout) with {unacknowledged} unacknowledged batches and was killed; it stopped {deaths} times ({restarts} restarts allowed)")]
    Unresponsive {
        /// The command.
        command: String,
        /// The device.
        device: usize,
        /// The trainer timeout.
        timeout: std::time::Duration,
        /// Batches of the device not acknowledged when the last process was killed.
        unacknowledged: usize,
        /// How many times a process of this device died or was killed.
        deaths: u32,
        /// The restart limit.
        restarts: u32,
    },
    /// The exec trainer wrote something other than `ack` on its ack pipe.
    #[error("exec trainer `{command}` on device {device} wrote {line:?} on its ack pipe; expected `ack`")]
    BadAck {
        /// The command.
        command: String,
        /// The device.
        device: usize,
        /// The offending line.
        line: String,
    },
    /// The exec trainer wrote a line longer than 4 KiB on its ack pipe.
    #[error("exec trainer `{command}` on device {device} wrote a line longer than 4 KiB on its ack pipe, starting {start:?}; expected `ack`")]
    LongAckLine {
        /// The command.
        command: String,
        /// The device.
        device: usize,
        /// At most the line's first 100 bytes, lossily as UTF-8.
        start: String,
    },
    /// The exec trainer acknowledged more batches than it was sent.
    #[error("exec trainer `{command}` on device {device} acknowledged a batch it was not sent")]
    ExtraAck {
        /// The command.
        command: String,
        /// The device.
        device: usize,
    },
    /// A batch's schema differs from the stream's schema.
    #[error("batch schema differs from the schema of the stream sent to the exec trainer on device {device}")]
    SchemaChanged {
        /// The device.
        device: usize,
    },
    /// A trainer was used after `finish`.
    #[error("trainer of device {device} used after finish")]
    Finished {
        /// The device.
        device: usize,
    },
    /// An I/O operation failed.
    #[error("{action}: {cause}")]
    Io {
        /// What was being done, e.g. "create the ack pipe for device 0".
        action: String,
        /// The failure.
        cause: std::io::Error,
    },
    /// Arrow could not convert or encode data.
    #[error("{action}: {cause}")]
    Arrow {
        /// What was being done, e.g. "cast column `x` to float64".
        action: String,
        /// The failure.
        cause: ArrowError,
    },
}

/// Why a thread could not take part in a step of an all-reduce
/// ([`super::model::AllReduce`]).
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum AllReduceError {
    /// The thread number is not below the thread count.
    #[error("all-reduce member {member} out of range for {members} members")]
    OutOfRange {
        /// The thread number.
        member: usize,
        /// The thread count.
        members: usize,
    },
    /// The thread already finished.
    #[error("all-reduce member {member} contributed after finishing")]
    Finished {
        /// The thread number.
        member: usize,
    },
}
