//! Three `kv_node` processes on loopback under writes, with nodes killed (`SIGKILL`) and
//! restarted at random, snapshots taken and the log purged meanwhile; then a fourth node joins
//! as a learner from a snapshot. Every acknowledged write must be on every node, and every
//! node must hold the same data.
//!
//! Bounded for CI (about 20 s of chaos). A longer run, and a reproducible schedule:
//!
//! ```text
//! cargo test --release -p bloomkv-raft --no-run   # builds kv_node as the tests use it
//! CHAOS_SECS=600 CHAOS_SEED=7 cargo test --release -p bloomkv-raft --test chaos -- --nocapture
//! ```
//!
//! The nodes are the `kv_node` example, which `cargo test` builds beside the test binary.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

mod common;

use common::{scan_all, wait_until, Proc};

/// A small deterministic generator (xorshift64*): the schedule is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A node as the chaos runs it: a short admin timeout, so a call a kill cut off gives up soon.
fn node(id: u64, scratch: &Path) -> Proc {
    let mut node = Proc::new(id, scratch);
    node.flags.extend(["--admin-timeout".to_string(), "5".to_string()]);
    node
}

/// The id of the node some running node names as leader.
async fn leader(http: &reqwest::Client, nodes: &[Proc]) -> Option<usize> {
    for node in nodes.iter().filter(|n| n.up()) {
        if let Some(s) = node.status(http).await {
            if let Some(id) = s["leader"].as_u64() {
                let index = nodes.iter().position(|n| n.id == id)?;
                if nodes[index].up() {
                    return Some(index);
                }
            }
        }
    }
    None
}

async fn post(http: &reqwest::Client, url: String, body: Value) -> Option<StatusCode> {
    http.post(url).json(&body).send().await.ok().map(|r| r.status())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kills_restarts_and_a_late_learner() {
    let secs: u64 = std::env::var("CHAOS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let seed: u64 =
        std::env::var("CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
        });
    eprintln!("chaos: {secs} s, CHAOS_SEED={seed}");
    let mut rng = Rng(seed | 1);
    let scratch = tempfile::tempdir().unwrap();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().unwrap();
    let mut nodes: Vec<Proc> = (1..=3).map(|id| node(id, scratch.path())).collect();
    for node in &mut nodes {
        node.start();
    }
    let (http_ref, first) = (&http, &nodes[0]);
    wait_until("node 1 up", || async move { first.status(http_ref).await.is_some() }).await;
    assert_eq!(post(&http, nodes[0].url("/cluster/init"), Value::Null).await, Some(StatusCode::OK));
    for node in &nodes[1..] {
        let nodes_ref = &nodes;
        wait_until("node 1 leads", || async move { leader(http_ref, nodes_ref).await == Some(0) })
            .await;
        wait_until("a node up", || async move { node.status(http_ref).await.is_some() }).await;
        let body = serde_json::json!([node.id, node.addr]);
        assert_eq!(post(&http, nodes[0].url("/cluster/learner"), body).await, Some(StatusCode::OK));
    }
    let members = serde_json::json!([1, 2, 3]);
    assert_eq!(post(&http, nodes[0].url("/cluster/members"), members).await, Some(StatusCode::OK));

    // Writes in order, one at a time, to whichever node leads; each key is written once, so
    // an acknowledged key must be found with its value, and one whose write failed may or
    // may not be.
    let mut acked: BTreeMap<String, String> = BTreeMap::new();
    let (mut kills, mut snapshots, mut failed) = (0, 0, 0);
    let mut next_event = Instant::now() + Duration::from_millis(500 + rng.below(1000));
    let end = Instant::now() + Duration::from_secs(secs);
    let mut current = Some(0);
    let mut i = 0u64;
    while Instant::now() < end {
        if Instant::now() >= next_event {
            next_event = Instant::now() + Duration::from_millis(300 + rng.below(1200));
            let down: Vec<usize> = (0..nodes.len()).filter(|&n| !nodes[n].up()).collect();
            match (down.first(), rng.below(4)) {
                // At most one node down, so a majority can keep committing.
                (Some(&n), _) => nodes[n].start(),
                (None, 0) => {
                    if let Some(l) = current {
                        let url = nodes[l].url("/cluster/snapshot");
                        if post(&http, url, Value::Null).await == Some(StatusCode::OK) {
                            snapshots += 1;
                        }
                    }
                }
                (None, _) => {
                    let victim = rng.below(nodes.len() as u64) as usize;
                    nodes[victim].kill();
                    kills += 1;
                }
            }
        }
        let Some(l) = current.filter(|&l| nodes[l].up()) else {
            current = leader(&http, &nodes).await;
            if current.is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            continue;
        };
        let (key, value) = (format!("k{i:07}"), format!("v{i}-{seed}"));
        i += 1;
        let put = http.put(nodes[l].url(&format!("/kv/{key}"))).body(value.clone()).send().await;
        match put.map(|r| r.status()) {
            Ok(StatusCode::OK) => {
                acked.insert(key, value);
            }
            _ => {
                failed += 1;
                current = None;
            }
        }
    }
    eprintln!(
        "chaos: {} writes acknowledged, {failed} failed, {kills} kills, {snapshots} snapshots",
        acked.len()
    );
    assert!(acked.len() > 100 && kills > 0, "too little happened to mean anything");

    // Every node back, then on every voter a snapshot its log is purged up to, then a fourth
    // node that can only start from one: whichever voter leads when it joins, and leadership
    // may move between these steps, holds no log from the start.
    for node in nodes.iter_mut().filter(|n| !n.up()) {
        node.start();
    }
    let nodes_ref = &nodes;
    wait_until("a snapshot on every voter", || async move {
        for node in nodes_ref {
            let url = node.url("/cluster/snapshot");
            if post(http_ref, url, Value::Null).await != Some(StatusCode::OK) {
                return false;
            }
        }
        true
    })
    .await;
    let mut learner = node(4, scratch.path());
    learner.start();
    let learner_ref = &learner;
    wait_until("node 4 up", || async move { learner_ref.status(http_ref).await.is_some() }).await;
    let body = serde_json::json!([learner.id, learner.addr]);
    wait_until("node 4 added", || {
        let body = body.clone();
        async move {
            let Some(l) = leader(http_ref, nodes_ref).await else { return false };
            post(http_ref, nodes_ref[l].url("/cluster/learner"), body).await == Some(StatusCode::OK)
        }
    })
    .await;
    nodes.push(learner);

    // Every node applies everything the leader has, then holds every acknowledged write and
    // the same data as every other.
    let nodes_ref = &nodes;
    wait_until("every node caught up", || async move {
        let Some(l) = leader(http_ref, nodes_ref).await else { return false };
        let Some(s) = nodes_ref[l].status(http_ref).await else { return false };
        let target = s["last_applied"].as_u64();
        for node in nodes_ref {
            match node.status(http_ref).await {
                Some(s) if s["last_applied"].as_u64() >= target => {}
                _ => return false,
            }
        }
        true
    })
    .await;
    let metrics = http.get(nodes[3].url("/metrics")).send().await.unwrap().text().await.unwrap();
    let chunks = metrics.lines().find_map(|l| l.strip_prefix("raft_snapshot_chunks_received "));
    assert!(chunks.is_some_and(|c| c != "0"), "node 4 joined without a snapshot:\n{metrics}");
    let mut scans = Vec::new();
    for node in &nodes {
        let held: BTreeMap<String, String> = scan_all(&http, &node.url(""), "k")
            .await
            .into_iter()
            .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
            .collect();
        for (key, value) in &acked {
            assert_eq!(held.get(key), Some(value), "node {}: acknowledged {key}", node.id);
        }
        scans.push(held);
    }
    for (node, scan) in nodes.iter().zip(&scans).skip(1) {
        assert!(scan == &scans[0], "node {} holds other data than node 1", node.id);
    }
}
