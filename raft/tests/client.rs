//! [`bloomkv_raft::Client`] against three `kv_node` processes on loopback: it finds the
//! leader through a follower's redirect, and a write sent again with its id, after the leader
//! that applied it is killed, is not applied again.
//!
//! The nodes are the `kv_node` example, which `cargo test` builds beside the test binary.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bloomkv_raft::{Client, CLIENT_HEADER, SEQ_HEADER};
use reqwest::StatusCode;
use serde_json::{json, Value};

mod common;

use common::{kv_node, wait_until};

struct Node {
    id: u64,
    addr: String,
    process: Option<Child>,
}

impl Node {
    fn start(id: u64, dirs: &Path) -> Node {
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let dir = dirs.join(format!("node-{id}"));
        let log = std::fs::File::create(dirs.join(format!("node-{id}.log"))).unwrap();
        let process = Command::new(kv_node())
            .args([&id.to_string(), &addr.to_string(), dir.to_str().unwrap()])
            .args(["--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Node { id, addr: addr.to_string(), process: Some(process) }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn status(http: &reqwest::Client, node: &Node) -> Option<Value> {
    http.get(node.url("/cluster/status")).send().await.ok()?.json().await.ok()
}

async fn post(http: &reqwest::Client, url: String, body: Value) -> StatusCode {
    http.post(url).json(&body).send().await.unwrap().status()
}

/// Three voters, node 1 leading.
async fn cluster(http: &reqwest::Client, dirs: &Path) -> Vec<Node> {
    let nodes: Vec<Node> = (1..=3).map(|id| Node::start(id, dirs)).collect();
    for node in &nodes {
        wait_until("a node serves", || async { status(http, node).await.is_some() }).await;
    }
    assert_eq!(post(http, nodes[0].url("/cluster/init"), json!(null)).await, StatusCode::OK);
    wait_until("node 1 leads", || async {
        status(http, &nodes[0]).await.is_some_and(|s| s["leader"] == 1)
    })
    .await;
    for node in &nodes[1..] {
        let added = post(http, nodes[0].url("/cluster/learner"), json!([node.id, node.addr]));
        assert_eq!(added.await, StatusCode::OK);
    }
    assert_eq!(
        post(http, nodes[0].url("/cluster/members"), json!([1, 2, 3])).await,
        StatusCode::OK
    );
    nodes
}

/// A write as a client retrying it sends it: with its client id and sequence number.
async fn send_once(http: &reqwest::Client, node: &Node, key: &str, value: &str, seq: u64) {
    let put = http
        .put(node.url(&format!("/kv/{key}")))
        .header(CLIENT_HEADER, 77)
        .header(SEQ_HEADER, seq)
        .body(value.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::OK, "{}", put.text().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_follows_redirects_and_a_replayed_write_is_applied_once() {
    let dirs = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let mut nodes = cluster(&http, dirs.path()).await;

    // A client that knows only a follower reaches the leader through its redirect.
    let follower = Client::new([&nodes[2].addr]).unwrap();
    follower.put("greeting", "hello").await.unwrap();
    assert_eq!(follower.get("greeting").await.unwrap().as_deref(), Some(&b"hello"[..]));
    follower.delete("greeting").await.unwrap();
    assert_eq!(follower.get("greeting").await.unwrap(), None);
    // A refusal is final, not retried.
    let refused = follower.put("big", vec![b'v'; 2 << 20]).await.unwrap_err();
    assert!(matches!(refused, bloomkv_raft::ClientError::Refused { status: 413, .. }), "{refused}");

    // Client 77's write 1, then another client's write to the same key.
    send_once(&http, &nodes[0], "k", "first", 1).await;
    follower.put("k", "second").await.unwrap();
    // Its retry, to the same leader, answers as the write did and changes nothing.
    send_once(&http, &nodes[0], "k", "first", 1).await;
    assert_eq!(follower.get("k").await.unwrap().as_deref(), Some(&b"second"[..]));

    // The leader that applied it is killed; the client retrying write 1 (the same id and
    // seq) first meets a refused connection, then a new leader, which has the session too.
    nodes[0].kill();
    let retrying = Client::new([&nodes[0].addr, &nodes[1].addr, &nodes[2].addr])
        .unwrap()
        .with_id(77, 0)
        .with_timeouts(Duration::from_secs(30), Duration::from_secs(3));
    retrying.put("k", "first").await.unwrap();
    assert_eq!(retrying.get("k").await.unwrap().as_deref(), Some(&b"second"[..]));
    // Its next write (seq 2) is new, and applied.
    retrying.put("k", "third").await.unwrap();
    assert_eq!(follower.get("k").await.unwrap().as_deref(), Some(&b"third"[..]));
    for node in &nodes[1..] {
        wait_until("a stale read sees the last write", || async {
            let one = Client::new([&node.addr]).unwrap();
            one.get_stale("k").await.unwrap().as_deref() == Some(&b"third"[..])
        })
        .await;
    }
}
