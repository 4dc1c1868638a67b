//! What a node admits: writes by the bytes they put in flight, requests by count and time, and
//! callers by a shared secret. Every refusal says which limit, in a status a client can act on.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::App;

/// A write of at most this many bytes (key and value) takes the small writes' budget: a burst
/// of large writes queues behind its own kind, not ahead of small ones.
pub const SMALL_WRITE_BYTES: usize = 64 << 10;

/// The node's limits. The defaults suit a node of a few GiB of RAM on a private network.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Bytes of large writes proposed and not yet answered, on this node: past it a write
    /// waits up to `write_wait`, then gets 429. Bounds the leader's proposal queue (and the
    /// bodies it holds), so a burst of writes cannot grow its log faster than followers
    /// take it.
    pub large_write_bytes: usize,
    /// The same for writes of at most [`SMALL_WRITE_BYTES`].
    pub small_write_bytes: usize,
    /// How long a write waits for room in its budget before it is refused with 429.
    pub write_wait: Duration,
    /// Requests served at once (raft's own RPCs are not counted): past it, 503 at once.
    pub concurrent_requests: usize,
    /// Raft RPCs served at once. Each holds its body (an append or a snapshot chunk, a few MiB)
    /// in memory: past it, 503, which the sending leader retries.
    pub concurrent_raft_requests: usize,
    /// How long a key-value request may take before 503 (a cluster call that changes something
    /// has the node's admin timeout instead, which answers 504).
    pub request_timeout: Duration,
    /// How long a connection may take to send a request's headers before it is closed.
    pub header_timeout: Duration,
    /// Open connections: past it, new ones wait in the listen backlog.
    pub connections: usize,
    /// A scan answers at most this many bytes of keys and values (and a continuation cursor).
    pub scan_bytes: usize,
    /// A scan answers at most this many keys, whatever `limit` asks.
    pub scan_keys: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            large_write_bytes: 8 << 20,
            small_write_bytes: 4 << 20,
            write_wait: Duration::from_secs(2),
            concurrent_requests: 512,
            concurrent_raft_requests: 64,
            request_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(10),
            connections: 1024,
            scan_bytes: 4 << 20,
            scan_keys: 10_000,
        }
    }
}

/// The byte budgets of writes in flight.
pub struct WriteBudget {
    large: Arc<Semaphore>,
    small: Arc<Semaphore>,
    large_total: u32,
    small_total: u32,
    wait: Duration,
}

/// Budgets are counted in KiB, so a permit count fits a `u32` for any budget.
fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX).max(1)
}

impl WriteBudget {
    pub fn new(limits: &Limits) -> WriteBudget {
        let (large_total, small_total) =
            (kib(limits.large_write_bytes), kib(limits.small_write_bytes));
        WriteBudget {
            large: Arc::new(Semaphore::new(large_total as usize)),
            small: Arc::new(Semaphore::new(small_total as usize)),
            large_total,
            small_total,
            wait: limits.write_wait,
        }
    }

    /// Room for a write of `bytes`, held until the permit is dropped, or the 429 answer.
    pub async fn admit(&self, bytes: usize) -> Result<OwnedSemaphorePermit, Response> {
        let (lane, total, what) = match bytes <= SMALL_WRITE_BYTES {
            true => (&self.small, self.small_total, "small"),
            false => (&self.large, self.large_total, "large"),
        };
        // A write larger than the whole budget takes all of it rather than never fitting.
        let want = kib(bytes).min(total);
        match tokio::time::timeout(self.wait, lane.clone().acquire_many_owned(want)).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => {
                let body = format!(
                    "busy: {} KiB of {what} writes are in flight on this node; nothing was \
                     written, retry later\n",
                    total as usize - lane.available_permits()
                );
                let retry = [(header::RETRY_AFTER, HeaderValue::from_static("1"))];
                Err((StatusCode::TOO_MANY_REQUESTS, retry, body).into_response())
            }
        }
    }

    /// Bytes of writes admitted and not yet answered.
    pub fn in_flight(&self) -> u64 {
        let used = |s: &Semaphore, total: u32| (total as usize - s.available_permits()) as u64;
        (used(&self.large, self.large_total) + used(&self.small, self.small_total)) * 1024
    }
}

/// Answers 503 at once when `semaphore` has no permit left, else runs the request under one.
async fn bounded(semaphore: &Arc<Semaphore>, what: &str, request: Request, next: Next) -> Response {
    match semaphore.clone().try_acquire_owned() {
        Ok(_permit) => next.run(request).await,
        Err(_) => {
            let body = format!("busy: too many {what} in progress on this node; retry later\n");
            let retry = [(header::RETRY_AFTER, HeaderValue::from_static("1"))];
            (StatusCode::SERVICE_UNAVAILABLE, retry, body).into_response()
        }
    }
}

/// The bound and the timeout of client and cluster requests.
pub async fn client_requests(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    let timeout = app.limits.request_timeout;
    let run = bounded(&app.requests, "requests", request, next);
    match tokio::time::timeout(timeout, run).await {
        Ok(answer) => answer,
        Err(_) => {
            let body = format!(
                "request timed out after {} s on this node; a write may still be applied\n",
                timeout.as_secs_f64()
            );
            (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
        }
    }
}

/// The bound on cluster requests (which time out by the node's admin timeout instead).
pub async fn admin_requests(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    bounded(&app.requests, "requests", request, next).await
}

/// The bound on raft RPCs in progress.
pub async fn raft_requests(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    bounded(&app.raft_requests, "raft requests", request, next).await
}

/// The header that carries the cluster's shared secret: `Authorization: Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Whether `headers` carry `token`, compared in time independent of where they differ.
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers.get(header::AUTHORIZATION) else { return false };
    let (given, want) = (given.as_bytes(), bearer(token));
    let want = want.as_bytes();
    given.len() == want.len() && given.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Refuses a request without the node's token with 401 (where the node has one).
pub async fn require_token(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    match &app.token {
        Some(token) if !authorized(request.headers(), token) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))],
            "unauthorized: this endpoint needs the cluster's token \
             (Authorization: Bearer <token>)\n",
        )
            .into_response(),
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_must_match_whole() {
        let headers = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            h
        };
        assert!(authorized(&headers("Bearer s3cret"), "s3cret"));
        assert!(!authorized(&headers("Bearer s3cre"), "s3cret"));
        assert!(!authorized(&headers("Bearer s3cret2"), "s3cret"));
        assert!(!authorized(&headers("Basic s3cret"), "s3cret"));
        assert!(!authorized(&HeaderMap::new(), "s3cret"));
    }
}
