//! Full verification: every frame, every index entry, every summary.
//!
//! Unlike recovery this reads the whole store, reports every problem it finds
//! by location instead of stopping at the first, and writes nothing. It runs
//! on an open engine (`Engine::verify`) or on a store that will not open
//! (`verify_store`), so a damaged archive can still be diagnosed.
//!
//! # Invariants
//! - Never panics and never allocates by an unchecked length, whatever bytes
//!   are in the store. Only sled errors (I/O), or a stop asked for through
//!   `verify_unless`, end it early.
//! - Memory does not grow with the archive's records or entries: a live
//!   verify runs inside `cairn run`, on archives of any size. The log scan
//!   looks each entry's index entry up as it goes and keeps counts per
//!   partition (so it grows with the partitions, as the engine's own
//!   summaries do: a store forged with an index entry of a new topic each
//!   makes it grow with those entries); what it keeps besides is bounded by
//!   [`PROBLEMS_LISTED_MAX`]. Only a partition
//!   whose counts say its index holds entries the log did not bear out has
//!   its index read a second time, with the log at each entry, to name them.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::body::decode_entry;
use crate::config::EngineConfig;
use crate::engine::{lock_to_read, store_err, Engine};
use crate::entry::{Assembler, Fed};
use crate::error::{CorruptionKind, Error, Location, Result};
use crate::frame::{self, FrameKind};
use crate::index::IndexEntry;
use crate::keys;
use crate::lock::DirLock;
use crate::meta;
use crate::offsets::PartitionSummary;
use crate::record::TopicPartition;
use crate::recovery::{hex, index_location, summary_location};
use crate::slots;

/// Failpoint: in a verify, after the log scan and before the index scan,
/// where appends racing a live verify are most likely to confuse it.
#[doc(hidden)]
pub const FAILPOINT_VERIFY_AFTER_LOG: &str = "verify::after_log";

/// Problems listed in full; more are only counted.
pub const PROBLEMS_LISTED_MAX: usize = 1000;

/// How problems of two kinds an unclean stop can leave are worded (and
/// told apart, in [`Tail::repairs`]).
const NO_INDEX_ENTRY: &str = "has no index entry";
const TORN_TAIL: &str = "(torn tail)";

/// One problem found by verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub location: Location,
    pub kind: CorruptionKind,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location, self.kind)
    }
}

/// What verify read and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub frames: u64,
    pub tombstones: u64,
    pub entries: u64,
    pub records: u64,
    pub payload_bytes: u64,
    pub index_entries: u64,
    pub partitions: u64,
    pub problems: Vec<Problem>,
    /// Problems beyond `PROBLEMS_LISTED_MAX`, counted but not listed.
    pub problems_unlisted: u64,
    /// What the verify saw that is no damage but limits or explains it (a
    /// store without its watermark, a poison mark): said, not counted.
    pub notes: Vec<String>,
    /// The error reading the store that stopped the check part-way, after
    /// the problems listed were found (also in `notes`): what lies after
    /// it was not checked. A backup's verify of its copy fails on it.
    pub stopped_at_error: Option<String>,
    /// A verify of a stopped store ([`verify_store`]): its last flush and
    /// fdatasync of the store failed (or sled's own shutdown panicked on
    /// its flush), never retried. What was read was checked; what sled
    /// wrote as it opened and was read may not be on the disk, and the
    /// disk may be failing. The command stops non-zero on it, as on any
    /// failed fsync (since 2026-12-05; before, a clean report exited 0 and
    /// only a WARN said so).
    pub closing_sync_failed: Option<String>,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.problems_unlisted == 0
    }

    pub fn problem_count(&self) -> u64 {
        self.problems.len() as u64 + self.problems_unlisted
    }

    fn add(&mut self, location: Location, kind: CorruptionKind) {
        if self.problems.len() < PROBLEMS_LISTED_MAX {
            self.problems.push(Problem { location, kind });
        } else {
            self.problems_unlisted += 1;
        }
    }
}

impl Engine {
    /// Re-read and check the whole store, also while it is being written.
    ///
    /// Appends may go on meanwhile: verify checks what was durable when
    /// it started (every frame below the durable log end then, with their
    /// index entries), against the durable partition summaries of that
    /// moment, as export and backup read. What is written after, or written
    /// and not yet synced, is left for the next verify: until 2026-12-07 it
    /// checked and counted what was written (the write state's end and
    /// summaries), so a live verify under `--commit interval:MS` counted
    /// records no `status` showed, and that a failed fsync would take (an
    /// audit). Retention waits: `truncate_before` deletes
    /// frames, index entries and summaries in steps, and a scan that saw
    /// half of a step would report its other half as damage.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_unless(&AtomicBool::new(false))
    }

    /// [`verify`](Self::verify), given up with `Error::Interrupted` soon
    /// after `stop` is set (a server shutting down does not wait for a
    /// verify of the whole store).
    pub fn verify_unless(&self, stop: &AtomicBool) -> Result<VerifyReport> {
        let _no_truncation = self.no_truncation_unless(stop, "verify")?;
        // Read even after a panic under the lock (it poisoned the engine):
        // the checks a failed write cannot upset still run.
        let now = |tp: &TopicPartition| lock_to_read(&self.write).partitions.get(tp).copied();
        let next_lsn_now = || lock_to_read(&self.write).next_lsn;
        // A write that failed part-way may have stored what the engine's
        // own state does not show: only the checks that allow for that are
        // made (a reopen's verify does all).
        let poisoned = self.is_poisoned();
        let (lsn_end, partitions) = if poisoned {
            // The durable view may lag the tree: a truncation pass whose
            // sync failed (or that panicked) let go of the lock with its
            // deletions stored and not in the view, which would read as
            // summaries that do not match their index (seen in review,
            // 2026-12-07). The write state has them.
            let w = lock_to_read(&self.write);
            (w.next_lsn, (*w.partitions).clone())
        } else {
            // Durable, hence written and complete: the durable view's end
            // is at most the write state's, and on an append's boundary.
            // No truncation waits to be synced while the lock is held
            // (retention.rs, `TruncationPass`): the tree agrees with it.
            // The view's LSN is the last durable frame's.
            let view = self.durable_view();
            (view.lsn + 1, view.partitions.clone())
        };
        let bound = Snapshot {
            lsn_end,
            partitions,
            now: &now,
            next_lsn_now: &next_lsn_now,
            poisoned,
        };
        let mut r = verify_tree(&self.tree, Some(&bound), stop)?;
        // Said, so that a clean report is not read as a whole check.
        if bound.poisoned {
            r.notes.push(
                "the engine is poisoned (a write or sync failed): what was written is checked and counted, durable or not, and the checks a failed write could upset (the log's end, frames above it, stored summaries against the engine's own) were skipped; a verify of the stopped archive makes them".into(),
            );
        } else if self.is_poisoned() {
            r.notes.push(
                "the engine was poisoned while this verify ran (a write or sync failed): a problem at the log's end, or a summary the engine did not take up, may be only what the failed write left; a verify of the stopped archive tells".into(),
            );
        }
        Ok(r)
    }
}

/// What a verify of a live engine checks: the log below `lsn_end`, and the
/// partition summaries as they were when that LSN was next.
pub(crate) struct Snapshot<'a> {
    pub lsn_end: u64,
    pub partitions: BTreeMap<TopicPartition, PartitionSummary>,
    /// The engine's summary of a partition now, if it holds one: a stored
    /// summary for one it does not hold is stray, not new; one whose
    /// summary has not moved since the snapshot must be stored as it is.
    pub now: &'a dyn Fn(&TopicPartition) -> Option<PartitionSummary>,
    /// The engine's next LSN now: a frame the log scan saw at or above it
    /// was not written by the engine.
    pub next_lsn_now: &'a dyn Fn() -> u64,
    /// The engine is poisoned: its state may lag what a failed write left
    /// stored, so the exact comparisons with it are not made.
    pub poisoned: bool,
}

/// Items between two looks at a long read's stop flag (a verify's, a
/// backup's).
pub(crate) const ITEMS_PER_STOP_CHECK: u64 = 256;

/// `Err(Interrupted)` naming `op` once `stop` is set, looked at every
/// [`ITEMS_PER_STOP_CHECK`] calls.
pub(crate) fn check_stop(stop: &AtomicBool, items: &mut u64, op: &'static str) -> Result<()> {
    *items += 1;
    if items.is_multiple_of(ITEMS_PER_STOP_CHECK) && stop.load(Ordering::Relaxed) {
        return Err(Error::Interrupted { op });
    }
    Ok(())
}

/// Verify a store without opening an engine on it: no cairn recovery, and
/// nothing of the archive's written (sled itself still recovers its own
/// log when it opens, which can write: it has no read-only mode). Only the
/// open mark is written, for as long as sled has the store (left behind
/// when the last sync fails: poisoned.rs).
pub fn verify_store(cfg: &EngineConfig) -> Result<VerifyReport> {
    verify_store_unless(cfg, &AtomicBool::new(false))
}

/// [`verify_store`], given up with `Error::Interrupted` soon after `stop`
/// is set (a signal to `cairn verify`): the store is synced and let go as
/// after a whole verify, the open mark removed with it, so that a verify
/// stopped part-way does not read as a crash to the next open in this boot
/// (until 2026-12-06 a signal killed the process, leaving the mark).
pub fn verify_store_unless(cfg: &EngineConfig, stop: &AtomicBool) -> Result<VerifyReport> {
    if !cfg.store_exists()? {
        // A backup cut short before its store was made is that, not an
        // empty directory; unless a backup still running holds it (its
        // lock, which is then said), before it made its store.
        if let Err(e) = crate::backup::refuse_unfinished_backup(&cfg.path) {
            if matches!(e, Error::IncompleteBackup { .. }) {
                let _running = DirLock::acquire(&cfg.path)?;
            }
            return Err(e);
        }
        crate::watermark::refuse_lost_store(cfg)?;
        return Err(Error::Io {
            op: "open store",
            path: cfg.path.clone(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no cairn store here"),
        });
    }
    let _lock = DirLock::acquire(&cfg.path)?;
    crate::backup::refuse_unfinished_backup(&cfg.path)?;
    // As an engine's open: no handle of an earlier engine (a reader that
    // outlived it) still writes the store when the marks are acted on.
    cfg.wait_for_sled_handles()?;
    // A poisoned store, or one an engine left open in this boot, is
    // checked as the disk holds it, not as the page cache remembers it
    // (poisoned.rs); the marks stay for the next open.
    let before = crate::poisoned::before_open(cfg)?;
    // sled can write as it opens (its own log recovery) and while it is
    // read (a node split): the open mark is left before it opens, as an
    // engine's is (poisoned.rs), so that the next open in this boot does
    // not trust what that left in the page cache, also after a kill. It
    // goes once a last flush and fdatasync succeeded, through a descriptor
    // opened before sled's (one opened after a writeback error is not told
    // of it, and sled's own drop skips its fsync once its threads met an
    // error), and sled's handles dropped cleanly; unless it was there
    // before (an engine stopped without a close in this boot: the next
    // open says so, and syncs again). Until the night of 2026-12-04 a
    // verify left no mark.
    let marked = !before.unclean_cache_dropped;
    if marked {
        crate::poisoned::mark_open(&cfg.path).map_err(|source| Error::Io {
            op: "write of the open mark (a verify writes it while sled has the store, as an open does: verify a copy of an archive whose folder cannot be written)",
            path: cfg.path.join(crate::poisoned::OPEN_FILE),
            source,
        })?;
    }
    let mut syncer =
        crate::sync::DurableSync::open_unsynced(&cfg.sled_path()).map_err(|source| Error::Io {
            op: "open sled's data file",
            path: cfg.sled_data_path(),
            source,
        })?;
    let db = cfg.open_sled()?;
    // sled panics on some damage to its own files (the CLI reports that):
    // the handles are still dropped here, guarded, and the panic passed on.
    let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        verify_opened(cfg, &db, before, stop)
    }));
    // Once, never retried: a failure leaves the mark.
    let synced = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| syncer.sync(&db, 0)));
    let mut sync_failed = match synced {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(p) => Some(format!("it panicked: {}", crate::error::panic_message(&*p))),
    };
    // After a failed sync sled's own shutdown meets the failed disk too
    // (it unwraps its fsync): dropped as a failing store's handles are,
    // its panic caught and logged in one line, not printed.
    let dropped = match sync_failed {
        Some(_) => {
            crate::engine::drop_failing_store(db);
            Ok(())
        }
        None => std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(db))),
    };
    match dropped {
        Ok(()) if marked && sync_failed.is_none() => crate::poisoned::unmark_open(&cfg.path),
        Ok(()) => {}
        Err(p) => {
            let shutdown = format!(
                "sled's own shutdown (its flush or fsync) panicked: {}",
                crate::error::panic_message(&*p)
            );
            sync_failed.get_or_insert(shutdown);
        }
    }
    if let Some(e) = &sync_failed {
        tracing::warn!(error = %e, "the verify's last flush and fdatasync of the store failed: the open mark stays, and the next open syncs the store before it trusts it");
    }
    let mut report = report.unwrap_or_else(|p| std::panic::resume_unwind(p))?;
    report.closing_sync_failed = sync_failed;
    // sled closed, the lock still held: its segment headers, which nothing
    // reads while its snapshot stands (segments.rs).
    let data = cfg.sled_data_path();
    let damaged = match crate::segments::damaged_headers(&data) {
        Ok(damaged) => damaged,
        // As for the checks after the scan: with problems found the report
        // stands, the error in a note; with none, the store was not
        // wholly checked (an error). (Until review the same day an error
        // here dropped the report.)
        Err(source) => {
            let e = Error::Io {
                op: "read the headers of sled's log segments",
                path: data.clone(),
                source,
            };
            if report.problems.is_empty() && report.problems_unlisted == 0 {
                return Err(e);
            }
            report.notes.push(format!(
                "the headers of sled's log segments were not checked: {e}"
            ));
            return Ok(report);
        }
    };
    for d in damaged {
        let (location, kind) = d.located(data.clone());
        report.add(location, kind);
    }
    Ok(report)
}

/// [`verify_store`]'s checks, on the store's sled handle `db`.
fn verify_opened(
    cfg: &EngineConfig,
    db: &sled::Db,
    before: crate::poisoned::Before,
    stop: &AtomicBool,
) -> Result<VerifyReport> {
    // A stop before anything is read (a signal while sled opened): seen
    // now, not after the first items of the scan.
    if stop.load(Ordering::Relaxed) {
        return Err(Error::Interrupted { op: "verify" });
    }
    let tree = db.open_tree("cairn").map_err(store_err("open tree"))?;
    refuse_later_format(cfg, &tree)?;
    let mut before_notes = Vec::new();
    if let Some(p) = before.poisoned {
        before_notes.push(format!(
            "the last engine on this store was poisoned ({}): checked as the disk holds it; the next open recovers from what is durable",
            p.reason
        ));
    } else if before.unclean_cache_dropped {
        before_notes.push(
            "the last engine on this store stopped without a close in this boot (a crash or a kill, or an open that failed): checked as the disk holds it; the next open recovers from what is durable"
                .to_string(),
        );
    }
    if tree.is_empty() {
        if let Some(mut r) = verify_empty(cfg)? {
            r.notes.extend(before_notes);
            return Ok(r);
        }
    }
    let (mut r, facts) = verify_tree_facts(&tree, None, stop)?;
    r.notes.extend(before_notes);
    if facts.stopped_short {
        // The check stopped there: the log's end cannot be read either.
        return Ok(r);
    }
    // The checks after the scan (the log's end against the watermark, the
    // tail's repairs). An error there (an unreadable watermark file, a
    // failed read of sled) must not throw away what the scan found: with
    // problems found, the report stands, with a note of what was left
    // unchecked; with none, the store was not wholly checked (an error).
    let late = (|| -> Result<()> {
        // sled drops the end of its log after a damaged record and leaves a
        // consistent older tree: only the watermark beside it can tell.
        let mut last_lsn = 0;
        // Whether the last frame is a damaged tombstone (as its header
        // reads, the test recovery makes of a cut frame): its span, where
        // the log ends, no one can read.
        let mut last_unknown_span = false;
        // The last LSN the log covers: its last frame's, or the end of its span
        // when that is a tombstone (retention deleted the newest entries). Only
        // reserved slots (a few hundred at most) lie above it.
        for item in tree.scan_prefix([keys::PREFIX_WAL]).rev() {
            let (k, v) = item.map_err(store_err("read last frame"))?;
            if slots::is_slot(&v) {
                continue;
            }
            // A malformed key is reported by verify_tree; it says nothing of
            // where the log ends (a false lost suffix if taken for LSN 0).
            let Ok(lsn) = keys::parse_wal_key(&k) else {
                continue;
            };
            // A frame that does not decode is reported by verify_tree; its
            // own LSN is then the best end there is.
            // Unknown unless its header says it is a records frame (one
            // LSN), as the scan below takes it: a tombstone's, or an
            // unreadable header's (a flipped magic byte), may have covered
            // LSNs up to the watermark (until 2026-12-05 only a readable
            // tombstone header counted, and a tombstone with a damaged
            // magic read as records lost after it).
            let span = frame::decode(lsn, &v).ok().and_then(|f| f.span().ok());
            last_unknown_span =
                span.is_none() && !matches!(frame::header_kind(&v), Some(FrameKind::Records));
            last_lsn = lsn.saturating_add(span.unwrap_or(1).max(1) - 1);
            break;
        }
        // A stray frame inside the last tombstone's span (reported by the
        // scan as a gap) sorts last but does not end the log: the span
        // does, and no record past the stray is lost (until 2026-12-05 a
        // lost suffix was reported there too).
        if facts.covered_end > last_lsn {
            last_lsn = facts.covered_end;
            last_unknown_span = false;
        }
        let mut watermark = None;
        match crate::watermark::read(&cfg.path) {
            Ok(None) => r.notes.push(format!(
                "no watermark file ({}): a lost end of sled's log cannot be told from a log that ends there (the next open writes one)",
                crate::watermark::WATERMARK_FILE
            )),
            Ok(mark) => {
                watermark = mark;
                match crate::watermark::check(last_lsn, mark) {
                    // Past a damaged tombstone (reported where it is) the
                    // log's end is not known: its span covers LSNs no frame
                    // holds. Said as a note, not as records lost (an open
                    // refuses the damage first). A damaged records frame
                    // covers its own LSN only: a lost suffix past it is one.
                    Err(Error::Corruption { .. }) if last_unknown_span => r.notes.push(format!(
                        "the log's last frame (lsn {last_lsn}) is damaged, and may have been a tombstone (its header does not say it held records), and the watermark names lsn {}: whether frames after it were lost cannot be told",
                        mark.unwrap_or(0)
                    )),
                    Err(Error::Corruption { location, kind }) => r.add(location, kind),
                    _ => {}
                }
            }
            Err(Error::Corruption { location, kind }) => r.add(location, kind),
            Err(e) => return Err(e),
        }
        let checkpoint = tree
            .get(keys::META_CHECKPOINT)
            .map_err(store_err("read checkpoint"))?
            .and_then(|v| meta::decode_checkpoint(&v).ok());
        // A strict open refuses what a default one repairs.
        let repairing = cfg.recovery_mode != crate::config::RecoveryMode::Strict;
        if let Some(checkpoint) = checkpoint.filter(|&c| repairing && c < last_lsn) {
            let tail = Tail {
                checkpoint,
                durable: checkpoint.max(watermark.unwrap_or(0)),
                facts: &facts,
                tree: &tree,
            };
            let n = r.problems.len();
            let mut all_repaired = r.problems_unlisted == 0;
            for p in &r.problems {
                // The log's end against the watermark was checked by now:
                // only which problems an open would repair goes unsaid.
                match tail.repairs(p) {
                    Ok(repaired) => all_repaired = all_repaired && repaired,
                    Err(e) => {
                        r.notes.push(format!(
                            "which problems an open would repair could not be checked ({e})"
                        ));
                        return Ok(());
                    }
                }
            }
            if n > 0 && all_repaired {
                r.notes.push(format!(
                    "all {n} problems lie past the checkpoint (LSN {checkpoint}), and are of the kinds an unclean stop (a crash, a kill, a power cut) can leave for the next open to repair: entries whose index entries or partition summaries were not written yet, a last entry cut short (never acknowledged). Opening the archive repairs them (`cairn status --data DIR` does): verify again after it, and what is still reported is damage"
                ));
            }
        }
        Ok(())
    })();
    match late {
        Ok(()) => Ok(r),
        Err(e) if !r.is_clean() => {
            r.notes.push(format!(
                "the checks after the scan could not finish ({e}): the log's end against the watermark, and which problems an open would repair, were not checked"
            ));
            Ok(r)
        }
        Err(e) => Err(e),
    }
}

/// A stopped store whose tree holds nothing, not even its format, judged
/// as an open judges it (`recovery::recover`), or `None` to be checked as
/// any store is. Under a watermark past 0 sled lost all of it (a lost
/// suffix). Without a watermark, which an open writes only once the new
/// store's first batch is durable, the open that was to create it stopped
/// before that (a kill or a power cut during the first `cairn run`), and
/// the next open creates it: no damage, said as a note. Until 2026-12-07
/// that was three problems, the format, the store id and the checkpoint
/// missing, exit 1, for a store every open takes as new (found by an
/// audit). Under a watermark of 0 the store's creation was durable, and
/// sled lost it: checked as any store, its missing keys problems.
fn verify_empty(cfg: &EngineConfig) -> Result<Option<VerifyReport>> {
    let mut r = VerifyReport::default();
    let mark = match crate::watermark::read(&cfg.path) {
        Err(Error::Corruption { location, kind }) => {
            r.add(location, kind);
            return Ok(Some(r));
        }
        read => read?,
    };
    match crate::watermark::check(0, mark) {
        Err(Error::Corruption { location, kind }) => r.add(location, kind),
        Err(e) => return Err(e),
        Ok(()) if mark.is_some() => return Ok(None),
        Ok(()) => r.notes.push(
            "the store holds nothing, not even its format, and has no watermark: the open that was to create it stopped before anything it wrote was durable (a kill, a power cut or a failure during the first run); the next open creates it, and nothing was archived in it"
                .into(),
        ),
    }
    Ok(Some(r))
}

/// The log past a stopped store's checkpoint, which the next open's
/// recovery reads and repairs: a stop without a close (a crash, a kill, a
/// power cut) can leave what an append had not finished writing there,
/// and a stopped verify reads the store as it was left.
struct Tail<'a> {
    checkpoint: u64,
    /// The checkpoint, or the watermark above it: what was durable. An
    /// entry cut short at or below it is damage, not a crash's leftover.
    durable: u64,
    facts: &'a LogFacts,
    tree: &'a sled::Tree,
}

impl Tail<'_> {
    /// Whether `p` is what an unfinished append leaves and recovery
    /// repairs: an entry past the checkpoint without its index entry; a
    /// last entry cut short past what was durable (never acknowledged); a
    /// partition summary missing, or behind the end of the partition's
    /// last entry when that lies past the checkpoint, as recovery decides
    /// it (recovery.rs `summary_lost`, `refuse_summary_below_tail`):
    /// missing with no entry at or below the checkpoint, or behind with
    /// the entries below it agreeing. Recovery recomputes such a summary,
    /// and no other: a summary ahead of its entries, or one whose counts
    /// alone are off, is damage. A frame cut short is
    /// not counted in, though recovery truncates one at the log's end:
    /// sled writes values whole, so no crash leaves one.
    fn repairs(&self, p: &Problem) -> Result<bool> {
        Ok(match (&p.location, &p.kind) {
            (Location::Wal { lsn }, CorruptionKind::IndexMismatch { detail }) => {
                *lsn > self.checkpoint && detail.ends_with(NO_INDEX_ENTRY)
            }
            (Location::Wal { lsn }, CorruptionKind::BadChunkSequence { detail }) => {
                *lsn > self.durable && detail.ends_with(TORN_TAIL)
            }
            (Location::Partition { topic, partition }, CorruptionKind::SummaryMismatch { .. }) => {
                let tp = TopicPartition::new(topic.as_str(), *partition);
                let Some(&(lsn, last_offset)) = self.facts.last_entry.get(&tp) else {
                    return Ok(false);
                };
                let k = keys::partition_key(&tp);
                let stored = self.tree.get(&k).map_err(store_err("read summary"))?;
                // As recovery decides (since 2026-12-05; before, a lost
                // summary, or one whose entries below disagree with it,
                // was said to be repaired by an open that refuses it).
                // Damage met while deciding is no repair; a failed read
                // is an error (the caller notes what went unchecked), not
                // a "no" that would send a plain crash tail to salvage.
                let unless_damage = |decided: Result<bool>| match decided {
                    Err(e) if e.is_corruption() => Ok(false),
                    decided => decided,
                };
                lsn > self.checkpoint
                    && match stored.map(|v| PartitionSummary::decode(&k, &v)) {
                        None => unless_damage(
                            crate::recovery::summary_lost(self.tree, &tp, self.checkpoint, true)
                                .map(|lost| !lost),
                        )?,
                        Some(Ok((_, s))) => {
                            s.next_offset <= last_offset
                                && unless_damage(
                                    crate::recovery::refuse_summary_below_tail_as_stored(
                                        self.tree, &tp, &s,
                                    )
                                    .map(|()| true),
                                )?
                        }
                        Some(Err(_)) => false,
                    }
            }
            _ => false,
        })
    }
}

#[derive(Default)]
struct PartitionTotals {
    first_offset: Option<i64>,
    next_offset: i64,
    record_count: u64,
    payload_bytes: u64,
    /// The index entries these totals are of.
    index_entries: u64,
    /// Index entries of the partition (by their key) that do not decode,
    /// reported where they are and left out of the totals.
    undecodable: u64,
}

/// Check the whole tree, or with `bound` the part of it a live engine had
/// written when the bound was taken.
pub(crate) fn verify_tree(
    tree: &sled::Tree,
    bound: Option<&Snapshot<'_>>,
    stop: &AtomicBool,
) -> Result<VerifyReport> {
    verify_tree_facts(tree, bound, stop).map(|(r, _)| r)
}

/// [`verify_tree`], and what its log scan learnt.
///
/// A page of sled's log that sled cannot read ends the check where it is
/// met: it is reported after the problems found before it, with a note
/// that what lies after was not checked (the report of those is not
/// dropped for it).
fn verify_tree_facts(
    tree: &sled::Tree,
    bound: Option<&Snapshot<'_>>,
    stop: &AtomicBool,
) -> Result<(VerifyReport, LogFacts)> {
    let mut r = VerifyReport::default();
    let mut facts = LogFacts::default();
    let checked = (|| {
        let format = verify_meta(tree, &mut r)?;
        facts = verify_log(tree, bound, stop, format, &mut r)?;
        verify_checkpoint(tree, &mut r)?;
        // `return`: a read of the store failing there (a failing disk's
        // EIO).
        fail::fail_point!(FAILPOINT_VERIFY_AFTER_LOG, |_| Err(Error::Io {
            op: "verify (failpoint verify::after_log)",
            path: std::path::PathBuf::new(),
            source: std::io::Error::from_raw_os_error(5),
        }));
        let totals = verify_index(tree, bound, stop, &facts, &mut r)?;
        match bound {
            None => verify_summaries(tree, totals, &mut r),
            Some(b) => verify_summaries_at(tree, totals, b, &mut r),
        }
    })();
    match checked {
        Ok(()) => {}
        Err(Error::Corruption { location, kind }) if is_sled_log(&location) => {
            // Listed even past PROBLEMS_LISTED_MAX: it says the check is
            // incomplete (a backup fails on it in its copy).
            r.problems.push(Problem { location, kind });
            r.notes.push(
                "sled could not read a page of its log, and the check stopped there: the problems listed are those found before it, and what lies after it was not checked".into(),
            );
            facts.stopped_short = true;
        }
        // An error reading the store (EIO from a failing disk) after
        // problems were found: those are reported, with the error as a
        // note, and the report is not clean (a monitor reads exit 2 as
        // "try again later", and would never see them; until 2026-12-05
        // they were dropped). With nothing found, it stays the error.
        Err(e @ (Error::Store { .. } | Error::Io { .. })) if !r.is_clean() => {
            r.notes.push(format!(
                "the check stopped at an error reading the store ({e}): the problems listed are those found before it, and what lies after it was not checked"
            ));
            r.stopped_at_error = Some(e.to_string());
            facts.stopped_short = true;
        }
        Err(e) => return Err(e),
    }
    Ok((r, facts))
}

/// Whether `location` is a page of sled's log (which sled could not read).
pub(crate) fn is_sled_log(location: &Location) -> bool {
    matches!(location, Location::SledLog { .. })
}

/// A page of sled's log that sled could not read: it ends a verify where
/// it is met ([`verify_tree_facts`]).
fn unreadable_page(e: &Error) -> bool {
    matches!(e, Error::Corruption { location, .. } if is_sled_log(location))
}

/// The checkpoint against the log, as an open checks it: the frame at or
/// below it ends an entry and reaches it. A store whose checkpoint points
/// past the log, into an entry or below every frame does not open, so
/// verify must not call it clean. Damage of that frame itself, or frames
/// missing there, is already reported by the log scan, and is not reported
/// twice.
fn verify_checkpoint(tree: &sled::Tree, r: &mut VerifyReport) -> Result<()> {
    let Some(v) = tree
        .get(keys::META_CHECKPOINT)
        .map_err(store_err("read checkpoint"))?
    else {
        return Ok(()); // Reported by verify_meta.
    };
    let Ok(checkpoint) = meta::decode_checkpoint(&v) else {
        return Ok(()); // Reported by verify_meta.
    };
    // The same damage the log scan reported at that LSN: the frame's own
    // (it does not decode), or frames missing there (a gap).
    let gap = |k: &CorruptionKind| {
        matches!(
            k,
            CorruptionKind::LsnGap { .. } | CorruptionKind::MissingFrame
        )
    };
    match crate::recovery::expected_after_checkpoint(tree, checkpoint) {
        Ok(_) => {}
        // An unreadable page of sled's log ends the check (verify_tree_facts).
        Err(e) if unreadable_page(&e) => return Err(e),
        Err(Error::Corruption { location, kind }) => {
            // The scan names a gap at the frame it found after it, this
            // check at the LSN it expected: the same gap either way.
            let same_gap = |k: &CorruptionKind| match (k, &kind) {
                (
                    CorruptionKind::LsnGap { expected: a, .. },
                    CorruptionKind::LsnGap { expected: b, .. },
                ) => a == b,
                _ => false,
            };
            if !r.problems.iter().any(|p| {
                same_gap(&p.kind)
                    || (p.location == location && (p.kind == kind || (gap(&p.kind) && gap(&kind))))
            }) {
                r.add(location, kind);
            }
        }
        Err(e) => return Err(e),
    }
    Ok(())
}

/// A store of a later format (its `Mformat` sealed and naming a version
/// past this build's) is refused as an open refuses it: this build cannot
/// check it, which is not damage. Until 2026-12-05 verify listed it as a
/// problem and went on checking it under this build's layout (exit 1,
/// "damaged", for a healthy store a newer cairn reads). A version below
/// the oldest (none was ever written) stays a problem: damage.
fn refuse_later_format(cfg: &EngineConfig, tree: &sled::Tree) -> Result<()> {
    let Some(v) = tree
        .get(keys::META_FORMAT)
        .map_err(store_err("read format"))?
    else {
        return Ok(());
    };
    match meta::decode_format(&v) {
        Ok(found) if found > meta::FORMAT_VERSION => Err(Error::UnsupportedFormat {
            path: cfg.path.clone(),
            found,
            supported: meta::FORMAT_VERSION,
        }),
        _ => Ok(()),
    }
}

/// The format version, when it is one this build reads.
fn verify_meta(tree: &sled::Tree, r: &mut VerifyReport) -> Result<Option<u32>> {
    let format = match tree
        .get(keys::META_FORMAT)
        .map_err(store_err("read format"))?
    {
        None => {
            r.add(
                Location::Meta { key: "format" },
                CorruptionKind::BadMeta {
                    detail: "missing".into(),
                },
            );
            None
        }
        Some(v) => match meta::decode_format(&v) {
            Err((l, k)) => {
                r.add(l, k);
                None
            }
            Ok(found) if found < meta::FORMAT_VERSION_OLDEST => {
                r.add(
                    Location::Meta { key: "format" },
                    CorruptionKind::BadMeta {
                        detail: meta::format_below_oldest(found),
                    },
                );
                None
            }
            Ok(found) if !meta::is_readable(found) => {
                r.add(
                    Location::Meta { key: "format" },
                    CorruptionKind::BadMeta {
                        detail: format!(
                            "format version {found}, this build reads {} to {}",
                            meta::FORMAT_VERSION_OLDEST,
                            meta::FORMAT_VERSION
                        ),
                    },
                );
                None
            }
            Ok(found) => Some(found),
        },
    };
    match tree
        .get(keys::META_STORE)
        .map_err(store_err("read store id"))?
    {
        // Stores before format 3 have none until an open upgrades them.
        None if format.is_some_and(|f| f < meta::FORMAT_STORE_ID) => {}
        // Whether one must be there cannot be told: the format's damage is
        // the problem reported (until 2026-12-07 a format-2 store's was
        // reported with a second, the store id missing, that it cannot
        // have; found by an audit).
        None if format.is_none() => r.notes.push(
            "no store id (meta key store): whether the store's format needs one cannot be told, its format being unreadable"
                .into(),
        ),
        None => r.add(
            Location::Meta { key: "store" },
            CorruptionKind::BadMeta {
                detail: "missing".into(),
            },
        ),
        Some(v) => {
            if let Err((l, k)) = meta::decode_store_id(&v) {
                r.add(l, k);
            }
        }
    }
    match tree
        .get(keys::META_CHECKPOINT)
        .map_err(store_err("read checkpoint"))?
    {
        None => r.add(
            Location::Meta { key: "checkpoint" },
            CorruptionKind::BadMeta {
                detail: "missing".into(),
            },
        ),
        Some(v) => {
            if let Err((l, k)) = meta::decode_checkpoint(&v) {
                r.add(l, k);
            }
        }
    }
    for item in tree.scan_prefix([keys::PREFIX_META]) {
        let (k, _) = item.map_err(store_err("scan meta"))?;
        if k != keys::META_FORMAT && k != keys::META_CHECKPOINT && k != keys::META_STORE {
            r.add(
                Location::Key { key_hex: hex(&k) },
                CorruptionKind::BadKey {
                    detail: "unknown metadata key".into(),
                },
            );
        }
    }
    // The fence (keys.rs): 32 empty values, or none in a store created
    // before it. Anything else under its prefix is damage.
    for item in tree.scan_prefix([keys::PREFIX_FENCE]) {
        let (k, v) = item.map_err(store_err("scan fence"))?;
        if let Err(kind) = keys::check_fence(&k, &v) {
            r.add(Location::Key { key_hex: hex(&k) }, kind);
        }
    }
    // Topic ids (format 5, topics.rs): a valid topic in each key, a
    // sealed id that is not zero in each value.
    // In a store of an older format, none at all: no build of one wrote
    // them, and the open that upgrades it would take one for recorded
    // (until 2026-12-06 verify accepted them).
    for item in tree.scan_prefix([keys::PREFIX_TOPIC]) {
        let (k, v) = item.map_err(store_err("scan topic ids"))?;
        if let Some(found) = format.filter(|f| *f < meta::FORMAT_TOPIC_IDS) {
            r.add(
                Location::Key { key_hex: hex(&k) },
                CorruptionKind::BadKey {
                    detail: format!(
                        "a topic id in a format-{found} store, which has none (format {} brought them)",
                        meta::FORMAT_TOPIC_IDS
                    ),
                },
            );
            continue;
        }
        if let Err((l, kind)) = crate::topics::decode_entry(&k, &v) {
            r.add(l, kind);
        }
    }
    // Keys outside the six key spaces can only lie in the gaps between
    // their prefixes: scan those gaps, not the whole store a second time.
    let mut prefixes = [
        keys::PREFIX_INDEX,
        keys::PREFIX_META,
        keys::PREFIX_PARTITION,
        keys::PREFIX_FENCE,
        keys::PREFIX_TOPIC,
        keys::PREFIX_WAL,
    ];
    prefixes.sort_unstable();
    let mut gap_start: Bound<Vec<u8>> = Bound::Unbounded;
    for p in prefixes {
        report_foreign_keys(tree, (gap_start, Bound::Excluded(vec![p])), r)?;
        gap_start = Bound::Included(vec![p + 1]);
    }
    report_foreign_keys(tree, (gap_start, Bound::Unbounded), r)?;
    Ok(format)
}

fn report_foreign_keys(
    tree: &sled::Tree,
    gap: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    r: &mut VerifyReport,
) -> Result<()> {
    for item in tree.range::<Vec<u8>, _>(gap) {
        let (k, _) = item.map_err(store_err("scan keys"))?;
        r.add(
            Location::Key { key_hex: hex(&k) },
            CorruptionKind::BadKey {
                detail: "key outside every key space".into(),
            },
        );
    }
    Ok(())
}

/// What the log scan learnt, for the index scan (and the stopped verify's
/// notes).
#[derive(Default)]
struct LogFacts {
    /// The check stopped short: at a page of sled's log that sled cannot
    /// read, or at an error reading the store after problems were found.
    stopped_short: bool,
    /// Per partition, its last intact entry's first LSN and last offset.
    last_entry: BTreeMap<TopicPartition, (u64, i64)>,
    /// Per partition, the index entries equal to the log's entry at their
    /// key: each names the LSN of an intact entry, so no two are the same.
    matched: BTreeMap<TopicPartition, u64>,
    /// Per partition, the index entries that name the LSN of the log's
    /// entry at their key but differ from it: reported by the log scan.
    /// None is also matched (one LSN, one entry).
    reported: BTreeMap<TopicPartition, u64>,
    /// The keys of the first [`PROBLEMS_LISTED_MAX`] of those, which the
    /// index scan does not report again. (Past them, problems are only
    /// counted, and such an entry may be counted twice: the set does not
    /// grow with damage to a whole index.)
    reported_keys: BTreeSet<(TopicPartition, i64)>,
    /// The last LSN the log's frames cover, a tombstone's span included
    /// (0 for none): past a stray frame inside the last tombstone's span,
    /// which sorts last, the span's end.
    covered_end: u64,
}

/// The log, or with a snapshot the log below its LSN. Keys that are not
/// LSNs are reported wherever they sort, and a frame above the engine's
/// log end (where only reserved slots may be) is reported too. Each intact
/// entry is checked against its index entry.
fn verify_log(
    tree: &sled::Tree,
    bound: Option<&Snapshot<'_>>,
    stop: &AtomicBool,
    format: Option<u32>,
    r: &mut VerifyReport,
) -> Result<LogFacts> {
    // None without a snapshot: every key is checked, also one at u64::MAX.
    let lsn_end = bound.map(|b| b.lsn_end);
    // Non-slot values at or above `lsn_end` that were at or above the
    // engine's log end when seen (the ones below it were appended since
    // the snapshot, and are not kept: a busy run appends millions while a
    // verify scans). Checked against the log end once the scan is over;
    // past the first PROBLEMS_LISTED_MAX, reported as seen.
    let mut above: Vec<u64> = Vec::new();
    let mut end_seen = lsn_end.unwrap_or(0);
    let mut facts = LogFacts::default();
    let mut expected: u64 = 1;
    // The frame before was damaged: it may have been a tombstone, whose
    // span (the LSNs it stands for) is unknown, so the next frame's LSN is
    // not a gap to report on top of the damage already reported.
    let mut span_unknown = false;
    let mut asm = Assembler::default();
    // The entry being assembled was cut short by a problem already
    // reported: its remaining chunks (continuations) are skipped without a
    // problem each, so that one damaged chunk of a many-chunk entry is one
    // problem, not one per chunk after it. Each is still decoded, and its
    // own damage reported.
    let mut orphans = false;
    let mut first_slot: Option<u64> = None;
    // The last frame, if it lay below the expected LSN (a stray inside a
    // tombstone's span).
    let mut last_stray: Option<u64> = None;
    // The last slot reported (or passed over) inside the log.
    let mut last_inside: Option<u64> = None;
    let mut items = 0;
    for item in tree.scan_prefix([keys::PREFIX_WAL]) {
        check_stop(stop, &mut items, "verify")?;
        let (k, v) = item.map_err(store_err("scan log"))?;
        let lsn = match keys::parse_wal_key(&k) {
            Ok(l) => l,
            Err(kind) => {
                r.add(Location::Key { key_hex: hex(&k) }, kind);
                continue;
            }
        };
        if let Some(b) = bound.filter(|b| lsn >= b.lsn_end) {
            // Written since the snapshot (and slots reserved before it).
            if !slots::is_slot(&v) && lsn >= end_seen {
                // The engine's end only grows: asked again only for a
                // frame at or above the end last asked.
                end_seen = (b.next_lsn_now)();
                if lsn >= end_seen && !b.poisoned {
                    if above.len() < PROBLEMS_LISTED_MAX {
                        above.push(lsn);
                    } else {
                        r.add(
                            Location::Wal { lsn },
                            CorruptionKind::FrameAfterSlot { slot_lsn: end_seen },
                        );
                    }
                }
            }
            continue;
        }
        let at = Location::Wal { lsn };
        if lsn == 0 {
            // Whatever its value (a slot's too): the open refuses any key
            // below LSN 1 (recovery's `refuse_keys_below_the_log`). Until
            // 2026-12-05 an empty value there passed for a reserved slot,
            // and a store with no frame after it was called clean.
            r.add(
                at,
                CorruptionKind::BadKey {
                    detail: crate::recovery::BELOW_THE_LOG.into(),
                },
            );
            continue;
        }
        if slots::is_slot(&v) {
            // In a store of a format without slots, every empty value is
            // damage, as the open refuses it.
            // Taken as a frame that does not decode: its kind is unknown
            // (a tombstone's span may follow), and an entry it was part of
            // is cut short there, so what follows is no second report.
            if let Some(found) = format.filter(|f| *f < meta::FORMAT_SLOTS) {
                r.add(at, crate::recovery::empty_value_without_slots(found));
                expected = expected.max(lsn.saturating_add(1));
                span_unknown = true;
                orphans = true;
                asm.reset();
                continue;
            }
            // Inside the log (a tombstone's span), as the open refuses it;
            // not after damage whose span is unknown, nor among slots
            // already seen (a hole, reported at the frame after it). The
            // first of a run only; not taken for the reserve either, so a
            // frame after it is no hole.
            if lsn < expected && first_slot.is_none() && !span_unknown {
                if last_inside.is_none_or(|l| l.checked_add(1) != Some(lsn)) {
                    r.add(at, crate::recovery::slot_inside_the_log(expected));
                }
                last_inside = Some(lsn);
                continue;
            }
            first_slot.get_or_insert(lsn);
            continue;
        }
        if let Some(slot_lsn) = first_slot.take() {
            // Reported once per hole; the frames after it are checked on.
            r.add(at.clone(), CorruptionKind::FrameAfterSlot { slot_lsn });
            expected = lsn;
            orphans |= asm.in_progress().is_some();
            asm.reset();
        }
        r.frames += 1;
        // Taken at every frame: only the one right after the damage.
        let span_known = !std::mem::take(&mut span_unknown);
        // A run of stray frames inside a tombstone's span is one gap, at
        // its first frame (until 2026-12-05, one per frame).
        let stray_goes_on =
            lsn < expected && last_stray.is_some_and(|l| lsn.checked_sub(1) == Some(l));
        last_stray = (lsn < expected).then_some(lsn);
        if lsn != expected && span_known && !stray_goes_on {
            r.add(
                at.clone(),
                CorruptionKind::LsnGap {
                    expected,
                    found: lsn,
                },
            );
            orphans |= asm.in_progress().is_some();
            asm.reset();
        }
        // A frame below the expected LSN (a stray within a tombstone's
        // span) does not move the log's expected end back: the frame the
        // span ends at is no second gap.
        expected = expected.max(lsn.saturating_add(1));
        let f = match frame::decode(lsn, &v) {
            Ok(f) => f,
            Err(kind) => {
                // Its flags cannot be trusted: the chunks after it, if it
                // was an entry's, are orphans. Its span is unknown unless
                // its header says it is a records frame (one LSN): a
                // tombstone's, or an unreadable header's, may have covered
                // the LSNs up to the next frame.
                span_unknown = !matches!(frame::header_kind(&v), Some(FrameKind::Records));
                r.add(at, kind);
                orphans = true;
                asm.reset();
                continue;
            }
        };
        if f.kind == FrameKind::Records && f.flags & frame::FLAG_CONT != 0 && orphans {
            continue;
        }
        orphans = false;
        if f.kind == FrameKind::Tombstone {
            r.tombstones += 1;
            if let Some(first) = asm.in_progress() {
                r.add(
                    Location::Wal { lsn: first },
                    CorruptionKind::BadChunkSequence {
                        detail: "entry interrupted by a tombstone".into(),
                    },
                );
                orphans = true;
                asm.reset();
            }
            // Never moved back: a stray tombstone inside another's span
            // (a gap reported above) must not make the frames after it
            // gaps too (until the night of 2026-12-04 it did).
            match f.lsn_after(lsn) {
                Ok(next) => expected = expected.max(next),
                Err(kind) => {
                    // A span past the largest LSN (as recovery refuses it):
                    // the log is still expected to go on after it.
                    if let Ok(span) = f.span() {
                        expected = expected.max(lsn.saturating_add(span));
                    }
                    r.add(at, kind);
                }
            }
            continue;
        }
        // A chunk at the largest LSN, which recovery refuses as it refuses
        // a span past it.
        if let Err(kind) = f.lsn_after(lsn) {
            r.add(at.clone(), kind);
        }
        // A first chunk while an entry is in progress: that entry is the one
        // cut short, named at its own first frame; this one is checked as
        // the intact entry it may be (feeding it would refuse it too).
        if f.flags & frame::FLAG_CONT == 0 {
            if let Some(first) = asm.in_progress() {
                r.add(
                    Location::Wal { lsn: first },
                    CorruptionKind::BadChunkSequence {
                        detail: format!(
                            "entry ends without its final chunk: a new entry starts at lsn {lsn}"
                        ),
                    },
                );
                asm.reset();
            }
        }
        let (first_lsn, chunks, body) = match asm.feed(lsn, &f) {
            Ok(Fed::Partial) => continue,
            Ok(Fed::Complete {
                first_lsn,
                chunks,
                body,
            }) => (first_lsn, chunks, body),
            Err(kind) => {
                r.add(at, kind);
                orphans = true;
                asm.reset();
                continue;
            }
        };
        let entry = match decode_entry(&body) {
            Ok(e) => e,
            Err(kind) => {
                r.add(Location::Wal { lsn: first_lsn }, kind);
                continue;
            }
        };
        r.entries += 1;
        r.records += entry.records.len() as u64;
        let described = IndexEntry::describe(first_lsn, chunks, &entry.records);
        r.payload_bytes = r.payload_bytes.saturating_add(described.payload_bytes);
        if let Some(&(_, prev)) = facts.last_entry.get(&entry.tp) {
            if described.first_offset <= prev {
                r.add(
                    Location::Wal { lsn: first_lsn },
                    CorruptionKind::OffsetOrder {
                        detail: format!(
                            "{} entry starts at {} after an earlier entry ended at {prev}",
                            entry.tp, described.first_offset
                        ),
                    },
                );
            }
        } else {
            // The partition's first entry in the log starts at or above the
            // first offset its summary keeps, which only a prune raises,
            // deleting every entry below it (recovery refuses such an entry
            // in the tail: before 2026-12-03 verify only saw one without an
            // index entry, and said an open would repair it). A summary
            // that does not read is reported where summaries are checked.
            let first = match crate::reader::stored_first_offset(tree, &entry.tp) {
                Err(e) if e.is_corruption() => None,
                read => read?,
            };
            if let Some(first) = first.filter(|&f| described.first_offset < f) {
                r.add(
                    Location::Wal { lsn: first_lsn },
                    CorruptionKind::OffsetOrder {
                        detail: format!(
                            "{} entry starts at {} but the partition's first offset is {first} (a prune deleted every entry below it)",
                            entry.tp, described.first_offset
                        ),
                    },
                );
            }
        }
        check_index_entry(tree, &entry.tp, &described, &mut facts, r)?;
        facts
            .last_entry
            .insert(entry.tp, (first_lsn, described.last_offset));
    }
    if let Some(first) = asm.in_progress() {
        r.add(
            Location::Wal { lsn: first },
            CorruptionKind::BadChunkSequence {
                detail: format!("last entry ends without its final chunk {TORN_TAIL}"),
            },
        );
    }
    facts.covered_end = expected.saturating_sub(1);
    if let Some(b) = bound.filter(|b| !b.poisoned && expected < b.lsn_end) {
        if span_unknown {
            // The log's last frame is damaged and may have been a tombstone
            // (reported where it is): its span, and so whether frames after
            // it are missing, cannot be told. Said as the stopped store's
            // verify says it, not as a missing frame (until the night of
            // 2026-12-04 it was one).
            r.notes.push(format!(
                "the log's last frame before lsn {} is damaged and may have been a tombstone: whether frames after it are missing cannot be told",
                b.lsn_end
            ));
        } else {
            // Every LSN below the snapshot's end was written before it
            // (under the write lock), slots lie only above it, and
            // retention waits for the verify: frames, or a tombstone's
            // span, reach it. (A stopped store's verify has the watermark
            // to say where the log ends instead.)
            r.add(
                Location::Wal { lsn: expected },
                CorruptionKind::MissingFrame,
            );
        }
    }
    if let Some(b) = bound.filter(|b| !b.poisoned && !above.is_empty()) {
        // Taken under the write lock, after the scan: every frame the
        // engine wrote while the scan ran lies below it.
        let end = (b.next_lsn_now)();
        for lsn in above.into_iter().filter(|&l| l >= end) {
            r.add(
                Location::Wal { lsn },
                CorruptionKind::FrameAfterSlot { slot_lsn: end },
            );
        }
    }
    Ok(facts)
}

/// The index entry of the log's intact entry `d` of `tp`: equal to `d`, or
/// a problem. One that names `d`'s LSN but differs is reported here, at the
/// index entry. Otherwise (none, a damaged one, reported by the index scan,
/// or one naming another LSN, which the index scan checks there) the log's
/// entry is reported as having none.
fn check_index_entry(
    tree: &sled::Tree,
    tp: &TopicPartition,
    d: &IndexEntry,
    facts: &mut LogFacts,
    r: &mut VerifyReport,
) -> Result<()> {
    let key = keys::index_key(tp, d.first_offset);
    let stored = tree.get(&key).map_err(store_err("read index entry"))?;
    let count = |per: &mut BTreeMap<TopicPartition, u64>| match per.get_mut(tp) {
        Some(n) => *n += 1,
        None => {
            per.insert(tp.clone(), 1);
        }
    };
    match stored.map(|v| IndexEntry::decode(&key, &v)) {
        Some(Ok((_, e))) if e == *d => count(&mut facts.matched),
        Some(Ok((_, e))) if e.lsn == d.lsn => {
            r.add(
                Location::Index {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    first_offset: d.first_offset,
                },
                CorruptionKind::IndexMismatch {
                    detail: format!("index {e:?} but log {d:?}"),
                },
            );
            count(&mut facts.reported);
            if facts.reported_keys.len() < PROBLEMS_LISTED_MAX {
                facts.reported_keys.insert((tp.clone(), d.first_offset));
            }
        }
        stored => {
            let why = match stored {
                None => NO_INDEX_ENTRY.to_owned(),
                Some(Err(_)) => "has an index entry that does not decode".to_owned(),
                Some(Ok((_, e))) => format!("has an index entry naming lsn {}", e.lsn),
            };
            r.add(
                Location::Wal { lsn: d.lsn },
                CorruptionKind::IndexMismatch {
                    detail: format!("entry {tp}@{} {why}", d.first_offset),
                },
            )
        }
    }
    Ok(())
}

/// The index entries, checked against the log's entries. With a snapshot,
/// those of records appended since are skipped: their frames were not
/// looked at. Such an entry names a frame at or above the snapshot's LSN,
/// and either offsets at or above its partition's next offset then, or a
/// partition the snapshot did not hold and the engine holds now; and it
/// lies within the engine's log and the partition's offsets as they stand
/// when asked ([`Since::skips`]). Any other index entry is checked.
///
/// The log scan counted, per partition, the index entries its entries bear
/// out or were reported against. A partition whose checked entries are all
/// of those (the counts say so) is not read again; the index of any other
/// is read a second time, and the log at each of its entries, to name the
/// ones the log does not bear out.
fn verify_index(
    tree: &sled::Tree,
    bound: Option<&Snapshot<'_>>,
    stop: &AtomicBool,
    facts: &LogFacts,
    r: &mut VerifyReport,
) -> Result<BTreeMap<TopicPartition, PartitionTotals>> {
    let mut totals: BTreeMap<TopicPartition, PartitionTotals> = BTreeMap::new();
    let mut since = Since {
        bound,
        held_now: BTreeMap::new(),
        end_seen: 0,
        next_seen: BTreeMap::new(),
        checked_past: BTreeSet::new(),
    };
    let mut items = 0;
    for item in tree.scan_prefix([keys::PREFIX_INDEX]) {
        check_stop(stop, &mut items, "verify")?;
        let (k, v) = item.map_err(store_err("scan index"))?;
        let (tp, e) = match IndexEntry::decode(&k, &v) {
            Ok(x) => x,
            Err(kind) => {
                r.index_entries += 1;
                r.add(index_location(&k), kind);
                // Its partition's totals lack it: its summary cannot be
                // compared with them (`check_summary`).
                if let Ok((tp, _)) = keys::parse_index_key(&k) {
                    totals.entry(tp).or_default().undecodable += 1;
                }
                continue;
            }
        };
        if since.skips(&tp, &e) {
            continue;
        }
        r.index_entries += 1;
        let t = totals.entry(tp).or_default();
        t.index_entries += 1;
        t.first_offset.get_or_insert(e.first_offset);
        t.next_offset = t.next_offset.max(e.last_offset.saturating_add(1));
        t.record_count = t.record_count.saturating_add(e.record_count as u64);
        t.payload_bytes = t.payload_bytes.saturating_add(e.payload_bytes);
    }
    let of = |per: &BTreeMap<TopicPartition, u64>, tp| per.get(tp).copied().unwrap_or(0);
    for (tp, t) in &totals {
        let accounted = of(&facts.matched, tp).saturating_add(of(&facts.reported, tp));
        if t.index_entries != accounted {
            report_unmatched_index(tree, tp, &mut since, (stop, &mut items), facts, r)?;
        }
    }
    Ok(totals)
}

/// The index entries of `tp` the log scan did not bear out, each named:
/// the log holds no intact entry equal to it at its LSN (an entry reaching
/// a snapshot's LSN was not looked at, and counts as none).
fn report_unmatched_index(
    tree: &sled::Tree,
    tp: &TopicPartition,
    since: &mut Since<'_, '_>,
    // The stop flag, and the count of items since the index scan began
    // (partitions of fewer than 256 entries each would never look).
    (stop, items): (&AtomicBool, &mut u64),
    facts: &LogFacts,
    r: &mut VerifyReport,
) -> Result<()> {
    for item in tree.scan_prefix(keys::index_prefix(tp)) {
        check_stop(stop, items, "verify")?;
        let (k, v) = item.map_err(store_err("scan index"))?;
        // Undecodable entries were reported by the first pass.
        let Ok((tp, e)) = IndexEntry::decode(&k, &v) else {
            continue;
        };
        if since.skips(&tp, &e) || facts.reported_keys.contains(&(tp.clone(), e.first_offset)) {
            continue;
        }
        let looked_at = since
            .bound
            .is_none_or(|b| e.lsn.saturating_add(u64::from(e.chunks)) <= b.lsn_end);
        let borne_out = looked_at
            && match crate::entry::read_entry(tree, &tp, &e) {
                Ok(_) => true,
                Err(err) if unreadable_page(&err) => return Err(err),
                Err(Error::Corruption { .. }) => false,
                Err(err) => return Err(err),
            };
        if !borne_out {
            r.add(
                Location::Index {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    first_offset: e.first_offset,
                },
                CorruptionKind::IndexMismatch {
                    detail: format!("no intact entry in the log at lsn {}", e.lsn),
                },
            );
        }
    }
    Ok(())
}

/// Which index entries a live verify leaves out: those of records
/// appended since its snapshot (see [`verify_index`]).
struct Since<'s, 'b> {
    bound: Option<&'s Snapshot<'b>>,
    /// Whether the engine holds a partition the snapshot did not, asked
    /// once: both passes over the index leave out the same entries, and
    /// the totals are of the entries they check.
    held_now: BTreeMap<TopicPartition, bool>,
    /// The engine's next LSN, and each partition's next offset, as last
    /// asked: asked again only when an entry passes them (each asking
    /// takes the write lock).
    end_seen: u64,
    next_seen: BTreeMap<TopicPartition, i64>,
    /// Entries found past the engine's log or offsets, and checked: checked
    /// again by the second pass, whatever the engine has appended since
    /// (its later answers would leave them out, and the first pass's
    /// mismatch would go unnamed). Only stray entries: few.
    checked_past: BTreeSet<(TopicPartition, i64)>,
}

impl Since<'_, '_> {
    fn skips(&mut self, tp: &TopicPartition, e: &IndexEntry) -> bool {
        let Some(b) = self.bound.filter(|b| e.lsn >= b.lsn_end) else {
            return false;
        };
        let new = match b.partitions.get(tp) {
            Some(s) => e.first_offset >= s.next_offset,
            None => *self
                .held_now
                .entry(tp.clone())
                .or_insert_with(|| (b.now)(tp).is_some()),
        };
        if !new || b.poisoned {
            return new;
        }
        if !self.checked_past.is_empty()
            && self.checked_past.contains(&(tp.clone(), e.first_offset))
        {
            return false;
        }
        // Only one the engine could have appended since: its frames within
        // the engine's log and its offsets within the partition's, as they
        // stand now. Past either, no write made it (an open refuses one
        // past the log's end), and it is checked (since 2026-12-05; before,
        // a stray entry there was left out, and the live verify said clean).
        let end = e.lsn.saturating_add(u64::from(e.chunks));
        if end > self.end_seen {
            self.end_seen = (b.next_lsn_now)();
        }
        let passed = |next: Option<&i64>| next.is_none_or(|&n| e.last_offset >= n);
        if passed(self.next_seen.get(tp)) {
            if let Some(s) = (b.now)(tp) {
                self.next_seen.insert(tp.clone(), s.next_offset);
            }
        }
        let within = end <= self.end_seen && !passed(self.next_seen.get(tp));
        if !within {
            self.checked_past.insert((tp.clone(), e.first_offset));
        }
        within
    }
}

fn verify_summaries(
    tree: &sled::Tree,
    mut totals: BTreeMap<TopicPartition, PartitionTotals>,
    r: &mut VerifyReport,
) -> Result<()> {
    for item in tree.scan_prefix([keys::PREFIX_PARTITION]) {
        let (k, v) = item.map_err(store_err("scan partitions"))?;
        r.partitions += 1;
        let (tp, s) = match PartitionSummary::decode(&k, &v) {
            Ok(x) => x,
            Err(kind) => {
                r.add(summary_location(&k), kind);
                // Damaged, not missing: its index entries are not reported
                // again as a partition with no summary.
                if let Ok(tp) = keys::parse_partition_key(&k) {
                    totals.remove(&tp);
                }
                continue;
            }
        };
        let t = totals.remove(&tp).unwrap_or_default();
        check_summary(&tp, &s, &t, r);
    }
    report_missing_summaries(totals, r);
    Ok(())
}

/// A live engine's summaries. The ones it held when the bound was taken
/// are compared with the index below the bound. The stored ones must
/// decode and exist; one whose partition the engine has not written to
/// since must equal the engine's, and any other must not be behind it.
fn verify_summaries_at(
    tree: &sled::Tree,
    mut totals: BTreeMap<TopicPartition, PartitionTotals>,
    bound: &Snapshot<'_>,
    r: &mut VerifyReport,
) -> Result<()> {
    let at = &bound.partitions;
    let mut stored_seen = std::collections::BTreeSet::new();
    for item in tree.scan_prefix([keys::PREFIX_PARTITION]) {
        let (k, v) = item.map_err(store_err("scan partitions"))?;
        let (tp, stored) = match PartitionSummary::decode(&k, &v) {
            Ok(x) => x,
            Err(kind) => {
                r.add(summary_location(&k), kind);
                // Damaged, not missing (nor "written, but no summary is
                // stored"); counted once, as the stopped verify counts it.
                match keys::parse_partition_key(&k) {
                    Ok(tp) if at.contains_key(&tp) => {
                        stored_seen.insert(tp);
                    }
                    Ok(tp) => {
                        r.partitions += 1;
                        totals.remove(&tp);
                    }
                    Err(_) => r.partitions += 1,
                }
                continue;
            }
        };
        let now = (bound.now)(&tp);
        let Some(s) = at.get(&tp) else {
            // A partition first written after the snapshot is not looked
            // at; a summary the engine does not hold even now is stray, and
            // is checked against the index like any other.
            if now.is_none() {
                r.partitions += 1;
                let t = totals.remove(&tp).unwrap_or_default();
                check_summary(&tp, &stored, &t, r);
            } else {
                // Not looked at; totals made of its index entries that do
                // not decode (reported where they are) are no partition
                // with a summary missing.
                totals.remove(&tp);
            }
            continue;
        };
        // The engine updates its summary and the stored one under one
        // lock, and (truncations excluded) never back to an earlier value:
        // one unchanged since the snapshot must be stored exactly so, and
        // any other can only have moved on.
        let unchanged = !bound.poisoned && now.as_ref() == Some(s);
        if (unchanged && stored != *s) || stored.next_offset < s.next_offset {
            r.add(
                partition_location(&tp),
                CorruptionKind::SummaryMismatch {
                    detail: format!(
                        "stored summary first {} next {} records {} bytes {}; the engine wrote first {} next {} records {} bytes {}",
                        stored.first_offset, stored.next_offset, stored.record_count, stored.payload_bytes,
                        s.first_offset, s.next_offset, s.record_count, s.payload_bytes
                    ),
                },
            );
        }
        stored_seen.insert(tp);
    }
    for (tp, s) in at {
        r.partitions += 1;
        let t = totals.remove(tp).unwrap_or_default();
        check_summary(tp, s, &t, r);
        if !stored_seen.contains(tp) {
            r.add(
                partition_location(tp),
                CorruptionKind::SummaryMismatch {
                    detail: "written, but no summary is stored".into(),
                },
            );
        }
    }
    report_missing_summaries(totals, r);
    Ok(())
}

/// Whether summary `s` of `tp` agrees with the totals of its index entries.
fn check_summary(
    tp: &TopicPartition,
    s: &PartitionSummary,
    t: &PartitionTotals,
    r: &mut VerifyReport,
) {
    // Totals that lack entries which do not decode (each reported where it
    // is) would call a sound summary wrong too (until 2026-12-05 one
    // damaged index entry was three problems, one of them the summary's).
    if t.undecodable > 0 {
        r.notes.push(format!(
            "the summary of {tp} was not compared with its index: {} of its index entries do not decode (listed as problems)",
            t.undecodable
        ));
        return;
    }
    let first = t.first_offset.unwrap_or(s.next_offset);
    // While the index holds records, the summary's next offset is one past
    // the last of them (retention deletes from the oldest entry), or its
    // floor where that is higher (offsets that held no record,
    // `Engine::advance_partitions`); an emptied partition keeps a next
    // offset above what it holds.
    let next_ok = match t.record_count {
        0 => s.next_offset >= t.next_offset,
        _ => s.next_offset == t.next_offset.max(s.next_offset_floor),
    };
    if t.record_count != s.record_count
        || t.payload_bytes != s.payload_bytes
        || !next_ok
        || first != s.first_offset
    {
        r.add(
            partition_location(tp),
            CorruptionKind::SummaryMismatch {
                detail: format!(
                    "summary first {} next {} records {} bytes {}; index first {first} next>={} records {} bytes {}",
                    s.first_offset, s.next_offset, s.record_count, s.payload_bytes,
                    t.next_offset, t.record_count, t.payload_bytes
                ),
            },
        );
    }
}

/// Index entries whose partition has no summary.
fn report_missing_summaries(
    totals: BTreeMap<TopicPartition, PartitionTotals>,
    r: &mut VerifyReport,
) {
    for (tp, _) in totals {
        let (at, kind) = missing_summary(&tp);
        r.add(at, kind);
    }
}

/// A partition with index entries and no summary: where, and what (verify
/// reports it; recovery refuses the open).
pub(crate) fn missing_summary(tp: &TopicPartition) -> (Location, CorruptionKind) {
    (
        partition_location(tp),
        CorruptionKind::SummaryMismatch {
            detail: "index entries exist but the summary is missing".into(),
        },
    )
}

pub(crate) fn partition_location(tp: &TopicPartition) -> Location {
    Location::Partition {
        topic: tp.topic.clone(),
        partition: tp.partition,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzzing::batch;
    use crate::EngineConfig;

    /// A verify of a stopped store leaves the open mark while sled has it
    /// (sled writes as it opens and drops): one whose sled open fails
    /// keeps it; a clean one removes it; one left by an engine stopped
    /// without a close in this boot stays, for the next open to act on.
    #[test]
    fn a_verify_of_a_stopped_store_keeps_the_open_mark_while_sled_has_it() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = EngineConfig::new(dir.path());
        let tp = TopicPartition::new("t", 0);
        let e = Engine::open(cfg.clone()).unwrap();
        e.append(&[batch(&tp, 0..10, 10)]).unwrap();
        e.close().unwrap();
        let mark = dir.path().join(crate::poisoned::OPEN_FILE);
        assert!(!mark.exists());
        // sled's lock held by another handle: the verify waits for it
        // (bounded) before it does anything, and then fails having left
        // nothing (since the night of 2026-12-04; before, the marks were
        // acted on and the open mark left first).
        let held = cfg.open_sled().unwrap();
        match verify_store(&cfg) {
            Err(Error::Io { op, .. }) => assert_eq!(op, "wait for sled's files to be let go"),
            other => panic!("expected the wait to run out, got {other:?}"),
        }
        assert!(!mark.exists(), "nothing done while sled's files were held");
        drop(held);
        // A mark of this boot (an engine's, left open) stays through a
        // clean verify, as it would through an engine's: the next open
        // acts on it.
        crate::poisoned::mark_open(dir.path()).unwrap();
        let v = verify_store(&cfg).unwrap();
        assert!(v.is_clean(), "{:?}", v.problems);
        assert!(v
            .notes
            .iter()
            .any(|n| n.contains("stopped without a close")));
        assert!(mark.exists());
        drop(Engine::open(cfg.clone()).unwrap());
        assert!(
            !mark.exists(),
            "the open acted on it, and its close removed it"
        );
        // A clean verify of a closed store leaves none.
        assert!(verify_store(&cfg).unwrap().is_clean());
        assert!(!mark.exists(), "a clean verify's mark goes");
    }

    /// A live verify (a snapshot's bound) finds frames missing at the end
    /// of the log below the snapshot: here the tombstone that replaced the
    /// newest entry, which no later frame would show as a gap.
    #[test]
    fn a_live_verify_reports_a_missing_tombstone_at_the_log_end() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
        let next_lsn = {
            let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
            e.append(&[batch(&a, 0..10, 10)]).unwrap();
            e.append(&[batch(&b, 0..10, 10)]).unwrap();
            e.truncate_before(&b, 10).unwrap();
            let next = e.stats().next_lsn;
            e.close().unwrap();
            next
        };
        assert_eq!(next_lsn, 3, "a at LSN 1, b's tombstone at 2");
        let db = EngineConfig::new(dir.path()).open_sled().unwrap();
        let tree = db.open_tree("cairn").unwrap();
        let partitions = crate::recovery::load_summaries(&tree).unwrap();
        let now = |_: &TopicPartition| None;
        let next_lsn_now = || next_lsn;
        let snapshot = |partitions| Snapshot {
            lsn_end: next_lsn,
            partitions,
            now: &now,
            next_lsn_now: &next_lsn_now,
            poisoned: false,
        };
        let clean = verify_tree(
            &tree,
            Some(&snapshot(partitions.clone())),
            &AtomicBool::new(false),
        );
        assert!(clean.unwrap().is_clean());
        tree.remove(keys::wal_key(2)).unwrap();
        let r = verify_tree(&tree, Some(&snapshot(partitions)), &AtomicBool::new(false)).unwrap();
        assert_eq!(
            r.problems,
            vec![Problem {
                location: Location::Wal { lsn: 2 },
                kind: CorruptionKind::MissingFrame
            }]
        );
        // No index entry names it: the message does not say one does.
        let said = r.problems[0].to_string();
        assert!(!said.contains("referenced by the index"), "{said}");
    }

    /// A live verify whose log ends in a damaged tombstone reports that
    /// frame, and notes that whether frames after it are missing cannot be
    /// told: its span covered them (until the night of 2026-12-04 the LSN
    /// after it was reported missing too).
    #[test]
    fn a_live_verify_of_a_damaged_tombstone_at_the_log_end_reports_only_it() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
        let next_lsn = {
            let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
            e.append(&[batch(&a, 0..10, 10)]).unwrap();
            for i in 0..3 {
                e.append(&[batch(&b, i..i + 1, 10)]).unwrap();
            }
            e.truncate_before(&b, 3).unwrap();
            let next = e.stats().next_lsn;
            e.close().unwrap();
            next
        };
        assert_eq!(next_lsn, 5, "a at LSN 1, b's tombstone at 2 spanning 3");
        let db = EngineConfig::new(dir.path()).open_sled().unwrap();
        let tree = db.open_tree("cairn").unwrap();
        let partitions = crate::recovery::load_summaries(&tree).unwrap();
        let now = |_: &TopicPartition| None;
        let next_lsn_now = || next_lsn;
        let snapshot = Snapshot {
            lsn_end: next_lsn,
            partitions,
            now: &now,
            next_lsn_now: &next_lsn_now,
            poisoned: false,
        };
        let mut v = tree.get(keys::wal_key(2)).unwrap().unwrap().to_vec();
        let last = v.len() - 1;
        v[last] ^= 0x01;
        tree.insert(keys::wal_key(2), v).unwrap();
        let r = verify_tree(&tree, Some(&snapshot), &AtomicBool::new(false)).unwrap();
        assert_eq!(r.problems.len(), 1, "{:#?}", r.problems);
        assert_eq!(r.problems[0].location, Location::Wal { lsn: 2 });
        assert!(
            matches!(r.problems[0].kind, CorruptionKind::Checksum { .. }),
            "{:?}",
            r.problems[0]
        );
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("may have been a tombstone")),
            "{:?}",
            r.notes
        );
    }

    /// A closed, clean store at `cfg`: partition a's entry at LSN 1, then b's
    /// three entries (LSNs 2 to 4) pruned, one tombstone at 2 spanning
    /// them, then, with `entry_after`, partition c's entry at 5. Returns
    /// what puts a tombstone of one LSN at `lsn`, past the engine.
    fn store_with_a_pruned_span(cfg: &EngineConfig, entry_after: bool) -> impl Fn(u64) + '_ {
        let (a, b, c) = (
            TopicPartition::new("a", 0),
            TopicPartition::new("b", 0),
            TopicPartition::new("c", 0),
        );
        let e = Engine::open(cfg.clone()).unwrap();
        e.append(&[batch(&a, 0..10, 10)]).unwrap();
        for i in 0..3 {
            e.append(&[batch(&b, i..i + 1, 10)]).unwrap();
        }
        if entry_after {
            e.append(&[batch(&c, 0..10, 10)]).unwrap();
        }
        e.truncate_before(&b, 3).unwrap();
        e.close().unwrap();
        assert!(verify_store(cfg).unwrap().is_clean());
        move |lsn| {
            let db = cfg.open_sled().unwrap();
            let tree = db.open_tree("cairn").unwrap();
            let stray = frame::encode(lsn, FrameKind::Tombstone, 0, &frame::encode_tombstone(1));
            tree.insert(keys::wal_key(lsn), stray).unwrap();
            db.flush().unwrap();
        }
    }

    /// Where `r` reports gaps in the log, in order.
    fn gaps(r: &VerifyReport) -> Vec<Location> {
        r.problems
            .iter()
            .filter(|p| matches!(p.kind, CorruptionKind::LsnGap { .. }))
            .map(|p| p.location.clone())
            .collect()
    }

    /// Whether `r` reports a bad key at log LSN `lsn`.
    fn bad_key_at(r: &VerifyReport, lsn: u64) -> bool {
        r.problems.iter().any(|p| {
            p.location == Location::Wal { lsn } && matches!(p.kind, CorruptionKind::BadKey { .. })
        })
    }

    /// A stray tombstone inside another's span is one gap, and the frames
    /// after that span are none (until the night of 2026-12-04 the stray
    /// moved the expected LSN back, and the next frame was a second gap).
    #[test]
    fn a_stray_tombstone_inside_a_span_is_one_gap() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = EngineConfig::new(dir.path());
        // Partition c's entry after the span.
        let stray_at = store_with_a_pruned_span(&cfg, true);
        stray_at(3);
        let r = verify_store(&cfg).unwrap();
        assert_eq!(gaps(&r), [Location::Wal { lsn: 3 }], "{:#?}", r.problems);
        // Two stray frames in a row inside the span: still one gap, at the
        // first.
        stray_at(4);
        let r = verify_store(&cfg).unwrap();
        assert_eq!(gaps(&r), [Location::Wal { lsn: 3 }], "{:#?}", r.problems);
        // A well-formed tombstone at LSN 0, below every frame: a key no
        // build writes, named as the open names it (until 2026-12-05 a
        // gap, and an empty value there passed for a slot), and no gap
        // after it (c1ec8de took its missing predecessor for one).
        stray_at(0);
        let r = verify_store(&cfg).unwrap();
        assert!(bad_key_at(&r, 0), "{:#?}", r.problems);
        assert_eq!(gaps(&r), [Location::Wal { lsn: 3 }], "{:#?}", r.problems);
    }

    /// A stray frame inside the span of the log's last tombstone sorts
    /// last, but the span ends the log: one gap at the stray, and no
    /// records said lost after it.
    #[test]
    fn a_stray_inside_the_last_span_is_no_lost_suffix() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = EngineConfig::new(dir.path());
        // No entry after the span: it ends the log.
        let stray_at = store_with_a_pruned_span(&cfg, false);
        stray_at(3);
        let r = verify_store(&cfg).unwrap();
        assert!(
            r.problems
                .iter()
                .all(|p| !matches!(p.kind, CorruptionKind::LostSuffix { .. })),
            "{:#?}",
            r.problems
        );
        assert!(
            gaps(&r).contains(&Location::Wal { lsn: 3 }),
            "{:#?}",
            r.problems
        );
    }

    /// An empty value at LSN 0 is no reserved slot: the open refuses it,
    /// and verify reports it where the open does.
    #[test]
    fn an_empty_value_at_lsn_0_is_a_bad_key() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = EngineConfig::new(dir.path());
        Engine::open(cfg.clone()).unwrap().close().unwrap();
        {
            let db = cfg.open_sled().unwrap();
            let tree = db.open_tree("cairn").unwrap();
            tree.insert(keys::wal_key(0), &[][..]).unwrap();
            db.flush().unwrap();
        }
        let r = verify_store(&cfg).unwrap();
        assert!(bad_key_at(&r, 0), "{r:?}");
        match Engine::open(cfg.clone()) {
            Err(Error::Corruption { location, kind }) => assert!(
                location == Location::Wal { lsn: 0 }
                    && matches!(kind, CorruptionKind::BadKey { .. }),
                "{location}: {kind}"
            ),
            Err(other) => panic!("expected the open to refuse it, got {other}"),
            Ok(_) => panic!("expected the open to refuse it, got an engine"),
        }
    }

    /// `TrailingBytes` says how many bytes trail, not how many there are.
    #[test]
    fn trailing_bytes_are_counted_past_the_declared_length() {
        let mut f = frame::encode(3, FrameKind::Records, 0, b"body");
        let whole = f.len();
        f.push(0);
        let said = frame::decode(3, &f).unwrap_err().to_string();
        assert!(
            said.starts_with(&format!(
                "1 trailing bytes after the declared length {whole}"
            )),
            "{said}"
        );
    }

    /// A live verify names the index entries below its snapshot that the
    /// log does not bear out, among them one whose frames reach past the
    /// snapshot's LSN (the log scan did not look there), and one above it
    /// of a partition the engine does not hold (stray, not appended since).
    #[test]
    fn a_live_verify_names_index_entries_the_log_does_not_bear_out() {
        let dir = tempfile::tempdir().unwrap();
        let (a, p) = (TopicPartition::new("a", 0), TopicPartition::new("p", 0));
        {
            let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
            for i in 0..3 {
                e.append(&[batch(&a, i * 10..i * 10 + 10, 10)]).unwrap();
            }
            e.close().unwrap();
        }
        let db = EngineConfig::new(dir.path()).open_sled().unwrap();
        let tree = db.open_tree("cairn").unwrap();
        let partitions = crate::recovery::load_summaries(&tree).unwrap();
        let k = keys::index_key(&a, 10);
        let (_, real) = IndexEntry::decode(&k, &tree.get(&k).unwrap().unwrap()).unwrap();
        // The last: past the log's end and the partition's next offset, so
        // appended since by no one (a live verify left it out, and said
        // clean, until 2026-12-05).
        for (tp, first_offset, lsn, chunks) in [
            (&a, 1000, 2, 1),
            (&a, 2000, 3, 2),
            (&p, 0, 4, 1),
            (&a, 5000, 50, 1),
        ] {
            let forged = IndexEntry {
                first_offset,
                last_offset: first_offset + 9,
                lsn,
                chunks,
                ..real
            };
            let (k, v) = forged.encode(tp);
            tree.insert(k, v).unwrap();
        }
        // The engine appends while the verify runs: asked a second time,
        // its log and `a`'s offsets have passed the last forged entry,
        // which the second pass must name all the same.
        let asked = std::cell::Cell::new(0);
        let a_then = partitions[&a];
        let now = |tp: &TopicPartition| {
            (*tp == a && asked.get() > 0).then_some(PartitionSummary {
                next_offset: 100_000,
                ..a_then
            })
        };
        let next_lsn_now = || {
            asked.set(asked.get() + 1);
            if asked.get() == 1 {
                4
            } else {
                1_000
            }
        };
        let bound = Snapshot {
            lsn_end: 4,
            partitions,
            now: &now,
            next_lsn_now: &next_lsn_now,
            poisoned: false,
        };
        let r = verify_tree(&tree, Some(&bound), &AtomicBool::new(false)).unwrap();
        let index: Vec<_> = r
            .problems
            .iter()
            .filter(|p| matches!(p.kind, CorruptionKind::IndexMismatch { .. }))
            .map(|p| p.to_string())
            .collect();
        assert_eq!(index.len(), 4, "{:#?}", r.problems);
        for (at, lsn) in [
            ("a/0@1000", 2),
            ("a/0@2000", 3),
            ("p/0@0", 4),
            ("a/0@5000", 50),
        ] {
            assert!(
                index.iter().any(|p| p.contains(at)
                    && p.contains(&format!("no intact entry in the log at lsn {lsn}"))),
                "{index:#?}"
            );
        }
    }
}
