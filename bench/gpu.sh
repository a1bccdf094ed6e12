#!/usr/bin/env bash
# The PyTorch CTR example fed to a GPU: `sluice train --device-ids 0` running
# examples/torch/train_ctr.py (batches to CUDA through pinned buffers and a copy stream)
# beside the same training fed by a PyTorch DataLoader (bench/peers/torch_ctr_dataloader.py,
# `pin_memory=True`), on one Criteo-like dataset, with the GPU's utilisation sampled by
# nvidia-smi while each runs. One prepared script for a GPU node, which needs neither
# Spark nor Rust there: bring a sluice binary (a release or dist build, or the wheel's).
#
#   bench/gpu.sh [--sluice BIN] [--python PY] [--rows 4000000] [--data DIR]
#                [--device-ids 0] [--workers N] [--results DIR]
#
#   --sluice BIN     the sluice binary (default: target/release/sluice, else `sluice`)
#   --python PY      a python with torch (CUDA) and pyarrow (default: python3)
#   --rows N         rows of the dataset bench/gpu_data.py writes (default 4,000,000)
#   --data DIR       read DIR instead (a directory of Parquet part files)
#   --device-ids L   the GPUs sluice trains on, one trainer each (default 0); the
#                    DataLoader twin trains on the first
#   --workers N      the DataLoader's worker processes (default: the CPUs, at most 8)
#   --results DIR    where gpu.json and gpu.md go (default bench/results/gpu)
#
# Without nvidia-smi or CUDA it still runs (on the CPU, utilisation not sampled): a check
# that the script works. Prints the table (gpu.md) at the end.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
SLUICE="" PY=python3 ROWS=4000000 DATA="" IDS=0 WORKERS="" RESULTS="$HERE/results/gpu"
BATCH=8192 BUCKETS=1000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sluice) SLUICE="$2"; shift 2 ;;
    --python) PY="$2"; shift 2 ;;
    --rows) ROWS="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --device-ids) IDS="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    --results) RESULTS="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "bench/gpu.sh: unknown option $1" >&2; exit 1 ;;
  esac
done
log() { echo "gpu: $*" >&2; }
if [[ -z "$SLUICE" ]]; then
  SLUICE="${CARGO_TARGET_DIR:-$ROOT/target}/release/sluice"
  [[ -x "$SLUICE" ]] || SLUICE="$(command -v sluice || true)"
fi
[[ -n "$SLUICE" && -x "$SLUICE" ]] ||
  { echo "bench/gpu.sh: no sluice binary: build one (cargo build --release) or pass --sluice BIN" >&2; exit 1; }
"$PY" -c 'import torch, pyarrow' 2>/dev/null ||
  { echo "bench/gpu.sh: $PY cannot import torch and pyarrow" >&2; exit 1; }
[[ -n "$WORKERS" ]] || WORKERS=$(( $(nproc) < 8 ? $(nproc) : 8 ))
FIRST="${IDS%%,*}"
if command -v nvidia-smi >/dev/null && "$PY" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
  GPU=1 TWIN_DEVICE="cuda" SLUICE_DEVICES=(--device-ids "$IDS")
  log "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader -i "$FIRST")"
else
  GPU=0 TWIN_DEVICE=cpu SLUICE_DEVICES=(--devices 1)
  log "no GPU (nvidia-smi or torch.cuda missing): running on the CPU, utilisation not sampled"
fi

WORK="$(mktemp -d)"
SAMPLER=""
cleanup() { [[ -z "$SAMPLER" ]] || kill "$SAMPLER" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
if [[ -z "$DATA" ]]; then
  DATA="${TMPDIR:-/tmp}/sluice-gpu-criteo-$ROWS"
  if [[ ! -f "$DATA/_SUCCESS" ]]; then
    log "writing $ROWS rows into $DATA"
    "$PY" "$HERE/gpu_data.py" "$DATA" --rows "$ROWS"
  fi
fi
cat "$DATA"/*.parquet >/dev/null

# Samples the GPU every 200 ms into $WORK/$1.csv while the rest of the line runs.
sampled() {
  local name="$1"; shift
  if [[ $GPU == 1 ]]; then
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits \
      -i "$FIRST" -lms 200 >"$WORK/$name.csv" &
    SAMPLER=$!
  fi
  local start end rc=0
  start=$(date +%s.%N)
  "$@" || rc=$?
  end=$(date +%s.%N)
  if [[ -n "$SAMPLER" ]]; then kill "$SAMPLER" 2>/dev/null || true; wait "$SAMPLER" 2>/dev/null || true; SAMPLER=""; fi
  echo "$start $end" >"$WORK/$name.window"
  return $rc
}

log "sluice train ${SLUICE_DEVICES[*]} → examples/torch/train_ctr.py"
sampled sluice "$SLUICE" train "$DATA" "${SLUICE_DEVICES[@]}" --batch-size "$BATCH" --quiet \
  --hash-buckets "$BUCKETS" --fill-nulls 0 --summary-json "$WORK/sluice.json" \
  --exec "env PYTHONPATH=$ROOT/python/sluice_trainer $PY $ROOT/examples/torch/train_ctr.py --log-every 1000000 --summary-dir $WORK/ctr"
log "the DataLoader twin ($WORKERS workers, $TWIN_DEVICE)"
sampled twin "$PY" "$HERE/peers/torch_ctr_dataloader.py" "$DATA" --batch-size "$BATCH" \
  --workers "$WORKERS" --buckets "$BUCKETS" --device "$TWIN_DEVICE" >"$WORK/twin.json"

mkdir -p "$RESULTS"
"$PY" - "$WORK" "$RESULTS" "$GPU" "$WORKERS" "$IDS" "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY'
import glob, json, os, statistics, sys
work, results, gpu, workers, ids, commit = sys.argv[1:]

def util(name):
    path = os.path.join(work, f"{name}.csv")
    if not os.path.exists(path):
        return None
    rows = []
    for line in open(path):
        try:
            u, m = (float(x) for x in line.split(","))
        except ValueError:
            continue
        rows.append((u, m))
    if not rows:
        return None
    return {"mean_percent": round(statistics.mean(u for u, _ in rows), 1),
            "busy_samples_percent": round(100 * sum(u > 0 for u, _ in rows) / len(rows), 1),
            "peak_memory_mib": max(m for _, m in rows), "samples": len(rows)}

s = json.load(open(os.path.join(work, "sluice.json")))
twin = json.loads(open(os.path.join(work, "twin.json")).read().strip().splitlines()[-1])
ctr = [json.load(open(p)) for p in glob.glob(os.path.join(work, "ctr", "summary-*.json"))]
if not ctr or sum(c["rows"] for c in ctr) != s["rows"]:
    sys.exit(f"gpu: the trainers' summaries ({len(ctr)}) do not add up to sluice's {s['rows']} rows")
# Each side's seconds run from its first wait for data to its last optimizer step: the
# trainers' own clock (train_ctr's summary, after its imports), as the twin's.
seconds = max(c["seconds"] for c in ctr)
out = {
    "commit": commit, "gpu": gpu == "1", "device_ids": ids, "dataloader_workers": int(workers),
    "sluice": {"rows": s["rows"], "seconds": seconds, "job_seconds": s["seconds"],
               "rows_per_second": s["rows"] / seconds, "gpu": util("sluice"),
               "trainers": [{"rows": c["rows"], "steps": c["steps"],
                             "last_loss": c["last_loss"]} for c in ctr]},
    "dataloader": {"rows": twin["rows"], "seconds": twin["seconds"],
                   "rows_per_second": twin["rows"] / twin["seconds"], "gpu": util("twin")},
}
out["ratio"] = out["sluice"]["rows_per_second"] / out["dataloader"]["rows_per_second"]
if out["sluice"]["rows"] != out["dataloader"]["rows"]:
    sys.exit(f"gpu: sluice trained {out['sluice']['rows']} rows, the DataLoader "
             f"{out['dataloader']['rows']}: not the same data")
json.dump(out, open(os.path.join(results, "gpu.json"), "w"), indent=2)

def line(label, r):
    g = r["gpu"]
    u = f"{g['mean_percent']}% (busy in {g['busy_samples_percent']}% of samples)" if g else "not sampled"
    m = f"{g['peak_memory_mib']:.0f}" if g else "–"
    return f"| {label} | {r['rows']:,} | {r['rows_per_second']:,.0f} | {u} | {m} |"

where = f"GPU {ids}" if out["gpu"] else "CPU (no GPU found)"
md = "\n".join([
    f"CTR example on {where}, commit {commit}, batch 8192 (seconds from each "
    "trainer's first wait for data to its last step):", "",
    "| feeder | rows | rows/s | GPU utilisation (nvidia-smi, mean) | GPU memory peak (MiB) |",
    "|---|---:|---:|---|---:|",
    line(f"sluice train --device-ids {ids}" if out["gpu"] else "sluice train --devices 1", out["sluice"]),
    line(f"DataLoader twin ({workers} workers{', pin_memory' if out['gpu'] else ''})",
         out["dataloader"]),
    "", f"sluice ÷ DataLoader: {out['ratio']:.2f}×", ""])
open(os.path.join(results, "gpu.md"), "w").write(md)
print(md)
PY
