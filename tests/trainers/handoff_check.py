#!/usr/bin/env python3
"""Test trainer: the numpy and torch forms of batches in shared memory.

    handoff_check.py --out DIR [--torch]

Reads each batch as sluice wrote it into shared memory (a lone record batch message)
and converts it with `sluice_trainer.to_numpy` (strings as `Strings`), or with
`--torch` with `sluice_trainer.to_torch` (strings hashed into 1000 buckets, nulls
filled with 0), straight from the message header; and converts the same batch
read by pyarrow (`Message.record_batch()`) the old way, column by column. It
checks that both give the same values, and that the numpy arrays and tensors of
numeric columns without nulls are views of the memory file (no copy).
Appends the ids of each batch it acknowledges to DIR/ids-<device>-<pid>.txt and at
the end writes DIR/handoff-<device>-<pid>.json: {"batches": B, "header": batches
read from their header, "views": columns wrapped in place, "strings": string
columns seen as Strings, "string_nulls": of them, those with nulls, "mismatches":
[what differed]}.
"""

import argparse
import json
import os

import numpy as np
import pyarrow as pa

import sluice_trainer
from sluice_trainer._message import Message


def same_numpy(arrays, batch, report):
    for name in batch.schema.names:
        column = batch.column(name)
        got = arrays[name]
        if isinstance(got, sluice_trainer.Strings):
            report["strings"] += 1
            report["string_nulls"] += got.valid is not None
            values = got.tolist()
        else:
            values = got.tolist()
            if column.null_count == 0 and got.tolist() != column.to_numpy().tolist():
                report["mismatches"].append(f"{name}: numpy values differ")
        expected = column.to_pylist()
        if column.null_count:
            # pyarrow's numpy form of a column with nulls: NaN (or None) in their place.
            values = [None if v is None or v != v else v for v in values]
        if values != expected:
            report["mismatches"].append(f"{name}: {values[:5]} != {expected[:5]}")


def in_memory(array, base, length):
    address = array.__array_interface__["data"][0]
    return base <= address and address + array.nbytes <= base + length


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--torch", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    conn = sluice_trainer.connect(shared_memory=True)
    report = {"batches": 0, "header": 0, "views": 0, "strings": 0, "string_nulls": 0,
              "mismatches": []}
    acked = open(os.path.join(args.out, f"ids-{conn.device}-{os.getpid()}.txt"), "a")
    to_numpy = sluice_trainer.to_numpy if not args.torch else None
    for item in conn._batches(auto_ack=False, raw=True):
        report["batches"] += 1
        batch = item.record_batch() if isinstance(item, Message) else item
        if isinstance(item, Message) and item.header() is not None:
            report["header"] += 1
        base = pa.py_buffer(memoryview(conn._map)).address if conn._map is not None else 0
        if args.torch:
            tensors = sluice_trainer.to_torch(item, hash_buckets=1000, nulls="fill")
            expected = sluice_trainer.to_torch(batch, hash_buckets=1000, nulls="fill")
            for name, tensor in expected.items():
                if not bool((tensors[name] == tensor).all()) or tensors[name].dtype != tensor.dtype:
                    report["mismatches"].append(f"{name}: tensors differ")
                if in_memory(tensors[name].numpy(), base, conn._map_len):
                    report["views"] += 1
        else:
            arrays = to_numpy(item)
            same_numpy(arrays, batch, report)
            for value in arrays.values():
                if isinstance(value, np.ndarray) and in_memory(value, base, conn._map_len):
                    report["views"] += 1
        ids = batch.column("id").to_pylist()
        conn.ack()
        acked.write("".join(f"{i}\n" for i in ids))
        acked.flush()
    acked.close()
    name = f"handoff-{conn.device}-{os.getpid()}.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
