//! One exec trainer process: `sh -c CMD` fed an Arrow IPC stream on stdin, acknowledging
//! batches on a pipe at file descriptor 3 that a reader thread turns into [`AckEvent`]s.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, ErrorKind};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child as Process, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

use super::TrainerError;

/// The child's file descriptor for acknowledgements (`SLUICE_ACK_FD`).
pub(crate) const ACK_FD: RawFd = 3;

/// How long a child that stopped reading or closed its ack pipe may take to exit before
/// it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// How long to wait for the ack pipe to close once the child exited (a grandchild may
/// still hold it).
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// What the reader thread saw on the ack pipe.
#[derive(Debug)]
pub(crate) enum AckEvent {
    /// One `ack` line.
    Ack,
    /// A line other than `ack`.
    Line(String),
    /// Reading failed.
    Failed(io::Error),
    /// Every writer closed the pipe.
    Eof,
}

/// Why a batch could not be written.
pub(crate) enum SendError {
    /// The child no longer reads its stdin: it died or is dying.
    Broken,
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
}

/// The stdin of the child: raw until the first batch fixes the stream's schema.
enum Input {
    Raw(ChildStdin),
    Stream {
        writer: Box<StreamWriter<BufWriter<ChildStdin>>>,
        schema: SchemaRef,
    },
    Closed,
}

/// A running (or exited) child process.
pub(crate) struct Child {
    process: Process,
    input: Input,
    events: Receiver<AckEvent>,
    /// `ack` lines received from this process.
    pub acks: u64,
    /// The ack pipe reached end of file.
    pub ack_closed: bool,
    reaped: bool,
}

impl Child {
    /// Starts `sh -c CMD` with the protocol's environment and ack pipe.
    pub fn spawn(spec: &ChildSpec) -> Result<Child, TrainerError> {
        let io_error = |action: &str, source| TrainerError::Io {
            action: format!("{action} for exec trainer on device {}", spec.device),
            source,
        };
        let (read, write) = ack_pipe().map_err(|e| io_error("create the ack pipe", e))?;
        let events =
            read_acks(read, spec.device).map_err(|e| io_error("start the ack reader", e))?;
        let process = command(spec, write.as_raw_fd()).spawn();
        // The child has its copy now: the pipe reaches end of file once the child is gone.
        drop(write);
        let process = process.map_err(|source| TrainerError::ExecStart {
            command: spec.command.clone(),
            source,
        })?;
        let mut child = Child {
            process,
            input: Input::Closed,
            events,
            acks: 0,
            ack_closed: false,
            reaped: false,
        };
        let Some(stdin) = child.process.stdin.take() else {
            let source = io::Error::other("stdin was not piped");
            return Err(io_error("open the stdin", source));
        };
        child.input = Input::Raw(stdin);
        Ok(child)
    }

    /// Writes one batch to the stream (starting it with `batch`'s schema) and flushes it.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), SendError> {
        if let Input::Raw(_) = self.input {
            self.start_stream(&batch.schema())?;
        }
        let Input::Stream { writer, .. } = &mut self.input else {
            return Err(SendError::Broken);
        };
        writer
            .write(batch)
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
        let writer = StreamWriter::try_new_buffered(stdin, schema)
            .map_err(|e| send_error(e, "start the stream to the exec trainer"))?;
        self.input = Input::Stream {
            writer: Box::new(writer),
            schema: Arc::clone(schema),
        };
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
            AckEvent::Ack => self.acks += 1,
            AckEvent::Eof => self.ack_closed = true,
            _ => {}
        }
        event
    }

    /// Whether the process is gone: its ack pipe closed or it exited.
    pub fn is_gone(&mut self) -> Result<bool, TrainerError> {
        Ok(self.ack_closed || self.try_exit()?.is_some())
    }

    fn try_exit(&mut self) -> Result<Option<ExitStatus>, TrainerError> {
        let status = self.process.try_wait().map_err(|e| self.wait_error(e))?;
        self.reaped |= status.is_some();
        Ok(status)
    }

    /// Closes stdin and waits for the process to exit, killing it (and its process group)
    /// if it is still running after a grace period.
    pub fn stop(&mut self) -> Result<ExitStatus, TrainerError> {
        self.input = Input::Closed;
        let deadline = Instant::now() + EXIT_GRACE;
        while Instant::now() < deadline {
            if let Some(status) = self.try_exit()? {
                return Ok(status);
            }
            thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        self.wait()
    }

    /// Waits for the process to exit.
    pub fn wait(&mut self) -> Result<ExitStatus, TrainerError> {
        let status = self.process.wait().map_err(|e| self.wait_error(e))?;
        self.reaped = true;
        Ok(status)
    }

    /// Kills the process group unless the process was already reaped (then the group id
    /// may belong to someone else).
    fn kill(&mut self) {
        if self.reaped {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.process.id()) {
            // SAFETY: kill has no memory effects; the group is the child's own.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }

    fn wait_error(&self, source: io::Error) -> TrainerError {
        TrainerError::Io {
            action: format!("wait for exec trainer process {}", self.process.id()),
            source,
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            self.input = Input::Closed;
            self.kill();
            let _ = self.process.wait();
        }
    }
}

/// The `sh -c CMD` command: protocol environment, piped stdin, ack pipe moved to fd 3,
/// and a process group of its own so that a restart kills everything it started.
fn command(spec: &ChildSpec, ack: RawFd) -> Command {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(&spec.command)
        .env("SLUICE_DEVICE", spec.device.to_string())
        .env("SLUICE_DEVICES", spec.devices.to_string())
        .env("SLUICE_ACK_FD", ACK_FD.to_string())
        .stdin(Stdio::piped())
        .process_group(0);
    if let Some(id) = &spec.device_id {
        command.env("CUDA_VISIBLE_DEVICES", id);
    }
    command.envs(spec.env.iter().map(|(k, v)| (k, v)));
    // SAFETY: the hook only calls the async-signal-safe dup2 and fcntl.
    unsafe {
        command.pre_exec(move || move_to_ack_fd(ack));
    }
    command
}

/// In the forked child: makes `fd` (close-on-exec) available as fd 3 across exec.
fn move_to_ack_fd(fd: RawFd) -> io::Result<()> {
    // dup2 onto another number clears close-on-exec on the copy; onto itself it does
    // nothing, so then the flag is cleared by hand.
    // SAFETY: plain descriptor calls on descriptors this process owns.
    let result = unsafe {
        if fd == ACK_FD {
            libc::fcntl(fd, libc::F_SETFD, 0)
        } else {
            libc::dup2(fd, ACK_FD)
        }
    };
    if result == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A close-on-exec pipe: (read end, write end).
fn ack_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [libc::c_int; 2] = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts the thread that turns ack pipe lines into events.
fn read_acks(read: OwnedFd, device: usize) -> io::Result<Receiver<AckEvent>> {
    let (sender, events) = mpsc::channel();
    let reader = BufReader::new(File::from(read));
    thread::Builder::new()
        .name(format!("sluice-acks-{device}"))
        .spawn(move || forward_acks(reader, &sender))?;
    Ok(events)
}

/// Sends one event per non-blank line until end of file, a bad line or a read error.
fn forward_acks(reader: impl BufRead, events: &Sender<AckEvent>) {
    for line in reader.lines() {
        let event = match line {
            Ok(line) if line.trim() == "ack" => AckEvent::Ack,
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => AckEvent::Line(line),
            Err(error) => AckEvent::Failed(error),
        };
        let last = !matches!(event, AckEvent::Ack);
        if events.send(event).is_err() || last {
            return;
        }
    }
    // The receiver may be gone already; then nobody needs the news.
    let _ = events.send(AckEvent::Eof);
}

/// Sorts a write failure: a closed pipe means the child is gone.
fn send_error(error: ArrowError, action: &str) -> SendError {
    match error {
        ArrowError::IoError(_, source) if source.kind() == ErrorKind::BrokenPipe => {
            SendError::Broken
        }
        ArrowError::IoError(_, source) => SendError::Fatal(TrainerError::Io {
            action: action.to_owned(),
            source,
        }),
        source => SendError::Fatal(TrainerError::Arrow {
            action: action.to_owned(),
            source,
        }),
    }
}
