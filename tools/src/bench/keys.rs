//! What the benchmark writes and asks for: keys, values, and the skewed key chooser.
//!
//! Present keys are the even numbers `2·i` (i in `0..keys`) written as 16 ASCII decimal digits;
//! absent keys are the odd numbers in between. Every absent key therefore sorts between two
//! present ones and lands inside some table's key range, so only a filter (never the range
//! check) can spare a table for it.
//!
//! With `--keys-per-prefix K` (the prefix workloads), a key is a prefix of 8 decimal digits
//! and a suffix of 8: entry `i` has prefix `2·⌊i/K⌋` and suffix `i mod K`, so each present
//! prefix holds K keys; the absent keys of the point workloads keep their prefix and take
//! suffix `K + i mod K` (after the present ones, still inside the tables' ranges), and the
//! absent prefixes are the odd numbers, each between two present ones.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes in every key, as in db_bench.
pub const KEY_BYTES: usize = 16;

/// Bytes of a key's prefix in the prefix layout (`PrefixExtractor::Fixed(8)`).
pub const PREFIX_BYTES: usize = 8;

/// Keys per prefix, 0 for the flat layout. Set once, before any key is made: every phase
/// and thread must agree on it, and threading it through every key call site would touch
/// every workload for a setting only the prefix workloads change.
static KEYS_PER_PREFIX: AtomicU64 = AtomicU64::new(0);

/// Chooses the layout: `k` keys per prefix, or 0 for the flat one.
pub fn set_keys_per_prefix(k: u64) {
    KEYS_PER_PREFIX.store(k, Ordering::Relaxed);
}

/// Keys per prefix (0: the flat layout).
pub fn keys_per_prefix() -> u64 {
    KEYS_PER_PREFIX.load(Ordering::Relaxed)
}

/// Present prefixes among `keys` entries.
pub fn prefixes(keys: u64) -> u64 {
    match keys_per_prefix() {
        0 => keys,
        k => keys.div_ceil(k),
    }
}

fn format_half(mut n: u64, out: &mut [u8]) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// A key's number over this is its prefix's number, in the prefix layout.
pub const PREFIX_SCALE: u64 = 100_000_000;

/// The number key `i` of the layout stands for (prefix and suffix as one 16-digit number).
fn prefixed(prefix: u64, suffix: u64) -> u64 {
    prefix * PREFIX_SCALE + suffix
}

/// The number of the `i`-th present entry's key.
pub fn present_number(i: u64) -> u64 {
    present_number_in(keys_per_prefix(), i)
}

/// The number of the `i`-th absent key of the point workloads.
pub fn absent_number(i: u64) -> u64 {
    absent_number_in(keys_per_prefix(), i)
}

/// [`present_number`] at `k` keys per prefix.
fn present_number_in(k: u64, i: u64) -> u64 {
    match k {
        0 => 2 * i,
        k => prefixed(2 * (i / k), i % k),
    }
}

/// [`absent_number`] at `k` keys per prefix.
fn absent_number_in(k: u64, i: u64) -> u64 {
    match k {
        0 => 2 * i + 1,
        k => prefixed(2 * (i / k), k + i % k),
    }
}

/// The prefix of the `j`-th present prefix.
pub fn present_prefix(j: u64, out: &mut [u8; PREFIX_BYTES]) {
    format_half(2 * j, out);
}

/// A prefix no key has, sorting just after the `j`-th present one.
pub fn absent_prefix(j: u64, out: &mut [u8; PREFIX_BYTES]) {
    format_half(2 * j + 1, out);
}

/// The 16-byte key of number `n`: zero-padded decimal, so byte order equals numeric order.
#[inline]
pub fn format_key(mut n: u64, out: &mut [u8; KEY_BYTES]) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// The key of the `i`-th present entry.
#[inline]
pub fn present_key(i: u64, out: &mut [u8; KEY_BYTES]) {
    format_key(present_number(i), out);
}

/// A key that is never written, sorting just after the `i`-th present entry (flat layout),
/// or after the present keys of its prefix (prefix layout).
#[inline]
pub fn absent_key(i: u64, out: &mut [u8; KEY_BYTES]) {
    format_key(absent_number(i), out);
}

/// A pool of pseudo-random bytes that values are sliced from, so producing a value costs no
/// random-number generation inside the timed loop.
pub struct ValuePool {
    bytes: Vec<u8>,
    value_bytes: usize,
}

impl ValuePool {
    /// A pool for values of `value_bytes` bytes. Half of each value's bytes are random
    /// lowercase letters and half repeat them, so values compress to roughly half (db_bench's
    /// default compression ratio of 0.5) when `--compression zstd` is chosen.
    pub fn new(value_bytes: usize, seed: u64) -> Self {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x7661_6c75_6573);
        let len = (1 << 20) + value_bytes;
        let mut bytes = Vec::with_capacity(len);
        while bytes.len() < len {
            let run: Vec<u8> = (0..50).map(|_| rng.gen_range(b'a'..=b'z')).collect();
            bytes.extend_from_slice(&run);
            bytes.extend_from_slice(&run);
        }
        bytes.truncate(len);
        ValuePool { bytes, value_bytes }
    }

    /// The value written for operation number `n` (different operations get different
    /// slices of the pool).
    #[inline]
    pub fn value(&self, n: u64) -> &[u8] {
        let span = self.bytes.len() - self.value_bytes;
        // An odd multiplier spreads consecutive operations over the pool.
        let start = (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) as usize % span.max(1);
        &self.bytes[start..start + self.value_bytes]
    }
}

/// YCSB's scrambled zipfian generator (Gray et al., "Quickly generating billion-record
/// synthetic databases", as implemented in YCSB's `ZipfianGenerator`): item ranks follow a
/// zipfian distribution with exponent θ, and each rank is hashed to an item so the hot items
/// are spread over the key space instead of clustered at its start.
#[derive(Debug, Clone)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    /// θ used by YCSB's core workloads.
    pub const YCSB_THETA: f64 = 0.99;

    /// A generator over `items` items (at least 1) with exponent `theta` in (0, 1).
    pub fn new(items: u64, theta: f64) -> Self {
        let items = items.max(1);
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(items);
        let zeta2 = zeta(2.min(items));
        let eta = if items <= 2 {
            0.0
        } else {
            (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        };
        Zipfian { items, theta, alpha: 1.0 / (1.0 - theta), zetan, eta }
    }

    /// The rank (0 = most popular) for a uniform sample `u` in [0, 1).
    #[inline]
    pub fn rank(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.items - 1);
        }
        let r = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.items - 1)
    }

    /// The item for a uniform sample `u` in [0, 1): the rank, scrambled with FNV-1a.
    #[inline]
    pub fn item(&self, u: f64) -> u64 {
        fnv1a(self.rank(u)) % self.items
    }
}

/// 64-bit FNV-1a over the little-endian bytes of `x`, as YCSB scrambles ranks.
#[inline]
fn fnv1a(x: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in x.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_numerically_and_absent_ones_fall_between() {
        let (mut a, mut b, mut c) = ([0u8; 16], [0u8; 16], [0u8; 16]);
        present_key(41, &mut a);
        absent_key(41, &mut b);
        present_key(42, &mut c);
        assert_eq!(&a, b"0000000000000082");
        assert!(a < b && b < c);
    }

    #[test]
    fn prefixed_keys_group_by_prefix_and_absent_ones_stay_inside() {
        // The pure forms: the layout itself is process-wide, and tests run in parallel.
        assert_eq!(present_number_in(3, 4), 200_000_001);
        assert_eq!(absent_number_in(3, 4), 200_000_004);
        assert!(absent_number_in(3, 4) < present_number_in(3, 6));
        assert!(present_number_in(3, 5) < absent_number_in(3, 5));
        assert_eq!(present_number_in(0, 4), 8);
        let mut p = [0u8; PREFIX_BYTES];
        absent_prefix(1, &mut p);
        assert_eq!(&p, b"00000003");
    }

    #[test]
    fn zipfian_is_skewed_towards_low_ranks() {
        let z = Zipfian::new(1000, Zipfian::YCSB_THETA);
        let samples = 100_000;
        let mut top10 = 0;
        for i in 0..samples {
            let u = (i as f64 + 0.5) / samples as f64;
            let r = z.rank(u);
            assert!(r < 1000);
            if r < 10 {
                top10 += 1;
            }
        }
        // With θ = 0.99 over 1000 items the 10 most popular take about 39% of draws; uniform
        // choice would give them 1%.
        let share = top10 as f64 / samples as f64;
        assert!((0.30..0.50).contains(&share), "{share}");
    }

    #[test]
    fn values_have_the_requested_length() {
        let p = ValuePool::new(100, 1);
        for n in [0, 1, 12345, u64::MAX] {
            assert_eq!(p.value(n).len(), 100);
        }
    }
}
