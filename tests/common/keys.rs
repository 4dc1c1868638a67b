//! Key builders. Tests that build a tree of a given shape (tables per level, where tables and
//! blocks split, which keys a filter or a range tombstone covers) depend on the exact bytes of
//! their keys, so each builder's bytes are fixed by the tests that use it: a test keeps the
//! builder it was written with, and a new format gets a builder of its own. A builder takes
//! the integer type its tests count in: the type of a random key number decides which numbers
//! a seeded generator draws.

/// `prefix` and `i` zero-padded to `digits`: such keys sort as their numbers do.
fn numbered(prefix: &str, digits: usize, i: u64) -> Vec<u8> {
    format!("{prefix}{i:0digits$}").into_bytes()
}

/// `key00000042`.
pub fn key8(i: u64) -> Vec<u8> {
    numbered("key", 8, i)
}

/// `key000042`.
pub fn key6(i: u64) -> Vec<u8> {
    numbered("key", 6, i)
}

/// `key00042`.
pub fn key5(i: usize) -> Vec<u8> {
    numbered("key", 5, i as u64)
}

/// `key0042`.
pub fn key4(i: u16) -> Vec<u8> {
    numbered("key", 4, i.into())
}

/// `key042`.
pub fn key3(i: u8) -> Vec<u8> {
    numbered("key", 3, i.into())
}

/// `k0042`.
pub fn k4(i: u32) -> Vec<u8> {
    numbered("k", 4, i.into())
}

/// `05/00042` for 42: key `k` in the group `k % 37`, whose keys all start with
/// [`group_prefix`], so prefix scans select real subsets.
pub fn grouped(k: u16) -> Vec<u8> {
    format!("{:02}/{:05}", k % 37, k).into_bytes()
}

/// The prefix every key of [`grouped`]'s group `g` starts with (`05/`); it sorts before them.
pub fn group_prefix(g: u8) -> Vec<u8> {
    format!("{g:02}/").into_bytes()
}

/// `w3/k00042`: writer `w`'s key `k`, so each writer has keys of its own.
pub fn writer_key(w: u64, k: u64) -> Vec<u8> {
    format!("w{w}/k{k:05}").into_bytes()
}

/// `i` in 16 decimal digits: a fixed-size key whose order is the numbers'.
pub fn decimal16(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k.copy_from_slice(format!("{i:016}").as_bytes());
    k
}

/// `i` big-endian, then `bloomkv!`: 16 bytes, distinct for distinct numbers.
pub fn be_tagged(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.to_be_bytes());
    k[8..].copy_from_slice(b"bloomkv!");
    k
}
