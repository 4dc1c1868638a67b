//! `bloomkv verify` on a database left by concurrent writers with tiny memtables (constant
//! flushing and compaction): clean after a close, clean after a process-style drop with data
//! still in the WAL, and exit 1 once a table is damaged.

use assert_cmd::Command;
use bloomkv::{Db, Options};

fn options() -> Options {
    Options::default()
        .memtable_bytes(8 << 10)
        .block_bytes(512)
        .target_table_bytes(16 << 10)
        .level_base_bytes(32 << 10)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(3)
        .l0_stop_trigger(6)
}

fn stress(db: &Db, round: u64) {
    std::thread::scope(|s| {
        for w in 0..4u64 {
            s.spawn(move || {
                for i in 0..3000u64 {
                    let k = format!("w{w}/k{:05}", (i * 31 + round) % 1200);
                    if i % 11 == 3 {
                        db.delete(&k).unwrap();
                    } else {
                        db.put(&k, format!("{k}={round}/{i}").repeat(1 + (i % 4) as usize))
                            .unwrap();
                    }
                }
            });
        }
    });
}

fn verify(dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bloomkv")).arg("verify").arg(dir).output().unwrap()
}

#[test]
fn verify_passes_a_stressed_database_and_catches_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let db = Db::open(dir, options()).unwrap();
    stress(&db, 0);
    assert!(db.stats().compactions > 0);
    db.close().unwrap();
    let out = verify(dir);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Dropped with writes only in the WAL.
    let db = Db::open(dir, options()).unwrap();
    stress(&db, 1);
    drop(db);
    let out = verify(dir);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Damage the middle of the largest table.
    let table = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut data = std::fs::read(&table).unwrap();
    let mid = data.len() / 3;
    data[mid] ^= 0x40;
    std::fs::write(&table, data).unwrap();
    let out = verify(dir);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
}
