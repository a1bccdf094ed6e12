#!/usr/bin/env bash
# A real Hive Metastore for the tests: the standalone metastore 4.0.1
# (hive-standalone-metastore-server, see tests/services/hive-metastore/pom.xml) with
# embedded Derby, run in the background; its tables' files on the local file system.
#
#   tests/services/hive-metastore.sh start   starts it (idempotent), prints KEY=VALUE lines:
#                                            SLUICE_HIVE_METASTORE_URI=thrift://127.0.0.1:PORT
#   tests/services/hive-metastore.sh stop | env | build
#   tests/services/hive-metastore.sh start-secure [--protection authentication|integrity|privacy]
#                                            Kerberized: SASL/GSSAPI (hive.metastore.sasl.enabled)
#                                            at that quality of protection (hadoop.rpc.protection,
#                                            default privacy), its principal hive/localhost in
#                                            the MiniKdc of `hdfs.sh start-kdc` (started too); on
#                                            port 19183 (privacy), 19184 (integrity) or 19185
#                                            (authentication). Prints the URI and the KDC's lines
#                                            (KRB5_CONFIG, SLUICE_KEYTAB, SLUICE_PRINCIPAL, ...)
#   tests/services/hive-metastore.sh stop-secure | env-secure [--protection LEVEL]
#
# Environment:
#   SLUICE_HIVE_METASTORE_DIR  the metastore's state: metastore_db/ (Derby) and warehouse/
#                              (default $SLUICE_SERVICES/hive-metastore); a metastore
#                              started again on the same directory serves the same tables
#                              (one process at a time: Derby is embedded)
#   SLUICE_HIVE_METASTORE_PORT its port (default 19083; secure: see above)
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
PROTECTION=""
case "${1:-}" in
  *-secure)
    PROTECTION=privacy
    command="$1"
    shift
    while (($#)); do
      case "$1" in
        --protection) (($# >= 2)) || die "--protection needs a value"; PROTECTION="$2"; shift 2 ;;
        --protection=*) PROTECTION="${1#--protection=}"; shift ;;
        *) die "unknown option $1" ;;
      esac
    done
    case "$PROTECTION" in
      privacy) DEFAULT_PORT=19183 ;;
      integrity) DEFAULT_PORT=19184 ;;
      authentication) DEFAULT_PORT=19185 ;;
      *) die "--protection must be authentication, integrity or privacy, not '$PROTECTION'" ;;
    esac
    set -- "${command%-secure}"
    ;;
esac
PORT="${SLUICE_HIVE_METASTORE_PORT:-${DEFAULT_PORT:-19083}}"
STATE="$SERVICES/hive-metastore-$PORT"
DATA="${SLUICE_HIVE_METASTORE_DIR:-$SERVICES/hive-metastore}"
URL="thrift://127.0.0.1:$PORT"
START_TIMEOUT=120
NAME=hive-metastore.sh
WHAT="the metastore"
MAIN=HiveMetaStore
ENV_LINE="SLUICE_HIVE_METASTORE_URI=$URL"
EXIT_WITH="${SLUICE_HIVE_METASTORE_EXIT_WITH:-}"

# The secure metastore's KDC (hdfs.sh start-kdc): sets KRB5_CONFIG, HIVE_KEYTAB,
# HIVE_PRINCIPAL and KDC_ENV (its lines, printed with the URI).
kdc() {
  KDC_ENV="$(SLUICE_HDFS_EXIT_WITH="$EXIT_WITH" bash "$HERE/hdfs.sh" start-kdc)" ||
    die "the KDC did not start"
  KRB5_CONFIG="$(sed -n 's/^KRB5_CONFIG=//p' <<<"$KDC_ENV")"
  HIVE_KEYTAB="$(sed -n 's/^SLUICE_HIVE_KEYTAB=//p' <<<"$KDC_ENV")"
  HIVE_PRINCIPAL="$(sed -n 's/^SLUICE_HIVE_PRINCIPAL=//p' <<<"$KDC_ENV")"
  ENV_LINE="$ENV_LINE"$'\n'"$(grep -v '^HADOOP_CONF_DIR=' <<<"$KDC_ENV")"
}

# The properties that make the metastore Kerberized (none when PROTECTION is empty).
secure_properties() {
  [[ -n "$PROTECTION" ]] || return 0
  cat <<XML
  <property><name>hive.metastore.sasl.enabled</name><value>true</value></property>
  <property><name>hive.metastore.kerberos.keytab.file</name><value>$HIVE_KEYTAB</value></property>
  <property><name>hive.metastore.kerberos.principal</name><value>$HIVE_PRINCIPAL</value></property>
  <property><name>hadoop.security.authentication</name><value>kerberos</value></property>
  <property><name>hadoop.rpc.protection</name><value>$PROTECTION</value></property>
XML
}

launch() {
  mkdir -p "$STATE/conf"
  local java_args=()
  if [[ -n "$PROTECTION" ]]; then
    # Hadoop's own settings (UserGroupInformation reads core-site.xml).
    cat >"$STATE/conf/core-site.xml" <<XML
<configuration>
  <property><name>hadoop.security.authentication</name><value>kerberos</value></property>
  <property><name>hadoop.rpc.protection</name><value>$PROTECTION</value></property>
</configuration>
XML
    java_args+=("-Djava.security.krb5.conf=$KRB5_CONFIG")
  else
    rm -f "$STATE/conf/core-site.xml"
  fi
  cat >"$STATE/conf/metastore-site.xml" <<XML
<configuration>
  <property><name>metastore.thrift.port</name><value>$PORT</value></property>
  <property><name>javax.jdo.option.ConnectionURL</name><value>jdbc:derby:;databaseName=$DATA/metastore_db;create=true</value></property>
  <property><name>javax.jdo.option.ConnectionDriverName</name><value>org.apache.derby.jdbc.EmbeddedDriver</value></property>
  <property><name>metastore.schema.verification</name><value>false</value></property>
  <property><name>datanucleus.schema.autoCreateAll</name><value>true</value></property>
  <property><name>metastore.warehouse.dir</name><value>file://$DATA/warehouse</value></property>
  <property><name>metastore.event.db.notification.api.auth</name><value>false</value></property>
$(secure_properties)
</configuration>
XML
  (cd "$STATE" && exec setsid java -Xmx512m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    -Djava.net.preferIPv4Stack=true -Dderby.system.home="$STATE" "${java_args[@]}" \
    -cp "$STATE/conf:$(cat "$CLASSPATH_FILE")" org.apache.hadoop.hive.metastore.HiveMetaStore \
    </dev/null >"$STATE/stdout.log" 2>"$STATE/server.log" 9>&-) &
}

answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

if [[ -n "$PROTECTION" && "${1:-}" == start ]]; then
  kdc
  # A metastore whose keys the KDC (started anew) no longer knows is started anew.
  if [[ -f "$STATE/kdc-keytab" ]] && ! cmp -s "$STATE/kdc-keytab" "$HIVE_KEYTAB"; then
    stop
  fi
  mkdir -p "$STATE"
  cp "$HIVE_KEYTAB" "$STATE/kdc-keytab"
elif [[ -n "$PROTECTION" && "${1:-}" == env ]]; then
  KDC_ENV="$(bash "$HERE/hdfs.sh" env-kdc)" || die "no KDC (run: $0 start-secure)"
  ENV_LINE="$ENV_LINE"$'\n'"$(grep -v '^HADOOP_CONF_DIR=' <<<"$KDC_ENV")"
fi
service_main "$@"
