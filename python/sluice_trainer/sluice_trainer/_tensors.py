"""Record batches as dicts of `torch.Tensor`s that share memory with the Arrow buffers."""

import warnings

import pyarrow as pa
import pyarrow.compute as pc

from ._hashing import hash_array, is_hashable_type
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
    if nulls not in NULLS:
        raise SluiceError(f"nulls={nulls!r}: use one of {', '.join(map(repr, NULLS))}")
    names = batch.schema.names if columns is None else list(columns)
    tensors = {}
    for name in names:
        index = batch.schema.get_field_index(name)
        if index < 0:
            raise SluiceError(
                f"no column {name!r} in the batch; it has {', '.join(batch.schema.names)}"
            )
        array = batch.column(index)
        buckets = _buckets_for(name, array.type, hash_buckets)
        hashed = hashed_by_sluice(batch.schema.field(index))
        if hashed is not None:
            # sluice hashed it already (--hash-buckets): the int64 buckets wrap as is.
            if buckets is not None and buckets != hashed:
                raise SluiceError(
                    f"column {name!r} was hashed by sluice into {hashed} buckets "
                    f"(--hash-buckets), but {buckets} were asked for here"
                )
            buckets = None
        tensors[name] = column_tensor(array, name, nulls, fill_value, buckets)
    return tensors
