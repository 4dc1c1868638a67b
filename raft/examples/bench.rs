//! Replicated put throughput and latency on loopback, against bloomkv's embedded synced put.
//!
//! ```text
//! cargo run --release -p bloomkv-raft --example bench -- [--ops N] [--clients C] [--value-bytes B]
//! ```
//!
//! Starts three `kv_node`s in this process, each on its own loopback port and temporary
//! directory, and writes `N` keys per run (16-byte keys, `B`-byte values, default 100):
//! through the leader's HTTP API by 1 and by `C` concurrent clients (default 16), and by one
//! in-process `Raft::client_write` caller; then the same number of `Db::put`s with
//! `sync(true)` on a plain database, from 1 and from `C` threads. Every put is acknowledged
//! only once durable: by a majority's fsynced logs, or by the local fsynced WAL.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bloomkv::{Db, Options, WriteBatch, WriteOptions};
use bloomkv_raft::{Command, NodeId};
use common::{BoxResult, Node};
use openraft::BasicNode;

struct Args {
    ops: usize,
    clients: usize,
    value_bytes: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { ops: 4000, clients: 16, value_bytes: 100 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let n: usize = value.parse().map_err(|e| format!("{flag} {value}: {e}"))?;
        match flag.as_str() {
            "--ops" => args.ops = n,
            "--clients" => args.clients = n.max(1),
            "--value-bytes" => args.value_bytes = n,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

fn key(run: usize, i: usize) -> String {
    format!("k{run:02}-{i:012}")
}

/// Throughput and latency percentiles of one run.
fn report(what: &str, elapsed: Duration, mut latencies: Vec<Duration>) {
    latencies.sort();
    let pct = |p: f64| {
        let i = ((latencies.len() as f64 * p) as usize).min(latencies.len() - 1);
        latencies[i].as_secs_f64() * 1e3
    };
    println!(
        "{what:<44} {:>6} puts {:>9.0} puts/s   p50 {:>6.2} ms   p99 {:>6.2} ms",
        latencies.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
    );
}

/// `ops` HTTP puts to `url`, split over `clients` concurrent clients: the time they took, and
/// each one's latency.
async fn http_puts(
    url: &str,
    run: usize,
    ops: usize,
    clients: usize,
    value: &[u8],
) -> BoxResult<(Duration, Vec<Duration>)> {
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, url, value) = (client.clone(), url.to_string(), value.to_vec());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for i in (c..ops).step_by(clients) {
                let t = Instant::now();
                let resp = client
                    .put(format!("{url}/kv/{}", key(run, i)))
                    .body(value.clone())
                    .send()
                    .await?;
                if !resp.status().is_success() {
                    return Err(format!("put answered {}", resp.status()).into());
                }
                latencies.push(t.elapsed());
            }
            BoxResult::Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    Ok((started.elapsed(), latencies))
}

/// `ops` synced puts on `db`, split over `threads` threads.
fn embedded_puts(db: &Arc<Db>, run: usize, ops: usize, threads: usize, value: &[u8]) {
    let started = Instant::now();
    let latencies: Vec<Duration> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let sync = WriteOptions::new().sync(true);
                    let mut batch = WriteBatch::new();
                    let mut latencies = Vec::new();
                    for i in (t..ops).step_by(threads) {
                        let started = Instant::now();
                        batch.clear();
                        batch.put(key(run, i), value);
                        db.write(&batch, &sync).expect("put");
                        latencies.push(started.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("worker")).collect()
    });
    let what = format!("embedded Db::put sync(true), {threads} thread(s)");
    report(&what, started.elapsed(), latencies);
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("{e}\nusage: bench [--ops N] [--clients C] [--value-bytes B]");
        std::process::exit(2);
    });
    let value = vec![b'v'; args.value_bytes];
    let dir = tempfile::tempdir()?;

    let mut nodes = BTreeMap::new();
    for id in 1..=3u64 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        nodes.insert(id, Node::start(id, listener, &dir.path().join(format!("node-{id}"))).await?);
    }
    let members: BTreeMap<NodeId, BasicNode> =
        nodes.iter().map(|(&id, n)| (id, BasicNode::new(&n.app.addr))).collect();
    nodes[&1].app.raft.initialize(members).await?;
    let m = nodes[&1]
        .app
        .raft
        .wait(Some(Duration::from_secs(10)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await?;
    let leader = &nodes[&m.current_leader.expect("leader")].app;
    let url = format!("http://{}", leader.addr);
    println!(
        "{} puts per run, {}-byte values, {} concurrent clients; leader is node {}",
        args.ops, args.value_bytes, args.clients, leader.id
    );

    http_puts(&url, 0, args.ops.min(200), 1, &value).await?; // warm-up: connections, caches
    for (run, clients) in [(1, 1), (2, args.clients)] {
        let (elapsed, latencies) = http_puts(&url, run, args.ops, clients, &value).await?;
        report(&format!("raft, 3 nodes, HTTP PUT, {clients} client(s)"), elapsed, latencies);
    }

    let started = Instant::now();
    let mut latencies = Vec::new();
    for i in 0..args.ops {
        let t = Instant::now();
        leader.raft.client_write(Command::put(key(3, i), &value)).await?;
        latencies.push(t.elapsed());
    }
    report("raft, 3 nodes, in-process client_write, 1", started.elapsed(), latencies);

    for (_, node) in nodes {
        node.stop().await?;
    }

    let db = Arc::new(Db::open(dir.path().join("embedded"), Options::default())?);
    embedded_puts(&db, 4, args.ops, 1, &value);
    embedded_puts(&db, 5, args.ops, args.clients, &value);
    db.close()?;
    Ok(())
}
