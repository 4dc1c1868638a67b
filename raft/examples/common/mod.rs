//! A replicated key-value node over HTTP, shared by the `kv_node` and `bench` examples: an HTTP
//! server for raft's RPCs, cluster management and the key-value API, and a reqwest client as
//! openraft's network. raft/README.md is the operator's guide.
//!
//! ```text
//! POST   /raft/append  /raft/vote  /raft/snapshot   raft RPCs between nodes (postcard);
//!                                           ?group=G for group G (none: group 0)
//! POST   /cluster/init                      make this node a one-node cluster
//! POST   /cluster/learner   [id, "addr"]    add a learner; returns once it has matched the
//!                                           leader's log as it was (?wait=false: at once)
//! POST   /cluster/members   [id, ...]       change the voters to exactly these (a voter not
//!                                           named leaves the cluster)
//! POST   /cluster/remove    [id, ...]       remove members (voters or learners)
//! POST   /cluster/snapshot                  take a snapshot of everything applied, then purge
//!                                           the log up to it (so a joining node needs it)
//! POST   /cluster/backup   {"dir": D}      write a copy of this node's store to D (a new or
//!                                           empty directory on the node's machine)
//! POST   /cluster/restore  {"dir": D}      on the leader: write every key of the backup in D
//!                                           through the log (202; progress in status)
//! GET    /cluster/status                    id, health, state, leader, term, last log,
//!                                           applied, snapshot and purged indexes; on a
//!                                           leader each member's lag in entries and bytes,
//!                                           last contact and errors
//! GET    /health                            200 while the raft core runs, else 503 and why
//! GET    /metrics                           the same, the store's and per-endpoint request
//!                                           counts and latencies, for Prometheus
//! PUT    /kv/{key}          body = value    replicated write (leader only; key and value
//!                                           together at most MAX_ENTRY_BYTES, else 413; 429
//!                                           when too many bytes of writes are in flight)
//! DELETE /kv/{key}                          replicated delete (leader only)
//!        a write with headers x-client-id: C and x-request-seq: S (decimal u64s) is applied
//!        at most once per (C, S): a retry answers as the first attempt did (Command::Once)
//! GET    /kv/{key}                          linearizable read (leader only)
//! GET    /kv/{key}?consistency=stale        this node's applied state (any node)
//! GET    /kv?prefix=P&limit=N&cursor=C      one page of the keys starting with P in order, as
//!                                           JSON (at most N, default 1000, and the node's
//!                                           byte and key caps); `cursor` from the previous
//!                                           page continues it; &consistency=stale too
//! POST   /kv                body = batch    a postcard `Vec<Command>` of puts and deletes,
//!                                           applied atomically (all keys in one group)
//! GET    /shard/map                         the node's shard map (`ShardMap::encode`)
//! With --shards (`shards.rs`; each safe to send again, answering what it did, JSON):
//! POST   /cluster/split  {"group":G,"at":K}  split G at key K: a new group from K on
//! POST   /cluster/move   {"group":G,"from":F,"to":T}  on G's leader: G's replica F -> T
//! POST   /cluster/host   ?group=G           start an empty replica here, for a move
//! POST   /cluster/drop   ?group=G           drop this node's copy once the map has moved it
//! POST   /cluster/remove-node  N            remove node N once it holds no group
//! POST   /shard/propose  ?group=G           a peer's forwarded command (postcard)
//! POST   /shard/ping                        a peer asks which groups this node leads (postcard)
//! ```
//!
//! **Shards.** A node started with `--groups N` ([`NodeConfig::groups`]) hosts raft groups 0 to
//! N - 1 in one database, each serving one contiguous range of keys (see [`cut`]); every node
//! of the cluster must be started with the same N. The cluster calls act on every group; the
//! key-value calls on the group a key belongs to. A key-value request may carry
//! `x-shard-version: V` and `x-shard-group: G`, the map version its client routed by and the
//! group it chose: a key that is not G's in this node's map answers 421
//! `{"error":"stale shard map","version":W,"group":H}` (fetch the map and resend), and one
//! routed by a newer map than this node's 503 with `Retry-After`. Without them the node routes
//! the request by its own map (a scan whose prefix spans groups, or a batch whose keys do, is
//! refused with 400). Every key-value answer carries `x-shard-version`. With one group (the
//! default) the node is laid out and behaves as before groups existed.
//!
//! With a TLS setting ([`NodeConfig::tls`]) a node serves only HTTPS on its address (a plain
//! HTTP request there gets no HTTP answer), and calls its peers' raft endpoints over HTTPS,
//! trusting the given CA; every node of a cluster has it or none does. TLS proves a node to
//! its callers; it does not ask callers for a certificate, so the token is what keeps others
//! off the raft and cluster endpoints.
//!
//! On a node that is not the leader, the key-value writes and linearizable reads answer 421
//! with the leader's id and address. The cluster calls give up after the node's admin timeout
//! with 504: the change may still complete; `/cluster/status` tells. With a token, every
//! `/raft`, `/cluster`, `/metrics` request (and with `token_for_clients` every `/kv` one) must
//! carry `Authorization: Bearer <token>`, else 401.
//!
//! Raft's RPCs travel as postcard, raw bytes as raw bytes (JSON writes a byte array as a list
//! of numbers, about 3.6 times its size). An append carries at most
//! [`bloomkv_raft::DEFAULT_MAX_APPEND_BYTES`] of entries (or one larger entry), so it reaches a
//! follower and is fsynced there within openraft's append timeout (the heartbeat interval)
//! whatever the writes are; their body limit follows: a write over [`MAX_ENTRY_BYTES`] is
//! refused with 413 before it reaches the log, so an append, or a snapshot chunk, always fits
//! [`raft_body_limit`].

// Request helpers fail with the answer to send (an axum `Response`, 128 bytes), once per
// request: boxing it would only add an allocation.
#![allow(clippy::result_large_err)]

mod cluster;
mod kv;
mod limits;
mod metrics;
mod network;
mod tls;

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::response::Response;
use axum::routing::{get, post, put};
use axum::Router;
use std::collections::BTreeMap;

use bloomkv_raft::shard::{ShardMap, META_GROUP};
use bloomkv_raft::{
    AutoSplit, GroupId, KvReader, LogStore, NodeId, NodeStore, Raft, ShardNode,
    DEFAULT_MAX_APPEND_BYTES,
};
use openraft::error::ForwardToLeader;
use openraft::{BasicNode, Config};
use serde_json::json;
use std::borrow::Cow;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

pub use limits::Limits;
pub use network::{HttpTransport, Network};
pub use tls::TlsConfig;

/// Errors as boxed trait objects: the examples only report them.
pub type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The largest write the service takes: a key and its value together (etcd's request limit
/// is 1.5 MiB; a larger value belongs in a blob store with its key here).
pub const MAX_ENTRY_BYTES: usize = 1 << 20;

/// Entries per append RPC at most (openraft's default): appends are bounded in bytes by the log
/// store, so many small entries still travel together.
pub const MAX_PAYLOAD_ENTRIES: u64 = 300;

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

/// The largest raft RPC body a node accepts: an append (its byte bound, or one entry of the
/// largest size), or a snapshot chunk, whichever is larger, plus room for the request's other
/// fields.
pub fn raft_body_limit() -> usize {
    let append = DEFAULT_MAX_APPEND_BYTES.max(MAX_ENTRY_BYTES + ENTRY_OVERHEAD);
    append.max(SNAPSHOT_CHUNK_BYTES as usize) + (64 << 10)
}

/// The raft timing of the examples, and the payload sizes the body limit is computed from.
///
/// A follower of openraft 0.9 campaigns once the leader's lease (`election_timeout_max`) and
/// then its election timeout have passed since it last heard from the leader: with 300–600 ms
/// that is 0.9–1.2 s, which bounds how long a group is without a leader after its leader dies
/// or moves away (openraft 0.9 cannot hand leadership over). Heartbeats every 100 ms leave a
/// follower nine in that time before it campaigns.
pub fn config() -> Arc<Config> {
    let config = Config {
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        max_payload_entries: MAX_PAYLOAD_ENTRIES,
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
        ..Default::default()
    };
    Arc::new(config.validate().expect("valid raft config"))
}

/// How long a cluster call (init, add learner, change members) waits by default.
pub const DEFAULT_ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How a node is run: everything but its id, address and directory.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// How long a cluster call waits before answering 504.
    pub admin_timeout: Duration,
    /// The cluster's shared secret: required of raft, cluster and metrics requests, and sent
    /// with this node's own raft RPCs. `None`: no check (a loopback or fully private network).
    pub token: Option<String>,
    /// Whether key-value requests need the token too.
    pub token_for_clients: bool,
    /// Serve only TLS, and call peers over https trusting its CA. `None`: plain HTTP.
    pub tls: Option<TlsConfig>,
    pub limits: Limits,
    /// Raft groups hosted, each serving one range of the key space ([`cut`]); the same on
    /// every node of a cluster.
    pub groups: usize,
    /// Run on a [`ShardNode`] whose map the cluster replicates, cut into this many ranges at
    /// `/cluster/init` ([`cut`]), so that groups split and move; 0: not (`groups` says).
    pub shards: usize,
    /// With `shards`: split each group this node leads once its data is over this many bytes,
    /// measured every `split_check` ([`ShardNode::set_auto_split`]). `None`: only
    /// `/cluster/split` splits.
    pub split_bytes: Option<u64>,
    pub split_check: Duration,
}

/// The most groups [`cut`] makes: one per printable ASCII character.
pub const MAX_GROUPS: usize = 95;

/// The first keys of `groups` contiguous ranges over the key space, for groups 0 to
/// `groups - 1` in order: group 0's starts at the empty key, group `i`'s at the one-byte key
/// `0x20 + 95 * i / groups`. Keys are URL path segments, mostly printable ASCII (0x20 to
/// 0x7e), so keys whose first characters spread over it spread over the groups; a key
/// before the first cut (a control character) is group 0's, and one that is not ASCII the
/// last group's.
pub fn cut(groups: usize) -> Result<Vec<Vec<u8>>, String> {
    if !(1..=MAX_GROUPS).contains(&groups) {
        return Err(format!("--groups {groups}: expected 1 to {MAX_GROUPS}"));
    }
    let start = |i: usize| if i == 0 { Vec::new() } else { vec![(0x20 + 95 * i / groups) as u8] };
    Ok((0..groups).map(start).collect())
}

impl Default for NodeConfig {
    fn default() -> NodeConfig {
        NodeConfig {
            admin_timeout: DEFAULT_ADMIN_TIMEOUT,
            token: None,
            token_for_clients: false,
            tls: None,
            limits: Limits::default(),
            groups: 1,
            shards: 0,
            split_bytes: None,
            split_check: AutoSplit::DEFAULT_EVERY,
        }
    }
}

/// One raft group on this node.
#[derive(Clone)]
pub struct Group {
    pub raft: Raft,
    pub kv: KvReader,
    /// The group's log (for the followers' lag in bytes), where the node holds it.
    pub log: Option<LogStore>,
}

/// What the HTTP handlers share.
pub struct App {
    pub id: NodeId,
    pub addr: String,
    /// How long a cluster call waits before answering 504.
    pub admin_timeout: Duration,
    /// Group 0's: the whole node's when it hosts one group. On a [`ShardNode`], the metadata
    /// group's (its reader reads the whole database's figures and checkpoints).
    pub raft: Raft,
    pub kv: KvReader,
    pub log: Option<LogStore>,
    /// Every group the node hosts, group 0 among them, when the groups are fixed at start
    /// (`--groups`); empty on a [`ShardNode`], whose groups come and go.
    pub groups: BTreeMap<GroupId, Group>,
    /// Which group serves which keys, when fixed at start. Its members are placeholders:
    /// `/shard/map` fills in each group's voters. `None` on a [`ShardNode`].
    pub shards: Option<ShardMap>,
    /// The node's groups, map, splits and moves, with `--shards`, and its way to the other
    /// nodes.
    pub node: Option<ShardNode<HttpTransport>>,
    pub transport: Option<HttpTransport>,
    /// The ranges `/cluster/init` cuts the key space into, with `--shards`.
    pub shard_count: usize,
    /// Splits and replica moves that cluster calls to this node completed.
    pub splits: AtomicU64,
    pub moves: AtomicU64,
    pub network: Network,
    pub token: Option<String>,
    pub limits: Limits,
    /// Room for writes in flight.
    pub writes: limits::WriteBudget,
    /// Permits for client and cluster requests in progress, and for raft RPCs.
    pub requests: Arc<Semaphore>,
    pub raft_requests: Arc<Semaphore>,
    /// Snapshot chunks and bytes this node has received.
    pub snapshot_chunks: AtomicU64,
    pub snapshot_bytes: AtomicU64,
    pub requests_seen: metrics::Requests,
    /// The last restore's progress (see `/cluster/restore`).
    pub restore: std::sync::Mutex<Option<serde_json::Value>>,
}

/// A running node: its raft handle and key-value reader, and its HTTP server.
pub struct Node {
    pub app: Arc<App>,
    stop: watch::Sender<bool>,
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
        let config = NodeConfig { admin_timeout, ..NodeConfig::default() };
        Node::start_configured(id, listener, dir, config).await
    }

    /// [`Node::start`] as `config` says.
    pub async fn start_configured(
        id: NodeId,
        listener: TcpListener,
        dir: &Path,
        config: NodeConfig,
    ) -> BoxResult<Node> {
        let addr = listener.local_addr()?.to_string();
        // Before the store is opened (which may replay a long log): a certificate or key that
        // does not load fails the start at once.
        let (http, acceptor) = match &config.tls {
            Some(tls) => (tls.peer_client()?, Some(tls.acceptor()?)),
            None => (reqwest::Client::builder().build()?, None),
        };
        if config.split_bytes.is_some() && config.shards == 0 {
            return Err("--split-bytes splits the groups of a --shards node".into());
        }
        if config.shards > 0 {
            return Node::start_shards(id, addr, listener, dir, config, http, acceptor).await;
        }
        let starts = cut(config.groups)?;
        let store = NodeStore::open(dir, bloomkv::Options::default())?;
        let want: Vec<GroupId> = (0..starts.len() as GroupId).collect();
        let held = store.group_ids();
        if !held.is_empty() && held != want {
            return Err(format!(
                "{}: the store holds raft groups {held:?}; start the node with --groups {} \
                 as before (every node of a cluster has the same groups)",
                dir.display(),
                held.len()
            )
            .into());
        }
        let network = Network::new(http, config.token.clone(), acceptor.is_some());
        let mut groups = BTreeMap::new();
        let mut ranges = Vec::new();
        for (group, start) in want.iter().zip(starts) {
            let (log, sm) = store.group(*group)?;
            let kv = sm.reader();
            let network = network.for_group(*group);
            let raft = Raft::new(id, self::config(), network, log.clone(), sm).await?;
            groups.insert(*group, Group { raft, kv, log: Some(log) });
            ranges.push((start, *group, [id].into()));
        }
        let shards = ShardMap::from_ranges(1, ranges)?;
        let Group { raft, kv, log } = groups[&0].clone();
        let app = App::new(id, addr, &config, (raft, kv, log), network);
        let app = Arc::new(App { groups, shards: Some(shards), ..app });
        Ok(Node::serve(app, listener, acceptor, config.token_for_clients))
    }

    /// The node on a [`ShardNode`] (`--shards`): its groups are those its store holds, and
    /// those the replicated map and its splits and moves bring.
    async fn start_shards(
        id: NodeId,
        addr: String,
        listener: TcpListener,
        dir: &Path,
        config: NodeConfig,
        http: reqwest::Client,
        acceptor: Option<tokio_rustls::TlsAcceptor>,
    ) -> BoxResult<Node> {
        cut(config.shards)?;
        let network = Network::new(http, config.token.clone(), acceptor.is_some());
        let transport = HttpTransport::new(network.clone());
        let options = bloomkv::Options::default();
        let node = ShardNode::open(id, dir, options, self::config(), transport.clone()).await?;
        if let Some(bytes) = config.split_bytes {
            node.set_auto_split(Some(AutoSplit::new(bytes).every(config.split_check))).await;
        }
        let meta = node.raft(META_GROUP).ok_or("the metadata group did not start")?;
        let kv = node.reader(META_GROUP).ok_or("the metadata group did not start")?;
        transport.set_metadata(meta.clone());
        let app = App::new(id, addr, &config, (meta, kv, None), network);
        let app =
            App { node: Some(node), transport: Some(transport), shard_count: config.shards, ..app };
        Ok(Node::serve(Arc::new(app), listener, acceptor, config.token_for_clients))
    }

    fn serve(
        app: Arc<App>,
        listener: TcpListener,
        acceptor: Option<tokio_rustls::TlsAcceptor>,
        token_for_clients: bool,
    ) -> Node {
        let (stop, stopped) = watch::channel(false);
        let router = routes(&app, token_for_clients);
        let limits = app.limits.clone();
        let server = tokio::spawn(serve::serve(listener, router, limits, acceptor, stopped));
        Node { app, stop, server }
    }

    /// Stops serving, shuts raft down and closes the store.
    pub async fn stop(self) -> BoxResult<()> {
        let _ = self.stop.send(true);
        self.server.await??;
        if let Some(node) = &self.app.node {
            node.shutdown().await?;
            return Ok(());
        }
        for group in self.app.groups.values() {
            group.raft.shutdown().await?;
        }
        // One database holds every group: closing it through one reader closes it.
        self.app.kv.close()?;
        Ok(())
    }
}

fn routes(app: &Arc<App>, token_for_clients: bool) -> Router {
    let state = || app.clone();
    let raft = Router::new()
        .route("/raft/append", post(network::append))
        .route("/raft/vote", post(network::vote))
        .route("/raft/snapshot", post(network::snapshot))
        .route("/shard/propose", post(network::propose))
        .route("/shard/ping", post(network::ping))
        .layer(DefaultBodyLimit::max(raft_body_limit()))
        .layer(from_fn_with_state(state(), limits::raft_requests));
    let admin = Router::new()
        .route("/cluster/init", post(cluster::init))
        .route("/cluster/learner", post(cluster::add_learner))
        .route("/cluster/members", post(cluster::change_membership))
        .route("/cluster/remove", post(cluster::remove))
        .route("/cluster/snapshot", post(cluster::take_snapshot))
        .route("/cluster/backup", post(cluster::backup))
        .route("/cluster/restore", post(cluster::restore))
        .route("/cluster/status", get(cluster::status))
        .route("/cluster/split", post(shards::split))
        .route("/cluster/move", post(shards::move_replica))
        .route("/cluster/host", post(shards::host))
        .route("/cluster/drop", post(shards::drop_replica))
        .route("/cluster/remove-node", post(shards::remove_node))
        .route("/metrics", get(cluster::metrics));
    let mut kv = Router::new()
        .route("/kv/{key}", put(kv::put).delete(kv::delete).get(kv::get))
        .route("/kv", get(kv::scan).post(kv::batch))
        .route("/shard/map", get(kv::shard_map))
        .layer(from_fn_with_state(state(), kv::tag_version))
        .layer(from_fn_with_state(state(), limits::client_requests));
    if token_for_clients {
        kv = kv.layer(from_fn_with_state(state(), limits::require_token));
    }
    // Cluster calls have their own timeout (the admin timeout), so only the request bound.
    let admin = admin.layer(from_fn_with_state(state(), limits::admin_requests));
    // The health check answers to anyone: it says only whether the node runs.
    let open = Router::new().route("/health", get(cluster::health));
    Router::new()
        .merge(raft.merge(admin).layer(from_fn_with_state(state(), limits::require_token)))
        .merge(kv)
        .merge(open)
        .route_layer(from_fn_with_state(state(), metrics::track))
        .with_state(app.clone())
}

/// JSON on one line, newline-terminated, for people reading it in a terminal.
fn json_line(status: StatusCode, value: serde_json::Value) -> Response {
    use axum::response::IntoResponse;
    let body = format!("{value}\n");
    (status, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The redirect to a group's leader; `group` is named on a node that hosts several.
fn not_group_leader(f: ForwardToLeader<NodeId, BasicNode>, group: Option<GroupId>) -> Response {
    redirect("not the leader", f, group)
}

/// The answer of a node removed from a group: a redirect, as [`not_group_leader`]'s, to a
/// voter of the membership that removed it (which leads, or names the leader).
fn not_a_member(f: ForwardToLeader<NodeId, BasicNode>, group: Option<GroupId>) -> Response {
    redirect("not a member", f, group)
}

/// A 421 saying why (`error`) and where to ask (`f`); `group` is named on a node that hosts
/// several.
fn redirect(
    error: &str,
    f: ForwardToLeader<NodeId, BasicNode>,
    group: Option<GroupId>,
) -> Response {
    let mut body = json!({
        "error": error,
        "leader": f.leader_id,
        "leader_addr": f.leader_node.map(|n| n.addr),
    });
    if let Some(group) = group {
        body["group"] = json!(group);
    }
    json_line(StatusCode::MISDIRECTED_REQUEST, body)
}

impl App {
    fn new(
        id: NodeId,
        addr: String,
        config: &NodeConfig,
        (raft, kv, log): (Raft, KvReader, Option<LogStore>),
        network: Network,
    ) -> App {
        let limits = config.limits.clone();
        App {
            id,
            addr,
            admin_timeout: config.admin_timeout,
            raft,
            kv,
            log,
            groups: BTreeMap::new(),
            shards: None,
            node: None,
            transport: None,
            shard_count: 0,
            splits: AtomicU64::new(0),
            moves: AtomicU64::new(0),
            network,
            token: config.token.clone(),
            writes: limits::WriteBudget::new(&limits),
            requests: Arc::new(Semaphore::new(limits.concurrent_requests)),
            raft_requests: Arc::new(Semaphore::new(limits.concurrent_raft_requests)),
            limits,
            snapshot_chunks: AtomicU64::new(0),
            snapshot_bytes: AtomicU64::new(0),
            requests_seen: metrics::Requests::default(),
            restore: Default::default(),
        }
    }

    /// Whether the node hosts more than one group (and so names groups in its answers).
    pub fn sharded(&self) -> bool {
        self.node.is_some() || self.groups.len() > 1
    }

    /// This node's replica of `group`, if it runs one.
    pub fn group(&self, group: GroupId) -> Option<Group> {
        match &self.node {
            Some(node) => {
                Some(Group { raft: node.raft(group)?, kv: node.reader(group)?, log: None })
            }
            None => self.groups.get(&group).cloned(),
        }
    }

    /// The groups this node runs a replica of (on a [`ShardNode`], the metadata group too).
    pub fn group_ids(&self) -> Vec<GroupId> {
        match &self.node {
            Some(node) => node.groups(),
            None => self.groups.keys().copied().collect(),
        }
    }

    /// The map this node routes by: `None` on a [`ShardNode`] before the cluster's
    /// `/cluster/init` reached it.
    pub fn map(&self) -> Option<Cow<'_, ShardMap>> {
        match &self.node {
            Some(node) => node.map().map(Cow::Owned),
            None => self.shards.as_ref().map(Cow::Borrowed),
        }
    }

    /// `id` as a node hosting several groups names it in its answers.
    pub fn named(&self, id: GroupId) -> Option<GroupId> {
        self.sharded().then_some(id)
    }
}

mod serve;
mod shards;
