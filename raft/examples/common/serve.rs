//! The node's HTTP server: HTTP/1.1 on each accepted connection (inside TLS where the node has
//! a certificate), with a bound on open connections and on the time a client may take to
//! complete its handshake and to send a request's headers, and a graceful stop.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use super::Limits;

/// How long a stop waits for requests in progress before it closes their connections.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Failed TLS handshakes are logged at most this often: a port scanner, a client speaking
/// plain HTTP or a peer that does not trust the node's CA would otherwise log a line each time.
const HANDSHAKE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Serves `router` on `listener` until `stop` turns true; with `tls`, only over TLS.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let open = Arc::new(Semaphore::new(limits.connections));
    let failed_handshakes = Arc::new(FailedHandshakes::default());
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
        let Some(tls) = tls.clone() else {
            let connection = graceful.watch(connection(stream, router.clone(), &limits));
            tokio::spawn(async move {
                let _permit = permit;
                // A client that goes away mid-request is its own business.
                let _ = connection.await;
            });
            continue;
        };
        // The handshake runs in the connection's own task, so a slow one holds up no other;
        // it is bounded like the headers that follow it, and a stop does not wait for it.
        let (router, limits) = (router.clone(), limits.clone());
        let (watcher, mut stop, failed) =
            (graceful.watcher(), stop.clone(), failed_handshakes.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let handshake = tokio::time::timeout(limits.header_timeout, tls.accept(stream));
            let stream = tokio::select! {
                done = handshake => match done {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => return failed.note(&e),
                    Err(_) => return failed.note(&"no handshake within the header timeout"),
                },
                _ = stopped(&mut stop) => return,
            };
            let _ = watcher.watch(connection(stream, router, &limits)).await;
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(STOP_GRACE, graceful.shutdown()).await;
    Ok(())
}

/// Handshakes failed since the last one logged, and when that was.
#[derive(Default)]
struct FailedHandshakes(Mutex<(u64, Option<Instant>)>);

impl FailedHandshakes {
    fn note(&self, why: &dyn std::fmt::Display) {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (count, logged) = &mut *state;
        *count += 1;
        if logged.is_some_and(|at| at.elapsed() < HANDSHAKE_LOG_INTERVAL) {
            return;
        }
        eprintln!("TLS handshakes failed: {count} since this was last logged; the latest: {why}");
        *state = (0, Some(Instant::now()));
    }
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
