//! Corruption tests in the style of LevelDB's `corruption_test`: build a real database, damage
//! one file, open and read everything. Every outcome must be correct data or an error naming
//! the damaged file — never a panic, never wrong data.

use std::path::Path;
use std::sync::Arc;

use bloomkv::fs::{fault::unique_dir, FaultFs, FileSystem};
use bloomkv::key::{internal_key, ValueKind};
use bloomkv::log::LogWriter;
use bloomkv::version::edit::{TableMeta, VersionEdit};
use bloomkv::version::set::set_current;
use bloomkv::{Db, Error, Options};

fn expect_corruption_in(r: bloomkv::Result<Db>, file: &Path) {
    match r {
        Err(Error::Corruption { file: f, .. }) => assert_eq!(f, file),
        Err(e) => panic!("expected corruption in {}, got {e:?}", file.display()),
        Ok(_) => panic!("expected corruption in {}, the open succeeded", file.display()),
    }
}

/// Regression: an edit naming a level the format allows (< 16) but the engine lacks (>= 7)
/// made `read_manifest` index out of bounds and panic.
#[test]
fn manifest_edit_with_a_level_beyond_the_engine_is_corruption() {
    let fs = FaultFs::new();
    let dir = unique_dir("level");
    let opts = || Options::default().file_system(Arc::new(fs.clone()));
    Db::open(&dir, opts()).unwrap().close().unwrap();
    for level in [7usize, 9, 15] {
        let path = bloomkv::filename::manifest_path(&dir, 900 + level as u64);
        let mut w = LogWriter::new(fs.create(&path).unwrap());
        let meta = TableMeta {
            number: 800,
            file_size: 100,
            smallest: internal_key(b"a", 1, ValueKind::Put),
            largest: internal_key(b"b", 1, ValueKind::Put),
            smallest_seq: 1,
            largest_seq: 1,
            num_entries: 2,
        };
        let edit = VersionEdit {
            log_number: Some(0),
            next_file_number: Some(1000),
            last_seq: Some(1),
            added: vec![(level, meta)],
            deleted: vec![],
        };
        w.add_record(&edit.encode()).unwrap();
        w.sync().unwrap();
        set_current(&fs, &dir, 900 + level as u64).unwrap();
        expect_corruption_in(Db::open(&dir, opts()), &path);
    }
}
