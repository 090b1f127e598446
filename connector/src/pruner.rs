//! Archive retention: deleting archived records older than an age.
//!
//! `cairn prune` runs one pass and exits. `cairn run --retain AGE` makes a
//! pass before it starts consuming (an archive the pass cannot prune stops
//! the start), then runs a [`Pruner`] thread beside the archive: a pass
//! every `--retention-check-interval-s`, and a last one at a clean stop.
//!
//! A time cut becomes, per partition, the first archived offset whose
//! timestamp is at or after it (as Kafka's `ListOffsets` by time), and the
//! engine deletes the whole entries below that offset.
//!
//! # Invariants
//! - Nothing at or above a partition's cut is deleted. An entry that holds
//!   the cut is kept whole, so a few older records may stay until the next
//!   pass after it falls entirely below. A record without a timestamp (-1)
//!   is deleted only when it lies below the cut.
//! - A partition's durable next offset never moves: the run resumes and
//!   commits exactly as it would without pruning, and pruned records are
//!   never fetched again.
//! - A failed pass (I/O error, corruption, a poisoned engine) is never
//!   retried. The pruner stops, and the archive's next `put` or
//!   `pre_commit` fails the run with the reason.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn_engine::{Engine, PartitionInfo, TruncateReport};

/// `t` as milliseconds since the Unix epoch.
pub fn millis_since_epoch(t: SystemTime) -> Result<i64, String> {
    let d = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| "must not be before the Unix epoch".to_owned())?;
    i64::try_from(d.as_millis()).map_err(|_| "too far in the future".to_owned())
}

/// The time `age` before now, in milliseconds since the Unix epoch:
/// negative before 1970, where no Kafka timestamp is, so nothing is older.
pub fn cut_for_age_ms(age: Duration) -> i64 {
    let Some(t) = SystemTime::now().checked_sub(age) else {
        return i64::MIN;
    };
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// The offset below which `p` holds only records older than `cut_ms`.
pub fn offset_for_cut(
    engine: &Engine,
    p: &PartitionInfo,
    cut_ms: i64,
) -> cairn_engine::Result<i64> {
    // No archived record at or after the cut: every one is older.
    Ok(engine
        .offset_for_time(&p.tp, cut_ms)?
        .unwrap_or(p.next_offset))
}

/// What one pass over the archive deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    pub partitions_pruned: u64,
    pub deleted: TruncateReport,
}

/// Delete, in every archived partition, the records older than `cut_ms`.
pub fn prune_older_than(engine: &Engine, cut_ms: i64) -> cairn_engine::Result<PassReport> {
    let mut pass = PassReport::default();
    for p in engine.partitions() {
        if p.record_count == 0 {
            continue;
        }
        let offset = offset_for_cut(engine, &p, cut_ms)?;
        let r = engine.truncate_before(&p.tp, offset)?;
        if r.entries_deleted > 0 {
            pass.partitions_pruned += 1;
            add(&mut pass.deleted, &r);
        }
    }
    Ok(pass)
}

/// `total += r`.
pub fn add(total: &mut TruncateReport, r: &TruncateReport) {
    total.entries_deleted += r.entries_deleted;
    total.frames_deleted += r.frames_deleted;
    total.records_deleted += r.records_deleted;
    total.payload_bytes_deleted += r.payload_bytes_deleted;
}

/// The retention thread of `cairn run --retain`.
pub struct Pruner {
    /// Dropped to stop the thread (after its last pass).
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    failure: Arc<Mutex<Option<String>>>,
}

impl Pruner {
    /// Prune records older than `retain` now, on this thread; then start
    /// the thread that prunes every `check_every`, and once more when
    /// stopped.
    pub fn start(
        engine: Arc<Engine>,
        retain: Duration,
        check_every: Duration,
    ) -> Result<Pruner, String> {
        pass(&engine, retain)?;
        let (tx, rx) = mpsc::channel::<()>();
        let failure = Arc::new(Mutex::new(None));
        let failed = failure.clone();
        let thread = std::thread::Builder::new()
            .name("cairn-pruner".into())
            .spawn(move || loop {
                // Stopped: one last pass, so that a clean stop leaves
                // nothing older than the retention behind.
                let last = !matches!(rx.recv_timeout(check_every), Err(RecvTimeoutError::Timeout));
                if let Err(e) = pass(&engine, retain) {
                    tracing::error!(error = %e, "retention pass failed; pruning stopped, the run stops");
                    *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    return;
                }
                if last {
                    return;
                }
            })
            .map_err(|e| format!("start the pruner thread: {e}"))?;
        Ok(Pruner {
            stop: Some(tx),
            thread: Some(thread),
            failure,
        })
    }

    /// Why the pruner stopped, if a pass failed.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Make a last pass, stop the thread and wait for it; the error of any
    /// failed pass.
    pub fn stop(mut self) -> Result<(), String> {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            t.join()
                .map_err(|_| "the pruner thread panicked".to_owned())?;
        }
        match self.failure() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Pruner {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn pass(engine: &Engine, retain: Duration) -> Result<(), String> {
    let cut_ms = cut_for_age_ms(retain);
    let r = prune_older_than(engine, cut_ms).map_err(|e| format!("retention: {e}"))?;
    if r.deleted.records_deleted > 0 {
        tracing::info!(
            records = r.deleted.records_deleted,
            payload_bytes = r.deleted.payload_bytes_deleted,
            entries = r.deleted.entries_deleted,
            partitions = r.partitions_pruned,
            older_than_ms = cut_ms,
            "pruned"
        );
    } else {
        tracing::debug!(older_than_ms = cut_ms, "retention pass: nothing to prune");
    }
    Ok(())
}
