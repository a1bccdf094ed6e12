#!/usr/bin/env python3
"""Test trainer: checks the torch tensors sluice_trainer makes from each batch.

For every batch sluice sends, it converts the batch with sluice_trainer.to_torch
(hashing the string columns into --buckets buckets) and checks, per column:
  - numeric columns: the tensor's data pointer is the Arrow values buffer's address
    (plus the array offset), i.e. no copy was made, and its values and dtype match;
  - hashed columns: int64 values in [0, buckets) equal to sluice_trainer.bucket_of
    of every value, computed one row at a time in pure Python.
It writes OUT/tensors-<device>-<pid>.json:
    {"batches": B, "rows": R, "shared": {column: batches whose tensor shared memory},
     "copied": {column: batches whose tensor did not}, "hash_mismatches": N,
     "value_mismatches": N, "dtypes": {column: torch dtype}, "ids": [...],
     "probe": {value: bucket} for a few fixed strings, "arrow_types": {column: type}}
and exits 1 at the end if any check failed (after writing the file).
"""

import argparse
import json
import os

import pyarrow as pa
import torch

import sluice_trainer

PROBES = ["", "a", "Zürich", "row-1-x"]


def values_address(array):
    """Address of the array's first value in its Arrow values buffer."""
    return array.buffers()[1].address + array.offset * array.type.bit_width // 8


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--buckets", type=int, default=1000)
    args = ap.parse_args()

    conn = sluice_trainer.connect()
    report = {"batches": 0, "rows": 0, "shared": {}, "copied": {}, "hash_mismatches": 0,
              "value_mismatches": 0, "dtypes": {}, "ids": [],
              "probe": {p: sluice_trainer.bucket_of(p, args.buckets) for p in PROBES}}
    for batch in conn.batches():
        tensors = sluice_trainer.to_torch(batch, hash_buckets=args.buckets)
        report["batches"] += 1
        report["rows"] += batch.num_rows
        report["ids"].extend(batch.column("id").to_pylist())
        for name, array in zip(batch.schema.names, batch.columns):
            tensor = tensors[name]
            report["dtypes"][name] = str(tensor.dtype)
            report.setdefault("arrow_types", {})[name] = str(array.type)
            if (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
                    or pa.types.is_string_view(array.type)):
                want = [sluice_trainer.bucket_of(v, args.buckets) for v in array.to_pylist()]
                if tensor.dtype != torch.int64 or tensor.tolist() != want:
                    report["hash_mismatches"] += 1
                continue
            key = "shared" if tensor.data_ptr() == values_address(array) else "copied"
            report[key][name] = report[key].get(name, 0) + 1
            if tensor.tolist() != array.to_pylist():
                report["value_mismatches"] += 1
    path = os.path.join(args.out, f"tensors-{conn.device}-{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump(report, f)
    failed = report["copied"] or report["hash_mismatches"] or report["value_mismatches"]
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
