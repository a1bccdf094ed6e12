#!/usr/bin/env bash
# The follow benchmark: latency from a Spark Structured Streaming commit to the first
# row of that micro-batch inside a Python trainer under `sluice train --follow`, over
# at least 100 micro-batches (one a second), into a local Parquet file sink and into
# a Delta table; each with the default --poll (1s, inotify off: what HDFS and object
# stores get) and with inotify (a local directory's default).
#
#   bench/follow.sh [--batches N]       default 110 (about 2 minutes per run, 4 runs)
#
# Writes bench/results/follow-*.json and prints p50/p90/p99 per run. Needs the venvs
# that .ci/run installs (pyspark; pyspark 4.0 with delta-spark for the Delta runs).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CACHE="${SLUICE_CACHE:-$HOME/.cache/sluice}"
VENV="${SLUICE_VENV:-$CACHE/venv}"
TABLES_VENV="${SLUICE_TABLES_VENV:-$CACHE/venv-tables}"
BATCHES=110
while [[ $# -gt 0 ]]; do
  case "$1" in
    --batches) BATCHES="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "bench/follow.sh: unknown option $1" >&2; exit 64 ;;
  esac
done
(cd "$ROOT" && cargo build --release --quiet --bin sluice)
SLUICE="${CARGO_TARGET_DIR:-$ROOT/target}/release/sluice"
mkdir -p "$HERE/results"
for format in parquet delta; do
  writer="$VENV/bin/python"
  [[ $format == delta ]] && writer="$TABLES_VENV/bin/python"
  for inotify in off on; do
    "$VENV/bin/python" "$HERE/follow_latency.py" --sluice "$SLUICE" --format "$format" \
      --writer-python "$writer" \
      --batches "$BATCHES" --inotify "$inotify" \
      --out "$HERE/results/follow-$format-inotify-$inotify.json"
  done
done
