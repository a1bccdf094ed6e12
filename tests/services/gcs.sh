#!/usr/bin/env bash
# A local Google Cloud Storage for the tests: fake-gcs-server (the Go module
# github.com/fsouza/fake-gcs-server, `go install`ed into the cache when missing),
# in memory, plain HTTP on 127.0.0.1.
#
#   tests/services/gcs.sh start     prints the endpoint (http://127.0.0.1:PORT) once it answers
#   tests/services/gcs.sh stop | install
#
# Point sluice at it with STORAGE_EMULATOR_HOST=<endpoint> (or GOOGLE_BASE_URL).
# Idempotent: when it already runs, `start` only prints the endpoint. State in
# $SLUICE_SERVICES/gcs (see server.sh).
#
# Environment: SLUICE_GCS_PORT (default: one free at start,
# see server.sh) and those of server.sh.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/services/server.sh
source "$HERE/server.sh"

NAME=gcs
MODULE="github.com/fsouza/fake-gcs-server@v1.56.1"
BIN="$CACHE/bin"
PORT="${SLUICE_GCS_PORT:-}"

urls() {
  ENDPOINT="http://127.0.0.1:$PORT"
  READY_URL="$ENDPOINT/storage/v1/b"
}

install() {
  local stamp="$BIN/fake-gcs-server.version"
  [[ -x "$BIN/fake-gcs-server" && "$(cat "$stamp" 2>/dev/null)" == "$MODULE" ]] && return 0
  command -v go >/dev/null || die "go not found (needed to build $MODULE)"
  echo "$NAME.sh: go install $MODULE into $BIN" >&2
  mkdir -p "$BIN"
  # Built without the compiler's optimizations and inlining, and linked
  # without debug info: the emulator serves a few small objects per test, and
  # the build (a few hundred packages, at the start of a run on a new
  # machine) takes about a tenth less CPU (148 CPU-s against 163).
  GOBIN="$BIN" go install -gcflags=all='-N -l' -ldflags='-s -w' "$MODULE" >&2 \
    || die "go install $MODULE failed"
  echo "$MODULE" >"$stamp"
}

server_command() {
  CMD=("$BIN/fake-gcs-server" -scheme http -host 127.0.0.1 -port "$PORT"
    -public-host "127.0.0.1:$PORT" -external-url "$ENDPOINT" -backend memory -log-level warn)
}

main "$@"
