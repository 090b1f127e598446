//! The hand-over queue from the consumer thread to the task thread: FIFO,
//! bounded by the bytes the puts waiting in it hold (their records' payload
//! and structs, consumer.rs `held_bytes`: never 0 for a put).
//!
//! A queue rather than a rendezvous lets the consumer thread keep polling
//! while the task thread is busy with a `pre_commit` (an fsync, up to tens of
//! milliseconds under `interval:MS`): measured on this 2-core machine, 1M
//! records of 100 B under `interval:100` went from a median of 705k to 855k
//! records/s over eight interleaved runs (docs/BENCHMARKS.md).
//!
//! # Invariants
//! - Puts waiting in the queue (handed over, not yet taken by the task
//!   thread) hold at most `bytes_max` bytes, except that one put
//!   always fits an empty queue: `bytes_max = 0` allows one waiting put.
//! - Jobs leave in the order they entered: a revoke's or a stop's flush runs
//!   after every put handed over before it.
//! - Once the task thread has exited the queue is closed: a waiting sender
//!   is woken and told, never left blocked.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};

use crate::consumer::lock;
use crate::worker::Job;

#[derive(Debug, Default)]
struct State {
    queued_bytes: usize,
    closed: bool,
    /// Senders blocked for room (tests wait for one before waking it).
    waiting: usize,
}

/// The byte budget shared by both ends.
#[derive(Debug)]
pub(crate) struct Budget {
    state: Mutex<State>,
    freed: Condvar,
    bytes_max: usize,
}

impl Budget {
    /// Wait until `bytes` more fit. `false` once the queue is closed.
    fn acquire(&self, bytes: usize) -> bool {
        let mut s = lock(&self.state);
        loop {
            if s.closed {
                return false;
            }
            if s.queued_bytes == 0 || s.queued_bytes + bytes <= self.bytes_max {
                s.queued_bytes += bytes;
                return true;
            }
            s.waiting += 1;
            s = self.freed.wait(s).unwrap_or_else(|e| e.into_inner());
            s.waiting -= 1;
        }
    }

    /// A put left the queue (the task thread took it).
    pub fn release(&self, bytes: usize) {
        let mut s = lock(&self.state);
        s.queued_bytes = s.queued_bytes.saturating_sub(bytes);
        self.freed.notify_all();
    }

    /// The task thread is gone: wake and refuse every sender.
    pub fn close(&self) {
        lock(&self.state).closed = true;
        self.freed.notify_all();
    }
}

/// The consumer thread's end.
pub(crate) struct JobSender {
    tx: Sender<Job>,
    budget: Arc<Budget>,
}

impl JobSender {
    /// Queue a job, first waiting for room for its bytes. `Err` when the
    /// task thread is gone (the job is dropped).
    pub fn send(&self, job: Job) -> Result<(), ()> {
        let bytes = job.queued_bytes();
        if !self.budget.acquire(bytes) {
            return Err(());
        }
        self.tx.send(job).map_err(|_| self.budget.release(bytes))
    }
}

/// A queue whose waiting puts hold at most `bytes_max` bytes.
pub(crate) fn bounded(bytes_max: usize) -> (JobSender, Receiver<Job>, Arc<Budget>) {
    let (tx, rx) = mpsc::channel();
    let budget = Arc::new(Budget {
        state: Mutex::new(State::default()),
        freed: Condvar::new(),
        bytes_max,
    });
    (
        JobSender {
            tx,
            budget: budget.clone(),
        },
        rx,
        budget,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_put_always_fits_and_the_budget_bounds_the_rest() {
        let (_tx, _rx, b) = bounded(100);
        assert!(b.acquire(500), "an empty queue takes any put");
        b.release(500);
        assert!(b.acquire(60));
        assert!(b.acquire(40));
        // Full: a third acquire would block until a release, so release first.
        b.release(60);
        assert!(b.acquire(60));
        b.close();
        assert!(!b.acquire(1), "a closed queue refuses");
    }

    /// A full queue and a sender blocked waiting for 5 bytes of room in
    /// it (returned once it is blocked, so that what the test does next is
    /// what wakes it).
    fn full_with_a_waiter() -> (Arc<Budget>, std::thread::JoinHandle<bool>) {
        let (_tx, _rx, b) = bounded(10);
        assert!(b.acquire(10));
        let waiter = std::thread::spawn({
            let b = b.clone();
            move || b.acquire(5)
        });
        while lock(&b.state).waiting == 0 {
            assert!(!waiter.is_finished(), "the sender did not wait");
            std::thread::yield_now();
        }
        (b, waiter)
    }

    #[test]
    fn a_closed_queue_wakes_a_waiting_sender() {
        let (b, waiter) = full_with_a_waiter();
        b.close();
        assert!(!waiter.join().unwrap());
    }

    #[test]
    fn a_release_wakes_a_waiting_sender() {
        let (b, waiter) = full_with_a_waiter();
        b.release(10);
        assert!(waiter.join().unwrap());
    }
}
