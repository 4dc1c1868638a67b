//! What the crate's unit tests share: log entries and reads of a state machine's keys.

use openraft::testing::log_id;
use openraft::{Entry, EntryPayload};

use crate::{Command, KvReader, TypeConfig};

/// The entry at `index` (term 1, node 1) putting `key` = `v<index>`.
pub(crate) fn put(index: u64, key: &str) -> Entry<TypeConfig> {
    let command = Command::put(key, format!("v{index}"));
    Entry { log_id: log_id(1, 1, index), payload: EntryPayload::Normal(command) }
}

/// Every key `kv` holds, in order.
pub(crate) fn keys(kv: &KvReader) -> Vec<Vec<u8>> {
    kv.scan().map(|r| r.unwrap().0).collect()
}
