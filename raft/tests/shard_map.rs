//! The shard map against a naive model: random splits, merges and replica changes, every
//! lookup, range split and route checked against a map of every key of a small key space to
//! its group; encodings round-trip; damaged bytes are refused, never a panic.

use std::collections::{BTreeMap, BTreeSet};

use bloomkv_raft::shard::{Piece, Route, ShardMap};

/// splitmix64: a fixed-seed random source, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every key over "abc" of up to three bytes, in key order: the split keys come from here, so
/// every range of the map starts at one of them and holds one of them.
fn universe() -> Vec<Vec<u8>> {
    let mut keys = vec![Vec::new()];
    let mut last = vec![Vec::new()];
    for _ in 0..3 {
        last = last
            .iter()
            .flat_map(|k: &Vec<u8>| {
                b"abc".iter().map(move |c| {
                    let mut k = k.clone();
                    k.push(*c);
                    k
                })
            })
            .collect();
        keys.extend(last.iter().cloned());
    }
    keys.sort();
    keys
}

/// The map as the model sees it: each key's group, and each group's members.
struct Model {
    keys: Vec<Vec<u8>>,
    owner: Vec<u64>,
    members: BTreeMap<u64, BTreeSet<u64>>,
    version: u64,
}

impl Model {
    fn owner_of(&self, key: &[u8]) -> u64 {
        // The last universe key at or before `key` has its group: ranges start at universe
        // keys.
        let i = self.keys.partition_point(|k| k.as_slice() <= key) - 1;
        self.owner[i]
    }

    fn starts_range(&self, i: usize) -> bool {
        i == 0 || self.owner[i - 1] != self.owner[i]
    }

    fn split(&mut self, at: usize, group: u64) -> bool {
        if self.members.contains_key(&group) || self.starts_range(at) {
            return false;
        }
        let parent = self.owner[at];
        for owner in &mut self.owner[at..] {
            if *owner != parent {
                break;
            }
            *owner = group;
        }
        let members = self.members[&parent].clone();
        self.members.insert(group, members);
        self.version += 1;
        true
    }

    fn merge(&mut self, left: u64, right: u64) -> bool {
        let (Some(l), Some(r)) = (
            self.owner.iter().rposition(|&g| g == left),
            self.owner.iter().position(|&g| g == right),
        ) else {
            return false;
        };
        if r != l + 1 {
            return false;
        }
        for owner in &mut self.owner {
            if *owner == right {
                *owner = left;
            }
        }
        self.members.remove(&right);
        self.version += 1;
        true
    }

    fn change(&mut self, group: u64, remove: Option<u64>, add: Option<u64>) -> bool {
        let Some(members) = self.members.get(&group) else { return false };
        let mut members = members.clone();
        if remove.is_some_and(|n| !members.remove(&n)) || add.is_some_and(|n| !members.insert(n)) {
            return false;
        }
        if members.is_empty() {
            return false;
        }
        self.members.insert(group, members);
        self.version += 1;
        true
    }
}

fn check_against(map: &ShardMap, model: &Model, rng: &mut Rng) {
    map.validate().unwrap();
    assert_eq!(map.version(), model.version);
    assert_eq!(map.len(), model.members.len());
    for (key, &owner) in model.keys.iter().zip(&model.owner) {
        assert_eq!(map.group_of(key), owner, "key {:?}", key.escape_ascii().to_string());
        assert!(map.shard_of(key).contains(key));
    }
    for (group, members) in &model.members {
        assert_eq!(map.group(*group).unwrap().members, members, "group {group}");
    }
    // Keys between and beyond the universe's.
    for _ in 0..20 {
        let key: Vec<u8> = (0..rng.below(5)).map(|_| rng.next() as u8).collect();
        assert_eq!(map.group_of(&key), model.owner_of(&key));
    }
    // Ranges cut by group: together they are the range, each key in the piece of its group.
    for _ in 0..10 {
        let start = &model.keys[rng.below(model.keys.len())];
        let end = match rng.below(4) {
            0 => None,
            _ => Some(model.keys[rng.below(model.keys.len())].as_slice()),
        };
        let pieces = map.pieces(start, end);
        if end.is_some_and(|end| end <= start.as_slice()) {
            assert!(pieces.is_empty());
            continue;
        }
        assert_eq!(pieces.first().unwrap().start, *start);
        assert_eq!(pieces.last().unwrap().end.as_deref(), end);
        for pair in pieces.windows(2) {
            assert_eq!(pair[0].end.as_ref(), Some(&pair[1].start));
            assert_ne!(pair[0].group, pair[1].group);
        }
        let in_range = |k: &[u8]| k >= start.as_slice() && end.is_none_or(|e| k < e);
        for (key, &owner) in model.keys.iter().zip(&model.owner).filter(|(k, _)| in_range(k)) {
            let piece: Vec<&Piece> = pieces
                .iter()
                .filter(|p| key >= &p.start && p.end.as_ref().is_none_or(|e| key < e))
                .collect();
            assert_eq!(piece.len(), 1);
            assert_eq!(piece[0].group, owner);
        }
    }
    let decoded = ShardMap::decode(&map.encode()).unwrap();
    assert_eq!(&decoded, map);
}

#[test]
fn random_changes_agree_with_the_model_and_stale_routes_are_caught() {
    for seed in 0..30 {
        let mut rng = Rng(seed);
        let keys = universe();
        let mut model = Model {
            owner: vec![1; keys.len()],
            keys,
            members: BTreeMap::from([(1, BTreeSet::from([1, 2, 3]))]),
            version: 1,
        };
        let mut map = ShardMap::new(1, [1, 2, 3]).unwrap();
        // Every version the map has had, as a client may still hold it.
        let mut history = vec![map.clone()];
        for _ in 0..150 {
            let before = map.clone();
            let pick_group = |rng: &mut Rng| rng.below(12) as u64;
            let node = |rng: &mut Rng| 1 + rng.below(6) as u64;
            let (done, applied) = match rng.below(6) {
                0 | 1 => {
                    let at = rng.below(model.keys.len());
                    let g = pick_group(&mut rng);
                    (map.split(&model.keys[at], g), model.split(at, g))
                }
                2 => {
                    let (l, r) = (pick_group(&mut rng), pick_group(&mut rng));
                    (map.merge(l, r), model.merge(l, r))
                }
                3 => {
                    let (g, n) = (pick_group(&mut rng), node(&mut rng));
                    (map.add_replica(g, n), model.change(g, None, Some(n)))
                }
                4 => {
                    let (g, n) = (pick_group(&mut rng), node(&mut rng));
                    (map.remove_replica(g, n), model.change(g, Some(n), None))
                }
                _ => {
                    let (g, from, to) = (pick_group(&mut rng), node(&mut rng), node(&mut rng));
                    let applied = from != to && model.change(g, Some(from), Some(to));
                    (map.move_replica(g, from, to), applied)
                }
            };
            assert_eq!(done.is_ok(), applied, "seed {seed}: {done:?}");
            match done {
                Ok(()) => history.push(map.clone()),
                Err(e) => {
                    assert!(matches!(e, bloomkv::Error::InvalidArgument(_)), "{e:?}");
                    assert_eq!(map, before, "a refused change changed the map");
                }
            }
            check_against(&map, &model, &mut rng);

            // A request routed by any older map: served where that map was still right about
            // its key, redirected to the key's group otherwise.
            let old = &history[rng.below(history.len())];
            let key = &model.keys[rng.below(model.keys.len())];
            let (then, now) = (old.group_of(key), map.group_of(key));
            let want = match then == now {
                true => Route::Serve,
                false => Route::Stale { version: map.version(), group: now },
            };
            assert_eq!(map.check_route(key, old.version(), then), want);
            // The other way round: a node whose map is older than the request's.
            let want = match then == now {
                true => Route::Serve,
                false => Route::Behind { version: old.version() },
            };
            assert_eq!(old.check_route(key, map.version(), now), want);
        }
        assert!(map.len() > 1, "seed {seed} never split");
    }
}

#[test]
fn every_damaged_or_cut_encoding_is_an_error() {
    let mut map = ShardMap::new(1, [1, 2, 3]).unwrap();
    map.split(b"g", 2).unwrap();
    map.split(b"p", 3).unwrap();
    map.move_replica(3, 1, 4).unwrap();
    let bytes = map.encode();
    for i in 0..bytes.len() {
        for bit in [0x01, 0x10, 0x80] {
            let mut damaged = bytes.clone();
            damaged[i] ^= bit;
            let err = ShardMap::decode(&damaged).unwrap_err();
            assert!(matches!(err, bloomkv::Error::Corruption { .. }), "byte {i}: {err:?}");
        }
        assert!(ShardMap::decode(&bytes[..i]).is_err(), "cut at {i}");
    }
    let mut longer = bytes.clone();
    longer.insert(bytes.len() - 4, 0);
    assert!(ShardMap::decode(&longer).is_err());
}

/// A body with its checksum made right: what decoding must still refuse.
fn sealed(body: &[u8]) -> Vec<u8> {
    let mut bytes = body.to_vec();
    bytes.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    bytes
}

fn range(out: &mut Vec<u8>, start: &[u8], group: u64, members: &[u64]) {
    out.extend_from_slice(&(start.len() as u32).to_le_bytes());
    out.extend_from_slice(start);
    out.extend_from_slice(&group.to_le_bytes());
    out.extend_from_slice(&(members.len() as u32).to_le_bytes());
    for m in members {
        out.extend_from_slice(&m.to_le_bytes());
    }
}

fn body(version: u64, ranges: &[(&[u8], u64, &[u64])]) -> Vec<u8> {
    let mut out = vec![1u8];
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(ranges.len() as u32).to_le_bytes());
    for (start, group, members) in ranges {
        range(&mut out, start, *group, members);
    }
    out
}

#[test]
fn well_sealed_bytes_that_break_a_rule_are_refused() {
    let good = body(3, &[(b"", 1, &[1, 2]), (b"m", 2, &[3])]);
    let map = ShardMap::decode(&sealed(&good)).unwrap();
    assert_eq!((map.version(), map.group_of(b"z")), (3, 2));

    let cases: Vec<(Vec<u8>, &str)> = vec![
        (body(3, &[(b"a", 1, &[1])]), "does not start at the empty key"),
        (body(3, &[(b"", 1, &[1]), (b"m", 2, &[1]), (b"m", 3, &[1])]), "does not start after"),
        (body(3, &[(b"", 1, &[1]), (b"m", 2, &[1]), (b"f", 3, &[1])]), "does not start after"),
        (body(3, &[(b"", 1, &[1]), (b"m", 1, &[1])]), "two ranges"),
        (body(3, &[(b"", 1, &[1]), (b"m", 2, &[])]), "no members"),
        (body(3, &[(b"", 1, &[2, 1])]), "members out of order"),
        (body(3, &[(b"", 1, &[1, 1])]), "members out of order"),
        (body(3, &[]), "no ranges"),
        (body(0, &[(b"", 1, &[1])]), "version 0"),
    ];
    for (body, want) in cases {
        let err = ShardMap::decode(&sealed(&body)).unwrap_err().to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
    // Counts and lengths far beyond the bytes: refused before anything that large is
    // allocated.
    let mut huge_count = good.clone();
    huge_count[9..13].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut huge_start = good.clone();
    huge_start[13..17].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut huge_members = good.clone();
    huge_members[25..29].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut other_format = good.clone();
    other_format[0] = 2;
    for (damaged, want) in [
        (huge_count, "ranges in"),
        (huge_start, "cut short"),
        (huge_members, "members in"),
        (other_format, "format 2"),
    ] {
        let err = ShardMap::decode(&sealed(&damaged)).unwrap_err().to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
    // Random bodies, sealed: an error or a valid map, never a panic.
    let mut rng = Rng(7);
    for _ in 0..2000 {
        let mut body = good.clone();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(body.len());
            body[i] = rng.next() as u8;
        }
        body.truncate(body.len() - rng.below(3));
        if let Ok(map) = ShardMap::decode(&sealed(&body)) {
            map.validate().unwrap();
        }
    }
}

#[test]
fn refused_changes_say_why() {
    let mut map = ShardMap::new(1, [1]).unwrap();
    assert!(ShardMap::new(1, []).is_err());
    let err = |r: Result<(), bloomkv::Error>| r.unwrap_err().to_string();
    assert!(err(map.split(b"", 2)).contains("starts at"));
    map.split(b"k", 2).unwrap();
    assert!(err(map.split(b"k", 3)).contains("starts at"));
    assert!(err(map.split(b"x", 2)).contains("in the map already"));
    let long = vec![b'k'; bloomkv_raft::shard::MAX_SPLIT_KEY_BYTES + 1];
    assert!(err(map.split(&long, 3)).contains("split key of"));
    assert!(err(map.merge(2, 1)).contains("does not start where"));
    assert!(err(map.merge(1, 9)).contains("no group 9"));
    assert!(err(map.remove_replica(1, 1)).contains("last replica"));
    assert!(err(map.add_replica(1, 1)).contains("already"));
    assert!(err(map.move_replica(1, 2, 3)).contains("holds no replica"));
    assert_eq!(map.version(), 2);
    assert_eq!(map.unused_group_id(), 3);
    let keys: Vec<&[u8]> = vec![b"a", b"z", b"b", b"k"];
    let by_group = map.by_group(keys);
    assert_eq!(by_group[&1], [&b"a"[..], b"b"]);
    assert_eq!(by_group[&2], [&b"z"[..], b"k"]);
}
