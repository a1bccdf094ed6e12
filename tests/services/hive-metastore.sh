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
# shellcheck source=tests/services/java.sh
source "$HERE/java.sh"
POM="$HERE/hive-metastore/pom.xml"
PORT="${SLUICE_HIVE_METASTORE_PORT:-19083}"
STATE="$SERVICES/hive-metastore-$PORT"
DATA="${SLUICE_HIVE_METASTORE_DIR:-$SERVICES/hive-metastore}"
URL="thrift://127.0.0.1:$PORT"
START_TIMEOUT=120
NAME=hive-metastore.sh
WHAT="the metastore"
MAIN=HiveMetaStore
ENV_LINE="SLUICE_HIVE_METASTORE_URI=$URL"
EXIT_WITH="${SLUICE_HIVE_METASTORE_EXIT_WITH:-}"

launch() {
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
}

answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

service_main "$@"
