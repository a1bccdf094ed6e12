#!/usr/bin/env bash
# Runs every test: writes the Spark fixtures (once, cached by version), then
# the Rust unit and integration tests, then lint.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${SLUICE_VENV:-$HOME/.cache/sluice/venv}"
PY="$VENV/bin/python"
if ! "$PY" -c 'import pyspark, pyarrow' 2>/dev/null; then
  echo "tests/run.sh: no venv with pyspark at $VENV; run .ci/run (it installs one)" >&2
  exit 1
fi
export SLUICE_PYTHON="$PY"
export SLUICE_FIXTURES="${SLUICE_FIXTURES:-$PWD/tests/data/generated}"

echo "== fixtures (real Spark) -> $SLUICE_FIXTURES"
"$PY" tests/fixtures/make_fixtures.py "$SLUICE_FIXTURES"

echo "== cargo fmt / clippy"
cargo fmt --all -- --check
cargo clippy --all-targets --quiet -- -D warnings

echo "== cargo test"
cargo test --all -- --test-threads=2
