# shellcheck shell=bash
# shellcheck disable=SC2034  # CACHE, STATE are for the scripts that source this
# Shared by the object store emulator scripts (s3.sh, gcs.sh, azure.sh): start a
# server in the background once, wait until it answers HTTP, stop it. Sourced, not run.
#
# A script sets NAME and PORT (the port asked for; empty: any free one), defines
# `urls` (sets ENDPOINT, what `start` prints on stdout, and READY_URL, where any
# HTTP answer means ready, from PORT), `install` (idempotent) and `server_command`
# (prints nothing, fills the array CMD), then calls `main "$@"`.
#
# Ports: a server started without a port asked for listens on one that was free
# when it started, recorded in $SLUICE_SERVICES/$NAME/port; a later `start` of
# the same state prints its endpoint. So runs with state roots of their own (as
# tests/run.sh and the tests make them) never meet: none stops, or uses, the
# other's servers.
#
# Environment:
#   SLUICE_SERVICES               state root (default $TMPDIR/sluice-services); this
#                                 server lives in $SLUICE_SERVICES/$NAME: pid, port,
#                                 log, data
#   SLUICE_CACHE                  install cache (default ~/.cache/sluice)
#   SLUICE_SERVICE_START_TIMEOUT  seconds to wait for an answer (default 60)
#   SLUICE_SERVICE_EXIT_WITH      a pid: the server stops when that process exits

SERVICES="${SLUICE_SERVICES:-${TMPDIR:-/tmp}/sluice-services}"
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

# A TCP port of 127.0.0.1 free now.
free_port() {
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# Sets PORT (the one asked for, the running server's, or a free one) and the
# script's URLs. Called under the state's lock.
choose_port() {
  if [[ -z "$PORT" ]]; then
    if running && [[ -s "$STATE/port" ]]; then
      PORT="$(cat "$STATE/port")"
    else
      PORT="$(free_port)"
    fi
  fi
  urls
}

running() {
  [[ -f "$STATE/pid" ]] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null && [[ -f "$STATE/ready" ]]
}

start() {
  mkdir -p "$STATE"
  # One starter at a time per state dir (tests and scripts may race).
  exec 9>"$STATE/lock"
  flock 9
  choose_port
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
  echo "$PORT" >"$STATE/port"
  if [[ -n "${SLUICE_SERVICE_EXIT_WITH:-}" ]]; then
    # The server goes when its owner (a test process) does, however it ends.
    (
      while kill -0 "$SLUICE_SERVICE_EXIT_WITH" 2>/dev/null; do sleep 1; done
      kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
    ) </dev/null >/dev/null 2>&1 9>&- &
  fi
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
  rm -f "$STATE/pid" "$STATE/ready" "$STATE/port"
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
