//! The writers the multi-process shard tests run through `Client`: each writes its own keys,
//! single puts and three-key batches (which span groups) in turn, and records what was
//! acknowledged, when, and what may or may not have been applied.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloomkv_raft::{Client, ClientError, Command};

/// Writer `w`'s `i`th key: its first character spread over printable ASCII, so over the
/// eight first ranges.
pub fn key(w: u64, i: u64) -> String {
    let first = char::from(0x21 + ((w * 7 + i * 13) % 94) as u8);
    format!("{first}w{w}-{i:05}")
}

pub fn value(w: u64, i: u64) -> String {
    format!("value {w} {i}")
}

/// What the writers know: keys acknowledged with their values and when, when the call that
/// acknowledged each was sent, and keys whose write may or may not have been applied (the
/// call gave up).
#[derive(Default)]
pub struct Outcomes {
    pub acked: BTreeMap<String, (String, Instant)>,
    pub sent: BTreeMap<String, Instant>,
    pub unsure: BTreeSet<String>,
}

/// Writes until `stop`: a put, then a batch of three keys (which span groups), and so on.
pub async fn writer(
    w: u64,
    addrs: Vec<String>,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Outcomes>>,
    acked: Arc<AtomicU64>,
) {
    let client =
        Client::new(&addrs).unwrap().with_timeouts(Duration::from_secs(20), Duration::from_secs(2));
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let keys: Vec<u64> = if i % 2 == 0 { vec![i] } else { vec![i, i + 1, i + 2] };
        let sent = Instant::now();
        let result = match keys.as_slice() {
            [one] => client.put(&key(w, *one), value(w, *one)).await,
            many => {
                let commands = many.iter().map(|&j| Command::put(key(w, j), value(w, j)));
                client.batch(commands.collect()).await
            }
        };
        let now = Instant::now();
        let mut out = out.lock().unwrap();
        match result {
            Ok(()) => {
                for &j in &keys {
                    out.acked.insert(key(w, j), (value(w, j), now));
                    out.sent.insert(key(w, j), sent);
                }
                acked.fetch_add(keys.len() as u64, Ordering::Relaxed);
            }
            Err(ClientError::GaveUp { .. }) => out.unsure.extend(keys.iter().map(|&j| key(w, j))),
            Err(e) => panic!("writer {w}: {e}"),
        }
        i += keys.len() as u64;
    }
}
