//! Three `kv_node` processes under the traffic that used to take a cluster down: many
//! concurrent writes of the largest size, and a node that comes back with its disk wiped.
//!
//! Bounded for CI; the long run (64 writers of 1 MiB for 60 s, as the targets in
//! raft/README.md state them):
//!
//! ```text
//! cargo test --release -p bloomkv-raft --no-run   # builds kv_node as the tests use it
//! TRAFFIC_WRITERS=64 TRAFFIC_SECS=60 cargo test --release -p bloomkv-raft --test traffic -- --nocapture
//! ```
//!
//! The nodes are the `kv_node` example, which `cargo test` builds beside the test binary.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

mod common;

use common::{form_cluster, scan_all, wait_until, Proc};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A value of `len` bytes that names its key, so a value under the wrong key or cut short is
/// seen.
fn value(key: &str, len: usize) -> Vec<u8> {
    key.bytes().chain(std::iter::repeat(b'.')).take(len).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_largest_writes_keep_the_leader_and_reach_every_node() {
    let writers = env("TRAFFIC_WRITERS", 32);
    let secs = env("TRAFFIC_SECS", 8);
    let big = 1 << 20; // the service's cap on a key and value together, less the key
    let scratch = tempfile::tempdir().unwrap();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let mut nodes: Vec<Proc> = (1..=3).map(|id| Proc::new(id, scratch.path())).collect();
    form_cluster(&http, &mut nodes).await;
    let term = nodes[0].status(&http).await.unwrap()["term"].clone();

    // Each writer puts its own keys one after another, as fast as it is answered; a small
    // writer beside them. Every answer is kept: 200 or the admission refusal, nothing else.
    let acked = Arc::new(Mutex::new(BTreeMap::<String, usize>::new()));
    let answers = Arc::new(Mutex::new(BTreeMap::<u16, u64>::new()));
    // The small writer's latencies, reported (not asserted: speed is measured, not tested).
    let small = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let end = Instant::now() + Duration::from_secs(secs);
    let leader = nodes[0].url("");
    let mut tasks = Vec::new();
    for w in 0..=writers {
        let (http, acked, answers, leader, small) =
            (http.clone(), acked.clone(), answers.clone(), leader.clone(), small.clone());
        // The last writer writes small values.
        let len = if w == writers { 100 } else { big - 32 };
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while Instant::now() < end {
                let key = format!("w{w:03}-{i:06}");
                i += 1;
                let put = http.put(format!("{leader}/kv/{key}")).body(value(&key, len)).send();
                let start = Instant::now();
                let status = put.await.unwrap().status();
                if w == writers && status == StatusCode::OK {
                    small.lock().unwrap().push(start.elapsed());
                }
                *answers.lock().unwrap().entry(status.as_u16()).or_default() += 1;
                if status == StatusCode::OK {
                    acked.lock().unwrap().insert(key, len);
                } else {
                    // Refused for now: the refusal says to come back later.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let answers = answers.lock().unwrap().clone();
    let acked = acked.lock().unwrap().clone();
    let mut small = small.lock().unwrap().clone();
    small.sort();
    let pct = |p: f64| small.get(((small.len() as f64 * p) as usize).min(small.len().max(1) - 1));
    eprintln!(
        "traffic: {writers} writers of 1 MiB and one small for {secs} s: answers {answers:?}; \
         small writes p50 {:?} p99 {:?} max {:?}",
        pct(0.5),
        pct(0.99),
        small.last()
    );
    assert!(
        answers.keys().all(|&s| s == 200 || s == 429),
        "writes answered other than 200 or 429: {answers:?}"
    );
    assert!(acked.len() as u64 > writers, "too few writes went through: {answers:?}");

    // No election happened: the same leader in the same term on every node.
    for node in &nodes {
        let s = node.status(&http).await.unwrap();
        assert_eq!((s["leader"].clone(), s["term"].clone()), (json!(1), term.clone()), "{s}");
    }
    // Every acknowledged write is on every node, whole.
    let target = nodes[0].status(&http).await.unwrap()["last_applied"].as_u64();
    for node in &nodes {
        wait_until("the node applied everything", || async {
            node.status(&http).await.is_some_and(|s| s["last_applied"].as_u64() >= target)
        })
        .await;
        let held = scan_all(&http, &node.url(""), "w").await;
        for (key, &len) in &acked {
            let got = held.get(key.as_bytes());
            assert!(got.is_some_and(|v| *v == value(key, len)), "node {}: {key}", node.id);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_disk_was_wiped_rejoins_by_snapshot() {
    let scratch = tempfile::tempdir().unwrap();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let mut nodes: Vec<Proc> = (1..=3).map(|id| Proc::new(id, scratch.path())).collect();
    form_cluster(&http, &mut nodes).await;
    let leader_url = nodes[0].url("");
    let put = |i: u32| {
        let (http, url) = (http.clone(), format!("{leader_url}/kv/k{i:05}"));
        async move { http.put(url).body(format!("v{i}")).send().await.unwrap().status() }
    };
    for i in 0..200 {
        assert_eq!(put(i).await, StatusCode::OK);
    }
    // The log up to here is gone from the leader: a node that has nothing must get a snapshot.
    let snap = http.post(nodes[0].url("/cluster/snapshot")).send().await.unwrap();
    assert_eq!(snap.status(), StatusCode::OK, "{}", snap.text().await.unwrap());
    for i in 200..220 {
        assert_eq!(put(i).await, StatusCode::OK);
    }

    // Node 3 (a voter) loses its disk and comes back with the same id and address.
    nodes[2].kill();
    std::fs::remove_dir_all(&nodes[2].dir).unwrap();
    for i in 220..240 {
        assert_eq!(put(i).await, StatusCode::OK);
    }
    // While it is down, the leader does not report it in sync.
    let s = nodes[0].status(&http).await.unwrap();
    assert!(s["replication"]["3"]["errors"].as_u64() > Some(0), "{s}");
    nodes[2].start();

    let target = nodes[0].status(&http).await.unwrap()["last_applied"].as_u64();
    let node3 = &nodes[2];
    wait_until("node 3 caught up", || async {
        node3.status(&http).await.is_some_and(|s| s["last_applied"].as_u64() >= target)
    })
    .await;
    let health = http.get(node3.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let metrics = http.get(node3.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let chunks = metrics.lines().find_map(|l| l.strip_prefix("raft_snapshot_chunks_received "));
    assert!(chunks.is_some_and(|c| c != "0"), "node 3 rejoined without a snapshot:\n{metrics}");
    let held = scan_all(&http, &node3.url(""), "k").await;
    assert_eq!(held.len(), 240);
    assert_eq!(held[&b"k00007"[..]], b"v7");
    // It takes writes again as a voter, and the leader sees it in sync.
    assert_eq!(put(240).await, StatusCode::OK);
    let leader = &nodes[0];
    wait_until("the leader sees node 3 in sync", || async {
        leader.status(&http).await.is_some_and(|s| s["replication"]["3"]["lag_entries"] == 0)
    })
    .await;
    for node in &nodes {
        assert_eq!(node.status(&http).await.unwrap()["healthy"], true);
    }
}
