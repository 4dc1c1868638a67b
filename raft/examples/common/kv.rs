//! The key-value API: replicated writes admitted by their bytes, linearizable or stale reads,
//! and scans answered a bounded page at a time.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bloomkv_raft::{Command, Outcome, CLIENT_HEADER, SEQ_HEADER};
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use serde_json::json;

use super::{json_line, not_leader, App, MAX_ENTRY_BYTES};

type AppState = State<Arc<App>>;

async fn write(app: &App, command: Command, bytes: usize) -> Response {
    if let Err(reason) = command.validate() {
        return (StatusCode::PAYLOAD_TOO_LARGE, format!("{reason}\n")).into_response();
    }
    // Only a leader proposes; elsewhere the answer is the redirect, not a wait for room.
    if let Some(f) = forward(app) {
        return f;
    }
    let _room = match app.writes.admit(bytes).await {
        Ok(permit) => permit,
        Err(busy) => return busy,
    };
    match app.raft.client_write(command).await {
        Ok(resp) => match resp.data {
            Outcome::Applied => format!("ok, log index {}\n", resp.log_id.index).into_response(),
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
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => not_leader(f),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// The redirect to the leader, if this node knows it does not lead.
pub(super) fn forward(app: &App) -> Option<Response> {
    // Read in place: this runs before every write, and the metrics are not small to clone.
    let metrics = app.raft.metrics();
    let m = metrics.borrow();
    match m.current_leader {
        Some(leader) if leader == app.id => None,
        // No leader known: openraft answers with the redirect itself, or the write waits
        // for an election as it would have.
        None => None,
        Some(leader) => {
            let leader_node = m.membership_config.membership().get_node(&leader).cloned();
            Some(not_leader(openraft::error::ForwardToLeader {
                leader_id: Some(leader),
                leader_node,
            }))
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
    let room = MAX_ENTRY_BYTES.saturating_sub(key.len());
    match read_capped(body, room).await {
        Ok(Some(value)) => {
            let bytes = key.len() + value.len();
            match once(&headers, Command::put(key, value)) {
                Ok(command) => write(&app, command, bytes).await,
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
    let bytes = key.len();
    match once(&headers, Command::delete(key)) {
        Ok(command) => write(&app, command, bytes).await,
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

/// One page of the keys with a prefix: `{"items": [...], "more": bool, "cursor": "..."}`, each
/// item `{"key", "value"}` as UTF-8 text, or `{"key_hex", "value_hex"}` where either is not
/// UTF-8. A page holds at most `limit` keys (capped by the node's `scan_keys`) and about
/// `scan_bytes` of keys and values; `more` says it was cut, and then `cursor` (opaque) asks for
/// the next page.
pub async fn scan(State(app): AppState, Query(params): Query<ReadParams>) -> Response {
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
    let reader = app.kv.clone();
    let prefix = params.prefix.clone().unwrap_or_default();
    read(&app, &params, || {
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

fn local_get(app: &App, key: &str) -> Response {
    match app.kv.get(key.as_bytes()) {
        Ok(Some(value)) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], value.to_vec()).into_response()
        }
        Ok(None) => (StatusCode::NOT_FOUND, "not found\n").into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}
