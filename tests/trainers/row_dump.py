#!/usr/bin/env python3
"""Test trainer: writes every row it is handed, every column, as JSON.

    row_dump.py --out DIR

For every record batch of the Arrow IPC stream on stdin it appends one JSON object per
row ({column: value}) to DIR/rows-<device>-<pid>.jsonl and acknowledges the batch on
SLUICE_ACK_FD. Values are written as tests/fixtures/make_formats.py writes what Spark
read (its `plain` function: timestamps as naive UTC ISO strings, decimals and dates
as strings, bytes as hex, maps as objects), so that a test compares the two as they are.
"""

import argparse
import datetime
import decimal
import json
import math
import os
import sys

# pyarrow imports numpy where it is installed, which is most of this
# trainer's start (paid at each of its starts in every test); it uses none.
# Without it, a nanosecond timestamp comes as a datetime (or, with digits
# below the microsecond, an error), not as a pandas Timestamp.
sys.modules.setdefault("numpy", None)

import pyarrow as pa
import pyarrow.ipc


def plain(v):
    """A value as JSON holds it, the same way for Spark's rows and for Arrow's."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else repr(v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    if hasattr(v, "to_pydatetime"):  # a pandas Timestamp (nanoseconds)
        v = v.to_pydatetime()
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return v.isoformat()
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        # pyarrow hands a map as a list of (key, value) pairs.
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            return {str(k): plain(x) for k, x in v}
        return [plain(x) for x in v]
    return str(v)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = os.environ.get("SLUICE_DEVICE", "0")
    ack = os.fdopen(int(os.environ.get("SLUICE_ACK_FD", "3")), "w", buffering=1)
    path = os.path.join(args.out, f"rows-{device}-{os.getpid()}.jsonl")
    reader = pa.ipc.open_stream(sys.stdin.buffer)
    with open(path, "a") as f:
        for batch in reader:
            for row in batch.to_pylist():
                f.write(json.dumps({k: plain(v) for k, v in row.items()}) + "\n")
            f.flush()
            ack.write("ack\n")


if __name__ == "__main__":
    main()
