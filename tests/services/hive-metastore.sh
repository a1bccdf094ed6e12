#!/usr/bin/env bash
# A real Hive Metastore for the tests: the standalone metastore 4.0.1
# (hive-standalone-metastore-server, see tests/services/hive-metastore/pom.xml) with
# embedded Derby, run in the background; its tables' files on the local file system.
#
#   tests/services/hive-metastore.sh start   starts it (idempotent), prints KEY=VALUE lines:
#                                            SLUICE_HIVE_METASTORE_URI=thrift://127.0.0.1:PORT
#   tests/services/hive-metastore.sh stop | env | build
#
# Environment:
#   SLUICE_HIVE_METASTORE_DIR  the metastore's state: metastore_db/ (Derby) and warehouse/
#                              (default $SLUICE_SERVICES/hive-metastore); a metastore
#                              started again on the same directory serves the same tables
#                              (one process at a time: Derby is embedded)
#   SLUICE_HIVE_METASTORE_PORT its port (default 19083)
#   SLUICE_SERVICES            state root (default /tmp/sluice-services): pid, logs and
#                              conf live in $SLUICE_SERVICES/hive-metastore-PORT
#   SLUICE_CACHE               cache root (default ~/.cache/sluice): the resolved
#                              classpath, keyed by the pom's hash
#   SLUICE_HIVE_METASTORE_EXIT_WITH  a pid: the metastore stops when that process exits
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$HERE/hive-metastore/pom.xml"
SERVICES="${SLUICE_SERVICES:-/tmp/sluice-services}"
CACHE="${SLUICE_CACHE:-$HOME/.cache/sluice}"
PORT="${SLUICE_HIVE_METASTORE_PORT:-19083}"
STATE="$SERVICES/hive-metastore-$PORT"
DATA="${SLUICE_HIVE_METASTORE_DIR:-$SERVICES/hive-metastore}"
URL="thrift://127.0.0.1:$PORT"
START_TIMEOUT=120

die() {
  echo "hive-metastore.sh: $*" >&2
  exit 1
}

# Resolves the server's classpath once per version of the pom; sets CLASSPATH_FILE.
build() {
  command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
  command -v java >/dev/null || die "java not found (apt-get install openjdk-17-jdk-headless)"
  local hash
  hash="$(sha256sum <"$POM" | cut -c1-16)"
  local dir="$CACHE/hive-metastore/$hash"
  CLASSPATH_FILE="$dir/classpath.txt"
  [[ -f "$dir/ok" ]] && return 0
  mkdir -p "$dir"
  local args=(-B -q -f "$POM" dependency:build-classpath "-Dmdep.outputFile=$CLASSPATH_FILE")
  if ! mvn -o "${args[@]}" >"$dir/build.log" 2>&1; then
    mvn "${args[@]}" >"$dir/build.log" 2>&1 ||
      { tail -n 40 "$dir/build.log" >&2; die "maven failed (log: $dir/build.log)"; }
  fi
  touch "$dir/ok"
  find "$CACHE/hive-metastore" -mindepth 1 -maxdepth 1 ! -name "$hash" -exec rm -rf {} +
}

running() {
  [[ -f "$STATE/pid" && -f "$STATE/ready" ]] || return 1
  local pid
  pid="$(cat "$STATE/pid")"
  kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'HiveMetaStore' &&
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
    echo "SLUICE_HIVE_METASTORE_URI=$URL"
    return 0
  fi
  stop_quietly
  build
  echo "$DATA" >"$STATE/data"
  local t0=$SECONDS
  mkdir -p "$STATE/conf"
  cat >"$STATE/conf/metastore-site.xml" <<XML
<configuration>
  <property><name>metastore.thrift.port</name><value>$PORT</value></property>
  <property><name>javax.jdo.option.ConnectionURL</name><value>jdbc:derby:;databaseName=$DATA/metastore_db;create=true</value></property>
  <property><name>javax.jdo.option.ConnectionDriverName</name><value>org.apache.derby.jdbc.EmbeddedDriver</value></property>
  <property><name>metastore.schema.verification</name><value>false</value></property>
  <property><name>datanucleus.schema.autoCreateAll</name><value>true</value></property>
  <property><name>metastore.warehouse.dir</name><value>file://$DATA/warehouse</value></property>
  <property><name>metastore.event.db.notification.api.auth</name><value>false</value></property>
</configuration>
XML
  (cd "$STATE" && exec setsid java -Xmx512m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    -Djava.net.preferIPv4Stack=true -Dderby.system.home="$STATE" \
    -cp "$STATE/conf:$(cat "$CLASSPATH_FILE")" org.apache.hadoop.hive.metastore.HiveMetaStore \
    </dev/null >"$STATE/stdout.log" 2>"$STATE/server.log" 9>&-) &
  local pid=$!
  echo "$pid" >"$STATE/pid"
  if [[ -n "${SLUICE_HIVE_METASTORE_EXIT_WITH:-}" ]]; then
    (
      while kill -0 "$SLUICE_HIVE_METASTORE_EXIT_WITH" 2>/dev/null; do sleep 1; done
      kill "$pid" 2>/dev/null || true
    ) </dev/null >/dev/null 2>&1 9>&- &
  fi
  until (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 40 "$STATE/server.log" >&2
      rm -f "$STATE/pid"
      die "the metastore exited before it answered (log: $STATE/server.log)"
    fi
    if ((SECONDS - t0 >= START_TIMEOUT)); then
      tail -n 40 "$STATE/server.log" >&2
      stop_quietly
      die "the metastore did not answer after ${START_TIMEOUT}s (log: $STATE/server.log)"
    fi
    sleep 0.2
  done
  touch "$STATE/ready"
  echo "hive-metastore.sh: $URL up in $((SECONDS - t0))s (pid $pid, state $DATA)" >&2
  echo "SLUICE_HIVE_METASTORE_URI=$URL"
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
  env) running || die "no metastore on port $PORT (run: $0 start)"; echo "SLUICE_HIVE_METASTORE_URI=$URL" ;;
  build) build && echo "$CLASSPATH_FILE" ;;
  *) die "usage: $0 start|stop|env|build" ;;
esac
