#!/usr/bin/env python3
"""A click-through-rate model in PyTorch, trained on the batches sluice hands it.

Run it through sluice, which starts it once per device:

    sluice train DATA --exec 'python examples/torch/train_ctr.py' --devices 2
    sluice worker --master URL --exec 'python examples/torch/train_ctr.py' --devices 2

DATA has Criteo-like columns (examples/torch/make_criteo.py writes some with Spark):
a 0/1 label, integer or float columns (I1..I13) and string columns (C1..C26). The
model embeds every string column (hashed into --buckets buckets by sluice_trainer,
vectorised over the Arrow buffers; or by sluice itself, before the batch leaves it,
under `sluice train --hash-buckets N --fill-nulls 0`, the fast way), feeds the embeddings and log-scaled numeric
columns to a small MLP, and minimises the logistic loss with Adam. Nulls in numeric
columns count as 0; null strings hash to a bucket of their own.

Each process trains its own replica on the share of the data sluice gives its device.
Under `sluice train --lockstep` the processes are one torch.distributed group instead
(sluice sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and gives every process
one batch per step and the same number of steps per epoch): the model is wrapped in
DistributedDataParallel (NCCL on GPUs, gloo on CPUs), so every process holds the same
model, trained on all the processes' batches. A batch is acknowledged to sluice once
the optimizer step that used it is done, so a process that dies loses no data: the
batches it had not finished are served to the process sluice starts in its place
(which starts from a fresh model without --checkpoint-dir).

With --checkpoint-dir DIR each process keeps checkpoints: every --checkpoint-every
steps, and once more at the end of the stream, it saves its model and optimizer
state to DIR/device-<device>/<step>/state.pt (written in a temporary directory,
fsynced, renamed into place) and reports checkpoint <step> to sluice; it removes
those older than the newest checkpoint sluice recorded complete (sluice never
resumes from them again), and until sluice has told one, keeps the last
--keep-checkpoints. A process sluice starts with
SLUICE_RESUME_CHECKPOINT=<step> (a restart after a crash, or a resumed job) loads
that checkpoint and is served only the rows it does not hold; checkpoints newer than
the one it starts from (all of them when it starts from scratch) belong to a run
sluice rolled back and are removed. Devices that train at different paces need more
kept checkpoints: sluice resumes a job from the last step every device reached.

It prints its loss to stderr every --log-every steps and, with --summary-dir DIR,
writes DIR/summary-<device>-<pid>.json at the end: steps, rows, positives, the loss
of every step, the mean loss of the first and last --window steps, the epochs whose
end sluice marked, and a SHA-256 digest of the final model's parameters.
"""

import argparse
import datetime
import hashlib
import json
import math
import os
import shutil
import sys
import time

import pyarrow as pa
import torch
from torch import nn

import sluice_trainer


class CTRModel(nn.Module):
    """Embeddings of hashed categorical columns + numeric columns -> MLP -> logit."""

    def __init__(self, numeric, categorical, buckets, dim, hidden):
        super().__init__()
        self.buckets = buckets
        # One table for all categorical columns: column i uses rows [i*B, (i+1)*B).
        self.embedding = nn.Embedding(max(categorical, 1) * buckets, dim)
        nn.init.normal_(self.embedding.weight, std=0.01)
        self.register_buffer("offsets", torch.arange(categorical, dtype=torch.int64) * buckets)
        self.mlp = nn.Sequential(
            nn.Linear(numeric + categorical * dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden // 2),
            nn.ReLU(),
            nn.Linear(hidden // 2, 1),
        )

    def forward(self, numeric, categorical):
        embedded = self.embedding(categorical + self.offsets).flatten(1)
        return self.mlp(torch.cat([numeric, embedded], dim=1)).squeeze(1)


def hashed_buckets(field):
    """The buckets sluice hashed a column into (`sluice train --hash-buckets`), or None."""
    value = (field.metadata or {}).get(b"sluice.hash_buckets")
    return int(value) if value else None


def split_columns(schema, label, skip=()):
    """(numeric, categorical) feature column names of the stream's schema (not `skip`).
    Columns sluice hashed (`--hash-buckets`) are categorical, though int64."""
    if schema.get_field_index(label) < 0:
        raise sluice_trainer.SluiceError(
            f"no label column {label!r} in the data; it has {', '.join(schema.names)}")
    numeric, categorical = [], []
    for field in schema:
        if field.name == label or field.name in skip:
            continue
        kind = field.type
        if hashed_buckets(field) is not None:
            categorical.append(field.name)
        elif pa.types.is_integer(kind) or pa.types.is_floating(kind):
            numeric.append(field.name)
        elif (pa.types.is_string(kind) or pa.types.is_large_string(kind)
              or pa.types.is_dictionary(kind) or pa.types.is_binary(kind)):
            categorical.append(field.name)
    return numeric, categorical


def features(tensors, numeric, categorical):
    """The model's inputs from one batch's tensors (numeric log-scaled, as floats)."""
    rows = len(next(iter(tensors.values())))
    if numeric:
        values = torch.stack([tensors[c].to(torch.float32) for c in numeric], dim=1)
        values = torch.sign(values) * torch.log1p(values.abs())
    else:
        values = torch.zeros(rows, 0)
    if categorical:
        ids = torch.stack([tensors[c] for c in categorical], dim=1)
    else:
        ids = torch.zeros(rows, 0, dtype=torch.int64)
    return values, ids


def digest(model):
    """SHA-256 of the model's state (names and values), equal for equal models."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def join_group(conn, device, timeout):
    """Joins the torch.distributed group of the --lockstep processes."""
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    return dist


def drain(pending, losses):
    """Moves the losses still on the device into `losses`: one read, one wait for
    the GPU, for many steps (`loss.item()` at every step would wait at every step)."""
    if pending:
        losses.extend(torch.stack(pending).tolist())
        pending.clear()


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def write_summary(directory, summary):
    os.makedirs(directory, exist_ok=True)
    name = f"summary-{summary['device']}-{summary['pid']}.json"
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, name))


def fsync_path(path):
    """fsync a file or directory (by path)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def saved_steps(root):
    """Steps of the checkpoints in `root`, oldest first."""
    if not os.path.isdir(root):
        return []
    return sorted(int(name) for name in os.listdir(root) if name.isdigit())


def save_checkpoint(root, step, model, optimizer):
    """Saves model and optimizer as checkpoint `step`, durably and all or nothing:
    into a temporary directory, fsynced, then renamed to root/<step>."""
    final = os.path.join(root, str(step))
    tmp = os.path.join(root, f".{step}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    path = os.path.join(tmp, "state.pt")
    torch.save({"step": step, "model": model.state_dict(),
                "optimizer": optimizer.state_dict()}, path)
    fsync_path(path)
    fsync_path(tmp)
    shutil.rmtree(final, ignore_errors=True)  # left under this step by a rolled-back run
    os.replace(tmp, final)
    fsync_path(root)


def load_checkpoint(root, checkpoint_id, model, optimizer, device):
    """Loads checkpoint `checkpoint_id` into model and optimizer; returns its step."""
    path = os.path.join(root, checkpoint_id, "state.pt")
    if not os.path.isfile(path):
        kept = ", ".join(map(str, saved_steps(root))) or "none"
        raise sluice_trainer.SluiceError(
            f"sluice resumes checkpoint {checkpoint_id}, but there is no {path} "
            f"(kept: {kept}); raise --keep-checkpoints if the devices train at "
            "different paces")
    state = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["step"]


def prune_checkpoints(root, keep, start, completed=None):
    """Removes the checkpoints sluice never resumes from again: those older than
    `completed` (the newest checkpoint sluice recorded complete, once it told), else
    all but the last `keep`; those newer than `start` (left by a run sluice rolled
    back: this process goes on from `start`); and temporaries."""
    steps = saved_steps(root)
    doomed = [s for s in steps if s > start]
    steps = [s for s in steps if s <= start]
    if completed is not None and completed.isdigit():
        doomed += [s for s in steps if s < int(completed)]
    else:
        doomed += steps[:max(len(steps) - keep, 0)]
    for step in doomed:
        shutil.rmtree(os.path.join(root, str(step)), ignore_errors=True)
    for name in os.listdir(root):
        if name.startswith(".") and name.endswith(".tmp"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--label", default="label", help="label column (default: label)")
    ap.add_argument("--buckets", type=int, default=1000,
                    help="hash buckets per categorical column (default: 1000)")
    ap.add_argument("--dim", type=int, default=8, help="embedding size (default: 8)")
    ap.add_argument("--hidden", type=int, default=64, help="MLP width (default: 64)")
    ap.add_argument("--lr", type=float, default=0.005, help="Adam learning rate")
    ap.add_argument("--seed", type=int, default=0, help="model initialisation seed")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per process (default: 1; one process per device)")
    ap.add_argument("--log-every", type=int, default=50, metavar="STEPS",
                    help="print the mean loss of the last STEPS steps (default: 50)")
    ap.add_argument("--window", type=int, default=20, metavar="STEPS",
                    help="steps averaged for first_loss / last_loss (default: 20)")
    ap.add_argument("--summary-dir", metavar="DIR",
                    help="write DIR/summary-<device>-<pid>.json at the end")
    ap.add_argument("--checkpoint-dir", metavar="DIR",
                    help="keep checkpoints in DIR/device-<device>/<step> and resume "
                         "from the one sluice names")
    ap.add_argument("--checkpoint-every", type=int, default=100, metavar="STEPS",
                    help="checkpoint every STEPS steps (default: 100), and at the end")
    ap.add_argument("--keep-checkpoints", type=int, default=3, metavar="N",
                    help="checkpoints kept per device (default: 3)")
    ap.add_argument("--id-column", metavar="NAME",
                    help="a column that is no feature: with --summary-dir, each trained "
                         "batch's values of it are appended to DIR/ids-<device>-<pid>.txt "
                         "as lines '<epoch> <id>' once its step is done")
    ap.add_argument("--group-timeout", type=float, default=300, metavar="SECONDS",
                    help="under --lockstep: how long a collective may wait for the other "
                         "processes before failing (default: 300)")
    args = ap.parse_args()
    if args.checkpoint_every < 1 or args.keep_checkpoints < 1:
        ap.error("--checkpoint-every and --keep-checkpoints must be at least 1")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    # Checkpoints are declared before anything is acknowledged.
    conn = sluice_trainer.connect(checkpoints=bool(args.checkpoint_dir))
    who = f"train_ctr device {conn.device}/{conn.devices}"
    device = conn.torch_device()

    dist = None
    if conn.lockstep and conn.world_size > 1:
        dist = join_group(conn, device, args.group_timeout)
        who = f"train_ctr rank {conn.rank}/{conn.world_size} (device {conn.device}/{conn.devices})"
    schema = conn.schema
    losses, rows, positives, epochs_ended = [], 0, 0, []
    numeric, categorical = [], []
    final_digest = None
    step = saved = 0  # steps of the model (with those of a loaded checkpoint); last saved
    resume = None
    started = time.monotonic()
    if schema is not None:
        skip = (args.id_column,) if args.id_column else ()
        numeric, categorical = split_columns(schema, args.label, skip)
        # Columns sluice hashed (`sluice train --hash-buckets N`) arrive as buckets
        # below N: the embedding rows per column follow the largest N.
        hashed = [hashed_buckets(schema.field(c)) for c in categorical]
        if any(n is not None for n in hashed):
            args.buckets = max(n if n is not None else args.buckets for n in hashed)
        ids_log = None
        if args.id_column and args.summary_dir:
            os.makedirs(args.summary_dir, exist_ok=True)
            ids_log = os.path.join(args.summary_dir, f"ids-{conn.device}-{os.getpid()}.txt")
        net = CTRModel(len(numeric), len(categorical), args.buckets, args.dim,
                       args.hidden).to(device)
        optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
        loss_fn = nn.BCEWithLogitsLoss()
        if args.checkpoint_dir:
            root = os.path.join(args.checkpoint_dir, f"device-{conn.device}")
            os.makedirs(root, exist_ok=True)
            resume = sluice_trainer.resume_checkpoint()
            if resume is not None:
                step = saved = load_checkpoint(root, resume, net, optimizer, device)
                print(f"{who}: resumed from checkpoint {resume} (step {step})",
                      file=sys.stderr, flush=True)
            prune_checkpoints(root, args.keep_checkpoints, step)
        # Under --lockstep every process starts from rank 0's parameters (DDP
        # broadcasts them) and applies the gradients averaged over all of them.
        model = net if dist is None else nn.parallel.DistributedDataParallel(net)
        print(f"{who}: {len(numeric)} numeric, {len(categorical)} categorical columns "
              f"on {device}", file=sys.stderr, flush=True)
        # On a GPU the batches arrive there through pinned buffers and a copy stream
        # of their own: each copy overlaps the step the GPU is still running.
        batches = sluice_trainer.torch_batches(
            columns=[args.label] + numeric + categorical + list(skip),
            hash_buckets=args.buckets, nulls="fill", fill_value=0, device=device)
        # Losses and the count of positives stay on the device until they are
        # printed or the stream ends, so the GPU is never waited for inside a step.
        pending, positives_here = [], torch.zeros((), dtype=torch.float64, device=device)
        # Each loop is one step: sluice_trainer acknowledges the batch when the loop
        # asks for the next one, i.e. once optimizer.step() has applied it.
        for tensors in batches:
            label = tensors[args.label].to(device, torch.float32)
            values, ids = features(tensors, numeric, categorical)
            logits = model(values.to(device), ids.to(device))
            # A process may get a batch of no rows (an epoch with fewer rows than
            # processes): it still takes part in the step, adding no gradient.
            loss = loss_fn(logits, label) if len(label) else logits.sum() * 0.0
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if len(label):
                pending.append(loss.detach())
            if ids_log is not None:
                with open(ids_log, "a") as f:
                    epoch = conn.epoch if conn.epoch is not None else -1
                    f.write("".join(f"{epoch} {i}\n" for i in tensors[args.id_column].tolist()))
            rows += len(label)
            positives_here += label.sum(dtype=torch.float64)
            step += 1
            if conn.epoch_end:
                epochs_ended.append(conn.epoch)
            if args.checkpoint_dir and step % args.checkpoint_every == 0:
                save_checkpoint(root, step, net, optimizer)
                # Acknowledges this batch (its step is in the checkpoint), then reports.
                sluice_trainer.checkpoint(step)
                saved = step
                prune_checkpoints(root, args.keep_checkpoints, step,
                                  sluice_trainer.completed_checkpoint())
            if (len(losses) + len(pending)) % args.log_every == 0:
                drain(pending, losses)
                recent = mean(losses[-args.log_every:])
                print(f"{who}: step {len(losses)} rows {rows} loss {recent:.4f}",
                      file=sys.stderr, flush=True)
        drain(pending, losses)
        positives = int(positives_here.item())
        if args.checkpoint_dir and step != saved:
            save_checkpoint(root, step, net, optimizer)  # the end of the stream
            sluice_trainer.checkpoint(step)
            prune_checkpoints(root, args.keep_checkpoints, step,
                              sluice_trainer.completed_checkpoint())
        final_digest = digest(net)
    if dist is not None:
        dist.destroy_process_group()

    seconds = time.monotonic() - started
    first, last = mean(losses[:args.window]), mean(losses[-args.window:])
    print(f"{who}: done, {len(losses)} steps, {rows} rows in {seconds:.1f}s, loss "
          f"{first:.4f} (first {args.window} steps) -> {last:.4f} (last {args.window})",
          file=sys.stderr, flush=True)
    if args.summary_dir:
        share = positives / rows if rows else None
        base_rate_loss = None
        if share is not None and 0 < share < 1:
            base_rate_loss = -(share * math.log(share) + (1 - share) * math.log(1 - share))
        write_summary(args.summary_dir, {
            "device": conn.device, "devices": conn.devices, "pid": os.getpid(),
            "steps": len(losses), "rows": rows, "positives": positives,
            "window": args.window, "first_loss": first if losses else None,
            "last_loss": last if losses else None, "base_rate_loss": base_rate_loss,
            "losses": losses, "seconds": round(seconds, 3),
            "resumed_from": resume, "step": step, "rank": conn.rank,
            "world_size": conn.world_size, "epochs_ended": epochs_ended,
            "digest": final_digest, "numeric": len(numeric), "categorical": len(categorical),
        })


if __name__ == "__main__":
    main()
