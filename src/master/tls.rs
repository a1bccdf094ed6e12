//! Optional TLS for the master (`--tls-cert`, `--tls-key`): the server
//! configuration from PEM files, and a listener that hands finished TLS
//! streams to the HTTP server.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors setting TLS up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file cannot be read or is not PEM.
    #[error("TLS certificate {path}: {cause}")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What reading it found.
        cause: tokio_rustls::rustls::pki_types::pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("TLS certificate {path}: no certificate in the file")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file cannot be read or holds no PEM private key. What the
    /// parser said is left out: it could quote the key.
    #[error("TLS key {path}: no readable PEM private key")]
    Key {
        /// The file.
        path: PathBuf,
    },
    /// The certificate and key do not make a server configuration.
    #[error("TLS certificate {cert} with key {key}: {cause}")]
    Config {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls found.
        cause: tokio_rustls::rustls::Error,
    },
}

/// Builds the server side of TLS from a PEM certificate chain and its key.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|source| TlsError::Certificate {
            path: cert.to_path_buf(),
            cause: source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    // The key's contents never reach a message: only its path does.
    let private = PrivateKeyDer::from_pem_file(key).map_err(|_| TlsError::Key {
        path: key.to_path_buf(),
    })?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, private))
        .map_err(|source| TlsError::Config {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            cause: source,
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A listener whose connections are TLS streams, for the master's server:
/// tls-listener accepts TCP connections and runs their handshakes side by
/// side (a slow or silent client never holds up the others), each bounded by
/// `HANDSHAKE_TIMEOUT` (10 s).
pub type TlsListener = tls_listener::TlsListener<TcpListener, TlsAcceptor>;

/// Wraps a bound TCP listener.
pub fn listener(tcp: TcpListener, acceptor: TlsAcceptor) -> TlsListener {
    tls_listener::builder(acceptor)
        .handshake_timeout(HANDSHAKE_TIMEOUT)
        .listen(tcp)
}
