#!/usr/bin/env python3
"""Test trainer that keeps checkpoints: its "model" is the multiset of ids it applied.

It speaks the exec protocol directly (pyarrow only, no sluice_trainer): it writes
`checkpoints` on SLUICE_ACK_FD before anything else, then for every record batch of
the Arrow IPC stream on stdin it adds the batch's ids to its in-memory model and
writes `ack`. After every --every acknowledged batches it saves its model as a
checkpoint and then writes `checkpoint ID`; at the end of the stream it saves a final
checkpoint the same way and writes its model to a final-* file.

Checkpoint IDs are a per-device counter: 1, 2, 3, ... for the checkpoints this device
wrote since the job started. The counter is carried in the checkpoint file, so a
process started with SLUICE_RESUME_CHECKPOINT=K loads OUT/ckpt-<device>-K.json
(exiting with status 3 and a message when it is missing or unreadable) and goes on
with K+1. Every device thus writes the same sequence of IDs; a checkpoint written
again after a resume (same device and ID) replaces the earlier file.

Files in OUT (ids as text: str() of the id column's values):
    ckpt-<device>-<ID>.json   a checkpoint, written atomically (temporary file, fsync,
                              rename, fsync of OUT) before `checkpoint ID` is written;
                              all are kept:
                              {"device": 0, "id": "3", "counter": 3, "batches": 9,
                               "model": {"<id>": <times applied>, ...}}
                              "batches": batches the model holds (this process's and
                              those of the checkpoint it resumed from).
    final-<device>-<pid>.json at the end of the stream, after the final checkpoint,
                              written atomically:
                              {"device": 0, "pid": 123, "resumed_from": "2" or null,
                               "checkpoint": "4", "batches": 10,
                               "model": {"<id>": <times applied>, ...}}
                              The union of the models of a run's final-* files is what
                              the job trained.
    start-<device>-<pid>.json at start, once the checkpoint is loaded:
                              {"device": 0, "pid": 123, "resume": "2" or null,
                               "batches": <batches the loaded model holds>}
    complete-<device>-<pid>.txt   each sluice.checkpoint_complete a batch carried, one
                              per line, in the order received
    ids-<device>-<pid>.txt    the ids this process acknowledged, one per line, fsynced
                              before each `ack` (served again after a restart, an id
                              shows up in several such files).
    died-<device>, unacked-<device>-<pid>.txt   see --die-after.
    died-ckpt-<device>        see --die-in-checkpoint.
    ended-<device>-<pid>      created when the stream ended (before --linger and the
                              final checkpoint)

Options:
    --out DIR                where to write (required)
    --column NAME            id column (default: id)
    --every N                checkpoint after every N acknowledged batches (default 3;
                             0: only the final one)
    --sleep S                sleep S seconds per batch before acknowledging it
    --die-after N            after acknowledging N batches in this process, on receiving
                             the next batch: if OUT/died-<device> does not exist yet,
                             create it, write that batch's ids to
                             OUT/unacked-<device>-<pid>.txt and exit with status 9
                             without acknowledging it. The process started in its
                             place finds the marker and runs normally, so each device
                             dies at most once (over all runs that share OUT).
    --die-in-checkpoint N    at this process's Nth checkpoint, once its file is saved
                             and before `checkpoint ID` is written: if
                             OUT/died-ckpt-<device> does not exist yet, create it and
                             exit with status 9 (a checkpoint saved, never reported).
    --linger S               at the end of the stream, wait S seconds before the final
                             checkpoint (a trainer slow to save its model)
    --no-final               at the end of the stream, exit 0 without the final
                             checkpoint (and without a final-* file): a trainer that
                             breaks the protocol's rule
"""

import argparse
import json
import os
import sys
import time
from collections import Counter

# pyarrow imports numpy where it is installed, which is most of this
# trainer's start (paid at each of its starts in every test); it uses none.
sys.modules.setdefault("numpy", None)

import pyarrow as pa
import pyarrow.ipc


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomically(directory, name, value):
    """Write, fsync, rename into place, fsync the directory: all or nothing."""
    tmp = os.path.join(directory, f".{name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(value, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, name))
    fsync_dir(directory)


def append_ids(path, ids):
    with open(path, "a") as f:
        if ids:
            f.write("\n".join(map(str, ids)) + "\n")
        f.flush()
        os.fsync(f.fileno())


def claim(marker):
    """Create a marker file; False if an earlier process already did."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.write(fd, f"{os.getpid()}\n".encode())
    os.fsync(fd)
    os.close(fd)
    return True


def fail(message):
    print(f"checkpoint_ids: {message}", file=sys.stderr, flush=True)
    sys.exit(3)


class Trainer:
    def __init__(self, args, device, ack_fd):
        self.args = args
        self.device = device
        self.ack_fd = ack_fd
        self.model = Counter()
        self.batches = 0  # batches the model holds
        self.counter = 0  # checkpoints this device wrote since the job started
        self.written = 0  # checkpoints this process wrote

    def send(self, line):
        data = f"{line}\n".encode()
        while data:
            data = data[os.write(self.ack_fd, data):]

    def load(self, checkpoint_id):
        path = os.path.join(self.args.out, f"ckpt-{self.device}-{checkpoint_id}.json")
        try:
            with open(path) as f:
                saved = json.load(f)
        except (OSError, ValueError) as e:
            fail(f"device {self.device}: cannot load checkpoint {checkpoint_id} "
                 f"(SLUICE_RESUME_CHECKPOINT) from {path}: {e}")
        if saved.get("id") != checkpoint_id or saved.get("device") != self.device:
            fail(f"{path} holds checkpoint {saved.get('id')!r} of device "
                 f"{saved.get('device')!r}, not {checkpoint_id!r} of device {self.device}")
        self.model = Counter(saved["model"])
        self.batches = saved["batches"]
        self.counter = saved["counter"]

    def checkpoint(self):
        """Save the model under the next ID, then report it. Returns the ID."""
        self.counter += 1
        self.written += 1
        checkpoint_id = str(self.counter)
        write_json_atomically(self.args.out, f"ckpt-{self.device}-{checkpoint_id}.json", {
            "device": self.device, "id": checkpoint_id, "counter": self.counter,
            "batches": self.batches, "model": dict(self.model),
        })
        if (self.args.die_in_checkpoint == self.written
                and claim(os.path.join(self.args.out, f"died-ckpt-{self.device}"))):
            os._exit(9)  # saved, never reported
        self.send(f"checkpoint {checkpoint_id}")
        return checkpoint_id


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for the files above")
    ap.add_argument("--column", default="id", help="name of the id column")
    ap.add_argument("--every", type=int, default=3, metavar="N",
                    help="checkpoint every N acknowledged batches (0: only at the end)")
    ap.add_argument("--sleep", type=float, default=0.0, metavar="S",
                    help="seconds to sleep per batch")
    ap.add_argument("--die-after", type=int, default=None, metavar="N",
                    help="die (once per device) after acknowledging N batches")
    ap.add_argument("--die-in-checkpoint", type=int, default=None, metavar="N",
                    help="die (once per device) between saving and reporting the Nth "
                         "checkpoint of this process")
    ap.add_argument("--linger", type=float, default=0.0, metavar="S",
                    help="seconds to wait at the end of the stream before the final "
                         "checkpoint")
    ap.add_argument("--no-final", action="store_true",
                    help="exit at the end of the stream without a final checkpoint")
    args = ap.parse_args()

    if "SLUICE_ACK_FD" not in os.environ:
        fail("SLUICE_ACK_FD is not set: run me under sluice train --exec")
    device = int(os.environ.get("SLUICE_DEVICE", "0"))
    pid = os.getpid()
    os.makedirs(args.out, exist_ok=True)
    trainer = Trainer(args, device, int(os.environ["SLUICE_ACK_FD"]))

    resume = os.environ.get("SLUICE_RESUME_CHECKPOINT") or None
    if resume is not None:
        trainer.load(resume)
    write_json_atomically(args.out, f"start-{device}-{pid}.json", {
        "device": device, "pid": pid, "resume": resume, "batches": trainer.batches,
    })
    trainer.send("checkpoints")

    ids_path = os.path.join(args.out, f"ids-{device}-{pid}.txt")
    append_ids(ids_path, [])
    stdin = sys.stdin.buffer
    acked = 0
    if stdin.peek(1):  # else stdin closed before any stream: nothing to train on
        reader = pa.ipc.open_stream(stdin)
        column = reader.schema.get_field_index(args.column)
        if column < 0:
            fail(f"no column {args.column!r} in {reader.schema}")
        complete_path = os.path.join(args.out, f"complete-{device}-{pid}.txt")
        while True:
            try:
                batch, metadata = reader.read_next_batch_with_custom_metadata()
            except StopIteration:
                break
            complete = (metadata or {}).get(b"sluice.checkpoint_complete")
            if complete is not None:
                append_ids(complete_path, [complete.decode()])
            ids = batch.column(column).to_pylist()
            if (args.die_after is not None and acked >= args.die_after
                    and claim(os.path.join(args.out, f"died-{device}"))):
                append_ids(os.path.join(args.out, f"unacked-{device}-{pid}.txt"), ids)
                os._exit(9)  # no cleanup, no ack: like a crashed trainer
            if args.sleep:
                time.sleep(args.sleep)
            trainer.model.update(str(i) for i in ids)
            trainer.batches += 1
            append_ids(ids_path, ids)
            trainer.send("ack")
            acked += 1
            if args.every and acked % args.every == 0:
                trainer.checkpoint()

    append_ids(os.path.join(args.out, f"ended-{device}-{pid}"), [])
    if args.linger:
        time.sleep(args.linger)
    if args.no_final:
        return 0
    final = trainer.checkpoint()
    write_json_atomically(args.out, f"final-{device}-{pid}.json", {
        "device": device, "pid": pid, "resumed_from": resume, "checkpoint": final,
        "batches": trainer.batches, "model": dict(trainer.model),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
