//! What was handed to the sink, per partition: the next offset after the
//! records put (or where the partition resumed, or the position the
//! consumer caught up to), and which partitions the sink has not declared
//! safe up to there.
//!
//! `pre_commit` is asked about those partitions only. Kafka Connect's
//! `preCommit` is handed every assigned partition, and so was cairn's until
//! 2026-12-06: under `--commit every-put`, a put of one record then paid
//! for every partition assigned (a map of all of them built, and answered,
//! at every put: 3.5–4.1 ms a put at 10,000 partitions, about 40× the put
//! at 32; BENCHMARKS.md, "Partitions").
//!
//! # Invariants
//! - A partition is asked about until the sink's word reaches what it was
//!   handed: every change goes through [`Handed::raise`],
//!   [`Handed::insert_if_absent`] or [`Handed::extend`], which mark the
//!   partition undeclared, and only [`Handed::declared`], of a
//!   `pre_commit`'s word at or past it, or [`Handed::held_by_kafka`], of a
//!   committed offset at or past it (nothing is left to commit), clears
//!   the mark (a `put`'s report is never committed, so it never does), as
//!   does [`Handed::remove`] of a partition revoked or lost. There is no mutable access to the map otherwise
//!   (`Deref` only).
//! - A word below what was handed (a sink that declares less, or reports
//!   less durable in a `put`) marks the partition again.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;

use cairn_engine::TopicPartition;

#[derive(Debug, Default)]
pub(crate) struct Handed {
    map: BTreeMap<TopicPartition, i64>,
    /// Partitions of `map` whose offset the sink has not declared safe.
    undeclared: BTreeSet<TopicPartition>,
    /// Partitions handed something and then revoked or lost, until handed
    /// something again: a sink's later word on one is not a sink's bug (it
    /// may answer for all it holds, asked or not, until their `close`).
    gone: BTreeSet<TopicPartition>,
}

impl Handed {
    /// Raise `tp`'s offset to `o`, never lowering it.
    pub fn raise(&mut self, tp: &TopicPartition, o: i64) {
        if crate::commit::raise(&mut self.map, tp, o) {
            self.mark(tp);
        }
    }

    /// `tp` starts at `o`, unless it has an offset already.
    pub fn insert_if_absent(&mut self, tp: &TopicPartition, o: i64) {
        if !self.map.contains_key(tp) {
            self.map.insert(tp.clone(), o);
            self.mark(tp);
        }
    }

    /// Assigned partitions resume at these offsets.
    pub fn extend(&mut self, resumed: impl IntoIterator<Item = (TopicPartition, i64)>) {
        for (tp, o) in resumed {
            self.mark(&tp);
            self.map.insert(tp, o);
        }
    }

    /// A partition revoked or lost: forgotten (but for [`Handed::was_handed`]).
    pub fn remove(&mut self, tp: &TopicPartition) {
        if self.map.remove(tp).is_some() && !self.gone.contains(tp) {
            self.gone.insert(tp.clone());
        }
        self.undeclared.remove(tp);
    }

    /// `tp` was handed to the sink in a put that its loss overtook (a loss
    /// does not wait for the task thread), and it has no offset here (a
    /// partition's first put, which its loss's [`Handed::remove`] did not
    /// see): remembered as handed, so that the sink's later word on it is
    /// taken for one on a partition lost, not for a sink's bug.
    pub fn handed_then_lost(&mut self, tp: &TopicPartition) {
        if !self.map.contains_key(tp) && !self.gone.contains(tp) {
            self.gone.insert(tp.clone());
        }
    }

    /// Whether `tp` was handed something before it was revoked or lost
    /// (and nothing since).
    pub fn was_handed(&self, tp: &TopicPartition) -> bool {
        self.gone.contains(tp)
    }

    /// `pre_commit`'s word on `tp`: asked about again unless it reaches
    /// what was handed.
    pub fn declared(&mut self, tp: &TopicPartition, word: i64) {
        match self.map.get(tp) {
            Some(&handed) if word >= handed => {
                self.undeclared.remove(tp);
            }
            Some(_) => self.mark(tp),
            None => {}
        }
    }

    /// Kafka holds `committed` for `tp` (an assignment's committed offset,
    /// or this run's commit): at or past what was handed, there is nothing
    /// to commit, so it is not asked about again until more is handed (a
    /// partition resumed at another store's commit, past what this sink
    /// holds, would otherwise be asked about at every `pre_commit`).
    pub fn held_by_kafka(&mut self, tp: &TopicPartition, committed: i64) {
        if self.map.get(tp).is_some_and(|&handed| committed >= handed) {
            self.undeclared.remove(tp);
        }
    }

    /// Whether `tp` is still to be asked about.
    pub fn is_undeclared(&self, tp: &TopicPartition) -> bool {
        self.undeclared.contains(tp)
    }

    /// A `put`'s report on `tp`: asked about again if it is below what was
    /// handed (it lowers a word declared before). Never a declaration.
    pub fn reported(&mut self, tp: &TopicPartition, durable: i64) {
        if self.map.get(tp).is_some_and(|&handed| durable < handed) {
            self.mark(tp);
        }
    }

    /// What to ask `pre_commit` about: the undeclared partitions that
    /// `assigned` holds, at what each was handed.
    pub fn to_ask(&self, assigned: &BTreeSet<TopicPartition>) -> BTreeMap<TopicPartition, i64> {
        self.undeclared
            .iter()
            .filter(|tp| assigned.contains(*tp))
            .map(|tp| (tp.clone(), self.map[tp]))
            .collect()
    }

    fn mark(&mut self, tp: &TopicPartition) {
        if !self.undeclared.contains(tp) {
            self.undeclared.insert(tp.clone());
        }
        self.gone.remove(tp);
    }
}

impl Deref for Handed {
    type Target = BTreeMap<TopicPartition, i64>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    #[test]
    fn a_partition_is_asked_about_until_a_word_reaches_what_it_was_handed() {
        let mut h = Handed::default();
        let assigned = BTreeSet::from([tp(0), tp(1), tp(2)]);
        h.extend([(tp(0), 5), (tp(1), 7)]);
        h.insert_if_absent(&tp(1), 0);
        assert_eq!(h[&tp(1)], 7, "an offset held is kept");
        assert_eq!(
            h.to_ask(&assigned),
            BTreeMap::from([(tp(0), 5), (tp(1), 7)])
        );
        h.reported(&tp(0), 5);
        assert_eq!(
            h.to_ask(&assigned).len(),
            2,
            "a put's report declares nothing"
        );
        h.declared(&tp(0), 5);
        h.declared(&tp(1), 6);
        assert_eq!(
            h.to_ask(&assigned),
            BTreeMap::from([(tp(1), 7)]),
            "a word below"
        );
        h.declared(&tp(1), 7);
        assert!(h.to_ask(&assigned).is_empty());
        h.raise(&tp(0), 4);
        assert!(h.to_ask(&assigned).is_empty(), "not raised: nothing new");
        h.raise(&tp(0), 9);
        h.raise(&tp(2), 1);
        assert_eq!(
            h.to_ask(&assigned),
            BTreeMap::from([(tp(0), 9), (tp(2), 1)])
        );
        // A lower word after a declared one (a put reporting less).
        h.declared(&tp(0), 9);
        h.reported(&tp(0), 8);
        assert_eq!(
            h.to_ask(&assigned),
            BTreeMap::from([(tp(0), 9), (tp(2), 1)])
        );
        assert_eq!(
            h.to_ask(&BTreeSet::from([tp(2)])),
            BTreeMap::from([(tp(2), 1)]),
            "only assigned ones"
        );
        assert!(!h.was_handed(&tp(2)));
        h.remove(&tp(2));
        assert!(h.was_handed(&tp(2)), "handed before its loss");
        h.remove(&tp(7));
        assert!(!h.was_handed(&tp(7)), "never handed");
        h.declared(&tp(2), 0);
        // Kafka holding it at or past what was handed: nothing to ask.
        h.held_by_kafka(&tp(0), 8);
        assert!(h.is_undeclared(&tp(0)), "below what was handed");
        h.held_by_kafka(&tp(0), 9);
        assert!(!h.is_undeclared(&tp(0)));
        h.raise(&tp(0), 9);
        h.held_by_kafka(&tp(3), 100);
        assert!(
            h.to_ask(&assigned).is_empty(),
            "one never handed is not marked"
        );
        assert_eq!(h.len(), 2);
    }
}
