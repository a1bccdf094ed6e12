# shellcheck shell=bash
# shellcheck disable=SC2034  # CACHE, STATE are for the scripts that source this
# Shared by the object store emulator scripts (s3.sh, gcs.sh, azure.sh): start a
# server in the background once, wait until it answers HTTP, stop it. Sourced, not run.
#
# A script sets NAME, PORT, ENDPOINT (what `start` prints on stdout) and READY_URL
# (any HTTP answer from it means ready), defines `install` (idempotent) and
# `server_command` (prints nothing, fills the array CMD), then calls `main "$@"`.
#
# Environment:
#   SLUICE_SERVICES               state root (default /tmp/sluice-services); this
#                                 server lives in $SLUICE_SERVICES/$NAME: pid, log, data
#   SLUICE_CACHE                  install cache (default ~/.cache/sluice)
#   SLUICE_SERVICE_START_TIMEOUT  seconds to wait for an answer (default 60)

SERVICES="${SLUICE_SERVICES:-/tmp/sluice-services}"
CACHE="${SLUICE_CACHE:-$HOME/.cache/sluice}"
START_TIMEOUT="${SLUICE_SERVICE_START_TIMEOUT:-60}"

die() {
  echo "$(basename "$0"): $*" >&2
  exit 1
}

# Whether something answers HTTP at READY_URL (any status code).
answers() {
  local code
  code="$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$READY_URL" 2>/dev/null)" || true
  [[ -n "$code" && "$code" != 000 ]]
}

running() {
  [[ -f "$STATE/pid" ]] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null && [[ -f "$STATE/ready" ]]
}

start() {
  mkdir -p "$STATE"
  # One starter at a time per state dir (tests and scripts may race).
  exec 9>"$STATE/lock"
  flock 9
  if running && answers; then
    echo "$ENDPOINT"
    return 0
  fi
  stop_quietly
  if answers; then
    die "something else already answers on $READY_URL; stop it or set the port variable"
  fi
  install
  rm -rf "$STATE/data" "$STATE/ready"
  mkdir -p "$STATE/data"
  server_command
  local t0=$SECONDS
  # setsid: the server outlives the shell that started it and ignores its Ctrl-C;
  # it execs in place, so the pid is the server's (and its process group's). It
  # runs in $STATE/data so that whatever it writes stays there.
  (cd "$STATE/data" && exec setsid "${CMD[@]}" </dev/null >"$STATE/server.log" 2>&1 9>&-) &
  local pid=$!
  echo "$pid" >"$STATE/pid"
  until answers; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 40 "$STATE/server.log" >&2
      rm -f "$STATE/pid"
      die "the server exited before it answered (log: $STATE/server.log)"
    fi
    if ((SECONDS - t0 >= START_TIMEOUT)); then
      tail -n 40 "$STATE/server.log" >&2
      stop_quietly
      die "no answer on $READY_URL after ${START_TIMEOUT}s (log: $STATE/server.log)"
    fi
    sleep 0.2
  done
  touch "$STATE/ready"
  echo "$NAME.sh: $ENDPOINT up in $((SECONDS - t0))s (pid $pid, log $STATE/server.log)" >&2
  echo "$ENDPOINT"
}

# Stops the server if it runs (its whole process group); waits for it to go.
stop_quietly() {
  [[ -f "$STATE/pid" ]] || return 0
  local pid
  pid="$(cat "$STATE/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 -- "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$STATE/pid" "$STATE/ready"
}

stop() {
  [[ -d "$STATE" ]] || return 0
  exec 9>"$STATE/lock"
  flock 9
  stop_quietly
}

main() {
  STATE="$SERVICES/$NAME"
  case "${1:-}" in
    start) start ;;
    stop) stop ;;
    install) install ;;
    *) die "usage: $0 start|stop|install" ;;
  esac
}
