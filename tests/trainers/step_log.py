#!/usr/bin/env python3
"""Test trainer that logs the step of every batch it is handed.

It speaks the exec protocol directly (pyarrow only): for every record batch of the
Arrow IPC stream on stdin it appends one line to OUT/steps-<rank>-<pid>.jsonl,
fsynced before it writes `ack`:

    {"rank": 0, "epoch": 0, "step": 3, "end": false, "ids": [id, ...]}

`epoch`, `step` and `end` are the batch's `sluice.epoch`, `sluice.step` and whether
it carries `sluice.epoch_end`; `rank` is the batch's `sluice.rank` (a master's job of
--world-size), else RANK under --lockstep (else the device).

Options:
    --out DIR        where to write (required)
    --column NAME    id column (default: id)
    --sleep S        sleep S seconds per batch before acknowledging it
"""

import argparse
import json
import os
import sys
import time

# pyarrow imports numpy where it is installed, which is most of this
# trainer's start (paid at each of its starts in every test); it uses none.
sys.modules.setdefault("numpy", None)

import pyarrow as pa
import pyarrow.ipc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--column", default="id")
    ap.add_argument("--sleep", type=float, default=0.0)
    args = ap.parse_args()

    ack_fd = int(os.environ["SLUICE_ACK_FD"])
    rank = int(os.environ.get("RANK", os.environ.get("SLUICE_DEVICE", "0")))
    log = os.open(os.path.join(args.out, f"steps-{rank}-{os.getpid()}.jsonl"),
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    stdin = sys.stdin.buffer
    if not stdin.peek(1):
        return 0
    reader = pa.ipc.open_stream(stdin)
    column = reader.schema.get_field_index(args.column)
    while True:
        try:
            batch, custom = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            break
        meta = dict(custom or {})
        meta.update(batch.schema.metadata or {})
        value = lambda key: meta.get(key.encode())
        world_rank = value("sluice.rank")
        line = {
            "rank": int(world_rank) if world_rank is not None else rank,
            "epoch": int(value("sluice.epoch")),
            "step": int(value("sluice.step")),
            "end": value("sluice.epoch_end") is not None,
            "ids": batch.column(column).to_pylist(),
        }
        os.write(log, (json.dumps(line) + "\n").encode())
        os.fsync(log)
        if args.sleep:
            time.sleep(args.sleep)
        data = b"ack\n"
        while data:
            data = data[os.write(ack_fd, data):]
    return 0


if __name__ == "__main__":
    sys.exit(main())
