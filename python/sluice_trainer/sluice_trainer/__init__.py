"""Python trainers for sluice: Arrow record batches in, acknowledgements out.

`sluice train DATA --exec 'python train.py' --devices N` (or `sluice worker --exec`)
starts `train.py` once per device. In it::

    import sluice_trainer

    for batch in sluice_trainer.batches():       # pyarrow.RecordBatch
        train_step(batch)                         # acknowledged when the next is asked for

or, for PyTorch, dicts of tensors that share memory with the Arrow buffers::

    for t in sluice_trainer.torch_batches(hash_buckets=2**20, nulls="fill"):
        loss = model(t["I1"].float(), t["C1"]) ...

Checkpoints: declare them before the first batch is acknowledged, load the one sluice
names at start, and report each one once it is saved::

    sluice_trainer.connect(checkpoints=True)          # writes `checkpoints`
    step = load(sluice_trainer.resume_checkpoint())   # SLUICE_RESUME_CHECKPOINT or None
    for batch in sluice_trainer.batches():
        train_step(batch); step += 1
        if step % 1000 == 0:
            save(step)                                # durably, under the ID
            sluice_trainer.checkpoint(step)           # acks the batch, `checkpoint 1000`

`sluice_trainer.device`, `devices`, `cuda_visible_devices` and `ack_fd` describe this
process (from SLUICE_DEVICE, SLUICE_DEVICES, CUDA_VISIBLE_DEVICES, SLUICE_ACK_FD).

Under `sluice train --lockstep` the processes are one torch.distributed group (RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set: `torch.distributed.init_process_group()`
needs no arguments), each gets one batch per step and the same steps per epoch, so
DistributedDataParallel never waits on a process that ran out of data.
`sluice_trainer.lockstep`, `rank` and `world_size` say so, and `epoch_end` is True
on this process's last batch of an epoch. After each batch (lockstep or not)
`sluice_trainer.epoch` and `step` (0-based) say where it stands, and `epoch_steps`
is the steps of its epoch on this process (None, with `epoch_steps_unknown` saying
why, where sluice cannot know them before the epoch starts).
Started without sluice, every entry point raises `NotUnderSluice`, printed as one line.
"""

import os
import sys

from ._binary import SluiceNotFound, find_sluice_bin
from ._device import DeviceFeeder
from ._errors import NotUnderSluice, SluiceError
from ._hashing import bucket_of, hash64, hash_array
from ._numpy import Strings, to_numpy
from ._protocol import Connection
from ._tensors import TorchConverter, column_tensor, to_torch
from .dataset import Dataset

__version__ = "0.1.0"

__all__ = [
    "Connection", "Dataset", "NotUnderSluice", "SluiceError", "SluiceNotFound", "ack",
    "acknowledging", "batches", "bucket_of", "checkpoint", "column_tensor",
    "completed_checkpoint", "connect",
    "declare_checkpoints", "DeviceFeeder", "find_sluice_bin",
    "hash64", "hash_array", "numpy_batches", "resume_checkpoint", "schema", "Strings",
    "to_numpy", "to_torch", "torch_batches", "torch_device",
]

_connection = None


def connect(checkpoints=False, shared_memory=False):
    """This process's `Connection` to sluice (made on first use, then the same one).

    `checkpoints=True` declares that this trainer keeps checkpoints (see
    `declare_checkpoints`): do it before the training loop. `shared_memory=True` asks
    for batches in shared memory (see `Connection.use_shared_memory`): a batch's
    buffers are then valid until it is acknowledged.
    """
    global _connection
    if _connection is None:
        _connection = Connection()
    if checkpoints:
        _connection.declare_checkpoints()
    if shared_memory:
        _connection.use_shared_memory()
    return _connection


def declare_checkpoints():
    """Tells sluice that this trainer keeps checkpoints; `SluiceError` once a batch was
    acknowledged. See `Connection.declare_checkpoints`."""
    connect().declare_checkpoints()


def resume_checkpoint():
    """The ID of the checkpoint to load before training (SLUICE_RESUME_CHECKPOINT), or
    None to start from scratch. See `Connection.resume_checkpoint`."""
    return connect().resume_checkpoint()


def completed_checkpoint():
    """The newest checkpoint ID sluice recorded as complete, or None: older ones are
    never resumed from again and may be pruned. See `Connection.completed_checkpoint`."""
    return connect().completed_checkpoint()


def checkpoint(checkpoint_id, ack=True):
    """Reports the state saved as `checkpoint_id` durable: acknowledges the batches
    received so far (unless `ack=False`), then writes `checkpoint ID`. See
    `Connection.checkpoint`."""
    connect().checkpoint(checkpoint_id, ack=ack)


def batches(auto_ack=True, shared_memory=False):
    """Yields the `pyarrow.RecordBatch`es sluice sends this process.

    With `auto_ack` (the default) a batch is acknowledged when the next one is asked
    for, and the last one when the stream ends. See `Connection.batches`. With
    `shared_memory` the batches are read from memory sluice writes them into, with no
    copy, and that memory is reused once a batch is acknowledged: copy what you keep.
    """
    return connect(shared_memory=shared_memory).batches(auto_ack=auto_ack)


def torch_batches(columns=None, hash_buckets=None, nulls="raise", fill_value=0,
                  auto_ack=True, shared_memory=True, device=None):
    """Yields each batch as a dict of column name -> `torch.Tensor` (see `to_torch`),
    acknowledged like `batches()`.

    With `shared_memory` (the default) the tensors are views of memory sluice wrote
    the batch into, valid until the batch is acknowledged (when the next one is asked
    for): `.to(device)`, `.float()` and the like make copies; clone a tensor to keep
    it longer. With `sluice train --hash-buckets` and `--fill-nulls` every column
    arrives ready, and each tensor only wraps a buffer.

    With `device` (`"cuda"`, `"cuda:1"`, a `torch.device`; e.g.
    `sluice_trainer.torch_device()`) the tensors arrive on that device. For CUDA they
    go through pinned host buffers and a copy stream of their own, so a batch's copy
    overlaps the step the GPU is still running; the training stream waits for it only
    where it uses the tensors. The batch is acknowledged as without `device`: when
    the loop asks for the next one."""
    _check_torch()
    feed = DeviceFeeder(device) if device is not None else None
    convert = TorchConverter(columns, hash_buckets, nulls, fill_value)
    connection = connect(shared_memory=shared_memory)
    for batch in connection._batches(auto_ack, raw=True):
        tensors = convert(batch)
        yield feed(tensors) if feed is not None else tensors


def numpy_batches(columns=None, strings="buffers", auto_ack=True, shared_memory=True):
    """Yields each batch as a dict of column name -> numpy array (see `to_numpy`),
    acknowledged like `batches()`.

    Numeric columns without nulls are views of the batch's memory, and string columns
    come as `Strings` (offsets and bytes as numpy arrays) unless `strings="objects"`.
    With `shared_memory` (the default) a batch sluice wrote into shared memory is read
    straight from its message header, with no pyarrow object per column; its arrays
    are valid until the batch is acknowledged (when the next one is asked for): copy
    what you keep longer."""
    from ._numpy import NumpyConverter

    convert = NumpyConverter(columns, strings)
    for batch in connect(shared_memory=shared_memory)._batches(auto_ack, raw=True):
        yield convert(batch)


def ack(count=None):
    """Acknowledges the `count` oldest unacknowledged batches (default: all received)."""
    connect().ack(count)


def acknowledging():
    """Context manager: acknowledges every batch received so far when the block ends
    without an exception (for `batches(auto_ack=False)`)."""
    return connect().acknowledging()


def schema():
    """The stream's `pyarrow.Schema` (None when sluice sends no data)."""
    return connect().schema


def torch_device():
    """The `torch.device` this process should use (see `Connection.torch_device`)."""
    return connect().torch_device()


def _check_torch():
    from ._protocol import _import_torch

    _import_torch("torch_batches()")


def __getattr__(name):
    if name in ("device", "devices", "cuda_visible_devices", "ack_fd", "lockstep", "rank",
                "world_size", "epoch", "step", "epoch_end", "epoch_steps",
                "epoch_steps_unknown"):
        return getattr(connect(), name)
    raise AttributeError(f"module 'sluice_trainer' has no attribute {name!r}")


def _excepthook(kind, value, traceback, previous=sys.excepthook):
    """Prints an uncaught `SluiceError` as one line instead of a traceback."""
    if isinstance(value, SluiceError) and not os.environ.get("SLUICE_TRAINER_TRACEBACK"):
        sys.stderr.write(f"sluice_trainer: {value}\n")
        sys.stderr.flush()
        return
    previous(kind, value, traceback)


sys.excepthook = _excepthook
