# shellcheck shell=bash
# clippy as the compiler of the workspace's own crates, for .ci/run's build and
# every cargo call of tests/run.sh (sourced by both): each build of the tests
# also runs clippy's lints on them, warnings as errors, as `cargo clippy
# --workspace --all-targets -- -D warnings` does, and compiles them as rustc
# does (clippy-driver is rustc with clippy's lints added; cargo hands it only
# the workspace's crates, and compiles the dependencies with rustc). One build
# where there were two: clippy's own check built every dependency again, as
# metadata, in a target directory of its own (about 5 min of CPU on a new
# machine), and checked the workspace's crates a second time.
#
# Every cargo call of a run must see the same two variables: cargo keeps them
# in its fingerprints, and one call without them compiles the workspace's
# crates again. The nightly toolchain of the fuzz targets runs without them.
# The wrapper (tests/rustc_wrapper.sh) runs clippy-driver, and compiles the
# test harnesses at opt-level 0.
if ! SLUICE_CLIPPY_DRIVER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)"; then
  echo "tests/lint_env.sh: no clippy-driver (rustup component add clippy)" >&2
  exit 1
fi
export SLUICE_CLIPPY_DRIVER
RUSTC_WORKSPACE_WRAPPER="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/rustc_wrapper.sh"
export RUSTC_WORKSPACE_WRAPPER
# cargo clippy's way to hand its lint flags to clippy-driver: `-D warnings`.
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
