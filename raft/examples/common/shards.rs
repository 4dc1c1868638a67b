//! The cluster calls of a node on a [`ShardNode`] (`--shards`): forming the cluster with its
//! replicated shard map, splitting a group, moving a group's replica to another node and
//! removing a node whose replicas have moved. Each is safe to send again: one that finds its
//! change made answers so (`"already": true`), and one that gives up (504) goes on to its end
//! in the node, where sending it again finds it done or completes it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bloomkv_raft::shard::{ShardCommand, ShardMap, META_GROUP, SPLIT_GROUP_BASE};
use bloomkv_raft::{Command, GroupId, NodeId, Outcome, ShardError, ShardNode};
use openraft::error::ForwardToLeader;
use openraft::BasicNode;
use serde_json::json;

use super::cluster::{admin, change_failed, remove_from, GroupParam, RemoveFailed};
use super::{cut, json_line, not_group_leader, App, HttpTransport};

type AppState = State<Arc<App>>;
type Node = ShardNode<HttpTransport>;

/// How long a call to another node (to host or drop a replica) may take.
const PEER_CALL: Duration = Duration::from_secs(10);

fn shard_node(app: &App) -> Result<Node, Response> {
    app.node.clone().ok_or_else(|| {
        let body = "only a node started with --shards splits and moves groups\n";
        (StatusCode::BAD_REQUEST, body).into_response()
    })
}

/// A shard operation's failure: 409 for one the cluster refused (changing nothing), 503 for
/// one raft could not finish (no leader in time, a node unreachable): send it again.
fn failed(e: ShardError) -> Response {
    let status = match e {
        ShardError::Rejected(_) | ShardError::WrongShard { .. } => StatusCode::CONFLICT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, format!("{e}\n")).into_response()
}

/// Runs `op` in a task of its own and answers with `done` of its result within the node's
/// admin timeout: a call that times out (504) is not cut off half done.
async fn detached<T: Send + 'static>(
    app: &App,
    what: &str,
    op: impl Future<Output = Result<T, ShardError>> + Send + 'static,
    done: impl FnOnce(T) -> Response + Send,
) -> Response {
    let task = tokio::spawn(op);
    admin(app, what, async move {
        match task.await {
            Ok(Ok(value)) => done(value),
            Ok(Err(e)) => failed(e),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        }
    })
    .await
}

/// `POST /cluster/init`, optionally with `[[id, "addr"], ...]`, the cluster's first nodes
/// (this one is added if missing; every one must be running): the metadata group on them all,
/// holding a map of `--shards` ranges ([`cut`]) served by groups 1 to N, each on them all. Sent again
/// with the same nodes, it completes what a crash left undone; with others, once the map
/// exists, it answers 409.
pub async fn init(app: Arc<App>, body: Bytes) -> Response {
    let node = match shard_node(&app) {
        Ok(node) => node,
        Err(answer) => return answer,
    };
    let mut members: BTreeMap<NodeId, BasicNode> = BTreeMap::new();
    if !body.is_empty() {
        match serde_json::from_slice::<Vec<(NodeId, String)>>(&body) {
            Ok(list) => members.extend(list.into_iter().map(|(id, a)| (id, BasicNode::new(a)))),
            Err(e) => {
                let body = format!("expected [[id, \"host:port\"], ...]: {e}\n");
                return (StatusCode::BAD_REQUEST, body).into_response();
            }
        }
    }
    members.entry(app.id).or_insert_with(|| BasicNode::new(&app.addr));
    let ids: BTreeSet<NodeId> = members.keys().copied().collect();
    let map = cut(app.shard_count).map_err(|e| e.to_string()).and_then(|starts| {
        // Groups 1 to N: group 0 is the store's default keyspace, which a move could not
        // drop from the node it leaves.
        let ranges = starts.into_iter().zip(1..).map(|(start, g)| (start, g, ids.clone()));
        ShardMap::from_ranges(1, ranges).map_err(|e| e.to_string())
    });
    let map = match map {
        Ok(map) => map,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let groups = map.len();
    let op = async move { node.bootstrap(map, members).await };
    detached(&app, "init", op, move |()| {
        let body = json!({ "initialized": true, "groups": groups, "nodes": ids });
        json_line(StatusCode::OK, body)
    })
    .await
}

/// `{"group": G, "at": "key"}`: split group G at `key` (UTF-8).
#[derive(serde::Deserialize)]
pub struct SplitParams {
    group: GroupId,
    at: String,
}

/// `POST /cluster/split`: splits group G at the key: the keys from there to G's end go to a
/// new group on G's members. Answers `{"group", "at", "new_group", "map_version", "already"}`;
/// sent again, it finds the split made and answers the same group.
pub async fn split(State(app): AppState, Json(params): Json<SplitParams>) -> Response {
    let node = match shard_node(&app) {
        Ok(node) => node,
        Err(answer) => return answer,
    };
    let SplitParams { group, at } = params;
    let answer = {
        let at = at.clone();
        move |(made, already, version): (GroupId, bool, u64)| {
            let body = json!({ "group": group, "at": at, "new_group": made,
                               "map_version": version, "already": already });
            json_line(StatusCode::OK, body)
        }
    };
    let task_app = app.clone();
    let op = async move {
        let at = at.into_bytes();
        let (made, already) = match split_made(&node, group, &at) {
            Some(made) => (made, true),
            None => {
                let made = match node.split(group, &at).await {
                    Ok(made) => made,
                    // Its split entry may have applied before a retry of it (the group's
                    // leader changed under it) was refused: the group ends at the key now.
                    Err(e) => split_made(&node, group, &at).ok_or(e)?,
                };
                task_app.splits.fetch_add(1, Ordering::Relaxed);
                (made, false)
            }
        };
        // A split found made may not be in the map yet (the nodes record it on their own, and
        // may be down): recorded here, idempotently, so the answer's map shows it.
        let record = ShardCommand::RecordSplit { group, at, new_group: made };
        match node.propose(META_GROUP, Command::Shard(record)).await?.data {
            Outcome::Applied => {}
            other => return Err(ShardError::Rejected(format!("recording the split: {other:?}"))),
        }
        Ok((made, already, node.read_map().await?.version()))
    };
    detached(&app, "split", op, answer).await
}

/// The group a split of `group` at `at` made, if this node knows of one: from its replica of
/// the group, or from its map.
fn split_made(node: &Node, group: GroupId, at: &[u8]) -> Option<GroupId> {
    if let Ok(Some(range)) = node.range(group) {
        if let Some((_, made)) = range.splits.iter().find(|(key, _)| key == at) {
            return Some(*made);
        }
    }
    let map = node.map()?;
    let right = map.shard_of(at);
    let split = right.start == at
        && right.group >= SPLIT_GROUP_BASE
        && map.group(group).is_some_and(|left| left.end == Some(at));
    split.then_some(right.group)
}

/// `{"group": G, "from": F, "to": T}`.
#[derive(serde::Deserialize)]
pub struct MoveParams {
    group: GroupId,
    from: NodeId,
    to: NodeId,
}

/// `POST /cluster/move`, on group G's leader (elsewhere 421 with it): moves G's replica from
/// node F to node T, which must be in the cluster (a member or learner of the metadata
/// group, `/cluster/learner`). T starts an empty replica, joins as a learner, catches up (by
/// snapshot), becomes a voter in F's place, the map records it, and F drops its copy.
/// Answers `{"group", "from", "to", "already", "dropped"}`; `dropped` false (with `drop_error`)
/// if F could not drop its copy (down, say): send the move again once it is up.
pub async fn move_replica(State(app): AppState, Json(params): Json<MoveParams>) -> Response {
    let node = match shard_node(&app) {
        Ok(node) => node,
        Err(answer) => return answer,
    };
    let MoveParams { group, from, to } = params;
    if from == to {
        return (StatusCode::BAD_REQUEST, "from and to are the same node\n").into_response();
    }
    let answer = move |(already, dropped): (bool, Result<(), String>)| {
        let mut body = json!({ "group": group, "from": from, "to": to, "already": already,
                               "dropped": dropped.is_ok() });
        if let Err(e) = dropped {
            body["drop_error"] = json!(e);
        }
        json_line(StatusCode::OK, body)
    };
    let members = match members_of(&node, group).await {
        Ok(members) => members,
        Err(e) => return failed(e),
    };
    if members.contains(&to) && !members.contains(&from) {
        let dropped = drop_on(&app, from, group).await;
        return answer((true, dropped));
    }
    if !members.contains(&from) {
        let body = format!("node {from} holds no replica of group {group}; nothing changed\n");
        return (StatusCode::CONFLICT, body).into_response();
    }
    if let Some(elsewhere) = leader_elsewhere(&app, &node, group, &members) {
        return elsewhere;
    }
    let task_app = app.clone();
    let op = async move {
        host_on(&task_app, to, group).await?;
        node.move_replica(group, from, to).await?;
        task_app.moves.fetch_add(1, Ordering::Relaxed);
        Ok((false, drop_on(&task_app, from, group).await))
    };
    detached(&app, "move", op, answer).await
}

/// Group `group`'s members: the map's, or for the metadata group its voters.
async fn members_of(node: &Node, group: GroupId) -> Result<BTreeSet<NodeId>, ShardError> {
    if group == META_GROUP {
        let raft = node.raft(META_GROUP).ok_or(ShardError::NotHere { group })?;
        let voters = raft.metrics().borrow().membership_config.membership().voter_ids().collect();
        return Ok(voters);
    }
    let map = node.read_map().await?;
    let shard =
        map.group(group).ok_or_else(|| ShardError::Rejected(format!("no group {group}")))?;
    Ok(shard.members.clone())
}

/// The answer sending a call for `group` to its leader, unless this node leads it: 421 with
/// the leader (or, where this node runs no replica, a member), 503 while none is known.
fn leader_elsewhere(
    app: &App,
    node: &Node,
    group: GroupId,
    members: &BTreeSet<NodeId>,
) -> Option<Response> {
    let addr = |id: &NodeId| app.transport.as_ref()?.addr(*id).map(BasicNode::new);
    let leader = match node.raft(group) {
        Some(raft) => raft.metrics().borrow().current_leader,
        None => members.iter().find(|m| addr(m).is_some()).copied(),
    };
    match leader {
        Some(leader) if leader == app.id => None,
        Some(leader) => {
            let f = ForwardToLeader { leader_id: Some(leader), leader_node: addr(&leader) };
            Some(not_group_leader(f, Some(group)))
        }
        None => Some(
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                format!("group {group} has no leader known here\n"),
            )
                .into_response(),
        ),
    }
}

/// Calls `path` on node `to` (this node's own handler if it is this one).
async fn on_node(app: &App, to: NodeId, path: &str) -> Result<(), String> {
    let transport = app.transport.as_ref().ok_or("not a shard node")?;
    let sent = transport.post(to, path)?.timeout(PEER_CALL).send().await;
    let sent = sent.map_err(|e| format!("node {to}: {e}"))?;
    let status = sent.status();
    let text = sent.text().await.unwrap_or_default();
    match status.is_success() {
        true => Ok(()),
        false => Err(format!("node {to}: {status}: {}", text.trim())),
    }
}

/// Starts an empty replica of `group` on node `to`, for a move to fill.
async fn host_on(app: &App, to: NodeId, group: GroupId) -> Result<(), ShardError> {
    match (to == app.id, &app.node) {
        (true, Some(node)) => node.host(group).await,
        _ => on_node(app, to, &format!("/cluster/host?group={group}")).await.map_err(|e| {
            ShardError::Raft(format!("{e} (is it in the cluster? /cluster/learner adds it)"))
        }),
    }
}

/// Drops node `from`'s copy of `group`, which a move took away. The metadata group's stays:
/// its member leaves it by `/cluster/remove-node`.
async fn drop_on(app: &App, from: NodeId, group: GroupId) -> Result<(), String> {
    if group == META_GROUP {
        return Ok(());
    }
    match (from == app.id, &app.node) {
        (true, Some(node)) => match node.groups().contains(&group) {
            true => node.remove_replica(group).await.map_err(|e| e.to_string()),
            false => Ok(()),
        },
        _ => on_node(app, from, &format!("/cluster/drop?group={group}")).await,
    }
}

/// `POST /cluster/host?group=G`: starts an empty replica of group G here, for a move to this
/// node (sent by the group's leader during `/cluster/move`).
pub async fn host(State(app): AppState, Query(param): Query<GroupParam>) -> Response {
    let node = match shard_node(&app) {
        Ok(node) => node,
        Err(answer) => return answer,
    };
    let Some(group) = param.group else {
        return (StatusCode::BAD_REQUEST, "?group=G is required\n").into_response();
    };
    match node.host(group).await {
        Ok(()) => format!("hosting group {group}\n").into_response(),
        Err(e) => failed(e),
    }
}

/// `POST /cluster/drop?group=G`: stops this node's replica of group G and deletes its copy,
/// once the map no longer lists this node among G's members (else 409). Nothing to drop: 200.
pub async fn drop_replica(State(app): AppState, Query(param): Query<GroupParam>) -> Response {
    let node = match shard_node(&app) {
        Ok(node) => node,
        Err(answer) => return answer,
    };
    let Some(group) = param.group.filter(|&g| g != META_GROUP) else {
        return (StatusCode::BAD_REQUEST, "?group=G (a data group) is required\n").into_response();
    };
    if !node.groups().contains(&group) {
        return format!("no replica of group {group} here\n").into_response();
    }
    let op = async move { node.remove_replica(group).await };
    detached(&app, "drop", op, move |()| format!("dropped group {group}\n").into_response()).await
}

/// `POST /cluster/remove-node` with a node id, on the metadata group's leader (elsewhere 421
/// with it): removes the node from the cluster (the metadata group) once the map lists it in
/// no group (else 409 with the groups to move first). A node not in the cluster: 200,
/// `"already": true`.
pub async fn remove_node(State(app): AppState, Json(id): Json<NodeId>) -> Response {
    let node = match shard_node(&app) {
        Ok(node) => node,
        Err(answer) => return answer,
    };
    let map = match node.read_map().await {
        Ok(map) => map,
        Err(e) => return failed(e),
    };
    let held: Vec<GroupId> =
        map.shards().filter(|s| s.members.contains(&id)).map(|s| s.group).collect();
    if !held.is_empty() {
        let body = json!({ "error": "the node still holds replicas: move them first",
                           "groups": held });
        return json_line(StatusCode::CONFLICT, body);
    }
    let Some(meta) = node.raft(META_GROUP) else {
        return failed(ShardError::NotHere { group: META_GROUP });
    };
    let membership = meta.metrics().borrow().membership_config.membership().clone();
    if membership.get_node(&id).is_none() {
        return json_line(StatusCode::OK, json!({ "removed": id, "already": true }));
    }
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    if let Some(elsewhere) = leader_elsewhere(&app, &node, META_GROUP, &voters) {
        return elsewhere;
    }
    admin(&app, "remove node", async {
        match remove_from(&meta, &BTreeSet::from([id])).await {
            Ok(index) => {
                let body = json!({ "removed": id, "already": false, "log_index": index });
                json_line(StatusCode::OK, body)
            }
            Err(RemoveFailed::Answer(answer)) => answer,
            Err(RemoveFailed::Change(e)) => change_failed(e, Some(META_GROUP)),
        }
    })
    .await
}
