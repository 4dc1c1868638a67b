//! [`Client`]: the `kv_node` HTTP service's client, whose retried writes are applied once,
//! and which routes each key to the leader of the raft group that serves it.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode, Url};

use crate::shard::ShardMap;
use crate::{
    Command, GroupId, CLIENT_HEADER, SEQ_HEADER, SHARD_GROUP_HEADER, SHARD_VERSION_HEADER,
};

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
/// leader's address, which the client follows. On a server error it tries the next node
/// after a backoff (doubling from 25 ms to 1 s), until the call's deadline (or a backoff that
/// would reach it); a node too busy to take a write (429) is tried again after the same
/// backoff. A node that does not answer (refused, timed out) is passed over for the next
/// within 100 ms, and so is one that is up but knows no leader (an election is on) or whose
/// map has moved the key where the client's fetched map does not yet say (a split the
/// metadata group has still to record): these settle within an election timeout or two, and
/// a backoff grown to a second would add most of a second to the write's wait after.
///
/// Each write carries the client's id and the next sequence number, and a retry carries the
/// same ones, so the cluster applies it once however many attempts reach it (see
/// [`crate::Command::Once`]). Writes of one `Client` therefore go one at a time; use several
/// clients for concurrent writes. Reads carry no id.
///
/// Calls go over plain HTTP, or over HTTPS with [`Client::with_tls_ca`].
///
/// **Shards.** A cluster may split its keys over several raft groups (`kv_node --groups N`).
/// The client fetches the cluster's shard map (`GET /shard/map`) on its first call and keeps
/// it, sends each key to the leader of the group that serves it (remembering a leader per
/// group), and names the map version and group in the request: a node whose map has moved the
/// key answers so, and the client fetches the map again and resends. What is atomic:
///
/// - a single put or delete, and a [`Client::batch`] whose keys are all in one group: applied
///   whole or not at all, once;
/// - a batch whose keys span groups is split into one batch per group, sent one after the
///   other: each part is atomic and applied once, the whole is not. Readers may see one
///   part before the next is applied, and a failed call may leave the parts before the
///   failing one applied (the error says which part failed);
/// - [`Client::scan`] reads each group in turn, in key order: each group's part is as of one
///   moment of that group, the whole is not one snapshot of the cluster.
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
    /// By group, the node to try first: the last that answered as its leader, or was named
    /// as one.
    leaders: Mutex<HashMap<GroupId, Url>>,
    /// The cluster's shard map, as far as the client knows it.
    map: Mutex<MapState>,
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
/// The longest wait before asking again while the cluster settles.
const SETTLE_POLL: Duration = Duration::from_millis(100);

/// What a call waits for before its next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    /// A node down, failing or busy: the backoff.
    Backoff,
    /// The cluster up and settling (an election on, a split's map on its way): the
    /// backoff, at most [`SETTLE_POLL`].
    Soon,
}

/// The wait before the next attempt after `pause`, with the backoff at `backoff`.
fn wait_for(pause: Pause, backoff: Duration) -> Duration {
    match pause {
        Pause::Backoff => backoff,
        Pause::Soon => backoff.min(SETTLE_POLL),
    }
}

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
            leaders: Mutex::default(),
            map: Mutex::new(MapState::Unknown),
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
        self.leaders.lock().unwrap_or_else(|p| p.into_inner()).clear();
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
        let call = Call::new(Method::GET, Kind::Key(key));
        self.call(&call).await.map_err(Failure::into_error)
    }

    /// The value of `key` as the first node that answers has applied it: possibly behind
    /// the leader, never ahead of what a majority holds.
    pub async fn get_stale(&self, key: &str) -> Result<Option<Vec<u8>>, ClientError> {
        let call = Call { stale: true, ..Call::new(Method::GET, Kind::Key(key)) };
        self.call(&call).await.map_err(Failure::into_error)
    }

    /// Applies `commands`, [`Command::Put`]s and [`Command::Delete`]s (later ones win on the
    /// same key), once each committed by a majority. Keys of one group are applied as one
    /// atomic write; keys of several groups as one atomic write per group, one group after
    /// the other, in the order of the groups' ranges: see the type's documentation on
    /// shards. Each part counts as one write of the client's (its own sequence number), and
    /// takes at most the service's entry size (1 MiB of keys and values).
    ///
    /// A call that fails on a part returns the error of that part, with the parts before it
    /// applied and the parts after it not sent.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), bloomkv_raft::ClientError> {
    /// use bloomkv_raft::{Client, Command};
    ///
    /// let client = Client::new(["127.0.0.1:21001", "127.0.0.1:21002"])?;
    /// // Atomic if "user/1" and "user/2" are in one group; else atomic per group.
    /// client.batch(vec![Command::put("user/1", "ann"), Command::delete("user/2")]).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn batch(&self, commands: Vec<Command>) -> Result<(), ClientError> {
        let keys = commands.iter().map(|command| match command {
            Command::Put { key, .. } | Command::Delete { key } => Ok(key.as_slice()),
            other => Err(ClientError::Refused {
                status: 400,
                reason: format!("not sent: a batch holds only puts and deletes, not {other:?}"),
            }),
        });
        keys.collect::<Result<Vec<_>, _>>()?;
        if commands.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + self.deadline;
        let mut left = commands;
        // Parts not yet acknowledged: split again whenever a node says the map has moved.
        'split: loop {
            let parts: Vec<(Option<GroupId>, Vec<Command>)> = match self.map_now(deadline).await? {
                None => vec![(None, std::mem::take(&mut left))],
                Some(map) => {
                    let mut parts: std::collections::BTreeMap<usize, (GroupId, Vec<Command>)> =
                        Default::default();
                    // By the position of each group's range, so parts go in key order.
                    let order: HashMap<GroupId, usize> =
                        map.shards().enumerate().map(|(i, s)| (s.group, i)).collect();
                    for command in std::mem::take(&mut left) {
                        let group = map.group_of(command_key(&command));
                        let part = parts.entry(order[&group]).or_insert((group, Vec::new()));
                        part.1.push(command);
                    }
                    parts.into_values().map(|(g, c)| (Some(g), c)).collect()
                }
            };
            let mut parts = parts.into_iter();
            while let Some((group, commands)) = parts.next() {
                let body = postcard::to_allocvec(&commands).map_err(|e| ClientError::Refused {
                    status: 400,
                    reason: format!("not sent: {e}"),
                })?;
                let mut seq = self.seq.lock().await;
                // Spent whatever happens, as a single write's.
                *seq += 1;
                let call = Call {
                    body,
                    once: Some(*seq),
                    group,
                    deadline: Some(deadline),
                    ..Call::new(Method::POST, Kind::Batch)
                };
                match self.call(&call).await {
                    Ok(_) => {}
                    Err(Failure::Client(e)) => return Err(e),
                    Err(Failure::Stale) => {
                        left = commands;
                        left.extend(parts.flat_map(|(_, c)| c));
                        continue 'split;
                    }
                }
            }
            return Ok(());
        }
    }

    /// At most `limit` keys starting with `prefix`, with their values, in key order, each
    /// group's read through its leader (linearizable within the group): one group after
    /// another, so not one snapshot of the whole cluster (see the type's documentation).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), bloomkv_raft::ClientError> {
    /// let client = bloomkv_raft::Client::new(["127.0.0.1:21001"])?;
    /// for (key, value) in client.scan("user/", 100).await? {
    ///     println!("{} = {} bytes", String::from_utf8_lossy(&key), value.len());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn scan(&self, prefix: &str, limit: usize) -> Result<Items, ClientError> {
        self.scan_with(prefix, limit, false).await
    }

    /// [`Client::scan`] from whichever node answers, each group as that node has applied it:
    /// possibly behind its leader.
    pub async fn scan_stale(&self, prefix: &str, limit: usize) -> Result<Items, ClientError> {
        self.scan_with(prefix, limit, true).await
    }

    async fn scan_with(
        &self,
        prefix: &str,
        limit: usize,
        stale: bool,
    ) -> Result<Items, ClientError> {
        let deadline = Instant::now() + self.deadline;
        let mut items = Vec::new();
        // What is left to read: the prefix's keys from `from` on, after `after`.
        let mut from = prefix.as_bytes().to_vec();
        let mut after: Option<Vec<u8>> = None;
        while items.len() < limit {
            let map = self.map_now(deadline).await?;
            let piece = match &map {
                None => None,
                Some(map) => {
                    let mut pieces = map.prefix_pieces(prefix.as_bytes()).into_iter();
                    match pieces.find(|p| p.end.as_ref().is_none_or(|end| *end > from)) {
                        Some(piece) => Some(piece),
                        None => break,
                    }
                }
            };
            let call = Call {
                group: piece.as_ref().map(|p| p.group),
                stale,
                deadline: Some(deadline),
                ..Call::new(
                    Method::GET,
                    Kind::Scan { prefix, after: after.as_deref(), limit: limit - items.len() },
                )
            };
            let body = match self.call(&call).await {
                Ok(body) => body.unwrap_or_default(),
                Err(Failure::Client(e)) => return Err(e),
                Err(Failure::Stale) => continue,
            };
            let (page, more) = parse_page(&body)?;
            if let Some((last, _)) = page.last() {
                after = Some(last.clone());
            }
            let inside = |key: &[u8]| {
                piece.as_ref().is_none_or(|p| {
                    key >= p.start.as_slice() && p.end.as_ref().is_none_or(|e| key < e.as_slice())
                })
            };
            items.extend(page.into_iter().filter(|(key, _)| inside(key)));
            if !more {
                match piece.and_then(|p| p.end) {
                    Some(end) => from = end,
                    None => break,
                }
            }
        }
        items.truncate(limit);
        Ok(items)
    }

    /// The shard map, fetched first if the client has none yet; `None` for a service that
    /// has none (a node older than shards: one group).
    async fn map_now(&self, deadline: Instant) -> Result<Option<Arc<ShardMap>>, ClientError> {
        let call = Call { deadline: Some(deadline), ..Call::new(Method::GET, Kind::Map) };
        self.call(&call).await.map_err(Failure::into_error)?;
        match &*self.map.lock().unwrap_or_else(|p| p.into_inner()) {
            MapState::Known(map) => Ok(Some(map.clone())),
            _ => Ok(None),
        }
    }

    fn map_state(&self) -> MapState {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_map(&self, state: MapState) {
        *self.map.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }

    async fn write(&self, method: Method, key: &str, body: Vec<u8>) -> Result<(), ClientError> {
        let mut seq = self.seq.lock().await;
        // Spent whatever happens: a write given up on may still be applied later, and a new
        // write under its number would then be refused as a reuse of it.
        *seq += 1;
        let call = Call { body, once: Some(*seq), ..Call::new(method, Kind::Key(key)) };
        self.call(&call).await.map(|_| ()).map_err(Failure::into_error)
    }

    /// Makes `call` until it is answered, or its deadline: fetching the shard map first if
    /// it is unknown, following redirects, backing off from failures. A call routed to a
    /// fixed group (`call.group`) that meets a moved map returns [`Failure::Stale`], for its
    /// caller to split again.
    async fn call(&self, call: &Call<'_>) -> Result<Option<Vec<u8>>, Failure> {
        let deadline = call.deadline.unwrap_or_else(|| Instant::now() + self.deadline);
        let mut backoff = FIRST_BACKOFF;
        let mut next = 0usize;
        let mut attempts = 0u32;
        let mut redirected = false;
        loop {
            let map = self.map_state();
            if matches!(call.kind, Kind::Map) && !matches!(map, MapState::Unknown) {
                return Ok(None);
            }
            let group = match (&map, call.group, &call.kind) {
                (_, Some(group), _) => group,
                (MapState::Known(map), None, Kind::Key(key)) => map.group_of(key.as_bytes()),
                _ => 0,
            };
            let hinted =
                self.leaders.lock().unwrap_or_else(|p| p.into_inner()).get(&group).cloned();
            let node = hinted.unwrap_or_else(|| {
                next += 1;
                self.nodes[(next - 1) % self.nodes.len()].clone()
            });
            attempts += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout = left.min(self.attempt_timeout);
            let answer = match &map {
                MapState::Unknown => match self.fetch_map(&node, timeout).await {
                    Ok(state) => {
                        self.set_map(state);
                        continue;
                    }
                    Err(answer) => answer,
                },
                MapState::Known(map) => {
                    self.attempt(&node, call, Some((map.version(), group)), timeout).await
                }
                MapState::Unsharded => self.attempt(&node, call, None, timeout).await,
            };
            let (last, pause) = match answer {
                Answer::Done(result) => {
                    // Only the leader answers these: the next call starts there.
                    if result.is_ok() && !call.stale {
                        self.set_leader(group, Some(node));
                    }
                    return result.map_err(Failure::Client);
                }
                Answer::Stale(why) => {
                    self.set_map(MapState::Unknown);
                    if call.group.is_some() {
                        return Err(Failure::Stale);
                    }
                    // Fetched again and resent at once the first time, as a redirect is; then
                    // the map that moved the key is on its way (a split waits for the
                    // metadata group to record it).
                    if !std::mem::replace(&mut redirected, true) {
                        continue;
                    }
                    (why, Pause::Soon)
                }
                Answer::Redirect(leader) => {
                    self.set_leader(group, Some(leader));
                    // The first redirect is followed at once; nodes that keep sending the
                    // client round (their views of the leader lag an election) are waited for.
                    if !std::mem::replace(&mut redirected, true) {
                        continue;
                    }
                    (format!("{node}: redirected again"), Pause::Soon)
                }
                Answer::Retry(why) => {
                    self.set_leader(group, None);
                    redirected = false;
                    (why, Pause::Backoff)
                }
                // The next node is tried soon: a node down (most often a leader that failed)
                // says nothing of the others, and a backoff grown through an election would
                // otherwise be paid in full each time the rotation comes back to it.
                Answer::Unreachable(why) => {
                    self.set_leader(group, None);
                    redirected = false;
                    let pause = if self.nodes.len() > 1 { Pause::Soon } else { Pause::Backoff };
                    (why, pause)
                }
                Answer::Settling(why) => {
                    self.set_leader(group, None);
                    redirected = false;
                    (why, Pause::Soon)
                }
                // The node is up and may well lead: the leader stays as known, only later.
                Answer::Busy(why) => {
                    redirected = false;
                    (why, Pause::Backoff)
                }
            };
            // A backoff that reaches the deadline would leave the next attempt no time: it could
            // only time out, and its timeout would hide what the attempts met (a certificate
            // the client does not trust, say).
            let wait = wait_for(pause, backoff);
            let left = deadline.saturating_duration_since(Instant::now());
            if left <= wait {
                return Err(Failure::Client(ClientError::GaveUp { attempts, last }));
            }
            tokio::time::sleep(wait).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    fn set_leader(&self, group: GroupId, leader: Option<Url>) {
        let mut leaders = self.leaders.lock().unwrap_or_else(|p| p.into_inner());
        match leader {
            Some(leader) => leaders.insert(group, leader),
            None => leaders.remove(&group),
        };
    }

    fn request(&self, method: Method, url: Url, timeout: Duration) -> reqwest::RequestBuilder {
        let mut request = self.http.request(method, url).timeout(timeout);
        if let Some(token) = &self.token {
            request = request.header(reqwest::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        request
    }

    /// The shard map `node` serves: `MapState::Unsharded` if it serves none (an older node).
    async fn fetch_map(&self, node: &Url, timeout: Duration) -> Result<MapState, Answer> {
        let mut url = node.clone();
        url.path_segments_mut().expect("an http URL").clear().push("shard").push("map");
        let (status, has_retry_after, body) =
            send(node, self.request(Method::GET, url, timeout)).await?;
        match status {
            StatusCode::OK => match ShardMap::decode(&body) {
                Ok(map) => Ok(MapState::Known(Arc::new(map))),
                Err(e) => Err(Answer::Retry(format!("{node}: its shard map: {e}"))),
            },
            StatusCode::NOT_FOUND => Ok(MapState::Unsharded),
            status => Err(classify(node, status, has_retry_after, &body, false)),
        }
    }

    async fn attempt(
        &self,
        node: &Url,
        call: &Call<'_>,
        route: Option<(u64, GroupId)>,
        timeout: Duration,
    ) -> Answer {
        let mut url = node.clone();
        let mut path = url.path_segments_mut().expect("an http URL");
        path.clear().push("kv");
        if let Kind::Key(key) = call.kind {
            path.push(key);
        }
        drop(path);
        {
            let mut query = url.query_pairs_mut();
            if let Kind::Scan { prefix, after, limit } = &call.kind {
                query.append_pair("prefix", prefix).append_pair("limit", &limit.to_string());
                if let Some(after) = after {
                    query.append_pair("cursor", &hex(after));
                }
            }
            if call.stale {
                query.append_pair("consistency", "stale");
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        let mut request = self.request(call.method.clone(), url, timeout);
        if let Some(seq) = call.once {
            request = request.header(CLIENT_HEADER, self.id).header(SEQ_HEADER, seq);
        }
        if let Some((version, group)) = route {
            request =
                request.header(SHARD_VERSION_HEADER, version).header(SHARD_GROUP_HEADER, group);
        }
        if call.method != Method::GET && call.method != Method::DELETE {
            request = request.body(call.body.clone());
        }
        let (status, has_retry_after, body, version) = match request.send().await {
            Ok(response) => {
                let version = response
                    .headers()
                    .get(SHARD_VERSION_HEADER)
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                match read(node, response).await {
                    Ok((status, retry, body)) => (status, retry, body, version),
                    Err(answer) => return answer,
                }
            }
            Err(e) => return unsent(node, &e),
        };
        // A node with a newer map than the one routed by: fetched again before the next call.
        if let (Some((mine, _)), Some(theirs)) = (route, version) {
            if theirs > mine {
                self.set_map(MapState::Unknown);
            }
        }
        classify(node, status, has_retry_after, &body, call.method == Method::GET)
    }
}

/// Sends `request`: its status, whether it says when to retry, and its body.
async fn send(
    node: &Url,
    request: reqwest::RequestBuilder,
) -> Result<(StatusCode, bool, Vec<u8>), Answer> {
    match request.send().await {
        Ok(response) => read(node, response).await,
        Err(e) => Err(unsent(node, &e)),
    }
}

/// A request to `node` that got no answer: the node is down or out of reach (refused,
/// timed out), or the exchange failed otherwise (a TLS handshake, say).
fn unsent(node: &Url, e: &reqwest::Error) -> Answer {
    // reqwest's message alone does not say why a handshake failed.
    let why = format!("{node}: {}", with_causes(e));
    if e.is_connect() || e.is_timeout() {
        Answer::Unreachable(why)
    } else {
        Answer::Retry(why)
    }
}

async fn read(
    node: &Url,
    response: reqwest::Response,
) -> Result<(StatusCode, bool, Vec<u8>), Answer> {
    let status = response.status();
    let has_retry_after = response.headers().contains_key(reqwest::header::RETRY_AFTER);
    match response.bytes().await {
        Ok(b) => Ok((status, has_retry_after, b.to_vec())),
        Err(e) => Err(Answer::Retry(format!("{node}: reading the answer: {e}"))),
    }
}

/// What an answer means for the call: `read` for a GET (whose 404 is an absent key).
fn classify(
    node: &Url,
    status: StatusCode,
    has_retry_after: bool,
    body: &[u8],
    read: bool,
) -> Answer {
    let text = || String::from_utf8_lossy(body).trim().to_string();
    match status {
        StatusCode::OK if read => Answer::Done(Ok(Some(body.to_vec()))),
        StatusCode::OK => Answer::Done(Ok(None)),
        StatusCode::NOT_FOUND if read => Answer::Done(Ok(None)),
        StatusCode::MISDIRECTED_REQUEST if is_stale(body) => {
            Answer::Stale(format!("{node}: {}", text()))
        }
        StatusCode::MISDIRECTED_REQUEST => match leader_of(body, node.scheme()) {
            Some(leader) if leader != *node => Answer::Redirect(leader),
            // No leader known (an election is on), or one that says it is not: ask again soon.
            _ => Answer::Settling(format!("{node}: not the leader: {}", text())),
        },
        StatusCode::TOO_MANY_REQUESTS => Answer::Busy(format!("{node}: busy: {}", text())),
        // Up, its map about to change (a split to be recorded, a map to catch up with).
        StatusCode::SERVICE_UNAVAILABLE if is_settling(body) => {
            Answer::Settling(format!("{node}: {}", text()))
        }
        // Up, but at its bound on requests in progress (it says when to come back): the
        // leader is still the leader.
        StatusCode::SERVICE_UNAVAILABLE if has_retry_after => {
            Answer::Busy(format!("{node}: busy: {}", text()))
        }
        s if s.is_server_error() => Answer::Retry(format!("{node}: {s}: {}", text())),
        s => Answer::Done(Err(ClientError::Refused { status: s.as_u16(), reason: text() })),
    }
}

/// One call, as every attempt at it sends it.
struct Call<'a> {
    method: Method,
    kind: Kind<'a>,
    body: Vec<u8>,
    /// The write's sequence number; `None` for a read.
    once: Option<u64>,
    stale: bool,
    /// The group the call is for, if fixed by its caller (a batch's part, a scan's piece);
    /// `None`: the group of its key.
    group: Option<GroupId>,
    /// The call's deadline, if its caller's (a scan or batch of several calls) sets it.
    deadline: Option<Instant>,
}

impl<'a> Call<'a> {
    fn new(method: Method, kind: Kind<'a>) -> Call<'a> {
        Call {
            method,
            kind,
            body: Vec::new(),
            once: None,
            stale: false,
            group: None,
            deadline: None,
        }
    }
}

/// What a call asks for.
enum Kind<'a> {
    /// `/kv/{key}`.
    Key(&'a str),
    /// `POST /kv`: a batch of one group.
    Batch,
    /// `GET /kv?prefix=..`: a page of one group's keys.
    Scan { prefix: &'a str, after: Option<&'a [u8]>, limit: usize },
    /// Nothing but the shard map, if the client has none.
    Map,
}

/// What the client knows of the cluster's shard map.
#[derive(Debug, Clone)]
enum MapState {
    /// Not fetched yet, or a node said it has moved on.
    Unknown,
    /// The service has none: one group, requests sent without shard headers.
    Unsharded,
    Known(Arc<ShardMap>),
}

/// Why an internal call failed.
enum Failure {
    Client(ClientError),
    /// The call's fixed group no longer serves its keys: the map has been fetched again.
    Stale,
}

impl Failure {
    /// For calls whose group is not fixed, which never end stale.
    fn into_error(self) -> ClientError {
        match self {
            Failure::Client(e) => e,
            Failure::Stale => ClientError::GaveUp { attempts: 1, last: "stale shard map".into() },
        }
    }
}

fn command_key(command: &Command) -> &[u8] {
    match command {
        Command::Put { key, .. } | Command::Delete { key } => key,
        _ => b"",
    }
}

/// A node's answer that the request was routed by an older shard map than its own.
fn is_stale(body: &[u8]) -> bool {
    has_error(body, b"\"error\":\"stale shard map\"")
}

/// Whether `body` is kv_node's 503 for a map about to change.
fn is_settling(body: &[u8]) -> bool {
    has_error(body, b"\"error\":\"shard map settling\"")
}

fn has_error(body: &[u8], mark: &[u8]) -> bool {
    body.windows(mark.len()).any(|w| w == mark)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| text.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
        .collect()
}

/// Keys and their values, in key order.
type Items = Vec<(Vec<u8>, Vec<u8>)>;

/// A scan page's keys and values, and whether more follow.
fn parse_page(body: &[u8]) -> Result<(Items, bool), ClientError> {
    let bad = |why: &str| ClientError::GaveUp { attempts: 1, last: format!("a scan page {why}") };
    let page: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| bad(&format!("is not JSON: {e}")))?;
    let items = page["items"].as_array().ok_or_else(|| bad("has no items"))?;
    let field = |item: &serde_json::Value, text: &str, hexed: &str| match item[text].as_str() {
        Some(t) => Some(t.as_bytes().to_vec()),
        None => unhex(item[hexed].as_str()?),
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let key = field(item, "key", "key_hex").ok_or_else(|| bad("has an item without a key"))?;
        let value =
            field(item, "value", "value_hex").ok_or_else(|| bad("has an item without a value"))?;
        out.push((key, value));
    }
    Ok((out, page["more"].as_bool().unwrap_or(false)))
}

enum Answer {
    Done(Result<Option<Vec<u8>>, ClientError>),
    /// The request was routed by an older shard map than the node's.
    Stale(String),
    Redirect(Url),
    /// The node failed to serve: back off, then try the next.
    Retry(String),
    /// No answer came (refused, timed out): try the next node soon.
    Unreachable(String),
    /// The node is up and settling (it knows no leader, or its map is about to change): ask
    /// again soon.
    Settling(String),
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
        // No shard map: a service of one group, as before shards.
        let app = axum::Router::new()
            .route("/shard/map", axum::routing::get(|| async { axum::http::StatusCode::NOT_FOUND }))
            .fallback(answer);
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

    /// While an election is on the waits stay short however long it lasts; a node down or
    /// busy backs off to a second.
    #[test]
    fn an_election_is_polled_and_a_failure_backed_off() {
        let mut backoff = FIRST_BACKOFF;
        for _ in 0..10 {
            assert!(wait_for(Pause::Soon, backoff) <= SETTLE_POLL);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        assert_eq!(wait_for(Pause::Backoff, backoff), MAX_BACKOFF);
        let no_leader = br#"{"error":"not the leader","leader":null,"leader_addr":null}"#;
        assert_eq!(pause_after(421, false, no_leader), Pause::Soon);
        let splitting = br#"{"error":"shard map settling","group":3,"why":"splitting"}"#;
        assert_eq!(pause_after(503, true, splitting), Pause::Soon);
        assert_eq!(pause_after(503, true, b"too many requests in flight"), Pause::Backoff);
        assert_eq!(pause_after(500, false, b"storage failed"), Pause::Backoff);
    }

    /// What a call waits for after a write's answer of `status` and `body`.
    fn pause_after(status: u16, retry_after: bool, body: &[u8]) -> Pause {
        let node = Url::parse("http://127.0.0.1:1/").unwrap();
        match classify(&node, StatusCode::from_u16(status).unwrap(), retry_after, body, false) {
            Answer::Settling(_) => Pause::Soon,
            Answer::Retry(_) | Answer::Busy(_) => Pause::Backoff,
            _ => panic!("{status}"),
        }
    }

    /// A write that meets ten answers of "no leader known" is acknowledged once a leader
    /// is: within a 4 s deadline, which backing off to a second would pass (4.6 s of waits).
    #[tokio::test]
    async fn a_write_waits_out_an_election_without_backing_off() {
        use std::sync::atomic::Ordering;
        let mut statuses = vec![421; 10];
        statuses.push(200);
        let (addr, count) = node(&statuses).await;
        let client = Client::new([&addr])
            .unwrap()
            .with_timeouts(Duration::from_secs(4), Duration::from_secs(1));
        client.put("k", "v").await.unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 11);
    }

    /// A node that refuses connections (a leader that failed) is passed over for the next at
    /// once, not after a backoff grown through the election the others report: ten rounds of
    /// "refused" and "no leader known" fit a 3 s deadline (backing off, 3.9 s of waits).
    #[tokio::test]
    async fn a_node_that_is_down_is_passed_over_without_backing_off() {
        use std::sync::atomic::Ordering;
        let down = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().to_string()
        };
        let mut statuses = vec![421; 6];
        statuses.push(200);
        let (up, count) = node(&statuses).await;
        let client = Client::new([&down, &up])
            .unwrap()
            .with_timeouts(Duration::from_secs(3), Duration::from_secs(1));
        client.put("k", "v").await.unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 7);
    }

    /// A service whose map is version 1 (group 0 serves every key) until its first write,
    /// which it applies and then splits the keys from "m" on off to group 1 (version 2): what
    /// it applies, by group, with the request's sequence number and keys.
    struct Splitting {
        map: Mutex<ShardMap>,
        fetches: std::sync::atomic::AtomicUsize,
        applied: Mutex<Vec<(GroupId, u64, Vec<String>)>>,
    }

    impl Splitting {
        fn answer(&self, headers: &axum::http::HeaderMap, keys: Vec<Vec<u8>>) -> (u16, String) {
            let number = |name: &str| headers[name].to_str().unwrap().parse::<u64>().unwrap();
            let (version, group) = (number(SHARD_VERSION_HEADER), number(SHARD_GROUP_HEADER));
            let mut map = self.map.lock().unwrap();
            for key in &keys {
                if let crate::shard::Route::Stale { version, group } =
                    map.check_route(key, version, group)
                {
                    let body = format!(
                        r#"{{"error":"stale shard map","version":{version},"group":{group}}}"#
                    );
                    return (421, body);
                }
            }
            let keys = keys.into_iter().map(|k| String::from_utf8(k).unwrap()).collect();
            self.applied.lock().unwrap().push((group, number(SEQ_HEADER), keys));
            if map.version() == 1 {
                map.split(b"m", 1).unwrap();
            }
            (200, "ok".into())
        }
    }

    #[tokio::test]
    async fn a_stale_route_fetches_the_map_again_and_a_batch_is_split_per_group() {
        use std::sync::atomic::Ordering;

        use axum::extract::{Path, State};
        use axum::http::{HeaderMap, StatusCode as Status};
        use axum::routing::{get, post, put};

        let service = Arc::new(Splitting {
            map: Mutex::new(ShardMap::new(0, [1]).unwrap()),
            fetches: Default::default(),
            applied: Default::default(),
        });
        type Shared = State<Arc<Splitting>>;
        let map = |State(s): Shared| async move {
            s.fetches.fetch_add(1, Ordering::SeqCst);
            s.map.lock().unwrap().encode()
        };
        let one = |State(s): Shared, Path(key): Path<String>, headers: HeaderMap| async move {
            let (status, body) = s.answer(&headers, vec![key.into_bytes()]);
            (Status::from_u16(status).unwrap(), body)
        };
        let batch = |State(s): Shared, headers: HeaderMap, body: axum::body::Bytes| async move {
            let commands: Vec<Command> = postcard::from_bytes(&body).unwrap();
            let keys = commands.iter().map(|c| command_key(c).to_vec()).collect();
            let (status, body) = s.answer(&headers, keys);
            (Status::from_u16(status).unwrap(), body)
        };
        let app = axum::Router::new()
            .route("/shard/map", get(map))
            .route("/kv/{key}", put(one))
            .route("/kv", post(batch))
            .with_state(service.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = Client::new([&addr]).unwrap().with_id(9, 0);

        // Routed by version 1, then (the map split under it) "melon" is stale: the client
        // fetches version 2 and sends the same write, seq 2, to group 1.
        client.put("apple", "a").await.unwrap();
        client.put("melon", "m").await.unwrap();
        assert_eq!(service.fetches.load(Ordering::SeqCst), 2);
        // A batch over both groups: one part per group, in key order, each its own write.
        let batch = vec![
            Command::put("zucchini", "z"),
            Command::put("kiwi", "k"),
            Command::delete("apple"),
        ];
        client.batch(batch).await.unwrap();
        let applied = service.applied.lock().unwrap().clone();
        let strings = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        assert_eq!(
            applied,
            [
                (0, 1, strings(&["apple"])),
                (1, 2, strings(&["melon"])),
                (0, 3, strings(&["kiwi", "apple"])),
                (1, 4, strings(&["zucchini"])),
            ]
        );
        assert_eq!(service.fetches.load(Ordering::SeqCst), 2, "the map is fetched once a version");
        let nested = client.batch(vec![Command::Batch(vec![])]).await.unwrap_err();
        assert!(matches!(nested, ClientError::Refused { status: 400, .. }), "{nested}");
    }
}
