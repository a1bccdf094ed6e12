#!/usr/bin/env bash
# A local Azure Blob Storage for the tests: Azurite (npm `azurite`, installed into
# the cache when missing), blob service only, in memory, on 127.0.0.1.
#
#   tests/services/azure.sh start     prints the endpoint (http://127.0.0.1:PORT) once it answers
#   tests/services/azure.sh stop | install
#
# Point sluice at it with AZURE_STORAGE_USE_EMULATOR=true (and
# AZURITE_BLOB_STORAGE_URL=<endpoint> for another port); the account is Azurite's
# well-known devstoreaccount1. Idempotent: when it already runs, `start` only
# prints the endpoint. State in $SLUICE_SERVICES/azure (see server.sh).
#
# Environment: SLUICE_AZURE_PORT (default: one free at start,
# see server.sh) and those of server.sh.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/services/server.sh
source "$HERE/server.sh"

NAME=azure
PACKAGE="azurite@3.37.0"
PREFIX="$CACHE/node"
PORT="${SLUICE_AZURE_PORT:-}"

urls() {
  ENDPOINT="http://127.0.0.1:$PORT"
  READY_URL="$ENDPOINT/devstoreaccount1?comp=list"
}

install() {
  local stamp="$PREFIX/azurite.version"
  [[ -x "$PREFIX/node_modules/.bin/azurite-blob" && "$(cat "$stamp" 2>/dev/null)" == "$PACKAGE" ]] &&
    return 0
  command -v npm >/dev/null || die "npm not found (needed to install $PACKAGE)"
  echo "$NAME.sh: npm install $PACKAGE into $PREFIX" >&2
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "$PACKAGE" >&2 ||
    die "npm install $PACKAGE failed"
  echo "$PACKAGE" >"$stamp"
}

server_command() {
  CMD=("$PREFIX/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$PORT"
    --inMemoryPersistence --extentMemoryLimit 512 --skipApiVersionCheck --disableTelemetry)
}

main "$@"
