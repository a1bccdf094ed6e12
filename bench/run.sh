#!/usr/bin/env bash
# The benchmark, one command: sluice against pyarrow.dataset, Petastorm, a PyTorch
# DataLoader and Ray Data, plus the parquet crate's bare decode, on a Criteo-like dataset
# written by real Spark; the same for the dataset in S3 (moto) for sluice and pyarrow.
#
#   bench/run.sh                     4,000,000 rows, 3 repetitions (~10 minutes once set up)
#   bench/run.sh --quick             200,000 rows, 1 repetition: a check that all runs
#                                    (into bench/results/quick, not committed)
#   bench/run.sh --rows N [--reps R] [--only sluice,decode,pyarrow,petastorm,torch,ray,numeric]
#                [--files F] [--row-group-bytes B] [--no-s3] [--no-profile] [--cpus 0,1]
#                [--results DIR]          --row-group-bytes: Parquet row groups of about
#                                    B bytes (many row groups per file; Spark's default
#                                    128 MiB gives one per file here)
#   bench/run.sh --compare REV [--pairs 7] [--rows N]
#                                    the reader benchmark (`train --model none`) of the
#                                    working tree and of REV (a commit, branch or tag,
#                                    built beside it), in alternated pairs: prints the
#                                    ratio of rows/s with its spread. Run it before
#                                    merging a change to the read path.
#
# Writes (unless --results DIR) bench/results/results.json (every run's raw numbers), report.md (the table,
# the targets, the profile's findings, master load figures when bench/results/load.json
# exists) and chart.png. Virtualenvs, the release builds and datasets (one per row count)
# are cached under ~/.cache/sluice/bench. Every reader runs alone, in turn, pinned to the
# same 2 cores (--cpus, default 0,1) with 2 workers/threads/devices; run it on an idle
# machine: the report records the CPU other processes took while each reader ran.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CACHE="${SLUICE_CACHE:-$HOME/.cache/sluice}"
BENCH="${SLUICE_BENCH_CACHE:-$CACHE/bench}"
MAIN_VENV="${SLUICE_VENV:-$CACHE/venv}"
RESULTS=""

ROWS=4000000 REPS=3 FILES=24 CPUS=0,1 BATCH=8192 BUDGET=150 RG_BYTES=""
ONLY="" S3=1 PROFILE=1 QUICK=0 COMPARE="" PAIRS=7
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --files) FILES="$2"; shift 2 ;;
    --row-group-bytes) RG_BYTES="$2"; shift 2 ;;
    --cpus) CPUS="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --no-s3) S3=0; shift ;;
    --no-profile) PROFILE=0; shift ;;
    --quick) QUICK=1; ROWS=200000; REPS=1; FILES=8; shift ;;
    --results) RESULTS="$2"; shift 2 ;;
    --compare) COMPARE="$2"; shift 2 ;;
    --pairs) PAIRS="$2"; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "bench/run.sh: unknown option $1" >&2; exit 1 ;;
  esac
done
# A quick check never overwrites the results of a full run.
[[ -n "$RESULTS" ]] || { [[ $QUICK == 1 ]] && RESULTS="$HERE/results/quick" || RESULTS="$HERE/results"; }
NCPU=$(awk -F, '{print NF}' <<<"$CPUS")
log() { echo "bench: $*" >&2; }
want() { [[ -z "$ONLY" || ",$ONLY," == *",$1,"* ]]; }

# 1. Virtualenvs (idempotent); a comparison needs none of the peers.
[[ -n "$COMPARE" ]] || "$HERE/setup.sh"
status() { cat "$BENCH/status/$1" 2>/dev/null || echo "not installable: setup did not run"; }

# 2. Release builds: sluice, and the bare decode (its own workspace and target dir).
log "building sluice (release)"
(cd "$ROOT" && cargo build --release --quiet --bin sluice)
# What was built: the commit, and whether the sources differed from it.
BUILT="$(git -C "$ROOT" rev-parse --short HEAD)"
[[ -z "$(git -C "$ROOT" status --porcelain -- src connectors Cargo.toml Cargo.lock)" ]] || BUILT="$BUILT+uncommitted changes"
SLUICE="${CARGO_TARGET_DIR:-$ROOT/target}/release/sluice"
if [[ -n "$COMPARE" ]]; then
  # REV, checked out beside the working tree and built with a target dir of its own
  # (kept between comparisons: a later one rebuilds only what changed).
  BASE_REV="$(git -C "$ROOT" rev-parse --verify --quiet "$COMPARE^{commit}")" ||
    { echo "bench/run.sh: --compare $COMPARE: no such commit, branch or tag" >&2; exit 1; }
  BASE_TREE="$BENCH/compare/tree"
  if [[ ! -e "$BASE_TREE/.git" ]]; then
    mkdir -p "$BENCH/compare"
    git -C "$ROOT" worktree add --quiet --detach "$BASE_TREE" "$BASE_REV"
  else
    git -C "$BASE_TREE" checkout --quiet --detach "$BASE_REV"
  fi
  log "building $COMPARE ($(git -C "$ROOT" rev-parse --short "$BASE_REV"), release)"
  (cd "$BASE_TREE" && CARGO_TARGET_DIR="$BENCH/compare/target" cargo build --release --quiet --bin sluice)
  BASE_BIN="$BENCH/compare/target/release/sluice"
else
  log "building bench/decode (release)"
  (cd "$HERE/decode" && CARGO_TARGET_DIR="$BENCH/target" cargo build --release --quiet)
  DECODE="$BENCH/target/release/sluice-bench-decode"
fi

# 3. The dataset, written by Spark once per size.
DATA="$BENCH/data/criteo-$ROWS-$FILES${RG_BYTES:+-rg$RG_BYTES}"
if [[ ! -f "$DATA/_SUCCESS" ]]; then
  log "writing $ROWS rows with Spark into $DATA"
  mkdir -p "$BENCH/data"
  "$MAIN_VENV/bin/python" "$HERE/make_dataset.py" "$DATA" --rows "$ROWS" --files "$FILES" \
    ${RG_BYTES:+--row-group-bytes "$RG_BYTES"} \
    2> >(grep -v -e WARN -e 'Stage ' -e 'setLogLevel' -e FutureWarning -e require_minimum >&2)
fi
META="$DATA.meta.json"
[[ -s "$META" ]] || "$MAIN_VENV/bin/python" "$HERE/dataset_meta.py" "$DATA" >"$META"
BYTES=$("$MAIN_VENV/bin/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["parquet_bytes"])' "$META")
log "dataset: $(cat "$META")"
# Every local reader reads from the page cache.
cat "$DATA"/*.parquet >/dev/null

if [[ -n "$COMPARE" ]]; then
  mkdir -p "$RESULTS"
  exec "$MAIN_VENV/bin/python" "$HERE/compare.py" --base "$BASE_BIN" --head "$SLUICE" \
    --base-label "$COMPARE" --head-label "$BUILT" --data "$DATA" --pairs "$PAIRS" \
    --cpus "$CPUS" --devices "$NCPU" --batch-size "$BATCH" --out "$RESULTS/compare.json"
fi

mkdir -p "$RESULTS"
RAW="$RESULTS/runs.jsonl"
: >"$RAW"
RUN_DIR="$(mktemp -d)"
trap 'rm -rf "$RUN_DIR"' EXIT

measure() { # NAME LABEL GROUP [measure.py options] -- CMD...
  local name="$1" label="$2" group="$3"; shift 3
  log "running $label"
  python3 "$HERE/measure.py" --name "$name" --label "$label" --group "$group" --out "$RAW" \
    --reps "$REPS" --budget "$BUDGET" --cpus "$CPUS" --bytes "$BYTES" \
    --expect-rows "$ROWS" "$@" || true
}
skip() { # NAME LABEL GROUP REASON
  python3 - "$RAW" "$@" <<'PY'
import json, sys
out, name, label, group, reason = sys.argv[1:]
open(out, "a").write(json.dumps({"name": name, "label": label, "group": group, "error": reason}) + "\n")
PY
  log "skipping $2: $4"
}
peer_python() { # PEER -> the venv's python for it
  local s; s="$(status "$1")"
  case "$1" in
    pyarrow) echo "$MAIN_VENV/bin/python" ;;
    torch) echo "${s#ok }/bin/python" ;;
    *) echo "$BENCH/venv-$1/bin/python" ;;
  esac
}
sluice_train() { # URL DEVICES SUMMARY
  echo "$SLUICE" train "$1" --model none --devices "$2" --batch-size "$BATCH" --quiet \
    --summary-json "$3"
}

# 4. Local runs.
S=$RUN_DIR/summary.json
want sluice && measure sluice "sluice train --devices $NCPU" local --summary-json "$S" -- \
  $(sluice_train "$DATA" "$NCPU" "$S")
want sluice && measure sluice_1 "sluice train --devices 1" local --summary-json "$S" -- \
  $(sluice_train "$DATA" 1 "$S")
want decode && measure decode "bare decode (parquet crate, $NCPU threads)" local -- \
  "$DECODE" "$DATA" --threads "$NCPU" --batch-size "$BATCH"
want decode && measure decode_view "bare decode, strings as Utf8View" local -- \
  "$DECODE" "$DATA" --threads "$NCPU" --batch-size "$BATCH" --string-view
want pyarrow && measure pyarrow "pyarrow.dataset to_batches" local -- \
  "$(peer_python pyarrow)" "$HERE/peers/pyarrow_dataset.py" "$DATA" --batch-size "$BATCH" --threads "$NCPU"
for peer in petastorm torch ray; do
  want "$peer" || continue
  case $peer in
    petastorm) label="Petastorm make_batch_reader" script=petastorm_reader.py flag=--workers ;;
    torch) label="PyTorch DataLoader ($NCPU workers)" script=torch_dataloader.py flag=--workers ;;
    ray) label="Ray Data iter_batches" script=ray_data.py flag=--cpus ;;
  esac
  st="$(status "$peer")"
  if [[ "$st" != ok* ]]; then skip "$peer" "$label" local "$st"; continue; fi
  measure "$peer" "$label" local -- "$(peer_python "$peer")" "$HERE/peers/$script" "$DATA" \
    --batch-size "$BATCH" "$flag" "$NCPU"
done

# 4b. Tensors into PyTorch (group "torch"): sluice handing each batch to $NCPU trainer
# processes as torch tensors through the sluice_trainer package, categoricals hashed and
# nulls filled in Rust (--hash-buckets, --fill-nulls), batches in shared memory; beside
# Ray Data's iter_torch_batches and Petastorm's PyTorch loader doing the same hashing
# (the DataLoader is the "torch" line above). Then the PyTorch example's CTR model
# (examples/torch/train_ctr.py) under --lockstep with DistributedDataParallel over the
# $NCPU processes, beside the same training fed by a DataLoader (group "ctr").
if want torch && [[ "$(status torch)" == ok* ]]; then
  TPY="$(peer_python torch)"
  measure torch_sluice "sluice → torch tensors (--hash-buckets, --fill-nulls, $NCPU processes)" torch \
    --summary-json "$S" --trainer-timing -- "$SLUICE" train "$DATA" --devices "$NCPU" --batch-size "$BATCH" \
    --quiet --summary-json "$S" --hash-buckets 1048576 --fill-nulls 0 \
    --exec "$TPY $HERE/peers/sluice_torch.py"
  # The same, one trainer each: an exec trainer, and a Dataset that owns its loop with
  # sluice as its child (--attach).
  measure torch_sluice_1 "sluice → torch tensors, exec trainer (1 process)" torch \
    --summary-json "$S" --trainer-timing -- "$SLUICE" train "$DATA" --devices 1 --batch-size "$BATCH" \
    --quiet --summary-json "$S" --hash-buckets 1048576 --fill-nulls 0 \
    --exec "$TPY $HERE/peers/sluice_torch.py"
  measure torch_dataset "sluice_trainer.Dataset → torch tensors (1 process, sluice its child)" torch \
    --summary-json "$S" --trainer-timing --env "SLUICE_BINARY=$SLUICE" -- \
    "$TPY" "$HERE/peers/sluice_dataset_torch.py" "$DATA" --batch-size "$BATCH" --summary-json "$S"
  for peer in ray petastorm; do
    case $peer in
      ray) label="Ray Data iter_torch_batches" flag=--cpus ;;
      petastorm) label="Petastorm PyTorch DataLoader" flag=--workers ;;
    esac
    st="$(status "${peer}_torch")"
    if [[ "$st" != ok* ]]; then skip "${peer}_torch" "$label" torch "$st"; continue; fi
    measure "${peer}_torch" "$label" torch -- "$(peer_python "$peer")" "$HERE/peers/${peer}_torch.py" \
      "$DATA" --batch-size "$BATCH" "$flag" "$NCPU"
  done
  # One repetition each: the model's steps make these the slowest lines by far.
  measure torch_example "CTR example under sluice train --lockstep (DDP, $NCPU processes)" ctr \
    --reps 1 --summary-json "$S" -- "$SLUICE" train "$DATA" --devices "$NCPU" --batch-size "$BATCH" \
    --quiet --summary-json "$S" --lockstep --hash-buckets 1000 --fill-nulls 0 \
    --exec "env PYTHONPATH=$ROOT/python/sluice_trainer $TPY $ROOT/examples/torch/train_ctr.py --log-every 1000000"
  measure torch_ctr_dataloader "CTR example's training fed by a DataLoader ($NCPU workers)" ctr \
    --reps 1 -- "$TPY" "$HERE/peers/torch_ctr_dataloader.py" "$DATA" --batch-size "$BATCH" \
    --workers "$NCPU" --buckets 1000
fi

# 4c. All-numeric data of the same width (group "numeric"): sluice --model none, and
# $NCPU Python processes wrapping every column as numpy and acknowledging, with the
# batches in shared memory and on the stdin pipe.
if want numeric; then
  DATA_NUM="$BENCH/data/numeric-$ROWS-$FILES"
  if [[ ! -f "$DATA_NUM/_SUCCESS" ]]; then
    log "writing $ROWS all-numeric rows with Spark into $DATA_NUM"
    "$MAIN_VENV/bin/python" "$HERE/make_dataset.py" "$DATA_NUM" --rows "$ROWS" --files "$FILES" --numeric \
      2> >(grep -v -e WARN -e 'Stage ' -e 'setLogLevel' -e FutureWarning -e require_minimum >&2)
  fi
  cat "$DATA_NUM"/*.parquet >/dev/null
  NPY="$MAIN_VENV/bin/python"
  measure sluice_numeric "sluice train --model none (all-numeric)" numeric --summary-json "$S" -- \
    $(sluice_train "$DATA_NUM" "$NCPU" "$S")
  measure numpy_shm "sluice → numpy, shared memory ($NCPU processes)" numeric --summary-json "$S" \
    --trainer-timing -- \
    "$SLUICE" train "$DATA_NUM" --devices "$NCPU" --batch-size "$BATCH" --quiet --summary-json "$S" \
    --fill-nulls 0 --exec "$NPY $HERE/peers/sluice_numpy.py"
  measure numpy_pipe "sluice → numpy, stdin pipe ($NCPU processes)" numeric --summary-json "$S" \
    --trainer-timing -- \
    "$SLUICE" train "$DATA_NUM" --devices "$NCPU" --batch-size "$BATCH" --quiet --summary-json "$S" \
    --fill-nulls 0 --exec "$NPY $HERE/peers/sluice_numpy.py --pipe"
fi

# 5. The same dataset in S3 (moto, a bench instance of its own on port 9310).
if [[ $S3 == 1 ]] && { want sluice || want pyarrow; }; then
  export SLUICE_S3_NAME=bench-s3 SLUICE_S3_PORT="${SLUICE_BENCH_S3_PORT:-9310}"
  ENDPOINT="$("$ROOT/tests/services/s3.sh" start)"
  export AWS_ENDPOINT_URL="$ENDPOINT" AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench \
    AWS_REGION=us-east-1
  URL="s3://bench/$(basename "$DATA")"
  log "uploading to $URL at $ENDPOINT"
  "$MAIN_VENV/bin/python" "$HERE/upload_s3.py" "$DATA" "$URL"
  want sluice && measure sluice_s3 "sluice train --devices $NCPU" s3 --summary-json "$S" -- \
    $(sluice_train "$URL" "$NCPU" "$S")
  want pyarrow && measure pyarrow_s3 "pyarrow.dataset to_batches" s3 -- \
    "$(peer_python pyarrow)" "$HERE/peers/pyarrow_dataset.py" "$URL" --batch-size "$BATCH" --threads "$NCPU"
  "$ROOT/tests/services/s3.sh" stop >/dev/null 2>&1 || true
fi

# 6. Where sluice spends its time (perf, else nothing).
if [[ $PROFILE == 1 ]] && want sluice; then
  SLUICE_BENCH_RESULTS="$RESULTS" "$HERE/profile.sh" "$SLUICE" "$DATA" "$NCPU" "$BATCH" "$CPUS" >"$RESULTS/profile.md" \
    || log "profile failed (see above)"
fi

# 7. Report.
python3 "$HERE/collect.py" --raw "$RAW" --meta "$META" --out "$RESULTS/results.json" \
  --rows "$ROWS" --reps "$REPS" --cpus "$CPUS" --batch-size "$BATCH" --quick "$QUICK" \
  --status-dir "$BENCH/status" --built "$BUILT"
"$BENCH/venv-tools/bin/python" "$HERE/report.py" "$RESULTS"
log "wrote $RESULTS/report.md, chart.png, results.json"
