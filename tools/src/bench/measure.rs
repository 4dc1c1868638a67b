//! Running timed operations on one or more threads and turning engine counters into
//! per-operation figures.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use bloomkv::Stats;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::keys::KEY_BYTES;

/// Progress is reported every this many operations: often enough to look live, rarely enough
/// that the shared progress counter costs nothing measurable.
const PROGRESS_EVERY: u64 = 4096;

/// Per-thread state handed to every operation.
pub struct Worker {
    /// Index of the thread, 0-based.
    pub thread: usize,
    /// The thread's random-number generator, seeded from `--seed` and the thread index.
    ///
    /// A small non-cryptographic generator (xoshiro256++): the timed loops draw a number per
    /// operation, and a draw from `StdRng` (ChaCha12) took 7 ns on the VM these figures come
    /// from, against 3 ns here, beside an absent-key `get` of about 300 ns. The bench needs
    /// keys spread evenly and a run repeatable from its seed, not unpredictability.
    pub rng: SmallRng,
    /// Scratch buffer for the key of the current operation.
    pub key: [u8; KEY_BYTES],
    /// Operations this thread has completed (also used to vary written values).
    pub done: u64,
    /// Scratch space for the keys of one `multi_get` call.
    pub batch: Vec<[u8; KEY_BYTES]>,
}

/// The outcome of a timed phase.
pub struct Timed {
    /// Operations completed over all threads.
    pub ops: u64,
    /// Wall-clock time from the moment all threads were released to the last one finishing.
    pub elapsed: Duration,
    /// Latency of the sampled operations ([`LATENCY_SAMPLE_EVERY`]), in nanoseconds, merged
    /// over threads.
    pub hist: Histogram<u64>,
    /// CPU time the whole process used during the phase (every thread: workers, the
    /// engine's background thread, a `readwhilewriting` writer), when the platform tells.
    pub cpu_seconds: Option<f64>,
    /// What else happened to the process and the machine during the phase, where the
    /// platform tells (Linux).
    pub disturbance: Option<Disturbance>,
}

/// Events during a phase that slow it without being the engine's work: page faults the
/// process took, and time the hypervisor gave the machine's CPUs to someone else.
///
/// They tell a slow round caused by the machine from one caused by the code: on the VM
/// these figures come from, the missing-key workloads' slow rounds had none of them (see
/// "Page cache" in docs/bench.md).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Disturbance {
    /// Page faults served from memory (a page mapped, not read).
    pub minor_faults: u64,
    /// Page faults that waited for the storage device.
    pub major_faults: u64,
    /// Steal time summed over the machine's CPUs, seconds.
    pub steal_seconds: f64,
}

impl Disturbance {
    /// The counters so far: the process's faults (`/proc/self/stat`) and the machine's steal
    /// time (`/proc/stat`), or `None` where those files do not exist or do not parse.
    pub fn now() -> Option<Disturbance> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces:
        // state, ppid, pgrp, session, tty_nr, tpgid, flags, minflt, cminflt, majflt.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let minor_faults = fields.get(7)?.parse().ok()?;
        let major_faults = fields.get(9)?.parse().ok()?;
        let machine = std::fs::read_to_string("/proc/stat").ok()?;
        // "cpu user nice system idle iowait irq softirq steal ...", in USER_HZ ticks, which
        // the kernel's interface fixes at 100 a second.
        let steal: u64 = machine.lines().next()?.split_whitespace().nth(8)?.parse().ok()?;
        Some(Disturbance { minor_faults, major_faults, steal_seconds: steal as f64 / 100.0 })
    }

    /// What happened between `self` (earlier) and `later`.
    pub fn since(self, later: Disturbance) -> Disturbance {
        Disturbance {
            minor_faults: later.minor_faults.saturating_sub(self.minor_faults),
            major_faults: later.major_faults.saturating_sub(self.major_faults),
            steal_seconds: (later.steal_seconds - self.steal_seconds).max(0.0),
        }
    }
}

/// CPU time used so far by the whole process, including threads that have exited.
///
/// On a machine shared with other work, wall-clock throughput mostly measures how much of
/// the cores the benchmark got; operations per CPU-second do not depend on that.
pub fn process_cpu_seconds() -> Option<f64> {
    cpu_time::ProcessTime::try_now().ok().map(|t| t.as_duration().as_secs_f64())
}

/// A latency histogram covering 1 ns to an hour at 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// Operations timed for the latency percentiles: one in this many (every operation of a
/// phase shorter than that).
///
/// Reading the clock costs 20–30 ns on the VM these figures come from (30 ns when sampling was
/// introduced, 20–21 ns in a later microbenchmark), up to a tenth of an absent-key `get`:
/// timing every operation, even with one clock read each, took that out of every throughput
/// figure, and out of the single-key loops' more than `multi_get`'s (timed per call). A fixed
/// one-in-eight sample of a random workload estimates the same percentiles (12,500 samples in
/// 100,000 operations) and costs under 10 ns per operation.
pub const LATENCY_SAMPLE_EVERY: u64 = 8;

/// Runs `total` operations split evenly over `threads` threads (the first threads take the
/// remainder); throughput is timed over the whole run, latency on one operation in
/// [`LATENCY_SAMPLE_EVERY`].
pub fn run_timed<F>(
    threads: usize,
    total: u64,
    seed: u64,
    progress: &ProgressBar,
    op: F,
) -> bloomkv::Result<Timed>
where
    F: Fn(&mut Worker) -> bloomkv::Result<()> + Sync,
{
    run_sampled(threads, total, seed, progress, LATENCY_SAMPLE_EVERY, op)
}

/// [`run_timed`], timing the latency of one operation in `every`.
fn run_sampled<F>(
    threads: usize,
    total: u64,
    seed: u64,
    progress: &ProgressBar,
    every: u64,
    op: F,
) -> bloomkv::Result<Timed>
where
    F: Fn(&mut Worker) -> bloomkv::Result<()> + Sync,
{
    let threads = threads.max(1);
    let cpu_before = process_cpu_seconds();
    let disturbed_before = Disturbance::now();
    let barrier = Barrier::new(threads);
    let outcomes: Vec<bloomkv::Result<(Instant, Instant, Histogram<u64>)>> =
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let share =
                        total / threads as u64 + u64::from((t as u64) < total % threads as u64);
                    let (barrier, op) = (&barrier, &op);
                    s.spawn(move || {
                        let mut w = Worker {
                            thread: t,
                            rng: SmallRng::seed_from_u64(seed.wrapping_add(t as u64 * 0x9e37_79b9)),
                            key: [0; KEY_BYTES],
                            done: 0,
                            batch: Vec::new(),
                        };
                        let mut hist = new_histogram();
                        barrier.wait();
                        let every = if share < every { 1 } else { every };
                        // Operations 0, every, 2·every, ... are timed (a countdown: no
                        // division per operation).
                        let mut until_timed = 0;
                        let start = Instant::now();
                        for i in 0..share {
                            if until_timed == 0 {
                                until_timed = every;
                                let t = Instant::now();
                                op(&mut w)?;
                                hist.saturating_record(t.elapsed().as_nanos().max(1) as u64);
                            } else {
                                op(&mut w)?;
                            }
                            until_timed -= 1;
                            w.done += 1;
                            if (i + 1) % PROGRESS_EVERY == 0 {
                                progress.inc(PROGRESS_EVERY);
                            }
                        }
                        let end = Instant::now();
                        progress.inc(share % PROGRESS_EVERY);
                        Ok((start, end, hist))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("benchmark thread panicked")).collect()
        });
    // The phase spans from the first thread starting to the last one finishing. Each thread
    // reads its own clock: a coordinating thread could be descheduled on a busy machine and
    // miss the start (or end) of a short phase entirely.
    let mut first_start: Option<Instant> = None;
    let mut last_end: Option<Instant> = None;
    let mut hist = new_histogram();
    for o in outcomes {
        let (start, end, h) = o?;
        first_start = Some(first_start.map_or(start, |f| f.min(start)));
        last_end = Some(last_end.map_or(end, |l| l.max(end)));
        hist.add(h).expect("histograms share bounds");
    }
    let elapsed = match (first_start, last_end) {
        (Some(s), Some(e)) => e - s,
        _ => Duration::ZERO,
    };
    let cpu_seconds = match (cpu_before, process_cpu_seconds()) {
        (Some(b), Some(a)) => Some(a - b),
        _ => None,
    };
    let disturbance = match (disturbed_before, Disturbance::now()) {
        (Some(b), Some(a)) => Some(b.since(a)),
        _ => None,
    };
    Ok(Timed { ops: total, elapsed, hist, cpu_seconds, disturbance })
}

/// Runs at least `keys` lookups as calls of `batch` keys each, like [`run_timed`] with one
/// call per operation: the latency histogram holds whole calls (every one of them: a call is
/// long enough that its clock reads cost little), while `ops` counts keys, so throughput and
/// the per-operation counters are per key.
pub fn run_batched<F>(
    threads: usize,
    keys: u64,
    batch: u64,
    seed: u64,
    progress: &ProgressBar,
    op: F,
) -> bloomkv::Result<Timed>
where
    F: Fn(&mut Worker) -> bloomkv::Result<()> + Sync,
{
    let batch = batch.max(1);
    let calls = keys.div_ceil(batch);
    progress.set_length(calls);
    let mut t = run_sampled(threads, calls, seed, progress, 1, op)?;
    t.ops = calls * batch;
    Ok(t)
}

/// What the engine's counters moved by during one phase, divided by its operations.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PerOp {
    /// Data blocks read from disk (block-cache misses) per operation.
    pub blocks_read: f64,
    /// Data blocks found in the block cache per operation.
    pub cache_hits: f64,
    /// Data blocks searched per operation, from disk or cache (`blocks_read + cache_hits`).
    pub blocks_touched: f64,
    /// Tables whose key range covered the key, per operation (each one's filter is asked).
    pub tables_consulted: f64,
    /// Tables a filter ruled out (no index or block work) per operation.
    pub tables_skipped: f64,
    /// Filter "maybe" answers that led to a block without the key, per operation.
    pub false_positives: f64,
    /// Lookups answered by a memtable, per operation.
    pub memtable_hits: f64,
}

/// Engine counter changes over a phase.
#[derive(Debug, Clone, Default)]
pub struct Delta {
    /// Point lookups.
    pub gets: u64,
    /// Per-operation figures.
    pub per_op: PerOp,
    /// filter_false_positives / (filter_false_positives + filter_negatives), when any
    /// table was asked about an absent key.
    pub measured_fpr: Option<f64>,
    /// Compactions that completed during the phase (background work competing with it).
    pub compactions: u64,
    /// Memtable flushes during the phase.
    pub flushes: u64,
    /// Writes that waited for a flush or compaction.
    pub write_stalls: u64,
    /// Writes delayed briefly because L0 was filling up.
    pub write_slowdowns: u64,
    /// Seconds writers spent delayed or stopped by back-pressure.
    pub write_stall_seconds: f64,
    /// Bytes written to tables per byte written (or ingested) by users, over the phase.
    pub write_amplification: f64,
}

/// The change in `before` → `after`, per operation of `ops`.
pub fn delta(before: &Stats, after: &Stats, ops: u64) -> Delta {
    let d = |a: u64, b: u64| a.saturating_sub(b);
    let per = |x: u64| x as f64 / ops.max(1) as f64;
    let block_reads = d(after.block_reads, before.block_reads);
    let cache_hits = d(after.block_cache_hits, before.block_cache_hits);
    let negatives = d(after.filter_negatives, before.filter_negatives);
    let fps = d(after.filter_false_positives, before.filter_false_positives);
    // Ingested bytes count on both sides, and blob files with the tables, as in
    // `Stats::write_amplification`.
    let user = d(after.user_bytes_written, before.user_bytes_written)
        + d(after.ingested_bytes, before.ingested_bytes);
    let table_bytes = d(after.flush_bytes_written, before.flush_bytes_written)
        + d(after.compaction_bytes_written, before.compaction_bytes_written)
        + d(after.ingest_bytes_written, before.ingest_bytes_written)
        + d(after.blob_bytes_written, before.blob_bytes_written);
    Delta {
        gets: d(after.gets, before.gets),
        per_op: PerOp {
            blocks_read: per(block_reads),
            cache_hits: per(cache_hits),
            blocks_touched: per(block_reads + cache_hits),
            tables_consulted: per(d(after.tables_consulted, before.tables_consulted)),
            tables_skipped: per(negatives),
            false_positives: per(fps),
            memtable_hits: per(d(after.memtable_hits, before.memtable_hits)),
        },
        measured_fpr: (fps + negatives > 0).then(|| fps as f64 / (fps + negatives) as f64),
        compactions: d(after.compactions, before.compactions),
        flushes: d(after.flushes, before.flushes),
        write_stalls: d(after.write_stalls, before.write_stalls),
        write_slowdowns: d(after.write_slowdowns, before.write_slowdowns),
        write_stall_seconds: d(after.write_stall_micros, before.write_stall_micros) as f64 / 1e6,
        write_amplification: if user == 0 { 0.0 } else { table_bytes as f64 / user as f64 },
    }
}

/// The background work between `before` and `after`, per level written into; levels with
/// none are left out.
pub fn level_work(before: &Stats, after: &Stats) -> Vec<super::report::LevelWork> {
    let d = |a: u64, b: u64| a.saturating_sub(b);
    let none = bloomkv::LevelCompactionStats::default();
    after
        .compaction_per_level
        .iter()
        .enumerate()
        .map(|(level, a)| {
            let b = before.compaction_per_level.get(level).unwrap_or(&none);
            let above = d(a.bytes_read_from_above, b.bytes_read_from_above);
            let written = d(a.bytes_written, b.bytes_written);
            super::report::LevelWork {
                level,
                runs: d(a.runs, b.runs),
                bytes_read_from_above: above,
                bytes_read_from_level: d(a.bytes_read_from_level, b.bytes_read_from_level),
                bytes_written: written,
                tables_moved: d(a.tables_moved, b.tables_moved),
                bytes_moved: d(a.bytes_moved, b.bytes_moved),
                seconds: d(a.micros, b.micros) as f64 / 1e6,
                write_amplification: if above == 0 { 0.0 } else { written as f64 / above as f64 },
            }
        })
        .filter(|l| l.runs + l.tables_moved > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[cfg(target_os = "linux")]
    #[test]
    fn disturbance_counts_the_faults_of_touching_new_memory() {
        let before = Disturbance::now().expect("Linux has /proc/self/stat and /proc/stat");
        // Fresh anonymous memory is mapped on first write, page by page (or 2 MiB at a
        // time with transparent huge pages): writing 64 MiB takes at least one fault.
        let mut fresh = vec![0u8; 64 << 20];
        for b in fresh.iter_mut().step_by(4096) {
            *b = 1;
        }
        std::hint::black_box(&fresh);
        let d = before.since(Disturbance::now().unwrap());
        assert!(d.minor_faults >= 1, "{d:?}");
        assert!(d.steal_seconds >= 0.0, "{d:?}");
        // Asked the wrong way round, `since` gives zero rather than wrapping.
        assert_eq!(Disturbance::now().unwrap().since(before).minor_faults, 0);
    }

    #[test]
    fn one_op_in_eight_is_timed_and_every_op_runs() {
        let ran = AtomicU64::new(0);
        let op = |_: &mut Worker| {
            ran.fetch_add(1, Ordering::Relaxed);
            Ok(())
        };
        let pb = ProgressBar::hidden();
        let t = run_timed(1, 100, 1, &pb, op).unwrap();
        assert_eq!((t.ops, ran.load(Ordering::Relaxed)), (100, 100));
        assert_eq!(t.hist.len(), 100u64.div_ceil(LATENCY_SAMPLE_EVERY));
        // Two threads each sample their own share; a share shorter than the period is
        // timed in full, so a short phase still has percentiles.
        let t = run_timed(2, 34, 1, &pb, op).unwrap();
        assert_eq!(t.hist.len(), 2 * 17u64.div_ceil(LATENCY_SAMPLE_EVERY));
        assert_eq!(run_timed(1, 5, 1, &pb, op).unwrap().hist.len(), 5);
        // `multi_get` calls are timed every one.
        let t = run_batched(1, 320, 32, 1, &pb, op).unwrap();
        assert_eq!((t.ops, t.hist.len()), (320, 10));
        assert_eq!(ran.load(Ordering::Relaxed), 100 + 34 + 5 + 10);
    }
}
