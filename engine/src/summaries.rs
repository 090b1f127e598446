//! The engine's partition summaries as written (not yet durable), and which
//! of them changed since a sync last took them.
//!
//! A sync publishes the summaries it made durable as the engine's durable
//! view (`engine.rs`, `DurableView`). Until 2026-12-06 it copied every
//! partition's summary into a new view, under the write lock, at every
//! sync: at 10,000 partitions that copy (and its allocations) was paid by
//! every put of one record (BENCHMARKS.md, "Partitions"). Now a sync takes
//! only the summaries changed since the one before, and the view is updated
//! in place with them.
//!
//! # Invariants
//! - Every change goes through [`Summaries::insert`] or
//!   [`Summaries::extend`], which mark the partition changed; there is no
//!   mutable access to the map otherwise (`Deref` only). So the durable
//!   view, updated with [`Summaries::take_changed`] at each sync in order,
//!   equals what a copy of the whole map at that sync would have been
//!   (checked in debug builds by the engine's sync).
//! - Summaries are never removed: an emptied partition keeps its summary.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;

use crate::offsets::PartitionSummary;
use crate::record::TopicPartition;

#[derive(Debug, Clone, Default)]
pub(crate) struct Summaries {
    map: BTreeMap<TopicPartition, PartitionSummary>,
    /// Changed since the last `take_changed`.
    changed: BTreeSet<TopicPartition>,
}

impl Summaries {
    /// Summaries read at open: what the durable view starts from, so none
    /// counts as changed.
    pub fn recovered(map: BTreeMap<TopicPartition, PartitionSummary>) -> Self {
        Summaries {
            map,
            changed: BTreeSet::new(),
        }
    }

    pub fn insert(&mut self, tp: TopicPartition, s: PartitionSummary) {
        if !self.changed.contains(&tp) {
            self.changed.insert(tp.clone());
        }
        self.map.insert(tp, s);
    }

    pub fn extend(
        &mut self,
        changes: impl IntoIterator<Item = (TopicPartition, PartitionSummary)>,
    ) {
        for (tp, s) in changes {
            self.insert(tp, s);
        }
    }

    /// The summaries changed since the last call, as they are now; none
    /// counts as changed after it.
    pub fn take_changed(&mut self) -> Vec<(TopicPartition, PartitionSummary)> {
        std::mem::take(&mut self.changed)
            .into_iter()
            .map(|tp| {
                let s = self.map[&tp];
                (tp, s)
            })
            .collect()
    }
}

impl Deref for Summaries {
    type Target = BTreeMap<TopicPartition, PartitionSummary>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(next: i64) -> PartitionSummary {
        PartitionSummary::empty_at(next)
    }

    #[test]
    fn only_what_changed_since_the_last_take_is_taken_as_it_is_now() {
        let a = TopicPartition::new("t", 0);
        let b = TopicPartition::new("t", 1);
        let mut s = Summaries::recovered(BTreeMap::from([(a.clone(), summary(1))]));
        assert!(
            s.take_changed().is_empty(),
            "recovered summaries are the view's already"
        );
        s.insert(b.clone(), summary(2));
        s.extend([(a.clone(), summary(3)), (b.clone(), summary(4))]);
        assert_eq!(
            s.take_changed(),
            vec![(a.clone(), summary(3)), (b.clone(), summary(4))]
        );
        assert!(s.take_changed().is_empty());
        assert_eq!(s.get(&a), Some(&summary(3)));
        assert_eq!(s.len(), 2);
    }
}
