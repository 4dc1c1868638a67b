//! Splits by size: how big a group's data is, and the key near its middle by bytes that a
//! [`crate::ShardNode`] splits it at once it grows past [`AutoSplit::bytes`].
//!
//! The size is measured exactly, by one scan of the group's data range in its state machine
//! (a read snapshot), rather than estimated from the keyspace's tables: a group's keyspace
//! holds its raft log next to its data, and a table spanning both (log entries carry the
//! values again) cannot be apportioned between them; the memtable's keys are in no table;
//! and after a split, the keys it moved away stay in the group's tables under a range
//! tombstone until a compaction drops them, so an estimate would see the group as big as
//! before and split it again. The scan costs one read of the group's data per check, and a
//! group that splits when it passes the threshold stays under about twice it: a check reads
//! at most that much of each group this node leads that applied an entry since its last
//! check (an idle group is not read again). It keeps a summary per run of keys
//! ([`KeySpan`]), `bytes / SPANS` each, so its memory is bounded whatever the group holds.

use std::time::Duration;

use bloomkv::Readable;

use crate::shard::GroupRange;
use crate::{keys, KvReader};

/// When a [`crate::ShardNode`] splits the groups it leads by size (see
/// [`crate::ShardNode::set_auto_split`]).
///
/// ```
/// use std::time::Duration;
/// let policy = bloomkv_raft::AutoSplit::new(64 << 20).every(Duration::from_secs(30));
/// assert_eq!((policy.bytes, policy.every), (64 << 20, Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoSplit {
    /// A group whose data (keys and values, as written) is over this many bytes splits.
    pub bytes: u64,
    /// How often the node measures each group it leads.
    pub every: Duration,
}

impl AutoSplit {
    /// How often a node measures its groups unless told: a group grows past the threshold by
    /// at most this long of writes before it splits.
    pub const DEFAULT_EVERY: Duration = Duration::from_secs(10);

    /// Splits groups over `bytes`, measured every [`AutoSplit::DEFAULT_EVERY`].
    pub fn new(bytes: u64) -> AutoSplit {
        AutoSplit { bytes, every: AutoSplit::DEFAULT_EVERY }
    }

    /// The same, measured every `every`.
    pub fn every(self, every: Duration) -> AutoSplit {
        AutoSplit { every, ..self }
    }
}

/// What a node's splits by size did since it started (see
/// [`crate::ShardNode::auto_split_stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoSplitStats {
    /// Measurements of a group this node led.
    pub checks: u64,
    /// Splits this node started because a group was over the threshold, and completed.
    pub splits: u64,
    /// Measurements or splits that failed (the leader changed, the group's membership was
    /// changing, the map moved on, storage): each is tried again at the next check.
    pub failures: u64,
    /// Why the last failure failed.
    pub last_failure: Option<String>,
}

/// A run of consecutive keys of a group, in key order: its first and last key and the bytes
/// of its keys and values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySpan {
    pub(crate) first: Vec<u8>,
    pub(crate) last: Vec<u8>,
    pub(crate) bytes: u64,
}

/// The longest split key a group takes: a stored data key's (see [`crate::Command::validate`]).
const MAX_SPLIT_KEY: usize = bloomkv::MAX_KEY_BYTES - keys::DATA.len();

/// Runs of keys a measurement keeps for a group at the threshold: the split key is a run's
/// first key, so it lands within about 1/SPANS of the threshold from the middle.
const SPANS: u64 = 64;

/// The size of the data of `range` in `kv`'s group (keys and values, as written), and its
/// runs of keys, each of about `threshold / SPANS` bytes.
pub(crate) fn measure(
    kv: &KvReader,
    range: &GroupRange,
    threshold: u64,
) -> bloomkv::Result<(u64, Vec<KeySpan>)> {
    let per_span = (threshold / SPANS).max(1);
    let end = match &range.end {
        Some(end) => keys::data(end),
        None => keys::DATA_END.to_vec(),
    };
    let mut total = 0u64;
    let mut spans = Vec::new();
    let mut open: Option<KeySpan> = None;
    for item in kv.db.range(keys::data(&range.start)..end) {
        let (key, value) = item?;
        let user_key = &key[keys::DATA.len()..];
        let bytes = (user_key.len() + value.len()) as u64;
        total += bytes;
        let span = open.get_or_insert_with(|| KeySpan {
            first: user_key.to_vec(),
            last: Vec::new(),
            bytes: 0,
        });
        span.last = user_key.to_vec();
        span.bytes += bytes;
        if span.bytes >= per_span {
            spans.extend(open.take());
        }
    }
    spans.extend(open);
    Ok((total, spans))
}

/// The key near the middle by bytes of `spans` (a group's runs of keys, in key order, not
/// overlapping, inside the group's range `start..end`) at which to split the group: the
/// first key of a run, or a key between a run's first and last (for a run whose bytes are
/// more than half, as all of one table's, taken as spread evenly over its keys), whichever
/// leaves the bytes before it nearest half. `None` if no such key lies strictly inside the
/// range: an empty group, or one whose only candidate is the range's start (a split there
/// would leave the group empty, and [`crate::ShardNode::split`] refuses it).
pub(crate) fn split_key(start: &[u8], end: Option<&[u8]>, spans: &[KeySpan]) -> Option<Vec<u8>> {
    let total: u64 = spans.iter().map(|s| s.bytes).sum();
    if total == 0 {
        return None;
    }
    let half = total / 2;
    let inside = |key: &[u8]| key > start && end.is_none_or(|end| key < end);
    let mut candidates: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut before = 0u64;
    for span in spans {
        candidates.push((before, span.first.clone()));
        if span.first < span.last {
            // A key the group stores fits a split; one interpolated may be a byte longer.
            let mut mid = between(&span.first, &span.last);
            if mid.len() > MAX_SPLIT_KEY {
                mid = span.last.clone();
            }
            candidates.push((before + span.bytes / 2, mid));
        }
        before += span.bytes;
    }
    candidates
        .into_iter()
        .filter(|(_, key)| inside(key))
        .min_by_key(|(before, _)| before.abs_diff(half))
        .map(|(_, key)| key)
}

/// A key after `a` and at most `b` (`a < b`), about halfway, reading both as base-256
/// fractions: `b` if no shorter one is found.
fn between(a: &[u8], b: &[u8]) -> Vec<u8> {
    let len = a.len().max(b.len());
    let digit = |k: &[u8], i: usize| u32::from(k.get(i).copied().unwrap_or(0));
    // (a + b) / 2, most significant digit first: a carry halves into the next digit.
    let mut mid = Vec::with_capacity(len + 1);
    let mut carry = 0u32;
    for i in 0..len {
        let sum = digit(a, i) + digit(b, i) + carry * 256;
        mid.push((sum / 2) as u8);
        carry = sum % 2;
    }
    if carry == 1 {
        mid.push(128);
    }
    while mid.last() == Some(&0) {
        mid.pop();
    }
    match a < mid.as_slice() && mid.as_slice() <= b {
        true => mid,
        false => b.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use openraft::storage::RaftStateMachine;

    use super::*;
    use crate::test_util::put;
    use crate::NodeStore;

    #[tokio::test]
    async fn a_measurement_counts_only_the_state_machines_keys_in_the_range() {
        let dir = tempfile::tempdir().unwrap();
        let node = NodeStore::open(dir.path(), bloomkv::Options::default()).unwrap();
        let (log, mut sm) = node.group(3).unwrap();
        let entries: Vec<_> = ["a", "bb", "c", "dd", "e"]
            .iter()
            .enumerate()
            .map(|(i, key)| put(i as u64 + 1, key))
            .collect();
        // The log holds the same keys and values again, and the applied state beside them.
        log.write_entries(entries.clone()).await.unwrap();
        sm.apply(entries).await.unwrap();
        let kv = sm.reader();
        let everything = GroupRange { start: Vec::new(), end: None, splits: Vec::new() };
        // Values are `v<index>`: two bytes each.
        let (total, spans) = measure(&kv, &everything, 0).unwrap();
        assert_eq!(total, 7 + 5 * 2);
        let firsts: Vec<&[u8]> = spans.iter().map(|s| s.first.as_slice()).collect();
        assert_eq!(firsts, [&b"a"[..], b"bb", b"c", b"dd", b"e"], "a run per key at threshold 0");
        let part =
            GroupRange { start: b"b".to_vec(), end: Some(b"d".to_vec()), splits: Vec::new() };
        let (total, spans) = measure(&kv, &part, 1 << 20).unwrap();
        assert_eq!(total, 3 + 2 * 2);
        assert_eq!(spans, [KeySpan { first: b"bb".to_vec(), last: b"c".to_vec(), bytes: 7 }]);
    }

    fn span(first: &str, last: &str, bytes: u64) -> KeySpan {
        KeySpan { first: first.into(), last: last.into(), bytes }
    }

    fn after_and_at_most(key: &[u8], low: &[u8], high: &[u8]) -> bool {
        low < key && key <= high
    }

    fn key(k: Option<Vec<u8>>) -> Option<String> {
        k.map(|k| String::from_utf8_lossy(&k).into_owned())
    }

    #[test]
    fn the_split_key_leaves_about_half_the_bytes_before_it() {
        // Even runs: the boundary at half.
        let spans =
            [span("a", "c", 10), span("d", "f", 10), span("g", "i", 10), span("j", "l", 10)];
        assert_eq!(key(split_key(b"", None, &spans)), Some("g".into()));
        // Uneven: most bytes in the first run, so the split key falls inside it.
        let spans = [span("b", "d", 80), span("e", "f", 10), span("g", "h", 10)];
        assert_eq!(key(split_key(b"", None, &spans)), Some("c".into()));
        // The last run holds most: the boundary before it is nearer half than its middle.
        let spans = [span("b", "b", 45), span("x", "z", 55)];
        assert_eq!(key(split_key(b"", None, &spans)), Some("x".into()));
    }

    #[test]
    fn all_data_in_one_table_splits_between_its_first_and_last_keys() {
        let spans = [span("user/0000", "user/9999", 1 << 20)];
        let at = split_key(b"user/", Some(b"user0"), &spans).unwrap();
        assert!(after_and_at_most(&at, b"user/0000", b"user/9999"), "{at:?}");
        assert!(at.starts_with(b"user/"), "{at:?}");
        // Adjacent keys: only the last is after the first.
        let spans = [span("a", "a\0", 100)];
        assert_eq!(key(split_key(b"", None, &spans)), Some("a\0".into()));
        let spans = [span("a\u{7f}", "b", 100)];
        let at = split_key(b"", None, &spans).unwrap();
        assert!(after_and_at_most(&at, b"a\x7f", b"b"), "{at:?}");
    }

    #[test]
    fn no_split_at_the_range_start_or_outside_the_range() {
        // One key, at the range's start, holding everything: nowhere to split.
        assert_eq!(split_key(b"m", None, &[span("m", "m", 1000)]), None);
        // The only boundaries at or before the start: the key inside the first run instead.
        let spans = [span("m", "p", 1000)];
        let at = split_key(b"m", Some(b"q"), &spans).unwrap();
        assert!(after_and_at_most(&at, b"m", b"p"), "{at:?}");
        // A key at or after the range's end is never taken.
        let spans = [span("a", "a", 5), span("c", "c", 5)];
        assert_eq!(split_key(b"a", Some(b"b"), &spans), None);
    }

    #[test]
    fn an_interpolated_key_too_long_to_split_at_is_not_taken() {
        let (first, last) =
            (vec![b'a'; MAX_SPLIT_KEY], [vec![b'a'; MAX_SPLIT_KEY - 1], vec![b'b']].concat());
        let spans = [KeySpan { first, last: last.clone(), bytes: 100 }];
        // Halfway between them is the first key with 0x80 appended, a byte too long: the
        // last key instead.
        assert!(split_key(b"", None, &spans) == Some(last), "not the last key");
    }

    #[test]
    fn an_empty_group_does_not_split() {
        assert_eq!(split_key(b"", None, &[]), None);
        assert_eq!(split_key(b"k", Some(b"z"), &[span("k", "m", 0)]), None);
    }

    #[test]
    fn between_is_after_the_first_and_at_most_the_last() {
        for (a, b) in
            [("a", "c"), ("a", "b"), ("ab", "b"), ("a\u{7f}\u{7f}", "a\u{7f}\u{80}"), ("", "z")]
        {
            let m = between(a.as_bytes(), b.as_bytes());
            assert!(after_and_at_most(&m, a.as_bytes(), b.as_bytes()), "{a:?} {b:?}");
        }
        assert_eq!(between(b"a", b"c"), b"b");
    }
}
