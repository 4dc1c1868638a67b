//! Building each policy's database for the reads: loading it (a timed `fillrandom`, or one
//! `Db::ingest` of the same keys and values), arranging its tree, and removing it when the
//! run is done with it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bloomkv::{Db, Options};

use super::measure::{self, Timed};
use super::predict::{filter_bits_per_key, missing_key_theory};
use super::report::{Shape, WorkloadResult};
use super::L0_COMPACTION_TRIGGER;
use super::{bench_error, keys, page_cache, result_row, Ctx, Load, Policy, TreeShape, Workload};

pub(super) fn open(path: &Path, opts: Options) -> bloomkv::Result<Db> {
    Db::open(path, opts)
}

/// How a database got its entries, and how long it took.
pub(super) struct Loaded {
    /// The fill's timing (`--load fill`); `None` for an ingest, which has no per-entry times.
    pub(super) fill: Option<Timed>,
    pub(super) seconds: f64,
    /// Bytes of keys and values loaded.
    pub(super) bytes: u64,
}

/// Loads the keys `order[0..]` as `--load` says: the fill puts key `order[p]` with
/// `value(p)`; the ingest writes the same keys with the same values, in key order.
pub(super) fn load(ctx: &Ctx, db: &Db, order: &[u64], label: String) -> bloomkv::Result<Loaded> {
    let bytes = order.len() as u64 * (keys::KEY_BYTES + ctx.plan.value_bytes) as u64;
    match ctx.plan.load {
        Load::Fill => {
            let t = fill(ctx, db, order, label)?;
            Ok(Loaded { seconds: t.elapsed.as_secs_f64(), fill: Some(t), bytes })
        }
        Load::Ingest => {
            let seconds = ingest(ctx, db, order, label)?;
            Ok(Loaded { fill: None, seconds, bytes })
        }
    }
}

/// Ingests the keys of `order` in ascending order, each with the value the fill gives it;
/// returns the seconds the ingest took.
pub(super) fn ingest(ctx: &Ctx, db: &Db, order: &[u64], label: String) -> bloomkv::Result<f64> {
    // position[i] = p where order[p] = i: the fill writes key i with value(p). A u32 is
    // enough (the run refuses more than 2^32 keys) and halves this array at 50M keys.
    let mut position = vec![0u32; order.len()];
    for (p, &i) in order.iter().enumerate() {
        position[i as usize] = p as u32;
    }
    let pb = ctx.progress(order.len() as u64, label);
    let start = Instant::now();
    let entries = position.iter().enumerate().map(|(i, &p)| {
        if i % (1 << 16) == 0 {
            pb.set_position(i as u64);
        }
        let mut key = [0u8; keys::KEY_BYTES];
        keys::present_key(i as u64, &mut key);
        (key, ctx.values.value(u64::from(p)))
    });
    let n = db.ingest(entries)?;
    let seconds = start.elapsed().as_secs_f64();
    pb.finish_and_clear();
    if n != order.len() as u64 {
        return Err(bench_error(format!("ingested {n} of {} keys", order.len())));
    }
    Ok(seconds)
}

/// Removes a database the run will not look at again, unless `--dir` asked to keep them: at
/// 50M keys each policy's database takes about 6 GB.
pub(super) fn discard(ctx: &Ctx, dir: &Path) -> bloomkv::Result<()> {
    if ctx.args.dir.is_none() {
        std::fs::remove_dir_all(dir)
            .map_err(|e| bloomkv::Error::io(format!("removing {}", dir.display()), e))?;
    }
    Ok(())
}

/// Inserts the keys `order[0..]` one `put` at a time (db_bench's batch size of 1).
pub(super) fn fill(ctx: &Ctx, db: &Db, order: &[u64], label: String) -> bloomkv::Result<Timed> {
    let pb = ctx.progress(order.len() as u64, label);
    let t = measure::run_timed(1, order.len() as u64, ctx.args.seed, &pb, |w| {
        keys::present_key(order[w.done as usize], &mut w.key);
        db.put(w.key, ctx.values.value(w.done))
    })?;
    pb.finish_and_clear();
    Ok(t)
}

/// A policy's database, loaded and arranged for the read workloads.
pub(super) struct Built {
    pub(super) policy: Policy,
    pub(super) dir: PathBuf,
    pub(super) opts: Options,
    /// `None` while closed (by [`Built::make_way`] or a cold workload): dropped, so that
    /// nothing of it, its file mappings included, holds pages; the next workload opens it.
    pub(super) db: Option<Db>,
    /// Opened read-only (the layered shape); a workload that writes reopens it first.
    pub(super) read_only: bool,
}

impl Built {
    /// Opens the database again, read-only or not as `read_only` says, unless it is open.
    pub(super) fn open(&mut self) -> bloomkv::Result<&Db> {
        if self.db.is_none() {
            self.db = Some(if self.read_only {
                Db::open_read_only(&self.dir, self.opts.clone())?
            } else {
                open(&self.dir, self.opts.clone())?
            });
        }
        Ok(self.db.as_ref().expect("just opened"))
    }

    /// Closes the database and drops the handle (with its tables, filters, indexes and
    /// mappings), if it is open.
    pub(super) fn close(&mut self) -> bloomkv::Result<()> {
        match self.db.take() {
            Some(db) => db.close(),
            None => Ok(()),
        }
    }

    /// Gives up this database's share of the page cache to another policy's, whose workload
    /// runs next (why: `make_way_for` in mod.rs): its files' cached pages are dropped, and
    /// with `--mmap-reads` it is closed first, since the kernel does not drop pages a mapping
    /// holds.
    pub(super) fn make_way(&mut self, mapped: bool) -> bloomkv::Result<()> {
        if mapped {
            self.close()?;
        }
        page_cache::prepare(page_cache::PageCache::Cold, &self.dir).map(|_| ())
    }
}

/// Builds `policy`'s database (with `fillrandom`, or an ingest of the same data), flushes it
/// and arranges it for the reads; records the fill's row (when measured) and the shape.
pub(super) fn build(
    ctx: &Ctx,
    policy: Policy,
    workloads: &[Workload],
    results: &mut Vec<WorkloadResult>,
    shapes: &mut Vec<Shape>,
) -> bloomkv::Result<Built> {
    let args = ctx.args;
    let bpk = args.bits_per_key;
    let load_name = match ctx.plan.load {
        Load::Fill => "fillrandom",
        Load::Ingest => "ingest",
    };
    let dir = ctx.base.join(format!("{load_name}-{}", policy.name()));
    let opts = ctx.options(policy, bpk);
    let mut db = open(&dir, opts.clone())?;
    let before = db.stats();
    let loaded = load(ctx, &db, &ctx.order, format!("{load_name} {}", policy.name()))?;
    // The reads should see tables, not a memtable holding the newest writes.
    db.flush()?;
    let after = db.stats();
    let d = measure::delta(&before, &after, ctx.plan.keys);
    if let (Some(t), true) = (&loaded.fill, workloads.contains(&Workload::FillRandom)) {
        results.push(result_row(
            Workload::FillRandom,
            policy,
            missing_key_theory(&db, ctx.plan.keys, policy, bpk),
            1,
            t,
            &before,
            &after,
            &d,
        ));
    }
    let settle_start = Instant::now();
    let mut read_only = false;
    if args.shape == TreeShape::Layered {
        layer(ctx, &db, &ctx.order)?;
        // Closing waits for any background step in progress; the read-only handle then runs
        // none, so the read workloads all see exactly this tree.
        db.close()?;
        db = Db::open_read_only(&dir, opts.clone())?;
        read_only = true;
    }
    let shaped = db.stats();
    let (bits_per_key, bits_per_key_per_level) = filter_bits_per_key(&db);
    shapes.push(Shape {
        policy: policy.name().to_string(),
        after_fill_tables_per_level: after.tables_per_level.clone(),
        tables_per_level: shaped.tables_per_level.clone(),
        bytes_per_level: shaped.bytes_per_level.clone(),
        filter_memory_bytes: shaped.filter_memory_bytes,
        after_fill_filter_chunk_bytes: after.filter_chunk_bytes,
        filter_chunk_bytes: shaped.filter_chunk_bytes,
        filter_bits_per_key: bits_per_key,
        filter_bits_per_key_per_level: bits_per_key_per_level,
        index_memory_bytes: shaped.index_memory_bytes,
        open_table_files: shaped.open_table_files,
        mapped_table_files: shaped.mapped_table_files,
        write_amplification: d.write_amplification,
        load: ctx.plan.load.name().to_string(),
        load_seconds: loaded.seconds,
        load_bytes: loaded.bytes,
        load_mib_per_sec: loaded.bytes as f64 / (1 << 20) as f64 / loaded.seconds.max(1e-9),
        settle_seconds: settle_start.elapsed().as_secs_f64(),
    });
    Ok(Built { policy, dir, opts, db: Some(db), read_only })
}

/// Closes `b`'s database and removes it unless `--dir` keeps it.
pub(super) fn finish(ctx: &Ctx, mut b: Built) -> bloomkv::Result<()> {
    b.close()?;
    discard(ctx, &b.dir)
}

/// Arranges the tree for [`TreeShape::Layered`]: everything compacted into the last level,
/// then the most recently inserted keys rewritten with the values the fill gave them, as
/// `l0_compaction_trigger − 1` L0 tables of equal size, each one flushed explicitly. Every
/// step depends only on the data, so every policy ends with the same tree.
pub(super) fn layer(ctx: &Ctx, db: &Db, order: &[u64]) -> bloomkv::Result<()> {
    db.compact()?;
    let l0_tables = L0_COMPACTION_TRIGGER - 1;
    // Half a memtable per table (at an estimated 32 bytes of overhead per entry), so the
    // memtable never switches on its own between the explicit flushes; at most a quarter of
    // the keys in all, so the last level keeps most of the data.
    let per_entry = keys::KEY_BYTES + ctx.plan.value_bytes + 32;
    let per_table =
        (ctx.plan.memtable_bytes / 2 / per_entry).min(order.len() / 4 / l0_tables).max(1);
    let start = order.len().saturating_sub(per_table * l0_tables);
    let mut key = [0u8; keys::KEY_BYTES];
    for (n, chunk) in order[start..].chunks(per_table).enumerate() {
        for (j, &i) in chunk.iter().enumerate() {
            keys::present_key(i, &mut key);
            // The fill wrote key `order[p]` with `value(p)`: rewrite the same value.
            let position = (start + n * per_table + j) as u64;
            db.put(key, ctx.values.value(position))?;
        }
        db.flush()?;
    }
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::bench::page_cache::tests::{cached, in_memory_fs};
    use crate::bench::page_cache::{prepare, PageCache};
    use bloomkv::Readable;

    /// A small database's table files, warmed, with `b` open over them.
    fn warmed(mapped: bool) -> (tempfile::TempDir, Built, Vec<PathBuf>) {
        // Beside the test binary, not in /tmp, which may be a tmpfs.
        let exe = std::env::current_exe().unwrap();
        let dir = tempfile::tempdir_in(exe.parent().unwrap()).unwrap();
        let opts = Options::default().memtable_bytes(1 << 20).mmap_reads(mapped);
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        for i in 0..20_000u32 {
            db.put(format!("key{i:08}"), [7u8; 100]).unwrap();
        }
        db.flush().unwrap();
        db.close().unwrap();
        drop(db);
        let tables: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "sst"))
            .collect();
        assert!(!tables.is_empty());
        prepare(PageCache::Warm, dir.path()).unwrap();
        let mut b = Built {
            policy: Policy::Blocked,
            dir: dir.path().to_path_buf(),
            opts,
            db: None,
            read_only: false,
        };
        let stats = b.open().unwrap().stats();
        assert_eq!(stats.mapped_table_files > 0, mapped);
        assert!(tables.iter().all(|t| cached(t)));
        (dir, b, tables)
    }

    #[test]
    fn make_way_drops_the_tables_pages_closing_a_mapped_database_first() {
        for mapped in [false, true] {
            let (dir, mut b, tables) = warmed(mapped);
            if in_memory_fs(dir.path()) {
                eprintln!("the target directory is in memory: nothing to drop its pages to");
                return;
            }
            b.make_way(mapped).unwrap();
            // Mapped, the pages stay while a mapping holds them, so the database must be gone.
            assert_eq!(b.db.is_none(), mapped, "mapped {mapped}");
            for t in &tables {
                assert!(!cached(t), "mapped {mapped}: {} still cached", t.display());
            }
            // The next workload opens it again and reads what it held.
            prepare(PageCache::Warm, dir.path()).unwrap();
            let db = b.open().unwrap();
            assert_eq!(db.get("key00000042").unwrap().as_deref(), Some(&[7u8; 100][..]));
        }
    }
}
