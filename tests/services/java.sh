# shellcheck shell=bash
# Shared by the scripts that run a JVM service from Maven Central (hdfs.sh,
# hive-metastore.sh, iceberg-rest.sh): resolve a pom's classpath once per version
# of its sources, and start, watch and stop one server in the background. Sourced,
# not run.
#
# maven_build KEY HASH ARGS...: runs `mvn ARGS` (offline first) into
#   $CACHE/KEY/HASH once, sets BUILD to that directory; builds for other hashes
#   are removed. ARGS may name "$BUILD" (set before mvn runs).
#
# For a server (hive-metastore.sh, iceberg-rest.sh) a script sets NAME (its script
# name), WHAT (how its errors name it), POM, PORT, STATE, DATA, URL, ENV_LINE
# (what start and env print), MAIN (the main class, found in the process's command
# line), START_TIMEOUT and EXIT_WITH (a pid or empty), defines `launch` (starts
# the JVM in the background from $STATE, its classpath in $CLASSPATH_FILE) and
# `answers` (whether the server answers yet), then calls `service_main "$@"`.

SERVICES="${SLUICE_SERVICES:-/tmp/sluice-services}"
CACHE="${SLUICE_CACHE:-$HOME/.cache/sluice}"

die() {
  echo "${NAME:-$(basename "$0")}: $*" >&2
  exit 1
}

maven_build() {
  local key="$1" hash="$2"
  shift 2
  command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
  command -v java >/dev/null || die "java not found (apt-get install openjdk-17-jdk-headless)"
  BUILD="$CACHE/$key/$hash"
  [[ -f "$BUILD/ok" ]] && return 1
  mkdir -p "$BUILD"
  local args=() arg
  for arg in "$@"; do args+=("${arg//@BUILD@/$BUILD}"); done
  # Maven's runs here are short (resolving, a few classes to compile): C1 only
  # and the serial collector, as for the services, cost the least CPU.
  export MAVEN_OPTS="${MAVEN_OPTS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
  # Offline first, where Maven has a local repository to be offline with.
  if [[ ! -d "$HOME/.m2/repository" ]] || ! mvn -o -B -q "${args[@]}" >"$BUILD/build.log" 2>&1; then
    mvn -B -q "${args[@]}" >"$BUILD/build.log" 2>&1 ||
      { tail -n 40 "$BUILD/build.log" >&2; die "maven failed (log: $BUILD/build.log)"; }
  fi
  return 0
}

# Marks BUILD complete and removes the builds of older sources.
maven_built() {
  local key="$1" hash="$2"
  touch "$BUILD/ok"
  find "$CACHE/$key" -mindepth 1 -maxdepth 1 ! -name "$hash" -exec rm -rf {} +
}

# Resolves the server's classpath once per version of its pom; sets CLASSPATH_FILE.
build() {
  local key hash
  key="$(basename "$(dirname "$POM")")"
  hash="$(sha256sum <"$POM" | cut -c1-16)"
  if maven_build "$key" "$hash" -f "$POM" dependency:build-classpath \
    "-Dmdep.outputFile=@BUILD@/classpath.txt"; then
    maven_built "$key" "$hash"
  fi
  CLASSPATH_FILE="$BUILD/classpath.txt"
}

# Whether the server of $STATE is up, and stays up: one whose owner (EXIT_WITH
# when it started) has exited is going away, and a later start replaces it.
running() {
  [[ -f "$STATE/pid" && -f "$STATE/ready" ]] || return 1
  local pid owner
  owner="$(cat "$STATE/owner" 2>/dev/null || true)"
  [[ -z "$owner" ]] || kill -0 "$owner" 2>/dev/null || return 1
  pid="$(cat "$STATE/pid")"
  kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$MAIN" &&
    [[ "$(cat "$STATE/data")" == "$DATA" ]]
}

stop_quietly() {
  [[ -f "$STATE/pid" ]] || return 0
  local pid
  pid="$(cat "$STATE/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$STATE/pid" "$STATE/ready"
}

start() {
  mkdir -p "$STATE" "$DATA/warehouse"
  exec 9>"$STATE/lock"
  flock 9
  if running; then
    echo "$ENV_LINE"
    return 0
  fi
  stop_quietly
  build
  echo "$DATA" >"$STATE/data"
  echo "$EXIT_WITH" >"$STATE/owner"
  local t0=$SECONDS
  launch
  local pid=$!
  echo "$pid" >"$STATE/pid"
  if [[ -n "$EXIT_WITH" ]]; then
    (
      while kill -0 "$EXIT_WITH" 2>/dev/null; do sleep 1; done
      kill "$pid" 2>/dev/null || true
    ) </dev/null >/dev/null 2>&1 9>&- &
  fi
  until answers; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 40 "$STATE/server.log" >&2
      rm -f "$STATE/pid"
      die "$WHAT exited before it answered (log: $STATE/server.log)"
    fi
    if ((SECONDS - t0 >= START_TIMEOUT)); then
      tail -n 40 "$STATE/server.log" >&2
      stop_quietly
      die "$WHAT did not answer after ${START_TIMEOUT}s (log: $STATE/server.log)"
    fi
    sleep 0.2
  done
  touch "$STATE/ready"
  echo "$NAME: $URL up in $((SECONDS - t0))s (pid $pid, state $DATA)" >&2
  echo "$ENV_LINE"
}

stop() {
  [[ -d "$STATE" ]] || return 0
  exec 9>"$STATE/lock"
  flock 9
  stop_quietly
}

service_main() {
  case "${1:-}" in
    start) start ;;
    stop) stop ;;
    env) running || die "no $WHAT on port $PORT (run: $0 start)"; echo "$ENV_LINE" ;;
    build) build && echo "$CLASSPATH_FILE" ;;
    *) die "usage: $0 start|stop|env|build" ;;
  esac
}
