//! `Db::stats`: the engine's counters and its trees' shape gathered into one [`Stats`].

use std::sync::atomic::Ordering;

use super::DbInner;
use crate::stats::{KeyspaceStats, RangeFilterLevelStats, Stats};
use crate::sync::lock;
use crate::version::set::NUM_LEVELS;

/// The [`Stats`] of a database now: `Db::stats`.
pub(crate) fn collect(inner: &DbInner) -> Stats {
    let c = &inner.counters;
    let state = inner.load_state();
    let per_keyspace = lock(&c.keyspaces).clone();
    let keyspaces: Vec<KeyspaceStats> = state
        .trees
        .iter()
        .map(|tree| {
            let v = &tree.version;
            let k = per_keyspace.get(&tree.id).copied().unwrap_or_default();
            let mut ks = KeyspaceStats {
                name: tree.name.to_string(),
                tables_per_level: v.levels.iter().map(Vec::len).collect(),
                bytes_per_level: (0..NUM_LEVELS).map(|l| v.level_bytes(l)).collect(),
                memtable_bytes: tree.mems().map(|m| m.table.approximate_bytes() as u64).sum(),
                memtable_history_bytes: (tree.history.iter())
                    .map(|m| m.table.approximate_bytes() as u64)
                    .sum(),
                flushes: k.flushes,
                flush_bytes_written: k.flush_bytes_written,
                compactions: k.compactions,
                compaction_bytes_read: k.compaction_bytes_read,
                compaction_bytes_written: k.compaction_bytes_written,
                compaction_filter_removed: k.compaction_filter_removed,
                compaction_filter_changed: k.compaction_filter_changed,
                compaction_filter_failed: k.compaction_filter_failed,
                compaction_expired_dropped: k.compaction_expired_dropped,
                fifo_tables_dropped: k.fifo_tables_dropped,
                ..KeyspaceStats::default()
            };
            for (_, t) in v.all_tables() {
                ks.filter_memory_bytes += t.table.filter_memory_bytes() as u64;
                ks.index_memory_bytes += t.table.index_memory_bytes() as u64;
            }
            ks
        })
        .collect();
    let range_levels: Vec<RangeFilterLevelStats> = (0..NUM_LEVELS)
        .map(|l| RangeFilterLevelStats {
            probes: c.range_filter_probes[l].get(),
            skips: c.range_filter_skips[l].get(),
            false_positives: c.range_filter_false_positives[l]
                .load(std::sync::atomic::Ordering::Relaxed),
        })
        .collect();
    let mut s = Stats {
        gets: c.gets.get(),
        memtable_hits: c.memtable_hits.get(),
        filter_negatives: c.filter_negatives.get(),
        filter_false_positives: c.filter_false_positives.get(),
        range_filter_point_negatives: c.range_filter_point_negatives.get(),
        tables_consulted: c.tables_consulted.get(),
        block_reads: c.block_reads.get(),
        block_cache_hits: c.block_cache_hits.get(),
        scans: c.scans.get(),
        prefix_filter_checks: c.prefix_filter_checks.get(),
        prefix_filter_skips: c.prefix_filter_skips.get(),
        memtable_prefix_skips: c.memtable_prefix_skips.get(),
        range_filter_probes: range_levels.iter().map(|l| l.probes).sum(),
        range_filter_skips: range_levels.iter().map(|l| l.skips).sum(),
        range_filter_false_positives: range_levels.iter().map(|l| l.false_positives).sum(),
        range_filter_per_level: range_levels,
        tables_per_level: vec![0; NUM_LEVELS],
        bytes_per_level: vec![0; NUM_LEVELS],
        user_bytes_written: c.user_bytes_written.get(),
        wal_bytes_written: c.wal_bytes_written.get(),
        flushes: c.flushes.get(),
        flush_bytes_written: c.flush_bytes_written.get(),
        compactions: c.compactions.get(),
        compaction_bytes_read: c.compaction_bytes_read.get(),
        compaction_bytes_written: c.compaction_bytes_written.get(),
        compaction_parts: c.compaction_parts.get(),
        compaction_filter_removed: c.compaction_filter_removed.get(),
        compaction_filter_changed: c.compaction_filter_changed.get(),
        compaction_filter_failed: c.compaction_filter_failed.get(),
        compaction_expired_dropped: c.compaction_expired_dropped.get(),
        write_stalls: c.write_stalls.get(),
        write_slowdowns: c.write_slowdowns.get(),
        write_stall_micros: c.write_stall_micros.get(),
        ingests: c.ingests.get(),
        ingested_bytes: c.ingested_bytes.get(),
        ingest_bytes_written: c.ingest_bytes_written.get(),
        blob_bytes_written: c.blob_bytes_written.get(),
        last_sequence: inner.visible_seq.load(Ordering::Acquire),
        open_table_files: inner.caches.files.open_files() as u64,
        open_table_files_limit: inner.caches.files.capacity() as u64,
        table_file_reopens: inner.caches.files.reopened(),
        filter_chunk_bytes: bloomkv_tree::filter_memory::held_bytes(),
        pinned_value_bytes: crate::value::pinned_bytes(),
        compaction_per_level: lock(&c.levels).to_vec(),
        ..Stats::default()
    };
    for ks in &keyspaces {
        for level in 0..NUM_LEVELS {
            s.tables_per_level[level] += ks.tables_per_level[level];
            s.bytes_per_level[level] += ks.bytes_per_level[level];
        }
        s.memtable_bytes += ks.memtable_bytes;
        s.memtable_history_bytes += ks.memtable_history_bytes;
        s.filter_memory_bytes += ks.filter_memory_bytes;
        s.index_memory_bytes += ks.index_memory_bytes;
    }
    for (_, t) in state.trees.iter().flat_map(|tree| tree.version.all_tables()) {
        let mapped = t.table.mapped_bytes();
        s.mapped_table_files += u64::from(mapped > 0);
        s.mapped_table_bytes += mapped;
    }
    // The keyspaces' memtables line up, so the default keyspace's name every segment.
    let wal_numbers: Vec<u64> = state.default_tree().mems().map(|m| m.wal_number).collect();
    s.wal_bytes = wal_numbers
        .iter()
        .filter_map(|&n| inner.fs.open(&crate::filename::wal_path(&inner.dir, n)).ok())
        .map(|f| f.size())
        .sum();
    // A kept WAL segment can hold several keyspaces' values: its live values are summed
    // over them, and it is listed once, under the first.
    let mut blobs = std::collections::BTreeMap::new();
    for tree in &state.trees {
        let live = tree.version.blob_live_bytes();
        for (number, b) in tree.version.blobs.0.iter() {
            let (values, bytes) = live.get(number).copied().unwrap_or_default();
            let f = blobs.entry(*number).or_insert_with(|| crate::stats::BlobFileStats {
                number: *number,
                keyspace: tree.name.to_string(),
                values: b.meta.values,
                value_bytes: b.meta.value_bytes,
                live_values: 0,
                live_bytes: 0,
                garbage_bytes: 0,
                file_size: b.meta.file_size,
                wal_segment: b.meta.kind == crate::blob::BlobFileKind::WalSegment,
            });
            f.live_values += values;
            f.live_bytes += bytes;
        }
    }
    for mut f in blobs.into_values() {
        f.garbage_bytes = f.value_bytes.saturating_sub(f.live_bytes);
        s.blob_live_bytes += f.live_bytes;
        s.blob_garbage_bytes += f.garbage_bytes;
        s.blob_file_bytes += f.file_size;
        s.blob_files.push(f);
    }
    s.keyspaces = keyspaces;
    s
}
