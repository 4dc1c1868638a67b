//! The shard map at scale: its encoded size, the cost of encoding, decoding and routing by it,
//! and how many map changes a metadata group commits per second, by the map's size.
//!
//! ```text
//! cargo run --release -p bloomkv-raft --example shard_scale -- [--ranges 1000,10000,100000] \
//!     [--nodes 100] [--replicas 3] [--changes 200] [--voters 3] [--clients 1]
//! ```
//!
//! For each size in `--ranges`: a map of that many ranges (split keys like `user/00001234`,
//! 13 bytes, each group on `--replicas` of `--nodes` nodes), encoded and decoded
//! (`ShardMap::encode`/`decode`, as the metadata group stores it and a client fetches it),
//! 100,000 keys routed by it; then a metadata group of `--voters` voters in this process (one
//! database each, direct calls between them, each RPC through its JSON encoding) given the
//! map (`InitMap`), and `--changes` replica moves recorded in it (`RecordMembers`, what a
//! move orders), by `--clients` concurrent proposers: the commit rate of map changes.
// The errors are openraft's network errors, returned by value as its traits want them.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bloomkv_raft::shard::{ShardCommand, ShardMap, META_GROUP};
use bloomkv_raft::{Command, GroupId, NodeId, NodeStore, Outcome, Raft};
use openraft::{BasicNode, Config};

#[path = "../tests/direct/mod.rs"]
mod direct;

type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Args {
    ranges: Vec<usize>,
    nodes: u64,
    replicas: u64,
    changes: usize,
    voters: u64,
    clients: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        ranges: vec![1_000, 10_000, 100_000],
        nodes: 100,
        replicas: 3,
        changes: 200,
        voters: 3,
        clients: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--ranges" => args.ranges = value.split(',').map(number).collect::<Result<_, _>>()?,
            "--nodes" => args.nodes = number(&value)?.max(1) as u64,
            "--replicas" => args.replicas = number(&value)?.max(1) as u64,
            "--changes" => args.changes = number(&value)?,
            "--voters" => args.voters = number(&value)?.clamp(1, 5) as u64,
            "--clients" => args.clients = number(&value)?.max(1),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

#[derive(Clone, Default)]
struct Rafts(Arc<RwLock<HashMap<(GroupId, NodeId), Raft>>>);

impl direct::Lookup for Rafts {
    fn raft(&self, group: GroupId, node: NodeId) -> Option<Raft> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).get(&(group, node)).cloned()
    }
}

/// Group `g` (from 1) starts at `user/<g * step>`, on `replicas` consecutive nodes.
fn map(args: &Args, ranges: usize) -> ShardMap {
    let step = 100_000_000 / ranges as u64;
    let members = |g: u64| -> BTreeSet<NodeId> {
        (0..args.replicas).map(|r| 1 + (g + r) % args.nodes).collect()
    };
    let all = (0..ranges as u64).map(|i| {
        let start = match i {
            0 => Vec::new(),
            i => format!("user/{:08}", i * step).into_bytes(),
        };
        (start, i + 1, members(i))
    });
    ShardMap::from_ranges(1, all).expect("a valid map")
}

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed())
}

fn measure_map(args: &Args, ranges: usize) -> ShardMap {
    let map = map(args, ranges);
    let (bytes, encode) = time(|| map.encode());
    let (decoded, decode) = time(|| ShardMap::decode(&bytes).expect("decodes"));
    assert_eq!(decoded, map);
    let keys: Vec<Vec<u8>> = (0..100_000u64)
        .map(|i| format!("user/{:08}", i * 997 % 100_000_000).into_bytes())
        .collect();
    let (routed, route) = time(|| keys.iter().map(|k| map.group_of(k)).sum::<u64>());
    let (_, lookup) =
        time(|| (1..=1000u64).filter(|&g| map.group(g * ranges as u64 / 1000).is_some()).count());
    println!(
        "{ranges:>7} ranges: encoded {} bytes ({:.1} B a range); encode {:.2} ms, decode {:.2} ms; \
         route a key {:.0} ns; find a group by id {:.1} us (checksum {})",
        bytes.len(),
        bytes.len() as f64 / ranges as f64,
        encode.as_secs_f64() * 1e3,
        decode.as_secs_f64() * 1e3,
        route.as_secs_f64() * 1e9 / keys.len() as f64,
        lookup.as_secs_f64() * 1e6 / 1000.0,
        routed % 1000,
    );
    map
}

/// A metadata group on `args.voters` nodes of this process, given `map`; returns the commit
/// rate of `args.changes` member changes.
async fn commit_rate(args: &Args, map: &ShardMap) -> BoxResult<f64> {
    let dir = tempfile::tempdir()?;
    let config = Config {
        heartbeat_interval: 100,
        election_timeout_min: 500,
        election_timeout_max: 1000,
        ..Default::default()
    };
    let config = Arc::new(config.validate()?);
    let all = Rafts::default();
    let mut stores = Vec::new();
    let members: BTreeMap<NodeId, BasicNode> =
        (1..=args.voters).map(|n| (n, BasicNode::new(format!("node-{n}")))).collect();
    for n in 1..=args.voters {
        let store = NodeStore::open(dir.path().join(format!("node-{n}")), Default::default())?;
        let (log, sm) = store.group(META_GROUP)?;
        let network = direct::GroupNetwork { group: META_GROUP, rafts: all.clone() };
        let raft = Raft::new(n, config.clone(), network, log, sm).await?;
        all.0.write().unwrap_or_else(|p| p.into_inner()).insert((META_GROUP, n), raft);
        stores.push(store);
    }
    let leader = direct::Lookup::raft(&all, META_GROUP, 1).expect("node 1");
    leader.initialize(members).await?;
    leader
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.current_leader == Some(1), "leads")
        .await?;
    let (init, init_time) = {
        let started = Instant::now();
        let resp = leader.client_write(Command::Shard(ShardCommand::InitMap(map.encode()))).await?;
        (resp.data, started.elapsed())
    };
    if init != Outcome::Applied {
        return Err(format!("InitMap: {init:?}").into());
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..args.clients {
        let (leader, ranges, nodes) = (leader.clone(), map.len() as u64, args.nodes);
        let count = args.changes / args.clients;
        tasks.push(tokio::spawn(async move {
            for i in 0..count as u64 {
                // Group g's replicas move one node along, as a rebalance would.
                let g = 1 + (client as u64 * 7919 + i * 104_729) % ranges;
                let members = vec![1 + (g + 1) % nodes, 1 + (g + 2) % nodes, 1 + (g + 3) % nodes];
                let change = ShardCommand::RecordMembers { group: g, members };
                let resp = leader.client_write(Command::Shard(change)).await?;
                if resp.data != Outcome::Applied {
                    return Err(format!("RecordMembers: {:?}", resp.data).into());
                }
            }
            BoxResult::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed();
    let done = args.changes / args.clients * args.clients;
    let rate = done as f64 / elapsed.as_secs_f64();
    println!(
        "{:>7} ranges, {} voter(s): InitMap took {:.0} ms; {done} member changes by {} \
         client(s) in {:.2} s: {rate:.1} a second",
        map.len(),
        args.voters,
        init_time.as_secs_f64() * 1e3,
        args.clients,
        elapsed.as_secs_f64(),
    );
    for n in 1..=args.voters {
        if let Some(raft) = direct::Lookup::raft(&all, META_GROUP, n) {
            raft.shutdown().await?;
        }
    }
    all.0.write().unwrap_or_else(|p| p.into_inner()).clear();
    for store in stores {
        store.close()?;
    }
    Ok(rate)
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    let args = parse_args().map_err(|e| format!("shard_scale: {e}"))?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{} CPUs, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    for &ranges in &args.ranges {
        let map = measure_map(&args, ranges);
        if args.changes > 0 {
            commit_rate(&args, &map).await?;
        }
    }
    Ok(())
}
