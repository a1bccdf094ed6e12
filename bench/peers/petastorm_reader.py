"""Peer: Petastorm's make_batch_reader (Petastorm 0.13, pyarrow <= 14).

    python petastorm_reader.py PATH [--batch-size 8192] [--workers 2]

Reads every row group with --workers thread-pool workers (Petastorm yields one
namedtuple of numpy arrays per row group), re-cut into batches of --batch-size rows as
a training loop would take them, all columns. Prints one JSON line: rows, batches,
seconds (open to last batch).
"""
import argparse
import json
import os
import time
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from petastorm import make_batch_reader  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    pa.set_cpu_count(a.workers)
    url = a.path if "://" in a.path else "file://" + os.path.abspath(a.path)
    t0 = time.perf_counter()
    rows = batches = 0
    pending, have = [], 0

    def emit(cols):
        nonlocal rows, batches
        n = len(cols[0])
        assert all(len(c) == n for c in cols)  # touch every column
        rows += n
        batches += 1

    with make_batch_reader(url, num_epochs=1, workers_count=a.workers,
                           reader_pool_type="thread", shuffle_row_groups=False) as reader:
        for group in reader:
            cols = list(group)
            pending.append(cols)
            have += len(cols[0])
            while have >= a.batch_size:
                merged = [np.concatenate([p[i] for p in pending]) if len(pending) > 1 else pending[0][i]
                          for i in range(len(cols))]
                emit([c[: a.batch_size] for c in merged])
                rest = [c[a.batch_size:] for c in merged]
                have -= a.batch_size
                pending = [rest] if have else []
        if have:
            merged = [np.concatenate([p[i] for p in pending]) for i in range(len(pending[0]))]
            emit(merged)
    seconds = time.perf_counter() - t0
    import petastorm
    print(json.dumps({"rows": rows, "batches": batches, "seconds": seconds,
                      "petastorm": petastorm.__version__, "pyarrow": pa.__version__,
                      "workers": a.workers}))


if __name__ == "__main__":
    main()
