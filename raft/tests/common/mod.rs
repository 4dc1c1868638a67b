//! What the tests that run `kv_node` processes share: the binary, the processes, forming a
//! cluster, waiting on it and reading it back.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

#[cfg(feature = "client")]
pub mod writers;

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

/// One `kv_node` process: its id, address and directory stay across restarts (the membership
/// names the address).
pub struct Proc {
    pub id: u64,
    pub addr: String,
    pub dir: PathBuf,
    /// Where its stderr goes (appended across restarts).
    pub log: PathBuf,
    /// Flags after the three positional arguments.
    pub flags: Vec<String>,
    pub process: Option<std::process::Child>,
}

impl Proc {
    /// A node on a free loopback port with its directory and log in `scratch`; not started.
    pub fn new(id: u64, scratch: &Path) -> Proc {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        Proc {
            id,
            addr: listener.local_addr().unwrap().to_string(),
            dir: scratch.join(format!("node-{id}")),
            log: scratch.join(format!("node-{id}.log")),
            flags: vec!["--log-level".into(), "warn".into()],
            process: None,
        }
    }

    pub fn start(&mut self) {
        use std::process::{Command, Stdio};
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(kv_node())
            .args([&self.id.to_string(), &self.addr, self.dir.to_str().unwrap()])
            .args(&self.flags)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.process = Some(child);
    }

    /// SIGKILL, and waits for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Sends the process signal `name` (`STOP`, `CONT`, ...).
    pub fn signal(&self, name: &str) {
        let pid = self.process.as_ref().unwrap().id().to_string();
        let sent = std::process::Command::new("kill").args([&format!("-{name}"), &pid]).status();
        assert!(sent.unwrap().success(), "kill -{name} {pid}");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Whether its process is running (as far as this test knows: started and not killed).
    pub fn up(&self) -> bool {
        self.process.is_some()
    }

    /// The node's `/cluster/status`, if it answers.
    pub async fn status(&self, http: &reqwest::Client) -> Option<serde_json::Value> {
        http.get(self.url("/cluster/status")).send().await.ok()?.json().await.ok()
    }

    /// The process's peak resident memory so far, in KiB (Linux).
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let pid = self.process.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `nodes`, makes the first a one-node cluster, adds the others as learners and then
/// makes every node a voter, as an operator would.
pub async fn form_cluster(http: &reqwest::Client, nodes: &mut [Proc]) {
    use serde_json::json;
    for node in nodes.iter_mut() {
        node.start();
    }
    for node in nodes.iter() {
        wait_until("a node serves", || async { node.status(http).await.is_some() }).await;
    }
    let first = &nodes[0];
    let init = http.post(first.url("/cluster/init")).send().await.unwrap();
    assert_eq!(init.status(), reqwest::StatusCode::OK);
    wait_until("the first node leads", || async {
        first.status(http).await.is_some_and(|s| s["leader"] == first.id)
    })
    .await;
    for node in &nodes[1..] {
        let body = json!([node.id, node.addr]);
        let added = http.post(first.url("/cluster/learner")).json(&body).send().await.unwrap();
        assert_eq!(added.status(), reqwest::StatusCode::OK, "{}", added.text().await.unwrap());
    }
    let ids: Vec<u64> = nodes.iter().map(|n| n.id).collect();
    let members = http.post(first.url("/cluster/members")).json(&ids).send().await.unwrap();
    assert_eq!(members.status(), reqwest::StatusCode::OK);
}

/// Every key with `prefix` on the node at `base` (`http://host:port`) and its value, read from
/// its applied state page by page, following the cursors.
pub async fn scan_all(
    http: &reqwest::Client,
    base: &str,
    prefix: &str,
) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    let mut all = std::collections::BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{base}/kv?prefix={prefix}&consistency=stale");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page: serde_json::Value = http.get(url).send().await.unwrap().json().await.unwrap();
        for item in page["items"].as_array().unwrap() {
            let field = |text: &str, hex: &str| match item[text].as_str() {
                Some(t) => t.as_bytes().to_vec(),
                None => unhex(item[hex].as_str().unwrap()),
            };
            let key = field("key", "key_hex");
            assert!(all.insert(key, field("value", "value_hex")).is_none(), "a key listed twice");
        }
        match page["more"].as_bool().unwrap() {
            true => cursor = Some(page["cursor"].as_str().unwrap().to_string()),
            false => return all,
        }
    }
}

pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}
