//! A `BTreeMap` as the model of a database's contents, and reads of the database in the
//! model's terms (values copied out of `Value`s), so the two compare with `==`.

use std::collections::BTreeMap;

use bloomkv::{Db, Readable, Value};

/// A key and its value.
pub type Pair = (Vec<u8>, Vec<u8>);

/// What a database (or one keyspace of it) should hold.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A scan's entries, in its order; panics on a read error.
pub fn pairs(it: impl Iterator<Item = bloomkv::Result<(Vec<u8>, Value)>>) -> Vec<Pair> {
    it.map(|r| r.map(|(k, v)| (k, v.to_vec()))).collect::<bloomkv::Result<_>>().unwrap()
}

/// A scan's entries as a model, or its first read error.
pub fn try_model(
    it: impl Iterator<Item = bloomkv::Result<(Vec<u8>, Value)>>,
) -> bloomkv::Result<Model> {
    it.map(|r| r.map(|(k, v)| (k, v.to_vec()))).collect()
}

/// A scan's entries as a model; panics on a read error.
pub fn to_model(it: impl Iterator<Item = bloomkv::Result<(Vec<u8>, Value)>>) -> Model {
    try_model(it).unwrap()
}

/// Everything `db`'s default keyspace holds now.
pub fn scan(db: &Db) -> Model {
    to_model(db.range(..))
}

/// A scan's keys, in its order; panics on a read error.
pub fn keys_of(it: impl Iterator<Item = bloomkv::Result<(Vec<u8>, Value)>>) -> Vec<Vec<u8>> {
    it.map(|r| r.unwrap().0).collect()
}

/// The model's entries in key order: what a full scan returns.
pub fn entries(model: &Model) -> Vec<Pair> {
    model.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}
