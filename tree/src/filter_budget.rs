//! The tree as [`FilterPolicy::Budgeted`] sees it, and the share of the budget a table gets.
//!
//! An absent-key lookup consults every L0 table whose range covers the key (flushes cover
//! nearly the whole key space, so nearly all of them) and one table on each deeper level: each
//! L0 table is a run of its own, each deeper level one run. Run sizes are the tables' entry
//! counts as the manifest records them, so working out the shape touches no file.
//!
//! When a flush, a compaction or an ingest is about to write tables, it describes what it
//! will do ([`Placement`]): the level the tables go to, about how many keys they will hold,
//! and the tables they replace. [`table_filter`] takes the current version, removes what is
//! replaced, adds what is written, splits the budget over the resulting runs with
//! [`budget::allocate`], and gives the new tables their run's share. Nothing is stored
//! between writes: every write recomputes the split from the version it starts from, so a
//! table's bits reflect the tree when it was written, and tables written under an older shape
//! keep their bits until compaction rewrites them.

use std::sync::Arc;

use crate::filter::budget::{self, CurveKind};
use crate::filter::{ribbon, FilterPolicy};
use crate::options::KeyspaceOptions;
use crate::version::set::{TableFile, Version};

/// One run: an L0 table, or a whole deeper level.
pub struct Run<'v> {
    pub level: usize,
    pub tables: Vec<&'v Arc<TableFile>>,
}

impl Run<'_> {
    /// Entries in the run's tables. The counts come from the manifest, so the sum saturates
    /// rather than overflowing on damaged ones.
    pub fn keys(&self) -> u64 {
        self.tables.iter().fold(0u64, |a, t| a.saturating_add(t.meta.num_entries))
    }

    /// Entries in the run's tables' filters were they all sized by entries: their entries
    /// and distinct prefixes.
    pub fn entries(&self) -> u64 {
        self.tables.iter().fold(0u64, |a, t| {
            a.saturating_add(t.meta.num_entries).saturating_add(t.table.properties().num_prefixes)
        })
    }

    /// What the run weighs in a budget: its filter entries where filters hold prefixes
    /// beside keys ([`weighs_entries`]), its keys otherwise.
    pub fn weight(&self, by_entries: bool) -> u64 {
        if by_entries {
            self.entries()
        } else {
            self.keys()
        }
    }
}

/// Whether a keyspace's filters hold prefixes beside whole keys, so that a budget weighs its
/// runs by filter entries and splits its memory per entry.
pub fn weighs_entries(opts: &KeyspaceOptions) -> bool {
    opts.prefix_extractor.is_some() && opts.whole_key_filtering
}

/// The runs of `version` an absent-key lookup meets, in read order: each L0 table (newest
/// first), then each non-empty deeper level. Tables in `without` are left out.
pub fn runs<'v>(version: &'v Version, without: &[Arc<TableFile>]) -> Vec<Run<'v>> {
    let kept = |t: &&Arc<TableFile>| !is_among(t, without);
    let mut runs: Vec<Run<'v>> =
        version.levels[0].iter().filter(kept).map(|t| Run { level: 0, tables: vec![t] }).collect();
    for (level, tables) in version.levels.iter().enumerate().skip(1) {
        let tables: Vec<_> = tables.iter().filter(kept).collect();
        if !tables.is_empty() {
            runs.push(Run { level, tables });
        }
    }
    runs
}

/// What a write is about to do to the tree.
pub struct Placement<'a> {
    /// The level its tables go to.
    pub level: usize,
    /// About how many keys they will hold; 0 if unknown.
    pub keys: u64,
    /// The tables it replaces (a compaction's inputs).
    pub replaces: &'a [Arc<TableFile>],
}

/// The filter for the tables of `placement`: `policy` itself, unless it is
/// [`FilterPolicy::Ribbon`] and the tables go to a level below its `bloom_before_level` (then
/// a blocked Bloom filter with the Ribbon filter's false-positive rate), or
/// [`FilterPolicy::Budgeted`] or [`FilterPolicy::BudgetedRibbon`], which become a blocked Bloom
/// filter (or, below `bloom_before_level`, a Ribbon filter) at the share of the budget their
/// run gets in the tree `version` will be once the write is done (no filter if that share is
/// nothing). A write of unknown size gets the average.
///
/// With a prefix extractor and whole keys, a table's filter also holds its prefixes, and a
/// filter is sized by its entries (bits per key times keys and prefixes). So that the
/// prefixes come out of about the same memory, a uniform policy's bits per key is scaled by
/// `r`, the share of keys among entries ([`key_share`]): the tree's filters then hold about
/// `b · Σ n` bits, spread evenly over the entries. A table with one key per prefix (a flush
/// of scattered writes) gets about twice the bits per key of one with ten. Under a budget the
/// runs weigh their entries `e_i` (the new tables' estimated by [`new_prefixes`]): minimising
/// `Σ fpr(c_i)` under `Σ e_i · c_i = b · Σ n` is `allocate(e, b · Σn / Σe)`, `c_i` the run's
/// bits per entry.
pub fn table_filter(
    opts: &KeyspaceOptions,
    version: &Version,
    placement: &Placement,
) -> FilterPolicy {
    table_filters(opts, version, placement).point
}

/// The filters a new table gets: its point filter, and the bits per key of its range filter
/// (`None`: none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TableFilters {
    pub point: FilterPolicy,
    pub range_bits_per_key: Option<f64>,
}

impl TableFilters {
    /// A point filter of `policy` and the keyspace's fixed range filter, if it has one.
    pub fn fixed(opts: &KeyspaceOptions, policy: FilterPolicy) -> Self {
        TableFilters { point: policy, range_bits_per_key: opts.range_filter_bits_per_key }
    }
}

/// [`table_filter`], and the range filter the tables of `placement` get: the keyspace's
/// [`KeyspaceOptions::range_filter_bits_per_key`], unless a budgeted policy splits its
/// memory for a [`KeyspaceOptions::read_mix`]. Then each run has two filters to pay for, a
/// point filter weighing the share of point lookups and a range filter weighing that of range
/// reads, and [`budget::allocate_weighted`] minimises the blocks read in vain per read,
/// `(1 − s) · Σ fpr(bᵢ) + s · Σ range_fpr(cᵢ, w)`, under `Σ nᵢ · (bᵢ + cᵢ) = b · Σ nᵢ`.
pub fn table_filters(
    opts: &KeyspaceOptions,
    version: &Version,
    placement: &Placement,
) -> TableFilters {
    let mix = opts.read_mix.filter(|_| {
        matches!(
            opts.filter_policy,
            FilterPolicy::Budgeted { .. } | FilterPolicy::BudgetedRibbon { .. }
        )
    });
    // Weights of a run's point and range filters: a point filter's false positive costs
    // the range probe that follows it (the range filter turns nearly all of them away), not
    // a block read, wherever the run has a range filter.
    let costs = mix.map(|m| {
        let s = m.range_share.clamp(0.0, 1.0);
        ((1.0 - s) * SCREENED_POINT_COST, s, CurveKind::Range { width: m.range_width.max(1) })
    });
    // A run whose range filter got no bits has its point filter's false positives read a
    // block each: its split is worked out again with the point filter priced at that.
    let unscreened = |point: f64| point / SCREENED_POINT_COST;
    let fixed = |point| TableFilters::fixed(opts, point);
    let prefixed = weighs_entries(opts);
    let share = || if prefixed { key_share(version, placement) } else { 1.0 };
    // Which filter a table on `level` gets, and so the curve its run's share is worked on.
    let (bits_per_key, bloom_before_level) = match opts.filter_policy {
        FilterPolicy::Ribbon { bits_per_key, bloom_before_level } => {
            let bits_per_key = bits_per_key * share();
            if placement.level < usize::from(bloom_before_level) {
                let bits_per_key = budget::bits_for_fpr(ribbon::fpr_at(bits_per_key));
                return fixed(FilterPolicy::BlockedBloom { bits_per_key });
            }
            return fixed(FilterPolicy::Ribbon { bits_per_key, bloom_before_level });
        }
        FilterPolicy::Budgeted { bits_per_key } => (bits_per_key, usize::MAX),
        FilterPolicy::BudgetedRibbon { bits_per_key, bloom_before_level } => {
            (bits_per_key, usize::from(bloom_before_level))
        }
        policy => return fixed(per_entry(policy, share())),
    };
    let kind_at = |level: usize| match level < bloom_before_level {
        true => CurveKind::Blocked,
        false => CurveKind::Ribbon,
    };
    let filter_at = |bits_per_key: f64| match (bits_per_key > 0.0, kind_at(placement.level)) {
        (false, _) => FilterPolicy::None,
        (true, CurveKind::Blocked) => FilterPolicy::BlockedBloom { bits_per_key },
        // `kind_at` gives point filters' curves only.
        (true, _) => FilterPolicy::Ribbon { bits_per_key, bloom_before_level: 0 },
    };
    // A range filter's share is memory per key, its select samples included.
    let range_at = |memory: f64| {
        (memory > 0.0).then(|| {
            let range = crate::range_filter::RangeFilter::BITS_PER_KEY_RANGE;
            (memory - budget::RANGE_OVERHEAD_BITS).clamp(*range.start(), *range.end())
        })
    };
    if placement.keys == 0 {
        let Some((point, ranged, kind)) = costs else {
            return fixed(filter_at(bits_per_key * share()));
        };
        // Unknown size: the split of a tree of one run, its `b` bits per key spread over the
        // two filters' keys (`b / 2` each on average).
        let kinds = [kind_at(placement.level), kind];
        let split = |point| {
            budget::allocate_weighted(&[1, 1], &kinds, &[point, ranged], bits_per_key / 2.0)
        };
        let mut bits = split(point);
        if bits[1] == 0.0 {
            bits = split(unscreened(point));
        }
        return TableFilters { point: filter_at(bits[0]), range_bits_per_key: range_at(bits[1]) };
    }
    let runs = runs(version, placement.replaces);
    // With prefixes, each run weighs its filter entries (keys and prefixes): an L0 table of
    // one key per prefix has twice the entries per key of the last level, and the budget is
    // `b · n` bits spread over entries, `b · Σn / Σe` each on average. The new tables'
    // prefixes are estimated (`new_prefixes`); their filters are sized by what they hold.
    let mut weights: Vec<u64> = runs.iter().map(|r| r.weight(prefixed)).collect();
    let mut kinds: Vec<CurveKind> = runs.iter().map(|r| kind_at(r.level)).collect();
    // New L0 tables are a run of their own; on a deeper level they join the level's run.
    let target = match runs.iter().position(|r| r.level == placement.level && r.level > 0) {
        Some(i) => i,
        None => {
            weights.push(0);
            kinds.push(kind_at(placement.level));
            weights.len() - 1
        }
    };
    let added = match prefixed {
        true => placement.keys.saturating_add(new_prefixes(version, placement)),
        false => placement.keys,
    };
    weights[target] = weights[target].saturating_add(added);
    let average = if prefixed {
        let keys = runs.iter().map(Run::keys).sum::<u64>().saturating_add(placement.keys);
        let entries = weights.iter().sum::<u64>().max(1);
        bits_per_key * keys as f64 / entries as f64
    } else {
        bits_per_key
    };
    let Some((point, ranged, kind)) = costs else {
        return fixed(filter_at(budget::allocate_for(&weights, &kinds, average)[target]));
    };
    // The runs' range filters hold their keys (not prefixes): the same budget, `b · Σn`
    // bits, now spread over the point filters' entries and the range filters' keys.
    let mut keys: Vec<u64> = runs.iter().map(Run::keys).collect();
    keys.resize(weights.len(), 0);
    keys[target] = keys[target].saturating_add(placement.keys);
    let total_keys = keys.iter().fold(0u64, |a, &k| a.saturating_add(k));
    let spread = weights.iter().chain(&keys).fold(0u64, |a, &k| a.saturating_add(k)).max(1);
    let average = bits_per_key * total_keys as f64 / spread as f64;
    let runs_n = weights.len();
    let sizes: Vec<u64> = weights.iter().chain(&keys).copied().collect();
    kinds.extend(std::iter::repeat(kind).take(runs_n));
    let mut costs = vec![point; runs_n];
    costs.resize(2 * runs_n, ranged);
    let mut bits = budget::allocate_weighted(&sizes, &kinds, &costs, average);
    let unfiltered: Vec<usize> =
        (0..runs_n).filter(|&i| bits[runs_n + i] == 0.0 && sizes[runs_n + i] > 0).collect();
    if !unfiltered.is_empty() {
        for &i in &unfiltered {
            costs[i] = unscreened(point);
        }
        bits = budget::allocate_weighted(&sizes, &kinds, &costs, average);
    }
    TableFilters {
        point: filter_at(bits[target]),
        range_bits_per_key: range_at(bits[runs_n + target]),
    }
}

/// What a point filter's false positive costs, in block reads, in a run that also has a
/// range filter: the range filter's probe for the key alone (three dependent cache misses),
/// which turns it away but for `2^(2−c)`. Priced at a tenth of a block read (a block from the
/// page cache, with its index search and checksum): the probe costs less than that, and
/// pricing it higher keeps more bits in the point filters, whose one-line probe is what an
/// absent key pays at each table (see DESIGN.md, "Under a budget").
pub const SCREENED_POINT_COST: f64 = 0.1;

/// About how many distinct prefixes the tables of `placement` will hold, were keys spread
/// evenly over the prefixes: `m` keys drawn over `P` prefixes hit `P · (1 − e^(−m/P))` of
/// them. `P` is solved from the same relation on the largest group of tables whose count is
/// known: the inputs of one level (each L0 table on its own), or without inputs (a flush, an
/// ingest) the deepest level holding prefixed filters. The inputs are the better guide: they
/// cover the output's key range, while a flush spreads over the whole tree's.
///
/// Why not the deepest level's share of keys among entries, which scales the bits per key:
/// a compaction merging into the last level writes a level holding nearly all of each
/// prefix's keys while that level, during a fill, still holds a part of them, so the share
/// overestimated the output's prefixes; its tables then got fewer bits per entry than their
/// run's share of the budget, and the tree's filters less memory than asked for.
fn new_prefixes(version: &Version, placement: &Placement) -> u64 {
    // (keys, prefixes) of the prefixed filters among `tables`.
    let counts = |tables: &mut dyn Iterator<Item = &Arc<TableFile>>| {
        tables.filter(|t| holds_prefixes(t)).fold((0u64, 0u64), |(k, p), t| {
            (
                k.saturating_add(t.meta.num_entries),
                p.saturating_add(t.table.properties().num_prefixes),
            )
        })
    };
    let mut groups: Vec<(u64, u64)> = Vec::new();
    for level in 0..version.levels.len() {
        let mut inputs = placement.replaces.iter().filter(|t| is_among(t, &version.levels[level]));
        if level == 0 {
            groups.extend(inputs.map(|t| counts(&mut std::iter::once(t))));
        } else {
            groups.push(counts(&mut inputs));
        }
    }
    if groups.iter().all(|&(k, _)| k == 0) {
        groups = version
            .levels
            .iter()
            .rev()
            .map(|tables| counts(&mut tables.iter()))
            .filter(|&(k, _)| k > 0)
            .take(1)
            .collect();
    }
    let keys = placement.keys as f64;
    let Some(&(n, p)) = groups.iter().max_by_key(|&&(k, _)| k) else { return 0 };
    if p == 0 {
        return 0;
    }
    match prefix_space(n as f64, p as f64) {
        Some(space) => (space * -(-keys / space).exp_m1()) as u64,
        // Every key a prefix of its own.
        None => placement.keys,
    }
}

/// Whether `t` is one of `tables` (by file number).
fn is_among(t: &TableFile, tables: &[Arc<TableFile>]) -> bool {
    tables.iter().any(|u| u.meta.number == t.meta.number)
}

/// Whether `t`'s filter holds whole keys and prefixes.
fn holds_prefixes(t: &TableFile) -> bool {
    let c = t.table.filter().contents();
    c.whole_keys && c.prefixes
}

/// The `P` for which `n` keys spread evenly over `P` prefixes are expected to hit `p` of them,
/// `P · (1 − e^(−n/P)) = p`; `None` when `p` is about `n` (every key its own prefix: `P`
/// without bound).
fn prefix_space(n: f64, p: f64) -> Option<f64> {
    let hit = |space: f64| space * -(-n / space).exp_m1();
    // `hit` grows with `P` from below `p` (at `P = p`) towards `n`.
    let (mut lo, mut hi) = (p, p);
    while hit(hi) < p {
        hi *= 2.0;
        if hi > 1e6 * n.max(1.0) {
            return None;
        }
    }
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if hit(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(hi)
}

/// `policy` with its bits per key scaled by `share`.
fn per_entry(mut policy: FilterPolicy, share: f64) -> FilterPolicy {
    match &mut policy {
        FilterPolicy::BlockedBloom { bits_per_key }
        | FilterPolicy::ClassicBloom { bits_per_key }
        | FilterPolicy::Budgeted { bits_per_key }
        | FilterPolicy::Ribbon { bits_per_key, .. }
        | FilterPolicy::BudgetedRibbon { bits_per_key, .. } => *bits_per_key *= share,
        FilterPolicy::None => {}
    }
    policy
}

/// `r`, the share of whole keys among the entries of the filters that hold both keys and
/// prefixes, over the tree as it will be once the write `placement` describes is done: the
/// tables it replaces left out, its new tables' prefixes estimated by [`new_prefixes`] (1 if
/// no filter holds prefixes). Every table sized at `b · r` bits per entry, the tree's filters
/// hold `b · Σ n` bits, what they would hold without prefixes.
///
/// Taken before the write, the share would lag: a compaction into the last level would be
/// sized with its inputs of a few keys per prefix still counted, though it merges them away,
/// and its tables would get too few bits. The deepest level's share alone would overspend:
/// smaller levels, fewer keys per prefix, would get more bits per key than it and nothing
/// would pay for them.
fn key_share(version: &Version, placement: &Placement) -> f64 {
    let (mut keys, mut entries) = (0u64, 0u64);
    for t in version.levels.iter().flatten() {
        if holds_prefixes(t) && !is_among(t, placement.replaces) {
            let total = t.table.filter().num_keys();
            entries = entries.saturating_add(total);
            keys = keys.saturating_add(total.saturating_sub(t.table.properties().num_prefixes));
        }
    }
    let new_prefixes = new_prefixes(version, placement);
    if new_prefixes > 0 {
        keys = keys.saturating_add(placement.keys);
        entries = entries.saturating_add(placement.keys).saturating_add(new_prefixes);
    }
    if entries > 0 && keys > 0 {
        keys as f64 / entries as f64
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_space;

    #[test]
    fn the_prefix_space_is_solved_from_the_prefixes_keys_hit() {
        // 2M keys over 2M prefixes hit 1 − 1/e of them.
        let hit = 2e6 * (1.0 - (-1.0f64).exp());
        let space = prefix_space(2e6, hit).unwrap();
        assert!((space / 2e6 - 1.0).abs() < 1e-6, "{space}");
        // Ten keys per prefix: nearly every prefix is hit.
        let hit = 2e5 * (1.0 - (-10.0f64).exp());
        let space = prefix_space(2e6, hit).unwrap();
        assert!((space / 2e5 - 1.0).abs() < 1e-6, "{space}");
        // Every key a prefix of its own.
        assert_eq!(prefix_space(1000.0, 1000.0), None);
    }
}
