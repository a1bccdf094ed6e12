#!/usr/bin/env python3
"""Test script for `sluice_trainer.Dataset`: a training loop that owns its process.

Usage:
    python tests/trainers/dataset_loop.py MODE DATA OUT [options]

MODE:
    plain       iterate pyarrow batches; write OUT/ids.txt (one id per line, every epoch)
                and OUT/forms.json: {"counts": how many batches came in each form
                ("message": lone messages in shared memory, "stream", or "None": on
                the pipe), "last_on_pipe", "first_shared": the indexes of the last
                batch on the pipe and of the first in shared memory, or null}
    torch       the same through ds.torch() (tensors), then ds.numpy() is not used
    numpy       the same through ds.numpy()
    raise       raise inside the loop after 3 batches, catch it outside; write
                OUT/pid.txt (sluice's pid) and OUT/alive.txt ("yes"/"no": is sluice
                still running once the exception left the loop)
    log         iterate pyarrow batches, sleeping --sleep seconds each; append each
                batch's ids to OUT/trained-<pid>.txt (fsynced) once trained
    model       a model that holds every id it trained on, saved under checkpoint ids
                in OUT/model-<ID>.json; resumes from ds.resume_checkpoint(); with
                --kill-after N the process SIGKILLs itself after N batches unless
                OUT/killed exists (created first); writes OUT/final.json at the end
    epochs      `for epoch in ds.epochs()`: writes OUT/epochs.json, for each epoch its
                index, len() (or the TypeError's message) and each batch's
                [ds.epoch, ds.step, rows, ids]; then len(ds.torch_iterable()) is not
                asked (see torchlen)
    torchlen    len(ds.torch_iterable()) before the loop, then one DataLoader-style
                loop per epoch over it: OUT/torchlen.json {"len": N or the
                TypeError's message, "epochs": [steps yielded by each iter()]}
    resume      iterate --stop-after N batches, save ds.state_dict() to OUT/sd.json,
                leave the loop; with --load F, load_state_dict(F's) first and run to
                the end; appends ids to OUT/ids.txt
    worker      one worker of a distributed job: DATA is the master's URL; with
                torch.distributed initialised (torchrun), trains a DDP linear model and
                writes OUT/rank-<R>.json: ids, steps, final parameters
    world       one rank of a torchrun job of a master with --world-size: trains a
                DDP linear model on the global batches' slices, appending one line
                per batch to OUT/steps-<rank>-<pid>.jsonl (the batch's sluice.rank,
                epoch, step, ids) before it acknowledges it

Options: --epochs N, --batch-size B, --state DIR, --every N (checkpoint every N
batches), --token-file F, --sleep S, and any --option key=value passed to Dataset
as key=value.
"""

import argparse
import json
import os
import signal
import sys
import time

import sluice_trainer


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--state")
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--kill-after", type=int)
    ap.add_argument("--token-file")
    ap.add_argument("--option", action="append", default=[])
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--stop-after", type=int)
    ap.add_argument("--load")
    args = ap.parse_args()
    extra = dict(o.split("=", 1) for o in args.option)
    out = args.out

    if args.mode == "worker":
        return worker(args, extra)
    if args.mode == "world":
        return world(args, extra)

    ds = sluice_trainer.Dataset(args.data, batch_size=args.batch_size, epochs=args.epochs,
                                state=args.state, **extra)
    if args.mode in ("plain", "torch", "numpy"):
        ids = []
        counts = {}
        last_on_pipe = first_shared = None
        if args.mode == "plain":
            for n, batch in enumerate(ds):
                ids.extend(batch.column("id").to_pylist())
                form = ds._conn._last_form
                counts[str(form)] = counts.get(str(form), 0) + 1
                if form is None:
                    last_on_pipe = n
                elif first_shared is None:
                    first_shared = n
        elif args.mode == "torch":
            for tensors in ds.torch(columns=["id"]):
                ids.extend(tensors["id"].tolist())
        else:
            for arrays in ds.numpy(columns=["id"]):
                ids.extend(arrays["id"].tolist())
        with open(os.path.join(out, "ids.txt"), "w") as f:
            f.write("".join(f"{i}\n" for i in ids))
        write_json(os.path.join(out, "forms.json"),
                   {"counts": counts, "last_on_pipe": last_on_pipe, "first_shared": first_shared})
        return 0

    if args.mode == "epochs":
        epochs = []
        for epoch in ds.epochs():
            try:
                steps = len(epoch)
            except TypeError as e:
                steps = str(e)
            batches = [[ds.epoch, ds.step, b.num_rows, b.column("id").to_pylist()]
                       for b in epoch]
            epochs.append({"index": epoch.index, "len": steps, "batches": batches})
        write_json(os.path.join(out, "epochs.json"), epochs)
        return 0

    if args.mode == "torchlen":
        iterable = ds.torch_iterable(columns=["id"])
        try:
            steps = len(iterable)
        except TypeError as e:
            steps = str(e)
        yielded = [sum(1 for _ in iterable) for _ in range(args.epochs)]
        write_json(os.path.join(out, "torchlen.json"), {"len": steps, "epochs": yielded})
        return 0

    if args.mode == "resume":
        if args.load:
            with open(args.load) as f:
                ds.load_state_dict(json.load(f))
        ids = []
        for n, batch in enumerate(ds):
            ids.extend(batch.column("id").to_pylist())
            if args.stop_after is not None and n + 1 >= args.stop_after:
                write_json(os.path.join(out, "sd.json"), ds.state_dict())
                break
        with open(os.path.join(out, "ids.txt"), "a") as f:
            f.write("".join(f"{i}\n" for i in ids))
        return 0

    if args.mode == "log":
        path = os.path.join(out, f"trained-{os.getpid()}.txt")
        for batch in ds:
            time.sleep(args.sleep)
            with open(path, "a") as f:
                f.write("".join(f"{i}\n" for i in batch.column("id").to_pylist()))
                f.flush()
                os.fsync(f.fileno())
        return 0

    if args.mode == "raise":
        pid = ds.pid
        with open(os.path.join(out, "pid.txt"), "w") as f:
            f.write(str(pid))
        try:
            for n, _ in enumerate(ds):
                if n == 3:
                    raise ValueError("a bug in the training loop")
        except ValueError:
            pass
        deadline = time.time() + 5
        while alive(pid) and time.time() < deadline:
            time.sleep(0.05)
        with open(os.path.join(out, "alive.txt"), "w") as f:
            f.write("yes" if alive(pid) else "no")
        return 0

    if args.mode == "model":
        resume = ds.resume_checkpoint()
        model = []
        if resume is not None:
            with open(os.path.join(out, f"model-{resume}.json")) as f:
                model = json.load(f)["ids"]
        step = 0 if resume is None else int(resume)
        killed = os.path.join(out, "killed")
        for batch in ds:
            model.extend(batch.column("id").to_pylist())
            step += 1
            if step % args.every == 0:
                write_json(os.path.join(out, f"model-{step}.json"), {"ids": model})
                ds.checkpoint(step)
            if args.kill_after and step >= args.kill_after and not os.path.exists(killed):
                open(killed, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        write_json(os.path.join(out, "final.json"), {"ids": model})
        return 0
    raise SystemExit(f"unknown mode {args.mode}")


def worker(args, extra):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ds = sluice_trainer.Dataset(master=args.data, token_file=args.token_file,
                                name=f"rank-{rank}", batch_size=args.batch_size, **extra)
    ids, steps = [], 0
    for t in ds.torch(columns=["id", "x1", "x2", "label"]):
        ids.extend(t["id"].tolist())
        x = torch.stack([t["x1"].float(), t["x2"].float()], dim=1)
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), t["label"].float())
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    params = [p.detach().flatten().tolist() for p in model.parameters()]
    write_json(os.path.join(args.out, f"rank-{rank}.json"),
               {"ids": ids, "steps": steps, "params": params})
    dist.destroy_process_group()
    return 0


def world(args, extra):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ds = sluice_trainer.Dataset(master=args.data, token_file=args.token_file,
                                name=f"rank-{dist.get_rank()}", ack=False, **extra)
    log = None
    for epoch in ds.epochs():
        for batch in epoch:
            rank = ds._conn.world_rank  # the batch's sluice.rank
            if log is None:
                log = os.open(os.path.join(args.out, f"steps-{rank}-{os.getpid()}.jsonl"),
                              os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            x = torch.stack([torch.tensor(batch.column(c).to_numpy(), dtype=torch.float32)
                             for c in ("x1", "x2")], dim=1)
            y = torch.tensor(batch.column("label").to_numpy(), dtype=torch.float32)
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            line = {"rank": rank, "epoch": ds.epoch, "step": ds.step,
                    "ids": batch.column("id").to_pylist()}
            os.write(log, (json.dumps(line) + "\n").encode())
            os.fsync(log)
            if args.sleep:
                time.sleep(args.sleep)
            ds.ack()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
