//! What a node refuses, and how it says so, over real loopback HTTP: writes past the bytes in
//! flight (429), scans past a page's bytes and keys (a cursor for the rest), callers without the
//! cluster's token (401), and a client's misnumbered writes (409, never "ok").

#[path = "../examples/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::path::Path;
use std::time::Duration;

use bloomkv_raft::{NodeId, CLIENT_HEADER, SEQ_HEADER};
use common::{Limits, Node, NodeConfig};
use reqwest::StatusCode;
use serde_json::Value;

const PATIENCE: Option<Duration> = Some(Duration::from_secs(60));

async fn start(id: NodeId, dirs: &Path, config: NodeConfig) -> Node {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dir = dirs.join(format!("node-{id}"));
    Node::start_configured(id, listener, &dir, config).await.unwrap()
}

fn url(node: &Node, path: &str) -> String {
    format!("http://{}{path}", node.app.addr)
}

/// A one-node cluster: enough for what a node admits, which is decided where a request lands.
async fn single(dirs: &Path, config: NodeConfig) -> Node {
    let node = start(1, dirs, config).await;
    let token = node.app.token.clone();
    let mut init = reqwest::Client::new().post(url(&node, "/cluster/init"));
    if let Some(token) = token {
        init = init.bearer_auth(token);
    }
    assert_eq!(init.send().await.unwrap().status(), StatusCode::OK);
    node.app.raft.wait(PATIENCE).current_leader(1, "node 1 leads").await.unwrap();
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_past_the_bytes_in_flight_waits_then_is_refused_with_429() {
    let dirs = tempfile::tempdir().unwrap();
    let limits = Limits {
        large_write_bytes: 1 << 20,
        small_write_bytes: 64 << 10,
        write_wait: Duration::from_millis(200),
        ..Limits::default()
    };
    let node = single(dirs.path(), NodeConfig { limits, ..NodeConfig::default() }).await;
    let http = reqwest::Client::new();
    let put = |key: &'static str, len: usize| {
        let (http, url) = (http.clone(), url(&node, &format!("/kv/{key}")));
        async move { http.put(url).body(vec![b'x'; len]).send().await.unwrap() }
    };
    assert_eq!(put("before", 512 << 10).await.status(), StatusCode::OK);

    // Writes in flight hold the whole large budget (as slow commits would).
    let held = node.app.writes.admit(1 << 20).await.unwrap();
    assert_eq!(node.app.writes.in_flight(), 1 << 20);
    let busy = put("large", 512 << 10).await;
    assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(busy.headers()["retry-after"], "1");
    assert!(busy.text().await.unwrap().starts_with("busy: 1024 KiB of large writes"));
    // Small writes have their own budget, so a burst of large ones does not hold them up.
    assert_eq!(put("small", 100).await.status(), StatusCode::OK);
    // The refused write changed nothing; once the room is back, it goes through.
    let stale = |key: &'static str| {
        let (http, url) = (http.clone(), url(&node, &format!("/kv/{key}?consistency=stale")));
        async move { http.get(url).send().await.unwrap().status() }
    };
    assert_eq!(stale("large").await, StatusCode::NOT_FOUND);
    drop(held);
    assert_eq!(put("large", 512 << 10).await.status(), StatusCode::OK);
    assert_eq!(stale("large").await, StatusCode::OK);
    assert_eq!(node.app.writes.in_flight(), 0);
    let metrics = http.get(url(&node, "/metrics")).send().await.unwrap().text().await.unwrap();
    for line in [
        "http_requests_total{method=\"PUT\",route=\"/kv/{key}\",status=\"429\"} 1",
        "http_request_duration_seconds_count{method=\"PUT\",route=\"/kv/{key}\"} 4",
        "raft_write_bytes_in_flight 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line:?} not in\n{metrics}");
    }
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_answers_bounded_pages_and_a_cursor_continues_it() {
    let dirs = tempfile::tempdir().unwrap();
    let limits = Limits { scan_bytes: 100 << 10, scan_keys: 25, ..Limits::default() };
    let node = single(dirs.path(), NodeConfig { limits, ..NodeConfig::default() }).await;
    let http = reqwest::Client::new();
    // 40 values of 16 KiB under `big/`, small ones around them.
    for i in 0..40 {
        let put = http.put(url(&node, &format!("/kv/big{i:03}"))).body(vec![b'v'; 16 << 10]);
        assert_eq!(put.send().await.unwrap().status(), StatusCode::OK);
    }
    for key in ["a", "bi", "bih", "c"] {
        let put = http.put(url(&node, &format!("/kv/{key}"))).body("s");
        assert_eq!(put.send().await.unwrap().status(), StatusCode::OK);
    }
    let page = |query: String| {
        let (http, url) = (http.clone(), url(&node, &format!("/kv?{query}")));
        async move {
            let answer = http.get(url).send().await.unwrap();
            assert_eq!(answer.status(), StatusCode::OK);
            answer.json::<Value>().await.unwrap()
        }
    };
    let mut keys = Vec::new();
    let mut cursor = None::<String>;
    let mut pages = 0;
    loop {
        let query = match &cursor {
            None => "prefix=big&limit=1000".to_string(),
            Some(c) => format!("prefix=big&limit=1000&cursor={c}"),
        };
        let p = page(query).await;
        pages += 1;
        let items = p["items"].as_array().unwrap();
        let bytes: usize = items
            .iter()
            .map(|i| i["key"].as_str().unwrap().len() + i["value"].as_str().unwrap().len())
            .sum();
        assert!(bytes <= 100 << 10, "a page of {bytes} bytes");
        keys.extend(items.iter().map(|i| i["key"].as_str().unwrap().to_string()));
        match p["more"].as_bool().unwrap() {
            true => cursor = Some(p["cursor"].as_str().unwrap().to_string()),
            false => break,
        }
    }
    let want: Vec<String> = (0..40).map(|i| format!("big{i:03}")).collect();
    assert_eq!(keys, want);
    // 6 values of 16 KiB fit in 100 KiB: 7 pages.
    assert_eq!(pages, 7);
    // The key cap holds whatever `limit` asks.
    let p = page("prefix=&limit=100000".into()).await;
    // a, bi, then the six values of `big` that fit in the page's bytes.
    assert_eq!(p["items"].as_array().unwrap().len(), 8);
    let p = page("prefix=bi&limit=100000&cursor=626967303339".into()).await; // after big039
    assert_eq!(p["items"], serde_json::json!([{ "key": "bih", "value": "s" }]));
    assert_eq!(p["more"], false);
    let bad = http.get(url(&node, "/kv?prefix=big&cursor=zz")).send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_token_raft_and_cluster_calls_are_refused_and_with_it_a_cluster_forms() {
    let dirs = tempfile::tempdir().unwrap();
    let config = NodeConfig { token: Some("s3cret".into()), ..NodeConfig::default() };
    let leader = single(dirs.path(), config.clone()).await;
    let follower = start(2, dirs.path(), config).await;
    let http = reqwest::Client::new();
    for path in ["/raft/vote", "/raft/append", "/raft/snapshot", "/cluster/init"] {
        let answer = http.post(url(&follower, path)).body(vec![0u8; 8]).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    for path in ["/cluster/status", "/metrics"] {
        let answer = http.get(url(&follower, path)).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{path}");
        let wrong = http.get(url(&follower, path)).bearer_auth("s3cre").send().await.unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let learner = (2, follower.app.addr.clone());
    let add = http.post(url(&leader, "/cluster/learner")).json(&learner);
    assert_eq!(add.try_clone().unwrap().send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    // With it: the nodes' own raft RPCs carry it, so the learner catches up and is promoted.
    let added = add.bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(added.status(), StatusCode::OK, "{}", added.text().await.unwrap());
    let members = http.post(url(&leader, "/cluster/members")).json(&[1, 2]).bearer_auth("s3cret");
    assert_eq!(members.send().await.unwrap().status(), StatusCode::OK);
    // Clients need no token unless the node says so; the health check needs none.
    let put = http.put(url(&leader, "/kv/k")).body("v").send().await.unwrap();
    assert_eq!(put.status(), StatusCode::OK);
    let health = http.get(url(&follower, "/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    for node in [leader, follower] {
        node.stop().await.unwrap();
    }

    // A node that asks it of clients.
    let dirs = tempfile::tempdir().unwrap();
    let config = NodeConfig {
        token: Some("s3cret".into()),
        token_for_clients: true,
        ..NodeConfig::default()
    };
    let node = single(dirs.path(), config).await;
    let put = http.put(url(&node, "/kv/k")).body("v");
    assert_eq!(put.try_clone().unwrap().send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(put.bearer_auth("s3cret").send().await.unwrap().status(), StatusCode::OK);
    let client = bloomkv_raft::Client::new([node.app.addr.as_str()]).unwrap();
    assert!(matches!(
        client.get("k").await,
        Err(bloomkv_raft::ClientError::Refused { status: 401, .. })
    ));
    let client = client.with_token("s3cret");
    assert_eq!(client.get("k").await.unwrap().as_deref(), Some(&b"v"[..]));
    client.put("k2", "v2").await.unwrap();
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misnumbered_write_is_answered_409_and_changes_nothing() {
    let dirs = tempfile::tempdir().unwrap();
    let node = single(dirs.path(), NodeConfig::default()).await;
    let http = reqwest::Client::new();
    let send = |key: &'static str, value: &'static str, seq: u64| {
        let (http, url) = (http.clone(), url(&node, &format!("/kv/{key}")));
        async move {
            let put = http.put(url).header(CLIENT_HEADER, 5).header(SEQ_HEADER, seq).body(value);
            let answer = put.send().await.unwrap();
            (answer.status(), answer.text().await.unwrap())
        }
    };
    let read = |key: &'static str| {
        let (http, url) = (http.clone(), url(&node, &format!("/kv/{key}")));
        async move { http.get(url).send().await.unwrap().text().await.unwrap() }
    };
    assert_eq!(send("a", "1", 7).await.0, StatusCode::OK);
    // The same write again: answered as the first (it is applied once).
    let (status, text) = send("a", "1", 7).await;
    assert_eq!(status, StatusCode::OK);
    assert!(text.starts_with("ok"), "{text}");
    // The same seq for another write.
    let (status, text) = send("a", "2", 7).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(text.starts_with("seq reused: seq 7"), "{text}");
    let (status, text) = send("b", "1", 7).await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    // A lower seq after a higher one.
    let (status, text) = send("c", "1", 6).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(text.starts_with("out of order: seq 6 is below this client's last applied seq 7"));
    assert_eq!(read("a").await, "1");
    assert_eq!(read("b").await, "not found\n");
    assert_eq!(read("c").await, "not found\n");
    // The next seq is a new write.
    assert_eq!(send("c", "1", 8).await.0, StatusCode::OK);
    assert_eq!(read("c").await, "1");
    node.stop().await.unwrap();
}
