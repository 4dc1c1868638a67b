//! [`StdWritable`]: appends to an operating-system file, buffered, poisoned by the first
//! failure, and optionally copied into a mapped window of space reserved ahead.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use super::{io_err, WritableFile};
use crate::{Error, Result};

/// Appends buffered in user space, so that the many small records of a WAL group or a table
/// block cost one `write(2)`.
///
/// Not a `BufWriter`: after a failed write a `BufWriter` keeps the bytes it could not write
/// and writes them on its next flush or when dropped, which would complete a record whose
/// write was already reported as failed. Here the first error poisons the file: the buffer
/// is discarded, every later append, flush or sync fails, and dropping it writes nothing.
#[derive(Debug)]
pub(super) struct StdWritable<W: Write + std::fmt::Debug + SyncData = File> {
    path: PathBuf,
    out: W,
    buf: Vec<u8>,
    len: u64,
    /// Bytes from the start whose writeback to the device has been started (or synced).
    written_back: u64,
    /// Bytes handed to the OS after which writeback starts; `u64::MAX` for never.
    writeback_step: u64,
    /// Set by the first failed write or sync.
    failed: bool,
    /// The file's size with the space reserved by `preallocate`.
    reserved: u64,
    /// Appends within `reserved` are copied into a mapping ([`WritableFile::map_appends`]).
    map_appends: bool,
    /// The mapped stretch of the file appends are copied into: its offset and the mapping.
    window: Option<(u64, memmap2::MmapMut)>,
    /// The file descriptor's position lags behind what was handed over through the mapping.
    position_stale: bool,
}

/// Copies `src` into `dst` strictly from the first byte to the last. A process killed
/// mid-copy must leave a prefix of the records in the mapping, as an interrupted `write(2)`
/// does: a torn last record is the log's end, but a record followed by valid data is damage
/// that stops the next open. `copy_from_slice` gives no such order (the C library's copy
/// writes a buffer's last bytes first for some sizes), so this stores one word at a time,
/// each store volatile so that none is merged, reordered or turned back into `memcpy`.
fn copy_in_order(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    let base = dst.as_mut_ptr();
    let head = base.align_offset(8).min(dst.len());
    let words = (dst.len() - head) / 8;
    // SAFETY: every store is to `dst`, whose bounds each index stays within (`head`, then
    // `words` whole words after it, then the rest); the word stores are to addresses that
    // `align_offset` made 8-aligned, as `write_volatile` requires.
    unsafe {
        for (i, &b) in src[..head].iter().enumerate() {
            std::ptr::write_volatile(base.add(i), b);
        }
        for w in 0..words {
            let at = head + w * 8;
            let word = u64::from_ne_bytes(src[at..at + 8].try_into().expect("eight bytes"));
            std::ptr::write_volatile(base.add(at).cast::<u64>(), word);
        }
        for (i, &b) in src.iter().enumerate().skip(head + words * 8) {
            std::ptr::write_volatile(base.add(i), b);
        }
    }
}

/// Bytes of the file each mapping made for appends covers; a multiple of the page size.
/// Small, because writing back a page that is still mapped makes the kernel write-protect
/// it and flush it from every core's TLB: pages behind the current window are unmapped.
const MAP_WINDOW_BYTES: u64 = 1 << 20;

/// Hand-overs of at least this many bytes go with `write(2)` even where the file maps its
/// appends: a copy filling whole pages gains nothing from the mapping, whose every page is
/// first faulted in (read or zeroed, then made writable), costing more than writing it
/// (16 KiB values: the faults were half a fill's CPU time).
const MAP_MAX_BYTES: usize = 4096;

/// The user-space buffer of a [`StdWritable`].
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// Each time this many bytes have been handed to the OS since the last sync or writeback,
/// the device is asked to start writing them out (RocksDB's `bytes_per_sync`): the sync that
/// ends a table then waits for the last stretch only, instead of for the whole file, and the
/// device writes while the CPU builds the next blocks. Files that opt out
/// ([`WritableFile::defer_writeback`]: the WAL) never ask.
const WRITEBACK_STEP: u64 = 1 << 20;

impl<W: Write + std::fmt::Debug + SyncData> StdWritable<W> {
    pub(super) fn new(path: PathBuf, out: W) -> Self {
        StdWritable {
            path,
            out,
            buf: Vec::with_capacity(WRITE_BUFFER_BYTES),
            len: 0,
            written_back: 0,
            writeback_step: WRITEBACK_STEP,
            failed: false,
            reserved: 0,
            map_appends: false,
            window: None,
            position_stale: false,
        }
    }

    fn check(&self) -> Result<()> {
        if self.failed {
            let e = std::io::Error::other("an earlier write to this file failed");
            return Err(io_err("writing", &self.path, e));
        }
        Ok(())
    }

    /// Poisons the file after the failed write `e`.
    fn poison(&mut self, e: std::io::Error) -> Error {
        self.failed = true;
        self.buf.clear();
        io_err("writing", &self.path, e)
    }

    /// Hands the buffer to the OS; through the mapping only if `map` (see `hand_over`).
    fn flush_buf(&mut self, map: bool) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut self.buf);
        let at = self.len - buf.len() as u64;
        let written = self.hand_over(&buf, at, map);
        self.buf = buf;
        self.buf.clear();
        written
    }

    /// Hands `data`, which belongs at offset `at`, to the OS: into the mapping where the
    /// file maps its appends, the space is reserved and `map` allows, with `write(2)`
    /// otherwise. A sync's bytes go with `write(2)`: the sync write-protects the pages it
    /// writes out, so the next copy into each page through the mapping takes a page fault,
    /// which a log synced after every write would pay every time.
    fn hand_over(&mut self, data: &[u8], at: u64, map: bool) -> Result<()> {
        let end = at + data.len() as u64;
        if map && self.map_appends && end <= self.reserved && data.len() < MAP_MAX_BYTES {
            match self.copy_mapped(data, at) {
                Ok(()) => return Ok(()),
                // Mapping failed (address space, limits): this file writes from now on.
                Err(_) => self.map_appends = false,
            }
        }
        if self.position_stale {
            self.out.seek_to(at).map_err(|e| self.poison(e))?;
            self.position_stale = false;
        }
        self.out.write_all(data).map_err(|e| self.poison(e))?;
        if map && self.map_appends {
            // As the mapped copies do for each window they leave: the sync that ends the
            // file finds the last stretch alone to write.
            let whole = end - end % MAP_WINDOW_BYTES;
            if whole > self.written_back {
                let _ = self.out.start_writeback(self.written_back, whole - self.written_back);
                self.written_back = whole;
            }
        }
        Ok(())
    }

    /// Copies `data` into the file at `at` through mappings of `MAP_WINDOW_BYTES`, all
    /// inside the reserved space (so inside the file: a mapped byte past the file's end
    /// would fault).
    fn copy_mapped(&mut self, data: &[u8], at: u64) -> std::io::Result<()> {
        let mut done = 0;
        while done < data.len() {
            let pos = at + done as u64;
            let start = pos - pos % MAP_WINDOW_BYTES;
            let map = match &mut self.window {
                Some((s, map)) if *s == start => map,
                window => {
                    if let Some((left, map)) = window.take() {
                        drop(map);
                        // The stretch appends leave is unmapped now, so the device can write
                        // it without write-protecting pages still being copied into, and the
                        // sync that ends the file (a WAL segment's, at its memtable's
                        // switch, which every writer waits for) finds only the last one to
                        // write. Only a hint, as `start_writeback`.
                        let _ = self.out.start_writeback(left, MAP_WINDOW_BYTES);
                    }
                    let map = self.out.map_window(start, MAP_WINDOW_BYTES as usize)?;
                    // Faulted in by one call now, not page by page as appends reach them:
                    // the WAL's appends run under its lock, and every writer waited out
                    // each such fault. Only a hint; a failure leaves the faults to the copies.
                    #[cfg(target_os = "linux")]
                    let _ = map.advise(memmap2::Advice::PopulateWrite);
                    &mut window.insert((start, map)).1
                }
            };
            let from = (pos - start) as usize;
            let n = (data.len() - done).min(map.len() - from);
            copy_in_order(&mut map[from..from + n], &data[done..done + n]);
            done += n;
        }
        self.position_stale = true;
        Ok(())
    }

    /// Starts the device's writeback of what the OS holds beyond `written_back`, once that
    /// is `writeback_step` or more. Only a hint: a failure here shows at the next sync.
    fn start_writeback(&mut self) {
        let handed = self.len - self.buf.len() as u64;
        if handed.saturating_sub(self.written_back) >= self.writeback_step {
            let _ = self.out.start_writeback(self.written_back, handed - self.written_back);
            self.written_back = handed;
        }
    }
}

impl<W: Write + std::fmt::Debug + Send + SyncData> WritableFile for StdWritable<W> {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.check()?;
        if self.buf.len() + data.len() > WRITE_BUFFER_BYTES {
            self.flush_buf(true)?;
            self.start_writeback();
        }
        if data.len() >= WRITE_BUFFER_BYTES {
            self.hand_over(data, self.len, true)?;
            self.len += data.len() as u64;
            self.start_writeback();
        } else {
            self.buf.extend_from_slice(data);
            self.len += data.len() as u64;
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        self.check()?;
        self.flush_buf(true)?;
        self.start_writeback();
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        self.check()?;
        self.flush_buf(false)?;
        // Unmapped first, so the fsync's writeback finds none of the pages mapped and need
        // not write-protect them one by one, each with a TLB flush on every core.
        self.window = None;
        self.out.sync_data().map_err(|e| {
            // What reached the device is unknown after a failed fsync; nothing more goes in.
            self.failed = true;
            io_err("syncing", &self.path, e)
        })?;
        self.written_back = self.len;
        Ok(())
    }
    fn preallocate(&mut self, len: u64) -> Result<()> {
        self.check()?;
        self.out.allocate(len).map_err(|e| io_err("reserving space for", &self.path, e))?;
        self.reserved = self.reserved.max(len);
        Ok(())
    }
    fn truncate(&mut self, len: u64) -> Result<()> {
        self.buf.clear();
        self.window = None;
        let len = len.min(self.len);
        // The write position stays where it was, so appending after a cut would leave a
        // hole: the file is refused for appends from here on.
        self.failed = true;
        self.out.set_len(len).map_err(|e| io_err("truncating", &self.path, e))?;
        self.reserved = self.reserved.min(len);
        self.len = len;
        self.written_back = self.written_back.min(len);
        Ok(())
    }
    fn defer_writeback(&mut self) {
        self.writeback_step = u64::MAX;
    }
    fn map_appends(&mut self) {
        self.map_appends = self.out.reserved_space_is_allocated();
    }
    fn len(&self) -> u64 {
        self.len
    }
}

impl<W: Write + std::fmt::Debug + SyncData> Drop for StdWritable<W> {
    fn drop(&mut self) {
        // A healthy file hands its buffer to the OS, as a `BufWriter` would; a poisoned one
        // has discarded it (see the type's documentation).
        if !self.failed {
            let _ = self.flush_buf(true);
        }
    }
}

/// What a [`StdWritable`] needs of its file beyond `Write`: fsync and truncation (a trait,
/// so the poisoning rules can be tested on a sink that fails on demand).
pub(super) trait SyncData {
    fn sync_data(&self) -> std::io::Result<()>;
    fn set_len(&self, len: u64) -> std::io::Result<()>;
    /// Reserves space for the first `len` bytes (`fallocate` on Linux).
    fn allocate(&self, len: u64) -> std::io::Result<()>;
    /// Asks the device to start writing `len` bytes from `offset` without waiting for them
    /// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` on Linux; nothing elsewhere). Durability
    /// still comes only from `sync_data`.
    fn start_writeback(&self, _offset: u64, _len: u64) -> std::io::Result<()> {
        Ok(())
    }
    /// Maps `len` bytes of the file from `offset` (a multiple of the page size) shared and
    /// writable.
    fn map_window(&self, _offset: u64, _len: usize) -> std::io::Result<memmap2::MmapMut> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
    /// Moves the position `write(2)` writes at.
    fn seek_to(&mut self, _pos: u64) -> std::io::Result<()> {
        Ok(())
    }
    /// True if space `allocate` reserved takes writes without allocating anything more, so a
    /// copy into a mapping of it cannot run out of space: where a first write into reserved
    /// space can still need new blocks (copy-on-write file systems), running out would kill
    /// the process with `SIGBUS` where `write(2)` returns an error.
    fn reserved_space_is_allocated(&self) -> bool {
        false
    }
}

/// File systems whose `fallocate` allocates the blocks a later write lands in: ext4, XFS
/// (without shared extents, which the engine never makes) and tmpfs.
#[cfg(target_os = "linux")]
const ALLOCATING_FILE_SYSTEMS: [i64; 3] = [0xEF53, 0x5846_5342, 0x0102_1994];

impl SyncData for File {
    fn sync_data(&self) -> std::io::Result<()> {
        File::sync_data(self)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        File::set_len(self, len)
    }
    fn allocate(&self, len: u64) -> std::io::Result<()> {
        fs2::FileExt::allocate(self, len)
    }
    fn map_window(&self, offset: u64, len: usize) -> std::io::Result<memmap2::MmapMut> {
        // SAFETY: memmap2 calls mapping unsafe because the bytes change under the mapping if
        // anything else writes or truncates the file. Only this writer writes the file, and
        // it copies only into the part of the mapping inside the space it reserved, which
        // nothing truncates while the mapping lives (`truncate` drops it first).
        unsafe { memmap2::MmapOptions::new().offset(offset).len(len).map_mut(self) }
    }
    fn seek_to(&mut self, pos: u64) -> std::io::Result<()> {
        std::io::Seek::seek(self, std::io::SeekFrom::Start(pos)).map(|_| ())
    }
    #[cfg(target_os = "linux")]
    fn reserved_space_is_allocated(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
        // SAFETY: the descriptor is this open file's, borrowed for the call, which writes a
        // `statfs` into the buffer it is given; the buffer is read only if the call succeeded.
        let st = unsafe {
            if libc::fstatfs(self.as_raw_fd(), st.as_mut_ptr()) != 0 {
                return false;
            }
            st.assume_init()
        };
        ALLOCATING_FILE_SYSTEMS.contains(&(st.f_type as i64))
    }
    #[cfg(target_os = "linux")]
    fn start_writeback(&self, offset: u64, len: u64) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return Ok(());
        };
        // SAFETY: the descriptor is this open file's, borrowed for the call; the call reads
        // no memory of ours.
        let rc = unsafe {
            libc::sync_file_range(self.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, StdFs};
    use std::fs::OpenOptions;
    use std::sync::{Arc, Mutex};

    /// How a [`Sink`]'s next write goes.
    #[derive(Debug, Default, Clone, Copy, PartialEq)]
    enum Mode {
        #[default]
        Ok,
        /// Half of the next write lands, then every write fails: a disk filling mid-record.
        Short,
        Full,
    }

    /// A sink that fails the writes and fsyncs it is told to, and records what reached it.
    #[derive(Debug, Default)]
    struct Sink {
        written: Arc<Mutex<Vec<u8>>>,
        mode: Arc<Mutex<Mode>>,
        fail_sync: bool,
        /// The writeback requests, as (offset, length), with the bytes written by then.
        writebacks: Arc<Mutex<Vec<(u64, u64, usize)>>>,
    }

    fn no_space() -> std::io::Error {
        std::io::Error::other("no space left on device")
    }

    impl Write for Sink {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            let mut mode = self.mode.lock().unwrap();
            match *mode {
                Mode::Ok => {
                    self.written.lock().unwrap().extend_from_slice(data);
                    Ok(data.len())
                }
                Mode::Short => {
                    *mode = Mode::Full;
                    let n = data.len() / 2;
                    self.written.lock().unwrap().extend_from_slice(&data[..n]);
                    if n == 0 {
                        return Err(no_space());
                    }
                    Ok(n)
                }
                Mode::Full => Err(no_space()),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl SyncData for Sink {
        fn sync_data(&self) -> std::io::Result<()> {
            if self.fail_sync {
                return Err(std::io::Error::other("fsync failed"));
            }
            Ok(())
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.written.lock().unwrap().truncate(len as usize);
            Ok(())
        }
        fn allocate(&self, _len: u64) -> std::io::Result<()> {
            Ok(())
        }
        fn start_writeback(&self, offset: u64, len: u64) -> std::io::Result<()> {
            let written = self.written.lock().unwrap().len();
            self.writebacks.lock().unwrap().push((offset, len, written));
            Ok(())
        }
    }

    #[test]
    fn writeback_is_started_for_each_step_handed_to_the_os_and_not_after_a_sync() {
        let sink = Sink::default();
        let writebacks = sink.writebacks.clone();
        let mut f = StdWritable::new(PathBuf::from("t"), sink);
        let chunk = vec![7u8; 10_000];
        // 2.5 MiB in small appends: the buffer reaches the OS 64 KiB at a time.
        for _ in 0..262 {
            f.append(&chunk).unwrap();
        }
        let step = WRITEBACK_STEP;
        let got = writebacks.lock().unwrap().clone();
        assert_eq!(got.len(), 2, "{got:?}");
        let mut start = 0;
        for &(offset, len, written) in &got {
            // Contiguous, each at least a step, and never beyond what the OS was given.
            assert_eq!(offset, start);
            assert!(len >= step && len < step + WRITE_BUFFER_BYTES as u64, "{got:?}");
            assert!(offset + len <= written as u64, "{got:?}");
            start += len;
        }
        // A sync covers everything: the next request starts where the sync ended.
        f.sync().unwrap();
        let synced = f.len();
        let big = vec![1u8; step as usize + 1];
        f.append(&big).unwrap();
        let last = *writebacks.lock().unwrap().last().unwrap();
        assert_eq!((last.0, last.1), (synced, step + 1));

        let sink = Sink::default();
        let writebacks = sink.writebacks.clone();
        let mut f = StdWritable::new(PathBuf::from("wal"), sink);
        f.defer_writeback();
        f.append(&big).unwrap();
        f.append(&big).unwrap();
        f.flush().unwrap();
        assert!(writebacks.lock().unwrap().is_empty());
    }

    fn set(mode: &Arc<Mutex<Mode>>, to: Mode) {
        *mode.lock().unwrap() = to;
    }

    #[test]
    fn a_failed_write_is_never_completed_later() {
        let sink = Sink::default();
        let (written, mode) = (sink.written.clone(), sink.mode.clone());
        let mut f = StdWritable::new(PathBuf::from("wal"), sink);
        f.append(b"acknowledged").unwrap();
        f.flush().unwrap();
        f.append(b"refused record").unwrap();
        set(&mode, Mode::Short);
        assert!(f.flush().is_err());
        // The disk has room again: nothing may write the refused record's tail now.
        set(&mode, Mode::Ok);
        assert!(f.append(b"later").is_err());
        assert!(f.flush().is_err());
        assert!(f.sync().is_err());
        drop(f);
        let got = written.lock().unwrap().clone();
        assert_eq!(got, b"acknowledgedrefused", "only the short write's prefix reached the file");
    }

    #[test]
    fn a_failed_fsync_refuses_later_writes() {
        let sink = Sink { fail_sync: true, ..Sink::default() };
        let written = sink.written.clone();
        let mut f = StdWritable::new(PathBuf::from("wal"), sink);
        f.append(b"record").unwrap();
        assert!(f.sync().is_err());
        assert!(f.append(b"more").is_err());
        drop(f);
        assert_eq!(*written.lock().unwrap(), b"record");
    }

    #[test]
    fn truncate_cuts_a_refused_tail_and_refuses_appends() {
        let sink = Sink::default();
        let (written, mode) = (sink.written.clone(), sink.mode.clone());
        let mut f = StdWritable::new(PathBuf::from("wal"), sink);
        f.append(b"kept").unwrap();
        f.flush().unwrap();
        let start = f.len();
        f.append(b"refused").unwrap();
        set(&mode, Mode::Short);
        assert!(f.flush().is_err());
        f.truncate(start).unwrap();
        assert_eq!(*written.lock().unwrap(), b"kept");
        assert_eq!(f.len(), 4);
        assert!(f.append(b"x").is_err());
    }

    #[test]
    fn a_hand_over_of_a_page_or_more_is_written_not_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path);
        let mut f = StdWritable::new(path.clone(), file.unwrap());
        f.map_appends();
        let mapped = f.out.reserved_space_is_allocated();
        f.preallocate(64 << 10).unwrap();
        let large = vec![7u8; MAP_MAX_BYTES];
        f.append(&large).unwrap();
        f.flush().unwrap();
        assert!(f.window.is_none(), "a whole page is written, not mapped");
        f.append(b"small").unwrap();
        f.flush().unwrap();
        assert_eq!(f.window.is_some(), mapped, "a small hand-over is mapped");
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(&on_disk[..MAP_MAX_BYTES], &large[..]);
        assert_eq!(&on_disk[MAP_MAX_BYTES..MAP_MAX_BYTES + 5], b"small");
    }

    #[test]
    fn mapped_appends_reach_the_file_at_once_and_write_on_past_the_reserved_space() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path);
        let mut f = StdWritable::new(path.clone(), file.unwrap());
        f.map_appends();
        let mapped = f.out.reserved_space_is_allocated();
        if !mapped {
            eprintln!("the temporary directory's file system is not one appends are mapped on");
        }
        f.preallocate(8192).unwrap();
        let first: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        f.append(&first).unwrap();
        f.flush().unwrap();
        assert_eq!(f.window.is_some(), mapped, "handed over through a mapping");
        // Handed over through the mapping, unsynced, the file still open: another reader of
        // the file sees the bytes, followed by the reserved space's zeros.
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk.len(), 8192);
        assert_eq!(&on_disk[..3000], &first[..]);
        assert!(on_disk[3000..].iter().all(|&b| b == 0));
        // Past the reserved space, `write(2)` takes over where the mapped bytes ended, and a
        // large append crosses from the mapping into it.
        let second: Vec<u8> = (0..6000u32).map(|i| (i % 241) as u8).collect();
        f.append(&second).unwrap();
        f.flush().unwrap();
        let big = vec![9u8; WRITE_BUFFER_BYTES + 10];
        f.append(&big).unwrap();
        f.sync().unwrap();
        assert!(f.window.is_none(), "a sync unmaps, so its writeback finds no page mapped");
        f.truncate(f.len()).unwrap();
        drop(f);
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk.len(), 3000 + 6000 + big.len());
        assert_eq!(&on_disk[..3000], &first[..]);
        assert_eq!(&on_disk[3000..9000], &second[..]);
        assert_eq!(&on_disk[9000..], &big[..]);
    }

    #[test]
    fn copy_in_order_copies_every_alignment_and_length() {
        let src: Vec<u8> = (0..100u8).collect();
        for offset in 0..9 {
            for len in 0..40 {
                let mut dst = [0u8; 64];
                copy_in_order(&mut dst[offset..offset + len], &src[..len]);
                assert_eq!(&dst[offset..offset + len], &src[..len], "offset {offset} len {len}");
                assert!(dst[..offset].iter().chain(&dst[offset + len..]).all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn mapped_appends_cross_mapping_windows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let mut f = StdFs.create(&path).unwrap();
        f.map_appends();
        let total = MAP_WINDOW_BYTES as usize + 3000;
        f.preallocate(total as u64).unwrap();
        let data: Vec<u8> = (0..total).map(|i| (i % 253) as u8).collect();
        for chunk in data.chunks(1000) {
            f.append(chunk).unwrap();
            f.flush().unwrap();
        }
        drop(f);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }

    /// A real file whose writeback requests are recorded.
    #[derive(Debug)]
    struct Recorded {
        file: File,
        writebacks: Arc<Mutex<Vec<(u64, u64)>>>,
    }

    impl Write for Recorded {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.file.write(data)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.file.flush()
        }
    }

    impl SyncData for Recorded {
        fn sync_data(&self) -> std::io::Result<()> {
            self.file.sync_data()
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.file.set_len(len)
        }
        fn allocate(&self, len: u64) -> std::io::Result<()> {
            SyncData::allocate(&self.file, len)
        }
        fn start_writeback(&self, offset: u64, len: u64) -> std::io::Result<()> {
            self.writebacks.lock().unwrap().push((offset, len));
            Ok(())
        }
        fn map_window(&self, offset: u64, len: usize) -> std::io::Result<memmap2::MmapMut> {
            self.file.map_window(offset, len)
        }
        fn seek_to(&mut self, pos: u64) -> std::io::Result<()> {
            self.file.seek_to(pos)
        }
        fn reserved_space_is_allocated(&self) -> bool {
            self.file.reserved_space_is_allocated()
        }
    }

    /// A file that defers its writeback (the WAL) still hands each mapping window its
    /// appends have left to the device, once, and nothing else.
    #[test]
    fn mapped_appends_start_the_writeback_of_each_window_they_leave() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path);
        let writebacks = Arc::new(Mutex::new(Vec::new()));
        let out = Recorded { file: file.unwrap(), writebacks: writebacks.clone() };
        let mut f = StdWritable::new(path.clone(), out);
        f.defer_writeback();
        f.map_appends();
        let mapped = f.out.reserved_space_is_allocated();
        let window = MAP_WINDOW_BYTES as usize;
        let total = 2 * window + 3000;
        f.preallocate(total as u64).unwrap();
        let data: Vec<u8> = (0..total).map(|i| (i % 253) as u8).collect();
        for chunk in data.chunks(1000) {
            f.append(chunk).unwrap();
            f.flush().unwrap();
        }
        let got = writebacks.lock().unwrap().clone();
        if mapped {
            let w = MAP_WINDOW_BYTES;
            assert_eq!(got, [(0, w), (w, w)]);
        } else {
            eprintln!("the temporary directory's file system is not one appends are mapped on");
            assert_eq!(got, []);
        }
        drop(f);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }

    #[test]
    fn a_healthy_file_hands_its_buffer_over_when_dropped() {
        let sink = Sink::default();
        let written = sink.written.clone();
        let mut f = StdWritable::new(PathBuf::from("table"), sink);
        f.append(b"buffered").unwrap();
        drop(f);
        assert_eq!(*written.lock().unwrap(), b"buffered");
    }
}
