//! A replicated key-value service node: raft over loopback HTTP, bloomkv underneath.
//!
//! ```text
//! kv_node <id> <listen address> <data directory>
//! ```
//!
//! The HTTP API is in `common/mod.rs`; README.md, "Replication", walks through a three-node
//! cluster.

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
