//! The `kv_node` service over TLS, with a CA and node certificates made here: a cluster forms
//! and replicates with its raft RPCs over HTTPS, `bloomkv_raft::Client` writes and reads
//! trusting the CA, a plain HTTP request or a client that does not trust the CA gets nowhere,
//! the token is still required over TLS, and a connection that never completes its handshake
//! is closed after the header timeout.

#[path = "../examples/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::path::Path;
use std::time::Duration;

use bloomkv_raft::{Client, ClientError, NodeId};
use common::{Node, NodeConfig, TlsConfig};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use reqwest::StatusCode;

/// Every wait for the cluster gives up after this long (it normally takes well under a second).
const PATIENCE: Option<Duration> = Some(Duration::from_secs(60));

/// A certificate authority, made for the test.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { pem, issuer: Issuer::new(params, key) }
    }

    /// A node's TLS setting: a certificate of its own for 127.0.0.1 and localhost, signed by
    /// this CA, which it trusts in its peers.
    fn node(&self) -> TlsConfig {
        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, "kv_node");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        TlsConfig {
            cert_chain: cert.pem().into_bytes(),
            key: key.serialize_pem().into_bytes(),
            ca: self.pem.clone().into_bytes(),
        }
    }
}

/// A node serving TLS with a certificate from `ca`, as `config` says otherwise.
async fn start(id: NodeId, dirs: &Path, ca: &Ca, config: NodeConfig) -> Node {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dir = dirs.join(format!("node-{id}"));
    let config = NodeConfig { tls: Some(ca.node()), ..config };
    Node::start_configured(id, listener, &dir, config).await.unwrap()
}

fn url(node: &Node, path: &str) -> String {
    format!("https://{}{path}", node.app.addr)
}

/// An HTTP client trusting `ca` (a node's own client for its peers).
fn https(ca: &Ca) -> reqwest::Client {
    ca.node().peer_client().unwrap()
}

/// Node 1 leads a cluster of `nodes`, every node a voter, joined as an operator would: each
/// learner catches up, and the change of voters commits, only by raft RPCs between the nodes.
async fn form_cluster(http: &reqwest::Client, nodes: &[Node], token: Option<&str>) {
    let post = |node: &Node, path: &str| {
        let request = http.post(url(node, path));
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    };
    let leader = &nodes[0];
    let init = post(leader, "/cluster/init").send().await.unwrap();
    assert_eq!(init.status(), StatusCode::OK, "{}", init.text().await.unwrap());
    leader.app.raft.wait(PATIENCE).current_leader(1, "node 1 leads").await.unwrap();
    for node in &nodes[1..] {
        let learner = (node.app.id, node.app.addr.clone());
        let added = post(leader, "/cluster/learner").json(&learner).send().await.unwrap();
        assert_eq!(added.status(), StatusCode::OK, "{}", added.text().await.unwrap());
    }
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.app.id).collect();
    let changed = post(leader, "/cluster/members").json(&ids).send().await.unwrap();
    assert_eq!(changed.status(), StatusCode::OK, "{}", changed.text().await.unwrap());
}

/// Waits until `node` has applied everything `leader` has.
async fn caught_up(node: &Node, leader: &Node) {
    let applied = leader.app.raft.metrics().borrow().last_applied.map(|l| l.index);
    node.app.raft.wait(PATIENCE).applied_index_at_least(applied, "caught up").await.unwrap();
}

fn addrs(nodes: &[Node]) -> Vec<String> {
    nodes.iter().map(|n| n.app.addr.clone()).collect()
}

/// A client that gives up within a couple of seconds.
fn impatient(client: Client) -> Client {
    client.with_timeouts(Duration::from_secs(2), Duration::from_secs(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_replicates_over_tls_and_answers_only_clients_that_trust_its_ca() {
    let dirs = tempfile::tempdir().unwrap();
    let ca = Ca::new("test cluster CA");
    let config = NodeConfig { admin_timeout: Duration::from_secs(15), ..NodeConfig::default() };
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(start(id, dirs.path(), &ca, config.clone()).await);
    }
    let http = https(&ca);
    form_cluster(&http, &nodes, None).await;
    let leader = &nodes[0];

    // Given only a follower: its 421 names the leader, which the client reaches over https
    // too.
    let follower = &nodes[1].app.addr;
    let client = Client::new([follower]).unwrap().with_tls_ca(ca.pem.as_bytes()).unwrap();
    client.put("greeting", "hello").await.unwrap();
    assert_eq!(client.get("greeting").await.unwrap().as_deref(), Some(&b"hello"[..]));
    for node in &nodes {
        caught_up(node, leader).await;
        assert_eq!(node.app.kv.get(b"greeting").unwrap().as_deref(), Some(&b"hello"[..]));
    }
    let status: serde_json::Value =
        http.get(url(leader, "/cluster/status")).send().await.unwrap().json().await.unwrap();
    assert_eq!(status["leader"], 1, "{status}");

    // Plain HTTP to a TLS node gets no HTTP answer at all: the node takes it for a failed
    // handshake and closes the connection.
    for node in &nodes {
        let plain = reqwest::Client::new()
            .get(format!("http://{}/health", node.app.addr))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match plain {
            Err(e) => assert!(!e.is_timeout(), "closed at once, not left hanging: {e}"),
            Ok(answer) => panic!("plain HTTP answered {}", answer.status()),
        }
    }
    let plain_client = impatient(Client::new(addrs(&nodes)).unwrap());
    let err = plain_client.get("greeting").await.unwrap_err();
    assert!(matches!(err, ClientError::GaveUp { .. }), "{err}");

    // A client trusting another CA fails the handshake with every node, and says why.
    let stranger = Ca::new("another CA");
    let distrustful = impatient(
        Client::new(addrs(&nodes)).unwrap().with_tls_ca(stranger.pem.as_bytes()).unwrap(),
    );
    match distrustful.put("greeting", "intruder").await {
        Err(ClientError::GaveUp { last, .. }) => {
            assert!(last.contains("certificate"), "the certificate is named: {last}");
        }
        other => panic!("a client that does not trust the CA: {other:?}"),
    }
    let err = https(&stranger).get(url(leader, "/health")).send().await.unwrap_err();
    assert!(err.is_connect(), "{err:?}");
    assert_eq!(client.get("greeting").await.unwrap().as_deref(), Some(&b"hello"[..]));

    // A CA bundle with no certificate in it is refused when the client is made.
    let empty = Client::new(addrs(&nodes)).unwrap().with_tls_ca(b"no PEM here");
    assert!(matches!(empty, Err(ClientError::Config(_))), "{empty:?}");
    for node in nodes {
        node.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_request_without_the_token_is_refused() {
    let dirs = tempfile::tempdir().unwrap();
    let ca = Ca::new("test cluster CA");
    let token = "s3cret-over-tls";
    let config = NodeConfig {
        admin_timeout: Duration::from_secs(15),
        token: Some(token.into()),
        token_for_clients: true,
        ..NodeConfig::default()
    };
    // Two nodes: the follower's raft RPCs carry the token over TLS.
    let nodes = [
        start(1, dirs.path(), &ca, config.clone()).await,
        start(2, dirs.path(), &ca, config.clone()).await,
    ];
    let http = https(&ca);
    let refused = http.post(url(&nodes[0], "/cluster/init")).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    form_cluster(&http, &nodes, Some(token)).await;

    let without = Client::new(addrs(&nodes)).unwrap().with_tls_ca(ca.pem.as_bytes()).unwrap();
    match without.put("k", "v").await {
        Err(ClientError::Refused { status, .. }) => assert_eq!(status, 401),
        other => panic!("a write without the token: {other:?}"),
    }
    let read = http.get(url(&nodes[0], "/kv/k")).send().await.unwrap();
    assert_eq!(read.status(), StatusCode::UNAUTHORIZED);

    let with = Client::new(addrs(&nodes))
        .unwrap()
        .with_tls_ca(ca.pem.as_bytes())
        .unwrap()
        .with_token(token);
    with.put("k", "v").await.unwrap();
    assert_eq!(with.get("k").await.unwrap().as_deref(), Some(&b"v"[..]));
    caught_up(&nodes[1], &nodes[0]).await;
    assert_eq!(nodes[1].app.kv.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    for node in nodes {
        node.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_completes_its_handshake_is_closed() {
    use tokio::io::AsyncReadExt;

    let dirs = tempfile::tempdir().unwrap();
    let ca = Ca::new("test cluster CA");
    // One connection at a time: while the silent one holds it, nobody else is served.
    let mut config = NodeConfig::default();
    config.limits.connections = 1;
    config.limits.header_timeout = Duration::from_millis(500);
    let node = start(1, dirs.path(), &ca, config).await;

    let mut silent = tokio::net::TcpStream::connect(&node.app.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let health = https(&ca).get(url(&node, "/health")).timeout(Duration::from_secs(10)).send();
    let health = health.await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf)).await;
    // Closed by the node (an end of stream, or a reset): not still open.
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    node.stop().await.unwrap();
}
