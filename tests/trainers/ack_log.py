#!/usr/bin/env python3
"""Test trainer that keeps a durable log of what it acknowledged.

For every record batch of the Arrow IPC stream on stdin it appends the batch's
ids to OUT/ids-<device>-<pid>.txt (fsynced: the batch reached the trainer),
optionally sleeps, writes "ack\\n" to SLUICE_ACK_FD, and once that write went
through appends the same ids to OUT/acked-<device>-<pid>.txt (fsynced). A batch
in an acked-* file was acknowledged to sluice; a batch in an ids-* file was
handed to this trainer. Each line of OUT/times-<device>-<pid>.txt holds the
wall-clock time (seconds) at which the batch on the same line of ids-* arrived,
as "<time> <first id> <rows>".

Options:
    --out DIR       where to write (required)
    --column NAME   id column (default: id)
    --sleep S       sleep S seconds per batch before acknowledging
    --slow-device D --slow-sleep S
                    device D sleeps S seconds per batch instead (skewed devices)
    --linger S      at the end of the stream, write OUT/eof-<device>-<pid> and
                    sleep S seconds before exiting
"""

import argparse
import os
import sys
import time

# pyarrow imports numpy where it is installed, which is most of this
# trainer's start (paid at each of its starts in every test); it uses none.
sys.modules.setdefault("numpy", None)

import pyarrow as pa
import pyarrow.ipc


def append(path, text):
    with open(path, "a") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--column", default="id")
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--slow-device", default=None)
    ap.add_argument("--slow-sleep", type=float, default=0.0)
    ap.add_argument("--linger", type=float, default=0.0)
    args = ap.parse_args()

    device = os.environ["SLUICE_DEVICE"]
    sleep = args.slow_sleep if device == args.slow_device else args.sleep
    ack = os.fdopen(int(os.environ["SLUICE_ACK_FD"]), "w", buffering=1)
    pid = os.getpid()
    ids_path = os.path.join(args.out, f"ids-{device}-{pid}.txt")
    acked_path = os.path.join(args.out, f"acked-{device}-{pid}.txt")
    times_path = os.path.join(args.out, f"times-{device}-{pid}.txt")
    reader = pa.ipc.open_stream(sys.stdin.buffer)
    for batch in reader:
        ids = batch.column(batch.schema.get_field_index(args.column)).to_pylist()
        lines = "".join(f"{i}\n" for i in ids)
        append(ids_path, lines)
        first = ids[0] if ids else -1
        append(times_path, f"{time.time():.6f} {first} {len(ids)}\n")
        if sleep:
            time.sleep(sleep)
        try:
            ack.write("ack\n")
            ack.flush()
        except (BrokenPipeError, OSError):
            return 0
        append(acked_path, lines)
    if args.linger:
        append(os.path.join(args.out, f"eof-{device}-{pid}"), "eof\n")
        time.sleep(args.linger)
    return 0


if __name__ == "__main__":
    sys.exit(main())
