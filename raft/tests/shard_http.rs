//! A `kv_node` hosting several raft groups, in process over loopback HTTP: its shard map, the
//! route checks of key-value requests (a stale route is redirected with the new version, one
//! from a newer map is told to wait), and `Client` routing keys, batches and scans over the
//! groups, each key stored in its own group and in no other.

#[path = "../examples/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bloomkv_raft::shard::ShardMap;
use bloomkv_raft::{Client, Command, GroupId, NodeId, SHARD_GROUP_HEADER, SHARD_VERSION_HEADER};
use common::{Node, NodeConfig};
use reqwest::StatusCode;

const PATIENCE: Option<Duration> = Some(Duration::from_secs(60));

async fn start(id: NodeId, dir: &std::path::Path, groups: usize) -> Node {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = NodeConfig { groups, ..NodeConfig::default() };
    Node::start_configured(id, listener, &dir.join(format!("node-{id}")), config).await.unwrap()
}

fn url(node: &Node, path: &str) -> String {
    format!("http://{}{path}", node.app.addr)
}

/// Every key in group `group`'s data on `node`.
fn keys_of(node: &Node, group: GroupId) -> Vec<Vec<u8>> {
    node.app.groups[&group].kv.scan().map(|item| item.unwrap().0).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_four_groups_routes_checks_and_stores_each_key_in_its_group() {
    let dirs = tempfile::tempdir().unwrap();
    let node = start(1, dirs.path(), 4).await;
    let http = reqwest::Client::new();

    // No members yet: no map to give.
    let early = http.get(url(&node, "/shard/map")).send().await.unwrap();
    assert_eq!(early.status(), StatusCode::SERVICE_UNAVAILABLE);
    let init = http.post(url(&node, "/cluster/init")).send().await.unwrap();
    assert_eq!(init.status(), StatusCode::OK);
    for group in node.app.groups.values() {
        group.raft.wait(PATIENCE).current_leader(1, "node 1 leads").await.unwrap();
    }
    // Initialized: a second init changes nothing.
    let again = http.post(url(&node, "/cluster/init")).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT);

    // Four ranges cut by the first byte over printable ASCII, each group on node 1.
    let bytes = http.get(url(&node, "/shard/map")).send().await.unwrap().bytes().await.unwrap();
    let map = ShardMap::decode(&bytes).unwrap();
    assert_eq!(map.version(), 1);
    let starts: Vec<(Vec<u8>, GroupId)> =
        map.shards().map(|s| (s.start.to_vec(), s.group)).collect();
    let expected = [(vec![], 0), (b"7".to_vec(), 1), (b"O".to_vec(), 2), (b"g".to_vec(), 3)];
    assert_eq!(starts, expected);
    assert!(map.shards().all(|s| s.members.iter().eq([&1])));

    // The client routes each key to its group; a batch over three groups is split, and a
    // scan over every group merged in key order.
    let client = Client::new([&node.app.addr]).unwrap();
    let keys = ["!first", "apple", "Melon", "zebra", "9lives", "~tilde"];
    for key in keys {
        client.put(key, format!("v-{key}")).await.unwrap();
    }
    client
        .batch(vec![
            Command::put("Banana", "b"),
            Command::put("cherry", "c"),
            Command::delete("zebra"),
            Command::put("0", "zero"),
        ])
        .await
        .unwrap();
    assert_eq!(client.get("Melon").await.unwrap().as_deref(), Some(&b"v-Melon"[..]));
    assert_eq!(client.get("zebra").await.unwrap(), None);
    let mut want: BTreeMap<Vec<u8>, Vec<u8>> = keys
        .iter()
        .filter(|k| **k != "zebra")
        .map(|k| (k.as_bytes().to_vec(), format!("v-{k}").into_bytes()))
        .collect();
    for (k, v) in [("Banana", "b"), ("cherry", "c"), ("0", "zero")] {
        want.insert(k.as_bytes().to_vec(), v.as_bytes().to_vec());
    }
    let scanned = client.scan("", 100).await.unwrap();
    assert_eq!(scanned, want.clone().into_iter().collect::<Vec<_>>());
    let limited = client.scan("", 3).await.unwrap();
    assert_eq!(limited, want.clone().into_iter().take(3).collect::<Vec<_>>());
    assert_eq!(client.scan_stale("M", 10).await.unwrap().len(), 1);
    for group in 0..4 {
        let held = keys_of(&node, group);
        assert!(held.iter().all(|k| map.group_of(k) == group), "group {group}: {held:?}");
        let owned: Vec<Vec<u8>> =
            want.keys().filter(|k| map.group_of(k) == group).cloned().collect();
        assert_eq!(held, owned, "group {group}");
    }
    assert!((0..4).all(|g| !keys_of(&node, g).is_empty()), "every group holds a key");

    // "melon" is group 3's: routed to group 1 by map version 1, it is stale, and the answer
    // names the group; routed by a map newer than the node's, the node asks to wait.
    let routed = |group: u64, version: u64| {
        http.put(url(&node, "/kv/melon"))
            .header(SHARD_GROUP_HEADER, group)
            .header(SHARD_VERSION_HEADER, version)
            .body("x")
    };
    let stale = routed(1, 1).send().await.unwrap();
    assert_eq!(stale.status(), StatusCode::MISDIRECTED_REQUEST);
    assert_eq!(stale.headers()[SHARD_VERSION_HEADER], "1");
    let body: serde_json::Value = stale.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"error": "stale shard map", "version": 1, "group": 3}));
    let behind = routed(1, 2).send().await.unwrap();
    assert_eq!(behind.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(behind.headers().contains_key("retry-after"));
    assert_eq!(routed(3, 1).send().await.unwrap().status(), StatusCode::OK);
    assert!(!keys_of(&node, 1).contains(&b"melon".to_vec()));
    let bad = http.get(url(&node, "/kv/melon")).header(SHARD_VERSION_HEADER, 1).send().await;
    assert_eq!(bad.unwrap().status(), StatusCode::BAD_REQUEST);

    // Without shard headers the node routes by its own map; a scan or a batch that would
    // span groups is refused, not half done.
    let plain = http.get(url(&node, "/kv/melon")).send().await.unwrap();
    assert_eq!(plain.bytes().await.unwrap(), "x");
    let all = http.get(url(&node, "/kv?prefix=")).send().await.unwrap();
    assert_eq!(all.status(), StatusCode::BAD_REQUEST);
    let one = http.get(url(&node, "/kv?prefix=ch")).send().await.unwrap();
    assert_eq!(one.status(), StatusCode::OK);
    assert!(one.text().await.unwrap().contains("cherry"));
    let spanning = postcard::to_allocvec(&vec![Command::put("a", "1"), Command::put("A", "2")]);
    let refused = http.post(url(&node, "/kv")).body(spanning.unwrap()).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(client.get("A").await.unwrap(), None);
    let nested = postcard::to_allocvec(&vec![Command::Batch(vec![])]).unwrap();
    let refused = http.post(url(&node, "/kv")).body(nested).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let garbage = http.post(url(&node, "/kv")).body("not postcard").send().await.unwrap();
    assert_eq!(garbage.status(), StatusCode::BAD_REQUEST);

    // Restarted with another number of groups, the store is refused.
    node.stop().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = NodeConfig { groups: 2, ..NodeConfig::default() };
    let err = Node::start_configured(1, listener, &dirs.path().join("node-1"), config)
        .await
        .err()
        .expect("a store of four groups refuses two");
    assert!(err.to_string().contains("--groups 4"), "{err}");
    let node = start(1, dirs.path(), 4).await;
    for group in node.app.groups.values() {
        group.raft.wait(PATIENCE).current_leader(1, "node 1 leads again").await.unwrap();
    }
    assert_eq!(Client::new([&node.app.addr]).unwrap().scan("", 100).await.unwrap().len(), 9);
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_group_keeps_the_layout_and_answers_of_a_node_before_shards() {
    let dirs = tempfile::tempdir().unwrap();
    let node = start(1, dirs.path(), 1).await;
    let http = reqwest::Client::new();
    http.post(url(&node, "/cluster/init")).send().await.unwrap();
    node.app.raft.wait(PATIENCE).current_leader(1, "node 1 leads").await.unwrap();
    let client = Client::new([&node.app.addr]).unwrap();
    client.put("a", "1").await.unwrap();
    client.batch(vec![Command::put("b", "2"), Command::put("~", "3")]).await.unwrap();
    assert_eq!(client.scan("", 10).await.unwrap().len(), 3);
    // A scan of every key needs no shard header with one group.
    let all = http.get(url(&node, "/kv?prefix=")).send().await.unwrap();
    assert_eq!(all.status(), StatusCode::OK);
    let status: serde_json::Value =
        http.get(url(&node, "/cluster/status")).send().await.unwrap().json().await.unwrap();
    assert!(status["groups"].is_null(), "{status}");
    node.stop().await.unwrap();
    // The store is a single-group one, as `bloomkv_raft::open` opens it.
    let (_log, sm) =
        bloomkv_raft::open(dirs.path().join("node-1"), bloomkv::Options::default()).unwrap();
    assert_eq!(sm.reader().scan().count(), 3);
}
