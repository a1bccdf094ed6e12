#!/usr/bin/env bash
# The master load benchmark: builds `sluice` and the load tool in release, starts
# the real `sluice master` on a synthetic job and drives it with simulated workers
# over loopback, then writes bench/results/load.json and bench/results/load.md.
#
#   bench/load/run.sh                                   # 1,000,000 tasks, 256 workers
#   bench/load/run.sh --tasks 20000 --workers 32 --seconds 20   # a quick check
#
# Other options: --lease-batch K (tasks per lease request), --rows R, --keep-state,
# --work-dir DIR (where the master's state goes; default the system temp dir).
# SLUICE_LOAD_OUT=PREFIX writes PREFIX.json and PREFIX.md instead.
# The load tool builds in the workspace's target dir (CARGO_TARGET_DIR overrides),
# so the dependencies it shares with sluice are built once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
out=${SLUICE_LOAD_OUT:-$root/bench/results/load}

(cd "$root" && cargo build --release --bin sluice)
(cd "$here" && CARGO_TARGET_DIR="$target" cargo build --release)
mkdir -p "$(dirname "$out")"
"$target/release/sluice-load" --sluice "$target/release/sluice" \
    --json "$out.json" --markdown "$out.md" "$@" >/dev/null
echo "wrote $out.json and $out.md"
