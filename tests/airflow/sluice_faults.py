"""DAGs of tests/it/airflow.rs that make sluice fail under Airflow: corrupt input,
and a training task killed mid-run then retried.

Configured by the test through the environment:
    SLUICE_TEST_DATA     the dataset
    SLUICE_TEST_OUT      where the trainers and the callbacks write
    SLUICE_TEST_TRAINER  the exec trainer; `{out}` stands for a directory of its own
                         per task and try
    SLUICE_TEST_STATE    sluice's --state (the kill DAG)
"""

import json
import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from sluice_trainer.airflow import SluiceTrainOperator

DATA = os.environ.get("SLUICE_TEST_DATA", "/nonexistent")
OUT = os.environ.get("SLUICE_TEST_OUT", "/nonexistent")
TRAINER = os.environ.get("SLUICE_TEST_TRAINER", "false")
STATE = os.environ.get("SLUICE_TEST_STATE", "/nonexistent")
# The DAGs' start date: `airflow dags test` for a logical date before it runs
# nothing (no task is scheduled before its start date), so tests/airflow.rs
# runs them for a day after it.
START = pendulum.datetime(2026, 11, 1, tz="UTC")


def trainer(name):
    """The trainer writing into OUT/NAME-try<N> (made first: sluice runs `sh -c`)."""
    out = os.path.join(OUT, name + "-try{{ ti.try_number }}")
    return f"mkdir -p {out} && " + TRAINER.replace("{out}", out)


def record_failure(context):
    """on_failure_callback: what the task failed with, as the test reads it."""
    ti = context["ti"]
    error = context.get("exception")
    with open(os.path.join(OUT, f"failed-{ti.task_id}-try{ti.try_number}.json"), "w") as f:
        json.dump({"task_id": ti.task_id, "try_number": ti.try_number,
                   "exception": type(error).__name__, "message": str(error)}, f)


def write_summary(name, summary):
    with open(os.path.join(OUT, f"summary-{name}.json"), "w") as f:
        json.dump(summary, f)


with DAG(dag_id="sluice_test_corrupt", schedule=None, start_date=START, catchup=False):
    # A corrupt file stops planning (exit 1): a retryable error naming it.
    SluiceTrainOperator(
        task_id="plan_fails", source=DATA, exec=trainer("plan_fails"),
        retries=0, on_failure_callback=record_failure)
    # The corrupt file is a failed task (exit 2): the task fails naming it, and
    # is not retried although it could be.
    SluiceTrainOperator(
        task_id="tasks_fail", source=DATA, exec=trainer("tasks_fail"), devices=2,
        extra_args=["--ignore-corrupt-files"], retries=1, retry_delay=timedelta(0),
        on_failure_callback=record_failure)
    # The same, allowed: the task succeeds and hands on the summary.
    allowed = SluiceTrainOperator(
        task_id="tasks_fail_allowed", source=DATA, exec=trainer("allowed"),
        extra_args=["--ignore-corrupt-files"], allow_failed_tasks=True, retries=0,
        on_failure_callback=record_failure)

    @task
    def after_allowed(summary):
        write_summary("allowed", summary)

    after_allowed(allowed.output)


with DAG(dag_id="sluice_test_kill", schedule=None, start_date=START, catchup=False):
    # Killed mid-training (the test sends the task's process SIGTERM: on_kill),
    # then retried on the same state.
    train = SluiceTrainOperator(
        task_id="train", source=DATA, exec=trainer("train"), devices=2, state=STATE,
        grace="20s", extra_args=["--batch-size", "50"], retries=1,
        retry_delay=timedelta(0), on_retry_callback=record_failure,
        on_failure_callback=record_failure)

    @task
    def after_train(summary):
        write_summary("train", summary)

    after_train(train.output)
