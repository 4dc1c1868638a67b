//! A replicated key-value service node: raft over loopback HTTP, bloomkv underneath.
//!
//! ```text
//! kv_node <id> <listen address> <data directory>
//! ```
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

mod common;

use std::path::PathBuf;

use common::{BoxResult, Node};

#[tokio::main]
async fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [id, addr, dir] = args.as_slice() else {
        eprintln!("usage: kv_node <id> <listen address> <data directory>");
        std::process::exit(2);
    };
    let id: u64 = id.parse().map_err(|e| format!("node id {id:?}: {e}"))?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let node = Node::start(id, listener, &PathBuf::from(dir)).await?;
    eprintln!("node {id} serving on http://{} with its store in {dir}", node.app.addr);

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("node {id} stopping");
    node.stop().await
}
