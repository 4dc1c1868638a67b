//! Four `kv_node` processes on loopback running on `ShardNode` (`--shards 8`): the cluster is
//! formed on nodes 1-3 with eight groups, node 4 joins it, and while writers
//! (`bloomkv_raft::Client`) run throughout:
//!
//! - a group splits (`/cluster/split`), its leader killed (`SIGKILL`) once the split is under
//!   way (its new group id reserved) and restarted;
//! - a group's replica moves to node 4 (`/cluster/move`), node 4 killed once it hosts the
//!   replica and restarted, the move sent again until it completes.
//!
//! Afterwards every acknowledged write is present once, with its value, in the group that owns
//! its key by the final map, on every member of that group, and in no other group on any node;
//! and, idle, every group on every node goes quiet (stops ticking: `/shard/ping`). Then the
//! members of the biggest group are killed and restarted one by one with `--split-bytes` just
//! under its size: it splits by itself (and only it), counted in `/metrics`, with the same
//! guarantees for the writes. Last, node 1 is drained (every replica moved off it, its
//! metadata vote too), removed from the cluster and stopped, and writes go on without it.
//! The longest gap between acknowledged writes to the range a split or move touches, and the
//! longest any write to it waited, are printed, not asserted.
//!
//! Bounded for CI (one split and one move, well under a minute). More rounds (each splits
//! another group and moves another replica, alternately to and from node 4), and with
//! `SHARD_OPS_KILLS=0` the same rounds without their kills:
//!
//! ```text
//! cargo test --release -p bloomkv-raft --no-run
//! SHARD_OPS_ROUNDS=5 cargo test --release -p bloomkv-raft --test shard_ops -- --nocapture
//! ```
//!
//! `SHARD_OPS_KEEP=1` keeps the nodes' directories and logs, `SHARD_OPS_LOG=info` makes the
//! logs say more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloomkv_raft::shard::{ShardMap, META_GROUP};
use bloomkv_raft::{GroupId, SHARD_GROUP_HEADER};
use serde_json::{json, Value};

mod common;

use common::writers::{writer, Outcomes};
use common::{unhex, wait_until, Proc, PATIENCE};

const WRITERS: u64 = 6;

/// `eprintln!` with the seconds since `$t0` in front, so a slow step shows where it began.
macro_rules! say {
    ($t0:expr, $($arg:tt)*) => {
        eprintln!("{:8.3}s {}", $t0.elapsed().as_secs_f64(), format!($($arg)*))
    };
}

/// Sends a cluster call until it answers 200, following 421s to the leader they name and
/// trying the next node on anything else: its JSON answer.
async fn cluster_call(http: &reqwest::Client, nodes: &[String], path: &str, body: Value) -> Value {
    let deadline = Instant::now() + PATIENCE;
    let mut target = nodes[0].clone();
    let mut next = 0;
    loop {
        let sent = http.post(format!("http://{target}{path}")).json(&body).send().await;
        let why = match sent {
            Ok(answer) if answer.status() == 200 => return answer.json().await.unwrap(),
            Ok(answer) => {
                let status = answer.status();
                let text = answer.text().await.unwrap_or_default();
                let redirect = serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["leader_addr"].as_str().map(String::from));
                match (status.as_u16(), redirect) {
                    (421, Some(leader)) if leader != target => {
                        target = leader;
                        continue;
                    }
                    _ => format!("{status}: {}", text.trim()),
                }
            }
            Err(e) => e.to_string(),
        };
        assert!(Instant::now() < deadline, "{path} {body}: gave up; last: {why}");
        eprintln!("{path} {body} at {target}: {why}; again");
        next += 1;
        target = nodes[next % nodes.len()].clone();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Node `node`'s groups as its status shows them, by id.
async fn groups_of(http: &reqwest::Client, node: &Proc) -> Option<serde_json::Map<String, Value>> {
    node.status(http).await?["groups"].as_object().cloned()
}

/// The node's shard map, once it has one.
async fn map_of(http: &reqwest::Client, node: &Proc) -> Option<ShardMap> {
    let answer = http.get(node.url("/shard/map")).send().await.ok()?;
    if answer.status() != 200 {
        return None;
    }
    ShardMap::decode(&answer.bytes().await.ok()?).ok()
}

/// The index in `nodes` of the node leading `group`, once one says it does.
async fn leader_of(http: &reqwest::Client, nodes: &[Proc], group: GroupId) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        for (i, node) in nodes.iter().enumerate().filter(|(_, n)| n.up()) {
            let Some(groups) = groups_of(http, node).await else { continue };
            if groups.get(&group.to_string()).is_some_and(|g| g["state"] == "Leader") {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "group {group} has no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
        // A node whose map has yet to show a split of the group answers 503 until it does.
        let deadline = Instant::now() + PATIENCE;
        let answer = loop {
            let answer = http.get(&url).header(SHARD_GROUP_HEADER, group).send().await.unwrap();
            if answer.status() != 503 || Instant::now() > deadline {
                break answer;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(answer.status(), 200, "node {} group {group}", node.id);
        let page: Value = answer.json().await.unwrap();
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

/// The acknowledged writes to a key in `start..end` (`None`: no end): key and when acknowledged.
fn acked_in<'a>(
    outcomes: &'a Outcomes,
    (start, end): (&'a [u8], Option<&'a [u8]>),
) -> impl Iterator<Item = (&'a String, Instant)> + 'a {
    outcomes
        .acked
        .iter()
        .filter(move |(k, _)| k.as_bytes() >= start && end.is_none_or(|e| k.as_bytes() < e))
        .map(|(k, (_, t))| (k, *t))
}

/// The longest time without an acknowledged write to a key in `range` around `during`: from
/// the last acknowledgement before it to the first after it, and between acknowledgements
/// within it.
fn longest_gap(
    outcomes: &Outcomes,
    range: (&[u8], Option<&[u8]>),
    during: std::ops::Range<Instant>,
) -> Duration {
    let mut times: Vec<Instant> = acked_in(outcomes, range).map(|(_, t)| t).collect();
    times.sort();
    let before = times.iter().rev().find(|t| **t <= during.start).copied();
    let after = times.iter().find(|t| **t >= during.end).copied();
    let mut marks: Vec<Instant> = before.into_iter().collect();
    marks.extend(times.iter().filter(|t| during.contains(t)));
    marks.extend(after);
    marks.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default()
}

/// What writes to `range` saw of an operation that ran `during`, for the report: the longest
/// gap between acknowledgements, the longest wait, and how long the operation took.
fn unavailability(
    outcomes: &Mutex<Outcomes>,
    range: (&[u8], Option<&[u8]>),
    during: std::ops::Range<Instant>,
) -> String {
    let out = outcomes.lock().unwrap();
    let (gap, wait) =
        (longest_gap(&out, range, during.clone()), longest_wait(&out, range, during.clone()));
    format!("{gap:?}, wait {wait:?} (took {:?})", during.end - during.start)
}

/// The longest a write to a key in `range` waited, from its call's first attempt to its
/// acknowledgement, among those waiting at some time in `during`: the unavailability a
/// client saw, whatever the writers' pace (the gap also counts the time they spent on other
/// ranges).
fn longest_wait(
    outcomes: &Outcomes,
    range: (&[u8], Option<&[u8]>),
    during: std::ops::Range<Instant>,
) -> Duration {
    acked_in(outcomes, range)
        .filter_map(|(k, acked)| Some((*outcomes.sent.get(k)?, acked)))
        .filter(|&(sent, acked)| sent <= during.end && acked >= during.start)
        .map(|(sent, acked)| acked - sent)
        .max()
        .unwrap_or_default()
}

struct Cluster {
    http: reqwest::Client,
    nodes: Vec<Proc>,
    addrs: Vec<String>,
    acked: Arc<AtomicU64>,
}

impl Cluster {
    /// Waits until `n` more writes than now are acknowledged.
    async fn more_writes(&self, n: u64) {
        let target = self.acked.load(Ordering::Relaxed) + n;
        wait_until("writes go on", || async { self.acked.load(Ordering::Relaxed) >= target }).await;
    }

    /// Restarts node `i` and waits until every group it runs knows a leader; if one does
    /// not, fails showing what every node says of its groups.
    async fn restart(&mut self, i: usize) {
        self.nodes[i].start();
        let (http, node) = (&self.http, &self.nodes[i]);
        let deadline = Instant::now() + PATIENCE;
        loop {
            let groups = groups_of(http, node).await;
            if groups.as_ref().is_some_and(|g| g.values().all(|g| g["leader"].is_u64())) {
                return;
            }
            if Instant::now() > deadline {
                let shown = self.report(i).await;
                panic!("node {}: a group knows no leader after its restart:{shown}", i + 1);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What every node says of its groups, and the last lines of node `i`'s log: for a
    /// failure to show.
    async fn report(&self, i: usize) -> String {
        let mut shown = String::new();
        for n in self.nodes.iter().filter(|n| n.up()) {
            let status = groups_of(&self.http, n).await.map(Value::Object);
            shown.push_str(&format!("\nnode {}: {}", n.id, status.unwrap_or_default()));
        }
        let log = std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        shown.push_str(&format!("\nnode {}'s log, last lines first:\n{}", i + 1, tail.join("\n")));
        shown
    }

    /// The map as node `i` has it, once it has one of at least `version`.
    async fn map(&self, i: usize, version: u64) -> ShardMap {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let map = map_of(&self.http, &self.nodes[i]).await;
            if let Some(map) = map.filter(|m| m.version() >= version) {
                return map;
            }
            assert!(Instant::now() < deadline, "node {}: no map of version {version}", i + 1);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Checks, once the writers stopped, that every member of every group of `map` (the current
/// map) applies everything the group's leader holds; that on every node, in every group it
/// runs, are only keys the map gives that group, each once, with the value acknowledged; that
/// every acknowledged key is on every member of its group; and that only members hold a
/// group's replica.
async fn every_write_once(cluster: &Cluster, outcomes: &Outcomes, map: &ShardMap) {
    let (http, nodes) = (&cluster.http, &cluster.nodes);
    // Every member of every group applies everything the group's leader holds.
    for shard in map.shards() {
        let g = shard.group.to_string();
        let leader = leader_of(http, nodes, shard.group).await;
        let groups = groups_of(http, &nodes[leader]).await.unwrap();
        let last = groups[&g]["last_log_index"].as_u64();
        for member in shard.members {
            let node = &nodes[*member as usize - 1];
            let deadline = Instant::now() + PATIENCE;
            while !groups_of(http, node).await.is_some_and(|groups| {
                groups.get(&g).is_some_and(|s| s["last_applied"].as_u64() >= last)
            }) {
                if Instant::now() > deadline {
                    let shown = cluster.report(*member as usize - 1).await;
                    panic!("node {member} never applies group {g}'s log up to {last:?}:{shown}");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    // On every node, in every group it runs: only keys the final map gives that group, each
    // once, with the value acknowledged; every acknowledged key on every member of its group.
    let mut held: BTreeMap<(u64, GroupId), usize> = BTreeMap::new();
    for node in nodes.iter().filter(|n| n.up()) {
        let groups = groups_of(http, node).await.unwrap();
        let mut seen: BTreeMap<Vec<u8>, GroupId> = BTreeMap::new();
        for id in groups.keys().map(|g| g.parse::<GroupId>().unwrap()) {
            if id == META_GROUP {
                continue;
            }
            let data = group_data(http, node, id).await;
            held.insert((node.id, id), data.len());
            for (k, v) in data {
                let shown = String::from_utf8_lossy(&k).into_owned();
                assert_eq!(map.group_of(&k), id, "node {}: {shown} in group {id}", node.id);
                assert!(seen.insert(k, id).is_none(), "node {}: {shown} twice", node.id);
                match outcomes.acked.get(&shown) {
                    Some((want, _)) => assert_eq!(want.as_bytes(), v, "node {}: {shown}", node.id),
                    None => assert!(outcomes.unsure.contains(&shown), "{shown}: never written"),
                }
            }
        }
        for shard in map.shards().filter(|s| s.members.contains(&node.id)) {
            assert!(
                groups.contains_key(&shard.group.to_string()),
                "node {}: no group {}",
                node.id,
                shard.group
            );
        }
        for written in outcomes.acked.keys() {
            let owner = map.shard_of(written.as_bytes());
            if owner.members.contains(&node.id) {
                assert!(seen.contains_key(written.as_bytes()), "node {}: {written} lost", node.id);
            }
        }
    }
    // Only members hold a group's replica: a move's source dropped its copy.
    for (node, group) in held.keys() {
        assert!(
            map.group(*group).unwrap().members.contains(node),
            "node {node} holds group {group}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_stay_exactly_once_through_splits_and_moves_with_kills() {
    let rounds: u64 =
        std::env::var("SHARD_OPS_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    // `SHARD_OPS_KILLS=0`: the rounds without their kills, for what a split and a move cost
    // writes by themselves.
    let kills = std::env::var("SHARD_OPS_KILLS").map_or(true, |v| v != "0");
    // `SHARD_OPS_KEEP=1` keeps the nodes' directories and logs (the path is printed), and
    // `SHARD_OPS_LOG=info` (or any `--log-level`) makes the logs say more: for a failure's
    // post-mortem.
    let keep = std::env::var("SHARD_OPS_KEEP").is_ok_and(|v| v == "1");
    let level = std::env::var("SHARD_OPS_LOG").ok();
    let t0 = Instant::now();
    let mut scratch = tempfile::tempdir().unwrap();
    if keep {
        scratch.disable_cleanup(true);
        say!(t0, "keeping {}", scratch.path().display());
    }
    let http = reqwest::Client::builder().timeout(Duration::from_secs(40)).build().unwrap();
    let mut nodes: Vec<Proc> = (1..=4)
        .map(|id| {
            let mut node = Proc::new(id, scratch.path());
            if let Some(level) = &level {
                node.flags[1] = level.clone();
            }
            node.flags.extend(["--shards", "8", "--admin-timeout", "10"].map(String::from));
            node
        })
        .collect();
    for node in nodes.iter_mut() {
        node.start();
    }
    for node in &nodes {
        wait_until("a node serves", || async { node.status(&http).await.is_some() }).await;
    }
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    let first: Vec<(u64, String)> = nodes[..3].iter().map(|n| (n.id, n.addr.clone())).collect();
    let init = cluster_call(&http, &addrs[..1], "/cluster/init", json!(first)).await;
    eprintln!("init: {init}");
    // Node 4 joins the cluster: a learner of the metadata group, holding no range yet.
    let join = json!([4, addrs[3]]);
    let joined = http.post(nodes[0].url("/cluster/learner")).json(&join).send().await.unwrap();
    assert_eq!(joined.status(), 200, "{}", joined.text().await.unwrap());
    let mut cluster = Cluster { http, nodes, addrs, acked: Arc::new(AtomicU64::new(0)) };
    let map = cluster.map(3, 1).await;
    assert_eq!(map.len(), 8);
    assert!(map.shards().all(|s| s.members == &BTreeSet::from([1, 2, 3])), "{map:?}");

    let stop = Arc::new(AtomicBool::new(false));
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (addrs, stop, out) = (cluster.addrs.clone(), stop.clone(), outcomes.clone());
            tokio::spawn(writer(w, addrs, stop, out, cluster.acked.clone()))
        })
        .collect();
    cluster.more_writes(100).await;

    let mut gaps = Vec::new();
    for round in 0..rounds {
        // A split, its group's leader killed once it is under way (the metadata group has
        // taken its reservation) and restarted.
        let map = cluster.map(0, 1).await;
        let shard = map.shards().nth((round as usize * 3 + 3) % map.len()).unwrap();
        let (group, start, end) =
            (shard.group, shard.start.to_vec(), shard.end.map(<[u8]>::to_vec));
        // A key inside the range, after its start: the start with a byte appended.
        let mut at = start.clone();
        at.push(b'm');
        let at = String::from_utf8(at).unwrap();
        let victim = leader_of(&cluster.http, &cluster.nodes, group).await;
        let meta = |groups: &serde_json::Map<String, Value>| {
            groups[&META_GROUP.to_string()]["last_log_index"].as_u64()
        };
        let watcher = (victim + 1) % 3;
        let before = meta(&groups_of(&cluster.http, &cluster.nodes[watcher]).await.unwrap());
        let started = Instant::now();
        let to: Vec<String> =
            (0..3).filter(|&i| i != victim).map(|i| cluster.addrs[i].clone()).collect();
        let split = {
            let (http, body) = (cluster.http.clone(), json!({ "group": group, "at": at }));
            tokio::spawn(async move { cluster_call(&http, &to, "/cluster/split", body).await })
        };
        let (http, watched) = (&cluster.http, &cluster.nodes[watcher]);
        wait_until("the split reserves its group", || async {
            groups_of(http, watched).await.is_some_and(|g| meta(&g) > before)
        })
        .await;
        say!(t0, "round {round}: splitting group {group} at {at:?}");
        if kills {
            say!(t0, "round {round}: killing node {}, group {group}'s leader", victim + 1);
            cluster.nodes[victim].kill();
            cluster.more_writes(30).await;
            cluster.restart(victim).await;
        }
        // A split still running 5 s on: what every node says of its groups then.
        let mut split = split;
        let answer = match tokio::time::timeout(Duration::from_secs(5), &mut split).await {
            Ok(done) => done,
            Err(_) => {
                say!(t0, "round {round}: the split runs on:{}", cluster.report(victim).await);
                split.await
            }
        }
        .unwrap();
        let made = answer["new_group"].as_u64().unwrap();
        let ended = Instant::now();
        say!(t0, "round {round}: split {answer}");
        let map = cluster.map(0, answer["map_version"].as_u64().unwrap_or(1)).await;
        assert_eq!(map.group_of(at.as_bytes()), made);
        assert_eq!(map.group(group).unwrap().end, Some(at.as_bytes()));
        cluster.more_writes(30).await;
        let touched = (&start[..], end.as_deref());
        gaps.push(format!(
            "split of group {group}: {}",
            unavailability(&outcomes, touched, started..ended)
        ));

        // A move to node 4 (or from it, every other round), the target killed once it hosts
        // the replica, restarted, and the move sent again until it completes.
        let map = cluster.map(0, map.version()).await;
        let shard = map.shards().nth((round as usize * 5 + 5) % map.len()).unwrap();
        let (group, start, end) =
            (shard.group, shard.start.to_vec(), shard.end.map(<[u8]>::to_vec));
        let on_4 = shard.members.contains(&4);
        let (from, to) = match on_4 {
            false => (*shard.members.iter().next().unwrap(), 4),
            true => (4, (1..=3).find(|n| !shard.members.contains(n)).unwrap()),
        };
        let body = json!({ "group": group, "from": from, "to": to });
        say!(t0, "round {round}: moving group {group} from node {from} to node {to}");
        let started = Instant::now();
        let first = {
            let (http, addrs, body) = (cluster.http.clone(), cluster.addrs.clone(), body.clone());
            tokio::spawn(async move { cluster_call(&http, &addrs, "/cluster/move", body).await })
        };
        let target = to as usize - 1;
        let (http, hosting) = (&cluster.http, &cluster.nodes[target]);
        wait_until("the target hosts the replica", || async {
            groups_of(http, hosting).await.is_some_and(|g| g.contains_key(&group.to_string()))
        })
        .await;
        if kills {
            // Frozen first, so that what the move has done by the kill can be read: joined as
            // a learner and catching up, or already a voter.
            cluster.nodes[target].signal("STOP");
            let leader = leader_of(&cluster.http, &cluster.nodes, group).await;
            let status = groups_of(&cluster.http, &cluster.nodes[leader]).await.unwrap();
            let shown = &status[&group.to_string()];
            say!(
                t0,
                "round {round}: killing node {to}, the move's target; group {group}'s voters \
                 {}, learners {}",
                shown["voters"],
                shown["learners"]
            );
            cluster.nodes[target].kill();
            cluster.more_writes(30).await;
            cluster.restart(target).await;
        }
        // The call rides out the kill (sent again while it fails); sent again until the source
        // has dropped its copy too.
        let mut answer = first.await.unwrap();
        while answer["dropped"] != true {
            say!(t0, "round {round}: move {answer}; again");
            answer =
                cluster_call(&cluster.http, &cluster.addrs, "/cluster/move", body.clone()).await;
        }
        let ended = Instant::now();
        say!(t0, "round {round}: move {answer}");
        let map = cluster.map(0, map.version() + 1).await;
        let members = map.group(group).unwrap().members;
        assert!(members.contains(&to) && !members.contains(&from), "{map:?}");
        cluster.more_writes(30).await;
        let touched = (&start[..], end.as_deref());
        gaps.push(format!(
            "move of group {group}: {}",
            unavailability(&outcomes, touched, started..ended)
        ));
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    eprintln!(
        "{} writes acknowledged, {} unsure; longest gap between acknowledged writes to the \
         range touched, and longest wait of a write to it: {}",
        outcomes.acked.len(),
        outcomes.unsure.len(),
        gaps.join(", ")
    );

    let map = cluster.map(0, 1).await;
    every_write_once(&cluster, &outcomes, &map).await;
    let (http, nodes) = (&cluster.http, &cluster.nodes);
    assert!(map.len() > 8, "{map:?}");

    // The metrics count what the calls did.
    let mut splits = 0;
    for node in nodes {
        let text = http.get(node.url("/metrics")).send().await.unwrap().text().await.unwrap();
        let value = |name: &str| {
            text.lines().find_map(|l| l.strip_prefix(&format!("{name} "))?.parse::<u64>().ok())
        };
        assert_eq!(value("shard_map_version"), Some(map.version()), "node {}", node.id);
        assert!(value("shard_groups_hosted").is_some());
        splits += value("shard_splits_total").unwrap();
    }
    assert!(splits >= 1, "no split counted");

    // Idle now, every group on every node stops ticking: followers whose leader's node vouches
    // for it over `/shard/ping`, leaders whose members have all caught up.
    for node in nodes {
        wait_until("every group goes quiet", || async {
            let Ok(sent) = http.get(node.url("/metrics")).send().await else { return false };
            let Ok(text) = sent.text().await else { return false };
            let value = |name: &str| {
                text.lines().find_map(|l| l.strip_prefix(&format!("{name} "))?.parse::<u64>().ok())
            };
            let (running, quiet) = (value("shard_groups_running"), value("shard_groups_quiet"));
            matches!((running, quiet), (Some(r), Some(q)) if r > 0 && q == r)
        })
        .await;
    }

    // A node that still holds replicas is not removed; one not in the cluster is gone already.
    let meta_leader = leader_of(http, nodes, META_GROUP).await;
    let remove = |id: u64| http.post(nodes[meta_leader].url("/cluster/remove-node")).json(&id);
    let refused = remove(1).send().await.unwrap();
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    let held: Vec<u64> = map.shards().filter(|s| s.members.contains(&1)).map(|s| s.group).collect();
    assert_eq!(body["groups"], json!(held));
    let gone: Value = remove(9).send().await.unwrap().json().await.unwrap();
    assert_eq!(gone, json!({ "removed": 9, "already": true }));

    // Node 1 drained and removed: each of its replicas moves to the one node without one,
    // its metadata vote to node 4 (a learner there), and the cluster then has it in nothing.
    // Stopped, it is missed by no group and no write.
    let moves = map.shards().filter(|s| s.members.contains(&1)).count() as u64;
    for shard in map.shards().filter(|s| s.members.contains(&1)) {
        let to = (2..=4).find(|n| !shard.members.contains(n)).unwrap();
        let body = json!({ "group": shard.group, "from": 1, "to": to });
        while cluster_call(http, &cluster.addrs, "/cluster/move", body.clone()).await["dropped"]
            != true
        {}
    }
    let body = json!({ "group": META_GROUP, "from": 1, "to": 4 });
    cluster_call(http, &cluster.addrs, "/cluster/move", body).await;
    // The leader among the voters left: node 1, the leader perhaps, calls itself one until
    // the membership without it is committed.
    let meta_leader = loop {
        match leader_of(http, nodes, META_GROUP).await {
            0 => tokio::time::sleep(Duration::from_millis(20)).await,
            leader => break leader,
        }
    };
    let removed: Value = http
        .post(nodes[meta_leader].url("/cluster/remove-node"))
        .json(&1)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(removed["removed"], 1, "{removed}");
    let meta = groups_of(http, &nodes[meta_leader]).await.unwrap()[&META_GROUP.to_string()].clone();
    assert_eq!((&meta["voters"], &meta["learners"]), (&json!([2, 3, 4]), &json!([])), "{meta}");
    cluster.nodes[0].kill();
    let drained = cluster.map(1, map.version() + moves).await;
    assert!(drained.shards().all(|s| !s.members.contains(&1)), "{drained:?}");
    // Writes go on through a client that still lists node 1 first.
    let client = bloomkv_raft::Client::new(&cluster.addrs).unwrap();
    let mut outcomes = outcomes;
    for i in 0..32u64 {
        let (key, value) = (common::writers::key(99, i), common::writers::value(99, i));
        client.put(&key, value.clone()).await.unwrap();
        outcomes.acked.insert(key, (value, Instant::now()));
    }
    every_write_once(&cluster, &outcomes, &drained).await;
    let map = drained;
    let (http, nodes) = (&cluster.http, &cluster.nodes);

    // Splits by size, through kills: the members of the group holding the most data (and of
    // any group as big) are killed and restarted one by one with a threshold just under its
    // size, so that it splits by itself, possibly while a member is down, and its halves,
    // under the threshold, split no further.
    let mut sizes: BTreeMap<GroupId, u64> = BTreeMap::new();
    for shard in map.shards() {
        let leader = leader_of(http, nodes, shard.group).await;
        let data = group_data(http, &nodes[leader], shard.group).await;
        sizes.insert(shard.group, data.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum());
    }
    let (&biggest, &size) = sizes.iter().max_by_key(|(_, size)| **size).unwrap();
    let threshold = size - 1;
    let over: Vec<GroupId> =
        sizes.iter().filter(|(_, s)| **s > threshold).map(|(g, _)| *g).collect();
    // Every member of those groups: whichever leads one measures it.
    let members: BTreeSet<u64> =
        over.iter().flat_map(|g| map.group(*g).unwrap().members.iter().copied()).collect();
    eprintln!("by size: group {biggest} holds {size} bytes; over {threshold}: {over:?}");
    let flags =
        ["--split-bytes".to_string(), threshold.to_string(), "--split-check".into(), "0.1".into()];
    for id in members {
        let i = id as usize - 1;
        cluster.nodes[i].kill();
        cluster.nodes[i].flags.extend(flags.iter().cloned());
        cluster.restart(i).await;
    }
    // Each split recorded is a version; nothing else changes the map now.
    let by_size = cluster.map(1, map.version() + over.len() as u64).await;
    assert_eq!(by_size.len(), map.len() + over.len(), "{by_size:?}");
    for shard in map.shards() {
        let split = by_size.group(shard.group).unwrap().end != shard.end;
        assert_eq!(split, over.contains(&shard.group), "group {}: {by_size:?}", shard.group);
    }
    every_write_once(&cluster, &outcomes, &by_size).await;
    let (http, nodes) = (&cluster.http, &cluster.nodes);
    let (mut made, mut checks) = (0, 0);
    for node in nodes.iter().filter(|n| n.up()) {
        let text = http.get(node.url("/metrics")).send().await.unwrap().text().await.unwrap();
        let value = |name: &str| {
            text.lines().find_map(|l| l.strip_prefix(&format!("{name} "))?.parse::<u64>().ok())
        };
        made += value("shard_auto_splits_total").unwrap();
        checks += value("shard_split_checks_total").unwrap();
        let status = node.status(http).await.unwrap();
        let shown = status["auto_split"]["splits"].as_u64();
        assert_eq!(shown, value("shard_auto_splits_total"), "node {}: {status}", node.id);
    }
    assert_eq!(made, over.len() as u64, "splits by size counted");
    assert!(checks >= made);
}
