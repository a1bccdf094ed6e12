#!/usr/bin/env python3
"""Test trainer written with the sluice_trainer package: records the ids it trains on.

For every batch it appends the id column's values (one per line) to
OUT/ids-<device>-<pid>.txt and makes them durable; sluice_trainer acknowledges the
batch when the loop asks for the next one (or, with --manual, when the
`acknowledging()` block ends). Tests compare the union of the ids-* files with the
dataset's ids: every row must have been trained on exactly once.

Options:
    --out DIR        where to write (required)
    --column NAME    id column (default: id)
    --manual         batches(auto_ack=False) with an explicit acknowledging() block
    --kill-after N   after N batches acknowledged in this process, on receiving the
                     next one: if OUT/died-<device> does not exist yet, create it, write
                     that batch's ids to OUT/unacked-<device>-<pid>.txt and SIGKILL
                     itself. The process sluice starts in its place finds the marker and
                     runs normally, so each device is killed once.

It also writes OUT/env-<device>-<pid>.json with what the package says of this process.
"""

import argparse
import json
import os
import signal

import sluice_trainer


def append_ids(path, ids):
    with open(path, "a") as f:
        if ids:
            f.write("\n".join(map(str, ids)) + "\n")
        f.flush()
        os.fsync(f.fileno())


def claim_death(marker):
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.fsync(fd)
    os.close(fd)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--column", default="id")
    ap.add_argument("--manual", action="store_true")
    ap.add_argument("--kill-after", type=int, default=None, metavar="N")
    args = ap.parse_args()

    conn = sluice_trainer.connect()
    device, pid = conn.device, os.getpid()
    with open(os.path.join(args.out, f"env-{device}-{pid}.json"), "w") as f:
        json.dump({"device": sluice_trainer.device, "devices": sluice_trainer.devices,
                   "ack_fd": sluice_trainer.ack_fd,
                   "cuda_visible_devices": sluice_trainer.cuda_visible_devices}, f)
    ids_path = os.path.join(args.out, f"ids-{device}-{pid}.txt")
    append_ids(ids_path, [])

    for batch in conn.batches(auto_ack=not args.manual):
        ids = batch.column(args.column).to_pylist()
        if (args.kill_after is not None and conn.acked >= args.kill_after
                and claim_death(os.path.join(args.out, f"died-{device}"))):
            append_ids(os.path.join(args.out, f"unacked-{device}-{pid}.txt"), ids)
            os.kill(pid, signal.SIGKILL)
        if args.manual:
            with conn.acknowledging():
                append_ids(ids_path, ids)
        else:
            append_ids(ids_path, ids)
    assert conn.pending == 0, f"{conn.pending} batches left unacknowledged"


if __name__ == "__main__":
    main()
