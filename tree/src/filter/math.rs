//! The arithmetic of Bloom filters: expected false-positive rates, the choice of k, and the
//! key-count estimate. Kept apart from the bit twiddling so the theory can be read (and
//! tested) on its own.

/// Bits in one line of the blocked filter: one 64-byte cache line.
pub const LINE_BITS: u32 = 512;

/// The most probes either filter will use; beyond this the probe cost grows for a gain too
/// small to measure.
pub const MAX_PROBES: u32 = 24;

/// ln P(X = i) for X ~ Poisson(lambda), computed in log space so large `i` cannot overflow.
#[cfg(test)]
fn ln_poisson(i: u64, lambda: f64) -> f64 {
    let mut ln_fact = 0.0;
    for j in 2..=i {
        ln_fact += (j as f64).ln();
    }
    i as f64 * lambda.ln() - lambda - ln_fact
}

/// Expected false-positive rate of a blocked Bloom filter with lines of `line_bits` bits,
/// `lambda` keys per line on average and `k` probes per key (Putze, Sanders, Singler 2007):
///
/// FPR = Σᵢ Pois(i; λ) · (1 − (1 − 1/B)^(i·k))^k
///
/// A line's load is Poisson-distributed; the filter's rate is the load-weighted mean of the
/// classic rate of a B-bit filter holding i keys.
pub fn blocked_fpr(lambda: f64, k: u32, line_bits: u32) -> f64 {
    if lambda <= 0.0 || k == 0 {
        return if k == 0 { 1.0 } else { 0.0 };
    }
    // The sum below takes O(lambda) terms. Past about 50 expected probes per bit every line
    // is saturated and the rate is 1.0 to double precision; stopping here also keeps a
    // filter whose key count is absurd (a decoded header) from looping for ages.
    if lambda * k as f64 > 50.0 * line_bits as f64 {
        return 1.0;
    }
    let ln_keep = (1.0 - 1.0 / line_bits as f64).ln();
    // Sum far enough into the tail that the remainder is negligible (> 12 standard deviations).
    let upper = (lambda + 12.0 * lambda.sqrt() + 30.0).ceil() as u64;
    let mut total = 0.0;
    let mut ln_p = -lambda; // ln Pois(0)
    for i in 0..=upper {
        if i > 0 {
            ln_p += lambda.ln() - (i as f64).ln();
        }
        let set = 1.0 - (ln_keep * (i * k as u64) as f64).exp();
        total += ln_p.exp() * set.powi(k as i32);
    }
    total.min(1.0)
}

/// Expected false-positive rate of a classic Bloom filter of `m` bits holding `n` keys with
/// `k` probes: (1 − (1 − 1/m)^(k·n))^k.
pub fn classic_fpr(n: f64, m: f64, k: u32) -> f64 {
    if n <= 0.0 {
        return 0.0;
    }
    if m <= 0.0 || k == 0 {
        return 1.0;
    }
    let set = 1.0 - ((1.0 - 1.0 / m).ln() * k as f64 * n).exp();
    set.powi(k as i32)
}

/// The k that minimises [`blocked_fpr`] at `bits_per_key`.
///
/// The optimum is found by evaluating the formula, not assumed: the uneven load of lines
/// makes extra probes cost more than they do in a classic filter (an overloaded line is
/// already dense), so the blocked optimum sits below ln 2 · bits/key, approaching
/// bits/key / 2 as bits per key grow.
pub fn optimal_blocked_probes(bits_per_key: f64) -> u32 {
    let lambda = LINE_BITS as f64 / bits_per_key;
    let mut best = (1, f64::INFINITY);
    for k in 1..=MAX_PROBES {
        let f = blocked_fpr(lambda, k, LINE_BITS);
        // Ties go to the smaller k: fewer probes, same accuracy.
        if f < best.1 * (1.0 - 1e-9) {
            best = (k, f);
        }
    }
    best.0
}

/// The classic choice k = round(ln 2 · bits/key), clamped to [1, MAX_PROBES].
pub fn classic_probes(bits_per_key: f64) -> u32 {
    ((std::f64::consts::LN_2 * bits_per_key).round() as u32).clamp(1, MAX_PROBES)
}

/// Estimated number of keys in a filter of `m` bits with `x` bits set and `k` probes:
/// n ≈ −(m/k)·ln(1 − x/m) (Swamidass and Baldi, 2007). Infinite when every bit is set.
pub fn estimate_keys(m: f64, x: f64, k: u32) -> f64 {
    if m <= 0.0 || k == 0 {
        return 0.0;
    }
    if x >= m {
        return f64::INFINITY;
    }
    -(m / k as f64) * (1.0 - x / m).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_helper_matches_direct_formula() {
        let direct = (-3.0f64).exp() * 3.0f64.powi(4) / 24.0;
        assert!((ln_poisson(4, 3.0).exp() - direct).abs() < 1e-12);
    }

    #[test]
    fn blocked_optimum_is_below_classic_and_matches_published_rates() {
        for bpk in [4.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0] {
            let kb = optimal_blocked_probes(bpk);
            assert!(kb <= classic_probes(bpk), "bpk {bpk}: blocked k {kb}");
        }
        // Published figures for B = 512: ~0.95% at 10 bits/key, ~0.085% at 16.
        let f10 = blocked_fpr(51.2, optimal_blocked_probes(10.0), LINE_BITS);
        assert!((0.0090..0.0100).contains(&f10), "{f10}");
        let f16 = blocked_fpr(32.0, optimal_blocked_probes(16.0), LINE_BITS);
        assert!((0.0007..0.0010).contains(&f16), "{f16}");
        // Classic at 10 bits/key, k = 7: ~0.82%.
        let c10 = classic_fpr(1e6, 1e7, 7);
        assert!((0.0080..0.0084).contains(&c10), "{c10}");
    }

    #[test]
    fn key_estimate_inverts_expected_fill() {
        let (m, n, k) = (1e6, 1e5, 7u32);
        let expected_set = m * (1.0 - (-(k as f64) * n / m).exp());
        let est = estimate_keys(m, expected_set, k);
        assert!((est - n).abs() / n < 1e-9);
        assert!(estimate_keys(m, m, k).is_infinite());
    }
}
