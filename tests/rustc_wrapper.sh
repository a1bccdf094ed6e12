#!/usr/bin/env bash
# The compiler of the workspace's own crates in the test builds (cargo's
# RUSTC_WORKSPACE_WRAPPER, set by tests/lint_env.sh): clippy-driver, so that
# each build is clippy's check too. Test harnesses (rustc's `--test`: each
# library compiled again with its unit tests, and tests/it) are compiled at
# opt-level 0, where the profile says 1: they run little code of their own,
# and compiling them at 0 takes about a third of the time it takes at 1
# (sluice's unit tests 143 s against 50, the connectors' 94 against 28,
# tests/it 59 against 19, on 2 cores). The libraries and binaries the tests run
# (`sluice`, the connectors' readers that tests/it calls) keep the profile's
# opt-level. cargo's arguments come first; of two `-C opt-level`, rustc takes
# the last.
#
# Usage (by cargo): rustc_wrapper.sh RUSTC ARGS...
set -euo pipefail
for arg in "$@"; do
  if [[ "$arg" == --test ]]; then
    exec "$SLUICE_CLIPPY_DRIVER" "$@" -C opt-level=0
  fi
done
exec "$SLUICE_CLIPPY_DRIVER" "$@"
