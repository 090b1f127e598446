//! The consume → put → fsync → commit loop.
//!
//! Three stages overlap (see `pipeline.rs`): this module's consumer thread
//! takes records (one at a time, up to 1024 a call, from a queue of the
//! run's own that every assigned partition's fetch queue is forwarded to:
//! `fetch.rs`) and
//! batches them, the task thread (`worker.rs`) puts and pre-commits,
//! and a tokio task (`committer.rs`) commits. A blocking rdkafka
//! `BaseConsumer` runs on the consumer thread: rebalance callbacks run inside
//! its `poll`, and they wait for the task thread and the committer where the
//! sink contract needs them to.
//!
//! # Invariants
//! - `enable.auto.commit=false` and `enable.auto.offset.store=false`: only
//!   the committer and the revoke and stop paths commit, and only offsets
//!   the sink reported durable.
//! - Records are taken in each partition's offset order, and a fetch error
//!   on the run's queue is dealt with before any record queued after it is
//!   taken: an error that stops the run leaves what follows it unarchived.
//!   One exception: an offset reset wanted while the assignment is lost
//!   (the session timed out) waits for the revoke, and records of other
//!   partitions queued after it are taken meanwhile (the errored
//!   partition's fetch has stopped, so none of its own). (Errors on the
//!   consumer queue, the group's and the client's, are served between
//!   takes.)
//! - Memory between taking and putting is bounded: the batch being filled
//!   (`batch_bytes_max` plus one record), the puts queued for the task thread
//!   (one under `every-put`; under `interval:MS` at most `batch_bytes_max`
//!   payload bytes, or one batch; `queue.rs`), and the one being put. The
//!   consumer thread stops polling while it waits for room in the queue.
//!   Written records' buffers waiting to be reused hold at most 8 MiB
//!   more (`recycle.rs`), and the messages taken but not yet destroyed keep
//!   at most four takes' worth of librdkafka's fetch responses alive
//!   (`fetch.rs`, the reaper).
//! - The batch being filled grows while the task thread is busy, up to the
//!   batch limits: only full batches (or a lingered one, when nothing more is
//!   waiting to be polled or the task thread is free) are queued, so under
//!   load puts get larger, not more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cairn_engine::{Record, RecordBatch, TopicPartition, HEADERS_PER_RECORD_MAX};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::Offset;

use crate::config::{CommitPolicy, OnOffsetOutOfRange, OnOversize, RunConfig};
use crate::dead_letter::DeadLetters;
use crate::error::{ConnectorError, Result};
use crate::fetch::{Fetch, Flow, Taken};
use crate::pipeline::Pipeline;
use crate::progress::{LogBounds, Progress, ProgressClock, Snapshot, Start};
use crate::queue::{self, JobSender};
use crate::rebalance::SinkContext;
use crate::reset::{self, ResetScope};
use crate::retention;
use crate::set_aside_log::{Kind as SetAsideKind, SetAsideLog};
use crate::task::SinkTask;
use crate::worker::{Job, Reply, Worker};

/// Counters of one pipeline run.
#[derive(Debug, Default, Clone)]
pub struct RunStats {
    pub records_polled: u64,
    pub records_written: u64,
    pub records_duplicate: u64,
    pub records_oversize_skipped: u64,
    /// Oversize records produced to the dead-letter topic.
    pub records_dead_lettered: u64,
    pub payload_bytes: u64,
    pub puts: u64,
    pub commits: u64,
    pub commit_failures: u64,
    /// Revokes whose commit failed: the next owner of those partitions
    /// resumes at Kafka's older offset and archives the records between
    /// again (each store stays duplicate-free; nothing is lost).
    pub revoke_commit_failures: u64,
    /// The clean stop's final commit failed even after retries (the same
    /// consequence as a failed revoke commit, for every partition).
    pub final_commit_failed: bool,
    /// Partitions resumed at an assignment without Kafka's log bounds,
    /// which could not be read (a leader moving): their resume point was
    /// not checked against the log then (the fetch judges it instead).
    pub resumed_unchecked: u64,
    pub first_record_at: Option<Instant>,
    pub last_put_at: Option<Instant>,
}

/// What a finished run reports.
#[derive(Debug)]
pub struct RunReport {
    pub stats: RunStats,
    pub put_to_commit_us: hdrhistogram::Histogram<u64>,
    /// The offsets Kafka held, per partition, as the run ended (read before
    /// the consumer's close, whose revoke forgets them): those this run's
    /// commits had acknowledged, or, where higher, what Kafka held at the
    /// partition's assignment, which may be another store's commit.
    pub committed: BTreeMap<TopicPartition, i64>,
}

/// Observes a commit (as it is sent, or once acknowledged: see
/// [`PipelineOptions`]): (its offsets, what puts had reported durable for
/// those partitions when the commit was chosen).
pub type CommitObserver =
    Box<dyn FnMut(&BTreeMap<TopicPartition, i64>, &BTreeMap<TopicPartition, i64>) + Send>;
/// Decides, after each commit, whether the run is complete.
pub type DonePredicate = Box<dyn FnMut(&BTreeMap<TopicPartition, i64>) -> bool + Send>;
/// Receives every progress report (see `progress.rs`), on the consumer thread.
pub type ProgressObserver = Box<dyn FnMut(&Progress) + Send>;

/// Hooks for embedding (demo, tests).
#[derive(Default)]
pub struct PipelineOptions {
    /// Set to stop cleanly: drain, fsync, commit, close.
    pub stop: Arc<AtomicBool>,
    /// Simulate a crash once this many records were written: right after the
    /// put's fsync, before its commit. The run returns `SimulatedCrash`.
    /// (The demo's and the tests'.)
    #[doc(hidden)]
    pub crash_after_records: Option<u64>,
    /// Called with every commit Kafka acknowledged.
    pub on_commit: Option<CommitObserver>,
    /// Called with each commit's offsets (and what the puts had reported
    /// durable for them) just before the commit is handed to librdkafka:
    /// for checks that must hold when a commit is sent (committed ≤
    /// durable), which [`on_commit`](Self::on_commit), called at the
    /// broker's acknowledgement, would make too late to catch a commit
    /// that overtook its fsync. So it is called before librdkafka is
    /// asked, also for a commit librdkafka then refuses to queue (an
    /// unknown group, a fatal error): a count of calls may pass the
    /// commits sent. Called under the pipeline's lock: keep it quick.
    pub on_commit_sent: Option<CommitObserver>,
    /// Stop cleanly once this returns true for the committed offsets.
    pub done: Option<DonePredicate>,
    /// Every `progress_interval_s`, and once more at a clean stop. Called on
    /// the consumer thread, between polls: keep it quick, and do not panic
    /// (a panic ends the run without its clean stop).
    pub on_progress: Option<ProgressObserver>,
    /// The caller asked Kafka already ([`check_kafka`], as `cairn run`
    /// does before it opens the archive): the pipeline's own check, made
    /// all the same, is logged at debug rather than as a second wait, and
    /// a `stop` set before or during it ends the run as any stop before
    /// the first assignment does (clean, if the sink stops cleanly), not as
    /// one while waiting for Kafka (`StoppedWaiting`).
    pub kafka_checked: bool,
}

/// librdkafka's `max.poll.interval.ms` when it cannot be read.
const MAX_POLL_INTERVAL_MS_DEFAULT: u64 = 300_000;

/// Failpoint: the end-of-partition events of the topic its argument names
/// are not seen (`return(TOPIC)`), as when a stop or a revoke comes before
/// the fetch's event (tests).
#[doc(hidden)]
pub const FAILPOINT_END_UNSEEN: &str = "consumer::end_unseen";

/// The `max.poll.interval.ms` the consumer runs with, as librdkafka reads
/// it (`-X` may give it in any form its `strtol` takes: hex, octal).
pub(crate) fn max_poll_interval(cfg: &RunConfig) -> Duration {
    let ms = client_config(cfg)
        .create_native_config()
        .and_then(|c| c.get("max.poll.interval.ms"))
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_POLL_INTERVAL_MS_DEFAULT);
    Duration::from_millis(ms)
}

/// The consumer thread's state. Only the consumer thread locks it: in the
/// poll loop, and in the rebalance and statistics callbacks that `poll`
/// runs.
pub(crate) struct Shared {
    pub pipeline: Arc<Pipeline>,
    /// Hand-over to the task thread; `None` once the run is over.
    jobs: Option<JobSender>,
    /// Jobs handed over and not yet finished by the task thread.
    in_flight: Arc<AtomicUsize>,
    /// Disconnects when the task thread has exited (after recording why).
    task_exit: mpsc::Receiver<()>,
    pub on_offset_out_of_range: OnOffsetOutOfRange,
    /// `--auto-offset-reset`: where a partition with no offset anywhere starts.
    pub auto_offset_reset: String,
    /// How long reading the log bounds of an assignment (or a reset) may
    /// take, and at most each read of the committed offsets beside it, from
    /// `max.poll.interval.ms` (`retention::bounds_budget`).
    pub bounds_budget: Duration,
    /// This thread's copy of the assignment (the pipeline's is for commits).
    pub assigned: BTreeSet<TopicPartition>,
    /// The last record's partition, and whether it is assigned.
    last_tp: Option<(TopicPartition, bool)>,
    /// A partition's last record taken when it was set aside (skipped or
    /// dead-lettered), not buffered: the repeat check's other half. Kept
    /// until a later record of the partition is buffered or the
    /// partition is assigned or revoked, so it is empty on the hot path.
    set_aside: BTreeMap<TopicPartition, i64>,
    /// A record was dead-lettered in the take under way: it ends after it.
    dead_lettered_in_take: bool,
    /// Each partition's last record handed to the task thread since its
    /// assignment: the repeat check's third half, for a partition whose
    /// buffer was handed over just before the repeat came (until the night
    /// of 2026-12-04 a sink other than the engine's got that record twice).
    /// Set once per partition per hand-over, not per record.
    handed_last: BTreeMap<TopicPartition, i64>,
    pending: BTreeMap<TopicPartition, Vec<Record>>,
    /// Where each partition's fetch caught up with its log end (librdkafka's
    /// end-of-partition event) since the last hand-over, where that is past
    /// the last record taken (or where the partition started), or just past
    /// a record set aside: the offsets between held no record to archive
    /// (transaction markers, an aborted transaction's records, the record
    /// set aside). Handed over after the records buffered with it
    /// (`SinkTask::caught_up`).
    caught_up: BTreeMap<TopicPartition, i64>,
    /// Buffers to copy the next records into (`recycle.rs`).
    stash: crate::recycle::Stash,
    pending_bytes: usize,
    pending_records: usize,
    pending_since: Option<Instant>,
    /// The consumer thread's counters (polled, skipped, bytes).
    stats: RunStats,
    /// The run ended cleanly: the final commit was made before closing.
    pub clean_finish: bool,
    progress: ProgressClock,
    on_progress: Option<ProgressObserver>,
    dead_letters: Option<DeadLetters>,
    /// What is said of records set aside (`set_aside_log.rs`).
    set_aside_log: SetAsideLog,
    /// A statistics callback arrived: report progress (`progress.rs`).
    pub progress_due: bool,
    /// Each assigned partition's log start and end, from librdkafka's last
    /// statistics.
    pub log_bounds: BTreeMap<TopicPartition, LogBounds>,
    /// Where each assigned partition started fetching.
    pub starts: BTreeMap<TopicPartition, Start>,
    /// Where this member stands in its group (the consumer loop warns
    /// while it is not in it).
    pub membership: Membership,
    /// The group's state in librdkafka's last statistics (`up`,
    /// `wait-coord`, …), said by the WARN of a run not in its group.
    pub group_state: Option<String>,
}

/// Where a member stands in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Membership {
    /// The group has assigned it nothing yet, not even an empty set.
    NotYet,
    /// The group has assigned it partitions (or none): it joined.
    Joined,
    /// The group took every partition of it away as lost (its session
    /// timed out, or Kafka went away) and has assigned none since.
    Lost,
}

/// The memory a buffered record holds, as `pending_bytes` counts it: its
/// payload's buffers, plus the record's and each header's own struct. Payload alone
/// would let records of no payload (null key and value, or thousands of
/// empty headers) pass every byte bound for free.
fn held_bytes(r: &Record) -> usize {
    // Capacities, not lengths: a buffer reused for a record (recycle.rs)
    // may be larger than what it holds.
    let bytes = |v: &Option<Vec<u8>>| v.as_ref().map_or(0, Vec::capacity);
    bytes(&r.key)
        + bytes(&r.value)
        + r.headers
            .iter()
            .map(|h| h.name.capacity() + bytes(&h.value))
            .sum::<usize>()
        + std::mem::size_of::<Record>()
        + r.headers.capacity() * std::mem::size_of::<cairn_engine::Header>()
}

/// [`held_bytes`] of buffered records.
fn records_held_bytes(records: &[Record]) -> usize {
    records.iter().map(held_bytes).sum()
}

/// What a partition's buffer holds in memory: its records' [`held_bytes`]
/// and the room it has for more (a `Vec` grows by doubling, and is handed
/// over with its spare room: up to about as much again as its records'
/// own structs, uncounted until 2026-12-05).
fn buffer_held_bytes(records: &Vec<Record>) -> usize {
    records_held_bytes(records)
        + (records.capacity() - records.len()) * std::mem::size_of::<Record>()
}

/// Append `r` to `tp`'s buffer in `pending`; the bytes it added, as
/// [`buffer_held_bytes`] counts them (its spare room included).
fn buffer_push(
    pending: &mut BTreeMap<TopicPartition, Vec<Record>>,
    tp: &TopicPartition,
    r: Record,
) -> usize {
    // Only the record's own buffers and any room the push added: its
    // struct takes a slot already counted as room, or the new room.
    let own = held_bytes(&r) - std::mem::size_of::<Record>();
    let (room_before, room_after) = match pending.get_mut(tp) {
        Some(v) => {
            let room = v.capacity();
            v.push(r);
            (room, v.capacity())
        }
        None => {
            let v = vec![r];
            let room = v.capacity();
            pending.insert(tp.clone(), v);
            (0, room)
        }
    };
    own + (room_after - room_before) * std::mem::size_of::<Record>()
}

fn task_thread_gone() -> ConnectorError {
    ConnectorError::Failed("the task thread (the sink's calls) stopped".into())
}

impl Shared {
    /// Forget what is buffered for `tps` (revoked or lost partitions).
    pub(crate) fn drop_pending(&mut self, tps: &BTreeSet<TopicPartition>) {
        drop(self.take_batches(Some(tps)));
        drop(self.take_caught_up(Some(tps)));
        // Dropped, not handed over.
        for tp in tps {
            self.handed_last.remove(tp);
        }
    }

    /// Take what is buffered (only `only`'s partitions, if given) as batches.
    fn take_batches(&mut self, only: Option<&BTreeSet<TopicPartition>>) -> Vec<RecordBatch> {
        let tps: Vec<TopicPartition> = self
            .pending
            .keys()
            .filter(|tp| only.is_none_or(|o| o.contains(*tp)))
            .cloned()
            .collect();
        let mut batches = Vec::with_capacity(tps.len());
        for tp in tps {
            let records = self.pending.remove(&tp).unwrap_or_default();
            if let Some(r) = records.last() {
                self.handed_last.insert(tp.clone(), r.offset);
            }
            self.pending_records -= records.len();
            self.pending_bytes -= buffer_held_bytes(&records);
            batches.push(RecordBatch { tp, records });
        }
        if self.pending.is_empty() && self.caught_up.is_empty() {
            self.pending_since = None;
        }
        batches
    }

    /// Take where partitions caught up (only `only`'s, if given): handed
    /// over with the batches taken at the same time, after them.
    fn take_caught_up(
        &mut self,
        only: Option<&BTreeSet<TopicPartition>>,
    ) -> BTreeMap<TopicPartition, i64> {
        if self.caught_up.is_empty() {
            return BTreeMap::new();
        }
        let taken = match only {
            None => std::mem::take(&mut self.caught_up),
            Some(o) => {
                let (taken, kept) = std::mem::take(&mut self.caught_up)
                    .into_iter()
                    .partition(|(tp, _)| o.contains(tp));
                self.caught_up = kept;
                taken
            }
        };
        if self.pending.is_empty() && self.caught_up.is_empty() {
            self.pending_since = None;
        }
        taken
    }

    /// `tp`'s last record taken ([`last_taken`]).
    fn last_taken_of(&self, tp: &TopicPartition) -> Option<i64> {
        last_taken(
            self.pending
                .get(tp)
                .and_then(|v| v.last())
                .map(|r| r.offset),
            || self.handed_last.get(tp).copied(),
            self.set_aside.get(tp).copied(),
        )
    }

    /// librdkafka's end-of-partition event `m`: the partition's fetch
    /// reached its log end (for `read_committed`, the last stable offset)
    /// at `m`'s offset, after every record before it in this queue (the
    /// event follows the fetch's records; librdkafka drops one of a fetch
    /// position since changed, `rd_kafka_op_version_outdated`). Kept when
    /// that is past the last record taken of the partition (or, with none
    /// taken since its assignment, past where it started): the offsets
    /// between held no record. Or just past a record set aside (skipped as
    /// oversize, or dead-lettered and acknowledged): it is no record of the
    /// archive's, and committed past, a dead letter that ended its
    /// partition is not sent again at every assignment (since the night of
    /// 2026-12-04). An ordinary topic's partition catches up just past its
    /// last record, and is left out.
    fn reached_end(&mut self, m: &Taken<'_>) {
        #[cfg(feature = "failpoints")]
        if fail::eval(FAILPOINT_END_UNSEEN, |t| t.as_deref() == Some(m.topic())) == Some(true) {
            return;
        }
        let (offset, tp) = (m.offset(), TopicPartition::new(m.topic(), m.partition()));
        if offset < 0 || !self.assigned.contains(&tp) {
            return;
        }
        let last = self.last_taken_of(&tp);
        let past = match last {
            Some(last) if self.set_aside.get(&tp) == Some(&last) => offset > last,
            Some(last) => offset > last.saturating_add(1),
            None => self
                .starts
                .get(&tp)
                .and_then(Start::offset)
                .is_none_or(|o| o < offset),
        };
        tracing::debug!(%tp, offset, past, "caught up with the partition's log end");
        // The fetch reached the log's end at or past where the partition
        // started: that start was in the log (a start past the log's end
        // meets an out-of-range error, never this event). Also at the start
        // itself, an idle partition's: until 2026-12-07 only an end past it
        // confirmed it, so an idle partition resumed unchecked was never
        // committed in that run (found by an audit).
        let confirmed = self.confirm_unchecked_start(&tp, offset);
        if !past && confirmed {
            // Nothing passed, but no put will come to commit the start now
            // confirmed: handed over as a catch-up at it, which the worker
            // follows with a `pre_commit` (`Worker::caught_up`).
            crate::commit::raise(&mut self.caught_up, &tp, offset);
            self.pending_since.get_or_insert_with(Instant::now);
        }
        if past {
            // (Confirmed above: seen in review, 2026-12-05, one resumed
            // unchecked, with no consumed offset, had its catch-up past
            // markers dropped by the worker.)
            crate::commit::raise(&mut self.caught_up, &tp, offset);
            self.pending_since.get_or_insert_with(Instant::now);
        }
    }

    /// Log the progress since the last report and hand it to the observer.
    fn report_progress(&mut self, at_stop: bool) {
        // Before the report, whose counts include them.
        for s in self.set_aside_log.drain(Instant::now()) {
            s.log();
        }
        let progress = {
            let st = self.pipeline.state();
            self.progress.report(
                Instant::now(),
                Snapshot {
                    at_stop,
                    records_written: st.stats.records_written,
                    puts: st.stats.puts,
                    commits: st.stats.commits,
                    records_skipped: self.stats.records_oversize_skipped,
                    records_dead_lettered: self.stats.records_dead_lettered,
                    latency: &st.tracker.put_to_commit_us,
                    assigned: &self.assigned,
                    durable: &st.tracker.durable_latest,
                    committed: &st.tracker.committed,
                    starts: &self.starts,
                    bounds: &self.log_bounds,
                },
            )
        };
        // Handed over before the line is logged: a reader of the log (a
        // test, a supervisor) that then asks the observer's holder (the
        // metrics endpoint) finds the figures the line gives.
        if let Some(f) = self.on_progress.as_mut() {
            f(&progress);
        }
        progress.log();
    }

    /// Where `tp` starts fetching: for its lag before the first put, and
    /// for judging an offset reset that comes before it delivers anything.
    /// `refetch`: the offset this store committed of a partition it lost
    /// records of below it, which a numeric start then refetches up to
    /// ([`Start::Refetch`]).
    pub(crate) fn started_at(&mut self, tp: &TopicPartition, start: Offset, refetch: Option<i64>) {
        let start = match (start, refetch) {
            (Offset::Offset(from), Some(committed)) => Start::Refetch { from, committed },
            (Offset::Offset(o), None) => Start::At(o),
            (Offset::Beginning, _) => Start::Beginning,
            (Offset::End, _) => Start::End,
            _ => return,
        };
        self.starts.insert(tp.clone(), start);
    }

    /// Buffer one record taken, if its partition is ours.
    fn accept(&mut self, m: &Taken<'_>, cfg: &RunConfig) -> Result<()> {
        // Records come in runs of one partition: compare with the last one
        // rather than build (allocate) and look up a TopicPartition each.
        let same = self
            .last_tp
            .as_ref()
            .is_some_and(|(tp, _)| tp.partition == m.partition() && tp.topic == m.topic());
        if !same {
            let tp = TopicPartition::new(m.topic(), m.partition());
            // Records of a partition revoked since they were fetched are not
            // ours to archive.
            let ours = self.assigned.contains(&tp);
            self.last_tp = Some((tp, ours));
        }
        let Some((tp, true)) = &self.last_tp else {
            return Ok(());
        };
        // A record at or below the last one taken of its partition
        // (buffered, handed over, or set aside) is a repeat: librdkafka
        // can deliver one twice when a pause (a
        // cooperative rebalance beginning) is served between the take of a
        // record and its position's update. Buffered twice, the put would
        // be refused (offsets must go up) and the run stop; one repeating
        // the last record handed over would reach the sink twice (the
        // engine's sink drops it as a duplicate; another may not).
        // Or set aside last: a repeat of a dead-lettered record would be
        // sent again, and counted twice.
        let last = self.last_taken_of(tp);
        if let Some(last) = last.filter(|&last| m.offset() <= last) {
            // The race repeats the last record; anything lower is not
            // expected, and said.
            if m.offset() < last {
                tracing::warn!(%tp, offset = m.offset(), "a record below the last one taken of its partition, taken again: dropped (the engine would drop it as a duplicate too)");
            } else {
                tracing::debug!(%tp, offset = m.offset(), "a record taken again: dropped");
            }
            return Ok(());
        }
        let stash = &mut self.stash;
        let r = match m.to_record_with(|bytes| stash.copy(bytes)) {
            Ok(r) => r,
            Err(detail) => {
                self.stats.records_polled += 1;
                if cfg.on_oversize == OnOversize::Skip {
                    self.set_aside_log
                        .note(
                            SetAsideKind::UnreadableSkipped,
                            tp,
                            m.offset(),
                            0,
                            Instant::now(),
                        )
                        .say(|warn| {
                            if warn {
                                tracing::warn!(%tp, offset = m.offset(), %detail, "skipping a record that cannot be archived (more of this partition are counted, and said together within 10 s)");
                            } else {
                                tracing::debug!(%tp, offset = m.offset(), %detail, "skipping a record that cannot be archived");
                            }
                        });
                    self.stats.records_oversize_skipped += 1;
                    let tp = tp.clone();
                    self.set_aside(tp, m.offset(), last.is_none());
                    return Ok(());
                }
                // Dead-lettering would drop its headers: it stops the run,
                // with nothing at or after it archived or committed.
                return Err(ConnectorError::UnreadableRecord {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    offset: m.offset(),
                    detail,
                });
            }
        };
        self.stats.records_polled += 1;
        self.stats.first_record_at.get_or_insert_with(Instant::now);
        let size = r.payload_bytes();
        // Too many headers is oversize too: the engine refuses such a record
        // (it could not be read back, engine record.rs), so it takes the
        // same way out as one over --record-bytes-max.
        let headers = r.headers.len();
        let too_many_headers = headers > HEADERS_PER_RECORD_MAX;
        if size > cfg.record_bytes_max || too_many_headers {
            let reason = if too_many_headers {
                format!("{headers} headers, over the {HEADERS_PER_RECORD_MAX} a record may carry")
            } else {
                format!(
                    "{size} bytes, over --record-bytes-max {}",
                    cfg.record_bytes_max
                )
            };
            match cfg.on_oversize {
                OnOversize::Fail if too_many_headers => {
                    return Err(ConnectorError::RecordRefused(
                        cairn_engine::InvalidInput::TooManyHeaders {
                            topic: tp.topic.clone(),
                            partition: tp.partition,
                            offset: r.offset,
                            count: headers,
                            max: HEADERS_PER_RECORD_MAX,
                        },
                    ))
                }
                OnOversize::Fail => {
                    return Err(ConnectorError::OversizeRecord {
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                        offset: r.offset,
                        size_bytes: size,
                        max_bytes: cfg.record_bytes_max,
                    })
                }
                OnOversize::Skip => {
                    self.set_aside_log
                        .note(
                            SetAsideKind::OversizeSkipped,
                            tp,
                            r.offset,
                            size,
                            Instant::now(),
                        )
                        .say(|warn| {
                            if warn {
                                tracing::warn!(%tp, offset = r.offset, size_bytes = size, headers, %reason, "skipping oversize record (more of this partition are counted, and said together within 10 s)");
                            } else {
                                tracing::debug!(%tp, offset = r.offset, size_bytes = size, headers, %reason, "skipping oversize record");
                            }
                        });
                    self.stats.records_oversize_skipped += 1;
                    let tp = tp.clone();
                    self.set_aside(tp, r.offset, last.is_none());
                    return Ok(());
                }
                OnOversize::DeadLetter => {
                    let tp = tp.clone();
                    // Acknowledged before the next record is taken: no
                    // commit can pass it unless Kafka holds it.
                    self.dead_letters
                        .as_ref()
                        .expect("validated: dead-letter has a topic")
                        .send(&tp, &r, &reason)?;
                    self.set_aside_log
                        .note(
                            SetAsideKind::DeadLettered,
                            &tp,
                            r.offset,
                            size,
                            Instant::now(),
                        )
                        .say(|warn| {
                            if warn {
                                tracing::warn!(%tp, offset = r.offset, size_bytes = size, headers, %reason, "oversize record dead-lettered (more of this partition are counted, and said together within 10 s)");
                            } else {
                                tracing::debug!(%tp, offset = r.offset, size_bytes = size, headers, %reason, "oversize record dead-lettered");
                            }
                        });
                    self.stats.records_dead_lettered += 1;
                    self.dead_lettered_in_take = true;
                    self.set_aside(tp, r.offset, last.is_none());
                    return Ok(());
                }
            }
        }
        if !self.set_aside.is_empty() {
            self.set_aside.remove(tp);
        }
        self.stats.payload_bytes += size;
        self.pending_bytes += buffer_push(&mut self.pending, tp, r);
        self.pending_records += 1;
        self.pending_since.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// `tp`'s record at `offset` is set aside (skipped, or dead-lettered
    /// and acknowledged). `first`: nothing of `tp` was taken before it
    /// since its assignment. A partition that started at a logical offset
    /// (the log's beginning or end, resolved by librdkafka) has no consumed
    /// offset until a put, and the worker passed over its catch-up past
    /// the records set aside; one holding only such records was then never
    /// recorded past them, and each assignment read them again (dead
    /// letters sent again; seen in review, 2026-12-05). Its first record
    /// taken is where its fetch began in the log: the offsets below it
    /// hold nothing for this run, so it has consumed up to there.
    ///
    /// The partition is caught up just past it at once, as a record taken
    /// after it would carry it: a stop or a revoke that comes before the
    /// fetch's end-of-partition event (or the next record) then commits
    /// past it too, and a dead letter that ended its partition is not sent
    /// again by the next run or owner (until 2026-12-06 only that event
    /// carried it).
    fn set_aside(&mut self, tp: TopicPartition, offset: i64, first: bool) {
        if first && matches!(self.starts.get(&tp), Some(Start::Beginning | Start::End)) {
            self.consumed_from(&tp, offset);
        }
        // A partition resumed unchecked (its bounds unread): a record
        // fetched from its start shows that start was in the log, as its
        // end-of-partition event would.
        if first {
            self.confirm_unchecked_start(&tp, offset.saturating_add(1));
        }
        crate::commit::raise(&mut self.caught_up, &tp, offset.saturating_add(1));
        self.pending_since.get_or_insert_with(Instant::now);
        self.set_aside.insert(tp, offset);
    }

    /// `tp`, still assigned and with no consumed offset yet, has consumed
    /// nothing at or past `offset`: its consumed offset (where its start is
    /// known to be in the log).
    /// Whether it did (none was there).
    fn consumed_from(&self, tp: &TopicPartition, offset: i64) -> bool {
        let mut st = self.pipeline.state();
        let absent = st.assigned.contains(tp) && !st.consumed.contains_key(tp);
        if absent {
            st.consumed.insert_if_absent(tp, offset);
        }
        absent
    }

    fn full(&self, cfg: &RunConfig) -> bool {
        self.pending_records >= cfg.batch_records_max || self.pending_bytes >= cfg.batch_bytes_max
    }

    /// The assignment changed: forget the last partition's lookup.
    pub(crate) fn assignment_changed(&mut self, changed: &[TopicPartition]) {
        self.last_tp = None;
        // A partition assigned again restarts where the archive says: a
        // record set aside there is taken anew, as the first time. Only
        // the partitions that changed: a cooperative rebalance's pause,
        // which the repeat follows, comes with one of these for the
        // others.
        for tp in changed {
            self.set_aside.remove(tp);
            self.handed_last.remove(tp);
        }
    }

    /// Queue a job for the task thread, first waiting for room for it.
    fn send(&self, job: Job) -> Result<()> {
        let jobs = self.jobs.as_ref().ok_or_else(task_thread_gone)?;
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        jobs.send(job).map_err(|()| {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.task_failure()
        })
    }

    /// Run a job on the task thread and wait for its answer.
    pub(crate) fn request<T>(&self, job: impl FnOnce(Reply<T>) -> Job) -> Result<T> {
        let (tx, rx) = mpsc::channel();
        self.send(job(tx))?;
        rx.recv().map_err(|_| self.task_failure())?
    }

    /// The task thread went away mid-job: wait until it has exited (and
    /// recorded why), then report that reason.
    fn task_failure(&self) -> ConnectorError {
        let _ = self.task_exit.recv();
        self.pipeline.take_fatal().unwrap_or_else(task_thread_gone)
    }

    /// The task thread has nothing to do: a batch handed over now is put now.
    fn task_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// librdkafka found a position Kafka no longer has (its
    /// `auto.offset.reset` is `error`) and stopped fetching that partition
    /// until it is assigned again. An error from the run's queue names its
    /// partition, and only the partitions named are judged (`scope`); one
    /// from the consumer queue does not (rust-rdkafka drops the partition),
    /// and then every assigned partition is. A partition not judged goes
    /// on where it is: its position may already be below a log start that
    /// retention moved while its next records wait, fetched, in the run's
    /// queue, and moving it would throw those records away.
    ///
    /// Each judged partition's position (or, if it delivered nothing yet,
    /// the offset it started from) is checked against Kafka's log
    /// (retention.rs; one refetching what this store lost, from its commit
    /// on: `Start::Refetch`). A partition out of the log starts again where
    /// the policy says; one whose bounds cannot be read, or that started at
    /// the log start and delivered nothing, starts again where it is (which
    /// costs a re-fetch, nothing more). A judged partition whose position is
    /// in the log starts again where it is too (unless no error named a
    /// partition and another was out of the log, which explains it): the error was stale (a
    /// second error about one already restarted) or came from a fetch the
    /// check cannot see (a log end cut back below librdkafka's fetch
    /// position, fetching from a follower), and it must not stay stopped.
    /// An error about a partition no longer assigned is stale: nothing is
    /// restarted.
    ///
    /// Restarting assigns outside the rebalance callback, and librdkafka
    /// takes an `(incremental_)(un)assign` made while a rebalance waits on
    /// the consumer queue as the application's answer to it: a revoke
    /// would end before its callback flushed and committed, and the group
    /// could give the partition to another member while this one goes on
    /// archiving it. So the caller serves waiting events first, and
    /// `events_waiting` is asked again right before the restart: if one
    /// came meanwhile, nothing is restarted and `false` says to try again
    /// after serving it (the caller asks once: see `consume`).
    fn offset_reset(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        scope: &ResetScope,
        events_waiting: &dyn Fn() -> bool,
    ) -> Result<bool> {
        // Put what was polled first: `consumed` is then where every
        // partition goes on, and a partition fetched again cannot bring a
        // record into the buffer twice.
        self.flush(None)?;
        let positions = retention::positions(consumer)?;
        let assigned: Vec<TopicPartition> = self.assigned.iter().cloned().collect();
        let judged: Vec<TopicPartition> = assigned
            .iter()
            .filter(|tp| scope.covers(tp))
            .cloned()
            .collect();
        if judged.is_empty() {
            tracing::info!(
                "the reset error was about partitions no longer assigned here: nothing to restart"
            );
            return Ok(true);
        }
        let policy = self.on_offset_out_of_range;
        let mut bounds = retention::Bounds::new(consumer, judged, self.bounds_budget);
        let starts = &self.starts;
        let pipeline = &self.pipeline;
        let reset::Plan {
            restart,
            going_on,
            moved,
            unexplained,
        } = reset::plan(
            &assigned,
            scope,
            |tp| {
                let consumed = pipeline.state().consumed.get(tp).copied();
                reset::place(positions.get(tp).copied(), consumed, starts.get(tp).copied())
                    // Every assignment records each partition's start
                    // (rebalance.rs), never librdkafka's read of the
                    // committed offset.
                    .ok_or_else(|| {
                        ConnectorError::Failed(format!(
                            "BUG: {tp} was assigned with no start recorded: stopping rather than guess where it fetches from"
                        ))
                    })
            },
            |tp, at| {
                let archived_below = starts.get(tp).and_then(Start::archived_below);
                retention::standing(&mut bounds, tp, at, archived_below, policy)
            },
        )?;
        if !unexplained.is_empty() {
            tracing::warn!(partitions = ?unexplained.iter().map(ToString::to_string).collect::<Vec<_>>(), "a reset error no position explains: its partitions fetch again from where they are");
        }
        if restart.is_empty() {
            return Ok(true);
        }
        // The archive records each move before the fetch goes on from it;
        // before the check for events, as that wait could let one in. If
        // one came, the moved partitions are restarted at their next try
        // (or revoked, and committed) where the archive now says.
        let moves: BTreeMap<TopicPartition, i64> = moved.iter().cloned().collect();
        self.record_moves(&moves)?;
        // A new start only where the fetch moves: one restarted where it
        // is keeps its start (for a partition that delivered records, the
        // position would hide from its lag what is handed over and not yet
        // durable). Set with the move's record, before the check for
        // events: a retry after one judges the partition from there.
        for (tp, to) in moved {
            let refetch = self.starts.get(&tp).and_then(Start::archived_below);
            self.started_at(&tp, Offset::Offset(to), refetch);
        }
        if events_waiting() {
            tracing::debug!(
                "an event came while checking retention: serving it before restarting fetches"
            );
            return Ok(false);
        }
        retention::restart_fetch(consumer, &restart, &going_on)?;
        Ok(true)
    }

    /// Hand the whole buffer over as one put.
    fn hand_over(&mut self) -> Result<()> {
        // The poll phase of this batch: from its first record to now.
        let poll_us = self
            .pending_since
            .map_or(0, |t| t.elapsed().as_micros() as u64);
        // The whole buffer is taken: the memory it holds is the put's.
        let bytes = self.pending_bytes;
        let batches = self.take_batches(None);
        let caught_up = self.take_caught_up(None);
        if batches.is_empty() && caught_up.is_empty() {
            return Ok(());
        }
        let records: usize = batches.iter().map(|b| b.records.len()).sum();
        let t0 = Instant::now();
        self.send(Job::Put {
            batches,
            caught_up,
            poll_us,
            // Never 0 (the queue's budget counts a put as at least a byte).
            bytes: bytes.max(1),
        })?;
        // Time spent waiting for room in the queue: the backpressure.
        tracing::debug!(
            records,
            wait_us = t0.elapsed().as_micros() as u64,
            "hand-over"
        );
        Ok(())
    }

    /// A partition resumed unchecked (its bounds unreadable at the
    /// assignment) has no consumed offset, so that its unchecked start is
    /// not committed before a put. A catch-up or a move of it is raised
    /// only after this (the worker takes one above 0 of a partition with
    /// no consumed offset, for a partition that started at the log's
    /// start). Once its start is known to be in the log (its
    /// bounds read at a reset, or its fetch at the log's end `to`, the
    /// start itself included), it has consumed nothing past where it
    /// started: that is its consumed offset.
    /// Whether that made a consumed offset.
    fn confirm_unchecked_start(&self, tp: &TopicPartition, to: i64) -> bool {
        match self.starts.get(tp).and_then(Start::offset) {
            Some(o) if o <= to => self.consumed_from(tp, o),
            _ => false,
        }
    }

    /// Record, durably, that `moved`'s partitions go on at the offset
    /// given, past records that aged out of Kafka before they were archived
    /// (`--on-offset-out-of-range earliest` moved them): the offsets
    /// between hold no record for this run (`SinkTask::caught_up`). Put
    /// first with what is buffered of them, and waited for, so that the
    /// move is in the archive before their fetch goes on: a partition whose
    /// log retention emptied brings no record to carry it, and until
    /// 2026-12-05 every later start judged and logged the same range again,
    /// Kafka's commit stayed below the log start, and a run under `fail`
    /// stopped for the range `earliest` had accepted. A partition the
    /// worker finds already past its offset is left as it is.
    pub(crate) fn record_moves(&mut self, moved: &BTreeMap<TopicPartition, i64>) -> Result<()> {
        if moved.is_empty() {
            return Ok(());
        }
        // Its bounds are read now (seen in review, 2026-12-05).
        for (tp, &to) in moved {
            self.confirm_unchecked_start(tp, to);
        }
        for (tp, &to) in moved {
            crate::commit::raise(&mut self.caught_up, tp, to);
        }
        let only: BTreeSet<TopicPartition> = moved.keys().cloned().collect();
        self.flush(Some(&only))
    }

    /// Put what is buffered (only `only`'s partitions, if given) and wait
    /// until it, and every put handed over before it, is written and
    /// `pre_commit` has answered once (what it declared safe is what the
    /// caller commits: a sink that buffers may declare less).
    pub(crate) fn flush(&mut self, only: Option<&BTreeSet<TopicPartition>>) -> Result<()> {
        self.flush_as(only, false)
    }

    /// [`Self::flush`] of everything, as the run's last: the sink is asked
    /// nothing more after it but `close` and `stop`.
    fn flush_last(&mut self) -> Result<()> {
        self.flush_as(None, true)
    }

    fn flush_as(&mut self, only: Option<&BTreeSet<TopicPartition>>, last: bool) -> Result<()> {
        let batches = self.take_batches(only);
        let caught_up = self.take_caught_up(only);
        self.request(|reply| Job::Flush {
            batches,
            caught_up,
            last,
            reply,
        })
    }
}

/// The error a run ends with when its check of Kafka failed: the client's
/// last error beside it, and a stop while waiting for Kafka stops the sink
/// first.
fn preflight_failed(
    e: ConnectorError,
    consumer: &BaseConsumer<SinkContext>,
    mut sink: Box<dyn SinkTask>,
) -> ConnectorError {
    let e = with_last_client_error(e, consumer, |c| &c.last_cause);
    match e {
        // The stop may have come from beside the run (a failed retention
        // pass, a live request that poisoned the archive): the sink's clean
        // stop reports that, not a signal.
        ConnectorError::StoppedWaiting { .. } => match sink.stop() {
            Ok(()) => e,
            Err(failure) => crate::worker::sink_error("stop", &failure),
        },
        e => e,
    }
}

/// Build the consumer configuration. Auto-commit and the auto offset store
/// are off: committing is this loop's job, and only after fsync.
pub fn client_config(cfg: &RunConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers)
        .set("group.id", &cfg.group)
        // Never let librdkafka commit on its own: it would commit offsets
        // that are not durable yet.
        .set("enable.auto.commit", "false")
        // Nothing is stored for commit implicitly; we commit explicit lists.
        .set("enable.auto.offset.store", "false")
        // librdkafka never moves a position on its own: a position Kafka no
        // longer has is an error that retention.rs decides on, rather than
        // a silent gap in the archive. Partitions with no offset anywhere
        // get an explicit start from `--auto-offset-reset` instead.
        .set("auto.offset.reset", "error")
        // The end-of-partition event says where a partition's fetch caught
        // up, past offsets that held no record (transaction markers): the
        // archive records it, so that they are committed and never read as
        // records that aged out of Kafka (`SinkTask::caught_up`).
        .set("enable.partition.eof", "true")
        // Incremental rebalancing: a member gives up a partition, and commits
        // its durable offset, while the group is stable, before another
        // member is handed it. Under the eager protocol the revoke happens
        // while the group is re-joining, and brokers that refuse commits in
        // that state (librdkafka's mock cluster does) leave the next owner
        // to re-archive the uncommitted tail. `-X` may choose eager anyway.
        .set("partition.assignment.strategy", "cooperative-sticky")
        // Statistics drive the progress reports (progress.rs).
        .set(
            "statistics.interval.ms",
            cfg.progress_interval_s.saturating_mul(1000).to_string(),
        )
        // librdkafka's default (1000 ms) postpones the next fetch whenever the
        // prefetch queue is over its thresholds. A loop that drains the queue
        // in bursts between fsyncs then sits idle for up to a second with
        // nothing to poll: measured here, it cut archiving from ~400k to
        // ~120k records/s (docs/BENCHMARKS.md).
        .set("fetch.queue.backoff.ms", "10")
        // A record batch damaged on the broker's disk or on the wire would
        // otherwise be archived under the engine's fresh, valid checksums:
        // librdkafka checks a batch's CRC-32C only when asked, and a failed
        // check stops the run (`stops_the_run`). `-X check.crcs=false` may
        // turn it off (docs/BENCHMARKS.md has its cost).
        .set("check.crcs", "true");
    crate::librdkafka::set_kafka(&mut c, &cfg.kafka, &[]);
    c
}

/// What a client made only to check Kafka ([`check_kafka`]) keeps:
/// librdkafka's log lines go to `tracing`, and its errors' cause is kept.
#[derive(Default)]
pub(crate) struct CheckContext {
    pub(crate) last_cause: crate::librdkafka::LastCause,
}

impl rdkafka::ClientContext for CheckContext {
    /// Configuration warnings at debug: the run's own consumer, made
    /// from the same settings, gives them right after.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        crate::librdkafka::log_ignoring_confwarn(&self.last_cause, level, fac, message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        crate::librdkafka::say_client_error(&self.last_cause, &error, reason);
    }

    /// The statistics `client_config` asks for (progress reports) are the
    /// run's consumer's business: dropped, not logged.
    fn stats_raw(&self, _statistics: &[u8]) {}
}

impl ConsumerContext for CheckContext {}

/// Check that the brokers answer and that every topic exists, as
/// [`run_pipeline`] does first, with a client of its own that joins no
/// group. `cairn run` asks it before it opens the archive (since
/// 2026-12-04): the open may recover, upgrade the store's format (which
/// older builds then refuse) and prune it, none of which a mistyped broker
/// or topic should set off.
pub fn check_kafka(cfg: &RunConfig, stop: &AtomicBool) -> Result<()> {
    let consumer: BaseConsumer<CheckContext> = client_config(cfg)
        .create_with_context(CheckContext::default())
        .map_err(ConnectorError::client_settings("kafka client"))?;
    tracing::info!(brokers = %cfg.brokers, connect_timeout_ms = cfg.connect_timeout_ms, "waiting for Kafka to answer, before the archive is opened");
    let t0 = Instant::now();
    // The client's queue is served while the check waits: rust-rdkafka
    // queues librdkafka's log lines and errors there (`log.queue`), and
    // nothing else serves it until the wait ends, so a refused connection
    // was said only after the whole connect timeout (10 s by default);
    // now as it happens (since 2026-12-07, found in review). Each kind
    // once (`LastCause`).
    // Errors are said by the context as they are served; the check joins
    // no group, so no record comes.
    let checked = crate::librdkafka::serving_queue(
        || {
            let _ = consumer.poll(Duration::from_millis(50));
        },
        || preflight(&consumer, cfg, stop),
    );
    checked.map_err(|e| with_last_client_error(e, &consumer, |c| &c.last_cause))?;
    crate::librdkafka::stopped_while_checking(stop.load(Ordering::Relaxed), &cfg.brokers, t0)
}

/// Check the brokers answer and every topic exists, within the connect timeout.
pub fn preflight<X: ConsumerContext, C: Consumer<X>>(
    consumer: &C,
    cfg: &RunConfig,
    stop: &AtomicBool,
) -> Result<()> {
    let md = crate::librdkafka::cluster_metadata(
        consumer.client(),
        &cfg.brokers,
        Duration::from_millis(cfg.connect_timeout_ms),
        &|| stop.load(Ordering::Relaxed),
    )?;
    let named = cfg.topics.iter().map(|t| (t, "--topics")).chain(
        cfg.dead_letter_topic
            .iter()
            .map(|t| (t, "--dead-letter-topic")),
    );
    // Every topic missing is said at once (until 2026-12-07 the first
    // alone, and each fix met the next; found by an audit).
    let mut unknown: Vec<(&String, &str)> = Vec::new();
    for (t, flag) in named {
        let listed = md.topics().iter().find(|mt| mt.name() == t);
        // Kafka lists a topic it does not have with an error of its own,
        // and so one it cannot serve yet (being created: no leader).
        let unavailable = listed
            .and_then(|mt| mt.error())
            .filter(|e| crate::librdkafka::topic_not_ready(*e));
        if let Some(e) = unavailable {
            return Err(ConnectorError::TopicUnavailable {
                topic: t.clone(),
                named_by: format!(" (given to {flag})"),
                brokers: cfg.brokers.clone(),
                why: rdkafka::error::RDKafkaErrorCode::from(e).to_string(),
            });
        }
        let found = listed.is_some_and(|mt| mt.error().is_none() && !mt.partitions().is_empty());
        if !found {
            unknown.push((t, flag));
        }
    }
    let Some(((t, flag), others)) = unknown.split_first() else {
        return Ok(());
    };
    let nor = if others.is_empty() {
        String::new()
    } else {
        let others = others
            .iter()
            .map(|(t, flag)| format!("{t:?} (given to {flag})"));
        let verb = if others.len() == 1 { "does" } else { "do" };
        format!("nor {verb} {}; ", crate::selection::first_few(others))
    };
    Err(ConnectorError::UnknownTopic {
        topic: (*t).clone(),
        brokers: cfg.brokers.clone(),
        // Kafka lists a topic this client may not describe as unknown
        // too (or leaves it out of a list of all topics).
        next_step: format!(
            "{nor}check the name given to {flag}, the brokers, and that this client may describe the topic (its ACLs)"
        ),
    })
}

/// Brokers that did not answer: the metadata request's own error is
/// librdkafka's bare "transport failure" for every cause, so the client's
/// last error, which names it (a refused connection, a failed TLS
/// handshake, credentials the brokers refuse), goes with it. Nothing polled
/// the consumer yet: the error events waiting are served first (at most
/// [`EVENTS_PER_PASS_MAX`] of them; the run is over, and nothing else
/// waits there before the subscription).
pub(crate) fn with_last_client_error<X: ConsumerContext>(
    e: ConnectorError,
    consumer: &BaseConsumer<X>,
    last_cause: impl Fn(&X) -> &crate::librdkafka::LastCause,
) -> ConnectorError {
    if !matches!(e, ConnectorError::BrokerUnreachable { .. }) {
        return e;
    }
    // `poll` answers `None` also for an event it served itself (a log
    // line): no early end.
    for _ in 0..EVENTS_PER_PASS_MAX {
        let _ = consumer.poll(Duration::ZERO);
    }
    crate::librdkafka::with_cause(e, last_cause(consumer.context()))
}

/// Lock `m`, also after a panic while it was held: the connector's
/// critical sections leave their state whole before anything can panic
/// (a panic there is an invariant assertion, which fails the run anyway).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run the loop until stopped, done, a fatal error, or a simulated crash.
///
/// Blocking: call it from a thread of its own (`cairn run` uses tokio's
/// blocking pool). The committer runs on a tokio runtime of its own with
/// one worker (multi-thread: its `block_in_place` panics on a
/// `current_thread` one), whatever runtime the caller runs in.
///
/// An error that stops the loop is returned and not logged at ERROR by the
/// loop (its text is at DEBUG): log or show it as the caller's own.
///
/// Every return, a clean stop included, is followed by one ERROR line of
/// rust-rdkafka's, target `rdkafka::consumer::base_consumer` ("Failed to
/// close consumer queue on drop"): its consumer closes the queue again as
/// it is dropped, after the loop closed it cleanly, and logs that second
/// close's failure through the `log` crate. It means nothing; the `cairn`
/// binary filters that target's ERROR out, and an embedder's logger may do
/// the same.
pub fn run_pipeline(
    cfg: &RunConfig,
    sink: Box<dyn SinkTask>,
    opts: PipelineOptions,
) -> Result<RunReport> {
    cfg.validate()?;
    // The committer's own runtime (one worker, timers on), whatever runtime
    // the caller runs in: its retry backoff needs tokio's timer. Built first,
    // so that a failure leaves no consumer or task thread behind.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("cairn-commit")
        .enable_time()
        .build()
        .map_err(|e| ConnectorError::Failed(format!("cannot start the committer: {e}")))?;
    // An empty name is Kafka's default commit metadata (a reset with
    // kafka-consumer-groups, most clients' commits): every such commit would
    // read as this store's own, and a reset forward be undone (until
    // 2026-12-07 taken; found by an audit).
    let identity = sink.identity();
    if identity.as_deref().is_some_and(|i| i.trim().is_empty()) {
        return Err(ConnectorError::Config(
            "the sink's identity is empty: Kafka commits with empty metadata by default (a reset with kafka-consumer-groups, other clients), and those would read as this store's own; give it a name, or None".into(),
        ));
    }
    let pipeline = Arc::new(Pipeline::new(
        opts.on_commit,
        opts.on_commit_sent,
        opts.done,
        identity,
        sink.durable_check(),
    ));
    // Puts wait here while the task thread is busy (queue.rs). Under
    // `interval:MS` up to a full batch's bytes: polling goes on through the
    // periodic fsync. Under `every-put` one put: each put pays its own fsync,
    // so a deeper queue would add latency and no throughput.
    let queue_bytes_max = match cfg.commit {
        CommitPolicy::EveryPut => 0,
        CommitPolicy::Interval(_) => cfg.batch_bytes_max,
    };
    let (jobs_tx, jobs_rx, budget) = queue::bounded(queue_bytes_max);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let (task_exit_tx, task_exit) = mpsc::channel::<()>();
    let dead_letters = DeadLetters::new(cfg)?;
    let shared = Arc::new(Mutex::new(Shared {
        pipeline: pipeline.clone(),
        jobs: Some(jobs_tx),
        in_flight: in_flight.clone(),
        task_exit,
        on_offset_out_of_range: cfg.on_offset_out_of_range,
        auto_offset_reset: cfg.auto_offset_reset.clone(),
        bounds_budget: retention::bounds_budget(max_poll_interval(cfg)),
        assigned: BTreeSet::new(),
        last_tp: None,
        set_aside: BTreeMap::new(),
        dead_lettered_in_take: false,
        handed_last: BTreeMap::new(),
        pending: BTreeMap::new(),
        caught_up: BTreeMap::new(),
        stash: Default::default(),
        pending_bytes: 0,
        pending_records: 0,
        pending_since: None,
        stats: RunStats::default(),
        clean_finish: false,
        progress: ProgressClock::new(),
        on_progress: opts.on_progress,
        dead_letters,
        set_aside_log: SetAsideLog::default(),
        progress_due: false,
        log_bounds: BTreeMap::new(),
        starts: BTreeMap::new(),
        membership: Membership::NotYet,
        group_state: None,
    }));
    let consumer: BaseConsumer<SinkContext> = client_config(cfg)
        .create_with_context(SinkContext {
            shared: shared.clone(),
            forwarder: Mutex::new(None),
            last_error: Mutex::new(None),
            last_cause: Default::default(),
        })
        .map_err(ConnectorError::client_settings("kafka client"))?;
    if opts.kafka_checked {
        tracing::debug!(brokers = %cfg.brokers, "asking Kafka again, from the run's own consumer");
    } else {
        tracing::info!(brokers = %cfg.brokers, connect_timeout_ms = cfg.connect_timeout_ms, "waiting for Kafka to answer");
    }
    match preflight(&consumer, cfg, &opts.stop) {
        Ok(()) => {}
        // Kafka answered the caller's own check before (`kafka_checked`:
        // `cairn run` asks, then opens the archive): a stop asked for since
        // (a signal during the open, whose recovery or upgrade can take
        // minutes, or during this check) is no stop while waiting for
        // Kafka, and ends the run below as any stop before the first
        // assignment does, cleanly, before anything is fetched; until
        // 2026-12-06 it ended here, exit 130, saying nothing was archived
        // (found by an audit).
        Err(ConnectorError::StoppedWaiting { .. }) if opts.kafka_checked => {
            tracing::debug!("stopped during the pipeline's own check of Kafka: stopping cleanly");
        }
        Err(e) => {
            return Err(match preflight_failed(e, &consumer, sink) {
                // Not the address or its settings, which Kafka took at the
                // caller's check: it went away since (until 2026-12-06 the
                // error said to check them; found by an audit).
                ConnectorError::BrokerUnreachable {
                    brokers,
                    waited_ms,
                    detail,
                } if opts.kafka_checked => ConnectorError::KafkaGone {
                    brokers,
                    waited_ms,
                    detail,
                },
                e => e,
            });
        }
    }
    let topics: Vec<&str> = cfg.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(ConnectorError::kafka("subscribe"))?;

    let worker = Worker {
        sink,
        pipeline: pipeline.clone(),
        policy: cfg.commit,
        crash_after_records: opts.crash_after_records,
        stop: opts.stop.clone(),
        in_flight,
        budget: budget.clone(),
        unsafe_puts: false,
        flushed_last: false,
        reask: None,
        reask_min: crate::worker::REASK_MIN,
        last_pre_commit: Instant::now(),
        revoke_retry: crate::worker::revoke_retry(max_poll_interval(cfg)),
    };
    let task_thread = std::thread::Builder::new()
        .name("cairn-task".into())
        .spawn({
            let pipeline = pipeline.clone();
            move || {
                // Dropped last, when the reason for exiting is recorded.
                let _exit = task_exit_tx;
                // A panic here is the sink's, or an invariant assertion of
                // the loop's own: stop, and commit nothing more, even if no
                // further record arrives to find the thread gone. (A sink
                // declaring more than it was handed is an error of its
                // own, `SinkOverclaimed`, since 2026-12-05.)
                let run = std::panic::AssertUnwindSafe(|| worker.run(jobs_rx));
                // The error names what panicked (the panic's message), not
                // only that something did (until the night of 2026-12-04).
                if let Err(payload) = std::panic::catch_unwind(run) {
                    pipeline.fail(panicked("task", &*payload));
                }
                // Nobody takes jobs any more: wake a sender waiting for room.
                budget.close();
            }
        })
        .map_err(|e| ConnectorError::Failed(format!("cannot start the task thread: {e}")))?;

    let consumer = Arc::new(consumer);
    let (committer_done_tx, committer_done_rx) = mpsc::channel::<()>();
    runtime.spawn({
        let (p, c) = (pipeline.clone(), consumer.clone());
        async move {
            crate::committer::run(p, c).await;
            let _ = committer_done_tx.send(());
        }
    });

    // SAFETY: `fetch` is dropped at the end of the closure, before the
    // consumer closes below.
    #[allow(unsafe_code)]
    let fetch = unsafe { Fetch::new(&consumer) };
    let outcome = fetch
        .and_then(|fetch| {
            // The rebalance callback forwards each partition assigned from
            // now on (fetch.rs).
            *consumer.context().forwarder() = Some(fetch.forwarder());
            // A panic on this thread (an invariant assertion in a revoke's
            // or the final commit, served inside `poll`, or an embedder's
            // commit observer) fails the run as the task thread's does:
            // unwound past this, it skipped closing commits, and the
            // consumer's drop then served the revoke again, committing
            // (until the night of 2026-12-04).
            let run = std::panic::AssertUnwindSafe(|| {
                consume(&consumer, &shared, cfg, &opts.stop, &fetch)
                    .and_then(|()| finish(&shared, &consumer))
            });
            let r = std::panic::catch_unwind(run).unwrap_or_else(|payload| {
                pipeline.fail(panicked("consumer", &*payload));
                Err(panicked("consumer", &*payload))
            });
            // The queue goes with `fetch`, before the consumer closes. An
            // assignment served while closing is neither archived nor
            // forwarded, and is no failure.
            consumer.context().forwarder().take();
            r
        })
        // A fatal error recorded while the finish ran (the first one wins)
        // is the cause; the finish's own error is its consequence.
        .map_err(|e| pipeline.take_fatal().unwrap_or(e));
    // After a clean finish everything durable is committed; after a crash
    // or a fatal error nothing more may be. Either way the revoke that
    // closing the consumer triggers commits nothing.
    pipeline.close_commits();
    if outcome.is_err() {
        // Also when the error came straight from the loop (a record that
        // cannot be archived, a fatal Kafka error) rather than through
        // `fail`: puts still queued are dropped, a retrying put gives up.
        pipeline.failed.store(true, Ordering::Release);
    }
    lock(&shared).clean_finish = outcome.is_ok();
    pipeline.committer_stop.store(true, Ordering::Release);
    pipeline.wake.notify_one();
    let _ = committer_done_rx.recv();
    // Safe from any context (the caller may be inside a runtime of its own).
    runtime.shutdown_background();
    // The error is returned, not logged here too: `cairn` ends on it
    // (`error: …`), an embedder has it as the result. Logged at ERROR as
    // well, an operator read each cause twice, the second time after the
    // close's lines (until 2026-12-07). The INFO line keeps the order of
    // events readable: what follows (partitions gone without a commit) is
    // the stop's consequence.
    if let Err(e) = &outcome {
        tracing::info!("pipeline stopped on an error, which it returns (its text is at DEBUG)");
        tracing::debug!(error = %e, "pipeline stopped");
    }
    // Read before the close: its revoke forgets the partitions it drops
    // (until the night of 2026-12-03, a clean run reported almost nothing).
    let committed = pipeline.state().tracker.committed.clone();
    match Arc::try_unwrap(consumer) {
        // No lock is held here: closing serves a final revoke callback.
        Ok(c) => close(c),
        Err(c) => {
            tracing::warn!("consumer still shared at close; abandoning the handle");
            std::mem::forget(c);
        }
    }
    // The task thread ends when its channel closes; the sink (and the
    // engine in it) is dropped before this returns.
    let consumer_stats = {
        let mut s = lock(&shared);
        s.jobs = None;
        s.stats.clone()
    };
    // The thread catches its own panics (above), so joining cannot fail.
    let _ = task_thread.join();
    outcome?;
    // A panic after the final commit (in the sink's `stop`) still fails the run.
    if let Some(e) = pipeline.take_fatal() {
        return Err(e);
    }
    let s = pipeline.state();
    let mut stats = s.stats.clone();
    stats.records_polled = consumer_stats.records_polled;
    stats.records_oversize_skipped = consumer_stats.records_oversize_skipped;
    stats.records_dead_lettered = consumer_stats.records_dead_lettered;
    stats.payload_bytes = consumer_stats.payload_bytes;
    stats.first_record_at = consumer_stats.first_record_at;
    Ok(RunReport {
        stats,
        put_to_commit_us: s.tracker.put_to_commit_us.clone(),
        committed,
    })
}

/// A panic of one of the loop's threads, as the run's error.
fn panicked(thread: &'static str, payload: &(dyn std::any::Any + Send)) -> ConnectorError {
    ConnectorError::Panicked {
        thread,
        detail: cairn_engine::panic_message(payload).to_owned(),
    }
}

/// Clean stop: drain, fsync, commit synchronously, close the sink.
fn finish(shared: &Mutex<Shared>, consumer: &BaseConsumer<SinkContext>) -> Result<()> {
    let mut s = lock(shared);
    s.flush_last()?;
    // The last chance to tell Kafka what is durable: retried (the group may
    // be rebalancing as several instances stop), and counted if it fails.
    // Nothing is lost either way: this store resumes from its own offsets,
    // but another owner would start from Kafka's older offset and archive
    // the records between again.
    s.pipeline.begin_final_commit();
    let outcome = crate::rebalance::commit_retrying(consumer, &s.pipeline, None, true);
    if outcome == crate::pipeline::CommitOutcome::Failed {
        tracing::warn!("the final commit failed: Kafka's committed offsets stay behind the archive's durable ones until the next run commits, and another member taking these partitions over meanwhile archives the records after Kafka's committed offsets again (duplicates across the stores, none lost)");
        s.pipeline.state().stats.final_commit_failed = true;
    }
    if let Some(e) = s.pipeline.take_fatal() {
        return Err(e);
    }
    // Nothing is committed after the final commit: the committer's own
    // retries would otherwise go on while the sink stops, and the
    // archive's `durable_check` (a weak reference to the engine, made
    // strong for each check) could keep its stop from closing the engine
    // (seen in review, 2026-12-05).
    s.pipeline.close_commits();
    s.report_progress(true);
    let partitions: Vec<TopicPartition> = s.assigned.iter().cloned().collect();
    s.request(|reply| Job::Stop { partitions, reply })
}
/// Leave the group and close, serving the final revoke here rather than in
/// `Drop` (where librdkafka's destroy can wait forever on a close that was
/// never driven).
fn close(consumer: BaseConsumer<SinkContext>) {
    consumer.unsubscribe();
    match consumer.close_queue() {
        Ok(()) => {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !consumer.closed() && Instant::now() < deadline {
                consumer.poll(Duration::from_millis(100));
            }
        }
        Err(e) => tracing::warn!(error = %e, "consumer close failed"),
    }
    if consumer.closed() {
        drop(consumer);
    } else {
        // If a rebalance callback panicked (an invariant assertion), the
        // close never completes and dropping would block forever inside
        // rd_kafka_destroy. Leak the handle rather than hang the process:
        // nothing more is committed either way.
        tracing::warn!("consumer did not close within 10 s; abandoning the handle");
        std::mem::forget(consumer);
    }
}

/// Whether a consumer error ends the run (it exits non-zero, nothing past
/// what is durable committed) rather than being logged while librdkafka
/// recovers on its own (connections, leaders, coordinators, rebalances).
///
/// It ends the run when librdkafka says the client is unusable (fatal), when
/// records cannot be read (librdkafka then skips them and fetches on, or
/// fetches the same batch forever: either way the archive would miss them,
/// or stall in silence), when the topic or partition is gone, and when
/// access is refused.
fn stops_the_run(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode as C;
    match e {
        KafkaError::MessageConsumptionFatal(_) => true,
        KafkaError::MessageConsumption(code) => matches!(
            code,
            // Records that cannot be read: a checksum (with
            // `check.crcs`), a codec or a record version this build cannot
            // decode, a record too large to fetch, no memory to decompress.
            C::BadMessage
                | C::BadCompression
                | C::NotImplemented
                | C::UnsupportedCompressionType
                | C::CriticalSystemResource
                | C::InvalidMessage
                | C::InvalidRecord
                | C::MessageSizeTooLarge
                // Gone. (Not librdkafka's local "unknown partition": a
                // member whose metadata lags the group leader's after
                // partitions were added reports it, and catches up.)
                | C::UnknownTopicOrPartition
                | C::UnknownTopic
                // Refused by the brokers. (Not authentication: librdkafka
                // reports the broker's refusal of credentials as its local
                // "authentication" error, which also stands for a handshake
                // cut off by a dropped connection or a token refresh it will
                // retry, and it reconnects on its own.)
                | C::TopicAuthorizationFailed
                | C::GroupAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::InvalidGroupId
                | C::Fenced
                | C::FencedInstanceId
                | C::Fatal
                // The brokers refuse the session timeout at every join
                // (outside their group.min/max.session.timeout.ms): the
                // member would never join. (Not an inconsistent group
                // protocol: a rolling change of assignment strategy.)
                | C::InvalidSessionTimeout
        ),
        _ => false,
    }
}

/// Longest the consumer thread waits for records before it polls the
/// consumer queue for rebalances and errors again.
const EVENTS_WAIT_MAX: Duration = Duration::from_millis(10);

/// Most consumer-queue events served in one pass: rust-rdkafka's `poll`
/// returns nothing after serving a rebalance, so the pass goes on while
/// events wait, but not forever while they keep arriving.
const EVENTS_PER_PASS_MAX: usize = 64;

/// What a consumer error needs.
enum ErrorAction {
    /// A position is out of Kafka's log: check retention and restart.
    Reset,
    /// librdkafka does not retry it: the run stops.
    Stop,
    /// librdkafka retries it: log it and go on.
    Log,
}

/// Whether librdkafka's description of a reset error says that it found
/// the log cut back below a fetched position: its leader-epoch check
/// ("Partition log truncation detected at …", or "No epoch found …"
/// followed by the same error's text). Such a position looks inside the
/// log once the log has grown again, so `offset_reset` cannot see it.
fn log_truncated(why: &str) -> bool {
    why.contains("Partition log truncation detected")
}

fn action(e: &rdkafka::error::KafkaError) -> ErrorAction {
    use rdkafka::types::RDKafkaErrorCode as C;
    if let rdkafka::error::KafkaError::MessageConsumption(C::AutoOffsetReset) = e {
        ErrorAction::Reset
    } else if stops_the_run(e) {
        ErrorAction::Stop
    } else {
        ErrorAction::Log
    }
}

/// A consumer error, from the consumer queue or the run's queue: a
/// position out of Kafka's log wants [`Shared::offset_reset`] (true: the
/// caller runs it once no event waits), what librdkafka does not retry
/// stops the run, the rest is logged. `why` is librdkafka's description of
/// it, which names the partition of a fetch error and the topic of a topic
/// error (rust-rdkafka's error is a bare code).
fn on_consume_error(e: rdkafka::error::KafkaError, why: Option<String>) -> Result<bool> {
    match action(&e) {
        ErrorAction::Reset if why.as_deref().is_some_and(log_truncated) => {
            let why = why.unwrap_or_default();
            tracing::error!(error = %e, why, "Kafka's log was cut back below what was fetched: stopping");
            Err(ConnectorError::KafkaWhy {
                op: "consume",
                why: format!(
                    "{why}: Kafka's log of this partition was cut back below records already fetched, and may have grown again since (an unclean leader election); its records at those offsets may not be the ones archived, and fetching on from the archive's position would skip them; stopping (OPERATIONS.md, \"Where a partition resumes\", rule 6)"
                )
                .into(),
                source: e,
            })
        }
        ErrorAction::Reset => {
            tracing::warn!(error = %e, why, "a position is out of Kafka's log; checking retention");
            Ok(true)
        }
        ErrorAction::Stop => {
            use rdkafka::types::RDKafkaErrorCode as C;
            let why = match (e.rdkafka_error_code(), why) {
                (Some(C::InvalidSessionTimeout), why) => Some(format!(
                    "{}: the brokers refuse the consumer's session.timeout.ms (45000 unless -X sets it), which must lie within their group.min.session.timeout.ms and group.max.session.timeout.ms",
                    why.unwrap_or_else(|| e.to_string())
                )),
                (_, why) => why,
            };
            tracing::error!(error = %e, why, "consumer error: stopping");
            Err(match why {
                Some(why) => ConnectorError::KafkaWhy {
                    op: "consume",
                    why: why.into(),
                    source: e,
                },
                None => ConnectorError::Kafka {
                    op: "consume",
                    source: e,
                },
            })
        }
        ErrorAction::Log => {
            // A description was taken from the client context, which said it.
            log_retried(&e, why.as_deref(), why.is_none());
            Ok(false)
        }
    }
}

/// A consumer error librdkafka retries on its own, with librdkafka's
/// description of it when there is one (`t/p@o: …` for a fetch error): at
/// WARN if `warn`, else at DEBUG, as said already. An error of the consumer
/// queue whose description the client context took was said there
/// (`SinkContext::error`, which limits repeats); a fetch error comes on its
/// partition's queue instead, never to the context, and is said here, each
/// kind once a minute (`LastCause`; review of 2026-12-07: a first version
/// put every error with a description at DEBUG, fetch errors included,
/// which then nothing said).
fn log_retried(e: &rdkafka::error::KafkaError, why: Option<&str>, warn: bool) {
    if warn {
        tracing::warn!(error = %e, why, "consumer error (librdkafka retries)");
    } else {
        tracing::debug!(error = %e, why, "consumer error (librdkafka retries; said already)");
    }
}

fn consume(
    consumer: &BaseConsumer<SinkContext>,
    shared: &Mutex<Shared>,
    cfg: &RunConfig,
    stop: &AtomicBool,
    fetch: &Fetch<'_>,
) -> Result<()> {
    let linger = Duration::from_millis(cfg.linger_ms);
    let pipeline = lock(shared).pipeline.clone();
    let mut forwarded_at = Instant::now();
    // An offset reset assigns partitions again outside the rebalance
    // callback (`retention::restart_fetch`), and their fetch stops can
    // clear the forwards: forward them again on the next pass.
    let mut forward_now = false;
    // Until the group first assigns this member anything, a WARN after the
    // connect timeout and then each connect timeout or 10 s, the longer:
    // librdkafka waits for a group coordinator quietly (at debug), and a
    // run that never joins would otherwise look idle; a short timeout
    // would flood the log during an ordinary join (3 s or more).
    let join_wait = Duration::from_millis(cfg.connect_timeout_ms);
    let join_rewarn = join_wait.max(Duration::from_secs(10));
    let mut join_warn_at = Instant::now() + join_wait;
    let mut membership_seen = Membership::NotYet;
    // A reset error was seen and its partitions are not restarted yet; and
    // whether a restart was already put off once for an event that came
    // while it was being worked out.
    let mut reset_wanted: Option<ResetScope> = None;
    let mut reset_put_off = false;
    loop {
        // A failure first: a stop that arrives with it (a signal, or a
        // pruner's failure hook) must not turn it into a clean finish, whose
        // flush is refused with a message that hides the cause.
        if pipeline.failed.load(Ordering::Acquire) {
            return Err(pipeline
                .take_fatal()
                .unwrap_or_else(|| ConnectorError::Failed("the run failed".into())));
        }
        if stop.load(Ordering::Relaxed) || pipeline.finished.load(Ordering::Acquire) {
            return Ok(());
        }
        // The consumer queue: rebalances (their callbacks run inside `poll`,
        // with no lock held here) and client errors. Records come through
        // `fetch`; one here is of a partition never forwarded, which only a
        // failed forward leaves (and that failed the run already).
        for _ in 0..EVENTS_PER_PASS_MAX {
            match consumer.poll(Duration::ZERO) {
                None if fetch.events_waiting() => {}
                None => break,
                // Only a failed forward leaves one here (as for a record,
                // below, which fails the run): its position is not taken.
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                    tracing::debug!(
                        partition = p,
                        "an end-of-partition event on the consumer queue: ignored"
                    );
                }
                Some(Err(e)) => {
                    let why = consumer.context().take_error_reason(&e);
                    if on_consume_error(e, why)? {
                        // rust-rdkafka's error names no partition.
                        ResetScope::add(&mut reset_wanted, None);
                    }
                }
                Some(Ok(m)) => {
                    use rdkafka::message::Message;
                    return Err(ConnectorError::Failed(format!(
                        "a record of {}/{} (offset {}) came through the consumer queue: its partition's fetch queue was not forwarded to the run's queue; refusing to archive out of order",
                        m.topic(),
                        m.partition(),
                        m.offset()
                    )));
                }
            }
        }
        // A rebalance callback among the events may have failed the run:
        // nothing more is taken (the loop's top returns the error).
        if pipeline.failed.load(Ordering::Acquire) {
            continue;
        }
        // Only with no event waiting (the loop above served them all): see
        // `offset_reset` for why. An event that comes while the restart is
        // worked out puts it off once, to serve it; not twice, since any
        // event counts (a broker's errors keep coming while it is down) and
        // the run's queue is not taken from meanwhile. While the
        // assignment is lost (the session timed out), no restart is made:
        // its revoke waits to be served, and a restart would clear
        // librdkafka's lost mark, so the revoke's callback would commit
        // partitions no longer this member's (since the night of
        // 2026-12-04). No try is made then (each would flush, fsync and
        // read the log's bounds for nothing), and a loss during a try puts
        // the restart off without spending the one-time put-off for
        // events.
        if let Some(scope) = reset_wanted
            .as_ref()
            .filter(|_| !consumer.assignment_lost())
        {
            let lost = std::cell::Cell::new(false);
            let recheck = || {
                lost.set(consumer.assignment_lost());
                lost.get() || (!reset_put_off && fetch.events_waiting())
            };
            if !lock(shared).offset_reset(consumer, scope, &recheck)? {
                reset_put_off |= !lost.get();
                continue;
            }
            reset_wanted = None;
            reset_put_off = false;
            forward_now = true;
        }
        if forward_now || forwarded_at.elapsed() >= crate::fetch::REFORWARD_INTERVAL {
            fetch.forward_again();
            forwarded_at = Instant::now();
            forward_now = false;
        }
        let wait = match lock(shared).pending_since {
            Some(t) => linger.saturating_sub(t.elapsed()),
            None => Duration::from_millis(100),
        };
        // The run's queue, in order: records go into the batch until it is
        // full; an error that needs more than a log line ends the call, and
        // what follows it stays queued until it has been dealt with (a
        // record after a stopping error is never archived, one after an
        // offset reset is taken once the partitions go on).
        let mut cut = false;
        let mut needs: Option<(rdkafka::error::KafkaError, String, Option<TopicPartition>)> = None;
        let mut refused: Option<ConnectorError> = None;
        let mut held: Option<MutexGuard<'_, Shared>> = None;
        let handed = fetch.take(wait.min(EVENTS_WAIT_MAX), crate::fetch::TAKE_MAX, |m| {
            // Locked at the first message, not while waiting for it.
            let s = held.get_or_insert_with(|| {
                let mut s = lock(shared);
                if s.stash.is_empty() {
                    let Shared {
                        pipeline, stash, ..
                    } = &mut *s;
                    pipeline.recycler.refill(stash);
                }
                s
            });
            let flow = match m.error() {
                Some(rdkafka::error::KafkaError::PartitionEOF(_)) => {
                    s.reached_end(m);
                    Flow::Go
                }
                None => match s.accept(m, cfg) {
                    // A dead letter waits for its acknowledgement inside
                    // the take: the take ends after it, so that a backlog
                    // of oversize records does not hold rebalances and the
                    // stop behind up to TAKE_MAX acknowledgements in a row
                    // (until 2026-12-05 it went on; seen in review).
                    Ok(()) => {
                        let dead_lettered = std::mem::take(&mut s.dead_lettered_in_take);
                        if s.full(cfg) || dead_lettered {
                            Flow::Stop
                        } else {
                            Flow::Go
                        }
                    }
                    Err(e) => {
                        refused = Some(e);
                        Flow::Stop
                    }
                },
                Some(e) => match action(&e) {
                    ErrorAction::Log => {
                        let why = m.describe_error();
                        // One kind per error text, whatever its partition
                        // and offset (`t/p@o: …`): kept whole, each offset
                        // was a kind of its own, and the kinds churned
                        // (found in review). Not a cause of unreachable
                        // brokers (`with_cause`).
                        let kind = why.replace(|ch: char| ch.is_ascii_digit(), "");
                        let new = consumer.context().last_cause.note_text(&kind, false);
                        log_retried(&e, Some(&why), new);
                        Flow::Go
                    }
                    ErrorAction::Reset | ErrorAction::Stop => {
                        // No partition (-1) names none: every one is judged.
                        let about = (!m.topic().is_empty() && m.partition() >= 0)
                            .then(|| TopicPartition::new(m.topic(), m.partition()));
                        match about {
                            // A partition revoked or lost since its fetch
                            // queued the error (a revoke forwards what its
                            // queue held, `fetch::Forwarder::release`): no
                            // longer this member's, so its error stops
                            // nothing here, as its records are not taken
                            // (`accept`; since 2026-12-05, seen in review).
                            Some(tp) if !s.assigned.contains(&tp) => {
                                tracing::info!(%tp, error = %e, "an error about a partition no longer assigned here: ignored");
                                Flow::Go
                            }
                            about => {
                                needs = Some((e, m.describe_error(), about));
                                Flow::Stop
                            }
                        }
                    }
                },
            };
            cut = flow == Flow::Stop;
            flow
        });
        drop(held);
        if let Some(e) = refused {
            return Err(e);
        }
        if let Some((e, why, about)) = needs {
            if on_consume_error(e, Some(why))? {
                ResetScope::add(&mut reset_wanted, about);
            }
        }
        // Nothing more was waiting when the call returned.
        let drained = !cut && handed < crate::fetch::TAKE_MAX;
        let mut s = lock(shared);
        // Out of the group again: warned as before the first join, from
        // now (until 2026-12-07 a run whose Kafka went away for good said
        // one WARN at the loss, and then nothing of its own while it
        // archived nothing; found by an audit).
        if s.membership != membership_seen {
            membership_seen = s.membership;
            if membership_seen == Membership::Lost {
                join_warn_at = Instant::now() + join_wait;
            }
        }
        if s.membership != Membership::Joined && Instant::now() >= join_warn_at {
            join_warn_at += join_rewarn;
            if s.membership == Membership::Lost {
                tracing::warn!(
                    group = %cfg.group,
                    group_state = s.group_state.as_deref().unwrap_or("unknown yet"),
                    "no partitions assigned since the group took this member's away as lost (Kafka went away, its session timed out, or a put or fsync held the consumer past max.poll.interval.ms: librdkafka's own lines say which): librdkafka keeps trying to rejoin, and nothing is archived until the group assigns partitions again; what was archived is durable, and Kafka's committed offsets are not past it"
                );
            } else {
                // With librdkafka's group state from its last statistics:
                // `wait-coord` or `query-coord` is a group with no coordinator
                // found (until 2026-12-07 the WARN could not tell; found by an
                // audit).
                tracing::warn!(
                    group = %cfg.group,
                    group_state = s.group_state.as_deref().unwrap_or("unknown yet"),
                    "not in the group yet: no partitions assigned. librdkafka keeps trying, and group_state is where it is (from its statistics, every --progress-interval-s): query-coord or wait-coord, no coordinator found; up, one answers and the join waits on the group. If this lasts, the group's coordinator may be unavailable (on a cluster of fewer brokers than offsets.topic.replication.factor, 3 by default, Kafka cannot create __consumer_offsets) or the group is rebalancing around a slow member (after an unclean stop, this member's old self is one until session.timeout.ms, 45 s by default, ends it; librdkafka's mock cluster, `cairn mock-broker`, waits about that long after a clean stop too: -X session.timeout.ms=6000 shortens it)"
                );
            }
        }
        let lingered = s.pending_since.is_some_and(|t| t.elapsed() >= linger);
        // A lingered batch goes at once if the task thread is free, or if
        // nothing more is waiting (waiting for the task thread is then all
        // there is to do). While records keep arriving and a put runs, the
        // batch grows.
        if s.full(cfg) || (lingered && (drained || s.task_idle())) {
            s.hand_over()?;
        }
        if s.progress_due {
            s.progress_due = false;
            s.report_progress(false);
        }
        s.set_aside_log.say_due();
    }
}

/// A partition's last record taken, which a record must be above to be
/// taken (`Shared::accept`): the last one buffered, else the last one
/// handed over (asked only then: the hot path has a buffer), or one set
/// aside after either.
fn last_taken(
    buffered: Option<i64>,
    handed: impl FnOnce() -> Option<i64>,
    set_aside: Option<i64>,
) -> Option<i64> {
    buffered.or_else(handed).max(set_aside)
}

#[cfg(test)]
mod tests {
    use super::stops_the_run;
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode as C;

    /// A sink whose identity is empty (Kafka's default commit metadata)
    /// is refused before the run starts, naming the reason.
    #[test]
    fn an_empty_sink_identity_is_refused() {
        struct Nameless;
        impl crate::SinkTask for Nameless {
            fn identity(&self) -> Option<String> {
                Some(" ".into())
            }
            fn open(
                &mut self,
                _: &[crate::TopicPartition],
            ) -> Result<std::collections::BTreeMap<crate::TopicPartition, i64>, crate::TaskError>
            {
                unreachable!("refused before any assignment")
            }
            fn put(
                &mut self,
                _: &[crate::RecordBatch],
            ) -> Result<crate::PutOutcome, crate::TaskError> {
                unreachable!("refused before any put")
            }
            fn pre_commit(
                &mut self,
                _: &std::collections::BTreeMap<crate::TopicPartition, i64>,
            ) -> Result<std::collections::BTreeMap<crate::TopicPartition, i64>, crate::TaskError>
            {
                unreachable!("refused before any put")
            }
            fn close(&mut self, _: &[crate::TopicPartition]) -> Result<(), crate::TaskError> {
                Ok(())
            }
        }
        let cfg = crate::RunConfig::new("127.0.0.1:1", "g", vec!["t".into()], "unused".into());
        let e = super::run_pipeline(&cfg, Box::new(Nameless), Default::default()).unwrap_err();
        assert!(
            e.to_string().contains("the sink's identity is empty"),
            "{e}"
        );
    }

    /// A repeat of the last record handed over is one, though the buffer
    /// it was in has gone to the task thread (until the night of
    /// 2026-12-04 only the buffer and records set aside counted).
    #[test]
    fn the_last_record_handed_over_counts_for_the_repeat_check() {
        use super::last_taken;
        assert_eq!(last_taken(None, || Some(41), None), Some(41));
        assert_eq!(last_taken(Some(50), || panic!("not asked"), None), Some(50));
        assert_eq!(last_taken(None, || Some(41), Some(45)), Some(45));
        assert_eq!(last_taken(Some(50), || Some(41), Some(45)), Some(50));
        assert_eq!(last_taken(None, || None, None), None);
    }

    /// librdkafka's two descriptions of a log cut back below a fetched
    /// position (rdkafka_offset.c, with the error's own text appended by
    /// `rd_kafka_offset_reset`) are told from other reset errors.
    #[test]
    fn a_log_truncation_is_told_from_other_reset_errors() {
        assert!(super::log_truncated(
            "t/0@120: Partition log truncation detected at offset 120 (leader epoch 3): broker end offset is 100 (offset leader epoch 2). Reset to INVALID.: Local: Partition log truncation detected (broker 1)"
        ));
        assert!(super::log_truncated(
            "t/0@120: No epoch found less or equal to offset 120 (leader epoch 3): broker end offset is -1 (offset leader epoch -1). Reset using configured policy.: Local: Partition log truncation detected (broker 1)"
        ));
        assert!(!super::log_truncated(
            "t/0@20: fetch failed due to requested offset not available on the broker: Broker: Offset out of range (broker 1)"
        ));
    }

    /// Batch checksums are checked unless `-X` says otherwise.
    #[test]
    fn batch_checksums_are_checked_by_default() {
        let mut cfg = crate::RunConfig::new("b:1", "g", vec!["t".into()], "/nonexistent".into());
        assert_eq!(super::client_config(&cfg).get("check.crcs"), Some("true"));
        cfg.kafka.insert("check.crcs".into(), "false".into());
        assert_eq!(super::client_config(&cfg).get("check.crcs"), Some("false"));
    }

    /// `max.poll.interval.ms` as librdkafka reads it, in whatever form `-X`
    /// gives it (a budget read as 300 s under a shorter interval would let
    /// a callback outlast it).
    #[test]
    fn the_poll_interval_is_read_as_librdkafka_reads_it() {
        use std::time::Duration;
        let mut cfg = crate::RunConfig::new("b:1", "g", vec!["t".into()], "/nonexistent".into());
        assert_eq!(super::max_poll_interval(&cfg), Duration::from_secs(300));
        for (v, ms) in [("60000", 60_000), ("0x7530", 30_000), ("060000", 24_576)] {
            cfg.kafka.insert("max.poll.interval.ms".into(), v.into());
            assert_eq!(
                super::max_poll_interval(&cfg),
                Duration::from_millis(ms),
                "{v}"
            );
        }
    }

    /// A record of no payload still holds memory, and counts it: the
    /// queue's bound (`bytes_max = 0`: one waiting put) holds only if no
    /// put is free, and a batch of records with many empty headers is cut
    /// by `--batch-bytes-max` long before 10,000 of them.
    #[test]
    fn records_of_no_payload_are_not_free() {
        use cairn_engine::{Header, Record, TimestampType};
        let empty = Record {
            offset: 0,
            timestamp_type: TimestampType::NotAvailable,
            timestamp_ms: -1,
            key: None,
            value: None,
            headers: Vec::new(),
        };
        assert_eq!(empty.payload_bytes(), 0);
        assert!(super::held_bytes(&empty) >= 64);
        let headers = Record {
            headers: vec![
                Header {
                    name: String::new(),
                    value: None,
                };
                65_536
            ],
            ..empty.clone()
        };
        assert_eq!(headers.payload_bytes(), 0);
        // 65,536 empty headers hold ~3 MiB: three fill a default batch.
        assert!(super::held_bytes(&headers) >= 3 << 20);
        let with_value = Record {
            value: Some(vec![0; 100]),
            ..empty.clone()
        };
        assert_eq!(
            super::records_held_bytes(&[empty.clone(), with_value]),
            2 * super::held_bytes(&empty) + 100
        );
    }

    /// What a buffer's pushes add up to is what the buffer holds, its
    /// spare room included: never less than its capacity's structs (until
    /// 2026-12-05 the room a doubling `Vec` had left went uncounted, up
    /// to about as much again as its records' structs).
    #[test]
    fn a_buffer_counts_its_spare_room() {
        use cairn_engine::{Record, TopicPartition};
        let mut pending = std::collections::BTreeMap::new();
        let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        let mut counted = 0;
        for o in 0..1_000 {
            let tp = if o % 3 == 0 { &b } else { &a };
            counted += super::buffer_push(&mut pending, tp, Record::with_value(o, vec![1; 10]));
            let held: usize = pending.values().map(super::buffer_held_bytes).sum();
            assert_eq!(counted, held, "after {o}");
        }
        let structs: usize = pending
            .values()
            .map(|v| v.capacity() * std::mem::size_of::<Record>())
            .sum();
        assert!(counted >= structs + 1_000 * 10, "{counted} < {structs}");
        assert!(
            pending.values().any(|v| v.capacity() > v.len()),
            "no room left to count"
        );
    }

    #[test]
    fn unreadable_records_and_fatal_errors_stop_the_run() {
        for code in [
            C::BadMessage,
            C::BadCompression,
            C::NotImplemented,
            C::UnknownTopic,
            C::InvalidSessionTimeout,
        ] {
            assert!(
                stops_the_run(&KafkaError::MessageConsumption(code)),
                "{code:?}"
            );
        }
        // Whatever the code, librdkafka says the client is done.
        assert!(stops_the_run(&KafkaError::MessageConsumptionFatal(
            C::BrokerTransportFailure
        )));
        // librdkafka recovers from these on its own.
        for code in [
            C::BrokerTransportFailure,
            C::AllBrokersDown,
            C::OperationTimedOut,
            C::NotLeaderForPartition,
            C::RebalanceInProgress,
            C::Authentication,
            C::UnknownPartition,
            C::InconsistentGroupProtocol,
        ] {
            assert!(
                !stops_the_run(&KafkaError::MessageConsumption(code)),
                "{code:?}"
            );
        }
    }
}
