"""Record batches as dicts of numpy arrays that share memory with the batch."""

try:
    import numpy as np
except ImportError:  # numpy comes with the [torch] extra; numpy_batches() needs it
    np = None
import pyarrow as pa

from . import _message
from ._errors import SluiceError
from ._message import Message

STRINGS = ("buffers", "objects")


class Strings:
    """A string or binary column as numpy arrays over its Arrow buffers, with no Python
    object per row: value `i` is `data[offsets[i]:offsets[i + 1]]` (UTF-8 bytes for a
    string column), and `valid` is a bool array (False where the value is null) or None
    when the column has no nulls in this batch. `offsets` (int32, int64 for large
    strings) and `data` (uint8) are read-only views of the batch's memory, valid until
    it is acknowledged. `len()` is the number of rows; `s[i]` one value (str or bytes,
    None for a null); `tolist()` all of them."""

    __slots__ = ("offsets", "data", "valid", "text")

    def __init__(self, offsets, data, valid=None, text=True):
        self.offsets, self.data, self.valid, self.text = offsets, data, valid, text

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} of {len(self)}")
        if self.valid is not None and not self.valid[i]:
            return None
        value = self.data[self.offsets[i]:self.offsets[i + 1]].tobytes()
        return value.decode() if self.text else value

    def tolist(self):
        """Every value, as str (bytes for binary) or None."""
        return [self[i] for i in range(len(self))]

    def __repr__(self):
        return f"Strings({len(self)} rows, {len(self.data)} bytes)"


def _is_view(kind):
    checks = [getattr(pa.types, name, None) for name in ("is_string_view", "is_binary_view")]
    return any(check is not None and check(kind) for check in checks)


def _is_bytes(kind):
    return (pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind)
            or pa.types.is_large_binary(kind) or _is_view(kind))


def _strings_of(array):
    """A pyarrow string/binary array as `Strings` (a view array is first copied into
    offsets and bytes by pyarrow, vectorised)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if _is_view(array.type):
        text = pa.types.is_string_view(array.type)
        array = array.cast(pa.large_string() if text else pa.large_binary())
    kind = array.type
    large = pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
    dtype = np.dtype(np.int64 if large else np.int32)
    _, offsets, data = array.buffers()
    offsets = (np.frombuffer(offsets, dtype, len(array) + 1, array.offset * dtype.itemsize)
               if offsets is not None else np.zeros(1, dtype))
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return Strings(offsets, data, _valid(array),
                   pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _valid(array):
    return array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else None


class NumpyConverter:
    """A batch (`pyarrow.RecordBatch`, Table or `_message.Message`) as a dict of column
    name -> numpy array; see `to_numpy`. What to do with each column is decided once
    per schema."""

    def __init__(self, columns=None, strings="buffers"):
        if np is None:
            raise SluiceError("numpy arrays need numpy, which cannot be imported: "
                              "pip install numpy")
        if strings not in STRINGS:
            raise SluiceError(
                f"strings={strings!r}: use one of {', '.join(map(repr, STRINGS))}")
        self.columns = None if columns is None else list(columns)
        self.strings = strings
        self._schema = None
        self._steps = None

    def __call__(self, batch):
        steps = self._steps_for(batch.schema)
        message = batch if isinstance(batch, Message) and batch.header() is not None else None
        if isinstance(batch, Message) and message is None:
            batch = batch.record_batch()
        arrays = {}
        for name, index, planned, as_strings in steps:
            if message is not None and planned is not None:
                if as_strings:
                    arrays[name] = Strings(*message.bytes_of(planned), message.valid(planned),
                                           planned.text)
                    continue
                if not message.null_count(planned):
                    arrays[name] = message.values(planned)
                    continue
            array = (message.record_batch() if message is not None else batch).column(index)
            if as_strings:
                arrays[name] = _strings_of(array)
            else:
                arrays[name] = array.to_numpy(zero_copy_only=False)
        return arrays

    def _steps_for(self, schema):
        """(name, index, planned, as_strings) per column asked for."""
        if self._schema is not None and (schema is self._schema or schema.equals(self._schema)):
            return self._steps
        planned = {column.index: column for column in _message.plan(schema) or ()}
        steps = []
        for name, index in _message.asked(schema, self.columns):
            kind = schema.field(index).type
            as_strings = self.strings == "buffers" and _is_bytes(kind)
            column = planned.get(index)
            if column is not None and not (
                    as_strings or pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                column = None  # pyarrow's form (datetime64, objects, bools)
            steps.append((name, index, column, as_strings))
        self._schema, self._steps = schema, steps
        return steps


def to_numpy(batch, columns=None, strings="buffers"):
    """A `pyarrow.RecordBatch` (or Table) as a dict of column name -> numpy array.

    - Integer and floating point columns without nulls in the batch are views of its
      memory (read-only, no copy). A column with nulls is copied by pyarrow
      (`to_numpy(zero_copy_only=False)`: integers with nulls become float64 with NaN).
    - String and binary columns: with `strings="buffers"` (the default) a `Strings`
      (offsets, bytes and validity as numpy arrays over the Arrow buffers, no Python
      object per row; string and binary views, which `Dataset` asks sluice for, are
      first copied into offsets and bytes by pyarrow); with `strings="objects"` a numpy object array of str/bytes,
      one Python object per row (much slower).
    - Other types (dates and times as datetime64, booleans, nested, dictionary,
      views) as pyarrow's `to_numpy(zero_copy_only=False)`.
    - `columns` picks and orders the columns (default: all of them).
    """
    return NumpyConverter(columns, strings)(batch)
