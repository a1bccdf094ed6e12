"""`Dataset`: sluice inside any training loop, with the `sluice` binary as a child.

A process that owns its loop (a notebook, a `torchrun` rank, a TorchDistributor
function, a Lightning `DataModule`) creates a `Dataset` and iterates it::

    ds = sluice_trainer.Dataset("s3://bucket/clicks/", batch_size=4096, epochs=2)
    for batch in ds:                 # pyarrow.RecordBatch, acknowledged at the next
        train_step(batch)

The object starts `sluice train SOURCE --attach DATA,ACK,SHM` (or `sluice worker
--master URL --attach ...` for one worker of a distributed job) as its child and is
that sluice's one trainer: the exec protocol, on pipes this process owns, with the
batches in shared memory, so it is as fast as an `--exec` trainer. sluice dies with
this process however it ends (it asks the kernel for SIGKILL when its parent dies),
and its errors are raised here as `SluiceError` with sluice's one-line message.
"""

import io
import os
import queue
import select
import signal
import subprocess
import sys
import threading

from ._binary import find_sluice_bin
from ._device import DeviceFeeder
from ._numpy import NumpyConverter
from ._protocol import (ACK_FD_ENV, DEVICE_ENV, DEVICES_ENV, SHM_FD_ENV, SHM_MESSAGES_ENV,
                        Connection,
                        SluiceError, _import_torch)
from ._tensors import TorchConverter

__all__ = ["Dataset", "Epoch"]

# Under lockstep: how long a rank waits for a batch of its own before the step
# goes on with the batches of the other ranks.
_LOCKSTEP_WAIT = 0.2

# How long sluice may take to exit once its stream broke.
_EXIT_WAIT = 60.0

# How long sluice may take to exit once told to stop, before it is killed.
_STOP_GRACE = 5.0


class _WholeReads(io.RawIOBase):
    """The data pipe from sluice, unbuffered (select() on it tells whether a message
    waits: nothing is read ahead) but read whole: `read(n)` returns n bytes unless
    the stream ends, as pyarrow's IPC reader expects of a file. A plain unbuffered
    pipe returns what one read got (64 KiB at most), which cuts a larger message."""

    def __init__(self, fd):
        super().__init__()
        self._fd = fd

    def readable(self):
        return True

    def fileno(self):
        return self._fd

    def read(self, size=-1):
        if size is None or size < 0:
            return self.readall()
        chunks = []
        while size > 0:
            chunk = os.read(self._fd, size)
            if not chunk:
                break
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self):
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


class _Launcher:
    """Starts every sluice child from one thread that lives as long as this process:
    the kernel sends a child its parent-death signal when the *thread* that forked it
    ends, so a `Dataset` made in a short-lived thread must not fork from there."""

    def __init__(self):
        self._requests = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="sluice-launcher",
                                        daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            argv, pass_fds, done, result = self._requests.get()
            try:
                result.append(subprocess.Popen(
                    argv, pass_fds=pass_fds, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    start_new_session=True))
            except BaseException as e:  # handed to the caller
                result.append(e)
            finally:
                done.set()

    def start(self, argv, pass_fds):
        done, result = threading.Event(), []
        self._requests.put((argv, pass_fds, done, result))
        done.wait()
        if isinstance(result[0], BaseException):
            raise result[0]
        return result[0]


_launcher = None
_launcher_lock = threading.Lock()


def _launch(argv, pass_fds):
    global _launcher
    with _launcher_lock:
        if _launcher is None:
            _launcher = _Launcher()
    return _launcher.start(argv, pass_fds)


def _flag(name):
    return "--" + name.replace("_", "-")


def _option_args(options):
    """`--name=value` for each option (so that flags whose value is optional, as
    `wait_success="10m"`, take it too); True is a bare flag, False and None nothing,
    lists and tuples are comma-separated, dicts `K=V,...` (`hash_buckets`)."""
    argv = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(_flag(name))
            continue
        if isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        argv.append(f"{_flag(name)}={value}")
    return argv


def _reads_views():
    """Whether this pyarrow reads `Utf8View`/`BinaryView` columns (16 and later)."""
    try:
        import pyarrow as pa
        return int(pa.__version__.split(".")[0]) >= 16 and hasattr(pa, "string_view")
    except (ImportError, ValueError):
        return False


def _binary(binary):
    return binary or find_sluice_bin()


def _process_group():
    """`torch.distributed` when a process group of more than one rank is
    initialised (and torch imports), else None."""
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def _ipc(batch):
    """A batch as the bytes of an Arrow IPC stream (a copy, to send to other ranks)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _batches_of(data):
    import pyarrow as pa

    return list(pa.ipc.open_stream(pa.py_buffer(data)))


class _Feed:
    """A Dataset's one stream of batches, read one batch ahead where an epoch must be
    told before its first batch is yielded (its number, its steps). A batch is read
    only when the loop asks for the next (the one before is then acknowledged) or
    when `len()` asks before an epoch's first batch."""

    def __init__(self, source, dataset, raw):
        self._source = source
        self._dataset = dataset
        self.raw = raw
        self._held = None
        self._ended = False
        self.shown = None

    def holds(self):
        return self._held is not None

    def peek(self):
        """The next (batch, tags) without taking it; None at the end."""
        if self._held is None and not self._ended:
            batch = next(self._source, None)
            if batch is None:
                self._ended = True
            else:
                self._held = (batch, self._dataset._tags)
        return self._held

    def take(self):
        held = self.peek()
        self._held = None
        if held is not None:
            self.shown = held[1]
        return held


class Epoch:
    """One epoch of a `Dataset` (`Dataset.epochs()`): iterate it for its batches.
    `index` is its number, 0-based, as `Dataset.epoch` counts; `len()` is its steps
    where sluice knows them before it starts (every file's row count is in its
    footer, and no filter on data columns, --follow, --batch-bytes or mixing
    decides them as rows are read), else `TypeError` says why."""

    def __init__(self, feed, convert=None):
        self._feed = feed
        self._convert = convert
        self.finished = False
        _, (self.index, _, self._steps, self._why) = feed.peek()

    def __len__(self):
        if self._steps is None:
            raise TypeError(
                f"the steps of epoch {self.index} are not known before it starts: "
                f"{self._why or 'sluice did not say why'}")
        return self._steps

    def __iter__(self):
        while True:
            held = self._feed.peek()
            if held is None or held[1][0] != self.index:
                self.finished = True
                return
            batch, _ = self._feed.take()
            yield batch if self._convert is None else self._convert(batch)


class Dataset:
    """The batches of a sluice job, for a loop this process runs.

    `Dataset(source, batch_size=..., columns=..., filter=..., epochs=..., seed=...,
    hash_buckets=..., fill_nulls=..., state=..., **options)` runs the job on this
    machine, as `sluice train SOURCE` does (its master embedded); every other
    option of `sluice train` is a keyword (`filter="label IS NOT NULL AND
    country = 'US'"` reads only the rows Spark's `df.filter` keeps, `timezone="America/Los_Angeles"`
    computes its timestamps in that zone as Spark's `spark.sql.session.timeZone`, `split="train=0.9,valid=0.1",
    split_key="id", take="valid"`, `limit=1000`, `shuffle_buffer=8192`...).
    `Dataset(sources=[A, B], weights=[3, 1])` mixes several sources by weight
    (`sluice train A B --weights 3,1`; `epoch_rows=N` sets an epoch's rows, and
    `source_column="src"` adds each row's source name as a column).
    `cache="/local/dir"` (with `cache_size="20GiB"`) keeps what is read from a
    remote store on local disk, so later epochs read it from there (`--cache`).
    `shuffle="global"` (with `seed=`, and `shuffle_window=ROWS`) gives the same
    batches in the same order for the same seed and data, and a `Dataset` with
    `state=` that resumes goes on with the sequence an uninterrupted run gives;
    `global_batch_size=G` with it yields steps of `G` rows of that order, each
    batch one step (`len(epoch)` counts them where the rows are known).

    `Dataset(master="http://...", token_file=..., name=...)` is one worker of a
    distributed job (`sluice worker`), e.g. one `torchrun` rank. Under an
    initialised `torch.distributed` group, `lockstep=True` (the default there)
    gives every rank one batch per step and the same number of steps: when one
    rank's data ends first, the batches the others still get are split evenly
    over all ranks, so DistributedDataParallel never waits for a rank that is done
    and every row is trained once. `lockstep=False` turns it off.

    Iterating yields `pyarrow.RecordBatch`es, every epoch in turn (`epochs`); a
    `Dataset` is iterated once. With `ack=True` (the default) a batch is
    acknowledged when the next one is asked for: the loop body is one training
    step. With `ack=False`, call `ack()` after each optimizer step. Leaving the loop
    early (`break`, an exception) stops sluice; the batch in hand is not
    acknowledged, and with `state=` a new `Dataset` continues from what was.

    One SIGTERM of a loop in the main thread of a process that leaves SIGTERM to
    its default stops sluice as `sluice train` stops: the loop finishes the batch
    in hand, what it acknowledged within sluice's `grace` is committed, and the
    loop ends with `SystemExit(130)` at its next batch (`state=` resumes there).
    A process with its own SIGTERM handler keeps it (call `close()` from there).

    Checkpoints give exactly once into the model: call `resume_checkpoint()`
    before the loop (it declares checkpoints and names the checkpoint to load, or
    None), and `checkpoint(ID)` each time the model is saved.

    The buffers of a batch live in memory sluice reuses once it is acknowledged:
    copy what must outlive the step (`.to(device)` and `.float()` copy).
    """

    def __init__(self, source=None, *, batch_size=1024, columns=None, filter=None, epochs=None,
                 seed=None, hash_buckets=None, fill_nulls=None, state=None,
                 master=None, token_file=None, name=None, ack=True, checkpoints=False,
                 shared_memory=True, lockstep=None, binary=None, log=True, cache=None,
                 cache_size=None, sources=None, **options):
        if sources is not None:
            if source is not None:
                raise SluiceError("Dataset takes a source or sources=[...], not both")
            sources = [str(s) for s in sources]
            if not sources:
                raise SluiceError("sources=[] names no source")
            source = sources[0]
        if (source is None) == (master is None):
            raise SluiceError(
                "Dataset needs a source (Dataset('s3://bucket/out/')) or a master "
                "(Dataset(master='http://host:7070', token_file=...)), not both")
        self._auto_ack = ack
        self._lockstep = _process_group() if lockstep in (None, True) else None
        if lockstep is True and self._lockstep is None:
            raise SluiceError("lockstep=True needs an initialised torch.distributed "
                              "process group (torch.distributed.init_process_group())")
        self._log = log
        self._lines = []
        self._proc = None
        self._conn = None
        self._done = False
        self._iterated = False
        self._closed = False
        self._signalled = False
        common = {"batch_size": batch_size, "hash_buckets": hash_buckets,
                  "fill_nulls": fill_nulls, "cache": cache, "cache_size": cache_size}
        if master is not None:
            given = [k for k, v in (("columns", columns), ("filter", filter), ("epochs", epochs),
                                    ("seed", seed), ("state", state),
                                    ("timezone", options.get("timezone"))) if v is not None]
            if given:
                raise SluiceError(
                    f"{', '.join(given)}: the master of a distributed job decides "
                    "these (sluice master ... --epochs ...); a worker takes none")
            head = ["worker", "--master", master]
            common.update(token_file=token_file, name=name)
        else:
            head = ["train"] + (sources or [str(source)])
            common.update(columns=columns, filter=filter, epochs=epochs, seed=seed,
                          state=state)
        common.update(options)
        # Strings as the views sluice reads them in, without a copy per batch,
        # where this pyarrow reads views (16 and later).
        common.setdefault("string_view", _reads_views())
        argv = [_binary(binary)] + head + _option_args(common) + ["--quiet"]
        self._argv, self._shared_memory = argv, shared_memory
        self._state = None if master is not None or state is None else str(state)
        self._checkpoints = checkpoints
        self._feed = None
        self._tags = (None, None, None, None)
        self._start(argv, shared_memory)
        if checkpoints:
            self._guard(self._conn.declare_checkpoints)

    def _start(self, argv, shared_memory):
        data_r, data_w = os.pipe()
        ack_r, ack_w = os.pipe()
        memory = None
        if shared_memory and hasattr(os, "memfd_create"):
            try:
                memory = os.memfd_create("sluice-batches")
            except OSError:
                memory = None
        fds = [data_w, ack_r] + ([memory] if memory is not None else [])
        argv = argv + ["--attach", ",".join(str(fd) for fd in fds)]
        try:
            self._proc = _launch(argv, tuple(fds))
        except BaseException:
            for fd in (data_r, data_w, ack_r, ack_w, memory):
                if fd is not None:
                    os.close(fd)
            raise
        # sluice holds its ends now: ours close, so that its death ends our reads.
        os.close(data_w)
        os.close(ack_r)
        self._stderr = threading.Thread(target=self._read_stderr, name="sluice-stderr",
                                        daemon=True)
        self._stderr.start()
        env = {ACK_FD_ENV: str(ack_w), DEVICE_ENV: "0", DEVICES_ENV: "1"}
        if memory is not None:
            # Batches as lone record batch messages of the stream's schema, as exec
            # trainers take them: no schema parsed per batch.
            env[SHM_FD_ENV] = str(memory)
            env[SHM_MESSAGES_ENV] = "1"
        # Unbuffered: under lockstep, select() on it tells whether a message waits.
        self._data = _WholeReads(data_r)
        self._ack_fd = ack_w
        self._memory = memory
        self._conn = Connection(env=env, stdin=self._data)
        if memory is not None:
            # sluice may already have stopped (a bad option): then its word, not
            # the closed pipe's.
            self._guard(self._conn.use_shared_memory)

    def _read_stderr(self):
        for raw in self._proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._lines.append(line)
            del self._lines[:-50]
            if self._log and not line.startswith(("sluice: ", "error: ")):
                sys.stderr.write(line + "\n")

    @property
    def pid(self):
        """The process id of the sluice child."""
        return self._proc.pid

    @property
    def received(self):
        """Batches received so far."""
        return self._conn.received

    @property
    def acked(self):
        """Batches acknowledged so far."""
        return self._conn.acked

    @property
    def schema(self):
        """The `pyarrow.Schema` of the batches (waits for sluice to start the stream);
        None when there is no data."""
        return self._guard(lambda: self._conn.schema)

    def __iter__(self):
        return self._iterate()

    def _iterate(self, raw=False):
        """The batches; with `raw`, those that came as lone messages in shared memory
        unread (`_message.Message`), for the numpy and torch forms."""
        if self._iterated:
            raise SluiceError(
                "a Dataset is iterated once (its epochs come one after the other in "
                "one loop); make a new Dataset to train again")
        self._iterated = True
        if self._lockstep is not None:
            return self._lockstep_batches(self._lockstep)
        return self._batches(raw)

    def _lockstep_batches(self, dist):
        """One batch per rank per step, the same number of steps on every rank.
        While every rank has a batch ready, each trains its own. When some rank has
        none ready (its worker waits for a task, or its data ended), the batches the
        others have are pooled and split evenly over all ranks, so that no rank holds
        back the acknowledgements the job needs to go on, and every row is trained
        once. A rank acknowledges its own batch once the step that used it is over;
        the loop ends when every rank's stream ended."""
        import pyarrow as pa

        world, rank = dist.get_world_size(), dist.get_rank()
        ended = False
        held = None
        installed = self._stop_on_sigterm()
        try:
            while True:
                if self._auto_ack and not ended and held is None:
                    self._guard(self._conn.ack)
                batch, held = held, None
                if batch is None and not ended and self._ready(_LOCKSTEP_WAIT):
                    batch = self._guard(self._conn.read_batch)
                    if batch is None:
                        ended = True
                        self._finish()
                state = "ended" if ended else ("batch" if batch is not None else "wait")
                states = [None] * world
                dist.all_gather_object(states, (state, self._conn.world_rank is not None))
                if any(global_batches for _, global_batches in states):
                    # Global batches of a master's world: each rank trains its own
                    # slice of every step; a rank whose slice is not read yet is
                    # waited for, never filled in with another's rows.
                    if all(s == "batch" for s, _ in states):
                        self._tags = (self._conn.epoch, self._conn.step,
                                      self._conn.epoch_steps, self._conn.epoch_steps_unknown)
                        yield batch
                    elif all(s == "ended" for s, _ in states):
                        return
                    else:
                        held = batch
                    continue
                states = [s for s, _ in states]
                if all(s == "batch" for s in states):
                    yield batch
                    continue
                if all(s == "ended" for s in states):
                    return
                if "batch" not in states:
                    continue
                pool = [None] * world
                dist.all_gather_object(pool, None if batch is None else _ipc(batch))
                parts = [b for part in pool if part is not None for b in _batches_of(part)]
                table = pa.Table.from_batches(parts)
                rows = table.num_rows
                first, last = rows * rank // world, rows * (rank + 1) // world
                mine = table.slice(first, last - first).combine_chunks().to_batches()
                yield mine[0] if mine else pa.RecordBatch.from_pylist([], schema=table.schema)
        finally:
            self._default_sigterm(installed)
            if not self._done:
                self.close()

    def _ready(self, timeout):
        """Whether the stream has bytes to read within `timeout` seconds."""
        readable, _, _ = select.select([self._data], [], [], timeout)
        return bool(readable)

    def _stop_on_sigterm(self):
        """For the loop's time, where this is the main thread and SIGTERM is left to
        its default (the process would die at once, sluice with it, and what was
        trained since the last commit would be served again): one SIGTERM is passed
        on to sluice, which drains, commits and ends the stream. Returns whether the
        handler was installed (to be undone by `_default_sigterm`)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return False
            signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:
            return False
        return True

    def _on_sigterm(self, signum, frame):
        if self._signalled:
            return
        self._signalled = True
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    @staticmethod
    def _default_sigterm(installed):
        if installed:
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            except ValueError:
                pass

    def _stopped(self, code):
        """sluice exited with `code` after a SIGTERM this loop passed on: the loop
        ends as the process would have, 128 + SIGINT (130) as sluice reports a stop."""
        if self._signalled and code in (0, 130, 143):
            raise SystemExit(130)

    def _batches(self, raw=False):
        installed = self._stop_on_sigterm()
        try:
            while True:
                if self._auto_ack:
                    self._guard(self._conn.ack)
                batch = self._guard(lambda: self._conn.read_batch(raw))
                if batch is None:
                    self._finish()
                    return
                conn = self._conn
                self._tags = (conn.epoch, conn.step, conn.epoch_steps, conn.epoch_steps_unknown)
                yield batch
        finally:
            self._default_sigterm(installed)
            if not self._done:
                self.close()

    def _guard(self, call):
        """Runs `call`; a failure of the exchange with sluice (the stream or the ack
        pipe broke) raises sluice's own message once sluice has ended."""
        try:
            return call()
        except SluiceError as e:
            text = str(e)
            if "Arrow stream" in text or "acknowledgement pipe" in text:
                # sluice closes them only as it ends: wait for its word.
                self._raise_exit(fallback=e, wait=_EXIT_WAIT)
            raise

    def _raise_exit(self, fallback=None, wait=_EXIT_WAIT):
        """Raises sluice's error once it exited with a failure (waiting up to
        `wait` seconds for it to exit)."""
        try:
            code = self._proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            return
        if code != 0 or self._signalled:
            self._stderr.join(timeout=_EXIT_WAIT)
            self._close_fds()
            self._done = True
            self._stopped(code)
            raise SluiceError(self._message(code)) from fallback

    def _message(self, code):
        for prefix in ("sluice: ", "error: "):  # sluice's error line, else clap's
            for line in reversed(self._lines):
                if line.startswith(prefix):
                    return line[len(prefix):]
        tail = "; ".join(self._lines[-3:])
        return f"sluice exited with status {code}" + (f": {tail}" if tail else "")

    def _finish(self):
        """The stream ended: acknowledge the last batch, let sluice commit and exit."""
        if self._auto_ack:
            self._conn.ack()
        self._close_fds()
        code = self._proc.wait()
        self._stderr.join(timeout=_STOP_GRACE)
        self._done = True
        self._stopped(code)
        if code != 0:
            raise SluiceError(self._message(code))

    def _close_fds(self):
        for fd in (self._ack_fd, self._memory):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._ack_fd = self._memory = None
        try:
            self._data.close()
        except OSError:
            pass

    def close(self):
        """Stops sluice (what was acknowledged is committed; with `state=` a new
        Dataset resumes there) and waits for it to exit. Called when the loop is left
        early; does nothing once the stream ended."""
        if self._closed or self._proc is None:
            return
        self._closed = True
        if self._done:
            return
        self._done = True
        self._close_fds()
        if self._proc.poll() is None:
            try:
                self._proc.send_signal(signal.SIGTERM)
                self._proc.wait(timeout=_STOP_GRACE)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            except ProcessLookupError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def ack(self, count=None):
        """Acknowledges the `count` oldest unacknowledged batches (default: all
        yielded): call it once they are applied (for `ack=False`)."""
        if count is None:
            held = self._feed is not None and self._feed.holds()
            count = self._conn.pending - (1 if held else 0)
        self._guard(lambda: self._conn.ack(count))

    @property
    def epoch(self):
        """The epoch of the last batch yielded, 0-based (None before the first)."""
        return self._shown[0]

    @property
    def step(self):
        """The step of the last batch yielded in its epoch, 0-based (None before the
        first)."""
        return self._shown[1]

    @property
    def _shown(self):
        if self._feed is not None and self._feed.shown is not None:
            return self._feed.shown
        return self._tags

    def epochs(self):
        """Yields each epoch in turn as an `Epoch`: iterate it for its batches
        (`pyarrow.RecordBatch`es); `len(epoch)` is its steps where sluice knows them
        before it starts, else `TypeError` says why. Leaving an epoch's loop before
        its end ends the iteration as leaving a Dataset's loop does."""
        return self._epochs(raw=False)

    def _epochs(self, raw, convert=None):
        feed = self._feeder(raw)
        while feed.peek() is not None:
            epoch = Epoch(feed, convert)
            yield epoch
            if not epoch.finished:
                self.close()
                return

    def _feeder(self, raw):
        if self._feed is None:
            self._feed = _Feed(self._iterate(raw), self, raw)
        elif self._feed.raw != raw:
            raise SluiceError("a Dataset is iterated once, in one form (batches, or "
                              "torch_iterable()'s tensors)")
        return self._feed

    def state_dict(self):
        """sluice's position, in the convention of torchdata's `StatefulDataLoader`:
        save it with the model, and `load_state_dict()` it into a new `Dataset` of
        the same job before its loop to resume there. The position is what sluice
        committed in `state=` (where `Dataset(state=...)` resumes from): with
        `ack=True` the batches yielded so far are acknowledged first (they are in the
        model saved with it). Needs `state=`."""
        if self._state is None:
            raise SluiceError(
                "state_dict() needs Dataset(..., state=DIR): sluice keeps its committed "
                "position there (a distributed job's master keeps its own)")
        if self._auto_ack and self._conn is not None and not self._done:
            self.ack()
        epoch, step = self._shown[0], self._shown[1]
        return {"sluice_state": self._state, "epoch": epoch, "step": step,
                "acked": self.acked}

    def load_state_dict(self, state_dict):
        """Resumes from `state_dict` (from `state_dict()`) at the position sluice
        committed in its `state=` location. Call it before the loop; a Dataset made
        with another `state=` (or none) starts sluice again on that one."""
        if self._iterated:
            raise SluiceError("load_state_dict() after the loop started: call it before")
        try:
            location = str(state_dict["sluice_state"])
        except (KeyError, TypeError):
            raise SluiceError(
                "load_state_dict(): not a Dataset state_dict() (no 'sluice_state')") from None
        if location == self._state:
            return
        if "--master" in self._argv:
            raise SluiceError("load_state_dict(): a distributed job's master keeps its "
                              "position (sluice master --state)")
        self.close()
        argv = [a for a in self._argv if not a.startswith("--state=")]
        self._argv = argv[:-1] + [f"--state={location}"] + argv[-1:]
        self._state = location
        self._closed = self._done = False
        self._lines = []
        self._start(self._argv, self._shared_memory)
        if self._checkpoints:
            self._guard(self._conn.declare_checkpoints)

    def resume_checkpoint(self):
        """Declares checkpoints and returns the ID of the checkpoint to load before
        training (the job resumes after it), or None to start from scratch. Call it
        before the loop; it waits for sluice to start the stream."""
        self._guard(self._conn.declare_checkpoints)
        self._guard(self._conn._open)
        return self._conn.resume_checkpoint()

    def checkpoint(self, checkpoint_id, ack=True):
        """Reports the state saved as `checkpoint_id` durable: acknowledges the
        batches received so far (unless `ack=False`), then records the checkpoint.
        Declares checkpoints first if `resume_checkpoint()` or `checkpoints=True`
        did not (that must come before the first acknowledgement)."""
        self._guard(self._conn.declare_checkpoints)
        self._guard(lambda: self._conn.checkpoint(checkpoint_id, ack=ack))

    def completed_checkpoint(self):
        """The newest checkpoint ID sluice recorded complete, or None."""
        return self._conn.completed_checkpoint()

    def torch(self, columns=None, hash_buckets=None, nulls="raise", fill_value=0,
              device=None):
        """Yields each batch as a dict of column name -> `torch.Tensor` (see
        `sluice_trainer.to_torch`), views of the batch's memory; with `device`, on that
        device (for CUDA through pinned buffers and a copy stream, as
        `sluice_trainer.torch_batches(device=...)`)."""
        _import_torch("Dataset.torch()")
        feed = DeviceFeeder(device) if device is not None else None
        convert = TorchConverter(columns, hash_buckets, nulls, fill_value)
        for batch in self._iterate(raw=True):
            tensors = convert(batch)
            yield feed(tensors) if feed is not None else tensors

    def numpy(self, columns=None, strings="objects"):
        """Yields each batch as a dict of column name -> `numpy.ndarray` (without a
        copy where a numeric column has no nulls; see `sluice_trainer.to_numpy`).
        String columns come as object arrays of str, one Python object per row;
        `strings="buffers"` hands them over as `sluice_trainer.Strings` (offsets and
        bytes as numpy arrays over the batch's memory), much faster."""
        convert = NumpyConverter(columns or None, strings)
        for batch in self._iterate(raw=True):
            yield convert(batch)

    def torch_iterable(self, **torch_options):
        """A `torch.utils.data.IterableDataset` over `torch()`, for code that wants
        `DataLoader(ds.torch_iterable(), batch_size=None)` (sluice batches already;
        use no DataLoader workers: this process is the trainer)."""
        torch = _import_torch("Dataset.torch_iterable()")
        outer = self
        convert = TorchConverter(torch_options.get("columns"), torch_options.get("hash_buckets"),
                                 torch_options.get("nulls", "raise"),
                                 torch_options.get("fill_value", 0))

        class _Iterable(torch.utils.data.IterableDataset):
            """Each `iter()` is the next epoch (as a DataLoader starts one per
            epoch); `len()` its steps where sluice knows them before it starts."""

            def __iter__(self):
                epoch = next(outer._epochs(raw=True, convert=convert), None)
                return iter(()) if epoch is None else iter(epoch)

            def __len__(self):
                feed = outer._feeder(raw=True)
                if feed.peek() is None:
                    return 0
                return len(Epoch(feed, convert))

        return _Iterable()
