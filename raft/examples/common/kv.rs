//! The key-value API: replicated writes admitted by their bytes, linearizable or stale reads,
//! and scans answered a bounded page at a time, each in the raft group that serves its key
//! (checked against the shard map the client routed by, if it says).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bloomkv_raft::shard::{refused_range, Route, ShardMap};
use bloomkv_raft::{
    Command, GroupId, Outcome, Raft, CLIENT_HEADER, SEQ_HEADER, SHARD_GROUP_HEADER,
    SHARD_VERSION_HEADER,
};
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use serde_json::json;

use super::{json_line, not_group_leader, App, Group, MAX_ENTRY_BYTES};

type AppState = State<Arc<App>>;

/// Every key-value answer names the version of the node's shard map: a client holding an
/// older one knows to fetch it again.
pub async fn tag_version(State(app): AppState, request: Request, next: Next) -> Response {
    let mut answer = next.run(request).await;
    let version = app.map().map_or(0, |map| map.version());
    answer.headers_mut().insert(SHARD_VERSION_HEADER, HeaderValue::from(version));
    answer
}

fn not_initialized() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        "the cluster is not initialized: no shard map yet\n",
    )
        .into_response()
}

/// The node's shard map, encoded ([`ShardMap::encode`]), each group's members its voters as
/// this node knows them; 503 until every group has members (the cluster is initialized).
pub async fn shard_map(State(app): AppState) -> Response {
    let octets = [(header::CONTENT_TYPE, "application/octet-stream")];
    if let Some(node) = &app.node {
        // The replicated map: its members are the groups' own.
        return match node.map() {
            Some(map) => (octets, map.encode()).into_response(),
            None => not_initialized(),
        };
    }
    let Some(shards) = &app.shards else { return not_initialized() };
    let mut ranges = Vec::new();
    for shard in shards.shards() {
        let raft = &app.groups[&shard.group].raft;
        let voters = raft.metrics().borrow().membership_config.membership().voter_ids().collect();
        ranges.push((shard.start.to_vec(), shard.group, voters));
    }
    match ShardMap::from_ranges(shards.version(), ranges) {
        Ok(map) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], map.encode()).into_response()
        }
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            "the cluster is not initialized: its groups have no members yet\n",
        )
            .into_response(),
    }
}

/// A number from a request header, `None` if absent, or why it is not one.
fn header_number(headers: &HeaderMap, name: &str) -> Result<Option<u64>, Response> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => match v.to_str().ok().and_then(|v| v.parse().ok()) {
            Some(n) => Ok(Some(n)),
            None => Err(bad(format!("{name}: expected a decimal u64\n"))),
        },
    }
}

fn bad(reason: String) -> Response {
    (StatusCode::BAD_REQUEST, reason).into_response()
}

/// The answer to a request routed by a map older than this node's: where the key is now.
fn stale(version: u64, group: GroupId) -> Response {
    let body = json!({ "error": "stale shard map", "version": version, "group": group });
    json_line(StatusCode::MISDIRECTED_REQUEST, body)
}

/// The answer to a request routed by a map newer than this node's, which must catch up
/// before it can say where the key is.
fn behind(mine: u64, theirs: u64) -> Response {
    settling(json!({ "error": "shard map settling", "version": mine, "routed_by": theirs,
        "why": "this node's shard map is behind the request's" }))
}

/// 503 for a node whose map is about to change: `"error": "shard map settling"` tells a
/// client to ask again soon (within an election timeout it has), not to back off as from a
/// failing node; `Retry-After` says as much to any other.
fn settling(body: serde_json::Value) -> Response {
    let mut answer = json_line(StatusCode::SERVICE_UNAVAILABLE, body);
    answer.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    answer
}

/// The group whose range holds every one of `keys` and that the request may be served by:
/// the one its shard headers name, if this node's map gives it the keys, else the one this
/// node's map gives them. Fails with the answer to send: a stale or early route, keys of
/// several groups, a group this node does not host.
fn route(app: &App, headers: &HeaderMap, keys: &[&[u8]]) -> Result<(GroupId, Group), Response> {
    let version = header_number(headers, SHARD_VERSION_HEADER)?;
    let Some(map) = app.map() else { return Err(not_initialized()) };
    let group = match header_number(headers, SHARD_GROUP_HEADER)? {
        Some(group) => {
            // A request that names its group but no version was routed by this node's map.
            let version = version.unwrap_or(map.version());
            for key in keys {
                match map.check_route(key, version, group) {
                    Route::Serve => {}
                    Route::Stale { version, group } => return Err(stale(version, group)),
                    Route::Behind { version: mine } => return Err(behind(mine, version)),
                }
            }
            group
        }
        None if version.is_some() => {
            return Err(bad(format!("{SHARD_VERSION_HEADER} needs {SHARD_GROUP_HEADER}\n")))
        }
        None => {
            let by_group = map.by_group(keys.iter().copied());
            let mut groups = by_group.keys();
            let first = groups.next().copied().unwrap_or(0);
            if let Some(second) = groups.next() {
                return Err(bad(format!(
                    "the keys belong to groups {first} and {second} (at least): a batch is atomic \
                     within one group; send each group its part\n"
                )));
            }
            first
        }
    };
    match app.group(group) {
        Some(g) => Ok((group, g)),
        // In the map, yet not here (a replica moved away): sent on to a member that has it,
        // else the client tries another node.
        None => {
            let shard = app.node.as_ref().and(map.group(group));
            let member =
                shard.and_then(|s| s.members.iter().find_map(|&m| Some((m, member_addr(app, m)?))));
            Err(json_line(
                StatusCode::MISDIRECTED_REQUEST,
                json!({ "error": format!("no replica of group {group} on this node"),
                        "leader": member.as_ref().map(|m| m.0),
                        "leader_addr": member.map(|m| m.1), "group": group }),
            ))
        }
    }
}

/// Node `node`'s address, as this node's replica of the metadata group knows it.
fn member_addr(app: &App, node: bloomkv_raft::NodeId) -> Option<String> {
    let metrics = app.raft.metrics();
    let m = metrics.borrow();
    m.membership_config.membership().get_node(&node).map(|n| n.addr.clone())
}

/// On a shard node, the answer to a request for keys its group no longer holds (a split it
/// applied, which the map may not show yet): 421 with where the map puts them now, or 503
/// until the map shows the split.
fn moved_away(app: &App, group: GroupId, key: &[u8]) -> Response {
    match app.map() {
        Some(map) if map.group_of(key) != group => stale(map.version(), map.group_of(key)),
        _ => split_pending(group),
    }
}

fn split_pending(group: GroupId) -> Response {
    settling(json!({ "error": "shard map settling", "group": group,
        "why": "the group is splitting: its range and this node's map differ for now" }))
}

/// On a shard node, whether `group`'s own state still holds `key` (a split it has applied
/// may have moved it before this node's map shows it).
fn holds(app: &App, group: &Group, key: &[u8]) -> Result<bool, Response> {
    if app.node.is_none() {
        return Ok(true);
    }
    match group.kv.range() {
        Ok(range) => Ok(range.is_none_or(|r| r.contains(key))),
        Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()),
    }
}

async fn write(app: &App, group: (GroupId, Group), command: Command, bytes: usize) -> Response {
    let (id, group) = group;
    let key = first_key(&command).map(<[u8]>::to_vec).unwrap_or_default();
    if let Err(reason) = command.validate() {
        return (StatusCode::PAYLOAD_TOO_LARGE, format!("{reason}\n")).into_response();
    }
    // Only a leader proposes; elsewhere the answer is the redirect, not a wait for room.
    if let Some(f) = forward_group(app, &group.raft, app.named(id)) {
        return f;
    }
    let _room = match app.writes.admit(bytes).await {
        Ok(permit) => permit,
        Err(busy) => return busy,
    };
    match group.raft.client_write(command).await {
        Ok(resp) => match resp.data {
            Outcome::Applied => format!("ok, log index {}\n", resp.log_id.index).into_response(),
            // Nothing happened: the client resends where the map says.
            outcome if refused_range(&outcome).is_some() => moved_away(app, id, &key),
            Outcome::Rejected { reason } => {
                (StatusCode::BAD_REQUEST, format!("{reason}\n")).into_response()
            }
            // Never "ok" for a write that did not happen: the client numbered it wrong.
            Outcome::OutOfOrder { seq, last } => (
                StatusCode::CONFLICT,
                format!(
                    "out of order: seq {seq} is below this client's last applied seq {last}; \
                     nothing was written\n"
                ),
            )
                .into_response(),
            Outcome::SeqReused { seq } => (
                StatusCode::CONFLICT,
                format!(
                    "seq reused: seq {seq} was already used by this client for another write; \
                     nothing was written\n"
                ),
            )
                .into_response(),
        },
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            not_group_leader(f, app.named(id))
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// The first key a write names.
fn first_key(command: &Command) -> Option<&[u8]> {
    match command {
        Command::Put { key, .. } | Command::Delete { key } => Some(key),
        Command::Batch(commands) => commands.iter().find_map(first_key),
        Command::Once { command, .. } => first_key(command),
        Command::Shard(_) => None,
    }
}

/// The redirect to group 0's leader, if this node knows it does not lead.
pub(super) fn forward(app: &App) -> Option<Response> {
    forward_group(app, &app.raft, None)
}

/// The redirect to the leader of the group `raft` runs, if this node knows it does not lead.
fn forward_group(app: &App, raft: &Raft, group: Option<GroupId>) -> Option<Response> {
    // Read in place: this runs before every write, and the metrics are not small to clone.
    let metrics = raft.metrics();
    let m = metrics.borrow();
    let membership = m.membership_config.membership();
    if membership.get_node(&app.id).is_none() && membership.nodes().next().is_some() {
        // Removed: this node holds the change that left it out and hears of no leader
        // after it, so its redirect would name none, which sends a client back here until
        // the client gives up. A voter is the place to ask: it leads, or names who does.
        let member = membership.voter_ids().next();
        let leader_node = member.and_then(|id| membership.get_node(&id)).cloned();
        let f = openraft::error::ForwardToLeader { leader_id: member, leader_node };
        return Some(super::not_a_member(f, group));
    }
    match m.current_leader {
        Some(leader) if leader == app.id => None,
        // No leader known: openraft answers with the redirect itself, or the write waits
        // for an election as it would have.
        None => None,
        Some(leader) => {
            let leader_node = m.membership_config.membership().get_node(&leader).cloned();
            let f = openraft::error::ForwardToLeader { leader_id: Some(leader), leader_node };
            Some(not_group_leader(f, group))
        }
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

pub async fn put(
    State(app): AppState,
    UrlPath(key): UrlPath<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let group = match route(&app, &headers, &[key.as_bytes()]) {
        Ok(group) => group,
        Err(answer) => return answer,
    };
    let room = MAX_ENTRY_BYTES.saturating_sub(key.len());
    match read_capped(body, room).await {
        Ok(Some(value)) => {
            let bytes = key.len() + value.len();
            match once(&headers, Command::put(key, value)) {
                Ok(command) => write(&app, group, command, bytes).await,
                Err(reason) => (StatusCode::BAD_REQUEST, reason).into_response(),
            }
        }
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

pub async fn delete(
    State(app): AppState,
    UrlPath(key): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    let group = match route(&app, &headers, &[key.as_bytes()]) {
        Ok(group) => group,
        Err(answer) => return answer,
    };
    let bytes = key.len();
    match once(&headers, Command::delete(key)) {
        Ok(command) => write(&app, group, command, bytes).await,
        Err(reason) => (StatusCode::BAD_REQUEST, reason).into_response(),
    }
}

/// The largest batch body: a batch is one log entry, so at most the entry cap, with room for
/// its encoding.
const MAX_BATCH_BODY: usize = MAX_ENTRY_BYTES + (4 << 10);

/// Puts and deletes of one group, as one atomic write: the body is a postcard `Vec<Command>`
/// of [`Command::Put`]s and [`Command::Delete`]s (later ones win on the same key), every key
/// in the group the shard headers name (or, without them, in one group). Exactly once with
/// the client headers, as a single write.
pub async fn batch(State(app): AppState, headers: HeaderMap, body: axum::body::Body) -> Response {
    let body = match read_capped(body, MAX_BATCH_BODY).await {
        Ok(Some(body)) => body,
        Ok(None) => {
            let reason =
                format!("a batch may be at most {MAX_ENTRY_BYTES} bytes; nothing was written\n");
            return (StatusCode::PAYLOAD_TOO_LARGE, reason).into_response();
        }
        Err(e) => return bad(format!("{e}\n")),
    };
    let commands: Vec<Command> = match postcard::from_bytes(&body) {
        Ok(commands) => commands,
        Err(e) => return bad(format!("a batch is a postcard list of puts and deletes: {e}\n")),
    };
    let mut keys = Vec::with_capacity(commands.len());
    let mut bytes = 0;
    for command in &commands {
        match command {
            Command::Put { key, value } => {
                keys.push(key.as_slice());
                bytes += key.len() + value.len();
            }
            Command::Delete { key } => {
                keys.push(key.as_slice());
                bytes += key.len();
            }
            _ => return bad("a batch holds only puts and deletes\n".into()),
        }
    }
    if keys.is_empty() {
        return bad("an empty batch\n".into());
    }
    let group = match route(&app, &headers, &keys) {
        Ok(group) => group,
        Err(answer) => return answer,
    };
    match once(&headers, Command::Batch(commands)) {
        Ok(command) => write(&app, group, command, bytes).await,
        Err(reason) => (StatusCode::BAD_REQUEST, reason).into_response(),
    }
}

/// A read's parameters: `?consistency=stale` answers from this node's state as it is, on any
/// node; a scan's `prefix`, `limit` and `cursor`.
#[derive(serde::Deserialize)]
pub struct ReadParams {
    consistency: Option<String>,
    prefix: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

pub async fn get(
    State(app): AppState,
    UrlPath(key): UrlPath<String>,
    headers: HeaderMap,
    Query(params): Query<ReadParams>,
) -> Response {
    let (id, group) = match route(&app, &headers, &[key.as_bytes()]) {
        Ok(group) => group,
        Err(answer) => return answer,
    };
    let raft = group.raft.clone();
    read(&app, (id, &raft), &params, || match holds(&app, &group, key.as_bytes()) {
        Ok(true) => local_get(&group, &key),
        Ok(false) => moved_away(&app, id, key.as_bytes()),
        Err(answer) => answer,
    })
    .await
}

/// Answers with `local` once the read's consistency allows reading this node's state of the
/// group `raft` runs.
async fn read(
    app: &App,
    (id, raft): (GroupId, &Raft),
    params: &ReadParams,
    local: impl FnOnce() -> Response,
) -> Response {
    match params.consistency.as_deref() {
        None | Some("linearizable") => {
            // Confirms with a quorum that this node still leads, and waits until it has
            // applied everything committed before the read: only then is the local read
            // linearizable.
            match raft.ensure_linearizable().await {
                Ok(_) => local(),
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                    not_group_leader(f, app.named(id))
                }
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

/// One page of the keys with a prefix: `{"items": [...], "more": bool, "cursor": "..."}`, each
/// item `{"key", "value"}` as UTF-8 text, or `{"key_hex", "value_hex"}` where either is not
/// UTF-8. A page holds at most `limit` keys (capped by the node's `scan_keys`) and about
/// `scan_bytes` of keys and values; `more` says it was cut, and then `cursor` (opaque) asks for
/// the next page.
pub async fn scan(
    State(app): AppState,
    headers: HeaderMap,
    Query(params): Query<ReadParams>,
) -> Response {
    let after = match params.cursor.as_deref().map(unhex) {
        None => None,
        Some(Some(after)) => Some(after),
        Some(None) => {
            return (StatusCode::BAD_REQUEST, "cursor: not one this node gave out\n")
                .into_response()
        }
    };
    let limit = params.limit.unwrap_or(DEFAULT_SCAN_LIMIT).min(app.limits.scan_keys);
    let byte_cap = app.limits.scan_bytes;
    let prefix = params.prefix.clone().unwrap_or_default();
    let (id, group) = match scan_group(&app, &headers, prefix.as_bytes()) {
        Ok(group) => group,
        Err(answer) => return answer,
    };
    let reader = group.kv.clone();
    // On a shard node a group that split answers no scan until the map shows the split: the
    // client's piece would stop at the map's end, past the group's.
    if let (Some(_), Some(map)) = (&app.node, app.map()) {
        let range = match reader.range() {
            Ok(range) => range,
            Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        };
        let end = map.group(id).map(|s| s.end.map(<[u8]>::to_vec));
        if range.is_some_and(|r| Some(r.end.clone()) != end) {
            return split_pending(id);
        }
    }
    read(&app, (id, &group.raft), &params, || {
        // A page reads up to a few MiB from the store: off the async workers.
        let page = tokio::task::block_in_place(|| {
            let mut items = Vec::new();
            let (mut bytes, mut last, mut more) = (0usize, None::<Vec<u8>>, false);
            for item in reader.prefix_after(prefix.as_bytes(), after.as_deref()) {
                let (key, value) = item?;
                let size = key.len() + value.len();
                if items.len() == limit || (!items.is_empty() && bytes + size > byte_cap) {
                    more = true;
                    break;
                }
                bytes += size;
                items.push(match (std::str::from_utf8(&key), std::str::from_utf8(&value)) {
                    (Ok(k), Ok(v)) => json!({ "key": k, "value": v }),
                    _ => json!({ "key_hex": hex(&key), "value_hex": hex(&value) }),
                });
                last = Some(key);
            }
            Ok::<_, bloomkv::Error>((items, more, last))
        });
        match page {
            Ok((items, true, Some(last))) => json_line(
                StatusCode::OK,
                json!({ "items": items, "more": true, "cursor": hex(&last) }),
            ),
            Ok((items, _, _)) => {
                json_line(StatusCode::OK, json!({ "items": items, "more": false }))
            }
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        }
    })
    .await
}

/// The group a scan reads: the one its shard headers name, if they were routed by this node's
/// map version (a scan covers a range, so another version may cut it elsewhere), else the
/// one group whose range holds every key with the prefix.
fn scan_group(app: &App, headers: &HeaderMap, prefix: &[u8]) -> Result<(GroupId, Group), Response> {
    let version = header_number(headers, SHARD_VERSION_HEADER)?;
    let Some(map) = app.map() else { return Err(not_initialized()) };
    let group = match header_number(headers, SHARD_GROUP_HEADER)? {
        Some(group) => {
            let mine = map.version();
            match version {
                Some(v) if v < mine => return Err(stale(mine, map.group_of(prefix))),
                Some(v) if v > mine => return Err(behind(mine, v)),
                _ => group,
            }
        }
        None if version.is_some() => {
            return Err(bad(format!("{SHARD_VERSION_HEADER} needs {SHARD_GROUP_HEADER}\n")))
        }
        None => match map.prefix_pieces(prefix).as_slice() {
            [one] => one.group,
            pieces => {
                let groups: Vec<GroupId> = pieces.iter().map(|p| p.group).collect();
                return Err(bad(format!(
                    "the keys with this prefix are in groups {groups:?}: scan each with \
                     {SHARD_GROUP_HEADER} (bloomkv_raft::Client::scan does)\n"
                )));
            }
        },
    };
    match app.group(group) {
        Some(g) => Ok((group, g)),
        None => Err(bad(format!("no group {group} on this node\n"))),
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| text.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
        .collect()
}

fn local_get(group: &Group, key: &str) -> Response {
    match group.kv.get(key.as_bytes()) {
        Ok(Some(value)) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], value.to_vec()).into_response()
        }
        Ok(None) => (StatusCode::NOT_FOUND, "not found\n").into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}
