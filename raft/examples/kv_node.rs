//! A replicated key-value service node: raft over loopback HTTP, bloomkv underneath.
//!
//! ```text
//! kv_node <id> <listen address> <data directory> [--log-level LEVEL] [--admin-timeout SECS]
//! ```
//!
//! `--log-level` (off, error, warn, info, debug or trace; default info) sets what openraft and the
//! node log to stderr; `--admin-timeout` (default 30) how long a cluster call waits before
//! answering 504.
//!
//! The HTTP API is in `common/mod.rs`. A three-node cluster:
//!
//! ```text
//! cargo build --release -p bloomkv-raft --example kv_node
//! K=target/release/examples/kv_node
//! for n in 1 2 3; do $K $n 127.0.0.1:2100$n /tmp/kv/$n & done
//! curl -s -X POST 127.0.0.1:21001/cluster/init
//! for n in 2 3; do curl -s --json "[$n, \"127.0.0.1:2100$n\"]" 127.0.0.1:21001/cluster/learner; done
//! curl -s --json '[1, 2, 3]' 127.0.0.1:21001/cluster/members
//! curl -s -X PUT 127.0.0.1:21001/kv/greeting -d hello    # returns once a majority has fsynced it
//! curl -s 127.0.0.1:21001/kv/greeting                    # linearizable read through the leader
//! ```

// Shared with the bench example, which uses parts this node does not.
#[allow(dead_code)]
mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{BoxResult, Node};

#[tokio::main]
async fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: kv_node <id> <listen address> <data directory> \
                 [--log-level LEVEL] [--admin-timeout SECS]";
    let (Some([id, addr, dir]), flags) = (args.get(..3), args.get(3..).unwrap_or_default()) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let mut level = tracing_subscriber::filter::LevelFilter::INFO;
    let mut admin_timeout = common::DEFAULT_ADMIN_TIMEOUT;
    for pair in flags.chunks(2) {
        match pair {
            [flag, value] if flag == "--log-level" => {
                level = value.parse().map_err(|_| format!("--log-level {value:?}: {usage}"))?;
            }
            [flag, value] if flag == "--admin-timeout" => {
                let secs: f64 = value.parse().map_err(|e| format!("--admin-timeout: {e}"))?;
                admin_timeout = Duration::try_from_secs_f64(secs)
                    .map_err(|e| format!("--admin-timeout {value}: {e}"))?;
            }
            _ => {
                eprintln!("{usage}");
                std::process::exit(2);
            }
        }
    }
    tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).init();
    let id: u64 = id.parse().map_err(|e| format!("node id {id:?}: {e}"))?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let node = Node::start_with(id, listener, &PathBuf::from(dir), admin_timeout).await?;
    eprintln!("node {id} serving on http://{} with its store in {dir}", node.app.addr);

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("node {id} stopping");
    node.stop().await
}
