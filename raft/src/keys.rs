//! Where everything lives in the node's one bloomkv database.
//!
//! ```text
//! log/<index: u64 BE>        one log entry (postcard `Entry`)
//! meta/format                FORMAT_VERSION (u32 LE), written when the store is created
//! meta/vote                  the last saved vote (postcard `Vote`)
//! meta/committed             the last saved committed log id (postcard `LogId`)
//! meta/purged                the last purged log id (postcard `LogId`)
//! sm/applied                 the state machine's last applied log id (postcard `LogId`)
//! sm/membership              its last membership (postcard `StoredMembership`)
//! sm/installing              present while a snapshot install is unfinished (the file's name)
//! client/<id: u64 BE>        the last write applied for a client id: its seq, log index and
//!                            outcome (postcard), then a digest of it (u64 LE; absent in older
//!                            records), for exactly-once retries (`Session`)
//! cluster/range              a data group's key range and the groups its splits made
//!                            (postcard `shard::RangeRecord`; absent: every key)
//! cluster/map                the metadata group's shard map (`ShardMap::encode`)
//! data/<user key>            the replicated key-value data, values as written
//! snapshot/current           the current snapshot: its meta, file name and length
//!                            (postcard `snapshot::Stored`); the file is in `snapshots/`
//! ```
//!
//! Indexes are big-endian so that key order is index order: a range scan reads entries in log
//! order, and one `[log/a, log/b)` range is exactly the indexes `a..b`.

/// The prefix of log entries.
pub(crate) const LOG: &[u8] = b"log/";
/// The end of the log's key range: the first key after every `log/...` key.
pub(crate) const LOG_END: &[u8] = b"log0";
/// The version of this layout; a store written by another version is refused at open.
pub(crate) const FORMAT: &[u8] = b"meta/format";
pub(crate) const FORMAT_VERSION: u32 = 3;
pub(crate) const VOTE: &[u8] = b"meta/vote";
pub(crate) const COMMITTED: &[u8] = b"meta/committed";
pub(crate) const PURGED: &[u8] = b"meta/purged";
pub(crate) const APPLIED: &[u8] = b"sm/applied";
pub(crate) const MEMBERSHIP: &[u8] = b"sm/membership";
pub(crate) const INSTALLING: &[u8] = b"sm/installing";
/// The prefix of the client sessions. It sorts just before `data/`, so the replicated state
/// (sessions and data) is the one range `[client/, data0)`, which a snapshot carries whole.
pub(crate) const CLIENT: &[u8] = b"client/";
/// The prefix of a group's shard state, replicated (snapshots carry it) like the sessions
/// and the data, between which it sorts.
pub(crate) const CLUSTER: &[u8] = b"cluster/";
/// A data group's range (`shard::RangeRecord`).
pub(crate) const RANGE: &[u8] = b"cluster/range";
/// The metadata group's map (`ShardMap::encode`).
pub(crate) const MAP: &[u8] = b"cluster/map";
/// The prefix of the replicated data.
pub(crate) const DATA: &[u8] = b"data/";
/// The first key after every data key (`/` + 1 is `0`).
pub(crate) const DATA_END: &[u8] = b"data0";
pub(crate) const SNAPSHOT_CURRENT: &[u8] = b"snapshot/current";

/// The key of the log entry at `index`.
pub(crate) fn log(index: u64) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..4].copy_from_slice(LOG);
    key[4..].copy_from_slice(&index.to_be_bytes());
    key
}

/// The index a log key names, or `None` if `key` is not one.
pub(crate) fn log_index(key: &[u8]) -> Option<u64> {
    let rest = key.strip_prefix(LOG)?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

/// The key of a client's session.
pub(crate) fn client(id: u64) -> [u8; 15] {
    let mut key = [0u8; 15];
    key[..7].copy_from_slice(CLIENT);
    key[7..].copy_from_slice(&id.to_be_bytes());
    key
}

/// The key of `user_key` in the replicated data.
pub(crate) fn data(user_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(DATA.len() + user_key.len());
    key.extend_from_slice(DATA);
    key.extend_from_slice(user_key);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keys_sort_by_index_and_round_trip() {
        let indexes = [0u64, 1, 255, 256, 1 << 40, u64::MAX];
        for w in indexes.windows(2) {
            assert!(log(w[0]) < log(w[1]), "{} vs {}", w[0], w[1]);
        }
        for i in indexes {
            assert_eq!(log_index(&log(i)), Some(i));
        }
        assert_eq!(log_index(b"log/short"), None);
        assert_eq!(log_index(b"data/12345678"), None);
        // Every data key, and nothing after them, lies below DATA_END.
        assert!(data(&[0xff; 64]).as_slice() < DATA_END && DATA < DATA_END);
        assert!(SNAPSHOT_CURRENT > DATA_END && INSTALLING > DATA_END);
        // Sessions, then the shard state, then the data: one replicated range.
        assert!(client(u64::MAX).as_slice() < CLUSTER && client(0).as_slice() > CLIENT);
        assert!(CLUSTER > CLIENT && RANGE < DATA && MAP < DATA && MAP > CLUSTER);
        assert!([MEMBERSHIP, APPLIED, FORMAT, VOTE, LOG].iter().all(|k| *k > DATA_END));
    }
}
