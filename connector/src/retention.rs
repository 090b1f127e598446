//! Records that left Kafka before they were archived.
//!
//! A partition's position can fall out of Kafka's log in two ways: below
//! its start (the records aged out of retention, or were deleted) or past
//! its end (the topic was truncated or recreated). librdkafka would "reset"
//! such a position on its own (`auto.offset.reset`), silently leaving a gap
//! in the archive, or silently dropping new records as duplicates of the
//! offsets the archive already holds. So cairn sets `auto.offset.reset` to
//! `error` and decides here, both when a partition is assigned and when
//! librdkafka reports a position out of range while running:
//!
//! - below the log start: `--on-offset-out-of-range fail` (the default)
//!   stops with an error naming the partition and the missing range;
//!   `earliest` logs the range at ERROR and resumes at the log start;
//! - past the log end: always an error.
//!
//! # Invariants
//! - A position never moves past a record that was not archived unless the
//!   policy is `earliest`, and then the skipped range is logged.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use cairn_engine::TopicPartition;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::OnOffsetOutOfRange;
use crate::error::{ConnectorError, Result};
use crate::librdkafka::PARTITIONS_PER_CALL_MAX;
use crate::offsets::offsets_of;

/// How long each request of a [`Bounds`] read may take (two, or two per
/// [`PARTITIONS_PER_CALL_MAX`] partitions).
const BOUNDS_TIMEOUT: Duration = Duration::from_secs(15);

/// How long each request of one partition's own bounds read may take (see
/// [`Bounds::of`]).
const ALONE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long all the reads of one [`Bounds`] may take together, batched and
/// alone, at most. They run inside the consumer's callbacks, so they must
/// end well before `max.poll.interval.ms` whatever the number of
/// partitions: see [`bounds_budget`]. A read the budget leaves no time for
/// fails as the batched one did.
const BOUNDS_BUDGET_MAX: Duration = Duration::from_secs(60);

/// The budget of a [`Bounds`] under a `max.poll.interval.ms` of
/// `max_poll_interval`: a fifth of it, at most [`BOUNDS_BUDGET_MAX`] (a
/// fifth of librdkafka's default 300 s), at least 1 s. The same callbacks
/// read the committed offsets, at most twice, and the topic ids once
/// (topic_ids.rs), each read within it too (and within 10 s; the topic ids'
/// answer waited for a tenth longer, at least 250 ms), so all together
/// take at most about 0.85 of any interval of 5 s or more.
pub(crate) fn bounds_budget(max_poll_interval: Duration) -> Duration {
    (max_poll_interval / 5).clamp(Duration::from_secs(1), BOUNDS_BUDGET_MAX)
}

/// The bounds (log start, log end) of a set of partitions, read together
/// the first time one is asked for: one request per leader for all the log
/// starts and one for all the log ends (per 1,000 partitions: see
/// [`PARTITIONS_PER_CALL_MAX`]; `ListOffsets`, as librdkafka's
/// per-partition watermark query sends, so under the same isolation
/// level). Read one partition at a time, a large assignment with a distant
/// broker spent minutes in the rebalance callback.
pub(crate) struct Bounds<'c, X: ConsumerContext> {
    consumer: &'c BaseConsumer<X>,
    tps: Vec<TopicPartition>,
    timeout: Duration,
    budget: Duration,
    /// The budget's end, from the first read.
    deadline: Option<Instant>,
    read: Option<BTreeMap<TopicPartition, KafkaResult<(i64, i64)>>>,
    /// Partitions whose batched read failed and that were asked alone.
    asked_alone: BTreeSet<TopicPartition>,
}

impl<'c, X: ConsumerContext> Bounds<'c, X> {
    /// Bounds of `tps`, not read yet, all read within `budget`.
    pub(crate) fn new(
        consumer: &'c BaseConsumer<X>,
        tps: Vec<TopicPartition>,
        budget: Duration,
    ) -> Self {
        Bounds {
            consumer,
            tps,
            timeout: BOUNDS_TIMEOUT,
            budget,
            deadline: None,
            read: None,
            asked_alone: BTreeSet::new(),
        }
    }

    /// `tp`'s bounds (one of the partitions given to `new`), or why they
    /// could not be read.
    ///
    /// librdkafka fails a whole `ListOffsets` request for one partition's
    /// error (a leader that moved, say), which the batched read answers by
    /// asking the request's halves again (`log_offsets_split`); a request
    /// that times out fails every partition in it. So a partition whose
    /// batched read still failed is asked again alone, once, within what is
    /// left of the budget: one partition's trouble does not become every
    /// partition's.
    fn of(&mut self, tp: &TopicPartition) -> KafkaResult<(i64, i64)> {
        let deadline = *self
            .deadline
            .get_or_insert_with(|| Instant::now() + self.budget);
        let (consumer, tps, timeout) = (self.consumer, &self.tps, self.timeout);
        let read = self
            .read
            .get_or_insert_with(|| read_bounds(consumer, tps, timeout, deadline));
        let failed = match read.get(tp) {
            None => {
                return Err(KafkaError::MetadataFetch(
                    RDKafkaErrorCode::UnknownPartition,
                ))
            }
            Some(Ok(bounds)) => return Ok(*bounds),
            Some(Err(e)) => e.clone(),
        };
        if !self.asked_alone.insert(tp.clone()) {
            return Err(failed);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let alone = if left.is_zero() {
            Err(failed)
        } else {
            // The same two requests as the batched read, for this partition
            // only, each offset checked on its own. (librdkafka's watermark
            // query lifts a start it could not get to the end, without an
            // error.)
            read_bounds_of(consumer, tp, ALONE_TIMEOUT, deadline)
        };
        read.insert(tp.clone(), alone.clone());
        alone
    }
}

/// The bounds of `tps`, [`PARTITIONS_PER_CALL_MAX`] at a time: their log
/// starts, then the log ends of those whose start was read, each request
/// within `cap` and before `deadline`. A time that runs short leaves the
/// partitions read so far read, start and end (all starts first, a budget
/// that ran out between them wasted every start it read). After a request
/// Kafka left [`unanswered`], the rest are not asked: they fail as it did.
pub(crate) fn read_bounds<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    tps: &[TopicPartition],
    cap: Duration,
    deadline: Instant,
) -> BTreeMap<TopicPartition, KafkaResult<(i64, i64)>> {
    let timeout = || deadline.saturating_duration_since(Instant::now()).min(cap);
    read_bounds_timed(consumer, tps, &timeout)
}

/// [`read_bounds`] of `tp` alone.
pub(crate) fn read_bounds_of<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    tp: &TopicPartition,
    cap: Duration,
    deadline: Instant,
) -> KafkaResult<(i64, i64)> {
    read_bounds(consumer, std::slice::from_ref(tp), cap, deadline)
        .remove(tp)
        .expect("asked")
}

/// [`read_bounds`], each request within `timeout()` as it stands when the
/// request is made.
fn read_bounds_timed<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    tps: &[TopicPartition],
    timeout: &dyn Fn() -> Duration,
) -> BTreeMap<TopicPartition, KafkaResult<(i64, i64)>> {
    let mut got = BTreeMap::new();
    let mut unanswered_by: Option<KafkaError> = None;
    for chunk in tps.chunks(PARTITIONS_PER_CALL_MAX) {
        if let Some(e) = &unanswered_by {
            got.extend(chunk.iter().map(|tp| (tp.clone(), Err(e.clone()))));
            continue;
        }
        let low = log_offsets_split(consumer, chunk, Offset::Beginning, timeout);
        let started: Vec<TopicPartition> = chunk
            .iter()
            .filter(|tp| low[*tp].is_ok())
            .cloned()
            .collect();
        // With no broker, the first request's failure is the answer for all.
        let mut high = match started.is_empty() {
            true => BTreeMap::new(),
            false => log_offsets_split(consumer, &started, Offset::End, timeout),
        };
        for (tp, l) in low {
            let bounds = l.and_then(|l| Ok((l, high.remove(&tp).expect("asked")?)));
            match &bounds {
                Err(e) if unanswered_by.is_none() && unanswered(e) => {
                    unanswered_by = Some(e.clone());
                }
                _ => {}
            }
            got.insert(tp, bounds);
        }
    }
    got
}

/// [`read_bounds`] with no budget: each request within `timeout`, however
/// many `tps` takes (a request that times out still ends the rest).
pub(crate) fn read_bounds_each_within<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    tps: &[TopicPartition],
    timeout: Duration,
) -> BTreeMap<TopicPartition, KafkaResult<(i64, i64)>> {
    let requests = 2 * tps.len().div_ceil(PARTITIONS_PER_CALL_MAX).max(1);
    let budget = timeout.saturating_mul(u32::try_from(requests).unwrap_or(u32::MAX));
    read_bounds(consumer, tps, timeout, Instant::now() + budget)
}

/// Whether `e` says that Kafka did not answer in time: the request timed
/// out, or no connection to a broker it needed came up (librdkafka's "all
/// broker connections are down" when the timeout ends before any).
pub(crate) fn unanswered(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::OperationTimedOut | RDKafkaErrorCode::AllBrokersDown)
    )
}

/// `e` for each of `tps`.
fn all_failed<T>(
    tps: &[TopicPartition],
    e: &KafkaError,
) -> BTreeMap<TopicPartition, KafkaResult<T>> {
    tps.iter().map(|tp| (tp.clone(), Err(e.clone()))).collect()
}

/// [`log_offsets`], each call within `timeout()` as it stands when it is
/// made; and where a call failed whole for an error a broker answered, its
/// two halves asked again, and so on down the half that alone still fails.
/// librdkafka fails a whole call for the first partition error in any
/// broker's answer: one partition whose leader just moved (`NOT_LEADER`,
/// `OFFSET_NOT_AVAILABLE` during a rolling restart) failed all 1,000, and
/// each was then asked alone, two round trips apiece; halving finds it in
/// two calls per halving. When both halves fail, more than one partition
/// is in error (or all are: a topic the client may not read), and each
/// half is left failed for the caller to ask its partitions alone: halving
/// on would cost up to twice the calls. Only a quick failure is split: a
/// local error (no connection, a time out), or a broker's error that came
/// after half the call's time (librdkafka waits for every leader's answer,
/// and another leader was slow or silent), would have each half wait as
/// long again. After an [`unanswered`] call nothing more is asked.
fn log_offsets_split<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    tps: &[TopicPartition],
    which: Offset,
    timeout: &dyn Fn() -> Duration,
) -> BTreeMap<TopicPartition, KafkaResult<i64>> {
    match split_call(consumer, tps, which, timeout) {
        Ok(got) => got,
        Err(failed) => halves(consumer, tps, which, timeout, failed),
    }
}

/// How a call of [`log_offsets_split`] failed whole: its error, and
/// whether it may be split.
struct FailedWhole {
    error: KafkaError,
    splittable: bool,
}

/// One [`log_offsets`] call within `timeout()`, its whole failure judged.
fn split_call<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    tps: &[TopicPartition],
    which: Offset,
    timeout: &dyn Fn() -> Duration,
) -> std::result::Result<BTreeMap<TopicPartition, KafkaResult<i64>>, FailedWhole> {
    let (t0, limit) = (Instant::now(), timeout());
    log_offsets(consumer, tps, which, limit).map_err(|error| {
        // A broker's error code, UNKNOWN_SERVER_ERROR (-1) included; local
        // ones are below it.
        let a_brokers = error.rdkafka_error_code().is_some_and(|c| c as i32 >= -1);
        FailedWhole {
            splittable: a_brokers && t0.elapsed() < limit / 2,
            error,
        }
    })
}

/// What [`log_offsets_split`] makes of `tps` after a call for all of them
/// failed whole.
fn halves<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    tps: &[TopicPartition],
    which: Offset,
    timeout: &dyn Fn() -> Duration,
    failed: FailedWhole,
) -> BTreeMap<TopicPartition, KafkaResult<i64>> {
    if tps.len() < 2 || !failed.splittable {
        return all_failed(tps, &failed.error);
    }
    let (first, second) = tps.split_at(tps.len() / 2);
    let a = split_call(consumer, first, which, timeout);
    let b = match &a {
        Err(f) if unanswered(&f.error) || !f.splittable => Err(FailedWhole {
            error: f.error.clone(),
            splittable: false,
        }),
        _ => split_call(consumer, second, which, timeout),
    };
    match (a, b) {
        (Ok(mut a), Ok(b)) => {
            a.extend(b);
            a
        }
        (Ok(mut a), Err(eb)) => {
            a.extend(halves(consumer, second, which, timeout, eb));
            a
        }
        (Err(ea), Ok(b)) => {
            let mut a = halves(consumer, first, which, timeout, ea);
            a.extend(b);
            a
        }
        (Err(ea), Err(eb)) => {
            let mut a = all_failed(first, &ea.error);
            a.extend(all_failed(second, &eb.error));
            a
        }
    }
}

/// Each partition's log start (`which` = `Beginning`) or log end (`End`),
/// in one `offsets_for_times` call: these two special timestamps ask
/// `ListOffsets` for the earliest and the latest offset. `Err`: the call
/// failed whole.
fn log_offsets<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    tps: &[TopicPartition],
    which: Offset,
    timeout: Duration,
) -> KafkaResult<BTreeMap<TopicPartition, KafkaResult<i64>>> {
    if tps.is_empty() {
        return Ok(BTreeMap::new());
    }
    // No time left: not asked (librdkafka would send the request, and not
    // wait for its answer).
    if timeout.is_zero() {
        return Err(KafkaError::OffsetFetch(RDKafkaErrorCode::OperationTimedOut));
    }
    let mut tpl = TopicPartitionList::new();
    for tp in tps {
        tpl.add_partition_offset(&tp.topic, tp.partition, which)?;
    }
    let answered = consumer.offsets_for_times(tpl, timeout)?;
    // The list stays inside this function: librdkafka lists must be dropped
    // before the consumer (see offsets.rs).
    let mut got: BTreeMap<TopicPartition, KafkaResult<i64>> = BTreeMap::new();
    for e in answered.elements() {
        let offset = match (e.error(), e.offset()) {
            (Err(err), _) => Err(err),
            (Ok(()), Offset::Offset(o)) if o >= 0 => Ok(o),
            // Left as asked, or a broker that could not say.
            (Ok(()), _) => Err(KafkaError::OffsetFetch(
                RDKafkaErrorCode::OffsetNotAvailable,
            )),
        };
        got.insert(TopicPartition::new(e.topic(), e.partition()), offset);
    }
    Ok(tps
        .iter()
        .map(|tp| {
            let o = got.remove(tp).unwrap_or(Err(KafkaError::OffsetFetch(
                RDKafkaErrorCode::UnknownPartition,
            )));
            (tp.clone(), o)
        })
        .collect())
}

/// Where `tp`, positioned at `position`, may resume: `position` itself
/// when Kafka still has it, Kafka's log start under the `earliest` policy,
/// or an error; and whether the log's bounds confirmed it.
///
/// When the log's bounds cannot be read (a leader moving during a rolling
/// restart answers with an error for a while), `position` itself,
/// unconfirmed: a position Kafka no longer has comes back from the fetch as
/// an offset reset error, which the consumer loop judges by the same policy
/// once the bounds can be read. Stopping the run here would lose nothing,
/// but a rolling broker restart would stop every archiver it rebalanced.
/// An unconfirmed position is not committed at the assignment (it could lie
/// past the log's end): the commit waits for a put of the partition.
///
/// `archived_below`: as for [`standing`], for a store that lost records
/// below its commit.
pub(crate) fn resume_at<X: ConsumerContext>(
    bounds: &mut Bounds<X>,
    tp: &TopicPartition,
    position: i64,
    archived_below: Option<i64>,
    policy: OnOffsetOutOfRange,
) -> Result<(i64, bool)> {
    match bounds.of(tp) {
        // The log end read here is the last stable offset (cairn reads
        // `read_committed`, and ListOffsets answers for that isolation
        // level): a position past it may lie in a transaction still open
        // (a commit set by a tool that reads uncommitted), where a fetch
        // is legal. Resumed there unconfirmed, as when the bounds cannot
        // be read: a position past the log's true end (a topic truncated
        // or recreated) comes back from the fetch as an offset reset
        // error, and the same judgement stops the run then (seen in
        // review, 2026-12-05: it stopped every start while a transaction
        // stayed open, its error blaming a recreated topic).
        Ok((_, high)) if position > high && archived_below.is_none() => {
            tracing::warn!(%tp, position, last_stable_offset = high, "the resume point is past the log's last stable offset: a transaction still open, or a log that ends below it (truncated or recreated); resuming there unconfirmed (past the log's end, the fetch reports it and the run stops), and committing it only after a put of the partition");
            Ok((position, false))
        }
        Ok((low, high)) => {
            go_on_from(tp, position, archived_below, low, high, policy).map(|at| (at, true))
        }
        Err(e) => {
            tracing::warn!(%tp, position, error = %e, "cannot read the partition's log bounds at assignment; resuming at the archive's offset (an offset Kafka no longer has is judged when the fetch reports it), and committing it only after a put of the partition");
            Ok((position, false))
        }
    }
}

/// Where a partition this store held and lost entirely starts (its
/// archive holds nothing of it, and Kafka holds `committed`, this store's
/// own commit): Kafka's log start, so that what the store lost and Kafka
/// still has is archived again. Records after `committed` were never
/// archived by this store; if they aged out of Kafka (its log start is past
/// `committed`), the policy judges that as for any position Kafka no longer
/// has, and `fail` stops the run rather than skip them without a word.
///
/// The start is the log start as read now, a number, not librdkafka's
/// "beginning": that would be looked up again when the fetch starts, and
/// records after `committed` that aged out in between would be skipped
/// without a word. A number Kafka no longer has by then comes back as an
/// offset reset error, which [`standing`] judges (the run records the
/// start as a [`Start::Refetch`](crate::progress::Start)).
///
/// Bounds that cannot be read stop the run: the log start is the start.
pub(crate) fn refetch_lost<X: ConsumerContext>(
    bounds: &mut Bounds<X>,
    tp: &TopicPartition,
    committed: i64,
    policy: OnOffsetOutOfRange,
) -> Result<i64> {
    let (low, high) = bounds.of(tp).map_err(|source| ConnectorError::KafkaWhy {
        op: "reading the log bounds of a partition this store lost",
        why: format!(
            "{tp}: this store committed offset {committed} and holds nothing of it now; only the log start tells whether records after {committed} aged out of Kafka before they were archived: stopping rather than risk skipping them; run again once Kafka answers"
        )
        .into(),
        source,
    })?;
    // Past a log end below the commit there is nothing to judge (see
    // `go_on_from`).
    warn_if_log_ends_below(tp, committed, high);
    judge(tp, committed.min(high), low, high, policy)?;
    Ok(low)
}

/// [`resume_at`] given the log's bounds.
fn judge(
    tp: &TopicPartition,
    position: i64,
    low: i64,
    high: i64,
    policy: OnOffsetOutOfRange,
) -> Result<i64> {
    if position > high {
        return Err(ConnectorError::OffsetBeyondLogEnd {
            topic: tp.topic.clone(),
            partition: tp.partition,
            position,
            log_end: high,
        });
    }
    if position >= low {
        return Ok(position);
    }
    match policy {
        OnOffsetOutOfRange::Fail => Err(ConnectorError::OffsetAgedOut {
            topic: tp.topic.clone(),
            partition: tp.partition,
            stored: position,
            earliest: low,
        }),
        OnOffsetOutOfRange::Earliest => {
            tracing::error!(%tp, from = position, to = low, lost = low - position,
                "RECORDS AGED OUT OF KAFKA BEFORE THEY WERE ARCHIVED: skipping to the earliest offset");
            Ok(low)
        }
    }
}

/// Where a position stands against Kafka's log, for a partition whose
/// fetch may have stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Inside the log: it can go on from there.
    InLog,
    /// Out of the log; the policy says to go on from here (the log start).
    MoveTo(i64),
    /// The log's bounds could not be read (a leader moving, a timeout).
    Unknown,
}

/// [`resume_at`] for a running partition: the same policy and the same
/// errors, except that bounds that cannot be read are `Unknown` rather
/// than a failure of the run (reset errors come during leader moves, when
/// such reads fail too).
///
/// `archived_below`: for a partition refetching what this store lost
/// ([`refetch_lost`], or its newest records), the offset it had committed.
/// Records below it were
/// archived once, as records below an assignment's resume point were: if
/// they age out before they are fetched again, the partition goes on from
/// the log start with a WARN, and the policy judges only records from
/// `archived_below` on, as at the assignment.
pub(crate) fn standing<X: ConsumerContext>(
    bounds: &mut Bounds<X>,
    tp: &TopicPartition,
    position: i64,
    archived_below: Option<i64>,
    policy: OnOffsetOutOfRange,
) -> Result<Standing> {
    let (low, high) = match bounds.of(tp) {
        Ok(bounds) => bounds,
        Err(e) => {
            tracing::warn!(%tp, error = %e, "could not read the log's bounds; fetching again from the position");
            return Ok(Standing::Unknown);
        }
    };
    Ok(
        match go_on_from(tp, position, archived_below, low, high, policy)? {
            to if to == position => Standing::InLog,
            to => Standing::MoveTo(to),
        },
    )
}

/// Where `tp` goes on from `position`, given the log's bounds: `position`
/// itself while Kafka has it. Records below `archived_below` (a commit of
/// this store's, for records it lost) were archived once: if they aged out
/// too, it goes on from the log start with a WARN. Records from there on
/// are judged by the policy (`judge`).
fn go_on_from(
    tp: &TopicPartition,
    position: i64,
    archived_below: Option<i64>,
    low: i64,
    high: i64,
    policy: OnOffsetOutOfRange,
) -> Result<i64> {
    // A log that ends below the commit (an unclean leader election cut
    // it) holds none of what lies past its end to judge: this store holds
    // nothing there either, so no offset it archived is reused.
    if let Some(k) = archived_below {
        warn_if_log_ends_below(tp, k, high);
    }
    let judged = archived_below.map_or(position, |k| k.min(high).max(position));
    let to = judge(tp, judged, low, high, policy)?;
    if to != judged {
        // Moved by the policy (`earliest`), which logged the gap.
        return Ok(to);
    }
    if position >= low {
        return Ok(position);
    }
    tracing::warn!(%tp, from = position, to = low, archived_below = judged,
        "records this store had archived and lost aged out of Kafka before they were fetched again: going on from the log start");
    Ok(low)
}

/// A WARN when Kafka's log of `tp` ends (at `high`) below `committed`, a
/// commit of this store's for records it lost.
fn warn_if_log_ends_below(tp: &TopicPartition, committed: i64, high: i64) {
    if committed > high {
        tracing::warn!(%tp, committed, log_end = high,
            "Kafka's log ends below this store's own commit: the records it had archived there and lost are no longer in Kafka");
    }
}

/// The application's position (next offset `poll` returns) of each
/// partition that has delivered a record since it was assigned.
pub(crate) fn positions<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
) -> Result<BTreeMap<TopicPartition, i64>> {
    // The list stays inside this function: librdkafka lists must be dropped
    // before the consumer (see offsets.rs).
    let tpl = consumer
        .position()
        .map_err(ConnectorError::kafka("read positions"))?;
    Ok(offsets_of(&tpl))
}

/// Where a partition that neither the archive nor Kafka has an offset for
/// starts under `--auto-offset-reset`: the log's beginning, or under
/// `latest` the log end read now, as a number. librdkafka's own symbolic
/// "latest" would be resolved again by every restart of the partition's
/// fetch (after a reset error), each time to a later end, skipping records
/// that arrived in between and had not been delivered yet. So a log end
/// that cannot be read is an error: the run stops with nothing of the
/// partition archived or committed, and the next run starts it again.
pub(crate) fn no_offset_start<X: ConsumerContext>(
    bounds: &mut Bounds<X>,
    tp: &TopicPartition,
    auto_offset_reset: &str,
) -> Result<(Offset, i64)> {
    if auto_offset_reset != "latest" {
        return Ok((Offset::Beginning, 0));
    }
    let (low, high) = bounds.of(tp).map_err(ConnectorError::kafka_at(
        "reading the log end to start at (--auto-offset-reset latest)",
        tp,
    ))?;
    // What Kafka holds below the end, which this store will not hold.
    Ok((Offset::Offset(high), (high - low.max(0)).max(0)))
}

/// Start fetching the `restart` partitions again, each at its offset.
/// After a reset error librdkafka has stopped fetching a partition, and a
/// stopped partition cannot be `seek`ed ("Erroneous state"): it is assigned
/// again instead. Under the eager protocol that means the whole assignment,
/// each other partition at its `going_on` offset (its position, or the
/// offset it started from if it has delivered nothing yet), so none moves.
pub(crate) fn restart_fetch<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    restart: &BTreeMap<TopicPartition, Offset>,
    going_on: &BTreeMap<TopicPartition, Offset>,
) -> Result<()> {
    let list = |tps: &mut dyn Iterator<Item = (&TopicPartition, &Offset)>| {
        let mut l = TopicPartitionList::new();
        for (t, at) in tps {
            l.add_partition_offset(&t.topic, t.partition, *at)
                .map_err(ConnectorError::kafka("list partition to assign"))?;
        }
        Ok::<_, ConnectorError>(l)
    };
    for (tp, offset) in restart {
        tracing::info!(%tp, ?offset, "fetching again");
    }
    match consumer.rebalance_protocol() {
        RebalanceProtocol::Cooperative => {
            let these = list(&mut restart.iter())?;
            consumer
                .incremental_unassign(&these)
                .map_err(ConnectorError::kafka(
                    "unassign a partition to restart its fetch",
                ))?;
            consumer
                .incremental_assign(&these)
                .map_err(ConnectorError::kafka(
                    "assign a partition to restart its fetch",
                ))
        }
        _ => consumer
            .assign(&list(&mut restart.iter().chain(going_on))?)
            .map_err(ConnectorError::kafka("assign again to restart a fetch")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bounds that cannot be read: a partition resumes at its position, a
    /// running one's standing is unknown, and `latest` has no end to start
    /// at. All partitions are asked about in one request, which fails for
    /// them all; then each is asked alone while the budget lasts (here the
    /// first spends it), and that fails too.
    #[test]
    fn bounds_that_cannot_be_read() {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("socket.connection.setup.timeout.ms", "1000")
            .create()
            .unwrap();
        let (t0, t1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        let mut bounds = Bounds::new(
            &consumer,
            vec![t0.clone(), t1.clone()],
            Duration::from_millis(600),
        );
        bounds.timeout = Duration::from_millis(200);
        let at = resume_at(&mut bounds, &t0, 42, None, OnOffsetOutOfRange::Fail).unwrap();
        assert_eq!(at, (42, false), "unconfirmed");
        assert!(no_offset_start(&mut bounds, &t1, "latest").is_err());
        assert!(matches!(
            standing(&mut bounds, &t1, 42, None, OnOffsetOutOfRange::Fail).unwrap(),
            Standing::Unknown
        ));
        // Not a partition of the set: refused without a request.
        assert!(bounds.of(&TopicPartition::new("u", 0)).is_err());
    }

    /// A resume point past the log end read at the assignment (the last
    /// stable offset, under `read_committed`) is resumed at, unconfirmed:
    /// it may lie in a transaction still open. A fetch that then finds it
    /// past the log's true end reports an offset reset, and the standing
    /// judged there stops the run as before (the mock cluster answers the
    /// high watermark for either isolation level, so only this test shows
    /// the first half).
    #[test]
    fn a_resume_point_past_the_last_stable_offset_is_resumed_at_unconfirmed() {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .create()
            .unwrap();
        let t0 = TopicPartition::new("t", 0);
        let mut bounds = Bounds::new(&consumer, vec![t0.clone()], Duration::from_secs(1));
        bounds.read = Some(BTreeMap::from([(t0.clone(), Ok((100, 500)))]));
        let fail = OnOffsetOutOfRange::Fail;
        assert_eq!(
            resume_at(&mut bounds, &t0, 510, None, fail).unwrap(),
            (510, false)
        );
        assert_eq!(
            resume_at(&mut bounds, &t0, 400, None, fail).unwrap(),
            (400, true)
        );
        assert!(matches!(
            standing(&mut bounds, &t0, 510, None, fail),
            Err(ConnectorError::OffsetBeyondLogEnd {
                position: 510,
                log_end: 500,
                ..
            })
        ));
    }

    type Mock = rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>;

    /// A mock cluster of one broker holding `topic`, of `n` partitions, a
    /// consumer of it, and the partitions.
    fn cluster_of(topic: &str, n: i32) -> (Mock, BaseConsumer, Vec<TopicPartition>) {
        let mock = rdkafka::mocking::MockCluster::new(1).unwrap();
        mock.create_topic(topic, n, 1).unwrap();
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .create()
            .unwrap();
        let tps = (0..n).map(|p| TopicPartition::new(topic, p)).collect();
        (mock, consumer, tps)
    }

    /// A timeout of `each` that counts in `calls` how often it is asked.
    fn counted(calls: &std::cell::Cell<u32>, each: Duration) -> impl Fn() -> Duration + '_ {
        move || {
            calls.set(calls.get() + 1);
            each
        }
    }

    /// More partitions than one `offsets_for_times` call asks about: each
    /// partition's bounds come back all the same, read in calls of
    /// [`PARTITIONS_PER_CALL_MAX`] (three for the log starts, three for
    /// the ends), and a partition that holds records has its own. A time
    /// that runs out after the first 1,000 keeps their bounds read.
    #[test]
    fn bounds_of_more_partitions_than_one_call_asks_about() {
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let n = 2 * PARTITIONS_PER_CALL_MAX as i32 + 500;
        let (mock, consumer, tps) = cluster_of("w", n);
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .create()
            .unwrap();
        for _ in 0..3 {
            producer
                .send(
                    BaseRecord::<[u8], [u8]>::to("w")
                        .partition(n - 1)
                        .payload(b"x"),
                )
                .unwrap();
        }
        producer.flush(Duration::from_secs(30)).unwrap();
        let calls = std::cell::Cell::new(0);
        let timeout = counted(&calls, Duration::from_secs(30));
        let bounds = read_bounds_timed(&consumer, &tps, &timeout);
        assert_eq!(calls.get(), 6);
        assert_eq!(bounds.len(), tps.len());
        for tp in &tps {
            let end = if tp.partition == n - 1 { 3 } else { 0 };
            assert_eq!(*bounds[tp].as_ref().unwrap(), (0, end), "{tp}");
        }
        calls.set(0);
        let short = || {
            calls.set(calls.get() + 1);
            match calls.get() {
                1 | 2 => Duration::from_secs(30),
                _ => Duration::ZERO,
            }
        };
        let bounds = read_bounds_timed(&consumer, &tps, &short);
        assert_eq!(calls.get(), 3, "nothing asked after the time ran out");
        let (first, rest) = tps.split_at(PARTITIONS_PER_CALL_MAX);
        for tp in first {
            assert_eq!(*bounds[tp].as_ref().unwrap(), (0, 0), "{tp}");
        }
        for tp in rest {
            let e = bounds[tp].as_ref().expect_err("no time left");
            assert!(unanswered(e), "{tp}: {e}");
        }
        let each =
            read_bounds_each_within(&consumer, &tps[n as usize - 2..], Duration::from_secs(30));
        assert_eq!(
            each.into_values().map(Result::unwrap).collect::<Vec<_>>(),
            [(0, 0), (0, 3)]
        );
    }

    /// A call that a broker fails whole (librdkafka does, for one
    /// partition's error in its answer) is asked again in halves: here the
    /// mock fails the first call, for the first 1,000 log starts, and its
    /// halves are answered; then the half holding the one partition in
    /// error is halved on, down to it; and when both halves fail (every
    /// call fails), each partition is left its error after three calls.
    #[test]
    fn a_call_failed_whole_is_asked_again_in_halves() {
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
        let (mock, consumer, tps) = cluster_of("h", 2 * PARTITIONS_PER_CALL_MAX as i32 + 500);
        let calls = std::cell::Cell::new(0);
        let timeout = counted(&calls, Duration::from_secs(30));
        let policy = RDKafkaRespErr::RD_KAFKA_RESP_ERR_POLICY_VIOLATION;
        mock.request_errors(RDKafkaApiKey::ListOffsets, &[policy]);
        let bounds = read_bounds_timed(&consumer, &tps, &timeout);
        // The failed call, its two halves, and the other five.
        assert_eq!(calls.get(), 8);
        for tp in &tps {
            assert_eq!(*bounds[tp].as_ref().unwrap(), (0, 0), "{tp}");
        }
        // Four partitions, the first in error: [0, 1, 2, 3] fails, [0, 1]
        // fails, [2, 3] is answered, [0] fails, [1] is answered.
        calls.set(0);
        let four = &tps[..4];
        let mock_fails = |n| mock.request_errors(RDKafkaApiKey::ListOffsets, &vec![policy; n]);
        let ok = RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR;
        mock.request_errors(RDKafkaApiKey::ListOffsets, &[policy, policy, ok, policy]);
        let low = log_offsets_split(&consumer, four, Offset::Beginning, &timeout);
        assert_eq!(calls.get(), 5);
        assert!(low[&four[0]].is_err());
        for tp in &four[1..] {
            assert_eq!(*low[tp].as_ref().unwrap(), 0, "{tp}");
        }
        calls.set(0);
        mock_fails(100);
        let low = log_offsets_split(&consumer, four, Offset::Beginning, &timeout);
        mock.clear_request_errors(RDKafkaApiKey::ListOffsets);
        assert_eq!(calls.get(), 3, "the call and its two halves");
        for tp in four {
            let e = low[tp].as_ref().expect_err("failed");
            assert_eq!(
                e.rdkafka_error_code(),
                Some(RDKafkaErrorCode::PolicyViolation),
                "{tp}"
            );
        }
    }

    /// A call a broker failed whole only after half its time (librdkafka
    /// waited on a slow leader) is not split: each half would wait as
    /// long. (Failed or timed out, it is asked once.)
    #[test]
    fn a_slow_failure_is_not_split() {
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
        let (mock, consumer, tps) = cluster_of("s", 4);
        let calls = std::cell::Cell::new(0);
        let timeout = counted(&calls, Duration::from_secs(4));
        // Metadata cached, then every answer takes 2.5 s, and fails.
        assert!(log_offsets_split(&consumer, &tps, Offset::End, &timeout)
            .values()
            .all(Result::is_ok));
        mock.broker_round_trip_time(1, Duration::from_millis(2_500))
            .unwrap();
        let policy = RDKafkaRespErr::RD_KAFKA_RESP_ERR_POLICY_VIOLATION;
        mock.request_errors(RDKafkaApiKey::ListOffsets, &[policy; 10]);
        calls.set(0);
        let got = log_offsets_split(&consumer, &tps, Offset::End, &timeout);
        mock.clear_request_errors(RDKafkaApiKey::ListOffsets);
        assert_eq!(calls.get(), 1);
        assert!(got.values().all(Result::is_err), "{got:?}");
    }

    /// A call that Kafka does not answer in time ends the reads: the
    /// partitions of the calls after it are not asked (a silent broker is
    /// waited for once), and fail as it did.
    #[test]
    fn a_call_that_times_out_ends_the_reads() {
        let (mock, consumer, tps) = cluster_of("t", 2 * PARTITIONS_PER_CALL_MAX as i32 + 1);
        mock.broker_round_trip_time(1, Duration::from_secs(30))
            .unwrap();
        let calls = std::cell::Cell::new(0);
        let timeout = counted(&calls, Duration::from_millis(200));
        let bounds = read_bounds_timed(&consumer, &tps, &timeout);
        assert_eq!(calls.get(), 1, "asked once");
        assert_eq!(bounds.len(), tps.len());
        for (tp, got) in bounds {
            assert!(unanswered(&got.expect_err("no answer")), "{tp}");
        }
    }

    #[test]
    fn the_budget_is_a_fifth_of_the_poll_interval_within_bounds() {
        let s = Duration::from_secs;
        assert_eq!(bounds_budget(s(300)), s(60));
        assert_eq!(bounds_budget(s(3600)), s(60));
        assert_eq!(bounds_budget(s(45)), s(9));
        assert_eq!(bounds_budget(Duration::from_millis(1)), s(1));
    }
}
