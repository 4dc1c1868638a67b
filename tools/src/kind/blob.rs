//! Everything the tool does with one blob file (`*.blob`): `dump` — every value record in file
//! order, with its key, its value and the physical offset a reference names it by; `verify`.
//! (`inspect` is for tables only.)

use std::path::Path;

use bloomkv::check;
use bloomkv::fs::{FileSystem, StdFs};
use bloomkv_tree::blob::BlobRecords;
use bloomkv_tree::filename::{self, FileKind};
use bloomkv_tree::key::ValueKind;

use super::sink::{DumpError, Sink};

/// `dump`: the file's selected values in file order. Returns false if the limit stopped it.
pub fn dump(sink: &mut Sink, path: &Path) -> Result<bool, DumpError> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let number = match filename::parse(name) {
        Some(FileKind::Blob(n)) => Some(n),
        _ => None,
    };
    let mut records = BlobRecords::new(path, StdFs.read_all(path)?, number)?;
    while let Some(rec) = records.next_record()? {
        if !sink.range.contains(&rec.key) {
            continue;
        }
        let mut e = sink.entry(&rec.key, None, Some(ValueKind::Put), &rec.value);
        e.offset = Some(rec.reference.offset);
        if !sink.push(e)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `verify`: the library's check of one blob file.
pub fn verify(path: &Path) -> check::Report {
    check::blob_file(&StdFs, path)
}
