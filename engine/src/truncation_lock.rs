//! The engine's truncation lock: written for a whole truncation (all its
//! steps; a `TruncationPass` keeps it across partitions until their
//! deletions are durable), read for a whole verify, backup or truncation
//! plan, which must not see a truncation half done or not yet durable.
//!
//! Every wait for it can be given up: a truncation holds it for minutes on
//! a large partition, and one may wait behind a backup stuck in a system
//! call, while a live request's client goes or the run stops. So it is
//! taken in timed slices, asking between two whether to go on (until the
//! night of 2026-12-04 the waits were std's, which nothing could end).
//!
//! # Invariants
//! - A writer waiting keeps new readers out, so a stream of overlapping
//!   verifies or backups never starves a truncation: every taker passes a
//!   turnstile first, which a writer holds until it has the lock, and a
//!   reader only until it has. (A timed-out `try_write_for` alone gives
//!   its place up: parking_lot wakes the readers queued behind it.)
//! - It is not reentrant: no thread that holds it takes it again (a
//!   truncation's `cut` and `go` must not verify, back up, plan or
//!   truncate).

use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// How long a wait goes between two looks at whether to go on: the locks
/// themselves wake the waiter as they are let go.
const WAIT_SLICE: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
pub(crate) struct TruncationLock {
    turnstile: Mutex<()>,
    lock: RwLock<()>,
}

impl TruncationLock {
    /// Shared: `None` once `stopped` says so while it waits.
    pub(crate) fn read_until(
        &self,
        stopped: &mut dyn FnMut() -> bool,
    ) -> Option<RwLockReadGuard<'_, ()>> {
        let _turn = waited(stopped, || self.turnstile.try_lock_for(WAIT_SLICE))?;
        waited(stopped, || self.lock.try_read_for(WAIT_SLICE))
    }

    /// Exclusive: `None` once `stopped` says so while it waits. The
    /// turnstile is held until the lock is taken: readers that come
    /// meanwhile wait behind it.
    pub(crate) fn write_until(
        &self,
        stopped: &mut dyn FnMut() -> bool,
    ) -> Option<RwLockWriteGuard<'_, ()>> {
        let _turn = waited(stopped, || self.turnstile.try_lock_for(WAIT_SLICE))?;
        waited(stopped, || self.lock.try_write_for(WAIT_SLICE))
    }
}

/// What `take` (a wait of one slice) gives, asked again until it gives
/// something or `stopped` says so between two slices.
fn waited<G>(stopped: &mut dyn FnMut() -> bool, mut take: impl FnMut() -> Option<G>) -> Option<G> {
    loop {
        if let Some(g) = take() {
            return Some(g);
        }
        if stopped() {
            return None;
        }
    }
}

/// When a truncation's wait for the lock is worth a WARN: a live verify
/// or backup of a large archive (into a slow disk), or another prune of a
/// large partition, holds it for hours,
/// and retention waits meanwhile, without a word until 2026-12-05, while
/// archiving goes on filling the disk (seen in review). First after
/// [`LongWait::FIRST`], then every [`LongWait::EVERY`].
#[derive(Debug)]
pub(crate) struct LongWait {
    since: Instant,
    said_at: Option<Instant>,
}

impl LongWait {
    pub(crate) const FIRST: Duration = Duration::from_secs(60);
    pub(crate) const EVERY: Duration = Duration::from_secs(10 * 60);

    pub(crate) fn starting(now: Instant) -> LongWait {
        LongWait {
            since: now,
            said_at: None,
        }
    }

    /// How long it has waited, when that is to be said now.
    pub(crate) fn due(&mut self, now: Instant) -> Option<Duration> {
        let waited = now.saturating_duration_since(self.since);
        let due = match self.said_at {
            None => waited >= Self::FIRST,
            Some(at) => now.saturating_duration_since(at) >= Self::EVERY,
        };
        due.then(|| {
            self.said_at = Some(now);
            waited
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{LongWait, TruncationLock};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// A long wait is said after a minute, then every ten, not at every
    /// slice of it.
    #[test]
    fn a_long_wait_is_said_once_a_minute_in_then_every_ten() {
        let t0 = Instant::now();
        let mut w = LongWait::starting(t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(w.due(at(0)), None);
        assert_eq!(w.due(at(59)), None);
        assert_eq!(w.due(at(60)), Some(Duration::from_secs(60)));
        assert_eq!(w.due(at(61)), None);
        assert_eq!(w.due(at(659)), None);
        assert_eq!(w.due(at(660)), Some(Duration::from_secs(660)));
        assert_eq!(w.due(at(661)), None);
        assert_eq!(w.due(at(1260)), Some(Duration::from_secs(1260)));
    }

    /// A writer waiting behind a reader keeps a later reader out until it
    /// has had the lock, and a wait told to stop ends.
    #[test]
    fn a_waiting_writer_keeps_later_readers_out() {
        let l = TruncationLock::default();
        let first = l.read_until(&mut || false).unwrap();
        let (wrote, written) = mpsc::channel();
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let g = l.write_until(&mut || false).unwrap();
                wrote.send(()).unwrap();
                drop(g);
            });
            // The writer has the turnstile once a reader can no longer
            // pass it (it waits on the first reader's lock meanwhile).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while l.turnstile.try_lock().is_some_and(drop_true) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the waiting writer never took the turnstile"
                );
                std::thread::yield_now();
            }
            // A later reader, told to stop at its first look, does not get
            // in ahead of the writer.
            assert!(l.read_until(&mut || true).is_none());
            drop(first);
            writer.join().unwrap();
            written.recv().unwrap();
        });
        // Free again: readers and writers go in at once.
        assert!(l.read_until(&mut || true).is_some());
        assert!(l.write_until(&mut || true).is_some());
    }

    fn drop_true<T>(_: T) -> bool {
        true
    }
}
