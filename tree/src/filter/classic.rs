//! The classic (unblocked) Bloom filter, kept as the baseline the blocked filter is measured
//! against. Its k probes land anywhere in the array, so an out-of-cache lookup can cost up
//! to k cache misses.
//!
//! Probe positions come from the same one 64-bit hash by double hashing (Kirsch and
//! Mitzenmacher 2006): `x_0 = h`, `x_{i+1} = x_i + δ (mod 2⁶⁴)` with the odd step
//! `δ = rotl(h, 21) | 1`, and probe i sets bit `fastrange64(x_i, m) = (x_i · m) >> 64`.

use super::math;
use crate::filter_memory::{Bits, Placement};
use crate::prefetch::prefetch;

/// A classic Bloom filter held in RAM. Cloning shares the bit array.
#[derive(Clone, PartialEq)]
pub struct ClassicBloom {
    words: Bits<u64>,
    num_bits: u64,
    num_probes: u32,
    pub(super) about: super::Described,
}

impl std::fmt::Debug for ClassicBloom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClassicBloom")
            .field("num_bits", &self.num_bits)
            .field("num_probes", &self.num_probes)
            .field("about", &self.about)
            .finish()
    }
}

#[inline(always)]
fn fastrange64(x: u64, m: u64) -> u64 {
    ((x as u128 * m as u128) >> 64) as u64
}

#[inline(always)]
fn step(hash: u64) -> u64 {
    hash.rotate_left(21) | 1
}

impl ClassicBloom {
    /// Builds a filter over the given key hashes at `bits_per_key`, with
    /// k = round(ln 2 · bits/key).
    pub fn from_hashes(hashes: &[u64], bits_per_key: f64) -> Self {
        let num_probes = math::classic_probes(bits_per_key);
        let num_bits = if hashes.is_empty() {
            0
        } else {
            ((hashes.len() as f64 * bits_per_key).ceil() as u64).max(64)
        };
        let words = Bits::new_with(num_bits.div_ceil(64) as usize, Placement::Heap, |words| {
            for &h in hashes {
                let (mut x, d) = (h, step(h));
                for _ in 0..num_probes {
                    let bit = fastrange64(x, num_bits);
                    words[(bit >> 6) as usize] |= 1u64 << (bit & 63);
                    x = x.wrapping_add(d);
                }
            }
        });
        let about = super::Described::whole_keys(hashes.len() as u64, bits_per_key);
        ClassicBloom { words, num_bits, num_probes, about }
    }

    /// Reassembles a filter from decoded parts (see [`super::Filter::decode`]).
    pub fn from_parts(
        words: Bits<u64>,
        num_bits: u64,
        num_probes: u32,
        about: super::Described,
    ) -> Self {
        ClassicBloom { words, num_bits, num_probes, about }
    }

    #[cfg(test)]
    pub fn bits(&self) -> &Bits<u64> {
        &self.words
    }

    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// True if the key with this hash may be in the set; false means certainly absent.
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        if self.num_bits == 0 {
            return false;
        }
        let (mut x, d) = (hash, step(hash));
        for _ in 0..self.num_probes {
            let bit = fastrange64(x, self.num_bits);
            if self.words[(bit >> 6) as usize] & (1u64 << (bit & 63)) == 0 {
                return false;
            }
            x = x.wrapping_add(d);
        }
        true
    }

    /// Starts loading every word [`ClassicBloom::may_contain_hash`] may read for `hash` (up
    /// to k cache lines), without waiting for them.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        if self.num_bits == 0 {
            return;
        }
        let (mut x, d) = (hash, step(hash));
        for _ in 0..self.num_probes {
            prefetch(&self.words[(fastrange64(x, self.num_bits) >> 6) as usize]);
            x = x.wrapping_add(d);
        }
    }

    /// Size of the bit array in bits.
    pub fn num_bits(&self) -> u64 {
        self.num_bits
    }

    /// Probes per key.
    pub fn num_probes(&self) -> u32 {
        self.num_probes
    }

    /// Bytes of RAM the bit array occupies.
    pub fn memory_bytes(&self) -> usize {
        self.words.bytes()
    }

    /// Number of bits set.
    pub fn bits_set(&self) -> u64 {
        self.words.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// False-positive rate the classic formula predicts for this filter's fill.
    pub fn expected_fpr(&self) -> f64 {
        math::classic_fpr(self.about.num_keys as f64, self.num_bits as f64, self.num_probes)
    }
}
