//! bench/count_proxy.py in front of a store's endpoint: it relays every
//! request, counts the bytes of GET response bodies and logs each request
//! (`arrival answer METHOD PATH RANGE BYTES`), so that what a command fetched
//! is measured outside sluice.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{python, wait_until};

/// The counting proxy, stopped when dropped.
pub struct Proxy {
    child: Child,
    /// Its URL, to give sluice as the store's endpoint.
    pub endpoint: String,
    count: PathBuf,
    log: PathBuf,
}

impl Proxy {
    /// Starts the proxy in front of `upstream`, counting and logging into `dir`.
    pub fn start(upstream: &str, dir: &Path) -> Proxy {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/count_proxy.py");
        let count = dir.join("count");
        let log = dir.join("requests.log");
        let child = Command::new(python())
            .arg(script)
            .arg(port.to_string())
            .arg(upstream)
            .arg(&count)
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start bench/count_proxy.py");
        let proxy = Proxy {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            count,
            log,
        };
        wait_until(
            "the counting proxy to listen",
            Duration::from_secs(30),
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        );
        proxy
    }

    /// Bytes of GET response bodies relayed so far (counted before the
    /// client got them).
    pub fn bytes(&self) -> u64 {
        std::fs::read_to_string(&self.count)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The request log so far, one line a request.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
