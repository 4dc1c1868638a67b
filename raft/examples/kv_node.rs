//! A replicated key-value service node: raft over HTTP or HTTPS, bloomkv underneath.
//!
//! ```text
//! kv_node <id> <listen address> <data directory> [--log-level LEVEL] [--admin-timeout SECS]
//!         [--token-file PATH] [--token-for-clients] [--write-budget BYTES]
//!         [--request-timeout SECS] [--tls-cert PATH --tls-key PATH --tls-ca PATH]
//!         [--groups N | --shards N [--split-bytes BYTES] [--split-check SECS]]
//! ```
//!
//! `--log-level` (off, error, warn, info, debug or trace; default info) sets what openraft and the
//! node log to stderr; `--admin-timeout` (default 30) how long a cluster call waits before
//! answering 504; `--token-file` a file holding the cluster's shared secret (or set
//! `KV_NODE_TOKEN`), which raft, cluster and metrics requests must then carry, and with
//! `--token-for-clients` key-value requests too; `--write-budget` the bytes of large writes
//! in flight before writers get 429 (default 8 MiB); `--request-timeout` (default 30) how
//! long a key-value request may take before 503. `--tls-cert` (the node's certificate chain,
//! PEM, naming the host or IP address of its listen address), `--tls-key` (its private key,
//! PEM) and `--tls-ca` (the CA certificates, PEM, that peers' certificates chain to), given
//! together, make the node serve only HTTPS and call its peers over HTTPS; every node of the
//! cluster needs them. `--groups N` (1 to 95, default 1) makes the node host N raft groups,
//! each serving one range of the key space (cut by the key's first byte: `common::cut`), all
//! in its one database; every node of the cluster takes the same N, from its first start on.
//! `--shards N` instead runs the node's groups on a `ShardNode`: the shard map is replicated
//! (a metadata group), `/cluster/init` cuts it into N ranges, and groups split and move
//! (`/cluster/split`, `/cluster/move`). `--split-bytes` makes the node split each group it
//! leads whose data (keys and values) is over BYTES, near its middle by bytes, checking every
//! `--split-check` seconds (default 10).
//! raft/README.md is the operator's guide.
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
//!
//! The same over TLS, with `ca.pem` the cluster's CA and `node$n.pem`, `node$n.key` each
//! node's certificate (for 127.0.0.1) and key:
//!
//! ```text
//! for n in 1 2 3; do
//!   $K $n 127.0.0.1:2100$n /tmp/kv/$n --tls-cert node$n.pem --tls-key node$n.key --tls-ca ca.pem &
//! done
//! C="curl -s --cacert ca.pem"
//! $C -X POST https://127.0.0.1:21001/cluster/init
//! for n in 2 3; do $C --json "[$n, \"127.0.0.1:2100$n\"]" https://127.0.0.1:21001/cluster/learner; done
//! $C --json '[1, 2, 3]' https://127.0.0.1:21001/cluster/members
//! $C -X PUT https://127.0.0.1:21001/kv/greeting -d hello
//! ```

// Shared with the bench example, which uses parts this node does not.
#[allow(dead_code)]
mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{BoxResult, Node, NodeConfig, TlsConfig};

#[tokio::main]
async fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: kv_node <id> <listen address> <data directory> [--log-level LEVEL] \
                 [--admin-timeout SECS] [--token-file PATH] [--token-for-clients] \
                 [--write-budget BYTES] [--request-timeout SECS] \
                 [--tls-cert PATH --tls-key PATH --tls-ca PATH] \
                 [--groups N | --shards N [--split-bytes BYTES] [--split-check SECS]]";
    let (Some([id, addr, dir]), flags) = (args.get(..3), args.get(3..).unwrap_or_default()) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let mut level = tracing_subscriber::filter::LevelFilter::INFO;
    let mut config = NodeConfig::default();
    let secs = |flag: &str, value: &str| -> BoxResult<Duration> {
        let secs: f64 = value.parse().map_err(|e| format!("{flag} {value}: {e}"))?;
        Ok(Duration::try_from_secs_f64(secs).map_err(|e| format!("{flag} {value}: {e}"))?)
    };
    let (mut tls_cert, mut tls_key, mut tls_ca) = (None, None, None);
    let mut flags = flags.iter();
    while let Some(flag) = flags.next() {
        if flag == "--token-for-clients" {
            config.token_for_clients = true;
            continue;
        }
        let Some(value) = flags.next() else {
            eprintln!("{flag} needs a value\n{usage}");
            std::process::exit(2);
        };
        match flag.as_str() {
            "--log-level" => {
                level = value.parse().map_err(|_| format!("--log-level {value:?}: {usage}"))?;
            }
            "--admin-timeout" => config.admin_timeout = secs(flag, value)?,
            "--request-timeout" => config.limits.request_timeout = secs(flag, value)?,
            "--token-file" => {
                let text = std::fs::read_to_string(value)
                    .map_err(|e| format!("--token-file {value}: {e}"))?;
                config.token = Some(text.trim().to_string());
            }
            "--groups" => {
                config.groups = value.parse().map_err(|e| format!("--groups {value}: {e}"))?;
            }
            "--shards" => {
                config.shards = value.parse().map_err(|e| format!("--shards {value}: {e}"))?;
            }
            "--split-bytes" => {
                let bytes: u64 =
                    value.parse().map_err(|e| format!("--split-bytes {value}: {e}"))?;
                if bytes == 0 {
                    return Err("--split-bytes 0: expected at least 1".into());
                }
                config.split_bytes = Some(bytes);
            }
            "--split-check" => config.split_check = secs(flag, value)?,
            "--tls-cert" => tls_cert = Some(value),
            "--tls-key" => tls_key = Some(value),
            "--tls-ca" => tls_ca = Some(value),
            "--write-budget" => {
                let bytes: usize =
                    value.parse().map_err(|e| format!("--write-budget {value}: {e}"))?;
                config.limits.large_write_bytes = bytes;
            }
            _ => {
                eprintln!("{usage}");
                std::process::exit(2);
            }
        }
    }
    // The token may come from the environment instead of a file (never from the command line,
    // which every user of the machine can read).
    if config.token.is_none() {
        config.token = std::env::var(TOKEN_VAR).ok().map(|t| t.trim().to_string());
    }
    if config.token.as_deref() == Some("") {
        return Err("the token is empty".into());
    }
    if config.token_for_clients && config.token.is_none() {
        return Err("--token-for-clients needs a token (--token-file or $KV_NODE_TOKEN)".into());
    }
    config.tls = match (tls_cert, tls_key, tls_ca) {
        (None, None, None) => None,
        (Some(cert), Some(key), Some(ca)) => {
            let read = |flag: &str, path: &str| {
                std::fs::read(path).map_err(|e| format!("{flag} {path}: {e}"))
            };
            Some(TlsConfig {
                cert_chain: read("--tls-cert", cert)?,
                key: read("--tls-key", key)?,
                ca: read("--tls-ca", ca)?,
            })
        }
        // A node that serves TLS calls its peers over TLS too: it needs the CA as much as its
        // own certificate and key.
        _ => {
            eprintln!("--tls-cert, --tls-key and --tls-ca go together\n{usage}");
            std::process::exit(2);
        }
    };
    tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).init();
    let id: u64 = id.parse().map_err(|e| format!("node id {id:?}: {e}"))?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    let node = Node::start_configured(id, listener, &PathBuf::from(dir), config).await?;
    eprintln!("node {id} serving on {scheme}://{} with its store in {dir}", node.app.addr);

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("node {id} stopping");
    node.stop().await
}

/// The environment variable that may hold the cluster's token.
const TOKEN_VAR: &str = "KV_NODE_TOKEN";
