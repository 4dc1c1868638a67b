//! Where a dump's entries go (`bloomkv dump`, see `dump.rs`): streamed as text, or collected
//! into one JSON document. Each kind's module writes its entries here.

use std::io::Write;

use bloomkv::Error;
use bloomkv_tree::key::ValueKind;
use serde::Serialize;

use super::manifest;
use crate::common::{self, Bytes, KeyRange};

/// One entry. `seq` and `kind` are absent in the merged user view; `keyspace` is the WAL
/// operation's keyspace id (WAL entries only: a WAL segment names keyspaces by id); `file`
/// names the table or WAL (database `--internal` dumps only); `offset` is the WAL record's
/// file offset.
#[derive(Serialize, Debug)]
pub struct Entry {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    value: String,
    /// An expiring put's expiry, milliseconds since the Unix epoch (its value is shown
    /// without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    expires: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyspace: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

/// The JSON document.
#[derive(Serialize, Debug)]
pub struct Report {
    pub path: String,
    /// "table", "wal", "manifest", "db" (merged view) or "db-internal".
    pub source: &'static str,
    pub count: u64,
    /// True when `--limit` stopped the dump early.
    pub truncated: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<Entry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<manifest::Edit>,
}

/// Where entries go: streamed as text, or collected for one JSON document.
pub struct Sink {
    pub out: common::Out,
    pub json: bool,
    pub fmt: Bytes,
    pub range: KeyRange,
    pub report: Report,
}

impl Sink {
    /// Emits an entry if its key is selected. Returns false once the limit is reached.
    pub fn push(&mut self, e: Entry) -> std::io::Result<bool> {
        if self.range.limit.is_some_and(|l| self.report.count >= l) {
            self.report.truncated = true;
            return Ok(false);
        }
        self.report.count += 1;
        if self.json {
            self.report.entries.push(e);
        } else {
            let q = |s: &str| if self.fmt.hex { s.to_string() } else { format!("\"{s}\"") };
            let mut line = q(&e.key);
            if let (Some(seq), Some(kind)) = (e.seq, e.kind) {
                line.push_str(&format!(" @ {seq} {kind}"));
            }
            match e.kind {
                Some("delete") | Some(RESERVED) => {}
                Some(RANGE_DELETE) => line.push_str(&format!(" .. {}", q(&e.value))),
                _ => line.push_str(&format!(" => {}", q(&e.value))),
            }
            if let Some(ms) = e.expires {
                let at = common::utc_date_time(ms / 1000);
                line.push_str(&format!("  (expires {at}, {ms} ms)"));
            }
            // Most writes go to the default keyspace; naming it on every line is noise.
            if let Some(k) = e.keyspace.filter(|&k| k != 0) {
                line.push_str(&format!("  [keyspace {k}]"));
            }
            if let Some(f) = &e.file {
                line.push_str(&format!("  [{f}]"));
            }
            if let Some(o) = e.offset {
                line.push_str(&format!("  (record at {o})"));
            }
            writeln!(self.out, "{line}")?;
        }
        Ok(true)
    }

    /// An entry with `key` and `value` shown in the chosen format.
    pub fn entry(
        &self,
        key: &[u8],
        seq: Option<u64>,
        kind: Option<ValueKind>,
        value: &[u8],
    ) -> Entry {
        let (expires, value) = match kind {
            Some(ValueKind::PutExpiring) => match bloomkv_tree::key::split_expiring(value) {
                Some((at, v)) => (Some(at), v),
                None => (None, value),
            },
            Some(ValueKind::MergeExpiring) => {
                match bloomkv_tree::key::split_merge_expiring(value) {
                    Some((at, _, v)) => (Some(at), v),
                    None => (None, value),
                }
            }
            _ => (None, value),
        };
        Entry {
            key: self.fmt.show(key),
            seq,
            kind: kind.map(kind_name),
            value: self.fmt.show(value),
            expires,
            keyspace: None,
            file: None,
            offset: None,
        }
    }
}

impl Sink {
    /// A WAL operation that reserves sequence number `seq` for an ingest: no key, no value,
    /// kind `reserved`, in record `offset` of WAL `file`.
    pub fn reserved_entry(&self, seq: u64, offset: u64, file: Option<&str>) -> Entry {
        Entry {
            key: String::new(),
            seq: Some(seq),
            kind: Some(RESERVED),
            value: String::new(),
            expires: None,
            keyspace: None,
            file: file.map(str::to_string),
            offset: Some(offset),
        }
    }

    /// A range tombstone: `start` in the key column, `end` (exclusive) in the value column,
    /// kind `delete-range`.
    pub fn range_delete_entry(&self, start: &[u8], end: &[u8], seq: u64) -> Entry {
        Entry {
            key: self.fmt.show(start),
            seq: Some(seq),
            kind: Some(RANGE_DELETE),
            value: self.fmt.show(end),
            expires: None,
            keyspace: None,
            file: None,
            offset: None,
        }
    }
}

/// The kind shown for a range tombstone.
const RANGE_DELETE: &str = "delete-range";

/// The kind shown for a WAL record that only takes a sequence number for an ingest.
const RESERVED: &str = "reserved";

fn kind_name(k: ValueKind) -> &'static str {
    match k {
        ValueKind::Put => "put",
        ValueKind::Delete => "delete",
        ValueKind::PutExpiring => "put-expiring",
        ValueKind::Merge => "merge",
        ValueKind::MergeExpiring => "merge-expiring",
        ValueKind::BlobPut => "put-blob",
        ValueKind::BlobPutExpiring => "put-blob-expiring",
    }
}

/// A dump stops on damage in the input or on a failed write to stdout.
pub enum DumpError {
    Lib(Error),
    Io(std::io::Error),
}

impl From<Error> for DumpError {
    fn from(e: Error) -> Self {
        DumpError::Lib(e)
    }
}

impl From<std::io::Error> for DumpError {
    fn from(e: std::io::Error) -> Self {
        DumpError::Io(e)
    }
}
