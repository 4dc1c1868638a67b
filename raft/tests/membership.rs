//! Membership as an operator changes it, over real loopback HTTP: a learner is reported added
//! only once it has caught up, members are removed (learners and voters, never every voter;
//! a removed leader redirects writes to a member),
//! a node whose raft core has stopped says so, and a node's backup restores into a new
//! cluster.

#[path = "../examples/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::path::Path;
use std::time::Duration;

use bloomkv_raft::NodeId;
use common::Node;
use reqwest::StatusCode;
use serde_json::{json, Value};

const PATIENCE: Option<Duration> = Some(Duration::from_secs(60));

async fn start(id: NodeId, dirs: &Path) -> Node {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    Node::start(id, listener, &dirs.join(format!("node-{id}"))).await.unwrap()
}

fn url(node: &Node, path: &str) -> String {
    format!("http://{}{path}", node.app.addr)
}

async fn post(http: &reqwest::Client, url: String, body: Value) -> (StatusCode, String) {
    let answer = http.post(url).json(&body).send().await.unwrap();
    (answer.status(), answer.text().await.unwrap())
}

async fn status(http: &reqwest::Client, node: &Node) -> Value {
    http.get(url(node, "/cluster/status")).send().await.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_is_added_once_caught_up_and_members_can_be_removed() {
    let dirs = tempfile::tempdir().unwrap();
    let nodes =
        [start(1, dirs.path()).await, start(2, dirs.path()).await, start(3, dirs.path()).await];
    let [leader, second, third] = &nodes;
    let http = reqwest::Client::new();
    assert_eq!(post(&http, url(leader, "/cluster/init"), json!(null)).await.0, StatusCode::OK);
    leader.app.raft.wait(PATIENCE).current_leader(1, "node 1 leads").await.unwrap();
    // Enough log that a learner cannot have it all at once: 8 MiB in 400 entries.
    for i in 0..400 {
        let put = http.put(url(leader, &format!("/kv/k{i:04}"))).body(vec![b'v'; 20 << 10]);
        assert_eq!(put.send().await.unwrap().status(), StatusCode::OK);
    }
    let last = leader.app.raft.metrics().borrow().last_log_index.unwrap();
    let (code, text) =
        post(&http, url(leader, "/cluster/learner"), json!([2, second.app.addr])).await;
    assert_eq!(code, StatusCode::OK, "{text}");
    assert!(text.contains("caught up"), "{text}");
    // Caught up means the leader has seen it hold the leader's log as it was when it was added.
    let s = status(&http, leader).await;
    assert_eq!(s["learners"], json!([2]));
    assert!(s["replication"]["2"]["matched"].as_u64() >= Some(last), "{s}");

    let (code, _) = post(&http, url(leader, "/cluster/learner"), json!([3, third.app.addr])).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        post(&http, url(leader, "/cluster/members"), json!([1, 2, 3])).await.0,
        StatusCode::OK
    );

    // Removing: an unknown id changes nothing; every voter at once is refused.
    let (code, text) = post(&http, url(leader, "/cluster/remove"), json!([3, 9])).await;
    assert_eq!(
        (code, text.as_str()),
        (StatusCode::NOT_FOUND, "not members: [9]; nothing changed\n")
    );
    let (code, _) = post(&http, url(leader, "/cluster/remove"), json!([1, 2, 3])).await;
    assert_eq!(code, StatusCode::CONFLICT);
    // A voter leaves the voters and the cluster; the leader stops replicating to it.
    let (code, text) = post(&http, url(leader, "/cluster/remove"), json!([3])).await;
    assert_eq!(code, StatusCode::OK, "{text}");
    let s = status(&http, leader).await;
    assert_eq!((s["voters"].clone(), s["learners"].clone()), (json!([1, 2]), json!([])));
    leader
        .app
        .raft
        .wait(PATIENCE)
        .metrics(|m| m.replication.as_ref().is_some_and(|r| !r.contains_key(&3)), "3 dropped")
        .await
        .unwrap();
    // Writes still commit with two voters.
    let put = http.put(url(leader, "/kv/after")).body("v").send().await.unwrap();
    assert_eq!(put.status(), StatusCode::OK);
    // A learner is removed the same way; it is added back as any new node is.
    let (code, _) = post(&http, url(leader, "/cluster/learner"), json!([3, third.app.addr])).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(status(&http, leader).await["learners"], json!([3]));
    let (code, _) = post(&http, url(leader, "/cluster/remove"), json!([3])).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(status(&http, leader).await["learners"], json!([]));
    // The leader removes itself: node 2, the one voter left, leads. A write sent to node 1
    // is redirected to node 2 and nothing is written (a redirect naming no leader would send
    // a client back to node 1 until it gave up).
    let (code, text) = post(&http, url(leader, "/cluster/remove"), json!([1])).await;
    assert_eq!(code, StatusCode::OK, "{text}");
    second.app.raft.wait(PATIENCE).current_leader(2, "node 2 leads").await.unwrap();
    let put = http.put(url(leader, "/kv/gone")).body("v").send().await.unwrap();
    let (code, text) = (put.status(), put.text().await.unwrap());
    assert_eq!(code, StatusCode::MISDIRECTED_REQUEST, "{text}");
    let redirect: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(redirect["error"], "not a member", "{text}");
    assert_eq!(redirect["leader_addr"], json!(second.app.addr), "{text}");
    let get = http.get(url(second, "/kv/gone")).send().await.unwrap();
    assert_eq!(get.status(), StatusCode::NOT_FOUND);
    for node in nodes {
        node.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_raft_core_stopped_reports_unhealthy() {
    let dirs = tempfile::tempdir().unwrap();
    let node = start(1, dirs.path()).await;
    let http = reqwest::Client::new();
    assert_eq!(post(&http, url(&node, "/cluster/init"), json!(null)).await.0, StatusCode::OK);
    let health = http.get(url(&node, "/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    node.app.raft.shutdown().await.unwrap();
    let health = http.get(url(&node, "/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = health.json().await.unwrap();
    assert_eq!(body["healthy"], false);
    let metrics = http.get(url(&node, "/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l == "raft_up 0"), "{metrics}");
    assert_eq!(status(&http, &node).await["healthy"], false);
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_of_one_node_restores_into_a_new_cluster() {
    let dirs = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let old = start(1, &dirs.path().join("old")).await;
    assert_eq!(post(&http, url(&old, "/cluster/init"), json!(null)).await.0, StatusCode::OK);
    old.app.raft.wait(PATIENCE).current_leader(1, "node 1 leads").await.unwrap();
    for i in 0..300 {
        let put =
            http.put(url(&old, &format!("/kv/k{i:03}"))).body(vec![b'a' + (i % 26) as u8; 5000]);
        assert_eq!(put.send().await.unwrap().status(), StatusCode::OK);
    }
    let backup = dirs.path().join("backup");
    let (code, text) = post(&http, url(&old, "/cluster/backup"), json!({ "dir": backup })).await;
    assert_eq!(code, StatusCode::OK, "{text}");
    // A backup is taken once: the directory must be new.
    let (code, _) = post(&http, url(&old, "/cluster/backup"), json!({ "dir": backup })).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    // Written after the backup: not in it.
    let put = http.put(url(&old, "/kv/later")).body("x").send().await.unwrap();
    assert_eq!(put.status(), StatusCode::OK);
    old.stop().await.unwrap();

    let new = start(1, &dirs.path().join("new")).await;
    assert_eq!(post(&http, url(&new, "/cluster/init"), json!(null)).await.0, StatusCode::OK);
    new.app.raft.wait(PATIENCE).current_leader(1, "node 1 leads").await.unwrap();
    let (code, text) = post(&http, url(&new, "/cluster/restore"), json!({ "dir": backup })).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{text}");
    let mut restore = Value::Null;
    for _ in 0..3000 {
        restore = status(&http, &new).await["restore"].clone();
        if restore["done"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(restore["done"], true, "{restore}");
    assert_eq!(restore["error"], Value::Null);
    assert_eq!(restore["keys"], 300);
    for i in [0, 17, 299] {
        let got = http.get(url(&new, &format!("/kv/k{i:03}"))).send().await.unwrap();
        assert_eq!(got.bytes().await.unwrap(), vec![b'a' + (i % 26) as u8; 5000]);
    }
    let later = http.get(url(&new, "/kv/later")).send().await.unwrap();
    assert_eq!(later.status(), StatusCode::NOT_FOUND);
    new.stop().await.unwrap();
}
