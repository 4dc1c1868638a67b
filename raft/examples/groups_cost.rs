//! What a raft group costs on one node: memory, threads and idle CPU at N groups, and the write
//! throughput of 8 groups against 1.
//!
//! ```text
//! cargo run --release -p bloomkv-raft --example groups_cost -- [--groups 1,64,1024] \
//!     [--idle-secs 10] [--writes 4000] [--clients 16] [--value-bytes 100] [--memtable-bytes B]
//!     [--heartbeat-ms 100]
//! ```
//!
//! For each N in `--groups`, in a new temporary directory: opens a [`NodeStore`], starts N
//! single-voter `Raft`s on it (one per group, each initialised and leading), and reports the
//! process's resident memory (`VmRSS`) before and after, its threads, and the CPU time it
//! spends over `--idle-secs` of wall-clock with no writes. Then, on a new store with 8 groups,
//! `--writes` puts by `--clients` concurrent callers of `client_write`: all to one group, then
//! spread round-robin over the 8, and the ratio of their throughputs. Every put is
//! acknowledged once its log entry is fsynced, so the groups' appends share the WAL's fsyncs.
//!
//! The raft timing is the examples' (`kv_node`'s): heartbeat 100 ms, elections 500–1000 ms.
//! Count the fsyncs by running the binary under `strace -f -c -e trace=fsync,fdatasync`.
// The errors are openraft's network errors, returned by value as its traits want them.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bloomkv_raft::{Command, GroupId, KvReader, NodeId, NodeStore, Raft, TypeConfig};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
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
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// Every group here has one voter, so no RPC is ever sent; one that were would find no peer.
#[derive(Clone)]
struct NoPeers;

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeers;

    async fn new_client(&mut self, _target: NodeId, _node: &BasicNode) -> NoPeers {
        NoPeers
    }
}

type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

fn unreachable<T, E: std::error::Error>() -> RpcResult<T, E> {
    let none = std::io::Error::new(std::io::ErrorKind::NotConnected, "single-voter group");
    Err(RPCError::Unreachable(Unreachable::new(&none)))
}

impl RaftNetwork<TypeConfig> for NoPeers {
    async fn append_entries(
        &mut self,
        _req: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        unreachable()
    }

    async fn install_snapshot(
        &mut self,
        _req: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        unreachable()
    }

    async fn vote(
        &mut self,
        _req: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        unreachable()
    }
}

/// The examples' raft timing (see `common::config`) at the default 100 ms: what a node runs
/// each of its groups with.
fn config(heartbeat_ms: u64) -> Arc<Config> {
    let config = Config {
        heartbeat_interval: heartbeat_ms,
        election_timeout_min: 5 * heartbeat_ms,
        election_timeout_max: 10 * heartbeat_ms,
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

/// Starts groups `ids` on `node`, one single-voter raft each, and waits until each leads.
/// Returns them, a reader of each, and the resident memory (kB) once every group's
/// store was open and before any raft started: the database's part of a group's cost.
async fn start_groups(
    args: &Args,
    node: &NodeStore,
    ids: impl Iterator<Item = GroupId>,
) -> BoxResult<(BTreeMap<GroupId, Raft>, BTreeMap<GroupId, KvReader>, u64)> {
    let config = config(args.heartbeat_ms);
    let members = BTreeMap::from([(1, BasicNode::new("local"))]);
    let stores: Vec<_> = ids.map(|id| Ok((id, node.group(id)?))).collect::<BoxResult<_>>()?;
    let rss_stores = status("VmRSS");
    let readers = stores.iter().map(|(id, (_, sm))| (*id, sm.reader())).collect();
    let mut rafts = BTreeMap::new();
    for (id, (log, sm)) in stores {
        let raft = Raft::new(1, config.clone(), NoPeers, log, sm).await?;
        raft.initialize(members.clone()).await?;
        rafts.insert(id, raft);
    }
    for raft in rafts.values() {
        let patience = Some(Duration::from_secs(60));
        raft.wait(patience).metrics(|m| m.current_leader == Some(1), "leads").await?;
    }
    Ok((rafts, readers, rss_stores))
}

async fn stop(rafts: BTreeMap<GroupId, Raft>, node: NodeStore) -> BoxResult<()> {
    for raft in rafts.values() {
        raft.shutdown().await?;
    }
    drop(rafts);
    node.close()?;
    Ok(())
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
    let started = Instant::now();
    let (rafts, readers, rss_stores) = start_groups(args, &node, 1..=groups as GroupId).await?;
    let start_time = started.elapsed();
    let (rss_after, threads_after) = (status("VmRSS"), status("Threads"));
    let (cpu_before, wall) = (cpu_time(), Instant::now());
    // The measurement window itself: nothing is written while it runs.
    tokio::time::sleep(idle).await;
    let (cpu, wall) = (cpu_time() - cpu_before, wall.elapsed());
    let rss_idle = status("VmRSS");
    // What the groups hold in the database's memory: their memtables (every keyspace's).
    let memtables = readers.values().next().map_or(0, |r| r.stats().memtable_bytes);
    let per_group = |from: u64, to: u64| to.saturating_sub(from) as f64 / groups as f64;
    println!(
        "{groups:>5} groups: started in {:.2} s; RSS {rss_before} kB, {rss_open} kB with the \
         database open, {rss_stores} kB with the groups' stores ({:.1} KiB/group), {rss_after} kB \
         with their rafts ({:.1} KiB/group; {:.1} KiB/group in all), {rss_idle} kB after idling; memtables {} KiB; threads {threads_before}, {threads_open}, \
         {threads_after}; idle CPU {:.2}% of one core ({:.3} s over {:.1} s)",
        start_time.as_secs_f64(),
        per_group(rss_open, rss_stores),
        per_group(rss_stores, rss_after),
        per_group(rss_open, rss_after),
        memtables >> 10,
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        cpu.as_secs_f64(),
        wall.as_secs_f64(),
    );
    stop(rafts, node).await
}

/// `writes` puts by `clients` concurrent callers, client `c` writing to group
/// `1 + c % groups`; returns puts per second.
pub async fn throughput(groups: usize, args: &Args) -> BoxResult<f64> {
    let dir = tempfile::tempdir()?;
    let node = NodeStore::open(dir.path(), options(args))?;
    let (rafts, readers, _) = start_groups(args, &node, 1..=8).await?;
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
    stop(rafts, node).await?;
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
