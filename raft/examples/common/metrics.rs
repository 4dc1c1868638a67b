//! What an operator reads off a node: requests per endpoint with their latencies, and what the
//! node knows of each peer (last contact, errors, bytes sent), with repeated errors logged at a
//! bounded rate.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use bloomkv_raft::NodeId;

use super::App;

/// Upper bounds of the latency histograms' buckets, in seconds.
const BUCKETS: [f64; 12] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Default)]
struct Endpoint {
    /// Answers by status code.
    answers: BTreeMap<u16, u64>,
    /// Requests whose latency was at most each bucket's bound (not cumulative; summed when
    /// written).
    buckets: [u64; BUCKETS.len()],
    count: u64,
    seconds: f64,
}

/// Requests per (method, route).
#[derive(Default)]
pub struct Requests {
    endpoints: Mutex<BTreeMap<(String, String), Endpoint>>,
}

impl Requests {
    fn record(&self, method: &str, route: &str, status: u16, took: Duration) {
        let mut endpoints = self.endpoints.lock().unwrap();
        let e = endpoints.entry((method.to_string(), route.to_string())).or_default();
        *e.answers.entry(status).or_default() += 1;
        let secs = took.as_secs_f64();
        if let Some(b) = BUCKETS.iter().position(|&bound| secs <= bound) {
            e.buckets[b] += 1;
        }
        e.count += 1;
        e.seconds += secs;
    }

    pub fn write(&self, out: &mut String) {
        let endpoints = self.endpoints.lock().unwrap();
        let _ = writeln!(
            out,
            "# HELP http_requests_total Requests answered, by method, route and status.\n\
             # TYPE http_requests_total counter"
        );
        for ((method, route), e) in endpoints.iter() {
            for (status, n) in &e.answers {
                let _ = writeln!(
                    out,
                    "http_requests_total{{method=\"{method}\",route=\"{route}\",\
                     status=\"{status}\"}} {n}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP http_request_duration_seconds Time to answer, by method and route.\n\
             # TYPE http_request_duration_seconds histogram"
        );
        for ((method, route), e) in endpoints.iter() {
            let labels = format!("method=\"{method}\",route=\"{route}\"");
            let mut below = 0;
            for (bound, n) in BUCKETS.iter().zip(e.buckets) {
                below += n;
                let _ = writeln!(
                    out,
                    "http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {below}"
                );
            }
            let _ = writeln!(
                out,
                "http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}\n\
                 http_request_duration_seconds_sum{{{labels}}} {}\n\
                 http_request_duration_seconds_count{{{labels}}} {}",
                e.count, e.seconds, e.count
            );
        }
    }
}

/// Records every request's route, status and latency.
pub async fn track(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().to_string();
    let start = Instant::now();
    let answer = next.run(request).await;
    app.requests_seen.record(&method, &route, answer.status().as_u16(), start.elapsed());
    answer
}

/// What this node has seen of one peer as the sender of raft RPCs (on a leader: its
/// followers).
#[derive(Debug, Default, Clone)]
pub struct Peer {
    /// When an RPC to it last succeeded.
    pub last_ok: Option<Instant>,
    /// RPCs that failed, and the last failure.
    pub errors: u64,
    pub last_error: Option<String>,
    /// Request bytes of appends and snapshot chunks sent.
    pub append_bytes: u64,
    pub snapshot_bytes: u64,
    /// When an error was last logged, and how many since were not.
    logged: Option<Instant>,
    unlogged: u64,
}

/// A repeated error is logged at most this often per peer.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Peers by id, shared by every connection of the node's network.
#[derive(Debug, Default, Clone)]
pub struct Peers(Arc<Mutex<BTreeMap<NodeId, Peer>>>);

impl Peers {
    pub fn ok(&self, id: NodeId, append: u64, snapshot: u64) {
        let mut peers = self.0.lock().unwrap();
        let p = peers.entry(id).or_default();
        p.last_ok = Some(Instant::now());
        p.append_bytes += append;
        p.snapshot_bytes += snapshot;
    }

    /// Counts an error, and logs it unless one was logged in the last [`LOG_EVERY`].
    pub fn failed(&self, id: NodeId, error: String) {
        let mut peers = self.0.lock().unwrap();
        let p = peers.entry(id).or_default();
        p.errors += 1;
        let now = Instant::now();
        let due = match p.logged {
            None => true,
            Some(t) => now.duration_since(t) >= LOG_EVERY,
        };
        if due {
            let more = match p.unlogged {
                0 => String::new(),
                n => format!(" ({n} more errors to this node since the last logged)"),
            };
            eprintln!("raft RPC to node {id} failed: {error}{more}");
            p.logged = Some(now);
            p.unlogged = 0;
        } else {
            p.unlogged += 1;
        }
        p.last_error = Some(error);
    }

    pub fn get(&self) -> BTreeMap<NodeId, Peer> {
        self.0.lock().unwrap().clone()
    }
}
