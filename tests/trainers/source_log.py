#!/usr/bin/env python3
"""Test trainer for jobs that mix several sources: logs every batch it is handed.

For every batch it appends one JSON line to OUT/batches-<device>-<pid>.jsonl, fsynced,
and only then acknowledges it:

    {"epoch": "0" or null, "source": "name" or null, "rows": ["name:id", ...]}

(`epoch` and `source` are the batch message's sluice.epoch and sluice.source
metadata; each row is its --source-column value and its id).

Options:
    --out DIR         where to write (required)
    --column NAME     id column (default: id)
    --source NAME     source column (default: src)
    --die-after N     after acknowledging N batches, on receiving the next one: if
                      OUT/died does not exist yet, create it and exit with status 9
                      without acknowledging the batch (a killed trainer)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--column", default="id")
    ap.add_argument("--source", default="src")
    ap.add_argument("--die-after", type=int, default=None, metavar="N")
    args = ap.parse_args()

    device, pid = os.environ.get("SLUICE_DEVICE", "0"), os.getpid()
    os.makedirs(args.out, exist_ok=True)
    log = os.path.join(args.out, f"batches-{device}-{pid}.jsonl")
    ack = os.fdopen(int(os.environ["SLUICE_ACK_FD"]), "w", buffering=1)
    if sys.stdin.buffer.peek(1) == b"":
        return
    reader = pa.ipc.open_stream(sys.stdin.buffer)
    acked = 0
    while True:
        try:
            batch, meta = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            break
        if args.die_after is not None and acked >= args.die_after:
            try:
                os.close(os.open(os.path.join(args.out, "died"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                sys.exit(9)
            except FileExistsError:
                pass
        tags = {k.decode(): v.decode() for k, v in (meta or {}).items()} if meta else {}
        sources = batch.column(args.source).to_pylist()
        ids = batch.column(args.column).to_pylist()
        line = {
            "epoch": tags.get("sluice.epoch"),
            "source": tags.get("sluice.source"),
            "rows": [f"{s}:{i}" for s, i in zip(sources, ids)],
        }
        with open(log, "a") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        ack.write("ack\n")
        acked += 1


if __name__ == "__main__":
    main()
