#!/usr/bin/env python3
"""Test trainer: asks for batches in shared memory and checks they come from there.

    shm_check.py --out DIR [--no-shm] [--stream] [--die-after N]

For every batch it records the ids and whether every buffer of the batch lies inside
the mapping of the memory file sluice writes batches into (SLUICE_SHM_FD), i.e. the
batch was read without a copy, and whether every buffer starts on a 64-byte boundary
(numpy wraps such buffers as they lie). With --stream it asks for whole streams (`shm`)
even where sluice offers lone messages (SLUICE_SHM_MESSAGES). With --die-after N, the process on device 0 exits
(code 3) after reading its N-th batch without acknowledging it, once per run (a
marker file in DIR). Appends the ids of each batch it acknowledges to DIR/ids-<device>-<pid>.txt and at
the end writes DIR/shm-<device>-<pid>.json: {"batches": B, "shared": batches read from shared memory, "max_file": largest size of
the memory file seen, "offered": whether SLUICE_SHM_FD was set, "messages_offered":
whether SLUICE_SHM_MESSAGES was, "aligned": batches whose buffers all start on 64 bytes,
"messages": batches that came as lone record batch messages}.
"""

import argparse
import json
import os

import pyarrow as pa

import sluice_trainer


def in_mapping(batch, base, length):
    for column in batch.columns:
        for buffer in column.buffers():
            if buffer is None or buffer.size == 0:
                continue
            if not (base <= buffer.address and buffer.address + buffer.size <= base + length):
                return False
    return True


def aligned(batch):
    return all(buffer is None or buffer.size == 0 or buffer.address % 64 == 0
               for column in batch.columns for buffer in column.buffers())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-shm", action="store_true")
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--die-after", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    conn = sluice_trainer.connect(shared_memory=False)
    if args.stream:
        conn._shm_messages = False
    if not args.no_shm:
        conn.use_shared_memory()
    report = {"batches": 0, "shared": 0, "max_file": 0, "aligned": 0, "messages": 0,
              "offered": os.environ.get("SLUICE_SHM_FD") is not None,
              "messages_offered": os.environ.get("SLUICE_SHM_MESSAGES") == "1"}
    marker = os.path.join(args.out, "died")
    # Acknowledged ids, appended as they are acknowledged (a process that dies keeps
    # what it acknowledged).
    acked = open(os.path.join(args.out, f"ids-{conn.device}-{os.getpid()}.txt"), "a")
    for batch in conn.batches(auto_ack=False):
        report["batches"] += 1
        report["messages"] += conn._last_form == "message"
        if conn._map is not None:
            base = pa.py_buffer(memoryview(conn._map)).address
            if in_mapping(batch, base, conn._map_len):
                report["shared"] += 1
                report["aligned"] += aligned(batch)
            report["max_file"] = max(report["max_file"], os.fstat(conn._shm_fd).st_size)
        if (args.die_after and conn.device == 0 and report["batches"] == args.die_after
                and not os.path.exists(marker)):
            open(marker, "w").close()
            os._exit(3)
        ids = batch.column("id").to_pylist()
        conn.ack()
        acked.write("".join(f"{i}\n" for i in ids))
        acked.flush()
    path = os.path.join(args.out, f"shm-{conn.device}-{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
