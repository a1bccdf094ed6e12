"""Peer: Petastorm's PyTorch loader (`petastorm.pytorch.DataLoader` over
`make_batch_reader`), batches of torch tensors.

    python petastorm_torch.py PATH [--batch-size 8192] [--workers 2] [--buckets N]

Petastorm's loader takes numeric columns only, so a TransformSpec (run in the reader's
--workers thread-pool workers) hashes the categorical string columns into --buckets
int64 buckets (the hash sluice uses, vectorised numpy) and fills numeric nulls with 0.
Prints one JSON line: rows, batches, seconds (open to last batch).
"""
import argparse
import json
import os
import sys
import time
import warnings

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "sluice_trainer"))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from petastorm import make_batch_reader  # noqa: E402
from petastorm.pytorch import DataLoader  # noqa: E402
from petastorm.transform import TransformSpec  # noqa: E402

import sluice_trainer  # noqa: E402


def parquet_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(("_", ".")))
        out += [os.path.join(d, f) for f in sorted(files)
                if f.endswith(".parquet") and not f.startswith(("_", "."))]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--buckets", type=int, default=1 << 20)
    a = ap.parse_args()
    pa.set_cpu_count(a.workers)
    schema = pq.ParquetFile(parquet_files(a.path)[0]).schema_arrow
    strings = [f.name for f in schema if pa.types.is_string(f.type)]
    numbers = [f.name for f in schema if f.name not in strings]

    def transform(frame):
        for name in strings:
            frame[name] = sluice_trainer.hash_array(pa.array(frame[name]), a.buckets)
        for name in numbers:  # label and the integer counts (I1..I13)
            frame[name] = frame[name].fillna(0).astype(np.int64)
        return frame

    spec = TransformSpec(transform, edit_fields=[(name, np.int64, (), False) for name in strings]
                         + [(name, np.int64, (), False) for name in numbers])
    url = a.path if "://" in a.path else "file://" + os.path.abspath(a.path)
    t0 = time.perf_counter()
    rows = batches = 0
    with make_batch_reader(url, num_epochs=1, workers_count=a.workers,
                           reader_pool_type="thread", shuffle_row_groups=False,
                           transform_spec=spec) as reader:
        for tensors in DataLoader(reader, batch_size=a.batch_size):
            n = {t.shape[0] for t in tensors.values()}  # touch every column
            assert len(n) == 1
            rows += n.pop()
            batches += 1
    seconds = time.perf_counter() - t0
    import petastorm
    print(json.dumps({"rows": rows, "batches": batches, "seconds": seconds,
                      "petastorm": petastorm.__version__, "workers": a.workers}))


if __name__ == "__main__":
    main()
