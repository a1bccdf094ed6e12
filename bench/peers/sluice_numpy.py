"""sluice's side of the numpy comparison: an exec trainer that wraps every column of
each batch as numpy arrays (no copy: sluice filled the nulls with --fill-nulls; a
string column as its offsets and bytes), touches them, and acknowledges the batch.
Run by

    sluice train DATA --fill-nulls 0 --exec "python bench/peers/sluice_numpy.py [--pipe] [--pyarrow]"

By default through `sluice_trainer.numpy_batches()`; with --pyarrow through
`sluice_trainer.batches()`, wrapping each pyarrow column itself (`to_numpy`, and a
string column's `buffers()`). With --pipe the batches come on stdin (the plain Arrow
stream); by default in shared memory.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "sluice_trainer"))

import sluice_trainer  # noqa: E402
from _timing import report_timing, warm_up  # noqa: E402


def wrap(column):
    """A pyarrow column as numpy without a copy: its values, or a string column's
    offsets (its bytes beside them)."""
    import numpy as np
    import pyarrow as pa

    if pa.types.is_string(column.type) or pa.types.is_binary(column.type):
        _, offsets, data = column.buffers()
        np.frombuffer(data, np.uint8)
        return np.frombuffer(offsets, np.int32, len(column), column.offset * 4)
    return column.to_numpy(zero_copy_only=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--pipe", action="store_true", help="read batches from stdin")
    ap.add_argument("--pyarrow", action="store_true",
                    help="batches() and pyarrow's to_numpy instead of numpy_batches()")
    args = ap.parse_args()
    rows = values = 0
    warm_up()
    first = None
    if args.pyarrow:
        for batch in sluice_trainer.batches(shared_memory=not args.pipe):
            if first is None:
                first = time.time()
            for column in batch.columns:
                values += len(wrap(column))
            rows += batch.num_rows
    else:
        for arrays in sluice_trainer.numpy_batches(shared_memory=not args.pipe):
            if first is None:
                first = time.time()
            for array in arrays.values():
                values += len(array)
            rows += len(array)
    now = time.time()
    report_timing(sluice_trainer.device, rows, first if first is not None else now, now)
    print(f"sluice_numpy device {sluice_trainer.device}: {rows} rows, {values} values",
          file=sys.stderr)


if __name__ == "__main__":
    main()
