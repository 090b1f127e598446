//! Reading records back, in offset order, through the sparse index.
//!
//! # Invariants
//! - A reader yields only durable records: it stops at the partition's
//!   durable next offset as of its creation.
//! - A record is yielded only from an entry that passed every check in
//!   `entry::read_entry`. On corruption the reader yields the error and ends.
//! - Memory is bounded by one decoded entry.
//! - A read of a whole partition (from at or below its first offset) that
//!   reaches the durable next offset has yielded as many records as the
//!   durable summary counted when it began; otherwise it ends with
//!   `Corruption` naming the partition (a lost index entry hides whole
//!   entries from the index walk, and offsets may have gaps, so nothing
//!   else would tell). A `read_range`, of part of a partition or of all
//!   of it, makes the same check before it yields anything, from the index
//!   alone (for a whole one since 2026-12-05: before, only at its end,
//!   after the records past a lost entry were yielded). When a
//!   truncation moved the partition's first offset (meanwhile, or before
//!   the read, not yet durable), that count is moot: the index is counted
//!   again against the summary as stored now (since 2026-12-05; before,
//!   the check was skipped), unless truncation steps keep moving the first
//!   offset under the count (`STORED_COUNT_TRIES`), when nothing is said.
//! - What a reader yields has no gap a truncation made: once it has taken a
//!   record, a truncation by the same engine that deleted the entry it
//!   would take next (one it wants, below its end) ends it with
//!   `PrunedUnderRead` naming the offsets. The reader knows that entry
//!   from a lookup made before it read the one before (offsets may have
//!   gaps of their own, so the index alone would not tell); the
//!   truncation records what it deletes before it applies the deletion.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::engine::{drop_failing_store, drop_sound_store, store_err, Engine, Held};
use crate::entry::read_entry;
use crate::error::Result;
use crate::index::IndexEntry;
use crate::keys;
use crate::offsets::PartitionSummary;
use crate::record::{validate_tp, Record, TopicPartition, AGELESS_BEFORE_MS};
use crate::recovery::{index_corruption, index_item, summary_location};

/// Iterator over one partition's records from an offset. Owns what it
/// needs, a sled handle included, so it may outlive the engine: its drop
/// then drops the store's last handle, guarded as the engine's own would be
/// if the engine was poisoned. Until then sled's files stay open and
/// locked: the store cannot be opened again meanwhile (an open in the same
/// process waits 5 s for the handle to go, then fails naming it).
pub struct RecordIter {
    tree: Held<sled::Tree>,
    store_failing: Arc<AtomicBool>,
    /// The engine's [`Engine::pruned_through`](crate::Engine).
    pruned_through: crate::engine::PrunedThrough,
    tp: TopicPartition,
    from: i64,
    end: i64,
    /// Once some record was taken: the first offset of the index entry
    /// after the last one taken, as it stood then, if it holds records this
    /// read wants (below `end`). Not found where it was, it was deleted
    /// under the read, and stepping over it would be a gap.
    next_first: Option<i64>,
    next_key: Vec<u8>,
    upper: Vec<u8>,
    buf: VecDeque<Record>,
    done: bool,
    /// For a read of the whole partition: the count to meet at its end.
    count: Option<CountCheck>,
}

/// A read of a whole partition yields every record its summary counts, or
/// an index entry is missing (damage no frame check can see: offsets may
/// have gaps). Checked at the end; when a truncation ran meanwhile, the
/// index is counted again against the summary as stored (`judge_count`).
struct CountCheck {
    /// The durable summary's record count when the read began.
    expected: u64,
    yielded: u64,
    /// The durable summary's first offset when the read began. A
    /// truncation that deleted anything moves the stored one, in the batch
    /// that deletes, and first offsets only grow: while the stored one is
    /// still this, no truncation has touched the partition.
    first_offset: i64,
}

/// A record that holds age retention back ([`Engine::timestamp_holding_back`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldingRecord {
    /// Its timestamp: negative (none), or later than the time asked about.
    pub timestamp_ms: i64,
    /// The offset above the last record of its entry: a truncation deletes
    /// whole entries, so one before this offset is the lowest that deletes
    /// it (with the records after it in its entry).
    pub entry_next_offset: i64,
}

impl Engine {
    /// Records of `tp` with offset ≥ `from`, in offset order, up to the
    /// durable next offset. A read of the whole partition checks the count
    /// at its end; one from inside it cannot ([`Engine::read_range`] does).
    /// A poisoned engine still serves reads (a live export of a run that is
    /// stopping on a failed fsync): they stop at the durable view the last
    /// successful fsync published, so they yield nothing the failure may
    /// have lost ([`Engine::topic_ids`], which reads the tree as it
    /// stands, refuses instead).
    pub fn read(&self, tp: &TopicPartition, from: i64) -> Result<RecordIter> {
        self.read_within(tp, from, None, false)
    }

    /// Records of `tp` with offsets in `from..to` (`to` `None`: up to the
    /// durable next offset), in offset order. It first counts the records
    /// of the partition's whole index against its summary, for a read of
    /// the whole partition too: a lost index entry anywhere in the
    /// partition is then `Corruption` before any record is yielded, not
    /// records missing from the range without a word, nor (for a whole
    /// read, which [`Engine::read`] checks only at its end) records past
    /// the hole already handed on when the count tells. That reads every
    /// index entry of the partition (one small value per entry), not its
    /// frames.
    pub fn read_range(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: Option<i64>,
    ) -> Result<RecordIter> {
        self.read_within(tp, from, to, true)
    }

    fn read_within(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: Option<i64>,
        check_part: bool,
    ) -> Result<RecordIter> {
        validate_tp(tp)?;
        let durable = self.durable_view().partitions.get(tp).copied();
        let next = durable.map_or(0, |s| s.next_offset);
        let end = to.map_or(next, |to| to.min(next));
        let from = from.max(0);
        let whole = durable.is_some_and(|s| from <= s.first_offset) && end == next;
        // Every ranged read counts the index first, a range below the
        // partition's first offset too: it yields nothing, unless a stray
        // index entry (valid CRCs, no build writes one) is there, whose
        // records would otherwise be yielded without a word (seen in
        // review, the night of 2026-12-04). A whole read too: its own
        // count at the end tells only after the records past a lost entry
        // were yielded, and an export to a pipe or a restore into Kafka
        // has passed them on by then, a hole no later run can fill in
        // order (seen in review, 2026-12-05).
        if let Some(s) = durable.filter(|_| check_part && from < end) {
            check_index_count(&self.tree, tp, &s)?;
        }
        // The durable summary's first offset, beside its count: a
        // truncation applied but not yet durable (or whose fsync failed)
        // has already moved the stored one, and the index is then counted
        // again against the summary as stored.
        let count = match durable {
            Some(s) if whole => Some(CountCheck {
                expected: s.record_count,
                yielded: 0,
                first_offset: s.first_offset,
            }),
            _ => None,
        };
        let next_key = self.index_key_from(tp, from)?;
        Ok(RecordIter {
            tree: Held::new((*self.tree).clone()),
            store_failing: self.store_failing.clone(),
            pruned_through: self.pruned_through.clone(),
            tp: tp.clone(),
            from,
            end,
            next_first: None,
            next_key,
            upper: keys::index_key(tp, i64::MAX),
            buf: VecDeque::new(),
            done: from >= end,
            count,
        })
    }

    /// The index key a scan for `tp`'s records at or after `from` starts
    /// at: the entry that holds `from` (it starts at or before it), if one
    /// does, else `from`'s own.
    fn index_key_from(&self, tp: &TopicPartition, from: i64) -> Result<Vec<u8>> {
        Ok(self
            .index_entry_holding(tp, from)?
            .map_or_else(|| keys::index_key(tp, from), |(k, _)| k))
    }

    /// The index entry (and its key) that holds `offset` of `tp`: the last
    /// one starting at or before it, if it reaches it.
    fn index_entry_holding(
        &self,
        tp: &TopicPartition,
        offset: i64,
    ) -> Result<Option<(Vec<u8>, IndexEntry)>> {
        if offset == i64::MAX {
            return Ok(None);
        }
        let Some((k, v)) = self
            .tree
            .get_lt(keys::index_key(tp, offset + 1))
            .map_err(store_err("seek index"))?
        else {
            return Ok(None);
        };
        if !k.starts_with(&keys::index_prefix(tp)) {
            return Ok(None);
        }
        let (_, e) = IndexEntry::decode(&k, &v).map_err(|kind| index_corruption(&k, kind))?;
        Ok((e.last_offset >= offset).then(|| (k.to_vec(), e)))
    }

    /// How many durable records of `tp` have offsets in `from..to`: from
    /// the index's counts for the entries wholly inside, and by reading the
    /// (at most two) entries the range cuts. For a caller that checks a
    /// copy of a range against the archive without reading it all (a
    /// resumed restore). A truncation racing the count can make it count
    /// records deleted meanwhile, or not. Like [`Engine::read_range`], it
    /// first counts the partition's whole index against its summary: a
    /// lost index entry is `Corruption`, not a count short by its records
    /// (which a resumed restore would blame on the copy).
    pub fn count_range(&self, tp: &TopicPartition, from: i64, to: i64) -> Result<u64> {
        validate_tp(tp)?;
        let Some(durable) = self.durable_view().partitions.get(tp).copied() else {
            return Ok(0);
        };
        let to = to.min(durable.next_offset);
        let from = from.max(0);
        if from >= to {
            return Ok(0);
        }
        check_index_count(&self.tree, tp, &durable)?;
        let mut count = 0u64;
        let start = self.index_key_from(tp, from)?;
        for item in self.tree.range(start..keys::index_prefix_end(tp)) {
            let (_, e) = index_item(item)?;
            if e.first_offset >= to {
                break;
            }
            if e.first_offset >= from && e.last_offset < to {
                count += u64::from(e.record_count);
            } else {
                let cut = e.first_offset.max(from)..(e.last_offset.saturating_add(1)).min(to);
                for r in self.read_within(tp, cut.start, Some(cut.end), false)? {
                    r?;
                    count += 1;
                }
            }
        }
        Ok(count)
    }

    /// The lowest entry boundary from which `tp`'s durable entries hold at
    /// most `bytes_max` payload bytes: retention by size deletes below it,
    /// keeping the newest entries that fit (none, if the newest alone is
    /// larger). The durable next offset when nothing fits. Cut with
    /// [`Engine::truncate_by`] where truncations may run concurrently: a
    /// truncation between this call and the deletion makes it count bytes
    /// that are already gone.
    ///
    /// It starts from the partition summary's total and reads only the
    /// entries it deletes and the one above them, so that a pass costs what
    /// it deletes, not what is kept (counting the kept entries instead read
    /// the whole retained index every pass). A store that lost an index
    /// entry, which verify and whole reads report, has the summary count
    /// more than the index holds: the cut then keeps the lost entries'
    /// bytes less than `bytes_max`. A cut that would delete every entry
    /// has read them all, and checks: bytes the summary counts that no
    /// entry holds are `Corruption` (a truncation would refuse only its
    /// last step, after deleting in the others).
    pub fn offset_for_retained_bytes(&self, tp: &TopicPartition, bytes_max: u64) -> Result<i64> {
        validate_tp(tp)?;
        let Some(summary) = self.durable_view().partitions.get(tp).copied() else {
            return Ok(0);
        };
        let (end, mut held) = (summary.next_offset, summary.payload_bytes);
        for item in self.tree.scan_prefix(keys::index_prefix(tp)) {
            let (_, e) = index_item(item)?;
            if e.first_offset >= end {
                break;
            }
            if held <= bytes_max {
                return Ok(e.first_offset);
            }
            held = held.saturating_sub(e.payload_bytes);
        }
        // Unless a truncation ran meanwhile (it moves the stored first
        // offset), and deleted entries this scan did not see.
        if held > 0 && stored_first_offset(&self.tree, tp)? == Some(summary.first_offset) {
            return Err(count_mismatch(
                tp,
                format!(
                    "the index holds {} payload bytes fewer below next offset {end} than the summary's {}",
                    held, summary.payload_bytes
                ),
                true,
            ));
        }
        Ok(end)
    }

    /// The offset below which every archived record of `tp` is known to be
    /// older than `cut_ms`: the first record whose timestamp is at or after
    /// the cut, or has no age (below [`AGELESS_BEFORE_MS`]: none, or a
    /// stamp in seconds; until 2026-12-07 only a negative one, and records
    /// stamped in seconds were deleted at the first pass), or the durable
    /// next offset when there is none. Retention by age deletes
    /// below it. A truncation racing this call can delete entries the
    /// answer was worked out from: cut with [`Engine::truncate_by`], which
    /// keeps other truncations out between the pick and the deletion.
    pub fn offset_for_retention(&self, tp: &TopicPartition, cut_ms: i64) -> Result<i64> {
        // The end the scan used, not a later one: records made durable
        // since were not looked at.
        let (found, end) = self.first_offset_where(
            tp,
            |e| e.timestamp_max_ms >= cut_ms || e.timestamp_min_ms < AGELESS_BEFORE_MS,
            |e| e.timestamp_min_ms >= cut_ms,
            |r| r.timestamp_ms >= cut_ms || r.timestamp_ms < AGELESS_BEFORE_MS,
        )?;
        Ok(found.unwrap_or(end))
    }

    /// `tp`'s durable record at `offset` when its timestamp has no age
    /// (below [`AGELESS_BEFORE_MS`]) or is later than `after_ms`: the record an age cut
    /// ([`Engine::offset_for_retention`]) stopped at, when it holds age
    /// retention back for good or until a date far ahead, rather than
    /// because it is young. `None` for any other record, or none at
    /// `offset`. Reads the entry holding `offset` only when its index entry
    /// says it holds such a timestamp: an age cut that stopped at a young
    /// record costs one index lookup.
    pub fn timestamp_holding_back(
        &self,
        tp: &TopicPartition,
        offset: i64,
        after_ms: i64,
    ) -> Result<Option<HoldingRecord>> {
        validate_tp(tp)?;
        let Some(s) = self.durable_view().partitions.get(tp).copied() else {
            return Ok(None);
        };
        if offset < s.first_offset || offset >= s.next_offset {
            return Ok(None);
        }
        let Some((key, e)) = self.index_entry_holding(tp, offset)? else {
            return Ok(None);
        };
        let holds = |ts: i64| ts < AGELESS_BEFORE_MS || ts > after_ms;
        if !(holds(e.timestamp_min_ms) || holds(e.timestamp_max_ms)) {
            return Ok(None);
        }
        let Some(entry) = read_entry_unless_deleted(&self.tree, tp, &key, &e)? else {
            return Ok(None);
        };
        Ok(entry
            .records
            .iter()
            .find(|r| r.offset == offset && holds(r.timestamp_ms))
            .map(|r| HoldingRecord {
                timestamp_ms: r.timestamp_ms,
                entry_next_offset: e.last_offset.saturating_add(1),
            }))
    }

    /// The earliest offset whose timestamp is ≥ `timestamp_ms` (Kafka's
    /// ListOffsets semantics), or `None` if no stored record qualifies.
    /// A negative `timestamp_ms` is a time before the epoch, not one of
    /// ListOffsets' markers (-1 latest, -2 earliest): every record
    /// qualifies, a record without a timestamp (-1) included, and the
    /// answer is the first offset held.
    pub fn offset_for_time(&self, tp: &TopicPartition, timestamp_ms: i64) -> Result<Option<i64>> {
        let (found, _) = self.first_offset_where(
            tp,
            |e| e.timestamp_max_ms >= timestamp_ms,
            |e| e.timestamp_min_ms >= timestamp_ms,
            |r| r.timestamp_ms >= timestamp_ms,
        )?;
        Ok(found)
    }

    /// The offset of `tp`'s first durable record that `wanted` accepts,
    /// reading only the entries that `may_hold` says could hold one, and
    /// none that `all_hold` says holds only such records (its first offset
    /// is the answer: once retention has caught up, the oldest entry kept is
    /// such, and reading it whole on every pass would cost a read of every
    /// partition's oldest entry, and fail every pass on damage in it); and
    /// the durable next offset the scan stopped at.
    fn first_offset_where(
        &self,
        tp: &TopicPartition,
        may_hold: impl Fn(&IndexEntry) -> bool,
        all_hold: impl Fn(&IndexEntry) -> bool,
        wanted: impl Fn(&Record) -> bool,
    ) -> Result<(Option<i64>, i64)> {
        validate_tp(tp)?;
        let end = self.durable_offset(tp).unwrap_or(0);
        for item in self.tree.scan_prefix(keys::index_prefix(tp)) {
            let (k, e) = index_item(item)?;
            if e.first_offset >= end {
                break;
            }
            // (Unless a racing truncation deleted it since the scan read
            // it: the next entry answers then.)
            if all_hold(&e) {
                if deleted_since(&self.tree, &k)? {
                    continue;
                }
                return Ok((Some(e.first_offset), end));
            }
            if !may_hold(&e) {
                continue;
            }
            let Some(entry) = read_entry_unless_deleted(&self.tree, tp, &k, &e)? else {
                continue;
            };
            if let Some(r) = entry.records.iter().find(|r| wanted(r) && r.offset < end) {
                return Ok((Some(r.offset), end));
            }
        }
        Ok((None, end))
    }
}

/// The entry `e` (indexed under `key`), or `None` when a truncation deleted
/// it since the index was read: then its records are gone, not damaged, and
/// only a missing frame whose index entry is still there is corruption.
fn read_entry_unless_deleted(
    tree: &sled::Tree,
    tp: &TopicPartition,
    key: &[u8],
    e: &IndexEntry,
) -> Result<Option<crate::body::Entry>> {
    match read_entry(tree, tp, e) {
        Ok(entry) => Ok(Some(entry)),
        // Only a truncation deletes index entries: an entry whose index
        // key is still there is read, or its damage is said.
        Err(err) => match deleted_since(tree, key) {
            Ok(true) => Ok(None),
            Ok(false) => Err(err),
            // The recheck failing too: the damage found first is what is
            // returned (it names its location), the recheck's failure
            // logged beside it.
            Err(recheck) => {
                tracing::warn!(error = %recheck, "rechecking an index entry after a failed read failed too");
                Err(err)
            }
        },
    }
}

/// Whether the index entry under `key`, read by a scan, has been deleted
/// since (by a truncation racing the reader).
fn deleted_since(tree: &sled::Tree, key: &[u8]) -> Result<bool> {
    Ok(tree.get(key).map_err(store_err("recheck index"))?.is_none())
}

/// `tp`'s index entries below the durable summary `s`'s next offset count
/// as many records as `s` does (against the summary as stored, when a
/// truncation moved the first offset since `s`: [`judge_count`]): the
/// check a whole read makes at its end.
fn check_index_count(tree: &sled::Tree, tp: &TopicPartition, s: &PartitionSummary) -> Result<()> {
    let counted = count_below(tree, tp, s.next_offset)?;
    judge_count(tree, tp, counted, s.record_count, s.first_offset, || {
        format!(
            "the index counts {counted} records below next offset {}, where the summary counts {}",
            s.next_offset, s.record_count
        )
    })
}

/// `counted` records against the `expected` of a summary whose first
/// offset was `first_offset`: equal is sound; a truncation that moved the
/// first offset since makes the comparison moot, and the partition is
/// counted again as stored ([`check_stored_count`]); else the index has
/// lost (or gained) entries, said as `counted_as` says the count.
fn judge_count(
    tree: &sled::Tree,
    tp: &TopicPartition,
    counted: u64,
    expected: u64,
    first_offset: i64,
    counted_as: impl FnOnce() -> String,
) -> Result<()> {
    if counted == expected {
        return Ok(());
    }
    if stored_first_offset(tree, tp)? != Some(first_offset) {
        return check_stored_count(tree, tp);
    }
    Err(count_mismatch(tp, counted_as(), counted < expected))
}

/// The records `tp`'s index entries below `next` count.
fn count_below(tree: &sled::Tree, tp: &TopicPartition, next: i64) -> Result<u64> {
    let mut counted = 0u64;
    for item in tree.scan_prefix(keys::index_prefix(tp)) {
        let (_, e) = index_item(item)?;
        if e.first_offset >= next {
            break;
        }
        counted = counted.saturating_add(e.record_count as u64);
    }
    Ok(counted)
}

/// How many times [`check_stored_count`] counts again while truncation
/// steps keep moving the partition's first offset under it, before it
/// gives up and says nothing.
const STORED_COUNT_TRIES: usize = 4;

/// `tp`'s index entries below its summary as stored now (not the durable
/// view's) count as many records as that summary does. For a reader whose
/// own count a truncation made moot (it moved the partition's first offset
/// under the read): until 2026-12-05 the check was then skipped, and a
/// lost index entry beside a running `--retain` went unsaid (seen in
/// review). Both sides come from the tree: a truncation step changes the
/// index and the summary in one batch, and a write inserts its index
/// entries before its summary, at offsets at or past the summary's next
/// one, which the count stops at. A scan can still see half of a batch
/// applied meanwhile: a count that differs is taken only if the first
/// offset did not move while it was counted; else it counts again, and
/// gives up after [`STORED_COUNT_TRIES`] (a partition pruned faster than it
/// can be counted).
fn check_stored_count(tree: &sled::Tree, tp: &TopicPartition) -> Result<()> {
    for _ in 0..STORED_COUNT_TRIES {
        let Some(s) = stored_summary(tree, tp)? else {
            return Ok(());
        };
        let counted = count_below(tree, tp, s.next_offset)?;
        if counted == s.record_count {
            return Ok(());
        }
        // Only a truncation step can make a count below `s`'s next offset
        // differ from `s` (a write adds entries at or past it, which the
        // count stops at), and every step moves the first offset up: one
        // that stayed is damage, however many writes changed the summary
        // meanwhile (comparing the whole summary gave up on a partition
        // being written, the very case this is for; seen in review).
        if stored_first_offset(tree, tp)? == Some(s.first_offset) {
            return Err(count_mismatch(
                tp,
                format!(
                    "the index counts {counted} records below next offset {}, where the summary counts {} (counted again after a truncation)",
                    s.next_offset, s.record_count
                ),
                counted < s.record_count,
            ));
        }
    }
    Ok(())
}

/// `Corruption` at `tp`: its index counts other than its summary
/// (`counted` says how it was counted; `fewer`: fewer than the summary).
fn count_mismatch(tp: &TopicPartition, counted: String, fewer: bool) -> crate::error::Error {
    // More than the summary counts is a stray or repeated index entry, or
    // a summary that lags, not a missing entry (until the night of
    // 2026-12-04 both read "missing").
    let why = if fewer {
        "an index entry is missing"
    } else {
        "the index holds an entry the summary does not count"
    };
    crate::error::Error::corruption(
        crate::verify::partition_location(tp),
        crate::error::CorruptionKind::SummaryMismatch {
            detail: format!("{counted}: {why} (cairn verify lists where)"),
        },
    )
}

/// The first offset of `tp`'s summary as stored in the tree (not the
/// durable view: a truncation changes both in one batch with its index
/// removals), if there is one.
pub(crate) fn stored_first_offset(tree: &sled::Tree, tp: &TopicPartition) -> Result<Option<i64>> {
    Ok(stored_summary(tree, tp)?.map(|s| s.first_offset))
}

/// `tp`'s summary as stored in the tree, if there is one.
fn stored_summary(tree: &sled::Tree, tp: &TopicPartition) -> Result<Option<PartitionSummary>> {
    let key = keys::partition_key(tp);
    let Some(v) = tree.get(&key).map_err(store_err("read summary"))? else {
        return Ok(None);
    };
    let (_, s) = crate::offsets::PartitionSummary::decode(&key, &v)
        .map_err(|kind| crate::error::Error::corruption(summary_location(&key), kind))?;
    Ok(Some(s))
}

impl RecordIter {
    /// The partition's records are all read: check their count.
    fn finish(&mut self) -> Result<()> {
        self.done = true;
        let Some(c) = self.count.take() else {
            return Ok(());
        };
        judge_count(
            &self.tree,
            &self.tp,
            c.yielded,
            c.expected,
            c.first_offset,
            || {
                format!(
                    "read {} records below next offset {}, where the summary counts {}",
                    c.yielded, self.end, c.expected
                )
            },
        )
    }

    /// The entry expected next (starting at `expected`) is not where it
    /// was: a truncation by this engine deleted it (and what it recorded
    /// as deleted says so), so the read ends with an error naming it
    /// rather than step over it.
    fn check_not_pruned(&self, expected: i64) -> Result<()> {
        let through = crate::engine::lock_to_read(&self.pruned_through)
            .get(&self.tp)
            .copied();
        match through {
            Some(t) if t >= expected => Err(crate::error::Error::PrunedUnderRead {
                tp: self.tp.clone(),
                position: expected,
                pruned_through: t,
            }),
            _ => Ok(()),
        }
    }

    fn fill(&mut self) -> Result<()> {
        // A read of sled's pages that panics (sled 0.34.7 does on some
        // damage to its own files), injected: the commands that read a
        // stopped archive say it as an error.
        fail::fail_point!(FAILPOINT_READ_FILL);
        while self.buf.is_empty() {
            let mut entries = self
                .tree
                .range(self.next_key.as_slice()..=self.upper.as_slice());
            let found = entries.next().map(index_item).transpose()?;
            if let Some(expected) = self.next_first {
                if found.as_ref().map(|(_, e)| e.first_offset) != Some(expected) {
                    self.check_not_pruned(expected)?;
                }
            }
            let Some((k, e)) = found else {
                return self.finish();
            };
            if e.first_offset >= self.end {
                return self.finish();
            }
            // The entry after this one, looked up before this one is read:
            // if this one reads, that one was there too (a truncation
            // deletes a prefix of the entries), so a later lookup that
            // misses it knows it was deleted, not absent.
            let after = entries
                .next()
                .map(index_item)
                .transpose()?
                .map(|(_, e)| e.first_offset);
            drop(entries);
            let Some(entry) = read_entry_unless_deleted(&self.tree, &self.tp, &k, &e)? else {
                continue;
            };
            self.next_key = keys::index_key(&self.tp, e.last_offset.saturating_add(1));
            let (from, end) = (self.from, self.end);
            let before = self.buf.len();
            self.buf.extend(
                entry
                    .records
                    .into_iter()
                    .filter(|r| r.offset >= from && r.offset < end),
            );
            // Before any record is taken, a deleted entry is one the read
            // starts after, as if it began after the truncation: no gap.
            if self.buf.len() > before || self.next_first.is_some() {
                self.next_first = after.filter(|&f| f < end);
            }
            if let Some(c) = &mut self.count {
                c.yielded += (self.buf.len() - before) as u64;
            }
        }
        Ok(())
    }
}

/// Failpoint: each time a read fetches its next entry.
#[doc(hidden)]
pub const FAILPOINT_READ_FILL: &str = "reader::fill";

impl Iterator for RecordIter {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        if let Some(r) = self.buf.pop_front() {
            return Some(Ok(r));
        }
        if self.done {
            return None;
        }
        if let Err(e) = self.fill() {
            self.done = true;
            self.buf.clear();
            return Some(Err(e));
        }
        self.buf.pop_front().map(Ok)
    }
}

impl Drop for RecordIter {
    fn drop(&mut self) {
        let tree = self.tree.take();
        if self.store_failing.load(Ordering::SeqCst) || std::thread::panicking() {
            drop_failing_store(tree);
        } else {
            // The last handle of a sound store (its engine dropped first)
            // runs sled's own flush and fsync here, unwrapping the fsync:
            // a failure is caught, as the engine's own drop catches it, so
            // that no panic escapes this drop (until the night of
            // 2026-12-04 it did). The engine's open mark stayed for this
            // reader: the next open syncs the store first.
            drop_sound_store(
                tree,
                "the drop of a reader that outlived its engine: the open mark stays, and the next open syncs the store first",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::GUARDED_DROPS;
    use crate::{Engine, EngineConfig, Record, RecordBatch, TopicPartition};

    fn guarded_drops() -> u64 {
        GUARDED_DROPS.with(std::cell::Cell::get)
    }

    /// Opens a store holding one record and a reader of it, left unread.
    fn engine_and_reader(dir: &std::path::Path) -> (Engine, super::RecordIter) {
        let e = Engine::open(EngineConfig::new(dir)).unwrap();
        let tp = TopicPartition::new("t", 0);
        e.append(&[RecordBatch {
            tp: tp.clone(),
            records: vec![Record::with_value(0, "v")],
        }])
        .unwrap();
        let it = e.read(&tp, 0).unwrap();
        (e, it)
    }

    #[test]
    fn a_reader_outliving_a_poisoned_engine_drops_the_store_guarded() {
        let dir = tempfile::tempdir().unwrap();
        let (e, it) = engine_and_reader(dir.path());
        let _ = e.poison("fsync", "injected by the test".into());
        let before = guarded_drops();
        drop(e);
        assert_eq!(guarded_drops(), before + 1, "the engine's handles");
        // The reader holds the store's last handle: sled's own drop (which
        // fsyncs, and panics when that fails) runs now, guarded too.
        drop(it);
        assert_eq!(guarded_drops(), before + 2, "the reader's handle");
    }

    #[test]
    fn a_reader_of_a_healthy_engine_drops_the_store_as_usual() {
        let dir = tempfile::tempdir().unwrap();
        let (e, it) = engine_and_reader(dir.path());
        let before = guarded_drops();
        let mark = dir.path().join(crate::poisoned::OPEN_FILE);
        drop(e);
        // The reader holds sled's last handle, whose final flush runs at
        // its drop (a failure caught and logged there, heard of by no
        // sync): the open mark stays for that (until the night of
        // 2026-12-03 it went with the engine).
        assert!(mark.exists(), "the open mark outlives the engine");
        drop(it);
        assert_eq!(guarded_drops(), before);
        // And the store was shut down whole: it reopens with the record.
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        assert_eq!(e.durable_offset(&TopicPartition::new("t", 0)), Some(1));
        // Without a reader, a sound engine's drop removes its mark.
        drop(e);
        assert!(
            !mark.exists(),
            "the open mark of an engine no reader outlives"
        );
    }

    /// An open while a reader of a dropped engine still holds sled's files
    /// waits for them, and acts on no mark meanwhile: the open mark the
    /// dropped engine left stays its own (the same file), for the open
    /// that comes once the reader's drop has written sled's buffers. Until
    /// the night of 2026-12-04 the open replaced it, and synced and
    /// dropped the cache, before it waited.
    #[test]
    fn an_open_acts_on_no_mark_while_a_reader_holds_the_store() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let (e, it) = engine_and_reader(dir.path());
        let mark = dir.path().join(crate::poisoned::OPEN_FILE);
        drop(e);
        let ino = std::fs::metadata(&mark).unwrap().ino();
        match Engine::open(EngineConfig::new(dir.path())) {
            Err(crate::Error::Io { op, .. }) => {
                assert_eq!(op, "wait for sled's files to be let go")
            }
            Err(other) => panic!("expected the wait to run out, got {other}"),
            Ok(_) => panic!("opened while a reader held the store"),
        }
        assert_eq!(
            std::fs::metadata(&mark).unwrap().ino(),
            ino,
            "the dropped engine's open mark was replaced"
        );
        drop(it);
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        assert!(e.recovery_report().unclean_stop_cache_dropped);
        assert_eq!(e.durable_offset(&TopicPartition::new("t", 0)), Some(1));
    }
}
