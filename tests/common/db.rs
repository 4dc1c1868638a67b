//! Opening databases for a test.

use bloomkv::{Db, Options};
use tempfile::TempDir;

/// A database opened with `opts` in a new temporary directory, which is removed when the
/// returned `TempDir` drops; bind both (`let (dir, db) = ...`), and the database, declared
/// second, drops first.
pub fn open_temp(opts: Options) -> (TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts).unwrap();
    (dir, db)
}
