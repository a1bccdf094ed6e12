//! A minimal HTTP/1.1 client for the emulators' setup calls that object_store
//! does not make: creating buckets and containers, and writing directory-marker
//! keys that end in `/`. Only for servers on this machine.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use base64::Engine;

/// A response: status code and body (as text, for messages).
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// Sends one request to `url` (`http://host:port/path?query`) and reads the answer.
pub fn request(method: &str, url: &str, headers: &[(&str, String)], body: &[u8]) -> Response {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("only http:// urls are supported: {url}"));
    let (host, target) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let mut stream =
        TcpStream::connect(host).unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("cannot set a timeout on the socket to {url}: {e}"));
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|_| stream.write_all(body))
        .unwrap_or_else(|e| panic!("cannot send {method} {url}: {e}"));
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("cannot read the answer to {method} {url}: {e}"));
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in the answer to {method} {url}: {text}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Response { status, body }
}

/// Percent-encodes an object key for a URL path, keeping `/`.
pub fn encode_key(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The `Authorization` header of Azure's Shared Key scheme for a request without
/// a body. `path` is the URL path (for Azurite it starts with the account),
/// `query` its parameters, `ms_headers` the `x-ms-*` headers sent.
pub fn azure_shared_key(
    method: &str,
    account: &str,
    key_base64: &str,
    path: &str,
    query: &[(&str, &str)],
    ms_headers: &[(&str, String)],
) -> String {
    let mut ms: Vec<(String, &str)> = ms_headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str()))
        .collect();
    ms.sort();
    let mut q: Vec<(String, &str)> = query
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), *v))
        .collect();
    q.sort();
    let mut to_sign = format!("{method}\n\n\n\n\n\n\n\n\n\n\n\n");
    for (k, v) in &ms {
        to_sign.push_str(&format!("{k}:{v}\n"));
    }
    to_sign.push_str(&format!("/{account}{path}"));
    for (k, v) in &q {
        to_sign.push_str(&format!("\n{k}:{v}"));
    }
    let key = base64::engine::general_purpose::STANDARD
        .decode(key_base64)
        .unwrap_or_else(|e| panic!("the account key is not base64: {e}"));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
    let signature = ring::hmac::sign(&key, to_sign.as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(signature.as_ref());
    format!("SharedKey {account}:{signature}")
}
