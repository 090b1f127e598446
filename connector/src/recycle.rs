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
//! - At most [`RECYCLED_BYTES_MAX`] bytes of buffer capacity wait here, in
//!   buffers of at most [`RECYCLED_BUFFER_BYTES_MAX`] each; anything more
//!   is freed as before.
//! - A reused buffer is cleared before it is filled: no byte of an earlier
//!   record reaches a later one.
//! - A reused buffer's capacity is at most twice the bytes copied into it
//!   plus [`SLACK_BYTES`] (a larger one is shrunk first): the bytes the
//!   hand-over queue counts for a record (its payload, consumer.rs
//!   `held_bytes`) stay within a small factor of the memory it holds.

use std::sync::Mutex;

use cairn_engine::RecordBatch;

/// Most bytes of capacity kept for reuse.
pub(crate) const RECYCLED_BYTES_MAX: usize = 8 << 20;
/// Larger buffers are freed, not kept.
pub(crate) const RECYCLED_BUFFER_BYTES_MAX: usize = 64 << 10;
/// Capacity a reused buffer may have beyond twice what it holds.
pub(crate) const SLACK_BYTES: usize = 64;

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
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        for v in back {
            let cap = v.capacity();
            if cap == 0 || cap > RECYCLED_BUFFER_BYTES_MAX {
                continue;
            }
            if pool.bytes + cap > RECYCLED_BYTES_MAX {
                break;
            }
            pool.bytes += cap;
            pool.buffers.push(v);
        }
    }

    /// Move everything waiting into `stash` (consumer thread, when its
    /// stash is empty). One lock per call.
    pub(crate) fn refill(&self, stash: &mut Stash) {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::swap(&mut pool.buffers, &mut stash.buffers);
        pool.bytes = 0;
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

    /// `bytes` in a buffer of their own: a reused one if any is left.
    pub(crate) fn copy(&mut self, bytes: &[u8]) -> Vec<u8> {
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
        for want in [&b"abc"[..], &[1u8; 90][..], &b""[..]] {
            assert_eq!(stash.copy(want), want);
        }
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
        assert_eq!(
            pool.bytes,
            pool.buffers.iter().map(Vec::capacity).sum::<usize>()
        );
        assert!(pool
            .buffers
            .iter()
            .all(|v| v.capacity() <= RECYCLED_BUFFER_BYTES_MAX));
    }
}
