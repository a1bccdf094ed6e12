"""The exec trainer protocol: an Arrow IPC stream on stdin, `ack` lines on SLUICE_ACK_FD.

sluice starts `sh -c CMD` once per device with

    SLUICE_DEVICE         0-based index of this process's device
    SLUICE_DEVICES        number of devices (processes) on this machine
    SLUICE_ACK_FD         file descriptor (3) on which to acknowledge batches
    CUDA_VISIBLE_DEVICES  this device's id, when sluice was given --device-ids
    OMP_NUM_THREADS       with several devices, the CPUs divided by them (at least
                          1), unless sluice's environment or --env sets it

and writes an Arrow IPC *stream* to stdin. One line `ack` on the ack descriptor
acknowledges the oldest batch not yet acknowledged, and must be written only once
that batch has been applied: batches not acknowledged when the process dies are
served again to the process that replaces it. End of stream means no more data;
exit code 0 means success.

A trainer that keeps checkpoints writes `checkpoints` once, before its first `ack`,
and `checkpoint ID` each time it saved its state durably: the checkpoint holds every
batch acknowledged before that line. ID is 1 to 128 characters of [A-Za-z0-9._-].
A process started with SLUICE_RESUME_CHECKPOINT=ID must load the checkpoint ID before
training: it is served only the rows that checkpoint does not hold.

Every batch message carries custom metadata sluice.epoch and sluice.step (0-based: the
batch's epoch and its step in that epoch), and sluice.epoch_steps (the steps of that
epoch on this process) where sluice knows them before the epoch starts, else
sluice.epoch_steps_unknown saying why.

Under `sluice train --lockstep` (SLUICE_LOCKSTEP=1) the device processes are one
torch.distributed group: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR
(127.0.0.1) and MASTER_PORT are set, every process gets one batch per step and the
same number of steps per epoch (sluice.step is the step all of them are at), and on a
process's last batch of an epoch the batch message carries sluice.epoch_end. A process that dies is not restarted: the run stops.

Batches in shared memory: when SLUICE_SHM_FD is set, that descriptor is a memory file
sluice writes batches into. A trainer that writes the line `shm` on the ack descriptor
is from then on sent, in place of each batch, a batch of zero rows whose message
metadata sluice.shm is "OFFSET LENGTH": the LENGTH bytes at OFFSET of the memory file
are a complete Arrow IPC stream (schema, dictionaries, one record batch, end of
stream), read without a copy. The region is reused once the batch is acknowledged:
copy what must outlive the ack. Regions may lie beyond the end of an earlier mapping
(the file grows): map the file again then. When sluice also sets SLUICE_SHM_MESSAGES=1,
a trainer may write `shm message` instead: a batch then lies in the memory file as a
lone record batch message (metadata sluice.shm_message, "OFFSET LENGTH"), read with
the schema of the stream on stdin, so that no schema is parsed per batch (columns with
dictionaries still come as whole streams, under sluice.shm).
"""

import contextlib
import errno
import mmap
import os
import re
import sys

import pyarrow as pa
import pyarrow.ipc

from ._errors import NotUnderSluice, SluiceError

# Every name of the protocol. A test compares these lines with sluice's own lists
# (NAMES and NUMBERS in src/trainer/exec/protocol.rs), both ways: keep one
# `NAME = value` per line, and no other such line here.
VERSION = 1
VERSION_ENV = "SLUICE_PROTOCOL_VERSION"
ACK_FD_ENV = "SLUICE_ACK_FD"
DEVICE_ENV = "SLUICE_DEVICE"
DEVICES_ENV = "SLUICE_DEVICES"
RESUME_ENV = "SLUICE_RESUME_CHECKPOINT"
LOCKSTEP_ENV = "SLUICE_LOCKSTEP"
SHM_FD_ENV = "SLUICE_SHM_FD"
SHM_MESSAGES_ENV = "SLUICE_SHM_MESSAGES"
CHECKPOINT_DIR_ENV = "SLUICE_CHECKPOINT_DIR"
TOKEN_ENV = "SLUICE_TOKEN"
ACK_FD = 3
SHM_FD = 4
ACK_LINE = "ack"
CHECKPOINTS_LINE = "checkpoints"
CHECKPOINT_PREFIX = "checkpoint "
SHM_LINE = "shm"
SHM_MESSAGE_LINE = "shm message"
MAX_CHECKPOINT_ID = 128
EPOCH_KEY = "sluice.epoch"
STEP_KEY = "sluice.step"
EPOCH_END_KEY = "sluice.epoch_end"
EPOCH_STEPS_KEY = "sluice.epoch_steps"
# The world rank a global batch's slice is for (a master's job of --world-size).
RANK_KEY = "sluice.rank"
EPOCH_STEPS_UNKNOWN_KEY = "sluice.epoch_steps_unknown"
SOURCE_KEY = "sluice.source"
CHECKPOINT_COMPLETE_KEY = "sluice.checkpoint_complete"
RESUME_KEY = "sluice.resume_checkpoint"
SHM_KEY = "sluice.shm"
SHM_MESSAGE_KEY = "sluice.shm_message"
HASH_BUCKETS_KEY = "sluice.hash_buckets"

_CHECKPOINT_ID = re.compile(r"[A-Za-z0-9._-]{1,%d}" % MAX_CHECKPOINT_ID)


def _line(text):
    return text.encode() + b"\n"


def _env_int(env, name, default, minimum):
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise SluiceError(f"{name}={text!r} is not a whole number") from None
    if value < minimum:
        raise SluiceError(f"{name}={value} is below {minimum}")
    return value


class Connection:
    """This process's link to sluice: its device, the batch stream and the ack pipe.

    There is one per process (see `connect()`), since stdin and the ack descriptor
    belong to the process. Attributes:

        device                index of this process's device (SLUICE_DEVICE), from 0
        devices               number of devices (SLUICE_DEVICES)
        cuda_visible_devices  CUDA_VISIBLE_DEVICES as sluice set it, or None
        ack_fd                the acknowledgement descriptor (SLUICE_ACK_FD)
        received              batches read from the stream so far
        acked                 batches acknowledged so far
        checkpoints           whether this process declared checkpoints
        last_checkpoint       the last ID written with `checkpoint()`, or None
        checkpoint_complete   the newest checkpoint ID sluice recorded complete
                              (sluice.checkpoint_complete), or None
        lockstep              started under --lockstep (SLUICE_LOCKSTEP=1)
        rank, world_size      RANK and WORLD_SIZE under --lockstep (else device, devices)
        epoch, step           sluice.epoch and sluice.step of the last batch read (ints,
                              0-based; None before the first batch)
        epoch_end             whether the last batch read was this process's last of
                              its epoch (sluice.epoch_end, --lockstep)
        epoch_steps           the steps of the last batch's epoch on this process
                              (sluice.epoch_steps), or None when sluice cannot know
                              them before the epoch starts
        epoch_steps_unknown   why not (sluice.epoch_steps_unknown), or None
    """

    def __init__(self, env=None, stdin=None):
        env = os.environ if env is None else env
        if env.get(ACK_FD_ENV) in (None, ""):
            raise NotUnderSluice(
                f"{ACK_FD_ENV} is not set: this trainer must be started by sluice, e.g. "
                f"sluice train DATA --exec 'python {_script_name()}' --devices 2"
            )
        version = _env_int(env, VERSION_ENV, VERSION, 1)
        if version > VERSION:
            raise SluiceError(
                f"sluice speaks version {version} of the trainer protocol and this "
                f"sluice_trainer version {VERSION}: install the sluice-train wheel that "
                "matches the sluice binary"
            )
        self.ack_fd = _env_int(env, ACK_FD_ENV, None, 0)
        self.device = _env_int(env, DEVICE_ENV, 0, 0)
        self.devices = _env_int(env, DEVICES_ENV, 1, 1)
        self.cuda_visible_devices = env.get("CUDA_VISIBLE_DEVICES")
        self.lockstep = env.get(LOCKSTEP_ENV) == "1"
        self.rank = _env_int(env, "RANK", self.device, 0) if self.lockstep else self.device
        self.world_size = (_env_int(env, "WORLD_SIZE", self.devices, 1) if self.lockstep
                           else self.devices)
        self.epoch = None
        self.step = None
        self.epoch_end = False
        self.epoch_steps = None
        self.epoch_steps_unknown = None
        self.checkpoint_complete = None
        self._resume = env.get(RESUME_ENV) or None
        if self._resume is not None and not _CHECKPOINT_ID.fullmatch(self._resume):
            raise SluiceError(
                f"{RESUME_ENV}={self._resume!r} is not a checkpoint ID "
                "(1 to 128 characters of A-Z a-z 0-9 . _ -)"
            )
        try:
            os.fstat(self.ack_fd)
        except OSError as e:
            raise NotUnderSluice(
                f"{ACK_FD_ENV}={self.ack_fd} but file descriptor {self.ack_fd} is not open "
                f"({e.strerror}): this trainer must be started by sluice --exec"
            ) from None
        self._stdin = stdin
        self._reader = None
        self._opened = False
        self.received = 0
        self.acked = 0
        self.checkpoints = False
        self.last_checkpoint = None
        self._resume_asked = False
        self._checkpoint_ids = set()
        self._shm_fd = _env_int(env, SHM_FD_ENV, None, 0)
        self._shm_messages = env.get(SHM_MESSAGES_ENV) == "1"
        self._last_form = None  # how the last batch came: "message", "stream" or None
        self.shared_memory = False
        self._map = None
        self._view = None
        self._map_len = 0
        self._schema = None  # the stream's schema, for lone messages
        self._plan = None  # (its _message.plan,) once known

    def use_shared_memory(self):
        """Asks sluice to hand batches over in shared memory (writes `shm`); True when
        it offers it (SLUICE_SHM_FD is set), else False and batches keep coming on
        stdin. Batches then live in memory sluice reuses once they are acknowledged:
        copy anything kept past the ack."""
        if self.shared_memory:
            return True
        if self._shm_fd is None:
            return False
        try:
            os.fstat(self._shm_fd)
        except OSError:
            return False
        _write_all(self.ack_fd, _line(SHM_MESSAGE_LINE if self._shm_messages else SHM_LINE))
        self.shared_memory = True
        return True

    def _shared_batch(self, pointer, message=False, raw=False):
        """The batch at `pointer` ("OFFSET LENGTH") of the memory file, without a copy:
        a whole stream, or with `message` a lone record batch message of the stream's
        schema (with `raw`, as a `_message.Message` not yet read)."""
        try:
            offset, length = (int(part) for part in pointer.split())
        except ValueError:
            raise SluiceError(f"bad {SHM_KEY} pointer {pointer!r} from sluice") from None
        if self._shm_fd is None:
            raise SluiceError(f"sluice sent {SHM_KEY} but {SHM_FD_ENV} is not set")
        end = offset + length
        if self._map is None or end > self._map_len:
            size = os.fstat(self._shm_fd).st_size
            if end > size:
                raise SluiceError(
                    f"{SHM_KEY} {pointer} lies beyond the memory file ({size} bytes)")
            # The old mapping stays alive as long as batches still use it.
            self._map = mmap.mmap(self._shm_fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
            self._view = memoryview(self._map)
            self._map_len = size
        region = self._view[offset:end]
        try:
            if message and raw:
                from . import _message  # numpy: only for the numpy and torch forms

                if self._plan is None:
                    self._schema = self._reader.schema
                    self._plan = (_message.plan(self._schema),)
                return _message.Message(region, self._schema, self._plan[0])
            if message:
                return pa.ipc.read_record_batch(pa.py_buffer(region), self._reader.schema)
            return pa.ipc.open_stream(pa.py_buffer(region)).read_next_batch()
        except (pa.ArrowInvalid, StopIteration) as e:
            raise SluiceError(f"cannot read the batch at {SHM_KEY} {pointer}: {e}") from None

    def __repr__(self):
        return (
            f"Connection(device={self.device}, devices={self.devices}, "
            f"cuda_visible_devices={self.cuda_visible_devices!r}, ack_fd={self.ack_fd}, "
            f"received={self.received}, acked={self.acked})"
        )

    @property
    def pending(self):
        """Batches received but not acknowledged yet."""
        return self.received - self.acked

    @property
    def schema(self):
        """The stream's `pyarrow.Schema` (waits for sluice to start the stream), or
        None when sluice closed stdin without sending any stream (no data)."""
        reader = self._open()
        return None if reader is None else reader.schema

    def _open(self):
        """Opens the IPC stream on stdin once; None when stdin ends before any stream."""
        if self._opened:
            return self._reader
        self._opened = True
        stdin = self._stdin if self._stdin is not None else sys.stdin.buffer
        if stdin.isatty():
            raise NotUnderSluice(
                "stdin is a terminal, not an Arrow stream: this trainer must be started "
                "by sluice --exec"
            )
        try:
            if hasattr(stdin, "peek") and not stdin.peek(1):
                return None  # stdin closed before any stream: nothing to train on
            self._reader = pa.ipc.open_stream(stdin)
        except (pa.ArrowInvalid, OSError) as e:
            raise SluiceError(f"cannot read the Arrow stream on stdin: {e}") from None
        # A trainer that started sluice (Dataset) learns its checkpoint here.
        metadata = self._reader.schema.metadata or {}
        resume = metadata.get(RESUME_KEY.encode())
        if self._resume is None and resume:
            self._resume = resume.decode()
        return self._reader

    def read_batch(self, raw=False):
        """The next `pyarrow.RecordBatch` of the stream, or None at its end.

        Acknowledges nothing: use `ack()` once the batch is applied. With `raw`, a batch
        that came as a lone message in shared memory is returned unread, as a
        `_message.Message` (for the numpy and torch forms, which read it without pyarrow).
        """
        if self.checkpoints and self._resume is not None and not self._resume_asked:
            raise SluiceError(
                f"{RESUME_ENV}={self._resume} but the trainer reads batches without asking "
                "for it: load that checkpoint (see sluice_trainer.resume_checkpoint()) "
                "before training, since sluice serves only the rows it does not hold"
            )
        reader = self._open()
        if reader is None:
            return None
        try:
            batch, metadata = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            return None
        except (pa.ArrowInvalid, OSError) as e:
            raise SluiceError(f"cannot read the Arrow stream on stdin: {e}") from None
        pointer, message = self._note_metadata(metadata)
        self._last_form = None if pointer is None else ("message" if message else "stream")
        if pointer is not None:
            batch = self._shared_batch(pointer, message, raw)
        self.received += 1
        return batch

    def _note_metadata(self, metadata):
        """Takes sluice.epoch, sluice.step, sluice.epoch_end and the epoch's steps (or
        why they are unknown) of a batch message;
        returns its pointer into shared memory, if any, and whether it points to a
        lone message (sluice.shm_message) rather than a stream (sluice.shm)."""
        tags = {}
        for key, value in (metadata or {}).items():
            key = key.decode() if isinstance(key, bytes) else key
            value = value.decode() if isinstance(value, bytes) else value
            tags[key] = value

        def number(key):
            text = tags.get(key)
            return int(text) if text is not None and text.isdigit() else None

        self.epoch = number(EPOCH_KEY)
        self.step = number(STEP_KEY)
        self.epoch_end = EPOCH_END_KEY in tags
        self.epoch_steps = number(EPOCH_STEPS_KEY)
        self.epoch_steps_unknown = tags.get(EPOCH_STEPS_UNKNOWN_KEY)
        if tags.get(CHECKPOINT_COMPLETE_KEY):
            self.checkpoint_complete = tags[CHECKPOINT_COMPLETE_KEY]
        if SHM_MESSAGE_KEY in tags:
            return tags[SHM_MESSAGE_KEY], True
        return tags.get(SHM_KEY), False

    def completed_checkpoint(self):
        """The newest checkpoint ID sluice recorded as complete (every device of this
        worker wrote it, and the job's state holds it), or None yet.

        sluice never resumes from a checkpoint older than it again: those may be
        deleted. It is learnt with the first batch after the checkpoint became
        complete (metadata sluice.checkpoint_complete); at the end of the stream
        the job is over and only the last checkpoint matters.
        """
        return self.checkpoint_complete

    def ack(self, count=None):
        """Acknowledges the `count` oldest unacknowledged batches (default: all of them).

        Call it only once those batches are applied (the optimizer step is done):
        sluice then counts their rows as trained and will not serve them again.
        """
        if count is None:
            count = self.pending
        if count < 0 or count > self.pending:
            raise SluiceError(
                f"ack({count}): only {self.pending} received batches are unacknowledged"
            )
        if count:
            _write_all(self.ack_fd, _line(ACK_LINE) * count)
            self.acked += count

    def batches(self, auto_ack=True):
        """Yields the stream's `pyarrow.RecordBatch`es.

        With `auto_ack` (the default), asking for the next batch acknowledges every
        batch received so far, and the end of the stream acknowledges the last one: the
        loop body is one training step. Leaving the loop early (`break`, an exception)
        leaves the current batch unacknowledged, so sluice serves it again to the
        process that replaces this one; call `ack()` first if it was applied.

        With `auto_ack=False` nothing is acknowledged for you: call `ack()` (or use
        `acknowledging()`) after each optimizer step.
        """
        return self._batches(auto_ack)

    def _batches(self, auto_ack, raw=False):
        """`batches()`; with `raw`, as `read_batch(raw=True)` returns them."""
        while True:
            if auto_ack:
                self.ack()
            batch = self.read_batch(raw)
            if batch is None:
                return
            yield batch

    def declare_checkpoints(self):
        """Tells sluice that this trainer keeps checkpoints (writes `checkpoints`).

        It must come before the first acknowledgement (call it, or
        `connect(checkpoints=True)`, before the training loop): after one, it raises
        `SluiceError`. Declaring again does nothing. From then on sluice serves a
        restarted or resumed trainer the rows its checkpoint does not hold, and
        `checkpoint(ID)` records checkpoints.
        """
        if self.checkpoints:
            return
        if self.acked:
            raise SluiceError(
                f"checkpoints declared after {self.acked} "
                f"{'batch was' if self.acked == 1 else 'batches were'} acknowledged: "
                "sluice must be told before the first ack; call "
                "sluice_trainer.connect(checkpoints=True) before the training loop"
            )
        _write_all(self.ack_fd, _line(CHECKPOINTS_LINE))
        self.checkpoints = True

    def resume_checkpoint(self):
        """The ID of the checkpoint to load before training (SLUICE_RESUME_CHECKPOINT),
        or None to start from scratch.

        sluice sets it when it restarts a trainer that died, or resumes a job, whose
        device wrote checkpoints: the trainer is then served only the rows that
        checkpoint does not hold. With checkpoints declared, reading a batch while the
        variable is set and this was never called raises `SluiceError`.
        """
        self._resume_asked = True
        return self._resume

    def checkpoint(self, checkpoint_id, ack=True):
        """Tells sluice that the state saved as `checkpoint_id` is durable (writes
        `checkpoint ID`): call it once the model, optimizer and whatever else the
        trainer needs are saved (written, fsynced, renamed into place).

        `checkpoint_id` is a str of 1 to 128 characters from A-Z a-z 0-9 . _ - (or a
        non-negative int, e.g. the step number); IDs should increase, and one ID
        names one state: an ID this process already wrote or resumed from raises
        `SluiceError`. With `ack` (the default) every batch received so far is
        acknowledged first, so save the state after the step that applied the last
        batch received (in a `batches()` loop: at the end of the loop body). With
        `ack=False` the checkpoint holds only the batches already acknowledged.
        Needs `declare_checkpoints()` (or `connect(checkpoints=True)`) first.
        """
        text = checkpoint_id_text(checkpoint_id)
        if not self.checkpoints:
            raise SluiceError(
                f"checkpoint({text}) without declaring checkpoints: call "
                "sluice_trainer.connect(checkpoints=True) before the training loop"
            )
        if text in self._checkpoint_ids or text == self._resume:
            raise SluiceError(
                f"checkpoint({text}): this process already "
                f"{'resumed from' if text == self._resume else 'wrote'} checkpoint {text}; "
                "one ID names one state, so give each checkpoint a new one (the step)"
            )
        if ack:
            self.ack()
        _write_all(self.ack_fd, _line(CHECKPOINT_PREFIX + text))
        self._checkpoint_ids.add(text)
        self.last_checkpoint = text

    @contextlib.contextmanager
    def acknowledging(self):
        """A block after which every batch received so far is acknowledged, unless the
        block raised::

            for batch in conn.batches(auto_ack=False):
                with conn.acknowledging():
                    train_step(batch)
        """
        yield self
        self.ack()

    def torch_device(self):
        """The `torch.device` this process should train on: its GPU when CUDA is
        available (`cuda:0` when sluice narrowed CUDA_VISIBLE_DEVICES to one id, else
        `cuda:<device>`), otherwise the CPU."""
        torch = _import_torch("torch_device()")
        if not torch.cuda.is_available():
            return torch.device("cpu")
        if self.cuda_visible_devices:
            return torch.device("cuda", 0)
        return torch.device("cuda", self.device % torch.cuda.device_count())


def checkpoint_id_text(checkpoint_id):
    """A checkpoint ID as the protocol writes it; `SluiceError` if it is not one."""
    if isinstance(checkpoint_id, int) and not isinstance(checkpoint_id, bool):
        if checkpoint_id < 0:
            raise SluiceError(f"checkpoint ID {checkpoint_id} is negative")
        return str(checkpoint_id)
    if not isinstance(checkpoint_id, str):
        raise SluiceError(
            f"a checkpoint ID is a str or an int, not {type(checkpoint_id).__name__}"
        )
    if not _CHECKPOINT_ID.fullmatch(checkpoint_id):
        raise SluiceError(
            f"checkpoint ID {checkpoint_id!r} is not 1 to 128 characters of "
            "A-Z a-z 0-9 . _ -"
        )
    return checkpoint_id


def _write_all(fd, data):
    """Writes every byte to the unbuffered ack descriptor (nothing to flush after)."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        except OSError as e:
            if e.errno in (errno.EPIPE, errno.EBADF):
                raise SluiceError(
                    f"sluice closed the acknowledgement pipe (fd {fd}); "
                    "it no longer takes this trainer's acks"
                ) from None
            raise SluiceError(f"cannot write acks to fd {fd}: {e.strerror}") from None
        view = view[written:]


def _script_name():
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "train.py"
    return "train.py" if argv0 in ("-c", "-m") else os.path.basename(argv0)


def _import_torch(what):
    try:
        import torch
    except ImportError as e:
        raise SluiceError(
            f"{what} needs PyTorch, which cannot be imported ({e}): pip install torch"
        ) from None
    return torch
