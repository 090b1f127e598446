//! The engine: append with group commit, durable offsets, statistics, close.
//!
//! # Invariants
//! - `append` returns `Ok` only after the frames it wrote, their index
//!   entries and partition summaries are on stable storage (sled flush, then
//!   fdatasync of sled's data file).
//! - The offsets an `append` reports are taken from a snapshot made *before*
//!   the fsync that covered them started: what is reported durable is durable.
//! - Per partition, stored offsets strictly increase; records below the
//!   partition's next offset (its last stored offset + 1, or a start or
//!   advance above that) are dropped and counted as duplicates, never
//!   rewritten.
//! - After a failed write, fsync, slot top-up or writeback (writeback.rs:
//!   at the next check of the engine's state) the engine is poisoned: every
//!   write that checks after the poisoning returns `Error::Poisoned` (one
//!   already past its check, under the write lock, as a sync leader fails
//!   under the commit lock, still inserts; no wait for durability returns
//!   `Ok` after the poisoning, as a wait checks it before the synced
//!   sequence); the fsync is never retried.
//! - An append's values are inserted in log order: each entry's frames, then
//!   its index entry, then the partition summaries, then the checkpoint.
//!   sled's log survives a crash as a prefix, so nothing derived (index,
//!   summary) is ever durable without the frames it describes; recovery
//!   rebuilds what is missing (`torn_append.rs` cuts after every insert).
//! - Frames are written into slots reserved ahead of them (slots.rs), which
//!   are inserted before the frames that fill them.
//! - Lock order: `truncating` before `write` before `commit` before
//!   `syncer`. The sync leader never holds both `write` and `commit`; it
//!   holds `syncer` only for its sync, beside a slot top-up thread that
//!   takes `write` with `try_lock` (never waiting for it), and joins that
//!   thread before it takes `commit` again. `syncer` is never taken under
//!   `commit` (a failed sync's reason names the data file from the config,
//!   `EngineConfig::sled_data_path`). `writeback`'s one lock (writeback.rs)
//!   comes after all of these: taken under `write` by a deferred insert
//!   that crosses its mark (the others touch only an atomic; the first
//!   starts the thread under it), and by the sync leader before its flush;
//!   its thread holds none of the engine's.
//! - Dropping a poisoned engine, or the store of a failed open, never
//!   panics. sled's own drop writes out its buffers and fsyncs its file,
//!   and unwraps that fsync, which after a failed fdatasync meets the same
//!   error (the kernel reports a writeback error to every descriptor open
//!   on the file). That panic is caught: cairn counts on neither that write
//!   nor that fsync, nothing is acknowledged after the poisoning, and the
//!   next open does not trust the page cache (poisoned.rs). An open that
//!   panics (sled, on damage to its own files) counts as failed: its store
//!   is marked and dropped guarded before the panic goes on to the caller.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::body::{encode_entry, ENTRY_BODY_BYTES_MAX};
use crate::config::EngineConfig;
use crate::error::{CorruptionKind, Error, InvalidInput, Result};
use crate::frame::{self, FrameKind};
use crate::index::IndexEntry;
use crate::keys;
use crate::lock::DirLock;
use crate::meta::{self, StoreId};
use crate::offsets::{DurableOffsets, PartitionSummary};
use crate::record::{validate_batches, Record, RecordBatch, TopicPartition};
use crate::recovery::{self, RecoveryReport};
use crate::slots;
use crate::summaries::Summaries;
use crate::sync::DurableSync;
use crate::watermark::{self, Watermark};
use crate::writeback::{Writeback, WRITEBACK_OP};

/// Failpoint: after the frames are written to sled, before the fsync.
#[doc(hidden)]
pub const FAILPOINT_AFTER_WRITE: &str = "wal::append::after_write";
/// Failpoint: after the fsync, before `append` returns.
#[doc(hidden)]
pub const FAILPOINT_AFTER_SYNC: &str = "wal::append::after_sync";
/// Failpoint: at the end of `close`, its syncs made, before the engine's
/// drop lets go of sled (tests: a reader alive when the close began, gone
/// by the drop).
#[doc(hidden)]
pub const FAILPOINT_CLOSE_SYNCED: &str = "engine::close::synced";
/// Failpoint: before each of an append's sled inserts. `return` stops the
/// append there, as a crash between two log records would.
#[doc(hidden)]
pub const FAILPOINT_MID_WRITE: &str = "wal::append::mid_write";
/// Failpoint: before each slot a sync inserts for the next writes (slots.rs
/// `to_top_up`). `return` stops the run there and poisons the engine.
#[doc(hidden)]
pub const FAILPOINT_TOP_UP: &str = "wal::sync::top_up";
/// Failpoint: before sled's read of a topic's recorded id
/// (`Engine::topic_id`), where damage to sled's pages would panic it.
#[doc(hidden)]
pub const FAILPOINT_READ_TOPIC_ID: &str = "topics::read_id";
/// Failpoint: a sync's leader, once it leads, before its snapshot and its
/// flush (tests: what happens between a sync's check of the engine and its
/// flush, such as a writeback failing).
#[doc(hidden)]
pub const FAILPOINT_SYNC_LEAD: &str = "wal::sync::lead";
/// Failpoint: the durable view's checks after a sync's fsync succeeded.
/// `return` fails them, as a bug in the view's bookkeeping would.
#[doc(hidden)]
pub const FAILPOINT_VIEW_CHECK: &str = "wal::sync::view_check";

/// The poison's step when the durable view's checks fail after an fsync
/// that succeeded: a bug, not the disk.
pub const DURABLE_VIEW_OP: &str = "durable view";

/// Per partition, the highest offset a truncation by this engine deleted
/// ([`Engine::pruned_through`]).
pub(crate) type PrunedThrough = Arc<Mutex<BTreeMap<TopicPartition, i64>>>;

/// The durable write-ahead record log. `Send + Sync`: share it with `Arc`.
pub struct Engine {
    pub(crate) cfg: EngineConfig,
    /// Dropped by `Drop for Engine`, guarded when the engine is poisoned.
    pub(crate) db: Held<sled::Db>,
    pub(crate) tree: Held<sled::Tree>,
    /// Set when the engine is poisoned, and shared with every reader, which
    /// holds a sled handle of its own: whichever drops the last one drops
    /// it guarded ([`drop_failing_store`]).
    pub(crate) store_failing: Arc<AtomicBool>,
    /// Per partition, the highest offset a truncation by this engine has
    /// deleted, set before its deletion is applied; shared with every
    /// reader, which refuses to step over records deleted under it
    /// (reader.rs, `RecordIter::check_not_pruned`).
    pub(crate) pruned_through: PrunedThrough,
    pub(crate) write: Mutex<WriteState>,
    commit: Mutex<CommitState>,
    commit_cv: Condvar,
    syncer: Mutex<DurableSync>,
    /// Written for a whole `truncate_before` (all its steps), and by a
    /// `TruncationPass` across partitions until its deletions are durable;
    /// read for a whole `verify`, backup or truncation plan, which must
    /// not see a truncation half done or not yet durable; every
    /// wait for it can be given up (truncation_lock.rs). It has no
    /// poisoning: a panicked truncation poisons the engine instead.
    pub(crate) truncating: crate::truncation_lock::TruncationLock,
    counters: Counters,
    /// Writes sled's log behind deferred writes (writeback.rs); stopped
    /// before the last sync and before `db` is dropped.
    writeback: Writeback,
    closed: AtomicBool,
    /// Set by `close`: its syncs add no slots (nothing will be written).
    closing: AtomicBool,
    /// A reader was alive when the engine began to shut down (`close`, or
    /// its drop): its reads may have written node splits into sled after
    /// the engine's last sync, which sled's final flush writes with its
    /// errors only logged, so the open mark stays (`Drop`).
    reader_at_shutdown: AtomicBool,
    recovery: RecoveryReport,
    _lock: Option<DirLock>,
}

/// State owned by the writer lock.
#[derive(Debug, Clone)]
pub(crate) struct WriteState {
    pub next_lsn: u64,
    /// Number of sled batches applied; the group-commit ticket.
    pub seq: u64,
    /// Summaries including writes not yet durable, with those changed
    /// since the last sync took them (summaries.rs).
    pub partitions: Summaries,
    pub bytes_since_checkpoint: u64,
    pub checkpoint_lsn: u64,
    /// First LSN with no reserved slot (slots.rs): slots fill
    /// `next_lsn..slots_end`.
    pub slots_end: u64,
}

#[derive(Debug)]
struct CommitState {
    synced_seq: u64,
    syncing: bool,
    poisoned: Option<(&'static str, String)>,
    durable: Arc<DurableView>,
}

/// What the last completed fsync made durable. Updated in place by each
/// sync with the summaries changed since the one before (summaries.rs),
/// unless a reader still holds it: then the sync updates a copy.
#[derive(Debug, Default, Clone)]
pub(crate) struct DurableView {
    pub partitions: BTreeMap<TopicPartition, PartitionSummary>,
    pub lsn: u64,
}

/// What a sync makes durable, taken before it starts: the summaries
/// changed since the sync before, and the log's end.
struct ViewChanges {
    summaries: Vec<(TopicPartition, PartitionSummary)>,
    lsn: u64,
    /// Every summary at the snapshot, in debug builds: the view updated
    /// with the changes must equal it (summaries.rs, invariants).
    #[cfg(debug_assertions)]
    whole: BTreeMap<TopicPartition, PartitionSummary>,
}

impl ViewChanges {
    /// In debug builds, whether `view` updated with these changes is the
    /// snapshot (summaries.rs, invariants): checked on a copy before the
    /// view is touched, so that a mismatch poisons the engine through the
    /// sync's error path instead of panicking under the commit lock with
    /// the view half updated. Always true in release builds.
    fn reach_snapshot(&self, view: &DurableView) -> bool {
        #[cfg(debug_assertions)]
        {
            let mut would = view.partitions.clone();
            would.extend(self.summaries.iter().cloned());
            would == self.whole
        }
        #[cfg(not(debug_assertions))]
        {
            let _ = view;
            true
        }
    }

    /// Applied in the order the syncs were led (one at a time, each after
    /// the one before it published), so the view is the snapshot's.
    fn apply(self, view: &mut DurableView) {
        view.partitions.extend(self.summaries);
        view.lsn = self.lsn;
    }
}

/// What [`Engine::write`] stored. Not durable yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Per partition touched: the next offset now written (not durable).
    pub offsets: BTreeMap<TopicPartition, i64>,
    /// Records this call wrote.
    pub appended_records: u64,
    /// Records this call dropped as redelivered: below their partition's
    /// next offset when the call came ([`Engine::append`]).
    pub duplicate_records: u64,
    /// The group-commit sequence that covers this write.
    ticket: u64,
}

#[derive(Debug, Default)]
struct Counters {
    appends: AtomicU64,
    entries: AtomicU64,
    frames: AtomicU64,
    frame_bytes: AtomicU64,
    records_appended: AtomicU64,
    records_duplicate: AtomicU64,
    fsyncs: AtomicU64,
    fsync_nanos: AtomicU64,
    slots_by_writes: AtomicU64,
    slots_by_syncs: AtomicU64,
}

/// Counters and per-partition figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineStats {
    /// Calls to `append` or `write` that passed their checks, including
    /// one whose records were all dropped as redelivered (it wrote
    /// nothing; `records_duplicate` counts those records).
    pub appends: u64,
    pub entries: u64,
    pub frames: u64,
    pub frame_bytes: u64,
    pub records_appended: u64,
    pub records_duplicate: u64,
    /// Completed durable syncs (flush + fdatasync). Fewer than `appends`
    /// when group commit shared them.
    pub fsyncs: u64,
    pub fsync_nanos_total: u64,
    /// Reserved slots (slots.rs) inserted by writes, which stop for them.
    pub slots_reserved_by_writes: u64,
    /// Reserved slots inserted beside syncs, while they wait on the disk.
    pub slots_reserved_by_syncs: u64,
    /// Flushes of sled's log (no fsync) begun behind deferred writes
    /// (`write`), a MiB at a time (writeback.rs).
    pub writebacks: u64,
    pub next_lsn: u64,
    pub durable_lsn: u64,
    pub partitions: Vec<PartitionInfo>,
}

/// What the store durably holds for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub tp: TopicPartition,
    /// The lowest offset stored (retention moves it up); equal to
    /// `next_offset` when the partition holds no record.
    pub first_offset: i64,
    /// One past the highest offset ever stored (or where the partition was
    /// started, or advanced to past offsets that held no record): the
    /// offset to commit and to resume from. It never goes
    /// down, not even when retention deletes every record.
    pub next_offset: i64,
    /// Records held, between `first_offset` and `next_offset` (fewer than
    /// their difference where the source's offsets have gaps).
    pub record_count: u64,
    /// Bytes of keys, values, header names and header values held
    /// (`Record::payload_bytes`).
    pub payload_bytes: u64,
}

impl PartitionInfo {
    fn of(tp: &TopicPartition, s: &PartitionSummary) -> PartitionInfo {
        PartitionInfo {
            tp: tp.clone(),
            first_offset: s.first_offset,
            next_offset: s.next_offset,
            record_count: s.record_count,
            payload_bytes: s.payload_bytes,
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding an engine lock leaves state unknown: propagate it.
    m.lock().expect("engine lock poisoned by an earlier panic")
}

/// `m`'s guard, also after a panic while it was held: for reads of the
/// write state that a poisoned engine still answers (verify, stats). Every
/// panic while `write` is held poisons the engine (`PoisonOnPanic` in
/// writes and truncations), and the writers check for that first. Also
/// for state that stays whole through a panic (writeback.rs' flags, the
/// poison reason a failed writeback sets).
pub(crate) fn lock_to_read<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The sync leader's duty while it syncs, for when it panics instead of
/// returning, or returns early on an engine already poisoned (forgotten
/// when it returns normally): end the sync as failed, poison the engine (a
/// no-op if it is), and wake the followers, who would otherwise wait for
/// good.
struct SyncLeader<'a> {
    engine: &'a Engine,
}

impl Drop for SyncLeader<'_> {
    fn drop(&mut self) {
        // Not held by this thread (the guard is forgotten before the leader
        // takes it again); poisoned only by a panic elsewhere.
        self.engine
            .poison_after_panic("fsync", "the sync panicked (see the panic message)", |c| {
                c.syncing = false
            });
    }
}

/// A duty of a thread that writes to the store outside a sync (a
/// truncation): if it unwinds, the engine is poisoned, since what the
/// panic left half done is unknown. Takes no lock until it is dropped.
pub(crate) struct PoisonOnPanic<'a> {
    pub engine: &'a Engine,
    pub op: &'static str,
}

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let reason = format!("the {} panicked (see the panic message)", self.op);
            self.engine.poison_after_panic(self.op, &reason, |_| {});
        }
    }
}

/// `create_dir_all`, then an fsync of the parent of every directory it
/// made: a new store's own directory entry survives a power loss, not only
/// what is inside it (which `DurableSync::open` syncs).
fn create_dir_durably(path: &std::path::Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut p = Some(path);
    while let Some(dir) = p {
        if dir.as_os_str().is_empty() || dir.exists() {
            break;
        }
        missing.push(dir);
        p = dir.parent();
    }
    std::fs::create_dir_all(path)?;
    for dir in missing {
        let parent = match dir.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        crate::sync::sync_dir(parent)?;
    }
    Ok(())
}

/// The error of a damaged header of one of sled's log segments (`d`), for
/// an open to write and for any write to a store opened to read with one.
fn segment_header_damage(cfg: &EngineConfig, d: &crate::segments::DamagedHeader) -> Error {
    let (location, kind) = d.located(cfg.sled_data_path());
    Error::corruption(location, kind)
}

pub(crate) fn store_err(op: &'static str) -> impl FnOnce(sled::Error) -> Error {
    move |source| match source {
        // sled reads pages from its log as they are needed, and checks
        // them: damage it finds there is corruption like any other, typed
        // and located, not a failure of the store.
        sled::Error::Corruption { at, .. } => Error::Corruption {
            location: crate::error::Location::SledLog {
                log_offset: at.map(|p| p.lid()),
            },
            kind: crate::error::CorruptionKind::SledUnreadable {
                detail: format!("a page failed sled's own checks during {op}"),
            },
        },
        source => Error::Store { op, source },
    }
}

impl Engine {
    /// Open (creating if needed) the store at `cfg.path` and recover it.
    pub fn open(cfg: EngineConfig) -> Result<Engine> {
        Self::open_locking(cfg, true)
    }

    /// [`open`](Self::open), without taking the directory's lock when
    /// `lock` is false: for a caller that holds it already (a backup's
    /// copy, opened before the backup lets go of its directory).
    pub(crate) fn open_locking(cfg: EngineConfig, lock: bool) -> Result<Engine> {
        cfg.validate()?;
        // The start of open (and so of recovery), for torture tests that kill
        // the process here: its own target, so that it can be enabled alone.
        tracing::debug!(target: "cairn_engine::open", path = %cfg.path.display(), "opening store");
        let io = |op, e| Error::Io {
            op,
            path: cfg.path.clone(),
            source: e,
        };
        create_dir_durably(&cfg.path).map_err(|e| io("create data directory", e))?;
        let lock = if lock {
            Some(DirLock::acquire(&cfg.path)?)
        } else {
            None
        };
        // A backup's own open of its copy holds the lock already (`lock`
        // false), and is the one open an unfinished backup allows.
        if lock.is_some() {
            crate::backup::refuse_unfinished_backup(&cfg.path)?;
        }
        // No handle of an earlier engine still writes the store: its
        // drop's writes must come before the marks are acted on.
        cfg.wait_for_sled_handles()?;
        // A mark left by a poisoned engine: nothing is read through sled
        // before the store's cached pages are dropped (poisoned.rs).
        // So is one left open by an engine that stopped without a close.
        let before = crate::poisoned::before_open(&cfg)?;
        // Then this engine's own, before sled writes anything.
        crate::poisoned::mark_open(&cfg.path).map_err(|e| Error::Io {
            op: "write of the open mark (an open's first write)",
            path: cfg.path.join(crate::poisoned::OPEN_FILE),
            source: e,
        })?;
        let path = cfg.path.clone();
        let prior = before.poisoned.as_ref().map(|p| p.reason.clone());
        // A failed open's mark, keeping the reason of one it found.
        let mark = |reason: String| {
            let reason = match &prior {
                Some(prior) => format!("{reason} (after an earlier {prior})"),
                None => reason,
            };
            crate::poisoned::record(&path, "open", &reason);
        };
        let mut lock = lock;
        let mut sled = None;
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Self::open_store(cfg, &mut lock, before, &mut sled)
        }));
        // A panic in the open (sled's, on damage to its own files it does
        // not handle, or recovery's) goes on to the caller, as before, but
        // first what a failed open does: the store is marked (the next
        // open in this boot does not trust the page cache, as after a
        // caught panic of a read), and sled's handles are dropped guarded
        // (its drop fsyncs and unwraps: on a failing disk a second panic,
        // during this one's unwind, would abort the process). Until the
        // night of 2026-12-04 the unwind dropped them unguarded, unmarked.
        let opened = match opened {
            Ok(opened) => opened,
            Err(payload) => {
                mark(format!(
                    "the open panicked: {}",
                    crate::error::panic_message(&*payload)
                ));
                drop_failing_store(sled.take());
                drop(lock);
                std::panic::resume_unwind(payload);
            }
        };
        // An open that fails on I/O (its recovery's fsync, the watermark's)
        // may leave pages in the cache that the disk does not hold, as a
        // poisoned engine does: the next open treats the store the same way.
        // Written while the directory is still locked: no other opener can
        // recover from the cache in between, and before sled's handles are
        // dropped (sled's drop fsyncs, and panics on the failed disk).
        if let Err(e) = &opened {
            if e.may_leave_unwritten_pages() {
                mark(e.to_string());
            }
            // Whatever the error: a disk that fails in other ways (a file
            // system remounted read-only) fails sled's own fsync too.
            drop_failing_store(sled.take());
        }
        drop(lock);
        opened
    }

    /// The rest of [`open_locking`](Self::open_locking), with the
    /// directory made, locked (if asked), any poison or open mark acted on,
    /// and the open mark left.
    /// sled's handles are kept in `sled` from the moment they open until
    /// the engine takes them, so that a failed open can drop them guarded.
    fn open_store(
        cfg: EngineConfig,
        lock: &mut Option<DirLock>,
        before: crate::poisoned::Before,
        sled: &mut Option<(sled::Db, Option<sled::Tree>)>,
    ) -> Result<Engine> {
        let io = |op, e| Error::Io {
            op,
            path: cfg.path.clone(),
            source: e,
        };
        // A store that lost its data file is not taken for a new one: sled
        // would make an empty one, and the evidence would be gone before
        // recovery refused the store as having lost its records (until
        // 2026-12-07 `cairn run` did so; found by an audit).
        watermark::refuse_lost_store(&cfg)?;
        let (db, tree) = sled.insert((cfg.open_sled()?, None));
        // The headers of sled's segments, read once sled has opened and
        // before anything is written (segments.rs): sled's open has read
        // those of the segments written since its snapshot, taken one
        // that fails its CRC for a free segment (a header torn by a crash
        // as sled began the segment, which held nothing synced; or damage,
        // which the watermark then finds if it held synced frames) and
        // written zeros over it. A damaged header left is one sled did not
        // read: of a segment it holds in use, below its snapshot, and may
        // go on writing into, which a later open would lose. Read before
        // sled opened, a crash's torn header would refuse the store.
        let damaged_segment_headers = crate::segments::damaged_headers(&cfg.sled_data_path())
            .map_err(|e| Error::Io {
                op: "read the headers of sled's log segments",
                path: cfg.sled_data_path(),
                source: e,
            })?;
        if let (false, Some(d)) = (cfg.open_to_read, damaged_segment_headers.first()) {
            return Err(segment_header_damage(&cfg, d));
        }
        let tree = &*tree.insert(db.open_tree("cairn").map_err(store_err("open tree"))?);
        let db = &*db;
        let mut syncer = DurableSync::open(&cfg.sled_path()).map_err(|e| Error::Io {
            op: "open sled's data file for fdatasync, and sync what sled made before it",
            path: cfg.sled_path(),
            source: e,
        })?;
        let durable_mark = watermark::read(&cfg.path)?;
        let (state, mut report) = recovery::recover(&cfg, db, tree, &mut syncer, durable_mark)?;
        syncer.set_watermark(Watermark::open(&cfg.path, state.next_lsn - 1)?);
        if before.poisoned.is_some() {
            // Recovered and synced: the mark has done its work.
            crate::poisoned::clear(&cfg.path).map_err(|e| io("remove the poison mark", e))?;
        }
        // A poison mark's new copy that a full disk cut short (the engine
        // that wrote it left its open mark too, which this open acted on):
        // junk once recovered, which stayed for good (until 2026-12-07; an
        // audit).
        crate::poisoned::remove_stale_replacement(&cfg.path);
        report.poisoned_before = before.poisoned;
        report.unclean_stop_cache_dropped = before.unclean_cache_dropped;
        report.damaged_segment_headers = damaged_segment_headers;
        let durable = DurableView {
            partitions: (*state.partitions).clone(),
            lsn: state.next_lsn - 1,
        };
        tracing::info!(
            path = %cfg.path.display(),
            frames_checked = report.frames_checked,
            records = report.records_checked,
            truncated = report.truncated.is_some(),
            index_entries_repaired = report.index_entries_repaired,
            index_entries_damaged = report.index_entries_damaged,
            duration_ms = report.duration.as_millis() as u64,
            "store recovered"
        );
        let Some((db, Some(tree))) = sled.take() else {
            unreachable!("both opened above");
        };
        Ok(Engine {
            cfg,
            db: Held::new(db),
            tree: Held::new(tree),
            store_failing: Arc::new(AtomicBool::new(false)),
            pruned_through: Arc::default(),
            write: Mutex::new(state),
            commit: Mutex::new(CommitState {
                synced_seq: 0,
                syncing: false,
                poisoned: None,
                durable: Arc::new(durable),
            }),
            commit_cv: Condvar::new(),
            syncer: Mutex::new(syncer),
            truncating: Default::default(),
            counters: Counters::default(),
            writeback: Writeback::default(),
            closed: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            reader_at_shutdown: AtomicBool::new(false),
            recovery: report,
            // Taken last, once nothing can fail: until then the caller
            // holds it (and writes the poison mark under it on failure).
            _lock: lock.take(),
        })
    }

    /// The configuration the engine was opened with.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// What recovery found and did when this engine opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The store's identity: chosen when it was created, kept for its
    /// life, copied by [`backup_to`](Self::backup_to).
    pub fn store_id(&self) -> StoreId {
        self.recovery.store_id
    }

    /// `Ok` while the engine takes writes; the `Poisoned` error (naming the
    /// failed operation) or `Closed` once it does not.
    pub fn check_usable(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        self.poison_if_writeback_failed();
        if let Some((op, reason)) = &lock(&self.commit).poisoned {
            return Err(Error::Poisoned {
                op,
                reason: reason.clone(),
            });
        }
        Ok(())
    }

    /// A writeback that failed (writeback.rs) poisons the engine here, the
    /// first time it is asked after the failure: its thread cannot. Asked
    /// by every check of the engine's state (`check_usable`,
    /// `is_poisoned`) and as the thread is stopped. Never panics (the
    /// drop asks it).
    fn poison_if_writeback_failed(&self) {
        let Some(reason) = self.writeback.failure() else {
            return;
        };
        // Also after a panic under `commit`: the mark must name the failure.
        let mut c = lock_to_read(&self.commit);
        if c.poisoned.is_none() {
            let reason = self.writeback_reason(reason);
            tracing::error!(op = WRITEBACK_OP, %reason, "engine poisoned; no further writes, reopen to recover");
            self.set_poisoned(&mut c, WRITEBACK_OP, reason);
            self.commit_cv.notify_all();
        }
    }

    /// A failed writeback's reason, naming sled's folder as a failed write
    /// does (sled's error names no file).
    fn writeback_reason(&self, reason: String) -> String {
        format!("{reason}, writing into {}", self.cfg.sled_path().display())
    }

    /// Stop the writeback thread (writeback.rs) and wait for it; a
    /// writeback that failed poisons the engine now. Before the engine
    /// counts its readers: the thread holds a clone of `store_failing`,
    /// dropped as it ends.
    fn stop_writeback(&self) {
        self.writeback.stop();
        self.poison_if_writeback_failed();
    }

    /// Wait until the writeback thread has ended `n` flushes since it
    /// started, or one has failed, or it has stopped, for at most a
    /// minute; whether that came. For tests, which may not sleep.
    #[doc(hidden)]
    pub fn wait_writebacks(&self, n: u64) -> bool {
        self.writeback
            .wait_flushes(n, std::time::Duration::from_secs(60))
    }

    /// True once a write, fsync or writeback has failed.
    pub fn is_poisoned(&self) -> bool {
        self.poison_if_writeback_failed();
        // A commit lock poisoned by a panic is taken for a poisoned engine,
        // as the engine's drop takes it.
        self.commit.lock().map_or(true, |c| c.poisoned.is_some())
    }

    /// A panic its caller caught while using this engine (sled's, reading
    /// pages of damaged files, say): the engine is poisoned, so that its
    /// drop does not flush a store sled may have left half-changed, and
    /// the next open in this boot does not trust the page cache.
    #[doc(hidden)]
    pub fn poison_after_caught_panic(&self, op: &'static str, what: &str) {
        tracing::error!(op, what, "a panic while using the engine: poisoned");
        self.poison_after_panic(op, &format!("{op} panicked: {what}"), |_| {});
    }

    /// Poison the engine from a drop while its thread unwinds (a panic not
    /// caught yet, whose message its thread prints): said once, and not at
    /// all if a guard poisoned the engine already, with its own reason.
    pub(crate) fn poison_while_unwinding(&self, op: &'static str, reason: &str) {
        self.poison_after_panic(op, reason, |c| {
            if c.poisoned.is_none() {
                tracing::error!(op, "a panic while using the engine: poisoned");
            }
        });
    }

    /// Poison the engine from a drop during a panic: the commit lock is
    /// taken even if poisoned (a second panic here would abort), `also`
    /// runs under it, and waiters are woken.
    fn poison_after_panic(
        &self,
        op: &'static str,
        reason: &str,
        also: impl FnOnce(&mut CommitState),
    ) {
        let mut c = self.commit.lock().unwrap_or_else(|e| e.into_inner());
        also(&mut c);
        if c.poisoned.is_none() {
            self.set_poisoned(&mut c, op, reason.into());
        }
        self.commit_cv.notify_all();
    }

    /// Poison the engine (under `commit`): the mark is left on disk first
    /// (poisoned.rs), so that no poisoning goes without it.
    fn set_poisoned(&self, c: &mut CommitState, op: &'static str, reason: String) {
        // sled's errors, once cloned, carry the OS error's debug form.
        let reason = crate::error::tidy_os_errors(&reason);
        crate::poisoned::record(&self.cfg.path, op, &reason);
        self.store_failing.store(true, Ordering::SeqCst);
        c.poisoned = Some((op, reason));
    }

    /// [`Self::poison`] for a failed write into sled (an insert, a batch):
    /// sled's error names no file (a full disk is a bare "No space left on
    /// device"), so the reason names sled's folder (since 2026-12-05).
    fn write_failed(&self, op: &'static str, e: impl std::fmt::Display) -> Error {
        let sled = self.cfg.sled_path();
        self.poison(op, format!("{e}, writing into {}", sled.display()))
    }

    pub(crate) fn poison(&self, op: &'static str, reason: String) -> Error {
        // sled's errors, once cloned, carry the OS error's debug form.
        let reason = crate::error::tidy_os_errors(&reason);
        tracing::error!(op, %reason, "engine poisoned; no further writes, reopen to recover");
        let mut c = lock(&self.commit);
        if c.poisoned.is_none() {
            self.set_poisoned(&mut c, op, reason.clone());
        }
        self.commit_cv.notify_all();
        Error::Poisoned { op, reason }
    }

    /// Append batches and return once they are durable.
    ///
    /// Records below a partition's next offset (what earlier calls wrote)
    /// are dropped and counted as duplicates: a source's offsets never go
    /// back, so they are a redelivery (Kafka's, from a committed offset
    /// after a rewind or rebalance). That holds for one in a gap of the
    /// partition's offsets too, which the archive does not hold (the source
    /// had no record there). Invalid input is refused before anything is
    /// written, and that includes a partition named by more than one batch
    /// of the call whose offsets do not go on increasing from batch to
    /// batch. Concurrent callers share fsyncs (group commit).
    ///
    /// # Errors
    /// - [`Error::InvalidInput`]: the batches were refused before anything
    ///   was written; the engine is as it was, and may be called again.
    /// - [`Error::Poisoned`]: a write or an fsync failed, this call's or
    ///   another's. Nothing of this call may be taken as durable, and every
    ///   later call fails the same way: never retry (a failed fsync may
    ///   have dropped the pages it was to write). Drop the engine and open
    ///   it again; recovery finds what is durable.
    /// - Any other error (a closed engine, corruption met) names its cause;
    ///   nothing of this call is reported durable.
    pub fn append(&self, batches: &[RecordBatch]) -> Result<DurableOffsets> {
        let t0 = Instant::now();
        // No writeback: the sync below flushes at once.
        let written = self.write_unsynced(batches, false)?;
        let offsets = self.wait_durable(written.ticket, |view| {
            written
                .offsets
                .into_keys()
                .filter_map(|tp| view.partitions.get(&tp).map(|s| (tp, s.next_offset)))
                .collect()
        })?;
        fail::fail_point!(FAILPOINT_AFTER_SYNC, |a| failpoint_action(
            FAILPOINT_AFTER_SYNC,
            a
        ));
        tracing::debug!(
            records = written.appended_records,
            duplicates = written.duplicate_records,
            append_us = t0.elapsed().as_micros() as u64,
            "append"
        );
        Ok(DurableOffsets {
            offsets,
            appended_records: written.appended_records,
            duplicate_records: written.duplicate_records,
        })
    }

    /// Record, durably, where partitions the store holds nothing of start:
    /// records below each one's offset are not wanted. A partition then
    /// reads as held and empty, with `offset` as its durable next offset
    /// (the summary a retention pass leaves when it empties a partition),
    /// so a consumer that restarts before its first record resumes there.
    /// A partition the store already has a summary for is left as it is.
    /// Returns the durable next offset of every partition in `starts`.
    ///
    /// Each summary is one insert with no frame: a crash keeps it or not,
    /// and either way the store is consistent.
    pub fn start_partitions(
        &self,
        starts: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        self.put_summaries("partition start", starts, |current, offset| {
            current
                .is_none()
                .then(|| PartitionSummary::empty_at(offset))
        })?;
        self.sync()?;
        Ok(self.durable_offsets_of(starts))
    }

    /// Record that the offsets from each partition's next offset up to the
    /// one given hold no record to archive: the source had none there
    /// (Kafka's transaction markers, an aborted transaction's records,
    /// offsets compacted away) or the caller set them aside. The
    /// partition's next offset, and its next-offset floor, become the one
    /// given; what it holds is unchanged (an empty partition now starts
    /// there). A partition whose next offset is already at or past it is
    /// left as it is; one the store holds nothing of is started there, as
    /// [`start_partitions`](Self::start_partitions) does. Records below the
    /// new next offset are dropped from then on, and counted as
    /// duplicates (`duplicate_records`), not refused with an error.
    ///
    /// Like [`write`](Self::write), nothing is durable until a later
    /// [`sync`](Self::sync) (or `append`) covers it; the durable offsets
    /// move then. Each summary is one insert with no frame: a crash keeps
    /// it or not, and either way the store is consistent (recovery and
    /// verify take a next offset above the newest index entry when it is
    /// the floor; FORMAT.md, "Partition summary").
    pub fn advance_partitions(&self, to: &BTreeMap<TopicPartition, i64>) -> Result<()> {
        self.put_summaries("partition advance", to, |current, offset| match current {
            None => Some(PartitionSummary::empty_at(offset)),
            Some(s) if s.next_offset < offset => {
                let mut s = *s;
                if s.record_count == 0 {
                    s.first_offset = offset;
                }
                s.next_offset = offset;
                s.next_offset_floor = offset;
                Some(s)
            }
            Some(_) => None,
        })
    }

    /// The Kafka topic id recorded for each topic bound so far
    /// ([`bind_topics`](Self::bind_topics)), by topic name. A damaged
    /// binding is an error naming its topic (or its key), not skipped: the
    /// caller would take the topic for unbound and record another id over
    /// it. Refused once the engine is poisoned, unlike record reads: this
    /// reads sled's tree as it stands, which after a failed fsync may hold
    /// a binding that never became durable, where a record read stops at
    /// the durable view the last successful fsync published.
    pub fn topic_ids(&self) -> Result<BTreeMap<String, crate::TopicId>> {
        self.check_usable()?;
        let mut ids = BTreeMap::new();
        for item in self.tree.scan_prefix([keys::PREFIX_TOPIC]) {
            let (k, v) = item.map_err(store_err("read topic ids"))?;
            let (topic, id) =
                crate::topics::decode_entry(&k, &v).map_err(|(l, k)| Error::corruption(l, k))?;
            ids.insert(topic, id);
        }
        Ok(ids)
    }

    /// The Kafka topic id recorded for `topic`, if any: its key alone is
    /// read, so a damaged binding of another topic does not stand in the
    /// way. A damaged one of this topic is an error naming it; a
    /// [`bind_topics`](Self::bind_topics) of the topic writes over it.
    pub fn topic_id(&self, topic: &str) -> Result<Option<crate::TopicId>> {
        self.check_usable()?;
        crate::record::validate_topic(topic)?;
        let key = crate::topics::key(topic);
        fail::fail_point!(FAILPOINT_READ_TOPIC_ID);
        let Some(v) = self.tree.get(&key).map_err(store_err("read topic id"))? else {
            return Ok(None);
        };
        crate::topics::decode_entry(&key, &v)
            .map(|(_, id)| Some(id))
            .map_err(|(l, k)| Error::corruption(l, k))
    }

    /// Record, durably, the Kafka topic id of each topic in `ids`, in
    /// place of any recorded before (a binding the caller was told to
    /// change). Returns once they are durable; a failed write or fsync
    /// poisons the engine, as an append's does.
    pub fn bind_topics(&self, ids: &BTreeMap<String, crate::TopicId>) -> Result<()> {
        self.check_usable()?;
        for topic in ids.keys() {
            crate::record::validate_topic(topic)?;
        }
        if ids.is_empty() {
            return Ok(());
        }
        {
            self.refuse_write_to_damage()?;
            let mut w = self.write_state()?;
            let op = "topic binding";
            let _poison_on_panic = PoisonOnPanic { engine: self, op };
            self.check_usable()?;
            for (topic, &id) in ids {
                let v = crate::topics::encode(topic, id);
                if let Err(e) = self.tree.insert(crate::topics::key(topic), v) {
                    return Err(self.write_failed(op, e));
                }
            }
            // A new write for the next sync to cover (it flushes sled's
            // log and fdatasyncs it).
            w.seq += 1;
        }
        self.sync()
    }

    /// Insert the summary `summary` makes of each partition in `offsets`
    /// (from its current one, if any, and its offset; `None` leaves it),
    /// after checking every offset. Not synced.
    fn put_summaries(
        &self,
        op: &'static str,
        offsets: &BTreeMap<TopicPartition, i64>,
        summary: impl Fn(Option<&PartitionSummary>, i64) -> Option<PartitionSummary>,
    ) -> Result<()> {
        self.check_usable()?;
        for (tp, &offset) in offsets {
            crate::record::validate_tp(tp)?;
            if !(0..i64::MAX).contains(&offset) {
                return Err(InvalidInput::StartOffset {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    offset,
                }
                .into());
            }
        }
        self.refuse_write_to_damage()?;
        let mut w = self.write_state()?;
        let _poison_on_panic = PoisonOnPanic { engine: self, op };
        self.check_usable()?;
        let changed: Vec<(TopicPartition, PartitionSummary)> = offsets
            .iter()
            .filter_map(|(tp, &offset)| Some((tp.clone(), summary(w.partitions.get(tp), offset)?)))
            .collect();
        for (tp, s) in &changed {
            let (k, v) = s.encode(tp);
            if let Err(e) = self.tree.insert(k, v) {
                return Err(self.write_failed(op, e));
            }
        }
        // Into the engine's state once every insert is made, as a write's
        // summaries are: a failed one leaves it as it was (poisoned).
        if !changed.is_empty() {
            w.partitions.extend(changed);
            w.seq += 1;
        }
        Ok(())
    }

    /// Write batches to the log without waiting for them to be durable: the
    /// first half of [`append`](Self::append). Nothing written is reported
    /// durable until a later [`sync`](Self::sync) (or an `append`, from any
    /// thread) covers it; that is the Kafka Connect `put` / `flush` split,
    /// and lets a caller pay one fsync for many writes.
    ///
    /// Duplicates, validation and poisoning are as for `append`. A write
    /// that is never synced may survive a process crash (sled's log is in
    /// the page cache) or may not (power loss): either way recovery finds a
    /// prefix of the log, never a part of a write without what precedes it.
    /// Once writes have left a MiB unflushed (counted as they go in, so
    /// also within one large write), a thread of the engine's flushes sled
    /// (no fsync), so that sled writes its log a MiB at a time
    /// (writeback.rs).
    ///
    /// # Errors
    /// As for [`append`](Self::append): invalid input is refused with
    /// nothing written; a failed write poisons the engine.
    pub fn write(&self, batches: &[RecordBatch]) -> Result<Written> {
        self.write_unsynced(batches, true)
    }

    /// [`Self::write`], with the writeback counting its inserts (`behind`)
    /// or not (`append`'s first half, whose sync follows at once).
    fn write_unsynced(&self, batches: &[RecordBatch], behind: bool) -> Result<Written> {
        self.check_usable()?;
        validate_batches(batches, self.cfg.record_bytes_max)?;
        let mut touched = BTreeSet::new();
        let (seq, offsets, appended, duplicates) = {
            self.refuse_write_to_damage()?;
            let mut w = self.write_state()?;
            // A panic among the inserts leaves the store and the engine's
            // state unknown: poisoned, as a failed insert would be. Declared
            // after the lock, so dropped first: the engine is poisoned
            // before the lock is let go, and a thread waiting on it finds
            // the poisoning (`write_state`).
            let _poison_on_panic = PoisonOnPanic {
                engine: self,
                op: "write",
            };
            self.check_usable()?;
            // Written in this order, one insert each: an entry's frames, then
            // its index entry; then the summaries; then the checkpoint.
            let mut writes: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut updated: BTreeMap<TopicPartition, PartitionSummary> = BTreeMap::new();
            let mut next_lsn = w.next_lsn;
            let (mut appended, mut duplicates, mut frames, mut frame_bytes, mut entries) =
                (0u64, 0u64, 0u64, 0u64, 0u64);
            for b in batches {
                touched.insert(b.tp.clone());
                let current = updated
                    .get(&b.tp)
                    .or_else(|| w.partitions.get(&b.tp))
                    .copied();
                let next = current.map_or(i64::MIN, |s| s.next_offset);
                let start = b.records.partition_point(|r| r.offset < next);
                duplicates += start as u64;
                let fresh = &b.records[start..];
                if fresh.is_empty() {
                    continue;
                }
                let mut summary = current.unwrap_or(PartitionSummary {
                    first_offset: fresh[0].offset,
                    next_offset: fresh[0].offset,
                    record_count: 0,
                    payload_bytes: 0,
                    next_offset_floor: 0,
                });
                if summary.record_count == 0 {
                    // Empty (new, or emptied by retention): it starts here now.
                    summary.first_offset = fresh[0].offset;
                }
                for group in split_entries(fresh, self.cfg.entry_bytes_target) {
                    debug_assert!(group.len() <= crate::body::RECORDS_PER_ENTRY_MAX);
                    let body = encode_entry(&b.tp, group);
                    if body.len() > ENTRY_BODY_BYTES_MAX {
                        // Not reachable with validated records (split_entries
                        // bounds a group's encoding well below this), but a
                        // refusal here writes nothing: the inserts come later.
                        return Err(InvalidInput::EntryTooLarge {
                            topic: b.tp.topic.clone(),
                            partition: b.tp.partition,
                            first_offset: group[0].offset,
                            bytes: body.len() as u64,
                            max: ENTRY_BODY_BYTES_MAX as u64,
                        }
                        .into());
                    }
                    let first_lsn = next_lsn;
                    let chunk_max = self.cfg.frame_body_bytes_max;
                    let n = frame::chunk_count(body.len(), chunk_max);
                    if first_lsn.saturating_add(n) > keys::LSN_MAX {
                        // Only a tombstone's span no build writes (2^62
                        // LSNs) brings a store here; past it an entry could
                        // not be indexed nor read back, so nothing is
                        // written (the inserts come later).
                        return Err(Error::corruption(
                            crate::error::Location::Wal { lsn: first_lsn },
                            CorruptionKind::LengthTooLarge {
                                length: n,
                                max: keys::LSN_MAX.saturating_sub(first_lsn),
                            },
                        ));
                    }
                    for (i, (flags, chunk)) in frame::chunks(&body, chunk_max).enumerate() {
                        let lsn = first_lsn + i as u64;
                        let f = frame::encode(lsn, FrameKind::Records, flags, chunk);
                        frame_bytes += f.len() as u64;
                        writes.push((keys::wal_key(lsn).to_vec(), f));
                    }
                    next_lsn += n;
                    frames += n;
                    entries += 1;
                    let ie = IndexEntry::describe(first_lsn, n as u32, group);
                    writes.push(ie.encode(&b.tp));
                    summary.next_offset = ie.last_offset + 1;
                    summary.record_count =
                        summary.record_count.saturating_add(ie.record_count as u64);
                    summary.payload_bytes = summary.payload_bytes.saturating_add(ie.payload_bytes);
                    appended += group.len() as u64;
                }
                updated.insert(b.tp.clone(), summary);
            }
            if !updated.is_empty() {
                for (tp, s) in &updated {
                    writes.push(s.encode(tp));
                }
                let mut new_checkpoint = None;
                if w.bytes_since_checkpoint + frame_bytes >= self.cfg.checkpoint_interval_bytes {
                    // Everything up to the last durable LSN was fsynced, so
                    // recovery after a crash need not look before it.
                    let durable_lsn = lock(&self.commit).durable.lsn;
                    if durable_lsn > w.checkpoint_lsn {
                        writes.push((
                            keys::META_CHECKPOINT.to_vec(),
                            meta::encode_checkpoint(durable_lsn).to_vec(),
                        ));
                        new_checkpoint = Some(durable_lsn);
                    }
                }
                // One insert per value, not one `apply_batch`: sled's batch
                // rolls its I/O buffer to write a batch manifest on its own,
                // which costs every append a second log write and a second
                // sync_file_range wait (sled pagecache/mod.rs `pin_log`).
                // Atomicity comes from the log instead: sled's log is a
                // prefix after a crash, so a summary or index entry is never
                // durable without the frames before it, and recovery rebuilds
                // index entries and summaries from the frames past the
                // checkpoint. A crash can leave only what recovery repairs
                // (frames without their index or summary) or truncates (an
                // entry missing its last chunks, never acknowledged).
                //
                // Slots first (slots.rs): the frames then replace keys sled
                // has already split into leaves, and are logged once.
                let slots = slots::to_reserve(next_lsn, w.slots_end);
                let slot_writes = slots
                    .clone()
                    .map(|lsn| (keys::wal_key(lsn).to_vec(), Vec::new()));
                for (k, v) in slot_writes.chain(writes) {
                    if let Err(e) = mid_write_failpoint() {
                        return Err(self.write_failed("write", e));
                    }
                    let bytes = (k.len() + v.len()) as u64;
                    if let Err(e) = self.tree.insert(k, v) {
                        return Err(self.write_failed("write", e));
                    }
                    // Counted as they go in, so that a write of many MiB
                    // is written behind while it goes on (writeback.rs).
                    if behind {
                        self.writeback
                            .written(bytes, || (*self.db).clone(), &self.store_failing);
                    }
                }
                w.slots_end = w.slots_end.max(slots.end);
                self.counters
                    .slots_by_writes
                    .fetch_add(slots.end - slots.start, Ordering::Relaxed);
                w.next_lsn = next_lsn;
                w.seq += 1;
                w.partitions.extend(updated);
                w.bytes_since_checkpoint += frame_bytes;
                if let Some(c) = new_checkpoint {
                    w.checkpoint_lsn = c;
                    w.bytes_since_checkpoint = frame_bytes;
                }
                self.counters.entries.fetch_add(entries, Ordering::Relaxed);
                self.counters.frames.fetch_add(frames, Ordering::Relaxed);
                self.counters
                    .frame_bytes
                    .fetch_add(frame_bytes, Ordering::Relaxed);
            }
            self.counters.appends.fetch_add(1, Ordering::Relaxed);
            self.counters
                .records_appended
                .fetch_add(appended, Ordering::Relaxed);
            self.counters
                .records_duplicate
                .fetch_add(duplicates, Ordering::Relaxed);
            // Even a write that stored nothing gets the ticket of the writes
            // before it: its "duplicates" may not be durable yet.
            let offsets = touched
                .into_iter()
                .filter_map(|tp| w.partitions.get(&tp).map(|s| (tp, s.next_offset)))
                .collect();
            (w.seq, offsets, appended, duplicates)
        };
        fail::fail_point!(FAILPOINT_AFTER_WRITE, |a| failpoint_action(
            FAILPOINT_AFTER_WRITE,
            a
        ));
        crate::crashpoint::reached(crate::crashpoint::APPEND_BEFORE_FSYNC);
        Ok(Written {
            offsets,
            appended_records: appended,
            duplicate_records: duplicates,
            ticket: seq,
        })
    }

    /// Wait until write ticket `seq` is durable, leading the sync if nobody
    /// is, and `read` the durable view then, under the commit lock: a caller
    /// that kept the view itself would make the next sync copy it whole
    /// (`Arc::make_mut`), as group commit's followers often would.
    fn wait_durable<R>(&self, seq: u64, read: impl FnOnce(&DurableView) -> R) -> Result<R> {
        let mut c = lock(&self.commit);
        loop {
            if let Some((op, reason)) = &c.poisoned {
                return Err(Error::Poisoned {
                    op,
                    reason: reason.clone(),
                });
            }
            if c.synced_seq >= seq {
                return Ok(read(&c.durable));
            }
            if c.syncing {
                c = self.commit_cv.wait(c).expect("engine lock poisoned");
                continue;
            }
            c.syncing = true;
            drop(c);
            // A panic from here on (in sled's flush, say) must not leave the
            // followers waiting for a sync that will never end.
            let leading = SyncLeader { engine: self };
            fail::fail_point!(FAILPOINT_SYNC_LEAD);
            // A writeback that failed before this sync began leading (after
            // the caller's check of the engine): its buffers may be lost,
            // and sled's flush here would write them again, a retry that no
            // failed write gets (and after a panic inside sled's flush, one
            // that could wait forever). So nothing is flushed or
            // fdatasynced; the check after the sync fails it as the
            // writeback did. One that fails from here on is found there too.
            let failed_writeback = self.writeback.failure().is_some();
            // Snapshot before syncing: everything in it is covered by the sync.
            let (target, changes, top_up) = {
                let mut w = self.write_state()?;
                let changes = ViewChanges {
                    summaries: w.partitions.take_changed(),
                    lsn: w.next_lsn - 1,
                    #[cfg(debug_assertions)]
                    whole: (*w.partitions).clone(),
                };
                (
                    w.seq,
                    changes,
                    !self.closing.load(Ordering::Acquire)
                        && !slots::to_top_up(w.next_lsn, w.slots_end).is_empty(),
                )
            };
            let (res, nanos) = if failed_writeback {
                (Ok(()), 0)
            } else {
                // This sync's flush writes everything written so far: the
                // writeback counts afresh from here.
                self.writeback.flushing();
                std::thread::scope(|s| {
                    // Slots for the next writes, inserted while this thread
                    // waits on the disk (slots.rs, `to_top_up`). Only a
                    // shortcut: with no thread, or the write lock taken, writes
                    // reserve their own.
                    let topping_up = top_up.then(|| {
                        std::thread::Builder::new()
                            .name("cairn-slots".into())
                            .spawn_scoped(s, || self.top_up_slots())
                            .ok()
                    });
                    let t0 = Instant::now();
                    let res = lock(&self.syncer).sync(&self.db, changes.lsn);
                    let nanos = t0.elapsed().as_nanos() as u64;
                    if let Some(Some(t)) = topping_up {
                        // A failed insert poisoned the engine, which the loop
                        // below reports. A panic is passed on, with the engine
                        // poisoned for the top-up first: the sync leader's duty
                        // would otherwise name the fsync.
                        if let Err(p) = t.join() {
                            let message = crate::error::panic_message(&*p);
                            if let Err(e) = &res {
                                // Not reported below: the panic goes first.
                                tracing::error!(error = %e, "fsync failed while the slot top-up panicked");
                            }
                            let reason = format!("the slot top-up panicked: {message}");
                            let _ = self.poison("reserve slots", reason);
                            std::panic::resume_unwind(p);
                        }
                    }
                    (res, nanos)
                })
            };
            if !failed_writeback {
                tracing::debug!(fsync_us = nanos / 1000, target, "fsync");
            }
            // Ended: the duty is done. (Forgotten before `commit` is taken
            // again: a guard dropped while this thread held it would
            // deadlock on it.)
            std::mem::forget(leading);
            c = lock(&self.commit);
            c.syncing = false;
            // The durable view only moves forward; if it would not, that is
            // a bug, and the engine stops rather than report it (a panic
            // here would leave the followers waiting).
            // The failing step, for the poison: the fsync, or the view's
            // checks after one that succeeded (until 2026-12-06 both were
            // called a failed fsync).
            let view_bug = |why: String| Err((DURABLE_VIEW_OP, std::io::Error::other(why)));
            let res = res.map_err(|e| ("fsync", e)).and_then(|()| {
                // A writeback that failed before or beside this sync: its
                // buffers may be lost (writeback.rs), so nothing is durable.
                if let Some(reason) = self.writeback.failure() {
                    let reason = self.writeback_reason(reason);
                    return Err((WRITEBACK_OP, std::io::Error::other(reason)));
                }
                fail::fail_point!(FAILPOINT_VIEW_CHECK, |_| view_bug(
                    "injected by the failpoint".into()
                ));
                if target < c.synced_seq || changes.lsn < c.durable.lsn {
                    view_bug(format!(
                        "the durable view would go backwards (seq {target} < {}, or lsn {} < {}): a bug",
                        c.synced_seq, changes.lsn, c.durable.lsn
                    ))
                } else if !changes.reach_snapshot(&c.durable) {
                    view_bug(
                        "the durable view updated with a sync's changes would not be the sync's snapshot: a bug"
                            .into(),
                    )
                } else {
                    Ok(())
                }
            });
            match res {
                Ok(()) => {
                    self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
                    self.counters
                        .fsync_nanos
                        .fetch_add(nanos, Ordering::Relaxed);
                    c.synced_seq = target;
                    changes.apply(Arc::make_mut(&mut c.durable));
                    self.commit_cv.notify_all();
                }
                Err((op, e)) => {
                    // The error names the step and its file (sync.rs):
                    // the data file, a blob, a folder or the watermark
                    // (until 2026-12-05 the data file was named for any).
                    let reason = crate::error::tidy_os_errors(&e.to_string());
                    if op == DURABLE_VIEW_OP {
                        tracing::error!(%reason, "the fsync succeeded, but the durable view's check after it failed; engine poisoned");
                    } else if op == WRITEBACK_OP {
                        tracing::error!(%reason, "writing sled's log behind the writes failed; engine poisoned, never retried");
                    } else {
                        tracing::error!(%reason, "fsync failed; engine poisoned, never retried");
                    }
                    // The first failure names the poison (a sync refused
                    // after it says only that an earlier one failed).
                    if c.poisoned.is_none() {
                        self.set_poisoned(&mut c, op, reason);
                    }
                    self.commit_cv.notify_all();
                }
            }
        }
    }

    /// Insert the slots `to_top_up` names, under the write lock as a
    /// write's own run is: no frame is written meanwhile, so none can land
    /// on a key being made a slot. Runs beside a sync's flush, which waits
    /// for it before it reports anything durable; so it never waits for the
    /// lock behind writes (a write in progress reserves for itself). A crash
    /// can cut the run anywhere, as it can cut a write's.
    fn top_up_slots(&self) -> Result<()> {
        let mut w = match self.write.try_lock() {
            Ok(w) => w,
            // Held by a write (which reserves for itself), or poisoned by a
            // panic elsewhere, which that thread reports: no top-up.
            Err(std::sync::TryLockError::WouldBlock | std::sync::TryLockError::Poisoned(_)) => {
                return Ok(())
            }
        };
        // A panic is poisoned here, naming the top-up, while the lock is
        // held: a writer waiting on it then finds the engine poisoned
        // (`write_state`), and the lock is let go unpoisoned.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.top_up_locked(&mut w)))
        {
            Ok(r) => r,
            Err(p) => {
                let message = crate::error::panic_message(&*p);
                let reason = format!("the slot top-up panicked: {message}");
                let _ = self.poison("reserve slots", reason);
                drop(w);
                std::panic::resume_unwind(p)
            }
        }
    }

    /// [`top_up_slots`](Self::top_up_slots)'s run, under the write lock.
    fn top_up_locked(&self, w: &mut WriteState) -> Result<()> {
        self.check_usable()?;
        let run = slots::to_top_up(w.next_lsn, w.slots_end);
        for lsn in run.clone() {
            let inserted = top_up_failpoint().and_then(|()| {
                self.tree
                    .insert(keys::wal_key(lsn), &[][..])
                    .map(drop)
                    .map_err(store_err("insert slot"))
            });
            if let Err(e) = inserted {
                return Err(self.write_failed("reserve slots", e));
            }
        }
        w.slots_end = w.slots_end.max(run.end);
        self.counters
            .slots_by_syncs
            .fetch_add(run.end - run.start, Ordering::Relaxed);
        Ok(())
    }

    /// Make every write so far durable (no flush if it already is; a
    /// watermark value pending past its interval is still fdatasynced).
    ///
    /// # Errors
    /// [`Error::Poisoned`] when the flush or the fsync fails (or did
    /// before): what was written since the last successful sync may or may
    /// not be on disk, and is not reported durable. Never retried: drop the
    /// engine and open it again, and recovery finds what is durable.
    pub fn sync(&self) -> Result<()> {
        self.check_usable()?;
        let seq = self.write_state()?.seq;
        self.wait_durable(seq, |_| ())?;
        // Nothing to flush leaves a watermark value the last sync wrote
        // within its interval pending: an idle store's syncs see it
        // fdatasynced once the interval has passed. A sync leading now
        // (the lock taken) sees to it itself.
        let due = match self.syncer.try_lock() {
            Ok(mut s) => Some(s.sync_watermark_if_due()),
            Err(std::sync::TryLockError::WouldBlock) => Some(Ok(())),
            // A panic while a sync held it (the next leader's lock would
            // panic too): the store's state is unknown, as after any panic
            // in the engine (seen in review, the night of 2026-12-04; it
            // was passed over as a busy lock). Poisoned below, once the
            // guard inside the error is dropped (with this `let`): the
            // poisoning takes `commit`, which comes before `syncer`.
            Err(std::sync::TryLockError::Poisoned(_)) => None,
        };
        let Some(due) = due else {
            return Err(self.poison("sync", "a sync panicked while it held the syncer".into()));
        };
        due.map_err(|e| self.watermark_failed(e))
    }

    /// Durable next offset of every partition in the store.
    pub fn durable_offsets(&self) -> BTreeMap<TopicPartition, i64> {
        lock(&self.commit)
            .durable
            .partitions
            .iter()
            .map(|(tp, s)| (tp.clone(), s.next_offset))
            .collect()
    }

    /// [`durable_offsets`](Self::durable_offsets) of the partitions that
    /// are keys of `tps` (those the store holds), read from one view: for a
    /// caller that asks about some partitions (a sink's `pre_commit`, about
    /// those consumed) without a copy of every partition's first (at 10,000
    /// partitions, copying every offset and searching the copy took about
    /// two thirds of a `pre_commit` with nothing to write, and 30 % of a
    /// put's: BENCHMARKS.md, "Partitions"). A few are searched for; many
    /// are walked side by side with the view, both maps being in the same
    /// order.
    pub fn durable_offsets_of<V>(
        &self,
        tps: &BTreeMap<TopicPartition, V>,
    ) -> BTreeMap<TopicPartition, i64> {
        let view = self.durable_view();
        // A search costs about log2(held) comparisons, a walk one per held
        // partition: searches win while they are fewer than held / 16.
        if tps.len().saturating_mul(16) < view.partitions.len() {
            return tps
                .keys()
                .filter_map(|tp| Some((tp.clone(), view.partitions.get(tp)?.next_offset)))
                .collect();
        }
        let mut held = view.partitions.iter().peekable();
        tps.keys()
            .filter_map(|tp| {
                while held.next_if(|(h, _)| *h < tp).is_some() {}
                let (_, s) = held.next_if(|(h, _)| *h == tp)?;
                Some((tp.clone(), s.next_offset))
            })
            .collect()
    }

    /// Durable next offset of one partition, if the store holds it: written
    /// to, or started by [`start_partitions`](Self::start_partitions).
    pub fn durable_offset(&self, tp: &TopicPartition) -> Option<i64> {
        lock(&self.commit)
            .durable
            .partitions
            .get(tp)
            .map(|s| s.next_offset)
    }

    /// A copy of the write state: the crash-shape fuzz target
    /// (`fuzzing::wal_crash`) rebuilds from it what a store held before a
    /// write that a crash cut short.
    pub(crate) fn write_state_copy(&self) -> WriteState {
        lock_to_read(&self.write).clone()
    }

    pub(crate) fn durable_view(&self) -> Arc<DurableView> {
        lock(&self.commit).durable.clone()
    }

    /// Per-partition figures for what is durable.
    pub fn partitions(&self) -> Vec<PartitionInfo> {
        self.durable_view()
            .partitions
            .iter()
            .map(|(tp, s)| PartitionInfo::of(tp, s))
            .collect()
    }

    /// [`partitions`](Self::partitions)' figures for `tp` alone, if it is
    /// archived.
    pub fn partition(&self, tp: &TopicPartition) -> Option<PartitionInfo> {
        let view = self.durable_view();
        Some(PartitionInfo::of(tp, view.partitions.get(tp)?))
    }

    /// Counters and per-partition figures.
    pub fn stats(&self) -> EngineStats {
        let c = &self.counters;
        let next_lsn = lock_to_read(&self.write).next_lsn;
        let durable_lsn = self.durable_view().lsn;
        EngineStats {
            appends: c.appends.load(Ordering::Relaxed),
            entries: c.entries.load(Ordering::Relaxed),
            frames: c.frames.load(Ordering::Relaxed),
            frame_bytes: c.frame_bytes.load(Ordering::Relaxed),
            records_appended: c.records_appended.load(Ordering::Relaxed),
            records_duplicate: c.records_duplicate.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            fsync_nanos_total: c.fsync_nanos.load(Ordering::Relaxed),
            slots_reserved_by_writes: c.slots_by_writes.load(Ordering::Relaxed),
            slots_reserved_by_syncs: c.slots_by_syncs.load(Ordering::Relaxed),
            writebacks: self.writeback.flushes(),
            next_lsn,
            durable_lsn,
            partitions: self.partitions(),
        }
    }

    /// Bytes sled uses on disk.
    pub fn size_on_disk(&self) -> Result<u64> {
        self.db.size_on_disk().map_err(store_err("size_on_disk"))
    }

    /// Sync, move the checkpoint to the end of the log, and close. The next
    /// open then verifies nothing but frames written after this point.
    /// Drop every [`RecordIter`](crate::RecordIter) first: one alive as
    /// the close begins keeps the open mark (`cairn.open`), so that the
    /// next open in this boot syncs the store before it trusts the page
    /// cache, and says so at WARN as after a crash.
    pub fn close(self) -> Result<()> {
        self.closing.store(true, Ordering::Release);
        // Before the last syncs, which then write everything (writeback.rs).
        self.stop_writeback();
        self.note_readers_at_shutdown();
        self.sync()?;
        let lsn = {
            let w = lock(&self.write);
            w.next_lsn - 1
        };
        // A failed write poisons, as any other: it may have reached sled's
        // buffers, and the mark makes the next open read the disk.
        if let Err(e) = self
            .tree
            .insert(keys::META_CHECKPOINT, meta::encode_checkpoint(lsn))
        {
            return Err(self.write_failed("write", format_args!("checkpoint: {e}")));
        }
        {
            let mut w = lock(&self.write);
            w.seq += 1;
            w.checkpoint_lsn = lsn;
        }
        self.sync()?;
        self.sync_watermark()?;
        fail::fail_point!(FAILPOINT_CLOSE_SYNCED);
        // The open mark goes in the drop, once sled's handles are dropped.
        self.closed.store(true, Ordering::Release);
        Ok(())
    }

    /// Note whether a reader is alive now, as the engine begins to shut
    /// down (each holds a clone of `store_failing`).
    fn note_readers_at_shutdown(&self) {
        if Arc::strong_count(&self.store_failing) > 1 {
            self.reader_at_shutdown.store(true, Ordering::SeqCst);
        }
    }

    /// fdatasync a watermark value the last sync left pending (within its
    /// interval), as a close and a drop end with; a failure poisons.
    fn sync_watermark(&self) -> Result<()> {
        // The syncer's guard ends with the statement, before `poison` takes
        // `commit`: the lock order is `commit` before `syncer`
        // (wait_durable).
        let watermark = lock(&self.syncer).sync_watermark();
        watermark.map_err(|e| self.watermark_failed(e))
    }

    /// A failed fdatasync of the watermark: poisons, as any failed fsync.
    /// Called with the syncer's lock let go (`poison` takes `commit`).
    fn watermark_failed(&self, e: std::io::Error) -> Error {
        self.poison("fsync", format!("watermark: {e}"))
    }

    /// Write a sled batch outside `append` (retention) under the write lock
    /// `w`, and return the sequence number a durable wait ([`Self::wait_seq`])
    /// needs. It does not wait: the caller waits after letting go of `w`
    /// (the sync leader takes the write lock for its snapshot, so a wait
    /// under it never ends).
    pub(crate) fn apply_batch_locked(&self, w: &mut WriteState, batch: sled::Batch) -> Result<u64> {
        if let Err(e) = self.tree.apply_batch(batch) {
            return Err(self.write_failed("write", e));
        }
        w.seq += 1;
        Ok(w.seq)
    }

    pub(crate) fn wait_seq(&self, seq: u64) -> Result<()> {
        self.wait_durable(seq, |_| ())
    }

    pub(crate) fn lock_write(&self) -> Result<MutexGuard<'_, WriteState>> {
        self.refuse_write_to_damage()?;
        self.lock_to_look()
    }

    /// The write lock, to look at the state under it and write nothing (a
    /// prune's plan, its dry run): taken on an engine opened to read with
    /// a damaged segment header too, which refuses writes only.
    pub(crate) fn lock_to_look(&self) -> Result<MutexGuard<'_, WriteState>> {
        // Checked under the lock: a write that failed while this waited
        // for it poisoned the engine and let go of the lock cleanly.
        let w = self.write_state()?;
        self.check_usable()?;
        Ok(w)
    }

    /// Whether some write is not durable yet (or cannot be known: a write
    /// lock an earlier panic poisoned). Never panics: called from a drop.
    fn writes_unsynced(&self) -> bool {
        let Ok(w) = self.write.lock() else {
            return true;
        };
        lock_to_read(&self.commit).synced_seq < w.seq
    }

    /// The write lock, for a writer: after a panic under it, the
    /// engine's poisoning as an error (never a panic). Writes and
    /// truncations poison the engine before a panic lets go of the lock
    /// (`PoisonOnPanic`); one that did not is poisoned here.
    /// `Ok` unless the store was opened to read with a damaged segment
    /// header ([`EngineConfig::open_to_read`]): then every write is
    /// refused with that damage, before it takes the write lock.
    fn refuse_write_to_damage(&self) -> Result<()> {
        match self.recovery.damaged_segment_headers.first() {
            Some(d) => Err(segment_header_damage(&self.cfg, d)),
            None => Ok(()),
        }
    }

    fn write_state(&self) -> Result<MutexGuard<'_, WriteState>> {
        match self.write.lock() {
            Ok(w) => Ok(w),
            Err(held) => {
                // Let go of the lock before `commit` is taken below (the
                // lock order's claim: the leader never holds both).
                drop(held);
                self.check_usable()?;
                Err(self.poison(
                    "write",
                    "an earlier panic while the write lock was held".into(),
                ))
            }
        }
    }
}

/// A sled handle that only its holder's drop takes out, so that it can
/// drop it inside `catch_unwind` (`Drop for Engine`, `Drop for RecordIter`).
pub(crate) struct Held<T>(Option<T>);

impl<T> Held<T> {
    pub(crate) fn new(handle: T) -> Held<T> {
        Held(Some(handle))
    }

    /// For the holder's drop only: every use after it would panic.
    pub(crate) fn take(&mut self) -> Option<T> {
        self.0.take()
    }
}

impl<T> std::ops::Deref for Held<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().expect("taken only by the engine's drop")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle store's sync, with nothing to flush, still fdatasyncs a
    /// watermark value the last sync left pending once its interval has
    /// passed (until the night of 2026-12-03 only a sync that flushed did).
    #[test]
    fn an_idle_sync_syncs_a_pending_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        // The interval is set, not raced (a slow fdatasync would end it):
        // it begins now, and lasts until the test ages it.
        assert!(!lock(&e.syncer).watermark_pending(false));
        let tp = TopicPartition::new("t", 0);
        let record = Record::with_value(0, "v");
        e.append(&[RecordBatch {
            tp,
            records: vec![record],
        }])
        .unwrap();
        // Written within the interval of the open's fdatasync: pending.
        assert!(lock(&e.syncer).watermark_pending(false));
        e.sync().unwrap();
        assert!(
            lock(&e.syncer).watermark_pending(true),
            "within the interval"
        );
        let fsyncs = e.stats().fsyncs;
        e.sync().unwrap();
        assert!(!lock(&e.syncer).watermark_pending(false));
        assert_eq!(e.stats().fsyncs, fsyncs, "nothing of sled's synced");
        e.close().unwrap();
    }

    /// `durable_offsets_of` answers the same whether it searches for a
    /// few partitions or walks the view beside many: those held, at their
    /// durable next offset, and none of those the store does not hold.
    #[test]
    fn durable_offsets_of_few_and_of_many_agree_with_all() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let held: Vec<TopicPartition> = (0..40).map(|p| TopicPartition::new("t", p)).collect();
        let batches: Vec<RecordBatch> = held
            .iter()
            .map(|tp| RecordBatch {
                tp: tp.clone(),
                records: (0..=i64::from(tp.partition))
                    .map(|o| Record::with_value(o, "v"))
                    .collect(),
            })
            .collect();
        e.append(&batches).unwrap();
        let all = e.durable_offsets();
        let absent = TopicPartition::new("u", 0);
        for asked in [1, 2, 10, 40] {
            let mut tps: BTreeMap<TopicPartition, ()> = held
                .iter()
                .rev()
                .take(asked)
                .map(|tp| (tp.clone(), ()))
                .collect();
            tps.insert(absent.clone(), ());
            let want: BTreeMap<TopicPartition, i64> = tps
                .keys()
                .filter_map(|tp| Some((tp.clone(), *all.get(tp)?)))
                .collect();
            assert_eq!(want.len(), asked);
            assert_eq!(e.durable_offsets_of(&tps), want, "{asked} asked");
        }
        e.close().unwrap();
    }

    /// A sync updates the durable view in place with what changed, unless a
    /// reader still holds the view: then that reader's view stays as it
    /// was, and the sync publishes an updated copy.
    #[test]
    fn a_durable_view_held_by_a_reader_is_not_changed_by_later_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        let put = |tp: &TopicPartition, offset: i64| {
            e.append(&[RecordBatch {
                tp: tp.clone(),
                records: vec![Record::with_value(offset, "v")],
            }])
            .unwrap()
        };
        put(&a, 0);
        put(&b, 0);
        let held = e.durable_view();
        put(&a, 1);
        let lsn_held = held.lsn;
        assert_eq!(held.partitions[&a].next_offset, 1, "the held view moved");
        assert_eq!(held.partitions[&b].next_offset, 1);
        let now = e.durable_view();
        assert!(
            !Arc::ptr_eq(&held, &now),
            "a held view is copied, not changed"
        );
        assert_eq!(now.partitions[&a].next_offset, 2);
        assert_eq!(
            now.partitions[&b].next_offset, 1,
            "an unchanged partition kept"
        );
        assert!(now.lsn > lsn_held);
        drop((held, now));
        // Held by nobody: updated in place.
        let before = Arc::as_ptr(&e.durable_view());
        put(&b, 1);
        let after = e.durable_view();
        assert_eq!(Arc::as_ptr(&after), before, "updated in place");
        assert_eq!(after.partitions[&b].next_offset, 2);
        assert_eq!(e.durable_offsets(), BTreeMap::from([(a, 2), (b, 2)]));
        drop(after);
        e.close().unwrap();
    }
}

#[cfg(test)]
thread_local! {
    /// Guarded drops on this thread, for tests that check which drop is.
    pub(crate) static GUARDED_DROPS: Cell<u64> = const { Cell::new(0) };
}

thread_local! {
    /// Set while this thread drops the sled handles of a store whose disk
    /// may be failing (a poisoned engine, a failed open or backup).
    static DROPPING_FAILING: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is dropping the store of a poisoned engine (or of a
/// failed open or backup), whose own shutdown may panic on the failed disk
/// (`drop_failing_store`): for a panic hook that would rather leave it to
/// the engine's one-line warning than print a backtrace.
#[doc(hidden)]
pub fn dropping_failing_store() -> bool {
    DROPPING_FAILING.with(Cell::get)
}

impl Drop for Engine {
    fn drop(&mut self) {
        // sled's own drop writes what sits in its buffers and fsyncs its
        // file, unwrapping the fsync. An engine dropped without `close`
        // after a `write` it never synced would meet a failing disk there:
        // the open mark stays for that, but the poison mark says why.
        // Synced here first instead, by the engine's own path, which
        // poisons and leaves the mark when it fails.
        // Whether the open mark goes, once sled's handles are dropped: a
        // close, or a sync here, succeeded with nothing left to write (no
        // handle is left to write with).
        // The writeback's sled handle goes first, and a failure of its
        // poisons before the sync below (writeback.rs).
        self.stop_writeback();
        self.note_readers_at_shutdown();
        let closed = self.closed.load(Ordering::Acquire);
        let mut unmark = closed;
        if !closed && !self.is_poisoned() {
            if !std::thread::panicking() {
                // No slot top-up beside this sync: its writes would be left
                // for sled's drop, whose failures nobody hears of.
                self.closing.store(true, Ordering::Release);
                // A flush whatever the write count says: sled may hold log
                // writes no write counted (a top-up's slots, a read's node
                // split), and its drop below writes them with its errors
                // only logged. Flushed and synced here, by the engine's own
                // path, a failure poisons and keeps the open mark.
                if let Ok(mut w) = self.write_state() {
                    w.seq += 1;
                }
                // The watermark too, as a close syncs it: the first open
                // after a power loss checks the log against it. A panic
                // inside it (sled's flush) has poisoned the engine (its
                // sync leader does) and is caught here: escaping this drop,
                // it left sled's handles to an unguarded drop whose fsync
                // unwraps, and a second panic while unwinding aborts the
                // process (found in review, 2026-12-05).
                let synced = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.sync().and_then(|()| self.sync_watermark())
                }));
                unmark = match synced {
                    Ok(r) => r.is_ok(),
                    Err(payload) => {
                        // Poisoned here whatever panicked: a panic outside
                        // the sync leader (the watermark's fsync) poisons
                        // nothing on its way out.
                        self.poison_after_caught_panic(
                            "drop",
                            &format!(
                                "its last sync: {}; the next open recovers from the disk",
                                crate::error::panic_message(&*payload)
                            ),
                        );
                        false
                    }
                };
            } else if self.writes_unsynced() {
                // Not synced while unwinding: a panic there would abort.
                // sled's drop below would abort the process the same way
                // on a failing disk, before any mark: so the mark is left
                // first, and the next open in this boot does not trust the
                // page cache (it costs that open an fsync of the store
                // when the disk was sound).
                tracing::warn!("engine dropped while its thread panicked, with writes not synced; the next open fsyncs the store before it trusts it");
                self.poison_after_panic(
                    "drop",
                    "dropped while its thread panicked, with writes not synced",
                    |_| {},
                );
            }
        }
        let handles = (self.tree.take(), self.db.take());
        // `is_poisoned` does not panic on a commit lock an earlier panic
        // poisoned (that engine is taken for poisoned too).
        let poisoned = self.is_poisoned();
        if poisoned {
            // A reader that outlives the engine may hold the last sled
            // handle instead: its drop is guarded too (set here as well for
            // an engine taken for poisoned by a panic elsewhere).
            self.store_failing.store(true, Ordering::SeqCst);
        }
        // Also a sound engine's while this thread unwinds: sled's drop
        // still fsyncs, unwrapping, and a failure escaping a drop then
        // would abort the process (what it wrote was durable already).
        if poisoned || std::thread::panicking() {
            drop_failing_store(handles);
        } else {
            // sled's own last flush and fsync, before the mark goes. It
            // unwraps that fsync: a disk failing since the sync above
            // panics there, caught so that no panic escapes this drop, and
            // the mark stays (the next open syncs before it trusts the
            // cache). Until the night of 2026-12-04 it escaped.
            if !drop_sound_store(
                handles,
                "the engine's drop: the open mark stays, and the next open syncs the store first",
            ) {
                unmark = false;
            }
            // A reader still alive holds sled's last handle (each holds a
            // clone of `store_failing`): sled's final flush and fsync run at
            // its drop, whose failures only its log line hears of. So the
            // mark stays, and the next open in this boot syncs the store
            // before it trusts the page cache. So too for one alive when
            // the shutdown began and gone since: its reads may have left
            // node splits after the engine's last sync, which the flush of
            // the handles dropped above wrote, a failure there only logged
            // by sled, which then skips its fsync without a panic (until
            // 2026-12-06 only a reader alive here kept the mark; found by
            // an audit). Noted at the drop's start, and by a close: a
            // reader alive now was alive then (none is made during a drop).
            let readers_alive = self.reader_at_shutdown.load(Ordering::SeqCst);
            if unmark && readers_alive {
                tracing::debug!(dir = %self.cfg.path.display(), "engine dropped while a reader outlives it: the open mark stays, and the next open in this boot syncs the store first");
            } else if unmark {
                crate::poisoned::unmark_open(&self.cfg.path);
            }
        }
    }
}

/// Drop sled's last handles of a sound store, whose drop runs sled's own
/// flush and fsync, unwrapping the fsync: a failure (the disk failing
/// since the last sync) is caught and logged, so that no panic escapes the
/// drop that calls this (`at`: which, and what follows from a failure).
/// Whether it went cleanly: if not, an engine's open mark must stay, for
/// the next open to sync the store first, and a backup's copy is not
/// complete.
pub(crate) fn drop_sound_store<T>(handles: T, at: &str) -> bool {
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(handles)));
    if let Err(p) = &dropped {
        tracing::error!(
            error = %crate::error::panic_message(&**p),
            at,
            "sled's own shutdown of a sound store failed (its flush or fsync)"
        );
    }
    dropped.is_ok()
}

/// Drop sled's handles of a store whose disk may be failing (a poisoned
/// engine, an open that failed on I/O). sled's drop flushes and fsyncs its
/// file, unwrapping the fsync: after a failed fdatasync that fsync fails
/// too, and panics. Caught here and logged in one line; nothing relies on
/// that flush or fsync, and the next open does not trust the page cache.
pub(crate) fn drop_failing_store<T>(handles: T) {
    #[cfg(test)]
    GUARDED_DROPS.with(|n| n.set(n.get() + 1));
    DROPPING_FAILING.with(|d| d.set(true));
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(handles)));
    DROPPING_FAILING.with(|d| d.set(false));
    if let Err(p) = dropped {
        tracing::warn!(
            error = %crate::error::panic_message(&*p),
            "the failing store's own shutdown failed too (its flush or fsync met the failed disk); expected, nothing relies on it: reopen to recover"
        );
    }
}

/// The top-up failpoint (before each slot a sync inserts), as a result the
/// top-up can act on (always `Ok` unless failpoints are compiled in).
fn top_up_failpoint() -> Result<()> {
    fail::fail_point!(FAILPOINT_TOP_UP, |a| failpoint_action(FAILPOINT_TOP_UP, a));
    Ok(())
}

/// The mid-write failpoint, as a result the append loop can act on (always
/// `Ok` unless the `fail` crate's failpoints are compiled in).
fn mid_write_failpoint() -> Result<()> {
    fail::fail_point!(FAILPOINT_MID_WRITE, |a| failpoint_action(
        FAILPOINT_MID_WRITE,
        a
    ));
    Ok(())
}

/// What every engine failpoint does when it fires: `return(abort)` aborts
/// the process (the crash tests use it to die at an exact point); any other
/// `return` gives an I/O error naming the failpoint.
// Only called through `fail_point!`, which compiles to nothing unless the
// `fail/failpoints` feature is on (the engine's own tests turn it on).
#[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
pub(crate) fn failpoint_action<T>(name: &str, arg: Option<String>) -> Result<T> {
    if arg.as_deref() == Some("abort") {
        std::process::abort();
    }
    Err(Error::Io {
        op: "failpoint",
        path: Default::default(),
        source: std::io::Error::other(format!("{name}: {}", arg.unwrap_or_default())),
    })
}

/// Split records into groups of about `target` encoded bytes (at least one
/// record each). Measured by each record's encoded size bound, so a group
/// stays under `target` + one record, which with `target` ≤ a quarter of
/// the entry maximum (config.rs), records ≤ `RECORD_BYTES_MAX_LIMIT` and
/// ≤ `HEADERS_PER_RECORD_MAX` headers, is always under the maximum.
pub(crate) fn split_entries(records: &[Record], target: usize) -> impl Iterator<Item = &[Record]> {
    let mut rest = records;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0u64;
        let mut n = 0;
        for r in rest {
            bytes += r.encoded_bytes_max();
            n += 1;
            if bytes >= target as u64 {
                break;
            }
        }
        let (group, tail) = rest.split_at(n);
        rest = tail;
        Some(group)
    })
}
