//! [`Client`]: the `kv_node` HTTP service's client, whose retried writes are applied once.

use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode, Url};

use crate::{CLIENT_HEADER, SEQ_HEADER};

/// Why a call failed.
#[derive(Debug)]
pub enum ClientError {
    /// The service refused the request: nothing was written, and sending it again would fail
    /// the same way. This is any 4xx answer except 421 (not the leader: followed), 429 (busy:
    /// retried) and a read's 404 (absent). Among them: 400, a bad request; 413, a key or value
    /// over its limits; 409, a write whose sequence number the cluster has already applied for
    /// this client id with another write, or that is below the last it applied for it (two
    /// clients sharing an id, or [`Client::with_id`] given too low a `last_seq`).
    Refused {
        /// The HTTP status.
        status: u16,
        /// The service's reason.
        reason: String,
    },
    /// No node answered in time. A write may still be applied (once) later; its id is spent.
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// What the last one met.
        last: String,
    },
    /// The client was given no node addresses, or one that is not a `host:port`, or a CA
    /// bundle ([`Client::with_tls_ca`]) without a usable certificate.
    Config(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Refused { status, reason } => write!(f, "refused ({status}): {reason}"),
            ClientError::GaveUp { attempts, last } => {
                write!(f, "gave up after {attempts} attempts; last: {last}")
            }
            ClientError::Config(why) => write!(f, "client configuration: {why}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A client of a `kv_node` cluster (the crate's `kv_node` example).
///
/// Calls go to the node last known to lead; a node that is not the leader answers with the
/// leader's address, which the client follows. On a connection error, a timeout or an
/// unavailable node it tries the next node after a backoff (doubling from 25 ms to 1 s), until
/// the call's deadline (or a backoff that would reach it); a node too busy to take a write
/// (429) is tried again after the same backoff.
///
/// Each write carries the client's id and the next sequence number, and a retry carries the
/// same ones, so the cluster applies it once however many attempts reach it (see
/// [`crate::Command::Once`]). Writes of one `Client` therefore go one at a time; use several
/// clients for concurrent writes. Reads carry no id.
///
/// Calls go over plain HTTP, or over HTTPS with [`Client::with_tls_ca`].
///
/// ```no_run
/// # async fn demo() -> Result<(), bloomkv_raft::ClientError> {
/// use bloomkv_raft::Client;
///
/// let client = Client::new(["127.0.0.1:21001", "127.0.0.1:21002", "127.0.0.1:21003"])?;
/// client.put("greeting", "hello").await?; // retried until it is acknowledged, applied once
/// assert_eq!(client.get("greeting").await?.as_deref(), Some(&b"hello"[..]));
/// client.delete("greeting").await?;
/// assert_eq!(client.get_stale("greeting").await?, None); // from any node, maybe behind
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Client {
    http: reqwest::Client,
    nodes: Vec<Url>,
    /// The node to try first: the last that answered as leader, or was named as one.
    leader: Mutex<Option<Url>>,
    id: u64,
    /// The last sequence number used; held for a whole write, so writes go one at a time.
    seq: tokio::sync::Mutex<u64>,
    deadline: Duration,
    attempt_timeout: Duration,
    /// Sent as `Authorization: Bearer <token>` with every request.
    token: Option<String>,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(25);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl Client {
    /// A client of the nodes at `nodes` (`host:port`), with a random id, a deadline of 10 s
    /// per call and 3 s per attempt (an election after a leader fails takes about 2 s).
    pub fn new<I, S>(nodes: I) -> Result<Client, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let nodes = nodes
            .into_iter()
            .map(|addr| {
                let addr = addr.as_ref();
                Url::parse(&format!("http://{addr}/"))
                    .map_err(|e| ClientError::Config(format!("{addr:?}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if nodes.is_empty() {
            return Err(ClientError::Config("no node addresses".into()));
        }
        Ok(Client {
            http: reqwest::Client::new(),
            nodes,
            leader: Mutex::new(None),
            id: random_id(),
            seq: tokio::sync::Mutex::new(0),
            deadline: Duration::from_secs(10),
            attempt_timeout: Duration::from_secs(3),
            token: None,
        })
    }

    /// The same client with the given id, for one that resumes where an earlier process with
    /// that id stopped: its writes must number on from `last_seq`, the highest that one used
    /// (with a lower one, a write under a number the cluster has seen is not applied: it is
    /// refused with 409, see [`ClientError::Refused`], or if it is the very write last applied
    /// under that number, answered as that was).
    pub fn with_id(mut self, id: u64, last_seq: u64) -> Client {
        self.id = id;
        self.seq = tokio::sync::Mutex::new(last_seq);
        self
    }

    /// The same client with the given deadline per call, and per attempt within it.
    pub fn with_timeouts(mut self, deadline: Duration, attempt: Duration) -> Client {
        self.deadline = deadline;
        self.attempt_timeout = attempt;
        self
    }

    /// The same client sending `token` with every request (`Authorization: Bearer <token>`),
    /// for nodes that require the cluster's token of clients (`kv_node --token-for-clients`).
    /// A wrong or missing token is refused with 401 ([`ClientError::Refused`]).
    pub fn with_token(mut self, token: impl Into<String>) -> Client {
        self.token = Some(token.into());
        self
    }

    /// The same client over HTTPS, trusting the CA certificates in `ca_pem` (PEM, one or more)
    /// and no others, for nodes that serve TLS (`kv_node --tls-cert .. --tls-key ..
    /// --tls-ca ..`). A node whose certificate does not chain to one of them, or does not name
    /// the host or IP address the client reaches it by, fails the handshake; the client then
    /// tries the other nodes as it does when one is down, and gives up with the certificate
    /// error in [`ClientError::GaveUp`].
    ///
    /// TLS is rustls with the crypto provider the process has installed as its default, else
    /// ring; this installs none.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use bloomkv_raft::Client;
    ///
    /// let ca = std::fs::read("ca.pem")?;
    /// let client = Client::new(["10.0.0.1:21001", "10.0.0.2:21001"])?.with_tls_ca(&ca)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_tls_ca(mut self, ca_pem: &[u8]) -> Result<Client, ClientError> {
        let config = |why: String| ClientError::Config(format!("CA bundle: {why}"));
        let certs =
            reqwest::Certificate::from_pem_bundle(ca_pem).map_err(|e| config(with_causes(&e)))?;
        if certs.is_empty() {
            return Err(config("no certificate in the PEM".into()));
        }
        let mut http = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .https_only(true);
        for cert in certs {
            http = http.add_root_certificate(cert);
        }
        self.http = http.build().map_err(|e| config(with_causes(&e)))?;
        for node in &mut self.nodes {
            node.set_scheme("https").expect("http and https are interchangeable");
        }
        self.set_leader(None);
        Ok(self)
    }

    /// The client's id, sent with every write.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Sets `key` to `value`, once committed by a majority.
    pub async fn put(&self, key: &str, value: impl Into<Vec<u8>>) -> Result<(), ClientError> {
        self.write(Method::PUT, key, value.into()).await
    }

    /// Removes `key` (nothing happens if it is absent), once committed by a majority.
    pub async fn delete(&self, key: &str) -> Result<(), ClientError> {
        self.write(Method::DELETE, key, Vec::new()).await
    }

    /// The value of `key` through the leader, linearizable: it reflects every write
    /// acknowledged before the call.
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ClientError> {
        let call = Call { method: Method::GET, key, body: Vec::new(), once: None, stale: false };
        self.call(&call).await
    }

    /// The value of `key` as the first node that answers has applied it: possibly behind
    /// the leader, never ahead of what a majority holds.
    pub async fn get_stale(&self, key: &str) -> Result<Option<Vec<u8>>, ClientError> {
        let call = Call { method: Method::GET, key, body: Vec::new(), once: None, stale: true };
        self.call(&call).await
    }

    async fn write(&self, method: Method, key: &str, body: Vec<u8>) -> Result<(), ClientError> {
        let mut seq = self.seq.lock().await;
        // Spent whatever happens: a write given up on may still be applied later, and a new
        // write under its number would then be refused as a reuse of it.
        *seq += 1;
        let call = Call { method, key, body, once: Some(*seq), stale: false };
        self.call(&call).await.map(|_| ())
    }

    async fn call(&self, call: &Call<'_>) -> Result<Option<Vec<u8>>, ClientError> {
        let deadline = Instant::now() + self.deadline;
        let mut backoff = FIRST_BACKOFF;
        let mut next = 0usize;
        let mut attempts = 0u32;
        let mut redirected = false;
        loop {
            let hinted = self.leader.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let node = hinted.unwrap_or_else(|| {
                next += 1;
                self.nodes[(next - 1) % self.nodes.len()].clone()
            });
            attempts += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            let last = match self.attempt(&node, call, left.min(self.attempt_timeout)).await {
                Answer::Done(result) => {
                    // Only the leader answers these: the next call starts there.
                    if result.is_ok() && !call.stale {
                        self.set_leader(Some(node));
                    }
                    return result;
                }
                Answer::Redirect(leader) => {
                    self.set_leader(Some(leader));
                    // The first redirect is followed at once; nodes that keep sending the
                    // client round (their views of the leader lag an election) are waited for.
                    if !std::mem::replace(&mut redirected, true) {
                        continue;
                    }
                    format!("{node}: redirected again")
                }
                Answer::Retry(why) => {
                    self.set_leader(None);
                    redirected = false;
                    why
                }
                // The node is up and may well lead: the leader stays as known, only later.
                Answer::Busy(why) => {
                    redirected = false;
                    why
                }
            };
            // A backoff that reaches the deadline would leave the next attempt no time: it could
            // only time out, and its timeout would hide what the attempts met (a certificate
            // the client does not trust, say).
            let left = deadline.saturating_duration_since(Instant::now());
            if left <= backoff {
                return Err(ClientError::GaveUp { attempts, last });
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    fn set_leader(&self, leader: Option<Url>) {
        *self.leader.lock().unwrap_or_else(|p| p.into_inner()) = leader;
    }

    async fn attempt(&self, node: &Url, call: &Call<'_>, timeout: Duration) -> Answer {
        let mut url = node.clone();
        url.path_segments_mut().expect("an http URL").clear().push("kv").push(call.key);
        if call.stale {
            url.set_query(Some("consistency=stale"));
        }
        let mut request = self.http.request(call.method.clone(), url).timeout(timeout);
        if let Some(seq) = call.once {
            request = request.header(CLIENT_HEADER, self.id).header(SEQ_HEADER, seq);
        }
        if let Some(token) = &self.token {
            request = request.header(reqwest::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if call.method == Method::PUT {
            request = request.body(call.body.clone());
        }
        let response = match request.send().await {
            Ok(r) => r,
            // reqwest's message alone does not say why a handshake failed.
            Err(e) => return Answer::Retry(format!("{node}: {}", with_causes(&e))),
        };
        let status = response.status();
        let has_retry_after = response.headers().contains_key(reqwest::header::RETRY_AFTER);
        let body = match response.bytes().await {
            Ok(b) => b.to_vec(),
            Err(e) => return Answer::Retry(format!("{node}: reading the answer: {e}")),
        };
        let text = || String::from_utf8_lossy(&body).trim().to_string();
        match status {
            StatusCode::OK if call.method == Method::GET => Answer::Done(Ok(Some(body))),
            StatusCode::OK => Answer::Done(Ok(None)),
            StatusCode::NOT_FOUND if call.method == Method::GET => Answer::Done(Ok(None)),
            StatusCode::MISDIRECTED_REQUEST => match leader_of(&body, node.scheme()) {
                Some(leader) if &leader != node => Answer::Redirect(leader),
                // No leader known (an election is on), or one that says it is not: wait.
                _ => Answer::Retry(format!("{node}: not the leader: {}", text())),
            },
            StatusCode::TOO_MANY_REQUESTS => Answer::Busy(format!("{node}: busy: {}", text())),
            // Up, but at its bound on requests in progress (it says when to come back): the
            // leader is still the leader.
            StatusCode::SERVICE_UNAVAILABLE if has_retry_after => {
                Answer::Busy(format!("{node}: busy: {}", text()))
            }
            s if s.is_server_error() => Answer::Retry(format!("{node}: {s}: {}", text())),
            s => Answer::Done(Err(ClientError::Refused { status: s.as_u16(), reason: text() })),
        }
    }
}

/// One call, as every attempt at it sends it.
struct Call<'a> {
    method: Method,
    key: &'a str,
    body: Vec<u8>,
    /// The write's sequence number; `None` for a read.
    once: Option<u64>,
    stale: bool,
}

enum Answer {
    Done(Result<Option<Vec<u8>>, ClientError>),
    Redirect(Url),
    /// The node may be down or not leading: back off, then try the next.
    Retry(String),
    /// The node has too much in flight: back off, then try it again.
    Busy(String),
}

/// The leader's address in kv_node's `not_leader` answer, `{..., "leader_addr":"host:port"}`
/// (or `null` while no leader is known), reached by `scheme` as the node that answered. Read by
/// hand: the one field is not worth a JSON dependency.
fn leader_of(body: &[u8], scheme: &str) -> Option<Url> {
    const FIELD: &str = "\"leader_addr\":";
    let text = std::str::from_utf8(body).ok()?;
    let rest = text[text.find(FIELD)? + FIELD.len()..].trim_start().strip_prefix('"')?;
    let addr = &rest[..rest.find('"')?];
    Url::parse(&format!("{scheme}://{addr}/")).ok()
}

/// An error and what caused it, on one line.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A random id: std's hasher keys are random per process, mixed with the time and the
/// process id so two clients in one process differ too.
fn random_id() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_is_read_from_a_not_leader_answer() {
        let answer = br#"{"error":"not the leader","leader":2,"leader_addr":"127.0.0.1:21002"}"#;
        assert_eq!(leader_of(answer, "http").unwrap().as_str(), "http://127.0.0.1:21002/");
        assert_eq!(leader_of(answer, "https").unwrap().as_str(), "https://127.0.0.1:21002/");
        let unknown = br#"{"error":"not the leader","leader":null,"leader_addr":null}"#;
        assert!(leader_of(unknown, "http").is_none());
        assert!(leader_of(b"not json", "http").is_none());
        assert!(Client::new(Vec::<String>::new()).is_err());
        assert_ne!(random_id(), random_id());
    }

    /// A node at a loopback port whose write answers are, in turn, `statuses` (the last one
    /// from then on), and the number of requests it has had.
    async fn node(statuses: &[u16]) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let count = std::sync::Arc::new(AtomicUsize::new(0));
        let (seen, statuses) = (count.clone(), statuses.to_vec());
        let answer = move || {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            let status = statuses[n.min(statuses.len() - 1)];
            async move { (axum::http::StatusCode::from_u16(status).unwrap(), format!("{status}\n")) }
        };
        let app = axum::Router::new().fallback(answer);
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr, count)
    }

    #[tokio::test]
    async fn a_busy_node_is_retried_and_a_conflict_or_a_too_large_write_is_refused() {
        use std::sync::atomic::Ordering;
        let client = |addr: &str| {
            Client::new([addr])
                .unwrap()
                .with_timeouts(Duration::from_secs(2), Duration::from_secs(1))
        };
        let (addr, count) = node(&[429, 429, 200]).await;
        client(&addr).put("k", "v").await.unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 3);

        for status in [409, 413] {
            let (addr, count) = node(&[status, 200]).await;
            match client(&addr).put("k", "v").await {
                Err(ClientError::Refused { status: s, reason }) => {
                    assert_eq!((s, reason), (status, status.to_string()));
                }
                other => panic!("{status}: {other:?}"),
            }
            assert_eq!(count.load(Ordering::SeqCst), 1, "{status} is not retried");
        }

        // Busy to the deadline: the call gives up, having backed off between attempts (about
        // 7 in 1 s; without a backoff, hundreds).
        let (addr, count) = node(&[429]).await;
        let slow = Client::new([&addr])
            .unwrap()
            .with_timeouts(Duration::from_secs(1), Duration::from_secs(1));
        let err = slow.put("k", "v").await.unwrap_err();
        assert!(matches!(&err, ClientError::GaveUp { .. }), "{err}");
        let attempts = count.load(Ordering::SeqCst);
        assert!((2..=10).contains(&attempts), "{attempts} attempts in 1 s");
    }
}
