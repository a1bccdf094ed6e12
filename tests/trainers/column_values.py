#!/usr/bin/env python3
"""Test trainer: records, for every row, the values of some columns as it receives them.

    column_values.py --out DIR [--buckets N] [--columns a,b]

Writes DIR/values-<device>-<pid>.json: {"rows": {id: {column: value}}, "types":
{column: arrow type}, "metadata": {column: field metadata}, "null_counts": {column:
nulls received}, "zero_copy": {column: batches whose numpy view needed no copy},
"batches": B}. With --buckets N it records, instead of each string, binary or
integer value, its bucket as the pure-Python `sluice_trainer.bucket_of(value, N)`
computes it, and for columns sluice hashed the value as received, so that a run with
`--hash-buckets` and one without can be compared row by row. It also checks, per
batch, that `sluice_trainer.hash_array` (numpy) agrees with `bucket_of` (pure Python),
counting disagreements in "numpy_mismatches".
"""

import argparse
import json
import os

import pyarrow as pa

import sluice_trainer
from sluice_trainer._tensors import hashed_by_sluice


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--buckets", type=int)
    ap.add_argument("--columns", default="")
    args = ap.parse_args()
    wanted = [c for c in args.columns.split(",") if c]

    report = {"rows": {}, "types": {}, "metadata": {}, "null_counts": {}, "zero_copy": {},
              "batches": 0, "numpy_mismatches": 0}
    for batch in sluice_trainer.batches():
        report["batches"] += 1
        ids = batch.column("id").to_pylist()
        names = wanted or [n for n in batch.schema.names if n != "id"]
        for name in names:
            index = batch.schema.get_field_index(name)
            field = batch.schema.field(index)
            array = batch.column(index)
            report["types"][name] = str(field.type)
            report["metadata"][name] = {k.decode(): v.decode()
                                        for k, v in (field.metadata or {}).items()}
            report["null_counts"][name] = report["null_counts"].get(name, 0) + array.null_count
            values = array.to_pylist()
            kind = array.type
            if pa.types.is_dictionary(kind):
                kind = kind.value_type
            hashable = (pa.types.is_string(kind) or pa.types.is_large_string(kind)
                        or pa.types.is_binary(kind) or pa.types.is_integer(kind))
            if args.buckets and hashed_by_sluice(field) is None and hashable:
                values = [sluice_trainer.bucket_of(v, args.buckets) for v in values]
                vectorised = sluice_trainer.hash_array(array, args.buckets).tolist()
                report["numpy_mismatches"] += sum(a != b for a, b in zip(values, vectorised))
            if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
                try:
                    array.to_numpy(zero_copy_only=True)
                    report["zero_copy"][name] = report["zero_copy"].get(name, 0) + 1
                except pa.ArrowInvalid:
                    pass
            for row_id, value in zip(ids, values):
                report["rows"].setdefault(str(row_id), {})[name] = value
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"values-{sluice_trainer.device}-{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
