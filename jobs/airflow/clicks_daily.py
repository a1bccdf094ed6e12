"""Daily clicks: a Spark ETL writes one day, sluice trains on it.

    spark_etl  ->  wait_for_output  ->  train  ->  report
    (spark-submit  (deferred: the      (sluice     (reads the
     etl.py)        triggerer polls     train)      summary
                    for _SUCCESS)                   from XCom)

Each run writes `ROOT/dt={{ ds }}` with `jobs/spark/etl.py` (SparkSubmitOperator,
the `spark_default` connection), waits in the triggerer, not in a worker slot,
until that partition holds `_SUCCESS`, trains on it with sluice, and hands the
summary on through XCom. The state is per day (`STATE_ROOT/{{ ds }}`): a retry
of `train` (a killed worker, a pre-empted node, sluice stopped by a signal)
resumes the same job, and every row is trained once across tries.

Params (defaults below; a run's conf overrides them, e.g.
`airflow dags trigger sluice_clicks_daily -c '{"root": "/data/clicks"}'`):
    root        where the ETL writes the days (`ROOT/dt=DAY`)
    rows        rows the ETL writes per day
    etl         the PySpark application
    exec        the trainer each device thread starts (sluice's exec protocol)
    devices     device threads
    state_root  sluice's state, one directory per day under it

Install: `pip install 'sluice[airflow]' apache-airflow-providers-apache-spark`
on the scheduler, triggerer and workers, and copy this file into the DAG folder.
`SLUICE_SENSOR_POKE_S` sets how often the sensor looks (seconds, default 60).
"""

import os
from datetime import timedelta

import pendulum

try:  # Airflow 3
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.10
    from airflow import DAG
    from airflow.decorators import task

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from sluice_trainer.airflow import SluiceOutputSensor, SluiceTrainOperator

HERE = os.path.dirname(os.path.realpath(__file__))
POKE_S = float(os.environ.get("SLUICE_SENSOR_POKE_S", "60"))
DAY = "{{ params.root }}/dt={{ ds }}"

with DAG(
    dag_id="sluice_clicks_daily",
    schedule="@daily",
    # `airflow dags test DAG DATE` runs the DAG for logical date DATE; a date
    # before `start_date` runs nothing (no task is scheduled before its start
    # date). Try it with a date on or after this one:
    # `airflow dags test sluice_clicks_daily 2026-11-02`.
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={
        "root": "/data/clicks",
        "rows": 100000,
        "etl": os.path.join(HERE, "..", "spark", "etl.py"),
        "exec": "python train.py",
        "devices": 2,
        "state_root": "/var/lib/sluice/clicks",
    },
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    tags=["sluice"],
) as dag:
    spark_etl = SparkSubmitOperator(
        task_id="spark_etl",
        conn_id="spark_default",
        application="{{ params.etl }}",
        name="clicks-etl-{{ ds }}",
        application_args=["--out", "{{ params.root }}", "--day", "{{ ds }}",
                          "--rows", "{{ params.rows }}"],
    )

    wait_for_output = SluiceOutputSensor(
        task_id="wait_for_output",
        source=DAY,
        poke_interval=POKE_S,
        timeout=6 * 3600,
    )

    train = SluiceTrainOperator(
        task_id="train",
        source=DAY,
        exec="{{ params.exec }}",
        devices="{{ params.devices }}",
        state="{{ params.state_root }}/{{ ds }}",
        extra_args=["--epochs", "1", "--batch-size", "1024"],
    )

    @task
    def report(summary, ds=None):
        """The next task: reads what `train` returned (its XCom)."""
        failed = summary.get("tasks_failed") or []
        print(f"report: {ds}: trained {summary['rows']} rows, "
              f"{summary.get('tasks_done')} tasks done, {len(failed)} failed")
        return summary["rows"]

    spark_etl >> wait_for_output >> train
    report(train.output)
