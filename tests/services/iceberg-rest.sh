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
# shellcheck source=tests/services/java.sh
source "$HERE/java.sh"
POM="$HERE/iceberg-rest/pom.xml"
PORT="${SLUICE_ICEBERG_REST_PORT:-18181}"
STATE="$SERVICES/iceberg-rest-$PORT"
DATA="${SLUICE_ICEBERG_REST_DIR:-$SERVICES/iceberg-rest}"
URL="http://127.0.0.1:$PORT"
START_TIMEOUT=60
NAME=iceberg-rest.sh
WHAT="the REST catalog"
MAIN=RESTCatalogServer
ENV_LINE="SLUICE_ICEBERG_REST_URL=$URL"
EXIT_WITH="${SLUICE_ICEBERG_REST_EXIT_WITH:-}"

launch() {
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
}

answers() {
  curl -sf -o /dev/null "$URL/v1/config" 2>/dev/null
}

service_main "$@"
