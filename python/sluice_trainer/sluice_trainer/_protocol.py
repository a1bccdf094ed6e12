"""The exec trainer protocol: an Arrow IPC stream on stdin, `ack` lines on SLUICE_ACK_FD.

sluice starts `sh -c CMD` once per device with

    SLUICE_DEVICE         0-based index of this process's device
    SLUICE_DEVICES        number of devices (processes) on this machine
    SLUICE_ACK_FD         file descriptor (3) on which to acknowledge batches
    CUDA_VISIBLE_DEVICES  this device's id, when sluice was given --device-ids

and writes an Arrow IPC *stream* to stdin. One line `ack` on the ack descriptor
acknowledges the oldest batch not yet acknowledged, and must be written only once
that batch has been applied: batches not acknowledged when the process dies are
served again to the process that replaces it. End of stream means no more data;
exit code 0 means success.
"""

import contextlib
import errno
import os
import sys

import pyarrow as pa
import pyarrow.ipc

ACK_FD_ENV = "SLUICE_ACK_FD"
DEVICE_ENV = "SLUICE_DEVICE"
DEVICES_ENV = "SLUICE_DEVICES"


class SluiceError(RuntimeError):
    """Something about the exchange with sluice went wrong; the message says what.

    Uncaught, it is printed as one line (`sluice_trainer: ...`) rather than a traceback;
    set SLUICE_TRAINER_TRACEBACK=1 to see the traceback as well.
    """


class NotUnderSluice(SluiceError):
    """The process was not started by `sluice train --exec` or `sluice worker --exec`."""


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
    """

    def __init__(self, env=None, stdin=None):
        env = os.environ if env is None else env
        if env.get(ACK_FD_ENV) in (None, ""):
            raise NotUnderSluice(
                f"{ACK_FD_ENV} is not set: this trainer must be started by sluice, e.g. "
                f"sluice train DATA --exec 'python {_script_name()}' --devices 2"
            )
        self.ack_fd = _env_int(env, ACK_FD_ENV, None, 0)
        self.device = _env_int(env, DEVICE_ENV, 0, 0)
        self.devices = _env_int(env, DEVICES_ENV, 1, 1)
        self.cuda_visible_devices = env.get("CUDA_VISIBLE_DEVICES")
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
        return self._reader

    def read_batch(self):
        """The next `pyarrow.RecordBatch` of the stream, or None at its end.

        Acknowledges nothing: use `ack()` once the batch is applied.
        """
        reader = self._open()
        if reader is None:
            return None
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return None
        except (pa.ArrowInvalid, OSError) as e:
            raise SluiceError(f"cannot read the Arrow stream on stdin: {e}") from None
        self.received += 1
        return batch

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
            _write_all(self.ack_fd, b"ack\n" * count)
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
        while True:
            if auto_ack:
                self.ack()
            batch = self.read_batch()
            if batch is None:
                return
            yield batch

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
