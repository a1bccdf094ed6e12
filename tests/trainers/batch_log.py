#!/usr/bin/env python3
"""Test trainer that keeps checkpoints of the batches it applied, in order.

It speaks the exec protocol directly (pyarrow only): it writes `checkpoints` on
SLUICE_ACK_FD before anything else, then for every record batch of the Arrow IPC
stream on stdin it appends the batch's ids (a list) to its model and writes `ack`.
After every --every acknowledged batches it saves its model as a checkpoint and
writes `checkpoint ID` (IDs are a per-device counter carried in the checkpoint, as
in checkpoint_ids.py); at the end of the stream it saves a final checkpoint and
writes its model to a final-* file. Its model is thus the device's sequence of
batches, the ones of the checkpoint it resumed from first.

Files in OUT:
    ckpt-<device>-<ID>.json    {"device": 0, "id": "3", "counter": 3,
                                "batches": [[id, ...], ...]}
    final-<device>-<pid>.json  {"device": 0, "resumed_from": "2" or null,
                                "batches": [[id, ...], ...]}
    start-<device>-<pid>.json  {"device": 0, "resume": "2" or null, "batches": N}
    seen-<device>-<pid>.jsonl  one line per batch received (a JSON list of ids),
                               fsynced before its `ack`

Options:
    --out DIR        where to write (required)
    --column NAME    id column (default: id)
    --source NAME    a column naming each row's source (--source-column): ids are
                     then "SOURCE:ID" strings
    --every N        checkpoint after every N acknowledged batches (default 3)
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


def write_json_atomically(directory, name, value):
    tmp = os.path.join(directory, f".{name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(value, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, name))
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fail(message):
    print(f"batch_log: {message}", file=sys.stderr, flush=True)
    sys.exit(3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--column", default="id")
    ap.add_argument("--source", default=None)
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--sleep", type=float, default=0.0)
    args = ap.parse_args()

    if "SLUICE_ACK_FD" not in os.environ:
        fail("SLUICE_ACK_FD is not set: run me under sluice train --exec")
    device = int(os.environ.get("SLUICE_DEVICE", "0"))
    pid = os.getpid()
    ack_fd = int(os.environ["SLUICE_ACK_FD"])

    def send(line):
        data = f"{line}\n".encode()
        while data:
            data = data[os.write(ack_fd, data):]

    batches, counter = [], 0
    resume = os.environ.get("SLUICE_RESUME_CHECKPOINT") or None
    if resume is not None:
        path = os.path.join(args.out, f"ckpt-{device}-{resume}.json")
        try:
            with open(path) as f:
                saved = json.load(f)
        except (OSError, ValueError) as e:
            fail(f"cannot load checkpoint {resume} from {path}: {e}")
        batches, counter = saved["batches"], saved["counter"]
    write_json_atomically(args.out, f"start-{device}-{pid}.json",
                          {"device": device, "resume": resume, "batches": len(batches)})
    send("checkpoints")

    def checkpoint():
        nonlocal counter
        counter += 1
        checkpoint_id = str(counter)
        write_json_atomically(args.out, f"ckpt-{device}-{checkpoint_id}.json", {
            "device": device, "id": checkpoint_id, "counter": counter,
            "batches": batches,
        })
        send(f"checkpoint {checkpoint_id}")

    seen = os.open(os.path.join(args.out, f"seen-{device}-{pid}.jsonl"),
                   os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    stdin = sys.stdin.buffer
    acked = 0
    if stdin.peek(1):
        reader = pa.ipc.open_stream(stdin)
        column = reader.schema.get_field_index(args.column)
        if column < 0:
            fail(f"no column {args.column!r} in {reader.schema}")
        for batch in reader:
            ids = batch.column(column).to_pylist()
            if args.source is not None:
                names = batch.column(args.source).to_pylist()
                ids = [f"{s}:{i}" for s, i in zip(names, ids)]
            os.write(seen, (json.dumps(ids) + "\n").encode())
            os.fsync(seen)
            if args.sleep:
                time.sleep(args.sleep)
            batches.append(ids)
            send("ack")
            acked += 1
            if args.every and acked % args.every == 0:
                checkpoint()
    checkpoint()
    write_json_atomically(args.out, f"final-{device}-{pid}.json",
                          {"device": device, "resumed_from": resume, "batches": batches})
    return 0


if __name__ == "__main__":
    sys.exit(main())
