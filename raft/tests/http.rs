//! The `kv_node` service over real loopback HTTP, as operators run it: entries up to the
//! service's cap replicate, larger ones are refused before they reach the log (no election),
//! a learner joining late catches up from a snapshot of several megabytes (and with it the
//! record of which client writes were applied, so it too applies a retry once), status and
//! metrics show replication, followers answer stale reads, and a cluster call that cannot
//! finish answers 504.

#[path = "../examples/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::path::Path;
use std::time::Duration;

use bloomkv_raft::NodeId;
use common::{Node, MAX_ENTRY_BYTES};
use reqwest::StatusCode;

type Metrics = openraft::RaftMetrics<NodeId, openraft::BasicNode>;

/// Every wait for the cluster gives up after this long (it normally takes well under a second).
const PATIENCE: Option<Duration> = Some(Duration::from_secs(60));

async fn start(id: NodeId, dirs: &Path) -> Node {
    start_with(id, dirs, common::DEFAULT_ADMIN_TIMEOUT).await
}

async fn start_with(id: NodeId, dirs: &Path, admin_timeout: Duration) -> Node {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dir = dirs.join(format!("node-{id}"));
    Node::start_with(id, listener, &dir, admin_timeout).await.unwrap()
}

fn url(node: &Node, path: &str) -> String {
    format!("http://{}{path}", node.app.addr)
}

/// Node 1 leads a cluster of `nodes` (every node a voter, joined as an operator would).
async fn form_cluster(http: &reqwest::Client, nodes: &[Node]) {
    let leader = &nodes[0];
    let init = http.post(url(leader, "/cluster/init")).send().await.unwrap();
    assert_eq!(init.status(), StatusCode::OK);
    leader.app.raft.wait(PATIENCE).current_leader(1, "node 1 leads").await.unwrap();
    for node in &nodes[1..] {
        let learner = (node.app.id, node.app.addr.clone());
        let added = http.post(url(leader, "/cluster/learner")).json(&learner).send().await;
        assert_eq!(added.unwrap().status(), StatusCode::OK);
    }
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.app.id).collect();
    let changed = http.post(url(leader, "/cluster/members")).json(&ids).send().await.unwrap();
    assert_eq!(changed.status(), StatusCode::OK);
}

/// Waits until `node` has applied everything `leader` has.
async fn caught_up(node: &Node, leader: &Node) {
    let applied = leader.app.raft.metrics().borrow().last_applied.map(|l| l.index);
    node.app.raft.wait(PATIENCE).applied_index_at_least(applied, "caught up").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_up_to_the_cap_replicate_and_larger_ones_are_refused() {
    let dirs = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(start(id, dirs.path()).await);
    }
    let http = reqwest::Client::new();
    form_cluster(&http, &nodes).await;
    let leader = &nodes[0];

    // The largest write the service takes reaches every node (as JSON its append to the
    // followers was 3.6 MiB).
    let largest = vec![b'v'; MAX_ENTRY_BYTES - "big".len()];
    let put = http.put(url(leader, "/kv/big")).body(largest.clone()).send().await.unwrap();
    assert_eq!(put.status(), StatusCode::OK, "{}", put.text().await.unwrap());
    for node in &nodes {
        caught_up(node, leader).await;
        assert_eq!(node.app.kv.get(b"big").unwrap().as_deref(), Some(&largest[..]));
    }

    // One byte more, or far more, is refused before it reaches the log: the leader keeps its
    // term and log, and nobody is elected.
    let before = leader.app.raft.metrics().borrow().clone();
    for len in [largest.len() + 1, 8 << 20] {
        let put = http.put(url(leader, "/kv/big")).body(vec![b'w'; len]).send().await.unwrap();
        assert_eq!(put.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(put.text().await.unwrap().contains("nothing was written"));
    }
    // A write after them commits at the next index, on the same leader in the same term.
    let put = http.put(url(leader, "/kv/small")).body("x").send().await.unwrap();
    assert_eq!(put.status(), StatusCode::OK);
    let after = leader.app.raft.metrics().borrow().clone();
    assert_eq!(after.current_term, before.current_term);
    assert_eq!(after.current_leader, Some(1));
    assert_eq!(after.last_log_index, before.last_log_index.map(|i| i + 1));
    for node in &nodes {
        caught_up(node, leader).await;
        assert_eq!(node.app.kv.get(b"big").unwrap().as_deref(), Some(&largest[..]));
    }
    for node in nodes {
        node.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_catches_up_from_a_multi_megabyte_snapshot() {
    let dirs = tempfile::tempdir().unwrap();
    let leader = start(1, dirs.path()).await;
    let http = reqwest::Client::new();
    form_cluster(&http, std::slice::from_ref(&leader)).await;

    // 6 MiB of state, in a snapshot the log is then purged up to: a learner can only start
    // from the snapshot, which travels in chunks of up to 3 MiB.
    let value = |i: usize| vec![b'a' + (i % 26) as u8; 96 << 10];
    for i in 0..64 {
        let put = http.put(url(&leader, &format!("/kv/k{i:02}"))).body(value(i)).send().await;
        assert_eq!(put.unwrap().status(), StatusCode::OK);
    }
    let last = leader.app.raft.metrics().borrow().last_applied.unwrap().index;
    let taken = http.post(url(&leader, "/cluster/snapshot")).send().await.unwrap();
    assert_eq!(taken.status(), StatusCode::OK, "{}", taken.text().await.unwrap());
    let m = leader.app.raft.metrics().borrow().clone();
    assert!(m.snapshot.is_some_and(|s| s.index >= last), "snapshot taken: {m:?}");
    assert!(m.purged.is_some_and(|p| p.index >= last), "log purged: {m:?}");

    let learner = start(2, dirs.path()).await;
    let joined = (learner.app.id, learner.app.addr.clone());
    let added = http.post(url(&leader, "/cluster/learner")).json(&joined).send().await.unwrap();
    assert_eq!(added.status(), StatusCode::OK, "{}", added.text().await.unwrap());
    caught_up(&learner, &leader).await;
    let m = learner.app.raft.metrics().borrow().clone();
    assert!(m.snapshot.is_some_and(|s| s.index >= last), "installed from the snapshot: {m:?}");
    let chunks = learner.app.snapshot_chunks.load(std::sync::atomic::Ordering::Relaxed);
    assert!(chunks >= 3, "the 6 MiB snapshot came in {chunks} chunks");
    for i in 0..64 {
        let got = learner.app.kv.get(format!("k{i:02}").as_bytes()).unwrap();
        assert_eq!(got.as_deref(), Some(&value(i)[..]), "k{i:02}");
    }
    learner.stop().await.unwrap();
    leader.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_that_joined_by_snapshot_knows_which_writes_were_applied() {
    use openraft::storage::RaftStateMachine;

    let dirs = tempfile::tempdir().unwrap();
    let leader = start(1, dirs.path()).await;
    let http = reqwest::Client::new();
    form_cluster(&http, std::slice::from_ref(&leader)).await;
    // Client 77's write 1, then another write to its key; then a snapshot, the log purged.
    let put = |value: &str, once: bool| {
        let mut put = http.put(url(&leader, "/kv/k")).body(value.to_string());
        if once {
            put = put.header(bloomkv_raft::CLIENT_HEADER, 77).header(bloomkv_raft::SEQ_HEADER, 1);
        }
        put.send()
    };
    assert_eq!(put("first", true).await.unwrap().status(), StatusCode::OK);
    assert_eq!(put("second", false).await.unwrap().status(), StatusCode::OK);
    let last = leader.app.raft.metrics().borrow().last_applied.unwrap().index;
    let taken = http.post(url(&leader, "/cluster/snapshot")).send().await.unwrap();
    assert_eq!(taken.status(), StatusCode::OK, "{}", taken.text().await.unwrap());

    let learner = start(2, dirs.path()).await;
    let joined = (learner.app.id, learner.app.addr.clone());
    let added = http.post(url(&leader, "/cluster/learner")).json(&joined).send().await.unwrap();
    assert_eq!(added.status(), StatusCode::OK, "{}", added.text().await.unwrap());
    caught_up(&learner, &leader).await;
    let m = learner.app.raft.metrics().borrow().clone();
    let index = m.last_applied.unwrap().index;
    assert!(m.snapshot.is_some_and(|s| s.index >= last), "installed from the snapshot: {m:?}");
    learner.stop().await.unwrap();
    leader.stop().await.unwrap();

    // The learner's store, given client 77's write 1 again as the next entry, leaves it be;
    // its write 2 is new.
    let (_log, mut sm) =
        bloomkv_raft::open(dirs.path().join("node-2"), bloomkv::Options::default()).unwrap();
    let once = |at: u64, seq: u64, value: &str| openraft::Entry {
        log_id: openraft::testing::log_id(1, 1, index + at),
        payload: openraft::EntryPayload::Normal(bloomkv_raft::Command::Once {
            client: 77,
            seq,
            command: Box::new(bloomkv_raft::Command::put("k", value)),
        }),
    };
    let kv = sm.reader();
    sm.apply([once(1, 1, "first")]).await.unwrap();
    assert_eq!(kv.get(b"k").unwrap().as_deref(), Some(&b"second"[..]));
    sm.apply([once(2, 2, "third")]).await.unwrap();
    assert_eq!(kv.get(b"k").unwrap().as_deref(), Some(&b"third"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_show_replication_and_stuck_admin_calls_time_out() {
    let dirs = tempfile::tempdir().unwrap();
    let nodes =
        [start_with(1, dirs.path(), Duration::from_secs(1)).await, start(2, dirs.path()).await];
    let http = reqwest::Client::new();
    form_cluster(&http, &nodes).await;
    let [leader, follower] = &nodes;
    for i in 0..5 {
        let put = http.put(url(leader, &format!("/kv/k{i}"))).body("v").send().await.unwrap();
        assert_eq!(put.status(), StatusCode::OK);
    }
    let last = leader.app.raft.metrics().borrow().last_log_index;
    let matched = |m: &Metrics| {
        let follower = m.replication.as_ref().and_then(|r| r.get(&2).copied().flatten());
        follower.map(|l| l.index) == last
    };
    leader.app.raft.wait(PATIENCE).metrics(matched, "follower matched").await.unwrap();

    let status: serde_json::Value =
        http.get(url(leader, "/cluster/status")).send().await.unwrap().json().await.unwrap();
    assert_eq!(status["leader"], 1);
    assert_eq!(status["last_log_index"], serde_json::json!(last));
    assert_eq!(status["replication_lag"], serde_json::json!({ "2": 0 }));
    assert_eq!(status["snapshot"], serde_json::Value::Null);
    let text = |node| {
        let http = http.clone();
        async move { http.get(url(node, "/metrics")).send().await.unwrap().text().await.unwrap() }
    };
    let on_leader = text(leader).await;
    for line in [
        "raft_is_leader 1".to_string(),
        format!("raft_last_log_index {}", last.unwrap()),
        "raft_replication_lag{member=\"2\"} 0".to_string(),
    ] {
        assert!(on_leader.lines().any(|l| l == line), "{line:?} not in\n{on_leader}");
    }
    assert!(on_leader.lines().any(|l| l.starts_with("bloomkv_tables ")), "{on_leader}");
    let on_follower = text(follower).await;
    assert!(on_follower.lines().any(|l| l == "raft_is_leader 0"), "{on_follower}");
    assert!(!on_follower.contains("raft_replication_lag{"), "{on_follower}");

    // A follower sends linearizable reads to the leader, and answers stale ones itself.
    caught_up(follower, leader).await;
    let read = |query: &'static str| {
        let http = http.clone();
        async move { http.get(url(follower, &format!("/kv/k0{query}"))).send().await.unwrap() }
    };
    assert_eq!(read("").await.status(), StatusCode::MISDIRECTED_REQUEST);
    let stale = read("?consistency=stale").await;
    assert_eq!(stale.status(), StatusCode::OK);
    assert_eq!(stale.text().await.unwrap(), "v");
    assert_eq!(read("?consistency=eventual").await.status(), StatusCode::BAD_REQUEST);
    // Scans: in key order, cut at the limit, an item that is not text in hex.
    let put = http.put(url(leader, "/kv/k9")).body(vec![0xffu8, 1]).send().await.unwrap();
    assert_eq!(put.status(), StatusCode::OK);
    caught_up(follower, leader).await;
    let scan = |node, query: &str| {
        let (http, path) = (http.clone(), url(node, &format!("/kv?{query}")));
        async move {
            let answer = http.get(path).send().await.unwrap();
            assert_eq!(answer.status(), StatusCode::OK);
            answer.json::<serde_json::Value>().await.unwrap()
        }
    };
    let all = scan(leader, "prefix=k").await;
    let keys: Vec<_> = all["items"].as_array().unwrap().iter().map(|i| i["key"].clone()).collect();
    assert_eq!(keys[..5], ["k0", "k1", "k2", "k3", "k4"].map(serde_json::Value::from));
    assert_eq!(all["items"][5], serde_json::json!({ "key_hex": "6b39", "value_hex": "ff01" }));
    assert_eq!(all["more"], false);
    let cut = scan(follower, "prefix=k&limit=2&consistency=stale").await;
    assert_eq!(
        cut["items"],
        serde_json::json!([{ "key": "k0", "value": "v" }, { "key": "k1", "value": "v" }])
    );
    assert_eq!(cut["more"], true);

    // Voters {1, 9}, 9 a learner nobody answers for: the change cannot commit without it
    // (openraft counts a new learner as caught up, so adding it returns at once), and the
    // call gives up.
    let nobody = (9, "127.0.0.1:1".to_string());
    let added =
        http.post(url(leader, "/cluster/learner?wait=false")).json(&nobody).send().await.unwrap();
    assert_eq!(added.status(), StatusCode::OK);
    // The client's own limit turns a node that never answers into a failure, not a hang.
    let members = http.post(url(leader, "/cluster/members")).json(&[1, 9]);
    let members = members.timeout(Duration::from_secs(30)).send().await.unwrap();
    assert_eq!(members.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(members.text().await.unwrap().contains("gave up"));
    for node in nodes {
        node.stop().await.unwrap();
    }
}
