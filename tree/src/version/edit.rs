//! One manifest record: a change to the set of tables and to the engine's counters.
//!
//! # Encoding
//!
//! A sequence of fields, each a varint tag followed by the field's data; all integers are
//! varints and byte strings are varint-length-prefixed:
//!
//! ```text
//! tag 1  format version   u           must come first; this code writes and reads 1
//! tag 2  log number       u           WAL files numbered below this are obsolete
//! tag 3  next file number u
//! tag 4  last sequence    u
//! tag 5  deleted table    level u, file number u
//! tag 6  added table      level u, number u, file size u, smallest bytes, largest bytes,
//!                         smallest seq u, largest seq u, entry count u
//!                         (a table of the default keyspace, 0)
//! tag 7  added table      keyspace u, then as tag 6 (a table of any other keyspace)
//! tag 8  keyspace         id u, name bytes, options: filter kind u (0 none, 1 blocked,
//!                         2 classic, 3 budgeted, 4 Ribbon, 5 budgeted Ribbon), bits per
//!                         key u (f64 bits), for kinds 4 and 5 bloom_before_level u,
//!                         compression u (0 none, 1 zstd), zstd level u (zigzag), block
//!                         bytes u, target table bytes u — a keyspace created, or its
//!                         options changed
//! tag 9  keyspace dropped id u
//! tag 10 next keyspace id u
//! tag 11 keyspace prefix  id u, extractor name bytes (empty for none), whole keys in
//!                         filters u (0 or 1) — right after the tag 8 of the same keyspace,
//!                         written only when either differs from the default
//! tag 12 keyspace ttl     id u, default time to live in milliseconds u (at least 1) —
//!                         right after the tag 8 (or 11) of the same keyspace, written only
//!                         when the keyspace has a default time to live
//! tag 13 keyspace callbacks id u, merge operator (u 0 none, or 1 then name bytes),
//!                         compaction filter (likewise; an empty name is an unnamed filter)
//!                         — after the tag 8 (11, 12) of the same keyspace; for the default
//!                         keyspace (id 0, which has no tag 8) it stands first, and its tags
//!                         11 and 12 follow it
//! tag 14 table blob refs  count u, then count × (blob file number u, references u,
//!                         value bytes u), files ascending — right after the tag 6 or 7 of
//!                         the table that holds them; none: the table references no blob
//! tag 15 blob file added  number u, value bytes u, values u, file size u
//! tag 16 blob file dropped number u
//! tag 17 keyspace range filter id u, bits per key u (f64 bits, 4 to 40) — after the
//!                         keyspace's other fields (tag 8, 11, 12 or 13 of the same named
//!                         keyspace), written only when its tables get a range filter
//! tag 18 kept WAL segment number u, values u, file size u: WAL segment `number` kept as a
//!                         blob file (its bytes for values are its size), in the edit whose
//!                         log number retires it
//! tag 19 keyspace blobs   id u, blob threshold u (0: none), GC age cutoff u and force
//!                         threshold u (f64 bits, 0 to 1) — after the keyspace's other
//!                         fields (tag 8, 11, 12, 13 or 17 of the same named keyspace),
//!                         written only when one of them is not the default
//! tag 21 keyspace compaction style id u, style u (1 FIFO, 2 tiered, 3 lazy leveling,
//!                         4 fluid), for FIFO max bytes u and max age in milliseconds u
//!                         (0: none), for fluid k u and z u — after the keyspace's other
//!                         fields (tag 8, 11, 12, 13, 17 or 19 of the same named keyspace),
//!                         written only when the style is not leveled
//! tag 20 clock mark       u: the clock's high-water mark, milliseconds since the Unix
//!                         epoch — at most once; the highest over the manifest is kept
//! tag 0  end              must come last, with nothing after it
//! ```
//!
//! A manifest of a database that never had a keyspace besides the default one uses tags 1–6,
//! and 13 (with 11) for the default keyspace's recorded settings. Keyspace ids are never reused (tag 10 keeps
//! the next one across manifest rewrites): WAL records name keyspaces by id, and an old
//! segment's writes to a dropped keyspace must not land in a new one.
//!
//! A keyspace without tag 13 was recorded by a build that did not record callback names
//! (nor, for the default keyspace, its prefix settings): those are unknown, not absent.
//!
//! Tags rather than a fixed layout let a later format add fields; the leading format
//! version lets an older reader refuse a newer manifest outright instead of misreading it.
//! Any tag this code does not know is [`crate::Error::Corruption`]: silently skipping a
//! field could lose a table. The end tag makes a record cut short at a field boundary
//! detectable on its own, without relying on the log's CRC. Tags 2–4 and 10 may appear at
//! most once; keyspace ids fit in 32 bits and names are UTF-8 of 1 to 255 bytes; levels must be below [`MAX_LEVELS`]; smallest and largest keys must be internal
//! keys; sequence numbers must fit in 56 bits. Decoding never panics and never sizes an
//! allocation from an unchecked length.

use crate::blob::{BlobFileKind, BlobFileMeta, BlobRefs};
use crate::coding::{put_bytes, put_varint, Decoder};
use crate::filter::FilterPolicy;
use crate::key::{self, parse_internal_key, SeqNo, MAX_SEQNO};
use crate::options::{CompactionStyle, KeyspaceOptions};
use crate::prefix::PrefixExtractor;
use crate::table::properties::TableProperties;
use crate::table::Compression;
use crate::{Error, Result};

/// A keyspace's number: 0 is the default keyspace; others count up from 1, never reused.
pub type KeyspaceId = u32;

/// The default keyspace, which every database has and which cannot be dropped.
pub const DEFAULT_KEYSPACE: KeyspaceId = 0;

/// Longest keyspace name, in bytes.
pub const MAX_KEYSPACE_NAME_BYTES: usize = 255;

/// The format version written into every edit.
pub const FORMAT_VERSION: u64 = 1;

/// Levels allowed by the format (the engine may use fewer).
pub const MAX_LEVELS: usize = 16;

const TAG_END: u64 = 0;
const TAG_FORMAT_VERSION: u64 = 1;
const TAG_LOG_NUMBER: u64 = 2;
const TAG_NEXT_FILE_NUMBER: u64 = 3;
const TAG_LAST_SEQ: u64 = 4;
const TAG_DELETED: u64 = 5;
const TAG_ADDED: u64 = 6;
const TAG_ADDED_IN: u64 = 7;
const TAG_KEYSPACE: u64 = 8;
const TAG_KEYSPACE_DROPPED: u64 = 9;
const TAG_NEXT_KEYSPACE_ID: u64 = 10;
const TAG_KEYSPACE_PREFIX: u64 = 11;
const TAG_KEYSPACE_TTL: u64 = 12;
const TAG_KEYSPACE_CALLBACKS: u64 = 13;
const TAG_TABLE_BLOB_REFS: u64 = 14;
const TAG_BLOB_ADDED: u64 = 15;
const TAG_BLOB_DROPPED: u64 = 16;
const TAG_KEYSPACE_RANGE_FILTER: u64 = 17;
const TAG_KEPT_WAL: u64 = 18;
const TAG_KEYSPACE_BLOBS: u64 = 19;
const TAG_CLOCK_MARK: u64 = 20;
const TAG_KEYSPACE_COMPACTION_STYLE: u64 = 21;
const TAG_KEYSPACE_READ_MIX: u64 = 23;

/// What the manifest records about one table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableMeta {
    /// The keyspace whose tree the table belongs to.
    pub keyspace: KeyspaceId,
    /// File number; the table lives in `<number>.sst`.
    pub number: u64,
    /// Size of the file in bytes.
    pub file_size: u64,
    /// Smallest encoded internal key in the table.
    pub smallest: Vec<u8>,
    /// Largest encoded internal key in the table.
    pub largest: Vec<u8>,
    /// Smallest sequence number of any entry.
    pub smallest_seq: SeqNo,
    /// Largest sequence number of any entry.
    pub largest_seq: SeqNo,
    /// Number of entries.
    pub num_entries: u64,
    /// Per blob file it references (ascending by file): how many references and their
    /// values' bytes. Empty for a table without references (and for every table recorded
    /// before blob files existed).
    pub blob_refs: Vec<BlobRefs>,
}

impl TableMeta {
    /// What a table's manifest record claims and the table's own properties contradict, one
    /// message per fact. Recovery refuses a table with any: a lookup trusts the record's key
    /// range to decide whether to ask the table at all, so a narrower record hides entries
    /// (and can make a level look disjoint when its tables overlap). `verify` reports them.
    pub fn disagreements(&self, p: &TableProperties) -> Vec<String> {
        let mut out = Vec::new();
        let mut differs = |what: &str, manifest: String, table: String| {
            if manifest != table {
                out.push(format!(
                    "manifest records {what} {manifest} but the table's properties say {table}"
                ));
            }
        };
        let q = |k: &[u8]| format!("\"{}\"", key::escape(k));
        let uk =
            |ik: &[u8]| parse_internal_key(ik).map(|k| k.user_key.to_vec()).unwrap_or_default();
        // A table of range tombstones alone has a key range too.
        if p.num_entries > 0 || p.num_range_deletions > 0 {
            differs("smallest key", q(&uk(&self.smallest)), q(&p.smallest_user_key));
            differs("largest key", q(&uk(&self.largest)), q(&p.largest_user_key));
        }
        differs("smallest sequence", self.smallest_seq.to_string(), p.smallest_seq.to_string());
        differs("largest sequence", self.largest_seq.to_string(), p.largest_seq.to_string());
        differs("entry count", self.num_entries.to_string(), p.num_entries.to_string());
        out
    }
}

/// A change to the database's table set and counters; the manifest is a log of these.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VersionEdit {
    /// WAL files with lower numbers no longer hold unflushed data.
    pub log_number: Option<u64>,
    /// The next file number to hand out.
    pub next_file_number: Option<u64>,
    /// The last sequence number used.
    pub last_seq: Option<SeqNo>,
    /// Tables added, with their level.
    pub added: Vec<(usize, TableMeta)>,
    /// Tables removed: level and file number (file numbers are unique across keyspaces).
    pub deleted: Vec<(usize, u64)>,
    /// Keyspaces created, or whose options changed. The default keyspace (id 0) appears
    /// only to record its settings ([`KeyspaceDef::callbacks`] set, and the prefix
    /// extractor and whole-key flag among its options; its other options come from
    /// `Options`).
    pub keyspaces: Vec<KeyspaceDef>,
    /// Keyspaces dropped (their tables are deleted in the same edit).
    pub dropped_keyspaces: Vec<KeyspaceId>,
    /// The id the next keyspace created gets.
    pub next_keyspace_id: Option<KeyspaceId>,
    /// The highest time the database's clock has read, in milliseconds since the Unix
    /// epoch: expiry is never judged at an earlier time, even after a reopen with the clock
    /// set back (`clock::MarkedClock`).
    pub clock_mark: Option<u64>,
    /// Blob files added: each in the edit that adds the first table referencing it.
    pub added_blobs: Vec<BlobFileMeta>,
    /// Blob files dropped: no table of the current version references them any more.
    pub dropped_blobs: Vec<u64>,
}

/// A keyspace as the manifest records it.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyspaceDef {
    /// Its id.
    pub id: KeyspaceId,
    /// Its name.
    pub name: String,
    /// How its tables are built.
    pub opts: KeyspaceOptions,
    /// The names of its merge operator and compaction filter, whose objects the manifest
    /// cannot hold; `None` where the manifest does not know them (written by a build that
    /// did not record them).
    pub callbacks: Option<CallbackNames>,
}

impl KeyspaceDef {
    /// The definition of keyspace `id` with `opts`, recording the names of the callbacks
    /// `opts` hold.
    pub fn new(id: KeyspaceId, name: impl Into<String>, opts: KeyspaceOptions) -> Self {
        let callbacks = Some(CallbackNames::of(&opts));
        KeyspaceDef { id, name: name.into(), opts, callbacks }
    }
}

/// The names of a keyspace's callbacks, as the manifest records them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallbackNames {
    /// [`crate::merge::MergeOperator::name`] of its merge operator; `None` without one.
    pub merge_operator: Option<String>,
    /// [`crate::compaction_filter::CompactionFilter::name`] of its compaction filter (empty for an unnamed
    /// one); `None` without one.
    pub compaction_filter: Option<String>,
}

impl CallbackNames {
    /// The names of the callbacks `opts` hold.
    pub fn of(opts: &KeyspaceOptions) -> Self {
        CallbackNames {
            merge_operator: opts.merge_operator.0.as_ref().map(|m| m.name().to_string()),
            compaction_filter: opts.compaction_filter.0.as_ref().map(|f| f.name().to_string()),
        }
    }
}

impl VersionEdit {
    /// Encodes the edit as one manifest record.
    pub fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(32 + self.added.len() * 64 + self.deleted.len() * 4);
        put_varint(&mut buf, TAG_FORMAT_VERSION);
        put_varint(&mut buf, FORMAT_VERSION);
        for (tag, value) in [
            (TAG_LOG_NUMBER, self.log_number),
            (TAG_NEXT_FILE_NUMBER, self.next_file_number),
            (TAG_LAST_SEQ, self.last_seq),
            (TAG_CLOCK_MARK, self.clock_mark),
        ] {
            if let Some(v) = value {
                put_varint(&mut buf, tag);
                put_varint(&mut buf, v);
            }
        }
        for &(level, number) in &self.deleted {
            put_varint(&mut buf, TAG_DELETED);
            put_varint(&mut buf, level as u64);
            put_varint(&mut buf, number);
        }
        for def in &self.keyspaces {
            let o = &def.opts;
            if def.id == DEFAULT_KEYSPACE && def.callbacks.is_none() {
                continue; // nothing is known to record
            }
            if def.id == DEFAULT_KEYSPACE {
                // Its other options come from `Options`: only the settings an open checks
                // are recorded, opened by tag 13.
                encode_callbacks(&mut buf, def);
            } else {
                put_varint(&mut buf, TAG_KEYSPACE);
                put_varint(&mut buf, def.id.into());
                put_bytes(&mut buf, def.name.as_bytes());
                encode_options(&mut buf, o);
            }
            if o.prefix_extractor.is_some() || !o.whole_key_filtering {
                put_varint(&mut buf, TAG_KEYSPACE_PREFIX);
                put_varint(&mut buf, def.id.into());
                let name = o.prefix_extractor.map(|e| e.name()).unwrap_or_default();
                put_bytes(&mut buf, name.as_bytes());
                put_varint(&mut buf, u64::from(o.whole_key_filtering));
            }
            if let Some(ttl) = o.default_ttl {
                put_varint(&mut buf, TAG_KEYSPACE_TTL);
                put_varint(&mut buf, def.id.into());
                put_varint(&mut buf, crate::clock::ttl_millis(ttl).max(1));
            }
            if def.id != DEFAULT_KEYSPACE {
                encode_callbacks(&mut buf, def);
                // The default keyspace's comes from `Options` at each open.
                if let Some(bits) = o.range_filter_bits_per_key {
                    put_varint(&mut buf, TAG_KEYSPACE_RANGE_FILTER);
                    put_varint(&mut buf, def.id.into());
                    put_varint(&mut buf, bits.to_bits());
                }
                let defaults = KeyspaceOptions::default();
                let gc = (o.blob_gc_age_cutoff, o.blob_gc_force_threshold);
                let default_gc = (defaults.blob_gc_age_cutoff, defaults.blob_gc_force_threshold);
                if o.blob_threshold.is_some() || gc != default_gc {
                    put_varint(&mut buf, TAG_KEYSPACE_BLOBS);
                    put_varint(&mut buf, def.id.into());
                    put_varint(&mut buf, o.blob_threshold.map_or(0, |t| t as u64));
                    put_varint(&mut buf, gc.0.to_bits());
                    put_varint(&mut buf, gc.1.to_bits());
                }
                encode_style(&mut buf, def.id, o.compaction_style);
                if let Some(mix) = o.read_mix {
                    put_varint(&mut buf, TAG_KEYSPACE_READ_MIX);
                    put_varint(&mut buf, def.id.into());
                    put_varint(&mut buf, mix.range_share.to_bits());
                    put_varint(&mut buf, mix.range_width);
                }
            }
        }
        for &id in &self.dropped_keyspaces {
            put_varint(&mut buf, TAG_KEYSPACE_DROPPED);
            put_varint(&mut buf, id.into());
        }
        if let Some(id) = self.next_keyspace_id {
            put_varint(&mut buf, TAG_NEXT_KEYSPACE_ID);
            put_varint(&mut buf, id.into());
        }
        for b in &self.added_blobs {
            // A tag of its own rather than a field of tag 15: a build that does not know kept
            // segments refuses the manifest instead of looking for `<number>.blob`.
            let fields = match b.kind {
                BlobFileKind::Separated => {
                    put_varint(&mut buf, TAG_BLOB_ADDED);
                    vec![b.number, b.value_bytes, b.values, b.file_size]
                }
                BlobFileKind::WalSegment => {
                    put_varint(&mut buf, TAG_KEPT_WAL);
                    vec![b.number, b.values, b.file_size]
                }
            };
            for v in fields {
                put_varint(&mut buf, v);
            }
        }
        for &number in &self.dropped_blobs {
            put_varint(&mut buf, TAG_BLOB_DROPPED);
            put_varint(&mut buf, number);
        }
        for (level, t) in &self.added {
            if t.keyspace == DEFAULT_KEYSPACE {
                put_varint(&mut buf, TAG_ADDED);
            } else {
                put_varint(&mut buf, TAG_ADDED_IN);
                put_varint(&mut buf, t.keyspace.into());
            }
            put_varint(&mut buf, *level as u64);
            put_varint(&mut buf, t.number);
            put_varint(&mut buf, t.file_size);
            put_bytes(&mut buf, &t.smallest);
            put_bytes(&mut buf, &t.largest);
            put_varint(&mut buf, t.smallest_seq);
            put_varint(&mut buf, t.largest_seq);
            put_varint(&mut buf, t.num_entries);
            if !t.blob_refs.is_empty() {
                put_varint(&mut buf, TAG_TABLE_BLOB_REFS);
                put_varint(&mut buf, t.blob_refs.len() as u64);
                for r in &t.blob_refs {
                    for v in [r.file, r.count, r.bytes] {
                        put_varint(&mut buf, v);
                    }
                }
            }
        }
        put_varint(&mut buf, TAG_END);
        buf
    }

    /// Decodes a manifest record, checking everything listed in the module documentation.
    /// Errors are [`Error::Corruption`] with offsets inside `data` and no file; the caller
    /// adds the file with [`Error::in_file`].
    pub fn decode(data: &[u8]) -> Result<VersionEdit> {
        let mut d = Decoder::new(data);
        let mut edit = VersionEdit::default();
        let mut field = 0usize;
        let mut previous_tag = TAG_END;
        loop {
            let at = d.position() as u64;
            let bad = |what: String| Error::bad_bytes(at, format!("version edit: {what}"));
            let tag = d.varint().ok_or_else(|| bad("truncated (no end tag)".into()))?;
            if field == 0 && tag != TAG_FORMAT_VERSION {
                return Err(bad(format!("starts with tag {tag}, not the format version")));
            }
            field += 1;
            let last_tag = std::mem::replace(&mut previous_tag, tag);
            let truncated = || bad(format!("field with tag {tag} is truncated or malformed"));
            match tag {
                TAG_END => break,
                TAG_FORMAT_VERSION => {
                    if field != 1 {
                        return Err(bad("format version repeated".into()));
                    }
                    let v = d.varint().ok_or_else(truncated)?;
                    if v != FORMAT_VERSION {
                        return Err(bad(format!("unsupported format version {v}")));
                    }
                }
                TAG_LOG_NUMBER | TAG_NEXT_FILE_NUMBER | TAG_LAST_SEQ | TAG_CLOCK_MARK => {
                    let v = d.varint().ok_or_else(truncated)?;
                    let slot = match tag {
                        TAG_LOG_NUMBER => &mut edit.log_number,
                        TAG_NEXT_FILE_NUMBER => &mut edit.next_file_number,
                        TAG_CLOCK_MARK => &mut edit.clock_mark,
                        _ => {
                            if v > MAX_SEQNO {
                                return Err(bad(format!("last sequence {v} exceeds 56 bits")));
                            }
                            &mut edit.last_seq
                        }
                    };
                    if slot.replace(v).is_some() {
                        return Err(bad(format!("field with tag {tag} repeated")));
                    }
                }
                TAG_DELETED => {
                    let level = level(&mut d).map_err(&bad)?;
                    let number = d.varint().ok_or_else(truncated)?;
                    edit.deleted.push((level, number));
                }
                TAG_ADDED | TAG_ADDED_IN => {
                    let keyspace = match tag {
                        TAG_ADDED => DEFAULT_KEYSPACE,
                        _ => keyspace_id(&mut d).map_err(&bad)?,
                    };
                    let level = level(&mut d).map_err(&bad)?;
                    let meta = table_meta(&mut d, keyspace).map_err(bad)?;
                    edit.added.push((level, meta));
                }
                TAG_KEYSPACE => {
                    let id = keyspace_id(&mut d).map_err(&bad)?;
                    let name = d.length_prefixed().ok_or_else(truncated)?;
                    let name = keyspace_name(name).map_err(&bad)?;
                    let opts = decode_options(&mut d).map_err(&bad)?;
                    if id == DEFAULT_KEYSPACE {
                        return Err(bad("the default keyspace has no definition".into()));
                    }
                    edit.keyspaces.push(KeyspaceDef { id, name, opts, callbacks: None });
                }
                TAG_KEYSPACE_PREFIX => {
                    let id = keyspace_id(&mut d).map_err(&bad)?;
                    let name = d.length_prefixed().ok_or_else(truncated)?;
                    let whole = d.varint().ok_or_else(truncated)?;
                    let Some(def) = edit
                        .keyspaces
                        .last_mut()
                        .filter(|k| k.id == id && last_tag == opening_tag(id))
                    else {
                        return Err(bad(format!(
                            "prefix settings of keyspace {id} not after its definition"
                        )));
                    };
                    let extractor = match name {
                        [] => None,
                        n => Some(
                            std::str::from_utf8(n)
                                .ok()
                                .and_then(PrefixExtractor::from_name)
                                .ok_or_else(|| bad("unknown prefix extractor".into()))?,
                        ),
                    };
                    def.opts.prefix_extractor = extractor;
                    def.opts.whole_key_filtering = match whole {
                        0 => false,
                        1 => true,
                        w => return Err(bad(format!("whole-key flag {w} is not 0 or 1"))),
                    };
                }
                TAG_KEYSPACE_TTL => {
                    let id = keyspace_id(&mut d).map_err(&bad)?;
                    let ms = d.varint().ok_or_else(truncated)?;
                    let Some(def) = edit.keyspaces.last_mut().filter(|k| {
                        k.id == id
                            && (last_tag == opening_tag(id) || last_tag == TAG_KEYSPACE_PREFIX)
                    }) else {
                        return Err(bad(format!(
                            "time to live of keyspace {id} not after its definition"
                        )));
                    };
                    if ms == 0 {
                        return Err(bad(format!("keyspace {id} has a time to live of 0 ms")));
                    }
                    def.opts.default_ttl = Some(std::time::Duration::from_millis(ms));
                }
                TAG_KEYSPACE_CALLBACKS => {
                    let id = keyspace_id(&mut d).map_err(&bad)?;
                    let mut name = || -> std::result::Result<Option<String>, Error> {
                        match d.varint().ok_or_else(truncated)? {
                            0 => Ok(None),
                            1 => {
                                let n = d.length_prefixed().ok_or_else(truncated)?;
                                let n = std::str::from_utf8(n)
                                    .map_err(|_| bad("callback name is not UTF-8".into()))?;
                                Ok(Some(n.to_string()))
                            }
                            p => Err(bad(format!("callback presence {p} is not 0 or 1"))),
                        }
                    };
                    let names =
                        CallbackNames { merge_operator: name()?, compaction_filter: name()? };
                    if id == DEFAULT_KEYSPACE {
                        if edit.keyspaces.iter().any(|k| k.id == DEFAULT_KEYSPACE) {
                            return Err(bad("default keyspace settings repeated".into()));
                        }
                        let mut def = crate::version::set::default_keyspace_def();
                        def.callbacks = Some(names);
                        edit.keyspaces.push(def);
                    } else {
                        let follows = settings_before(TAG_KEYSPACE_CALLBACKS);
                        let Some(def) = edit
                            .keyspaces
                            .last_mut()
                            .filter(|k| k.id == id && follows.contains(&last_tag))
                        else {
                            return Err(bad(format!(
                                "callbacks of keyspace {id} not after its definition"
                            )));
                        };
                        def.callbacks = Some(names);
                    }
                }
                TAG_KEYSPACE_RANGE_FILTER => {
                    let id = keyspace_id(&mut d).map_err(&bad)?;
                    let bits = f64::from_bits(d.varint().ok_or_else(truncated)?);
                    let Some(def) =
                        named_setting_target(&mut edit, id, last_tag, TAG_KEYSPACE_RANGE_FILTER)
                    else {
                        return Err(bad(format!(
                            "range filter of keyspace {id} not after its definition"
                        )));
                    };
                    if !KeyspaceOptions::RANGE_FILTER_BITS_PER_KEY_RANGE.contains(&bits) {
                        return Err(bad(format!(
                            "keyspace {id} has a range filter of {bits} bits per key"
                        )));
                    }
                    def.opts.range_filter_bits_per_key = Some(bits);
                }
                TAG_KEYSPACE_BLOBS => {
                    let id = keyspace_id(&mut d).map_err(&bad)?;
                    let mut v = [0; 3];
                    for x in &mut v {
                        *x = d.varint().ok_or_else(truncated)?;
                    }
                    let Some(def) =
                        named_setting_target(&mut edit, id, last_tag, TAG_KEYSPACE_BLOBS)
                    else {
                        return Err(bad(format!(
                            "blob settings of keyspace {id} not after its definition"
                        )));
                    };
                    let threshold = match v[0] {
                        0 => None,
                        t => Some(usize::try_from(t).unwrap_or(usize::MAX)),
                    };
                    if threshold
                        .is_some_and(|t| !KeyspaceOptions::BLOB_THRESHOLD_RANGE.contains(&t))
                    {
                        return Err(bad(format!("keyspace {id} has a blob threshold of {}", v[0])));
                    }
                    let (cutoff, force) = (f64::from_bits(v[1]), f64::from_bits(v[2]));
                    let range = KeyspaceOptions::BLOB_GC_FRACTION_RANGE;
                    if !range.contains(&cutoff) || !range.contains(&force) {
                        return Err(bad(format!(
                            "keyspace {id} has blob collection fractions {cutoff} and {force}"
                        )));
                    }
                    def.opts.blob_threshold = threshold;
                    def.opts.blob_gc_age_cutoff = cutoff;
                    def.opts.blob_gc_force_threshold = force;
                }
                TAG_KEYSPACE_COMPACTION_STYLE => {
                    let id = keyspace_id(&mut d).map_err(&bad)?;
                    let style =
                        decode_style(&mut d).map_err(|e| bad(format!("keyspace {id}: {e}")))?;
                    let Some(def) = named_setting_target(
                        &mut edit,
                        id,
                        last_tag,
                        TAG_KEYSPACE_COMPACTION_STYLE,
                    ) else {
                        return Err(bad(format!(
                            "compaction style of keyspace {id} not after its definition"
                        )));
                    };
                    def.opts.compaction_style = style;
                }
                TAG_KEYSPACE_READ_MIX => {
                    let id = keyspace_id(&mut d).map_err(&bad)?;
                    let share = f64::from_bits(d.varint().ok_or_else(truncated)?);
                    let width = d.varint().ok_or_else(truncated)?;
                    let Some(def) =
                        named_setting_target(&mut edit, id, last_tag, TAG_KEYSPACE_READ_MIX)
                    else {
                        return Err(bad(format!(
                            "read mix of keyspace {id} not after its definition"
                        )));
                    };
                    if !(0.0..=1.0).contains(&share)
                        || !crate::options::ReadMix::RANGE_WIDTH_RANGE.contains(&width)
                    {
                        return Err(bad(format!(
                            "keyspace {id} has a read mix of {share} ranges {width} wide"
                        )));
                    }
                    def.opts.read_mix = Some(crate::options::ReadMix::new(share, width));
                }
                TAG_KEYSPACE_DROPPED => {
                    let id = keyspace_id(&mut d).map_err(&bad)?;
                    edit.dropped_keyspaces.push(id);
                }
                TAG_TABLE_BLOB_REFS => {
                    let Some((_, table)) = edit
                        .added
                        .last_mut()
                        .filter(|_| matches!(last_tag, TAG_ADDED | TAG_ADDED_IN))
                    else {
                        return Err(bad("blob references not after their table".into()));
                    };
                    let count = d.varint().ok_or_else(truncated)?;
                    // Each entry takes at least 3 bytes: no allocation beyond the record.
                    if count == 0 || count > d.remaining() as u64 / 3 {
                        return Err(bad(format!("{count} blob files referenced")));
                    }
                    let mut refs = Vec::with_capacity(count as usize);
                    for _ in 0..count {
                        let mut v = [0; 3];
                        for x in &mut v {
                            *x = d.varint().ok_or_else(truncated)?;
                        }
                        let r = BlobRefs { file: v[0], count: v[1], bytes: v[2] };
                        if r.count == 0 || refs.last().is_some_and(|p: &BlobRefs| p.file >= r.file)
                        {
                            return Err(bad(format!(
                                "blob references of table {} not ascending and non-empty",
                                table.number
                            )));
                        }
                        refs.push(r);
                    }
                    table.blob_refs = refs;
                }
                TAG_BLOB_ADDED => {
                    let mut v = [0; 4];
                    for x in &mut v {
                        *x = d.varint().ok_or_else(truncated)?;
                    }
                    let [number, value_bytes, values, file_size] = v;
                    let kind = BlobFileKind::Separated;
                    let meta = BlobFileMeta { number, value_bytes, values, file_size, kind };
                    edit.added_blobs.push(meta);
                }
                TAG_KEPT_WAL => {
                    let mut v = [0; 3];
                    for x in &mut v {
                        *x = d.varint().ok_or_else(truncated)?;
                    }
                    let [number, values, file_size] = v;
                    let kind = BlobFileKind::WalSegment;
                    let value_bytes = file_size;
                    let meta = BlobFileMeta { number, value_bytes, values, file_size, kind };
                    edit.added_blobs.push(meta);
                }
                TAG_BLOB_DROPPED => {
                    let number = d.varint().ok_or_else(truncated)?;
                    edit.dropped_blobs.push(number);
                }
                TAG_NEXT_KEYSPACE_ID => {
                    let id = keyspace_id(&mut d).map_err(&bad)?;
                    if edit.next_keyspace_id.replace(id).is_some() {
                        return Err(bad(format!("field with tag {tag} repeated")));
                    }
                }
                _ => return Err(bad(format!("unknown tag {tag}"))),
            }
        }
        if !d.is_empty() {
            let at = d.position() as u64;
            return Err(Error::bad_bytes(at, "version edit: bytes after the end tag"));
        }
        Ok(edit)
    }
}

/// The tag a keyspace's record starts with, which its tags 11 and 12 follow.
fn opening_tag(id: KeyspaceId) -> u64 {
    if id == DEFAULT_KEYSPACE {
        TAG_KEYSPACE_CALLBACKS
    } else {
        TAG_KEYSPACE
    }
}

fn encode_callbacks(buf: &mut Vec<u8>, def: &KeyspaceDef) {
    // Unknown names stay unknown: writing "none" would make an open that gives the
    // callbacks fail.
    let Some(names) = &def.callbacks else { return };
    put_varint(buf, TAG_KEYSPACE_CALLBACKS);
    put_varint(buf, def.id.into());
    for name in [&names.merge_operator, &names.compaction_filter] {
        match name {
            None => put_varint(buf, 0),
            Some(n) => {
                put_varint(buf, 1);
                put_bytes(buf, n.as_bytes());
            }
        }
    }
}

fn level(d: &mut Decoder<'_>) -> std::result::Result<usize, String> {
    let level = d.varint().ok_or("truncated level")?;
    if level >= MAX_LEVELS as u64 {
        return Err(format!("level {level} is not below {MAX_LEVELS}"));
    }
    Ok(level as usize)
}

/// The definition a named keyspace's setting tag refines: the edit's last keyspace, if it is
/// `id`, not the default one (whose settings are the open's), and the tag read before this one
/// its definition or a setting written before `tag` ([`KEYSPACE_SETTING_ORDER`]).
fn named_setting_target(
    edit: &mut VersionEdit,
    id: KeyspaceId,
    last_tag: u64,
    tag: u64,
) -> Option<&mut KeyspaceDef> {
    let def = edit.keyspaces.last_mut()?;
    let after_its_definition = settings_before(tag).contains(&last_tag);
    (def.id == id && id != DEFAULT_KEYSPACE && after_its_definition).then_some(def)
}

/// A named keyspace's definition and its settings, in the order an edit writes them: each
/// setting follows its definition or a setting before it in this list.
const KEYSPACE_SETTING_ORDER: [u64; 8] = [
    TAG_KEYSPACE,
    TAG_KEYSPACE_PREFIX,
    TAG_KEYSPACE_TTL,
    TAG_KEYSPACE_CALLBACKS,
    TAG_KEYSPACE_RANGE_FILTER,
    TAG_KEYSPACE_BLOBS,
    TAG_KEYSPACE_COMPACTION_STYLE,
    TAG_KEYSPACE_READ_MIX,
];

/// The tags a setting with `tag` may follow in an edit.
fn settings_before(tag: u64) -> &'static [u64] {
    let at = KEYSPACE_SETTING_ORDER.iter().position(|&t| t == tag);
    &KEYSPACE_SETTING_ORDER[..at.unwrap_or(0)]
}
fn keyspace_id(d: &mut Decoder<'_>) -> std::result::Result<KeyspaceId, String> {
    let id = d.varint().ok_or("truncated keyspace id")?;
    KeyspaceId::try_from(id).map_err(|_| format!("keyspace id {id} is above 32 bits"))
}

/// Checks a keyspace name as the manifest and `Db::keyspace` accept it.
pub fn keyspace_name(name: &[u8]) -> std::result::Result<String, String> {
    if name.is_empty() || name.len() > MAX_KEYSPACE_NAME_BYTES {
        return Err(format!(
            "keyspace name of {} bytes (must be 1 to {MAX_KEYSPACE_NAME_BYTES})",
            name.len()
        ));
    }
    String::from_utf8(name.to_vec()).map_err(|_| "keyspace name is not UTF-8".to_string())
}

fn encode_options(buf: &mut Vec<u8>, o: &KeyspaceOptions) {
    let (kind, bits) = match o.filter_policy {
        FilterPolicy::None => (0, 0.0),
        FilterPolicy::BlockedBloom { bits_per_key } => (1, bits_per_key),
        FilterPolicy::ClassicBloom { bits_per_key } => (2, bits_per_key),
        FilterPolicy::Budgeted { bits_per_key } => (3, bits_per_key),
        FilterPolicy::Ribbon { bits_per_key, .. } => (4, bits_per_key),
        FilterPolicy::BudgetedRibbon { bits_per_key, .. } => (5, bits_per_key),
    };
    put_varint(buf, kind);
    put_varint(buf, f64::to_bits(bits));
    if let FilterPolicy::Ribbon { bloom_before_level, .. }
    | FilterPolicy::BudgetedRibbon { bloom_before_level, .. } = o.filter_policy
    {
        put_varint(buf, u64::from(bloom_before_level));
    }
    let (compression, level) = match o.compression {
        Compression::None => (0, 0),
        Compression::Zstd { level } => (1, level),
    };
    put_varint(buf, compression);
    put_varint(buf, ((level << 1) ^ (level >> 31)) as u32 as u64);
    put_varint(buf, o.block_bytes as u64);
    put_varint(buf, o.target_table_bytes);
}

/// Tag 21, for a style other than the default: an old build refuses it (unknown tag), and
/// a leveled keyspace's record stays as older builds wrote it.
fn encode_style(buf: &mut Vec<u8>, id: KeyspaceId, style: CompactionStyle) {
    match style {
        CompactionStyle::Leveled => {}
        CompactionStyle::Fifo { max_bytes, max_age } => {
            put_varint(buf, TAG_KEYSPACE_COMPACTION_STYLE);
            put_varint(buf, id.into());
            put_varint(buf, STYLE_FIFO);
            put_varint(buf, max_bytes);
            put_varint(buf, max_age.map_or(0, crate::clock::ttl_millis));
        }
        CompactionStyle::Tiered | CompactionStyle::LazyLeveling => {
            put_varint(buf, TAG_KEYSPACE_COMPACTION_STYLE);
            put_varint(buf, id.into());
            let kind = if style == CompactionStyle::Tiered { STYLE_TIERED } else { STYLE_LAZY };
            put_varint(buf, kind);
        }
        CompactionStyle::Fluid { k, z } => {
            put_varint(buf, TAG_KEYSPACE_COMPACTION_STYLE);
            put_varint(buf, id.into());
            put_varint(buf, STYLE_FLUID);
            put_varint(buf, k.into());
            put_varint(buf, z.into());
        }
    }
}

/// Tag 21's style kinds (0 is leveled, which is never written).
const STYLE_FIFO: u64 = 1;
const STYLE_TIERED: u64 = 2;
const STYLE_LAZY: u64 = 3;
const STYLE_FLUID: u64 = 4;

fn decode_style(d: &mut Decoder<'_>) -> std::result::Result<CompactionStyle, String> {
    let truncated = "compaction style is truncated";
    let style = match d.varint().ok_or(truncated)? {
        STYLE_FIFO => {
            let max_bytes = d.varint().ok_or(truncated)?;
            let age = d.varint().ok_or(truncated)?;
            let max_age = (age > 0).then(|| std::time::Duration::from_millis(age));
            CompactionStyle::Fifo { max_bytes, max_age }
        }
        STYLE_TIERED => CompactionStyle::Tiered,
        STYLE_LAZY => CompactionStyle::LazyLeveling,
        STYLE_FLUID => {
            let mut runs = [0u32; 2];
            for r in &mut runs {
                let n = d.varint().ok_or(truncated)?;
                *r = u32::try_from(n).map_err(|_| format!("fluid runs {n} out of range"))?;
            }
            CompactionStyle::Fluid { k: runs[0], z: runs[1] }
        }
        other => return Err(format!("unknown compaction style {other}")),
    };
    style.validate().map_err(|e| e.to_string())?;
    Ok(style)
}

fn decode_options(d: &mut Decoder<'_>) -> std::result::Result<KeyspaceOptions, String> {
    let truncated = "keyspace options are truncated";
    let kind = d.varint().ok_or(truncated)?;
    let bits_per_key = f64::from_bits(d.varint().ok_or(truncated)?);
    let filter_policy = match kind {
        0 => FilterPolicy::None,
        1 => FilterPolicy::BlockedBloom { bits_per_key },
        2 => FilterPolicy::ClassicBloom { bits_per_key },
        3 => FilterPolicy::Budgeted { bits_per_key },
        4 | 5 => {
            let level = d.varint().ok_or(truncated)?;
            let bloom_before_level = u8::try_from(level)
                .map_err(|_| format!("Ribbon bloom_before_level {level} out of range"))?;
            match kind {
                4 => FilterPolicy::Ribbon { bits_per_key, bloom_before_level },
                _ => FilterPolicy::BudgetedRibbon { bits_per_key, bloom_before_level },
            }
        }
        k => return Err(format!("unknown filter kind {k} in keyspace options")),
    };
    let compression = d.varint().ok_or(truncated)?;
    let zigzag = u32::try_from(d.varint().ok_or(truncated)?)
        .map_err(|_| "zstd level out of range in keyspace options")?;
    let level = ((zigzag >> 1) as i32) ^ -((zigzag & 1) as i32);
    let compression = match compression {
        0 => Compression::None,
        1 => Compression::Zstd { level },
        c => return Err(format!("unknown compression {c} in keyspace options")),
    };
    let block_bytes = d.varint().ok_or(truncated)?;
    // A size above today's bound was accepted when the bound did not exist: it is read as
    // the bound (tables are split there from now on), so such a database still opens.
    let target_table_bytes =
        d.varint().ok_or(truncated)?.min(*KeyspaceOptions::TARGET_TABLE_BYTES_RANGE.end());
    // The prefix settings, if any, come in their own field (tag 11) after this one.
    let opts = KeyspaceOptions {
        filter_policy,
        prefix_extractor: None,
        whole_key_filtering: true,
        compression,
        block_bytes: usize::try_from(block_bytes).unwrap_or(usize::MAX),
        target_table_bytes,
        range_filter_bits_per_key: None,
        read_mix: None,
        default_ttl: None,
        compaction_filter: Default::default(),
        stop_on_compaction_filter_error: false,
        merge_operator: Default::default(),
        change_settings: false,
        blob_threshold: None,
        blob_gc_age_cutoff: KeyspaceOptions::DEFAULT_BLOB_GC_AGE_CUTOFF,
        blob_gc_force_threshold: KeyspaceOptions::DEFAULT_BLOB_GC_FORCE_THRESHOLD,
        // Tag 21, if any, comes after.
        compaction_style: CompactionStyle::Leveled,
    };
    opts.validate().map_err(|e| format!("keyspace options: {e}"))?;
    Ok(opts)
}

fn table_meta(d: &mut Decoder<'_>, keyspace: KeyspaceId) -> std::result::Result<TableMeta, String> {
    let truncated = "added table is truncated or malformed";
    let number = d.varint().ok_or(truncated)?;
    let file_size = d.varint().ok_or(truncated)?;
    let smallest = d.length_prefixed().ok_or(truncated)?;
    let largest = d.length_prefixed().ok_or(truncated)?;
    for key in [smallest, largest] {
        if parse_internal_key(key).is_none() {
            return Err(format!("table {number} has a bound that is not an internal key"));
        }
    }
    let smallest_seq = d.varint().ok_or(truncated)?;
    let largest_seq = d.varint().ok_or(truncated)?;
    if smallest_seq > MAX_SEQNO || largest_seq > MAX_SEQNO {
        return Err(format!("table {number} has a sequence number above 56 bits"));
    }
    let num_entries = d.varint().ok_or(truncated)?;
    Ok(TableMeta {
        keyspace,
        number,
        file_size,
        smallest: smallest.to_vec(),
        largest: largest.to_vec(),
        smallest_seq,
        largest_seq,
        num_entries,
        blob_refs: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::key::{internal_key, ValueKind};

    fn meta(number: u64) -> TableMeta {
        TableMeta {
            keyspace: 0,
            number,
            file_size: 4096 + number,
            smallest: internal_key(b"apple", 3, ValueKind::Put),
            largest: internal_key(b"zebra", 9, ValueKind::Delete),
            smallest_seq: 3,
            largest_seq: 9,
            num_entries: 1000,
            blob_refs: Vec::new(),
        }
    }

    fn sample() -> VersionEdit {
        VersionEdit {
            log_number: Some(12),
            next_file_number: Some(40),
            last_seq: Some(MAX_SEQNO),
            added: vec![
                (0, meta(38)),
                (15, TableMeta { keyspace: 3, ..meta(39) }),
                (
                    1,
                    TableMeta {
                        blob_refs: vec![
                            BlobRefs { file: 36, count: 2, bytes: 70_000 },
                            BlobRefs { file: 37, count: 1, bytes: 5_000 },
                        ],
                        ..meta(41)
                    },
                ),
            ],
            added_blobs: vec![
                BlobFileMeta {
                    number: 37,
                    value_bytes: 9_000,
                    values: 2,
                    file_size: 9_100,
                    kind: BlobFileKind::Separated,
                },
                BlobFileMeta {
                    number: 36,
                    value_bytes: 80_000,
                    values: 3,
                    file_size: 80_000,
                    kind: BlobFileKind::WalSegment,
                },
            ],
            dropped_blobs: vec![30, 31],
            deleted: vec![(1, 7), (2, 8)],
            keyspaces: vec![
                KeyspaceDef {
                    id: 3,
                    name: "logs".into(),
                    opts: KeyspaceOptions::new()
                        .filter_policy(FilterPolicy::ClassicBloom { bits_per_key: 7.5 })
                        .prefix_extractor(Some(PrefixExtractor::UpToDelimiter(b'/')))
                        .whole_key_filtering(false)
                        .compression(Compression::Zstd { level: -3 })
                        .default_ttl(Some(std::time::Duration::from_millis(90_000)))
                        .range_filter_bits_per_key(Some(14.5)),
                    callbacks: Some(CallbackNames {
                        merge_operator: Some("u64add".into()),
                        compaction_filter: Some(String::new()),
                    }),
                },
                {
                    let mut default = crate::version::set::default_keyspace_def();
                    default.opts.prefix_extractor = Some(PrefixExtractor::Fixed(3));
                    default.callbacks = Some(CallbackNames {
                        merge_operator: None,
                        compaction_filter: Some("purge".into()),
                    });
                    default
                },
            ],
            dropped_keyspaces: vec![2],
            next_keyspace_id: Some(4),
            clock_mark: Some(1_700_000_000_000),
        }
    }

    fn corrupt(data: &[u8]) -> String {
        match VersionEdit::decode(data) {
            Err(Error::Corruption { reason, .. }) => reason,
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_sample_and_empty() {
        let e = sample();
        assert_eq!(VersionEdit::decode(&e.encode()).unwrap(), e);
        let empty = VersionEdit::default();
        assert_eq!(empty.encode(), vec![1, 1, 0]);
        assert_eq!(VersionEdit::decode(&empty.encode()).unwrap(), empty);
    }

    /// A table's blob references stand right after it, listed once per file, ascending,
    /// each with a reference; a count the record cannot hold allocates nothing.
    #[test]
    fn blob_references_are_checked() {
        let mut tail = vec![1, 1];
        tail.extend([TAG_TABLE_BLOB_REFS as u8, 1, 3, 1, 10, 0]);
        assert!(corrupt(&tail).contains("not after their table"));
        let refs = |entries: &[[u8; 3]]| {
            let table = VersionEdit { added: vec![(0, meta(5))], ..VersionEdit::default() };
            let mut b = table.encode();
            b.pop(); // the end tag
            b.extend([TAG_TABLE_BLOB_REFS as u8, entries.len() as u8]);
            entries.iter().for_each(|e| b.extend(e));
            b.push(0);
            b
        };
        let good = VersionEdit::decode(&refs(&[[3, 1, 10], [4, 2, 20]])).unwrap();
        assert_eq!(good.added[0].1.blob_refs[1], BlobRefs { file: 4, count: 2, bytes: 20 });
        assert!(corrupt(&refs(&[[4, 1, 10], [3, 1, 10]])).contains("not ascending"));
        assert!(corrupt(&refs(&[[4, 1, 10], [4, 1, 10]])).contains("not ascending"));
        assert!(corrupt(&refs(&[[4, 0, 10]])).contains("non-empty"));
        assert!(corrupt(&refs(&[])).contains("0 blob files"));
        let mut huge = refs(&[[4, 1, 10]]);
        let at = huge.len() - 5;
        huge[at] = 0x7f; // 127 files claimed, 3 bytes there
        assert!(corrupt(&huge).contains("127 blob files"));
        // Blob files added and dropped round-trip (in the sample).
        let e = sample();
        let back = VersionEdit::decode(&e.encode()).unwrap();
        assert_eq!((back.added_blobs, back.dropped_blobs), (e.added_blobs, e.dropped_blobs));
    }

    /// A keyspace recorded with a table size above the bound (accepted before there was
    /// one) still opens, splitting its tables at the bound.
    #[test]
    fn a_recorded_table_size_above_the_bound_reads_as_the_bound() {
        let mut e = sample();
        e.keyspaces[0].opts.target_table_bytes = u64::MAX;
        let decoded = VersionEdit::decode(&e.encode()).unwrap();
        let bound = *KeyspaceOptions::TARGET_TABLE_BYTES_RANGE.end();
        assert_eq!(decoded.keyspaces[0].opts.target_table_bytes, bound);
    }

    #[test]
    fn rejects_specific_damage() {
        // Unknown tag before the end.
        assert!(corrupt(&[1, 1, 99, 0]).contains("unknown tag 99"));
        // Keyspace ids above 32 bits, empty names, invalid options.
        let mut big = vec![1, 1, 9];
        put_varint(&mut big, 1 << 32);
        big.push(0);
        assert!(corrupt(&big).contains("above 32 bits"));
        assert!(corrupt(&[1, 1, 8, 1, 0, 0]).contains("keyspace name of 0 bytes"));
        let mut bad_opts = sample();
        bad_opts.keyspaces[0].opts.block_bytes = 1;
        assert!(corrupt(&bad_opts.encode()).contains("block_bytes"));
        assert!(corrupt(&[1, 1, 10, 1, 10, 2, 0]).contains("repeated"));
        // Missing or wrong format version.
        assert!(corrupt(&[2, 5, 0]).contains("format version"));
        assert!(corrupt(&[1, 2, 0]).contains("unsupported format version 2"));
        assert!(corrupt(&[1, 1, 1, 1, 0]).contains("repeated"));
        // Repeated scalar field.
        assert!(corrupt(&[1, 1, 2, 5, 2, 6, 0]).contains("repeated"));
        // Level 16 is out of range; 15 is fine.
        assert!(corrupt(&[1, 1, 5, 16, 3, 0]).contains("level 16"));
        assert_eq!(VersionEdit::decode(&[1, 1, 5, 15, 3, 0]).unwrap().deleted, vec![(15, 3)]);
        // Bytes after the end tag.
        assert!(corrupt(&[1, 1, 0, 0]).contains("after the end"));
        // A table bound that is not an internal key.
        let mut e = VersionEdit::default();
        let mut m = meta(1);
        m.largest = b"short".to_vec();
        e.added.push((0, m));
        assert!(corrupt(&e.encode()).contains("not an internal key"));
        // Sequence number above 56 bits.
        let mut last = vec![1, 1, 4];
        put_varint(&mut last, MAX_SEQNO + 1);
        last.push(0);
        assert!(corrupt(&last).contains("56 bits"));
        // A huge length prefix is refused, not allocated.
        let mut huge = vec![1, 1, 6, 0, 1, 1];
        put_varint(&mut huge, u64::MAX >> 1);
        assert!(corrupt(&huge).contains("truncated"));
        // A default time to live: only right after its keyspace's definition, never 0.
        assert!(corrupt(&[1, 1, 12, 3, 5, 0]).contains("not after its definition"));
        let mut ttl = VersionEdit::default();
        ttl.keyspaces.push(KeyspaceDef {
            id: 3,
            name: "k".into(),
            opts: KeyspaceOptions::new().default_ttl(Some(std::time::Duration::from_millis(5))),
            callbacks: None,
        });
        let enc = ttl.encode();
        assert_eq!(enc[enc.len() - 4..], [12, 3, 5, 0]);
        assert_eq!(VersionEdit::decode(&enc).unwrap(), ttl);
        let mut zero = enc.clone();
        let n = zero.len();
        zero[n - 2] = 0;
        assert!(corrupt(&zero).contains("time to live of 0 ms"));
        // Prefix settings: only right after their keyspace's definition, a known extractor,
        // a whole-key flag of 0 or 1.
        assert!(corrupt(&[1, 1, 11, 3, 0, 1, 0]).contains("not after its definition"));
        let mut def = VersionEdit::default();
        def.keyspaces.push(KeyspaceDef {
            id: 3,
            name: "k".into(),
            opts: KeyspaceOptions::new().whole_key_filtering(false),
            callbacks: None,
        });
        let enc = def.encode();
        let at = enc.iter().rposition(|&b| b == 11).unwrap();
        assert_eq!(enc[at..], [11, 3, 0, 0, 0]);
        let with = |name: &[u8], whole: u8| {
            let mut e = enc[..at].to_vec();
            e.extend_from_slice(&[11, 3, name.len() as u8]);
            e.extend_from_slice(name);
            e.extend_from_slice(&[whole, 0]);
            e
        };
        assert!(corrupt(&with(b"fixed:0", 1)).contains("unknown prefix extractor"));
        assert!(corrupt(&with(b"\xff", 1)).contains("unknown prefix extractor"));
        assert!(corrupt(&with(b"fixed:4", 2)).contains("not 0 or 1"));
        let ok = VersionEdit::decode(&with(b"fixed:4", 1)).unwrap();
        assert_eq!(ok.keyspaces[0].opts.prefix_extractor, Some(PrefixExtractor::Fixed(4)));
        let mut twice = with(b"fixed:4", 1);
        twice.pop();
        twice.extend_from_slice(&[11, 3, 0, 1, 0]);
        assert!(corrupt(&twice).contains("not after its definition"));
    }

    /// Tag 13: the callback names, and the default keyspace's recorded settings. An edit
    /// written before it existed decodes with the names unknown.
    #[test]
    fn callback_names_and_default_keyspace_settings() {
        let e = sample();
        let enc = e.encode();
        // The default keyspace: tag 13 opens it, its prefix settings follow.
        let at = enc.windows(2).position(|w| w == [13, 0]).unwrap();
        assert_eq!(enc[at..at + 9], [13, 0, 0, 1, 5, b'p', b'u', b'r', b'g']);
        assert_eq!(enc[at + 10..at + 14], [11, 0, 7, b'f']);
        // Without tag 13 (as an older build wrote it) the names are unknown, and the
        // default keyspace is not defined at all.
        let mut old = e.clone();
        old.keyspaces[0].callbacks = None;
        old.keyspaces[1].callbacks = None;
        let decoded = VersionEdit::decode(&old.encode()).unwrap();
        assert_eq!(decoded, VersionEdit { keyspaces: vec![old.keyspaces[0].clone()], ..old });
        // Damage: out of place, a bad presence flag, a repeated default, tag 8 for id 0.
        assert!(corrupt(&[1, 1, 13, 3, 0, 0, 0]).contains("not after its definition"));
        assert!(corrupt(&[1, 1, 13, 0, 2, 0, 0]).contains("not 0 or 1"));
        assert!(corrupt(&[1, 1, 13, 0, 0, 0, 13, 0, 0, 0, 0]).contains("repeated"));
        assert!(corrupt(&[1, 1, 11, 0, 0, 0, 0]).contains("not after its definition"));
        let whole = VersionEdit::decode(&[1, 1, 13, 0, 0, 0, 11, 0, 0, 0, 0]).unwrap();
        assert!(!whole.keyspaces[0].opts.whole_key_filtering);
        let mut zero = VersionEdit::default();
        zero.keyspaces.push(KeyspaceDef { id: 0, ..e.keyspaces[0].clone() });
        // The encoder writes the default keyspace's settings only; forged, tag 8 for it is
        // refused.
        let forged = [1, 1, 8, 0, 1, b'd', 0, 0, 0, 0, 128, 32, 128, 128, 128, 8, 0];
        assert!(corrupt(&forged).contains("default keyspace has no definition"));
        assert!(!zero.encode().windows(2).any(|w| w == [8, 0]));
    }

    /// Tag 17: a named keyspace's range filter, last among its fields; an edit without it
    /// (as an older build wrote it) decodes with no range filter.
    #[test]
    fn keyspace_range_filter() {
        let mut e = VersionEdit::default();
        e.keyspaces.push(KeyspaceDef {
            id: 3,
            name: "k".into(),
            opts: KeyspaceOptions::new().range_filter_bits_per_key(Some(16.0)),
            callbacks: None,
        });
        let enc = e.encode();
        let mut tail = vec![17, 3];
        put_varint(&mut tail, 16f64.to_bits());
        tail.push(0);
        assert_eq!(enc[enc.len() - tail.len()..], tail);
        assert_eq!(VersionEdit::decode(&enc).unwrap(), e);
        // With callbacks, after their tag 13.
        e.keyspaces[0].callbacks = Some(CallbackNames::default());
        assert_eq!(VersionEdit::decode(&e.encode()).unwrap(), e);
        let without = &[&enc[..enc.len() - tail.len()], &[0][..]].concat();
        assert_eq!(VersionEdit::decode(without).unwrap().keyspaces[0].opts, KeyspaceOptions::new());
        // Out of place, for the default keyspace, or out of the option's range.
        let mut alone = vec![1, 1];
        alone.extend(&tail);
        assert!(corrupt(&alone).contains("not after its definition"));
        let mut default = vec![1, 1, 13, 0, 0, 0, 17, 0];
        put_varint(&mut default, 16f64.to_bits());
        default.push(0);
        assert!(corrupt(&default).contains("not after its definition"));
        let mut twice = enc.clone();
        twice.pop();
        twice.extend(&tail);
        assert!(corrupt(&twice).contains("not after its definition"));
        for bits in [3.5, 40.5, f64::NAN, f64::INFINITY] {
            let mut bad = enc[..enc.len() - tail.len()].to_vec();
            bad.extend([17, 3]);
            put_varint(&mut bad, bits.to_bits());
            bad.push(0);
            assert!(corrupt(&bad).contains("bits per key"), "{bits}");
        }
        // The default keyspace's setting comes from `Options`: never written.
        let mut d = crate::version::set::default_keyspace_def();
        d.opts.range_filter_bits_per_key = Some(16.0);
        d.callbacks = Some(CallbackNames::default());
        let only = VersionEdit { keyspaces: vec![d], ..VersionEdit::default() };
        assert!(!only.encode().contains(&17));
    }

    /// Tag 23: a named keyspace's read mix, last among its fields (after a tag 21); an edit
    /// without it (as an older build wrote it) decodes with none.
    #[test]
    fn keyspace_read_mix() {
        use crate::options::ReadMix;
        let budgeted = KeyspaceOptions::new()
            .filter_policy(FilterPolicy::Budgeted { bits_per_key: 20.0 })
            .read_mix(Some(ReadMix::new(0.25, 64)));
        let def = |opts| KeyspaceDef { id: 3, name: "k".into(), opts, callbacks: None };
        let e = VersionEdit { keyspaces: vec![def(budgeted.clone())], ..VersionEdit::default() };
        let enc = e.encode();
        let mut tail = vec![23, 3];
        put_varint(&mut tail, 0.25f64.to_bits());
        put_varint(&mut tail, 64);
        tail.push(0);
        assert_eq!(enc[enc.len() - tail.len()..], tail);
        assert_eq!(VersionEdit::decode(&enc).unwrap(), e);
        let without = &[&enc[..enc.len() - tail.len()], &[0][..]].concat();
        assert_eq!(VersionEdit::decode(without).unwrap().keyspaces[0].opts.read_mix, None);
        // After a compaction style and callbacks.
        let mut both = e.clone();
        both.keyspaces[0].opts = budgeted.clone().compaction_style(CompactionStyle::Tiered);
        both.keyspaces[0].callbacks = Some(CallbackNames::default());
        assert_eq!(VersionEdit::decode(&both.encode()).unwrap(), both);
        // Out of place, twice, or out of range.
        let mut alone = vec![1, 1];
        alone.extend(&tail);
        assert!(corrupt(&alone).contains("not after its definition"));
        let mut twice = enc.clone();
        twice.pop();
        twice.extend(&tail);
        assert!(corrupt(&twice).contains("not after its definition"));
        let head = &enc[..enc.len() - tail.len()];
        for (share, width) in [(1.5, 64), (-0.1, 64), (f64::NAN, 64), (0.5, 0), (0.5, 1 << 40)] {
            let mut bad = head.to_vec();
            bad.extend([23, 3]);
            put_varint(&mut bad, f64::to_bits(share));
            put_varint(&mut bad, width);
            bad.push(0);
            assert!(corrupt(&bad).contains("read mix"), "{share} {width}");
        }
        // The default keyspace's comes from `Options`: never written.
        let mut d = crate::version::set::default_keyspace_def();
        d.opts = budgeted;
        d.callbacks = Some(CallbackNames::default());
        let only = VersionEdit { keyspaces: vec![d], ..VersionEdit::default() };
        assert!(!only.encode().contains(&23));
    }

    /// Tag 19: a named keyspace's blob settings, last among its fields (after a tag 17); an
    /// edit without it (as an older build wrote it) decodes with none.
    #[test]
    fn keyspace_blob_settings() {
        let opts = KeyspaceOptions::new().blob_threshold(Some(4096)).blob_gc_age_cutoff(0.5);
        let def = |opts| KeyspaceDef { id: 3, name: "k".into(), opts, callbacks: None };
        let e = VersionEdit { keyspaces: vec![def(opts.clone())], ..VersionEdit::default() };
        let enc = e.encode();
        let mut tail = vec![19, 3];
        put_varint(&mut tail, 4096);
        put_varint(&mut tail, 0.5f64.to_bits());
        put_varint(&mut tail, 0.5f64.to_bits());
        tail.push(0);
        assert_eq!(enc[enc.len() - tail.len()..], tail);
        assert_eq!(VersionEdit::decode(&enc).unwrap(), e);
        let without = &[&enc[..enc.len() - tail.len()], &[0][..]].concat();
        assert_eq!(VersionEdit::decode(without).unwrap().keyspaces[0].opts, KeyspaceOptions::new());
        // After a range filter and callbacks; GC settings alone; nothing at the defaults.
        let mut both = e.clone();
        both.keyspaces[0].opts = opts.clone().range_filter_bits_per_key(Some(10.0));
        both.keyspaces[0].callbacks = Some(CallbackNames::default());
        assert_eq!(VersionEdit::decode(&both.encode()).unwrap(), both);
        let gc_only = KeyspaceOptions::new().blob_gc_force_threshold(0.2);
        let gc = VersionEdit { keyspaces: vec![def(gc_only)], ..VersionEdit::default() };
        assert_eq!(VersionEdit::decode(&gc.encode()).unwrap(), gc);
        let plain = VersionEdit { keyspaces: vec![def(KeyspaceOptions::new())], ..e.clone() };
        assert!(!plain.encode().contains(&19));
        // Out of place, or out of the options' ranges.
        let mut alone = vec![1, 1];
        alone.extend(&tail);
        assert!(corrupt(&alone).contains("not after its definition"));
        let head = &enc[..enc.len() - tail.len()];
        for (threshold, cutoff, force) in
            [(17 << 20, 0.5, 0.5), (4096, 1.5, 0.5), (4096, 0.5, -0.1), (4096, f64::NAN, 0.5)]
        {
            let mut bad = head.to_vec();
            bad.extend([19, 3]);
            put_varint(&mut bad, threshold);
            put_varint(&mut bad, f64::to_bits(cutoff));
            put_varint(&mut bad, f64::to_bits(force));
            bad.push(0);
            let err = corrupt(&bad);
            assert!(err.contains("blob threshold") || err.contains("fractions"), "{err}");
        }
        // The default keyspace's settings come from `Options`: never written.
        let mut d = crate::version::set::default_keyspace_def();
        d.opts = opts;
        d.callbacks = Some(CallbackNames::default());
        let only = VersionEdit { keyspaces: vec![d], ..VersionEdit::default() };
        assert!(!only.encode().contains(&19));
    }

    /// Tag 21: a named keyspace's compaction style other than leveled, after its other
    /// fields; an edit without it (as an older build wrote it) decodes as leveled.
    #[test]
    fn keyspace_compaction_style() {
        let fifo = CompactionStyle::Fifo {
            max_bytes: 1 << 20,
            max_age: Some(std::time::Duration::from_millis(1500)),
        };
        let mut e = VersionEdit::default();
        e.keyspaces.push(KeyspaceDef {
            id: 3,
            name: "k".into(),
            opts: KeyspaceOptions::new().compaction_style(fifo),
            callbacks: None,
        });
        let enc = e.encode();
        let mut tail = vec![21, 3, 1];
        put_varint(&mut tail, 1 << 20);
        put_varint(&mut tail, 1500);
        tail.push(0);
        assert_eq!(enc[enc.len() - tail.len()..], tail);
        assert_eq!(VersionEdit::decode(&enc).unwrap(), e);
        // After a range filter (tag 17) and callbacks (tag 13); no age bound is 0.
        e.keyspaces[0].callbacks = Some(CallbackNames::default());
        e.keyspaces[0].opts.range_filter_bits_per_key = Some(16.0);
        e.keyspaces[0].opts.compaction_style =
            CompactionStyle::Fifo { max_bytes: 4096, max_age: None };
        assert_eq!(VersionEdit::decode(&e.encode()).unwrap(), e);
        let without = &[&enc[..enc.len() - tail.len()], &[0][..]].concat();
        let leveled = &VersionEdit::decode(without).unwrap().keyspaces[0].opts;
        assert_eq!(leveled.compaction_style, CompactionStyle::Leveled);
        // Leveled is never written: the record is as before.
        e.keyspaces[0].opts.compaction_style = CompactionStyle::Leveled;
        assert!(!e.encode().windows(2).any(|w| w == [21, 3]));
        // Out of place, unknown, or out of the option's range.
        let mut alone = vec![1, 1];
        alone.extend(&tail);
        assert!(corrupt(&alone).contains("not after its definition"));
        let head = &enc[..enc.len() - tail.len()];
        let mut twice = enc.clone();
        twice.pop();
        twice.extend(&tail);
        assert!(corrupt(&twice).contains("not after its definition"));
        let unknown = [head, &[21, 3, 9, 0]].concat();
        assert!(corrupt(&unknown).contains("unknown compaction style 9"));
        let small = [head, &[21, 3, 1, 100, 0, 0]].concat();
        assert!(corrupt(&small).contains("FIFO max_bytes"));
        let cut = [head, &[21, 3, 1]].concat();
        assert!(corrupt(&cut).contains("truncated"));
        // The styles that gather runs.
        for (style, bytes) in [
            (CompactionStyle::Tiered, &[21, 3, 2][..]),
            (CompactionStyle::LazyLeveling, &[21, 3, 3]),
            (CompactionStyle::Fluid { k: 3, z: 2 }, &[21, 3, 4, 3, 2]),
        ] {
            e.keyspaces[0].opts.compaction_style = style;
            let enc = e.encode();
            assert!(enc.windows(bytes.len()).any(|w| w == bytes), "{style:?}");
            assert_eq!(VersionEdit::decode(&enc).unwrap(), e);
        }
        let zero_k = [head, &[21, 3, 4, 0, 1, 0]].concat();
        assert!(corrupt(&zero_k).contains("fluid k"));
        e.keyspaces[0].opts.compaction_style = CompactionStyle::Leveled;
        // The default keyspace's style comes from `Options`: never written.
        let mut d = crate::version::set::default_keyspace_def();
        d.opts.compaction_style = fifo;
        d.callbacks = Some(CallbackNames::default());
        let only = VersionEdit { keyspaces: vec![d], ..VersionEdit::default() };
        assert!(!only.encode().contains(&21));
    }

    #[test]
    fn error_offset_points_at_the_bad_field() {
        let e = VersionEdit::decode(&[1, 1, 2, 5, 77, 0]).unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 4, .. }), "{e}");
        let e = e.in_file(std::path::Path::new("MANIFEST-000002"), 100);
        assert!(matches!(e, Error::Corruption { offset: 104, .. }), "{e}");
    }

    fn meta_strategy() -> impl Strategy<Value = TableMeta> {
        let key = || {
            (proptest::collection::vec(any::<u8>(), 0..20), 0..=MAX_SEQNO, any::<bool>()).prop_map(
                |(k, s, put)| {
                    internal_key(&k, s, if put { ValueKind::Put } else { ValueKind::Delete })
                },
            )
        };
        (
            (0..3u32, any::<u64>(), any::<u64>()),
            key(),
            key(),
            0..=MAX_SEQNO,
            0..=MAX_SEQNO,
            any::<u64>(),
        )
            .prop_map(
                |((keyspace, number, file_size), smallest, largest, s1, s2, num_entries)| {
                    TableMeta {
                        keyspace,
                        number,
                        file_size,
                        smallest,
                        largest,
                        smallest_seq: s1.min(s2),
                        largest_seq: s1.max(s2),
                        num_entries,
                        blob_refs: (0..num_entries % 3)
                            .map(|i| BlobRefs {
                                file: number.wrapping_add(i * 7) % 1000 + i * 1000,
                                count: 1 + (num_entries >> 8) % 9,
                                bytes: file_size >> i,
                            })
                            .collect(),
                    }
                },
            )
    }

    fn edit_strategy() -> impl Strategy<Value = VersionEdit> {
        (
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
            proptest::option::of(0..=MAX_SEQNO),
            proptest::collection::vec((0..MAX_LEVELS, meta_strategy()), 0..5),
            proptest::collection::vec((0..MAX_LEVELS, any::<u64>()), 0..5),
            proptest::collection::vec(
                (1..=u32::MAX, "[a-z]{1,8}", 0..6u8, 1u32..64, -7i32..=22),
                0..3,
            ),
            (proptest::collection::vec(any::<u32>(), 0..3), proptest::option::of(any::<u32>())),
        )
            .prop_map(
                |(
                    log_number,
                    next_file_number,
                    last_seq,
                    added,
                    deleted,
                    defs,
                    (dropped, next),
                )| {
                    let keyspaces = defs
                        .into_iter()
                        .map(|(id, name, kind, bits, level)| {
                            let bits_per_key = f64::from(bits) / 2.0;
                            let filter_policy = match kind {
                                0 => FilterPolicy::None,
                                1 => FilterPolicy::BlockedBloom { bits_per_key },
                                2 => FilterPolicy::ClassicBloom { bits_per_key },
                                3 => {
                                    FilterPolicy::Budgeted { bits_per_key: bits_per_key.min(32.0) }
                                }
                                4 => FilterPolicy::Ribbon {
                                    bits_per_key,
                                    bloom_before_level: (bits % 3) as u8,
                                },
                                _ => FilterPolicy::BudgetedRibbon {
                                    bits_per_key: bits_per_key.min(32.0),
                                    bloom_before_level: (bits % 3) as u8,
                                },
                            };
                            let extractor = match bits % 3 {
                                0 => None,
                                1 => Some(PrefixExtractor::Fixed(bits as usize % 9 + 1)),
                                _ => Some(PrefixExtractor::UpToDelimiter(bits as u8)),
                            };
                            let opts = KeyspaceOptions::new()
                                .filter_policy(filter_policy)
                                .prefix_extractor(extractor)
                                .whole_key_filtering(level % 2 == 0)
                                .compression(Compression::Zstd { level })
                                .range_filter_bits_per_key(
                                    (bits % 5 != 0).then_some(4.0 + f64::from(bits % 73) / 2.0),
                                );
                            let callbacks = (bits % 4 != 0).then(|| CallbackNames {
                                merge_operator: (bits % 2 == 0).then(|| format!("m{bits}")),
                                compaction_filter: (bits % 3 == 0).then(String::new),
                            });
                            KeyspaceDef { id, name, opts, callbacks }
                        })
                        .collect();
                    VersionEdit {
                        log_number,
                        next_file_number,
                        last_seq,
                        added,
                        deleted,
                        keyspaces,
                        dropped_keyspaces: dropped,
                        next_keyspace_id: next,
                        clock_mark: log_number.map(|n| n.wrapping_mul(1000)),
                        added_blobs: last_seq
                            .map(|s| {
                                let kept = s % 2 == 1;
                                BlobFileMeta {
                                    number: s % 977,
                                    value_bytes: if kept { s / 3 } else { s },
                                    values: s % 13,
                                    file_size: s / 3,
                                    kind: if kept {
                                        BlobFileKind::WalSegment
                                    } else {
                                        BlobFileKind::Separated
                                    },
                                }
                            })
                            .into_iter()
                            .collect(),
                        dropped_blobs: next_file_number.into_iter().collect(),
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn prop_round_trip(e in edit_strategy()) {
            prop_assert_eq!(VersionEdit::decode(&e.encode()).unwrap(), e);
        }

        #[test]
        fn prop_every_truncation_is_corruption(e in edit_strategy()) {
            let data = e.encode();
            for cut in 0..data.len() {
                let r = VersionEdit::decode(&data[..cut]);
                prop_assert!(r.unwrap_err().is_corruption(), "cut at {}", cut);
            }
        }

        #[test]
        fn prop_damaged_edit_never_panics(
            e in edit_strategy(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        ) {
            let mut data = e.encode();
            for (at, x) in flips {
                let i = at.index(data.len());
                data[i] ^= x;
            }
            match VersionEdit::decode(&data) {
                Ok(d) => prop_assert_eq!(VersionEdit::decode(&d.encode()).unwrap(), d),
                Err(err) => prop_assert!(err.is_corruption()),
            }
        }

        #[test]
        fn prop_garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            match VersionEdit::decode(&data) {
                Ok(d) => prop_assert_eq!(VersionEdit::decode(&d.encode()).unwrap(), d),
                Err(err) => prop_assert!(err.is_corruption()),
            }
        }
    }
}
