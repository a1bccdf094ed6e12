# shellcheck shell=bash
# Time per phase, for .ci/run and tests/run.sh (sourced by both):
# `phase NAME` ends the phase running, if any, and starts NAME (printing
# `== NAME`); `phase ""` only ends it; `phases_report` prints every phase
# ended so far with its seconds. The phases go to the file $SLUICE_PHASES, so
# that .ci/run reports those of tests/run.sh too.
if [[ -z "${SLUICE_PHASES:-}" ]]; then
  SLUICE_PHASES="$(mktemp "${TMPDIR:-/tmp}/sluice-phases.XXXXXX")"
fi
export SLUICE_PHASES
_phase_name=""
_phase_start=$SECONDS

phase() {
  if [[ -n "$_phase_name" ]]; then
    printf '%s\t%d\n' "$_phase_name" "$((SECONDS - _phase_start))" >>"$SLUICE_PHASES"
  fi
  _phase_name="$1"
  _phase_start=$SECONDS
  if [[ -n "$1" ]]; then
    echo "== $1"
  fi
}

phases_report() {
  phase ""
  echo "== time per phase (seconds)"
  awk -F'\t' '{ printf "%7d  %s\n", $2, $1; total += $2 } END { printf "%7d  total\n", total }' \
    "$SLUICE_PHASES"
}
