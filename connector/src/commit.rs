//! Commit bookkeeping: what the sink reported durable, what it declared safe
//! to commit, what Kafka acknowledged, and put-to-commit latency.
//!
//! Offsets flow one way: `put` may report some durable (`record_put`), the
//! sink's `pre_commit` makes what was put durable and declares offsets safe
//! (`record_pre_commit`), a commit takes the safe ones that move a partition
//! forward (`take_commit`) and Kafka's answer settles them (`commit_acked` /
//! `commit_failed`).
//!
//! # Invariants
//! - A commit never carries an offset above what the sink reported durable
//!   for that partition (from `put`, `open`, `start` or `pre_commit`), and a sink
//!   never reports durable an offset past the records handed to it.
//!   `take_commit` panics otherwise (the loop's own bug), `record_put` and
//!   `record_pre_commit` return `SinkOverclaimed` (the sink's), taking no
//!   word of that call: either would lose data on the next crash.
//! - The sink's word never goes below an offset this run sent Kafka in a
//!   commit for the partition since its assignment (`commit_sent`; Kafka
//!   may hold it whatever the answer: a commit that partly failed or timed
//!   out may have been applied): `record_put`, `record_pre_commit` and
//!   `commit_acked` return `SinkLostCommitted` otherwise (a sink that lost
//!   records), and the run stops with nothing more committed. Only a word
//!   is checked: since 2026-12-06 `pre_commit` is asked about partitions
//!   with something not yet declared (handed.rs), so a loss on a partition
//!   declared in full and idle since is found at the `pre_commit` after its
//!   next put (a commit of it already chosen is refused by the sink's
//!   `durable_check` as it is sent, pipeline.rs; an idle partition
//!   declared in full is not offered for commit again).
//! - A commit never moves a partition's committed offset backwards from
//!   what the tracker knows Kafka holds, and is never handed over below
//!   one this run has sent for the partition since its assignment
//!   (`not_below_sent`, checked at the hand-over: since 2026-12-06). The one committed offset it is not
//!   told of at an assignment (rebalance.rs, `ResumePoint::Lost`) is one
//!   this store committed and no longer holds: the next commit brings Kafka
//!   back down to what the store holds, so that committed <= durable holds
//!   again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use cairn_engine::TopicPartition;
use hdrhistogram::Histogram;

use crate::error::ConnectorError;

#[derive(Debug)]
pub struct CommitTracker {
    /// Highest next-offset each put (or open) reported durable: with what
    /// was handed over, the bound of what the sink may report.
    pub durable_reported: BTreeMap<TopicPartition, i64>,
    /// The sink's latest word per partition (put, `pre_commit` or open),
    /// which may be below its highest: what a commit is checked against
    /// and carries, and what progress reports show (since 2026-12-05; the
    /// highest word was, so a commit above a lowered word would have
    /// passed the check, and a lag counted from it understated).
    pub durable_latest: BTreeMap<TopicPartition, i64>,
    /// Highest offsets `pre_commit` declared safe to commit.
    safe: BTreeMap<TopicPartition, i64>,
    /// Partitions whose safe offset was set since a commit last found it
    /// at or below what Kafka holds: all that `take_commit` looks at (until
    /// 2026-12-06 it looked at every partition declared safe, on every
    /// commit, which at 10,000 partitions a put of one record paid).
    /// Every partition whose safe offset is above `committed` is here
    /// ([`Self::set_safe`] is the only way `safe` goes up).
    moved: BTreeSet<TopicPartition>,
    /// Last offsets Kafka acknowledged to this run's commits, or, where
    /// higher, what Kafka held at the partition's assignment (`record_open`:
    /// possibly another store's commit).
    pub committed: BTreeMap<TopicPartition, i64>,
    /// Highest offsets this run's own commits sent Kafka since the
    /// partition's assignment, acknowledged or not: the sink's word may
    /// never go below one (`committed` also holds what Kafka had at the
    /// assignment, which may be another member's). Raised as a commit is
    /// handed over, not as it is acknowledged: librdkafka answers a commit
    /// that failed for one partition with that error for the whole commit,
    /// though the broker took the others, and a commit that timed out may
    /// have been applied (until the night of 2026-12-04 only acknowledged
    /// commits counted, and a sink's word below such a commit went
    /// unnoticed).
    sent_here: BTreeMap<TopicPartition, i64>,
    /// Start times of puts no `pre_commit` has covered yet.
    unsafe_puts: Vec<Instant>,
    /// Start times of puts covered by `safe`, waiting for a commit.
    safe_puts: Vec<Instant>,
    /// Microseconds from the start of a put to the ack of the commit covering it.
    pub put_to_commit_us: Histogram<u64>,
    /// Puts left out of `put_to_commit_us`: while commits keep failing
    /// (a coordinator away for hours), the start times of the puts waiting
    /// for one are kept up to [`PUTS_WAITING_TIMED_MAX`], not without bound.
    pub puts_untimed: u64,
    /// The calls (`put`, `pre_commit`) that reported a partition they were
    /// not handed, and were told, once each.
    warned_unhanded: BTreeSet<&'static str>,
    /// Partitions whose safe offset a `put` or `pre_commit` lowered, each
    /// told once.
    warned_lowered: BTreeSet<TopicPartition>,
}

/// Most put start times kept waiting for a commit (16 bytes each).
pub const PUTS_WAITING_TIMED_MAX: usize = 100_000;

/// Offsets chosen for one commit, and the puts whose latency it settles.
#[derive(Debug)]
pub struct PendingCommit {
    pub offsets: BTreeMap<TopicPartition, i64>,
    /// The sink's latest word for those partitions when the offsets were
    /// chosen (a revoke may forget a partition while its commit is in
    /// flight).
    pub durable: BTreeMap<TopicPartition, i64>,
    puts: Vec<Instant>,
}

impl Default for CommitTracker {
    fn default() -> Self {
        CommitTracker {
            durable_reported: BTreeMap::new(),
            durable_latest: BTreeMap::new(),
            safe: BTreeMap::new(),
            moved: BTreeSet::new(),
            committed: BTreeMap::new(),
            sent_here: BTreeMap::new(),
            unsafe_puts: Vec::new(),
            safe_puts: Vec::new(),
            put_to_commit_us: Histogram::new(3).expect("histogram"),
            puts_untimed: 0,
            warned_unhanded: BTreeSet::new(),
            warned_lowered: BTreeSet::new(),
        }
    }
}

/// Raise `tp`'s offset in `map` to `o`, never lowering it: whether it
/// changed (or was added). The key is cloned only when it is added (these
/// run for every word of every call).
pub(crate) fn raise(map: &mut BTreeMap<TopicPartition, i64>, tp: &TopicPartition, o: i64) -> bool {
    match map.get_mut(tp) {
        Some(at) if *at >= o => false,
        Some(at) => {
            *at = o;
            true
        }
        None => {
            map.insert(tp.clone(), o);
            true
        }
    }
}

impl CommitTracker {
    /// A put returned. `handed` is, per partition, the next offset of the
    /// records handed to the sink so far (or resumed from). An error when
    /// the sink now reports less durable than this run committed (sent in
    /// a commit, `commit_sent`; `SinkLostCommitted`): the run must stop.
    pub fn record_put(
        &mut self,
        started: Instant,
        durable: &BTreeMap<TopicPartition, i64>,
        handed: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ConnectorError> {
        self.check_all_handed("put", durable, handed)?;
        let mut lost = Ok(());
        for (tp, &o) in durable {
            if let Err(e) = self.heed("put", tp, o, handed) {
                lost = lost.and(Err(e));
            }
        }
        if self.unsafe_puts.len() + self.safe_puts.len() < PUTS_WAITING_TIMED_MAX {
            self.unsafe_puts.push(started);
        } else {
            if self.puts_untimed == 0 {
                tracing::warn!(
                    waiting = PUTS_WAITING_TIMED_MAX,
                    "{PUTS_WAITING_TIMED_MAX} puts are waiting for a commit: commits keep failing; the put-to-commit times of further puts are not recorded"
                );
            }
            self.puts_untimed += 1;
        }
        lost
    }

    /// An assignment of `opened`: the sink's `open` reported these offsets
    /// durable (so they are safe), and Kafka had these committed. A
    /// partition that resumes fully archived gets no put, yet its durable
    /// offset may still need committing. An offset `open` reports for a
    /// partition it was not opening (one assigned already, or not at all)
    /// is returned, not taken: nothing checked it against what the sink was
    /// handed, and taken as durable it could be committed past what the
    /// sink holds (Kafka Connect likewise ignores offsets of partitions not
    /// assigned).
    pub fn record_open(
        &mut self,
        opened: &[TopicPartition],
        durable: &BTreeMap<TopicPartition, i64>,
        kafka_committed: &BTreeMap<TopicPartition, i64>,
    ) -> Vec<(TopicPartition, i64)> {
        let opened: BTreeSet<&TopicPartition> = opened.iter().collect();
        let mut ignored = Vec::new();
        for (tp, &o) in durable {
            if !opened.contains(tp) {
                ignored.push((tp.clone(), o));
                continue;
            }
            raise(&mut self.durable_reported, tp, o);
            raise(&mut self.durable_latest, tp, o);
            if self.safe.get(tp).is_none_or(|&safe| safe < o) {
                self.set_safe(tp, o);
            }
        }
        for (tp, &o) in kafka_committed {
            raise(&mut self.committed, tp, o);
        }
        ignored
    }

    /// `pre_commit` made these offsets durable and declared them safe.
    /// Every put recorded so far is covered by them. `handed` as for
    /// `record_put`. A partition of which nothing was handed over or
    /// resumed (revoked since, or assigned with no put or stored offset
    /// yet) is ignored, with a warning the first time, as Kafka Connect
    /// ignores offsets of partitions not assigned: nothing is committed on
    /// its word.
    pub fn record_pre_commit(
        &mut self,
        safe: &BTreeMap<TopicPartition, i64>,
        handed: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ConnectorError> {
        self.check_all_handed("pre_commit", safe, handed)?;
        let mut lost = Ok(());
        for (tp, &o) in safe {
            match self.heed("pre_commit", tp, o, handed) {
                Ok(false) => {}
                Ok(true) => self.set_safe(tp, o),
                Err(e) => {
                    self.set_safe(tp, o);
                    lost = lost.and(Err(e));
                }
            }
        }
        self.safe_puts.append(&mut self.unsafe_puts);
        lost
    }

    /// The sink's word, by `call`, that `tp` is durable at `o`: whether it
    /// is heeded. A partition handed nothing (revoked since, or assigned
    /// with neither a put nor a resume offset of its own: `open` gave
    /// none, or one Kafka's log did not confirm) is ignored, with a
    /// warning once a call: nothing here can check what the sink says of
    /// it (before the night of 2026-12-03 a put's word on one failed the
    /// handed-over check and the run). Otherwise, checked against what
    /// was handed over by the caller first ([`Self::check_all_handed`], for
    /// every word of the call before any is taken), it is the sink's
    /// latest word: a durable
    /// offset below one declared safe before means it lost records, and
    /// the higher one is not committed unless it already was (committed
    /// offsets never go back, `take_commit`). Below an offset this run
    /// committed (`commit_sent`), committed <= durable no longer holds: an error, and the
    /// run stops (until the night of 2026-12-04 only a warning, and the
    /// run went on with Kafka past what the sink held). The word is taken
    /// even then (the caller closes commits under the same lock), so that
    /// no commit chosen before goes out above it meanwhile.
    fn heed(
        &mut self,
        call: &'static str,
        tp: &TopicPartition,
        o: i64,
        handed: &BTreeMap<TopicPartition, i64>,
    ) -> Result<bool, ConnectorError> {
        if !handed.contains_key(tp) && !self.durable_reported.contains_key(tp) {
            if self.warned_unhanded.insert(call) {
                tracing::warn!(%tp, offset = o, "{call} reported a partition it was not handed (revoked, or not put to since its assignment): ignored, as are any such later (this warning is not repeated)");
            }
            return Ok(false);
        }
        raise(&mut self.durable_reported, tp, o);
        self.durable_latest.insert(tp.clone(), o);
        self.lower_safe(tp, o, call);
        match self.sent_here.get(tp) {
            Some(&committed) if o < committed => Err(lost_committed(tp, o, committed)),
            _ => Ok(true),
        }
    }

    /// `tp` is safe to commit at `o` (the sink's word): noted for the next
    /// `take_commit`, which looks at no partition that was not.
    fn set_safe(&mut self, tp: &TopicPartition, o: i64) {
        match self.safe.get_mut(tp) {
            Some(safe) => *safe = o,
            None => {
                self.safe.insert(tp.clone(), o);
            }
        }
        if !self.moved.contains(tp) {
            self.moved.insert(tp.clone());
        }
    }

    /// Whether a call was warned about for reporting a partition it was
    /// not handed.
    #[cfg(test)]
    pub(crate) fn warned_unhanded(&self) -> bool {
        !self.warned_unhanded.is_empty()
    }

    /// The sink reported `tp` durable at `o`, by `call`: a safe offset
    /// above it is lowered to it, with a warning once a partition.
    fn lower_safe(&mut self, tp: &TopicPartition, o: i64, call: &str) {
        let Some(safe) = self.safe.get_mut(tp) else {
            return;
        };
        if o < *safe {
            if self.warned_lowered.insert(tp.clone()) {
                tracing::warn!(%tp, offset = o, before = *safe, "{call} reported a lower offset durable than was declared safe before: the higher one is not committed (the run stops if it already was); a durable offset that goes back means the sink lost records or has a bug (told once a partition)");
            }
            *safe = o;
        }
    }

    /// [`Self::check_handed`] for every word of one call, before any is
    /// taken: a call with one word past what was handed has none of its
    /// others taken for a commit to carry while the run fails (until
    /// 2026-12-04 the words before it in the map were).
    fn check_all_handed(
        &self,
        call: &'static str,
        words: &BTreeMap<TopicPartition, i64>,
        handed: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ConnectorError> {
        for (tp, &o) in words {
            // Only those `heed` would take: one handed nothing (and never
            // reported) is ignored.
            let limit = handed
                .get(tp)
                .copied()
                .max(self.durable_reported.get(tp).copied());
            if let Some(limit) = limit {
                self.check_handed(call, tp, o, limit)?;
            }
        }
        Ok(())
    }

    /// A sink cannot hold durably what it was never given: an offset past
    /// the records handed over (or the offset `open` resumed from) is a bug
    /// of the sink's, `SinkOverclaimed`, and the run stops with nothing more
    /// committed. (A panic until 2026-12-05: an embedder built with
    /// `panic = "abort"` lost its whole process to its sink's bug.)
    fn check_handed(
        &self,
        call: &'static str,
        tp: &TopicPartition,
        o: i64,
        limit: i64,
    ) -> Result<(), ConnectorError> {
        if o <= limit {
            return Ok(());
        }
        Err(ConnectorError::SinkOverclaimed {
            call,
            topic: tp.topic.clone(),
            partition: tp.partition,
            offset: o,
            handed: limit,
        })
    }

    fn assert_durable(&self, tp: &TopicPartition, o: i64) {
        let durable = self.durable_latest.get(tp).copied();
        assert!(
            durable.is_some_and(|d| o <= d),
            "BUG: would commit {tp}@{o} above the durable offset {durable:?}"
        );
    }

    /// Choose the next commit: safe offsets of `assigned` partitions (only
    /// `only`'s, if given) that move a partition forward. `None` when there
    /// is nothing to commit; the puts waiting on it are settled at once
    /// (their latency is the put's), unless `only` restricts the commit.
    pub fn take_commit(
        &mut self,
        assigned: &BTreeSet<TopicPartition>,
        only: Option<&BTreeSet<TopicPartition>>,
    ) -> Option<PendingCommit> {
        self.take_commit_of(
            |tp| assigned.contains(tp) && only.is_none_or(|only| only.contains(tp)),
            only.is_none(),
        )
    }

    /// [`Self::take_commit`] of the partitions `committable` names; `whole`
    /// unless the commit is restricted (a revoke's). Looks only at the
    /// partitions whose safe offset moved (`moved`), so it costs what
    /// moved, not what is assigned.
    pub fn take_commit_of(
        &mut self,
        committable: impl Fn(&TopicPartition) -> bool,
        whole: bool,
    ) -> Option<PendingCommit> {
        let (safe, committed) = (&self.safe, &self.committed);
        // Those Kafka holds (acknowledged since, or forgotten) are done.
        self.moved.retain(|tp| {
            safe.get(tp)
                .is_some_and(|&o| committed.get(tp).is_none_or(|&c| o > c))
        });
        let mut offsets = BTreeMap::new();
        for tp in &self.moved {
            if !committable(tp) {
                continue;
            }
            let o = self.safe[tp];
            self.assert_durable(tp, o);
            offsets.insert(tp.clone(), o);
        }
        // A revoke's commit covers only some partitions: the puts waiting
        // on a commit stay with the next full one.
        let puts = if whole {
            std::mem::take(&mut self.safe_puts)
        } else {
            Vec::new()
        };
        if offsets.is_empty() {
            self.settle(puts);
            return None;
        }
        let durable = offsets
            .keys()
            .map(|tp| (tp.clone(), self.durable_latest[tp]))
            .collect();
        Some(PendingCommit {
            offsets,
            durable,
            puts,
        })
    }

    /// Kafka acknowledged a commit. Partitions no longer `assigned` (revoked
    /// while it was in flight) are not recorded: they were forgotten. An
    /// error when the sink lowered its word below an offset of this commit
    /// while it was in flight (`still_safe` passed as it was handed over):
    /// Kafka now holds more than the sink, and the run must stop.
    pub fn commit_acked(
        &mut self,
        c: PendingCommit,
        assigned: &BTreeSet<TopicPartition>,
    ) -> Result<(), ConnectorError> {
        let mut lost = None;
        for (tp, &o) in &c.offsets {
            if assigned.contains(tp) {
                raise(&mut self.committed, tp, o);
                raise(&mut self.sent_here, tp, o);
                if let Some(&safe) = self.safe.get(tp).filter(|&&safe| safe < o) {
                    lost.get_or_insert_with(|| lost_committed(tp, safe, o));
                }
            }
        }
        self.settle(c.puts);
        lost.map_or(Ok(()), Err)
    }

    /// A commit of `offsets` was handed to librdkafka: from now on Kafka
    /// may hold them, whatever its answer, and the sink's word may not go
    /// below them.
    pub fn commit_sent(&mut self, offsets: &BTreeMap<TopicPartition, i64>) {
        for (tp, &o) in offsets {
            raise(&mut self.sent_here, tp, o);
        }
    }

    /// Whether every offset of a commit chosen earlier is still at or
    /// below the sink's latest safe word (a put or `pre_commit` since may
    /// have lowered it): checked again as the commit is handed over.
    pub fn still_safe(&self, offsets: &BTreeMap<TopicPartition, i64>) -> bool {
        offsets
            .iter()
            .all(|(tp, &o)| self.safe.get(tp).is_some_and(|&safe| o <= safe))
    }

    /// Whether no offset of a commit chosen earlier is below one this run
    /// has sent Kafka for its partition since then (`commit_sent`): a
    /// commit chosen before a higher one, and handed over after it, would
    /// move Kafka back (the committer preempted between its choice and its
    /// hand-over while the final commit, or another, went out; since
    /// 2026-12-06 a re-ask can raise a word between the two). Checked
    /// again as the commit is handed over.
    pub fn not_below_sent(&self, offsets: &BTreeMap<TopicPartition, i64>) -> bool {
        offsets
            .iter()
            .all(|(tp, &o)| self.sent_here.get(tp).is_none_or(|&sent| o >= sent))
    }

    /// A failed commit: its puts wait for the next one.
    pub fn commit_failed(&mut self, c: PendingCommit) {
        let mut puts = c.puts;
        puts.append(&mut self.safe_puts);
        self.safe_puts = puts;
        // Those covered by a later put's time stay: the oldest are kept.
        let room = PUTS_WAITING_TIMED_MAX.saturating_sub(self.unsafe_puts.len());
        if self.safe_puts.len() > room {
            self.puts_untimed += (self.safe_puts.len() - room) as u64;
            self.safe_puts.truncate(room);
        }
    }

    fn settle(&mut self, puts: Vec<Instant>) {
        let now = Instant::now();
        for t in puts {
            let _ = self
                .put_to_commit_us
                .record((now - t).as_micros().max(1) as u64);
        }
    }

    /// A revoked or lost partition: forget everything about it.
    pub fn forget(&mut self, tp: &TopicPartition) {
        self.durable_reported.remove(tp);
        self.durable_latest.remove(tp);
        self.safe.remove(tp);
        self.moved.remove(tp);
        self.committed.remove(tp);
        self.sent_here.remove(tp);
    }
}

fn lost_committed(tp: &TopicPartition, durable: i64, committed: i64) -> ConnectorError {
    ConnectorError::SinkLostCommitted {
        topic: tp.topic.clone(),
        partition: tp.partition,
        durable,
        committed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    #[test]
    fn declaring_more_than_was_handed_over_is_the_sinks_error() {
        let mut t = CommitTracker::default();
        let handed = BTreeMap::from([(tp(0), 5)]);
        t.record_put(Instant::now(), &BTreeMap::new(), &handed)
            .unwrap();
        let e = t
            .record_pre_commit(&BTreeMap::from([(tp(0), 6)]), &handed)
            .unwrap_err();
        assert!(
            matches!(e, ConnectorError::SinkOverclaimed { offset: 6, .. }),
            "{e}"
        );
        assert!(
            e.to_string().contains("pre_commit reported t/0 durable at offset 6, past the records handed to it (below 5)"),
            "{e}"
        );
    }

    /// A `pre_commit` whose one word is past what was handed fails before
    /// it takes any of its words: the valid one before it in the map is
    /// not committed while the run fails.
    #[test]
    fn a_call_with_one_word_past_what_was_handed_takes_none() {
        let mut t = CommitTracker::default();
        let handed = BTreeMap::from([(tp(0), 100), (tp(1), 50)]);
        t.record_put(Instant::now(), &BTreeMap::new(), &handed)
            .unwrap();
        let words = BTreeMap::from([(tp(0), 100), (tp(1), 60)]);
        assert!(matches!(
            t.record_pre_commit(&words, &handed),
            Err(ConnectorError::SinkOverclaimed { partition: 1, .. })
        ));
        let assigned = BTreeSet::from([tp(0), tp(1)]);
        assert!(t.take_commit(&assigned, None).is_none(), "a word was taken");
    }

    /// A partition the sink was never handed (revoked since, say) is not
    /// committed on its word, and is no reason to stop the run either.
    #[test]
    fn a_partition_never_handed_over_is_ignored() {
        let mut t = CommitTracker::default();
        let handed = BTreeMap::from([(tp(0), 5)]);
        t.record_put(Instant::now(), &BTreeMap::new(), &handed)
            .unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 5), (tp(1), 9)]), &handed)
            .unwrap();
        let assigned = BTreeSet::from([tp(0), tp(1)]);
        let c = t.take_commit(&assigned, None).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(tp(0), 5)]));
    }

    /// A sink that declares a lower offset safe than before (it lost
    /// records, or has a bug) has its higher one, not committed yet (a
    /// commit of it dropped before it was handed over, as stale), kept from
    /// Kafka: the commit follows its latest word. Below what this run
    /// committed, the run stops (`SinkLostCommitted`); a commit that was
    /// handed over and failed counts as committed (the test below).
    #[test]
    fn a_lowered_safe_offset_is_not_committed_above_the_sinks_latest_word() {
        let mut t = CommitTracker::default();
        let assigned = BTreeSet::from([tp(0)]);
        let handed = BTreeMap::from([(tp(0), 500)]);
        t.record_put(Instant::now(), &BTreeMap::new(), &handed)
            .unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 400)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        t.commit_acked(c, &assigned).unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 500)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(tp(0), 500)]));
        t.commit_failed(c);
        t.record_pre_commit(&BTreeMap::from([(tp(0), 450)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(tp(0), 450)]), "not the 500");
        // It carries the word it was chosen against, not the highest.
        assert_eq!(c.durable, BTreeMap::from([(tp(0), 450)]), "not the 500");
        t.commit_acked(c, &assigned).unwrap();
        // Below what this run committed: Kafka counts records 300..450 as
        // archived, and the sink no longer holds them.
        let e = t
            .record_pre_commit(&BTreeMap::from([(tp(0), 300)]), &handed)
            .unwrap_err();
        assert!(
            matches!(
                e,
                ConnectorError::SinkLostCommitted {
                    durable: 300,
                    committed: 450,
                    ..
                }
            ),
            "{e}"
        );
        // The lower word is taken all the same: nothing above it goes out
        // before the run stops.
        assert!(t.take_commit(&assigned, None).is_none());
        // A put's word is held to the same.
        let e = t
            .record_put(Instant::now(), &BTreeMap::from([(tp(0), 449)]), &handed)
            .unwrap_err();
        assert!(matches!(
            e,
            ConnectorError::SinkLostCommitted { durable: 449, .. }
        ));
        // At what was committed, and after a revoke (what Kafka holds then
        // may be another member's), the word is taken.
        t.record_pre_commit(&BTreeMap::from([(tp(0), 450)]), &handed)
            .unwrap();
        t.forget(&tp(0));
        t.record_put(Instant::now(), &BTreeMap::from([(tp(0), 300)]), &handed)
            .unwrap();
    }

    /// A commit whose answer was an error may still have been applied (one
    /// partition refused fails the whole commit, though the broker took the
    /// others; a timeout may come after the broker wrote it): a sink's word
    /// below it stops the run as one below an acknowledged commit does.
    #[test]
    fn a_word_below_a_commit_sent_stops_the_run_whatever_its_answer() {
        let mut t = CommitTracker::default();
        let assigned = BTreeSet::from([tp(0), tp(1)]);
        let handed = BTreeMap::from([(tp(0), 500), (tp(1), 500)]);
        t.record_put(Instant::now(), &BTreeMap::new(), &handed)
            .unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 200), (tp(1), 200)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        t.commit_sent(&c.offsets);
        t.commit_acked(c, &assigned).unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 400), (tp(1), 400)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        t.commit_sent(&c.offsets);
        t.commit_failed(c);
        // Between what was acknowledged (200) and what was sent (400).
        let e = t
            .record_put(Instant::now(), &BTreeMap::from([(tp(1), 300)]), &handed)
            .unwrap_err();
        assert!(
            matches!(
                e,
                ConnectorError::SinkLostCommitted {
                    partition: 1,
                    durable: 300,
                    committed: 400,
                    ..
                }
            ),
            "{e}"
        );
        // A commit chosen but dropped before it was handed over does not count.
        let mut t = CommitTracker::default();
        t.record_put(Instant::now(), &BTreeMap::new(), &handed)
            .unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 400)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        t.commit_failed(c);
        t.record_pre_commit(&BTreeMap::from([(tp(0), 300)]), &handed)
            .unwrap();
    }

    /// Kafka's committed offset at an assignment may be another member's:
    /// a sink whose word is below it has lost nothing of this run's.
    #[test]
    fn only_this_runs_own_commits_bound_the_sinks_word() {
        let mut t = CommitTracker::default();
        let handed = BTreeMap::from([(tp(0), 500)]);
        t.record_open(&[tp(0)], &BTreeMap::new(), &BTreeMap::from([(tp(0), 450)]));
        t.record_put(Instant::now(), &BTreeMap::new(), &handed)
            .unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 300)]), &handed)
            .unwrap();
    }

    /// A lower word that stops the run also keeps a commit chosen before
    /// it from going out (the committer checks `still_safe` as it hands a
    /// commit over, and may get the lock before the run is failed).
    #[test]
    fn a_word_below_a_commit_stops_the_run_and_stales_a_chosen_commit() {
        let mut t = CommitTracker::default();
        let assigned = BTreeSet::from([tp(0), tp(1)]);
        let handed = BTreeMap::from([(tp(0), 600), (tp(1), 600)]);
        t.record_put(Instant::now(), &BTreeMap::new(), &handed)
            .unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 500), (tp(1), 500)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        t.commit_acked(c, &assigned).unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 600), (tp(1), 600)]), &handed)
            .unwrap();
        let chosen = t.take_commit(&assigned, None).unwrap();
        // Both partitions' words are taken, the second after the error.
        let e = t
            .record_put(
                Instant::now(),
                &BTreeMap::from([(tp(0), 450), (tp(1), 550)]),
                &handed,
            )
            .unwrap_err();
        assert!(matches!(
            e,
            ConnectorError::SinkLostCommitted { durable: 450, .. }
        ));
        assert!(!t.still_safe(&BTreeMap::from([(tp(0), 600)])));
        assert!(!t.still_safe(&BTreeMap::from([(tp(1), 600)])));
        assert!(!t.still_safe(&chosen.offsets));
    }

    /// A sink that lowers its word while a commit above it is in flight
    /// (it passed `still_safe` as it was handed over) has its ack refused:
    /// Kafka now holds more than the sink, and the run stops.
    #[test]
    fn a_word_lowered_under_a_commit_in_flight_fails_its_ack() {
        let mut t = CommitTracker::default();
        let assigned = BTreeSet::from([tp(0)]);
        let handed = BTreeMap::from([(tp(0), 500)]);
        t.record_put(Instant::now(), &BTreeMap::new(), &handed)
            .unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 500)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        assert!(t.still_safe(&c.offsets));
        t.record_put(Instant::now(), &BTreeMap::from([(tp(0), 300)]), &handed)
            .unwrap();
        let e = t.commit_acked(c, &assigned).unwrap_err();
        assert!(matches!(
            e,
            ConnectorError::SinkLostCommitted {
                durable: 300,
                committed: 500,
                ..
            }
        ));
        // One acked after its partition was revoked checks nothing.
        let mut t = CommitTracker::default();
        t.record_put(Instant::now(), &BTreeMap::new(), &handed)
            .unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 500)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        t.record_put(Instant::now(), &BTreeMap::from([(tp(0), 300)]), &handed)
            .unwrap();
        t.commit_acked(c, &BTreeSet::new()).unwrap();
    }

    /// A put that reports a partition assigned with neither a put nor a
    /// resume offset (an `open` whose offset the log did not confirm) is
    /// ignored, not a reason to stop the run (until the night of
    /// 2026-12-03 the handed-over check panicked); and a put that reports
    /// less durable than was declared safe lowers what may be committed,
    /// a commit chosen before included.
    #[test]
    fn a_put_speaks_for_what_it_was_handed_and_its_lower_word_holds() {
        let mut t = CommitTracker::default();
        let assigned = BTreeSet::from([tp(0), tp(1)]);
        let handed = BTreeMap::from([(tp(0), 500)]);
        t.record_put(
            Instant::now(),
            &BTreeMap::from([(tp(0), 500), (tp(1), 40)]),
            &handed,
        )
        .unwrap();
        // tp(1)'s word is ignored: nothing of it was handed over.
        assert!(!t.durable_reported.contains_key(&tp(1)));
        t.record_pre_commit(&BTreeMap::from([(tp(0), 500)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(tp(0), 500)]));
        // The sink lost records: 300 is its latest word.
        t.record_put(Instant::now(), &BTreeMap::from([(tp(0), 300)]), &handed)
            .unwrap();
        assert!(!t.still_safe(&c.offsets), "the chosen commit is above it");
        t.commit_failed(c);
        assert_eq!(
            t.take_commit(&assigned, None).map(|c| c.offsets),
            Some(BTreeMap::from([(tp(0), 300)]))
        );
    }

    #[test]
    fn a_put_reporting_more_than_was_handed_over_is_the_sinks_error() {
        let mut t = CommitTracker::default();
        let handed = BTreeMap::from([(tp(0), 5)]);
        let e = t
            .record_put(Instant::now(), &BTreeMap::from([(tp(0), 7)]), &handed)
            .unwrap_err();
        assert!(
            matches!(
                e,
                ConnectorError::SinkOverclaimed {
                    call: "put",
                    offset: 7,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    #[should_panic(expected = "above the durable offset")]
    fn committing_above_what_was_reported_durable_panics() {
        let mut t = CommitTracker::default();
        t.set_safe(&tp(0), 3);
        t.take_commit(&BTreeSet::from([tp(0)]), None);
    }

    #[test]
    fn only_safe_assigned_offsets_that_move_forward_are_committed() {
        let mut t = CommitTracker::default();
        let assigned = BTreeSet::from([tp(0), tp(1)]);
        let handed = BTreeMap::from([(tp(0), 9), (tp(1), 7)]);
        t.record_put(
            Instant::now(),
            &BTreeMap::from([(tp(0), 5), (tp(1), 7)]),
            &handed,
        )
        .unwrap();
        // Durable but not yet declared safe: nothing to commit.
        assert!(t.take_commit(&assigned, None).is_none());
        t.record_put(Instant::now(), &BTreeMap::from([(tp(0), 9)]), &handed)
            .unwrap();
        // A buffering sink may declare less than what is durable.
        t.record_pre_commit(&BTreeMap::from([(tp(0), 8), (tp(1), 7)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(tp(0), 8), (tp(1), 7)]));
        t.commit_acked(c, &assigned).unwrap();
        assert_eq!(t.put_to_commit_us.len(), 2, "both puts settled");
        assert!(t.take_commit(&assigned, None).is_none());
        // A revoked partition is never committed again.
        t.record_pre_commit(&BTreeMap::from([(tp(0), 9)]), &handed)
            .unwrap();
        assert!(t.take_commit(&BTreeSet::from([tp(1)]), None).is_none());
    }

    /// A commit looks only at partitions whose safe offset moved: one is
    /// offered until Kafka is known to hold it (a commit dropped for a
    /// revoke in flight, or failed, offers it again), and one whose safe
    /// offset Kafka held already is offered again once it moves past.
    #[test]
    fn a_moved_partition_is_offered_until_kafka_is_known_to_hold_it() {
        let mut t = CommitTracker::default();
        let assigned = BTreeSet::from([tp(0), tp(1)]);
        let offers = |t: &mut CommitTracker| t.take_commit(&assigned, None);
        // tp(1) resumed at 2, Kafka holding 4 (another store's commit).
        t.record_open(
            &[tp(0), tp(1)],
            &BTreeMap::from([(tp(0), 5), (tp(1), 2)]),
            &BTreeMap::from([(tp(1), 4)]),
        );
        let c = offers(&mut t).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(tp(0), 5)]));
        // Acknowledged after a revoke began: nothing recorded.
        t.commit_acked(c, &BTreeSet::new()).unwrap();
        let c = offers(&mut t).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(tp(0), 5)]), "offered again");
        t.commit_failed(c);
        let c = offers(&mut t).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(tp(0), 5)]), "offered again");
        t.commit_acked(c, &assigned).unwrap();
        assert!(offers(&mut t).is_none());
        // Past what Kafka held: offered.
        t.record_pre_commit(&BTreeMap::from([(tp(1), 6)]), &BTreeMap::from([(tp(1), 6)]))
            .unwrap();
        let c = offers(&mut t).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(tp(1), 6)]));
        // Not offered to a commit of others only, nor lost by it.
        let only = BTreeSet::from([tp(0)]);
        assert!(t.take_commit(&assigned, Some(&only)).is_none());
        assert_eq!(
            offers(&mut t).map(|c| c.offsets),
            Some(BTreeMap::from([(tp(1), 6)]))
        );
    }

    /// A commit chosen before a higher one was sent is no longer sendable
    /// (it would move Kafka back); the next one chosen is.
    #[test]
    fn a_commit_below_one_sent_since_it_was_chosen_is_not_sendable() {
        let mut t = CommitTracker::default();
        let assigned = BTreeSet::from([tp(0)]);
        let handed = BTreeMap::from([(tp(0), 150)]);
        t.record_pre_commit(&BTreeMap::from([(tp(0), 100)]), &handed)
            .unwrap();
        let early = t.take_commit(&assigned, None).unwrap();
        assert!(t.not_below_sent(&early.offsets), "nothing sent yet");
        t.record_pre_commit(&BTreeMap::from([(tp(0), 150)]), &handed)
            .unwrap();
        let late = t.take_commit(&assigned, None).unwrap();
        assert_eq!(late.offsets, BTreeMap::from([(tp(0), 150)]));
        t.commit_sent(&late.offsets);
        assert!(!t.not_below_sent(&early.offsets), "would move Kafka back");
        assert!(t.not_below_sent(&late.offsets), "the same again may go");
        t.commit_failed(early);
        let next = t.take_commit(&assigned, None).unwrap();
        assert!(t.not_below_sent(&next.offsets));
    }

    #[test]
    fn failed_commits_keep_their_puts_for_the_next_one() {
        let mut t = CommitTracker::default();
        let assigned = BTreeSet::from([tp(0)]);
        let handed = BTreeMap::from([(tp(0), 5)]);
        t.record_put(Instant::now(), &BTreeMap::new(), &handed)
            .unwrap();
        // The sink made it durable in pre_commit (a put that only buffers).
        t.record_pre_commit(&BTreeMap::from([(tp(0), 5)]), &handed)
            .unwrap();
        let c = t.take_commit(&assigned, None).unwrap();
        t.commit_failed(c);
        assert_eq!(t.put_to_commit_us.len(), 0);
        let c = t.take_commit(&assigned, None).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(tp(0), 5)]));
        t.commit_acked(c, &assigned).unwrap();
        assert_eq!(t.put_to_commit_us.len(), 1);
    }

    /// Commits that keep failing do not make the tracker keep a time per
    /// put without bound.
    #[test]
    fn put_times_waiting_for_a_commit_are_bounded() {
        let mut t = CommitTracker::default();
        let assigned = BTreeSet::from([tp(0)]);
        let extra = 10u64;
        for i in 0..PUTS_WAITING_TIMED_MAX as i64 + extra as i64 {
            let handed = BTreeMap::from([(tp(0), i + 1)]);
            t.record_put(Instant::now(), &BTreeMap::new(), &handed)
                .unwrap();
            t.record_pre_commit(&BTreeMap::from([(tp(0), i + 1)]), &handed)
                .unwrap();
            if i % 1000 == 0 {
                let c = t.take_commit(&assigned, None).unwrap();
                t.commit_failed(c);
            }
        }
        assert!(t.unsafe_puts.len() + t.safe_puts.len() <= PUTS_WAITING_TIMED_MAX);
        assert_eq!(t.puts_untimed, extra);
        let c = t.take_commit(&assigned, None).unwrap();
        t.commit_acked(c, &assigned).unwrap();
        assert_eq!(t.put_to_commit_us.len(), PUTS_WAITING_TIMED_MAX as u64);
        assert_eq!(
            t.committed[&tp(0)],
            PUTS_WAITING_TIMED_MAX as i64 + extra as i64
        );
    }

    #[test]
    fn resumed_partitions_commit_their_durable_offset_but_never_backwards() {
        let mut t = CommitTracker::default();
        let (done, behind) = (tp(0), tp(1));
        let assigned = BTreeSet::from([done.clone(), behind.clone()]);
        t.record_open(
            &[done.clone(), behind.clone()],
            &BTreeMap::from([(done.clone(), 100), (behind.clone(), 40)]),
            &BTreeMap::from([(done.clone(), 90), (behind.clone(), 60)]),
        );
        // Fully archived: no put comes, but 100 is durable and is committed.
        // Another instance committed 60; this store's 40 must not move it back.
        let c = t.take_commit(&assigned, None).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(done, 100)]));
    }

    /// An offset `open` reports for a partition it is not opening (here
    /// one already assigned, with records handed up to 500) is ignored:
    /// taken, it would be committed past what the sink holds.
    #[test]
    fn open_reporting_another_partition_is_ignored() {
        let mut t = CommitTracker::default();
        let handed = BTreeMap::from([(tp(0), 500)]);
        t.record_put(Instant::now(), &BTreeMap::from([(tp(0), 500)]), &handed)
            .unwrap();
        t.record_pre_commit(&BTreeMap::from([(tp(0), 500)]), &handed)
            .unwrap();
        let ignored = t.record_open(
            &[tp(1)],
            &BTreeMap::from([(tp(0), 999), (tp(1), 10), (tp(2), 7)]),
            &BTreeMap::new(),
        );
        assert_eq!(ignored, vec![(tp(0), 999), (tp(2), 7)]);
        let assigned = BTreeSet::from([tp(0), tp(1), tp(2)]);
        let c = t.take_commit(&assigned, None).unwrap();
        assert_eq!(c.offsets, BTreeMap::from([(tp(0), 500), (tp(1), 10)]));
    }
}
