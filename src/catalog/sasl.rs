//! Thrift's SASL transport (`TSaslClientTransport`) with the GSSAPI mechanism:
//! how a client talks to a Kerberized Hive Metastore
//! (`hive.metastore.sasl.enabled=true`).
//!
//! Negotiation frames are a status byte (START, OK, BAD, ERROR, COMPLETE), a
//! 4-byte big-endian length and a payload. The client sends START with the
//! mechanism's name and its first Kerberos token, then answers each token of
//! the server until the context is set up; then comes RFC 4752's choice of a
//! security layer: the server's wrapped offer (a bitmask of the layers it
//! accepts, its largest message), the client's wrapped choice (one layer, its
//! largest message, no authorization id). From then on every Thrift message is
//! a frame of a 4-byte length and the message, signed (auth-int) or encrypted
//! (auth-conf) when that layer was chosen.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;

use connectors::store::gssapi::Initiator;
use connectors::store::kerberos::KerberosError;

const START: u8 = 1;
const OK: u8 = 2;
const BAD: u8 = 3;
const ERROR: u8 = 4;
const COMPLETE: u8 = 5;

/// The mechanism's name in the START frame.
const MECHANISM: &[u8] = b"GSSAPI";
/// The longest frame accepted (as the Thrift client's guard).
const MAX_FRAME: usize = 256 * 1024 * 1024;
/// The largest wrapped message this client takes, as it tells the server.
const MAX_RECEIVE: u32 = 0x00ff_ffff;

/// RFC 4752's security layers, as their bits in the offer.
const LAYER_NONE: u8 = 1;
const LAYER_INTEGRITY: u8 = 2;
const LAYER_PRIVACY: u8 = 4;

/// The security layer chosen: what protects each message after negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qop {
    /// `auth`: authentication only, messages in the clear.
    Auth,
    /// `auth-int`: every message signed.
    Integrity,
    /// `auth-conf`: every message signed and encrypted.
    Privacy,
}

impl Qop {
    /// The strongest layer of an offer's bitmask.
    fn strongest(mask: u8) -> Option<Qop> {
        if mask & LAYER_PRIVACY != 0 {
            Some(Qop::Privacy)
        } else if mask & LAYER_INTEGRITY != 0 {
            Some(Qop::Integrity)
        } else if mask & LAYER_NONE != 0 {
            Some(Qop::Auth)
        } else {
            None
        }
    }

    fn bit(self) -> u8 {
        match self {
            Qop::Auth => LAYER_NONE,
            Qop::Integrity => LAYER_INTEGRITY,
            Qop::Privacy => LAYER_PRIVACY,
        }
    }

    /// The SASL name (`auth`, `auth-int`, `auth-conf`).
    pub fn name(self) -> &'static str {
        match self {
            Qop::Auth => "auth",
            Qop::Integrity => "auth-int",
            Qop::Privacy => "auth-conf",
        }
    }
}

/// Why the SASL transport failed.
#[derive(Debug, thiserror::Error)]
pub enum SaslError {
    /// Sending or receiving failed: a foreign error, told in the message
    /// (a Thrift call over the transport hands the I/O error itself on).
    #[error("cannot {doing} over the SASL transport: {cause}")]
    Io {
        /// What was being done (`send`, `receive`).
        doing: &'static str,
        /// The failure.
        cause: std::io::Error,
    },
    /// Kerberos refused (no ticket, an expired one, an unknown principal...).
    #[error("Kerberos failed in the SASL negotiation")]
    Kerberos {
        /// Kerberos' own words, naming the metastore.
        #[source]
        source: KerberosError,
    },
    /// The server ended the negotiation with BAD or ERROR.
    #[error("the metastore refused the SASL negotiation: {0}")]
    Refused(String),
    /// The server said something the negotiation does not allow.
    #[error("SASL negotiation: {0}")]
    Protocol(String),
}

impl SaslError {
    fn sending(cause: std::io::Error) -> SaslError {
        SaslError::Io {
            doing: "send",
            cause,
        }
    }

    fn receiving(cause: std::io::Error) -> SaslError {
        SaslError::Io {
            doing: "receive",
            cause,
        }
    }

    fn kerberos(source: KerberosError) -> SaslError {
        SaslError::Kerberos { source }
    }
}

/// A Thrift connection over SASL/GSSAPI, negotiated.
pub struct SaslTransport {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    gss: Initiator,
    qop: Qop,
    /// The current incoming frame's message and how much of it was read.
    frame: Vec<u8>,
    at: usize,
}

impl SaslTransport {
    /// Negotiates over `stream` (connected, its timeouts set) as the client
    /// of the context `gss` (not yet set up).
    pub fn open(stream: TcpStream, mut gss: Initiator) -> Result<SaslTransport, SaslError> {
        let mut reader = BufReader::new(stream.try_clone().map_err(SaslError::receiving)?);
        let mut writer = stream;
        let first = gss.step(None).map_err(SaslError::kerberos)?;
        let mut out = frame(START, MECHANISM);
        out.extend_from_slice(&frame(OK, &first));
        writer.write_all(&out).map_err(SaslError::sending)?;
        writer.flush().map_err(SaslError::sending)?;
        let (qop, last) = loop {
            let (status, payload) = receive(&mut reader)?;
            if !gss.is_established() {
                let token = gss.step(Some(&payload)).map_err(SaslError::kerberos)?;
                send(&mut writer, OK, &token)?;
                continue;
            }
            let (qop, answer) = choose_layer(&gss, &payload)?;
            send(&mut writer, COMPLETE, &answer)?;
            break (qop, status);
        };
        // The server says COMPLETE once it read the choice (unless it already had).
        if last != COMPLETE {
            let (status, _) = receive(&mut reader)?;
            if status != COMPLETE {
                return Err(SaslError::Protocol(format!(
                    "expected COMPLETE after the security layer, got status {status}"
                )));
            }
        }
        tracing::debug!(
            qop = qop.name(),
            service = gss.target(),
            "SASL/GSSAPI negotiated"
        );
        Ok(SaslTransport {
            reader,
            writer,
            gss,
            qop,
            frame: Vec::new(),
            at: 0,
        })
    }

    /// The security layer negotiated.
    pub fn qop(&self) -> Qop {
        self.qop
    }

    /// Sends one Thrift message as one frame.
    pub fn send(&mut self, message: &[u8]) -> Result<(), SaslError> {
        let payload = match self.qop {
            Qop::Auth => message.to_vec(),
            Qop::Integrity => self.gss.wrap(message, false).map_err(SaslError::kerberos)?,
            Qop::Privacy => self.gss.wrap(message, true).map_err(SaslError::kerberos)?,
        };
        let mut out = Vec::with_capacity(4 + payload.len());
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&payload);
        self.writer.write_all(&out).map_err(SaslError::sending)?;
        self.writer.flush().map_err(SaslError::sending)?;
        Ok(())
    }

    /// Reads the next non-empty frame into `frame`.
    fn next_frame(&mut self) -> Result<(), SaslError> {
        loop {
            let len = read_len(&mut self.reader)?;
            let payload = read_payload(&mut self.reader, len)?;
            self.frame = match self.qop {
                Qop::Auth => payload,
                Qop::Integrity | Qop::Privacy => {
                    self.gss.unwrap(&payload).map_err(SaslError::kerberos)?
                }
            };
            self.at = 0;
            if !self.frame.is_empty() {
                return Ok(());
            }
        }
    }
}

impl Read for SaslTransport {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.at == self.frame.len() {
            self.next_frame().map_err(|e| match e {
                SaslError::Io { cause, .. } => cause,
                other => std::io::Error::other(other),
            })?;
        }
        let n = buf.len().min(self.frame.len() - self.at);
        buf[..n].copy_from_slice(&self.frame[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The answer to the server's wrapped offer: the strongest layer it accepts,
/// this client's largest message, no authorization id (the server then
/// authorizes the principal authenticated).
fn choose_layer(gss: &Initiator, wrapped: &[u8]) -> Result<(Qop, Vec<u8>), SaslError> {
    let offer = gss.unwrap(wrapped).map_err(SaslError::kerberos)?;
    let [mask, ..] = offer[..] else {
        return Err(SaslError::Protocol(
            "the security layer offer is empty".to_string(),
        ));
    };
    if offer.len() != 4 {
        return Err(SaslError::Protocol(format!(
            "the security layer offer has {} bytes, not 4",
            offer.len()
        )));
    }
    let qop = Qop::strongest(mask).ok_or_else(|| {
        SaslError::Protocol(format!("the server offers no security layer ({mask:#x})"))
    })?;
    let max = if qop == Qop::Auth { 0 } else { MAX_RECEIVE };
    let mut choice = max.to_be_bytes();
    choice[0] = qop.bit();
    Ok((qop, gss.wrap(&choice, false).map_err(SaslError::kerberos)?))
}

/// A negotiation frame.
fn frame(status: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(status);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn send(writer: &mut TcpStream, status: u8, payload: &[u8]) -> Result<(), SaslError> {
    writer
        .write_all(&frame(status, payload))
        .map_err(SaslError::sending)?;
    writer.flush().map_err(SaslError::sending)?;
    Ok(())
}

/// The next negotiation frame; BAD and ERROR are the server's refusal.
fn receive(reader: &mut impl Read) -> Result<(u8, Vec<u8>), SaslError> {
    let mut status = [0u8; 1];
    reader
        .read_exact(&mut status)
        .map_err(SaslError::receiving)?;
    let len = read_len(reader)?;
    let payload = read_payload(reader, len)?;
    match status[0] {
        OK | COMPLETE => Ok((status[0], payload)),
        BAD | ERROR => Err(SaslError::Refused(connectors::error::one_line(
            &String::from_utf8_lossy(&payload),
        ))),
        other => Err(SaslError::Protocol(format!("status byte {other}"))),
    }
}

fn read_len(reader: &mut impl Read) -> Result<usize, SaslError> {
    let mut len = [0u8; 4];
    reader.read_exact(&mut len).map_err(SaslError::receiving)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(SaslError::Protocol(format!("a frame of {len} bytes")));
    }
    Ok(len)
}

fn read_payload(reader: &mut impl Read, len: usize) -> Result<Vec<u8>, SaslError> {
    let mut payload = Vec::new();
    reader
        .take(len as u64)
        .read_to_end(&mut payload)
        .map_err(SaslError::receiving)?;
    if payload.len() != len {
        return Err(SaslError::receiving(
            std::io::ErrorKind::UnexpectedEof.into(),
        ));
    }
    Ok(payload)
}

/// The metastore's service principal from `pattern` (`--catalog-principal`,
/// default `hive/_HOST@REALM`): `_HOST` is the canonical name of `host` (its
/// address's name by reverse lookup, else `host` itself, lower-cased), and
/// the realm `REALM` (or none) is the default realm, which MIT Kerberos fills
/// in.
pub fn service_principal(pattern: &str, host: &str) -> String {
    let principal = pattern.strip_suffix("@REALM").unwrap_or(pattern);
    if !principal.contains("_HOST") {
        return principal.to_string();
    }
    principal.replace("_HOST", &canonical_host(host))
}

/// The default `--catalog-principal`.
pub const DEFAULT_PRINCIPAL: &str = "hive/_HOST@REALM";

fn canonical_host(host: &str) -> String {
    use std::net::ToSocketAddrs;
    let address = (host, 0u16)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next());
    address
        .and_then(|a| crate::sys::host::canonical_name(a.ip()))
        .unwrap_or_else(|| host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_realm_are_filled_in() {
        assert_eq!(
            service_principal(DEFAULT_PRINCIPAL, "127.0.0.1"),
            "hive/localhost"
        );
        assert_eq!(
            service_principal("hive/_HOST@CORP.EXAMPLE", "127.0.0.1"),
            "hive/localhost@CORP.EXAMPLE"
        );
        assert_eq!(
            service_principal("hive/hms.corp@CORP.EXAMPLE", "127.0.0.1"),
            "hive/hms.corp@CORP.EXAMPLE"
        );
    }

    #[test]
    fn the_strongest_layer_offered_is_chosen() {
        assert_eq!(Qop::strongest(LAYER_NONE), Some(Qop::Auth));
        assert_eq!(
            Qop::strongest(LAYER_NONE | LAYER_INTEGRITY),
            Some(Qop::Integrity)
        );
        assert_eq!(Qop::strongest(0b111), Some(Qop::Privacy));
        assert_eq!(Qop::strongest(0), None);
    }

    #[test]
    fn a_refusal_carries_the_servers_words() {
        let bytes = frame(BAD, b"GSS initiate failed\nat somewhere");
        let err = receive(&mut bytes.as_slice()).expect_err("refused");
        assert_eq!(
            err.to_string(),
            "the metastore refused the SASL negotiation: GSS initiate failed at somewhere"
        );
        let bytes = frame(COMPLETE, b"");
        assert_eq!(
            receive(&mut bytes.as_slice()).expect("complete"),
            (COMPLETE, Vec::new())
        );
    }
}
