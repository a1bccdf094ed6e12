#!/usr/bin/env bash
# The master load benchmark: builds `sluice` and the load tool in release, starts
# the real `sluice master` on a synthetic job and drives it with simulated workers
# over loopback, then writes bench/results/load.json and bench/results/load.md.
# First an open loop at each of --rates (5,000, 10,000 and 20,000 lease +
# commit requests/s here; latency from each request's scheduled send time),
# then the two main phases: an open loop that offers --rate (30,000) over
# --open-seconds, and a closed loop (each worker as fast as answered) until the
# job is over. Then the floor: `sluice-load-floor`, a stand-in that answers
# the same requests at once and does no work, driven open loop at the same
# rates, for what the machine and the load tool cost by themselves.
#
#   bench/load/run.sh                                   # 1,000,000 tasks, 256 workers
#   bench/load/run.sh --tasks 200000 --open-seconds 5   # a shorter run
#   bench/load/run.sh --tasks 20000 --workers 32 --open-seconds 0 --seconds 20   # a quick check
#
# Other options: --lease-batch K (tasks per lease request), --rows R, --keep-state,
# --work-dir DIR (where the master's state goes; default the system temp dir).
# SLUICE_LOAD_OUT=PREFIX writes PREFIX.json and PREFIX.md instead.
# The load tool is a member of the workspace: it builds beside sluice, in the
# workspace's target dir (CARGO_TARGET_DIR overrides).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
out=${SLUICE_LOAD_OUT:-$root/bench/results/load}

# Two commands: one with `--bin sluice -p sluice-load --bins` builds only
# sluice-load's binaries, and the run would drive an older `sluice`.
(cd "$root" && cargo build --release -p sluice --bin sluice && cargo build --release -p sluice-load --bins)
load_target=$target
mkdir -p "$(dirname "$out")"
"$load_target/release/sluice-load" --sluice "$target/release/sluice" \
    --floor "$load_target/release/sluice-load-floor" --rates 5000,10000,20000 \
    --json "$out.json" --markdown "$out.md" "$@" >/dev/null
echo "wrote $out.json and $out.md"
