//! Record buffers handed back from the task thread to the consumer thread.
//!
//! The consumer thread copies each record's key, value and header values
//! out of librdkafka into buffers of their own, and the task thread drops
//! them once the put is written. glibc's per-thread caches of freed memory
//! then never see a buffer come back to the thread that allocates the next
//! one, so both threads took malloc's and free's slow paths for every
//! record: a third of the consumer thread's CPU went to the allocator
//! (docs/BENCHMARKS.md, "Where the time goes (connector)", item 11). Here
//! the task thread hands a written put's buffers back, and the consumer
//! thread copies the next records into them.
//!
//! # Invariants
//! - The buffers waiting here hold at most [`RECYCLED_BYTES_MAX`] bytes of
//!   memory (each counted as its capacity, at least a malloc chunk, plus
//!   its `Vec`), in buffers of at most [`RECYCLED_BUFFER_BYTES_MAX`] each;
//!   anything more is freed as before. The consumer thread's stash holds at
//!   most one such pool more: `2 * RECYCLED_BYTES_MAX` in all.
//! - Buffers come back in the order the records held them (key, value,
//!   header values, record after record) and the consumer thread copies in
//!   that order, so a buffer goes back to the same field of a record
//!   shaped alike, and is seldom shrunk or grown.
//! - A reused buffer is cleared before it is filled: no byte of an earlier
//!   record reaches a later one.
//! - A reused buffer's capacity is at most twice the bytes copied into it
//!   plus [`SLACK_BYTES`] (a larger one is shrunk first): the memory a
//!   record holds, which the hand-over queue counts by capacity (consumer.rs
//!   `held_bytes`), stays within a small factor of its payload.

use std::sync::Mutex;

use cairn_engine::RecordBatch;

use crate::consumer::lock;

/// Most bytes of memory kept for reuse (see [`held`]).
pub(crate) const RECYCLED_BYTES_MAX: usize = 4 << 20;
/// Larger buffers are freed, not kept.
pub(crate) const RECYCLED_BUFFER_BYTES_MAX: usize = 64 << 10;
/// Capacity a reused buffer may have beyond twice what it holds.
pub(crate) const SLACK_BYTES: usize = 64;

/// The memory a kept buffer holds: its capacity, at least glibc's smallest
/// chunk, and the `Vec` itself.
fn held(v: &Vec<u8>) -> usize {
    v.capacity().max(32) + std::mem::size_of::<Vec<u8>>()
}

#[derive(Debug, Default)]
struct Pool {
    buffers: Vec<Vec<u8>>,
    bytes: usize,
}

/// The buffers on their way back (shared by both threads).
#[derive(Debug, Default)]
pub(crate) struct Recycler {
    pool: Mutex<Pool>,
}

impl Recycler {
    /// Keep the buffers of written records for reuse, within the bounds
    /// (task thread, after a put). One lock per put.
    pub(crate) fn give_back(&self, batches: Vec<RecordBatch>) {
        let mut back: Vec<Vec<u8>> = Vec::new();
        for b in batches {
            for r in b.records {
                back.extend(r.key);
                back.extend(r.value);
                back.extend(r.headers.into_iter().filter_map(|h| h.value));
            }
        }
        back.retain(|v| v.capacity() > 0 && v.capacity() <= RECYCLED_BUFFER_BYTES_MAX);
        let mut pool = lock(&self.pool);
        let mut kept = 0;
        for v in &back {
            if pool.bytes + held(v) > RECYCLED_BYTES_MAX {
                break;
            }
            pool.bytes += held(v);
            kept += 1;
        }
        pool.buffers.extend(back.drain(..kept));
        drop(pool);
        // What did not fit is freed here, with the lock released.
        drop(back);
    }

    /// Move everything waiting into `stash` (consumer thread, when its
    /// stash is empty). One lock per call.
    pub(crate) fn refill(&self, stash: &mut Stash) {
        let mut pool = lock(&self.pool);
        std::mem::swap(&mut pool.buffers, &mut stash.buffers);
        pool.bytes = 0;
        drop(pool);
        // Popped from the end: first the first record's key.
        stash.buffers.reverse();
    }
}

/// The consumer thread's buffers to copy records into.
#[derive(Debug, Default)]
pub(crate) struct Stash {
    buffers: Vec<Vec<u8>>,
}

impl Stash {
    pub(crate) fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// `bytes` in a buffer of their own: a reused one if any is left (none
    /// for no bytes, which need no allocation).
    pub(crate) fn copy(&mut self, bytes: &[u8]) -> Vec<u8> {
        if bytes.is_empty() {
            return Vec::new();
        }
        match self.buffers.pop() {
            Some(mut v) => {
                v.clear();
                let fits = 2 * bytes.len() + SLACK_BYTES;
                if v.capacity() > fits {
                    v.shrink_to(fits);
                }
                v.extend_from_slice(bytes);
                v
            }
            None => bytes.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::{Header, Record, TopicPartition};

    fn batch(records: Vec<Record>) -> Vec<RecordBatch> {
        vec![RecordBatch {
            tp: TopicPartition::new("t", 0),
            records,
        }]
    }

    #[test]
    fn buffers_come_back_cleared_and_filled_with_the_new_bytes_only() {
        let r = Recycler::default();
        let mut old = Record::with_value(0, vec![7u8; 100]);
        old.key = Some(b"key".to_vec());
        old.headers = vec![Header {
            name: "h".into(),
            value: Some(vec![9u8; 10]),
        }];
        r.give_back(batch(vec![old]));
        let mut stash = Stash::default();
        r.refill(&mut stash);
        assert_eq!(stash.buffers.len(), 3);
        // No bytes take no buffer.
        assert_eq!(stash.copy(b""), b"");
        assert_eq!(stash.buffers.len(), 3);
        // In the order they were held: the key's buffer for the key, the
        // value's for the value, the header value's for the header value.
        let key = stash.copy(b"abc");
        assert_eq!((key.as_slice(), key.capacity()), (&b"abc"[..], 3));
        let value = stash.copy(&[1u8; 90]);
        assert_eq!((value.as_slice(), value.capacity()), (&[1u8; 90][..], 100));
        assert_eq!(stash.copy(b"0123456789"), b"0123456789");
        // Empty: fresh buffers.
        assert!(stash.is_empty());
        assert_eq!(stash.copy(b"xyz"), b"xyz");
    }

    #[test]
    fn a_reused_buffer_holds_little_more_than_what_it_carries() {
        let r = Recycler::default();
        r.give_back(batch(vec![Record::with_value(0, vec![0u8; 60_000])]));
        let mut stash = Stash::default();
        r.refill(&mut stash);
        let v = stash.copy(b"tiny");
        // The pooled buffer was the one taken, cut down.
        assert!(stash.is_empty());
        assert!(v.capacity() <= 2 * 4 + SLACK_BYTES, "{}", v.capacity());
    }

    #[test]
    fn the_pool_keeps_at_most_its_bytes_and_no_large_buffer() {
        let r = Recycler::default();
        let large = Record::with_value(0, vec![0u8; RECYCLED_BUFFER_BYTES_MAX + 1]);
        let many: Vec<Record> = (0..(RECYCLED_BYTES_MAX / 1000 + 100) as i64)
            .map(|o| Record::with_value(o + 1, vec![0u8; 1000]))
            .collect();
        r.give_back(batch(std::iter::once(large).chain(many).collect()));
        let pool = r.pool.lock().unwrap();
        assert!(pool.bytes <= RECYCLED_BYTES_MAX);
        assert!(pool.bytes > RECYCLED_BYTES_MAX - 2000, "{}", pool.bytes);
        assert_eq!(pool.bytes, pool.buffers.iter().map(held).sum::<usize>());
        assert!(pool
            .buffers
            .iter()
            .all(|v| v.capacity() <= RECYCLED_BUFFER_BYTES_MAX));
    }
}
