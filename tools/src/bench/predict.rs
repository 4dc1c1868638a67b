//! What theory predicts for the bench's missing keys, from the engine's own per-table
//! figures, and the filter bits per key the report shows beside it.

use bloomkv::Db;

use super::Policy;

/// What theory predicts for a lookup of a missing key of the run (`keys::absent_key` of a
/// uniform number in `0..keys`), from the engine's per-table figures ([`Db::tables`]: each
/// filter's own rate at its actual fill, 1.0 for no filter).
#[derive(Debug, Clone, Copy)]
pub(super) struct Theory {
    /// Tables whose key range holds the key, per lookup.
    pub(super) tables: f64,
    /// Data blocks searched per lookup: Σ over tables of the chance the key is in the
    /// table's range × the table's false-positive rate for it (its filter's rate, times the
    /// chance its prefix is let through too where the filter holds prefixes). Under a
    /// budget the tables' rates differ by orders of magnitude, so no single rate times a
    /// table count would do.
    pub(super) blocks: f64,
    /// Σ over tables of the chance the key is in the table's range × its filter's own rate:
    /// the rate of one probe, as an absent prefix meets it.
    filter_answers: f64,
    /// The policy's own rate, for a tree without tables.
    pub(super) fallback_fpr: f64,
}

impl Theory {
    /// The rate per table consulted (what `measured_fpr` measures).
    pub(super) fn fpr(&self) -> f64 {
        self.per_table(self.blocks)
    }

    /// One filter probe's false-positive rate per table consulted: what a scan of an absent
    /// prefix meets.
    pub(super) fn probe_fpr(&self) -> f64 {
        self.per_table(self.filter_answers)
    }

    fn per_table(&self, sum: f64) -> f64 {
        if self.tables > 0.0 {
            sum / self.tables
        } else {
            self.fallback_fpr
        }
    }
}

pub(super) fn missing_key_theory(db: &Db, keys: u64, policy: Policy, bits_per_key: f64) -> Theory {
    let fallback_fpr = policy.expected_fpr(bits_per_key);
    let mut theory = Theory { tables: 0.0, blocks: 0.0, filter_answers: 0.0, fallback_fpr };
    for t in db.tables() {
        let share = absent_share(&t.smallest_key, &t.largest_key, keys);
        theory.tables += share;
        theory.blocks += share * t.expected_fpr * prefix_pass_rate(&t);
        theory.filter_answers += share * t.expected_fpr;
    }
    theory
}

/// The chance that a table whose filter said "maybe" for a missing key also says "maybe" for
/// the key's prefix, which a lookup then asks (1.0 for a table without prefix entries). A
/// missing key of the prefix layout keeps a present prefix; the table holds a share `q` of
/// the present prefixes in its range, and answers falsely for the others at its rate, so the
/// chance is `q + (1 − q)·f`: a table of one key per prefix (an L0 table of random writes)
/// answers falsely for the key about `f²` of the time, one holding every prefix `f`.
fn prefix_pass_rate(t: &bloomkv::TableInfo) -> f64 {
    let ours = Some(super::keys::PREFIX_BYTES);
    let (Some(lo), Some(hi)) = (key_number(&t.smallest_key), key_number(&t.largest_key)) else {
        return 1.0;
    };
    if super::keys::keys_per_prefix() == 0
        || t.prefix_extractor.as_deref().and_then(|e| e.strip_prefix("fixed:")?.parse().ok())
            != ours
    {
        return 1.0;
    }
    // Present prefixes are the even numbers in the key's first half.
    let (first, last) = (lo / super::keys::PREFIX_SCALE, hi / super::keys::PREFIX_SCALE);
    let in_range = (last / 2).saturating_sub(first.div_ceil(2)) + 1;
    let q = (t.prefixes as f64 / in_range as f64).min(1.0);
    q + (1.0 - q) * t.expected_fpr
}

/// The share of the missing keys `absent_key(j)`, `j` in `0..keys`, that lie in
/// `[smallest, largest]` (1.0 if the bounds are not the bench's decimal keys). Missing keys'
/// numbers grow with `j` in either layout, so the ones inside are one run, found by binary
/// search.
pub(super) fn absent_share(smallest: &[u8], largest: &[u8], keys: u64) -> f64 {
    let (Some(lo), Some(hi)) = (key_number(smallest), key_number(largest)) else { return 1.0 };
    if keys == 0 {
        return 0.0;
    }
    let first_at_or_above = |x: u64| {
        let (mut a, mut b) = (0u64, keys);
        while a < b {
            let m = a + (b - a) / 2;
            if super::keys::absent_number(m) < x {
                a = m + 1;
            } else {
                b = m;
            }
        }
        a
    };
    let first = first_at_or_above(lo);
    let end = first_at_or_above(hi.saturating_add(1));
    end.saturating_sub(first) as f64 / keys as f64
}

/// Filter bits per table entry over all tables, and per level (0 where a level is empty).
pub(super) fn filter_bits_per_key(db: &Db) -> (f64, Vec<f64>) {
    let tables = db.tables();
    let levels = tables.iter().map(|t| t.level + 1).max().unwrap_or(0);
    let ratio = |bits: u64, keys: u64| if keys == 0 { 0.0 } else { bits as f64 / keys as f64 };
    let per_level = (0..levels)
        .map(|l| {
            let on = tables.iter().filter(|t| t.level == l);
            let bits = on.clone().map(|t| t.filter_memory_bytes as u64 * 8).sum();
            ratio(bits, on.map(|t| t.entries).sum())
        })
        .collect();
    let bits = tables.iter().map(|t| t.filter_memory_bytes as u64 * 8).sum();
    (ratio(bits, tables.iter().map(|t| t.entries).sum()), per_level)
}

/// The number a bench key stands for (its decimal digits), or `None` for any other key.
fn key_number(key: &[u8]) -> Option<u64> {
    std::str::from_utf8(key).ok()?.parse().ok()
}
