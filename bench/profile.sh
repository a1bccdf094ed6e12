#!/usr/bin/env bash
# Where sluice spends its CPU: perf (cpu-clock samples, DWARF call stacks) over
#   sluice train DATA --model none --devices N --batch-size B
# and over the bare decode of the same files, side by side. Prints profile.md on stdout
# and writes profile.json beside it (bench/results): CPU shares by category and the top
# functions. Needs `perf` (Debian linux-perf); without it says so and exits 0.
#
#   bench/profile.sh SLUICE_BIN DATA_DIR [DEVICES=2] [BATCH=8192] [CPUS=0,1]
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SLUICE="$1" DATA="$2" N="${3:-2}" BATCH="${4:-8192}" CPUS="${5:-0,1}"
BENCH="${SLUICE_BENCH_CACHE:-${SLUICE_CACHE:-$HOME/.cache/sluice}/bench}"
DECODE="$BENCH/target/release/sluice-bench-decode"
OUT="${SLUICE_BENCH_RESULTS:-$HERE/results}"
# The recordings stay in $BENCH/profile (profile_summary.py can be rerun over them).
WORK="$BENCH/profile"
rm -rf "$WORK" && mkdir -p "$WORK"
if ! command -v perf >/dev/null || ! perf record -e cpu-clock -o "$WORK/t.data" true >/dev/null 2>&1; then
  echo "# sluice profile"; echo; echo "perf is not available on this machine (Debian: linux-perf); no profile."
  exit 0
fi
echo "bench: profiling sluice and the bare decode with perf" >&2
rec() { # NAME CMD...
  local name="$1"; shift
  taskset -c "$CPUS" perf record -q -e cpu-clock -F 499 --call-graph dwarf,32768 -o "$WORK/$name.data" -- "$@" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" || { cat "$WORK/$name.err" >&2; return 1; }
}
rec sluice "$SLUICE" train "$DATA" --model none --devices "$N" --batch-size "$BATCH" --quiet \
  --summary-json "$WORK/summary.json" || exit 1
[[ -x "$DECODE" ]] && rec decode "$DECODE" "$DATA" --threads "$N" --batch-size "$BATCH"
python3 "$HERE/profile_summary.py" "$WORK" "$OUT/profile.json"
