//! Value builders for the tests of large values and blob files.

use bloomkv::Db;

/// A value of `len` bytes, different for each `(seed, len)` (xorshift, so a failure replays).
pub fn value(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Writes at least `bytes` bytes of 900-byte values (keys `pad/...`), below the tests' blob
/// thresholds: a WAL segment holding them beside fewer bytes of large values is not worth
/// keeping as a blob file, so its flush copies the large values into a blob file of their own.
pub fn pad(db: &Db, bytes: usize) {
    for i in 0..bytes.div_ceil(900) {
        db.put(format!("pad/{i:05}"), value(i as u64, 900)).unwrap();
    }
}
