//! `--exec CMD`: each device thread feeds an external process an Arrow IPC stream and
//! takes its `ack` lines as proof that batches were applied.
//!
//! Up to `window` batches are in flight per child. Each `ack` acknowledges the oldest
//! unacknowledged batch. When the child dies (its stdin breaks, its ack pipe closes with
//! batches in flight, or it exits), it is restarted, up to `max_restarts` times, and every
//! unacknowledged batch is sent again in order. A child that holds batches and sends no
//! ack for the trainer timeout is killed (its whole process group) and restarted the
//! same way; the restart counts against `max_restarts`.
//!
//! Under `--lockstep` the children are one `torch.distributed` group (see
//! [`super::lockstep`]): a child that dies or hangs is not restarted, and a
//! failure of any trainer of the group kills the children of all of them.

use std::collections::VecDeque;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arrow::datatypes::{Schema, SchemaRef};

use super::child::{AckEvent, Attach, Child, ChildSpec, SendError};
use super::lockstep::Group;
use crate::trainer::stats::{self, EpochLog, SharedLog};
use crate::trainer::{Batch, Mark, MarkKind, Trainer, TrainerError, TrainerFactory, TrainerReport};

pub use super::protocol::RESUME_CHECKPOINT_ENV;

/// Restarts allowed per device when none is given.
pub const DEFAULT_MAX_RESTARTS: u32 = 3;

/// Batches in flight per child when none is given.
pub const DEFAULT_WINDOW: usize = 4;

/// How long a child may hold batches without acknowledging any, when not told otherwise.
pub const DEFAULT_TRAINER_TIMEOUT: Duration = Duration::from_secs(600);

/// How often a blocked trainer checks whether its child exited.
const POLL: Duration = Duration::from_millis(100);

/// Builds one [`ExecTrainer`] per device thread, all running the same command.
pub struct ExecFactory {
    /// The shell command, run as `sh -c CMD`.
    pub command: String,
    /// `CUDA_VISIBLE_DEVICES` per device: device i gets `device_ids[i]`.
    pub device_ids: Option<Vec<String>>,
    /// How many times a device's child may be restarted after dying.
    pub max_restarts: u32,
    /// Batches in flight per child before `feed` blocks for an ack.
    pub window: usize,
    /// More environment variables for every child (e.g. `SLUICE_CHECKPOINT_DIR`).
    pub env: Vec<(String, String)>,
    /// How long a child may hold batches without acknowledging any before it is killed
    /// and restarted; `None`: no limit.
    pub timeout: Option<Duration>,
    /// Under `--lockstep`: the group the children form.
    group: Option<Arc<Group>>,
    /// `--attach`: the trainer is the process that started sluice.
    attach: Option<Attach>,
    schema: Mutex<Option<SchemaRef>>,
    log: SharedLog,
}

impl ExecFactory {
    /// A factory running `command` with the default restarts, window and timeout, no
    /// device ids.
    pub fn new(command: impl Into<String>) -> Self {
        ExecFactory {
            command: command.into(),
            device_ids: None,
            max_restarts: DEFAULT_MAX_RESTARTS,
            window: DEFAULT_WINDOW,
            env: Vec::new(),
            timeout: Some(DEFAULT_TRAINER_TIMEOUT),
            group: None,
            attach: None,
            schema: Mutex::new(None),
            log: Arc::new(Mutex::new(EpochLog::rows_only())),
        }
    }

    /// Sets `CUDA_VISIBLE_DEVICES` per device.
    pub fn with_device_ids(mut self, device_ids: Vec<String>) -> Self {
        self.device_ids = Some(device_ids);
        self
    }

    /// Sets how many restarts each device allows.
    pub fn with_max_restarts(mut self, max_restarts: u32) -> Self {
        self.max_restarts = max_restarts;
        self
    }

    /// Sets an environment variable of every child.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets how long a child may hold batches without acknowledging any (`None`: no limit).
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Makes the children one `torch.distributed` group (`--lockstep`): each
    /// gets `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`,
    /// `MASTER_ADDR` and `MASTER_PORT` (a port free on this machine), and
    /// `SLUICE_LOCKSTEP=1`; batches carry their epoch and step; a child that
    /// dies is not restarted and stops the whole group.
    pub fn with_lockstep(mut self) -> Result<Self, TrainerError> {
        let group = Group::new().map_err(|source| TrainerError::Io {
            action: "pick a free port for the lockstep group".to_string(),
            cause: source,
        })?;
        self.group = Some(Arc::new(group));
        Ok(self)
    }

    /// Makes the process that started sluice the trainer (`--attach`): it is
    /// fed through these descriptors, and never restarted.
    pub fn with_attach(mut self, attach: Attach) -> Self {
        self.attach = Some(attach);
        self.max_restarts = 0;
        self
    }

    /// Starts the trainer of `device` (what [`TrainerFactory::make`] boxes).
    pub fn start(&self, device: usize, devices: usize) -> Result<ExecTrainer, TrainerError> {
        if device >= devices {
            return Err(TrainerError::DeviceOutOfRange { device, devices });
        }
        if self.window == 0 {
            return Err(TrainerError::ZeroWindow);
        }
        let spec = ChildSpec {
            command: self.command.clone(),
            device,
            devices,
            device_id: self.device_id(device, devices)?,
            env: self.env.clone(),
            timeout: self.timeout,
            group: self.group.clone(),
            window: self.window,
            attach: self.attach,
        };
        let child = match self.attach {
            Some(attach) => Child::attach(&spec, attach)?,
            None => Child::spawn(&spec)?,
        };
        Ok(ExecTrainer {
            spec,
            max_restarts: self.max_restarts,
            window: self.window,
            schema: self.schema_lock().clone(),
            child,
            in_flight: VecDeque::new(),
            sent: 0,
            acked: Vec::new(),
            acked_total: 0,
            marks: Vec::new(),
            declared: false,
            // A resumed job's trainers start from this checkpoint: a child
            // that dies before writing one of its own starts from it again.
            last_checkpoint: self
                .env
                .iter()
                .rev()
                .find(|(key, _)| key == RESUME_CHECKPOINT_ENV)
                .map(|(_, id)| id.clone()),
            deaths: 0,
            closing: false,
            exit: None,
            log: Arc::clone(&self.log),
        })
    }

    fn device_id(&self, device: usize, devices: usize) -> Result<Option<String>, TrainerError> {
        let Some(ids) = &self.device_ids else {
            return Ok(None);
        };
        let id = ids.get(device).ok_or(TrainerError::MissingDeviceId {
            device,
            given: ids.len(),
            devices,
        })?;
        Ok(Some(id.clone()))
    }

    fn schema_lock(&self) -> MutexGuard<'_, Option<SchemaRef>> {
        self.schema
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl TrainerFactory for ExecFactory {
    fn validate(&self, schema: &Schema) -> Result<(), TrainerError> {
        if self.command.trim().is_empty() {
            return Err(TrainerError::EmptyCommand);
        }
        if self.window == 0 {
            return Err(TrainerError::ZeroWindow);
        }
        *self.schema_lock() = Some(Arc::new(schema.clone()));
        Ok(())
    }

    fn make(&self, device: usize, devices: usize) -> Result<Box<dyn Trainer>, TrainerError> {
        Ok(Box::new(self.start(device, devices)?))
    }

    fn report(&self) -> TrainerReport {
        TrainerReport {
            epochs: stats::stats(&self.log),
            model: None,
        }
    }
}

/// Feeds one device's child process and restarts it when it dies.
pub struct ExecTrainer {
    spec: ChildSpec,
    max_restarts: u32,
    window: usize,
    /// Schema for an empty stream (from `validate`, then from the batches).
    schema: Option<SchemaRef>,
    child: Child,
    /// Unacknowledged batches, oldest first.
    in_flight: VecDeque<Batch>,
    /// How many of `in_flight` the current child was sent.
    sent: usize,
    /// Seqs acknowledged since `feed`, `flush` or `finish` last returned.
    acked: Vec<u64>,
    /// Acknowledgements since the trainer was built.
    acked_total: u64,
    /// What the children said besides `ack`, not yet taken.
    marks: Vec<Mark>,
    /// A child wrote `checkpoints`.
    declared: bool,
    /// The ID of this device's last checkpoint: where a restarted child resumes.
    last_checkpoint: Option<String>,
    /// How many times a child died and was (or was to be) restarted.
    deaths: u32,
    /// `finish` was called: the stream ends after the last batch.
    closing: bool,
    /// Exit status of a child that exited during `finish` with everything acknowledged.
    exit: Option<ExitStatus>,
    log: SharedLog,
}

impl ExecTrainer {
    /// How many times the child was restarted.
    #[cfg(test)]
    pub fn restarts(&self) -> u32 {
        self.deaths
    }

    /// Batches sent but not yet acknowledged.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Takes the acks that are ready without blocking; revives a dead child.
    fn poll(&mut self) -> Result<(), TrainerError> {
        while let Some(event) = self.child.try_event() {
            self.handle(event)?;
        }
        if !self.in_flight.is_empty() && self.child.is_gone()? {
            self.revive(Death::Exited)?;
        } else if self.unresponsive() {
            self.revive(self.unresponsive_death())?;
        }
        Ok(())
    }

    /// Blocks until at least one more batch is acknowledged, reviving the child as needed.
    fn wait_for_ack(&mut self) -> Result<(), TrainerError> {
        let target = self.in_flight.len();
        while !self.in_flight.is_empty() && self.in_flight.len() >= target {
            self.check_group()?;
            if self.child.is_gone()? {
                self.revive(Death::Exited)?;
            } else if self.unresponsive() {
                self.revive(self.unresponsive_death())?;
            } else if let Some(event) = self.child.next_event(POLL) {
                self.handle(event)?;
            }
        }
        Ok(())
    }

    /// Blocks until every batch fed so far is acknowledged.
    fn wait_for_all(&mut self) -> Result<(), TrainerError> {
        while !self.in_flight.is_empty() {
            self.wait_for_ack()?;
        }
        Ok(())
    }

    /// Whether the child holds batches and has sent no ack for the trainer timeout.
    fn unresponsive(&self) -> bool {
        let timeout = self.spec.timeout;
        self.sent > 0 && timeout.is_some_and(|t| self.child.quiet_for() >= t)
    }

    fn handle(&mut self, event: AckEvent) -> Result<(), TrainerError> {
        match event {
            AckEvent::Ack => self.on_ack(),
            AckEvent::Declared => {
                if !self.declared && self.acked_total > 0 {
                    return Err(TrainerError::BadAck {
                        command: self.spec.command.clone(),
                        device: self.spec.device,
                        line: "checkpoints (it must come before the first ack)".to_string(),
                    });
                }
                if !self.declared {
                    self.declared = true;
                    self.mark(MarkKind::Declared);
                }
                Ok(())
            }
            AckEvent::Checkpoint(id) => {
                if !self.declared {
                    return Err(TrainerError::BadAck {
                        command: self.spec.command.clone(),
                        device: self.spec.device,
                        line: format!("checkpoint {id} (without a first line `checkpoints`)"),
                    });
                }
                self.last_checkpoint = Some(id.clone());
                self.mark(MarkKind::Checkpoint(id));
                Ok(())
            }
            AckEvent::Eof => Ok(()),
            AckEvent::Line(line) => Err(TrainerError::BadAck {
                command: self.spec.command.clone(),
                device: self.spec.device,
                line,
            }),
            AckEvent::TooLong(start) => Err(TrainerError::LongAckLine {
                command: self.spec.command.clone(),
                device: self.spec.device,
                start,
            }),
            AckEvent::Failed(source) => Err(TrainerError::Io {
                action: format!("read acks of exec trainer on device {}", self.spec.device),
                cause: source,
            }),
        }
    }

    fn on_ack(&mut self) -> Result<(), TrainerError> {
        let batch = match self.in_flight.pop_front() {
            Some(batch) if self.sent > 0 => batch,
            _ => {
                return Err(TrainerError::ExtraAck {
                    command: self.spec.command.clone(),
                    device: self.spec.device,
                })
            }
        };
        self.sent -= 1;
        stats::add_rows(&self.log, batch.epoch, batch.data.num_rows() as u64);
        self.acked.push(batch.seq);
        self.acked_total += 1;
        Ok(())
    }

    fn mark(&mut self, kind: MarkKind) {
        self.marks.push(Mark {
            after: self.acked_total,
            kind,
        });
    }

    /// Sends what the child has not been sent yet; revives it if its stdin broke.
    fn send_pending(&mut self) -> Result<(), TrainerError> {
        match self.write_pending() {
            Ok(()) => Ok(()),
            Err(SendError::Broken) => self.revive(Death::Exited),
            Err(SendError::TimedOut) => self.revive(self.unresponsive_death()),
            Err(SendError::Aborted) => self.check_group(),
            Err(SendError::Fatal(error)) => Err(error),
        }
    }

    /// Writes the unsent batches, then ends the stream if finishing.
    fn write_pending(&mut self) -> Result<(), SendError> {
        while let Some(batch) = self.in_flight.get(self.sent) {
            self.check_schema(batch).map_err(SendError::Fatal)?;
            if self.sent == 0 {
                self.child.hold();
            }
            self.child.write(&batch.data)?;
            self.sent += 1;
        }
        if self.closing {
            self.child.close_input(self.schema.as_ref())?;
        }
        Ok(())
    }

    fn check_schema(&self, batch: &Batch) -> Result<(), TrainerError> {
        let Some(stream) = self.child.stream_schema() else {
            return Ok(());
        };
        let types = |schema: &Schema| -> Vec<_> {
            let fields = schema.fields().iter();
            fields.map(|f| f.data_type().clone()).collect()
        };
        if types(stream) == types(&batch.data.schema()) {
            return Ok(());
        }
        Err(TrainerError::SchemaChanged {
            device: self.spec.device,
        })
    }

    /// How the current child, unresponsive, is to be reported.
    fn unresponsive_death(&self) -> Death {
        Death::Unresponsive {
            timeout: self.spec.timeout.unwrap_or_default(),
            unacknowledged: self.in_flight.len(),
        }
    }

    /// The child died, is dying or is unresponsive (then it is killed first): reaps it,
    /// takes its last acks, then restarts it and resends every unacknowledged batch —
    /// unless it exited during `finish` with everything acknowledged, which leaves its
    /// status for `finish` to judge.
    fn revive(&mut self, mut death: Death) -> Result<(), TrainerError> {
        loop {
            if let Death::Unresponsive {
                timeout,
                unacknowledged,
            } = death
            {
                tracing::warn!(
                    device = self.spec.device,
                    command = %self.spec.command,
                    "exec trainer on device {} sent no ack for {timeout:?} (--trainer-timeout) \
                     with {unacknowledged} unacknowledged batches; killing its process group",
                    self.spec.device,
                );
                self.child.kill();
            }
            let status = self.child.stop()?;
            for event in self.child.remaining_events() {
                self.handle(event)?;
            }
            if self.closing && self.in_flight.is_empty() {
                self.exit = Some(status);
                return Ok(());
            }
            self.restart(status, death)?;
            death = match self.write_pending() {
                Ok(()) => return Ok(()),
                Err(SendError::Broken) => Death::Exited,
                Err(SendError::TimedOut) => self.unresponsive_death(),
                Err(SendError::Aborted) => return self.check_group(),
                Err(SendError::Fatal(error)) => return Err(error),
            };
        }
    }

    /// Replaces a dead child by a new one, unless it could not run or died too often.
    fn restart(&mut self, status: ExitStatus, death: Death) -> Result<(), TrainerError> {
        self.check_runnable(status)?;
        self.deaths += 1;
        if self.spec.attach.is_some() {
            return Err(TrainerError::AttachedGone {
                unacknowledged: self.in_flight.len(),
            });
        }
        if self.spec.group.is_some() {
            // A torch.distributed group cannot take a new process in the
            // place of one that died: the run stops (resume it with --state).
            return Err(TrainerError::LockstepDied {
                command: self.spec.command.clone(),
                device: self.spec.device,
                status,
                unacknowledged: self.in_flight.len(),
            });
        }
        if self.deaths > self.max_restarts {
            if let Death::Unresponsive {
                timeout,
                unacknowledged,
            } = death
            {
                return Err(TrainerError::Unresponsive {
                    command: self.spec.command.clone(),
                    device: self.spec.device,
                    timeout,
                    unacknowledged,
                    deaths: self.deaths,
                    restarts: self.max_restarts,
                });
            }
            return Err(TrainerError::RestartsExhausted {
                command: self.spec.command.clone(),
                device: self.spec.device,
                deaths: self.deaths,
                restarts: self.max_restarts,
                status,
            });
        }
        tracing::warn!(
            device = self.spec.device,
            command = %self.spec.command,
            %status,
            restart = self.deaths,
            max_restarts = self.max_restarts,
            unacknowledged = self.in_flight.len(),
            "exec trainer exited; restarting it and resending unacknowledged batches"
        );
        if self.declared {
            // The new child resumes from this device's last checkpoint; the
            // rows acknowledged after it are served again (see `Mark`).
            self.spec
                .env
                .retain(|(key, _)| key != RESUME_CHECKPOINT_ENV);
            if let Some(id) = &self.last_checkpoint {
                self.spec
                    .env
                    .push((RESUME_CHECKPOINT_ENV.to_string(), id.clone()));
            }
            self.mark(MarkKind::Restarted);
        }
        self.child = Child::spawn(&self.spec)?;
        self.sent = 0;
        Ok(())
    }

    /// Exit status 126 or 127 before any ack: the shell could not run the command.
    fn check_runnable(&self, status: ExitStatus) -> Result<(), TrainerError> {
        if self.child.acks > 0 || !matches!(status.code(), Some(126 | 127)) {
            return Ok(());
        }
        Err(TrainerError::ExecNotRunnable {
            command: self.spec.command.clone(),
            device: self.spec.device,
            status,
        })
    }

    fn take_acked(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.acked)
    }

    /// Under `--lockstep`: fails (killing the child's process group) once
    /// another trainer of the group failed.
    fn check_group(&mut self) -> Result<(), TrainerError> {
        let Some(reason) = self.spec.group.as_ref().and_then(|g| g.failure()) else {
            return Ok(());
        };
        self.child.kill();
        Err(TrainerError::LockstepStopped {
            device: self.spec.device,
            reason,
        })
    }

    /// Under `--lockstep`, a failure stops the whole group.
    fn guard<T>(&self, result: Result<T, TrainerError>) -> Result<T, TrainerError> {
        if let (Err(error), Some(group)) = (&result, &self.spec.group) {
            if !matches!(error, TrainerError::LockstepStopped { .. }) {
                group.fail(self.spec.device, error);
            }
        }
        result
    }

    /// Waits for the child to exit; under `--lockstep` it is killed once
    /// another trainer of the group failed (it may wait for it forever).
    fn wait_exit(&mut self) -> Result<ExitStatus, TrainerError> {
        if self.spec.group.is_none() {
            return self.child.wait();
        }
        loop {
            if let Some(status) = self.child.try_exit()? {
                return Ok(status);
            }
            self.check_group()?;
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn check_open(&self) -> Result<(), TrainerError> {
        if self.closing {
            return Err(TrainerError::Finished {
                device: self.spec.device,
            });
        }
        Ok(())
    }
}

impl Trainer for ExecTrainer {
    fn feed(&mut self, batch: Batch) -> Result<Vec<u64>, TrainerError> {
        let result = self.feed_batch(batch);
        self.guard(result)
    }

    fn flush(&mut self) -> Result<Vec<u64>, TrainerError> {
        let result = self.wait_for_all().map(|()| self.take_acked());
        self.guard(result)
    }

    fn make_room(&mut self) -> Result<Vec<u64>, TrainerError> {
        let result = self.room();
        self.guard(result)
    }

    fn flush_some(&mut self) -> Result<(Vec<u64>, bool), TrainerError> {
        let result = self.some();
        self.guard(result)
    }

    fn take_marks(&mut self) -> Vec<Mark> {
        std::mem::take(&mut self.marks)
    }

    fn finish(&mut self) -> Result<Vec<u64>, TrainerError> {
        let result = self.end();
        self.guard(result)
    }
}

impl ExecTrainer {
    fn feed_batch(&mut self, batch: Batch) -> Result<Vec<u64>, TrainerError> {
        self.check_open()?;
        self.poll()?;
        while self.in_flight.len() >= self.window {
            self.wait_for_ack()?;
        }
        self.schema = Some(batch.data.schema());
        self.in_flight.push_back(batch);
        self.send_pending()?;
        self.poll()?;
        Ok(self.take_acked())
    }

    fn room(&mut self) -> Result<Vec<u64>, TrainerError> {
        self.check_open()?;
        self.poll()?;
        while self.in_flight.len() >= self.window {
            self.wait_for_ack()?;
        }
        Ok(self.take_acked())
    }

    fn some(&mut self) -> Result<(Vec<u64>, bool), TrainerError> {
        self.poll()?;
        if self.acked.is_empty() && !self.in_flight.is_empty() {
            self.wait_for_ack()?;
        }
        Ok((self.take_acked(), self.in_flight.is_empty()))
    }

    fn end(&mut self) -> Result<Vec<u64>, TrainerError> {
        if !self.closing {
            self.closing = true;
            self.send_pending()?;
        }
        self.wait_for_all()?;
        let status = match self.exit.take() {
            Some(status) => status,
            None => self.wait_exit()?,
        };
        for event in self.child.take_late() {
            self.handle(event)?;
        }
        // Lines after the last ack (the final `checkpoint ID`) count too.
        for event in self.child.remaining_events() {
            self.handle(event)?;
        }
        if !status.success() {
            self.check_runnable(status)?;
            return Err(TrainerError::ExecFailed {
                command: self.spec.command.clone(),
                status,
                device: self.spec.device,
            });
        }
        Ok(self.take_acked())
    }
}

/// Why a child is replaced.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// It exited or stopped reading or acknowledging on its own.
    Exited,
    /// It held batches and sent no ack for `timeout`: it is killed.
    Unresponsive {
        /// The trainer timeout.
        timeout: Duration,
        /// Batches of the device not acknowledged (served again to the next process).
        unacknowledged: usize,
    },
}

#[cfg(test)]
#[path = "exec_tests.rs"]
mod tests;
