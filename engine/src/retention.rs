//! Retention: delete whole entries below an offset.
//!
//! A deleted entry's frames are replaced by one tombstone frame at its first
//! LSN that records how many LSNs it stands for, merged with the adjacent
//! tombstones below and above. The LSN space therefore stays gap-free, and
//! verify can still prove that no frame went missing.
//!
//! # Invariants
//! - Only entries whose *last* offset is below the cut are deleted; a
//!   partially covered entry is kept whole.
//! - The durable next offset never moves backwards.
//! - Each step is one atomic sled batch, made durable before the next
//!   step of its partition begins; steps of many partitions in one
//!   [`TruncationPass`] are made durable together, at most a step's worth
//!   at a time, before the pass lets go of the truncation lock (or the
//!   engine is poisoned first: a failed sync, or a panic unwinding through
//!   the pass). A crash keeps a prefix of the steps.
//! - A step never deletes more records or bytes than the partition's
//!   summary counts, and a step that deletes every index entry deletes
//!   exactly what it counts: anything else is a damaged summary or lost or
//!   stray index entries, refused before anything is deleted. Taking the
//!   difference out of sight (leaving a summary that counts records no
//!   entry holds, which the next open refuses, or counting none where
//!   entries remain) would turn damage the store opens with into a store
//!   that does not open, or hide it.

use crate::engine::{store_err, Engine};
use crate::error::{CorruptionKind, Error, Location, Result};
use crate::frame::{self, FrameKind};
use crate::index::IndexEntry;
use crate::keys;
use crate::record::TopicPartition;
use crate::recovery::index_item;
use std::sync::atomic::{AtomicBool, Ordering};

/// What `truncate_before` removed (or `truncate_plan` would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TruncateReport {
    pub entries_deleted: u64,
    pub frames_deleted: u64,
    pub records_deleted: u64,
    pub payload_bytes_deleted: u64,
    /// The partition's first offset after the truncation (its next offset
    /// when nothing is left); `None` when the partition is not archived.
    pub first_offset_after: Option<i64>,
}

/// Entries a plan counts between two asks whether to go on
/// ([`Engine::truncate_plan_by_while`]): each is two frame reads.
pub const PLAN_ENTRIES_PER_ASK: usize = 256;

impl TruncateReport {
    /// Count `e` as deleted.
    fn count(&mut self, e: &IndexEntry) {
        self.entries_deleted += 1;
        self.frames_deleted += e.chunks as u64;
        self.records_deleted = self.records_deleted.saturating_add(e.record_count as u64);
        self.payload_bytes_deleted = self.payload_bytes_deleted.saturating_add(e.payload_bytes);
    }

    /// Add `other`'s counts (not its first offset) to these.
    pub fn add_counts(&mut self, other: &TruncateReport) {
        self.entries_deleted += other.entries_deleted;
        self.frames_deleted += other.frames_deleted;
        self.records_deleted = self.records_deleted.saturating_add(other.records_deleted);
        self.payload_bytes_deleted = self
            .payload_bytes_deleted
            .saturating_add(other.payload_bytes_deleted);
    }
}

/// Truncations of many partitions made durable together
/// ([`Engine::truncation_pass`]).
///
/// # Invariants
/// - Deletions not yet durable exist only while the pass holds the
///   truncation lock: a verify or a backup (which take it shared) never
///   sees an index or frames that no longer agree with the durable
///   summaries they read. The lock is let go only once the pass's steps
///   are durable ([`finish`](Self::finish), or its drop), or once a sync
///   failed, or once a panic unwinding through the pass poisoned the
///   engine, with nothing synced (the engine is then poisoned: a backup
///   refuses it, a verify says so, and no truncation goes on).
/// - A step followed by another step of the same partition is durable
///   before that one begins, and the pass makes its deletions durable
///   once they reach a step's bounds ([`TRUNCATE_ENTRIES_PER_STEP`],
///   [`TRUNCATE_FRAMES_PER_STEP`]): a crash loses at most that much
///   deletion, which a later pass does again. Each step is one atomic sled
///   batch, and sled's log keeps a prefix of them through a crash.
/// - The durable next offset of no partition moves, whatever the pass
///   deletes or a crash keeps of it.
#[must_use = "finish() makes the pass's deletions durable and lets go of the truncation lock"]
pub struct TruncationPass<'e> {
    engine: &'e Engine,
    /// The truncation lock, from the pass's first step until its steps
    /// are durable.
    held: Option<parking_lot::RwLockWriteGuard<'e, ()>>,
    /// The write sequence of the newest step not yet durable.
    unsynced_seq: Option<u64>,
    unsynced_entries: u64,
    unsynced_frames: u64,
    /// A sync of the pass failed (the engine is poisoned): whether its
    /// deletions are durable is unknown, and [`finish`](Self::finish)
    /// says so again, whatever was asked of the pass after it.
    sync_failed: bool,
}

impl TruncationPass<'_> {
    /// [`Engine::truncate_by_while`] of `tp` inside the pass: its steps
    /// are durable once the pass [`finish`](Self::finish)es (or sooner, by
    /// the bounds above). `go` is asked as there, also while the pass waits
    /// for the truncation lock, which it keeps after the truncation when
    /// deletions are not yet durable. A panic in `cut` or `go` (or sled's,
    /// inside the truncation) while deletions of the pass wait for its
    /// sync poisons the engine as the pass is dropped, with nothing synced.
    pub fn truncate_by_while(
        &mut self,
        tp: &TopicPartition,
        cut: impl FnOnce(&Engine) -> Result<i64>,
        go: impl FnMut() -> bool,
    ) -> Result<(i64, TruncateReport, bool)> {
        let truncated = self.truncate_in(tp, cut, go);
        if self.unsynced_seq.is_some() {
            crate::crashpoint::reached(crate::crashpoint::TRUNCATE_PASS_UNSYNCED);
        }
        // On every way out, an error's included: nothing of the pass waits
        // to be durable, so a verify or backup need not wait for the rest
        // of it. (Never between two steps of a partition: the next step's
        // entries must stay as its checks found them.)
        if self.unsynced_seq.is_none() {
            self.held = None;
        }
        truncated
    }

    fn truncate_in(
        &mut self,
        tp: &TopicPartition,
        cut: impl FnOnce(&Engine) -> Result<i64>,
        mut go: impl FnMut() -> bool,
    ) -> Result<(i64, TruncateReport, bool)> {
        let engine = self.engine;
        crate::record::validate_tp(tp)?;
        // Held across the pick and the steps: another truncation waits, and
        // so does a verify or backup running meanwhile (verify.rs, backup.rs).
        // A panic in the steps poisons the engine (the guard below, dropped
        // first), and one in `cut` has changed nothing, so a later holder
        // may take the lock whatever the panic left: the engine's own
        // checks refuse what it must not do.
        if self.held.is_none() {
            let mut long_wait =
                crate::truncation_lock::LongWait::starting(std::time::Instant::now());
            let truncating = engine.truncating.write_until(&mut || {
                if let Some(waited) = long_wait.due(std::time::Instant::now()) {
                    tracing::warn!(
                        partition = %tp,
                        waited_s = waited.as_secs(),
                        "a truncation (retention, or a prune) is waiting for the truncation lock, held by a verify, a backup or another prune of the archive: records due for deletion stay until it is let go, while archiving goes on"
                    );
                }
                !go()
            });
            let Some(truncating) = truncating else {
                // Told no while it waits (behind a backup, say): nothing was
                // picked or deleted; the cut reported is the partition's first
                // offset, below which nothing is.
                let first = engine.partition(tp).map_or(0, |p| p.first_offset);
                return Ok((first, TruncateReport::default(), false));
            };
            self.held = Some(truncating);
        }
        // Picked before the guard: a caller's `cut` that panics has written
        // nothing, and is no reason to poison the engine (unless earlier
        // deletions of the pass wait for its sync: its drop, unwinding,
        // poisons rather than flush a store sled may have left
        // half-changed).
        let offset = engine.durable_cut(tp, cut)?;
        // Asked before the first step as well (and before the guard: a
        // `go` that panics then has written nothing either): a truncation
        // that waited for the lock may have lost its reason meanwhile.
        if !go() {
            return Ok((offset, TruncateReport::default(), false));
        }
        let _poison_on_panic = crate::engine::PoisonOnPanic {
            engine,
            op: "truncation",
        };
        engine.check_emptying(tp, offset)?;
        let mut report = TruncateReport::default();
        let mut steps = 0u64;
        let finished = loop {
            if steps > 0 {
                crate::crashpoint::reached(crate::crashpoint::TRUNCATE_BETWEEN_STEPS);
                if !go() {
                    break false;
                }
            }
            let (step, more) = match engine.truncate_step(tp, offset) {
                Ok((step, more, seq)) => {
                    if let Some(seq) = seq {
                        self.unsynced_seq = Some(seq);
                        self.unsynced_entries += step.entries_deleted;
                        self.unsynced_frames += step.frames_deleted;
                    }
                    (step, more)
                }
                Err(e) => {
                    // The error is the caller's; what the steps before it
                    // deleted would otherwise go unsaid.
                    if report.entries_deleted > 0 {
                        tracing::warn!(
                            %tp,
                            offset,
                            steps,
                            records = report.records_deleted,
                            payload_bytes = report.payload_bytes_deleted,
                            first_offset_after = ?report.first_offset_after,
                            error = %e,
                            "truncation failed after its first steps had deleted records (those deletions stand, made durable with the pass)"
                        );
                    }
                    return Err(e);
                }
            };
            steps += 1;
            report.add_counts(&step);
            report.first_offset_after = step.first_offset_after;
            if more
                || self.unsynced_entries >= TRUNCATE_ENTRIES_PER_STEP as u64
                || self.unsynced_frames >= TRUNCATE_FRAMES_PER_STEP
            {
                // Made durable before this partition's next step, and
                // once the pass holds a step's worth (the bounds above).
                self.sync()?;
            }
            if !more {
                break true;
            }
        };
        if report.entries_deleted > 0 {
            tracing::debug!(%tp, offset, ?report, steps, finished, "retention truncated");
        }
        Ok((offset, report, finished))
    }

    /// Whether deletions of the pass wait to be made durable (by the
    /// pass's next sync: at a bound, before a partition's next step, or at
    /// [`finish`](Self::finish)). A caller that reports each partition's
    /// deletion holds its report back while this is so.
    /// After a failed sync, always: the deletions it was to make durable
    /// may not be, and no later sync of the pass tells.
    pub fn waiting(&self) -> bool {
        self.unsynced_seq.is_some() || self.sync_failed
    }

    /// Make the pass's deletions durable (one wait for all of them) and
    /// let go of the truncation lock. A failed fsync poisons the engine,
    /// as any sync's does, and is returned.
    pub fn finish(mut self) -> Result<()> {
        let synced = self.sync();
        self.held = None;
        synced
    }

    /// [`finish`](Self::finish) after `done`, the work done in the pass:
    /// its result, unless the sync fails (the engine poisoned), which
    /// outranks it (its error is then logged).
    pub fn finish_after<T, E>(self, done: std::result::Result<T, E>) -> std::result::Result<T, E>
    where
        E: From<Error> + std::fmt::Display,
    {
        self.finish_after_telling(done).0
    }

    /// [`finish_after`](Self::finish_after), and whether the pass's
    /// deletions are durable (its sync, and every one before it,
    /// succeeded): a caller that held back reports of them says them only
    /// then.
    pub fn finish_after_telling<T, E>(
        self,
        done: std::result::Result<T, E>,
    ) -> (std::result::Result<T, E>, bool)
    where
        E: From<Error> + std::fmt::Display,
    {
        // A sync that failed inside the pass ended the work with its error:
        // the finish says the same failure again, not a second one.
        let failed_inside = self.sync_failed;
        match (done, self.finish()) {
            (done, Ok(())) => (done, true),
            (Err(e), Err(_)) if failed_inside => (Err(e), false),
            (Ok(_), Err(s)) => (Err(s.into()), false),
            (Err(e), Err(s)) => {
                tracing::error!(error = %e, "a truncation failed, and making its pass's earlier deletions durable failed after it");
                (Err(s.into()), false)
            }
        }
    }

    /// The steps so far made durable. The lock is kept: between two steps
    /// of a partition it must be (the caller lets it go where it may).
    /// After a failed sync nothing is left to wait for: the engine is
    /// poisoned, and writes nothing more (so a drop after a failed
    /// `finish` neither waits nor reports again).
    fn sync(&mut self) -> Result<()> {
        let Some(seq) = self.unsynced_seq.take() else {
            // Said again after a failed sync (never retried: the engine is
            // poisoned, and this reads that), so that a finish after it
            // does not pass for deletions made durable (seen in review,
            // 2026-12-06: `cairn prune` then wrote the lines it held).
            return if self.sync_failed {
                self.engine.check_usable()
            } else {
                Ok(())
            };
        };
        self.unsynced_entries = 0;
        self.unsynced_frames = 0;
        self.engine
            .wait_seq(seq)
            .inspect_err(|_| self.sync_failed = true)
    }
}

impl Drop for TruncationPass<'_> {
    /// A pass dropped unfinished (an error returned through it) still
    /// makes its deletions durable before it lets go of the lock: released
    /// with deletions not durable, a verify or backup would read them
    /// beside the durable summaries. Not while unwinding (a panic in a
    /// caller's `cut` or `go`, or sled's, reading pages of damaged files):
    /// sled may be half-changed then, so the pass syncs nothing and the
    /// engine is poisoned before the lock goes, as for any panic while the
    /// engine is used (until 2026-12-06 the pass synced first, and its
    /// caller poisoned the engine after; found by an audit). Each step is
    /// one atomic batch, so the next open finds a prefix of the pass's
    /// deletions, as after a crash.
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Poisoned already by a step's own guard (a panic inside it):
            // said once, with its reason. Else the panic's message is the
            // one its thread prints (and a caller that catches it logs).
            if self.unsynced_seq.take().is_some() {
                let reason = "truncation pass panicked: deletions of the pass waited for its sync (the panic's message is logged beside this): not synced; the next open recovers from the disk";
                self.engine
                    .poison_while_unwinding("truncation pass", reason);
            }
        } else if self.unsynced_seq.is_some() {
            // Only what waits: a failed sync was reported where it failed.
            if let Err(e) = self.sync() {
                tracing::error!(error = %e, "a truncation pass dropped unfinished could not make its deletions durable");
            }
        }
        self.held = None;
    }
}

/// Entries deleted per durable step of [`Engine::truncate_before`]. Each
/// step is one atomic sled batch under the write lock, so appends wait for
/// at most one step, and a truncation of millions of entries needs memory
/// for one step, not for all of them.
pub const TRUNCATE_ENTRIES_PER_STEP: usize = 1024;

/// Failpoint: between a truncation's look at a partition's newest index
/// entry and its count of the whole index (`check_emptying`), where an
/// append can land (tests).
#[doc(hidden)]
pub const FAILPOINT_EMPTYING_COUNT: &str = "retention::emptying::count";

/// Frames per step, roughly: a step takes no further entry once it has
/// deleted this many (so it may pass it by one entry's frames, and the
/// tombstones it merges are not counted). Bounds the batch and the time the
/// write lock is held when entries are large (with 1 MiB entries of 64 KiB
/// frames, this is the bound that ends a step, at ~512 entries).
pub const TRUNCATE_FRAMES_PER_STEP: u64 = 8192;

impl Engine {
    /// Delete every durable entry of `tp` that lies entirely below `offset`,
    /// durably.
    ///
    /// Works in steps of at most [`TRUNCATE_ENTRIES_PER_STEP`] entries and
    /// [`TRUNCATE_FRAMES_PER_STEP`] frames. Each step is atomic and leaves a
    /// consistent archive (summary, index and tombstones agree), so a crash
    /// part-way keeps a prefix of the deletion: a rerun finishes it.
    pub fn truncate_before(&self, tp: &TopicPartition, offset: i64) -> Result<TruncateReport> {
        self.truncate_by(tp, |_| Ok(offset))
            .map(|(_, report)| report)
    }

    /// [`truncate_before`](Self::truncate_before) the offset `cut` picks,
    /// with no other truncation between the pick and the deletion; the
    /// offset is returned with the report. A cut worked out from what the
    /// partition holds (its retained bytes, its records' ages) must be
    /// taken this way where truncations may run concurrently (a running
    /// archive's pruner and a `cairn prune` it serves): one computed before
    /// another truncation deleted entries under it can delete records the
    /// rule keeps, or meet an entry that is gone.
    ///
    /// `cut` runs under the engine's truncation lock: it may read the
    /// engine (`offset_for_time`, `offset_for_retention`, `partitions`,
    /// `read`) but must not truncate, plan a truncation, verify or back up,
    /// which wait for that lock: the thread would wait on itself for ever.
    /// A `cut` that fails or panics deletes nothing; the panic goes on up.
    pub fn truncate_by(
        &self,
        tp: &TopicPartition,
        cut: impl FnOnce(&Engine) -> Result<i64>,
    ) -> Result<(i64, TruncateReport)> {
        self.truncate_by_while(tp, cut, || true)
            .map(|(offset, report, _)| (offset, report))
    }

    /// [`truncate_by`](Self::truncate_by), asking `go` before each step:
    /// once it says no, the truncation ends there, with the steps done
    /// (durable, the archive consistent), and the `bool` returned is
    /// false. For a truncation that a stop should not wait out (a large
    /// partition takes many steps, each fsynced). The first step is asked
    /// too, once the lock is taken: a truncation that waited for it behind
    /// a backup or a verify (minutes, or hours) may have lost its reason
    /// meanwhile, its client gone or its run stopping (until the night of
    /// 2026-12-04 it deleted a step whatever `go` said).
    ///
    /// One partition's truncation, durable on return: a [`TruncationPass`]
    /// with one partition in it.
    pub fn truncate_by_while(
        &self,
        tp: &TopicPartition,
        cut: impl FnOnce(&Engine) -> Result<i64>,
        go: impl FnMut() -> bool,
    ) -> Result<(i64, TruncateReport, bool)> {
        let mut pass = self.truncation_pass();
        let truncated = pass.truncate_by_while(tp, cut, go);
        pass.finish_after(truncated)
    }

    /// A pass that truncates many partitions and makes their deletions
    /// durable together: one fsync for many small truncations (a
    /// retention pass over thousands of partitions, each losing an entry,
    /// made an fsync per partition until 2026-12-06).
    pub fn truncation_pass(&self) -> TruncationPass<'_> {
        TruncationPass {
            engine: self,
            held: None,
            unsynced_seq: None,
            unsynced_entries: 0,
            unsynced_frames: 0,
            sync_failed: false,
        }
    }

    /// The truncation lock, shared (no truncation meanwhile), waited for
    /// until `stop` is set: then `Err(Interrupted)` naming `op`. A
    /// truncation holds it for all its steps (minutes on a large
    /// partition), and one may wait for it behind a backup stuck in a
    /// system call; a verify or backup waiting behind them must still end
    /// when its client goes or the run stops. Until the night of
    /// 2026-12-04 the wait ignored `stop`, and a live request kept its
    /// place among the four with it.
    pub(crate) fn no_truncation_unless(
        &self,
        stop: &AtomicBool,
        op: &'static str,
    ) -> Result<parking_lot::RwLockReadGuard<'_, ()>> {
        self.no_truncation_until(&mut || stop.load(Ordering::SeqCst), op)
    }

    /// [`no_truncation_unless`](Self::no_truncation_unless), asking
    /// `stopped` between the slices of its wait (truncation_lock.rs).
    pub(crate) fn no_truncation_until(
        &self,
        stopped: &mut dyn FnMut() -> bool,
        op: &'static str,
    ) -> Result<parking_lot::RwLockReadGuard<'_, ()>> {
        self.truncating
            .read_until(stopped)
            .ok_or(Error::Interrupted { op })
    }

    /// What `truncate_before(tp, offset)` would delete now, without
    /// deleting anything.
    pub fn truncate_plan(&self, tp: &TopicPartition, offset: i64) -> Result<TruncateReport> {
        self.truncate_plan_by(tp, |_| Ok(offset))
            .map(|(_, report)| report)
    }

    /// What [`truncate_by`](Self::truncate_by) would delete now, and the
    /// offset `cut` picks, without deleting anything (`cut` under the same
    /// lock and rules as for `truncate_by`). It checks the ends of
    /// every entry it counts as the truncation would
    /// (`check_entry_ends`), so a plan that
    /// succeeds is not refused by the deletion for damage already there.
    pub fn truncate_plan_by(
        &self,
        tp: &TopicPartition,
        cut: impl FnOnce(&Engine) -> Result<i64>,
    ) -> Result<(i64, TruncateReport)> {
        self.truncate_plan_by_while(tp, cut, || true)
            .map(|(offset, report, _)| (offset, report))
    }

    /// [`truncate_plan_by`](Self::truncate_plan_by), asking `go` every
    /// [`PLAN_ENTRIES_PER_ASK`] entries: once it says no, the plan ends
    /// there with what it counted (and no `first_offset_after`), and the
    /// `bool` returned is false; told no while it waits for a truncation
    /// to end, it ends `Interrupted`, nothing counted. A plan
    /// holds every truncation off while it scans (millions of entries on a
    /// large partition), so a stop must not wait it out.
    pub fn truncate_plan_by_while(
        &self,
        tp: &TopicPartition,
        cut: impl FnOnce(&Engine) -> Result<i64>,
        mut go: impl FnMut() -> bool,
    ) -> Result<(i64, TruncateReport, bool)> {
        crate::record::validate_tp(tp)?;
        // No truncation changes the index under the pick and the scan;
        // appends go on (they add entries above what is scanned), where
        // the write lock would stop every partition's appends for a scan
        // that may cover millions of entries.
        // Waited for until `go` says no (a prune's dry run whose client
        // went, behind a backup): then `Interrupted`, nothing counted.
        let _truncating = self.no_truncation_until(&mut || !go(), "prune")?;
        let offset = self.durable_cut(tp, cut)?;
        let mut report = TruncateReport::default();
        let Some(summary) = self.lock_to_look()?.partitions.get(tp).copied() else {
            return Ok((offset, report, true));
        };
        let mut first_kept = None;
        let mut pending_tomb = None;
        let mut last_counted = None;
        for (i, item) in self.tree.scan_prefix(keys::index_prefix(tp)).enumerate() {
            let (_, e) = index_item(item)?;
            // Before the ask: a plan that reached the cut is whole.
            if e.last_offset >= offset {
                first_kept = Some(e.first_offset);
                break;
            }
            if i % PLAN_ENTRIES_PER_ASK == PLAN_ENTRIES_PER_ASK - 1 && !go() {
                // What is counted so far; where the cut would leave the
                // log is not known yet.
                return Ok((offset, report, false));
            }
            self.check_entry_ends(tp, &e)?;
            last_counted = Some(e);
            // The frames beside each deleted run, read as the deletion
            // reads them to merge tombstones: damage there refuses the plan
            // as it would the deletion.
            pending_tomb = Some(self.tombstone_for(pending_tomb, &e, |_| {})?);
            report.count(&e);
        }
        if let Some(e) = last_counted {
            self.check_last_deleted(tp, &e)?;
        }
        if report.entries_deleted > 0 {
            check_counts(tp, &summary, &report, first_kept.is_none())?;
        }
        report.first_offset_after = Some(if report.entries_deleted == 0 {
            summary.first_offset
        } else {
            first_kept.unwrap_or(summary.next_offset)
        });
        Ok((offset, report, true))
    }

    /// Before the first step of a truncation that empties `tp` (its cut
    /// past the newest index entry): the whole index counted against the
    /// summary, as a plan counts it, so that a lost index entry refuses the
    /// truncation before any step deletes around it. The emptying step
    /// refuses it too, but only after the steps before it (1,024 entries
    /// each) have deleted the rest, leaving the lost entry's frames with
    /// no index entry (seen in review, the night of 2026-12-04).
    ///
    /// The summary is read under the write lock, the index after it
    /// without: an append in between (a live run's) adds entries from the
    /// summary's next offset on, which it does not count, so the count
    /// stops there, as a reader's index count does (until 2026-12-05 they
    /// were counted, and a healthy partition still being written was
    /// refused as damaged, stopping a run's `--retain` pass; seen in
    /// review).
    fn check_emptying(&self, tp: &TopicPartition, offset: i64) -> Result<()> {
        let Some(summary) = self.lock_to_look()?.partitions.get(tp).copied() else {
            return Ok(());
        };
        let prefix = keys::index_prefix(tp);
        let newest = match self.tree.scan_prefix(&prefix).next_back() {
            Some(item) => index_item(item)?.1,
            None => return Ok(()),
        };
        if newest.last_offset >= offset {
            return Ok(());
        }
        fail::fail_point!(FAILPOINT_EMPTYING_COUNT);
        let mut all = TruncateReport::default();
        for item in self.tree.scan_prefix(&prefix) {
            let e = index_item(item)?.1;
            if e.first_offset >= summary.next_offset {
                break;
            }
            all.count(&e);
        }
        check_counts(tp, &summary, &all, true)
    }

    /// The offset `cut` picks, clamped to what is durable: an entry written
    /// but not yet fsynced (a put under `interval:MS`) is left to a later
    /// cut, as the age and size cuts leave it. The plan and the deletion
    /// both cut here, so a dry run says what a prune would do.
    fn durable_cut(
        &self,
        tp: &TopicPartition,
        cut: impl FnOnce(&Engine) -> Result<i64>,
    ) -> Result<i64> {
        Ok(cut(self)?.min(self.durable_offset(tp).unwrap_or(0)))
    }

    /// One step: delete the lowest entries below `offset`, up to the
    /// step's bounds, in one sled batch. Also says whether entries below
    /// `offset` remain, and the write sequence to wait for to make the step
    /// durable (none when it deleted nothing). The caller holds the
    /// truncation lock until then ([`TruncationPass`]).
    fn truncate_step(
        &self,
        tp: &TopicPartition,
        offset: i64,
    ) -> Result<(TruncateReport, bool, Option<u64>)> {
        self.check_step_entries(tp, offset)?;
        let mut report = TruncateReport::default();
        let mut more = false;
        let seq = {
            let mut w = self.lock_write()?;
            // Dropped before the lock: a panic below poisons the engine
            // before a thread waiting on the lock can take it.
            let _poison_on_panic = crate::engine::PoisonOnPanic {
                engine: self,
                op: "truncation",
            };
            let Some(mut summary) = w.partitions.get(tp).copied() else {
                return Ok((report, false, None));
            };
            report.first_offset_after = Some(summary.first_offset);
            let mut batch = sled::Batch::default();
            let mut pending_tomb: Option<(u64, u64)> = None;
            let mut new_first = None;
            // The last offset of the last entry deleted (entries in order).
            let mut deleted_through = None;
            for item in self.tree.scan_prefix(keys::index_prefix(tp)) {
                let (k, e) = index_item(item)?;
                // The first entry kept by this step, whether the cut or the
                // step's bounds stopped it, is the partition's new first.
                if e.last_offset >= offset {
                    new_first = Some(e.first_offset);
                    break;
                }
                if report.entries_deleted == TRUNCATE_ENTRIES_PER_STEP as u64
                    || report.frames_deleted >= TRUNCATE_FRAMES_PER_STEP
                {
                    new_first = Some(e.first_offset);
                    more = true;
                    break;
                }
                batch.remove(k.to_vec());
                for lsn in e.lsn..e.lsn + e.chunks as u64 {
                    batch.remove(&keys::wal_key(lsn));
                }
                let (tomb_lsn, span) = self.tombstone_for(pending_tomb, &e, |absorbed| {
                    batch.remove(&keys::wal_key(absorbed));
                })?;
                let body = frame::encode_tombstone(span);
                batch.insert(
                    &keys::wal_key(tomb_lsn),
                    frame::encode(tomb_lsn, FrameKind::Tombstone, 0, &body),
                );
                pending_tomb = Some((tomb_lsn, span));
                report.count(&e);
                deleted_through = Some(e.last_offset);
            }
            if report.entries_deleted == 0 {
                return Ok((report, false, None));
            }
            check_counts(tp, &summary, &report, new_first.is_none())?;
            // Before the deletion is applied: a reader that finds these
            // records gone then finds this too.
            if let Some(through) = deleted_through {
                let mut p = crate::engine::lock_to_read(&self.pruned_through);
                let t = p.entry(tp.clone()).or_insert(through);
                *t = (*t).max(through);
            }
            summary.first_offset = new_first.unwrap_or(summary.next_offset);
            report.first_offset_after = Some(summary.first_offset);
            summary.record_count = summary.record_count.saturating_sub(report.records_deleted);
            summary.payload_bytes = summary
                .payload_bytes
                .saturating_sub(report.payload_bytes_deleted);
            // Emptied: the floor keeps its next offset (no index entry
            // says it any more). With records left, the floor stays: the
            // newest entry still says it, and a floor at the next offset
            // above an entry is an advance's mark (`advance_partitions`),
            // which would excuse newest entries lost after this pass from
            // the open's check. (Builds before format 4 raised it at every
            // pass.)
            if new_first.is_none() {
                summary.next_offset_floor = summary.next_offset;
            }
            let (k, v) = summary.encode(tp);
            batch.insert(k, v);
            let seq = self.apply_batch_locked(&mut w, batch)?;
            w.partitions.insert(tp.clone(), summary);
            seq
        };
        Ok((report, more, Some(seq)))
    }

    /// Check the first and last frames of an entry about to be deleted:
    /// present, whole (their CRC), records frames, flagged as the entry's
    /// two ends (the first continues nothing and, if the entry has more
    /// frames, is continued; the last is continued by nothing), and the
    /// first starting with the entry's partition, record count and first
    /// offset. An index entry pointing at the wrong frames (damage under a
    /// valid CRC) must not delete another entry's. The frames between must
    /// not be another entry's first frame (or any whole frame but a middle
    /// chunk: a count too large by a whole entry has the right ends), so
    /// each that reads whole is checked; one that does not (missing, or
    /// failing its CRC) is damage among records being deleted, which loses
    /// nothing, and is deleted with them.
    fn check_entry_ends(&self, tp: &TopicPartition, e: &IndexEntry) -> Result<()> {
        let last = e.lsn + u64::from(e.chunks) - 1;
        // The frame at `lsn` is not the entry's `role` (its first, ...).
        let mismatch = |lsn, role: &str| {
            Error::corruption(
                Location::Wal { lsn },
                CorruptionKind::IndexMismatch {
                    detail: format!(
                        "the index entry of {tp} offsets {}..={} ({} frames from lsn {}) names this frame as {role}, and it is not",
                        e.first_offset, e.last_offset, e.chunks, e.lsn
                    ),
                },
            )
        };
        // (lsn, which end, flags it must not have, a flag it must have.)
        // One frame is both ends, read once.
        let ends: &[(u64, &str, u16, Option<u16>)] = if e.chunks == 1 {
            &[(
                e.lsn,
                "only frame",
                frame::FLAG_CONT | frame::FLAG_MORE,
                None,
            )]
        } else {
            &[
                (e.lsn, "first", frame::FLAG_CONT, Some(frame::FLAG_MORE)),
                (last, "last", frame::FLAG_MORE, Some(frame::FLAG_CONT)),
            ]
        };
        for &(lsn, end, clear, set) in ends {
            let corrupt = |kind| Error::corruption(Location::Wal { lsn }, kind);
            let v = self
                .tree
                .get(keys::wal_key(lsn))
                .map_err(store_err("read frame"))?
                .filter(|v| !crate::slots::is_slot(v))
                .ok_or_else(|| corrupt(CorruptionKind::MissingFrame))?;
            let f = frame::decode(lsn, &v).map_err(corrupt)?;
            let flags_ok = f.flags & clear == 0 && set.is_none_or(|s| f.flags & s != 0);
            // The first frame also starts with the entry's partition, record
            // count and first offset: another whole entry of the same size
            // has the right flags, and not these.
            let start_ok = lsn != e.lsn
                || crate::body::decode_start(f.body).is_ok_and(|(t, count, first)| {
                    t == *tp && count == e.record_count && first == e.first_offset
                });
            if f.kind != FrameKind::Records || !flags_ok || !start_ok {
                return Err(mismatch(lsn, &format!("its {end}")));
            }
        }
        let middle = frame::FLAG_CONT | frame::FLAG_MORE;
        for lsn in e.lsn + 1..last {
            let Some(v) = self
                .tree
                .get(keys::wal_key(lsn))
                .map_err(store_err("read frame"))?
            else {
                continue;
            };
            let Ok(f) = frame::decode(lsn, &v) else {
                continue;
            };
            if f.kind != FrameKind::Records || f.flags & middle != middle {
                return Err(mismatch(lsn, "one of its middle chunks"));
            }
        }
        Ok(())
    }

    /// Check, before a step takes the write lock, the ends of every entry
    /// it will delete ([`check_entry_ends`](Self::check_entry_ends)): reads
    /// of old frames, kept out of the lock appends wait on. The caller holds
    /// `truncating`, so no other truncation changes these entries, and
    /// appends add none below the cut. The same bounds as the step's.
    fn check_step_entries(&self, tp: &TopicPartition, offset: i64) -> Result<()> {
        let (mut entries, mut frames) = (0usize, 0u64);
        let mut last = None;
        for item in self.tree.scan_prefix(keys::index_prefix(tp)) {
            let (_, e) = index_item(item)?;
            if e.last_offset >= offset {
                break;
            }
            if entries == TRUNCATE_ENTRIES_PER_STEP || frames >= TRUNCATE_FRAMES_PER_STEP {
                // A later step deletes this one: the deletion does not end
                // here.
                last = None;
                break;
            }
            self.check_entry_ends(tp, &e)?;
            last = Some(e);
            entries += 1;
            frames += u64::from(e.chunks);
        }
        if let Some(e) = last {
            self.check_last_deleted(tp, &e)?;
        }
        Ok(())
    }

    /// The last entry a deletion takes before the cut (or the partition's
    /// end) is read whole and checked against its index entry: a damaged
    /// index entry (under a valid CRC) whose last offset or newest
    /// timestamp reads low would have records at or above the cut deleted
    /// with it, which [`check_entry_ends`](Self::check_entry_ends) cannot
    /// see (the first frame holds the first offset, not the last). An
    /// entry below it is bounded by the next one's first offset, checked
    /// against its frame, and is deleted whole either way. One entry read
    /// (up to 32 MiB) per step; its damage refuses the deletion, named.
    fn check_last_deleted(&self, tp: &TopicPartition, e: &IndexEntry) -> Result<()> {
        crate::entry::read_entry(&self.tree, tp, e).map(|_| ())
    }

    /// The tombstone that deleting `e` leaves, as (lsn, span): `pending`
    /// (this step's last, not yet written) or the tombstone stored right
    /// below `e` grown by `e`'s frames, else a new one at `e`; then grown by
    /// each tombstone right above it (another partition's entries, deleted
    /// earlier), whose LSN is given to `absorbed` (its frame goes). Merging
    /// both ways leaves one tombstone per deleted run of the log, so the
    /// leaves sled kept for the run empty out and their old versions, which
    /// still hold the deleted frames' bytes, can be reclaimed
    /// (docs/OPERATIONS.md, disk space).
    fn tombstone_for(
        &self,
        pending: Option<(u64, u64)>,
        e: &IndexEntry,
        mut absorbed: impl FnMut(u64),
    ) -> Result<(u64, u64)> {
        let chunks = u64::from(e.chunks);
        let (tomb_lsn, mut span) = match pending {
            Some((l, s)) if l + s == e.lsn => (l, s + chunks),
            Some(_) | None => match self.tombstone_before(e.lsn)? {
                Some((l, s)) if l + s == e.lsn => (l, s + chunks),
                _ => (e.lsn, chunks),
            },
        };
        while let Some(above) = self.tombstone_at(tomb_lsn + span)? {
            absorbed(tomb_lsn + span);
            span += above;
        }
        Ok((tomb_lsn, span))
    }

    /// The span of the tombstone frame stored at `lsn`, if that is one.
    fn tombstone_at(&self, lsn: u64) -> Result<Option<u64>> {
        let v = self
            .tree
            .get(keys::wal_key(lsn))
            .map_err(store_err("read frame"))?;
        match v {
            // A reserved slot (slots.rs) lies above the last frame.
            Some(v) if crate::slots::is_slot(&v) => Ok(None),
            Some(v) => tombstone_span(lsn, &v),
            None => Ok(None),
        }
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
        // The key below the log's first frame is another kind's.
        if k.first() != Some(&keys::PREFIX_WAL) {
            return Ok(None);
        }
        // A log key that does not parse is damage, not "no tombstone".
        let l = keys::parse_wal_key(&k).map_err(|kind| {
            Error::corruption(
                Location::Key {
                    key_hex: crate::recovery::hex(&k),
                },
                kind,
            )
        })?;
        Ok(tombstone_span(l, &v)?.map(|span| (l, span)))
    }
}

/// The span of the frame `value` stored at `lsn` if it is a tombstone,
/// `None` if it is a records frame; a frame that does not decode, or a
/// span running past the largest LSN, is `Corruption` at `lsn`. The
/// tombstone may lie below the checkpoint, where no open re-read it: its
/// span is checked here, so that the merges' sums (`lsn + span`) stay
/// within [`crate::keys::LSN_MAX`] and cannot wrap.
fn tombstone_span(lsn: u64, value: &[u8]) -> Result<Option<u64>> {
    let corrupt = |kind| Error::corruption(Location::Wal { lsn }, kind);
    let f = frame::decode(lsn, value).map_err(corrupt)?;
    if f.kind != FrameKind::Tombstone {
        return Ok(None);
    }
    let next = f.lsn_after(lsn).map_err(corrupt)?;
    Ok(Some(next - lsn))
}

/// Refuses, as `SummaryMismatch` at `tp`, a deletion that `summary` does
/// not bear out: more records or payload bytes than it counts, or, when
/// every index entry goes (`emptied`), other than exactly what it counts.
/// See the module's invariants.
fn check_counts(
    tp: &TopicPartition,
    summary: &crate::offsets::PartitionSummary,
    report: &TruncateReport,
    emptied: bool,
) -> Result<()> {
    let over = report.records_deleted > summary.record_count
        || report.payload_bytes_deleted > summary.payload_bytes;
    let left = emptied
        && (report.records_deleted != summary.record_count
            || report.payload_bytes_deleted != summary.payload_bytes);
    if !over && !left {
        return Ok(());
    }
    let what = if over {
        "more than it counts: the summary is damaged, or stray index entries count records twice"
    } else {
        "leaving the summary counting records no index entry holds: the summary is damaged, or index entries are lost"
    };
    Err(Error::corruption(
        crate::verify::partition_location(tp),
        CorruptionKind::SummaryMismatch {
            detail: format!(
                "deleting the index entries {} would delete {} records of {} payload bytes, where the summary counts {} records of {} bytes: {what} (cairn verify lists where); nothing was deleted by this step",
                if emptied { "of the whole partition" } else { "below the cut" },
                report.records_deleted,
                report.payload_bytes_deleted,
                summary.record_count,
                summary.payload_bytes,
            ),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzzing::batch;
    use crate::EngineConfig;

    /// Whether a verify or a backup could take the truncation lock now.
    fn lock_free(e: &Engine) -> bool {
        e.no_truncation_until(&mut || true, "test").is_ok()
    }

    /// A pass over many partitions, each losing an entry, makes one fsync
    /// for them all; it holds the truncation lock while any of its
    /// deletions waits to be durable, so a verify or backup never reads
    /// an index that disagrees with the durable summaries; once finished,
    /// the archive is clean and a reopen finds every deletion.
    #[test]
    fn a_pass_makes_many_partitions_deletions_durable_with_one_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let tps: Vec<_> = (0..64).map(|p| TopicPartition::new("t", p)).collect();
        for tp in &tps {
            e.append(&[batch(tp, 0..2, 10)]).unwrap();
            e.append(&[batch(tp, 2..4, 10)]).unwrap();
        }
        let before = e.stats().fsyncs;
        let mut pass = e.truncation_pass();
        assert!(lock_free(&e), "nothing taken before the first truncation");
        for tp in &tps {
            let (offset, r, finished) = pass.truncate_by_while(tp, |_| Ok(2), || true).unwrap();
            assert_eq!((offset, r.records_deleted, finished), (2, 2, true));
            // Asked of two only: a held lock answers after a wait slice.
            if tp == &tps[0] || tp == &tps[63] {
                assert!(
                    !lock_free(&e),
                    "a deletion not yet durable: the lock is held"
                );
            }
        }
        assert_eq!(e.stats().fsyncs, before, "nothing synced before the finish");
        // The durable view moves at a sync: none of it durable yet.
        assert_eq!(e.partition(&tps[0]).unwrap().first_offset, 0);
        pass.finish().unwrap();
        assert_eq!(e.stats().fsyncs, before + 1, "one fsync for the pass");
        assert!(lock_free(&e));
        for tp in &tps {
            assert_eq!(e.partition(tp).unwrap().first_offset, 2, "durable: {tp}");
        }
        assert!(e.verify().unwrap().is_clean());
        e.close().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        for tp in &tps {
            let p = e.partition(tp).unwrap();
            assert_eq!((p.first_offset, p.next_offset, p.record_count), (2, 4, 2));
        }
    }

    /// A truncation that deletes nothing keeps no lock; one that brings
    /// the pass's unsynced deletions to a step's bound is made durable at
    /// once, and lets go; a pass dropped unfinished makes its deletions
    /// durable too.
    #[test]
    fn a_pass_syncs_at_a_steps_bound_and_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let (a, b, c) = (
            TopicPartition::new("a", 0),
            TopicPartition::new("b", 0),
            TopicPartition::new("c", 0),
        );
        let bound = TRUNCATE_ENTRIES_PER_STEP as i64;
        // One record an entry: `bound` entries below the cut, one above.
        for o in 0..=bound {
            e.write(&[batch(&b, [o], 10)]).unwrap();
        }
        e.append(&[batch(&a, 0..2, 10)]).unwrap();
        e.append(&[batch(&c, 0..2, 10)]).unwrap();
        e.append(&[batch(&c, 2..4, 10)]).unwrap();

        let before = e.stats().fsyncs;
        let mut pass = e.truncation_pass();
        let (_, r, _) = pass.truncate_by_while(&a, |_| Ok(1), || true).unwrap();
        assert_eq!(r.entries_deleted, 0);
        assert!(lock_free(&e), "nothing waits to be durable");
        let (_, r, _) = pass.truncate_by_while(&b, |_| Ok(bound), || true).unwrap();
        assert_eq!(r.entries_deleted, bound as u64);
        assert_eq!(e.stats().fsyncs, before + 1, "synced at the bound");
        assert!(lock_free(&e));
        let (_, r, _) = pass.truncate_by_while(&c, |_| Ok(2), || true).unwrap();
        assert_eq!(r.entries_deleted, 1);
        assert!(!lock_free(&e));
        drop(pass);
        assert_eq!(e.stats().fsyncs, before + 2, "synced as it was dropped");
        assert!(lock_free(&e));
        assert!(e.verify().unwrap().is_clean());
        e.close().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        assert_eq!(e.partition(&b).unwrap().first_offset, bound);
        assert_eq!(e.partition(&c).unwrap().first_offset, 2);
    }

    /// A partition whose truncation takes several steps keeps the lock
    /// between them (each step's checks read entries no other truncation
    /// may change, and a verify or backup must not see a step not yet
    /// durable); deletions of several partitions that reach a step's bound
    /// together are made durable then.
    #[test]
    fn a_pass_holds_the_lock_between_steps_and_sums_the_bound_over_partitions() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let step = TRUNCATE_ENTRIES_PER_STEP as i64;
        let long = TopicPartition::new("long", 0);
        for o in 0..step * 2 + 1 {
            e.write(&[batch(&long, [o], 10)]).unwrap();
        }
        // Three partitions of 401 entries, 400 of each deleted: two make
        // less than a step's bound, three more.
        let three: Vec<_> = (0..3).map(|p| TopicPartition::new("three", p)).collect();
        for tp in &three {
            for o in 0..401 {
                e.write(&[batch(tp, [o], 10)]).unwrap();
            }
        }
        e.sync().unwrap();

        let mut pass = e.truncation_pass();
        let mut asks = 0;
        let (_, r, finished) = pass
            .truncate_by_while(
                &long,
                |_| Ok(step * 2),
                || {
                    asks += 1;
                    // Asked before the first step and then between steps.
                    if asks > 1 {
                        assert!(!lock_free(&e), "let go between two steps");
                    }
                    true
                },
            )
            .unwrap();
        assert!(finished);
        assert_eq!(r.entries_deleted, 2 * step as u64);
        assert_eq!(asks, 2, "two steps");
        assert!(lock_free(&e), "both steps durable: let go");

        let before = e.stats().fsyncs;
        for (i, tp) in three.iter().enumerate() {
            let (_, r, _) = pass.truncate_by_while(tp, |_| Ok(400), || true).unwrap();
            assert_eq!(r.entries_deleted, 400);
            if i < 2 {
                assert_eq!(
                    e.stats().fsyncs,
                    before,
                    "800 entries wait: below the bound"
                );
                assert!(!lock_free(&e));
            }
        }
        assert_eq!(
            e.stats().fsyncs,
            before + 1,
            "1,200 entries: synced at the bound"
        );
        assert!(lock_free(&e));
        for tp in &three {
            assert_eq!(e.partition(tp).unwrap().first_offset, 400, "durable: {tp}");
        }
        pass.finish().unwrap();
        assert_eq!(e.stats().fsyncs, before + 1, "nothing left for the finish");
        assert!(e.verify().unwrap().is_clean());
    }

    /// A truncation that ends before its first step (its cut fails, or
    /// `go` says no) keeps no lock when nothing of the pass waits; with
    /// an earlier partition's deletion waiting, it keeps it.
    #[test]
    fn a_pass_lets_go_on_early_exits_when_nothing_waits() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let (a, b) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
        for tp in [&a, &b] {
            e.append(&[batch(tp, 0..2, 10)]).unwrap();
            e.append(&[batch(tp, 2..4, 10)]).unwrap();
        }
        let mut pass = e.truncation_pass();
        let failed =
            pass.truncate_by_while(&a, |_| Err(Error::Interrupted { op: "test" }), || true);
        assert!(failed.is_err());
        assert!(lock_free(&e), "a failed cut, nothing waiting");
        let (_, r, finished) = pass.truncate_by_while(&a, |_| Ok(2), || false).unwrap();
        assert_eq!((r.entries_deleted, finished), (0, false));
        assert!(lock_free(&e), "told no, nothing waiting");
        pass.truncate_by_while(&a, |_| Ok(2), || true).unwrap();
        let failed =
            pass.truncate_by_while(&b, |_| Err(Error::Interrupted { op: "test" }), || true);
        assert!(failed.is_err());
        assert!(!lock_free(&e), "a's deletion waits: kept");
        pass.finish().unwrap();
        assert!(lock_free(&e));
        assert_eq!(e.partition(&a).unwrap().first_offset, 2);
    }
}
