#!/usr/bin/env bash
# Runs one test binary for `cargo test` in tests/run.sh (set as cargo's target
# runner there) with libtest's per-test times (`--report-time`), so that the
# run can name its slowest tests. The flag is unstable in libtest: a test
# binary accepts it when RUSTC_BOOTSTRAP is set where it runs, which changes
# nothing that cargo compiles.
set -euo pipefail
binary="$1"
shift
exec env RUSTC_BOOTSTRAP=1 "$binary" "$@" -Z unstable-options --report-time
