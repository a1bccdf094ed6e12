#!/usr/bin/env bash
# A local S3 for the tests: moto's server (PyPI `moto[server]`, installed into the
# test venv when missing), in memory, on 127.0.0.1.
#
#   tests/services/s3.sh start     prints the endpoint (http://127.0.0.1:PORT) once it answers
#   tests/services/s3.sh stop | install
#
# Point sluice at it with AWS_ENDPOINT_URL=<endpoint> and any AWS_ACCESS_KEY_ID /
# AWS_SECRET_ACCESS_KEY. Idempotent: when it already runs, `start` only prints the
# endpoint. State in $SLUICE_SERVICES/s3 (see server.sh).
#
# Environment: SLUICE_VENV (default ~/.cache/sluice/venv), SLUICE_S3_NAME (state
# directory name, default s3: a second instance needs its own), SLUICE_S3_PORT (default:
# one free at start, see server.sh), and those of server.sh.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/services/server.sh
source "$HERE/server.sh"

NAME="${SLUICE_S3_NAME:-s3}"
MOTO_VERSION=5.2.5
MOTO="moto[server]==$MOTO_VERSION"
VENV="${SLUICE_VENV:-$CACHE/venv}"
PORT="${SLUICE_S3_PORT:-}"

urls() {
  ENDPOINT="http://127.0.0.1:$PORT"
  READY_URL="$ENDPOINT/moto-api/"
}

install() {
  local have
  have="$("$VENV/bin/python" -c 'import flask, importlib.metadata as m; print(m.version("moto"))' 2>/dev/null)" || true
  [[ "$have" == "$MOTO_VERSION" && -x "$VENV/bin/moto_server" ]] && return 0
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  echo "$NAME.sh: installing $MOTO into $VENV" >&2
  # uv where the venv has it (.ci/run's venvs do), else pip.
  if [[ -x "$VENV/bin/uv" ]]; then
    "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" "$MOTO" >&2 || die "uv pip install $MOTO failed"
  else
    "$VENV/bin/pip" install --quiet "$MOTO" >&2 || die "pip install $MOTO failed"
  fi
}

server_command() {
  CMD=("$VENV/bin/moto_server" -H 127.0.0.1 -p "$PORT")
}

main "$@"
