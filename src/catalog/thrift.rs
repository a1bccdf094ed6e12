//! The small part of Thrift's binary protocol a Hive Metastore client needs:
//! a call (strict message header, arguments as a struct of strings, structs
//! and i16s) over an unframed socket or Thrift's SASL transport
//! ([`super::sasl`]), and a generic decoder of the reply into [`Value`]s
//! picked apart by field id.

use std::io::{BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::sasl::{SaslError, SaslTransport};

/// The longest string or collection a reply may hold (a guard against a
/// peer that is no metastore).
const MAX_LEN: usize = 256 * 1024 * 1024;
const VERSION_1: u32 = 0x8001_0000;
const CALL: u32 = 1;
const REPLY: u32 = 2;
const EXCEPTION: u32 = 3;
/// The statuses of a SASL negotiation frame that end it (see [`super::sasl`]).
const SASL_BAD: u8 = 3;
const SASL_ERROR: u8 = 4;

/// Field types.
const T_STOP: u8 = 0;
const T_BOOL: u8 = 2;
const T_BYTE: u8 = 3;
const T_DOUBLE: u8 = 4;
const T_I16: u8 = 6;
const T_I32: u8 = 8;
const T_I64: u8 = 10;
const T_STRING: u8 = 11;
const T_STRUCT: u8 = 12;
const T_MAP: u8 = 13;
const T_SET: u8 = 14;
const T_LIST: u8 = 15;

/// A decoded Thrift value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// bool
    Bool(bool),
    /// byte, i16, i32 and i64
    Int(i64),
    /// double
    Double(f64),
    /// string or binary
    Str(Vec<u8>),
    /// a struct: (field id, value)
    Struct(Vec<(i16, Value)>),
    /// a list or set
    List(Vec<Value>),
    /// a map
    Map(Vec<(Value, Value)>),
}

impl Value {
    /// Field `id` of a struct.
    pub fn field(&self, id: i16) -> Option<&Value> {
        match self {
            Value::Struct(fields) => fields.iter().find(|(i, _)| *i == id).map(|(_, v)| v),
            _ => None,
        }
    }

    /// A string field.
    pub fn str(&self, id: i16) -> Option<String> {
        match self.field(id)? {
            Value::Str(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// A list field (empty when absent).
    pub fn list(&self, id: i16) -> &[Value] {
        match self.field(id) {
            Some(Value::List(items)) => items,
            _ => &[],
        }
    }

    /// A map<string,string> field (empty when absent).
    pub fn string_map(&self, id: i16) -> Vec<(String, String)> {
        match self.field(id) {
            Some(Value::Map(pairs)) => pairs
                .iter()
                .filter_map(|(k, v)| match (k, v) {
                    (Value::Str(k), Value::Str(v)) => Some((
                        String::from_utf8_lossy(k).into_owned(),
                        String::from_utf8_lossy(v).into_owned(),
                    )),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The value as a string, for list elements.
    pub fn as_string(&self) -> Option<String> {
        match self {
            Value::Str(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

/// An argument of a call.
pub enum Arg {
    /// A string field.
    Str(i16, String),
    /// An i16 field.
    I16(i16, i16),
    /// A struct field of string fields.
    Struct(i16, Vec<Arg>),
    /// A `list<string>` field.
    Strings(i16, Vec<String>),
    /// A bool field.
    Bool(i16, bool),
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ThriftError {
    /// Connecting, sending or receiving failed.
    #[error("{0}")]
    Io(std::io::Error),
    /// The SASL transport failed (Kerberos, the negotiation).
    #[error("the SASL transport failed")]
    Sasl {
        /// How it failed.
        #[source]
        source: SaslError,
    },
    /// The server answered a plain call with a SASL negotiation frame: it
    /// speaks Thrift's SASL transport only.
    #[error("the server speaks Thrift's SASL transport only")]
    SaslRequired,
    /// The peer answered something that is not a Thrift reply to the call.
    #[error("not a Thrift reply: {0}")]
    Protocol(String),
    /// The server refused the call (`TApplicationException`).
    #[error("the server refused {method}: {message}")]
    Application {
        /// The method.
        method: String,
        /// Its message.
        message: String,
    },
}

impl From<std::io::Error> for ThriftError {
    /// An I/O error, or the SASL failure a read of the SASL transport carried.
    fn from(e: std::io::Error) -> ThriftError {
        if e.get_ref().is_some_and(|inner| inner.is::<SaslError>()) {
            if let Some(Ok(sasl)) = e.into_inner().map(|inner| inner.downcast::<SaslError>()) {
                return ThriftError::Sasl { source: *sasl };
            }
            return ThriftError::Protocol("a SASL error lost on the way".to_string());
        }
        ThriftError::Io(e)
    }
}

impl From<SaslError> for ThriftError {
    fn from(e: SaslError) -> ThriftError {
        match e {
            SaslError::Io { cause, .. } => ThriftError::Io(cause),
            other => ThriftError::Sasl { source: other },
        }
    }
}

/// What carries the messages.
enum Transport {
    /// Thrift's unframed binary protocol over the socket.
    Plain {
        reader: BufReader<TcpStream>,
        writer: TcpStream,
    },
    /// Thrift's SASL transport.
    Sasl(Box<SaslTransport>),
}

impl Transport {
    fn send(&mut self, message: &[u8]) -> Result<(), ThriftError> {
        match self {
            Transport::Plain { writer, .. } => {
                writer.write_all(message)?;
                writer.flush()?;
                Ok(())
            }
            Transport::Sasl(sasl) => Ok(sasl.send(message)?),
        }
    }

    fn reader(&mut self) -> &mut dyn Read {
        match self {
            Transport::Plain { reader, .. } => reader,
            Transport::Sasl(sasl) => sasl.as_mut(),
        }
    }
}

/// A connection to a Thrift service over an unframed socket or Thrift's SASL
/// transport.
pub struct Connection {
    transport: Transport,
    seq: i32,
}

impl Connection {
    /// Connects to `host:port` within `timeout`; every read and write is
    /// bounded by `timeout` too.
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<Connection, ThriftError> {
        let stream = socket(host, port, timeout)?;
        Ok(Connection {
            transport: Transport::Plain {
                reader: BufReader::new(stream.try_clone()?),
                writer: stream,
            },
            seq: 0,
        })
    }

    /// Connects as [`Connection::connect`] does, then negotiates Thrift's SASL
    /// transport with Kerberos (`gss`: a context with the service's principal).
    pub fn connect_sasl(
        host: &str,
        port: u16,
        timeout: Duration,
        gss: connectors::store::gssapi::Initiator,
    ) -> Result<Connection, ThriftError> {
        let stream = socket(host, port, timeout)?;
        let sasl = SaslTransport::open(stream, gss)?;
        Ok(Connection {
            transport: Transport::Sasl(Box::new(sasl)),
            seq: 0,
        })
    }

    /// The SASL security layer, when the transport is SASL's.
    pub fn qop(&self) -> Option<super::sasl::Qop> {
        match &self.transport {
            Transport::Sasl(sasl) => Some(sasl.qop()),
            Transport::Plain { .. } => None,
        }
    }
}

/// A socket to `host:port`, connected within `timeout`, its reads and writes
/// bounded by it.
fn socket(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, ThriftError> {
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => {
                stream.set_read_timeout(Some(timeout))?;
                stream.set_write_timeout(Some(timeout))?;
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(ThriftError::Io(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the host name resolves to no address",
        )
    })))
}

impl Connection {
    /// Calls `method` with `args`; the reply's result struct.
    pub fn call(&mut self, method: &str, args: &[Arg]) -> Result<Value, ThriftError> {
        self.seq += 1;
        let mut out = Vec::new();
        out.extend_from_slice(&(VERSION_1 | CALL).to_be_bytes());
        write_str(&mut out, method.as_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        write_fields(&mut out, args);
        let plain = matches!(self.transport, Transport::Plain { .. });
        self.transport.send(&out)?;
        let mut reader = self.transport.reader();
        let header = read_u32(&mut reader)?;
        if header & 0xffff_0000 != VERSION_1 {
            // A SASL server answers a plain call with a BAD or ERROR frame.
            if plain && matches!((header >> 24) as u8, SASL_BAD | SASL_ERROR) {
                return Err(ThriftError::SaslRequired);
            }
            return Err(ThriftError::Protocol(format!("message header {header:#x}")));
        }
        let _name = read_bytes(&mut reader)?;
        let _seq = read_u32(&mut reader)?;
        let result = read_value(&mut reader, T_STRUCT, 0)?;
        match header & 0xff {
            REPLY => Ok(result),
            EXCEPTION => Err(ThriftError::Application {
                method: method.to_string(),
                message: result.str(1).unwrap_or_default(),
            }),
            other => Err(ThriftError::Protocol(format!("message type {other}"))),
        }
    }
}

fn write_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as i32).to_be_bytes());
    out.extend_from_slice(s);
}

fn write_fields(out: &mut Vec<u8>, args: &[Arg]) {
    for arg in args {
        match arg {
            Arg::Str(id, s) => {
                out.push(T_STRING);
                out.extend_from_slice(&id.to_be_bytes());
                write_str(out, s.as_bytes());
            }
            Arg::I16(id, v) => {
                out.push(T_I16);
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&v.to_be_bytes());
            }
            Arg::Struct(id, fields) => {
                out.push(T_STRUCT);
                out.extend_from_slice(&id.to_be_bytes());
                write_fields(out, fields);
            }
            Arg::Strings(id, items) => {
                out.push(T_LIST);
                out.extend_from_slice(&id.to_be_bytes());
                out.push(T_STRING);
                out.extend_from_slice(&(items.len() as i32).to_be_bytes());
                for item in items {
                    write_str(out, item.as_bytes());
                }
            }
            Arg::Bool(id, v) => {
                out.push(T_BOOL);
                out.extend_from_slice(&id.to_be_bytes());
                out.push(u8::from(*v));
            }
        }
    }
    out.push(T_STOP);
}

fn read_exact<const N: usize>(r: &mut impl Read) -> Result<[u8; N], ThriftError> {
    let mut buf = [0u8; N];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

fn read_u32(r: &mut impl Read) -> Result<u32, ThriftError> {
    Ok(u32::from_be_bytes(read_exact::<4>(r)?))
}

fn read_len(r: &mut impl Read) -> Result<usize, ThriftError> {
    let n = i32::from_be_bytes(read_exact::<4>(r)?);
    if n < 0 || n as usize > MAX_LEN {
        return Err(ThriftError::Protocol(format!("length {n}")));
    }
    Ok(n as usize)
}

fn read_bytes(r: &mut impl Read) -> Result<Vec<u8>, ThriftError> {
    let n = read_len(r)?;
    let mut buf = Vec::new();
    r.take(n as u64).read_to_end(&mut buf)?;
    if buf.len() != n {
        return Err(ThriftError::Protocol("a string cut short".to_string()));
    }
    Ok(buf)
}

fn read_value(r: &mut impl Read, ty: u8, depth: usize) -> Result<Value, ThriftError> {
    if depth > 64 {
        return Err(ThriftError::Protocol("nesting too deep".to_string()));
    }
    Ok(match ty {
        T_BOOL => Value::Bool(read_exact::<1>(r)?[0] != 0),
        T_BYTE => Value::Int(read_exact::<1>(r)?[0] as i8 as i64),
        T_I16 => Value::Int(i16::from_be_bytes(read_exact::<2>(r)?) as i64),
        T_I32 => Value::Int(i32::from_be_bytes(read_exact::<4>(r)?) as i64),
        T_I64 => Value::Int(i64::from_be_bytes(read_exact::<8>(r)?)),
        T_DOUBLE => Value::Double(f64::from_be_bytes(read_exact::<8>(r)?)),
        T_STRING => Value::Str(read_bytes(r)?),
        T_STRUCT => {
            let mut fields = Vec::new();
            loop {
                let field_type = read_exact::<1>(r)?[0];
                if field_type == T_STOP {
                    break;
                }
                let id = i16::from_be_bytes(read_exact::<2>(r)?);
                fields.push((id, read_value(r, field_type, depth + 1)?));
            }
            Value::Struct(fields)
        }
        T_MAP => {
            let [kt, vt] = read_exact::<2>(r)?;
            let n = read_len(r)?;
            let mut pairs = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                let k = read_value(r, kt, depth + 1)?;
                let v = read_value(r, vt, depth + 1)?;
                pairs.push((k, v));
            }
            Value::Map(pairs)
        }
        T_SET | T_LIST => {
            let et = read_exact::<1>(r)?[0];
            let n = read_len(r)?;
            let mut items = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                items.push(read_value(r, et, depth + 1)?);
            }
            Value::List(items)
        }
        other => return Err(ThriftError::Protocol(format!("field type {other}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_struct_round_trips_through_the_decoder() {
        let mut out = Vec::new();
        write_fields(
            &mut out,
            &[
                Arg::Str(1, "ads".into()),
                Arg::I16(3, -1),
                Arg::Struct(2, vec![Arg::Str(1, "x".into())]),
                Arg::Strings(4, vec!["a".into(), "b".into()]),
                Arg::Bool(5, true),
            ],
        );
        let value = read_value(&mut out.as_slice(), T_STRUCT, 0).expect("decodes");
        let strings: Vec<String> = value.list(4).iter().filter_map(Value::as_string).collect();
        assert_eq!(strings, ["a", "b"]);
        assert_eq!(value.field(5), Some(&Value::Bool(true)));
        assert_eq!(value.str(1).as_deref(), Some("ads"));
        assert_eq!(value.field(3), Some(&Value::Int(-1)));
        assert_eq!(value.field(2).and_then(|s| s.str(1)).as_deref(), Some("x"));
    }

    #[test]
    fn garbage_is_a_protocol_error_not_a_huge_allocation() {
        let bytes = [T_STRING, 0, 1, 0x7f, 0xff, 0xff, 0xff];
        let err = read_value(&mut bytes.as_slice(), T_STRUCT, 0).expect_err("refused");
        assert!(matches!(err, ThriftError::Protocol(_)), "{err}");
    }
}
