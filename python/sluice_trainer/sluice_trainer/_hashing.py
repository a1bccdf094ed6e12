"""Stable hashing of categorical columns into int64 buckets, a whole column at a time.

The hash of a value depends only on its bytes (UTF-8 for strings) or, for integers,
its 64-bit two's complement value: every process, device and machine maps a value to
the same bucket, run after run (unlike Python's `hash`). The algorithm, for a string
or binary value of bytes b_0 .. b_{n-1}:

    h = sum((b_j + 1) * P**j for j in range(n)) mod 2**64      P = 0x100000001B3
    hash = splitmix64(h XOR (n * G) mod 2**64)                  G = 0x9E3779B97F4A7C15

and for an integer v: `splitmix64((v mod 2**64) XOR 0xA0761D6478BD642F)`. A null hashes
to `splitmix64(2**64 - 1)`. The bucket is `hash % buckets`. `bucket_of(value, buckets)`
computes it for one value (for serving code that must map values as training did);
`hash_array(array, buckets)` computes it for a whole Arrow array with numpy, with no
Python work per row.
"""

import pyarrow as pa
import pyarrow.compute as pc

from ._errors import SluiceError

_M = (1 << 64) - 1
_P = 0x100000001B3
_G = 0x9E3779B97F4A7C15
_INT_SEED = 0xA0761D6478BD642F


def _splitmix64_int(x):
    x = (x + 0x9E3779B97F4A7C15) & _M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M
    return x ^ (x >> 31)


_NULL_HASH = _splitmix64_int(_M)


def hash64(value):
    """The 64-bit hash of one value (str, bytes, int or None), as `hash_array` computes
    it for every row of a column. Slow (pure Python): for checks and serving code."""
    if value is None:
        return _NULL_HASH
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return _splitmix64_int((value & _M) ^ _INT_SEED)
    if isinstance(value, str):
        value = value.encode("utf-8")
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"hash64 takes str, bytes, int or None, not {type(value).__name__}")
    data = bytes(value)
    h, power = 0, 1
    for byte in data:
        h = (h + (byte + 1) * power) & _M
        power = (power * _P) & _M
    return _splitmix64_int(h ^ ((len(data) * _G) & _M))


def bucket_of(value, buckets):
    """The bucket (0 <= bucket < buckets) `hash_array` gives `value`."""
    return hash64(value) % buckets


def _np():
    try:
        import numpy
    except ImportError as e:
        raise SluiceError(f"hashing columns needs numpy ({e}): pip install numpy") from None
    return numpy


def _splitmix64(np, x):
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


_powers_cache = None


def _powers(np, n):
    """P**0 .. P**(n-1) mod 2**64 (grown and kept across calls)."""
    global _powers_cache
    if _powers_cache is None or len(_powers_cache) < n:
        size = max(n, 64, 0 if _powers_cache is None else 2 * len(_powers_cache))
        powers = np.full(size, _P, dtype=np.uint64)
        powers[0] = 1
        with np.errstate(over="ignore"):
            _powers_cache = np.cumprod(powers, dtype=np.uint64)
    return _powers_cache[:n]


def _hash_binary(np, arr):
    """uint64 hashes of a binary / large_binary array's values (nulls not handled)."""
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    large = pa.types.is_large_binary(arr.type)
    offset_type = np.int64 if large else np.int32
    offset_size = 8 if large else 4
    buffers = arr.buffers()
    offsets = np.frombuffer(
        buffers[1], dtype=offset_type, count=n + 1, offset=arr.offset * offset_size
    ).astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    total = end - start
    if total and buffers[2] is not None:
        data = np.frombuffer(buffers[2], dtype=np.uint8, count=total, offset=start)
    else:
        data = np.zeros(0, dtype=np.uint8)
    lengths = np.diff(offsets)
    rel = offsets[:-1] - start
    # Position of every byte inside its own value, then (b + 1) * P**position.
    position = np.arange(total, dtype=np.int64) - np.repeat(rel, lengths)
    longest = int(lengths.max())
    with np.errstate(over="ignore"):
        terms = (data.astype(np.uint64) + np.uint64(1)) * _powers(np, longest)[position]
        sums = np.zeros(total + 1, dtype=np.uint64)
        np.cumsum(terms, dtype=np.uint64, out=sums[1:])
        per_value = sums[rel + lengths] - sums[rel]
        mixed = per_value ^ (lengths.astype(np.uint64) * np.uint64(_G))
        return _splitmix64(np, mixed)


def _hash_integers(np, arr):
    values = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    with np.errstate(over="ignore"):
        return _splitmix64(np, values.view(np.uint64) ^ np.uint64(_INT_SEED))


def _hashes(np, arr):
    """uint64 hashes of every value of `arr`, nulls included."""
    kind = arr.type
    if pa.types.is_dictionary(kind):
        dictionary = _hashes(np, arr.dictionary)
        indices = pc.fill_null(arr.indices, 0).to_numpy(zero_copy_only=False)
        hashes = dictionary[indices] if len(dictionary) else np.zeros(len(arr), np.uint64)
    elif pa.types.is_string(kind) or pa.types.is_binary(kind):
        hashes = _hash_binary(np, arr.view(pa.binary()))
    elif pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        hashes = _hash_binary(np, arr.view(pa.large_binary()))
    elif _is_view(kind):
        hashes = _hash_binary(np, pc.cast(arr, pa.large_binary()))
    elif pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        hashes = _hash_integers(np, arr)
    else:
        raise SluiceError(f"cannot hash values of type {kind}: strings, binary, "
                          "dictionaries and integers can be hashed")
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        hashes = np.where(valid, hashes, np.uint64(_NULL_HASH))
    return hashes


def _is_view(kind):
    checks = [getattr(pa.types, name, None) for name in ("is_string_view", "is_binary_view")]
    return any(check is not None and check(kind) for check in checks)


def is_hashable_type(kind):
    """Whether `hash_buckets=N` hashes columns of this type (strings, binary, dictionaries)."""
    return (pa.types.is_dictionary(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind) or _is_view(kind))


def hash_array(array, buckets):
    """A numpy int64 array of the bucket (0 <= b < buckets) of every value of `array`.

    `array` is a `pyarrow.Array` or `ChunkedArray` of strings, binary, dictionary
    (categorical) or integer values; nulls get a bucket of their own hash too. The work
    is done with numpy over the Arrow buffers, with no Python work per row.
    """
    np = _np()
    if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 1:
        raise SluiceError(f"buckets must be a positive integer, not {buckets!r}")
    if isinstance(array, pa.ChunkedArray):
        parts = [_hashes(np, chunk) for chunk in array.chunks]
        hashes = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    else:
        hashes = _hashes(np, array)
    return (hashes % np.uint64(buckets)).astype(np.int64)
