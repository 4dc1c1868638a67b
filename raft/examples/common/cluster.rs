//! Cluster management: forming a cluster, adding a learner and waiting until it has caught up,
//! changing and removing members, snapshots, and what the node reports of itself (status,
//! health, metrics). On a node hosting several raft groups a call acts on every group in turn
//! (or, with `?group=G`, on group G alone), so every group has the same members.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bloomkv_raft::shard::META_GROUP;
use bloomkv_raft::{GroupId, NodeId};
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use serde_json::json;

use super::{json_line, not_group_leader, App, Group};

type AppState = State<Arc<App>>;
type Metrics = openraft::RaftMetrics<NodeId, BasicNode>;

/// A cluster call's `?group=G`: act on group G alone (none: on every group).
#[derive(serde::Deserialize)]
pub struct GroupParam {
    pub group: Option<GroupId>,
}

/// The groups a cluster call acts on, or 404 for a group this node does not host. On a
/// shard node a call that names no group acts on the metadata group alone: the data groups'
/// members change by moves, which keep the map in step.
fn targets(app: &App, group: Option<GroupId>) -> Result<Vec<(GroupId, Group)>, Response> {
    let group = group.or(app.node.as_ref().map(|_| META_GROUP));
    match group {
        None => Ok(app.groups.iter().map(|(id, g)| (*id, g.clone())).collect()),
        Some(id) => {
            match app.group(id) {
                Some(g) => Ok(vec![(id, g)]),
                None => Err((StatusCode::NOT_FOUND, format!("no group {id} on this node\n"))
                    .into_response()),
            }
        }
    }
}

/// Makes this node the one voter of every group that has no members yet. A node whose groups
/// all have members answers 409; one that has some (an init cut short) initializes the rest.
pub async fn init(State(app): AppState, body: axum::body::Bytes) -> Response {
    if app.node.is_some() {
        return super::shards::init(app, body).await;
    }
    let me = BTreeMap::from([(app.id, BasicNode::new(&app.addr))]);
    admin(&app, "init", async {
        let mut refused = None;
        let mut initialized = 0;
        for group in app.groups.values() {
            match group.raft.initialize(me.clone()).await {
                Ok(()) => initialized += 1,
                Err(RaftError::APIError(e @ InitializeError::NotAllowed(_))) => {
                    refused.get_or_insert(e.to_string());
                }
                Err(e) => {
                    return (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response()
                }
            }
        }
        match (initialized, refused) {
            (0, Some(e)) => (StatusCode::CONFLICT, format!("{e}\n")).into_response(),
            _ => (StatusCode::OK, "initialized\n").into_response(),
        }
    })
    .await
}

#[derive(serde::Deserialize)]
pub struct LearnerParams {
    /// `false`: answer once the learner is added, without waiting for it to catch up.
    wait: Option<bool>,
    group: Option<GroupId>,
}

/// Adds a learner, then waits until it has matched everything the leader's log held when it
/// was added: only then can it be promoted without holding up commits. Catching up 1 GiB by
/// snapshot takes tens of seconds; past the admin timeout the call answers 504 and the learner
/// goes on catching up (`/cluster/status` shows its lag in entries and bytes).
pub async fn add_learner(
    State(app): AppState,
    Query(params): Query<LearnerParams>,
    Json((id, addr)): Json<(NodeId, String)>,
) -> Response {
    let started = Instant::now();
    let groups = match targets(&app, params.group) {
        Ok(groups) => groups,
        Err(absent) => return absent,
    };
    admin(&app, "add learner", async {
        // Every group first, then the waits: the groups catch up at once, not in turn.
        let mut added = Vec::new();
        for (group, g) in &groups {
            let target = g.raft.metrics().borrow().last_log_index;
            match g.raft.add_learner(id, BasicNode::new(addr.clone()), false).await {
                Ok(resp) => added.push((g.clone(), resp.log_id.index, target.unwrap_or(0))),
                Err(e) => return change_failed(e, app.named(*group)),
            }
        }
        let in_groups = match groups.len() {
            1 => String::new(),
            n => format!(" in {n} groups"),
        };
        let (_, first, _) = added[0];
        if params.wait == Some(false) {
            return format!(
                "learner {id} added{in_groups} at log index {first}; not waiting for it\n"
            )
            .into_response();
        }
        let mut reached = 0;
        for (g, index, target) in added {
            let target = target.max(index);
            let caught_up =
                move |m: &Metrics| matched(m, id).is_some_and(|matched| matched >= target);
            if let Err(e) = g.raft.wait(None).metrics(caught_up, "learner caught up").await {
                return (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response();
            }
            reached = reached.max(target);
        }
        format!(
            "learner {id} added{in_groups} at log index {first}, caught up to {reached} in {:.1} s\n",
            started.elapsed().as_secs_f64()
        )
        .into_response()
    })
    .await
}

/// A membership call's failure: the redirect, 409 for a change the cluster's state refuses
/// (another change in progress, a voter that is not a learner yet: retrying as is will not
/// help until that changes), 503 for the rest.
pub(super) fn change_failed(
    e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>,
    group: Option<GroupId>,
) -> Response {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => not_group_leader(f, group),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            (StatusCode::CONFLICT, format!("{e}\n")).into_response()
        }
        e => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// On a leader, the last log index `id` has matched.
fn matched(m: &Metrics, id: NodeId) -> Option<u64> {
    m.replication.as_ref()?.get(&id).copied().flatten().map(|l| l.index)
}

/// Makes the voters exactly `ids` (each already a member: add it as a learner first); a voter
/// not in `ids` leaves the cluster.
pub async fn change_membership(
    State(app): AppState,
    Query(param): Query<GroupParam>,
    Json(ids): Json<BTreeSet<NodeId>>,
) -> Response {
    let groups = match targets(&app, param.group) {
        Ok(groups) => groups,
        Err(absent) => return absent,
    };
    admin(&app, "change members", async {
        let mut first = None;
        for (group, g) in &groups {
            match g.raft.change_membership(ids.clone(), false).await {
                Ok(resp) => _ = first.get_or_insert(resp.log_id.index),
                Err(e) => return change_failed(e, app.named(*group)),
            }
        }
        let index = first.unwrap_or(0);
        format!("voters now {ids:?}, at log index {index}\n").into_response()
    })
    .await
}

/// Removes members, voters or learners: voters first leave the voters (a joint change), then
/// every named node leaves the cluster, and the leader stops replicating to it.
pub async fn remove(
    State(app): AppState,
    Query(param): Query<GroupParam>,
    Json(ids): Json<BTreeSet<NodeId>>,
) -> Response {
    let groups = match targets(&app, param.group) {
        Ok(groups) => groups,
        Err(absent) => return absent,
    };
    admin(&app, "remove members", async {
        let mut index = 0;
        for (group, g) in &groups {
            match remove_from(&g.raft, &ids).await {
                Ok(at) => index = index.max(at),
                Err(RemoveFailed::Answer(answer)) => return answer,
                Err(RemoveFailed::Change(e)) => return change_failed(e, app.named(*group)),
            }
        }
        format!("removed {ids:?}, at log index {index}\n").into_response()
    })
    .await
}

pub(super) enum RemoveFailed {
    Answer(Response),
    Change(RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>),
}

/// Removes `ids` from one group's membership; the log index of the last change.
pub(super) async fn remove_from(
    raft: &bloomkv_raft::Raft,
    ids: &BTreeSet<NodeId>,
) -> Result<u64, RemoveFailed> {
    let membership = raft.metrics().borrow().membership_config.membership().clone();
    let unknown: Vec<_> = ids.iter().filter(|id| membership.get_node(id).is_none()).collect();
    if !unknown.is_empty() {
        let body = format!("not members: {unknown:?}; nothing changed\n");
        return Err(RemoveFailed::Answer((StatusCode::NOT_FOUND, body).into_response()));
    }
    let voters: BTreeSet<NodeId> = membership.voter_ids().filter(|id| ids.contains(id)).collect();
    if !voters.is_empty() && voters.len() == membership.voter_ids().count() {
        let body = "refusing to remove every voter; nothing changed\n";
        return Err(RemoveFailed::Answer((StatusCode::CONFLICT, body).into_response()));
    }
    // Voters leave in one change, which also drops them as nodes (`retain` false): the
    // leader may be among them and step down once it commits. Learners leave in another.
    let learners: BTreeSet<NodeId> = ids.difference(&voters).copied().collect();
    let mut index = 0;
    for change in [ChangeMembers::RemoveVoters(voters), ChangeMembers::RemoveNodes(learners)] {
        let empty = match &change {
            ChangeMembers::RemoveVoters(v) | ChangeMembers::RemoveNodes(v) => v.is_empty(),
            _ => false,
        };
        if empty {
            continue;
        }
        match raft.change_membership(change, false).await {
            Ok(resp) => index = resp.log_id.index,
            Err(e) => return Err(RemoveFailed::Change(e)),
        }
    }
    Ok(index)
}

pub async fn take_snapshot(State(app): AppState, Query(param): Query<GroupParam>) -> Response {
    let groups = match targets(&app, param.group) {
        Ok(groups) => groups,
        Err(absent) => return absent,
    };
    admin(&app, "snapshot", async {
        let mut taken = Vec::new();
        for (_, g) in &groups {
            match snapshot_of(&g.raft).await {
                Ok(upto) => taken.push(upto),
                Err(answer) => return answer,
            }
        }
        match taken.as_slice() {
            [upto] => format!("snapshot at index {upto}, log purged up to it\n").into_response(),
            all => format!("snapshots at indexes {all:?} (by group), logs purged up to them\n")
                .into_response(),
        }
    })
    .await
}

/// Takes a snapshot of one group, then purges its log up to it: the index it covers.
async fn snapshot_of(raft: &bloomkv_raft::Raft) -> Result<u64, Response> {
    let applied = raft.metrics().borrow().last_applied.map(|l| l.index);
    let Some(upto) = applied else {
        return Err((StatusCode::CONFLICT, "nothing applied yet\n").into_response());
    };
    let failed = |e: &dyn std::fmt::Display| {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response()
    };
    if let Err(e) = raft.trigger().snapshot().await {
        return Err(failed(&e));
    }
    let taken = |m: &Metrics| m.snapshot.is_some_and(|s| s.index >= upto);
    if let Err(e) = raft.wait(None).metrics(taken, "snapshot taken").await {
        return Err(failed(&e));
    }
    if let Err(e) = raft.trigger().purge_log(upto).await {
        return Err(failed(&e));
    }
    let purged = |m: &Metrics| m.purged.is_some_and(|p| p.index >= upto);
    if let Err(e) = raft.wait(None).metrics(purged, "log purged").await {
        return Err(failed(&e));
    }
    Ok(upto)
}

/// `{"dir": "/path"}`: a directory on the node's machine.
#[derive(serde::Deserialize)]
pub struct DirParam {
    dir: std::path::PathBuf,
}

/// Writes a copy of this node's whole store to `dir` (which must not exist, or be empty; a
/// relative path is the node's working directory's): a backup, taken at one moment, of
/// everything this node has applied. Any node can take one; a follower's may be a little
/// behind the leader.
pub async fn backup(State(app): AppState, Json(DirParam { dir }): Json<DirParam>) -> Response {
    let applied = app.raft.metrics().borrow().last_applied.map(|l| l.index);
    let kv = app.kv.clone();
    let copy = tokio::task::spawn_blocking(move || kv.checkpoint(&dir).map(|_| dir));
    let taken = match tokio::time::timeout(app.admin_timeout, copy).await {
        Ok(taken) => taken,
        Err(_) => {
            let body = "backup gave up waiting; the copy may still complete\n";
            return (StatusCode::GATEWAY_TIMEOUT, body).into_response();
        }
    };
    match taken {
        Ok(Ok(dir)) => {
            json_line(StatusCode::OK, json!({ "dir": dir, "applied_at_least": applied }))
        }
        Ok(Err(e)) => (StatusCode::BAD_REQUEST, format!("backup: {e}\n")).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("backup: {e}\n")).into_response(),
    }
}

/// Bytes of data per restoring write: well under the entry cap, so a batch never needs more.
const RESTORE_BATCH_BYTES: usize = 512 << 10;

/// Writes every key of the backup in `dir` through the log, in batches, on the leader: how a
/// cluster is rebuilt from a backup (on a new cluster), or how keys lost by mistake are put
/// back (on the same one; keys written since the backup and absent from it stay). Answers 202
/// at once; `/cluster/status` shows the restore's progress under `restore`.
pub async fn restore(State(app): AppState, Json(DirParam { dir }): Json<DirParam>) -> Response {
    if app.sharded() {
        // Each key would have to go to its own group's leader: not done here.
        let body = "a restore writes through group 0 alone: not on a node of several groups\n";
        return (StatusCode::BAD_REQUEST, body).into_response();
    }
    if let Some(redirect) = super::kv::forward(&app) {
        return redirect;
    }
    if !dir.is_dir() {
        let body = format!("{}: not a directory\n", dir.display());
        return (StatusCode::BAD_REQUEST, body).into_response();
    }
    {
        let mut progress = app.restore.lock().unwrap();
        if progress.as_ref().is_some_and(|p| p["done"] == false) {
            return (StatusCode::CONFLICT, "a restore is already running\n").into_response();
        }
        *progress = Some(json!({ "dir": dir, "keys": 0, "bytes": 0, "done": false }));
    }
    let task = app.clone();
    tokio::spawn(async move {
        let result = run_restore(&task, &dir).await;
        let mut progress = task.restore.lock().unwrap();
        if let Some(p) = progress.as_mut() {
            p["done"] = json!(true);
            if let Err(e) = result {
                eprintln!("restore from {} failed: {e}", dir.display());
                p["error"] = json!(e.to_string());
            }
        }
    });
    (StatusCode::ACCEPTED, "restore started; see /cluster/status\n").into_response()
}

async fn run_restore(app: &App, dir: &std::path::Path) -> super::BoxResult<()> {
    use bloomkv_raft::{Command, Outcome};
    // The backup is opened as a store of its own (which writes to it: restore from a copy),
    // for its data; its log and vote are not used.
    let (_log, sm) = bloomkv_raft::open(dir, bloomkv::Options::default())?;
    let backup = sm.reader();
    let mut items = backup.scan();
    let mut done = false;
    while !done {
        let (mut batch, mut bytes) = (Vec::new(), 0usize);
        loop {
            match items.next() {
                None => {
                    done = true;
                    break;
                }
                Some(item) => {
                    let (key, value) = item?;
                    bytes += key.len() + value.len();
                    batch.push(Command::put(key, value.to_vec()));
                    if bytes >= RESTORE_BATCH_BYTES {
                        break;
                    }
                }
            }
        }
        if batch.is_empty() {
            break;
        }
        let (keys, size) = (batch.len(), bytes);
        // A restore is one more writer: it waits its turn rather than being refused.
        let _room = loop {
            if let Ok(permit) = app.writes.admit(bytes).await {
                break permit;
            }
        };
        match app.raft.client_write(Command::Batch(batch)).await?.data {
            Outcome::Applied => {}
            other => return Err(format!("a restoring write was not applied: {other:?}").into()),
        }
        if let Some(p) = app.restore.lock().unwrap().as_mut() {
            p["keys"] = json!(p["keys"].as_u64().unwrap_or(0) + keys as u64);
            p["bytes"] = json!(p["bytes"].as_u64().unwrap_or(0) + size as u64);
        }
    }
    backup.close()?;
    Ok(())
}

/// Runs a cluster call for at most the node's admin timeout.
pub(super) async fn admin(
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

/// 200 while the node's raft core runs, 503 with the reason once it has stopped (a storage
/// error, a log it cannot follow): such a node serves nothing, and its process should be
/// restarted or replaced.
pub async fn health(State(app): AppState) -> Response {
    let m = app.raft.metrics().borrow().clone();
    // A node serves only while every group's core runs.
    for id in app.group_ids().into_iter().filter(|id| *id != 0) {
        let Some(group) = app.group(id) else { continue };
        if let Err(fatal) = &group.raft.metrics().borrow().running_state {
            let error = format!("group {id}: {fatal}");
            return json_line(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "healthy": false, "error": error }),
            );
        }
    }
    match &m.running_state {
        Ok(()) => {
            json_line(StatusCode::OK, json!({ "healthy": true, "state": format!("{:?}", m.state) }))
        }
        Err(fatal) => json_line(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "healthy": false, "error": fatal.to_string() }),
        ),
    }
}

/// On a leader, what it knows of one other member.
struct Follower {
    id: NodeId,
    matched: Option<u64>,
    lag_entries: u64,
    /// `None` where the log is not at hand (a read failed).
    lag_bytes: Option<u64>,
    /// Milliseconds since an RPC to it last succeeded; `None`: never, since this node started.
    last_contact_ms: Option<u64>,
    errors: u64,
    last_error: Option<String>,
}

/// Each other member's replication, on a leader.
fn followers(app: &App, m: &Metrics) -> Option<Vec<Follower>> {
    let last = m.last_log_index.unwrap_or(0);
    let replication = m.replication.as_ref()?;
    let peers = app.network.peers.get();
    Some(
        replication
            .iter()
            .filter(|(id, _)| **id != m.id)
            .map(|(&id, matched)| {
                let matched = matched.map(|l| l.index);
                let peer = peers.get(&id);
                Follower {
                    id,
                    matched,
                    // A member that has matched nothing (new, or its disk was lost) lags by
                    // the whole log.
                    lag_entries: match matched {
                        Some(i) => last.saturating_sub(i),
                        None => m.last_log_index.map_or(0, |l| l + 1),
                    },
                    lag_bytes: app.log.as_ref().and_then(|l| l.bytes_between(matched, last).ok()),
                    last_contact_ms: peer
                        .and_then(|p| p.last_ok)
                        .map(|t| t.elapsed().as_millis() as u64),
                    errors: peer.map_or(0, |p| p.errors),
                    last_error: peer.and_then(|p| p.last_error.clone()),
                }
            })
            .collect(),
    )
}

pub async fn status(State(app): AppState) -> Response {
    let m = app.raft.metrics().borrow().clone();
    let leader_addr = m
        .current_leader
        .and_then(|l| m.membership_config.membership().get_node(&l).map(|n| n.addr.clone()));
    let followers = followers(&app, &m);
    let lag = followers.as_ref().map(|f| {
        f.iter().map(|f| (f.id.to_string(), json!(f.lag_entries))).collect::<BTreeMap<_, _>>()
    });
    let replication = followers.as_ref().map(|f| {
        f.iter()
            .map(|f| {
                let detail = json!({
                    "matched": f.matched,
                    "lag_entries": f.lag_entries,
                    "lag_bytes": f.lag_bytes,
                    "last_contact_ms": f.last_contact_ms,
                    "errors": f.errors,
                    "last_error": f.last_error,
                });
                (f.id.to_string(), detail)
            })
            .collect::<BTreeMap<_, _>>()
    });
    let membership = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let learners: Vec<NodeId> = membership.learner_ids().collect();
    let groups = app.sharded().then(|| group_status(&app));
    let auto_split = app.node.as_ref().map(|node| {
        let stats = node.auto_split_stats();
        json!({
            "checks": stats.checks,
            "splits": stats.splits,
            "failures": stats.failures,
            "last_failure": stats.last_failure,
        })
    });
    json_line(
        StatusCode::OK,
        json!({
            "groups": groups,
            "shard_map_version": app.map().map(|m| m.version()),
            "auto_split": auto_split,
            "id": app.id,
            "healthy": m.running_state.is_ok(),
            "error": m.running_state.as_ref().err().map(|e| e.to_string()),
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
            "replication": replication,
            "voters": voters,
            "learners": learners,
            "write_bytes_in_flight": app.writes.in_flight(),
            "restore": app.restore.lock().unwrap().clone(),
        }),
    )
}

/// Each group's raft state, by group id, with the range of keys it serves (hex; `end` null for
/// the last).
fn group_status(app: &App) -> BTreeMap<String, serde_json::Value> {
    let hex = super::kv::hex;
    let map = app.map();
    // Every group this node runs (on a shard node, the metadata group and groups the map
    // does not show yet among them), with its range in the map, if it has one.
    app.group_ids()
        .into_iter()
        .filter_map(|id| {
            let group = app.group(id)?;
            let shard = map.as_ref().and_then(|m| m.group(id));
            let m = group.raft.metrics().borrow().clone();
            let membership = m.membership_config.membership();
            let leader_addr =
                m.current_leader.and_then(|l| membership.get_node(&l).map(|n| n.addr.clone()));
            let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
            let learners: Vec<NodeId> = membership.learner_ids().collect();
            let status = json!({
                "start": shard.map(|s| hex(s.start)),
                "end": shard.and_then(|s| s.end.map(hex)),
                "members": shard.map(|s| s.members.clone()),
                "healthy": m.running_state.is_ok(),
                "state": format!("{:?}", m.state),
                "leader": m.current_leader,
                "leader_addr": leader_addr,
                "term": m.current_term,
                "last_log_index": m.last_log_index,
                "last_applied": m.last_applied.map(|l| l.index),
                "voters": voters,
                "learners": learners,
            });
            Some((id.to_string(), status))
        })
        .collect()
}

/// The node's figures in Prometheus' text format.
pub async fn metrics(State(app): AppState) -> Response {
    let m = app.raft.metrics().borrow().clone();
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: Option<u64>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        if let Some(v) = value {
            let _ = writeln!(out, "{name} {v}");
        }
    };
    let leader = m.current_leader.map(|l| u64::from(l == app.id));
    gauge(
        "raft_up",
        "1 while the raft core runs, 0 once it has stopped.",
        Some(m.running_state.is_ok().into()),
    );
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
        "Snapshot chunks this node has received (a count since the process started).",
        Some(app.snapshot_chunks.load(Ordering::Relaxed)),
    );
    gauge(
        "raft_snapshot_bytes_received",
        "Snapshot bytes this node has received (a count since the process started).",
        Some(app.snapshot_bytes.load(Ordering::Relaxed)),
    );
    gauge(
        "raft_millis_since_quorum_ack",
        "On a leader, ms since a quorum last acknowledged it.",
        m.millis_since_quorum_ack,
    );
    gauge(
        "raft_write_bytes_in_flight",
        "Bytes of client writes proposed on this node and not yet answered.",
        Some(app.writes.in_flight()),
    );
    if app.sharded() {
        let mut series = |name: &str, help: &str, value: &dyn Fn(&Metrics) -> Option<u64>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for id in app.group_ids() {
                let Some(group) = app.group(id) else { continue };
                if let Some(v) = value(&group.raft.metrics().borrow()) {
                    let _ = writeln!(out, "{name}{{group=\"{id}\"}} {v}");
                }
            }
        };
        series("raft_group_up", "1 while the group's raft core runs, 0 once it stopped.", &|m| {
            Some(m.running_state.is_ok().into())
        });
        series(
            "raft_group_is_leader",
            "1 if this node leads the group, 0 if another does.",
            &|m| m.current_leader.map(|l| u64::from(l == app.id)),
        );
        series("raft_group_term", "The group's current term.", &|m| Some(m.current_term));
        series("raft_group_last_applied_index", "Index of the group's last entry applied.", &|m| {
            m.last_applied.map(|l| l.index)
        });
    }
    if app.node.is_some() {
        let mut gauge = |name: &str, help: &str, kind: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        };
        let version = app.map().map_or(0, |m| m.version());
        gauge(
            "shard_map_version",
            "The version of this node's shard map (0: none yet).",
            "gauge",
            version,
        );
        let hosted = app.group_ids().into_iter().filter(|&g| g != META_GROUP).count() as u64;
        gauge("shard_groups_hosted", "Data groups this node runs a replica of.", "gauge", hosted);
        let splits = app.splits.load(Ordering::Relaxed);
        gauge(
            "shard_splits_total",
            "Splits cluster calls to this node completed.",
            "counter",
            splits,
        );
        if let Some(node) = &app.node {
            let stats = *node.watch_quiet().borrow();
            let (running, quiet) = (stats.groups as u64, stats.quiet as u64);
            gauge(
                "shard_groups_running",
                "Groups whose raft runs here, the metadata group too (as of the last round).",
                "gauge",
                running,
            );
            gauge(
                "shard_groups_quiet",
                "Groups here (the metadata group too) not ticking: idle, their leader vouched.",
                "gauge",
                quiet,
            );
        }
        let moves = app.moves.load(Ordering::Relaxed);
        gauge(
            "shard_moves_total",
            "Replica moves cluster calls to this node completed.",
            "counter",
            moves,
        );
        if let Some(node) = &app.node {
            let stats = node.auto_split_stats();
            gauge(
                "shard_split_checks_total",
                "Size checks of a group this node led (--split-bytes).",
                "counter",
                stats.checks,
            );
            gauge(
                "shard_auto_splits_total",
                "Splits this node made because a group it led was over --split-bytes.",
                "counter",
                stats.splits,
            );
            gauge(
                "shard_auto_split_failures_total",
                "Size checks or splits by size that failed here (each retried at the next check).",
                "counter",
                stats.failures,
            );
        }
    }
    let followers = followers(&app, &m).unwrap_or_default();
    let mut series =
        |name: &str, help: &str, kind: &str, value: &dyn Fn(&Follower) -> Option<u64>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for f in &followers {
                if let Some(v) = value(f) {
                    let _ = writeln!(out, "{name}{{member=\"{}\"}} {v}", f.id);
                }
            }
        };
    series(
        "raft_replication_lag",
        "On a leader, entries a member has not matched.",
        "gauge",
        &|f| Some(f.lag_entries),
    );
    series(
        "raft_replication_lag_bytes",
        "On a leader, bytes of log entries a member has not matched.",
        "gauge",
        &|f| f.lag_bytes,
    );
    series(
        "raft_member_millis_since_contact",
        "On a leader, ms since an RPC to a member last succeeded (absent: never).",
        "gauge",
        &|f| f.last_contact_ms,
    );
    series("raft_member_rpc_errors_total", "Raft RPCs to a member that failed.", "counter", &|f| {
        Some(f.errors)
    });
    let peers = app.network.peers.get();
    let _ = writeln!(
        out,
        "# HELP raft_sent_bytes_total Request bytes of raft RPCs sent, by member and kind.\n\
         # TYPE raft_sent_bytes_total counter"
    );
    for (id, p) in &peers {
        let _ = writeln!(
            out,
            "raft_sent_bytes_total{{member=\"{id}\",kind=\"append\"}} {}",
            p.append_bytes
        );
        let _ = writeln!(
            out,
            "raft_sent_bytes_total{{member=\"{id}\",kind=\"snapshot\"}} {}",
            p.snapshot_bytes
        );
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
    app.requests_seen.write(&mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
