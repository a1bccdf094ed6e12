"""Peer: the PyTorch CTR example's training (examples/torch/train_ctr.py, same model,
loss, optimizer and batch size) fed by a DataLoader, the way it is usually written.

    python torch_ctr_dataloader.py PATH [--batch-size 8192] [--workers 2] [--buckets N]
                                   [--device cuda]

The DataLoader's --workers worker processes read (file, row group) pieces with pyarrow
and turn each batch into tensors: numeric columns with nulls filled by 0, categorical
columns hashed into --buckets buckets with sluice_trainer.hash_array (vectorised numpy,
the same hash sluice uses). One training process applies every batch. With --device
cuda the model lives on the GPU and batches go there the way the PyTorch docs advise
(`pin_memory=True`, `.to(device, non_blocking=True)`). Prints one JSON line: rows,
batches, seconds (DataLoader start to the last optimizer step, the GPU synchronised).
"""
import argparse
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python", "sluice_trainer"))
sys.path.insert(0, os.path.join(ROOT, "examples", "torch"))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset, get_worker_info  # noqa: E402

import sluice_trainer  # noqa: E402
from train_ctr import CTRModel, features, split_columns  # noqa: E402

warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def parquet_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(("_", ".")))
        out += [os.path.join(d, f) for f in sorted(files)
                if f.endswith(".parquet") and not f.startswith(("_", "."))]
    return out


class RowGroups(IterableDataset):
    def __init__(self, root, batch_size, buckets):
        self.pieces = [(f, rg) for f in parquet_files(root)
                       for rg in range(pq.ParquetFile(f).num_row_groups)]
        self.batch_size, self.buckets = batch_size, buckets

    def __iter__(self):
        info = get_worker_info()
        mine = self.pieces if info is None else self.pieces[info.id::info.num_workers]
        for path, rg in mine:
            f = pq.ParquetFile(path)
            for batch in f.iter_batches(batch_size=self.batch_size, row_groups=[rg]):
                yield to_tensors(batch, self.buckets)


def to_tensors(batch, buckets):
    out = {}
    for name, col in zip(batch.schema.names, batch.columns):
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            out[name] = torch.from_numpy(sluice_trainer.hash_array(col, buckets))
        else:
            out[name] = torch.from_numpy(pc.fill_null(col, 0).to_numpy(zero_copy_only=False))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--buckets", type=int, default=1000)
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    a = ap.parse_args()
    device = torch.device(a.device)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    pa.set_cpu_count(1)
    schema = pq.ParquetFile(parquet_files(a.path)[0]).schema_arrow
    numeric, categorical = split_columns(schema, "label")
    model = CTRModel(len(numeric), len(categorical), a.buckets, 8, 64).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    loss_fn = nn.BCEWithLogitsLoss()
    t0 = time.perf_counter()
    loader = DataLoader(RowGroups(a.path, a.batch_size, a.buckets), batch_size=None,
                        num_workers=a.workers, persistent_workers=False,
                        pin_memory=device.type == "cuda")
    rows = batches = 0
    for tensors in loader:
        rows += len(tensors["label"])
        tensors = {k: v.to(device, non_blocking=True) for k, v in tensors.items()}
        label = tensors["label"].to(torch.float32)
        values, ids = features(tensors, numeric, categorical)
        loss = loss_fn(model(values, ids), label)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        batches += 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    print(json.dumps({"rows": rows, "batches": batches, "seconds": seconds}))


if __name__ == "__main__":
    main()
