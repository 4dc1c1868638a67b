//! What a raft group costs on one node: memory, threads and idle CPU at N groups, and the write
//! throughput of 8 groups against 1.
//!
//! ```text
//! cargo run --release -p bloomkv-raft --example groups_cost -- [--groups 1,64,1024] \
//!     [--idle-secs 10] [--writes 4000] [--clients 16] [--value-bytes 100] [--memtable-bytes B]
//!     [--heartbeat-ms 100] [--voters 1] [--quiet 1]
//! ```
//!
//! For each N in `--groups`, in a new temporary directory: opens a [`NodeStore`], starts N
//! single-voter `Raft`s on it (one per group, each initialised and leading), and reports the
//! process's resident memory (`VmRSS`) before and after, its threads, and the CPU time it
//! spends over `--idle-secs` of wall-clock with no writes. With `--voters 3`, three nodes
//! in this process (three databases), every group a voter on each, talking by direct calls
//! (each RPC through its JSON encoding); the CPU is the three nodes'. With `--quiet 1` (the
//! default) each node runs [`Quiet`] as `ShardNode` does, and the idle window starts once
//! every group is quiet (or after 30 s); `--quiet 0` leaves every group ticking. Then, on a
//! new store with 8 groups,
//! `--writes` puts by `--clients` concurrent callers of `client_write`: all to one group, then
//! spread round-robin over the 8, and the ratio of their throughputs. Every put is
//! acknowledged once its log entry is fsynced, so the groups' appends share the WAL's fsyncs.
//!
//! The raft timing is the examples' (`kv_node`'s): heartbeat 100 ms, elections 300–600 ms.
//! Count the fsyncs by running the binary under `strace -f -c -e trace=fsync,fdatasync`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bloomkv_raft::{Command, GroupId, KvReader, NodeId, NodeStore, Quiet, Raft};
use openraft::{BasicNode, Config};

type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What to measure (the flags above); `tests/groups_cost.rs` runs it small.
pub struct Args {
    pub groups: Vec<usize>,
    pub idle_secs: u64,
    pub writes: usize,
    pub clients: usize,
    pub value_bytes: usize,
    /// The database's memtable size (every keyspace's), 0 for bloomkv's default.
    pub memtable_bytes: usize,
    /// openraft's heartbeat interval; elections time out after 5–10 of them, as the examples'.
    pub heartbeat_ms: u64,
    /// Voters a group has, each on a node of its own (1 or 3).
    pub voters: usize,
    /// Whether idle groups stop ticking ([`Quiet`]).
    pub quiet: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        groups: vec![1, 64, 1024],
        idle_secs: 10,
        writes: 4000,
        clients: 16,
        value_bytes: 100,
        memtable_bytes: 0,
        heartbeat_ms: 100,
        voters: 1,
        quiet: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--groups" => args.groups = value.split(',').map(number).collect::<Result<_, _>>()?,
            "--idle-secs" => args.idle_secs = number(&value)? as u64,
            "--writes" => args.writes = number(&value)?,
            "--clients" => args.clients = number(&value)?.max(1),
            "--value-bytes" => args.value_bytes = number(&value)?,
            "--memtable-bytes" => args.memtable_bytes = number(&value)?,
            "--heartbeat-ms" => args.heartbeat_ms = number(&value)?.max(1) as u64,
            "--voters" => args.voters = number(&value)?.clamp(1, 3),
            "--quiet" => args.quiet = number(&value)? != 0,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

#[path = "../tests/direct/mod.rs"]
mod direct;

/// Every raft of the process, by group and node: what the direct network delivers to.
#[derive(Clone, Default)]
struct Rafts(Arc<RwLock<HashMap<(GroupId, NodeId), Raft>>>);

impl direct::Lookup for Rafts {
    fn raft(&self, group: GroupId, node: NodeId) -> Option<Raft> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).get(&(group, node)).cloned()
    }
}

/// One node of the process: its database, its groups and its [`Quiet`].
struct Node {
    store: NodeStore,
    rafts: BTreeMap<GroupId, Raft>,
    quiet: Arc<Quiet>,
}

/// The examples' raft timing (see `common::config`) at the default 100 ms: what a node runs
/// each of its groups with.
fn config(heartbeat_ms: u64) -> Arc<Config> {
    let config = Config {
        heartbeat_interval: heartbeat_ms,
        election_timeout_min: 3 * heartbeat_ms,
        election_timeout_max: 6 * heartbeat_ms,
        ..Default::default()
    };
    Arc::new(config.validate().expect("valid raft config"))
}

/// A field of /proc/self/status, in its first number (kB for `VmRSS`).
fn status(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The CPU time (user + system, every thread) this process has used.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64)
}

/// The kernel's clock ticks per second, as `getconf CLK_TCK` says (100 on Linux if it cannot).
fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100)
}

/// Starts groups `ids` on `args.voters` nodes, one database each (node 1's in `dir`, the
/// others' in subdirectories), each group a voter on every node, and waits until node 1 leads
/// each. Returns the nodes, a reader of each group on node 1, and the resident memory (kB)
/// once every group's store was open and before any raft started: the database's part of a
/// group's cost.
async fn start_groups(
    args: &Args,
    dir: &Path,
    ids: impl Iterator<Item = GroupId> + Clone,
) -> BoxResult<(Vec<Node>, BTreeMap<GroupId, KvReader>, u64)> {
    let config = config(args.heartbeat_ms);
    let ids: Vec<GroupId> = ids.collect();
    let node_ids: Vec<NodeId> = (1..=args.voters as NodeId).collect();
    let members: BTreeMap<NodeId, BasicNode> =
        node_ids.iter().map(|&n| (n, BasicNode::new(format!("node-{n}")))).collect();
    let mut stores = Vec::new();
    for &n in &node_ids {
        let node_dir = match n {
            1 => dir.to_path_buf(),
            n => dir.join(format!("node-{n}")),
        };
        let store = NodeStore::open(node_dir, options(args))?;
        let groups: Vec<_> =
            ids.iter().map(|&g| Ok((g, store.group(g)?))).collect::<BoxResult<_>>()?;
        stores.push((n, store, groups));
    }
    let rss_stores = status("VmRSS");
    let readers = stores[0].2.iter().map(|(id, (_, sm))| (*id, sm.reader())).collect();
    let all = Rafts::default();
    let mut nodes = Vec::new();
    for (n, store, groups) in stores {
        let mut rafts = BTreeMap::new();
        for (id, (log, sm)) in groups {
            let network = direct::GroupNetwork { group: id, rafts: all.clone() };
            let raft = Raft::new(n, config.clone(), network, log, sm).await?;
            all.0.write().unwrap_or_else(|p| p.into_inner()).insert((id, n), raft.clone());
            rafts.insert(id, raft);
        }
        let quiet = Arc::new(Quiet::new(n, config.election_timeout_min));
        nodes.push(Node { store, rafts, quiet });
    }
    for raft in nodes[0].rafts.values() {
        raft.initialize(members.clone()).await?;
    }
    for raft in nodes[0].rafts.values() {
        let patience = Some(Duration::from_secs(60));
        raft.wait(patience).metrics(|m| m.current_leader == Some(1), "leads").await?;
    }
    if args.quiet {
        let quiets: Vec<Arc<Quiet>> = nodes.iter().map(|n| n.quiet.clone()).collect();
        for node in &nodes {
            let rafts = node.rafts.clone();
            let (quiets, all, period) = (quiets.clone(), all.clone(), config.heartbeat_interval);
            let me = node.quiet.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(Duration::from_millis(period));
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    for (leader, ping) in me.round(rafts.iter().map(|(g, r)| (*g, r))) {
                        // The leader's node answers in place: a direct call, as the rafts'.
                        let them = &quiets[leader as usize - 1];
                        let answer = them.answer(&ping, |g| direct::Lookup::raft(&all, g, leader));
                        me.vouched(leader, &ping, Some(&answer));
                    }
                }
            });
        }
    }
    Ok((nodes, readers, rss_stores))
}

async fn stop(nodes: Vec<Node>) -> BoxResult<()> {
    for node in nodes {
        for raft in node.rafts.values() {
            raft.shutdown().await?;
        }
        drop(node.rafts);
        node.store.close()?;
    }
    Ok(())
}

/// Waits until every group on every node is quiet, at most 30 s; returns how long it took,
/// `None` if they were not all quiet by then.
async fn settle(nodes: &[Node]) -> Option<Duration> {
    let started = Instant::now();
    for node in nodes {
        let mut stats = node.quiet.watch();
        let all =
            |s: &bloomkv_raft::QuietStats| s.groups == node.rafts.len() && s.quiet == s.groups;
        let left = Duration::from_secs(30).saturating_sub(started.elapsed());
        tokio::time::timeout(left, stats.wait_for(all)).await.ok()?.ok()?;
    }
    Some(started.elapsed())
}

fn options(args: &Args) -> bloomkv::Options {
    match args.memtable_bytes {
        0 => bloomkv::Options::default(),
        bytes => bloomkv::Options::default().memtable_bytes(bytes),
    }
}

pub async fn idle_cost(groups: usize, args: &Args) -> BoxResult<()> {
    let idle = Duration::from_secs(args.idle_secs);
    let dir = tempfile::tempdir()?;
    let (rss_before, threads_before) = (status("VmRSS"), status("Threads"));
    let node = NodeStore::open(dir.path(), options(args))?;
    let (rss_open, threads_open) = (status("VmRSS"), status("Threads"));
    // Opened above only for the database's own cost; `start_groups` opens it again.
    node.close()?;
    drop(node);
    let started = Instant::now();
    let (nodes, readers, rss_stores) =
        start_groups(args, dir.path(), 1..=groups as GroupId).await?;
    let start_time = started.elapsed();
    let settled = match args.quiet {
        true => match settle(&nodes).await {
            Some(t) => format!("every group quiet {:.2} s after", t.as_secs_f64()),
            None => "NOT every group quiet 30 s after".into(),
        },
        false => "quiet off".into(),
    };
    let (rss_after, threads_after) = (status("VmRSS"), status("Threads"));
    let (cpu_before, wall) = (cpu_time(), Instant::now());
    // The measurement window itself: nothing is written while it runs.
    tokio::time::sleep(idle).await;
    let (cpu, wall) = (cpu_time() - cpu_before, wall.elapsed());
    let rss_idle = status("VmRSS");
    let quiet: usize = nodes.iter().map(|n| n.quiet.stats().quiet).sum();
    // What the groups hold in the database's memory: their memtables (every keyspace's).
    let memtables = readers.values().next().map_or(0, |r| r.stats().memtable_bytes);
    let replicas = groups * args.voters;
    let per_group = |from: u64, to: u64| to.saturating_sub(from) as f64 / replicas as f64;
    println!(
        "{groups:>5} groups x {} voters: started in {:.2} s, {settled}; RSS {rss_before} kB, \
         {rss_open} kB with a database open, {rss_stores} kB with the groups' stores ({:.1} \
         KiB/replica), {rss_after} kB with their rafts ({:.1} KiB/replica; {:.1} KiB/replica in \
         all), {rss_idle} kB after idling; memtables {} KiB; threads {threads_before}, \
         {threads_open}, {threads_after}; idle CPU {:.2}% of one core ({:.3} s over {:.1} s), \
         {quiet} of {replicas} replicas quiet at its end",
        args.voters,
        start_time.as_secs_f64(),
        per_group(rss_open, rss_stores),
        per_group(rss_stores, rss_after),
        per_group(rss_open, rss_after),
        memtables >> 10,
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        cpu.as_secs_f64(),
        wall.as_secs_f64(),
    );
    stop(nodes).await
}

/// `writes` puts by `clients` concurrent callers, client `c` writing to group
/// `1 + c % groups`; returns puts per second.
pub async fn throughput(groups: usize, args: &Args) -> BoxResult<f64> {
    let dir = tempfile::tempdir()?;
    let (nodes, readers, _) = start_groups(args, dir.path(), 1..=8).await?;
    let rafts = &nodes[0].rafts;
    let value = vec![b'v'; args.value_bytes];
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..args.clients {
        let raft = rafts[&(1 + (client % groups) as GroupId)].clone();
        let (value, count) = (value.clone(), args.writes / args.clients);
        tasks.push(tokio::spawn(async move {
            for i in 0..count {
                let key = format!("c{client:03}-{i:08}");
                raft.client_write(Command::put(key, &value)).await?;
            }
            BoxResult::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed();
    let done = args.writes / args.clients * args.clients;
    // Every acknowledged put is in the group it was written to, and there only.
    for (id, reader) in &readers {
        let writers = (0..args.clients).filter(|c| 1 + (c % groups) as GroupId == *id).count();
        let held = reader.scan().count();
        if held != writers * (args.writes / args.clients) {
            return Err(format!("group {id} holds {held} keys after its clients' puts").into());
        }
    }
    let rate = done as f64 / elapsed.as_secs_f64();
    println!(
        "{done} puts of {} B by {} clients over {groups} group(s): {:.2} s, {rate:.0} puts/s",
        args.value_bytes,
        args.clients,
        elapsed.as_secs_f64()
    );
    stop(nodes).await?;
    Ok(rate)
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    let args = parse_args().map_err(|e| format!("groups_cost: {e}"))?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    if args.groups.len() > 1 || args.writes > 0 {
        println!(
            "{} CPUs, load average {}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        );
    }
    if let [groups] = args.groups[..] {
        idle_cost(groups.max(1), &args).await?;
    } else {
        // Each N in a process of its own: memory an earlier N freed would stay resident and be
        // reused, and hide part of the next N's cost.
        for groups in &args.groups {
            let status = std::process::Command::new(std::env::current_exe()?)
                .args(["--groups", &groups.to_string(), "--writes", "0"])
                .args(["--idle-secs", &args.idle_secs.to_string()])
                .args(["--memtable-bytes", &args.memtable_bytes.to_string()])
                .args(["--heartbeat-ms", &args.heartbeat_ms.to_string()])
                .args(["--voters", &args.voters.to_string()])
                .args(["--quiet", &(args.quiet as u8).to_string()])
                .status()?;
            if !status.success() {
                return Err(format!("groups_cost --groups {groups}: {status}").into());
            }
        }
    }
    if args.writes > 0 {
        let one = throughput(1, &args).await?;
        let eight = throughput(8, &args).await?;
        println!("8 groups / 1 group: {:.2}x", eight / one);
    }
    Ok(())
}
