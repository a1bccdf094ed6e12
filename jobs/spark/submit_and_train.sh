#!/usr/bin/env bash
# spark-submit handoff: submits the ETL job (etl.py) and starts `sluice train
# --wait-success` on its output at the same moment, so training begins as soon as
# Spark commits (writes _SUCCESS). If the Spark job fails, sluice stops waiting at
# once (--writer-pid) and exits non-zero naming the output and what is left of it.
#
# usage: jobs/spark/submit_and_train.sh ROOT DAY [etl.py options] [-- sluice train options]
#   e.g. jobs/spark/submit_and_train.sh /data/clicks 2026-11-29 --rows 5000 \
#            -- --model logistic --label label --features f1,f2,f3,f4 --output model.json
#
# Environment:
#   SLUICE_PYTHON   Python with pyspark (default ~/.cache/sluice/venv/bin/python);
#                   its spark-submit is used unless SPARK_SUBMIT is set
#   SPARK_SUBMIT    spark-submit to use
#   SPARK_MASTER    Spark master (default local[2])
#   SLUICE          the sluice binary (default: sluice on PATH)
#   SLUICE_WAIT     longest wait for _SUCCESS (default 2h)
# Exit: sluice's exit code when it failed, else spark-submit's.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
if [[ $# -lt 2 ]]; then
  sed -n '2,20p' "$0" >&2
  exit 64
fi
root=$1 day=$2
shift 2
etl_args=()
while [[ $# -gt 0 && $1 != -- ]]; do
  etl_args+=("$1")
  shift
done
[[ $# -gt 0 ]] && shift
train_args=("$@")

python=${SLUICE_PYTHON:-$HOME/.cache/sluice/venv/bin/python}
spark_submit=${SPARK_SUBMIT:-$(dirname "$python")/spark-submit}
sluice=${SLUICE:-sluice}
target="$root/dt=$day"

PYSPARK_PYTHON="$python" PYSPARK_DRIVER_PYTHON="$python" \
  "$spark_submit" --master "${SPARK_MASTER:-local[2]}" \
  "$here/etl.py" --out "$root" --day "$day" "${etl_args[@]}" &
spark=$!

"$sluice" train "$target" --wait-success="${SLUICE_WAIT:-2h}" --writer-pid "$spark" \
  "${train_args[@]}" &
train=$!

spark_rc=0
wait "$spark" || spark_rc=$?
train_rc=0
wait "$train" || train_rc=$?
if [[ $spark_rc -ne 0 ]]; then
  echo "submit_and_train: spark-submit failed (exit $spark_rc); $target has no _SUCCESS" >&2
fi
if [[ $train_rc -ne 0 ]]; then
  exit "$train_rc"
fi
exit "$spark_rc"
