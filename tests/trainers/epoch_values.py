#!/usr/bin/env python3
"""Test trainer: writes every row it is handed with dates and timestamps as the numbers
Arrow holds, not as Python objects (Python's datetime cannot hold year 1 in every time
zone, nor tell a microsecond lost).

    epoch_values.py --out DIR

For every record batch of the Arrow IPC stream on stdin it appends one JSON object per
row to DIR/rows-<device>-<pid>.jsonl: {column: value}, a date as its days since
1970, a timestamp as its count of its unit since 1970, anything else as pyarrow gives
it (str() where JSON holds no such value); and, once per column, {"__types__":
{column: Arrow type}}. It acknowledges each batch on SLUICE_ACK_FD.
"""

import argparse
import json
import os
import sys

# pyarrow imports numpy where it is installed, which is most of this
# trainer's start (paid at each of its starts in every test); it uses none.
sys.modules.setdefault("numpy", None)

import pyarrow as pa
import pyarrow.ipc


def numbers(array):
    """A column's values, dates and timestamps as integers."""
    if pa.types.is_date32(array.type):
        return array.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(array.type):
        return array.cast(pa.int64()).to_pylist()
    return array.to_pylist()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = os.environ.get("SLUICE_DEVICE", "0")
    ack = os.fdopen(int(os.environ.get("SLUICE_ACK_FD", "3")), "w", buffering=1)
    path = os.path.join(args.out, f"rows-{device}-{os.getpid()}.jsonl")
    reader = pa.ipc.open_stream(sys.stdin.buffer)
    with open(path, "a") as f:
        f.write(json.dumps({"__types__": {fld.name: str(fld.type) for fld in reader.schema}})
                + "\n")
        for batch in reader:
            columns = {name: numbers(batch.column(i))
                       for i, name in enumerate(batch.schema.names)}
            for i in range(batch.num_rows):
                row = {name: values[i] for name, values in columns.items()}
                f.write(json.dumps(row, default=str) + "\n")
            f.flush()
            ack.write("ack\n")


if __name__ == "__main__":
    main()
