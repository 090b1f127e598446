//! State shared by the loop's three stages, and the commit itself.
//!
//! The loop runs as three stages so that polling, writing and committing
//! overlap instead of taking turns:
//!
//! 1. the **consumer thread** polls rdkafka, buffers records, and serves
//!    rebalance callbacks (`consumer.rs`, `rebalance.rs`);
//! 2. the **task thread** owns the [`SinkTask`](crate::task::SinkTask) and
//!    runs `open`, `start`, `put`, `caught_up`, `pre_commit`, `close` and
//!    `stop`, one job at a time, in the order the consumer thread hands them
//!    over (`worker.rs`; `identity`, `durable_check` and the `stop` of a run
//!    stopped before it joined run on the thread that started the run);
//! 3. the **committer**, a tokio task, commits what `pre_commit` declared
//!    safe whenever the task thread wakes it (`committer.rs`). Its commit is
//!    in flight while the next put writes.
//!
//! # Invariants
//! - Offsets reach Kafka only through [`Pipeline::commit_now`], which takes
//!   them from the [`CommitTracker`]: never above what the sink reported
//!   durable (`open`, `start`, `put` or `pre_commit`).
//! - A revoke first marks its partitions `revoking`: from then on only the
//!   revoke's own synchronous commit carries them. It never waits for a
//!   commit in flight (a commit sent while the group re-joins can be held by
//!   the broker for seconds, and a revoke that late finds the group
//!   rebalancing and cannot commit at all). A commit the committer chose
//!   before the revoke began is dropped if the revoke has begun by the time
//!   it would be handed to librdkafka, also if it has ended and the
//!   partitions were assigned again meanwhile (revokes are counted); the
//!   check and the hand-over are made under the lock a revoke takes to
//!   begin (`handover.rs`), so one handed over is queued before the
//!   revoke's, and librdkafka serves a client's commits in order (before
//!   2026-12-03 the hand-over came after the lock was let go: a commit
//!   preempted there past a whole rebalance was sent under the new
//!   generation, and accepted). Two windows remain, both librdkafka's: its
//!   own retry of a commit that timed out or met a moving coordinator, and
//!   a commit it parked while the coordinator was not connected, which it
//!   sends again only after a revoke's commit served meanwhile (its
//!   `rkcg_wait_coord_q`). Either can land after the revoke's, and moves
//!   Kafka's offset back, never
//!   above what is durable: the next owner archives the records between
//!   again (duplicates across stores, each store still exactly once;
//!   DURABILITY.md), the same outcome as a revoke whose commit fails.
//!   The run's final commit counts as a revoke of everything here (since
//!   2026-12-02), so the committer's commits chosen before it are dropped
//!   the same way.
//! - An acknowledgement is recorded (`committed`, which decides whether a
//!   partition is committed again) only if no revoke began while its commit
//!   was in flight: one that did may have handed the partition to another
//!   member and back, so what Kafka holds is not known; the partition is
//!   then committed again (since 2026-12-02; before, an idle partition could
//!   stay behind in Kafka after such a round trip).
//! - Nothing is handed to librdkafka while it marks the assignment lost
//!   (since 2026-12-05). When the member left the group, another member
//!   may own the partitions and the member id is reset. Under the
//!   cooperative protocol a subscribed topic that went away marks the
//!   whole assignment lost while only its partitions are revoked: commits
//!   of the partitions still owned are then held back until that revoke is
//!   served (at worst one counted failure, and the next owner archives the
//!   records since the last commit again). Left: a commit already in
//!   librdkafka's hands at the loss, and a loss during a rebalance, which
//!   librdkafka does not mark.
//! - Once `commits_closed` is set (a fatal error, a simulated crash, the end
//!   of the run) no further commit is chosen, and one chosen before is
//!   dropped if it was closed by the time it is handed to librdkafka (the
//!   check and the hand-over under one lock). One handed over before the
//!   closing is still sent: its offsets were durable when chosen.
//! - From its hand-over, a commit's offsets bound the sink's word
//!   (`commit_sent`), whatever Kafka answers: librdkafka fails a whole
//!   commit for one partition's error though the broker took the others,
//!   and a commit that timed out may have been applied. A put or
//!   `pre_commit` that goes below one fails the run (`SinkLostCommitted`)
//!   until a revoke forgets the partition (since the night of 2026-12-04;
//!   before, only acknowledged offsets counted, and a word lowered while a
//!   revoke was under way went unchecked). An ack checks again, except
//!   for a commit a revoke began under (`commit_acked` with no partition):
//!   the word it would check was already checked against the hand-over.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cairn_engine::TopicPartition;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::commit::CommitTracker;
use crate::consumer::{CommitObserver, DonePredicate, RunStats};
use crate::error::ConnectorError;
use crate::handed::Handed;
use crate::rebalance::SinkContext;

/// What the stages share, behind one short-held lock.
pub(crate) struct CommitState {
    pub tracker: CommitTracker,
    /// Partitions this member owns; only these are committed.
    pub assigned: BTreeSet<TopicPartition>,
    /// Assigned partitions being revoked: the committer leaves them alone.
    pub revoking: BTreeSet<TopicPartition>,
    /// Revokes (and losses) begun so far: a commit chosen before one began
    /// is dropped, even if its partitions are assigned again by the time
    /// it would be sent (a whole revoke and re-assignment while the
    /// committer was descheduled would pass a look at `revoking` alone).
    pub revokes_begun: u64,
    /// Next offset after what was put (or where it resumed), per
    /// partition, and which the sink has not declared safe (handed.rs).
    pub consumed: Handed,
    pub fatal: Option<ConnectorError>,
    pub commits_closed: bool,
    /// Counters of the task thread and the committer.
    pub stats: RunStats,
    pub on_commit: Option<CommitObserver>,
    /// [`crate::PipelineOptions::on_commit_sent`].
    pub on_commit_sent: Option<CommitObserver>,
    pub done: Option<DonePredicate>,
    /// Commits that failed in a row, for the log.
    pub failed_commits: FailedCommits,
}

/// How often a run of failed commits is said again at WARN.
const FAILED_COMMITS_WARN_INTERVAL: Duration = Duration::from_secs(10);

/// Commits that failed in a row: the first is said at WARN, the rest
/// counted and said with their count every
/// [`FAILED_COMMITS_WARN_INTERVAL`], and the first commit that succeeds
/// after them says at INFO how many failed and for how long. A rebalance
/// refuses every commit until it ends, and a run commits after each put:
/// one WARN per failure wrote 3,931 lines in 3 s (until 2026-12-07; found
/// by an audit of rebalances).
#[derive(Debug, Default)]
pub(crate) struct FailedCommits(Option<FailedStreak>);

#[derive(Debug)]
struct FailedStreak {
    since: Instant,
    failures: u64,
    said_at: Instant,
}

/// What to say of a failed commit.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FailedSaid {
    /// The first of a streak.
    First,
    /// Still failing: `failures` in a row over `for_`.
    Still { failures: u64, for_: Duration },
}

impl FailedCommits {
    /// A commit failed at `now`: what to say at WARN, if anything.
    pub(crate) fn failed(&mut self, now: Instant) -> Option<FailedSaid> {
        match &mut self.0 {
            None => {
                self.0 = Some(FailedStreak {
                    since: now,
                    failures: 1,
                    said_at: now,
                });
                Some(FailedSaid::First)
            }
            Some(streak) => {
                streak.failures += 1;
                if now.saturating_duration_since(streak.said_at) < FAILED_COMMITS_WARN_INTERVAL {
                    return None;
                }
                streak.said_at = now;
                Some(FailedSaid::Still {
                    failures: streak.failures,
                    for_: now.saturating_duration_since(streak.since),
                })
            }
        }
    }

    /// A commit succeeded at `now`: the streak of failures it ends, if
    /// any, as their count and how long since the first.
    pub(crate) fn succeeded(&mut self, now: Instant) -> Option<(u64, Duration)> {
        self.0
            .take()
            .map(|streak| (streak.failures, now.saturating_duration_since(streak.since)))
    }
}

/// How a [`Pipeline::commit_now`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitOutcome {
    /// Kafka acknowledged it, or (for the committer) it was dropped for a
    /// revoke that commits those partitions itself.
    Done,
    /// Nothing to commit: Kafka holds offsets at or past what is durable
    /// here, or none is known (told apart from `Done` since 2026-12-05, so
    /// that a revoke does not say it committed what it did not).
    Nothing,
    /// Commits are closed (a fatal error, the end of the run): nothing was
    /// sent.
    Closed,
    /// Kafka refused it or did not answer: left for the next commit.
    Failed,
    /// Not sent: the sink reported less durable since its offsets were
    /// chosen. Take them again (the committer is woken for it; a revoke's
    /// or the final commit retakes at once).
    Stale,
}

impl CommitState {
    /// Whether a commit of `partitions`, chosen when `revokes_begun` revokes
    /// had begun, may have been overtaken by a revoke: one began since, or
    /// one of them is being revoked or is no longer assigned.
    fn revoked_since<'a>(
        &self,
        revokes_begun: u64,
        mut partitions: impl Iterator<Item = &'a TopicPartition>,
    ) -> bool {
        self.revokes_begun != revokes_begun
            || partitions.any(|tp| self.revoking.contains(tp) || !self.assigned.contains(tp))
    }
}

pub(crate) struct Pipeline {
    state: Mutex<CommitState>,
    /// Wakes the committer: there are offsets to commit, or it should stop.
    pub wake: tokio::sync::Notify,
    pub committer_stop: AtomicBool,
    /// A fatal error is waiting in `state.fatal`.
    pub failed: AtomicBool,
    /// The done predicate said the run is complete.
    pub finished: AtomicBool,
    /// The sink's identity ([`crate::SinkTask::identity`]): committed as
    /// every offset's metadata, and compared with it at an assignment.
    pub identity: Option<String>,
    /// The sink's own word on what is durable now
    /// ([`crate::SinkTask::durable_check`]), asked as each commit is sent.
    pub durable_check: Option<crate::task::DurableCheck>,
    /// Written records' buffers, on their way back to the consumer thread
    /// (`recycle.rs`).
    pub recycler: crate::recycle::Recycler,
}

impl Pipeline {
    pub fn new(
        on_commit: Option<CommitObserver>,
        on_commit_sent: Option<CommitObserver>,
        done: Option<DonePredicate>,
        identity: Option<String>,
        durable_check: Option<crate::task::DurableCheck>,
    ) -> Self {
        Pipeline {
            state: Mutex::new(CommitState {
                tracker: CommitTracker::default(),
                assigned: BTreeSet::new(),
                revoking: BTreeSet::new(),
                revokes_begun: 0,
                consumed: Handed::default(),
                fatal: None,
                commits_closed: false,
                stats: RunStats::default(),
                on_commit,
                on_commit_sent,
                done,
                failed_commits: FailedCommits::default(),
            }),
            wake: tokio::sync::Notify::new(),
            committer_stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            recycler: Default::default(),
            identity,
            durable_check,
        }
    }

    pub fn state(&self) -> MutexGuard<'_, CommitState> {
        // A panic while holding the lock is an invariant assertion; the
        // state it guarded is still what the loop needs to shut down.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record a fatal error (the first one wins) and close commits.
    pub fn fail(&self, e: ConnectorError) {
        let mut s = self.state();
        s.commits_closed = true;
        s.fatal.get_or_insert(e);
        self.failed.store(true, Ordering::Release);
    }

    pub fn take_fatal(&self) -> Option<ConnectorError> {
        self.state().fatal.take()
    }

    /// No further commit may be sent.
    pub fn close_commits(&self) {
        self.state().commits_closed = true;
    }

    /// A revoke begins: only the revoke's own commit carries these now.
    pub fn begin_revoke(&self, tps: &BTreeSet<TopicPartition>) {
        let mut s = self.state();
        s.revoking.extend(tps.iter().cloned());
        s.revokes_begun += 1;
    }

    /// The run's final commit follows (after its final flush): a commit the
    /// committer chose before is dropped, as one chosen before a revoke is,
    /// so that it cannot reach Kafka after the final one and move it back.
    pub fn begin_final_commit(&self) {
        self.state().revokes_begun += 1;
    }

    /// Forget partitions that were revoked or lost.
    pub fn drop_partitions(&self, tps: &[TopicPartition]) {
        let mut s = self.state();
        s.revokes_begun += 1;
        for tp in tps {
            s.assigned.remove(tp);
            s.revoking.remove(tp);
            s.consumed.remove(tp);
            s.tracker.forget(tp);
        }
    }

    /// Ask the `done` predicate about what Kafka holds now.
    fn check_done(&self, s: &mut CommitState) {
        if let Some(d) = s.done.as_mut() {
            if d(&s.tracker.committed) {
                self.finished.store(true, Ordering::Release);
            }
        }
    }

    /// Commit what `pre_commit` declared safe, synchronously: of all assigned
    /// partitions, or only of `only`'s. A failed commit is logged and left
    /// for the next one; it never stalls durability. `Failed` makes the
    /// committer retry after a backoff.
    pub fn commit_now(
        &self,
        consumer: &BaseConsumer<SinkContext>,
        only: Option<&BTreeSet<TopicPartition>>,
    ) -> CommitOutcome {
        let (pending, revokes_begun) = {
            let mut guard = self.state();
            let s = &mut *guard;
            if s.commits_closed {
                return CommitOutcome::Closed;
            }
            // The committer (`only` = None) leaves partitions being revoked
            // to the revoke's own commit. (No set of them is built: at
            // 10,000 partitions a copy of `assigned` per commit cost a put
            // of one record more than the commit's own work.)
            let (assigned, revoking) = (&s.assigned, &s.revoking);
            let committable = |tp: &TopicPartition| {
                assigned.contains(tp)
                    && match only {
                        Some(only) => only.contains(tp),
                        None => !revoking.contains(tp),
                    }
            };
            match s.tracker.take_commit_of(committable, only.is_none()) {
                Some(p) => (p, s.revokes_begun),
                None => {
                    // Kafka may already hold everything (a run that resumes
                    // fully archived and committed): nothing will be
                    // committed, so ask here.
                    self.check_done(s);
                    return CommitOutcome::Nothing;
                }
            }
        };
        let mut tpl = TopicPartitionList::new();
        for (tp, o) in &pending.offsets {
            let mut e = tpl.add_partition(&tp.topic, tp.partition);
            if let Some(id) = &self.identity {
                e.set_metadata(id);
            }
            if let Err(e) = e.set_offset(Offset::Offset(*o)) {
                self.fail(ConnectorError::Kafka {
                    op: "build commit list",
                    source: e,
                });
                return CommitOutcome::Closed;
            }
        }
        let (t0, handed) = {
            let mut s = self.state();
            // Closed since these offsets were chosen (a failed fsync, a
            // crash, the end of the run): nothing more is committed, not
            // even offsets that were durable.
            if s.commits_closed {
                s.tracker.commit_failed(pending);
                return CommitOutcome::Closed;
            }
            // librdkafka has marked the assignment lost (the member left
            // the group: `max.poll.interval.ms` passed while a put or its
            // fsync held the consumer thread, or the session timed out; or,
            // under the cooperative protocol, a subscribed topic went away)
            // and the consumer thread has not served the loss yet: another
            // member may own these partitions now, and librdkafka has
            // reset the member id, so the commit is refused at best (a
            // static member's is fenced, which librdkafka takes as fatal).
            // Not sent (until 2026-12-05 it was; found in review): the loss
            // is served as any, and what is durable is committed once the
            // partitions come back. A loss librdkafka leaves unmarked
            // (one while a rebalance is in progress) is not caught here.
            if consumer.assignment_lost() {
                s.tracker.commit_failed(pending);
                tracing::debug!("commit not sent: librdkafka lost the assignment");
                return CommitOutcome::Failed;
            }
            // A revoke that began since these offsets were chosen commits
            // its partitions itself; this commit, sent after it, would move
            // them back. Checked again, and the commit handed to librdkafka
            // (which serves a client's commits in order), under the lock a
            // revoke takes to begin: the window left is in the invariants
            // above.
            if only.is_none() && s.revoked_since(revokes_begun, pending.offsets.keys()) {
                s.tracker.commit_failed(pending);
                tracing::debug!("commit dropped: a revoke began since it was chosen");
                // The other partitions of this commit go with the next one,
                // now rather than at the next put (an idle partition may
                // have none); it leaves the revoking partitions out.
                self.wake.notify_one();
                return CommitOutcome::Done;
            }
            // The sink lowered its word since these offsets were chosen
            // (a put or `pre_commit` reporting less durable): nothing above
            // it is committed; the next commit takes what it says now.
            if !s.tracker.still_safe(&pending.offsets) {
                s.tracker.commit_failed(pending);
                tracing::debug!(
                    "commit dropped: the sink reported less durable since it was chosen"
                );
                self.wake.notify_one();
                return CommitOutcome::Stale;
            }
            // A higher commit of one of its partitions went out since these
            // offsets were chosen (this committer preempted between its
            // choice and here, while the final commit or a revoke's was
            // sent): sent after it, this one would move Kafka back. (Found
            // in review, 2026-12-06: a re-ask raising a word between the
            // final flush and the final commit opened the window.)
            if !s.tracker.not_below_sent(&pending.offsets) {
                s.tracker.commit_failed(pending);
                tracing::debug!("commit dropped: a higher one was sent since it was chosen");
                self.wake.notify_one();
                return CommitOutcome::Stale;
            }
            // Committed <= durable, against the store's own word: a commit
            // above it is a bug, and is not sent (module invariants). So
            // is one of a partition the store holds nothing of, which has
            // nothing durable to commit (until the last review of
            // 2026-12-05 such a commit passed the check).
            // A store that takes no more commits (poisoned) refuses with
            // its reason, which is no bug of the loop's.
            let above = self.durable_check.as_ref().and_then(|durable| {
                pending
                    .offsets
                    .iter()
                    .find_map(|(tp, &o)| match durable(tp) {
                        Ok(Some(d)) if o <= d => None,
                        d => Some((tp.clone(), o, d)),
                    })
            });
            if let Some((tp, o, d)) = above {
                s.tracker.commit_failed(pending);
                s.commits_closed = true;
                let why = match d {
                    Err(why) => format!(
                        "a commit of {tp}@{o} was not sent: the store takes no more commits: {why}; nothing more is committed"
                    ),
                    Ok(d) => {
                        let held = d.map_or_else(
                            || "the store holds nothing of it".to_owned(),
                            |d| format!("it would pass what the store holds durable ({d})"),
                        );
                        format!(
                            "BUG: a commit of {tp}@{o} was about to be sent, but {held}: not sent; nothing more is committed"
                        )
                    }
                };
                s.fatal.get_or_insert(ConnectorError::Failed(why));
                self.failed.store(true, Ordering::Release);
                return CommitOutcome::Closed;
            }
            if let Some(f) = s.on_commit_sent.as_mut() {
                f(&pending.offsets, &pending.durable);
            }
            // Queued only (no I/O): the answer is waited for below.
            let t0 = Instant::now();
            let handed = crate::handover::hand_over(consumer, &tpl);
            if handed.is_ok() {
                // Kafka may hold these from now on, whatever its answer.
                s.tracker.commit_sent(&pending.offsets);
            }
            (t0, handed)
        };
        let span = tracing::debug_span!(
            "commit",
            partitions = pending.offsets.len(),
            commit_us = tracing::field::Empty
        );
        let result = span.in_scope(|| handed.and_then(crate::handover::Handover::wait));
        span.record("commit_us", t0.elapsed().as_micros() as u64);
        let mut guard = self.state();
        let s = &mut *guard;
        match result {
            Ok(()) => {
                tracing::debug!(
                    partitions = pending.offsets.len(),
                    commit_us = t0.elapsed().as_micros() as u64,
                    offsets = %CommittedOffsets(&pending.offsets),
                    "commit"
                );
                if let Some(f) = s.on_commit.as_mut() {
                    f(&pending.offsets, &pending.durable);
                }
                // A revoke that began while this commit was in flight may
                // have handed its partitions to another member and back:
                // what Kafka holds for them now is not known to be this
                // commit's offsets, and recording them as committed would
                // keep an idle partition from being committed again. So
                // nothing is recorded, and the next commit sends them again.
                // (A revoke's own commit is of partitions being revoked,
                // forgotten once it ends.)
                let acked =
                    if only.is_none() && s.revoked_since(revokes_begun, pending.offsets.keys()) {
                        self.wake.notify_one();
                        s.tracker.commit_acked(pending, &BTreeSet::new())
                    } else {
                        s.tracker.commit_acked(pending, &s.assigned)
                    };
                s.stats.commits += 1;
                if let Err(e) = acked {
                    // The sink lowered its word below this commit while it
                    // was in flight: Kafka holds more than the sink does.
                    // Closed under this lock, before any other commit.
                    s.commits_closed = true;
                    drop(guard);
                    self.fail(e);
                    return CommitOutcome::Closed;
                }
                if let Some((failures, for_)) = s.failed_commits.succeeded(Instant::now()) {
                    tracing::info!(
                        failed = failures,
                        for_ms = for_.as_millis() as u64,
                        "commits succeed again, after {failures} failed in a row"
                    );
                }
                self.check_done(s);
                CommitOutcome::Done
            }
            Err(e) => {
                s.tracker.commit_failed(pending);
                s.stats.commit_failures += 1;
                let say = s.failed_commits.failed(Instant::now());
                let refused_metadata = e.rdkafka_error_code()
                    == Some(rdkafka::types::RDKafkaErrorCode::OffsetMetadataTooLarge);
                drop(guard);
                if refused_metadata {
                    // Every later commit would be refused the same way:
                    // archiving on with nothing committed helps nobody.
                    self.fail(ConnectorError::Config(format!(
                        "Kafka refuses the commit metadata ({} bytes: the store's identity): the brokers' offset.metadata.max.bytes is below it; raise it (default 4096)",
                        self.identity.as_deref().map_or(0, str::len)
                    )));
                    return CommitOutcome::Failed;
                }
                match say {
                    Some(FailedSaid::First) => tracing::warn!(
                        error = %e,
                        "commit failed; durable offsets will be committed on the next cycle (the failures that follow in a row are counted, and said every {} s)",
                        FAILED_COMMITS_WARN_INTERVAL.as_secs()
                    ),
                    Some(FailedSaid::Still { failures, for_ }) => tracing::warn!(
                        error = %e,
                        failed = failures,
                        for_ms = for_.as_millis() as u64,
                        "commits still failing: {failures} in a row; durable offsets will be committed once Kafka takes a commit"
                    ),
                    None => tracing::debug!(error = %e, "commit failed (in a row, said already)"),
                }
                CommitOutcome::Failed
            }
        }
    }
}

/// A commit's offsets as `topic/partition@offset`, comma-separated, for the
/// commit's debug event (formatted only when that event is on).
struct CommittedOffsets<'a>(&'a BTreeMap<TopicPartition, i64>);

impl std::fmt::Display for CommittedOffsets<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (tp, o)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{tp}@{o}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// The first failure is said, the next ones only every interval with
    /// their count, and a success ends the streak, saying it once.
    #[test]
    fn failed_commits_in_a_row_are_said_first_then_counted() {
        use super::{FailedCommits, FailedSaid, FAILED_COMMITS_WARN_INTERVAL as EVERY};
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut f = FailedCommits::default();
        assert_eq!(f.succeeded(t0), None, "no streak, nothing to say");
        assert_eq!(f.failed(t0), Some(FailedSaid::First));
        for n in 1..1000 {
            assert_eq!(f.failed(ms(n)), None);
        }
        let at = t0 + EVERY;
        assert_eq!(
            f.failed(at),
            Some(FailedSaid::Still {
                failures: 1001,
                for_: EVERY
            })
        );
        assert_eq!(f.failed(at + Duration::from_millis(1)), None);
        assert_eq!(f.succeeded(at + EVERY), Some((1002, 2 * EVERY)));
        assert_eq!(f.succeeded(at + EVERY), None, "said once");
        assert_eq!(
            f.failed(at + 2 * EVERY),
            Some(FailedSaid::First),
            "a new streak"
        );
    }

    use super::*;

    /// A commit chosen before a revoke is stale even when the revoke has
    /// ended and the partition is assigned again by the time it would be
    /// sent: its offset may be below what the revoke committed.
    #[test]
    fn a_commit_chosen_before_a_revoke_and_reassignment_is_stale() {
        let p = Pipeline::new(None, None, None, None, None);
        let tp = TopicPartition::new("t", 0);
        let tps = BTreeSet::from([tp.clone()]);
        p.state().assigned.insert(tp.clone());
        let chosen = p.state().revokes_begun;
        assert!(!p.state().revoked_since(chosen, tps.iter()));
        p.begin_revoke(&tps);
        assert!(p.state().revoked_since(chosen, tps.iter()));
        p.drop_partitions(std::slice::from_ref(&tp));
        p.state().assigned.insert(tp.clone());
        assert!(p.state().revoked_since(chosen, tps.iter()));
        // A commit chosen now is not.
        let now = p.state().revokes_begun;
        assert!(!p.state().revoked_since(now, tps.iter()));
        // A partition lost (dropped without a revoke's commit) counts too.
        p.drop_partitions(std::slice::from_ref(&tp));
        p.state().assigned.insert(tp);
        assert!(p.state().revoked_since(now, tps.iter()));
    }
}
