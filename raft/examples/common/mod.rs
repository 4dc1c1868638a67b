//! A replicated key-value node over HTTP, shared by the `kv_node` and `bench` examples: an axum
//! server for raft's RPCs, cluster management and the key-value API, and a reqwest client as
//! openraft's network.
//!
//! ```text
//! POST   /raft/append  /raft/vote  /raft/snapshot   raft RPCs between nodes (postcard)
//! POST   /cluster/init                      make this node a one-node cluster
//! POST   /cluster/learner   [id, "addr"]    add a learner (returns once it is within
//!                                           openraft's replication lag threshold, 5000 entries)
//! POST   /cluster/members   [id, ...]       change the voters to exactly these
//! POST   /cluster/snapshot                  take a snapshot of everything applied, then purge
//!                                           the log up to it (so a joining node needs it)
//! GET    /cluster/status                    id, state, leader, term, log, applied, snapshot
//!                                           and purged indexes, each follower's lag (leader)
//! GET    /metrics                           the same, and the store's, for Prometheus
//! PUT    /kv/{key}          body = value    replicated write (leader only; key and value
//!                                           together at most MAX_ENTRY_BYTES, else 413)
//! DELETE /kv/{key}                          replicated delete (leader only)
//!        a write with headers x-client-id: C and x-request-seq: S (decimal u64s) is applied
//!        at most once per (C, S): a retry answers as the first attempt did (Command::Once)
//! GET    /kv/{key}                          linearizable read (leader only)
//! GET    /kv/{key}?consistency=stale        this node's applied state (any node)
//! GET    /kv?prefix=P&limit=N               the keys starting with P (at most N, default
//!                                           1000) in order, as JSON; &consistency=stale too
//! ```
//!
//! On a node that is not the leader, the key-value calls answer 421 with the leader's id and
//! address. The cluster calls give up after the node's admin timeout with 504: the change may
//! still complete (a change of voters to a node nobody answers would otherwise hold the call
//! forever); `/cluster/status` tells.
//!
//! Raft's RPCs travel as postcard, raw bytes as raw bytes (JSON writes a byte array as a list
//! of numbers, about 3.6 times its size). Their body limit follows from the entry cap: a
//! write over [`MAX_ENTRY_BYTES`] is refused with 413 before it reaches the log, so an append
//! of [`MAX_PAYLOAD_ENTRIES`] entries, or a snapshot chunk, always fits [`raft_body_limit`]:
//! an oversized write can never make followers refuse appends (and elect a new leader).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use bloomkv_raft::{
    Command, KvReader, NodeId, Outcome, Raft, TypeConfig, CLIENT_HEADER, SEQ_HEADER,
};
use openraft::error::{
    CheckIsLeaderError, ClientWriteError, ForwardToLeader, InstallSnapshotError, NetworkError,
    RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Errors as boxed trait objects: the examples only report them.
pub type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The largest write the service takes: a key and its value together (etcd's request limit
/// is 1.5 MiB; a larger value belongs in a blob store with its key here).
pub const MAX_ENTRY_BYTES: usize = 1 << 20;

/// Entries per append RPC (openraft's default is 300): with the entry cap, what bounds an
/// append's body.
pub const MAX_PAYLOAD_ENTRIES: u64 = 32;

/// Bytes of a snapshot chunk per install RPC: each side holds one chunk in memory (the sender's
/// read buffer and request body, the receiver's body before it reaches the file), the body
/// limit must take it, and larger chunks would save little: at 3 MiB (openraft's default) a
/// 1 GiB snapshot is 342 RPCs, and each one's cost is its bytes, not its round trip.
pub const SNAPSHOT_CHUNK_BYTES: u64 = 3 << 20;

/// How long a snapshot chunk's RPC may take. The last chunk's answer waits for the install,
/// which reads the whole snapshot twice and ingests it (about 6 s for 1 GiB here): under
/// openraft's default of 200 ms the leader gives up on it and sends the snapshot again while
/// the first install is still running.
pub const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 60_000;

/// An entry's encoding beyond its key and value: its log id, the command's tags and lengths.
const ENTRY_OVERHEAD: usize = 1 << 10;

/// The largest raft RPC body a node accepts: an append of [`MAX_PAYLOAD_ENTRIES`] entries of
/// the largest size, or a snapshot chunk, whichever is larger, plus room for the request's
/// other fields.
pub fn raft_body_limit() -> usize {
    let append = MAX_PAYLOAD_ENTRIES as usize * (MAX_ENTRY_BYTES + ENTRY_OVERHEAD);
    append.max(SNAPSHOT_CHUNK_BYTES as usize) + (64 << 10)
}

/// The raft timing of the examples (election timeouts of 500–1000 ms: after a leader is killed
/// a new one took 1.5–2.0 s, as followers honour its lease first; see
/// docs/results/2026-11-26-raft-failover.md), and the payload sizes the body limit is computed
/// from.
pub fn config() -> Arc<Config> {
    let config = Config {
        heartbeat_interval: 100,
        election_timeout_min: 500,
        election_timeout_max: 1000,
        max_payload_entries: MAX_PAYLOAD_ENTRIES,
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
        ..Default::default()
    };
    Arc::new(config.validate().expect("valid raft config"))
}

/// How long a cluster call (init, add learner, change members) waits by default.
pub const DEFAULT_ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// What the HTTP handlers share.
pub struct App {
    pub id: NodeId,
    pub addr: String,
    /// How long a cluster call waits before answering 504.
    pub admin_timeout: Duration,
    pub raft: Raft,
    pub kv: KvReader,
    /// Snapshot chunks this node has received.
    pub snapshot_chunks: std::sync::atomic::AtomicU64,
}

/// A running node: its raft handle and key-value reader, and its HTTP server.
pub struct Node {
    pub app: Arc<App>,
    stop: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Node {
    /// Opens the node's store in `dir` and serves on `listener` (its address is the node's),
    /// with [`DEFAULT_ADMIN_TIMEOUT`].
    pub async fn start(id: NodeId, listener: TcpListener, dir: &Path) -> BoxResult<Node> {
        Node::start_with(id, listener, dir, DEFAULT_ADMIN_TIMEOUT).await
    }

    /// [`Node::start`] with the given admin timeout.
    pub async fn start_with(
        id: NodeId,
        listener: TcpListener,
        dir: &Path,
        admin_timeout: Duration,
    ) -> BoxResult<Node> {
        let addr = listener.local_addr()?.to_string();
        let (log, sm) = bloomkv_raft::open(dir, bloomkv::Options::default())?;
        let kv = sm.reader();
        let raft = Raft::new(id, config(), Network::new(), log, sm).await?;
        let snapshot_chunks = Default::default();
        let app = Arc::new(App { id, addr, admin_timeout, raft, kv, snapshot_chunks });
        let (stop, stopped) = oneshot::channel::<()>();
        let router = routes().with_state(app.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(Node { app, stop, server })
    }

    /// Stops serving, shuts raft down and closes the store.
    pub async fn stop(self) -> BoxResult<()> {
        let _ = self.stop.send(());
        self.server.await??;
        self.app.raft.shutdown().await?;
        self.app.kv.close()?;
        Ok(())
    }
}

fn routes() -> Router<Arc<App>> {
    let raft = Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/snapshot", post(snapshot))
        .layer(DefaultBodyLimit::max(raft_body_limit()));
    Router::new()
        .merge(raft)
        .route("/cluster/init", post(init))
        .route("/cluster/learner", post(add_learner))
        .route("/cluster/members", post(change_membership))
        .route("/cluster/snapshot", post(take_snapshot))
        .route("/cluster/status", get(status))
        .route("/metrics", get(metrics))
        .route("/kv/{key}", put(kv_put).delete(kv_delete).get(kv_get))
        .route("/kv", get(kv_scan))
}

type AppState = State<Arc<App>>;

/// A raft RPC's answer as a postcard body, or 400 with the reason for a request body that does
/// not decode.
fn encode<T: Serialize>(answer: Result<T, postcard::Error>) -> Response {
    let bytes = match answer {
        Ok(answer) => postcard::to_allocvec(&answer),
        Err(e) => {
            let reason = format!("undecodable raft request: {e}\n");
            return (StatusCode::BAD_REQUEST, reason).into_response();
        }
    };
    match bytes {
        Ok(bytes) => ([(header::CONTENT_TYPE, POSTCARD)], bytes).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

const POSTCARD: &str = "application/x-postcard";

async fn append(State(app): AppState, body: Bytes) -> Response {
    let req = postcard::from_bytes::<AppendEntriesRequest<TypeConfig>>(&body);
    encode(match req {
        Ok(req) => Ok(app.raft.append_entries(req).await),
        Err(e) => Err(e),
    })
}

async fn vote(State(app): AppState, body: Bytes) -> Response {
    encode(match postcard::from_bytes::<VoteRequest<NodeId>>(&body) {
        Ok(req) => Ok(app.raft.vote(req).await),
        Err(e) => Err(e),
    })
}

async fn snapshot(State(app): AppState, body: Bytes) -> Response {
    app.snapshot_chunks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    encode(match postcard::from_bytes::<InstallSnapshotRequest<TypeConfig>>(&body) {
        Ok(req) => Ok(app.raft.install_snapshot(req).await),
        Err(e) => Err(e),
    })
}

async fn init(State(app): AppState) -> Response {
    let me = BTreeMap::from([(app.id, BasicNode::new(&app.addr))]);
    admin(&app, "init", async {
        match app.raft.initialize(me).await {
            Ok(()) => (StatusCode::OK, "initialized\n").into_response(),
            Err(e) => (StatusCode::CONFLICT, format!("{e}\n")).into_response(),
        }
    })
    .await
}

async fn add_learner(State(app): AppState, Json((id, addr)): Json<(NodeId, String)>) -> Response {
    admin(&app, "add learner", async {
        match app.raft.add_learner(id, BasicNode::new(addr), true).await {
            Ok(resp) => {
                format!("learner {id} added at log index {}\n", resp.log_id.index).into_response()
            }
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => not_leader(f),
            Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
        }
    })
    .await
}

async fn change_membership(State(app): AppState, Json(ids): Json<BTreeSet<NodeId>>) -> Response {
    admin(&app, "change members", async {
        match app.raft.change_membership(ids.clone(), false).await {
            Ok(resp) => {
                format!("voters now {ids:?}, at log index {}\n", resp.log_id.index).into_response()
            }
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => not_leader(f),
            Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
        }
    })
    .await
}

async fn take_snapshot(State(app): AppState) -> Response {
    admin(&app, "snapshot", async {
        let applied = app.raft.metrics().borrow().last_applied.map(|l| l.index);
        let Some(upto) = applied else {
            return (StatusCode::CONFLICT, "nothing applied yet\n").into_response();
        };
        let failed = |e: &dyn std::fmt::Display| {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response()
        };
        if let Err(e) = app.raft.trigger().snapshot().await {
            return failed(&e);
        }
        let taken = |m: &openraft::RaftMetrics<NodeId, BasicNode>| {
            m.snapshot.is_some_and(|s| s.index >= upto)
        };
        if let Err(e) = app.raft.wait(None).metrics(taken, "snapshot taken").await {
            return failed(&e);
        }
        if let Err(e) = app.raft.trigger().purge_log(upto).await {
            return failed(&e);
        }
        let purged = |m: &openraft::RaftMetrics<NodeId, BasicNode>| {
            m.purged.is_some_and(|p| p.index >= upto)
        };
        if let Err(e) = app.raft.wait(None).metrics(purged, "log purged").await {
            return failed(&e);
        }
        format!("snapshot at index {upto}, log purged up to it\n").into_response()
    })
    .await
}

/// Runs a cluster call for at most the node's admin timeout.
async fn admin(
    app: &App,
    what: &str,
    call: impl std::future::Future<Output = Response>,
) -> Response {
    match tokio::time::timeout(app.admin_timeout, call).await {
        Ok(answer) => answer,
        Err(_) => {
            let secs = app.admin_timeout.as_secs_f64();
            let body = format!(
                "{what} gave up after {secs} s; it may still complete: see /cluster/status\n"
            );
            (StatusCode::GATEWAY_TIMEOUT, body).into_response()
        }
    }
}

async fn status(State(app): AppState) -> Response {
    let m = app.raft.metrics().borrow().clone();
    let leader_addr = m
        .current_leader
        .and_then(|l| m.membership_config.membership().get_node(&l).map(|n| n.addr.clone()));
    let lag: Option<BTreeMap<String, Option<u64>>> = replication_lag(&m)
        .map(|lags| lags.into_iter().map(|(id, lag)| (id.to_string(), lag)).collect());
    json_line(
        StatusCode::OK,
        json!({
            "id": app.id,
            "state": format!("{:?}", m.state),
            "leader": m.current_leader,
            "leader_addr": leader_addr,
            "term": m.current_term,
            "last_log_index": m.last_log_index,
            "last_applied": m.last_applied.map(|l| l.index),
            "snapshot": m.snapshot.map(|l| l.index),
            "purged": m.purged.map(|l| l.index),
            "millis_since_quorum_ack": m.millis_since_quorum_ack,
            "replication_lag": lag,
            "voters": m.membership_config.membership().voter_ids().collect::<Vec<_>>(),
        }),
    )
}

/// On a leader, each other member's lag: entries of the leader's log it has not matched
/// (`None` while nothing is known of it).
fn replication_lag(
    m: &openraft::RaftMetrics<NodeId, BasicNode>,
) -> Option<Vec<(NodeId, Option<u64>)>> {
    let last = m.last_log_index.unwrap_or(0);
    let replication = m.replication.as_ref()?;
    let lag = |matched: &Option<openraft::LogId<NodeId>>| {
        matched.map(|l| last.saturating_sub(l.index)).or(Some(last))
    };
    Some(
        replication
            .iter()
            .filter(|(id, _)| **id != m.id)
            .map(|(id, matched)| (*id, lag(matched)))
            .collect(),
    )
}

/// The node's figures in Prometheus' text format.
async fn metrics(State(app): AppState) -> Response {
    use std::fmt::Write;
    let m = app.raft.metrics().borrow().clone();
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: Option<u64>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        if let Some(v) = value {
            let _ = writeln!(out, "{name} {v}");
        }
    };
    let leader = m.current_leader.map(|l| u64::from(l == app.id));
    gauge("raft_term", "The current term.", Some(m.current_term));
    gauge("raft_is_leader", "1 if this node leads, 0 if another does.", leader);
    gauge("raft_last_log_index", "Index of the last log entry.", m.last_log_index);
    gauge(
        "raft_last_applied_index",
        "Index of the last entry applied.",
        m.last_applied.map(|l| l.index),
    );
    gauge("raft_snapshot_index", "Index the last snapshot covers.", m.snapshot.map(|l| l.index));
    gauge("raft_purged_index", "Index up to which the log is purged.", m.purged.map(|l| l.index));
    gauge(
        "raft_snapshot_chunks_received",
        "Snapshot chunks this node has received.",
        Some(app.snapshot_chunks.load(std::sync::atomic::Ordering::Relaxed)),
    );
    gauge(
        "raft_millis_since_quorum_ack",
        "On a leader, ms since a quorum last acknowledged it.",
        m.millis_since_quorum_ack,
    );
    let _ = writeln!(
        out,
        "# HELP raft_replication_lag On a leader, entries a member has not matched.\n\
         # TYPE raft_replication_lag gauge"
    );
    for (id, lag) in replication_lag(&m).unwrap_or_default() {
        if let Some(lag) = lag {
            let _ = writeln!(out, "raft_replication_lag{{member=\"{id}\"}} {lag}");
        }
    }
    let stats = app.kv.stats();
    let mut gauge = |name: &str, help: &str, value: u64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
    };
    gauge(
        "bloomkv_tables",
        "Tables in the node's store.",
        stats.tables_per_level.iter().map(|&n| n as u64).sum(),
    );
    gauge(
        "bloomkv_filter_memory_bytes",
        "Bytes of the store's filters in RAM.",
        stats.filter_memory_bytes,
    );
    gauge("bloomkv_memtable_bytes", "Bytes in the store's memtables.", stats.memtable_bytes);
    gauge("bloomkv_wal_bytes", "Bytes of the store's write-ahead log.", stats.wal_bytes);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// JSON on one line, newline-terminated, for people reading it in a terminal.
fn json_line(status: StatusCode, value: serde_json::Value) -> Response {
    let body = format!("{value}\n");
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn not_leader(f: ForwardToLeader<NodeId, BasicNode>) -> Response {
    let body = json!({
        "error": "not the leader",
        "leader": f.leader_id,
        "leader_addr": f.leader_node.map(|n| n.addr),
    });
    json_line(StatusCode::MISDIRECTED_REQUEST, body)
}

async fn write(app: &App, command: Command) -> Response {
    if let Err(reason) = command.validate() {
        return (StatusCode::PAYLOAD_TOO_LARGE, format!("{reason}\n")).into_response();
    }
    match app.raft.client_write(command).await {
        Ok(resp) => match resp.data {
            Outcome::Applied => format!("ok, log index {}\n", resp.log_id.index).into_response(),
            Outcome::Rejected { reason } => {
                (StatusCode::BAD_REQUEST, format!("{reason}\n")).into_response()
            }
        },
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => not_leader(f),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// `command` as a [`Command::Once`] if the request names a client and a sequence number, or
/// why the headers are wrong.
fn once(headers: &HeaderMap, command: Command) -> Result<Command, String> {
    let number = |name: &str| match headers.get(name) {
        None => Ok(None),
        Some(v) => match v.to_str().ok().and_then(|v| v.parse().ok()) {
            Some(n) => Ok(Some(n)),
            None => Err(format!("{name}: expected a decimal u64\n")),
        },
    };
    match (number(CLIENT_HEADER)?, number(SEQ_HEADER)?) {
        (Some(client), Some(seq)) => Ok(Command::Once { client, seq, command: Box::new(command) }),
        (None, None) => Ok(command),
        _ => Err(format!("{CLIENT_HEADER} and {SEQ_HEADER} go together\n")),
    }
}

async fn kv_put(
    State(app): AppState,
    UrlPath(key): UrlPath<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let room = MAX_ENTRY_BYTES.saturating_sub(key.len());
    match read_capped(body, room).await {
        Ok(Some(value)) => match once(&headers, Command::put(key, value)) {
            Ok(command) => write(&app, command).await,
            Err(reason) => (StatusCode::BAD_REQUEST, reason).into_response(),
        },
        Ok(None) => (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "a key and value together may be at most {MAX_ENTRY_BYTES} bytes \
                 (the key takes {}); nothing was written\n",
                key.len()
            ),
        )
            .into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    }
}

/// Bytes of an oversized body read (and dropped) before it is refused: a client that sends
/// the whole body before reading the answer (most do; curl waits for `100 Continue` instead)
/// then gets the 413, not a connection closed under its write. Beyond this the connection is
/// closed.
const DRAINED_BYTES: usize = bloomkv::MAX_VALUE_BYTES + (1 << 20);

/// The body if it is at most `cap` bytes, else `None` once it is drained.
async fn read_capped(body: axum::body::Body, cap: usize) -> Result<Option<Bytes>, axum::Error> {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else { continue };
        seen += data.len();
        if seen <= cap {
            kept.extend_from_slice(&data);
        } else if seen > DRAINED_BYTES {
            break;
        }
    }
    Ok((seen <= cap).then(|| Bytes::from(kept)))
}

async fn kv_delete(
    State(app): AppState,
    UrlPath(key): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    match once(&headers, Command::delete(key)) {
        Ok(command) => write(&app, command).await,
        Err(reason) => (StatusCode::BAD_REQUEST, reason).into_response(),
    }
}

/// `?consistency=stale` on a read: answer from this node's state as it is, on any node.
#[derive(serde::Deserialize)]
struct ReadParams {
    consistency: Option<String>,
    prefix: Option<String>,
    limit: Option<usize>,
}

async fn kv_get(
    State(app): AppState,
    UrlPath(key): UrlPath<String>,
    Query(params): Query<ReadParams>,
) -> Response {
    read(&app, &params, || local_get(&app, &key)).await
}

/// Answers with `local` once the read's consistency allows reading this node's state.
async fn read(app: &App, params: &ReadParams, local: impl FnOnce() -> Response) -> Response {
    match params.consistency.as_deref() {
        None | Some("linearizable") => {
            // Confirms with a quorum that this node still leads, and waits until it has
            // applied everything committed before the read: only then is the local read
            // linearizable.
            match app.raft.ensure_linearizable().await {
                Ok(_) => local(),
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => not_leader(f),
                Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
            }
        }
        // What this node has applied: possibly behind the leader (see `/cluster/status`), never
        // ahead of what a quorum has.
        Some("stale") => local(),
        Some(other) => (
            StatusCode::BAD_REQUEST,
            format!("consistency {other:?}: expected linearizable or stale\n"),
        )
            .into_response(),
    }
}

/// Keys listed by one scan when the request names no limit.
const DEFAULT_SCAN_LIMIT: usize = 1000;

/// `{"items": [...], "more": bool}`, each item `{"key", "value"}` as UTF-8 text, or
/// `{"key_hex", "value_hex"}` where either is not UTF-8; `more` says the limit cut the list.
async fn kv_scan(State(app): AppState, Query(params): Query<ReadParams>) -> Response {
    read(&app, &params, || {
        let prefix = params.prefix.as_deref().unwrap_or("");
        let limit = params.limit.unwrap_or(DEFAULT_SCAN_LIMIT);
        let mut items = Vec::new();
        let mut more = false;
        for item in app.kv.prefix(prefix.as_bytes()) {
            let (key, value) = match item {
                Ok(kv) => kv,
                Err(e) => {
                    return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
                }
            };
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(match (std::str::from_utf8(&key), std::str::from_utf8(&value)) {
                (Ok(k), Ok(v)) => json!({ "key": k, "value": v }),
                _ => json!({ "key_hex": hex(&key), "value_hex": hex(&value) }),
            });
        }
        json_line(StatusCode::OK, json!({ "items": items, "more": more }))
    })
    .await
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn local_get(app: &App, key: &str) -> Response {
    match app.kv.get(key.as_bytes()) {
        Ok(Some(value)) => value.to_vec().into_response(),
        Ok(None) => (StatusCode::NOT_FOUND, "not found\n").into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// openraft's network: one HTTP client (keeping connections alive) for every peer.
#[derive(Clone)]
pub struct Network {
    client: reqwest::Client,
}

impl Network {
    pub fn new() -> Network {
        Network { client: reqwest::Client::new() }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Connection {
        Connection { client: self.client.clone(), target, url: format!("http://{}", node.addr) }
    }
}

pub struct Connection {
    client: reqwest::Client,
    target: NodeId,
    url: String,
}

type RpcError<E> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

impl Connection {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RpcError<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body =
            postcard::to_allocvec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let sent = self
            .client
            .post(format!("{}{path}", self.url))
            .timeout(option.hard_ttl())
            .header(header::CONTENT_TYPE, POSTCARD)
            .body(body)
            .send()
            .await
            // A refused connection means the node is down: openraft then backs off instead
            // of retrying at once.
            .map_err(|e| match e.is_connect() {
                true => RPCError::Unreachable(Unreachable::new(&e)),
                false => RPCError::Network(NetworkError::new(&e)),
            })?;
        let status = sent.status();
        let bytes = sent.bytes().await.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        if !status.is_success() {
            // A peer that refuses a request (a body over its limit, one it cannot decode) is
            // not down: say so where an operator looks, as openraft only retries.
            let text = String::from_utf8_lossy(&bytes);
            let refused = std::io::Error::other(format!(
                "{} {path}: HTTP {status}: {}",
                self.url,
                text.trim()
            ));
            eprintln!("raft RPC refused: {refused}");
            return Err(RPCError::Network(NetworkError::new(&refused)));
        }
        let answer: Result<Resp, RaftError<NodeId, E>> =
            postcard::from_bytes(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        req: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcError<openraft::error::Infallible>> {
        self.call("/raft/append", &req, &option).await
    }

    async fn install_snapshot(
        &mut self,
        req: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcError<InstallSnapshotError>> {
        self.call("/raft/snapshot", &req, &option).await
    }

    async fn vote(
        &mut self,
        req: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcError<openraft::error::Infallible>> {
        self.call("/raft/vote", &req, &option).await
    }
}
