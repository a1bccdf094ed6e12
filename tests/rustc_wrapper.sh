#!/usr/bin/env bash
# The compiler of the workspace's own crates in the test builds (cargo's
# RUSTC_WORKSPACE_WRAPPER, set by tests/lint_env.sh): clippy-driver, so that
# each build is clippy's check too. Test harnesses (rustc's `--test`: each
# library compiled again with its unit tests, and tests/it) are compiled at
# opt-level 0, where the profile says 1: they run little code of their own,
# and that is about two thirds of the CPU their compiling took at 1. The
# libraries and binaries the tests run (`sluice`, the in-process readers of
# tests/it) keep the profile's opt-level. cargo's arguments come first; of two
# `-C opt-level`, rustc takes the last.
#
# Usage (by cargo): rustc_wrapper.sh RUSTC ARGS...
set -euo pipefail
for arg in "$@"; do
  if [[ "$arg" == --test ]]; then
    exec "$SLUICE_CLIPPY_DRIVER" "$@" -C opt-level=0
  fi
done
exec "$SLUICE_CLIPPY_DRIVER" "$@"
