//! Four `kv_node` processes on loopback, each hosting eight raft groups (`--groups 8`), formed
//! as an operator forms them; writers (`bloomkv_raft::Client`, puts and batches spanning
//! groups) run while nodes that lead groups are killed (`SIGKILL`) and restarted one at a
//! time. Afterwards every acknowledged write is on every node in the group that owns its key,
//! and no group holds a key of another's; `Client::scan` reads them back merged in key order.
//!
//! Bounded for CI (six kills, about 15 s). A longer run, and a reproducible schedule:
//!
//! ```text
//! cargo test --release -p bloomkv-raft --no-run   # builds kv_node as the tests use it
//! SHARDS_KILLS=40 SHARDS_SEED=7 cargo test --release -p bloomkv-raft --test shard_procs -- --nocapture
//! ```
//!
//! The nodes are the `kv_node` example, which `cargo test` builds beside the test binary.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloomkv_raft::shard::ShardMap;
use bloomkv_raft::{Client, GroupId, SHARD_GROUP_HEADER};

mod common;

use common::writers::{writer, Outcomes};
use common::{form_cluster, unhex, wait_until, Proc};

const NODES: u64 = 4;
const GROUPS: u64 = 8;
const WRITERS: u64 = 6;

/// A small deterministic generator (xorshift64*): the schedule is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Node `node`'s status, with each group's under `groups`.
async fn groups_status(http: &reqwest::Client, node: &Proc) -> Option<serde_json::Value> {
    let status = node.status(http).await?;
    status["groups"].is_object().then(|| status["groups"].clone())
}

/// Every key and value of group `group` on `node`, as it has applied them.
async fn group_data(
    http: &reqwest::Client,
    node: &Proc,
    group: GroupId,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut all = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = node.url("/kv?prefix=&consistency=stale");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let answer = http.get(url).header(SHARD_GROUP_HEADER, group).send().await.unwrap();
        let page: serde_json::Value = answer.json().await.unwrap();
        for item in page["items"].as_array().unwrap() {
            let field = |text: &str, hex: &str| match item[text].as_str() {
                Some(t) => t.as_bytes().to_vec(),
                None => unhex(item[hex].as_str().unwrap()),
            };
            all.insert(field("key", "key_hex"), field("value", "value_hex"));
        }
        match page["more"].as_bool().unwrap() {
            true => cursor = Some(page["cursor"].as_str().unwrap().to_string()),
            false => return all,
        }
    }
}

/// The indexes in `nodes` of the nodes that lead at least one group, as the nodes say.
async fn group_leaders(http: &reqwest::Client, nodes: &[Proc]) -> Vec<usize> {
    let mut leaders = BTreeSet::new();
    for (i, node) in nodes.iter().enumerate() {
        let Some(groups) = groups_status(http, node).await else { continue };
        if groups.as_object().unwrap().values().any(|g| g["state"] == "Leader") {
            leaders.insert(i);
        }
    }
    assert!(!leaders.is_empty(), "no node leads a group");
    leaders.into_iter().collect()
}

/// The last log index of group `g`'s leader, once a node says it leads the group.
async fn leader_last_index(http: &reqwest::Client, nodes: &[Proc], g: &str) -> Option<u64> {
    let deadline = std::time::Instant::now() + common::PATIENCE;
    loop {
        for node in nodes {
            let Some(groups) = groups_status(http, node).await else { continue };
            if groups[g]["state"] == "Leader" {
                return groups[g]["last_log_index"].as_u64();
            }
        }
        assert!(std::time::Instant::now() < deadline, "group {g} has no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_stay_in_their_groups_through_kills_and_restarts() {
    let kills: u64 = std::env::var("SHARDS_KILLS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    let seed: u64 =
        std::env::var("SHARDS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
        });
    eprintln!("shards: {kills} kills, SHARDS_SEED={seed}");
    let mut rng = Rng(seed | 1);
    let scratch = tempfile::tempdir().unwrap();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().unwrap();
    let mut nodes: Vec<Proc> = (1..=NODES)
        .map(|id| {
            let mut node = Proc::new(id, scratch.path());
            node.flags.extend(["--groups", "8", "--admin-timeout", "10"].map(String::from));
            node
        })
        .collect();
    form_cluster(&http, &mut nodes).await;
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    let map_bytes = http.get(nodes[0].url("/shard/map")).send().await.unwrap().bytes().await;
    let map = ShardMap::decode(&map_bytes.unwrap()).unwrap();
    assert_eq!(map.len(), GROUPS as usize);
    assert!(map.shards().all(|s| s.members.len() == NODES as usize), "{map:?}");

    let stop = Arc::new(AtomicBool::new(false));
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let acked = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let task = writer(w, addrs.clone(), stop.clone(), outcomes.clone(), acked.clone());
            tokio::spawn(task)
        })
        .collect();

    // Each round: a node is killed; the writers make progress without it (the groups it led
    // elect new leaders); it restarts, and every group has it back as a member that answers.
    for round in 0..kills {
        // A node that leads some group: its groups elect new leaders while writes go on.
        let leaders = group_leaders(&http, &nodes).await;
        let victim = leaders[(rng.next() % leaders.len() as u64) as usize];
        let before = acked.load(Ordering::Relaxed);
        eprintln!("round {round}: killing node {} after {before} acknowledged writes", victim + 1);
        nodes[victim].kill();
        wait_until("writes go on without the killed node", || async {
            acked.load(Ordering::Relaxed) >= before + 40
        })
        .await;
        nodes[victim].start();
        let node = &nodes[victim];
        wait_until("the restarted node's groups all know a leader", || async {
            groups_status(&http, node).await.is_some_and(|groups| {
                groups.as_object().unwrap().values().all(|g| g["leader"].is_u64())
            })
        })
        .await;
    }
    let before = acked.load(Ordering::Relaxed);
    wait_until("writes go on with every node back", || async {
        acked.load(Ordering::Relaxed) >= before + 40
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    eprintln!(
        "{} writes acknowledged, {} unsure (a call that gave up)",
        outcomes.acked.len(),
        outcomes.unsure.len()
    );

    // Every node applies everything its groups' leaders hold.
    for group in 0..GROUPS {
        let g = group.to_string();
        let last = leader_last_index(&http, &nodes, &g).await;
        for node in &nodes {
            wait_until("a node applies all of a group's log", || async {
                groups_status(&http, node)
                    .await
                    .is_some_and(|groups| groups[&g]["last_applied"].as_u64() >= last)
            })
            .await;
        }
    }

    // On every node: each group holds only keys of its own range, and every acknowledged
    // write, with its value, is in the group that owns its key. A key whose write was unsure
    // may be there or not, but only in its own group.
    let mut per_group_counts = vec![0usize; GROUPS as usize];
    for node in &nodes {
        let mut seen: BTreeMap<Vec<u8>, GroupId> = BTreeMap::new();
        for group in 0..GROUPS {
            let data = group_data(&http, node, group).await;
            per_group_counts[group as usize] = data.len();
            for (k, v) in data {
                let shown = String::from_utf8_lossy(&k).into_owned();
                assert_eq!(map.group_of(&k), group, "node {}: {shown} in group {group}", node.id);
                assert!(seen.insert(k, group).is_none(), "node {}: {shown} twice", node.id);
                match outcomes.acked.get(&shown) {
                    Some((want, _)) => assert_eq!(want.as_bytes(), v, "node {}: {shown}", node.id),
                    None => assert!(outcomes.unsure.contains(&shown), "{shown}: never written"),
                }
            }
        }
        for written in outcomes.acked.keys() {
            assert!(seen.contains_key(written.as_bytes()), "node {}: {written} lost", node.id);
        }
    }
    assert!(
        per_group_counts.iter().all(|&n| n > 0),
        "every group took writes: {per_group_counts:?}"
    );

    // The client's scan merges the groups in key order.
    let client = Client::new(&addrs).unwrap();
    let scanned = client.scan("", usize::MAX).await.unwrap();
    assert!(scanned.windows(2).all(|w| w[0].0 < w[1].0), "a scan in key order");
    let scanned: BTreeSet<Vec<u8>> = scanned.into_iter().map(|(k, _)| k).collect();
    for written in outcomes.acked.keys() {
        assert!(scanned.contains(written.as_bytes()), "{written} missing from the scan");
    }
}
