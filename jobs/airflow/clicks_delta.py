"""A Delta table trained incrementally: each run trains what was appended since
the last one, with `sluice run` and a job file.

    wait_for_new_data  ->  train
    (reschedule mode:      (sluice run JOB.toml: the versions since the last
     `sluice run --dry-run`  successful run, recorded in the job's state with
     lists something new)    the model checkpoint)

The job file (`clicks_delta.toml` beside this file) names the table, the
state and the model; `sluice run` keeps which table version was trained in its
state, so a run that fails or is killed records nothing and the next one trains
the same versions again from the last model. A rewrite of trained rows
(overwrite, DELETE, MERGE) fails the run with exit 2 unless the job file says
`on-rewrite = "retrain"` or `"skip"`.

With the OpenLineage provider installed, `train` reports the table as its input
(with the version trained), the model file as its output, and the rows trained
and failed tasks as the run facet `sluice`.

Params: `job_file` (default: clicks_delta.toml beside this file).
`SLUICE_SENSOR_POKE_S` sets how often the sensor looks (seconds, default 300).
"""

import os
from datetime import timedelta

import pendulum

try:  # Airflow 3
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.10
    from airflow import DAG

from sluice_trainer.airflow import SluiceOutputSensor, SluiceTrainOperator

HERE = os.path.dirname(os.path.realpath(__file__))
POKE_S = float(os.environ.get("SLUICE_SENSOR_POKE_S", "300"))

with DAG(
    dag_id="sluice_clicks_delta",
    schedule="@hourly",
    # `airflow dags test DAG DATE` runs the DAG for logical date DATE; a date
    # before `start_date` runs nothing (no task is scheduled before its start
    # date). Try it with a date on or after this one:
    # `airflow dags test sluice_clicks_delta 2026-11-02`.
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={"job_file": os.path.join(HERE, "clicks_delta.toml")},
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    tags=["sluice"],
) as dag:
    # Frees its worker slot between looks; the run's own lock keeps two runs
    # from overlapping anyway.
    wait_for_new_data = SluiceOutputSensor(
        task_id="wait_for_new_data",
        job_file="{{ params.job_file }}",
        mode="reschedule",
        poke_interval=POKE_S,
        timeout=timedelta(hours=1).total_seconds(),
        soft_fail=True,
    )

    train = SluiceTrainOperator(
        task_id="train",
        job_file="{{ params.job_file }}",
    )

    wait_for_new_data >> train
