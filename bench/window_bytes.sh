#!/usr/bin/env bash
# Bytes a mixed read of two Spark outputs fetches from an S3 API, measured by
# a counting proxy in front of the S3 emulator (tests/services/s3.sh): the
# tasks of several sources are cut below a row group (windows), so this is
# what each window of a large row group costs.
#
#   bench/window_bytes.sh BIG_DIR SMALL_DIR [SLUICE...]
#
# Each SLUICE binary given (default: sluice) trains `BIG SMALL --weights 1,1`
# once; prints the bytes fetched, the GET requests and the rows of each.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIG="$1"
SMALL="$2"
shift 2
[ $# -gt 0 ] || set -- sluice
VENV="${SLUICE_VENV:-$HOME/.cache/sluice/venv}"
ENDPOINT="$("$HERE/../tests/services/s3.sh" start)"
PORT=9393
WORK="$(mktemp -d)"
PREFIX="data-$(basename "$WORK")"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
AWS_ENDPOINT_URL="$ENDPOINT" "$VENV/bin/python" "$HERE/upload_s3.py" "$BIG" s3://filter-bench/$PREFIX/big
AWS_ENDPOINT_URL="$ENDPOINT" "$VENV/bin/python" "$HERE/upload_s3.py" "$SMALL" s3://filter-bench/$PREFIX/small
"$VENV/bin/python" "$HERE/count_proxy.py" "$PORT" "$ENDPOINT" "$WORK/count" &
PROXY=$!
trap 'kill $PROXY 2>/dev/null; rm -rf "$WORK"' EXIT
sleep 1
export AWS_ENDPOINT_URL="http://127.0.0.1:$PORT" AWS_ALLOW_HTTP=true
for sluice in "$@"; do
  before="$(cat "$WORK/count" 2>/dev/null || echo 0)"
  gets="$(cat "$WORK/count.gets" 2>/dev/null || echo 0)"
  "$sluice" train s3://filter-bench/$PREFIX/big s3://filter-bench/$PREFIX/small --weights 1,1 \
    --model none --batch-size 256 --quiet --summary-json "$WORK/summary.json" >/dev/null
  rows="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rows"])' "$WORK/summary.json")"
  echo "$sluice: $(( $(cat "$WORK/count") - before )) bytes in $(( $(cat "$WORK/count.gets") - gets )) GETs, $rows rows"
done
