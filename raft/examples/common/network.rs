//! Raft between nodes: the HTTP handlers that hand a peer's RPC to openraft, and the client
//! that is openraft's network.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::OnceLock;
use std::time::Duration;

use bloomkv_raft::{Command, GroupId, NodeId, Ping, Pong, Raft, ShardError, Transport, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::ClientWriteResponse;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::limits::bearer;
use super::metrics::Peers;
use super::App;

type AppState = State<Arc<App>>;

pub const POSTCARD: &str = "application/x-postcard";

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

/// A raft RPC's `?group=G`: the group it is for (none: group 0, as before groups existed).
#[derive(serde::Deserialize)]
pub struct GroupParam {
    group: Option<GroupId>,
}

/// The raft of the group an RPC is for, or 404 if this node does not host it (a peer started
/// with more groups than this node).
fn raft_of(app: &App, param: &GroupParam) -> Result<Raft, Response> {
    let group = param.group.unwrap_or(0);
    match app.group(group) {
        Some(g) => Ok(g.raft),
        // On a shard node, a group this node does not run yet (a split it has not applied, a
        // move it was not asked to host): the sender retries.
        None if app.node.is_some() => {
            let reason = format!("no raft group {group} on this node yet\n");
            Err((StatusCode::NOT_FOUND, reason).into_response())
        }
        None => {
            let reason = format!(
                "no raft group {group} on this node (it hosts {}): start every node with the \
                 same --groups\n",
                app.groups.len()
            );
            Err((StatusCode::NOT_FOUND, reason).into_response())
        }
    }
}

pub async fn append(
    State(app): AppState,
    Query(group): Query<GroupParam>,
    body: Bytes,
) -> Response {
    let raft = match raft_of(&app, &group) {
        Ok(raft) => raft,
        Err(absent) => return absent,
    };
    let req = postcard::from_bytes::<AppendEntriesRequest<TypeConfig>>(&body);
    drop(body);
    encode(match req {
        Ok(req) => Ok(raft.append_entries(req).await),
        Err(e) => Err(e),
    })
}

pub async fn vote(State(app): AppState, Query(group): Query<GroupParam>, body: Bytes) -> Response {
    let raft = match raft_of(&app, &group) {
        Ok(raft) => raft,
        Err(absent) => return absent,
    };
    let req = match postcard::from_bytes::<VoteRequest<NodeId>>(&body) {
        Ok(req) => req,
        Err(e) => return encode::<()>(Err(e)),
    };
    // A node that holds no log and no snapshot, asked to vote by a candidate whose log holds
    // more than a new cluster's first entry, is one whose disk was lost: it no longer knows
    // whom it voted for, and its vote could elect a second leader in a term, or a leader
    // missing entries the lost log helped commit. It votes again once a leader has given it
    // the log (or a snapshot).
    let empty = {
        let m = raft.metrics();
        let m = m.borrow();
        m.last_log_index.is_none() && m.snapshot.is_none()
    };
    let forming = req.last_log_id.map_or(0, |l| l.index) == 0;
    if empty && !forming {
        let reason = "this node holds no log (its disk was lost?): it does not vote until a \
                      leader has replicated to it\n";
        return (StatusCode::SERVICE_UNAVAILABLE, reason).into_response();
    }
    encode(Ok(raft.vote(req).await))
}

pub async fn snapshot(
    State(app): AppState,
    Query(group): Query<GroupParam>,
    body: Bytes,
) -> Response {
    let raft = match raft_of(&app, &group) {
        Ok(raft) => raft,
        Err(absent) => return absent,
    };
    let req = postcard::from_bytes::<InstallSnapshotRequest<TypeConfig>>(&body);
    if let Ok(req) = &req {
        app.snapshot_chunks.fetch_add(1, Ordering::Relaxed);
        app.snapshot_bytes.fetch_add(req.data.len() as u64, Ordering::Relaxed);
    }
    drop(body);
    encode(match req {
        Ok(req) => Ok(raft.install_snapshot(req).await),
        Err(e) => Err(e),
    })
}

/// openraft's network: one HTTP client (keeping connections alive) for every peer, and every
/// group; each group's `Raft` has its own copy, naming the group in its RPCs.
#[derive(Clone)]
pub struct Network {
    client: reqwest::Client,
    token: Option<String>,
    scheme: &'static str,
    group: GroupId,
    pub peers: Peers,
}

impl Network {
    pub fn new(client: reqwest::Client, token: Option<String>, tls: bool) -> Network {
        let scheme = if tls { "https" } else { "http" };
        Network { client, token, scheme, group: 0, peers: Peers::default() }
    }

    /// The network of group `group`'s `Raft`: the same connections and peer records.
    pub fn for_group(&self, group: GroupId) -> Network {
        Network { group, ..self.clone() }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Connection {
        Connection {
            client: self.client.clone(),
            token: self.token.clone(),
            target,
            url: format!("{}://{}", self.scheme, node.addr),
            // Group 0's RPCs go as they did before groups existed, so a node that hosts one
            // group talks to an older build.
            query: match self.group {
                0 => String::new(),
                group => format!("?group={group}"),
            },
            peers: self.peers.clone(),
        }
    }
}

pub struct Connection {
    client: reqwest::Client,
    token: Option<String>,
    target: NodeId,
    url: String,
    /// The group's query string, appended to every RPC's path.
    query: String,
    peers: Peers,
}

type RpcError<E> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

impl Connection {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<(Resp, u64), RpcError<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body =
            postcard::to_allocvec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let sent_bytes = body.len() as u64;
        let mut request = self
            .client
            .post(format!("{}{path}{}", self.url, self.query))
            .timeout(option.hard_ttl())
            .header(header::CONTENT_TYPE, POSTCARD)
            .body(body);
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, bearer(token));
        }
        let sent = request
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
            // A peer that refuses a request (a body over its limit, one it cannot decode, a
            // wrong token) is not down: say so where an operator looks, as openraft only
            // retries.
            let text = String::from_utf8_lossy(&bytes);
            let refused = std::io::Error::other(format!(
                "{} {path}: HTTP {status}: {}",
                self.url,
                text.trim()
            ));
            return Err(RPCError::Network(NetworkError::new(&refused)));
        }
        let answer: Result<Resp, RaftError<NodeId, E>> =
            postcard::from_bytes(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        answer
            .map(|a| (a, sent_bytes))
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    /// Records the call's outcome in the node's view of its peers.
    fn note<T, E: std::fmt::Display>(
        &self,
        path: &str,
        result: Result<(T, u64), E>,
        snapshot: bool,
    ) -> Result<T, E> {
        match result {
            Ok((answer, bytes)) => {
                let (append, snap) = if snapshot { (0, bytes) } else { (bytes, 0) };
                self.peers.ok(self.target, append, snap);
                Ok(answer)
            }
            Err(e) => {
                self.peers.failed(self.target, format!("{path}: {e}"));
                Err(e)
            }
        }
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        req: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcError<openraft::error::Infallible>> {
        let answer = self.call("/raft/append", &req, &option).await;
        self.note("append", answer, false)
    }

    async fn install_snapshot(
        &mut self,
        req: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcError<InstallSnapshotError>> {
        let answer = self.call("/raft/snapshot", &req, &option).await;
        self.note("snapshot", answer, true)
    }

    async fn vote(
        &mut self,
        req: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcError<openraft::error::Infallible>> {
        let answer = self.call("/raft/vote", &req, &option).await;
        self.note("vote", answer, false)
    }
}

/// What `/shard/propose` answers: the group's answer to a command, or why it did not take it
/// ([`ShardError`], without its storage error's detail).
#[derive(Serialize, serde::Deserialize)]
enum Proposed {
    Done(ClientWriteResponse<TypeConfig>),
    NotHere,
    NotLeader(Option<NodeId>),
    Rejected(String),
    Raft(String),
}

/// `POST /shard/propose?group=G`, a postcard [`Command`]: a peer's [`ShardNode::propose`]
/// forwarded to this node, which it believes leads group G.
pub async fn propose(
    State(app): AppState,
    Query(group): Query<GroupParam>,
    body: Bytes,
) -> Response {
    let Some(node) = &app.node else {
        return (StatusCode::NOT_FOUND, "this node runs no shard map (--shards)\n").into_response();
    };
    let group = group.group.unwrap_or(0);
    let command = match postcard::from_bytes::<Command>(&body) {
        Ok(command) => command,
        Err(e) => return encode::<()>(Err(e)),
    };
    let answer = match node.propose_local(group, command).await {
        Ok(resp) => Proposed::Done(resp),
        Err(ShardError::NotHere { .. }) => Proposed::NotHere,
        Err(ShardError::NotLeader { leader, .. }) => Proposed::NotLeader(leader),
        Err(ShardError::Rejected(why)) => Proposed::Rejected(why),
        Err(e) => Proposed::Raft(e.to_string()),
    };
    encode(Ok(answer))
}

/// `POST /shard/ping`, a postcard [`Ping`]: a peer asks which of the groups it follows this
/// node still leads, so that it may keep them quiet (see [`bloomkv_raft::Quiet`]).
pub async fn ping(State(app): AppState, body: Bytes) -> Response {
    let Some(node) = &app.node else {
        return (StatusCode::NOT_FOUND, "this node runs no shard map (--shards)\n").into_response();
    };
    match postcard::from_bytes::<Ping>(&body) {
        Ok(ping) => encode(Ok(node.answer_ping(&ping))),
        Err(e) => encode::<()>(Err(e)),
    }
}

/// How long a forwarded command may take: its group's commit, and for a split the move of
/// the keys.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// A [`ShardNode`]'s way to the other nodes: each group's raft over this node's [`Network`],
/// and commands forwarded to `/shard/propose` at the address the metadata group's membership
/// gives a node.
#[derive(Clone)]
pub struct HttpTransport {
    network: Network,
    metadata: Arc<OnceLock<Raft>>,
}

impl HttpTransport {
    pub fn new(network: Network) -> HttpTransport {
        HttpTransport { network, metadata: Arc::default() }
    }

    /// The metadata group's raft, whose membership holds every node's address: known once
    /// the node has opened (until then, a forward fails and is retried).
    pub fn set_metadata(&self, raft: Raft) {
        let _ = self.metadata.set(raft);
    }

    /// Node `node`'s address, as the metadata group's membership has it.
    pub fn addr(&self, node: NodeId) -> Option<String> {
        let raft = self.metadata.get()?;
        let metrics = raft.metrics();
        let m = metrics.borrow();
        m.membership_config.membership().get_node(&node).map(|n| n.addr.clone())
    }

    /// A request to `path` on node `node`, with the cluster's token.
    pub fn post(&self, node: NodeId, path: &str) -> Result<reqwest::RequestBuilder, String> {
        let addr = self.addr(node).ok_or_else(|| format!("node {node} has no known address"))?;
        let url = format!("{}://{addr}{path}", self.network.scheme);
        let mut request = self.network.client.post(url);
        if let Some(token) = &self.network.token {
            request = request.header(header::AUTHORIZATION, bearer(token));
        }
        Ok(request)
    }
}

impl Transport for HttpTransport {
    type Network = Network;

    fn network(&self, group: GroupId) -> Network {
        self.network.for_group(group)
    }

    async fn forward(
        &self,
        node: NodeId,
        group: GroupId,
        command: Command,
    ) -> Result<ClientWriteResponse<TypeConfig>, ShardError> {
        let path = format!("/shard/propose?group={group}");
        match self.call(node, &path, &command, FORWARD_TIMEOUT).await? {
            Proposed::Done(resp) => Ok(resp),
            Proposed::NotHere => Err(ShardError::NotHere { group }),
            Proposed::NotLeader(leader) => Err(ShardError::NotLeader { group, leader }),
            Proposed::Rejected(why) => Err(ShardError::Rejected(why)),
            Proposed::Raft(why) => Err(ShardError::Raft(why)),
        }
    }

    // One request a round to each node leading groups here, however many groups: what lets
    // groups with several voters stop ticking while idle. `ShardNode` bounds its wait sooner.
    async fn ping(&self, node: NodeId, ping: Ping) -> Result<Pong, ShardError> {
        self.call(node, "/shard/ping", &ping, FORWARD_TIMEOUT).await
    }
}

impl HttpTransport {
    /// Posts `body` (postcard) to `path` on node `node` and decodes its postcard answer.
    async fn call<T: Serialize, R: serde::de::DeserializeOwned>(
        &self,
        node: NodeId,
        path: &str,
        body: &T,
        timeout: Duration,
    ) -> Result<R, ShardError> {
        let failed = |e: &dyn std::fmt::Display| ShardError::Raft(format!("node {node}: {e}"));
        let body = postcard::to_allocvec(body).map_err(|e| failed(&e))?;
        let request = self.post(node, path).map_err(|e| failed(&e))?;
        let sent = request
            .timeout(timeout)
            .header(header::CONTENT_TYPE, POSTCARD)
            .body(body)
            .send()
            .await
            .map_err(|e| failed(&e))?;
        let status = sent.status();
        let bytes = sent.bytes().await.map_err(|e| failed(&e))?;
        if !status.is_success() {
            return Err(failed(&format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes))));
        }
        postcard::from_bytes::<R>(&bytes).map_err(|e| failed(&e))
    }
}
