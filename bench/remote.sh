#!/usr/bin/env bash
# Latency hidden: sluice reading Spark's Parquet from an S3 API whose every request
# is delayed, against itself without the delay and against pyarrow.dataset through
# the same delay. The S3 API is moto (a bench instance of its own) behind
# bench/count_proxy.py, one proxy per delay (0 ms included, so every line pays the
# same proxy), which also counts the requests and bytes each reader fetched.
#
#   bench/remote.sh [--store s3|hdfs] [--rows 4000000] [--files 16] [--delays 20,50]
#                   [--reps 2] [--read-ahead SIZE] [--out FILE.md] [--logs DIR]
#                   [--sluice BINARY]
#
# Each configuration runs --reps times, alternated, and its best wall time (process
# start to exit, the listing included) counts. Prints one table: seconds, rows/s,
# GET requests and bytes of each line, then sluice's speed at each delay as a ratio
# of its speed without the delay and of pyarrow's at the same delay. Builds sluice in
# release (CARGO_TARGET_DIR is honoured); the dataset is written by Spark once per
# size under ~/.cache/sluice/bench/data, as bench/run.sh does. Run it on an idle
# machine: the readers run one at a time with 2 devices / 2 threads. --logs DIR keeps
# each proxy's request log (arrival, answer, method, path, range, bytes per request).
# --sluice BINARY reads with that release build instead of building one.
#
# --store hdfs reads the same files from a MiniDFSCluster of its own (one datanode,
# 128 MiB blocks, tests/services/hdfs.sh) through bench/delay_proxy.py, a TCP proxy
# in front of both the namenode and the datanode (the datanode listens on
# 127.0.0.3 and the namenode hands out 127.0.0.1 and its port, where the proxy
# is), restarted with each delay. pyarrow has no HDFS client here (it needs
# Hadoop's native libhdfs), so that table has sluice's lines alone.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CACHE="${SLUICE_CACHE:-$HOME/.cache/sluice}"
BENCH="${SLUICE_BENCH_CACHE:-$CACHE/bench}"
VENV="${SLUICE_VENV:-$CACHE/venv}"
ROWS=4000000 FILES=16 DELAYS=20,50 REPS=2 BATCH=8192 THREADS=2 OUT="" READ_AHEAD="" LOGS=""
STORE=s3
SLUICE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --store) STORE="$2"; shift 2 ;;
    --rows) ROWS="$2"; shift 2 ;;
    --files) FILES="$2"; shift 2 ;;
    --delays) DELAYS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --read-ahead) READ_AHEAD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --logs) LOGS="$2"; shift 2 ;;
    --sluice) SLUICE="$2"; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "bench/remote.sh: unknown option $1" >&2; exit 1 ;;
  esac
done
log() { echo "remote: $*" >&2; }
[[ "$STORE" == s3 || "$STORE" == hdfs ]] || { log "--store is s3 or hdfs, not $STORE"; exit 1; }

if [[ -z "$SLUICE" ]]; then
  log "building sluice (release)"
  (cd "$ROOT" && cargo build --release --quiet --bin sluice)
  SLUICE="${CARGO_TARGET_DIR:-$ROOT/target}/release/sluice"
fi

DATA="$BENCH/data/criteo-$ROWS-$FILES"
if [[ ! -f "$DATA/_SUCCESS" ]]; then
  log "writing $ROWS rows in $FILES files with Spark into $DATA"
  mkdir -p "$BENCH/data"
  "$VENV/bin/python" "$HERE/make_dataset.py" "$DATA" --rows "$ROWS" --files "$FILES" \
    2> >(grep -v -e WARN -e 'Stage ' -e 'setLogLevel' -e FutureWarning -e require_minimum >&2)
fi

# summarize STORE: the best run of each reader and delay in $WORK/runs.jsonl, and
# sluice's ratios to itself without the delay and to pyarrow (where it ran).
summarize() {
  python3 - "$WORK/runs.jsonl" "$ROWS" "$FILES" "${OUT:-}" "$1" <<'PY'
import json, sys
runs_file, rows, files, out, store = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
best = {}
for line in open(runs_file):
    r = json.loads(line)
    key = (r["name"], r["delay_ms"])
    if key not in best or r["seconds"] < best[key]["seconds"]:
        best[key] = r
lines = [f"{rows:,} rows in {files} Parquet files (Spark), {store}; best of the runs, "
         "wall time.", "",
         "| reader | delay | seconds | rows/s | GETs | MB fetched |",
         "|---|---:|---:|---:|---:|---:|"]
for (name, delay), r in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    lines.append(f"| {name} | {delay} ms | {r['seconds']:.2f} | {rows / r['seconds']:,.0f} "
                 f"| {r.get('gets', '-')} | {r['bytes'] / 1e6:.0f} |")
lines += ["", "| delay | sluice / sluice at 0 ms (goal ≥ 0.8) | sluice / pyarrow (goal ≥ 2) |",
          "|---:|---:|---:|"]
base = best[("sluice", 0)]["seconds"]
for (name, delay), r in sorted(best.items()):
    if name != "sluice":
        continue
    peer = best.get(("pyarrow", delay))
    vs_peer = f"{peer['seconds'] / r['seconds']:.2f}×" if peer else "-"
    lines.append(f"| {delay} ms | {base / r['seconds']:.2f}× | {vs_peer} |")
text = "\n".join(lines)
print(text)
if out:
    open(out, "w").write(text + "\n")
PY
}

if [[ "$STORE" == hdfs ]]; then
  WORK="$(mktemp -d)"
  export SLUICE_SERVICES="$WORK/services" SLUICE_HDFS_PORT=9330
  export SLUICE_HDFS_BLOCK_SIZE=134217728 SLUICE_HDFS_DATANODE_ADDRESS=127.0.0.3:9331
  export HADOOP_CONF_DIR="$SLUICE_SERVICES/hdfs/conf"
  PROXY=""
  # proxy DELAY: (re)starts the proxy in front of the namenode (9332) and the
  # datanode (127.0.0.1:9331), counting into $WORK/count.
  proxy() {
    [[ -z "$PROXY" ]] || { kill "$PROXY" 2>/dev/null; wait "$PROXY" 2>/dev/null || true; }
    rm -f "$WORK/count"
    "$VENV/bin/python" "$HERE/delay_proxy.py" 127.0.0.1:9331=127.0.0.3:9331 \
      127.0.0.1:9332=127.0.0.1:9330 --count "$WORK/count" --delay-ms "$1" &
    PROXY=$!
    for _ in $(seq 1 50); do [[ -s "$WORK/count" ]] && break; sleep 0.1; done
  }
  cleanup() {
    [[ -z "$PROXY" ]] || kill "$PROXY" 2>/dev/null || true
    "$ROOT/tests/services/hdfs.sh" stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
  }
  trap cleanup EXIT
  # The cluster writes through the datanode's proxy as it starts.
  proxy 0
  log "starting a MiniDFSCluster (namenode 9330, datanode 127.0.0.3:9331)"
  "$ROOT/tests/services/hdfs.sh" start >/dev/null
  log "copying $DATA into it"
  "$ROOT/tests/services/hdfs.sh" put "$DATA" "hdfs://127.0.0.1:9330/criteo-$ROWS-$FILES" \
    2> >(grep -v -e WARN >&2)
  URL="hdfs://127.0.0.1:9332/criteo-$ROWS-$FILES"
  hdfs_run() {
    local delay="$1" before start end extra=()
    [[ -z "$READ_AHEAD" ]] || extra=(--read-ahead "$READ_AHEAD")
    proxy "$delay"
    before="$(cat "$WORK/count")"
    start="$(date +%s.%N)"
    "$SLUICE" train "$URL" --model none --devices "$THREADS" --batch-size "$BATCH" --quiet \
      "${extra[@]}" >"$WORK/out" 2>"$WORK/err" \
      || { log "sluice at $delay ms failed:"; cat "$WORK/err" >&2; exit 1; }
    end="$(date +%s.%N)"
    python3 - "$WORK/runs.jsonl" "$delay" "$start" "$end" "$(( $(cat "$WORK/count") - before ))" <<'PY'
import json, sys
out, delay, start, end, nbytes = sys.argv[1:]
line = {"name": "sluice", "delay_ms": int(delay), "seconds": float(end) - float(start),
        "bytes": int(nbytes)}
open(out, "a").write(json.dumps(line) + "\n")
PY
    log "sluice at $delay ms: $(tail -1 "$WORK/runs.jsonl")"
  }
  # A first pass warms the datanode and the page cache; not counted.
  hdfs_run 0 && : >"$WORK/runs.jsonl"
  for ((rep = 0; rep < REPS; rep++)); do
    for delay in 0 ${DELAYS//,/ }; do hdfs_run "$delay"; done
  done
  summarize "HDFS (a MiniDFSCluster, 128 MiB blocks) behind a TCP proxy that delays every request to the namenode and the datanode"
  exit 0
fi

export SLUICE_S3_NAME=bench-s3 SLUICE_S3_PORT="${SLUICE_BENCH_S3_PORT:-9310}"
ENDPOINT="$("$ROOT/tests/services/s3.sh" start)"
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
URL="s3://bench/criteo-$ROWS-$FILES"
log "uploading to $URL at $ENDPOINT"
AWS_ENDPOINT_URL="$ENDPOINT" "$VENV/bin/python" "$HERE/upload_s3.py" "$DATA" "$URL"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  "$ROOT/tests/services/s3.sh" stop >/dev/null 2>&1 || true
  [[ -z "$LOGS" ]] || { mkdir -p "$LOGS" && cp "$WORK"/requests-*.log "$LOGS"/; }
  rm -rf "$WORK"
}
trap cleanup EXIT
# One proxy per delay, 0 ms included, on ports from 9320 on.
declare -A PORT
port=9320
for delay in 0 ${DELAYS//,/ }; do
  PORT[$delay]=$port
  "$VENV/bin/python" "$HERE/count_proxy.py" "$port" "$ENDPOINT" "$WORK/count-$delay" \
    --delay-ms "$delay" --log "$WORK/requests-$delay.log" &
  PIDS+=($!)
  port=$((port + 1))
done
sleep 1

# run NAME DELAY CMD...: one timed run, appended to runs.jsonl with the requests
# and bytes the proxy counted for it.
run() {
  local name="$1" delay="$2"; shift 2
  local count="$WORK/count-$delay" before gets_before start end
  before="$(cat "$count" 2>/dev/null || echo 0)"
  gets_before="$(cat "$count.gets" 2>/dev/null || echo 0)"
  start="$(date +%s.%N)"
  AWS_ENDPOINT_URL="http://127.0.0.1:${PORT[$delay]}" AWS_ALLOW_HTTP=true "$@" >"$WORK/out" 2>"$WORK/err" \
    || { log "$name at $delay ms failed:"; cat "$WORK/err" >&2; exit 1; }
  end="$(date +%s.%N)"
  python3 - "$WORK/runs.jsonl" "$name" "$delay" "$start" "$end" \
    "$(( $(cat "$count") - before ))" "$(( $(cat "$count.gets") - gets_before ))" <<'PY'
import json, sys
out, name, delay, start, end, nbytes, gets = sys.argv[1:]
line = {"name": name, "delay_ms": int(delay), "seconds": float(end) - float(start),
        "bytes": int(nbytes), "gets": int(gets)}
open(out, "a").write(json.dumps(line) + "\n")
PY
  log "$name at $delay ms: $(tail -1 "$WORK/runs.jsonl")"
}
sluice() {
  local extra=()
  [[ -z "$READ_AHEAD" ]] || extra=(--read-ahead "$READ_AHEAD")
  run sluice "$1" "$SLUICE" train "$URL" --model none --devices "$THREADS" \
    --batch-size "$BATCH" --quiet "${extra[@]}"
}
pyarrow() {
  run pyarrow "$1" "$VENV/bin/python" "$HERE/peers/pyarrow_dataset.py" "$URL" \
    --batch-size "$BATCH" --threads "$THREADS"
}

# A first pass warms moto and the page cache; not counted.
sluice 0 && : >"$WORK/runs.jsonl"
for ((rep = 0; rep < REPS; rep++)); do
  sluice 0
  for delay in ${DELAYS//,/ }; do
    sluice "$delay"
    pyarrow "$delay"
  done
  pyarrow 0
done

summarize "S3 API (moto) behind a proxy that delays every request"
