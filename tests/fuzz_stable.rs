//! Randomized fuzzing on stable Rust (the harness follows in the next commit).

use bloomkv::filter::FilterPolicy;

/// Regression (found by `fuzz_filter_decoder`): a decoded blocked filter whose header claims
/// an absurd key count made `expected_fpr` sum O(keys per block) Poisson terms — 2^64 for a
/// count of u64::MAX, a hang.
#[test]
fn expected_fpr_of_a_filter_with_an_absurd_key_count_is_immediate() {
    let keys = (0..100).map(|i| format!("key{i}"));
    let mut enc =
        bloomkv::filter::Filter::build(FilterPolicy::BlockedBloom { bits_per_key: 10.0 }, keys)
            .encode();
    enc[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let body = enc.len() - 4;
    let crc = bloomkv::coding::crc32(&[&enc[..body]]);
    enc[body..].copy_from_slice(&crc.to_le_bytes());
    let f = bloomkv::filter::Filter::decode(&enc).unwrap();
    assert_eq!(f.expected_fpr(), 1.0);
    // Saturation is real: at 2000 keys per 512-bit block nearly every probe hits a set bit.
    assert!(bloomkv::filter::math::blocked_fpr(2000.0, 7, 512) > 0.99);
}
