//! `bloomkv raft` on a node directory made through bloomkv-raft's own storage: the report
//! (golden, and as JSON) says what the node's groups hold, a damaged record is an error
//! naming it, and a database that is not a node's is refused.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bloomkv::{Db, Options};
use bloomkv_raft::shard::{ShardCommand, ShardMap, META_GROUP};
use bloomkv_raft::{Command, NodeStore, TypeConfig};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::log_id;
use openraft::{BasicNode, Entry, EntryPayload, Membership, Vote};
use serde_json::Value as Json;

// Shared with `tool.rs`, which uses the rest of it.
#[allow(dead_code)]
mod support;
use support::{golden_transcript, tool};

fn membership(index: u64, voters: &[u64]) -> Entry<TypeConfig> {
    let voters: BTreeSet<u64> = voters.iter().copied().collect();
    let nodes = voters.iter().map(|&n| (n, BasicNode::new(format!("node-{n}"))));
    let membership = Membership::new(vec![voters.clone()], nodes.collect::<BTreeMap<_, _>>());
    Entry { log_id: log_id(1, 1, index), payload: EntryPayload::Membership(membership) }
}

fn normal(index: u64, command: Command) -> Entry<TypeConfig> {
    Entry { log_id: log_id(1, 1, index), payload: EntryPayload::Normal(command) }
}

/// A node that holds the metadata group (its map: two ranges, group 1 up to "m" on nodes
/// 1-3 and group 2 past it on nodes 2-4) and group 1 (its range assigned, two writes
/// applied, a committed vote for node 1 in term 2).
fn node(dir: &Path) -> ShardMap {
    let mut map = ShardMap::new(1, [1, 2, 3]).unwrap();
    map.split(b"m", 2).unwrap();
    map.move_replica(2, 1, 4).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let store = NodeStore::open(dir, Options::default()).unwrap();
    rt.block_on(async {
        let (_, mut meta) = store.group(META_GROUP).unwrap();
        let init = Command::Shard(ShardCommand::InitMap(map.encode()));
        meta.apply([membership(1, &[1, 2, 3]), normal(2, init)]).await.unwrap();

        let (mut log, mut sm) = store.group(1).unwrap();
        log.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        log.save_committed(Some(log_id(1, 1, 4))).await.unwrap();
        let assign = ShardCommand::Assign { start: Vec::new(), end: Some(b"m".to_vec()) };
        let entries = [
            membership(1, &[1, 2, 3]),
            normal(2, Command::Shard(assign)),
            normal(3, Command::put("apple", "red")),
            normal(4, Command::put("kiwi", "green")),
        ];
        sm.apply(entries).await.unwrap();
    });
    store.close().unwrap();
    map
}

#[test]
fn raft_shows_each_groups_state_and_the_map() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    node(&dir);
    let d = dir.to_str().unwrap();
    golden_transcript("raft-node.txt", &[&["raft", d], &["raft", d, "--hex"]], tmp.path());

    let (code, out, err) = tool(&["raft", d, "--json"]);
    assert_eq!(code, 0, "{err}");
    let report: Json = serde_json::from_str(&out).unwrap();
    let groups = report["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    let data = &groups[0];
    assert_eq!(data["id"], 1);
    assert_eq!(data["applied"]["index"], 4);
    assert_eq!(data["vote"]["term"], 2);
    assert_eq!(data["vote"]["committed"], true);
    assert_eq!(data["voters"], serde_json::json!([1, 2, 3]));
    assert_eq!(data["range"]["end"], "m");
    assert_eq!(data["log_first"], Json::Null, "nothing was appended to the log");
    let meta = &groups[1];
    assert_eq!(meta["metadata"], true);
    assert_eq!(meta["map"]["version"], 3);
    let shards = meta["map"]["shards"].as_array().unwrap();
    assert_eq!(shards[1]["start"], "m");
    assert_eq!(shards[1]["group"], 2);
    assert_eq!(shards[1]["members"], serde_json::json!([2, 3, 4]));

    // `--hex` shows the keys as hex.
    let (code, out, _) = tool(&["raft", d, "--json", "--hex"]);
    assert_eq!(code, 0);
    let report: Json = serde_json::from_str(&out).unwrap();
    assert_eq!(report["groups"][0]["range"]["end"], "6d");
}

#[test]
fn a_record_that_does_not_decode_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    node(&dir);
    // The map's bytes and group 1's applied id, each replaced by bytes the node never wrote.
    for (keyspace, key) in
        [("raft-group-18446744073709551615", "cluster/map"), ("raft-group-1", "sm/applied")]
    {
        let db = Db::open(&dir, Options::default()).unwrap();
        let ks = db.existing_keyspace(keyspace).unwrap();
        let old = bloomkv::Readable::get(&ks, key.as_bytes()).unwrap().unwrap();
        ks.put(key, [0xff; 3]).unwrap();
        db.close().unwrap();

        let (code, out, err) = tool(&["raft", dir.to_str().unwrap()]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains(key) && err.contains("does not decode"), "{err}");

        let db = Db::open(&dir, Options::default()).unwrap();
        db.existing_keyspace(keyspace).unwrap().put(key, &old[..]).unwrap();
        db.close().unwrap();
    }
    let (code, _, err) = tool(&["raft", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_database_that_is_not_a_nodes_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Db::open(tmp.path(), Options::default()).unwrap();
    db.put("user", "data").unwrap();
    db.close().unwrap();
    let (code, _, err) = tool(&["raft", tmp.path().to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("not a bloomkv-raft store"), "{err}");
}
