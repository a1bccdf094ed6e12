#!/usr/bin/env bash
# A real HDFS for the tests: a MiniDFSCluster (hadoop-client-minicluster, see
# tests/services/minidfs/) run in the background, one per state directory.
#
#   tests/services/hdfs.sh start      plain cluster, namenode RPC on 127.0.0.1:PORT
#   tests/services/hdfs.sh start-ha   HA pair, nameservice `ns` (namenodes on PORT, PORT+1)
#   tests/services/hdfs.sh stop | stop-ha | env | env-ha
#   tests/services/hdfs.sh start-secure [--protection authentication|integrity|privacy]
#                                     Kerberized cluster (default privacy) with its MiniKdc:
#                                     block access tokens, SASL RPC and data-transfer
#                                     protection at that level
#   tests/services/hdfs.sh stop-secure | env-secure [--protection LEVEL]
#   tests/services/hdfs.sh start-kdc | stop-kdc | env-kdc
#                                     the MiniKdc alone (no HDFS), for other Kerberized
#                                     services of the tests (hive-metastore.sh start-secure)
#   tests/services/hdfs.sh restart-namenode | restart-namenode-ha |
#                          restart-namenode-secure [--protection LEVEL]
#                                     restarts the running cluster's namenode(s) on the same
#                                     ports and data (clients must connect, and authenticate,
#                                     anew); returns once the datanodes are back
#   tests/services/hdfs.sh restart-datanode-ha
#                                     restarts the HA cluster's datanode on another port
#                                     (block locations a client kept no longer reach it)
#   tests/services/hdfs.sh dfsadmin ARGS...   Hadoop's DFSAdmin on the plain cluster
#   tests/services/hdfs.sh put LOCAL_DIR URL  Hadoop's own client (`hdfs dfs -put`) copies a
#                                     local directory into a running cluster, as the job
#                                     that wrote the data would have
#   tests/services/hdfs.sh fetchdt [ARGS] FILE  Hadoop's `hdfs fetchdt`: a delegation token
#                                     file for the cluster
#   put and fetchdt talk to the cluster HADOOP_CONF_DIR describes (default: the plain
#   one); on a secure one they log in from SLUICE_KEYTAB as SLUICE_PRINCIPAL, with
#   KRB5_CONFIG, all as start-secure prints them.
#
# `start` prints, once the cluster answers, lines KEY=VALUE on stdout:
#   SLUICE_HDFS_URL=hdfs://127.0.0.1:PORT
#   HADOOP_CONF_DIR=<state>/conf          (core-site.xml and hdfs-site.xml for clients;
#                                          the plain one also mounts viewfs://sluice/warehouse
#                                          on hdfs://127.0.0.1:PORT/sluice-tests)
# `start-secure` prints SLUICE_HDFS_URL and HADOOP_CONF_DIR too, and
#   KRB5_CONFIG=<state>/conf/krb5.conf       (the realm and its KDC, for MIT and Java)
#   SLUICE_KEYTAB=<state>/kdc/sluice.keytab  (the keytab of a user principal)
#   SLUICE_PRINCIPAL=sluice@EXAMPLE.COM
# `start-kdc` prints KRB5_CONFIG, SLUICE_KEYTAB and SLUICE_PRINCIPAL likewise,
#   HADOOP_CONF_DIR (a core-site.xml saying Kerberos), and
#   SLUICE_HIVE_KEYTAB=<state>/kdc/hive.keytab  (the keys of the metastore's principal)
#   SLUICE_HIVE_PRINCIPAL=hive/localhost@EXAMPLE.COM
# The KDC's tickets live SLUICE_KDC_TICKET_LIFETIME seconds (default 60).
# It is idempotent: when the cluster is already up it only prints them.  Everything
# else (build progress, the cluster's own log on failure) goes to stderr.
#
# Environment:
#   SLUICE_SERVICES            state root (default /tmp/sluice-services); the cluster
#                              lives in $SLUICE_SERVICES/hdfs (or hdfs-ha): pid, logs,
#                              conf/, data/
#   SLUICE_CACHE               build cache root (default ~/.cache/sluice): the built
#                              launcher and its classpath, keyed by the sources' hash
#   SLUICE_HDFS_PORT           namenode RPC port (HA: it and the next). Default: one free
#                              when the cluster starts (for HA two in a row), recorded in
#                              <state>/port, where a later command of the same state root
#                              finds it; so runs with state roots of their own (as
#                              tests/run.sh and the tests make them) never meet
#   SLUICE_HDFS_START_TIMEOUT  seconds to wait for "Ready!" (default 180)
#   SLUICE_HDFS_EXIT_WITH      a pid: the cluster stops when that process exits
#   SLUICE_HDFS_BLOCK_SIZE     block size in bytes (default 1048576: files of a few MB
#                              span several blocks, as large files do on a real cluster)
#   SLUICE_HDFS_DATANODE_ADDRESS  HOST:PORT the (one) datanode listens on; the namenode
#                              still gives clients 127.0.0.1 and that port, so a proxy on
#                              127.0.0.1:PORT stands in front of it (bench/remote.sh)
#                              (used by test fixtures that start it themselves)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NAME=hdfs.sh
# shellcheck source=tests/services/java.sh
source "$HERE/java.sh"
PROJECT="$HERE/minidfs"
START_TIMEOUT="${SLUICE_HDFS_START_TIMEOUT:-180}"

# Sets STATE, PORT, URL and MODE_ARGS for the plain or the HA cluster.
select_mode() {
  case "$1" in
    plain)
      STATE="$SERVICES/hdfs"
      PORT="${SLUICE_HDFS_PORT:-}"
      URL="hdfs://127.0.0.1:@PORT@"
      URL_KEY="SLUICE_HDFS_URL"
      MODE_ARGS=()
      ;;
    ha)
      STATE="$SERVICES/hdfs-ha"
      PORT="${SLUICE_HDFS_PORT:-}"
      URL="hdfs://ns"
      URL_KEY="SLUICE_HDFS_HA_URL"
      MODE_ARGS=(--ha)
      ;;
    secure)
      case "$PROTECTION" in
        privacy | integrity | authentication) PORT="${SLUICE_HDFS_PORT:-}" ;;
        *) die "--protection must be authentication, integrity or privacy, not '$PROTECTION'" ;;
      esac
      STATE="$SERVICES/hdfs-secure-$PROTECTION"
      URL="hdfs://127.0.0.1:@PORT@"
      URL_KEY="SLUICE_HDFS_URL"
      MODE_ARGS=(--secure-dir "$STATE/kdc" --protection "$PROTECTION"
        --ticket-lifetime "${SLUICE_KDC_TICKET_LIFETIME:-60}")
      ;;
    kdc)
      STATE="$SERVICES/kdc"
      PORT=0
      URL="the MiniKdc"
      URL_KEY=""
      MODE_ARGS=(--kdc-only --secure-dir "$STATE/kdc"
        --ticket-lifetime "${SLUICE_KDC_TICKET_LIFETIME:-60}")
      ;;
  esac
}

# Whether TCP port $1 of 127.0.0.1 is free now.
port_free() {
  python3 -c 'import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)' "$1"
}

# A TCP port of 127.0.0.1 free now, and with --pair the next one too.
free_port() {
  local port
  for _ in $(seq 1 50); do
    port="$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')"
    if [[ "${1:-}" != --pair ]] || { ((port < 65535)) && port_free $((port + 1)); }; then
      echo "$port"
      return 0
    fi
  done
  die "no two free ports in a row"
}

# Sets PORT (the one asked for in SLUICE_HDFS_PORT, the running cluster's, or a
# free one: two in a row for HA) and the URL holding it. Called under the
# state's lock, or where a cluster runs (its port is in $STATE/port).
choose_port() {
  if [[ -z "$PORT" ]]; then
    if running && [[ -s "$STATE/port" ]]; then
      PORT="$(cat "$STATE/port")"
    elif [[ "$MODE" == ha ]]; then
      PORT="$(free_port --pair)"
    else
      PORT="$(free_port)"
    fi
  fi
  URL="${URL//@PORT@/$PORT}"
}

# Reads `--protection LEVEL` (the only option of the secure commands) into PROTECTION.
PROTECTION=privacy
MODE=plain
parse_protection() {
  while (($#)); do
    case "$1" in
      --protection)
        (($# >= 2)) || die "--protection needs a value"
        PROTECTION="$2"
        shift 2
        ;;
      --protection=*)
        PROTECTION="${1#--protection=}"
        shift
        ;;
      *) die "unknown option $1" ;;
    esac
  done
}

# Builds the launcher once per version of its sources; sets BUILD (the directory
# holding minidfs.jar, classpath.txt and webapps/).
build() {
  local hash
  hash="$(cat "$PROJECT/pom.xml" "$PROJECT"/src/main/java/sluice/minidfs/*.java | sha256sum | cut -c1-16)"
  local t0=$SECONDS
  maven_build minidfs "$hash" -f "$PROJECT/pom.xml" "-Dminidfs.build.dir=@BUILD@/target" \
    package dependency:build-classpath "-Dmdep.outputFile=@BUILD@/classpath.txt" || return 0
  echo "hdfs.sh: built the MiniDFSCluster launcher into $BUILD" >&2
  cp "$BUILD/target/minidfs-1.0.jar" "$BUILD/minidfs.jar"
  # The web UIs load from the shaded jar; served from a plain directory they start
  # seconds sooner (nothing to unpack).
  local mini
  mini="$(tr ':' '\n' <"$BUILD/classpath.txt" | grep -m1 'hadoop-client-minicluster')" ||
    die "hadoop-client-minicluster is not on the classpath"
  (cd "$BUILD" && rm -rf webapps && jar xf "$mini" webapps)
  maven_built minidfs "$hash"
  echo "hdfs.sh: built in $((SECONDS - t0))s" >&2
}

# Whether the cluster of $STATE is up, and stays up: one whose owner
# (SLUICE_HDFS_EXIT_WITH when it started) has exited is going away, and a later
# start replaces it.
running() {
  [[ -f "$STATE/pid" && -f "$STATE/ready" && -f "$STATE/conf/core-site.xml" ]] || return 1
  local pid owner
  owner="$(cat "$STATE/owner" 2>/dev/null || true)"
  [[ -z "$owner" ]] || kill -0 "$owner" 2>/dev/null || return 1
  pid="$(cat "$STATE/pid")"
  kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'sluice.minidfs.Main'
}

print_env() {
  if [[ -n "$URL_KEY" ]]; then echo "$URL_KEY=$URL"; fi
  echo "HADOOP_CONF_DIR=$STATE/conf"
  if [[ "$MODE" == kdc ]]; then
    echo "SLUICE_HIVE_KEYTAB=$STATE/kdc/hive.keytab"
    echo "SLUICE_HIVE_PRINCIPAL=hive/localhost@$(sed -n 's/^Principal: [^@]*@//p' "$STATE/stdout.log")"
  fi
  if [[ "$MODE" == secure || "$MODE" == kdc ]]; then
    echo "KRB5_CONFIG=$STATE/conf/krb5.conf"
    echo "SLUICE_KEYTAB=$STATE/kdc/sluice.keytab"
    echo "SLUICE_PRINCIPAL=$(sed -n 's/^Principal: //p' "$STATE/stdout.log")"
  fi
}

start() {
  MODE="$1"
  select_mode "$1"
  mkdir -p "$STATE"
  # One starter at a time per state dir (tests and scripts may race).
  exec 9>"$STATE/lock"
  flock 9
  choose_port
  if running; then
    print_env
    return 0
  fi
  stop_quietly
  build
  rm -rf "$STATE/data" "$STATE/conf" "$STATE/kdc" "$STATE/ready" "$STATE/stdout.log" "$STATE/control"
  mkfifo "$STATE/control"
  local args=(--base-dir "$STATE/data" --conf-dir "$STATE/conf" --port "$PORT"
    --control "$STATE/control" "${MODE_ARGS[@]}")
  if [[ -n "${SLUICE_HDFS_EXIT_WITH:-}" ]]; then
    args+=(--exit-with "$SLUICE_HDFS_EXIT_WITH")
  fi
  echo "${SLUICE_HDFS_EXIT_WITH:-}" >"$STATE/owner"
  [[ -z "${SLUICE_HDFS_BLOCK_SIZE:-}" ]] || args+=(--block-size "$SLUICE_HDFS_BLOCK_SIZE")
  [[ -z "${SLUICE_HDFS_DATANODE_ADDRESS:-}" ]] ||
    args+=(--datanode-address "$SLUICE_HDFS_DATANODE_ADDRESS")
  local t0=$SECONDS
  # setsid: the cluster outlives the shell that started it and ignores its Ctrl-C.
  # The pid file is the java process itself: setsid execs it in place.
  setsid java -Xmx768m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    -Djava.net.preferIPv4Stack=true \
    -Dorg.slf4j.simpleLogger.showDateTime=true \
    -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS \
    -cp "$BUILD:$BUILD/minidfs.jar:$(cat "$BUILD/classpath.txt")" \
    sluice.minidfs.Main "${args[@]}" \
    </dev/null >"$STATE/stdout.log" 2>"$STATE/cluster.log" 9>&- &
  local pid=$!
  echo "$pid" >"$STATE/pid"
  echo "$PORT" >"$STATE/port"
  while ! grep -q '^Ready!' "$STATE/stdout.log" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 40 "$STATE/cluster.log" >&2
      rm -f "$STATE/pid"
      die "the MiniDFSCluster exited before it was ready (log: $STATE/cluster.log)"
    fi
    if ((SECONDS - t0 >= START_TIMEOUT)); then
      tail -n 40 "$STATE/cluster.log" >&2
      stop_quietly
      die "the MiniDFSCluster was not ready after ${START_TIMEOUT}s (log: $STATE/cluster.log)"
    fi
    sleep 0.2
  done
  touch "$STATE/ready"
  echo "hdfs.sh: $URL up in $((SECONDS - t0))s (pid $pid, log $STATE/cluster.log)" >&2
  print_env
}

# Stops the cluster of the selected mode if it runs; waits for it to go.
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

stop() {
  MODE="$1"
  select_mode "$1"
  [[ -d "$STATE" ]] || return 0
  exec 9>"$STATE/lock"
  flock 9
  stop_quietly
}

# Restarts the namenode(s) of the running cluster through its control pipe and
# waits for the launcher's answer.
# restart_node namenode|datanode MODE: restarts that node of the cluster.
restart_node() {
  local node="$1"
  MODE="$2"
  select_mode "$2"
  [[ -d "$STATE" ]] || die "no HDFS running in $STATE"
  exec 9>"$STATE/lock"
  flock 9
  running || die "no HDFS running in $STATE"
  choose_port
  [[ -p "$STATE/control" ]] || die "the cluster in $STATE takes no commands (stop and start it)"
  local answers="^(Restarted $node|Control failed): "
  local before t0=$SECONDS pid
  pid="$(cat "$STATE/pid")"
  before="$(grep -cE "$answers" "$STATE/stdout.log" || true)"
  timeout 10 bash -c 'echo "restart-$2" >"$1"' _ "$STATE/control" "$node" ||
    die "the cluster in $STATE did not take the command"
  while (($(grep -cE "$answers" "$STATE/stdout.log" || true) <= before)); do
    kill -0 "$pid" 2>/dev/null || die "the MiniDFSCluster exited (log: $STATE/cluster.log)"
    if ((SECONDS - t0 >= START_TIMEOUT)); then
      die "the $node was not back after ${START_TIMEOUT}s (log: $STATE/cluster.log)"
    fi
    sleep 0.2
  done
  local answer
  answer="$(grep -E "$answers" "$STATE/stdout.log" | tail -n 1)"
  [[ "$answer" == Restarted* ]] || die "$answer (log: $STATE/cluster.log)"
  echo "hdfs.sh: $node of $URL restarted in $((SECONDS - t0))s" >&2
}

env_of() {
  MODE="$1"
  select_mode "$1"
  local how="start"
  [[ "$1" == ha ]] && how="start-ha"
  [[ "$1" == secure ]] && how="start-secure --protection $PROTECTION"
  [[ "$1" == kdc ]] && how="start-kdc"
  running || die "no HDFS running in $STATE (run: $0 $how)"
  choose_port
  print_env
}

case "${1:-}" in
  start) start plain ;;
  start-ha) start ha ;;
  stop) stop plain ;;
  stop-ha) stop ha ;;
  env) env_of plain ;;
  env-ha) env_of ha ;;
  start-secure) shift && parse_protection "$@" && start secure ;;
  stop-secure) shift && parse_protection "$@" && stop secure ;;
  env-secure) shift && parse_protection "$@" && env_of secure ;;
  start-kdc) start kdc ;;
  stop-kdc) stop kdc ;;
  env-kdc) env_of kdc ;;
  restart-namenode) restart_node namenode plain ;;
  restart-namenode-ha) restart_node namenode ha ;;
  restart-namenode-secure) shift && parse_protection "$@" && restart_node namenode secure ;;
  restart-datanode-ha) restart_node datanode ha ;;
  put | fetchdt)
    # Hadoop's own client, as the user of the cluster HADOOP_CONF_DIR describes.
    tool="$1"
    shift
    build
    conf="${HADOOP_CONF_DIR:-$SERVICES/hdfs/conf}"
    [[ -f "$conf/core-site.xml" ]] || die "no core-site.xml in $conf (start a cluster first)"
    java_args=(-Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true)
    if [[ -n "${KRB5_CONFIG:-}" ]]; then
      java_args+=("-Djava.security.krb5.conf=$KRB5_CONFIG")
    fi
    exec java "${java_args[@]}" -cp "$conf:$BUILD/minidfs.jar:$(cat "$BUILD/classpath.txt")" \
      sluice.minidfs.Client "$tool" "$@"
    ;;
  build) build && echo "$BUILD" ;;
  dfsadmin)
    # Hadoop's own admin tool against the plain cluster, e.g. `dfsadmin -safemode enter`.
    shift
    MODE=plain
    select_mode plain
    running || die "no HDFS running in $STATE (run: $0 start)"
    choose_port
    build
    exec java -cp "$BUILD/minidfs.jar:$(cat "$BUILD/classpath.txt")" \
      org.apache.hadoop.hdfs.tools.DFSAdmin -fs "$URL" "$@"
    ;;
  *) die "usage: $0 start|start-ha|start-secure|start-kdc|stop|stop-ha|stop-secure|stop-kdc|env|env-ha|env-secure|env-kdc|restart-namenode[-ha|-secure]|restart-datanode-ha|build|dfsadmin ARGS...|put LOCAL_DIR URL|fetchdt [ARGS] FILE" ;;
esac
