//! What the tests that run `kv_node` processes share: the binary, and waiting on the cluster.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long any wait for the cluster may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub fn kv_node() -> PathBuf {
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/examples/kv_node
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let examples = deps.parent().unwrap().join("examples");
    let node = examples.join(format!("kv_node{}", std::env::consts::EXE_SUFFIX));
    let hint = "`cargo test -p bloomkv-raft` builds the examples, `--test <name>` alone does not";
    assert!(node.is_file(), "{} is missing: {hint}", node.display());
    // A binary older than the library would test old code.
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).unwrap();
    let newest_lib = std::fs::read_dir(deps)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("libbloomkv_raft-") && name.ends_with(".rlib")
        })
        .map(|p| modified(&p))
        .max();
    if let Some(lib) = newest_lib {
        assert!(modified(&node) >= lib, "{} is older than the library: {hint}", node.display());
    }
    node
}

/// Polls `check` every 20 ms until it holds, failing the test after [`PATIENCE`].
pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
