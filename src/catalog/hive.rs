//! A Hive Metastore client over Thrift (`thrift://HOST:PORT`): the table
//! (`get_table_req`), its partitions (`get_partitions`), and the databases
//! and tables that name close matches (`get_all_databases`,
//! `get_all_tables`). The table's storage descriptor says where it is and
//! in which format; its parameters say when it is really an Iceberg or a
//! Delta table, or a Spark datasource table (whose location is the serde's
//! `path`).
//!
//! A Kerberized metastore (`hive.metastore.sasl.enabled=true`) is spoken to
//! over Thrift's SASL transport with Kerberos ([`super::sasl`]): always when
//! `--catalog-principal` names its principal, else when it turns a plain call
//! down (with the principal `hive/_HOST@REALM`). The credentials are HDFS's:
//! the ticket cache or the keytab login.

use connectors::Report;
use std::time::Duration;

use connectors::store::gssapi::Initiator;
use connectors::store::kerberos::KerberosError;

use super::sasl::{self, SaslError};
use super::thrift::{Arg, Connection, ThriftError, Value};
use super::{close_matches, store_url, CatalogError, CatalogTable, HivePartition, TableName};

/// How long connecting, and each read and write, may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The database a bare table name is in.
const DEFAULT_DATABASE: &str = "default";

/// What a metastore that hangs up on a plain Thrift call most likely wants.
const NO_SASL: &str = "the metastore closed the connection without answering: it likely \
    requires a framed transport (hive.metastore.thrift.framed.transport.enabled), which \
    sluice does not speak (Thrift's unframed binary protocol, and its SASL transport with \
    Kerberos: pass --catalog-principal for a Kerberized metastore that does not say so)";

/// Whether the peer hung up on a call it had accepted (what a SASL or
/// framed server does with a plain Thrift message).
fn closed_without_answer(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
    )
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Looks `name` up in the metastore at `uri` (`thrift://HOST:PORT`);
/// `principal` is `--catalog-principal` (the metastore is Kerberized).
pub async fn load(
    uri: &str,
    name: &TableName,
    principal: Option<&str>,
) -> Result<CatalogTable, CatalogError> {
    let uri = uri.to_string();
    let name = name.clone();
    let principal = principal.map(str::to_string);
    tokio::task::spawn_blocking(move || load_blocking(&uri, &name, principal.as_deref()))
        .await
        .map_err(|e| CatalogError::Protocol {
            catalog: String::new(),
            reason: Report(&e).to_string(),
        })?
}

/// The error a failed call to the metastore at `uri` is.
fn call_failed(uri: &str, e: ThriftError) -> CatalogError {
    match e {
        ThriftError::Io(io) if closed_without_answer(&io) => CatalogError::Protocol {
            catalog: uri.to_string(),
            reason: NO_SASL.to_string(),
        },
        ThriftError::Io(io) if timed_out(&io) => CatalogError::Unreachable {
            catalog: uri.to_string(),
            reason: format!("no answer within {}s", TIMEOUT.as_secs()),
        },
        ThriftError::Io(io) => CatalogError::Unreachable {
            catalog: uri.to_string(),
            reason: io.to_string(),
        },
        ThriftError::Sasl {
            source: SaslError::Kerberos { source },
        } => CatalogError::Kerberos {
            catalog: uri.to_string(),
            source,
        },
        other => CatalogError::Protocol {
            catalog: uri.to_string(),
            reason: Report(&other).to_string(),
        },
    }
}

/// Connects to the metastore and calls `method`: over SASL with Kerberos
/// when `principal` is given, else plainly, and over SASL (with the default
/// principal) when the metastore turns the plain call down (SASL's refusal,
/// or a hang-up: a SASL server closes the connection on a plain call). When
/// the metastore does not speak SASL either, the hang-up is what is said.
fn connect_and_call(
    uri: &str,
    (host, port): (&str, u16),
    principal: Option<&str>,
    method: &str,
    args: &[Arg],
) -> Result<(Connection, Value), CatalogError> {
    let Some(principal) = principal else {
        let mut conn = Connection::connect(host, port, TIMEOUT).map_err(|e| call_failed(uri, e))?;
        match conn.call(method, args) {
            Ok(reply) => return Ok((conn, reply)),
            Err(ThriftError::SaslRequired) => {}
            Err(ThriftError::Io(io)) if closed_without_answer(&io) => {}
            Err(e) => return Err(call_failed(uri, e)),
        }
        tracing::debug!(
            catalog = uri,
            "the metastore turned a plain call down: SASL"
        );
        let service = sasl::service_principal(sasl::DEFAULT_PRINCIPAL, host);
        return call_sasl((host, port), uri, &service, method, args).map_err(
            |(e, target)| match e {
                ThriftError::Io(_)
                | ThriftError::Protocol(_)
                | ThriftError::Sasl {
                    source: SaslError::Protocol(_),
                } => CatalogError::Protocol {
                    catalog: uri.to_string(),
                    reason: NO_SASL.to_string(),
                },
                e => match sasl_failed(uri, e, &target) {
                    CatalogError::Kerberos { source, .. } => CatalogError::KerberosAsked {
                        catalog: uri.to_string(),
                        source,
                    },
                    other => other,
                },
            },
        );
    };
    let service = sasl::service_principal(principal, host);
    call_sasl((host, port), uri, &service, method, args)
        .map_err(|(e, target)| sasl_failed(uri, e, &target))
}

/// Connects over SASL with Kerberos to the metastore, whose principal is
/// `service`, and calls `method`; a failure comes with the principal as
/// Kerberos read it.
fn call_sasl(
    (host, port): (&str, u16),
    uri: &str,
    service: &str,
    method: &str,
    args: &[Arg],
) -> Result<(Connection, Value), (ThriftError, String)> {
    let gss = Initiator::new(uri, service).map_err(|e| {
        (
            ThriftError::Sasl {
                source: SaslError::Kerberos { source: e },
            },
            service.to_string(),
        )
    })?;
    let target = gss.target().to_string();
    let mut conn =
        Connection::connect_sasl(host, port, TIMEOUT, gss).map_err(|e| (e, target.clone()))?;
    let reply = conn.call(method, args).map_err(|e| (e, target.clone()))?;
    tracing::debug!(
        catalog = uri,
        principal = %target,
        qop = conn.qop().map(sasl::Qop::name),
        "authenticated to the metastore with Kerberos"
    );
    Ok((conn, reply))
}

/// The error a failed SASL connection or call to the metastore at `uri` is,
/// naming the principal `target` a ticket was asked for where it may be wrong.
fn sasl_failed(uri: &str, e: ThriftError, target: &str) -> CatalogError {
    match e {
        // A ticket for another service than the metastore's, most likely.
        ThriftError::Sasl {
            source: refused @ SaslError::Refused(_),
        } => CatalogError::Protocol {
            catalog: uri.to_string(),
            reason: format!(
                "{refused} (the ticket was for {target}: --catalog-principal names the metastore's principal)"
            ),
        },
        e => match call_failed(uri, e) {
            // Kerberos' own words, and the principal it was asked for.
            CatalogError::Kerberos {
                catalog,
                source: KerberosError::Other { url, detail },
            } => CatalogError::Kerberos {
                catalog,
                source: KerberosError::Other {
                    url,
                    detail: format!(
                        "{detail} (the metastore's principal {target}: --catalog-principal names it)"
                    ),
                },
            },
            other => other,
        },
    }
}

/// The table `name` as the metastore at `uri` describes it, with its partitions.
fn load_blocking(
    uri: &str,
    name: &TableName,
    principal: Option<&str>,
) -> Result<CatalogTable, CatalogError> {
    let (host, port) = host_port(uri)?;
    let database = database_of(name)?;
    let failed = |e: ThriftError| call_failed(uri, e);
    let request = vec![
        Arg::Str(1, database.clone()),
        Arg::Str(2, name.table.clone()),
    ];
    let (mut conn, reply) = connect_and_call(
        uri,
        (&host, port),
        principal,
        "get_table_req",
        &[Arg::Struct(1, request)],
    )?;
    let Some(table) = reply.field(0).and_then(|r| r.field(1)) else {
        // o1 MetaException, o2 NoSuchObjectException.
        return Err(not_found(&mut conn, uri, &database, name).map_err(failed)?);
    };
    let partition_keys = fields_of(table.list(8));
    let partitions = if partition_keys.is_empty() {
        None
    } else {
        Some(table_partitions(&mut conn, uri, &database, name)?)
    };
    let described = describe(
        uri,
        &format!("{database}.{}", name.table),
        table,
        partition_keys,
        partitions,
    );
    if let Some(column) = unread_binary_column(&described, table) {
        return Err(CatalogError::Protocol {
            catalog: uri.to_string(),
            reason: format!(
                "table {} is stored as RCFile with LazyBinaryColumnarSerDe, and its column {column} is not a primitive type: sluice reads such a table's primitive columns only",
                described.name
            ),
        });
    }
    Ok(described)
}

/// The database of the table `name`: its namespace, or the default one.
fn database_of(name: &TableName) -> Result<String, CatalogError> {
    match name.namespace.as_slice() {
        [] => Ok(DEFAULT_DATABASE.to_string()),
        [db] => Ok(db.clone()),
        _ => Err(CatalogError::InvalidName {
            name: name.to_string(),
            reason: "a Hive Metastore names tables `table` or `database.table`".to_string(),
        }),
    }
}

/// The partitions of the partitioned table `name`: their values and locations.
fn table_partitions(
    conn: &mut Connection,
    uri: &str,
    database: &str,
    name: &TableName,
) -> Result<Vec<HivePartition>, CatalogError> {
    let reply = conn
        .call(
            "get_partitions",
            &[
                Arg::Str(1, database.to_string()),
                Arg::Str(2, name.table.clone()),
                Arg::I16(3, -1),
            ],
        )
        .map_err(|e| call_failed(uri, e))?;
    let list = match reply.field(0) {
        Some(Value::List(items)) => items.clone(),
        _ => {
            return Err(CatalogError::Protocol {
                catalog: uri.to_string(),
                reason: format!(
                    "get_partitions of {database}.{}: {}",
                    name.table,
                    exception_message(&reply)
                ),
            })
        }
    };
    Ok(list
        .iter()
        .map(|p| HivePartition {
            values: p.list(1).iter().filter_map(Value::as_string).collect(),
            location: p
                .field(6)
                .and_then(|sd| sd.str(2))
                .map(|l| store_url(&l))
                .unwrap_or_default(),
        })
        .collect())
}

/// What the metastore's table says: its format, location, and what to read.
fn describe(
    uri: &str,
    full_name: &str,
    table: &Value,
    partition_keys: Vec<(String, String)>,
    partitions: Option<Vec<HivePartition>>,
) -> CatalogTable {
    let params = table.string_map(9);
    let param = |key: &str| {
        params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.clone())
    };
    let sd = table.field(7);
    let serde = sd.and_then(|sd| sd.field(7));
    let serde_params = serde.map(|s| s.string_map(3)).unwrap_or_default();
    let sd_location = sd.and_then(|sd| sd.str(2)).unwrap_or_default();
    // Spark's datasource tables keep the real location in the serde's `path`.
    let location = serde_params
        .iter()
        .find(|(k, _)| k == "path")
        .map(|(_, v)| v.clone())
        .unwrap_or(sd_location);
    let location = store_url(&location);
    let provider = param("spark.sql.sources.provider").map(|p| p.to_ascii_lowercase());
    let input_format = sd.and_then(|sd| sd.str(3)).unwrap_or_default();
    let serde_lib = serde.and_then(|s| s.str(2)).unwrap_or_default();
    let (format, read_url) =
        if param("table_type").is_some_and(|t| t.eq_ignore_ascii_case("ICEBERG")) {
            let metadata = param("metadata_location").map(|m| store_url(&m));
            (
                "iceberg".to_string(),
                metadata.unwrap_or_else(|| location.clone()),
            )
        } else if provider.as_deref() == Some("delta") {
            ("delta".to_string(), location.clone())
        } else {
            (
                hive_format(provider.as_deref(), &input_format, &serde_lib),
                location.clone(),
            )
        };
    let columns = || fields_of(sd.map(|sd| sd.list(1)).unwrap_or_default());
    // SequenceFile values and RCFile fields are a text table's rows and
    // fields (LazySimpleSerDe, ColumnarSerDe), or LazyBinary.
    let text = match format.as_str() {
        "text" | "sequencefile" | "rcfile" => Some(delimited_text(&serde_params, &columns())),
        "csv" => Some(open_csv(&serde_params, &columns())),
        _ => None,
    };
    let binary_columnar = format == "rcfile"
        && serde_lib
            .to_ascii_lowercase()
            .contains("lazybinarycolumnar");
    CatalogTable {
        catalog: uri.to_string(),
        name: full_name.to_string(),
        format,
        location,
        read_url,
        storage: Vec::new(),
        partition_keys,
        partitions,
        text,
        binary_columnar,
    }
}

/// Hive's default field delimiter (`^A`).
const DEFAULT_FIELD_DELIMITER: u8 = 1;
/// Hive's default null text.
const DEFAULT_NULL_FORMAT: &str = "\\N";

/// How a text table's lines split into its columns, from its SerDe's
/// parameters as `LazySimpleSerDe` reads them: `field.delim`, else
/// `serialization.format`, else `^A`; `escape.delim`;
/// `serialization.null.format`, else `\N`.
fn delimited_text(
    serde_params: &[(String, String)],
    columns: &[(String, String)],
) -> connectors::format::DelimitedText {
    let param = |key: &str| {
        serde_params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let delimiter = param("field.delim")
        .or(param("serialization.format"))
        .and_then(serde_byte)
        .unwrap_or(DEFAULT_FIELD_DELIMITER);
    connectors::format::DelimitedText {
        delimiter,
        escape: param("escape.delim").and_then(serde_byte),
        quote: None,
        null: Some(
            param("serialization.null.format")
                .unwrap_or(DEFAULT_NULL_FORMAT)
                .to_string(),
        ),
        columns: columns
            .iter()
            .map(|(name, ty)| arrow::datatypes::Field::new(name, super::hive_column_type(ty), true))
            .collect(),
    }
}

/// How a CSV table's lines split into its columns, as `OpenCSVSerde` reads
/// them: `separatorChar` (default `,`), `quoteChar` (default `"`),
/// `escapeChar` (default `\`), no null text.
fn open_csv(
    serde_params: &[(String, String)],
    columns: &[(String, String)],
) -> connectors::format::DelimitedText {
    let char_param = |key: &str, default: u8| {
        serde_params
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.bytes().next())
            .unwrap_or(default)
    };
    connectors::format::DelimitedText {
        delimiter: char_param("separatorChar", b','),
        escape: Some(char_param("escapeChar", b'\\')),
        quote: Some(char_param("quoteChar", b'"')),
        null: None,
        columns: columns
            .iter()
            .map(|(name, ty)| arrow::datatypes::Field::new(name, super::hive_column_type(ty), true))
            .collect(),
    }
}

/// A delimiter parameter as Hive reads it (`LazyUtils.getByte`): a number
/// is the byte of that value (`1` is `^A`, `9` a tab), anything else its
/// first byte; empty is none.
fn serde_byte(value: &str) -> Option<u8> {
    if value.is_empty() {
        return None;
    }
    match value.parse::<i8>() {
        Ok(n) => Some(n as u8),
        Err(_) => value.bytes().next(),
    }
}

/// The format of a Hive or Spark datasource table.
fn hive_format(provider: Option<&str>, input_format: &str, serde_lib: &str) -> String {
    if let Some(p) = provider.filter(|p| *p != "hive") {
        return p.to_string();
    }
    let lower = |s: &str| s.to_ascii_lowercase();
    let (input, serde) = (lower(input_format), lower(serde_lib));
    if input.contains("parquet") || serde.contains("parquet") {
        "parquet".to_string()
    } else if input.contains("orc") || serde.contains("orc") {
        "orc".to_string()
    } else if serde.contains("opencsvserde") {
        "csv".to_string()
    } else if serde.contains("json") {
        "json".to_string()
    } else if input.contains("avro") || serde.contains("avro") {
        "avro".to_string()
    } else if input.contains("sequencefile") {
        "sequencefile".to_string()
    } else if input.contains("rcfile") || serde.contains("columnar") {
        "rcfile".to_string()
    } else {
        "text".to_string()
    }
}

/// The first column of a LazyBinary RCFile table whose type is not
/// primitive (a struct, array, map or union), which is not read.
fn unread_binary_column(described: &CatalogTable, table: &Value) -> Option<String> {
    if !described.binary_columnar {
        return None;
    }
    let columns = fields_of(table.field(7).map(|sd| sd.list(1)).unwrap_or_default());
    columns
        .into_iter()
        .find(|(_, ty)| ty.contains('<') || ty.trim().eq_ignore_ascii_case("uniontype"))
        .map(|(name, ty)| format!("{name} ({ty})"))
}

/// (name, Hive type) of each FieldSchema.
fn fields_of(list: &[Value]) -> Vec<(String, String)> {
    list.iter()
        .filter_map(|f| Some((f.str(1)?, f.str(2).unwrap_or_default())))
        .collect()
}

/// The message of the exception a result struct carries.
fn exception_message(result: &Value) -> String {
    match result {
        Value::Struct(fields) => fields
            .iter()
            .filter(|(id, _)| *id != 0)
            .find_map(|(_, e)| e.str(1))
            .unwrap_or_else(|| "no result".to_string()),
        _ => "no result".to_string(),
    }
}

/// The error for a table the metastore does not have: the database is
/// missing (close databases named) or the table is (close tables named).
fn not_found(
    conn: &mut Connection,
    uri: &str,
    database: &str,
    name: &TableName,
) -> Result<CatalogError, ThriftError> {
    let strings = |v: Value| -> Vec<String> {
        match v.field(0) {
            Some(Value::List(items)) => items.iter().filter_map(Value::as_string).collect(),
            _ => Vec::new(),
        }
    };
    let databases = strings(conn.call("get_all_databases", &[])?);
    if !databases.iter().any(|d| d.eq_ignore_ascii_case(database)) {
        return Ok(CatalogError::NoSuchNamespace {
            catalog: uri.to_string(),
            namespace: database.to_string(),
            close: close_matches(database, &databases),
        });
    }
    let tables: Vec<String> =
        strings(conn.call("get_all_tables", &[Arg::Str(1, database.to_string())])?)
            .into_iter()
            .map(|t| format!("{database}.{t}"))
            .collect();
    Ok(CatalogError::NoSuchTable {
        catalog: uri.to_string(),
        name: format!("{database}.{}", name.table),
        close: close_matches(&format!("{database}.{}", name.table), &tables),
    })
}

fn host_port(uri: &str) -> Result<(String, u16), CatalogError> {
    let invalid = |reason: &str| CatalogError::InvalidUri {
        uri: uri.to_string(),
        reason: reason.to_string(),
    };
    let rest = uri.split_once("://").map(|(_, r)| r).unwrap_or(uri);
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = authority
        .rsplit_once(':')
        .ok_or_else(|| invalid("a Hive Metastore URI is thrift://HOST:PORT"))?;
    let port = port
        .parse()
        .map_err(|_| invalid("the port must be a number"))?;
    Ok((host.trim_matches(['[', ']']).to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_come_from_the_provider_or_the_storage_descriptor() {
        assert_eq!(hive_format(Some("orc"), "", ""), "orc");
        let parquet = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat";
        assert_eq!(hive_format(Some("hive"), parquet, ""), "parquet");
        let text = "org.apache.hadoop.mapred.TextInputFormat";
        assert_eq!(
            hive_format(None, text, "org.apache.hadoop.hive.serde2.OpenCSVSerde"),
            "csv"
        );
        assert_eq!(
            hive_format(None, text, "org.apache.hive.hcatalog.data.JsonSerDe"),
            "json"
        );
        assert_eq!(
            hive_format(
                None,
                text,
                "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
            ),
            "text"
        );
        assert_eq!(
            hive_format(
                None,
                "org.apache.hadoop.mapred.SequenceFileInputFormat",
                "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
            ),
            "sequencefile"
        );
        assert_eq!(
            hive_format(
                None,
                "org.apache.hadoop.hive.ql.io.RCFileInputFormat",
                "org.apache.hadoop.hive.serde2.columnar.LazyBinaryColumnarSerDe"
            ),
            "rcfile"
        );
    }

    #[test]
    fn text_delimiters_are_read_as_lazy_simple_serde_reads_them() {
        let params = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let columns = vec![
            ("id".to_string(), "bigint".to_string()),
            ("price".to_string(), "decimal(10,2)".to_string()),
            ("tags".to_string(), "array<string>".to_string()),
        ];
        // ROW FORMAT DELIMITED FIELDS TERMINATED BY ','
        let text = delimited_text(
            &params(&[("field.delim", ","), ("serialization.format", ",")]),
            &columns,
        );
        assert_eq!(text.delimiter, b',');
        assert_eq!(text.null.as_deref(), Some("\\N"));
        assert_eq!(text.escape, None);
        assert_eq!(
            text.columns[1].data_type(),
            &arrow::datatypes::DataType::Decimal128(10, 2)
        );
        assert_eq!(
            text.columns[2].data_type(),
            &arrow::datatypes::DataType::Utf8
        );
        // Hive's default: serialization.format=1 is byte 1 (^A).
        let text = delimited_text(&params(&[("serialization.format", "1")]), &columns);
        assert_eq!(text.delimiter, 1);
        assert_eq!(delimited_text(&[], &columns).delimiter, 1);
        // A number is a byte value, a tab given as itself is a tab.
        let text = delimited_text(
            &params(&[
                ("field.delim", "9"),
                ("escape.delim", "\\"),
                ("serialization.null.format", ""),
            ]),
            &columns,
        );
        assert_eq!(text.delimiter, b'\t');
        assert_eq!(text.escape, Some(b'\\'));
        assert_eq!(text.null.as_deref(), Some(""));
        assert_eq!(
            delimited_text(&params(&[("field.delim", "\t")]), &columns).delimiter,
            b'\t'
        );
    }

    /// A metastore Table struct: its storage descriptor's columns, location,
    /// input format and SerDe.
    fn table_value(columns: &[(&str, &str)], input_format: &str, serde: &str) -> Value {
        let s = |v: &str| Value::Str(v.as_bytes().to_vec());
        let columns = columns
            .iter()
            .map(|(name, ty)| Value::Struct(vec![(1, s(name)), (2, s(ty))]))
            .collect();
        let serde_info = Value::Struct(vec![(2, s(serde)), (3, Value::Map(Vec::new()))]);
        let sd = Value::Struct(vec![
            (1, Value::List(columns)),
            (2, s("file:/warehouse/web.db/t")),
            (3, s(input_format)),
            (7, serde_info),
        ]);
        Value::Struct(vec![(7, sd), (9, Value::Map(Vec::new()))])
    }

    #[test]
    fn rcfile_and_sequencefile_tables_are_read_by_their_serde() {
        let rcfile = "org.apache.hadoop.hive.ql.io.RCFileInputFormat";
        let columns = [("id", "bigint"), ("d", "date")];
        let binary = "org.apache.hadoop.hive.serde2.columnar.LazyBinaryColumnarSerDe";
        let t = describe(
            "thrift://h:1",
            "web.t",
            &table_value(&columns, rcfile, binary),
            Vec::new(),
            None,
        );
        assert_eq!(t.format, "rcfile");
        assert!(t.binary_columnar);
        let text = t.text.as_ref().expect("typed columns");
        assert_eq!(
            text.columns[1].data_type(),
            &arrow::datatypes::DataType::Date32
        );
        assert_eq!(
            unread_binary_column(&t, &table_value(&columns, rcfile, binary)),
            None
        );
        let nested = [("id", "bigint"), ("tags", "array<string>")];
        let t = describe(
            "thrift://h:1",
            "web.t",
            &table_value(&nested, rcfile, binary),
            Vec::new(),
            None,
        );
        assert_eq!(
            unread_binary_column(&t, &table_value(&nested, rcfile, binary)).as_deref(),
            Some("tags (array<string>)")
        );
        let columnar = "org.apache.hadoop.hive.serde2.columnar.ColumnarSerDe";
        let t = describe(
            "thrift://h:1",
            "web.t",
            &table_value(&nested, rcfile, columnar),
            Vec::new(),
            None,
        );
        assert!(!t.binary_columnar);
        assert_eq!(
            unread_binary_column(&t, &table_value(&nested, rcfile, columnar)),
            None
        );
        let seq = "org.apache.hadoop.mapred.SequenceFileInputFormat";
        let lazy = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe";
        let t = describe(
            "thrift://h:1",
            "web.t",
            &table_value(&columns, seq, lazy),
            Vec::new(),
            None,
        );
        assert_eq!(t.format, "sequencefile");
        assert_eq!(t.text.as_ref().map(|d| d.delimiter), Some(1));
        let mut options = connectors::DatasetOptions::default();
        t.apply(&mut options);
        assert_eq!(options.format, Some(connectors::Format::Sequencefile));
        assert!(options.format_options.delimited.is_some());
    }

    #[test]
    fn uris_give_host_and_port() {
        assert_eq!(
            host_port("thrift://hms:9083").ok(),
            Some(("hms".to_string(), 9083))
        );
        assert!(host_port("thrift://hms").is_err());
    }
}
