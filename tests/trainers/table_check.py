#!/usr/bin/env python3
"""Test trainer for tables: records the ids it is handed and what the values add up to.

For every record batch of the Arrow IPC stream on stdin it appends the `id` values
to OUT/ids-<device>-<pid>.txt (fsynced) and acknowledges the batch on SLUICE_ACK_FD.
At the end of the stream it writes OUT/values-<device>-<pid>.json:
    {"columns": [names in stream order],
     "sums": {numeric column: sum of its non-null values},
     "nulls": {column: null count},
     "partitions": {"<col>=<value>/...": rows}   (with --partition-columns)}
so a test can compare them with what Spark read (renamed columns, added columns,
partition values from a table's log).

Options:
    --out DIR                  where to write (required)
    --partition-columns A,B    count rows per value of these columns
"""

import argparse
import json
import os
import sys

# pyarrow imports numpy where it is installed, which is most of this
# trainer's start (paid at each of its starts in every test); it uses none.
sys.modules.setdefault("numpy", None)

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--partition-columns", default="")
    args = parser.parse_args()
    device = os.environ.get("SLUICE_DEVICE", "0")
    ack = os.fdopen(int(os.environ.get("SLUICE_ACK_FD", "3")), "w", buffering=1)
    tag = f"{device}-{os.getpid()}"
    ids_path = os.path.join(args.out, f"ids-{tag}.txt")
    parts = [c for c in args.partition_columns.split(",") if c]
    sums, nulls, partitions, columns = {}, {}, {}, []
    reader = pa.ipc.open_stream(sys.stdin.buffer)
    columns = reader.schema.names
    for batch in reader:
        ids = batch.column(batch.schema.get_field_index("id")).to_pylist()
        with open(ids_path, "a") as f:
            if ids:
                f.write("\n".join(map(str, ids)) + "\n")
            f.flush()
            os.fsync(f.fileno())
        for name, column in zip(batch.schema.names, batch.columns):
            nulls[name] = nulls.get(name, 0) + column.null_count
            t = column.type
            if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
                s = pc.sum(column).as_py()
                if s is not None:
                    sums[name] = sums.get(name, 0) + float(s)
        if parts:
            keys = zip(*[batch.column(batch.schema.get_field_index(p)).to_pylist() for p in parts])
            for key in keys:
                label = "/".join(f"{p}={v}" for p, v in zip(parts, key))
                partitions[label] = partitions.get(label, 0) + 1
        ack.write("ack\n")
    with open(os.path.join(args.out, f"values-{tag}.json"), "w") as f:
        json.dump({"columns": columns, "sums": sums, "nulls": nulls, "partitions": partitions}, f)


if __name__ == "__main__":
    main()
