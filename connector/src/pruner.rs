//! Archive retention: deleting archived records older than an age.
//!
//! `cairn prune` runs one pass and exits. `cairn run --retain AGE` makes a
//! pass before it starts consuming (an archive the pass cannot prune stops
//! the start), then runs a [`Pruner`] thread beside the archive: a pass
//! every `--retention-check-interval-s`, and a last one at a clean stop.
//!
//! A time cut becomes, per partition, the first archived offset whose
//! timestamp is at or after it, or unknown (`Engine::offset_for_retention`),
//! and the engine deletes the whole entries below that offset.
//!
//! # Invariants
//! - Nothing at or above a partition's cut is deleted. An entry that holds
//!   the cut is kept whole, so a few older records may stay until the next
//!   pass after it falls entirely below.
//! - A partition's durable next offset never moves: the run resumes and
//!   commits exactly as it would without pruning, and pruned records are
//!   never fetched again.
//! - A failed pass (I/O error, corruption, a poisoned engine, a panic) is
//!   never retried. The pruner stops and says so through its failure hook
//!   (`cairn run` then stops, idle or not, and exits non-zero with the
//!   reason); the archive's next `put` or `pre_commit` fails too.
//! - A record without a timestamp (-1) has no age: it and everything above
//!   it stay.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn_engine::{Engine, TruncateReport};

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

/// What one pass over the archive deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    pub partitions_pruned: u64,
    pub deleted: TruncateReport,
}

/// Delete, in every archived partition, the records older than `cut_ms`.
pub fn prune_older_than(engine: &Engine, cut_ms: i64) -> cairn_engine::Result<PassReport> {
    // A poisoned engine fails the pass even when nothing is old enough.
    engine.check_usable()?;
    let mut pass = PassReport::default();
    for p in engine.partitions() {
        if p.record_count == 0 {
            continue;
        }
        let offset = engine.offset_for_retention(&p.tp, cut_ms)?;
        let r = engine.truncate_before(&p.tp, offset)?;
        if r.entries_deleted > 0 {
            pass.partitions_pruned += 1;
            pass.deleted.add_counts(&r);
        }
    }
    Ok(pass)
}

/// Called once, from the pruner's thread, when a pass fails: `cairn run`
/// asks the run to stop (it then fails with the pruner's error).
pub type FailureHook = Box<dyn Fn(&str) + Send>;

/// What the owner tells the thread.
enum Order {
    /// Make a last pass, then end.
    Finish,
}

/// The retention thread of `cairn run --retain`.
pub struct Pruner {
    /// `Finish` for a last pass; dropped without it (the run failed, or the
    /// sink was dropped) the thread ends without one.
    orders: Option<mpsc::Sender<Order>>,
    thread: Option<JoinHandle<()>>,
    failure: Arc<Mutex<Option<String>>>,
}

impl Pruner {
    /// Prune records older than `retain` now, on this thread; then start
    /// the thread that prunes every `check_every`, and once more when
    /// stopped. `on_failure` hears of a pass that fails (or panics) on the
    /// thread; the pass is not retried, and the pruner stops.
    pub fn start(
        engine: Arc<Engine>,
        retain: Duration,
        check_every: Duration,
        on_failure: FailureHook,
    ) -> Result<Pruner, String> {
        pass(&engine, retain)?;
        let (tx, rx) = mpsc::channel::<Order>();
        let failure = Arc::new(Mutex::new(None));
        let failed = failure.clone();
        let thread = std::thread::Builder::new()
            .name("cairn-pruner".into())
            .spawn(move || loop {
                let last = match rx.recv_timeout(check_every) {
                    Err(RecvTimeoutError::Timeout) => false,
                    Ok(Order::Finish) => true,
                    Err(RecvTimeoutError::Disconnected) => return,
                };
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    pass(&engine, retain)
                }))
                .unwrap_or_else(|_| Err("retention: the pruner panicked".to_owned()));
                if let Err(e) = r {
                    tracing::error!(error = %e, "retention pass failed; not retried, the run stops");
                    *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                    on_failure(&e);
                    return;
                }
                if last {
                    return;
                }
            })
            .map_err(|e| format!("start the pruner thread: {e}"))?;
        Ok(Pruner {
            orders: Some(tx),
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
        if let Some(tx) = self.orders.take() {
            // The thread may have ended already (a failed pass).
            let _ = tx.send(Order::Finish);
        }
        if let Some(t) = self.thread.take() {
            t.join()
                .map_err(|_| "retention: the pruner thread panicked".to_owned())?;
        }
        match self.failure() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Pruner {
    /// Ends the thread without a last pass (a stop that is not clean).
    fn drop(&mut self) {
        self.orders.take();
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
