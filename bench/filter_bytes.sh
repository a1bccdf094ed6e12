#!/usr/bin/env bash
# Bytes a `--filter` read fetches from an S3 API against a full read, measured by a
# counting proxy in front of the S3 emulator (tests/services/s3.sh).
#
#   bench/filter_bytes.sh DATA_DIR FILTER [SLUICE]
#
# DATA_DIR: Spark output written sorted (e.g. $SLUICE_FIXTURES/filter/data from
# tests/fixtures/make_filter.py); FILTER: the selective filter (e.g. "id < 2000",
# 10% of that dataset). Prints the bytes of each read and their ratio.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA="$1"
FILTER="$2"
SLUICE="${3:-sluice}"
VENV="${SLUICE_VENV:-$HOME/.cache/sluice/venv}"
ENDPOINT="$("$HERE/../tests/services/s3.sh" start)"
PORT=9391
WORK="$(mktemp -d)"
PREFIX="data-$(basename "$WORK")"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
AWS_ENDPOINT_URL="$ENDPOINT" "$VENV/bin/python" "$HERE/upload_s3.py" "$DATA" s3://filter-bench/$PREFIX
"$VENV/bin/python" "$HERE/count_proxy.py" "$PORT" "$ENDPOINT" "$WORK/count" &
PROXY=$!
trap 'kill $PROXY 2>/dev/null; rm -rf "$WORK"' EXIT
sleep 1
export AWS_ENDPOINT_URL="http://127.0.0.1:$PORT" AWS_ALLOW_HTTP=true
measure() {
  local before
  before="$(cat "$WORK/count" 2>/dev/null || echo 0)"
  "$SLUICE" train s3://filter-bench/$PREFIX --model none --batch-size 256 --quiet --allow-empty "$@" \
    --summary-json "$WORK/summary.json" >/dev/null
  echo "$(( $(cat "$WORK/count") - before )) $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rows"])' "$WORK/summary.json")"
}
read -r full full_rows < <(measure)
read -r part part_rows < <(measure --filter "$FILTER")
echo "full read:     $full bytes, $full_rows rows"
echo "--filter \"$FILTER\": $part bytes, $part_rows rows"
python3 -c "print(f'ratio: {$part / $full:.3f}')"
