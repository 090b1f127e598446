//! Retention: delete whole entries below an offset.
//!
//! A deleted entry's frames are replaced by one tombstone frame at its first
//! LSN that records how many LSNs it stands for, merged with an adjacent
//! earlier tombstone. The LSN space therefore stays gap-free, and verify can
//! still prove that no frame went missing.
//!
//! # Invariants
//! - Only entries whose *last* offset is below the cut are deleted; a
//!   partially covered entry is kept whole.
//! - The durable next offset never moves backwards.

use crate::engine::{store_err, Engine};
use crate::error::{CorruptionKind, Error, Location, Result};
use crate::frame::{self, FrameKind};
use crate::index::IndexEntry;
use crate::keys;
use crate::record::TopicPartition;
use crate::recovery::index_corruption;

/// What `truncate_before` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TruncateReport {
    pub entries_deleted: u64,
    pub frames_deleted: u64,
    pub records_deleted: u64,
    pub payload_bytes_deleted: u64,
}

/// Entries deleted per durable step of [`Engine::truncate_before`]. Each
/// step is one atomic sled batch under the write lock, so appends wait for
/// at most one step, and a truncation of millions of entries needs memory
/// for this many, not for all of them.
pub const TRUNCATE_ENTRIES_PER_STEP: usize = 1024;

impl Engine {
    /// Delete every entry of `tp` that lies entirely below `offset`, durably.
    ///
    /// Works in steps of [`TRUNCATE_ENTRIES_PER_STEP`] entries. Each step is
    /// atomic and leaves a consistent archive (summary, index and tombstones
    /// agree), so a crash part-way keeps a prefix of the deletion: a rerun
    /// finishes it.
    pub fn truncate_before(&self, tp: &TopicPartition, offset: i64) -> Result<TruncateReport> {
        crate::record::validate_tp(tp)?;
        let mut report = TruncateReport::default();
        loop {
            let step = self.truncate_step(tp, offset, TRUNCATE_ENTRIES_PER_STEP)?;
            report.entries_deleted += step.entries_deleted;
            report.frames_deleted += step.frames_deleted;
            report.records_deleted += step.records_deleted;
            report.payload_bytes_deleted += step.payload_bytes_deleted;
            if step.entries_deleted < TRUNCATE_ENTRIES_PER_STEP as u64 {
                break;
            }
            crate::crashpoint::reached(crate::crashpoint::TRUNCATE_BETWEEN_STEPS);
        }
        if report.entries_deleted > 0 {
            tracing::debug!(%tp, offset, ?report, "retention truncated");
        }
        Ok(report)
    }

    /// What `truncate_before(tp, offset)` would delete now, without
    /// deleting anything.
    pub fn truncate_plan(&self, tp: &TopicPartition, offset: i64) -> Result<TruncateReport> {
        crate::record::validate_tp(tp)?;
        let _w = self.lock_write()?;
        let mut report = TruncateReport::default();
        for item in self.tree.scan_prefix(keys::index_prefix(tp)) {
            let (k, v) = item.map_err(store_err("scan index"))?;
            let (_, e) = IndexEntry::decode(&k, &v).map_err(|kind| index_corruption(&k, kind))?;
            if e.last_offset >= offset {
                break;
            }
            report.entries_deleted += 1;
            report.frames_deleted += e.chunks as u64;
            report.records_deleted += e.record_count as u64;
            report.payload_bytes_deleted += e.payload_bytes;
        }
        Ok(report)
    }

    /// One durable step: delete up to `entries_max` of the lowest entries
    /// below `offset`.
    fn truncate_step(
        &self,
        tp: &TopicPartition,
        offset: i64,
        entries_max: usize,
    ) -> Result<TruncateReport> {
        let mut report = TruncateReport::default();
        let seq = {
            let mut w = self.lock_write()?;
            let Some(mut summary) = w.partitions.get(tp).copied() else {
                return Ok(report);
            };
            let mut batch = sled::Batch::default();
            let mut pending_tomb: Option<(u64, u64)> = None;
            let mut new_first = None;
            for item in self.tree.scan_prefix(keys::index_prefix(tp)) {
                let (k, v) = item.map_err(store_err("scan index"))?;
                let (_, e) =
                    IndexEntry::decode(&k, &v).map_err(|kind| index_corruption(&k, kind))?;
                // The first entry kept by this step, whether the cut or the
                // step's size stopped it, is the partition's new first.
                if e.last_offset >= offset || report.entries_deleted == entries_max as u64 {
                    new_first = Some(e.first_offset);
                    break;
                }
                batch.remove(k.to_vec());
                for lsn in e.lsn..e.lsn + e.chunks as u64 {
                    batch.remove(&keys::wal_key(lsn));
                }
                let (tomb_lsn, mut span) = match pending_tomb {
                    Some((l, s)) if l + s == e.lsn => (l, s + e.chunks as u64),
                    Some(_) | None => match self.tombstone_before(e.lsn)? {
                        Some((l, s)) if l + s == e.lsn => (l, s + e.chunks as u64),
                        _ => (e.lsn, e.chunks as u64),
                    },
                };
                // Absorb a tombstone right above as well (another
                // partition's entries, deleted earlier). Merging both ways
                // leaves one tombstone per deleted run of the log, so the
                // leaves sled kept for the run empty out and their old
                // versions, which still hold the deleted frames' bytes,
                // can be reclaimed (docs/OPERATIONS.md, disk space).
                while let Some(above) = self.tombstone_at(tomb_lsn + span)? {
                    batch.remove(&keys::wal_key(tomb_lsn + span));
                    span += above;
                }
                let body = frame::encode_tombstone(span);
                batch.insert(
                    &keys::wal_key(tomb_lsn),
                    frame::encode(tomb_lsn, FrameKind::Tombstone, 0, &body),
                );
                pending_tomb = Some((tomb_lsn, span));
                report.entries_deleted += 1;
                report.frames_deleted += e.chunks as u64;
                report.records_deleted += e.record_count as u64;
                report.payload_bytes_deleted += e.payload_bytes;
            }
            if report.entries_deleted == 0 {
                return Ok(report);
            }
            summary.first_offset = new_first.unwrap_or(summary.next_offset);
            summary.record_count -= report.records_deleted;
            summary.payload_bytes -= report.payload_bytes_deleted;
            summary.next_offset_floor = summary.next_offset;
            let (k, v) = summary.encode(tp);
            batch.insert(k, v);
            let seq = self.apply_and_sync(&mut w, batch)?;
            w.partitions.insert(tp.clone(), summary);
            seq
        };
        self.wait_seq(seq)?;
        Ok(report)
    }

    /// The span of the tombstone frame stored at `lsn`, if that is one.
    fn tombstone_at(&self, lsn: u64) -> Result<Option<u64>> {
        let Some(v) = self
            .tree
            .get(keys::wal_key(lsn))
            .map_err(store_err("read frame"))?
        else {
            return Ok(None);
        };
        // A reserved slot (slots.rs) lies above the last frame.
        if crate::slots::is_slot(&v) {
            return Ok(None);
        }
        let f = frame::decode(lsn, &v)
            .map_err(|kind| Error::corruption(Location::Wal { lsn }, kind))?;
        if f.kind != FrameKind::Tombstone {
            return Ok(None);
        }
        let span = f
            .span()
            .map_err(|kind: CorruptionKind| Error::corruption(Location::Wal { lsn }, kind))?;
        Ok(Some(span))
    }

    /// The tombstone frame immediately below `lsn`, as (lsn, span).
    fn tombstone_before(&self, lsn: u64) -> Result<Option<(u64, u64)>> {
        let Some((k, v)) = self
            .tree
            .get_lt(keys::wal_key(lsn))
            .map_err(store_err("read frame"))?
        else {
            return Ok(None);
        };
        let Ok(l) = keys::parse_wal_key(&k) else {
            return Ok(None);
        };
        let f = frame::decode(l, &v)
            .map_err(|kind| Error::corruption(Location::Wal { lsn: l }, kind))?;
        if f.kind != FrameKind::Tombstone {
            return Ok(None);
        }
        let span = f
            .span()
            .map_err(|kind: CorruptionKind| Error::corruption(Location::Wal { lsn: l }, kind))?;
        Ok(Some((l, span)))
    }
}
