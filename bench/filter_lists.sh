#!/usr/bin/env bash
# LIST requests a `--where`/`--filter` read sends to an S3 API against an
# unfiltered read, counted by a logging proxy in front of the S3 emulator
# (tests/services/s3.sh). An unfiltered read lists every directory, as
# every read did before partition directories were pruned while walking.
#
#   bench/filter_lists.sh DATA_DIR [SLUICE] -- ARGS... [-- ARGS...]
#
# DATA_DIR: Spark output partitioned by a few columns; each ARGS is one
# filtered read (e.g. --where "dt = '2026-01-03'"). Prints, per read, the
# LIST requests, the rows and the directories left unlisted.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA="$1"
shift
SLUICE=sluice
if [ "${1:-}" != "--" ]; then SLUICE="$1"; shift; fi
VENV="${SLUICE_VENV:-$HOME/.cache/sluice/venv}"
ENDPOINT="$("$HERE/../tests/services/s3.sh" start)"
PORT=9392
WORK="$(mktemp -d)"
PREFIX="data-$(basename "$WORK")"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
AWS_ENDPOINT_URL="$ENDPOINT" "$VENV/bin/python" "$HERE/upload_s3.py" "$DATA" s3://filter-bench/$PREFIX
"$VENV/bin/python" "$HERE/count_proxy.py" "$PORT" "$ENDPOINT" "$WORK/count" --log "$WORK/log" &
PROXY=$!
trap 'kill $PROXY 2>/dev/null; rm -rf "$WORK"' EXIT
sleep 1
export AWS_ENDPOINT_URL="http://127.0.0.1:$PORT" AWS_ALLOW_HTTP=true
measure() {
  : >"$WORK/log"
  "$SLUICE" train s3://filter-bench/$PREFIX --model none --batch-size 256 --quiet "$@" \
    --summary-json "$WORK/summary.json" >/dev/null
  local lists
  lists="$(grep -c ' GET [^ ]*list-type=' "$WORK/log" || true)"
  python3 - "$WORK/summary.json" "$lists" "$*" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
pruned = (s.get("filter") or {}).get("partition_dirs_pruned", "-")
print(f"{sys.argv[3] or '(no filter)'}: {sys.argv[2]} LIST requests, {s['rows']} rows, "
      f"directories left unlisted: {pruned}")
PY
}
measure
args=()
for a in "$@" --; do
  if [ "$a" = "--" ]; then
    [ ${#args[@]} -gt 0 ] && measure "${args[@]}"
    args=()
  else
    args+=("$a")
  fi
done
