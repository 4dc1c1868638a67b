//! What the bench does to the operating system's page cache before each read workload
//! (`--page-cache`).
//!
//! A large profile's databases (5.5 GB each at 50M keys) fit in this machine's RAM one or two
//! at a time, and which of their pages the kernel happens to hold decides whether a
//! false-positive block read costs a few microseconds (a copy from the page cache) or a
//! hundred (the disk). Left alone, that changes from round to round and policy to policy, and
//! swamps the difference the filters make. `warm` and `cold` put every database in the same
//! state before each of its read workloads, so the policies are compared under one regime.
//! Neither needs root: `warm` reads each file through once, and `cold` asks the kernel to
//! drop each file's clean cached pages (`posix_fadvise(POSIX_FADV_DONTNEED)`, Linux only).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use clap::ValueEnum;

/// The page-cache state each read workload starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PageCache {
    /// Whatever the kernel holds: the database was just written, or read by the workload
    /// before.
    AsIs,
    /// Every file of the database read through first, so (RAM permitting) no read goes to
    /// the disk.
    Warm,
    /// Every file of the database dropped from the page cache first (Linux), so blocks not in
    /// the engine's block cache come from the disk. (The bench also closes the database
    /// before and reopens it after, so that its block cache starts empty too.)
    Cold,
}

impl PageCache {
    pub fn name(self) -> &'static str {
        match self {
            PageCache::AsIs => "as-is",
            PageCache::Warm => "warm",
            PageCache::Cold => "cold",
        }
    }
}

/// Puts every file under `dir` into `mode`'s state; returns the bytes those files hold.
pub fn prepare(mode: PageCache, dir: &Path) -> bloomkv::Result<u64> {
    if mode == PageCache::AsIs {
        return Ok(0);
    }
    let mut bytes = 0;
    let mut buf = Vec::new();
    for path in files_under(dir)? {
        let io =
            |e| bloomkv::Error::io(format!("preparing {} ({})", path.display(), mode.name()), e);
        let mut file = match File::open(&path) {
            Ok(file) => file,
            // A compaction still running (the `as-filled` shape) deleted it since the
            // listing: it is no longer part of the database.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(e)),
        };
        bytes += file.metadata().map_err(io)?.len();
        match mode {
            PageCache::AsIs => {}
            PageCache::Warm => {
                buf.resize(1 << 20, 0);
                while file.read(&mut buf).map_err(io)? > 0 {}
            }
            PageCache::Cold => drop_cached(&file).map_err(io)?,
        }
    }
    Ok(bytes)
}

/// How long memory must sit untouched before this kernel pages it out by itself, when it
/// runs such a policy: a DAMON scheme whose action is `pageout` (cloud VMs use one to hand idle
/// guest memory back to the host). Under one, a database's page-cache pages leave once it has
/// not read them for that long, so an `as-is` run's block reads hit the disk or not depending
/// on how long ago each tree was last read. `None` when no such scheme is on, or the kernel
/// has no DAMON interface.
pub fn idle_pageout() -> Option<std::time::Duration> {
    idle_pageout_under(Path::new("/sys/kernel/mm/damon/admin/kdamonds"))
}

/// What the run's header says of [`idle_pageout`]: nothing when the kernel pages nothing out.
pub fn reclaim_note(idle_pageout: Option<std::time::Duration>) -> String {
    match idle_pageout {
        Some(idle) => {
            format!(" (this kernel pages out memory idle for {} s: DAMON)", idle.as_secs_f64())
        }
        None => String::new(),
    }
}

/// [`idle_pageout`] read from a DAMON sysfs tree rooted at `kdamonds`: the shortest minimum
/// age of the `pageout` schemes of the running kdamonds, in their contexts' aggregation
/// intervals.
fn idle_pageout_under(kdamonds: &Path) -> Option<std::time::Duration> {
    let read = |p: &Path| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    let number = |p: &Path| read(p)?.parse::<u64>().ok();
    let subdirs = |p: &Path| -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(p) else { return Vec::new() };
        entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect()
    };
    let mut shortest: Option<std::time::Duration> = None;
    for kdamond in subdirs(kdamonds) {
        if read(&kdamond.join("state")).as_deref() != Some("on") {
            continue;
        }
        for context in subdirs(&kdamond.join("contexts")) {
            let Some(aggr_us) = number(&context.join("monitoring_attrs/intervals/aggr_us")) else {
                continue;
            };
            for scheme in subdirs(&context.join("schemes")) {
                if read(&scheme.join("action")).as_deref() != Some("pageout") {
                    continue;
                }
                let Some(min_age) = number(&scheme.join("access_pattern/age/min")) else {
                    continue;
                };
                let idle = std::time::Duration::from_micros(min_age.saturating_mul(aggr_us));
                shortest = Some(shortest.map_or(idle, |s| s.min(idle)));
            }
        }
    }
    shortest
}

#[cfg(target_os = "linux")]
fn drop_cached(file: &File) -> std::io::Result<()> {
    use rustix::fs::{fadvise, Advice};
    // Offset 0 and no length: the whole file. Only clean pages go; the bench's databases are
    // synced by the time it reads them (ingest and flush sync their tables).
    fadvise(file, 0, None, Advice::DontNeed).map_err(std::io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn drop_cached(_file: &File) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "--page-cache cold needs posix_fadvise (Linux)",
    ))
}

/// Every regular file under `dir`, in subdirectories too.
fn files_under(dir: &Path) -> bloomkv::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let io = |e| bloomkv::Error::io(format!("listing {}", d.display()), e);
        for entry in std::fs::read_dir(&d).map_err(io)? {
            let entry = entry.map_err(io)?;
            let kind = entry.file_type().map_err(io)?;
            if kind.is_dir() {
                todo.push(entry.path());
            } else if kind.is_file() {
                out.push(entry.path());
            }
        }
    }
    Ok(out)
}

#[cfg(all(test, target_os = "linux"))]
pub(super) mod tests {
    use super::*;
    use bloomkv::fs::{FileSystem, StdFs};
    use std::io::Write;

    /// A DAMON sysfs tree: kdamond `k` with `state`, one context with `aggr_us`, and its
    /// schemes as (action, minimum age).
    fn damon_tree(root: &Path, k: &str, state: &str, aggr_us: u64, schemes: &[(&str, u64)]) {
        let kd = root.join(k);
        let ctx = kd.join("contexts/0");
        std::fs::create_dir_all(ctx.join("monitoring_attrs/intervals")).unwrap();
        std::fs::write(kd.join("state"), format!("{state}\n")).unwrap();
        std::fs::write(ctx.join("monitoring_attrs/intervals/aggr_us"), format!("{aggr_us}\n"))
            .unwrap();
        for (i, (action, age)) in schemes.iter().enumerate() {
            let scheme = ctx.join(format!("schemes/{i}"));
            std::fs::create_dir_all(scheme.join("access_pattern/age")).unwrap();
            std::fs::write(scheme.join("action"), format!("{action}\n")).unwrap();
            std::fs::write(scheme.join("access_pattern/age/min"), format!("{age}\n")).unwrap();
        }
    }

    #[test]
    fn idle_pageout_reads_the_running_pageout_schemes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(idle_pageout_under(&root.join("absent")), None);
        // A stopped kdamond and a scheme that only collects statistics page nothing out.
        damon_tree(root, "0", "off", 5_000_000, &[("pageout", 1)]);
        damon_tree(root, "1", "on", 5_000_000, &[("stat", 1)]);
        assert_eq!(idle_pageout_under(root), None);
        // A running pageout scheme: its minimum age in aggregation intervals.
        damon_tree(root, "2", "on", 5_000_000, &[("stat", 1), ("pageout", 6)]);
        assert_eq!(idle_pageout_under(root), Some(std::time::Duration::from_secs(30)));
        // The shortest of several.
        damon_tree(root, "3", "on", 100_000, &[("pageout", 50)]);
        assert_eq!(idle_pageout_under(root), Some(std::time::Duration::from_secs(5)));
    }

    /// Whether the kernel can hand over the file's first 64 KiB (or all of a shorter file)
    /// without going to the disk.
    pub(in crate::bench) fn cached(path: &Path) -> bool {
        let file = StdFs.open(path).unwrap();
        let len = std::fs::metadata(path).unwrap().len().min(64 << 10);
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at_if_cached(&mut buf, 0).unwrap()
    }

    /// A file system whose pages are its storage, so that nothing can drop them.
    pub(in crate::bench) fn in_memory_fs(dir: &Path) -> bool {
        const TMPFS_MAGIC: u64 = 0x0102_1994;
        const RAMFS_MAGIC: u64 = 0x8584_58f6;
        let dir = File::open(dir).unwrap();
        let kind = rustix::fs::fstatfs(&dir).unwrap().f_type as u64;
        kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
    }

    #[test]
    fn cold_drops_a_database_s_files_from_the_page_cache_and_warm_brings_them_back() {
        // Beside the test binary, not in /tmp, which may be a tmpfs.
        let exe = std::env::current_exe().unwrap();
        let dir = tempfile::tempdir_in(exe.parent().unwrap()).unwrap();
        let nested = dir.path().join("sub");
        std::fs::create_dir(&nested).unwrap();
        let paths = [dir.path().join("a.sst"), nested.join("b.sst")];
        for p in &paths {
            let mut f = File::create(p).unwrap();
            f.write_all(&vec![7u8; 1 << 20]).unwrap();
            f.sync_all().unwrap();
        }
        assert_eq!(prepare(PageCache::AsIs, dir.path()).unwrap(), 0);
        assert_eq!(prepare(PageCache::Warm, dir.path()).unwrap(), 2 << 20);
        assert!(paths.iter().all(|p| cached(p)), "warm left a file out of the page cache");
        assert_eq!(prepare(PageCache::Cold, dir.path()).unwrap(), 2 << 20);
        if in_memory_fs(dir.path()) {
            eprintln!("the target directory is in memory: nothing to drop its pages to");
            return;
        }
        for p in &paths {
            assert!(!cached(p), "cold left {} in the page cache", p.display());
        }
        prepare(PageCache::Warm, dir.path()).unwrap();
        assert!(paths.iter().all(|p| cached(p)));
    }
}
