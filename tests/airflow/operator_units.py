#!/usr/bin/env python3
"""SluiceTrainOperator, SluiceOutputSensor and SluiceOutputTrigger called
directly (no DAG run), with the real sluice binary on real fixtures: the cases
the DAGs of tests/it/airflow.rs do not reach.

Environment: SLUICE_BINARY (the binary), SLUICE_FIXTURES, SLUICE_PYTHON (a
Python with pyarrow, for the test trainers); PYTHONPATH naming the
sluice_trainer package. Run with the Airflow venv's Python; tests/it/airflow.rs
runs it under cargo.
"""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from airflow.sdk.exceptions import AirflowException

from sluice_trainer.airflow import (
    SluiceExitError, SluiceOutputSensor, SluiceOutputTrigger, SluiceTrainOperator,
    SluiceUsageError, _seconds)

FIXTURES = os.environ["SLUICE_FIXTURES"]
PYTHON = os.environ["SLUICE_PYTHON"]
HERE = os.path.dirname(os.path.abspath(__file__))
ACK_LOG = os.path.join(HERE, "..", "trainers", "ack_log.py")
TABLES = json.load(open(os.path.join(FIXTURES, "tables", "expected.json")))["tables"]


def fixture(*parts):
    return os.path.join(FIXTURES, *parts)


def poke(sensor):
    """True (with the xcom value) or False, as the sensor's poke says."""
    result = sensor.poke({})
    if result is False:
        return False, None
    return bool(result.is_done), result.xcom_value


class Sensor(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sluice-af-units-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_a_directory_waits_for_success(self):
        missing = os.path.join(self.tmp, "dt=1")
        sensor = SluiceOutputSensor(task_id="s", source=missing, mode="reschedule")
        self.assertFalse(sensor.deferrable, "reschedule mode pokes")
        self.assertEqual(poke(sensor), (False, None), "a path not there yet is waited for")
        os.makedirs(missing)
        self.assertEqual(poke(sensor), (False, None), "an empty directory is waited for")
        shutil.rmtree(missing)
        shutil.copytree(fixture("parquet_small_files"), missing)
        os.remove(os.path.join(missing, "_SUCCESS"))
        self.assertEqual(poke(sensor), (False, None), "no _SUCCESS: waiting")
        open(os.path.join(missing, "_SUCCESS"), "w").close()
        done, info = poke(sensor)
        self.assertTrue(done)
        self.assertEqual(info["rows"], 2000)
        self.assertTrue(info["complete"])

    def test_a_delta_table_waits_for_a_newer_version(self):
        table = TABLES["delta/appends"]
        path = fixture("tables", table["path"])
        last = table["versions"][-1]["version"]
        done, info = poke(SluiceOutputSensor(task_id="s", source=path, after_version=last - 1))
        self.assertTrue(done)
        self.assertEqual(info["table"]["kind"], "delta")
        self.assertEqual(info["table"]["version"], last)
        self.assertEqual(poke(SluiceOutputSensor(task_id="s", source=path, after_version=last)),
                         (False, None))

    def test_an_iceberg_table_waits_for_another_snapshot(self):
        table = TABLES["iceberg/appends"]
        path = fixture("tables", table["path"])
        current = table["versions"][-1]["snapshot_id"]
        self.assertEqual(poke(SluiceOutputSensor(task_id="s", source=path,
                                                 after_version=current)), (False, None))
        older = table["versions"][0]["snapshot_id"]
        done, info = poke(SluiceOutputSensor(task_id="s", source=path, after_version=older))
        self.assertTrue(done)
        self.assertEqual(str(info["table"]["version"]), str(current))

    def test_after_version_on_a_directory_fails(self):
        sensor = SluiceOutputSensor(task_id="s", source=fixture("parquet_small_files"),
                                    after_version=3)
        with self.assertRaisesRegex(AirflowException, "not a Delta or Iceberg table"):
            sensor.poke({})

    def test_a_job_file_waits_for_new_partitions(self):
        data = os.path.join(self.tmp, "data")
        os.makedirs(data)
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write('source = "data/dt=*"\nstate = "state"\nmodel = "none"\n')
        sensor = SluiceOutputSensor(task_id="s", job_file=job)
        self.assertEqual(poke(sensor), (False, None), "nothing matches yet: waiting")
        day = os.path.join(data, "dt=2026-11-29")
        shutil.copytree(fixture("parquet_small_files"), day)
        done, info = poke(sensor)
        self.assertTrue(done)
        self.assertEqual([p["path"] for p in info["new"]], ["dt=2026-11-29"])
        summary = SluiceTrainOperator(task_id="t", job_file=job).execute({})
        self.assertEqual(summary["rows"], 2000)
        self.assertEqual([p["path"] for p in summary["run"]["new"]], ["dt=2026-11-29"])
        self.assertEqual(poke(sensor), (False, None), "trained: nothing new")

    def test_the_trigger_fires_once_ready(self):
        path = os.path.join(self.tmp, "out")
        trigger = SluiceOutputTrigger(source=path, poll_interval=0.1)
        classpath, kwargs = trigger.serialize()
        self.assertEqual(classpath, "sluice_trainer.airflow.SluiceOutputTrigger")
        trigger = SluiceOutputTrigger(**kwargs)

        async def first_event():
            async def write_later():
                await asyncio.sleep(0.5)
                # As Spark commits: every part file first, `_SUCCESS` last.
                shutil.copytree(fixture("parquet_small_files"), path,
                                ignore=shutil.ignore_patterns("_SUCCESS"))
                shutil.copy(os.path.join(fixture("parquet_small_files"), "_SUCCESS"), path)
            writer = asyncio.ensure_future(write_later())
            async for event in trigger.run():
                await writer
                return event.payload

        started = time.monotonic()
        payload = asyncio.run(asyncio.wait_for(first_event(), 30))
        self.assertEqual(payload["status"], "ready", payload)
        self.assertEqual(payload["info"]["rows"], 2000)
        self.assertLess(time.monotonic() - started, 20)

    def test_the_trigger_reports_a_usage_error(self):
        trigger = SluiceOutputTrigger(source=fixture("parquet_small_files"),
                                      extra_args=["--no-such-flag"])

        async def first_event():
            async for event in trigger.run():
                return event.payload

        payload = asyncio.run(asyncio.wait_for(first_event(), 30))
        self.assertEqual(payload["status"], "usage", payload)
        self.assertIn("--no-such-flag", payload["message"])


class Operator(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sluice-af-units-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_a_retry_after_the_job_finished_returns_its_summary(self):
        state = os.path.join(self.tmp, "state")
        args = dict(task_id="t", source=fixture("parquet_small_files"), state=state,
                    extra_args=["--model", "none"])
        first = SluiceTrainOperator(**args).execute({})
        self.assertEqual(first["rows"], 2000)
        self.assertNotIn("already_finished", first)
        again = SluiceTrainOperator(**args).execute({})
        self.assertTrue(again["already_finished"], again)
        self.assertEqual(again["rows"], 2000)
        self.assertEqual(again["tasks_done"], first["tasks_done"])

    def test_a_usage_error_is_not_retried(self):
        op = SluiceTrainOperator(task_id="t", source=fixture("parquet_small_files"),
                                 extra_args=["--no-such-flag"])
        with self.assertRaises(SluiceUsageError) as caught:
            op.execute({})
        self.assertIn("--no-such-flag", str(caught.exception))

    def test_a_held_state_is_a_retryable_error(self):
        state = os.path.join(self.tmp, "state")
        out = os.path.join(self.tmp, "acks")
        os.makedirs(out)
        trainer = f"{PYTHON} {ACK_LOG} --sleep 0.5 --out {out}"
        binary = os.environ["SLUICE_BINARY"]
        holder = subprocess.Popen(
            [binary, "train", fixture("parquet_small_files"), "--exec", trainer,
             "--batch-size", "50", "--state", state],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not any(n.startswith("acked-") for n in os.listdir(out)):
                self.assertIsNone(holder.poll(), "the first run ended early")
                self.assertLess(time.monotonic(), deadline, "the first run never trained")
                time.sleep(0.05)
            op = SluiceTrainOperator(task_id="t", source=fixture("parquet_small_files"),
                                     exec=trainer, state=state, extra_args=["--batch-size", "50"])
            with self.assertRaises(SluiceExitError) as caught:
                op.execute({})
            self.assertEqual(caught.exception.exit_code, 3)
            self.assertIn("exit", str(caught.exception))
        finally:
            holder.kill()
            holder.wait()

    def test_lineage_of_a_table_with_a_model(self):
        table = TABLES["delta/appends"]
        path = fixture("tables", table["path"])
        last = table["versions"][-1]
        model = os.path.join(self.tmp, "model.json")
        op = SluiceTrainOperator(task_id="t", source=path, extra_args=[
            "--model", "linear", "--label", "v", "--features", "n", "--output", model])
        op.execute({})
        lineage = op.get_openlineage_facets_on_complete(None)
        (source,) = lineage.inputs
        self.assertEqual((source.namespace, source.name), ("file", path))
        self.assertEqual(source.facets["version"].datasetVersion, str(last["version"]))
        self.assertEqual(source.inputFacets["inputStatistics"].rowCount, last["count"])
        (output,) = lineage.outputs
        self.assertEqual((output.namespace, output.name), ("file", model))
        self.assertEqual(lineage.run_facets["sluice"].rows, last["count"])

    def test_durations(self):
        for text, seconds in (("20s", 20), ("500ms", 0.5), ("1h 30m", 5400), ("1.5h", 5400),
                              ("90", 90), (None, 20), ("soon", 20)):
            self.assertAlmostEqual(_seconds(text, 20), seconds, msg=text)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[1:], verbosity=2)
