//! Serving the master's router on its connections (plain TCP or TLS) with
//! hyper directly, so that every connection is bounded in time: a client gets
//! [`HEADER_TIMEOUT`] to send a request's headers, and a keep-alive connection
//! idle for as long is closed. Half-open or silent connections cannot pile up.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use axum::serve::Listener;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;
use tracing::debug;

/// How long a client may take to send a request's headers, and how long a
/// connection may sit idle between requests.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `shutdown` resolves; then stops
/// accepting, lets the requests in flight finish and closes idle connections.
pub async fn serve<L>(mut listener: L, router: Router, shutdown: impl Future<Output = ()>)
where
    L: Listener,
    L::Addr: Debug,
{
    let (stop_tx, stop_rx) = watch::channel(());
    // Every connection holds a receiver: the channel closes once all are gone.
    let (open_tx, open_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            conn = listener.accept() => conn,
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let mut stop = stop_rx.clone();
        let open = open_rx.clone();
        tokio::spawn(async move {
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let conn = builder.serve_connection(TokioIo::new(io), service);
            tokio::pin!(conn);
            tokio::select! {
                ended = conn.as_mut() => {
                    if let Err(e) = ended {
                        debug!(?peer, error = %e, "connection closed");
                    }
                }
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.as_mut().await;
                }
            }
            drop(open);
        });
    }
    let _ = stop_tx.send(());
    drop(open_rx);
    open_tx.closed().await;
}
