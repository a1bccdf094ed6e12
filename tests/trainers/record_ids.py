#!/usr/bin/env python3
"""Test trainer for sluice's exec sink: records which ids it was handed.

sluice starts it as `sh -c CMD` once per device, with
    SLUICE_DEVICE    0-based device index of this process
    SLUICE_DEVICES   number of devices
    SLUICE_ACK_FD    file descriptor (normally 3) on which to acknowledge batches
and writes an Arrow IPC *stream* to its stdin.

For every record batch the trainer appends the values of the id column (one per
line) to OUT/ids-<device>-<pid>.txt, flushes and fsyncs that file, and only then
writes "ack\\n" to SLUICE_ACK_FD.  It exits 0 at the end of the stream.  Tests
compare the union of the ids-* files with the dataset's expected ids to check that
every row arrived exactly once.

Options:
    --out DIR         where to write (required)
    --column NAME     id column (default: id)
    --sleep S         sleep S seconds per batch before acknowledging (a slow trainer)
    --die-after N     after acknowledging N batches in this process, on receiving the
                      next batch: if OUT/died-<device> does not exist yet, create it,
                      write that batch's ids to OUT/unacked-<device>-<pid>.txt and
                      exit with status 9 without acknowledging it.  A restarted
                      process on the same device finds died-<device> and runs
                      normally, so each device dies at most once.
    --hang-after N    like --die-after, but instead of exiting: mark OUT/hung-<device>,
                      write this process's pid to OUT/hung-pid-<device>-<pid> and sleep
                      forever without acknowledging (a hung trainer, for
                      --trainer-timeout to find).
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


def append_ids(path, ids):
    """Append ids (one per line) and make them durable before anything is acked."""
    with open(path, "a") as f:
        if ids:
            f.write("\n".join(map(str, ids)) + "\n")
        f.flush()
        os.fsync(f.fileno())


def claim_death(marker):
    """Create the died-<device> marker; False if an earlier process already did."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.write(fd, f"{os.getpid()}\n".encode())
    os.fsync(fd)
    os.close(fd)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for ids-*/unacked-* files")
    ap.add_argument("--column", default="id", help="name of the id column")
    ap.add_argument("--die-after", type=int, default=None, metavar="N",
                    help="die (once per device) after acknowledging N batches")
    ap.add_argument("--hang-after", type=int, default=None, metavar="N",
                    help="hang (once per device) after acknowledging N batches")
    ap.add_argument("--sleep", type=float, default=0.0, metavar="S",
                    help="seconds to sleep per batch")
    args = ap.parse_args()

    device = os.environ.get("SLUICE_DEVICE", "0")
    pid = os.getpid()
    os.makedirs(args.out, exist_ok=True)
    ids_path = os.path.join(args.out, f"ids-{device}-{pid}.txt")
    unacked_path = os.path.join(args.out, f"unacked-{device}-{pid}.txt")
    died_marker = os.path.join(args.out, f"died-{device}")
    hung_marker = os.path.join(args.out, f"hung-{device}")

    ack_fd = os.environ.get("SLUICE_ACK_FD")
    if ack_fd is None:
        print("record_ids: SLUICE_ACK_FD not set; batches will not be acknowledged",
              file=sys.stderr)
        ack = None
    else:
        ack = os.fdopen(int(ack_fd), "w", buffering=1)

    # Create the ids file up front so a process that receives nothing still shows up.
    append_ids(ids_path, [])

    stdin = sys.stdin.buffer
    if not stdin.peek(1):
        return 0  # stdin closed before any stream was written: nothing to train on
    reader = pa.ipc.open_stream(stdin)
    column = reader.schema.get_field_index(args.column)
    if column < 0:
        print(f"record_ids: no column {args.column!r} in {reader.schema}", file=sys.stderr)
        return 2

    acked = 0
    for batch in reader:
        ids = batch.column(column).to_pylist()
        if args.die_after is not None and acked >= args.die_after and claim_death(died_marker):
            append_ids(unacked_path, ids)
            os._exit(9)  # no cleanup, no ack: like a crashed trainer
        if args.hang_after is not None and acked >= args.hang_after and claim_death(hung_marker):
            append_ids(unacked_path, ids)
            append_ids(os.path.join(args.out, f"hung-pid-{device}-{pid}"), [pid])
            while True:
                time.sleep(3600)  # holds the batch, never acknowledges it
        if args.sleep:
            time.sleep(args.sleep)
        append_ids(ids_path, ids)
        if ack is not None:
            ack.write("ack\n")
            ack.flush()
        acked += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
