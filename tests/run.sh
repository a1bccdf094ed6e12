#!/usr/bin/env bash
# Runs every test: writes the Spark fixtures (once per version of the scripts
# that write them, kept in $SLUICE_CACHE), then
# lint, then starts the object store emulators and runs the Rust unit and
# integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tests/phases.sh
source tests/phases.sh
trap 'phase ""' EXIT

# numpy's OpenBLAS starts a thread per core at import, and they spin: a Python
# process that imports pyarrow (which imports numpy) took 0.30 CPU-s to start
# with them and 0.17 with one. The tests start some thousand such processes
# (trainers, Spark's Python workers, the Airflow tasks), none of which
# multiplies matrices; torch keeps its own threads.
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"

VENV="${SLUICE_VENV:-$HOME/.cache/sluice/venv}"
PY="$VENV/bin/python"
if ! "$PY" -c 'import pyspark, pyarrow' 2>/dev/null; then
  echo "tests/run.sh: no venv with pyspark at $VENV; run .ci/run (it installs one)" >&2
  exit 1
fi
export SLUICE_PYTHON="$PY"
# The JVM options of the Spark drivers and executors the tests start from this
# venv: C1 only, the serial GC and, where .ci/run made it, the venv's class data
# sharing archive (tests/fixtures/spark_cds.py), which halves a Spark JVM's start.
SLUICE_SPARK_JAVA_OPTIONS="$("$PY" tests/fixtures/spark_cds.py --options)"
export SLUICE_SPARK_JAVA_OPTIONS
TABLES_PY="${SLUICE_TABLES_VENV:-$HOME/.cache/sluice/venv-tables}/bin/python"
if ! "$TABLES_PY" -c 'import pyspark, delta' 2>/dev/null; then
  echo "tests/run.sh: no venv with pyspark 4.0 and delta-spark at $TABLES_PY; run .ci/run (it installs one)" >&2
  exit 1
fi
AIRFLOW_PY="${SLUICE_AIRFLOW_VENV:-$HOME/.cache/sluice/venv-airflow}/bin/python"
if ! "$AIRFLOW_PY" -c 'import importlib.metadata as m; m.version("apache-airflow")' 2>/dev/null; then
  echo "tests/run.sh: no venv with Apache Airflow at $AIRFLOW_PY; run .ci/run (it installs one)" >&2
  exit 1
fi
TF_PY="${SLUICE_TF_VENV:-$HOME/.cache/sluice/venv-tf}/bin/python"
if ! "$TF_PY" -c 'import importlib.metadata as m; m.version("tensorflow-cpu")' 2>/dev/null; then
  echo "tests/run.sh: no venv with tensorflow-cpu at $TF_PY; run .ci/run (it installs one)" >&2
  exit 1
fi
CACHE="${SLUICE_CACHE:-$HOME/.cache/sluice}"
PRISTINE=""
FROM_PRISTINE=""
if [[ -z "${SLUICE_FIXTURES:-}" ]]; then
  # What Spark writes is kept between runs on this machine: made once per
  # version of what makes it (the fixture scripts, the services and packages
  # they use), into $CACHE/fixtures, whose pristine copy each later run
  # starts from, so that nothing a test leaves there outlives its run. The
  # path stays the same: Iceberg's metadata and the catalogs name it.
  key="$({ git ls-files -z tests/fixtures tests/services 'tests/requirements*.txt' \
      examples/torch/make_criteo.py 2>/dev/null \
    || find tests/fixtures tests/services tests/requirements*.txt examples/torch/make_criteo.py \
      -type f -not -path '*/__pycache__/*' -print0 \
    | sort -z; } | xargs -0 cat | sha256sum | cut -c1-16)"
  SLUICE_FIXTURES="$CACHE/fixtures"
  PRISTINE="$CACHE/fixtures-pristine/$key"
  rm -rf "$SLUICE_FIXTURES"
  if [[ -d "$PRISTINE" ]]; then
    cp -a "$PRISTINE" "$SLUICE_FIXTURES"
    FROM_PRISTINE=1
  fi
fi
export SLUICE_FIXTURES

# Each script below writes what is missing and leaves what it finds; a pristine
# copy holds all they write (it is made only after every one succeeded), so a
# run that starts from one skips them.
# `fixture ANNOUNCE WHAT COMMAND...`: announces WHAT with ANNOUNCE (`phase`,
# which times it, or `heading`) and runs COMMAND with the fixtures' directory.
heading() {
  echo "== $1"
}
fixture() {
  local announce="$1" what="$2"
  shift 2
  "$announce" "$what"
  "$@" "$SLUICE_FIXTURES"
}
make_fixtures() {
  # make_fixtures.py first, alone: it makes the directory (wiping one an older
  # version of it made). Then the Spark 4.0 venv's three scripts (Delta and
  # Iceberg tables, every format, the catalogs) run beside the others, one after
  # another: each script mostly waits on its driver's one thread and on its
  # JVMs, about half a core, so two at a time take about as long as the longer
  # of the two chains. Their output comes after the others'; a failure fails
  # the run there.
  fixture phase "fixtures (real Spark) -> $SLUICE_FIXTURES" "$PY" tests/fixtures/make_fixtures.py
  local beside_log beside_pid beside_status=0
  beside_log="$(mktemp "${TMPDIR:-/tmp}/sluice-fixtures-4.0.XXXXXX")"
  (
    set -euo pipefail
    start=$SECONDS
    fixture heading "Delta and Iceberg tables (real Spark 4.0) -> $SLUICE_FIXTURES/tables" "$TABLES_PY" tests/fixtures/make_tables.py
    fixture heading "every format as Spark writes and reads it by default (real Spark 4.0, spark-avro) -> $SLUICE_FIXTURES/formats" "$TABLES_PY" tests/fixtures/make_formats.py
    fixture heading "tables in catalogs (real Spark 4.0, the Iceberg REST catalog) -> $SLUICE_FIXTURES/catalogs" "$TABLES_PY" tests/fixtures/make_catalogs.py
    echo "(the Spark 4.0 fixtures took $((SECONDS - start)) s)"
  ) >"$beside_log" 2>&1 &
  beside_pid=$!
  # shellcheck disable=SC2064 # the pid is this one, set now
  trap "pkill -TERM -P $beside_pid 2>/dev/null; kill $beside_pid 2>/dev/null; phase ''" EXIT

  fixture phase "row filters: Spark's df.filter counts (real Spark) -> $SLUICE_FIXTURES/filter" "$PY" tests/fixtures/make_filter.py
  fixture phase "row filters: bloom filters, ORC stripes (real Spark) -> $SLUICE_FIXTURES/filter_pushdown" "$PY" tests/fixtures/make_filter_pushdown.py
  fixture phase "row filters: Spark's answers to generated predicates over edge values, four formats (real Spark) -> $SLUICE_FIXTURES/filter_diff" "$PY" tests/fixtures/make_filter_diff.py
  fixture phase "the PyTorch example's Criteo-like data (examples/torch/make_criteo.py, real Spark) -> $SLUICE_FIXTURES/criteo" "$PY" tests/fixtures/make_criteo.py
  fixture phase "SequenceFiles and pickle files of Spark's RDD API (real Spark) -> $SLUICE_FIXTURES/hadoop" "$PY" tests/fixtures/make_hadoop.py
  fixture phase "MapReduce output (Hadoop's LocalJobRunner, tests/services/mapreduce.sh) -> $SLUICE_FIXTURES/mapreduce" tests/services/mapreduce.sh
  fixture phase "TFRecord files (TensorFlow's TFRecordWriter and TFRecordDataset) -> $SLUICE_FIXTURES/tfrecord" "$TF_PY" tests/fixtures/make_tfrecord.py

  phase "the Spark 4.0 fixtures (tables, formats, catalogs), written beside the ones above"
  wait "$beside_pid" || beside_status=$?
  trap 'phase ""' EXIT
  cat "$beside_log"
  rm -f "$beside_log"
  if [[ "$beside_status" != 0 ]]; then
    echo "tests/run.sh: writing the Spark 4.0 fixtures failed (exit $beside_status)" >&2
    exit "$beside_status"
  fi
}
if [[ -n "$FROM_PRISTINE" ]]; then
  phase "fixtures: the pristine copy of this version of their scripts ($PRISTINE)"
else
  make_fixtures
fi
if [[ -n "$PRISTINE" && ! -d "$PRISTINE" ]]; then
  rm -rf "$CACHE/fixtures-pristine"
  mkdir -p "$CACHE/fixtures-pristine"
  cp -a "$SLUICE_FIXTURES" "$PRISTINE.tmp"
  mv "$PRISTINE.tmp" "$PRISTINE"
fi

# Every cargo call below compiles the workspace with clippy's lints
# (tests/lint_env.sh), as .ci/run's background build did.
# shellcheck source=tests/lint_env.sh
source tests/lint_env.sh

phase "cargo fmt"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

# Beside everything below, at the lowest priority (nice 19): the fuzz targets
# are work for the CPU alone, and take the time the cores would idle while
# tests wait on JVMs, Spark, Kerberos tickets and kills. Their results come at
# the end; a failure fails the run. (clippy's lints ran in the build: see
# tests/lint_env.sh.)
side_names=()
side_pids=()
side_logs=()
side() {
  local name="$1" log
  shift
  log="$(mktemp "${TMPDIR:-/tmp}/sluice-side.XXXXXX")"
  nice -n 19 "$@" >"$log" 2>&1 &
  side_names+=("$name")
  side_pids+=($!)
  side_logs+=("$log")
}
# Stops a process started in the background here and its children.
stop_tree() {
  pkill -TERM -P "$1" 2>/dev/null || true
  kill "$1" 2>/dev/null || true
}
stop_side() {
  for pid in "${side_pids[@]}"; do
    stop_tree "$pid"
  done
}
trap 'stop_side; phase ""' EXIT

# fuzz/ is a workspace of its own. Its build and the corpus each target grows are
# kept in the cache between runs; a crash fails the run, its input written under
# fuzz/artifacts/TARGET (replay: cargo +nightly fuzz run TARGET FILE). Each target
# runs a set number of inputs (what it ran in 20 s on a core of its own), within
# SLUICE_FUZZ_SECONDS (300) however busy the cores are.
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "tests/run.sh: no cargo-fuzz or nightly toolchain; run .ci/run (it installs them)" >&2
  exit 1
fi
FUZZ_CACHE="${SLUICE_CACHE:-$HOME/.cache/sluice}"
FUZZ_SECONDS="${SLUICE_FUZZ_SECONDS:-300}"
declare -A FUZZ_RUNS=([bzip2_blocks]=6000 [hadoop_block]=120000)
for target in bzip2_blocks hadoop_block; do
  mkdir -p "$FUZZ_CACHE/fuzz-corpus/$target"
  # The second cargo waits for the first one's build of the fuzz workspace,
  # then finds it done.
  side "fuzz target $target" env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS \
    cargo +nightly fuzz run --target-dir "$FUZZ_CACHE/target-fuzz" \
    "$target" "$FUZZ_CACHE/fuzz-corpus/$target" -- \
    -runs="${FUZZ_RUNS[$target]}" -max_total_time="$FUZZ_SECONDS"
done

phase "object store emulators (tests/services: moto, fake-gcs-server, Azurite)"
# Started once here so the tests share them (a test that finds one missing starts
# it itself); stopped on any exit. This run's services live under a state root of
# its own, each on a port chosen free when it starts (the tests ask the scripts,
# which print the endpoint of the server running in that root): another run on
# this machine, beside this one, never stops or uses them.
SLUICE_SERVICES="$(mktemp -d "${TMPDIR:-/tmp}/sluice-services.XXXXXX")"
export SLUICE_SERVICES
stop_emulators() {
  for service in s3 gcs azure; do
    tests/services/$service.sh stop || true
  done
}
trap 'stop_side; stop_emulators; phase ""' EXIT
for service in s3 gcs azure; do
  tests/services/$service.sh start >/dev/null
done

phase "hdfs (tests/services/hdfs.sh: a MiniDFSCluster)"
# Started after the fixtures and not exported: Spark must not see the cluster's
# configuration while it writes local test data; the tests pass HADOOP_CONF_DIR
# to sluice themselves. The HA cluster is started by tests/it/hdfs.rs when needed.
stop_hdfs() {
  tests/services/hdfs.sh stop || true
  tests/services/hdfs.sh stop-ha || true
  for level in privacy integrity authentication; do
    tests/services/hdfs.sh stop-secure --protection "$level" || true
  done
  tests/services/hdfs.sh stop-kdc || true
}
trap 'stop_side; stop_emulators; stop_hdfs; rm -rf "$SLUICE_SERVICES"; phase ""' EXIT
tests/services/hdfs.sh start >/dev/null

# Until here nothing needs the workspace's build, which .ci/run began in the
# background: the services above start while it runs, on the core that its
# longest crate (the sluice library, compiled again at every commit for the
# commit `sluice --version` names) leaves idle.
if [[ -n "${SLUICE_PREBUILD_DONE:-}" ]]; then
  phase "waiting for the build .ci/run began in the background"
  while [[ ! -e "$SLUICE_PREBUILD_DONE" ]]; do
    sleep 2
  done
  tail -n 1 "$SLUICE_PREBUILD_DONE"
fi

phase "wheel (maturin around the dev build; tests/it/wheel.rs installs it)"
# The same pyproject.toml builds the release wheel with the small `dist` binary
# (`maturin build --zig --compatibility manylinux2014`, for glibc 2.17); here it
# packs the debug binary cargo test uses anyway, tagged for this machine's glibc:
# `--zig` would build every crate again for an explicit target (a second full
# build), so tests/it/wheel.rs checks here only that the tag and the binary's glibc
# symbols agree, and SLUICE_WHEEL_GLIBC=2.17 checks a release wheel.
if ! "$VENV/bin/maturin" --version >/dev/null 2>&1; then
  echo "tests/run.sh: no maturin in $VENV; run .ci/run (it installs it)" >&2
  exit 1
fi
SLUICE_WHEEL_DIR="${CARGO_TARGET_DIR:-$PWD/target}/wheels"
rm -f "$SLUICE_WHEEL_DIR"/sluice_train-*.whl
"$VENV/bin/maturin" build --quiet --profile dev --out "$SLUICE_WHEEL_DIR"
export SLUICE_WHEEL_DIR
export SLUICE_WHEELHOUSE="${SLUICE_WHEELHOUSE:-$HOME/.cache/sluice/wheelhouse}"

phase "docs (mkdocs build --strict; runnable blocks)"
# The site must build with warnings as errors (a broken link or anchor, a missing
# page or include), the exec protocol page must name every name of the protocol,
# and every block of README.md and docs/ marked runnable must run
# with the debug binary on the bundled examples and print what its page shows.
DOCS_VENV="${SLUICE_DOCS_VENV:-$CACHE/venv-docs}"
if ! "$DOCS_VENV/bin/mkdocs" --version >/dev/null 2>&1; then
  echo "tests/run.sh: no mkdocs in $DOCS_VENV; run .ci/run (it installs it)" >&2
  exit 1
fi
DOCS_SITE="$(mktemp -d)"
"$DOCS_VENV/bin/mkdocs" build --strict --quiet --site-dir "$DOCS_SITE"
rm -rf "$DOCS_SITE"
cargo build --quiet --bin sluice
python3 tests/docs/run_blocks.py
python3 tests/docs/protocol_names.py

phase "bench crates (bench/load, bench/decode): build, the master load's quick check"
# bench/load and bench/decode are members of the workspace, built above with
# it, so that neither stops compiling unnoticed. The quick check (about 25 s)
# drives the debug master; its figures mean nothing, only that every request
# is answered.
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --quiet --workspace --all-targets
LOAD_OUT="$(mktemp -d)"
"$TARGET/debug/sluice-load" --sluice "$TARGET/debug/sluice" \
  --floor "$TARGET/debug/sluice-load-floor" --tasks 20000 --workers 32 \
  --open-seconds 0 --seconds 20 --work-dir "$LOAD_OUT" \
  --json "$LOAD_OUT/load.json" --markdown "$LOAD_OUT/load.md" >/dev/null
rm -rf "$LOAD_OUT"

phase "cargo test"
# Each test binary runs with per-test times (tests/timed_runner.sh); the slowest
# are named at the end, where the time goes. Six tests at a time on two cores:
# many tests wait on JVMs, Spark or Airflow, and at four the cores idled a
# quarter of the run; at eight the run was no faster and tests that bound
# what a kill may cost exceeded their bounds. SLUICE_TEST_THREADS sets another
# number.
#
# Two groups of tests run one at a time, from the start, in a run of the `it`
# binary of their own beside the others, which take the other five places: the
# Spark launcher's (each brings up a Spark cluster of three JVMs; a lock in the
# tests keeps them apart), which inside one run came last (tests start in the
# order of their names) and held up to five places waiting on that lock while
# the cores idled; and the Kerberized HDFS tests, which mostly wait (on a
# secure cluster, a ticket's expiry), and inside one run waited side by side.
# The two libraries' unit tests run after them, in that place too, each binary
# in its package's directory as cargo runs it: compiled at opt-level 0
# (tests/rustc_wrapper.sh), they take half a minute, which in cargo's order,
# before tests/it, every other test waited for.
TEST_LOG="$(mktemp "${TMPDIR:-/tmp}/sluice-tests.XXXXXX")"
SERIAL_TEST_LOG="$(mktemp "${TMPDIR:-/tmp}/sluice-tests-serial.XXXXXX")"
triple="$(rustc -vV | sed -n 's/^host: //p')"
runner_var="CARGO_TARGET_$(echo "$triple" | tr 'a-z-' 'A-Z_')_RUNNER"
export "$runner_var=$PWD/tests/timed_runner.sh"
SERIAL=(hdfs_kerberos:: spark_launcher::)
skips=()
for group in "${SERIAL[@]}"; do
  skips+=(--skip "$group")
done
# One cargo call names both: "it<tab>BINARY" for tests/it, and
# "DIR<tab>BINARY" of each library's unit tests.
binaries="$(cargo test --quiet --workspace --lib --test it --no-run --message-format=json | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    t = m.get("target") or {}
    test = (m.get("profile") or {}).get("test")
    if m.get("reason") != "compiler-artifact" or not test or not m.get("executable"):
        continue
    if t.get("name") == "it" and t.get("kind") == ["test"]:
        print("it\t" + m["executable"])
    else:
        print(os.path.dirname(m["manifest_path"]) + "\t" + m["executable"])')"
it_binary="$(sed -n 's/^it\t//p' <<<"$binaries")"
unit_tests="$(grep -v '^it'$'\t' <<<"$binaries" || true)"
if [[ ! -x "$it_binary" ]]; then
  echo "tests/run.sh: cargo named no test binary for tests/it" >&2
  exit 1
fi
if [[ "$(grep -c . <<<"$unit_tests")" != 2 ]]; then
  echo "tests/run.sh: cargo named $(grep -c . <<<"$unit_tests") unit test binaries, not the two libraries'" >&2
  exit 1
fi
{
  status=0
  root="$PWD"
  tests/timed_runner.sh "$it_binary" "${SERIAL[@]}" --test-threads=1 || status=$?
  while IFS=$'\t' read -r dir binary; do
    echo "     Running the unit tests of $dir ($binary)"
    (cd "$dir" && "$root/tests/timed_runner.sh" "$binary" --test-threads=2) || status=$?
  done <<<"$unit_tests"
  exit "$status"
} >"$SERIAL_TEST_LOG" 2>&1 &
serial_pid=$!
trap 'stop_tree "$serial_pid"; stop_side; stop_emulators; stop_hdfs; rm -rf "$SLUICE_SERVICES"; phase ""' EXIT
test_status=0
threads="${SLUICE_TEST_THREADS:-6}"
cargo test --workspace --test it --no-fail-fast -- --test-threads="$((threads > 1 ? threads - 1 : 1))" \
  "${skips[@]}" 2>&1 | tee "$TEST_LOG" || test_status=$?
echo "== the tests of ${SERIAL[*]} (run beside the others, one at a time), then the unit tests"
serial_status=0
wait "$serial_pid" || serial_status=$?
tee -a "$TEST_LOG" <"$SERIAL_TEST_LOG"
if [[ "$serial_status" != 0 ]]; then
  echo "tests/run.sh: the run of ${SERIAL[*]} or of the unit tests failed (exit $serial_status)" >&2
  test_status="$serial_status"
fi

phase "beside the tests: fuzz targets"
for i in "${!side_names[@]}"; do
  name="${side_names[$i]}"
  log="${side_logs[$i]}"
  if wait "${side_pids[$i]}"; then
    echo "$name: ok $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" || true)"
  else
    echo "$name failed:" >&2
    tail -n 60 "$log" >&2
    test_status=1
  fi
  rm -f "$log"
done
phase ""

echo "== slowest tests (seconds, while others ran beside them)"
sed -n 's/^test \(.*\) \.\.\. [a-zA-Z]* <\([0-9.]*\)s>$/\2 \1/p' "$TEST_LOG" \
  | sort -rn | awk 'NR <= 25 { printf "%8.1f  %s\n", $1, $2 }'
rm -f "$TEST_LOG" "$SERIAL_TEST_LOG"
exit "$test_status"
