//! One exec trainer process: `sh -c CMD` fed an Arrow IPC stream on stdin, acknowledging
//! batches on a pipe at file descriptor 3 that a reader thread turns into [`AckEvent`]s.
//!
//! Trainers die with sluice, and so does everything they start. Each trainer is forked
//! by its own [`watcher`](super::watcher), a process of sluice's that is the trainer's parent
//! and a child subreaper: it reads a pipe only sluice holds open (the lifeline), and once
//! the trainer exits, sluice lets it go (closes the lifeline) or sluice ends in any way
//! (an error, a panic, `SIGKILL`: the kernel closes the pipe), it kills the trainer's
//! process group and every descendant it adopted, `setsid` ones included. The watcher's
//! exit status is the trainer's.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, ErrorKind, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child as Process, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use arrow::datatypes::{Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::ipc::{self, TaggedStreamWriter};
use super::line::{read_line, LineError, MAX_LINE};
use super::lockstep::Group;
use super::protocol::{
    self, ACK_FD, ACK_FD_ENV, CHECKPOINTS_LINE, CHECKPOINT_PREFIX, DEVICES_ENV, DEVICE_ENV,
    RESUME_KEY, SECRET_ENV, SHM_FD, SHM_FD_ENV, SHM_LINE, SHM_MESSAGES_ENV, SHM_MESSAGE_LINE,
};
use super::shm::{Asked, Form, SharedBatches};
use super::watcher;
use crate::sys;
use crate::trainer::TrainerError;

/// How long a child that stopped reading or closed its ack pipe may take to exit before
/// it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// How long to wait for the ack pipe to close once the child exited (a grandchild may
/// still hold it).
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// How long a blocked write to the child's stdin waits before checking the trainer timeout.
const WRITE_POLL: Duration = Duration::from_millis(100);

/// What the reader thread saw on the ack pipe.
#[derive(Debug)]
pub(crate) enum AckEvent {
    /// One `ack` line.
    Ack,
    /// The line `checkpoints`.
    Declared,
    /// A line `checkpoint ID`.
    Checkpoint(String),
    /// A line other than `ack`.
    Line(String),
    /// A line longer than [`MAX_LINE`]: its first 100 bytes (nothing more is read).
    TooLong(String),
    /// Reading failed.
    Failed(io::Error),
    /// Every writer closed the pipe.
    Eof,
}

/// Why a batch could not be written.
pub(crate) enum SendError {
    /// The child no longer reads its stdin: it died or is dying.
    Broken,
    /// The child held unacknowledged batches and sent no ack for the trainer timeout
    /// while the write waited for it to read.
    TimedOut,
    /// Another trainer of the child's lockstep group failed.
    Aborted,
    /// Anything else.
    Fatal(TrainerError),
}

/// How to start the process of one device.
#[derive(Clone, Debug)]
pub(crate) struct ChildSpec {
    /// The shell command.
    pub command: String,
    /// 0-based device number.
    pub device: usize,
    /// Number of devices.
    pub devices: usize,
    /// Value for `CUDA_VISIBLE_DEVICES`, if any.
    pub device_id: Option<String>,
    /// More environment variables for the child.
    pub env: Vec<(String, String)>,
    /// How long the child may hold batches without acknowledging any; `None`: forever.
    pub timeout: Option<Duration>,
    /// The `--lockstep` group of the child (rank variables, per-batch metadata).
    pub group: Option<Arc<Group>>,
    /// Batches in flight at most: the slots of its shared memory.
    pub window: usize,
    /// The trainer is the process that started sluice (`--attach`): its
    /// descriptors, in place of a process to start.
    pub attach: Option<Attach>,
}

/// The descriptors of `--attach DATA_FD,ACK_FD[,SHM_FD]`: sluice is the child
/// of its trainer (`sluice_trainer.Dataset`), writes the Arrow stream to
/// `DATA_FD`, reads the ack lines from `ACK_FD`, and writes batches into the
/// memory file `SHM_FD` once the trainer asks (`shm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attach {
    /// The write end of the stream's pipe.
    pub data: RawFd,
    /// The read end of the ack pipe.
    pub ack: RawFd,
    /// A memory file the trainer maps.
    pub shm: Option<RawFd>,
}

impl std::str::FromStr for Attach {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fds: Vec<RawFd> = s
            .split(',')
            .map(|part| part.trim().parse::<RawFd>())
            .collect::<Result<_, _>>()
            .map_err(|_| format!("`{s}` is not DATA_FD,ACK_FD[,SHM_FD] (descriptor numbers)"))?;
        match fds[..] {
            [data, ack] if data > 2 && ack > 2 => Ok(Attach {
                data,
                ack,
                shm: None,
            }),
            [data, ack, shm] if data > 2 && ack > 2 && shm > 2 => Ok(Attach {
                data,
                ack,
                shm: Some(shm),
            }),
            _ => Err(format!(
                "`{s}` is not DATA_FD,ACK_FD[,SHM_FD] (two or three descriptors above 2)"
            )),
        }
    }
}

impl std::fmt::Display for Attach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.data, self.ack)?;
        if let Some(shm) = self.shm {
            write!(f, ",{shm}")?;
        }
        Ok(())
    }
}

/// Under `--attach`: sluice ends (SIGKILL) when the process that started it
/// does, however it ends. Called once, early, by the thread that stays.
pub fn die_with_parent() -> io::Result<()> {
    sys::process::die_with_parent()?;
    // The parent may have gone before the call: then sluice was adopted.
    if sys::process::adopted_by_init() {
        return Err(io::Error::other("the process that started sluice is gone"));
    }
    Ok(())
}

/// Takes ownership of a descriptor named on the command line, checking that
/// it is open; made close-on-exec.
fn adopt(fd: RawFd, what: &str) -> io::Result<OwnedFd> {
    sys::fd::adopt(fd).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("--attach {what} descriptor {fd}: {error}"),
        )
    })
}

/// When the child last showed life: its last ack, or the moment it was handed a batch
/// while holding none. Shared by the trainer, the ack reader thread and the stdin writer.
struct Quiet {
    start: Instant,
    /// Milliseconds from `start` to the last sign of life.
    last: AtomicU64,
}

impl Quiet {
    fn new() -> Quiet {
        Quiet {
            start: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    /// Records a sign of life now.
    fn touch(&self) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.fetch_max(now, Ordering::Relaxed);
    }

    /// Time since the last sign of life.
    fn quiet_for(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

/// The child's stdin, non-blocking: a write that must wait for the child to read gives
/// up with [`ErrorKind::TimedOut`] once the child has been quiet for the timeout.
struct Pipe {
    stdin: File,
    quiet: Arc<Quiet>,
    timeout: Option<Duration>,
    group: Option<Arc<Group>>,
}

impl Pipe {
    fn new(
        stdin: File,
        quiet: Arc<Quiet>,
        timeout: Option<Duration>,
        group: Option<Arc<Group>>,
    ) -> io::Result<Pipe> {
        sys::fd::set_nonblocking(&stdin)?;
        Ok(Pipe {
            stdin,
            quiet,
            timeout,
            group,
        })
    }

    /// Waits (a while) until the pipe takes more, or fails once the child timed out.
    fn wait_writable(&self) -> io::Result<()> {
        if self.group.as_ref().is_some_and(|g| g.failure().is_some()) {
            return Err(io::Error::new(
                ErrorKind::ConnectionAborted,
                "another trainer of the lockstep group failed",
            ));
        }
        if self.timeout.is_some_and(|t| self.quiet.quiet_for() >= t) {
            return Err(io::Error::new(
                ErrorKind::TimedOut,
                "the exec trainer stopped reading and acknowledging",
            ));
        }
        sys::fd::wait_writable(&self.stdin, WRITE_POLL)
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match self.stdin.write(buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.wait_writable()?,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                done => return done,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The stdin of the child: raw until the first batch fixes the stream's schema.
enum Input {
    Raw(Pipe),
    Stream { writer: Writer, schema: SchemaRef },
    Closed,
}

/// The stream's writer: each batch message carries the batch's `sluice.*` metadata
/// (`--lockstep` steps, shared memory regions); plain readers ignore it.
type Writer = Box<TaggedStreamWriter<BufWriter<Pipe>>>;

/// A running (or exited) child process.
pub(crate) struct Child {
    /// The trainer's watcher, which exits as the trainer did once all is gone;
    /// `None` when the trainer is the process that started sluice (`--attach`).
    process: Option<Process>,
    /// Under `--attach`: what the trainer wrote after its stream ended.
    late: Vec<AckEvent>,
    /// Under `--attach`: the checkpoint the trainer resumes from, told in the
    /// stream's schema metadata (`sluice.resume_checkpoint`), since no
    /// environment reaches a parent.
    resume: Option<String>,
    input: Input,
    events: Receiver<AckEvent>,
    quiet: Arc<Quiet>,
    /// `ack` lines received from this process.
    pub acks: u64,
    /// The ack pipe reached end of file.
    pub ack_closed: bool,
    reaped: bool,
    /// The child's memory file, when one could be made.
    shared: Option<SharedBatches>,
    /// The child asked for batches in shared memory (`shm` on its ack pipe).
    wants_shared: Arc<Asked>,
    /// The write end of the watcher's lifeline: closing it ends the trainer and all it
    /// started.
    lifeline: Option<OwnedFd>,
}

impl Child {
    /// Starts `sh -c CMD` with the protocol's environment and ack pipe, under a watcher
    /// that ends it and all it starts with sluice.
    pub fn spawn(spec: &ChildSpec) -> Result<Child, TrainerError> {
        let io_error = |action: &str, source| TrainerError::Io {
            action: format!("{action} for exec trainer on device {}", spec.device),
            cause: source,
        };
        let start_error = |source| TrainerError::ExecStart {
            command: spec.command.clone(),
            cause: source,
        };
        let quiet = Arc::new(Quiet::new());
        let wants_shared = Arc::new(Asked::default());
        let (read, write) = cloexec_pipe().map_err(|e| io_error("create the ack pipe", e))?;
        let events = read_acks(
            read,
            spec.device,
            Arc::clone(&quiet),
            Arc::clone(&wants_shared),
        )
        .map_err(|e| io_error("start the ack reader", e))?;
        // Without a memory file (an old kernel) the child reads batches on stdin.
        let shared = match SharedBatches::new(spec.window) {
            Ok(shared) => Some(shared),
            Err(error) => {
                tracing::debug!(%error, "no shared memory for exec trainer batches");
                None
            }
        };
        let (lifeline_end, lifeline) = cloexec_pipe()
            .and_then(|(read, write)| Ok((above_stdio(read)?, write)))
            .map_err(|e| io_error("create the lifeline pipe", e))?;
        let shm_fd = shared.as_ref().map(SharedBatches::raw_fd);
        let process = command(spec, lifeline_end.as_raw_fd(), write.as_raw_fd(), shm_fd).spawn();
        // The child has its copies now: the pipes reach end of file once it is gone.
        drop(write);
        drop(lifeline_end);
        let mut process = process.map_err(start_error)?;
        let stdin = process.stdin.take();
        let mut child = Child {
            process: Some(process),
            late: Vec::new(),
            resume: None,
            input: Input::Closed,
            events,
            quiet: Arc::clone(&quiet),
            acks: 0,
            ack_closed: false,
            reaped: false,
            shared,
            wants_shared,
            lifeline: Some(lifeline),
        };
        let Some(stdin) = stdin else {
            let source = io::Error::other("stdin was not piped");
            return Err(io_error("open the stdin", source));
        };
        let stdin = File::from(OwnedFd::from(stdin));
        let pipe = Pipe::new(stdin, quiet, spec.timeout, spec.group.clone())
            .map_err(|e| io_error("make the stdin non-blocking", e))?;
        child.input = Input::Raw(pipe);
        Ok(child)
    }

    /// Takes the trainer that started sluice (`--attach`) as this device's
    /// child: its descriptors instead of a process.
    pub fn attach(spec: &ChildSpec, attach: Attach) -> Result<Child, TrainerError> {
        let io_error = |action: &str, source| TrainerError::Io {
            action: format!("{action} (--attach {attach})"),
            cause: source,
        };
        let data = adopt(attach.data, "data").map_err(|e| io_error("take the stream's pipe", e))?;
        let ack = adopt(attach.ack, "ack").map_err(|e| io_error("take the ack pipe", e))?;
        let shared = match attach.shm {
            Some(fd) => {
                let fd = adopt(fd, "memory").map_err(|e| io_error("take the memory file", e))?;
                Some(
                    SharedBatches::from_fd(fd, spec.window)
                        .map_err(|e| io_error("size the memory file", e))?,
                )
            }
            None => None,
        };
        let quiet = Arc::new(Quiet::new());
        let wants_shared = Arc::new(Asked::default());
        let events = read_acks(
            ack,
            spec.device,
            Arc::clone(&quiet),
            Arc::clone(&wants_shared),
        )
        .map_err(|e| io_error("start the ack reader", e))?;
        let pipe = Pipe::new(
            File::from(data),
            Arc::clone(&quiet),
            spec.timeout,
            spec.group.clone(),
        )
        .map_err(|e| io_error("make the stream's pipe non-blocking", e))?;
        Ok(Child {
            process: None,
            late: Vec::new(),
            resume: spec
                .env
                .iter()
                .rev()
                .find(|(key, _)| key == super::protocol::RESUME_CHECKPOINT_ENV)
                .map(|(_, id)| id.clone()),
            input: Input::Raw(pipe),
            events,
            quiet,
            acks: 0,
            ack_closed: false,
            reaped: true,
            shared,
            wants_shared,
            lifeline: None,
        })
    }

    /// Under `--attach`: what the trainer wrote between the end of its stream
    /// and closing its ack pipe (a last checkpoint).
    pub fn take_late(&mut self) -> Vec<AckEvent> {
        std::mem::take(&mut self.late)
    }

    /// The child is about to be handed a batch while holding none: its quiet time
    /// starts now.
    pub fn hold(&self) {
        self.quiet.touch();
    }

    /// Time since the child's last ack, or since it was handed a batch while holding none.
    pub fn quiet_for(&self) -> Duration {
        self.quiet.quiet_for()
    }

    /// Writes one batch to the stream (starting it with `batch`'s schema) and flushes
    /// it: into shared memory, with a pointer to it on the stream, once the child
    /// asked for that.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), SendError> {
        if let Input::Raw(_) = self.input {
            self.start_stream(&batch.schema())?;
        }
        let region = match (&mut self.shared, self.wants_shared.get()) {
            (Some(shared), Some(form)) => shared.put(batch, form).map_err(|source| {
                SendError::Fatal(TrainerError::Io {
                    action: "write a batch into the exec trainer's shared memory".into(),
                    cause: source,
                })
            })?,
            _ => None,
        };
        let pointer;
        let message = match region {
            Some((offset, length, form)) => {
                let schema = batch.schema_ref();
                let mut metadata = schema.metadata().clone();
                metadata.insert(form.key().to_string(), format!("{offset} {length}"));
                let schema = Schema::new_with_metadata(schema.fields().clone(), metadata);
                pointer = RecordBatch::new_empty(Arc::new(schema));
                &pointer
            }
            None => {
                if let Some(shared) = &mut self.shared {
                    shared.sent_on_stdin();
                }
                batch
            }
        };
        let Input::Stream { writer, .. } = &mut self.input else {
            return Err(SendError::Broken);
        };
        writer
            .write(message)
            .and_then(|()| writer.flush())
            .map_err(|e| send_error(e, "write a batch to the exec trainer"))
    }

    /// The schema of the stream, once started.
    pub fn stream_schema(&self) -> Option<&SchemaRef> {
        match &self.input {
            Input::Stream { schema, .. } => Some(schema),
            _ => None,
        }
    }

    /// Ends the stream and closes stdin. With nothing written yet, sends an empty stream
    /// of `schema` if known, else just closes stdin.
    pub fn close_input(&mut self, schema: Option<&SchemaRef>) -> Result<(), SendError> {
        if let (Input::Raw(_), Some(schema)) = (&self.input, schema) {
            self.start_stream(schema)?;
        }
        let input = std::mem::replace(&mut self.input, Input::Closed);
        if let Input::Stream { mut writer, .. } = input {
            writer
                .finish()
                .map_err(|e| send_error(e, "end the stream to the exec trainer"))?;
        }
        Ok(())
    }

    fn start_stream(&mut self, schema: &SchemaRef) -> Result<(), SendError> {
        let Input::Raw(stdin) = std::mem::replace(&mut self.input, Input::Closed) else {
            return Ok(());
        };
        let start = |e| send_error(e, "start the stream to the exec trainer");
        let schema = ipc::untagged(schema);
        let stream: Vec<(String, String)> = self
            .resume
            .iter()
            .map(|id| (RESUME_KEY.to_string(), id.clone()))
            .collect();
        let writer = TaggedStreamWriter::try_new_with(BufWriter::new(stdin), &schema, &stream);
        let writer = Box::new(writer.map_err(start)?);
        self.input = Input::Stream { writer, schema };
        Ok(())
    }

    /// The next ack event, waiting at most `timeout`; `None` once the pipe closed.
    pub fn next_event(&mut self, timeout: Duration) -> Option<AckEvent> {
        if self.ack_closed {
            return None;
        }
        match self.events.recv_timeout(timeout) {
            Ok(event) => Some(self.note(event)),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(self.note(AckEvent::Eof)),
        }
    }

    /// The next ack event if one is ready; `None` once the pipe closed.
    pub fn try_event(&mut self) -> Option<AckEvent> {
        if self.ack_closed {
            return None;
        }
        match self.events.try_recv() {
            Ok(event) => Some(self.note(event)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(self.note(AckEvent::Eof)),
        }
    }

    /// The events left once the process exited, until the ack pipe closes (bounded wait).
    pub fn remaining_events(&mut self) -> Vec<AckEvent> {
        let deadline = Instant::now() + DRAIN_GRACE;
        let mut events = Vec::new();
        while !self.ack_closed {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_event(left) {
                Some(event) => events.push(event),
                None => break,
            }
        }
        events
    }

    fn note(&mut self, event: AckEvent) -> AckEvent {
        match event {
            AckEvent::Ack => {
                self.acks += 1;
                if let Some(shared) = &mut self.shared {
                    shared.acked();
                }
            }
            AckEvent::Eof => self.ack_closed = true,
            _ => {}
        }
        event
    }

    /// Whether the process is gone: its ack pipe closed or it exited.
    pub fn is_gone(&mut self) -> Result<bool, TrainerError> {
        Ok(self.ack_closed || self.try_exit()?.is_some())
    }

    /// The exit status, if the process exited (without waiting).
    pub fn try_exit(&mut self) -> Result<Option<ExitStatus>, TrainerError> {
        let Some(process) = &mut self.process else {
            // An attached trainer is done with sluice once it closed its ack pipe.
            return Ok(self.ack_closed.then(|| ExitStatus::from_raw(0)));
        };
        let status = process.try_wait().map_err(|e| self.wait_error(e))?;
        self.reaped |= status.is_some();
        Ok(status)
    }

    /// Closes stdin and waits for the process to exit, killing it if it is still running
    /// after a grace period (what it started is gone once it exited).
    pub fn stop(&mut self) -> Result<ExitStatus, TrainerError> {
        self.input = Input::Closed;
        let deadline = Instant::now() + EXIT_GRACE;
        while Instant::now() < deadline {
            if let Some(status) = self.try_exit()? {
                self.kill();
                return Ok(status);
            }
            thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        self.wait()
    }

    /// Waits for the process to exit.
    pub fn wait(&mut self) -> Result<ExitStatus, TrainerError> {
        let Some(process) = &mut self.process else {
            self.input = Input::Closed;
            while !self.ack_closed {
                if let Some(event) = self.next_event(Duration::from_millis(100)) {
                    if !matches!(event, AckEvent::Eof) {
                        self.late.push(event);
                    }
                }
            }
            return Ok(ExitStatus::from_raw(0));
        };
        let status = process.wait().map_err(|e| self.wait_error(e))?;
        self.reaped = true;
        Ok(status)
    }

    /// Tells the watcher to kill the trainer and whatever it started; the watcher exits
    /// once they are all gone, and is left to be reaped.
    pub fn kill(&mut self) {
        self.lifeline = None;
    }

    fn wait_error(&self, source: io::Error) -> TrainerError {
        TrainerError::Io {
            action: format!(
                "wait for the watcher {} of an exec trainer",
                self.process.as_ref().map_or(0, Process::id)
            ),
            cause: source,
        }
    }
}

impl Drop for Child {
    /// Kills the trainer first (a write to a child that stopped reading could block),
    /// then reaps its watcher.
    fn drop(&mut self) {
        self.kill();
        self.input = Input::Closed;
        if let (false, Some(process)) = (self.reaped, &mut self.process) {
            let _ = process.wait();
        }
    }
}

/// The `sh -c CMD` command: protocol environment without sluice's secrets, piped stdin,
/// ack pipe moved to fd 3, the memory file (if any) to fd 4; forked by its watcher (in a
/// process group of its own, so that signals for sluice's group miss it), which reads
/// the lifeline.
fn command(spec: &ChildSpec, lifeline: RawFd, ack: RawFd, shm: Option<RawFd>) -> Command {
    let shell = [
        std::ffi::OsStr::new("sh"),
        std::ffi::OsStr::new("-c"),
        std::ffi::OsStr::new(&spec.command),
    ];
    // Where the job's token file is hidden from trainers, this binary runs
    // first in the trainer's place: it hides the file, then runs the shell.
    let mut command = match super::hide::hidden_from_trainers() {
        Some(hidden) => {
            let mut command = Command::new(&hidden.program);
            command.args(hidden.args(&shell));
            command
        }
        None => {
            let mut command = Command::new(shell[0]);
            command.args(&shell[1..]);
            command
        }
    };
    command
        .env(protocol::VERSION_ENV, protocol::VERSION.to_string())
        .env(DEVICE_ENV, spec.device.to_string())
        .env(DEVICES_ENV, spec.devices.to_string())
        .env(ACK_FD_ENV, ACK_FD.to_string())
        .stdin(Stdio::piped())
        .process_group(0);
    for secret in SECRET_ENV {
        command.env_remove(secret);
    }
    if let Some(id) = &spec.device_id {
        command.env("CUDA_VISIBLE_DEVICES", id);
    }
    if let Some(group) = &spec.group {
        command.envs(group.env(spec.device, spec.devices));
    }
    if shm.is_some() {
        command.env(SHM_FD_ENV, SHM_FD.to_string());
        command.env(SHM_MESSAGES_ENV, "1");
    }
    if let Some(threads) = thread_share(spec) {
        command.env(OMP_THREADS_ENV, threads.to_string());
    }
    command.envs(spec.env.iter().map(|(k, v)| (k, v)));
    // SAFETY: the hooks only make async-signal-safe system calls; the first returns
    // only in the trainer, so the second runs there alone.
    unsafe {
        command.pre_exec(move || watcher::fork_watched(lifeline));
        command.pre_exec(move || move_fds(ack, shm));
    }
    command
}

/// In the forked child: makes `ack` available as fd 3 and `shm` (if any) as fd 4
/// across exec (both are close-on-exec here).
fn move_fds(ack: RawFd, shm: Option<RawFd>) -> io::Result<()> {
    use crate::sys::post_fork;
    // First out of the way of 3 and 4 (one might sit on the other's target), then
    // onto them: dup2 onto another number leaves the copy open across exec.
    let ack = post_fork::copy_above(ack, 16)?;
    let shm = match shm {
        Some(fd) => Some(post_fork::copy_above(fd, 16)?),
        None => None,
    };
    // SAFETY: 3 and 4 are the trainer's to be: whatever this fork holds there is
    // close-on-exec and unused from here on.
    unsafe { post_fork::copy_onto(ack, ACK_FD) }?;
    if let Some(shm) = shm {
        // SAFETY: as above.
        unsafe { post_fork::copy_onto(shm, SHM_FD) }?;
    }
    Ok(())
}

/// `fd`, or a close-on-exec copy of it above 2 (a child's stdio would replace it).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    sys::fd::copy_above(&fd, 3)
}

/// A close-on-exec pipe: (read end, write end).
fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    sys::fd::cloexec_pipe()
}

/// Starts the thread that turns ack pipe lines into events (and notes when acks
/// come, and when the child asks for shared memory).
fn read_acks(
    read: OwnedFd,
    device: usize,
    quiet: Arc<Quiet>,
    wants_shared: Arc<Asked>,
) -> io::Result<Receiver<AckEvent>> {
    let (sender, events) = mpsc::channel();
    let reader = BufReader::new(File::from(read));
    thread::Builder::new()
        .name(format!("sluice-acks-{device}"))
        .spawn(move || forward_acks(reader, &sender, &quiet, &wants_shared))?;
    Ok(events)
}

/// Sends one event per non-blank line until end of file, a bad line or a read error.
/// Lines are at most [`MAX_LINE`] bytes: a longer one ends the reading at once.
fn forward_acks(
    mut reader: impl BufRead,
    events: &Sender<AckEvent>,
    quiet: &Quiet,
    wants_shared: &Asked,
) {
    loop {
        let event = match read_line(&mut reader, MAX_LINE) {
            Ok(None) => break,
            Ok(Some(line)) => match line.trim() {
                protocol::ACK_LINE => {
                    quiet.touch();
                    AckEvent::Ack
                }
                "" => continue,
                SHM_LINE => {
                    wants_shared.set(Form::Stream);
                    continue;
                }
                SHM_MESSAGE_LINE => {
                    wants_shared.set(Form::Message);
                    continue;
                }
                CHECKPOINTS_LINE => AckEvent::Declared,
                trimmed => match checkpoint_id(trimmed) {
                    Some(id) => {
                        quiet.touch();
                        AckEvent::Checkpoint(id.to_string())
                    }
                    None => AckEvent::Line(line),
                },
            },
            Err(LineError::TooLong { start, .. }) => AckEvent::TooLong(start),
            Err(LineError::Io(error)) => AckEvent::Failed(error),
        };
        let last = !matches!(
            event,
            AckEvent::Ack | AckEvent::Declared | AckEvent::Checkpoint(_)
        );
        if events.send(event).is_err() || last {
            return;
        }
    }
    // The receiver may be gone already; then nobody needs the news.
    let _ = events.send(AckEvent::Eof);
}

/// The ID of a line `checkpoint ID` (see [`protocol::is_checkpoint_id`]).
pub(crate) fn checkpoint_id(line: &str) -> Option<&str> {
    let id = line.strip_prefix(CHECKPOINT_PREFIX)?.trim();
    protocol::is_checkpoint_id(id).then_some(id)
}

/// The thread pool size each of several trainer processes gets when neither
/// sluice's environment nor `--env` sets `OMP_NUM_THREADS`: the machine's CPUs
/// shared among the devices (at least 1), as torchrun does. Without it every
/// process's OpenMP, OpenBLAS and torch pools take every CPU, and the pools of
/// all devices (and sluice's decoding) fight over them.
fn thread_share(spec: &ChildSpec) -> Option<usize> {
    let set = std::env::var_os(OMP_THREADS_ENV).is_some()
        || spec.env.iter().any(|(key, _)| key == OMP_THREADS_ENV);
    if set || spec.devices < 2 {
        return None;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some((cpus / spec.devices).max(1))
}

/// The variable OpenMP, OpenBLAS and torch size their thread pools by.
const OMP_THREADS_ENV: &str = "OMP_NUM_THREADS";

/// Sorts a write failure: a closed pipe means the child is gone.
fn send_error(error: ArrowError, action: &str) -> SendError {
    match error {
        ArrowError::IoError(_, source) if source.kind() == ErrorKind::BrokenPipe => {
            SendError::Broken
        }
        ArrowError::IoError(_, source) if source.kind() == ErrorKind::TimedOut => {
            SendError::TimedOut
        }
        ArrowError::IoError(_, source) if source.kind() == ErrorKind::ConnectionAborted => {
            SendError::Aborted
        }
        ArrowError::IoError(_, source) => SendError::Fatal(TrainerError::Io {
            action: action.to_owned(),
            cause: source,
        }),
        source => SendError::Fatal(TrainerError::Arrow {
            action: action.to_owned(),
            cause: source,
        }),
    }
}
