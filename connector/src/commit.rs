//! Commit bookkeeping: what the sink reported durable, what was committed,
//! and put-to-commit latency.
//!
//! # Invariants
//! - A commit never carries an offset above what the sink's `put` reported
//!   durable for that partition (`check_committable` panics otherwise: that
//!   would be a bug that loses data on the next crash).

use std::collections::BTreeMap;
use std::time::Instant;

use cairn_engine::TopicPartition;
use hdrhistogram::Histogram;

#[derive(Debug)]
pub struct CommitTracker {
    /// Highest next-offset each put reported durable.
    pub durable_reported: BTreeMap<TopicPartition, i64>,
    /// Last offsets Kafka acknowledged.
    pub committed: BTreeMap<TopicPartition, i64>,
    /// Start times of puts whose offsets are not yet committed.
    uncommitted_puts: Vec<Instant>,
    /// Microseconds from the start of a put to the ack of the commit covering it.
    pub put_to_commit_us: Histogram<u64>,
}

impl Default for CommitTracker {
    fn default() -> Self {
        CommitTracker {
            durable_reported: BTreeMap::new(),
            committed: BTreeMap::new(),
            uncommitted_puts: Vec::new(),
            put_to_commit_us: Histogram::new(3).expect("histogram"),
        }
    }
}

impl CommitTracker {
    pub fn record_put(&mut self, started: Instant, durable: &BTreeMap<TopicPartition, i64>) {
        self.note_durable(durable);
        self.uncommitted_puts.push(started);
    }

    /// An assignment: the sink's `open` reported these offsets durable, and
    /// Kafka had these committed. A partition that resumes fully archived
    /// gets no put, yet its durable offset may still be committed.
    pub fn record_open(
        &mut self,
        durable: &BTreeMap<TopicPartition, i64>,
        kafka_committed: &BTreeMap<TopicPartition, i64>,
    ) {
        self.note_durable(durable);
        for (tp, &o) in kafka_committed {
            let e = self.committed.entry(tp.clone()).or_insert(o);
            *e = (*e).max(o);
        }
    }

    fn note_durable(&mut self, durable: &BTreeMap<TopicPartition, i64>) {
        for (tp, &o) in durable {
            let e = self.durable_reported.entry(tp.clone()).or_insert(o);
            *e = (*e).max(o);
        }
    }

    /// Assert the invariant and return only offsets that move a partition's
    /// commit forward. A commit never moves back: another instance of the
    /// group may have committed past this store's durable offset.
    pub fn check_committable(
        &self,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> BTreeMap<TopicPartition, i64> {
        let mut out = BTreeMap::new();
        for (tp, &o) in offsets {
            let durable = self.durable_reported.get(tp).copied();
            assert!(
                durable.is_some_and(|d| o <= d),
                "BUG: would commit {tp}@{o} above the durable offset {durable:?}"
            );
            if self.committed.get(tp).is_none_or(|&c| o > c) {
                out.insert(tp.clone(), o);
            }
        }
        out
    }

    pub fn record_commit(&mut self, offsets: &BTreeMap<TopicPartition, i64>) {
        let now = Instant::now();
        for t in self.uncommitted_puts.drain(..) {
            let _ = self
                .put_to_commit_us
                .record((now - t).as_micros().max(1) as u64);
        }
        for (tp, &o) in offsets {
            self.committed.insert(tp.clone(), o);
        }
    }

    /// Puts that wrote nothing new need no commit; their latency is the put's.
    pub fn nothing_to_commit(&mut self) {
        self.record_commit(&BTreeMap::new());
    }

    pub fn forget(&mut self, tp: &TopicPartition) {
        self.durable_reported.remove(tp);
        self.committed.remove(tp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "above the durable offset")]
    fn committing_above_durable_panics() {
        let mut t = CommitTracker::default();
        let tp = TopicPartition::new("t", 0);
        t.record_put(Instant::now(), &BTreeMap::from([(tp.clone(), 5)]));
        t.check_committable(&BTreeMap::from([(tp, 6)]));
    }

    #[test]
    fn only_moved_offsets_are_committed() {
        let mut t = CommitTracker::default();
        let tp = TopicPartition::new("t", 0);
        t.record_put(Instant::now(), &BTreeMap::from([(tp.clone(), 5)]));
        let c = t.check_committable(&BTreeMap::from([(tp.clone(), 5)]));
        assert_eq!(c.len(), 1);
        t.record_commit(&c);
        assert_eq!(t.put_to_commit_us.len(), 1);
        assert!(t.check_committable(&BTreeMap::from([(tp, 5)])).is_empty());
    }

    #[test]
    fn resumed_partitions_commit_their_durable_offset_but_never_backwards() {
        let mut t = CommitTracker::default();
        let done = TopicPartition::new("t", 0);
        let behind = TopicPartition::new("t", 1);
        t.record_open(
            &BTreeMap::from([(done.clone(), 100), (behind.clone(), 40)]),
            &BTreeMap::from([(done.clone(), 90), (behind.clone(), 60)]),
        );
        // Fully archived: no put comes, but 100 is durable and may be committed.
        let c = t.check_committable(&BTreeMap::from([(done.clone(), 100)]));
        assert_eq!(c, BTreeMap::from([(done, 100)]));
        // Another instance committed 60; this store's 40 must not move it back.
        assert!(t
            .check_committable(&BTreeMap::from([(behind, 40)]))
            .is_empty());
    }
}
