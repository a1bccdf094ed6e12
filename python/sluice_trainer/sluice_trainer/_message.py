"""A lone Arrow record batch message in shared memory, read without pyarrow objects.

sluice writes each batch for a trainer that asked for `shm message` as one record batch
message: a flatbuffer header (the batch's length, each column's length and null count,
and where each buffer lies in the body) followed by the body, every buffer on a 64-byte
boundary. For a schema of flat columns (numbers, dates and times, booleans, strings and
binary) the columns are read here straight from that header: numpy arrays over the
mapped memory, no `pyarrow.Array` per column (whose wrapping costs more than the rest of
the hand-off). Any other schema, or a compressed body, is read by pyarrow
(`Message.record_batch()`).
"""

import struct

try:
    import numpy as np
except ImportError:  # numpy comes with the [torch] extra; numpy_batches() needs it
    np = None
import pyarrow as pa

from ._errors import SluiceError

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_CONTINUATION = 0xFFFFFFFF
_RECORD_BATCH = 3  # MessageHeader.RecordBatch in Message.fbs

#: How a column of a planned schema lies in the body.
FIXED, BOOLEAN, BYTES = "fixed", "boolean", "bytes"


class Column:
    """One column of a planned schema: its name, position, layout (FIXED: validity and
    values; BOOLEAN: validity and bits; BYTES: validity, offsets, bytes), the numpy
    dtype of its values (of its offsets for BYTES) and, for BYTES, whether it is text."""

    __slots__ = ("name", "index", "layout", "dtype", "text", "first_buffer")

    def __init__(self, name, index, layout, dtype, text, first_buffer):
        self.name, self.index, self.layout = name, index, layout
        self.dtype, self.text, self.first_buffer = dtype, text, first_buffer


def _layout(kind):
    """(layout, dtype, text) of an Arrow type read from the header, or None."""
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return FIXED, np.dtype(kind.to_pandas_dtype()), False
    if (pa.types.is_timestamp(kind) or pa.types.is_duration(kind)
            or pa.types.is_date64(kind) or pa.types.is_time64(kind)):
        return FIXED, np.dtype(np.int64), False
    if pa.types.is_date32(kind) or pa.types.is_time32(kind):
        return FIXED, np.dtype(np.int32), False
    if pa.types.is_boolean(kind):
        return BOOLEAN, None, False
    if pa.types.is_string(kind) or pa.types.is_binary(kind):
        return BYTES, np.dtype(np.int32), pa.types.is_string(kind)
    if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        return BYTES, np.dtype(np.int64), pa.types.is_large_string(kind)
    return None


def asked(schema, columns):
    """(name, index) of each column asked for (`columns`, or every column when None),
    in that order; raises `SluiceError` naming a column the batch lacks."""
    names = schema.names if columns is None else columns
    out = []
    for name in names:
        index = schema.get_field_index(name)
        if index < 0:
            raise SluiceError(
                f"no column {name!r} in the batch; it has {', '.join(schema.names)}")
        out.append((name, index))
    return out


def plan(schema):
    """The columns of `schema` as read from the header, or None when some column is not
    flat (nested, dictionary, view, decimal, ...): then pyarrow reads the batch."""
    if np is None:
        return None
    columns, buffer = [], 0
    for index, field in enumerate(schema):
        layout = _layout(field.type)
        if layout is None:
            return None
        columns.append(Column(field.name, index, *layout, buffer))
        buffer += 3 if layout[0] == BYTES else 2
    return tuple(columns)


class Message:
    """A batch as sluice wrote it into shared memory (a lone record batch message of
    `schema`), not yet read: `columns()` reads its flat columns as numpy arrays,
    `record_batch()` the whole batch with pyarrow. Valid until acknowledged."""

    __slots__ = ("region", "schema", "plan", "_batch", "_header")

    def __init__(self, region, schema, planned):
        self.region, self.schema, self.plan = region, schema, planned
        self._batch = None
        self._header = None

    def record_batch(self):
        """The batch as a `pyarrow.RecordBatch` (read once, without a copy)."""
        if self._batch is None:
            self._batch = pa.ipc.read_record_batch(pa.py_buffer(self.region), self.schema)
        return self._batch

    @property
    def num_rows(self):
        header = self.header()
        return header[0] if header is not None else self.record_batch().num_rows

    def header(self):
        """(rows, nodes, buffers, body): the batch's length, each column's (length,
        null count) and each buffer's (offset, length) as flat tuples of ints, and where
        the body starts; None when the header is not read here (no plan, compression,
        not a record batch)."""
        if self._header is None and self.plan is not None:
            self._header = _read_header(self.region) or False
        return self._header or None

    def null_count(self, column):
        """Nulls of `column` (a `Column` of the plan) in this batch."""
        return self.header()[1][2 * column.index + 1]

    def values(self, column):
        """The values of a FIXED `column` as a read-only numpy view of the memory."""
        rows, _, buffers, body = self.header()
        at = 2 * (column.first_buffer + 1)
        if rows == 0:
            return np.zeros(0, column.dtype)
        return np.frombuffer(self.region, column.dtype, rows, body + buffers[at])

    def valid(self, column):
        """A bool array, False where `column` is null, or None when it has no nulls."""
        if not self.null_count(column):
            return None
        rows, _, buffers, body = self.header()
        at = 2 * column.first_buffer
        bits = np.frombuffer(self.region, np.uint8, (rows + 7) // 8, body + buffers[at])
        return np.unpackbits(bits, count=rows, bitorder="little").view(np.bool_)

    def bytes_of(self, column):
        """(offsets, data) of a BYTES `column`: rows + 1 offsets and the bytes they index,
        read-only numpy views of the memory."""
        rows, _, buffers, body = self.header()
        at = 2 * (column.first_buffer + 1)
        if rows == 0:
            return np.zeros(1, column.dtype), np.zeros(0, np.uint8)
        offsets = np.frombuffer(self.region, column.dtype, rows + 1, body + buffers[at])
        data = np.frombuffer(self.region, np.uint8, buffers[at + 3], body + buffers[at + 2])
        return offsets, data


_vectors = {}


def _vector(region, at, count):
    """`count` pairs of little-endian int64 at `at`, as one flat tuple."""
    unpack = _vectors.get(count)
    if unpack is None:
        unpack = _vectors[count] = struct.Struct("<%dq" % (2 * count)).unpack_from
    return unpack(region, at)


def _field(region, table, vtable, slot):
    """Where field `slot` of the flatbuffer table at `table` lies, or None if absent."""
    entry = 4 + 2 * slot
    if entry >= _U16.unpack_from(region, vtable)[0]:
        return None
    offset = _U16.unpack_from(region, vtable + entry)[0]
    return table + offset if offset else None


def _table_at(region, at):
    """(table, vtable) of the table an offset field at `at` points to."""
    table = at + _U32.unpack_from(region, at)[0]
    return table, table - _I32.unpack_from(region, table)[0]


def _read_header(region):
    """See `Message.header`; None when it is not an uncompressed record batch."""
    if len(region) < 8:
        return None
    start = 4
    size = _U32.unpack_from(region, 0)[0]
    if size == _CONTINUATION:
        size, start = _I32.unpack_from(region, 4)[0], 8
    body = start + size
    message, vtable = _table_at(region, start)
    kind = _field(region, message, vtable, 1)
    header = _field(region, message, vtable, 2)
    if kind is None or header is None or _U8.unpack_from(region, kind)[0] != _RECORD_BATCH:
        return None
    batch, vtable = _table_at(region, header)
    if _field(region, batch, vtable, 3) is not None:  # compression
        return None
    at = _field(region, batch, vtable, 0)
    rows = _I64.unpack_from(region, at)[0] if at is not None else 0
    vectors = []
    for slot in (1, 2):
        at = _field(region, batch, vtable, slot)
        if at is None:
            vectors.append(())
            continue
        start_of = at + _U32.unpack_from(region, at)[0]
        count = _U32.unpack_from(region, start_of)[0]
        vectors.append(_vector(region, start_of + 4, count))
    return rows, vectors[0], vectors[1], body
