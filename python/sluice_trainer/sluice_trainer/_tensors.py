"""Record batches as dicts of `torch.Tensor`s that share memory with the Arrow buffers."""

import warnings

try:
    import numpy as np
except ImportError:  # numpy comes with the [torch] extra; numpy_batches() needs it
    np = None
import pyarrow as pa
import pyarrow.compute as pc

from . import _message
from ._hashing import hash_array, is_hashable_type
from ._message import Message
from ._protocol import HASH_BUCKETS_KEY, SluiceError, _import_torch

NULLS = ("raise", "fill")

#: Field metadata sluice sets on a column it hashed (`sluice train --hash-buckets`).
HASHED_KEY = HASH_BUCKETS_KEY.encode()


def hashed_by_sluice(field):
    """The bucket count sluice hashed this column into (`--hash-buckets`), or None."""
    value = (field.metadata or {}).get(HASHED_KEY)
    return int(value) if value else None


def _temporal_storage(kind):
    """The integer type a date/time/timestamp/duration column is stored as, else None."""
    if pa.types.is_timestamp(kind) or pa.types.is_duration(kind) or pa.types.is_date64(kind):
        return pa.int64()
    if pa.types.is_date32(kind):
        return pa.int32()
    if pa.types.is_time32(kind):
        return pa.int32()
    if pa.types.is_time64(kind):
        return pa.int64()
    return None


def _buckets_for(name, kind, hash_buckets):
    if hash_buckets is None:
        return None
    if isinstance(hash_buckets, dict):
        return hash_buckets.get(name)
    return hash_buckets if is_hashable_type(kind) else None


def column_tensor(array, name="column", nulls="raise", fill_value=0, buckets=None):
    """One Arrow array as a `torch.Tensor`; see `to_torch` for the rules."""
    torch = _import_torch("torch tensors")
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if buckets is not None:
        return torch.from_numpy(hash_array(array, buckets))
    kind = array.type
    if is_hashable_type(kind):
        raise SluiceError(
            f"column {name!r} holds {kind} values: pass hash_buckets=N (or "
            f"{{{name!r}: N}}) to hash them into int64 buckets, or leave the column out "
            "with columns=[...]"
        )
    storage = _temporal_storage(kind)
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind) or storage is not None):
        raise SluiceError(
            f"column {name!r} has type {kind}, which has no tensor form: cast it when "
            "writing the data, or leave the column out with columns=[...]"
        )
    if storage is not None:
        array = array.view(storage)
    if array.null_count:
        if nulls == "raise":
            raise SluiceError(
                f"column {name!r} has {array.null_count} nulls in this batch of "
                f"{len(array)} rows: pass nulls='fill' (with fill_value=...) to replace "
                "them, or fill them when writing the data"
            )
        fill = pa.scalar(fill_value).cast(array.type)
        array = pc.fill_null(array, fill)  # a copy of this column only
    if pa.types.is_boolean(kind):
        # Arrow packs booleans into bits: one byte per value has to be written.
        return torch.from_numpy(array.to_numpy(zero_copy_only=False))
    values = array.to_numpy(zero_copy_only=True)
    with warnings.catch_warnings():
        # The view is read-only memory of the Arrow batch; torch warns about that.
        warnings.filterwarnings("ignore", message=".*not writable.*")
        return torch.from_numpy(values)


def to_torch(batch, columns=None, hash_buckets=None, nulls="raise", fill_value=0):
    """A `pyarrow.RecordBatch` (or Table) as a dict of column name -> `torch.Tensor`.

    - Integer, floating point, date and time columns become tensors of the same dtype
      (dates and times as their integer storage) that *share memory with the Arrow
      buffers*: no copy is made. Treat them as read-only (call `.float()`, `.to(device)`
      etc., which make new tensors); writing into them in place changes the batch.
    - Boolean columns are bit-packed in Arrow, so they become `torch.bool` tensors by a
      (vectorised) copy.
    - Strings, binary and dictionary (categorical) columns are hashed into int64 buckets
      when `hash_buckets` asks for it: an int N hashes every such column into
      [0, N); a dict {name: N} hashes exactly the columns it names (integer columns
      too). The hash is stable across processes and machines (see `bucket_of`). Such a
      column not asked for raises `SluiceError`.
      Columns sluice already hashed (`sluice train --hash-buckets`, marked in their
      field metadata) arrive as int64 buckets and are wrapped as they are.
    - Nulls: with `nulls="raise"` (the default) a numeric column holding nulls in this
      batch raises `SluiceError` naming it; `nulls="fill"` replaces them with
      `fill_value` (that column is then copied; columns without nulls stay zero-copy).
      Null strings are hashed to a bucket of their own.
    - `columns` picks and orders the columns (default: all of them).
    """
    return TorchConverter(columns, hash_buckets, nulls, fill_value)(batch)


class TorchConverter:
    """`to_torch` for every batch of a stream: what to do with each column is decided
    once per schema, and a batch sluice wrote into shared memory as a lone message
    (`_message.Message`) has its flat columns wrapped straight from the memory, with
    no pyarrow object per column."""

    def __init__(self, columns=None, hash_buckets=None, nulls="raise", fill_value=0):
        if nulls not in NULLS:
            raise SluiceError(f"nulls={nulls!r}: use one of {', '.join(map(repr, NULLS))}")
        self.columns = None if columns is None else list(columns)
        self.hash_buckets, self.nulls, self.fill_value = hash_buckets, nulls, fill_value
        self._schema = None
        self._steps = None
        self._warned = False

    def __call__(self, batch):
        """`batch` (a `pyarrow.RecordBatch`, Table or `_message.Message`) as a dict of
        column name -> `torch.Tensor`."""
        torch = _import_torch("torch tensors")
        steps = self._steps_for(batch.schema)
        message = batch if isinstance(batch, Message) and batch.header() is not None else None
        if isinstance(batch, Message) and message is None:
            batch = batch.record_batch()
        tensors = {}
        with warnings.catch_warnings():
            # The views are read-only memory of the batch; torch warns about that.
            warnings.filterwarnings("ignore", message=".*not writable.*")
            if message is not None:
                rows, nodes, buffers, body = message.header()
                region, from_numpy, frombuffer = message.region, torch.from_numpy, np.frombuffer
            for name, index, buckets, fixed in steps:
                if message is not None:
                    if fixed is not None and not nodes[2 * index + 1] and rows:
                        at = body + buffers[2 * fixed.first_buffer + 2]
                        tensors[name] = from_numpy(frombuffer(region, fixed.dtype, rows, at))
                        continue
                    array = message.record_batch().column(index)
                else:
                    array = batch.column(index)
                tensors[name] = column_tensor(array, name, self.nulls, self.fill_value,
                                              buckets)
        return tensors

    def _steps_for(self, schema):
        """(name, index, buckets, fixed) per column asked for: the buckets to hash it
        into here, and its `_message.Column` when it is a FIXED column wrapped as it
        lies. Raises `SluiceError` for a column that has no tensor form."""
        if self._schema is not None and (schema is self._schema or schema.equals(self._schema)):
            return self._steps
        planned = {column.index: column for column in _message.plan(schema) or ()}
        steps = []
        for name, index in _message.asked(schema, self.columns):
            field = schema.field(index)
            buckets = _buckets_for(name, field.type, self.hash_buckets)
            hashed = hashed_by_sluice(field)
            if hashed is not None:
                # sluice hashed it already (--hash-buckets): the int64 buckets wrap as is.
                if buckets is not None and buckets != hashed:
                    raise SluiceError(
                        f"column {name!r} was hashed by sluice into {hashed} buckets "
                        f"(--hash-buckets), but {buckets} were asked for here"
                    )
                buckets = None
            _check_tensor_form(name, field.type, buckets)
            fixed = planned.get(index)
            if buckets is not None or fixed is None or fixed.layout != _message.FIXED:
                fixed = None
            steps.append((name, index, buckets, fixed))
        self._schema, self._steps = schema, steps
        return steps


def _check_tensor_form(name, kind, buckets):
    """Raises `SluiceError` when a column of type `kind` has no tensor form."""
    if buckets is not None:
        return
    if is_hashable_type(kind):
        raise SluiceError(
            f"column {name!r} holds {kind} values: pass hash_buckets=N (or "
            f"{{{name!r}: N}}) to hash them into int64 buckets, or leave the column out "
            "with columns=[...]"
        )
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind) or _temporal_storage(kind) is not None):
        raise SluiceError(
            f"column {name!r} has type {kind}, which has no tensor form: cast it when "
            "writing the data, or leave the column out with columns=[...]"
        )
