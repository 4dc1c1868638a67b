//! One filter memory budget split across the sorted runs of the tree, after Monkey (Dayan,
//! Athanassoulis, Idreos, SIGMOD 2017).
//!
//! A lookup for an absent key asks one filter per *run* — every L0 table, then one table per
//! deeper level — and reads a data block wherever a filter wrongly says "maybe". With run `i`
//! holding `n_i` keys at `b_i` bits per key, its false-positive rate is `f(b_i)`, and the
//! expected number of wasted block reads per absent lookup is
//!
//! ```text
//! R = Σ f(b_i)        subject to   Σ n_i · b_i = M   (the memory budget, in bits)
//! ```
//!
//! With the same bits per key everywhere, every run costs the same, so the tiny runs above
//! the last level cost as much as the last level while holding a sliver of the keys. A bit
//! given to a small run lowers its rate much more per bit of memory than a bit given to the
//! large one. At the optimum the marginal gain per bit of memory is the same for every run
//! (Lagrange): `−f'(b_i) = μ · n_i`. For an idealised Bloom filter `f(b) = e^(−b·(ln 2)²)`,
//! `−f' = (ln 2)² · f`, so `f(b_i) ∝ n_i`: rates proportional to run sizes.
//!
//! The engine's filter is the blocked one, whose curve is neither that exponential nor smooth:
//! its rate falls more slowly at high bits per key (a line's uneven load sets a floor), and
//! the integer probe count `k` the builder picks changes in steps, leaving a slight kink at
//! each step. So [`allocate`] does not assume `f(b_i) ∝ n_i`; it minimises `R` numerically
//! over the blocked filter's own curve ([`fpr`]: the Poisson-mixture formula of
//! [`super::math::blocked_fpr`] at [`super::math::optimal_blocked_probes`]), tabulated once
//! every 1/8 bit per key from 0.5 to [`MAX_RUN_BITS_PER_KEY`] and replaced by its lower convex
//! hull, with the point "no filter" (0 bits, rate 1) in front. On the hull each run's term
//! `f(b) + μ·n_i·b` is minimised at the vertex where the slope of the next segment stops
//! paying for its bits, found by binary search over the hull's (increasing) slopes; `μ` is
//! found by bisection so that the runs' bits add up to the budget. Between the last two
//! values of `μ` only the runs whose vertex changed differ, and the allocation is the blend
//! of the two that spends the budget exactly. The hull is why a run may get no filter at
//! all: from "no filter" the curve first bends the wrong way (half a bit per key buys little),
//! so on the hull the smallest filter holds one bit per key and a run below that is a blend
//! of "none" and one bit. A run left there with at least half a bit per key (the least a
//! filter policy accepts) keeps what it has — a real filter of that size beats none — and one
//! left with less gets none, the others then sharing the budget again.

use std::sync::OnceLock;

use super::math::{self, LINE_BITS};
use super::ribbon;

/// The most bits per key [`allocate`] gives one run. Beyond this the blocked filter's rate is
/// below 10⁻⁸ and further bits buy nothing a lookup could notice; the cap also bounds what a
/// tiny run (a flush of a few keys into a large tree) is given.
pub const MAX_RUN_BITS_PER_KEY: f64 = 64.0;

/// The largest average [`allocate`] works with (larger ones are taken as this): at 32 bits per
/// key a blocked filter's rate is already about 5·10⁻⁶, and the cap on one run leaves room to
/// give the small runs more.
pub const MAX_AVERAGE_BITS_PER_KEY: f64 = 32.0;

/// Tabulation step of the curve, in bits per key.
const STEP: f64 = 0.125;

/// The lowest tabulated bits per key (the smallest a filter policy accepts).
const LOWEST: f64 = 0.5;

/// The fewest bits per key (on a 1/8-bit grid, at most [`MAX_RUN_BITS_PER_KEY`]) at which a
/// blocked Bloom filter's expected false-positive rate ([`fpr`]) is at most `rate`.
pub fn bits_for_fpr(rate: f64) -> f64 {
    let mut bits = LOWEST;
    while bits < MAX_RUN_BITS_PER_KEY && fpr(bits) > rate {
        bits += STEP;
    }
    bits
}

/// Expected false-positive rate of a blocked Bloom filter at `bits_per_key`, with the probe
/// count the filter builder uses at that size; 1.0 for no filter (`bits_per_key` ≤ 0).
///
/// ```
/// use bloomkv::filter::budget::fpr;
/// assert_eq!(fpr(0.0), 1.0);
/// assert!((0.009..0.010).contains(&fpr(10.0)));
/// assert!(fpr(16.0) < fpr(12.0));
/// ```
pub fn fpr(bits_per_key: f64) -> f64 {
    if bits_per_key.is_nan() || bits_per_key <= 0.0 {
        return 1.0;
    }
    let k = math::optimal_blocked_probes(bits_per_key);
    math::blocked_fpr(f64::from(LINE_BITS) / bits_per_key, k, LINE_BITS)
}

/// Expected data blocks read per absent-key lookup when run `i` has `bits_per_run[i]` bits per
/// key (0 for no filter): `Σ fpr(bᵢ)`, with every run consulted.
///
/// ```
/// use bloomkv::filter::budget::{fpr, lookup_cost};
/// assert_eq!(lookup_cost(&[10.0; 4]), 4.0 * fpr(10.0));
/// ```
pub fn lookup_cost(bits_per_run: &[f64]) -> f64 {
    bits_per_run.iter().map(|&b| fpr(b)).sum()
}

/// Bits per key for each run so that the runs' filters together take `bits_per_key` bits per
/// key on average (`Σ nᵢ·bᵢ = bits_per_key · Σ nᵢ`) and [`lookup_cost`] is as low as the
/// blocked filter's curve allows. `run_keys[i]` is the number of keys in run `i`; the result
/// is in the same order. A run given 0.0 should get no filter. See the module documentation
/// for the method.
///
/// The whole budget is spent, unless every run is at [`MAX_RUN_BITS_PER_KEY`] (or none is
/// left with half a bit per key to spend). A run whose share is below half a bit per key
/// gets none (0.0). A run of 0 keys, or a tree of none, gets the average. `bits_per_key` is
/// clamped to [0, [`MAX_AVERAGE_BITS_PER_KEY`]].
///
/// ```
/// use bloomkv::filter::budget::{allocate, lookup_cost};
/// // Three small L0 tables over one large level, 10 bits per key on average.
/// let runs = [50_000, 50_000, 50_000, 1_000_000];
/// let bits = allocate(&runs, 10.0);
/// let spent: f64 = runs.iter().zip(&bits).map(|(&n, b)| n as f64 * b).sum();
/// assert!((spent - 10.0 * 1_150_000.0).abs() < 1.0);
/// assert!(bits[0] > 14.0 && bits[3] < 10.0);
/// // Far fewer wasted block reads per absent key than 10 bits per key everywhere.
/// assert!(lookup_cost(&bits) < 0.6 * lookup_cost(&[10.0; 4]));
/// ```
pub fn allocate(run_keys: &[u64], bits_per_key: f64) -> Vec<f64> {
    allocate_for(run_keys, &vec![CurveKind::Blocked; run_keys.len()], bits_per_key)
}

/// The filter whose false-positive curve a run's share is worked out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurveKind {
    /// A blocked Bloom filter: [`fpr`].
    Blocked,
    /// A Ribbon filter: rate `2^-r` at `1.05 · r` bits per key.
    Ribbon,
    /// A range filter asked about empty ranges of `width` mapped integers: [`range_fpr`], at
    /// [`RANGE_OVERHEAD_BITS`] more bits per key of memory than it is built with.
    Range {
        /// The ranges' width (at least 1).
        width: u64,
    },
}

/// Bits per key a range filter holds in RAM beyond the bits per key it is built with: its
/// Elias–Fano select samples (a word per 256 zeros of the upper vector, one to two zeros per
/// key), a quarter to a half bit.
pub const RANGE_OVERHEAD_BITS: f64 = 0.35;

/// The bound on a range filter's false-positive rate at `bits_per_key` for an empty range of
/// `width` mapped integers: `width / 2^(bits − 2)`, or 1 where the filter does not answer for
/// ranges that wide (wider than `2^(⌊bits⌋ − 3)`) or there is no filter (fewer than 4 bits).
///
/// ```
/// use bloomkv::filter::budget::range_fpr;
/// assert_eq!(range_fpr(16.0, 256), 256.0 / 16384.0);
/// assert_eq!(range_fpr(10.0, 256), 1.0); // answers for 128 integers at most
/// assert_eq!(range_fpr(0.0, 2), 1.0);
/// ```
pub fn range_fpr(bits_per_key: f64, width: u64) -> f64 {
    let range = crate::range_filter::RangeFilter::BITS_PER_KEY_RANGE;
    if bits_per_key.is_nan() || bits_per_key < *range.start() {
        return 1.0;
    }
    let bits = bits_per_key.min(*range.end());
    let answers = 1u64 << (bits.floor() as u32 - 3);
    if width > answers {
        return 1.0;
    }
    (width.max(1) as f64 * (2.0 - bits).exp2()).min(1.0)
}

/// [`allocate`] for runs with filters of different kinds: run `i`'s share is worked out on the
/// curve of `kinds[i]`, so that the last bit spent buys the same drop in blocks read wherever
/// it goes. A Ribbon run's share is a whole number of result bits' worth, or a blend of two
/// (which its builder rounds down).
///
/// ```
/// use bloomkv::filter::budget::{allocate_for, CurveKind};
/// // Three L0 tables with blocked Bloom filters over a level of Ribbon filters.
/// let runs = [50_000, 50_000, 50_000, 1_000_000];
/// let kinds = [CurveKind::Blocked, CurveKind::Blocked, CurveKind::Blocked, CurveKind::Ribbon];
/// let bits = allocate_for(&runs, &kinds, 10.0);
/// let spent: f64 = runs.iter().zip(&bits).map(|(&n, b)| n as f64 * b).sum();
/// assert!((spent - 10.0 * 1_150_000.0).abs() < 1.0);
/// assert!(bits[0] > 14.0 && bits[3] < 10.0);
/// ```
///
/// # Panics
/// If `kinds` and `run_keys` differ in length.
pub fn allocate_for(run_keys: &[u64], kinds: &[CurveKind], bits_per_key: f64) -> Vec<f64> {
    allocate_weighted(run_keys, kinds, &vec![1.0; run_keys.len()], bits_per_key)
}

/// [`allocate_for`] where a "maybe" of filter `i` costs `weights[i]`: the sum minimised is
/// `Σ weights[i] · fpr_i(bits[i])`. Filter `i` holds `sizes[i]` keys, and the filters
/// together get `bits_per_key · Σ sizes` bits. How a budget is split between point and range
/// filters: each run has one of each, the point filter weighing the share of point lookups
/// and the range filter that of range reads (see `filter_budget::table_filters`). A
/// [`CurveKind::Range`] share is bits per key of memory, [`RANGE_OVERHEAD_BITS`] more than
/// the filter is built with; 0.0 when the filter would not answer for its width. A filter of
/// weight 0 gets nothing.
///
/// ```
/// use bloomkv::filter::budget::{allocate_weighted, CurveKind};
/// // One run, point and range filter, a quarter of the reads ranges of 16 integers.
/// let kinds = [CurveKind::Blocked, CurveKind::Range { width: 16 }];
/// let bits = allocate_weighted(&[1_000_000; 2], &kinds, &[0.75, 0.25], 10.0);
/// assert!((bits[0] + bits[1] - 20.0).abs() < 1e-6);
/// assert!(bits[1] > 7.0); // enough to answer for 16
/// ```
///
/// # Panics
/// If `kinds` or `weights` differ from `sizes` in length.
pub fn allocate_weighted(
    sizes: &[u64],
    kinds: &[CurveKind],
    weights: &[f64],
    bits_per_key: f64,
) -> Vec<f64> {
    assert_eq!(sizes.len(), kinds.len(), "one curve per filter");
    assert_eq!(sizes.len(), weights.len(), "one weight per filter");
    let run_keys = sizes;
    let weights: Vec<f64> =
        weights.iter().map(|&w| if w.is_finite() && w > 0.0 { w } else { 0.0 }).collect();
    let average =
        if bits_per_key.is_nan() { 0.0 } else { bits_per_key.clamp(0.0, MAX_AVERAGE_BITS_PER_KEY) };
    // Key counts come from the manifest: saturate rather than overflow on absurd ones.
    let total = run_keys.iter().fold(0u64, |a, &n| a.saturating_add(n));
    let mut bits: Vec<Option<f64>> =
        run_keys.iter().map(|&n| if n == 0 { Some(average) } else { None }).collect();
    if total == 0 {
        return vec![average; run_keys.len()];
    }
    for (b, &w) in bits.iter_mut().zip(&weights) {
        if w == 0.0 {
            *b = Some(0.0);
        }
    }
    let budget = average * total as f64;
    // Range curves depend on their width: made once per call.
    let owned: Vec<Option<Curve>> = kinds
        .iter()
        .map(|k| match *k {
            CurveKind::Range { width } => Some(range_curve(width)),
            _ => None,
        })
        .collect();
    let curve_of = |i: usize| owned[i].as_ref().unwrap_or_else(|| curve(kinds[i]));
    // The optimum on the hull may leave a few filters (those of one size) with less than the
    // smallest a policy builds; they get none, and the rest share the budget again.
    loop {
        let open: Vec<usize> = (0..run_keys.len()).filter(|&i| bits[i].is_none()).collect();
        if open.is_empty() {
            break;
        }
        let settled: f64 =
            (0..run_keys.len()).filter_map(|i| bits[i].map(|b| run_keys[i] as f64 * b)).sum();
        let left = budget - settled;
        let keys: Vec<u64> = open.iter().map(|&i| run_keys[i]).collect();
        let curves: Vec<&Curve> = open.iter().map(|&i| curve_of(i)).collect();
        let costs: Vec<f64> = open.iter().map(|&i| weights[i]).collect();
        let solved = solve(&keys, &curves, &costs, left);
        let stranded: Vec<usize> = (0..open.len())
            .filter(|&j| solved[j] > 0.0 && solved[j] < least(kinds[open[j]]))
            .collect();
        if stranded.is_empty() {
            for (&i, b) in open.iter().zip(solved) {
                bits[i] = Some(b);
            }
            break;
        }
        for j in stranded {
            bits[open[j]] = Some(0.0);
        }
    }
    bits.into_iter().map(|b| b.unwrap_or(average)).collect()
}

/// The least share worth building a filter of `kind` with: half a bit per key for a point
/// filter (a real filter of that size beats none), and for a range filter the memory of the
/// least bits per key that answer for its width.
fn least(kind: CurveKind) -> f64 {
    match kind {
        CurveKind::Blocked | CurveKind::Ribbon => LOWEST,
        CurveKind::Range { width } => range_bits_for_width(width) + RANGE_OVERHEAD_BITS,
    }
}

/// The fewest bits per key (at least 4) at which a range filter answers for `width`.
fn range_bits_for_width(width: u64) -> f64 {
    let lg = 64 - width.max(1).saturating_sub(1).leading_zeros();
    f64::from(lg + 3).max(*crate::range_filter::RangeFilter::BITS_PER_KEY_RANGE.start())
}

/// The optimum on the convex hulls of the runs' curves: bits per key for runs of `run_keys`
/// keys spending `budget` bits in all, or each run's top vertex if that is less.
fn solve(run_keys: &[u64], curves: &[&Curve], costs: &[f64], budget: f64) -> Vec<f64> {
    // Run i's bits at multiplier mu: the hull vertex after which a further bit per key would
    // lower its weighted rate by less than it costs (mu · n_i per bit per key).
    let at = |mu: f64| -> Vec<f64> {
        run_keys
            .iter()
            .zip(curves)
            .zip(costs)
            .map(|((&n, c), &w)| c.hull[c.slopes.partition_point(|&s| s * w < -mu * n as f64)].0)
            .collect()
    };
    let spent =
        |bits: &[f64]| -> f64 { run_keys.iter().zip(bits).map(|(&n, &b)| n as f64 * b).sum() };
    if budget <= 0.0 {
        return vec![0.0; run_keys.len()];
    }
    // Bracket mu: at `lo` every run is at the top vertex, at `hi` every run is at "no filter".
    // The multiplier at which run i leaves its first vertex, and its last.
    let price = |i: usize, slope: f64| -slope * costs[i] / run_keys[i].max(1) as f64;
    let steepest = (0..run_keys.len()).map(|i| price(i, curves[i].slopes[0])).fold(0.0, f64::max);
    let flattest = (0..run_keys.len())
        .filter(|&i| costs[i] > 0.0)
        .map(|i| price(i, curves[i].slopes[curves[i].slopes.len() - 1]))
        .fold(f64::MAX, f64::min);
    if steepest <= 0.0 {
        return vec![0.0; run_keys.len()];
    }
    let (mut lo, mut hi) = (flattest / 2.0, steepest * 2.0);
    let (mut bits_lo, mut bits_hi) = (at(lo), at(hi));
    if spent(&bits_lo) <= budget {
        return bits_lo;
    }
    // Bisect in log space: the bracket spans many orders of magnitude.
    for _ in 0..200 {
        let mid = (lo * hi).sqrt();
        if !(mid > lo && mid < hi) {
            break;
        }
        let bits = at(mid);
        if spent(&bits) > budget {
            (lo, bits_lo) = (mid, bits);
        } else {
            (hi, bits_hi) = (mid, bits);
        }
    }
    // `bits_lo` overspends, `bits_hi` does not; they differ only in the runs whose vertex
    // changes between the two multipliers, which are indifferent along the segment between
    // those vertices. The blend that spends exactly the budget is therefore as good as either.
    let (over, under) = (spent(&bits_lo), spent(&bits_hi));
    let t = if over > under { (budget - under) / (over - under) } else { 0.0 };
    bits_hi.iter().zip(&bits_lo).map(|(&h, &l)| h + t * (l - h)).collect()
}

/// The tabulated curve's lower convex hull, computed once per process.
struct Curve {
    /// Vertices (bits per key, rate), bits ascending, from (0, 1) to the top of the table.
    hull: Vec<(f64, f64)>,
    /// `slopes[j]` is the slope from vertex j to j + 1: negative, and increasing with j.
    slopes: Vec<f64>,
}

fn curve(kind: CurveKind) -> &'static Curve {
    static BLOCKED: OnceLock<Curve> = OnceLock::new();
    static RIBBON: OnceLock<Curve> = OnceLock::new();
    match kind {
        CurveKind::Blocked => BLOCKED.get_or_init(|| {
            let steps = ((MAX_RUN_BITS_PER_KEY - LOWEST) / STEP).round() as usize;
            hull_of((0..=steps).map(|j| {
                let b = LOWEST + j as f64 * STEP;
                (b, fpr(b))
            }))
        }),
        // Whole result bits, as many as fit under the cap on one run.
        CurveKind::Ribbon => RIBBON.get_or_init(|| {
            let slots_per_key = 1.0 + super::ribbon::FIRST_OVERHEAD;
            let top = ((MAX_RUN_BITS_PER_KEY / slots_per_key) as u32).min(ribbon::MAX_RESULT_BITS);
            hull_of((1..=top).map(|r| (f64::from(r) * slots_per_key, 0.5f64.powi(r as i32))))
        }),
        CurveKind::Range { .. } => unreachable!("range curves depend on their width: range_curve"),
    }
}

/// The hull of a range filter's curve for ranges of `width`, over its memory per key: every
/// 1/8 bit from the fewest bits that answer for `width` to the most a filter takes.
fn range_curve(width: u64) -> Curve {
    let top = *crate::range_filter::RangeFilter::BITS_PER_KEY_RANGE.end();
    let first = range_bits_for_width(width);
    let steps = ((top - first).max(0.0) / STEP).round() as usize;
    hull_of((0..=steps).map(|j| {
        let b = first + j as f64 * STEP;
        (b + RANGE_OVERHEAD_BITS, range_fpr(b, width))
    }))
}

/// The lower convex hull of "no filter" (0 bits, rate 1) followed by `points`, bits ascending.
fn hull_of(points: impl Iterator<Item = (f64, f64)>) -> Curve {
    let mut hull: Vec<(f64, f64)> = Vec::new();
    for p in std::iter::once((0.0, 1.0)).chain(points) {
        // Drop the last vertex while it lies on or above the segment from the one before it
        // to `p` (a turn that is not counter-clockwise).
        while let [.., o, a] = hull[..] {
            let cross = (a.0 - o.0) * (p.1 - o.1) - (a.1 - o.1) * (p.0 - o.0);
            if cross > 0.0 {
                break;
            }
            hull.pop();
        }
        hull.push(p);
    }
    let slopes = hull.windows(2).map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0)).collect();
    Curve { hull, slopes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(runs: &[u64], bits: &[f64]) -> f64 {
        runs.iter().zip(bits).map(|(&n, &b)| n as f64 * b).sum()
    }

    /// A few tree shapes: L0 tables over leveled runs growing by 10×, and odd ones.
    fn shapes() -> Vec<Vec<u64>> {
        vec![
            vec![56_700, 56_700, 56_700, 1_000_000],
            vec![100_000, 1_000_000, 10_000_000],
            vec![10, 20, 30, 1_000_000, 9_000_000, 90_000_000],
            vec![5_000, 80_000, 120_000, 400_000, 4_000_000],
            vec![1, 1_000_000_000],
            vec![3, 7],
        ]
    }

    #[test]
    fn the_budget_is_spent_exactly() {
        for runs in shapes() {
            for avg in [2.0, 5.0, 8.0, 10.0, 16.0, 24.0] {
                let bits = allocate(&runs, avg);
                let total: f64 = runs.iter().map(|&n| n as f64).sum();
                let rel = (spent(&runs, &bits) - avg * total).abs() / (avg * total);
                assert!(rel < 1e-9, "{runs:?} at {avg}: {bits:?} spends {rel:e} off the budget");
                for &b in &bits {
                    assert!(b == 0.0 || (LOWEST..=MAX_RUN_BITS_PER_KEY).contains(&b), "{b}");
                }
            }
        }
    }

    #[test]
    fn a_uniform_tree_gets_uniform_bits() {
        for runs in [vec![1_000u64; 4], vec![7_777_777; 7], vec![1]] {
            for avg in [3.0, 10.0, 20.0] {
                for b in allocate(&runs, avg) {
                    assert!((b - avg).abs() < 1e-9, "{runs:?} at {avg}: {b}");
                }
            }
        }
    }

    #[test]
    fn smaller_runs_get_more_bits() {
        for runs in shapes() {
            let bits = allocate(&runs, 10.0);
            for i in 0..runs.len() {
                for j in 0..runs.len() {
                    if runs[i] < runs[j] {
                        assert!(bits[i] >= bits[j], "{runs:?}: {bits:?}");
                    }
                }
            }
        }
        let bits = allocate(&[56_700, 56_700, 56_700, 1_000_000], 10.0);
        assert!(bits[0] > 13.0 && bits[3] < 9.8, "{bits:?}");
    }

    #[test]
    fn never_worse_than_uniform_and_a_third_better_on_small_runs_over_a_big_one() {
        for runs in shapes() {
            for avg in [4.0, 10.0, 16.0] {
                let budgeted = lookup_cost(&allocate(&runs, avg));
                let uniform = lookup_cost(&vec![avg; runs.len()]);
                assert!(budgeted <= uniform * (1.0 + 1e-6), "{runs:?} at {avg}");
            }
        }
        // The bench's layered tree: three L0 tables of 56.7k keys over a 1M-key level.
        let runs = [56_700, 56_700, 56_700, 1_000_000];
        let (budgeted, uniform) = (lookup_cost(&allocate(&runs, 10.0)), lookup_cost(&[10.0; 4]));
        assert!(budgeted < 0.7 * uniform, "{budgeted} vs {uniform}");
    }

    /// The Lagrange condition: wherever two runs both sit strictly inside the curve's range,
    /// one more bit of memory buys the same reduction in R in either, so −f'(b_i)/n_i is the
    /// same for both (up to the tabulation step, the derivative taken over one step each way).
    #[test]
    fn marginal_gain_per_bit_of_memory_is_equal_across_runs() {
        let runs = [5_000u64, 80_000, 120_000, 400_000, 4_000_000];
        let bits = allocate(&runs, 10.0);
        let price = |n: u64, b: f64| (fpr(b - STEP) - fpr(b + STEP)) / (2.0 * STEP) / n as f64;
        let prices: Vec<f64> = runs.iter().zip(&bits).map(|(&n, &b)| price(n, b)).collect();
        let (lo, hi) = prices.iter().fold((f64::MAX, 0f64), |(l, h), &p| (l.min(p), h.max(p)));
        assert!(hi / lo < 1.6, "{bits:?}: {prices:?}");
        // And the rates are roughly proportional to run sizes, flattened by the blocked
        // curve (see the module documentation): a run 800× smaller gets a rate far below.
        let rate = |i: usize| fpr(bits[i]);
        assert!(rate(0) < rate(4) / 50.0 && rate(3) < rate(4), "{bits:?}");
    }

    #[test]
    fn a_tight_budget_leaves_the_largest_run_without_a_filter() {
        let runs = [1_000, 1_000, 1_000_000_000];
        let bits = allocate(&runs, 0.01);
        assert_eq!(bits[2], 0.0, "{bits:?}");
        assert!(bits[0] > 1.0, "{bits:?}");
        assert!(spent(&runs, &bits) <= 0.01 * runs.iter().sum::<u64>() as f64);
        // With room to spare once the large run is given none, the small ones get the most.
        assert_eq!(bits[0], MAX_RUN_BITS_PER_KEY, "{bits:?}");
        // A tree of one run gets the average, even where the hull would rather blend.
        assert!(allocate(&[2_000], 0.5) == [0.5]);
        assert_eq!(allocate(&[0, 0], 10.0), [10.0, 10.0]);
        assert_eq!(allocate(&[], 10.0), Vec::<f64>::new());
        let near = |bits: Vec<f64>, want: f64| bits.iter().all(|b| (b - want).abs() < 1e-9);
        // Counts from a damaged manifest must not overflow anything: the total saturates, and
        // the huge run still gets about the average.
        let huge = allocate(&[u64::MAX, 2, 1], 10.0);
        assert!(huge.iter().all(|b| b.is_finite()) && huge[0] > 9.0, "{huge:?}");
        assert!(near(allocate(&[5, 0], 10.0), 10.0));
        assert!(near(allocate(&[10, 10], 100.0), MAX_AVERAGE_BITS_PER_KEY));
    }

    #[test]
    fn the_hull_is_convex_and_starts_at_no_filter() {
        let ribbon = curve(CurveKind::Ribbon);
        assert_eq!(ribbon.hull[0], (0.0, 1.0));
        assert_eq!(ribbon.hull[1], (1.05, 0.5));
        assert!(ribbon.slopes.windows(2).all(|w| w[0] < w[1] && w[1] < 0.0));
        let c = curve(CurveKind::Blocked);
        assert_eq!(c.hull[0], (0.0, 1.0));
        assert!((0.9..1.2).contains(&c.hull[1].0), "smallest filter {:?}", c.hull[1]);
        assert_eq!(c.hull.last().unwrap().0, MAX_RUN_BITS_PER_KEY);
        assert!(c.slopes.windows(2).all(|w| w[0] < w[1] && w[1] < 0.0));
        // Every hull vertex is a point of the real curve.
        for &(b, f) in &c.hull[1..] {
            assert_eq!(f, fpr(b));
        }
    }

    /// A run's point and range filters under one budget: the more of the reads are ranges,
    /// the more of the memory goes to range filters, always all of it; at the two ends one
    /// kind gets everything; and the split beats a fixed one for its mix.
    #[test]
    fn a_read_mix_moves_bits_from_point_to_range_filters_as_its_range_share_grows() {
        let runs = [56_700u64, 56_700, 56_700, 1_000_000, 10_000_000];
        let n = runs.len();
        let sizes: Vec<u64> = runs.iter().chain(&runs).copied().collect();
        let total = sizes.iter().sum::<u64>() as f64;
        for width in [2u64, 16, 256] {
            let mut kinds = vec![CurveKind::Blocked; n];
            kinds.extend(vec![CurveKind::Range { width }; n]);
            let cost = |bits: &[f64], s: f64| -> f64 {
                (0..n).map(|i| (1.0 - s) * fpr(bits[i]) + s * range_fpr(bits[n + i], width)).sum()
            };
            let mut last = (f64::MAX, -1.0);
            for share in [0.0, 0.05, 0.2, 0.5, 0.8, 0.95, 1.0] {
                let mut weights = vec![1.0 - share; n];
                weights.extend(vec![share; n]);
                // 13 bits per key for the two filters of each run.
                let bits = allocate_weighted(&sizes, &kinds, &weights, 6.5);
                assert!((spent(&sizes, &bits) - 6.5 * total).abs() < 1e-6 * total, "{bits:?}");
                let point = spent(&runs, &bits[..n]);
                let range = spent(&runs, &bits[n..]);
                assert!(point <= last.0 + 1e-6 && range >= last.1 - 1e-6, "{share}: {bits:?}");
                last = (point, range);
                if share == 0.0 {
                    assert_eq!(range, 0.0, "{bits:?}");
                }
                if share == 1.0 {
                    assert_eq!(point, 0.0, "{bits:?}");
                }
                for &b in &bits[n..] {
                    assert!(b == 0.0 || range_fpr(b - RANGE_OVERHEAD_BITS, width) < 1.0, "{b}");
                }
                // A fixed split, 9 bits of point filter and 4 of range filter (at width 2,
                // the filter's least) everywhere, or all to one kind, is never better.
                let mut fixed = vec![9.0; n];
                fixed.extend(vec![4.0 + RANGE_OVERHEAD_BITS; n]);
                let mut point_only = vec![13.0; n];
                point_only.extend(vec![0.0; n]);
                for other in [fixed, point_only] {
                    assert!(cost(&bits, share) <= cost(&other, share) * 1.0001, "{share} {width}");
                }
            }
        }
        // Weights of 0 get nothing, and a run's range share is worth a filter or nothing.
        let kinds = [CurveKind::Blocked, CurveKind::Range { width: 1024 }];
        assert_eq!(allocate_weighted(&[100, 100], &kinds, &[1.0, 0.0], 10.0), [20.0, 0.0]);
        let tiny = allocate_weighted(&[100, 100], &kinds, &[0.99, 0.01], 5.0);
        assert!(tiny[1] == 0.0 || tiny[1] >= 13.0 + RANGE_OVERHEAD_BITS, "{tiny:?}");
    }

    #[test]
    fn the_range_bound_halves_per_bit_and_answers_only_its_widths() {
        assert_eq!(range_fpr(12.0, 1), 2f64.powi(-10));
        assert_eq!(range_fpr(13.0, 1), 2f64.powi(-11));
        // 12 bits answer for 512 integers, not 513.
        assert_eq!(range_fpr(12.0, 512), 0.5);
        assert_eq!(range_fpr(12.0, 513), 1.0);
        assert_eq!(range_fpr(3.9, 1), 1.0);
        assert_eq!(range_fpr(f64::NAN, 1), 1.0);
        assert_eq!(range_bits_for_width(1), 4.0);
        assert_eq!(range_bits_for_width(16), 7.0);
        assert_eq!(range_bits_for_width(17), 8.0);
        let c = range_curve(16);
        assert_eq!(c.hull[0], (0.0, 1.0));
        assert!(c.slopes.windows(2).all(|w| w[0] < w[1] && w[1] < 0.0));
    }

    /// Ribbon runs under one budget: the budget is spent, each run's share is where the last
    /// bit buys the same as anywhere else, and the expected block reads beat both Ribbon
    /// filters of equal size and the budget over blocked Bloom filters alone.
    #[test]
    fn a_budget_over_ribbon_runs_beats_uniform_ribbon_and_budgeted_bloom() {
        let ribbon_fpr = |b: f64| match b {
            b if b <= 0.0 => 1.0,
            b => super::ribbon::fpr_at(b),
        };
        for runs in shapes() {
            // L0 tables (the first runs of each shape but the last two) keep Bloom filters.
            let kinds: Vec<CurveKind> = (0..runs.len())
                .map(|i| if i + 2 < runs.len() { CurveKind::Blocked } else { CurveKind::Ribbon })
                .collect();
            let cost = |bits: &[f64]| -> f64 {
                bits.iter()
                    .zip(&kinds)
                    .map(|(&b, k)| match k {
                        CurveKind::Blocked => fpr(b),
                        CurveKind::Ribbon => ribbon_fpr(b),
                        CurveKind::Range { width } => range_fpr(b, *width),
                    })
                    .sum()
            };
            for avg in [6.0, 10.0, 14.0] {
                let bits = allocate_for(&runs, &kinds, avg);
                let total: u64 = runs.iter().sum();
                assert!((spent(&runs, &bits) - avg * total as f64).abs() < 1e-6 * total as f64);
                let budgeted_bloom = lookup_cost(&allocate(&runs, avg));
                let uniform_ribbon = cost(&vec![avg; runs.len()]);
                assert!(cost(&bits) < budgeted_bloom, "{runs:?} at {avg}: {bits:?}");
                assert!(cost(&bits) <= uniform_ribbon * 1.0001, "{runs:?} at {avg}: {bits:?}");
            }
        }
    }
}
