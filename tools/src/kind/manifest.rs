//! Everything the tool does with one manifest (`MANIFEST-*`): `dump` — every version edit
//! (tables added and deleted, keyspaces defined and dropped, counters); `verify`. (`inspect` is for tables only.)

use std::io::Write;
use std::path::Path;

use bloomkv::check;
use bloomkv::fs::{FileSystem, StdFs};
use bloomkv_tree::key::parse_internal_key;
use bloomkv_tree::log::LogReader;
use bloomkv_tree::version::edit::{KeyspaceDef, VersionEdit};
use serde::Serialize;

use super::sink::{DumpError, Sink};

/// One manifest record as `dump` shows it; field names are part of the tool's interface
/// (see docs/tool.md).
#[derive(Serialize, Debug)]
pub struct Edit {
    offset: u64,
    log_number: Option<u64>,
    next_file_number: Option<u64>,
    last_seq: Option<u64>,
    next_keyspace_id: Option<u32>,
    /// The clock's high-water mark (ms since the epoch) that expiry decisions have reached.
    clock_mark: Option<u64>,
    /// Keyspaces created, or whose options changed.
    keyspaces: Vec<KeyspaceReport>,
    dropped_keyspaces: Vec<u32>,
    added: Vec<AddedTable>,
    deleted: Vec<DeletedTable>,
}

/// A keyspace definition: its id (what WAL records and tables name it by), name and
/// options. For the default keyspace (id 0) the manifest records only the settings opens
/// check: its prefix settings and callback names.
#[derive(Serialize, Debug)]
pub struct KeyspaceReport {
    pub id: u32,
    pub name: String,
    /// Null only if the tool cannot read the options (see [`options_report`]).
    pub options: Option<OptionsReport>,
    /// The names of its merge operator and compaction filter; null where the manifest does
    /// not record them (written by an older build).
    pub callbacks: Option<CallbacksReport>,
}

/// The callback names a manifest records for a keyspace.
#[derive(Serialize, Debug, PartialEq)]
pub struct CallbacksReport {
    /// Null without a merge operator.
    pub merge_operator: Option<String>,
    /// Null without a compaction filter; `""` for an unnamed one.
    pub compaction_filter: Option<String>,
}

impl KeyspaceReport {
    /// The report of `def`.
    pub fn new(def: &KeyspaceDef) -> Self {
        KeyspaceReport {
            id: def.id,
            name: def.name.clone(),
            options: options_report(def),
            callbacks: def.callbacks.as_ref().map(|c| CallbacksReport {
                merge_operator: c.merge_operator.clone(),
                compaction_filter: c.compaction_filter.clone(),
            }),
        }
    }
}

impl std::fmt::Display for CallbacksReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |n: &Option<String>| match n.as_deref() {
            None => "none".to_string(),
            Some("") => "unnamed".to_string(),
            Some(n) => format!("{n:?}"),
        };
        write!(
            f,
            "merge operator {}, compaction filter {}",
            show(&self.merge_operator),
            show(&self.compaction_filter)
        )
    }
}

/// A keyspace's table options, with the names `keyspace create` takes.
#[derive(Serialize, Debug, PartialEq)]
pub struct OptionsReport {
    /// "none", "blocked", "classic", "budgeted", "ribbon" or "budgeted-ribbon".
    pub filter: &'static str,
    /// Null without a filter.
    pub bits_per_key: Option<f64>,
    /// Ribbon only: the levels below this one get blocked Bloom filters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bloom_before_level: Option<u8>,
    /// "none" or "zstd".
    pub compression: &'static str,
    /// Null without compression.
    pub zstd_level: Option<i32>,
    pub block_bytes: u64,
    pub target_table_bytes: u64,
    /// The compaction style: "leveled", "tiered", "lazy leveling", "fluid k=K z=Z" or
    /// "fifo" with its bounds.
    pub compaction: String,
    /// The prefix extractor's name; left out without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_extractor: Option<String>,
    /// Whether filters hold whole keys; left out when they do (the default).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub without_whole_keys: bool,
    /// The default time to live of plain puts, in milliseconds; left out without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_ttl_ms: Option<u64>,
    /// Bits per key of new tables' range filters; left out without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_filter_bits_per_key: Option<f64>,
    /// Under a budgeted policy, the share of range reads the budget is split for; left out
    /// without a read mix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_read_share: Option<f64>,
    /// Their width; left out without a read mix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_read_width: Option<u64>,
}

impl std::fmt::Display for OptionsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "filter {}", self.filter)?;
        if let Some(b) = self.bits_per_key {
            write!(f, " {b} bits/key")?;
        }
        if let Some(l) = self.bloom_before_level {
            write!(f, " (blocked Bloom below level {l})")?;
        }
        write!(f, ", compression {}", self.compression)?;
        if let Some(l) = self.zstd_level {
            write!(f, " level {l}")?;
        }
        write!(f, ", blocks {} bytes, tables {} bytes", self.block_bytes, self.target_table_bytes)?;
        write!(f, ", compaction {}", self.compaction)?;
        if let Some(e) = &self.prefix_extractor {
            write!(f, ", prefix {e}")?;
        }
        if self.without_whole_keys {
            write!(f, ", filters without whole keys")?;
        }
        if let Some(ms) = self.default_ttl_ms {
            write!(f, ", default ttl {ms} ms")?;
        }
        if let Some(b) = self.range_filter_bits_per_key {
            write!(f, ", range filter {b} bits/key")?;
        }
        if let (Some(s), Some(w)) = (self.range_read_share, self.range_read_width) {
            write!(f, ", read mix {s} ranges {w} wide")?;
        }
        Ok(())
    }
}

/// A compaction style as `db` and `dump` print it. (`None` only for a style this tool does
/// not know.)
fn style_name(style: bloomkv::CompactionStyle) -> Option<String> {
    use bloomkv::CompactionStyle;
    Some(match style {
        CompactionStyle::Leveled => "leveled".into(),
        CompactionStyle::Tiered => "tiered".into(),
        CompactionStyle::LazyLeveling => "lazy leveling".into(),
        CompactionStyle::Fluid { k, z } => format!("fluid k={k} z={z}"),
        CompactionStyle::Fifo { max_bytes, max_age } => {
            let age = max_age.map_or(String::new(), |a| format!(", max age {} ms", a.as_millis()));
            match max_bytes {
                u64::MAX => format!("fifo{}", age.replacen(',', "", 1)),
                n => format!("fifo max {n} bytes{age}"),
            }
        }
        #[allow(unreachable_patterns)]
        _ => return None,
    })
}

/// `def`'s options field by field. (`None` only for a policy this tool does not know.)
pub fn options_report(def: &KeyspaceDef) -> Option<OptionsReport> {
    options_report_of(&def.opts)
}

/// `opts` field by field. (`None` only for a policy this tool does not know.)
pub fn options_report_of(opts: &bloomkv::KeyspaceOptions) -> Option<OptionsReport> {
    use bloomkv::{Compression, FilterPolicy};
    let (policy, compression, block_bytes, target_table_bytes) = opts.parts();
    let (filter, bits_per_key) = match policy {
        FilterPolicy::None => ("none", None),
        FilterPolicy::BlockedBloom { bits_per_key } => ("blocked", Some(bits_per_key)),
        FilterPolicy::ClassicBloom { bits_per_key } => ("classic", Some(bits_per_key)),
        FilterPolicy::Budgeted { bits_per_key } => ("budgeted", Some(bits_per_key)),
        FilterPolicy::Ribbon { bits_per_key, .. } => ("ribbon", Some(bits_per_key)),
        FilterPolicy::BudgetedRibbon { bits_per_key, .. } => {
            ("budgeted-ribbon", Some(bits_per_key))
        }
        #[allow(unreachable_patterns)]
        _ => return None,
    };
    let (compression, zstd_level) = match compression {
        Compression::None => ("none", None),
        Compression::Zstd { level } => ("zstd", Some(level)),
        #[allow(unreachable_patterns)]
        _ => return None,
    };
    let bloom_before_level = match policy {
        FilterPolicy::Ribbon { bloom_before_level, .. }
        | FilterPolicy::BudgetedRibbon { bloom_before_level, .. } => Some(bloom_before_level),
        _ => None,
    };
    Some(OptionsReport {
        filter,
        bits_per_key,
        bloom_before_level,
        compression,
        zstd_level,
        block_bytes: block_bytes as u64,
        target_table_bytes,
        compaction: style_name(opts.compaction_style)?,
        prefix_extractor: opts.prefix_parts().0.map(|e| e.name()),
        without_whole_keys: !opts.prefix_parts().1,
        default_ttl_ms: opts.ttl_part().map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        range_filter_bits_per_key: opts.range_filter_bits_per_key,
        range_read_share: opts.read_mix.map(|m| m.range_share),
        range_read_width: opts.read_mix.map(|m| m.range_width),
    })
}

#[derive(Serialize, Debug)]
pub struct AddedTable {
    /// The keyspace id (0 is the default keyspace).
    keyspace: u32,
    level: usize,
    number: u64,
    file_size: u64,
    smallest_key: String,
    largest_key: String,
    smallest_seq: u64,
    largest_seq: u64,
    entries: u64,
}

#[derive(Serialize, Debug)]
pub struct DeletedTable {
    level: usize,
    number: u64,
}

/// `dump`: every version edit in log order (`--from/--to/--prefix/--limit` do not apply).
pub fn dump(sink: &mut Sink, path: &Path) -> Result<(), DumpError> {
    let mut reader = LogReader::new(path.to_path_buf(), StdFs.read_all(path)?);
    let fmt = sink.fmt;
    let uk = |ik: &[u8]| fmt.show(parse_internal_key(ik).map_or(&[][..], |k| k.user_key));
    while let Some(record) = reader.next_record()? {
        let offset = reader.last_record_offset();
        let edit = VersionEdit::decode(&record).map_err(|e| e.in_file(path, offset))?;
        let e = Edit {
            offset,
            log_number: edit.log_number,
            next_file_number: edit.next_file_number,
            last_seq: edit.last_seq,
            next_keyspace_id: edit.next_keyspace_id,
            clock_mark: edit.clock_mark,
            keyspaces: edit.keyspaces.iter().map(KeyspaceReport::new).collect(),
            dropped_keyspaces: edit.dropped_keyspaces.clone(),
            added: edit
                .added
                .iter()
                .map(|(level, t)| AddedTable {
                    keyspace: t.keyspace,
                    level: *level,
                    number: t.number,
                    file_size: t.file_size,
                    smallest_key: uk(&t.smallest),
                    largest_key: uk(&t.largest),
                    smallest_seq: t.smallest_seq,
                    largest_seq: t.largest_seq,
                    entries: t.num_entries,
                })
                .collect(),
            deleted: edit
                .deleted
                .iter()
                .map(|&(level, number)| DeletedTable { level, number })
                .collect(),
        };
        sink.report.count += 1;
        if sink.json {
            sink.report.edits.push(e);
            continue;
        }
        let opt = |o: Option<u64>| o.map_or("-".to_string(), |v| v.to_string());
        write!(
            sink.out,
            "edit @ {}: log number {}, next file {}, last seq {}",
            e.offset,
            opt(e.log_number),
            opt(e.next_file_number),
            opt(e.last_seq)
        )?;
        // Only edits that create a keyspace carry it; most edits are flushes and compactions.
        if let Some(id) = e.next_keyspace_id {
            write!(sink.out, ", next keyspace id {id}")?;
        }
        // Only databases that judged expiry record a mark.
        match e.clock_mark {
            Some(mark) => writeln!(sink.out, ", clock mark {mark} ms")?,
            None => writeln!(sink.out)?,
        }
        for k in &e.keyspaces {
            let mut line = match &k.options {
                // The default keyspace's table options come from each opener's `Options`:
                // only its prefix settings are recorded.
                Some(o) if k.id == 0 => {
                    let prefix = o.prefix_extractor.as_deref().unwrap_or("none");
                    let whole =
                        if o.without_whole_keys { ", filters without whole keys" } else { "" };
                    format!("prefix {prefix}{whole}")
                }
                Some(o) => o.to_string(),
                None => "options unreadable".to_string(),
            };
            if let Some(c) = &k.callbacks {
                line.push_str(&format!(", {c}"));
            }
            writeln!(sink.out, "  keyspace {} {:?}: {line}", k.id, k.name)?;
        }
        for id in &e.dropped_keyspaces {
            writeln!(sink.out, "  dropped keyspace {id}")?;
        }
        let q = |s: &str| if fmt.hex { s.to_string() } else { format!("\"{s}\"") };
        for t in &e.added {
            let keyspace =
                if t.keyspace == 0 { String::new() } else { format!(" keyspace {}", t.keyspace) };
            writeln!(
                sink.out,
                "  + L{} {:06}.sst{keyspace} {} bytes, keys {} .. {}, seq {} .. {}, {} entries",
                t.level,
                t.number,
                t.file_size,
                q(&t.smallest_key),
                q(&t.largest_key),
                t.smallest_seq,
                t.largest_seq,
                t.entries
            )?;
        }
        for t in &e.deleted {
            writeln!(sink.out, "  - L{} {:06}.sst", t.level, t.number)?;
        }
    }
    Ok(())
}

/// `verify`: the library's check of one manifest.
pub fn verify(path: &Path) -> check::Report {
    check::manifest_file(&StdFs, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomkv::{CompactionStyle, Compression, FilterPolicy, KeyspaceOptions};
    use std::time::Duration;

    #[test]
    fn options_report_reads_every_option() {
        let opts = KeyspaceOptions::new()
            .filter_policy(FilterPolicy::ClassicBloom { bits_per_key: 7.5 })
            .compression(Compression::Zstd { level: -3 })
            .block_bytes(2048)
            .target_table_bytes(1 << 20)
            .range_filter_bits_per_key(Some(16.0));
        let def = KeyspaceDef { id: 3, name: "k".into(), opts, callbacks: None };
        let want = OptionsReport {
            filter: "classic",
            bits_per_key: Some(7.5),
            bloom_before_level: None,
            compression: "zstd",
            zstd_level: Some(-3),
            block_bytes: 2048,
            target_table_bytes: 1 << 20,
            compaction: "leveled".into(),
            prefix_extractor: None,
            without_whole_keys: false,
            default_ttl_ms: None,
            range_filter_bits_per_key: Some(16.0),
            range_read_share: None,
            range_read_width: None,
        };
        assert_eq!(options_report(&def), Some(want));
        let def =
            KeyspaceDef { opts: KeyspaceOptions::new().filter_policy(FilterPolicy::None), ..def };
        let r = options_report(&def).unwrap();
        assert_eq!(
            (r.filter, r.bits_per_key, r.compression, r.zstd_level),
            ("none", None, "none", None)
        );
        let ribbon = FilterPolicy::Ribbon { bits_per_key: 7.35, bloom_before_level: 2 };
        let def = KeyspaceDef { opts: KeyspaceOptions::new().filter_policy(ribbon), ..def };
        let r = options_report(&def).unwrap();
        assert_eq!(
            (r.filter, r.bits_per_key, r.bloom_before_level),
            ("ribbon", Some(7.35), Some(2))
        );
        assert!(r
            .to_string()
            .starts_with("filter ribbon 7.35 bits/key (blocked Bloom below level 2)"));
        let named = |style| {
            let def =
                KeyspaceDef { opts: KeyspaceOptions::new().compaction_style(style), ..def.clone() };
            options_report(&def).unwrap().to_string()
        };
        assert!(named(CompactionStyle::LazyLeveling).contains(", compaction lazy leveling"));
        assert!(named(CompactionStyle::Fluid { k: 3, z: 1 }).contains(", compaction fluid k=3 z=1"));
        let fifo =
            CompactionStyle::Fifo { max_bytes: 1 << 20, max_age: Some(Duration::from_secs(60)) };
        assert!(named(fifo).contains(", compaction fifo max 1048576 bytes, max age 60000 ms"));
        let fifo =
            CompactionStyle::Fifo { max_bytes: u64::MAX, max_age: Some(Duration::from_secs(1)) };
        assert!(named(fifo).contains(", compaction fifo max age 1000 ms"));
        let opts = KeyspaceOptions::new()
            .prefix_extractor(Some(bloomkv::PrefixExtractor::UpToDelimiter(b'/')))
            .whole_key_filtering(false);
        let r = options_report(&KeyspaceDef { opts, ..def.clone() }).unwrap();
        assert_eq!(r.prefix_extractor.as_deref(), Some("delimiter:0x2f"));
        assert!(r.to_string().ends_with(", prefix delimiter:0x2f, filters without whole keys"));
        let opts = KeyspaceOptions::new()
            .filter_policy(FilterPolicy::Budgeted { bits_per_key: 20.0 })
            .read_mix(Some(bloomkv::ReadMix::new(0.25, 64)));
        let r = options_report(&KeyspaceDef { opts, ..def }).unwrap();
        assert_eq!((r.range_read_share, r.range_read_width), (Some(0.25), Some(64)));
        assert!(r.to_string().ends_with(", read mix 0.25 ranges 64 wide"));
    }
}
