use proptest::prelude::*;

use super::wire::*;
use super::*;
use crate::coding::put_bytes;
use crate::key::ValueKind;
use crate::Error;

/// An operation as (keyspace, kind byte, key or start, value or end).
type Op = (KeyspaceId, u8, Vec<u8>, Vec<u8>);
const PUT: u8 = ValueKind::Put as u8;
const DELETE: u8 = ValueKind::Delete as u8;

fn build(ops: &[Op]) -> WriteBatch {
    let mut b = WriteBatch::new();
    for &(keyspace, kind, ref k, ref v) in ops {
        match kind {
            PUT => b.put_to(keyspace, k, v),
            DELETE => b.delete_to(keyspace, k),
            OP_MERGE => b.merge_to(keyspace, k, v),
            OP_RESERVED => b = WriteBatch::reserved(),
            OP_PUT_EXPIRING => {
                b.op_header(OP_PUT_EXPIRING, keyspace);
                put_bytes(&mut b.data, k);
                put_bytes(&mut b.data, v);
            }
            _ => b.delete_range_to(keyspace, k, v),
        }
    }
    b
}

fn ops_of(b: &WriteBatch) -> Vec<Op> {
    b.iter()
        .map(|(ks, op)| match op {
            BatchOp::Put { key, value } => (ks, PUT, key.to_vec(), value.to_vec()),
            BatchOp::Delete { key } => (ks, DELETE, key.to_vec(), Vec::new()),
            BatchOp::Merge { key, operand } => (ks, OP_MERGE, key.to_vec(), operand.to_vec()),
            BatchOp::MergeExpiring { key, stored } => {
                (ks, OP_MERGE_EXPIRING, key.to_vec(), stored.to_vec())
            }
            BatchOp::DeleteRange { start, end } => {
                (ks, OP_DELETE_RANGE, start.to_vec(), end.to_vec())
            }
            BatchOp::Reserved => (ks, OP_RESERVED, Vec::new(), Vec::new()),
            BatchOp::PutExpiring { key, stored } => {
                (ks, OP_PUT_EXPIRING, key.to_vec(), stored.to_vec())
            }
            BatchOp::PutTtl { key, stored } => (ks, OP_PUT_TTL, key.to_vec(), stored.to_vec()),
            BatchOp::BlobPut { key, reference } => {
                (ks, OP_BLOB_PUT, key.to_vec(), reference.to_vec())
            }
        })
        .collect()
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let bytes = || proptest::collection::vec(any::<u8>(), 0..40);
    let keyspace = || prop_oneof![Just(DEFAULT_KEYSPACE), 1..3u32, Just(KeyspaceId::MAX)];
    prop_oneof![
        (keyspace(), bytes(), bytes()).prop_map(|(ks, k, v)| (ks, PUT, k, v)),
        (keyspace(), bytes()).prop_map(|(ks, k)| (ks, DELETE, k, Vec::new())),
        (keyspace(), bytes(), bytes()).prop_map(|(ks, k, v)| (ks, OP_MERGE, k, v)),
        (keyspace(), bytes(), any::<u64>(), bytes()).prop_map(|(ks, k, e, v)| {
            (ks, OP_PUT_EXPIRING, k, crate::key::expiring_value(e, &v))
        }),
        (keyspace(), bytes(), bytes()).prop_filter_map("empty range", |(ks, a, b)| {
            (a != b).then(|| (ks, OP_DELETE_RANGE, a.clone().min(b.clone()), a.max(b)))
        }),
    ]
}

/// Which batches may be applied beside other writes: one put or delete, plain or
/// expiring, in any keyspace; nothing that reads combine or that covers a range, and no
/// batch of more than one op.
#[test]
fn single_overwrites_are_told_from_other_batches() {
    let one = |f: &dyn Fn(&mut WriteBatch)| {
        let mut b = WriteBatch::new();
        f(&mut b);
        (b.is_single_overwrite(), b.has_merge())
    };
    assert_eq!(one(&|b| b.put("k", "v")), (true, false));
    assert_eq!(one(&|b| b.put_to(7, b"k", b"v")), (true, false));
    assert_eq!(one(&|b| b.delete("k")), (true, false));
    assert_eq!(one(&|b| b.delete_to(7, b"k")), (true, false));
    assert_eq!(one(&|b| b.put_expiring_to(7, b"k", 9, b"v")), (true, false));
    assert_eq!(one(&|b| b.put_expiring_to(0, b"k", 9, b"v")), (true, false));
    // Not yet stamped: the write path turns it into an expiring put first.
    assert_eq!(one(&|b| b.put_ttl_to(0, b"k", 9, b"v")), (false, false));
    assert_eq!(one(&|b| b.merge("k", "1")), (false, true));
    assert_eq!(one(&|b| b.merge_to(7, b"k", b"1")), (false, true));
    assert_eq!(one(&|b| b.delete_range("a".."b")), (false, false));
    assert_eq!(one(&|_| ()), (false, false));
    let two_puts = |b: &mut WriteBatch| {
        b.put("k", "v");
        b.put("l", "v");
    };
    assert_eq!(one(&two_puts), (false, false));
    let put_and_merge = |b: &mut WriteBatch| {
        b.put("k", "v");
        b.merge("l", "1");
    };
    assert_eq!(one(&put_and_merge), (false, true));
    assert!(!WriteBatch::reserved().is_single_overwrite());
}

#[test]
fn expiring_puts_are_stamped_and_logged_as_documented() {
    let mut b = WriteBatch::new();
    b.put_with_ttl(b"t", b"v", std::time::Duration::from_millis(5));
    b.put_to(7, b"p", b"w");
    b.put(b"q", b"x");
    assert!(b.needs_stamp(false, |_| false), "a put with a time to live");
    // Keyspace 7 has a default time to live of 100 ms.
    let ttl_of = |ks| (ks == 7).then_some(100);
    let stamped = b.stamped(1000, ttl_of);
    assert!(!stamped.needs_stamp(true, |ks| ttl_of(ks).is_some()));
    let want: Vec<u8> = [
        &[0u8; 8][..],
        &[3, 0, 0, 0],
        &[OP_PUT_EXPIRING, 1, b't', 9],
        &1005u64.to_le_bytes(),
        b"v",
        &[OP_PUT_EXPIRING | IN_KEYSPACE, 7, 1, b'p', 9],
        &1100u64.to_le_bytes(),
        b"w",
        &[ValueKind::Put as u8, 1, b'q', 1, b'x'],
    ]
    .concat();
    assert_eq!(stamped.data(), &want[..]);
    assert_eq!(WriteBatch::from_record(want).unwrap(), stamped);
    // Unstamped, or with a value shorter than its expiry, a log record is corrupt.
    let e = WriteBatch::from_record(b.data().to_vec()).unwrap_err();
    assert!(e.to_string().contains("never logged"), "{e}");
    let short = [&[0u8; 8][..], &[1, 0, 0, 0], &[OP_PUT_EXPIRING, 1, b'k', 7], &[0; 7]].concat();
    let e = WriteBatch::from_record(short).unwrap_err();
    assert!(e.to_string().contains("8-byte expiry"), "{e}");
}

#[test]
fn layout_is_the_documented_one() {
    let mut b = WriteBatch::new();
    b.set_sequence(0x0102);
    b.put(b"k", b"vv");
    b.delete(b"");
    b.delete_range("a".."c");
    b.put_to(300, b"x", b"");
    let want: Vec<u8> = [
        &[0x02, 0x01, 0, 0, 0, 0, 0, 0][..],
        &[4, 0, 0, 0],
        &[1, 1, b'k', 2, b'v', b'v'],
        &[0, 0],
        &[2, 1, b'a', 1, b'c'],
        &[0x81, 0xac, 0x02, 1, b'x', 0],
    ]
    .concat();
    assert_eq!(b.data(), &want[..]);
    assert_eq!(b.sequence(), 0x0102);
    assert_eq!(b.approximate_bytes(), want.len());
    assert_eq!(
        ops_of(&b),
        vec![
            (0, PUT, b"k".to_vec(), b"vv".to_vec()),
            (0, DELETE, vec![], vec![]),
            (0, OP_DELETE_RANGE, b"a".to_vec(), b"c".to_vec()),
            (300, PUT, b"x".to_vec(), vec![]),
        ]
    );
}

#[test]
fn clear_resets_everything() {
    let mut b = WriteBatch::new();
    b.set_sequence(9);
    b.put("a", "b");
    b.clear();
    assert!(b.is_empty());
    assert_eq!(b.len(), 0);
    assert_eq!(b, WriteBatch::new());
    assert_eq!(b.iter().count(), 0);
}

#[test]
fn from_record_rejects_specific_damage() {
    let mut b = build(&[(0, PUT, b"key".to_vec(), b"value".to_vec())]);
    b.set_sequence(5);
    let good = b.data().to_vec();

    let mut bad_kind = good.clone();
    bad_kind[HEADER_LEN] = 8;
    let e = WriteBatch::from_record(bad_kind).unwrap_err();
    assert!(matches!(e, Error::Corruption { offset: 12, .. }), "{e}");

    let mut more_counted = good.clone();
    more_counted[8] = 2;
    assert!(WriteBatch::from_record(more_counted).unwrap_err().is_corruption());

    let mut fewer_counted = good.clone();
    fewer_counted[8] = 0;
    assert!(WriteBatch::from_record(fewer_counted).unwrap_err().is_corruption());

    let mut huge_len = good[..HEADER_LEN + 1].to_vec();
    huge_len.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(WriteBatch::from_record(huge_len).unwrap_err().is_corruption());

    let ok = WriteBatch::from_record(good.clone()).unwrap();
    assert_eq!(ok.sequence(), 5);

    // A range delete whose start is not below its end is never written, so it is damage.
    let mut r = WriteBatch::new();
    r.delete_range("a".."b");
    let mut empty_range = r.data().to_vec();
    *empty_range.last_mut().unwrap() = b'a';
    let e = WriteBatch::from_record(empty_range).unwrap_err();
    assert!(e.to_string().contains("start not below end"), "{e}");

    // The default keyspace is never written with an id, and ids are 32-bit.
    for id in [&[0u8][..], &[0x80, 0x80, 0x80, 0x80, 0x10]] {
        let mut forged = good[..HEADER_LEN].to_vec();
        forged.push(0x80 | PUT);
        forged.extend_from_slice(id);
        forged.extend_from_slice(&good[HEADER_LEN + 1..]);
        let e = WriteBatch::from_record(forged).unwrap_err();
        assert!(e.to_string().contains("keyspace id out of range"), "{e}");
    }
}

#[test]
fn reserved_op_takes_a_sequence_number_and_changes_nothing() {
    let mut b = WriteBatch::reserved();
    b.set_sequence(9);
    let want: Vec<u8> = [&[9, 0, 0, 0, 0, 0, 0, 0][..], &[1, 0, 0, 0], &[OP_RESERVED]].concat();
    assert_eq!(b.data(), &want[..]);
    assert_eq!(b.len(), 1);
    let decoded = WriteBatch::from_record(want.clone()).unwrap();
    assert_eq!(decoded.sequence(), 9);
    assert_eq!(decoded.iter().collect::<Vec<_>>(), vec![(0, BatchOp::Reserved)]);
    assert!(decoded.check(|_| false).is_ok());
    let mem = crate::memtable::MemTable::new();
    assert_eq!(decoded.insert_into(|_| Some(&mem), |_| None), 0);
    assert!(mem.is_empty());

    let mut trailing = want.clone();
    trailing.push(0);
    let e = WriteBatch::from_record(trailing).unwrap_err();
    assert!(e.to_string().contains("bytes after the last counted op"), "{e}");

    // Never on a keyspace, and never beside another op.
    let mut in_keyspace = want[..HEADER_LEN].to_vec();
    in_keyspace.extend_from_slice(&[OP_RESERVED | IN_KEYSPACE, 1]);
    let e = WriteBatch::from_record(in_keyspace).unwrap_err();
    assert!(e.to_string().contains("unknown kind"), "{e}");
    let mut with_put = build(&[(0, PUT, b"k".to_vec(), b"v".to_vec())]);
    with_put.data.push(OP_RESERVED);
    with_put.bump_count();
    let e = WriteBatch::from_record(with_put.data().to_vec()).unwrap_err();
    assert!(e.to_string().contains("more than one op"), "{e}");
}

#[test]
fn in_file_names_the_log() {
    let e = WriteBatch::from_record(vec![1, 2, 3]).unwrap_err();
    let e = e.in_file(std::path::Path::new("000003.log"), 4096);
    match e {
        Error::Corruption { file, offset, .. } => {
            assert_eq!(file, std::path::Path::new("000003.log"));
            assert_eq!(offset, 4096);
        }
        other => panic!("{other:?}"),
    }
}

proptest! {
    #[test]
    fn prop_round_trip(ops in proptest::collection::vec(op_strategy(), 0..30), seq in 0..crate::key::MAX_SEQNO) {
        let mut b = build(&ops);
        b.set_sequence(seq);
        prop_assert_eq!(b.len(), ops.len());
        let decoded = WriteBatch::from_record(b.data().to_vec()).unwrap();
        prop_assert_eq!(decoded.sequence(), seq);
        prop_assert_eq!(ops_of(&decoded), ops);
        prop_assert_eq!(&decoded, &b);
    }

    #[test]
    fn prop_every_truncation_is_corruption(ops in proptest::collection::vec(op_strategy(), 0..10)) {
        let b = build(&ops);
        let data = b.data();
        for cut in 0..data.len() {
            let r = WriteBatch::from_record(data[..cut].to_vec());
            prop_assert!(r.unwrap_err().is_corruption(), "cut at {}", cut);
        }
    }

    #[test]
    fn prop_random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        match WriteBatch::from_record(data.clone()) {
            // Accepted input must be a faithful encoding: re-encoding reproduces it.
            Ok(b) => {
                let rebuilt = build(&ops_of(&b));
                prop_assert_eq!(&rebuilt.data()[HEADER_LEN..], &data[HEADER_LEN..]);
                prop_assert_eq!(rebuilt.len(), b.len());
            }
            Err(e) => prop_assert!(e.is_corruption()),
        }
    }

    #[test]
    fn prop_random_tail_after_valid_header_never_panics(
        count in any::<u32>(),
        tail in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut data = vec![0u8; 8];
        data.extend_from_slice(&count.to_le_bytes());
        data.extend_from_slice(&tail);
        if let Err(e) = WriteBatch::from_record(data) {
            prop_assert!(e.is_corruption());
        }
    }
}

#[test]
fn a_blob_put_carries_its_reference_and_a_malformed_one_is_refused() {
    let r = crate::blob::BlobRef { file: 12, offset: 40, len: 20 << 20, crc: 7 };
    let mut b = WriteBatch::new();
    b.put_blob_ref_to(3, b"big", &r.encode());
    b.set_sequence(5);
    let decoded = WriteBatch::from_record(b.data().to_vec()).unwrap();
    let ops: Vec<_> = decoded.iter().collect();
    assert_eq!(ops, vec![(3, BatchOp::BlobPut { key: b"big", reference: &r.encode() })]);
    // Its value is in the file: only the key counts against the limits.
    assert!(decoded.check(|_| true).is_ok());
    // Without its file the op is skipped, never inserted as a reference nothing can read.
    let mem = crate::memtable::MemTable::new();
    decoded.insert_into(|_| Some(&mem), |_| None);
    assert!(mem.is_empty());

    let mut bad = WriteBatch::new();
    bad.put_blob_ref_to(0, b"big", b"not a reference");
    let e = WriteBatch::from_record(bad.data().to_vec()).unwrap_err();
    assert!(e.to_string().contains("malformed blob reference"), "{e}");
}
