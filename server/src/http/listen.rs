//! The accept loop: hyper's connection builder under the router, because
//! `axum::serve` cannot bound how long a client takes to send its request
//! headers. Without that bound, a client that opens connections and sends
//! a header byte now and then (slowloris) holds them, and their memory,
//! forever.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// How long connections in flight get to finish after a shutdown signal.
const DRAIN: Duration = Duration::from_secs(10);

/// Serve `app` on `listener` until `shutdown` completes, then let open
/// connections finish (at most [`DRAIN`]). A connection whose request
/// headers take longer than `header_timeout` to arrive is closed.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout);
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(Some(header_timeout));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok((stream, peer)) => {
                        // Answers go out as several writes (headers, gzip
                        // chunks): with Nagle on, the last one waits for the
                        // client's delayed ACK, 40 ms (seen as p99 outliers
                        // of the timeline windows in benches/big.rs).
                        if let Err(e) = stream.set_nodelay(true) {
                            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
                        }
                        (stream, peer)
                    }
                    Err(e) => {
                        // Out of file descriptors, say: wait rather than spin.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // The peer's address, for the wrong-token limits
                // (`guard::client_address`).
                let service = TowerToHyperService::new(app.clone().map_request(
                    move |mut request: axum::http::Request<_>| {
                        request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
                        request
                    },
                ));
                let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                let connection = graceful.watch(connection.into_owned());
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after {} s; closing them", DRAIN.as_secs());
    }
    Ok(())
}
