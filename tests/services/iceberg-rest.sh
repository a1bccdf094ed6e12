#!/usr/bin/env bash
# A real Iceberg REST catalog for the tests: the reference server (RESTCatalogServer
# from iceberg-open-api's test fixtures, see tests/services/iceberg-rest/pom.xml), run in
# the background over a JdbcCatalog in a SQLite file, its tables' files on the local
# file system.
#
#   tests/services/iceberg-rest.sh start    starts it (idempotent), prints KEY=VALUE lines:
#                                           SLUICE_ICEBERG_REST_URL=http://127.0.0.1:PORT
#   tests/services/iceberg-rest.sh stop | env | build
#
# Environment:
#   SLUICE_ICEBERG_REST_DIR    the catalog's state: catalog.db (SQLite) and warehouse/
#                              (default $SLUICE_SERVICES/iceberg-rest); a catalog started
#                              again on the same directory serves the same tables
#   SLUICE_ICEBERG_REST_PORT   its port (default 18181)
#   SLUICE_SERVICES            state root (default /tmp/sluice-services): pid and logs
#                              live in $SLUICE_SERVICES/iceberg-rest-PORT
#   SLUICE_CACHE               cache root (default ~/.cache/sluice): the resolved
#                              classpath, keyed by the pom's hash
#   SLUICE_ICEBERG_REST_EXIT_WITH  a pid: the server stops when that process exits
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$HERE/iceberg-rest/pom.xml"
SERVICES="${SLUICE_SERVICES:-/tmp/sluice-services}"
CACHE="${SLUICE_CACHE:-$HOME/.cache/sluice}"
PORT="${SLUICE_ICEBERG_REST_PORT:-18181}"
STATE="$SERVICES/iceberg-rest-$PORT"
DATA="${SLUICE_ICEBERG_REST_DIR:-$SERVICES/iceberg-rest}"
URL="http://127.0.0.1:$PORT"
START_TIMEOUT=60

die() {
  echo "iceberg-rest.sh: $*" >&2
  exit 1
}

# Resolves the server's classpath once per version of the pom; sets CLASSPATH_FILE.
build() {
  command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
  command -v java >/dev/null || die "java not found (apt-get install openjdk-17-jdk-headless)"
  local hash
  hash="$(sha256sum <"$POM" | cut -c1-16)"
  local dir="$CACHE/iceberg-rest/$hash"
  CLASSPATH_FILE="$dir/classpath.txt"
  [[ -f "$dir/ok" ]] && return 0
  mkdir -p "$dir"
  local args=(-B -q -f "$POM" dependency:build-classpath "-Dmdep.outputFile=$CLASSPATH_FILE")
  if ! mvn -o "${args[@]}" >"$dir/build.log" 2>&1; then
    mvn "${args[@]}" >"$dir/build.log" 2>&1 ||
      { tail -n 40 "$dir/build.log" >&2; die "maven failed (log: $dir/build.log)"; }
  fi
  touch "$dir/ok"
  find "$CACHE/iceberg-rest" -mindepth 1 -maxdepth 1 ! -name "$hash" -exec rm -rf {} +
}

running() {
  [[ -f "$STATE/pid" && -f "$STATE/ready" ]] || return 1
  local pid
  pid="$(cat "$STATE/pid")"
  kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'RESTCatalogServer' &&
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
    echo "SLUICE_ICEBERG_REST_URL=$URL"
    return 0
  fi
  stop_quietly
  build
  echo "$DATA" >"$STATE/data"
  local t0=$SECONDS
  # The server reads its catalog's properties from CATALOG_* variables
  # (CATALOG_WAREHOUSE is `warehouse`, CATALOG_REST_PORT is `rest.port`).
  CATALOG_WAREHOUSE="file://$DATA/warehouse" \
    CATALOG_URI="jdbc:sqlite:file:$DATA/catalog.db" \
    CATALOG_JDBC_USER=sluice CATALOG_JDBC_PASSWORD=sluice \
    CATALOG_REST_PORT="$PORT" \
    setsid java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    -Djava.net.preferIPv4Stack=true \
    -cp "$(cat "$CLASSPATH_FILE")" org.apache.iceberg.rest.RESTCatalogServer \
    </dev/null >"$STATE/stdout.log" 2>"$STATE/server.log" 9>&- &
  local pid=$!
  echo "$pid" >"$STATE/pid"
  if [[ -n "${SLUICE_ICEBERG_REST_EXIT_WITH:-}" ]]; then
    (
      while kill -0 "$SLUICE_ICEBERG_REST_EXIT_WITH" 2>/dev/null; do sleep 1; done
      kill "$pid" 2>/dev/null || true
    ) </dev/null >/dev/null 2>&1 9>&- &
  fi
  until curl -sf -o /dev/null "$URL/v1/config" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 40 "$STATE/server.log" >&2
      rm -f "$STATE/pid"
      die "the REST catalog exited before it answered (log: $STATE/server.log)"
    fi
    if ((SECONDS - t0 >= START_TIMEOUT)); then
      tail -n 40 "$STATE/server.log" >&2
      stop_quietly
      die "the REST catalog did not answer after ${START_TIMEOUT}s (log: $STATE/server.log)"
    fi
    sleep 0.2
  done
  touch "$STATE/ready"
  echo "iceberg-rest.sh: $URL up in $((SECONDS - t0))s (pid $pid, state $DATA)" >&2
  echo "SLUICE_ICEBERG_REST_URL=$URL"
}

stop() {
  [[ -d "$STATE" ]] || return 0
  exec 9>"$STATE/lock"
  flock 9
  stop_quietly
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) running || die "no REST catalog on port $PORT (run: $0 start)"; echo "SLUICE_ICEBERG_REST_URL=$URL" ;;
  build) build && echo "$CLASSPATH_FILE" ;;
  *) die "usage: $0 start|stop|env|build" ;;
esac
