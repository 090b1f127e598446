//! Writing sled's log behind deferred writes, a MiB at a time.
//!
//! sled 0.34.7 writes its log one buffer at a time: a `pwrite` of the
//! whole buffer and a `sync_file_range` that waits for it, on its I/O
//! threads (`pagecache/iobuf.rs`, `write_to_log`). It seals a buffer when
//! a flush asks for it or when it is full, at the segment size (8 MiB,
//! [`SLED_SEGMENT_BYTES`]). Under [`Engine::append`] every call's flush
//! seals it at what the call wrote. Under [`Engine::write`], with a sync
//! only now and then (the connector's puts under `interval:MS`), buffers
//! filled up, and every write of the log was 8 MiB; so did one put of
//! many MiB under `every-put` (its `write` before its sync). On a VM that gives free memory
//! back to its host (a virtio balloon's free page reporting), the page
//! cache takes writes of 2 MiB and more into such memory at a thirtieth of
//! its usual speed: measured on this project's machines, copying those
//! buffers took about half the CPU of an `interval:100` run at 100 B
//! records, and a third of all the samples of one at 1 KiB
//! (docs/BENCHMARKS.md, "Where the time goes (connector)", item 14). So
//! once deferred writes have left [`WRITEBACK_BYTES`] unflushed, a thread
//! of this module flushes sled (no fdatasync), which seals the buffer
//! there, and the writing thread never waits for it. The bytes are counted
//! as each value goes into sled, so a single write of many MiB (records of
//! 10 KiB, a large `batch_bytes_max`) is written behind while it goes on.
//!
//! # Invariants
//! - A writeback writes only what sled would write anyway, sooner: it is
//!   sled's flush without the engine's fdatasync. Nothing is reported
//!   durable because of it, and a crash leaves a prefix of the log as
//!   after sled's own writes of full buffers.
//! - A failed writeback (an error or a panic in sled's flush) is never
//!   retried: the thread stops, the engine is poisoned by the next check
//!   of its state (a write's, a sync's, [`Engine::check_usable`],
//!   [`Engine::is_poisoned`], a backup's, a pass of retention's; reads of
//!   records and `stats` do not check), and no sync
//!   reports durability after it (the sync leader asks
//!   `Writeback::failure` after its fsync).
//! - The thread holds a sled handle of its own. It is stopped and joined
//!   before the engine's last sync (`close`, its drop) and before the
//!   engine's handle is dropped, so the engine's stays the last, dropped
//!   as the engine decides (guarded when it is poisoned). It starts no
//!   flush once it has seen the store failing (poisoned); one under way
//!   ends, and one asked for before may begin as the poisoning happens
//!   (it claims nothing: no sync publishes after a failure).
//! - No sync publishes after a failed writeback, and none that finds one
//!   failed as it begins flushes or syncs: it fails at once. One that
//!   fails while a leader flushes (or just after it looked) is found after
//!   that leader's fdatasync, which then publishes nothing.
//! - Its lock never panics (poisoned, it is taken as it is): `stop` must
//!   always join the thread, or its handle could outlive the engine's.
//!
//! [`SLED_SEGMENT_BYTES`]: crate::config::SLED_SEGMENT_BYTES
//! [`Engine::append`]: crate::Engine::append
//! [`Engine::write`]: crate::Engine::write
//! [`Engine::check_usable`]: crate::Engine::check_usable
//! [`Engine::is_poisoned`]: crate::Engine::is_poisoned

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

/// Bytes deferred writes leave unflushed (keys and values of every insert:
/// frames, index entries, summaries, slots, the checkpoint) before a writeback
/// flushes them. Writes into the page cache of 1 MiB ran at full speed
/// where those of 2 MiB did not (item 14 of BENCHMARKS' "Where the time
/// goes (connector)"); smaller costs more flushes for nothing.
pub const WRITEBACK_BYTES: u64 = 1 << 20;

/// The operation a failed writeback poisons the engine with.
pub const WRITEBACK_OP: &str = "writeback";

/// Failpoint: make the next writeback fail as sled's flush would.
#[doc(hidden)]
pub const FAILPOINT_WRITEBACK_ERR: &str = "wal::writeback::err";

/// The engine's writeback thread, started by the first deferred write that
/// leaves [`WRITEBACK_BYTES`] unflushed (a store only read never starts it).
#[derive(Debug, Default)]
pub(crate) struct Writeback {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Bytes of keys and values deferred writes inserted since the last
    /// flush began (the thread's, or a sync's).
    unflushed_bytes: AtomicU64,
    /// Why the first failed writeback failed; read without the lock on
    /// every check of the engine's state.
    failure: OnceLock<String>,
    flushes: AtomicU64,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    requested: bool,
    stop: bool,
    /// The thread, once started; taken by `stop` to join it.
    thread: Option<JoinHandle<()>>,
    /// Flushes ended (or failed), for [`Writeback::wait_flushes`].
    ended: u64,
}

// Taken also after a panic while it was held: the state is a few flags
// and counts, each set in one step, and `stop` must reach the join.
use crate::engine::lock_to_read as lock;

impl Writeback {
    /// A deferred write put `bytes` (a key and its value) into sled's
    /// buffers: ask for a flush when they take the unflushed bytes to
    /// [`WRITEBACK_BYTES`]. Called under the engine's write lock, once a
    /// value.
    /// `handle` gives the thread its sled handle, the first time.
    pub(crate) fn written(
        &self,
        bytes: u64,
        handle: impl FnOnce() -> sled::Db,
        failing: &Arc<AtomicBool>,
    ) {
        let before = self
            .shared
            .unflushed_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        // Only the write that crosses the mark asks: later ones find the
        // request made (the count starts again from 0 as a flush begins).
        if before >= WRITEBACK_BYTES || before.saturating_add(bytes) < WRITEBACK_BYTES {
            return;
        }
        let mut s = lock(&self.shared.state);
        // A stopped thread (also one whose start failed) is not started
        // again.
        if s.stop || self.shared.failure.get().is_some() {
            return;
        }
        s.requested = true;
        if s.thread.is_none() {
            let shared = self.shared.clone();
            let failing = failing.clone();
            let db = handle();
            match std::thread::Builder::new()
                .name("cairn-writeback".into())
                .spawn(move || run(&shared, &db, &failing))
            {
                Ok(t) => s.thread = Some(t),
                // Only a shortcut: without it sled writes full buffers, as
                // it did before this module.
                Err(e) => {
                    tracing::debug!(error = %e, "no writeback thread: sled writes its log in full buffers");
                    s.stop = true;
                }
            }
        }
        self.shared.wake.notify_all();
    }

    /// A sync's flush is about to write everything written so far: the
    /// count starts again, and a flush asked for and not yet begun is not
    /// needed (under every-put a put of a MiB would otherwise have one run
    /// beside its sync's own flush of the same buffer).
    pub(crate) fn flushing(&self) {
        self.shared.unflushed_bytes.store(0, Ordering::Relaxed);
        lock(&self.shared.state).requested = false;
    }

    /// Why a writeback failed, once one has.
    pub(crate) fn failure(&self) -> Option<String> {
        self.shared.failure.get().cloned()
    }

    /// Flushes the thread began (one that failed included).
    pub(crate) fn flushes(&self) -> u64 {
        self.shared.flushes.load(Ordering::Relaxed)
    }

    /// Stop the thread and wait for it (a flush under way ends first); then
    /// [`Self::failure`] says whether any failed. Called again, does nothing.
    pub(crate) fn stop(&self) {
        let thread = {
            let mut s = lock(&self.shared.state);
            s.stop = true;
            s.thread.take()
        };
        self.shared.wake.notify_all();
        if let Some(t) = thread {
            // `run` catches sled's panics: one here is the module's own bug,
            // and is a failure as any.
            if let Err(p) = t.join() {
                let message = crate::error::panic_message(&*p);
                fail(
                    &self.shared,
                    format!("the writeback thread panicked: {message}"),
                );
            }
        }
    }

    /// Wait until `n` flushes have ended (or one failed), or the thread
    /// has stopped, for at most `limit`; whether that came. For tests,
    /// which must not sleep to see one happen.
    pub(crate) fn wait_flushes(&self, n: u64, limit: std::time::Duration) -> bool {
        let s = lock(&self.shared.state);
        let (_s, timeout) = self
            .shared
            .wake
            .wait_timeout_while(s, limit, |s| {
                s.ended < n && !s.stop && self.shared.failure.get().is_none()
            })
            .unwrap_or_else(|held| held.into_inner());
        !timeout.timed_out()
    }
}

fn run(shared: &Shared, db: &sled::Db, failing: &AtomicBool) {
    loop {
        {
            let mut s = lock(&shared.state);
            while !s.requested && !s.stop {
                s = shared.wake.wait(s).unwrap_or_else(|held| held.into_inner());
            }
            if s.stop {
                return;
            }
            s.requested = false;
        }
        // A poisoned store starts no flush of its own accord: its buffers
        // are left for the next open's recovery. No more are asked for.
        if failing.load(Ordering::Acquire) {
            lock(&shared.state).stop = true;
            shared.wake.notify_all();
            return;
        }
        shared.unflushed_bytes.store(0, Ordering::Relaxed);
        shared.flushes.fetch_add(1, Ordering::Relaxed);
        let flushed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| flush(db)))
            .unwrap_or_else(|p| {
                Err(format!(
                    "sled's flush panicked: {}",
                    crate::error::panic_message(&*p)
                ))
            });
        let mut s = lock(&shared.state);
        s.ended += 1;
        match flushed {
            Ok(()) => shared.wake.notify_all(),
            Err(reason) => {
                drop(s);
                tracing::error!(%reason, "writing sled's log behind the writes failed; the engine is poisoned at the next check of its state, never retried");
                fail(shared, reason);
                return;
            }
        }
    }
}

fn flush(db: &sled::Db) -> Result<(), String> {
    fail::fail_point!(FAILPOINT_WRITEBACK_ERR, |_| Err(
        "sled's flush: injected by the failpoint".into()
    ));
    db.flush()
        .map(|_| ())
        .map_err(|e| format!("sled's flush: {e}"))
}

/// Keep the first failure, and wake the waiters: under the lock, so that
/// none checks before it is set and waits after the wake-up.
fn fail(shared: &Shared, reason: String) {
    let _ = shared.failure.set(reason);
    let _s = lock(&shared.state);
    shared.wake.notify_all();
}
