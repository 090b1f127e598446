//! Recovery on open: O(tail), not O(archive).
//!
//! 1. Check the store format; refuse an unknown version. Under `Strict`,
//!    then verify the whole store (O(archive)) before anything else.
//! 2. Load the checkpoint LSN and the partition summaries.
//! 3. Verify every frame after the checkpoint (CRC, LSN continuity, chunk
//!    sequence, body, and each entry's offsets starting above the entry
//!    before it in its partition), and confirm or rebuild its index entry
//!    and summary. Reserved slots (slots.rs) end the log; a frame above one
//!    is `FrameAfterSlot` corruption, and any other key of the log's key
//!    space above the checkpoint is read, so that none is passed over.
//! 4. A torn last entry (its final frame truncated, or its chunk sequence cut
//!    off at the end of the log) is truncated under `TolerateTail` and
//!    refused under `Strict`, unless an index entry points into it (an
//!    append indexes an entry only after all its frames, so an indexed
//!    entry is damaged, not torn). Anything else is `Corruption` with its
//!    LSN.
//! 5. Move the checkpoint to the end of the log and sync.
//!
//! # Invariants
//! - Frames at or below the checkpoint were made durable by a completed
//!   fsync (or verified by an earlier recovery), so they are not re-read.
//! - The checkpoint never sits inside a multi-frame entry: it is on a
//!   frame boundary, or within a tombstone's span (retention merges
//!   tombstones without moving it, so it often ends inside a merged span;
//!   FORMAT.md, the checkpoint).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::body::decode_entry;
use crate::config::{EngineConfig, RecoveryMode};
use crate::engine::{store_err, WriteState};
use crate::entry::{Assembler, Fed};
use crate::error::{CorruptionKind, Error, Location, Result};
use crate::frame::{self, FrameKind, FLAG_MORE};
use crate::index::IndexEntry;
use crate::keys;
use crate::meta::{self, StoreId};
use crate::offsets::PartitionSummary;
use crate::record::TopicPartition;
use crate::slots;
use crate::sync::DurableSync;
use crate::watermark;

/// What recovery found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// True when the store was created by this open.
    pub created: bool,
    /// The checkpoint recovery started from.
    pub checkpoint_lsn: u64,
    /// The store's identity (chosen by this open if the store was created
    /// or upgraded from a format without one).
    pub store_id: StoreId,
    pub frames_checked: u64,
    pub entries_checked: u64,
    pub records_checked: u64,
    /// The torn tail that was removed, if any.
    pub truncated: Option<TruncatedTail>,
    /// Index entries rewritten from the log: missing ones (a crash between
    /// an entry's frames and its index entry) and damaged ones.
    pub index_entries_repaired: u64,
    /// Of those, the ones that were there but did not match the log: no
    /// crash leaves one (sled values are written whole), so this is damage,
    /// repaired from the checksummed frames and reported.
    pub index_entries_damaged: u64,
    pub partitions_repaired: u64,
    /// Index entries read to bring partition summaries up to date: those
    /// written since each summary, not the partition's whole index.
    pub summary_index_entries_read: u64,
    pub next_lsn: u64,
    pub duration: Duration,
    /// An earlier engine was poisoned (a failed write or fsync) and left
    /// its mark: what it recorded, and whether this open dropped the
    /// store's cached pages first (poisoned.rs).
    pub poisoned_before: Option<crate::poisoned::PoisonedBefore>,
    /// An engine that had the store open in this boot stopped without a
    /// close (a crash, a kill) and left its open mark: this open synced
    /// the store's files and dropped their cached pages first
    /// (poisoned.rs).
    pub unclean_stop_cache_dropped: bool,
    /// The damaged headers of sled's log segments, read as sled opened,
    /// before anything was written; only an open to read gets this far
    /// with any ([`EngineConfig::open_to_read`]), and its engine refuses
    /// writes of records, summaries and topic ids.
    pub damaged_segment_headers: Vec<crate::segments::DamagedHeader>,
}

/// A torn last entry removed by recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncatedTail {
    pub first_lsn: u64,
    pub frames: u64,
    pub reason: CorruptionKind,
}

fn corrupt(lsn: u64, kind: CorruptionKind) -> Error {
    Error::corruption(Location::Wal { lsn }, kind)
}

fn meta_err((location, kind): (Location, CorruptionKind)) -> Error {
    Error::corruption(location, kind)
}

/// Failpoint: recovery wrote its index repairs and truncation, not yet the
/// recomputed summaries or its sync. `return` fails the open there, as a
/// crash in the middle of recovery would.
#[doc(hidden)]
pub const FAILPOINT_RECOVERY_MID_REPAIR: &str = "wal::recovery::mid_repair";

pub(crate) fn recover(
    cfg: &EngineConfig,
    db: &sled::Db,
    tree: &sled::Tree,
    syncer: &mut DurableSync,
    durable_mark: Option<u64>,
) -> Result<(WriteState, RecoveryReport)> {
    let t0 = Instant::now();
    if tree.is_empty() {
        // An empty tree under a watermark is a store sled lost entirely.
        watermark::check(0, durable_mark)?;
    }
    let (created, found_format) = check_format(cfg, db, tree, syncer)?;
    let upgrade = found_format < meta::FORMAT_VERSION;
    let (store_id, new_store_id) = match tree
        .get(keys::META_STORE)
        .map_err(store_err("read store id"))?
    {
        Some(v) => (meta::decode_store_id(&v).map_err(meta_err)?, false),
        // Written with the format upgrade, in recovery's last batch.
        None if found_format < meta::FORMAT_STORE_ID => (StoreId::random(), true),
        None => {
            return Err(Error::corruption(
                Location::Meta { key: "store" },
                CorruptionKind::BadMeta {
                    detail: "store id missing from a store of format 3 or later".into(),
                },
            ))
        }
    };
    if cfg.recovery_mode == RecoveryMode::Strict {
        // Strict mode trades O(tail) for a full check: any damage anywhere
        // refuses the open, located by its first problem.
        let v = crate::verify::verify_tree(tree, None, &std::sync::atomic::AtomicBool::new(false))?;
        if let Some(p) = v.problems.into_iter().next() {
            return Err(Error::corruption(p.location, p.kind));
        }
    }
    let checkpoint = match tree
        .get(keys::META_CHECKPOINT)
        .map_err(store_err("read checkpoint"))?
    {
        Some(v) => meta::decode_checkpoint(&v).map_err(meta_err)?,
        None => {
            return Err(Error::corruption(
                Location::Meta { key: "checkpoint" },
                CorruptionKind::BadMeta {
                    detail: "checkpoint missing".into(),
                },
            ))
        }
    };
    let mut partitions = load_summaries(tree)?;
    let mut report = RecoveryReport {
        created,
        checkpoint_lsn: checkpoint,
        store_id,
        frames_checked: 0,
        entries_checked: 0,
        records_checked: 0,
        truncated: None,
        index_entries_repaired: 0,
        index_entries_damaged: 0,
        partitions_repaired: 0,
        summary_index_entries_read: 0,
        next_lsn: 0,
        duration: Duration::ZERO,
        poisoned_before: None,
        unclean_stop_cache_dropped: false,
        damaged_segment_headers: Vec::new(),
    };
    let mut repairs = sled::Batch::default();
    let mut rebuilt: Rebuilt = BTreeMap::new();
    let mut dirty: BTreeSet<TopicPartition> = BTreeSet::new();
    // The torn entry's first frame (where a truncation starts), the frame
    // that is torn (what an error names), and why.
    let mut torn: Option<(u64, u64, CorruptionKind)> = None;

    refuse_keys_below_the_log(tree)?;
    let mut expected = expected_after_checkpoint(tree, checkpoint)?;
    let mut asm = Assembler::default();
    // Each partition's last offset in the tail so far (check_offset_order).
    let mut tail_last: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    let mut iter = tree
        // To the end of the log's key space, not its largest LSN: a longer
        // key sorting past that is named (BadKey), not passed over.
        .range(keys::wal_key(checkpoint.saturating_add(1)).to_vec()..vec![keys::PREFIX_WAL + 1])
        .peekable();
    // The first reserved slot (slots.rs) seen, and the end of the slots.
    let mut first_slot: Option<u64> = None;
    let mut slots_end = 0;
    while let Some(item) = iter.next() {
        let (k, v) = item.map_err(store_err("scan log tail"))?;
        let lsn = keys::parse_wal_key(&k)
            .map_err(|kind| Error::corruption(Location::Key { key_hex: hex(&k) }, kind))?;
        if slots::is_slot(&v) {
            // A format-1 store has no slots (format 2 brought them, and an
            // upgrade is durable before any is written): an empty value is
            // a frame emptied, which must not pass for the log's end and
            // truncate the entry below it as torn (found in review,
            // 2026-12-06).
            if found_format < meta::FORMAT_SLOTS {
                return Err(corrupt(lsn, empty_value_without_slots(found_format)));
            }
            // Below the next LSN, inside a tombstone's span: refused now.
            // Passed over until 2026-12-06 when no frame followed, and the
            // checkpoint then written above it refused every later open
            // (found in review).
            if lsn < expected && first_slot.is_none() {
                return Err(corrupt(lsn, slot_inside_the_log(expected)));
            }
            // The reserve is the run of slots starting right above the log;
            // a stray slot further up (damage) must not stop future
            // reservations, nor be taken for the reserve's end when the
            // log has none (its first slot is then above `expected`).
            if lsn == slots_end.max(expected) {
                slots_end = lsn.saturating_add(1);
            }
            first_slot.get_or_insert(lsn);
            continue;
        }
        if let Some(slot_lsn) = first_slot {
            return Err(corrupt(lsn, CorruptionKind::FrameAfterSlot { slot_lsn }));
        }
        if lsn != expected {
            return Err(corrupt(
                lsn,
                CorruptionKind::LsnGap {
                    expected,
                    found: lsn,
                },
            ));
        }
        report.frames_checked += 1;
        // Last frame: nothing after it but slots, if anything.
        let is_last = match iter.peek() {
            None => true,
            Some(Ok((_, next))) => slots::is_slot(next),
            // A failed read of what follows is that error, not damage to
            // this frame.
            Some(Err(_)) => match iter.next() {
                Some(Err(e)) => return Err(store_err("scan log tail")(e)),
                _ => false,
            },
        };
        let f = match frame::decode(lsn, &v) {
            Ok(f) => f,
            // A frame cut short at the log's end is truncated as torn only
            // if it is a records frame, the one kind an unfinished append
            // leaves (sled writes values whole, so no crash cuts one: this
            // is the format's allowance, not a crash's). A tombstone is
            // written in one batch and fsynced before it is reported, so
            // one cut short is damage (its kind is known once the bytes
            // reach the kind byte after the magic; fewer than those six
            // cannot be told apart).
            Err(kind @ CorruptionKind::Truncated { .. })
                if is_last && frame::header_kind(&v) == Some(FrameKind::Tombstone) =>
            {
                return Err(corrupt(lsn, kind));
            }
            Err(CorruptionKind::Truncated { .. })
                if is_last
                    && frame::header_cont(&v)
                        .is_some_and(|cont| cont != asm.in_progress().is_some()) =>
            {
                // Its chunk flags do not follow the frame before it (a
                // continuation with no entry begun, or a new entry inside
                // one): damage, which the same frame whole is refused as,
                // not an append cut short (until 2026-12-06 it was
                // truncated as torn; found in review).
                return Err(corrupt(
                    lsn,
                    CorruptionKind::BadChunkSequence {
                        detail: if asm.in_progress().is_some() {
                            "a frame cut short at the log's end starts a new entry before the previous one ended".into()
                        } else {
                            "a frame cut short at the log's end is a continuation chunk without a first chunk".into()
                        },
                    },
                ));
            }
            Err(kind @ CorruptionKind::Truncated { .. }) if is_last => {
                // Keep scanning: only slots may follow a torn last frame. A
                // frame above them means the "slot" after this one is a hole
                // and this frame was damaged, not torn (FrameAfterSlot).
                torn = Some((asm.in_progress().unwrap_or(lsn), lsn, kind));
                continue;
            }
            Err(kind) => return Err(corrupt(lsn, kind)),
        };
        match f.kind {
            FrameKind::Tombstone => {
                if asm.in_progress().is_some() {
                    return Err(corrupt(
                        lsn,
                        CorruptionKind::BadChunkSequence {
                            detail: "tombstone inside an entry".into(),
                        },
                    ));
                }
                expected = f.lsn_after(lsn).map_err(|k| corrupt(lsn, k))?;
            }
            FrameKind::Records => {
                // A chunk at the largest LSN is refused as a span past it
                // is: its index entry could not be decoded, nor a checkpoint
                // on it (before 2026-12-03 one was taken in).
                expected = f.lsn_after(lsn).map_err(|k| corrupt(lsn, k))?;
                if let Fed::Complete {
                    first_lsn,
                    chunks,
                    body,
                } = asm.feed(lsn, &f).map_err(|k| corrupt(lsn, k))?
                {
                    let entry = decode_entry(&body).map_err(|k| corrupt(first_lsn, k))?;
                    report.entries_checked += 1;
                    report.records_checked += entry.records.len() as u64;
                    let described = IndexEntry::describe(first_lsn, chunks, &entry.records);
                    check_offset_order(
                        tree,
                        &entry.tp,
                        &described,
                        partitions.get(&entry.tp),
                        &mut tail_last,
                    )?;
                    confirm_index(
                        tree,
                        &entry.tp,
                        &described,
                        &mut repairs,
                        &mut rebuilt,
                        &mut report,
                    )?;
                    let next = described.last_offset + 1;
                    match partitions.get(&entry.tp) {
                        Some(s) if s.next_offset >= next => {}
                        _ => {
                            dirty.insert(entry.tp.clone());
                        }
                    }
                }
            }
        }
    }
    if torn.is_none() {
        if let Some(first_lsn) = asm.in_progress() {
            torn = Some((
                first_lsn,
                first_lsn,
                CorruptionKind::BadChunkSequence {
                    detail: "last entry ends without its final chunk".into(),
                },
            ));
        }
    }
    let mut next_lsn = expected;
    let mut torn_at = 0;
    if let Some((first_lsn, at, reason)) = torn {
        if cfg.recovery_mode == RecoveryMode::Strict {
            return Err(corrupt(at, reason));
        }
        // The log as found (the torn frame too: `expected` stops below it)
        // ending below the watermark lost records reported durable: frames
        // missing at the end, a lost suffix. When it reaches the watermark
        // but the entry it would truncate does not end below it, that entry
        // was reported durable, and its last frame is cut: damage, named at
        // that frame as a strict open and verify name it, not a lost suffix
        // at the entry's start (before 2026-12-03).
        watermark::check(expected.max(at + 1) - 1, durable_mark)?;
        if durable_mark.is_some_and(|d| d >= first_lsn) {
            return Err(corrupt(at, reason));
        }
        torn_at = at;
        let frames = truncate_tail(tree, first_lsn, &mut repairs)?;
        tracing::warn!(first_lsn, frames, %reason, "truncated a torn tail entry");
        report.truncated = Some(TruncatedTail {
            first_lsn,
            frames,
            reason,
        });
        next_lsn = first_lsn;
        // truncate_tail removed the slots above the torn entry too.
        slots_end = 0;
    }
    // Before any repair is written: a log that ends below the watermark
    // lost records that were reported durable (a "torn tail" the watermark
    // covers was refused above, as the damage it is).
    watermark::check(next_lsn - 1, durable_mark)?;
    if let Some(t) = &report.truncated {
        refuse_indexed_tail(tree, &rebuilt, t.first_lsn, torn_at, &t.reason)?;
    }
    // The refusals of the tail and of the summaries against the index
    // come before any repair is written: such a refused open leaves the
    // store as it found it, damage and all, for `verify` and salvage
    // (since 2026-12-02; before, the truncation and rebuilt index entries
    // were written first, and sled's drop kept them). It reads the index as
    // the repairs will leave it: the stored one, with the rebuilt entries
    // over it. (A damaged older index entry met while a summary is
    // recomputed below is still refused after the repairs are written.)
    check_indexed_partitions(tree, checkpoint, next_lsn, &partitions, &dirty, &rebuilt)?;
    // Apply index repairs before recomputing summaries from the index.
    let truncated = report.truncated.is_some();
    // Every repair either rebuilt an index entry or belongs to a truncation;
    // a clean tail (the usual open) writes nothing here.
    if truncated || report.index_entries_repaired > 0 {
        tree.apply_batch(repairs)
            .map_err(store_err("write recovery repairs"))?;
    }
    fail::fail_point!(FAILPOINT_RECOVERY_MID_REPAIR, |a| {
        crate::engine::failpoint_action(FAILPOINT_RECOVERY_MID_REPAIR, a)
    });
    // The recomputed summaries and, last, the checkpoint. The checkpoint
    // tells the next open it need not look at the log before it, so it must
    // never be durable ahead of the repairs it vouches for: a crash in the
    // middle of this recovery then simply means the next one redoes it.
    let mut batch = sled::Batch::default();
    for tp in &dirty {
        let old = partitions.get(tp).copied();
        let s = recompute_summary(tree, tp, old, &mut report.summary_index_entries_read)?;
        let (k, v) = s.encode(tp);
        batch.insert(k, v);
        partitions.insert(tp.clone(), s);
        report.partitions_repaired += 1;
    }
    if upgrade {
        // An older format is upgraded only by an open that succeeds, and
        // durably before anything of the newer layout (a slot) is written:
        // an older build then refuses the store instead of misreading it.
        batch.insert(keys::META_FORMAT, meta::encode_format(meta::FORMAT_VERSION));
    }
    if new_store_id {
        batch.insert(keys::META_STORE, meta::encode_store_id(store_id));
    }
    batch.insert(keys::META_CHECKPOINT, meta::encode_checkpoint(next_lsn - 1));
    tree.apply_batch(batch)
        .map_err(store_err("write summaries and checkpoint"))?;
    syncer.sync(db, next_lsn - 1).map_err(|e| Error::Io {
        op: "sync after recovery",
        path: cfg.sled_path(),
        source: e,
    })?;
    if upgrade {
        tracing::info!(
            from = found_format,
            to = meta::FORMAT_VERSION,
            "upgraded store format"
        );
    }
    report.next_lsn = next_lsn;
    report.duration = t0.elapsed();
    let state = WriteState {
        next_lsn,
        seq: 0,
        partitions: crate::summaries::Summaries::recovered(partitions),
        bytes_since_checkpoint: 0,
        checkpoint_lsn: next_lsn - 1,
        slots_end: slots_end.max(next_lsn),
    };
    Ok((state, report))
}

/// Returns whether the store was created now, and the format it was in.
fn check_format(
    cfg: &EngineConfig,
    db: &sled::Db,
    tree: &sled::Tree,
    syncer: &mut DurableSync,
) -> Result<(bool, u32)> {
    match tree
        .get(keys::META_FORMAT)
        .map_err(store_err("read format"))?
    {
        Some(v) => {
            let found = meta::decode_format(&v).map_err(meta_err)?;
            // Below the oldest format no build ever wrote: sealed bytes
            // that say so are damage, as verify reports them, not a store
            // another build reads (until 2026-12-05 it was
            // `UnsupportedFormat`, which sent the operator looking for one).
            if found < meta::FORMAT_VERSION_OLDEST {
                return Err(Error::corruption(
                    Location::Meta { key: "format" },
                    CorruptionKind::BadMeta {
                        detail: meta::format_below_oldest(found),
                    },
                ));
            }
            if !meta::is_readable(found) {
                return Err(Error::UnsupportedFormat {
                    path: cfg.path.clone(),
                    found,
                    supported: meta::FORMAT_VERSION,
                });
            }
            Ok((false, found))
        }
        None if tree.is_empty() => {
            let mut b = sled::Batch::default();
            b.insert(keys::META_FORMAT, meta::encode_format(meta::FORMAT_VERSION));
            b.insert(keys::META_CHECKPOINT, meta::encode_checkpoint(0));
            b.insert(keys::META_STORE, meta::encode_store_id(StoreId::random()));
            // Before any summary or frame exists (keys.rs, "the fence").
            for i in 0..keys::FENCE_KEYS {
                b.insert(&keys::fence_key(i), &[][..]);
            }
            tree.apply_batch(b).map_err(store_err("initialise store"))?;
            syncer.sync(db, 0).map_err(|e| Error::Io {
                op: "sync new store",
                path: cfg.sled_path(),
                source: e,
            })?;
            Ok((true, meta::FORMAT_VERSION))
        }
        None => Err(Error::corruption(
            Location::Meta { key: "format" },
            CorruptionKind::BadMeta {
                detail: "format key missing from a non-empty store".into(),
            },
        )),
    }
}

pub(crate) fn load_summaries(
    tree: &sled::Tree,
) -> Result<BTreeMap<TopicPartition, PartitionSummary>> {
    let mut out = BTreeMap::new();
    for item in tree.scan_prefix([keys::PREFIX_PARTITION]) {
        let (k, v) = item.map_err(store_err("scan partitions"))?;
        let (tp, s) = PartitionSummary::decode(&k, &v)
            .map_err(|kind| Error::corruption(summary_location(&k), kind))?;
        out.insert(tp, s);
    }
    Ok(out)
}

/// Refuse a key in the log's key space below its first LSN (`W` + LSN 0,
/// or `W` and fewer than 8 bytes): no build writes one, and the tail scan
/// starts above them, so until 2026-12-05 an open passed over them
/// without a word (verify reported them).
/// What a log key below LSN 1 is, to the open and to verify.
pub(crate) const BELOW_THE_LOG: &str = "a log key below LSN 1, which no build writes";

/// The damage an empty value under a log key is in a store of `format`,
/// older than reserved slots.
pub(crate) fn empty_value_without_slots(format: u32) -> CorruptionKind {
    CorruptionKind::BadKey {
        detail: format!(
            "an empty value under a log key in a format-{format} store, which has no reserved slots: a frame emptied"
        ),
    }
}

/// The damage an empty value below the log's next LSN is: a reserved slot
/// lies only above the last frame, so one inside the log (within a
/// tombstone's span) is a frame emptied, or a key no build writes.
pub(crate) fn slot_inside_the_log(expected: u64) -> CorruptionKind {
    CorruptionKind::BadKey {
        detail: format!(
            "an empty value (a reserved slot's) inside the log, below its next LSN {expected}: slots lie only above the last frame"
        ),
    }
}

fn refuse_keys_below_the_log(tree: &sled::Tree) -> Result<()> {
    let below = tree
        .range(vec![keys::PREFIX_WAL]..keys::wal_key(1).to_vec())
        .next();
    match below {
        None => Ok(()),
        Some(Err(e)) => Err(store_err("scan below the log")(e)),
        Some(Ok((k, _))) => Err(Error::corruption(
            if k.len() == keys::wal_key(0).len() {
                Location::Wal { lsn: 0 }
            } else {
                Location::Key { key_hex: hex(&k) }
            },
            CorruptionKind::BadKey {
                detail: BELOW_THE_LOG.into(),
            },
        )),
    }
}

/// The LSN the first frame after the checkpoint must have.
pub(crate) fn expected_after_checkpoint(tree: &sled::Tree, checkpoint: u64) -> Result<u64> {
    if checkpoint == 0 {
        return Ok(1);
    }
    let prev = tree
        .get_lt(keys::wal_key(checkpoint + 1))
        .map_err(store_err("read checkpoint frame"))?;
    let bad = |detail: String| {
        Err(Error::corruption(
            Location::Meta { key: "checkpoint" },
            CorruptionKind::BadMeta { detail },
        ))
    };
    // The key below may belong to another key space when no frame is there;
    // a malformed key in the log's own space (`W` and not 9 bytes, which
    // sorts among the frames) is that key's damage, named as such.
    let (lsn, v) = match prev {
        Some((k, v)) if k.first() == Some(&keys::PREFIX_WAL) => match keys::parse_wal_key(&k) {
            Ok(lsn) => (lsn, v),
            Err(kind) => return Err(Error::corruption(Location::Key { key_hex: hex(&k) }, kind)),
        },
        _ => {
            return bad(format!(
                "checkpoint {checkpoint} but no frame at or before it"
            ))
        }
    };
    if slots::is_slot(&v) {
        // Slots lie only above the last frame written.
        return bad(format!(
            "checkpoint {checkpoint} lies among the reserved slots (LSN {lsn}), past every frame: the frame at LSN {lsn} was emptied (cairn verify lists the log's holes), or the checkpoint is wrong"
        ));
    }
    let f = frame::decode(lsn, &v).map_err(|k| corrupt(lsn, k))?;
    if f.flags & FLAG_MORE != 0 {
        return Err(corrupt(
            lsn,
            CorruptionKind::BadChunkSequence {
                detail: format!("checkpoint {checkpoint} falls inside an entry"),
            },
        ));
    }
    let next = f.lsn_after(lsn).map_err(|k| corrupt(lsn, k))?;
    if next <= checkpoint {
        return Err(corrupt(
            next,
            CorruptionKind::LsnGap {
                expected: next,
                found: checkpoint + 1,
            },
        ));
    }
    Ok(next)
}

/// Refuses an entry of the tail whose offsets do not start above all of
/// its partition's before it: above the partition's previous entry in the
/// tail, else above the partition's index entry of the highest first
/// offset among those earlier in the log (a lower LSN: the tail's own
/// entries may be indexed already). Not the index entry just below its
/// first offset: after a prune, or an archive that began above offset 0,
/// an entry starting below every one left has none, and an overlap with
/// the entries above it would be indexed beside them. No append
/// writes one (offsets only increase, and redelivered records are
/// dropped), so it is damage with a valid CRC (a frame copied, or a bug):
/// indexed beside the entry it repeats, it would have two reads of the
/// same offsets disagree, and a summary count records twice.
///
/// With no entry before it, it must start at or above the first offset of
/// the partition's stored summary, `stored` (a prune raises that and
/// deletes every entry below it in one batch; a summary a crash left
/// behind is older, and its first offset lower).
///
/// An index entry that does not decode is passed over, left to the reads
/// and `verify`, which report it where it is; this check only adds a
/// refusal.
fn check_offset_order(
    tree: &sled::Tree,
    tp: &TopicPartition,
    described: &IndexEntry,
    stored: Option<&PartitionSummary>,
    tail_last: &mut BTreeMap<TopicPartition, i64>,
) -> Result<()> {
    let before = match tail_last.get(tp) {
        Some(&last) => Some((last, "the tail's previous entry")),
        None => {
            let mut earlier = None;
            // From the partition's highest first offset down; past only the
            // tail's entries already indexed, at most.
            for item in tree.scan_prefix(keys::index_prefix(tp)).rev() {
                let (k, v) = item.map_err(store_err("read index"))?;
                if let Ok((_, e)) = IndexEntry::decode(&k, &v) {
                    if e.lsn < described.lsn {
                        earlier = Some((e.last_offset, "the index entry before it"));
                        break;
                    }
                }
            }
            if earlier.is_none() {
                // Nothing before it in the log (all pruned, or it is the
                // partition's first): it starts at or above the first
                // offset the stored summary keeps, which only a prune
                // raises, deleting every entry below it.
                if let Some(s) = stored.filter(|s| described.first_offset < s.first_offset) {
                    return Err(corrupt(
                        described.lsn,
                        CorruptionKind::OffsetOrder {
                            detail: format!(
                                "{tp} entry starts at {} but the partition's first offset is {} (a prune deleted every entry below it)",
                                described.first_offset, s.first_offset
                            ),
                        },
                    ));
                }
            }
            earlier
        }
    };
    if let Some((last, which)) = before {
        if described.first_offset <= last {
            return Err(corrupt(
                described.lsn,
                CorruptionKind::OffsetOrder {
                    detail: format!(
                        "{tp} entry starts at {} but {which} ends at {last}",
                        described.first_offset
                    ),
                },
            ));
        }
    }
    tail_last.insert(tp.clone(), described.last_offset);
    Ok(())
}

/// Confirms the tail entry `described` against its index entry, rebuilding
/// one that is missing or damaged. One that decodes but names another LSN
/// is refused: two entries start at the same offset (see
/// [`check_offset_order`]), and the frames cannot say which is the archive's.
fn confirm_index(
    tree: &sled::Tree,
    tp: &TopicPartition,
    described: &IndexEntry,
    repairs: &mut sled::Batch,
    rebuilt: &mut Rebuilt,
    report: &mut RecoveryReport,
) -> Result<()> {
    let (k, v) = described.encode(tp);
    let stored = tree.get(&k).map_err(store_err("read index"))?;
    let ok = match &stored {
        Some(s) => match IndexEntry::decode(&k, s) {
            Ok((_, e)) if e.lsn != described.lsn => {
                return Err(corrupt(
                    described.lsn,
                    CorruptionKind::OffsetOrder {
                        detail: format!(
                            "{tp} entry starts at {}, as the entry at lsn {} its index entry names does",
                            described.first_offset, e.lsn
                        ),
                    },
                ));
            }
            Ok((_, e)) => e == *described,
            Err(_) => false,
        },
        None => false,
    };
    if !ok {
        if stored.is_some() {
            tracing::warn!(%tp, lsn = described.lsn, "replacing a damaged index entry (it does not match the log) with one rebuilt from the log's checksummed frames");
            report.index_entries_damaged += 1;
        } else {
            tracing::warn!(%tp, lsn = described.lsn, "rebuilding index entry from the log");
        }
        rebuilt.insert(k.clone(), (tp.clone(), *described));
        repairs.insert(k, v);
        report.index_entries_repaired += 1;
    }
    Ok(())
}

/// Removes the torn tail entry starting at `first_lsn` (and the slots after
/// it) in `repairs`. [`refuse_indexed_tail`] then makes sure it was torn.
fn truncate_tail(tree: &sled::Tree, first_lsn: u64, repairs: &mut sled::Batch) -> Result<u64> {
    let mut frames = 0;
    for item in tree.range(keys::wal_key(first_lsn)..=keys::wal_key(u64::MAX)) {
        let (k, v) = item.map_err(store_err("scan torn tail"))?;
        repairs.remove(k);
        if !slots::is_slot(&v) {
            frames += 1;
        }
    }
    Ok(frames)
}

/// Refuses, as `Corruption` at `at` (the damaged frame) with the tail's
/// `reason`, a "torn" tail whose entry, from `first_lsn`, an index entry
/// points into: an append inserts its index
/// entry only after all of its frames, and sled keeps its log's order
/// through a crash, so an indexed entry was written whole and is damaged,
/// not torn. Truncating it would lose records and move the partition's
/// next offset back.
///
/// Every partition with an index entry is looked at, not only those with a
/// summary: a partition's first append cut short after its index entry and
/// before its summary has none. Each one's newest entry is read as the
/// repairs will leave it (`rebuilt` over the stored ones): another
/// partition's damaged index entry, which the open rebuilds, does not turn
/// a torn tail into a refusal.
fn refuse_indexed_tail(
    tree: &sled::Tree,
    rebuilt: &Rebuilt,
    first_lsn: u64,
    at: u64,
    reason: &CorruptionKind,
) -> Result<()> {
    for tp in &indexed_partitions(tree)? {
        if let Some((_, e)) = newest_index_entry(tree, tp, rebuilt)? {
            if e.lsn >= first_lsn {
                tracing::error!(first_lsn, %tp, first_offset = e.first_offset, "the last entry looks torn but is indexed: damage, not an interrupted write");
                return Err(corrupt(at, reason.clone()));
            }
        }
    }
    Ok(())
}

/// Every partition with an index entry, found by seeking past each one's
/// keys: O(partitions), not O(entries).
fn indexed_partitions(tree: &sled::Tree) -> Result<Vec<TopicPartition>> {
    let mut found = Vec::new();
    let mut from = vec![keys::PREFIX_INDEX];
    while let Some(item) = tree.range(from.clone()..).next() {
        let (k, _) = item.map_err(store_err("scan index"))?;
        if k.first() != Some(&keys::PREFIX_INDEX) {
            break;
        }
        let (tp, _) = keys::parse_index_key(&k).map_err(|kind| index_corruption(&k, kind))?;
        from = keys::index_prefix_end(&tp);
        found.push(tp);
    }
    Ok(found)
}

/// One item of a scan over the index, decoded: a failed read names the
/// scan, a damaged entry is `Corruption` at its key.
pub(crate) fn index_item(
    item: sled::Result<(sled::IVec, sled::IVec)>,
) -> Result<(sled::IVec, IndexEntry)> {
    let (k, v) = item.map_err(store_err("scan index"))?;
    let (_, e) = IndexEntry::decode(&k, &v).map_err(|kind| index_corruption(&k, kind))?;
    Ok((k, e))
}

pub(crate) fn index_corruption(key: &[u8], kind: CorruptionKind) -> Error {
    Error::corruption(index_location(key), kind)
}

/// Where an index entry stored under `key` is: its partition and first
/// offset, or the raw key when that does not parse.
pub(crate) fn index_location(key: &[u8]) -> Location {
    match keys::parse_index_key(key) {
        Ok((tp, first_offset)) => Location::Index {
            topic: tp.topic,
            partition: tp.partition,
            first_offset,
        },
        Err(_) => Location::Key { key_hex: hex(key) },
    }
}

/// Where a partition summary stored under `key` is: its partition, or the
/// raw key when that does not parse.
pub(crate) fn summary_location(key: &[u8]) -> Location {
    match keys::parse_partition_key(key) {
        Ok(tp) => crate::verify::partition_location(&tp),
        Err(_) => Location::Key { key_hex: hex(key) },
    }
}

/// One partition's summary, brought up to date with its index entries.
///
/// Reads only the entries the stored summary does not count yet (from its
/// next offset on), so that recovery stays proportional to the tail and
/// not to the partition; the whole index is read only when there is no
/// stored summary or it counts more than the index still holds.
fn recompute_summary(
    tree: &sled::Tree,
    tp: &TopicPartition,
    old: Option<PartitionSummary>,
    entries_read: &mut u64,
) -> Result<PartitionSummary> {
    if let Some(o) = old {
        if let Some(s) = extend_summary(tree, tp, o, entries_read)? {
            // Debug builds (the tests) compare the shortcut with the full
            // rebuild whenever that can be done. They differ on a sound
            // store only through a bug, but also when an index entry below
            // the summary is gone (damage verify and reads report): so the
            // difference is logged, never a panic on stored bytes.
            #[cfg(debug_assertions)]
            if let Ok(full) = rebuild_summary(tree, tp, old, &mut 0) {
                if s != full {
                    tracing::error!(%tp, extended = ?s, rebuilt = ?full, from = ?o, "summary extended from the stored one differs from a full rebuild (a bug, or a missing index entry)");
                }
            }
            return Ok(s);
        }
    }
    rebuild_summary(tree, tp, old, entries_read)
}

/// `old` plus the index entries it does not count yet, or `None` when `old`
/// counts records the index no longer holds (a truncated entry).
fn extend_summary(
    tree: &sled::Tree,
    tp: &TopicPartition,
    old: PartitionSummary,
    entries_read: &mut u64,
) -> Result<Option<PartitionSummary>> {
    let prefix = keys::index_prefix(tp);
    let decode = |item| index_item(item).map(|(_, e)| e);
    // An entry the summary counts was removed only if the index now ends
    // below the summary's next offset (a partition's entries are in offset
    // order, and truncation removes only the newest).
    if old.record_count > 0 {
        let end = match tree.scan_prefix(&prefix).next_back() {
            Some(item) => decode(item)?.last_offset + 1,
            None => return Ok(None),
        };
        // Or, for an advanced summary (its next offset is its floor, above
        // its newest entry: `advance_partitions`), below its floor: offsets
        // that held no record are not a removed entry. (Such a summary is
        // recomputed only when the tail wrote past it, so its index then
        // ends past it anyway; the open cannot tell its lost entries from
        // those offsets, as check_indexed_partitions says.)
        if end.max(old.next_offset_floor) < old.next_offset {
            return Ok(None);
        }
    }
    let mut s = old;
    // Entries written after the summary start at or after its next offset.
    for item in tree.range(keys::index_key(tp, old.next_offset.max(0))..) {
        if item.as_ref().is_ok_and(|(k, _)| !k.starts_with(&prefix)) {
            break;
        }
        let e = decode(item)?;
        *entries_read += 1;
        if s.record_count == 0 {
            s.first_offset = e.first_offset;
        }
        s.next_offset = s.next_offset.max(e.last_offset + 1);
        s.record_count = s.record_count.saturating_add(e.record_count as u64);
        s.payload_bytes = s.payload_bytes.saturating_add(e.payload_bytes);
    }
    Ok(Some(s))
}

/// Rebuild one partition's summary from all its index entries.
fn rebuild_summary(
    tree: &sled::Tree,
    tp: &TopicPartition,
    old: Option<PartitionSummary>,
    entries_read: &mut u64,
) -> Result<PartitionSummary> {
    let floor = old.map_or(0, |s| s.next_offset_floor);
    let mut s = PartitionSummary {
        first_offset: 0,
        next_offset: floor,
        record_count: 0,
        payload_bytes: 0,
        next_offset_floor: floor,
    };
    let mut first = None;
    for item in tree.scan_prefix(keys::index_prefix(tp)) {
        let (_, e) = index_item(item)?;
        *entries_read += 1;
        first.get_or_insert(e.first_offset);
        s.next_offset = s.next_offset.max(e.last_offset + 1);
        s.record_count = s.record_count.saturating_add(e.record_count as u64);
        s.payload_bytes = s.payload_bytes.saturating_add(e.payload_bytes);
    }
    // The summary was behind the log: never move it backwards (a torn
    // tail that is truncated was never indexed, so it never counted).
    if let Some(o) = old {
        s.next_offset = s.next_offset.max(o.next_offset);
    }
    s.first_offset = first.unwrap_or(s.next_offset);
    Ok(s)
}

/// Refuses a partition whose newest index entry points at or past
/// `next_lsn`, the log's end after recovery: the frames it names are gone,
/// and the next append would reuse their LSNs under it. (Only the newest
/// entry of each partition is read here; an older one pointing past the
/// log, damage below what recovery re-reads, is found by the read that
/// meets it, as `MissingFrame`, and by verify.) Refuses a partition with index entries and
/// no summary (in `partitions`, or recomputed by this recovery for the
/// `dirty` ones): the summary is how the archive lists its partitions, so
/// an export of every topic would leave it out without a word.
///
/// And refuses a summary recovery does not recompute (its partition saw no
/// write since the checkpoint) that disagrees with the index's ends, read
/// with one index entry per partition (one it does recompute, from the
/// stored one on, is checked against the entry below its next offset:
/// [`refuse_summary_below_tail`]): while it counts records, its next
/// offset is one past its last index entry's last offset, or its floor
/// where that is higher (offsets advanced past, `advance_partitions`; since
/// the night of 2026-12-04), and a summary
/// that counts records has index entries. (Retention deletes from the
/// oldest entry, and a summary is written after the entries it counts, so
/// no healthy store differs. A damaged summary would have a run resume past
/// records never archived, or count records no read can find; a lost
/// newest index entry hides archived records from every read.)
fn check_indexed_partitions(
    tree: &sled::Tree,
    checkpoint: u64,
    next_lsn: u64,
    partitions: &BTreeMap<TopicPartition, PartitionSummary>,
    dirty: &BTreeSet<TopicPartition>,
    rebuilt: &Rebuilt,
) -> Result<()> {
    let mut indexed: BTreeSet<TopicPartition> = indexed_partitions(tree)?.into_iter().collect();
    indexed.extend(rebuilt.values().map(|(tp, _)| tp.clone()));
    for tp in &indexed {
        if let Some(s) = partitions.get(tp).filter(|_| dirty.contains(tp)) {
            refuse_summary_below_tail(tree, tp, s, rebuilt)?;
        }
        let summary = partitions.get(tp).filter(|_| !dirty.contains(tp));
        // With no stored summary, a partition is refused, unless the tail
        // wrote to it and all its entries are in the tail: that is its
        // first write cut before its summary, which is rebuilt. An entry
        // at or below the checkpoint had its summary durable before the
        // checkpoint was written (a write inserts it first; recovery writes
        // both in one batch), so that summary was lost, and a rebuild
        // would drop what it held beyond the index (the floor of an
        // advance) without a word (seen in review, 2026-12-05: it was
        // rebuilt and counted as a repair).
        if !partitions.contains_key(tp) && summary_lost(tree, tp, checkpoint, dirty.contains(tp))? {
            let (at, kind) = crate::verify::missing_summary(tp);
            return Err(Error::corruption(at, kind));
        }
        if let Some((k, e)) = newest_index_entry(tree, tp, rebuilt)? {
            if e.lsn + e.chunks as u64 > next_lsn {
                return Err(index_corruption(
                    &k,
                    CorruptionKind::IndexMismatch {
                        detail: format!("points at lsn {} beyond the log end {next_lsn}", e.lsn),
                    },
                ));
            }
            // A summary that counts nothing has no entries: the prune that
            // emptied the partition deleted them in the batch that wrote it.
            let mismatch = match summary {
                Some(s) if s.record_count == 0 => Some(format!(
                    "summary counts no records (next offset {}), but the partition has index entries, the last ending at offset {}: the summary is damaged, or the entries are stray (cairn verify lists where)",
                    s.next_offset, e.last_offset
                )),
                Some(s) if s.next_offset != next_after(&e, s) => Some(format!(
                    "summary next offset {} with {} records, but the last index entry ends at offset {}{}: the summary is damaged, or the partition's newest index entries are lost or stray (cairn verify lists where)",
                    s.next_offset, s.record_count, e.last_offset, floor_said(s)
                )),
                _ => None,
            };
            if let Some(detail) = mismatch {
                return Err(Error::corruption(
                    crate::verify::partition_location(tp),
                    CorruptionKind::SummaryMismatch { detail },
                ));
            }
        }
    }
    for (tp, s) in partitions {
        if s.record_count > 0 && !dirty.contains(tp) && !indexed.contains(tp) {
            return Err(Error::corruption(
                crate::verify::partition_location(tp),
                CorruptionKind::SummaryMismatch {
                    detail: format!(
                        "summary counts {} records, but the partition has no index entries: the summary is damaged, or every index entry is lost (cairn verify lists where)",
                        s.record_count
                    ),
                },
            ));
        }
    }
    Ok(())
}

/// Whether `tp`, indexed with no stored summary, lost its summary (the
/// open refuses it) rather than had its first write cut before its
/// summary (rebuilt): the tail did not write to it (`dirty` false), or an
/// entry of it is at or below the checkpoint. Verify asks the same, to say
/// whether an open repairs what it found.
pub(crate) fn summary_lost(
    tree: &sled::Tree,
    tp: &TopicPartition,
    checkpoint: u64,
    dirty: bool,
) -> Result<bool> {
    Ok(!dirty
        || match tree.scan_prefix(keys::index_prefix(tp)).next() {
            Some(item) => index_item(item)?.1.lsn <= checkpoint,
            None => false,
        })
}

/// [`refuse_summary_below_tail`] with no index entry rebuilt: for verify,
/// which lists the tail's entries without one as problems of their own.
pub(crate) fn refuse_summary_below_tail_as_stored(
    tree: &sled::Tree,
    tp: &TopicPartition,
    s: &PartitionSummary,
) -> Result<()> {
    refuse_summary_below_tail(tree, tp, s, &Rebuilt::new())
}

/// Refuses the stored summary of a partition the tail wrote to (`dirty`:
/// recovery extends it with the tail's entries, from its next offset on)
/// where it disagrees with the index entries below its next offset, read as
/// the repairs will leave them: the newest of them must end just below it
/// (or below its floor, when that is its next offset) while it counts
/// records, and there is none while it counts nothing. A
/// summary is written after the entries it counts and before any later
/// write's, so no crash leaves another shape; a damaged one would be
/// extended as it stands (a tail entry straddling its next offset skipped,
/// entries below it left uncounted) and written back, the partition's next
/// offset then below records it holds, which a run would archive again.
/// (Until the night of 2026-12-04 only a summary the tail did not touch was
/// checked, by `check_indexed_partitions`.)
fn refuse_summary_below_tail(
    tree: &sled::Tree,
    tp: &TopicPartition,
    s: &PartitionSummary,
    rebuilt: &Rebuilt,
) -> Result<()> {
    let below = index_entry_before(tree, tp, s.next_offset, rebuilt)?.map(|(_, e)| e);
    let mismatch = match below {
        Some(e) if s.record_count == 0 => Some(format!(
            "summary counts no records (next offset {}), but an index entry below that ends at offset {}: the summary is damaged, or the entry is stray (cairn verify lists where)",
            s.next_offset, e.last_offset
        )),
        Some(e) if next_after(&e, s) != s.next_offset => Some(format!(
            "summary next offset {} with {} records, but the index entry below it ends at offset {}{}: the summary is damaged, or index entries are lost or stray (cairn verify lists where)",
            s.next_offset, s.record_count, e.last_offset, floor_said(s)
        )),
        None if s.record_count > 0 => Some(format!(
            "summary counts {} records below offset {}, but the partition has no index entry below it: the summary is damaged, or index entries are lost (cairn verify lists where)",
            s.record_count, s.next_offset
        )),
        _ => None,
    };
    match mismatch {
        Some(detail) => Err(Error::corruption(
            crate::verify::partition_location(tp),
            CorruptionKind::SummaryMismatch { detail },
        )),
        None => Ok(()),
    }
}

/// The next offset a summary `s` that counts records must have, its
/// newest index entry being `e`: one past that entry, or the summary's
/// floor where that is higher (offsets skipped since,
/// `Engine::advance_partitions`, or a retention pass's floor).
fn next_after(e: &IndexEntry, s: &PartitionSummary) -> i64 {
    e.last_offset.saturating_add(1).max(s.next_offset_floor)
}

/// The summary's floor, for a mismatch's text, where it says something.
fn floor_said(s: &PartitionSummary) -> String {
    if s.next_offset_floor > 0 {
        format!(" (and the summary's floor is {})", s.next_offset_floor)
    } else {
        String::new()
    }
}

/// Index entries rebuilt from the log, not yet written: by key, with
/// their partition.
type Rebuilt = BTreeMap<Vec<u8>, (TopicPartition, IndexEntry)>;

/// `tp`'s newest index entry as the repairs will leave it: a rebuilt one
/// where it is newer than (or replaces) the stored one.
fn newest_index_entry(
    tree: &sled::Tree,
    tp: &TopicPartition,
    rebuilt: &Rebuilt,
) -> Result<Option<(Vec<u8>, IndexEntry)>> {
    newest_index_entry_in(tree, tp, keys::index_prefix_end(tp), rebuilt)
}

/// [`newest_index_entry`] among those that start before `offset`.
fn index_entry_before(
    tree: &sled::Tree,
    tp: &TopicPartition,
    offset: i64,
    rebuilt: &Rebuilt,
) -> Result<Option<(Vec<u8>, IndexEntry)>> {
    newest_index_entry_in(tree, tp, keys::index_key(tp, offset.max(0)), rebuilt)
}

/// The newest of `tp`'s index entries keyed below `end`, as the repairs
/// will leave them.
fn newest_index_entry_in(
    tree: &sled::Tree,
    tp: &TopicPartition,
    end: Vec<u8>,
    rebuilt: &Rebuilt,
) -> Result<Option<(Vec<u8>, IndexEntry)>> {
    let stored = tree
        .range(keys::index_prefix(tp)..end.clone())
        .next_back()
        .transpose()
        .map_err(store_err("scan index"))?;
    let fresh = rebuilt.range(keys::index_prefix(tp)..end).next_back();
    match (stored, fresh) {
        (Some((k, _)), Some((rk, (_, e)))) if rk.as_slice() >= k.as_ref() => {
            Ok(Some((rk.clone(), *e)))
        }
        (Some(item), _) => {
            let (k, e) = index_item(Ok(item))?;
            Ok(Some((k.to_vec(), e)))
        }
        (None, Some((rk, (_, e)))) => Ok(Some((rk.clone(), *e))),
        (None, None) => Ok(None),
    }
}

/// A key as hex, for a location: whole up to [`KEY_HEX_BYTES_MAX`] bytes,
/// past that its first bytes and its length. A foreign or damaged key may
/// be megabytes long, and verify lists up to a thousand of them: each held
/// whole, twice over as hex, made its memory grow with their length (until
/// 2026-12-05).
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let shown = &bytes[..bytes.len().min(KEY_HEX_BYTES_MAX)];
    let mut s = String::with_capacity(shown.len() * 2 + 24);
    for b in shown {
        let _ = write!(s, "{b:02x}");
    }
    if shown.len() < bytes.len() {
        let _ = write!(s, "…({} bytes)", bytes.len());
    }
    s
}

/// Bytes of a key a location shows ([`hex`]): every key cairn writes is
/// shorter, a topic name taking at most 249.
pub(crate) const KEY_HEX_BYTES_MAX: usize = 512;

#[cfg(test)]
mod tests {
    /// A key is shown whole up to the bound, and past it by its first
    /// bytes and its length, never the whole of a key megabytes long.
    #[test]
    fn a_long_key_is_shown_by_its_first_bytes_and_length() {
        assert_eq!(super::hex(&[0x53, 0x05]), "5305");
        let whole = vec![0xab; super::KEY_HEX_BYTES_MAX];
        assert_eq!(super::hex(&whole), "ab".repeat(super::KEY_HEX_BYTES_MAX));
        let long = vec![0xab; 4 << 20];
        let shown = super::hex(&long);
        assert_eq!(
            shown,
            format!("{}…(4194304 bytes)", "ab".repeat(super::KEY_HEX_BYTES_MAX))
        );
    }
}
