"""Write the benchmark's Criteo-like dataset with pyarrow and numpy alone, for machines
that have no Spark or Java (a GPU node): bench/gpu.sh calls it.

    python bench/gpu_data.py OUT_DIR --rows 4000000 [--files 24]

The columns and their distributions are bench/make_dataset.py's (label, I1..I13 with
their shares of nulls and long tails, C1..C26 as 8-hex-digit categories with Criteo's
cardinalities and skew, some null); the layout is a Spark job's: one snappy
`part-NNNNN-<uuid>-c000.snappy.parquet` per partition and `_SUCCESS` last. The values
are not Spark's (another generator), the shape and sizes are. Deterministic for a given
--rows/--files.
"""
import argparse
import math
import os
import shutil
import sys
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_dataset import CAT_NULLS, CRITEO_CARDINALITY, INT_MAX, INT_NULLS  # noqa: E402


HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
SHIFTS = np.arange(28, -4, -4, dtype=np.uint64)


def validity(nulls):
    """An Arrow validity bitmap (1 = a value) from a numpy mask of nulls, or None."""
    return None if nulls is None else pa.py_buffer(np.packbits(~nulls, bitorder="little"))


def hex8(values, nulls):
    """8-hex-digit strings of 32-bit values, built from buffers (no Python objects)."""
    rows = len(values)
    chars = HEX[(values[:, None] >> SHIFTS) & np.uint64(0xF)]
    offsets = pa.py_buffer(np.arange(0, 8 * rows + 1, 8, dtype=np.int32))
    return pa.Array.from_buffers(pa.string(), rows,
                                 [validity(nulls), offsets, pa.py_buffer(chars.tobytes())])


def part(rows, seed, total):
    """One partition's rows (of `total` in the dataset) as an Arrow table."""
    rng = np.random.default_rng(seed)
    cols = {"label": pa.array((rng.random(rows) < 0.26).astype(np.int32))}
    for i in range(13):
        value = np.floor(np.exp(rng.random(rows) * math.log(INT_MAX[i] + 1))) - 1
        nulls = rng.random(rows) < INT_NULLS[i] if INT_NULLS[i] > 0 else None
        cols[f"I{i + 1}"] = pa.array(value.astype(np.int32), mask=nulls)
    for j in range(26):
        card = max(2, min(CRITEO_CARDINALITY[j], total))
        ident = np.floor(rng.random(rows) ** 3 * card).astype(np.uint64)
        # A fixed odd multiplier spreads the ids over 32 bits: 8 hex digits per value.
        hashed = (ident * np.uint64(0x9E3779B1) + np.uint64(j)) & np.uint64(0xFFFFFFFF)
        nulls = rng.random(rows) < CAT_NULLS[j] if CAT_NULLS[j] > 0 else None
        cols[f"C{j + 1}"] = hex8(hashed, nulls)
    return pa.table(cols)


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--files", type=int, default=24)
    a = ap.parse_args()
    if a.rows < 1 or a.files < 1:
        ap.error("--rows and --files must be at least 1")
    tmp = a.out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    job = uuid.UUID(int=a.rows * 1000 + a.files)
    for k in range(a.files):
        rows = a.rows // a.files + (1 if k < a.rows % a.files else 0)
        if rows == 0:
            continue
        name = f"part-{k:05d}-{job}-c000.snappy.parquet"
        pq.write_table(part(rows, seed=k, total=a.rows), os.path.join(tmp, name), compression="snappy",
                       row_group_size=1 << 20)
    open(os.path.join(tmp, "_SUCCESS"), "w").close()
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)
    print(f"gpu_data: {a.rows} rows in {a.files} files under {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
