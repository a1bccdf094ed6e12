"""Peer: a PyTorch DataLoader over pyarrow row groups, the way it is usually written.

    python torch_dataloader.py PATH [--batch-size 8192] [--workers 2]

An IterableDataset lists (file, row group) pieces and deals them to the DataLoader's
--workers worker processes; each worker reads its row groups with pyarrow
(`ParquetFile.iter_batches`, batches of --batch-size rows) and turns every column into a
tensor: integer columns with nulls filled by 0, categorical hex strings parsed to int64
ids (`int(s, 16)`, null as 0), as Criteo pipelines feed embedding tables. The training
loop receives a dict of tensors per batch. Prints one JSON line: rows, batches, seconds
(DataLoader start to last batch, worker start-up included).
"""
import argparse
import json
import os
import time
import warnings

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

# Integer columns arrive as read-only numpy views; the DataLoader copies them into
# shared memory anyway.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def parquet_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(("_", ".")))
        out += [os.path.join(d, f) for f in sorted(files)
                if f.endswith(".parquet") and not f.startswith(("_", "."))]
    return out


class RowGroups(IterableDataset):
    def __init__(self, root, batch_size):
        self.pieces = [(f, rg) for f in parquet_files(root)
                       for rg in range(pq.ParquetFile(f).num_row_groups)]
        self.batch_size = batch_size

    def __iter__(self):
        info = get_worker_info()
        mine = self.pieces if info is None else self.pieces[info.id::info.num_workers]
        for path, rg in mine:
            f = pq.ParquetFile(path)
            for batch in f.iter_batches(batch_size=self.batch_size, row_groups=[rg]):
                yield to_tensors(batch)


def to_tensors(batch):
    out = {}
    for name, col in zip(batch.schema.names, batch.columns):
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            ids = [0 if s is None else int(s, 16) for s in col.to_pylist()]
            out[name] = torch.tensor(ids, dtype=torch.int64)
        else:
            out[name] = torch.from_numpy(pc.fill_null(col, 0).to_numpy(zero_copy_only=False))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)
    pa.set_cpu_count(1)
    t0 = time.perf_counter()
    loader = DataLoader(RowGroups(a.path, a.batch_size), batch_size=None,
                        num_workers=a.workers, persistent_workers=False)
    rows = batches = 0
    for batch in loader:
        n = {t.shape[0] for t in batch.values()}  # touch every column
        assert len(n) == 1
        rows += n.pop()
        batches += 1
    seconds = time.perf_counter() - t0
    print(json.dumps({"rows": rows, "batches": batches, "seconds": seconds,
                      "torch": torch.__version__, "pyarrow": pa.__version__,
                      "workers": a.workers}))


if __name__ == "__main__":
    main()
