#!/usr/bin/env python3
"""Checkpoint lines of the exec trainer protocol, against a fake driver.

The driver does what sluice does for one device: it starts a trainer with
SLUICE_DEVICE, SLUICE_DEVICES and SLUICE_ACK_FD (a pipe), writes an Arrow IPC
stream of batches to its stdin and reads the lines it writes to the ack pipe. The
tests check those lines (`checkpoints`, `ack`, `checkpoint ID`) and the files the
trainers leave, for:

    Package        the sluice_trainer package (PYTHONPATH must name it)
    TestTrainer    tests/trainers/checkpoint_ids.py
    TorchExample   examples/torch/train_ctr.py --checkpoint-dir (needs PyTorch)

Run with `python tests/python/checkpoint_protocol.py [Package|TestTrainer|...]`;
tests/python_trainer.rs runs it under cargo.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest

import pyarrow as pa
import pyarrow.ipc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 120


def id_stream(batches, size=5, start=0):
    """An IPC stream of `batches` batches of `size` ids each: start, start+1, ..."""
    schema = pa.schema([("id", pa.int64())])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for b in range(batches):
            first = start + b * size
            writer.write_batch(pa.record_batch([pa.array(range(first, first + size),
                                                         pa.int64())], schema=schema))
    return sink.getvalue().to_pybytes()


class Result:
    def __init__(self, returncode, lines, stdout, stderr):
        self.returncode, self.lines, self.stdout, self.stderr = (
            returncode, lines, stdout, stderr)

    def __str__(self):
        return (f"exit {self.returncode}\nack lines: {self.lines}\n"
                f"stdout:\n{self.stdout}\nstderr:\n{self.stderr}")


def drive(argv, stream, device=0, devices=1, env=None):
    """Runs `argv` as sluice would, feeding `stream` (bytes) to its stdin; returns
    its exit code, the lines it wrote to the ack pipe, its stdout and stderr."""
    read_end, write_end = os.pipe()
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith("SLUICE_") or k == "SLUICE_TRAINER_TRACEBACK"}
    child_env.update(SLUICE_DEVICE=str(device), SLUICE_DEVICES=str(devices),
                     SLUICE_ACK_FD=str(write_end))
    child_env.update(env or {})
    try:
        child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, pass_fds=(write_end,),
                                 env=child_env)
    finally:
        os.close(write_end)
    acks = []

    def read_acks():
        with os.fdopen(read_end, "rb") as f:
            acks.append(f.read())

    reader = threading.Thread(target=read_acks)
    reader.start()
    try:
        stdout, stderr = child.communicate(stream, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise
    reader.join(TIMEOUT)
    text = acks[0].decode() if acks else ""
    assert text == "" or text.endswith("\n"), f"ack channel ends mid-line: {text!r}"
    return Result(child.returncode, text.splitlines(), stdout.decode(), stderr.decode())


def run_code(code, stream, **kwargs):
    """Runs a trainer given as Python source."""
    return drive([sys.executable, "-c", textwrap.dedent(code)], stream, **kwargs)


def acks(n):
    return ["ack"] * n


class Package(unittest.TestCase):
    """sluice_trainer: declare_checkpoints / connect(checkpoints=True), checkpoint(),
    resume_checkpoint()."""

    def one_line_error(self, result, starts):
        self.assertNotEqual(result.returncode, 0, result)
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, f"one line on stderr: {result}")
        self.assertTrue(lines[0].startswith("sluice_trainer: " + starts), result)

    def test_checkpoints_first_then_acks_and_checkpoints_in_order(self):
        result = run_code("""
            import sluice_trainer
            conn = sluice_trainer.connect(checkpoints=True)
            assert conn.checkpoints and conn.last_checkpoint is None
            assert sluice_trainer.resume_checkpoint() is None
            for step, batch in enumerate(sluice_trainer.batches(), 1):
                if step % 3 == 0:
                    sluice_trainer.checkpoint(step)   # acks this batch first
                    assert conn.pending == 0 and conn.last_checkpoint == str(step)
            """, id_stream(7))
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.lines, ["checkpoints"] + acks(3) + ["checkpoint 3"]
                         + acks(3) + ["checkpoint 6"] + acks(1), result)

    def test_declare_checkpoints_writes_the_line_once(self):
        result = run_code("""
            import sluice_trainer
            sluice_trainer.declare_checkpoints()
            sluice_trainer.connect(checkpoints=True)
            sluice_trainer.declare_checkpoints()
            for batch in sluice_trainer.batches():
                sluice_trainer.declare_checkpoints()   # declared already: nothing
            sluice_trainer.checkpoint("end")
            """, id_stream(2))
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.lines, ["checkpoints", "ack", "ack", "checkpoint end"],
                         result)

    def test_declaring_after_an_ack_fails(self):
        for declare in ("sluice_trainer.connect(checkpoints=True)",
                        "sluice_trainer.declare_checkpoints()"):
            result = run_code(f"""
                import sluice_trainer
                for n, batch in enumerate(sluice_trainer.batches()):
                    if n == 1:
                        {declare}
                """, id_stream(3))
            self.one_line_error(
                result, "checkpoints declared after 1 batch was acknowledged: sluice "
                "must be told before the first ack; call "
                "sluice_trainer.connect(checkpoints=True) before the training loop")
            self.assertEqual(result.lines, ["ack"], result)

    def test_checkpoint_without_declaring_fails(self):
        result = run_code("""
            import sluice_trainer
            for batch in sluice_trainer.batches():
                sluice_trainer.checkpoint(1)
            """, id_stream(2))
        self.one_line_error(result, "checkpoint(1) without declaring checkpoints")
        self.assertEqual(result.lines, [], result)

    def test_checkpoint_ids_are_checked(self):
        result = run_code("""
            import json, sluice_trainer
            sluice_trainer.connect(checkpoints=True)
            refused = {}
            for bad in ["", "a b", "x" * 129, "a/b", "é", "7\\n", "1:2", -1, 1.5, True,
                        None, b"12"]:
                try:
                    sluice_trainer.checkpoint(bad)
                except sluice_trainer.SluiceError as e:
                    refused[repr(bad)] = str(e)
            for good in ["a", "x" * 128, "step-1.0_A", 42, 0, "007"]:
                sluice_trainer.checkpoint(good)
            print(json.dumps(refused))
            """, b"")
        self.assertEqual(result.returncode, 0, result)
        refused = json.loads(result.stdout)
        self.assertEqual(len(refused), 12, result)
        self.assertEqual(refused["'a b'"], "checkpoint ID 'a b' is not 1 to 128 "
                         "characters of A-Z a-z 0-9 . _ -", result)
        self.assertEqual(result.lines, ["checkpoints", "checkpoint a",
                                        "checkpoint " + "x" * 128, "checkpoint step-1.0_A",
                                        "checkpoint 42", "checkpoint 0", "checkpoint 007"],
                         result)

    def test_an_id_names_one_state(self):
        result = run_code("""
            import sluice_trainer
            sluice_trainer.connect(checkpoints=True)
            for batch in sluice_trainer.batches():
                sluice_trainer.checkpoint(3)
            """, id_stream(2))
        self.one_line_error(result, "checkpoint(3): this process already wrote "
                            "checkpoint 3")
        self.assertEqual(result.lines, ["checkpoints", "ack", "checkpoint 3"], result)

    def test_resume_checkpoint_comes_from_the_environment(self):
        result = run_code("""
            import sluice_trainer
            sluice_trainer.connect(checkpoints=True)
            print(sluice_trainer.resume_checkpoint())
            for step, batch in enumerate(sluice_trainer.batches(), 13):
                try:
                    sluice_trainer.checkpoint("step-12")
                except sluice_trainer.SluiceError as e:
                    print(e)
                sluice_trainer.checkpoint(f"step-{step}")
            """, id_stream(1), env={"SLUICE_RESUME_CHECKPOINT": "step-12"})
        self.assertEqual(result.returncode, 0, result)
        printed = result.stdout.splitlines()
        self.assertEqual(printed[0], "step-12", result)
        self.assertTrue(printed[1].startswith(
            "checkpoint(step-12): this process already resumed from checkpoint step-12"),
            result)
        self.assertEqual(result.lines, ["checkpoints", "ack", "checkpoint step-13"], result)

    def test_a_resumed_trainer_that_ignores_the_checkpoint_fails(self):
        result = run_code("""
            import sluice_trainer
            sluice_trainer.connect(checkpoints=True)
            for batch in sluice_trainer.batches():
                pass
            """, id_stream(2), env={"SLUICE_RESUME_CHECKPOINT": "4"})
        self.one_line_error(result, "SLUICE_RESUME_CHECKPOINT=4 but the trainer reads "
                            "batches without asking for it")
        self.assertEqual(result.lines, ["checkpoints"], result)

    def test_an_invalid_resume_id_fails(self):
        result = run_code("""
            import sluice_trainer
            sluice_trainer.connect(checkpoints=True)
            """, b"", env={"SLUICE_RESUME_CHECKPOINT": "a b"})
        self.one_line_error(result, "SLUICE_RESUME_CHECKPOINT='a b' is not a checkpoint ID")
        self.assertEqual(result.lines, [], result)

    def test_checkpoint_without_ack_holds_only_acknowledged_batches(self):
        result = run_code("""
            import sluice_trainer
            conn = sluice_trainer.connect(checkpoints=True)
            batches = conn.batches(auto_ack=False)
            next(batches); next(batches)
            conn.ack(1)
            sluice_trainer.checkpoint("one", ack=False)
            assert conn.pending == 1
            conn.ack()
            assert next(batches, None) is None
            """, id_stream(2))
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.lines, ["checkpoints", "ack", "checkpoint one", "ack"],
                         result)

    def test_the_line_is_out_before_checkpoint_returns(self):
        # Killed right after checkpoint(): nothing may be left in a buffer.
        result = run_code("""
            import os, signal, sluice_trainer
            sluice_trainer.connect(checkpoints=True)
            for batch in sluice_trainer.batches():
                sluice_trainer.checkpoint(1)
                os.kill(os.getpid(), signal.SIGKILL)
            """, id_stream(3))
        self.assertEqual(result.returncode, -signal.SIGKILL, result)
        self.assertEqual(result.lines, ["checkpoints", "ack", "checkpoint 1"], result)

    def test_without_checkpoints_only_acks_are_written(self):
        result = run_code("""
            import sluice_trainer
            conn = sluice_trainer.connect()
            for batch in sluice_trainer.batches():
                pass
            assert not conn.checkpoints
            """, id_stream(3), env={"SLUICE_RESUME_CHECKPOINT": "9"})
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.lines, acks(3), result)


class TestTrainer(unittest.TestCase):
    """tests/trainers/checkpoint_ids.py."""

    script = os.path.join(REPO, "tests/trainers/checkpoint_ids.py")

    def setUp(self):
        self.out = tempfile.mkdtemp(prefix="checkpoint_ids-")

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.out], check=False)

    def run_trainer(self, stream, *options, resume=None, device=0):
        env = {} if resume is None else {"SLUICE_RESUME_CHECKPOINT": resume}
        return drive([sys.executable, self.script, "--out", self.out, *options], stream,
                     device=device, devices=2, env=env)

    def read(self, name):
        with open(os.path.join(self.out, name)) as f:
            return json.load(f)

    def files(self, prefix):
        return sorted(n for n in os.listdir(self.out) if n.startswith(prefix))

    def model(self, first, last):
        return {str(i): 1 for i in range(first, last)}

    def test_checkpoints_every_three_batches_and_at_the_end(self):
        result = self.run_trainer(id_stream(10))
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.lines, ["checkpoints"] + acks(3) + ["checkpoint 1"]
                         + acks(3) + ["checkpoint 2"] + acks(3) + ["checkpoint 3"]
                         + acks(1) + ["checkpoint 4"], result)
        second = self.read("ckpt-0-2.json")
        self.assertEqual(second, {"device": 0, "id": "2", "counter": 2, "batches": 6,
                                  "model": self.model(0, 30)})
        [final] = self.files("final-")
        final = self.read(final)
        self.assertEqual(final["checkpoint"], "4")
        self.assertIsNone(final["resumed_from"])
        self.assertEqual(final["model"], self.model(0, 50))
        self.assertEqual(self.read("ckpt-0-4.json")["model"], self.model(0, 50))
        self.assertFalse([n for n in os.listdir(self.out) if ".tmp" in n])

    def test_a_resumed_trainer_goes_on_from_its_checkpoint(self):
        self.assertEqual(self.run_trainer(id_stream(10)).returncode, 0)
        for name in self.files("final-"):
            os.remove(os.path.join(self.out, name))
        # Resumed from checkpoint 2 (30 ids), served the 20 ids after it.
        result = self.run_trainer(id_stream(4, start=30), resume="2")
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.lines, ["checkpoints"] + acks(3) + ["checkpoint 3"]
                         + acks(1) + ["checkpoint 4"], result)
        [final] = self.files("final-")
        final = self.read(final)
        self.assertEqual((final["resumed_from"], final["checkpoint"], final["batches"]),
                         ("2", "4", 10))
        self.assertEqual(final["model"], self.model(0, 50))
        [start] = [self.read(n) for n in self.files("start-")
                   if self.read(n)["resume"] is not None]
        self.assertEqual((start["resume"], start["batches"]), ("2", 6))

    def test_a_missing_checkpoint_fails_loudly(self):
        result = self.run_trainer(id_stream(2), resume="7", device=1)
        self.assertEqual(result.returncode, 3, result)
        self.assertIn("device 1: cannot load checkpoint 7", result.stderr)
        self.assertIn("ckpt-1-7.json", result.stderr)
        self.assertEqual(result.lines, [], result)

    def test_die_after_once_per_device(self):
        result = self.run_trainer(id_stream(10), "--die-after", "4", device=1)
        self.assertEqual(result.returncode, 9, result)
        self.assertEqual(result.lines, ["checkpoints"] + acks(3) + ["checkpoint 1"]
                         + acks(1), result)
        self.assertTrue(os.path.exists(os.path.join(self.out, "died-1")))
        [unacked] = self.files("unacked-1-")
        with open(os.path.join(self.out, unacked)) as f:
            self.assertEqual(f.read().split(), [str(i) for i in range(20, 25)])
        self.assertEqual(self.files("final-"), [])
        # Its successor resumes from checkpoint 1 and is served the rest: no death.
        result = self.run_trainer(id_stream(7, start=15), "--die-after", "4", resume="1",
                                  device=1)
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.lines[-2:], ["ack", "checkpoint 4"], result)
        [final] = self.files("final-1-")
        self.assertEqual(self.read(final)["model"], self.model(0, 50))

    def test_die_in_checkpoint_leaves_a_saved_unreported_checkpoint(self):
        result = self.run_trainer(id_stream(10), "--every", "2", "--die-in-checkpoint", "2")
        self.assertEqual(result.returncode, 9, result)
        self.assertEqual(result.lines, ["checkpoints"] + acks(2) + ["checkpoint 1"]
                         + acks(2), result)
        self.assertEqual(self.read("ckpt-0-2.json")["batches"], 4)
        result = self.run_trainer(id_stream(8, start=10), "--every", "2",
                                  "--die-in-checkpoint", "2", resume="1")
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.lines[:5], ["checkpoints"] + acks(2) + ["checkpoint 2"]
                         + ["ack"], result)
        self.assertEqual(self.read("ckpt-0-2.json")["model"], self.model(0, 20))

    def test_no_stream_still_writes_the_final_model(self):
        result = self.run_trainer(b"")
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.lines, ["checkpoints", "checkpoint 1"], result)
        [final] = self.files("final-")
        self.assertEqual(self.read(final)["model"], {})


def ctr_stream(batches, rows=64, seed=0):
    """Criteo-like batches: label, a numeric column with nulls, two string columns."""
    import random

    rng = random.Random(seed)
    schema = pa.schema([("label", pa.int32()), ("I1", pa.float64()),
                        ("C1", pa.string()), ("C2", pa.string())])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for _ in range(batches):
            c1 = [f"c{rng.randrange(20)}" for _ in range(rows)]
            writer.write_batch(pa.record_batch([
                pa.array([int(c in ("c1", "c2", "c3")) for c in c1], pa.int32()),
                pa.array([None if rng.random() < 0.1 else rng.random() * 100
                          for _ in range(rows)], pa.float64()),
                pa.array(c1, pa.string()),
                pa.array([None if rng.random() < 0.1 else f"d{rng.randrange(5)}"
                          for _ in range(rows)], pa.string()),
            ], schema=schema))
    return sink.getvalue().to_pybytes()


class TorchExample(unittest.TestCase):
    """examples/torch/train_ctr.py --checkpoint-dir."""

    script = os.path.join(REPO, "examples/torch/train_ctr.py")

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="train_ctr-")
        self.checkpoints = os.path.join(self.work, "ckpt")
        self.summaries = os.path.join(self.work, "summaries")

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.work], check=False)

    def run_example(self, stream, *options, resume=None):
        env = {} if resume is None else {"SLUICE_RESUME_CHECKPOINT": resume}
        return drive([sys.executable, self.script, "--buckets", "50", "--log-every", "1000",
                      "--summary-dir", self.summaries, *options], stream, device=1,
                     devices=2, env=env)

    def kept(self):
        return sorted(os.listdir(os.path.join(self.checkpoints, "device-1")))

    def summary(self, resumed_from):
        found = []
        for name in os.listdir(self.summaries):
            with open(os.path.join(self.summaries, name)) as f:
                summary = json.load(f)
            if summary["resumed_from"] == resumed_from:
                found.append(summary)
        self.assertEqual(len(found), 1, found)
        return found[0]

    def state(self, step):
        import torch

        return torch.load(os.path.join(self.checkpoints, "device-1", str(step), "state.pt"),
                          weights_only=True)

    def test_checkpoints_are_kept_reported_and_resumed(self):
        import torch

        options = ["--checkpoint-dir", self.checkpoints, "--checkpoint-every", "2",
                   "--keep-checkpoints", "3"]
        result = self.run_example(ctr_stream(7), *options)
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.lines, ["checkpoints"] + acks(2) + ["checkpoint 2"]
                         + acks(2) + ["checkpoint 4"] + acks(2) + ["checkpoint 6"]
                         + acks(1) + ["checkpoint 7"], result)
        self.assertEqual(self.kept(), ["4", "6", "7"], "the last three are kept")
        self.assertEqual(self.summary(None)["step"], 7)
        saved = self.state(6)
        self.assertEqual(saved["step"], 6)
        self.assertIn("state", saved["optimizer"])

        # Resumed from step 4 (older than the latest, as after a job resume): it loads
        # it, drops 6 and 7 (a rolled-back future) and goes on with steps 5, 6, 7.
        result = self.run_example(ctr_stream(3, seed=1), *options, resume="4")
        self.assertEqual(result.returncode, 0, result)
        self.assertIn("train_ctr device 1/2: resumed from checkpoint 4 (step 4)",
                      result.stderr)
        self.assertEqual(result.lines, ["checkpoints"] + acks(2) + ["checkpoint 6"]
                         + acks(1) + ["checkpoint 7"], result)
        self.assertEqual(self.kept(), ["4", "6", "7"])
        resumed = self.summary("4")
        self.assertEqual((resumed["steps"], resumed["step"]), (3, 7))
        # The optimizer went on from the loaded state: Adam counted 7 steps in all.
        steps = {float(s["step"]) for s in self.state(7)["optimizer"]["state"].values()}
        self.assertEqual(steps, {7.0})
        self.assertIsInstance(self.state(7)["model"]["embedding.weight"], torch.Tensor)

    def test_a_missing_checkpoint_fails_in_one_line(self):
        result = self.run_example(ctr_stream(2), "--checkpoint-dir", self.checkpoints,
                                  resume="40")
        self.assertNotEqual(result.returncode, 0, result)
        lines = result.stderr.splitlines()
        self.assertTrue(lines[-1].startswith(
            "sluice_trainer: sluice resumes checkpoint 40, but there is no "), result)
        self.assertIn("(kept: none)", lines[-1])
        self.assertEqual(result.lines, ["checkpoints"], result)

    def test_without_a_checkpoint_dir_only_acks_are_written(self):
        result = self.run_example(ctr_stream(3), resume="2")
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.lines, acks(3), result)


if __name__ == "__main__":
    unittest.main(verbosity=2)
