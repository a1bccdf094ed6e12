#!/usr/bin/env bash
# Virtualenvs for the benchmark peers, under ~/.cache/sluice/bench (idempotent: a venv
# whose marker file exists is left alone). Peers whose versions clash get their own:
#
#   ~/.cache/sluice/venv                 pyspark + pyarrow (latest): dataset, pyarrow.dataset,
#                                        and torch when `import torch` works there
#   $BENCH/venv-petastorm                Petastorm 0.13 (imports only with pyarrow <= 14)
#   $BENCH/venv-ray                      ray[data]
#   $BENCH/venv-torch                    torch + pyarrow, only when torch does not install
#                                        into the main venv
#   $BENCH/venv-tools                    matplotlib for the chart
#
# A peer that does not install is recorded in $BENCH/status/<peer> as
# "not installable: <reason>"; the bench reports it instead of a figure.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CACHE="${SLUICE_CACHE:-$HOME/.cache/sluice}"
BENCH="${SLUICE_BENCH_CACHE:-$CACHE/bench}"
MAIN_VENV="${SLUICE_VENV:-$CACHE/venv}"
PY="${SLUICE_BENCH_PYTHON:-python3.11}"
mkdir -p "$BENCH/status"

log() { echo "bench/setup: $*" >&2; }

# make_venv NAME MARKER_IMPORT PIP_ARGS...
make_venv() {
  local name="$1" probe="$2"; shift 2
  local venv="$BENCH/venv-$name"
  if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "$probe" >/dev/null 2>&1; then
    echo ok >"$BENCH/status/$name"; return 0
  fi
  log "installing $name venv ($*)"
  rm -rf "$venv"
  "$PY" -m venv "$venv" || { echo "not installable: python venv failed" >"$BENCH/status/$name"; return 1; }
  "$venv/bin/pip" install --quiet --upgrade pip >/dev/null 2>&1 || true
  local err="$BENCH/status/$name.pip.log"
  if ! "$venv/bin/pip" install --quiet "$@" >"$err" 2>&1; then
    echo "not installable: pip install $* failed: $(grep -m1 -i 'error' "$err" | cut -c1-200)" >"$BENCH/status/$name"
    log "$name: $(cat "$BENCH/status/$name")"; return 1
  fi
  if ! "$venv/bin/python" -c "$probe" >"$err" 2>&1; then
    echo "not installable: installs but does not import: $(tail -1 "$err" | cut -c1-200)" >"$BENCH/status/$name"
    log "$name: $(cat "$BENCH/status/$name")"; return 1
  fi
  echo ok >"$BENCH/status/$name"
}

# The main venv (pyspark, pyarrow): the tests' own installer makes it.
if ! "$MAIN_VENV/bin/python" -c 'import pyspark, pyarrow' >/dev/null 2>&1; then
  log "installing $MAIN_VENV (tests/requirements.txt)"
  [[ -x "$MAIN_VENV/bin/python" ]] || "$PY" -m venv "$MAIN_VENV"
  "$MAIN_VENV/bin/pip" install --quiet -r "$ROOT/tests/requirements.txt" || exit 1
fi
echo ok >"$BENCH/status/pyarrow"

make_venv tools 'import matplotlib' matplotlib
make_venv petastorm 'import petastorm, pyarrow; from petastorm import make_batch_reader' \
  "petastorm==0.13.1" "pyarrow==14.0.2" "numpy<2" "pandas<2.3" "pyspark==4.3.0"
make_venv ray 'import ray, ray.data, pyarrow' "ray[data]"

# torch: the main venv, where tests/requirements-torch.txt (the tests' own pin) installs
# it; a venv of our own only if that fails (PyPI's wheel is the CUDA build, which runs
# on CPU).
if [[ -n "${SLUICE_BENCH_SKIP_TORCH:-}" ]]; then
  :
else
  if ! "$MAIN_VENV/bin/python" -c 'import torch, pyarrow' >/dev/null 2>&1 && [[ -f "$ROOT/tests/requirements-torch.txt" ]]; then
    log "installing torch into $MAIN_VENV (tests/requirements-torch.txt)"
    "$MAIN_VENV/bin/pip" install --quiet -r "$ROOT/tests/requirements-torch.txt" >&2 || true
  fi
  if "$MAIN_VENV/bin/python" -c 'import torch, pyarrow' >/dev/null 2>&1; then
    echo "ok $MAIN_VENV" >"$BENCH/status/torch"
  elif make_venv torch 'import torch, pyarrow, numpy' torch pyarrow numpy; then
    echo "ok $BENCH/venv-torch" >"$BENCH/status/torch"
  fi
fi
# torch beside Ray Data and Petastorm, for their PyTorch loaders (iter_torch_batches,
# petastorm.pytorch.DataLoader): the tests' pin, through uv and its cache (the wheel is
# large; the tests' installer fetched it already).
# Ray's iter_torch_batches imports ray.train, which needs pydantic.
for peer in ray petastorm; do
  venv="$BENCH/venv-$peer"
  [[ "$(cat "$BENCH/status/$peer" 2>/dev/null)" == ok* ]] || continue
  probe='import torch'; extra=()
  [[ $peer == ray ]] && { probe='import torch, pydantic'; extra=(pydantic); }
  if ! "$venv/bin/python" -c "$probe" >/dev/null 2>&1; then
    log "installing torch into $venv"
    [[ -x "$MAIN_VENV/bin/uv" ]] || "$MAIN_VENV/bin/pip" install --quiet uv >/dev/null 2>&1
    UV_CACHE_DIR="$CACHE/uv" "$MAIN_VENV/bin/uv" pip install --quiet --python "$venv/bin/python" \
      -r "$ROOT/tests/requirements-torch.txt" "${extra[@]}" \
      >"$BENCH/status/${peer}_torch.log" 2>&1 || true
  fi
  if "$venv/bin/python" -c "$probe" >/dev/null 2>&1; then
    echo ok >"$BENCH/status/${peer}_torch"
  else
    echo "not installable: torch into $venv: $(tail -1 "$BENCH/status/${peer}_torch.log" | cut -c1-200)" \
      >"$BENCH/status/${peer}_torch"
  fi
done
for p in pyarrow tools petastorm ray torch ray_torch petastorm_torch; do log "$p: $(cat "$BENCH/status/$p" 2>/dev/null)"; done
exit 0
