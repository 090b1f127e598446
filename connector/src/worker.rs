//! The task thread: the one owner of the [`SinkTask`], running its calls in
//! the order the consumer thread hands them over.
//!
//! Jobs arrive on a FIFO queue bounded by bytes (`queue.rs`): the consumer
//! thread keeps polling while a put or a `pre_commit` runs here, until the
//! queue is full. Because the queue is FIFO, a revoke's `Flush` runs after
//! every put handed over before it: that is how "finish the in-flight put"
//! is kept.
//!
//! # Invariants
//! - `pre_commit` runs after `put` returned, on this thread, and what it
//!   declares durable and safe is checked against the records handed to the
//!   sink (`CommitTracker::record_pre_commit` returns `SinkOverclaimed`
//!   otherwise, taking no word of that call, and the run fails).
//! - After a fatal error no put runs and no commit is sent: puts handed over
//!   are dropped, flushes are refused.
//! - A retriable put error retries the put (with a capped backoff) until it
//!   succeeds, a fatal error, the run fails, or its stop's deadline; a
//!   batch is never skipped, because later records would then be committed
//!   past it. Each retry leaves out the batches of partitions lost since
//!   the last attempt (never handed to the sink again), and one left with
//!   none is not made.
//! - A failed flush, open, start, close or stop fails the run before its
//!   reply: no `pre_commit` runs after a failed one, nor after any other
//!   call the sink failed.
//! - After a fatal error the sink is not called again, `close` and `stop`
//!   included: either may sync, and a failed fsync is never retried. The
//!   sink is dropped instead.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_engine::{RecordBatch, TopicPartition};

use crate::config::CommitPolicy;
use crate::error::{ConnectorError, Result};
use crate::pipeline::Pipeline;
use crate::queue::Budget;
use crate::task::{SinkTask, TaskError};

pub(crate) type Reply<T> = Sender<Result<T>>;

pub(crate) enum Job {
    /// Write a batch (one `RecordBatch` per partition).
    Put {
        batches: Vec<RecordBatch>,
        /// Where the consumer caught up with partitions' log ends after
        /// the batch's records (`SinkTask::caught_up`).
        caught_up: BTreeMap<TopicPartition, i64>,
        /// From the batch's first polled record to its hand-over.
        poll_us: u64,
        /// Bytes its records hold in memory, released from the queue's budget when taken.
        bytes: usize,
    },
    /// Kafka's topic ids of an assignment's topics, before its partitions
    /// resume (`SinkTask::check_topics`).
    CheckTopics {
        ids: BTreeMap<String, crate::task::KafkaTopicId>,
        reply: Reply<()>,
    },
    /// Partitions were assigned: where does each resume?
    Open {
        partitions: Vec<TopicPartition>,
        reply: Reply<BTreeMap<TopicPartition, i64>>,
    },
    /// Partitions with no offset start here (`SinkTask::start`): which
    /// starts did the sink record?
    Start {
        starts: BTreeMap<TopicPartition, i64>,
        reply: Reply<BTreeMap<TopicPartition, i64>>,
    },
    /// Put these (a revoke's or the final buffer; everything before an
    /// offset reset is judged; or, inside an assignment or such a reset,
    /// that of partitions `--on-offset-out-of-range earliest` moved), then
    /// `pre_commit` once; reply once it has answered. What it
    /// declared safe is what the requester commits. After a revoke's, a
    /// sink that declared less (one that buffers) is not asked about the
    /// revoked partitions again, and the rest is fetched again by their
    /// next owner; after the final one, nothing more is called but `close`
    /// and `stop`, and the next run fetches the rest again.
    Flush {
        batches: Vec<RecordBatch>,
        /// As a put's, after `batches`.
        caught_up: BTreeMap<TopicPartition, i64>,
        /// The run's final flush: nothing is asked of the sink after it
        /// but `close` and `stop` (no re-ask while the final commit runs).
        last: bool,
        reply: Reply<()>,
    },
    /// Partitions were revoked (after their commit) or lost.
    Close {
        partitions: Vec<TopicPartition>,
        reply: Reply<()>,
    },
    /// The run is over: close the partitions still assigned, then stop.
    Stop {
        partitions: Vec<TopicPartition>,
        reply: Reply<()>,
    },
}

impl Job {
    /// What the job holds against the hand-over queue's byte budget: the
    /// memory a put's records hold (never 0); nothing for the others.
    pub fn queued_bytes(&self) -> usize {
        match self {
            Job::Put { bytes, .. } => *bytes,
            _ => 0,
        }
    }
}

pub(crate) struct Worker {
    pub sink: Box<dyn SinkTask>,
    pub pipeline: Arc<Pipeline>,
    pub policy: CommitPolicy,
    /// Simulate a crash once this many records were written (test hook).
    pub crash_after_records: Option<u64>,
    /// The run is stopping: retry a failing put only until `STOP_RETRY`.
    pub stop: Arc<AtomicBool>,
    /// Jobs handed over and not yet finished (the consumer thread reads it
    /// to decide whether a lingering batch can be handed over at once).
    pub in_flight: Arc<AtomicUsize>,
    /// The hand-over queue's byte budget: a put's bytes leave it when taken.
    pub budget: Arc<Budget>,
    /// Puts whose offsets no `pre_commit` has declared safe yet.
    pub unsafe_puts: bool,
    pub last_pre_commit: Instant,
    /// Where the last `pre_commit` declared a partition short of what it
    /// was handed (a sink that buffers): when to ask again with no put,
    /// and the wait that led there ([`REASK_MIN`] after a put, doubling
    /// while only re-asks find it short, to [`REASK_MAX`]; never below the
    /// interval under `interval:MS`). Kafka Connect likewise calls
    /// `preCommit` on its interval, put or not; before 2026-12-06 the rest
    /// of such a partition stayed uncommitted until the next put. Dropped
    /// at `stop`, after which nothing is called.
    pub reask: Option<(Instant, Duration)>,
    /// The final flush was made: its `pre_commit` was the sink's last word
    /// before the final commit, and nothing is asked of it after that but
    /// `close` and `stop` (until 2026-12-06 a re-ask due after a short
    /// answer came while the final commit ran, and what it declared was
    /// never committed; found in review).
    pub flushed_last: bool,
    /// The first re-ask's wait: [`REASK_MIN`] (0 in tests).
    pub reask_min: Duration,
    /// How long a put failing retriably is retried while a revoke waits
    /// behind it ([`REVOKE_RETRY`]; shorter in tests).
    pub revoke_retry: Duration,
}

/// First wait before `pre_commit` is asked again about a partition it
/// declared short ([`Worker::reask`]; never below the interval under
/// `interval:MS`).
pub(crate) const REASK_MIN: Duration = Duration::from_millis(50);
/// Longest such wait.
pub(crate) const REASK_MAX: Duration = Duration::from_secs(1);

/// How long a put that fails retriably is still retried once the run was
/// asked to stop.
const STOP_RETRY: Duration = Duration::from_secs(5);

/// How long a put that fails retriably is still retried once a revoke
/// began, at most: the revoke's flush waits behind it on the consumer
/// thread, inside librdkafka's rebalance callback, and past
/// `max.poll.interval.ms` (300 s by default) the member is dropped from the
/// group, its revoke's commit then refused. Well inside that, the run fails
/// instead: nothing more is committed, and the next owner archives from
/// Kafka's offset (seen in review, 2026-12-05: a revoke waited on such a
/// put with no bound). The archive's own sink never fails retriably.
pub const REVOKE_RETRY: Duration = Duration::from_secs(60);

/// [`REVOKE_RETRY`], or half the run's `max.poll.interval.ms` where that is
/// shorter (a review of the change found a fixed 60 s past a shorter
/// setting).
pub(crate) fn revoke_retry(max_poll_interval: Duration) -> Duration {
    REVOKE_RETRY.min(max_poll_interval / 2)
}

/// Whether `within` has passed since the first call for `deadline` (which
/// sets it then): the retry bounds of a stopping run and of a revoke.
fn expired(deadline: &mut Option<Instant>, within: Duration) -> bool {
    Instant::now() >= *deadline.get_or_insert_with(|| Instant::now() + within)
}

pub(crate) fn sink_error(call: &str, e: &TaskError) -> ConnectorError {
    match e {
        // Only a `put` is retried: said, so that the error is not read as
        // one that was (until 2026-12-07 it said only "retriable"; found by
        // an audit).
        TaskError::Retriable(why) if call != "put" => ConnectorError::Sink(format!(
            "{call} returned a retriable error, but only put is retried, so the run stops: {why}"
        )),
        e => ConnectorError::Sink(format!("{call}: {e}")),
    }
}

/// The offsets a sink returned, refused whole if one is negative: an offset
/// is the next one to read (last + 1), never below 0. Until 2026-12-05 one
/// went on to librdkafka, which refused it far from the sink's call (an
/// `open`'s as "set assignment offset", after a false report of records
/// aged out of Kafka; a `pre_commit`'s as "build commit list", taking the
/// other partitions' commit with it), naming neither the call nor the
/// partition.
fn offsets_in_range(
    call: &str,
    offsets: &BTreeMap<TopicPartition, i64>,
) -> std::result::Result<(), TaskError> {
    match offsets.iter().find(|(_, o)| **o < 0) {
        Some((tp, o)) => Err(TaskError::Fatal(format!(
            "{call} returned the offset {o} for {tp}: offsets are the next offset to read (last + 1), never below 0; nothing of this call is resumed from or committed"
        ))),
        None => Ok(()),
    }
}

impl Worker {
    pub fn run(mut self, jobs: Receiver<Job>) {
        // Dropped before `self` (the sink): a panic here closes commits
        // before the sink's drop runs, however long that takes, so that
        // nothing is committed between the panic and the run's failure,
        // which is recorded only once the unwinding is caught.
        let _close_on_panic = CloseCommitsOnPanic(self.pipeline.clone());
        loop {
            // When a `pre_commit` with no job falls due: an interval's
            // (`interval:MS`, puts not yet declared), or a re-ask's. A
            // failed run makes no `pre_commit`, so its puts stay unsafe:
            // waiting for a due one would spin.
            // Nor does one past its final flush (nothing should be due
            // then: the flush cleared its re-ask and its puts).
            let due_at = if !self.pre_commits_on_its_own() {
                None
            } else {
                let interval = match self.policy {
                    CommitPolicy::Interval(every) if self.unsafe_puts => {
                        Some(self.last_pre_commit + every)
                    }
                    _ => None,
                };
                let reask = self.reask.map(|(at, _)| at);
                match (interval, reask) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            };
            let job = match due_at {
                Some(at) => match jobs.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(j) => Some(j),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match jobs.recv() {
                    Ok(j) => Some(j),
                    Err(_) => break,
                },
            };
            let failed = self.pipeline.failed.load(Ordering::Acquire);
            let had_job = job.is_some();
            match job {
                None => {}
                // After a fatal error, puts handed over are dropped.
                Some(Job::Put { bytes, .. }) if failed => self.budget.release(bytes),
                Some(Job::Put {
                    batches,
                    caught_up,
                    poll_us,
                    bytes,
                }) => {
                    // Out of the queue: room for the consumer's next batch.
                    self.budget.release(bytes);
                    let r = self
                        .put(&batches, poll_us)
                        .and_then(|()| self.caught_up(&caught_up));
                    if let Err(e) = r {
                        self.pipeline.fail(e);
                    }
                    // Written (or failed): its buffers go back for the
                    // consumer thread's next records.
                    self.pipeline.recycler.give_back(batches);
                }
                // After a fatal error the sink is not asked to open: its
                // open may sync, and a failed fsync is never retried.
                Some(Job::Open { reply, .. }) if failed => {
                    let _ = reply.send(Err(ConnectorError::Failed(
                        "not opening partitions after a fatal error".into(),
                    )));
                }
                Some(Job::Open { partitions, reply }) => {
                    let r = self
                        .sink
                        .open(&partitions)
                        .and_then(|m| offsets_in_range("open", &m).map(|()| m));
                    let _ = reply.send(self.failing_the_run("open", r));
                }
                Some(Job::CheckTopics { reply, .. }) if failed => {
                    let _ = reply.send(Err(ConnectorError::Failed(
                        "not checking topics after a fatal error".into(),
                    )));
                }
                Some(Job::CheckTopics { ids, reply }) => {
                    let r = self.sink.check_topics(&ids);
                    let _ = reply.send(self.failing_the_run("check_topics", r));
                }
                Some(Job::Start { reply, .. }) if failed => {
                    let _ = reply.send(Err(ConnectorError::Failed(
                        "not recording starts after a fatal error".into(),
                    )));
                }
                Some(Job::Start { starts, reply }) => {
                    let r = self
                        .sink
                        .start(&starts)
                        .and_then(|m| offsets_in_range("start", &m).map(|()| m));
                    let _ = reply.send(self.failing_the_run("start", r));
                }
                Some(Job::Flush {
                    batches,
                    caught_up,
                    last,
                    reply,
                }) => {
                    let r = if failed {
                        Err(ConnectorError::Failed(
                            "not flushing after a fatal error".into(),
                        ))
                    } else {
                        let r = if batches.is_empty() {
                            Ok(())
                        } else {
                            self.put(&batches, 0)
                        };
                        self.pipeline.recycler.give_back(batches);
                        r.and_then(|()| self.caught_up(&caught_up))
                            .and_then(|()| self.pre_commit())
                    };
                    // A failed flush is fatal to the run, whoever asked for
                    // it: recorded here, before the reply, so that the
                    // pre-commit below never runs the failed one again (a
                    // failed fsync is never retried). The run reports this
                    // error; the reply repeats it for the requester.
                    let r = r.map_err(|e| {
                        let repeated = ConnectorError::Sink(format!("flush: {e}"));
                        self.pipeline.fail(e);
                        repeated
                    });
                    if last {
                        self.flushed_last = true;
                        self.reask = None;
                    }
                    let _ = reply.send(r);
                }
                // After a fatal error the sink is neither closed nor stopped
                // (either may sync): the failed run drops it. Closing has
                // nothing to report then; stopping is refused, so a clean
                // finish is never reported for a failed run.
                Some(Job::Close { reply, .. }) if failed => {
                    let _ = reply.send(Ok(()));
                }
                Some(Job::Stop { reply, .. }) if failed => {
                    let _ = reply.send(Err(ConnectorError::Failed(
                        "not stopping the sink after a fatal error".into(),
                    )));
                }
                Some(Job::Close { partitions, reply }) => {
                    let r = self.sink.close(&partitions);
                    let _ = reply.send(self.failing_the_run("close", r));
                }
                Some(Job::Stop { partitions, reply }) => {
                    // Each failure named by its own call.
                    let closed = self.sink.close(&partitions);
                    let r = self.failing_the_run("close", closed).and_then(|()| {
                        let stopped = self.sink.stop();
                        self.failing_the_run("stop", stopped)
                    });
                    // Nothing is called after `stop`: a re-ask due (the
                    // final flush's `pre_commit` declared short) is dropped.
                    self.reask = None;
                    self.unsafe_puts = false;
                    let _ = reply.send(r);
                }
            }
            if self.pre_commits_on_its_own() {
                let puts_due = self.unsafe_puts
                    && match self.policy {
                        CommitPolicy::EveryPut => true,
                        CommitPolicy::Interval(every) => self.last_pre_commit.elapsed() >= every,
                    };
                let reask_due = self.reask.is_some_and(|(at, _)| Instant::now() >= at);
                if puts_due || reask_due {
                    // A re-ask that finds puts waiting (due a moment before
                    // their interval) asks as after a put.
                    if let Err(e) = self.pre_commit_after(self.unsafe_puts, false) {
                        self.pipeline.fail(e);
                    }
                }
            }
            if had_job {
                self.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Whether a `pre_commit` with no job may fall due (an interval's, a
    /// re-ask's, a put's): not once the run has failed, nor past its final
    /// flush. The loop's wait and its asking read the same rule.
    fn pre_commits_on_its_own(&self) -> bool {
        !self.pipeline.failed.load(Ordering::Acquire) && !self.flushed_last
    }

    /// The result of a call to the sink for its requester. A failed open,
    /// start, close or stop fails the run here, before the reply, as a
    /// failed flush does: the requester fails it too, but only once it has
    /// read the reply, and meanwhile this loop's pre-commit would call the
    /// sink again, which may sync (a failed fsync is never retried). The
    /// reply carries the same error.
    fn failing_the_run<T>(&self, call: &str, r: std::result::Result<T, TaskError>) -> Result<T> {
        r.map_err(|e| {
            self.pipeline.fail(sink_error(call, &e));
            sink_error(call, &e)
        })
    }

    /// `batches` without those of partitions no longer assigned (lost),
    /// copied only when some are. `handed`: they were handed to the sink
    /// already (a retry's): those dropped are remembered as handed.
    fn assigned_only<'b>(
        &self,
        batches: std::borrow::Cow<'b, [RecordBatch]>,
        handed: bool,
    ) -> std::borrow::Cow<'b, [RecordBatch]> {
        let mut s = self.pipeline.state();
        if batches.iter().all(|b| s.assigned.contains(&b.tp)) {
            return batches;
        }
        if handed {
            let s = &mut *s;
            for b in batches.iter().filter(|b| !s.assigned.contains(&b.tp)) {
                s.consumed.handed_then_lost(&b.tp);
            }
        }
        let kept: Vec<RecordBatch> = batches
            .iter()
            .filter(|b| s.assigned.contains(&b.tp))
            .cloned()
            .collect();
        tracing::debug!(
            dropped = batches.len() - kept.len(),
            "a put's batches of partitions lost since it was queued are not handed to the sink"
        );
        std::borrow::Cow::Owned(kept)
    }

    fn put(&mut self, batches: &[RecordBatch], poll_us: u64) -> Result<()> {
        // A partition lost (its session timed out) since this put was
        // queued is another member's now: its records are not handed to
        // the sink (none was committed: the new owner fetches them again),
        // so that a sink writing somewhere shared does not race the new
        // owner with stale writes (until 2026-12-04 they were handed over,
        // and only their report ignored). A revoked partition stays
        // assigned until its revoke's flush, which comes after this put.
        // The rare put that meets a loss is copied without those batches;
        // so is one whose retry meets one (until the night of 2026-12-04 a
        // retry handed over the batches of its first attempt).
        let mut batches = self.assigned_only(std::borrow::Cow::Borrowed(batches), false);
        if batches.is_empty() {
            return Ok(());
        }
        let mut records: usize = batches.iter().map(|b| b.records.len()).sum();
        tracing::debug!(records, poll_us, "poll");
        let mut backoff = Duration::from_millis(10);
        let mut stop_deadline: Option<Instant> = None;
        let mut revoke_deadline: Option<Instant> = None;
        // Put-to-commit counts from the first attempt: the failed ones and
        // their backoffs are part of what the records waited.
        let started = Instant::now();
        let outcome = loop {
            let t0 = Instant::now();
            let span = tracing::debug_span!("put", records, put_us = tracing::field::Empty);
            let r = span.in_scope(|| self.sink.put(&batches));
            let put_us = t0.elapsed().as_micros() as u64;
            span.record("put_us", put_us);
            tracing::trace!(records, put_us, "put returned");
            match r {
                Ok(outcome) => {
                    offsets_in_range("put", &outcome.durable).map_err(|e| sink_error("put", &e))?;
                    break outcome;
                }
                Err(TaskError::Retriable(msg)) => {
                    // A failed run commits nothing more: retrying is for
                    // nothing, and would hold up its stop.
                    if self.pipeline.failed.load(Ordering::Acquire) {
                        return Err(ConnectorError::Sink(format!(
                            "put failed ({msg}) after the run failed; not retried"
                        )));
                    }
                    // A stopping run keeps retrying for a bounded time: a
                    // transient failure should not turn a clean stop into
                    // a failed one, nor hold the stop forever. A run ended
                    // by its done predicate (an embedder's) is stopping too.
                    let stopping = self.stop.load(Ordering::Relaxed)
                        || self.pipeline.finished.load(Ordering::Acquire);
                    if stopping && expired(&mut stop_deadline, STOP_RETRY) {
                        return Err(ConnectorError::Sink(format!(
                            "put still failing {} s after the run was asked to stop ({msg}); committing nothing more",
                            STOP_RETRY.as_secs()
                        )));
                    }
                    let revoking = !self.pipeline.state().revoking.is_empty();
                    if revoking && expired(&mut revoke_deadline, self.revoke_retry) {
                        return Err(ConnectorError::Sink(format!(
                            "put still failing {} s after a revoke began ({msg}), which waits behind it and cannot wait past max.poll.interval.ms; committing nothing more",
                            self.revoke_retry.as_secs_f64()
                        )));
                    }
                    tracing::warn!(%msg, retry_in_ms = backoff.as_millis() as u64, "put failed (retriable); retrying the same batches (less any of partitions lost meanwhile)");
                    // A backoff between attempts, not a synchronisation.
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    batches = self.assigned_only(batches, true);
                    if batches.is_empty() {
                        return Ok(());
                    }
                    records = batches.iter().map(|b| b.records.len()).sum();
                }
                Err(e @ TaskError::Fatal(_)) => return Err(sink_error("put", &e)),
            }
        };
        let mut guard = self.pipeline.state();
        let s = &mut *guard;
        // A put queued before its partition was revoked or lost runs after
        // (an assignment waits for its `open`, so it cannot run after the
        // next one): what it handed over is no longer this member's to
        // commit, and kept it would outlive the revoke, for a later
        // assignment of the partition to commit before any put of its own.
        // Raised, never lowered: within an assignment the records handed
        // over only go up (the consumer's repeat check), and a lower value
        // would fail a sink's earlier, higher word on the handed-over check
        // (`SinkOverclaimed`: the run would stop for nothing).
        for b in batches.iter() {
            match (b.records.last(), s.assigned.contains(&b.tp)) {
                (Some(last), true) => s.consumed.raise(&b.tp, last.offset + 1),
                // Lost while the put ran: remembered as handed, also in its
                // first put, so that a later word on it (a `pre_commit`'s)
                // is not taken for a sink's bug.
                (_, false) => s.consumed.handed_then_lost(&b.tp),
                (None, true) => {}
            }
        }
        // Revoked or lost while the put ran (or a retry before it): handed
        // something, and no longer this member's to commit. Any other
        // partition not assigned (never handed anything: a sink's bug)
        // goes on to the tracker, which WARNs of it (until 2026-12-07 it
        // was said to be revoked or lost, at INFO; found by an audit).
        let gone_while =
            |tp: &TopicPartition| !s.assigned.contains(tp) && s.consumed.was_handed(tp);
        let recorded = if !outcome.durable.keys().any(gone_while) {
            s.tracker.record_put(started, &outcome.durable, &s.consumed)
        } else {
            // Said at INFO, not WARN: the sink did nothing wrong.
            let (gone, durable): (BTreeMap<TopicPartition, i64>, BTreeMap<_, _>) = outcome
                .durable
                .iter()
                .map(|(tp, o)| (tp.clone(), *o))
                .partition(|(tp, _)| gone_while(tp));
            tracing::info!(
                partitions = ?gone.keys().map(ToString::to_string).collect::<Vec<_>>(),
                "a put's report on partitions revoked or lost while it ran is not recorded (they are another member's, or will be, and are committed by their next owner)"
            );
            s.tracker.record_put(started, &durable, &s.consumed)
        };
        if let Err(e) = recorded {
            // The sink lost committed records, or reported some it was
            // never handed: closed under this lock, so that the committer
            // sends nothing more before the run fails.
            s.commits_closed = true;
            return Err(e);
        }
        // A report below what was handed (a sink that lost records, or
        // lowered a word): the partition is asked about again.
        for (tp, &o) in &outcome.durable {
            s.consumed.reported(tp, o);
        }
        s.stats.puts += 1;
        s.stats.records_written += outcome.records_written;
        s.stats.records_duplicate += outcome.records_duplicate;
        s.stats.last_put_at = Some(Instant::now());
        drop(guard);
        self.unsafe_puts = true;
        Ok(())
    }

    /// The consumer caught up with these partitions' log ends, after the
    /// records just put: those still assigned whose offset is past what
    /// was handed over (or where they resumed) are told to the sink
    /// (`SinkTask::caught_up`), and then count as consumed up to there,
    /// with a `pre_commit` due as after a put. A partition with nothing
    /// handed over and no consumed offset yet is told of an offset above 0:
    /// the consumer raises a catch-up of such a partition only where it
    /// started at Kafka's log start (`--auto-offset-reset earliest`) and
    /// its fetch reached the log's end with nothing taken, past transaction
    /// markers alone (every other start has a consumed offset by then: at
    /// the assignment, or confirmed by the consumer before it raises
    /// anything). At 0 nothing was passed: an empty partition is not
    /// recorded (one whose records all aged out, its log start and end at
    /// the same offset above 0, is, at that offset). What keeps an
    /// end-of-partition event of an earlier assignment out is librdkafka's
    /// version check, which drops an event of a fetch since restarted; for
    /// such a partition the consumed offset was a second guard until
    /// 2026-12-06, when it was left out whatever its offset: never
    /// committed (lag tools showed no offset), and read from the log start
    /// again at every start. An error fails the run (the sink may have
    /// written part).
    fn caught_up(&mut self, positions: &BTreeMap<TopicPartition, i64>) -> Result<()> {
        if positions.is_empty() || self.pipeline.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let (passed, at_consumed): (BTreeMap<TopicPartition, i64>, bool) = {
            let s = self.pipeline.state();
            let passed = positions
                .iter()
                .filter(|&(tp, &o)| {
                    s.assigned.contains(tp) && o > s.consumed.get(tp).copied().unwrap_or(0)
                })
                .map(|(tp, &o)| (tp.clone(), o))
                .collect();
            // A start the consumer confirmed at the log's end (a partition
            // resumed unchecked, idle): nothing to tell the sink, but its
            // consumed offset, made then, is due a `pre_commit`, which no
            // put brings (until 2026-12-07 it stayed uncommitted for the
            // run; found by an audit).
            // (Undeclared: an end of the partition met again, after a
            // pause, at an offset declared already asks for none.)
            let at_consumed = positions.iter().any(|(tp, o)| {
                s.assigned.contains(tp)
                    && s.consumed.get(tp) == Some(o)
                    && s.consumed.is_undeclared(tp)
            });
            (passed, at_consumed)
        };
        if passed.is_empty() {
            self.unsafe_puts |= at_consumed;
            return Ok(());
        }
        self.sink
            .caught_up(&passed)
            .map_err(|e| sink_error("caught_up", &e))?;
        let mut s = self.pipeline.state();
        for (tp, &o) in &passed {
            // Lost while the sink ran: another member's now.
            if s.assigned.contains(tp) {
                s.consumed.raise(tp, o);
            }
        }
        drop(s);
        self.unsafe_puts = true;
        Ok(())
    }

    /// Ask the sink what is safe to commit, record it, wake the committer.
    /// Not after a fatal error, which another thread (the committer) may
    /// have recorded while this one ran the put before it (until 2026-12-05
    /// a flush's `pre_commit` still ran then, a sync the module's
    /// invariants rule out).
    fn pre_commit(&mut self) -> Result<()> {
        self.pre_commit_after(true, true)
    }

    /// [`Self::pre_commit`]; `handed_since` unless it is a re-ask with no
    /// put since the last one (`reask`), which asks the sink only if some
    /// partition is still undeclared and backs off further. `revoking_too`
    /// for a flush's: otherwise partitions being revoked are left out. A
    /// revoke's flush asks about them once, and its commit holds what that
    /// answer declared; asked again while the commit is under way (a re-ask
    /// due after a short answer), the sink would make durable what is never
    /// committed and what the next owner fetches again (until 2026-12-06;
    /// found in review).
    fn pre_commit_after(&mut self, handed_since: bool, revoking_too: bool) -> Result<()> {
        if self.pipeline.failed.load(Ordering::Acquire) {
            return Err(ConnectorError::Failed(
                "not calling pre_commit after a fatal error".into(),
            ));
        }
        // Only the partitions with something not declared safe yet
        // (handed.rs): not every one assigned, which a put of one record
        // would pay for at every put.
        let consumed: BTreeMap<TopicPartition, i64> = {
            let s = self.pipeline.state();
            if revoking_too || s.revoking.is_empty() {
                s.consumed.to_ask(&s.assigned)
            } else {
                s.consumed.to_ask(&(&s.assigned - &s.revoking))
            }
        };
        if !handed_since && consumed.is_empty() {
            // Declared since, or revoked: nothing to ask again.
            self.reask = None;
            return Ok(());
        }
        let t0 = Instant::now();
        let safe = self
            .sink
            .pre_commit(&consumed)
            .and_then(|m| offsets_in_range("pre_commit", &m).map(|()| m))
            .map_err(|e| sink_error("pre_commit", &e))?;
        tracing::trace!(
            pre_commit_us = t0.elapsed().as_micros() as u64,
            "pre_commit returned"
        );
        if self
            .crash_after_records
            .is_some_and(|n| self.pipeline.state().stats.records_written >= n)
        {
            // Durable but not committed: exactly the crash window.
            return Err(ConnectorError::SimulatedCrash);
        }
        crate::crashpoint::reached(crate::crashpoint::PUT_BEFORE_COMMIT);
        let mut guard = self.pipeline.state();
        let s = &mut *guard;
        // A partition lost while the sink made it durable (a loss does not
        // wait for the task thread) was forgotten meanwhile: its report
        // must not come back for a later assignment to commit. Dropped
        // without a word if it was handed something before (asked about
        // now or not: a sink may answer for every partition it holds,
        // until its `close`). One the sink was never handed goes on to the
        // tracker, which ignores it with a warning.
        let mut safe = safe;
        safe.retain(|tp, _| {
            s.assigned.contains(tp) || !(consumed.contains_key(tp) || s.consumed.was_handed(tp))
        });
        // What was handed over, as asked; and for a word on a partition not
        // asked about (a sink may answer for all it holds), as it is now.
        let mut handed = consumed;
        for tp in safe.keys() {
            if let (false, Some(&o)) = (handed.contains_key(tp), s.consumed.get(tp)) {
                handed.insert(tp.clone(), o);
            }
        }
        if let Err(e) = s.tracker.record_pre_commit(&safe, &handed) {
            // As for a put's word, above.
            s.commits_closed = true;
            return Err(e);
        }
        for (tp, &o) in &safe {
            s.consumed.declared(tp, o);
        }
        for tp in handed.keys() {
            if let Some(&k) = s.tracker.committed.get(tp) {
                s.consumed.held_by_kafka(tp, k);
            }
        }
        // Declared short of what was handed (a sink that buffers): asked
        // again with no put (`reask`).
        let short = handed
            .keys()
            .any(|tp| s.assigned.contains(tp) && s.consumed.is_undeclared(tp));
        drop(guard);
        let now = Instant::now();
        self.unsafe_puts = false;
        let reasked = self.reask.take();
        if short {
            // From the shortest wait after records were handed over (a sink
            // that lags under steady puts is asked again soon), doubling
            // while only re-asks find it short; never sooner than the
            // interval under `interval:MS`.
            let wait = match reasked {
                Some((_, wait)) if !handed_since => (wait * 2).min(REASK_MAX),
                _ => self.reask_min,
            };
            let wait = match self.policy {
                CommitPolicy::Interval(every) => wait.max(every),
                CommitPolicy::EveryPut => wait,
            };
            self.reask = Some((now + wait, wait));
        }
        self.last_pre_commit = now;
        self.pipeline.wake.notify_one();
        Ok(())
    }
}

/// Closes commits if dropped during a panic (see [`Worker::run`]).
struct CloseCommitsOnPanic(Arc<Pipeline>);

impl Drop for CloseCommitsOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.state().commits_closed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::PutOutcome;
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    /// A task thread for `sink` under `every-put`, with one job in flight.
    /// A worker for `sink` given one put of `batches`, run to its end.
    fn run_one_put(sink: Box<dyn SinkTask>, pipeline: &Arc<Pipeline>, batches: Vec<RecordBatch>) {
        let worker = worker(sink, pipeline);
        let (jobs, rx) = std::sync::mpsc::channel();
        jobs.send(Job::Put {
            batches,
            caught_up: BTreeMap::new(),
            poll_us: 0,
            bytes: 1,
        })
        .unwrap();
        drop(jobs);
        worker.run(rx);
    }

    /// A put of records with value "v" at these offsets of each partition.
    fn put_of(batches: Vec<(TopicPartition, std::ops::Range<i64>)>) -> Job {
        Job::Put {
            batches: batches
                .into_iter()
                .map(|(tp, offsets)| RecordBatch {
                    tp,
                    records: offsets
                        .map(|o| cairn_engine::Record::with_value(o, "v"))
                        .collect(),
                })
                .collect(),
            caught_up: BTreeMap::new(),
            poll_us: 0,
            bytes: 1,
        }
    }

    fn worker(sink: Box<dyn SinkTask>, pipeline: &Arc<Pipeline>) -> Worker {
        let (_sender, _, budget) = crate::queue::bounded(1 << 20);
        Worker {
            sink,
            pipeline: pipeline.clone(),
            policy: CommitPolicy::EveryPut,
            crash_after_records: None,
            stop: Arc::new(AtomicBool::new(false)),
            in_flight: Arc::new(AtomicUsize::new(1)),
            budget,
            unsafe_puts: false,
            flushed_last: false,
            last_pre_commit: Instant::now(),
            reask: None,
            reask_min: REASK_MIN,
            revoke_retry: REVOKE_RETRY,
        }
    }

    /// Puts succeed; every `pre_commit` fails, as a failed fsync would, and
    /// is counted, as are `close` and `stop` (in `.1`).
    struct FailingPreCommit(Arc<Mutex<u32>>, Arc<Mutex<u32>>);

    impl SinkTask for FailingPreCommit {
        fn open(
            &mut self,
            _: &[TopicPartition],
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            Ok(BTreeMap::new())
        }
        fn put(&mut self, _: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
            Ok(PutOutcome::default())
        }
        fn pre_commit(
            &mut self,
            _: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            *self.0.lock().unwrap() += 1;
            Err(TaskError::Fatal("fsync failed".into()))
        }
        fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
            *self.1.lock().unwrap() += 1;
            Ok(())
        }
        fn stop(&mut self) -> Result<(), TaskError> {
            *self.1.lock().unwrap() += 1;
            Ok(())
        }
    }

    /// A flush (a revoke's, the clean stop's) whose `pre_commit` fails
    /// fails the run at once: the task thread does not call `pre_commit`
    /// again on its own before the requester hears of it (with any sink a
    /// failed fsync would be retried, and its success committed). Nor is
    /// the sink closed or stopped after it.
    #[test]
    fn a_failed_flush_is_fatal_and_never_retried() {
        let calls = Arc::new(Mutex::new(0));
        let closes = Arc::new(Mutex::new(0));
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        let worker = worker(
            Box::new(FailingPreCommit(calls.clone(), closes.clone())),
            &pipeline,
        );
        let tp = TopicPartition::new("t", 0);
        // Assigned: the flush's batch is put before its failing pre_commit.
        pipeline.state().assigned.insert(tp.clone());
        let (jobs, rx) = std::sync::mpsc::channel();
        let (reply, replied) = std::sync::mpsc::channel();
        jobs.send(Job::Flush {
            batches: vec![RecordBatch {
                tp: tp.clone(),
                records: vec![cairn_engine::Record::with_value(0, "v")],
            }],
            caught_up: BTreeMap::new(),
            last: false,
            reply,
        })
        .unwrap();
        // The failed run's closing revoke and a stop that raced the
        // failure: the sink, which might sync in either, hears of neither.
        let (close_reply, closed) = std::sync::mpsc::channel();
        jobs.send(Job::Close {
            partitions: vec![tp.clone()],
            reply: close_reply,
        })
        .unwrap();
        let (stop_reply, stopped) = std::sync::mpsc::channel();
        jobs.send(Job::Stop {
            partitions: vec![tp],
            reply: stop_reply,
        })
        .unwrap();
        drop(jobs);
        worker.run(rx);
        assert!(replied.recv().unwrap().is_err(), "the flush failed");
        assert!(pipeline.failed.load(Ordering::Acquire), "the run failed");
        assert_eq!(*calls.lock().unwrap(), 1, "pre_commit called again");
        assert!(closed.recv().unwrap().is_ok(), "closing a failed run");
        assert!(
            stopped.recv().unwrap().is_err(),
            "a failed run stopped cleanly"
        );
        assert_eq!(
            *closes.lock().unwrap(),
            0,
            "close or stop after the failure"
        );
        assert!(pipeline
            .take_fatal()
            .unwrap()
            .to_string()
            .contains("fsync failed"));
    }

    /// Puts succeed after failing the run, as the committer would while a
    /// put runs (a commit refused for good); `pre_commit`s are counted.
    struct FailedWhilePutting {
        pipeline: Arc<Pipeline>,
        pre_commits: Arc<Mutex<u32>>,
    }

    impl SinkTask for FailedWhilePutting {
        fn open(
            &mut self,
            _: &[TopicPartition],
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            Ok(BTreeMap::new())
        }
        fn put(&mut self, _: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
            self.pipeline
                .fail(ConnectorError::Failed("a commit failed for good".into()));
            Ok(PutOutcome::default())
        }
        fn pre_commit(
            &mut self,
            consumed: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            *self.pre_commits.lock().unwrap() += 1;
            Ok(consumed.clone())
        }
        fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
            Ok(())
        }
    }

    /// A fatal error recorded by another thread while a flush's put runs:
    /// the flush fails and its `pre_commit` (a sync) is never called
    /// (until 2026-12-05 it was; seen in review).
    #[test]
    fn a_flush_calls_no_pre_commit_after_a_failure_during_its_put() {
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        let pre_commits = Arc::new(Mutex::new(0));
        let worker = worker(
            Box::new(FailedWhilePutting {
                pipeline: pipeline.clone(),
                pre_commits: pre_commits.clone(),
            }),
            &pipeline,
        );
        let tp = TopicPartition::new("t", 0);
        pipeline.state().assigned.insert(tp.clone());
        let (jobs, rx) = std::sync::mpsc::channel();
        let (reply, replied) = std::sync::mpsc::channel();
        jobs.send(Job::Flush {
            batches: vec![RecordBatch {
                tp,
                records: vec![cairn_engine::Record::with_value(0, "v")],
            }],
            caught_up: BTreeMap::new(),
            last: false,
            reply,
        })
        .unwrap();
        drop(jobs);
        worker.run(rx);
        assert!(replied.recv().unwrap().is_err(), "the flush succeeded");
        assert_eq!(*pre_commits.lock().unwrap(), 0, "pre_commit was called");
        assert!(pipeline
            .take_fatal()
            .unwrap()
            .to_string()
            .contains("a commit failed for good"));
    }

    /// Puts fail retriably, counted; the first one first does `at_first`
    /// to the pipeline (fails the run, or begins a revoke, as the consumer
    /// thread would meanwhile); from call `ok_from` on they succeed.
    struct Retriable {
        pipeline: Arc<Pipeline>,
        calls: Arc<Mutex<u32>>,
        at_first: fn(&Pipeline),
        ok_from: u32,
    }

    impl SinkTask for Retriable {
        fn open(
            &mut self,
            _: &[TopicPartition],
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            Ok(BTreeMap::new())
        }
        fn put(&mut self, _: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            if *calls == 1 {
                (self.at_first)(&self.pipeline);
            }
            if *calls < self.ok_from {
                return Err(TaskError::Retriable("broker busy".into()));
            }
            Ok(PutOutcome::default())
        }
        fn pre_commit(
            &mut self,
            _: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            Ok(BTreeMap::new())
        }
        fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
            Ok(())
        }
    }

    /// A Kafka Connect style sink: durable what it was given, and safe to
    /// commit what it was handed (`consumed`).
    struct HandedIsSafe;

    impl SinkTask for HandedIsSafe {
        fn open(
            &mut self,
            _: &[TopicPartition],
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            Ok(BTreeMap::new())
        }
        fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
            Ok(PutOutcome {
                durable: durable_through(batches),
                ..PutOutcome::default()
            })
        }
        fn pre_commit(
            &mut self,
            consumed: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            Ok(consumed.clone())
        }
        fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
            Ok(())
        }
    }

    /// [`HandedIsSafe`], keeping the partitions each put was handed; with
    /// `lose`, its first put loses those partitions and fails retriably.
    /// It also keeps what each `caught_up` was told (`told`), failing it
    /// with `caught_up_fails`, and with `lose_told` losing the partitions
    /// told while it runs.
    #[derive(Default)]
    struct SeesPuts {
        seen: Arc<Mutex<Vec<Vec<TopicPartition>>>>,
        lose: Option<(Arc<Pipeline>, Vec<TopicPartition>)>,
        told: Arc<Mutex<Vec<BTreeMap<TopicPartition, i64>>>>,
        caught_up_fails: bool,
        lose_told: Option<Arc<Pipeline>>,
    }

    impl SinkTask for SeesPuts {
        fn open(
            &mut self,
            p: &[TopicPartition],
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            HandedIsSafe.open(p)
        }
        fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
            let mut seen = self.seen.lock().unwrap();
            seen.push(batches.iter().map(|b| b.tp.clone()).collect());
            if let (1, Some((pipeline, lose))) = (seen.len(), &self.lose) {
                pipeline.drop_partitions(lose);
                return Err(TaskError::Retriable("broker busy".into()));
            }
            HandedIsSafe.put(batches)
        }
        fn caught_up(
            &mut self,
            positions: &BTreeMap<TopicPartition, i64>,
        ) -> Result<(), TaskError> {
            self.told.lock().unwrap().push(positions.clone());
            if let Some(p) = &self.lose_told {
                p.drop_partitions(&positions.keys().cloned().collect::<Vec<_>>());
            }
            if self.caught_up_fails {
                return Err(TaskError::Fatal("disk gone".into()));
            }
            Ok(())
        }
        fn pre_commit(
            &mut self,
            consumed: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            HandedIsSafe.pre_commit(consumed)
        }
        fn close(&mut self, p: &[TopicPartition]) -> Result<(), TaskError> {
            HandedIsSafe.close(p)
        }
    }

    /// Declares one less than handed for `.0` the first time it is asked
    /// about it, and what it was handed otherwise; keeps every map it was
    /// asked about (`.1`), and tells `.2` of each.
    struct DeclaresLessOnce(
        TopicPartition,
        Arc<Mutex<Vec<BTreeMap<TopicPartition, i64>>>>,
        Option<std::sync::mpsc::Sender<()>>,
    );

    impl SinkTask for DeclaresLessOnce {
        fn open(
            &mut self,
            p: &[TopicPartition],
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            HandedIsSafe.open(p)
        }
        fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
            HandedIsSafe.put(batches)
        }
        fn pre_commit(
            &mut self,
            consumed: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            let mut asked = self.1.lock().unwrap();
            let first = !asked.iter().any(|m| m.contains_key(&self.0));
            asked.push(consumed.clone());
            if let Some(told) = &self.2 {
                let _ = told.send(());
            }
            let mut safe = consumed.clone();
            if let (true, Some(o)) = (first, safe.get_mut(&self.0)) {
                *o -= 1;
            }
            Ok(safe)
        }
        fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
            Ok(())
        }
    }

    /// `pre_commit` is asked about the partitions handed something it has
    /// not declared safe yet, not about every one assigned (at 10,000
    /// partitions a put of one record paid for all of them): a partition
    /// declared in full is left out until more is put, one declared short
    /// is asked about again, and every partition's last word is committed.
    #[test]
    fn pre_commit_is_asked_only_about_what_it_has_not_declared() {
        let tp = |p| TopicPartition::new("t", p);
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        pipeline
            .state()
            .assigned
            .extend([tp(0), tp(1), tp(2), tp(3)]);
        // tp(3) resumed where the sink holds it, with nothing put since.
        pipeline.state().consumed.extend([(tp(3), 5)]);
        let asked = Arc::new(Mutex::new(Vec::new()));
        let worker = worker(
            Box::new(DeclaresLessOnce(tp(1), asked.clone(), None)),
            &pipeline,
        );
        let (jobs, rx) = std::sync::mpsc::channel();
        jobs.send(put_of(vec![(tp(0), 0..3), (tp(1), 0..2)]))
            .unwrap();
        jobs.send(put_of(vec![(tp(2), 0..1)])).unwrap();
        jobs.send(put_of(vec![(tp(0), 3..4)])).unwrap();
        drop(jobs);
        worker.run(rx);
        assert!(!pipeline.failed.load(Ordering::Acquire), "the run failed");
        assert_eq!(
            *asked.lock().unwrap(),
            vec![
                BTreeMap::from([(tp(0), 3), (tp(1), 2), (tp(3), 5)]),
                // tp(1) declared one short: asked again.
                BTreeMap::from([(tp(1), 2), (tp(2), 1)]),
                BTreeMap::from([(tp(0), 4)]),
            ]
        );
        let mut s = pipeline.state();
        let all = s.assigned.clone();
        let c = s.tracker.take_commit(&all, None).expect("a commit");
        assert_eq!(
            c.offsets,
            BTreeMap::from([(tp(0), 4), (tp(1), 2), (tp(2), 1), (tp(3), 5)])
        );
    }

    /// A partition declared short of what it was handed is asked about
    /// again with no put (after a backoff from 50 ms, never sooner than the
    /// interval under `interval:MS`), as Kafka Connect calls `preCommit` on
    /// its interval: a sink that buffers gets the rest of an idle
    /// partition committed (before 2026-12-06 it waited for the next put).
    #[test]
    fn a_partition_declared_short_is_asked_about_again_with_no_put() {
        let tp = TopicPartition::new("t", 0);
        for policy in [
            CommitPolicy::EveryPut,
            CommitPolicy::Interval(Duration::from_millis(20)),
        ] {
            let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
            pipeline.state().assigned.insert(tp.clone());
            let asked = Arc::new(Mutex::new(Vec::new()));
            let (told, heard) = std::sync::mpsc::channel();
            let mut w = worker(
                Box::new(DeclaresLessOnce(tp.clone(), asked.clone(), Some(told))),
                &pipeline,
            );
            w.policy = policy;
            let (jobs, rx) = std::sync::mpsc::channel();
            jobs.send(put_of(vec![(tp.clone(), 0..3)])).unwrap();
            let task = std::thread::spawn(move || w.run(rx));
            // The put's pre_commit, then one with no put (the bound is a
            // failure's, not a synchronisation).
            for _ in 0..2 {
                heard
                    .recv_timeout(Duration::from_secs(30))
                    .unwrap_or_else(|_| panic!("{policy:?}: not asked again"));
            }
            drop(jobs);
            task.join().unwrap();
            assert!(!pipeline.failed.load(Ordering::Acquire), "the run failed");
            assert_eq!(
                *asked.lock().unwrap(),
                vec![BTreeMap::from([(tp.clone(), 3)]); 2],
                "{policy:?}"
            );
            let mut s = pipeline.state();
            let all = s.assigned.clone();
            let c = s.tracker.take_commit(&all, None).expect("a commit");
            assert_eq!(c.offsets, BTreeMap::from([(tp.clone(), 3)]), "{policy:?}");
        }
    }

    /// Always declares one less than it was handed, and counts its
    /// `pre_commit`s before its `stop` (`.1`) and after (`.2`).
    struct AlwaysShort(Arc<Mutex<(bool, u32, u32)>>);

    impl SinkTask for AlwaysShort {
        fn open(
            &mut self,
            p: &[TopicPartition],
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            HandedIsSafe.open(p)
        }
        fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
            HandedIsSafe.put(batches)
        }
        fn pre_commit(
            &mut self,
            consumed: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            let mut s = self.0.lock().unwrap();
            if s.0 {
                s.2 += 1;
            } else {
                s.1 += 1;
            }
            Ok(consumed.iter().map(|(tp, o)| (tp.clone(), o - 1)).collect())
        }
        fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
            Ok(())
        }
        fn stop(&mut self) -> Result<(), TaskError> {
            self.0.lock().unwrap().0 = true;
            Ok(())
        }
    }

    /// An [`AlwaysShort`] sink, with no wait before a re-ask, handed one
    /// record of t/0 in a flush (`last`: the run's final one; t/0 being
    /// revoked if `revoking`), then a `Stop` (`stop`) or a `Close` of t/0:
    /// whether it was stopped, and its `pre_commit`s before and after.
    fn short_after_flush(
        policy: CommitPolicy,
        last: bool,
        revoking: bool,
        stop: bool,
    ) -> (bool, u32, u32) {
        let tp = TopicPartition::new("t", 0);
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        pipeline.state().assigned.insert(tp.clone());
        if revoking {
            pipeline.begin_revoke(&BTreeSet::from([tp.clone()]));
        }
        let calls = Arc::new(Mutex::new((false, 0, 0)));
        let mut w = worker(Box::new(AlwaysShort(calls.clone())), &pipeline);
        w.policy = policy;
        w.reask_min = Duration::ZERO;
        let (jobs, rx) = std::sync::mpsc::channel();
        let (flushed, flush_reply) = std::sync::mpsc::channel();
        let (then, then_reply) = std::sync::mpsc::channel();
        jobs.send(Job::Flush {
            batches: vec![RecordBatch {
                tp: tp.clone(),
                records: vec![cairn_engine::Record::with_value(0, "v")],
            }],
            caught_up: BTreeMap::new(),
            last,
            reply: flushed,
        })
        .unwrap();
        let partitions = vec![tp];
        jobs.send(if stop {
            Job::Stop {
                partitions,
                reply: then,
            }
        } else {
            Job::Close {
                partitions,
                reply: then,
            }
        })
        .unwrap();
        drop(jobs);
        w.run(rx);
        flush_reply.recv().unwrap().unwrap();
        then_reply.recv().unwrap().unwrap();
        assert!(!pipeline.failed.load(Ordering::Acquire), "{policy:?}");
        let counted = *calls.lock().unwrap();
        counted
    }

    /// Nothing is called after `stop`: a re-ask due when the run stops (a
    /// flush declared short) is dropped. With no wait before a re-ask, the
    /// flush's is due at once, and so is the one after it, when the queued
    /// `stop` has just run.
    #[test]
    fn no_pre_commit_is_called_after_stop() {
        for policy in [
            CommitPolicy::EveryPut,
            CommitPolicy::Interval(Duration::ZERO),
        ] {
            let (stopped, before, after) = short_after_flush(policy, false, false, true);
            assert!(stopped, "{policy:?}");
            assert!(before >= 2, "{policy:?}: the flush's, then a re-ask");
            assert_eq!(after, 0, "{policy:?}: called after stop");
        }
    }

    /// A revoke's flush asks the sink about the revoked partitions once: a
    /// short answer is not asked again while the revoke's commit is under
    /// way (the commit holds the first answer; a second would make durable
    /// what is never committed, and the next owner fetches it again). With
    /// no wait before a re-ask, one would be due at once after the flush.
    #[test]
    fn a_revoked_partition_is_not_asked_again_after_its_flush() {
        let (_, before, _) = short_after_flush(CommitPolicy::EveryPut, false, true, false);
        assert_eq!(before, 1, "asked again after the revoke's flush");
    }

    /// The same for the run's final flush: a short answer is not asked
    /// again while the final commit runs (until 2026-12-06 it was, and
    /// what the second answer declared was never committed).
    #[test]
    fn nothing_is_asked_again_after_the_final_flush() {
        let (stopped, before, after) = short_after_flush(CommitPolicy::EveryPut, true, false, true);
        assert!(stopped);
        assert_eq!((before, after), (1, 0), "asked again after the final flush");
    }

    /// Answers `pre_commit` for every partition it was ever handed, asked
    /// or not; its second `pre_commit` loses `.1` (a loss served while it
    /// runs).
    struct AnswersForAll(
        BTreeMap<TopicPartition, i64>,
        TopicPartition,
        Arc<Pipeline>,
        u32,
    );

    impl SinkTask for AnswersForAll {
        fn open(
            &mut self,
            p: &[TopicPartition],
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            HandedIsSafe.open(p)
        }
        fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
            self.0.extend(durable_through(batches));
            HandedIsSafe.put(batches)
        }
        fn pre_commit(
            &mut self,
            _: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            self.3 += 1;
            if self.3 == 2 {
                self.2.drop_partitions(std::slice::from_ref(&self.1));
            }
            Ok(self.0.clone())
        }
        fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
            Ok(())
        }
    }

    /// A word on a partition lost while `pre_commit` ran, from a sink that
    /// answers for all it holds, is dropped without a warning (it was
    /// handed over, though not asked about this time), and leaves nothing
    /// of the partition to commit. A word on one never handed over is
    /// still warned about.
    #[test]
    fn a_word_on_a_partition_lost_during_pre_commit_is_dropped_quietly() {
        let tp = |p| TopicPartition::new("t", p);
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        pipeline.state().assigned.extend([tp(0), tp(1)]);
        let sink = AnswersForAll(BTreeMap::new(), tp(1), pipeline.clone(), 0);
        let first = worker(Box::new(sink), &pipeline);
        let (jobs, rx) = std::sync::mpsc::channel();
        jobs.send(put_of(vec![(tp(0), 0..2), (tp(1), 0..2)]))
            .unwrap();
        jobs.send(put_of(vec![(tp(0), 2..3)])).unwrap();
        drop(jobs);
        first.run(rx);
        assert!(!pipeline.failed.load(Ordering::Acquire), "the run failed");
        let mut s = pipeline.state();
        assert!(
            !s.tracker.warned_unhanded(),
            "warned about a lost partition"
        );
        let all = std::collections::BTreeSet::from([tp(0), tp(1)]);
        let c = s.tracker.take_commit(&all, None).expect("a commit");
        assert_eq!(c.offsets, BTreeMap::from([(tp(0), 3)]));
        drop(s);
        // A sink reporting a partition never handed over: warned about.
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        pipeline.state().assigned.insert(tp(0));
        let sink = AnswersForAll(BTreeMap::from([(tp(9), 4)]), tp(1), pipeline.clone(), 0);
        let second = worker(Box::new(sink), &pipeline);
        let (jobs, rx) = std::sync::mpsc::channel();
        jobs.send(put_of(vec![(tp(0), 0..2)])).unwrap();
        drop(jobs);
        second.run(rx);
        assert!(!pipeline.failed.load(Ordering::Acquire), "the run failed");
        assert!(pipeline.state().tracker.warned_unhanded(), "not warned");
    }

    /// A partition resumed at an offset Kafka holds past what the sink
    /// does (another store's commit) is asked about once, not at every
    /// `pre_commit`: there is nothing of it to commit, and a sink's word
    /// cannot reach what it was handed until more is put.
    #[test]
    fn a_partition_kafka_holds_past_the_sinks_word_is_not_asked_about_again() {
        let tp = |p| TopicPartition::new("t", p);
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        {
            let mut s = pipeline.state();
            s.assigned.extend([tp(0), tp(5)]);
            s.consumed.extend([(tp(5), 10)]);
            s.tracker
                .record_open(&[tp(5)], &BTreeMap::new(), &BTreeMap::from([(tp(5), 10)]));
        }
        let asked = Arc::new(Mutex::new(Vec::new()));
        let worker = worker(
            Box::new(DeclaresLessOnce(tp(5), asked.clone(), None)),
            &pipeline,
        );
        let (jobs, rx) = std::sync::mpsc::channel();
        jobs.send(put_of(vec![(tp(0), 0..3)])).unwrap();
        jobs.send(put_of(vec![(tp(0), 3..4)])).unwrap();
        drop(jobs);
        worker.run(rx);
        assert!(!pipeline.failed.load(Ordering::Acquire), "the run failed");
        assert_eq!(
            *asked.lock().unwrap(),
            vec![
                BTreeMap::from([(tp(0), 3), (tp(5), 10)]),
                BTreeMap::from([(tp(0), 4)]),
            ]
        );
        assert!(!pipeline.state().consumed.is_undeclared(&tp(5)));
    }

    /// A put queued before its partition was lost runs after the loss: the
    /// lost partition's records are not handed to the sink (another member
    /// owns it now: since 2026-12-04), it leaves no handed-over offset
    /// behind for the partition (a later assignment resuming without a
    /// stored offset would have committed it before any put of its own,
    /// past what the sink then holds), and the assigned partition's put
    /// counts as before.
    #[test]
    fn a_put_run_after_its_partition_was_lost_leaves_nothing_to_commit() {
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        let (lost, kept) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        pipeline
            .state()
            .assigned
            .extend([lost.clone(), kept.clone()]);
        pipeline.drop_partitions(std::slice::from_ref(&lost));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = SeesPuts {
            seen: seen.clone(),
            ..SeesPuts::default()
        };
        let records = |n: i64| {
            (0..n)
                .map(|o| cairn_engine::Record::with_value(o, "v"))
                .collect()
        };
        run_one_put(
            Box::new(sink),
            &pipeline,
            vec![
                RecordBatch {
                    tp: lost.clone(),
                    records: records(1000),
                },
                RecordBatch {
                    tp: kept.clone(),
                    records: records(10),
                },
            ],
        );
        assert!(!pipeline.failed.load(Ordering::Acquire), "the run failed");
        assert_eq!(
            *seen.lock().unwrap(),
            vec![vec![kept.clone()]],
            "the sink's puts"
        );
        let s = pipeline.state();
        assert_eq!(*s.consumed, BTreeMap::from([(kept, 10)]));
    }

    /// Where the consumer caught up past the records of a put, told after
    /// it: the sink hears of the partitions still assigned whose offset is
    /// past what was handed over or where it resumed, or above 0 with
    /// neither yet (not of one caught up just past its last record, nor of
    /// one unassigned, nor of one lost), those offsets then count as consumed, and
    /// the pre-commit that follows may declare them. A failed `caught_up`
    /// fails the run, with no pre-commit after it; one whose partition is
    /// lost while it runs leaves nothing of it to commit.
    #[test]
    fn caught_up_past_the_records_put_is_told_to_the_sink_and_then_consumed() {
        let tp = |p| TopicPartition::new("t", p);
        for (fail, lose) in [(false, false), (true, false), (false, true)] {
            let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
            pipeline
                .state()
                .assigned
                .extend([tp(0), tp(1), tp(2), tp(4)]);
            let told = Arc::new(Mutex::new(Vec::new()));
            let sink = SeesPuts {
                told: told.clone(),
                caught_up_fails: fail,
                lose_told: lose.then(|| pipeline.clone()),
                ..SeesPuts::default()
            };
            let batch = |p, n: i64| RecordBatch {
                tp: tp(p),
                records: (0..n)
                    .map(|o| cairn_engine::Record::with_value(o, "v"))
                    .collect(),
            };
            let (jobs, rx) = std::sync::mpsc::channel();
            jobs.send(Job::Put {
                batches: vec![batch(0, 5), batch(1, 3)],
                caught_up: BTreeMap::from([
                    (tp(0), 8),
                    (tp(1), 3),
                    (tp(2), 4),
                    (tp(3), 9),
                    (tp(4), 0),
                ]),
                poll_us: 0,
                bytes: 1,
            })
            .unwrap();
            drop(jobs);
            worker(Box::new(sink), &pipeline).run(rx);
            assert_eq!(
                *told.lock().unwrap(),
                vec![BTreeMap::from([(tp(0), 8), (tp(2), 4)])]
            );
            let s = pipeline.state();
            if lose {
                assert!(!pipeline.failed.load(Ordering::Acquire));
                assert_eq!(*s.consumed, BTreeMap::from([(tp(1), 3)]));
                assert_eq!(s.tracker.durable_reported, BTreeMap::from([(tp(1), 3)]));
            } else if fail {
                assert!(pipeline.failed.load(Ordering::Acquire));
                assert_eq!(*s.consumed, BTreeMap::from([(tp(0), 5), (tp(1), 3)]));
                // The put's own report stands; nothing past it.
                assert_eq!(
                    s.tracker.durable_reported,
                    BTreeMap::from([(tp(0), 5), (tp(1), 3)])
                );
            } else {
                assert!(!pipeline.failed.load(Ordering::Acquire));
                let all = BTreeMap::from([(tp(0), 8), (tp(1), 3), (tp(2), 4)]);
                assert_eq!(*s.consumed, all);
                assert_eq!(s.tracker.durable_reported, all);
            }
        }
    }

    /// A partition lost while a put that failed retriably waits to retry
    /// is not in the retry (until the night of 2026-12-04 the retry handed
    /// over the first attempt's batches, racing the new owner); a put that
    /// loses all of its partitions so is not retried at all.
    #[test]
    fn a_retry_leaves_out_partitions_lost_since_the_first_attempt() {
        let (lost, kept) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        for lose in [vec![lost.clone()], vec![lost.clone(), kept.clone()]] {
            let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
            pipeline
                .state()
                .assigned
                .extend([lost.clone(), kept.clone()]);
            let seen = Arc::new(Mutex::new(Vec::new()));
            let sink = SeesPuts {
                seen: seen.clone(),
                lose: Some((pipeline.clone(), lose.clone())),
                ..SeesPuts::default()
            };
            run_one_put(
                Box::new(sink),
                &pipeline,
                [&lost, &kept]
                    .map(|tp| RecordBatch {
                        tp: tp.clone(),
                        records: vec![cairn_engine::Record::with_value(0, "v")],
                    })
                    .to_vec(),
            );
            assert!(!pipeline.failed.load(Ordering::Acquire), "the run failed");
            let seen = seen.lock().unwrap().clone();
            let s = pipeline.state();
            if lose.len() == 1 {
                assert_eq!(
                    seen,
                    vec![vec![lost.clone(), kept.clone()], vec![kept.clone()]]
                );
                assert_eq!(*s.consumed, BTreeMap::from([(kept.clone(), 1)]));
                assert_eq!(s.stats.puts, 1);
            } else {
                assert_eq!(seen, vec![vec![lost.clone(), kept.clone()]], "not retried");
                assert!(s.consumed.is_empty());
                assert_eq!(s.stats.puts, 0);
            }
        }
    }

    /// A put failing retriably is not retried once the run failed: the
    /// retries (until the stop's deadline, which a failure never sets)
    /// held up the failed run's close behind them.
    #[test]
    fn a_retriable_put_is_not_retried_after_the_run_failed() {
        let calls = Arc::new(Mutex::new(0));
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        let sink = Retriable {
            pipeline: pipeline.clone(),
            calls: calls.clone(),
            at_first: |p| p.fail(ConnectorError::Failed("the consumer failed".into())),
            ok_from: 5,
        };
        pipeline
            .state()
            .assigned
            .insert(TopicPartition::new("t", 0));
        run_one_put(
            Box::new(sink),
            &pipeline,
            vec![RecordBatch {
                tp: TopicPartition::new("t", 0),
                records: vec![cairn_engine::Record::with_value(0, "v")],
            }],
        );
        assert_eq!(*calls.lock().unwrap(), 1, "retried after the run failed");
        assert_eq!(pipeline.state().stats.puts, 0, "nothing put");
    }

    /// The revoke's retry bound is 60 s, or half the poll interval where
    /// that is shorter.
    #[test]
    fn the_revoke_deadline_is_inside_the_poll_interval() {
        let s = Duration::from_secs;
        assert_eq!(revoke_retry(s(300)), s(60));
        assert_eq!(revoke_retry(s(30)), s(15));
    }

    /// A put failing retriably is retried only up to the revoke deadline
    /// once a revoke began (the revoke's flush waits behind it), then the
    /// run fails with nothing put; before 2026-12-05 it was retried for as
    /// long as it failed, and the revoke waited past max.poll.interval.ms.
    #[test]
    fn a_retriable_put_holds_a_revoke_only_up_to_its_deadline() {
        let calls = Arc::new(Mutex::new(0));
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        pipeline
            .state()
            .assigned
            .insert(TopicPartition::new("t", 0));
        let mut w = worker(
            Box::new(Retriable {
                pipeline: pipeline.clone(),
                calls: calls.clone(),
                // As the consumer thread would while the put is retried
                // ahead of the revoke's flush.
                at_first: |p| {
                    p.begin_revoke(&std::collections::BTreeSet::from([TopicPartition::new(
                        "t", 0,
                    )]))
                },
                ok_from: u32::MAX,
            }),
            &pipeline,
        );
        w.revoke_retry = Duration::from_millis(200);
        let (jobs, rx) = std::sync::mpsc::channel();
        jobs.send(Job::Put {
            batches: vec![RecordBatch {
                tp: TopicPartition::new("t", 0),
                records: vec![cairn_engine::Record::with_value(0, "v")],
            }],
            caught_up: BTreeMap::new(),
            poll_us: 0,
            bytes: 1,
        })
        .unwrap();
        drop(jobs);
        // On a thread of its own, so that a put retried without bound
        // fails the test at a deadline rather than hang it.
        let (ran, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            w.run(rx);
            let _ = ran.send(());
        });
        done.recv_timeout(Duration::from_secs(60))
            .expect("the put was still retried a minute after the revoke began");
        assert!(*calls.lock().unwrap() > 1, "retried within the deadline");
        assert!(pipeline.failed.load(Ordering::Acquire), "the run failed");
        let e = pipeline.take_fatal().expect("the run's error").to_string();
        assert!(e.contains("after a revoke began"), "{e}");
        assert_eq!(pipeline.state().stats.puts, 0, "nothing put");
    }

    /// Every call but `put` fails fatally; `pre_commit`s are counted.
    struct FailingCalls(Arc<Mutex<u32>>);

    impl SinkTask for FailingCalls {
        fn open(
            &mut self,
            _: &[TopicPartition],
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            Err(TaskError::Fatal("open failed".into()))
        }
        fn start(
            &mut self,
            _: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            Err(TaskError::Fatal("start failed".into()))
        }
        fn put(&mut self, _: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
            Ok(PutOutcome::default())
        }
        fn pre_commit(
            &mut self,
            _: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            *self.0.lock().unwrap() += 1;
            Ok(BTreeMap::new())
        }
        fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
            Err(TaskError::Fatal("close failed".into()))
        }
        fn stop(&mut self) -> Result<(), TaskError> {
            Err(TaskError::Fatal("stop failed".into()))
        }
    }

    /// What a sink that makes each put durable reports: per batch's
    /// partition, the offset after its last record.
    fn durable_through(batches: &[RecordBatch]) -> BTreeMap<TopicPartition, i64> {
        batches
            .iter()
            .filter_map(|b| Some((b.tp.clone(), b.records.last()?.offset + 1)))
            .collect()
    }

    /// Returns -1 for every partition from the call named `.0`, and
    /// everything handed over from the others; counts `pre_commit`s.
    struct NegativeOffsets(&'static str, Arc<Mutex<u32>>);

    impl SinkTask for NegativeOffsets {
        fn open(
            &mut self,
            partitions: &[TopicPartition],
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            let o = if self.0 == "open" { -1 } else { 0 };
            Ok(partitions.iter().map(|tp| (tp.clone(), o)).collect())
        }
        fn start(
            &mut self,
            starts: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            let o = if self.0 == "start" { -1 } else { 0 };
            Ok(starts.keys().map(|tp| (tp.clone(), o)).collect())
        }
        fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
            let mut durable = durable_through(batches);
            if self.0 == "put" {
                durable.values_mut().for_each(|o| *o = -1);
            }
            Ok(PutOutcome {
                durable,
                ..PutOutcome::default()
            })
        }
        fn pre_commit(
            &mut self,
            consumed: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            *self.1.lock().unwrap() += 1;
            if self.0 == "pre_commit" {
                return Ok(consumed.keys().map(|tp| (tp.clone(), -1)).collect());
            }
            Ok(consumed.clone())
        }
        fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
            Ok(())
        }
    }

    /// A partition with no offset yet (resumed unchecked, or started by
    /// `--auto-offset-reset`), lost while its first put ran: the put's
    /// report on it, and the `pre_commit`'s after it, are words on a
    /// partition lost meanwhile (INFO, or none), not a sink's on a
    /// partition it was never handed (the tracker's WARN, until
    /// 2026-12-07).
    #[test]
    fn a_partition_lost_during_its_first_put_is_no_sinks_bug() {
        struct LosesIt(Arc<Pipeline>);
        impl SinkTask for LosesIt {
            fn open(
                &mut self,
                _: &[TopicPartition],
            ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
                Ok(BTreeMap::new())
            }
            fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
                // Lost while the put ran (a loss does not wait for it).
                self.0.state().assigned.remove(&batches[0].tp);
                Ok(PutOutcome {
                    durable: BTreeMap::from([(batches[0].tp.clone(), 8)]),
                    records_written: 1,
                    ..Default::default()
                })
            }
            // A sink may answer for all it holds, until its `close`.
            fn pre_commit(
                &mut self,
                _: &BTreeMap<TopicPartition, i64>,
            ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
                Ok(BTreeMap::from([(TopicPartition::new("t", 0), 8)]))
            }
            fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
                Ok(())
            }
        }
        let tp = TopicPartition::new("t", 0);
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        pipeline.state().assigned.insert(tp.clone());
        let worker = worker(Box::new(LosesIt(pipeline.clone())), &pipeline);
        let (jobs, rx) = std::sync::mpsc::channel();
        jobs.send(Job::Put {
            batches: vec![RecordBatch {
                tp: tp.clone(),
                records: vec![cairn_engine::Record::with_value(7, "v")],
            }],
            caught_up: BTreeMap::new(),
            poll_us: 0,
            bytes: 1,
        })
        .unwrap();
        drop(jobs);
        worker.run(rx);
        assert!(pipeline.take_fatal().is_none());
        assert!(
            !pipeline.state().tracker.warned_unhanded(),
            "taken for a sink's bug"
        );
    }

    /// A stop whose close succeeds and whose `stop` fails is named by
    /// `stop`; a retriable one says only `put` is retried.
    #[test]
    fn a_failed_stop_after_a_clean_close_is_named_stop() {
        struct StopFails;
        impl SinkTask for StopFails {
            fn open(
                &mut self,
                _: &[TopicPartition],
            ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
                Ok(BTreeMap::new())
            }
            fn put(&mut self, _: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
                Ok(PutOutcome::default())
            }
            fn pre_commit(
                &mut self,
                _: &BTreeMap<TopicPartition, i64>,
            ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
                Ok(BTreeMap::new())
            }
            fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
                Ok(())
            }
            fn stop(&mut self) -> Result<(), TaskError> {
                Err(TaskError::Retriable("busy".into()))
            }
        }
        let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
        let worker = worker(Box::new(StopFails), &pipeline);
        let (reply, replied) = std::sync::mpsc::channel();
        let (jobs, rx) = std::sync::mpsc::channel();
        jobs.send(Job::Stop {
            partitions: vec![TopicPartition::new("t", 0)],
            reply,
        })
        .unwrap();
        drop(jobs);
        worker.run(rx);
        assert!(replied.recv().unwrap().is_err(), "the reply says it failed");
        let e = pipeline.take_fatal().unwrap().to_string();
        assert_eq!(
            e,
            "sink failed: stop returned a retriable error, but only put is retried, so the run stops: busy"
        );
    }

    /// A retriable error from a call other than `put`, which alone is
    /// retried, says the run stops for it.
    #[test]
    fn a_retriable_error_but_from_put_says_it_is_not_retried() {
        let e = sink_error("pre_commit", &TaskError::Retriable("503".into())).to_string();
        assert!(
            e.contains("only put is retried") && e.contains("503"),
            "{e}"
        );
        let e = sink_error("put", &TaskError::Retriable("503".into())).to_string();
        assert!(!e.contains("only put"), "{e}");
    }

    /// A negative offset from `open`, `start`, a put's report or
    /// `pre_commit` fails the run there, naming the call, the offset and
    /// the partition, and nothing of it is kept to commit or resume from
    /// (until 2026-12-05 librdkafka refused it later, naming neither).
    #[test]
    fn a_negative_offset_from_the_sink_fails_the_run_naming_the_call() {
        let tp = TopicPartition::new("t", 3);
        for call in ["open", "start", "put", "pre_commit"] {
            let pre_commits = Arc::new(Mutex::new(0));
            let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
            pipeline.state().assigned.insert(tp.clone());
            let worker = worker(
                Box::new(NegativeOffsets(call, pre_commits.clone())),
                &pipeline,
            );
            let (jobs, rx) = std::sync::mpsc::channel();
            // The reply of an open or a start (a put has none).
            let (reply_open, replied_open) = std::sync::mpsc::channel();
            let (reply_start, replied_start) = std::sync::mpsc::channel();
            let job = match call {
                "open" => Job::Open {
                    partitions: vec![tp.clone()],
                    reply: reply_open,
                },
                "start" => Job::Start {
                    starts: BTreeMap::from([(tp.clone(), 0)]),
                    reply: reply_start,
                },
                _ => Job::Put {
                    batches: vec![RecordBatch {
                        tp: tp.clone(),
                        records: vec![cairn_engine::Record::with_value(7, "v")],
                    }],
                    caught_up: BTreeMap::new(),
                    poll_us: 0,
                    bytes: 1,
                },
            };
            jobs.send(job).unwrap();
            drop(jobs);
            worker.run(rx);
            match call {
                "open" => assert!(replied_open.recv().unwrap().is_err(), "open's reply"),
                "start" => assert!(replied_start.recv().unwrap().is_err(), "start's reply"),
                _ => {}
            }
            assert!(
                pipeline.failed.load(Ordering::Acquire),
                "{call}: the run failed"
            );
            let e = pipeline.take_fatal().unwrap().to_string();
            assert!(
                e.contains(&format!("{call} returned the offset -1 for t/3")),
                "{call}: {e}"
            );
            if call == "put" {
                assert_eq!(
                    *pre_commits.lock().unwrap(),
                    0,
                    "pre_commit after a bad put"
                );
            }
            let mut s = pipeline.state();
            let all = s.assigned.clone();
            assert!(
                s.tracker.take_commit(&all, None).is_none(),
                "{call}: something was left to commit"
            );
        }
    }

    /// A failed open, start, close or stop fails the run before its reply,
    /// as a failed flush does: with puts not yet declared safe and the
    /// interval's pre-commit due, the task thread does not call the sink's
    /// `pre_commit` after it (before 2026-12-03 it did, until the
    /// requester read the reply and failed the run: with a sink whose
    /// failed call was a failed fsync, a retry).
    #[test]
    fn a_failed_call_fails_the_run_before_the_interval_pre_commit() {
        // Runs `job` on a task thread whose puts wait for a pre-commit that
        // is due; checks the run failed with the call's error and no
        // pre-commit followed.
        fn check(call: &str, job: Job, failed: &str) {
            let pre_commits = Arc::new(Mutex::new(0));
            let pipeline = Arc::new(Pipeline::new(None, None, None, None, None));
            let mut worker = worker(Box::new(FailingCalls(pre_commits.clone())), &pipeline);
            worker.policy = CommitPolicy::Interval(Duration::from_secs(1));
            worker.unsafe_puts = true;
            worker.last_pre_commit = Instant::now()
                .checked_sub(Duration::from_secs(10))
                .expect("an instant 10 s ago");
            let (sender, rx) = std::sync::mpsc::channel();
            sender.send(job).unwrap();
            drop(sender);
            worker.run(rx);
            assert!(
                pipeline.failed.load(Ordering::Acquire),
                "{call}: the run failed"
            );
            assert_eq!(
                pipeline.take_fatal().map(|e| e.to_string()),
                Some(format!("sink failed: {failed}: fatal: {failed} failed")),
                "{call}: the run reports the failed call's error, named by it"
            );
            assert_eq!(
                *pre_commits.lock().unwrap(),
                0,
                "{call}: pre_commit called after it"
            );
        }
        let tp = TopicPartition::new("t", 0);
        let (reply, r) = std::sync::mpsc::channel();
        let partitions = vec![tp.clone()];
        check("open", Job::Open { partitions, reply }, "open");
        assert!(r.recv().unwrap().is_err(), "open: the reply says it failed");
        let (reply, r) = std::sync::mpsc::channel();
        let starts = BTreeMap::from([(tp.clone(), 0)]);
        check("start", Job::Start { starts, reply }, "start");
        assert!(
            r.recv().unwrap().is_err(),
            "start: the reply says it failed"
        );
        let (reply, r) = std::sync::mpsc::channel();
        let partitions = vec![tp.clone()];
        check("close", Job::Close { partitions, reply }, "close");
        assert!(
            r.recv().unwrap().is_err(),
            "close: the reply says it failed"
        );
        let (reply, r) = std::sync::mpsc::channel();
        let partitions = vec![tp];
        // A stop closes the partitions first: that close fails, and is
        // named (until 2026-12-07 it was said to be the stop's).
        check("stop", Job::Stop { partitions, reply }, "close");
        assert!(r.recv().unwrap().is_err(), "stop: the reply says it failed");
    }
}
