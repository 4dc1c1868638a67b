//! The cache-line-blocked Bloom filter (Putze, Sanders, Singler 2007; the same family as
//! RocksDB's FastLocalBloom).
//!
//! The bit array is a sequence of 512-bit blocks, each exactly one 64-byte cache line and
//! allocated 64-byte aligned, so all k probes of one key touch one cache line: an
//! out-of-cache lookup costs one miss instead of k.
//!
//! A key's 64-bit hash `h` is split in two independent halves:
//! - the upper 32 bits pick the block with a multiply-shift "fast range"
//!   (`(h >> 32) * num_blocks >> 32`), which maps uniformly onto any block count without `%`;
//! - the lower 32 bits seed the probes: probe i sets bit `x_i >> 23` (the top 9 bits, 0..512)
//!   of the block, where `x_0 = h as u32` and `x_{i+1} = x_i · 0x9E3779B9 mod 2³²`. Each
//!   multiplication by an odd constant is a bijection that moves fresh bits into the top.

use std::sync::Arc;

use super::math::{self, BLOCK_BITS};
use super::prefetch;

/// One 64-byte cache line of filter bits. The alignment attribute is what guarantees that a
/// block never straddles two cache lines; `Vec<Block>` inherits it without any `unsafe`.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct Block(pub(crate) [u64; 8]);

const _: () = assert!(std::mem::size_of::<Block>() == 64 && std::mem::align_of::<Block>() == 64);

/// Multiplier that re-mixes the probe state between probes (2³² / golden ratio, odd).
const PROBE_MULT: u32 = 0x9E37_79B9;

/// A blocked Bloom filter held in RAM. Cloning shares the bit array: the engine keeps a clone
/// of each table's filter beside its key range (see `crate::version::lookup`), so a probe
/// reaches the bits without first loading the table.
#[derive(Clone, PartialEq)]
pub struct BlockedBloom {
    blocks: Arc<[Block]>,
    num_probes: u32,
    num_keys: u64,
    bits_per_key: f64,
}

impl std::fmt::Debug for BlockedBloom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockedBloom")
            .field("blocks", &self.blocks.len())
            .field("num_probes", &self.num_probes)
            .field("num_keys", &self.num_keys)
            .field("bits_per_key", &self.bits_per_key)
            .finish()
    }
}

#[inline(always)]
fn block_index(hash: u64, num_blocks: usize) -> usize {
    (((hash >> 32) * num_blocks as u64) >> 32) as usize
}

impl BlockedBloom {
    /// Builds a filter over the given key hashes at `bits_per_key` (requested; the array is
    /// rounded up to whole blocks).
    pub fn from_hashes(hashes: &[u64], bits_per_key: f64) -> Self {
        let num_probes = math::optimal_blocked_probes(bits_per_key);
        let total_bits = (hashes.len() as f64 * bits_per_key).ceil() as u64;
        let num_blocks = total_bits.div_ceil(BLOCK_BITS as u64) as usize;
        let num_blocks = if hashes.is_empty() { 0 } else { num_blocks.max(1) };
        let mut blocks = vec![Block::default(); num_blocks];
        for &h in hashes {
            let block = &mut blocks[block_index(h, num_blocks)].0;
            let mut x = h as u32;
            for _ in 0..num_probes {
                let bit = x >> 23;
                block[(bit >> 6) as usize] |= 1u64 << (bit & 63);
                x = x.wrapping_mul(PROBE_MULT);
            }
        }
        BlockedBloom {
            blocks: blocks.into(),
            num_probes,
            num_keys: hashes.len() as u64,
            bits_per_key,
        }
    }

    /// Reassembles a filter from decoded parts (see [`super::Filter::decode`]).
    pub(crate) fn from_parts(
        blocks: Vec<Block>,
        num_probes: u32,
        num_keys: u64,
        bits_per_key: f64,
    ) -> Self {
        BlockedBloom { blocks: blocks.into(), num_probes, num_keys, bits_per_key }
    }

    pub(crate) fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// True if the key with this hash may be in the set; false means certainly absent.
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        if self.blocks.is_empty() {
            return false;
        }
        let block = &self.blocks[block_index(hash, self.blocks.len())].0;
        let mut x = hash as u32;
        for _ in 0..self.num_probes {
            let bit = x >> 23;
            if block[(bit >> 6) as usize] & (1u64 << (bit & 63)) == 0 {
                return false;
            }
            x = x.wrapping_mul(PROBE_MULT);
        }
        true
    }

    /// Starts loading the one cache line [`BlockedBloom::may_contain_hash`] will read for
    /// `hash`, without waiting for it. A lookup that will consult several tables prefetches
    /// each table's line first, so their misses overlap instead of following one another.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        if !self.blocks.is_empty() {
            prefetch(&self.blocks[block_index(hash, self.blocks.len())]);
        }
    }

    /// Probes many hashes at once: first every key's cache line is prefetched, then each is
    /// probed, so the memory system works on many misses in parallel instead of one at a time.
    /// `out[i]` receives the answer for `hashes[i]`.
    ///
    /// # Panics
    /// If `out` is shorter than `hashes`.
    pub fn may_contain_batch(&self, hashes: &[u64], out: &mut [bool]) {
        assert!(out.len() >= hashes.len(), "output slice shorter than input");
        if self.blocks.is_empty() {
            out[..hashes.len()].fill(false);
            return;
        }
        let n = self.blocks.len();
        for &h in hashes {
            prefetch(&self.blocks[block_index(h, n)]);
        }
        for (o, &h) in out.iter_mut().zip(hashes) {
            *o = self.may_contain_hash(h);
        }
    }

    /// Number of 512-bit blocks.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Probes per key.
    pub fn num_probes(&self) -> u32 {
        self.num_probes
    }

    /// Keys added when the filter was built.
    pub fn num_keys(&self) -> u64 {
        self.num_keys
    }

    /// The bits per key that was asked for.
    pub fn requested_bits_per_key(&self) -> f64 {
        self.bits_per_key
    }

    /// Size of the bit array in bits.
    pub fn num_bits(&self) -> u64 {
        self.blocks.len() as u64 * BLOCK_BITS as u64
    }

    /// Bytes of RAM the bit array occupies.
    pub fn memory_bytes(&self) -> usize {
        self.blocks.len() * std::mem::size_of::<Block>()
    }

    /// Number of bits set.
    pub fn bits_set(&self) -> u64 {
        self.blocks.iter().flat_map(|b| b.0.iter()).map(|w| w.count_ones() as u64).sum()
    }

    /// False-positive rate the Poisson-mixture formula predicts for this filter's actual fill
    /// (keys per block after rounding to whole blocks).
    pub fn expected_fpr(&self) -> f64 {
        if self.blocks.is_empty() {
            return 0.0;
        }
        let lambda = self.num_keys as f64 / self.blocks.len() as f64;
        math::blocked_fpr(lambda, self.num_probes, BLOCK_BITS)
    }
}
