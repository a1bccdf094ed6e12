#!/usr/bin/env python3
"""Test trainer for --lockstep: logs every batch with the metadata sluice sent.

It reads the Arrow IPC stream on stdin with pyarrow directly. For every batch it
appends one JSON line to OUT/steps-<device>-<pid>.jsonl:

    {"rows": N, "epoch": "0", "step": "3", "epoch_end": null or "0", "first": id}

(the values of the batch message's sluice.epoch, sluice.step and sluice.epoch_end
metadata, null when absent), fsynced, then acknowledges the batch and, once the ack
went through, appends "<epoch> <id>" lines for its rows to OUT/acked-<device>-<pid>.txt
(fsynced). At start it writes OUT/env-<device>-<pid>.json with the rank variables it
was given.

Options:
    --out DIR         where to write (required)
    --column NAME     id column (default: id)
    --die-after N     on device --die-device (default 1), after acknowledging N batches,
                      on receiving the next one: if OUT/died does not exist yet, create
                      it and exit with status 9 without acknowledging the batch (a
                      process started again finds the marker and runs normally)
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

RANK_VARS = ("SLUICE_LOCKSTEP", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
             "MASTER_ADDR", "MASTER_PORT", "SLUICE_DEVICE", "SLUICE_DEVICES")


def append(path, text):
    with open(path, "a") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def claim(marker):
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--column", default="id")
    ap.add_argument("--die-after", type=int, default=None, metavar="N")
    ap.add_argument("--die-device", default="1")
    args = ap.parse_args()

    device, pid = os.environ["SLUICE_DEVICE"], os.getpid()
    with open(os.path.join(args.out, f"env-{device}-{pid}.json"), "w") as f:
        json.dump({name: os.environ.get(name) for name in RANK_VARS}, f)
    ack = os.fdopen(int(os.environ["SLUICE_ACK_FD"]), "w", buffering=1)
    steps = os.path.join(args.out, f"steps-{device}-{pid}.jsonl")
    ids_path = os.path.join(args.out, f"acked-{device}-{pid}.txt")
    append(steps, "")
    # Kept open: the ids of an acknowledged batch are written right after its
    # ack, in one system call, so a process killed at any moment has logged
    # every batch it acknowledged (written data outlives the process).
    acked_log = os.open(ids_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if sys.stdin.buffer.peek(1) == b"":
        return
    reader = pa.ipc.open_stream(sys.stdin.buffer)
    acked = 0
    while True:
        try:
            batch, meta = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            break
        meta = {k.decode(): v.decode() for k, v in (meta or {}).items()}
        ids = batch.column(batch.schema.get_field_index(args.column)).to_pylist()
        append(steps, json.dumps({
            "rows": batch.num_rows, "epoch": meta.get("sluice.epoch"),
            "step": meta.get("sluice.step"), "epoch_end": meta.get("sluice.epoch_end"),
            "first": ids[0] if ids else None}) + "\n")
        if (args.die_after is not None and device == args.die_device
                and acked >= args.die_after and claim(os.path.join(args.out, "died"))):
            os._exit(9)
        ack.write("ack\n")
        ack.flush()
        acked += 1
        os.write(acked_log, "".join(f"{meta.get('sluice.epoch')} {i}\n" for i in ids).encode())


if __name__ == "__main__":
    main()
