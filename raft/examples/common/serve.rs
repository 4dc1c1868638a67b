//! The node's HTTP server: HTTP/1.1 on each accepted connection, with a bound on open
//! connections and on the time a client may take to send a request's headers, and a graceful
//! stop.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use super::Limits;

/// How long a stop waits for requests in progress before it closes their connections.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let open = std::sync::Arc::new(Semaphore::new(limits.connections));
    loop {
        // Past the bound, connections wait in the kernel's backlog rather than in memory here.
        let permit = tokio::select! {
            permit = open.clone().acquire_owned() => permit.expect("never closed"),
            _ = stopped(&mut stop) => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors, say: the listener stays, and the next accept may work.
                Err(e) => {
                    eprintln!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = connection(stream, router.clone(), &limits);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _permit = permit;
            // A client that goes away mid-request is its own business.
            let _ = connection.await;
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(STOP_GRACE, graceful.shutdown()).await;
    Ok(())
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn connection<IO>(
    io: IO,
    router: Router,
    limits: &Limits,
) -> hyper::server::conn::http1::Connection<TokioIo<IO>, TowerToHyperService<Router>>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    http.serve_connection(TokioIo::new(io), TowerToHyperService::new(router))
}
