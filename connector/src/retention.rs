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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cairn_engine::TopicPartition;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::{Offset, TopicPartitionList};

use crate::config::OnOffsetOutOfRange;
use crate::error::{ConnectorError, Result};
use crate::offsets::offsets_of;

/// How long to wait for a partition's watermarks.
const WATERMARKS_TIMEOUT: Duration = Duration::from_secs(5);

/// How long all the watermark reads of one assignment (or one reset) may
/// take together. They run one partition at a time inside the consumer's
/// callback: with brokers that do not answer, 5 s each over many partitions
/// would outlast `max.poll.interval.ms` (300 s), and the member would be
/// evicted. Reads past it are treated as reads that failed.
pub(crate) const WATERMARKS_BUDGET: Duration = Duration::from_secs(60);

/// The bounds of `tp`'s log, read within [`WATERMARKS_TIMEOUT`] and before
/// `deadline` (the budget's end); past it, a timeout without asking.
fn watermarks<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    tp: &TopicPartition,
    deadline: Instant,
) -> rdkafka::error::KafkaResult<(i64, i64)> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(rdkafka::error::KafkaError::MetadataFetch(
            rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
        ));
    }
    consumer.fetch_watermarks(&tp.topic, tp.partition, left.min(WATERMARKS_TIMEOUT))
}

/// Where `tp`, positioned at `position`, may resume: `position` itself
/// when Kafka still has it, Kafka's log start under the `earliest` policy,
/// or an error.
///
/// When the log's bounds cannot be read (a leader moving during a rolling
/// restart answers with an error for a while), `position` itself: a
/// position Kafka no longer has comes back from the fetch as an offset
/// reset error, which the consumer loop judges by the same policy once the
/// bounds can be read. Stopping the run here would lose nothing, but a
/// rolling broker restart would stop every archiver it rebalanced.
pub(crate) fn resume_at<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    tp: &TopicPartition,
    position: i64,
    policy: OnOffsetOutOfRange,
    deadline: Instant,
) -> Result<i64> {
    match watermarks(consumer, tp, deadline) {
        Ok((low, high)) => judge(tp, position, low, high, policy),
        Err(e) => {
            tracing::warn!(%tp, position, error = %e, "cannot read the partition's log bounds at assignment; resuming at the archive's offset (an offset Kafka no longer has is judged when the fetch reports it)");
            Ok(position)
        }
    }
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
pub(crate) fn standing<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    tp: &TopicPartition,
    position: i64,
    policy: OnOffsetOutOfRange,
    deadline: Instant,
) -> Result<Standing> {
    let (low, high) = match watermarks(consumer, tp, deadline) {
        Ok(bounds) => bounds,
        Err(e) => {
            tracing::warn!(%tp, error = %e, "could not read the log's bounds; fetching again from the position");
            return Ok(Standing::Unknown);
        }
    };
    Ok(match judge(tp, position, low, high, policy)? {
        to if to == position => Standing::InLog,
        to => Standing::MoveTo(to),
    })
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
    consumer: &BaseConsumer<X>,
    tp: &TopicPartition,
    auto_offset_reset: &str,
    deadline: Instant,
) -> Result<Offset> {
    if auto_offset_reset != "latest" {
        return Ok(Offset::Beginning);
    }
    let (_, high) = watermarks(consumer, tp, deadline).map_err(ConnectorError::kafka_at(
        "reading the log end to start at (--auto-offset-reset latest)",
        tp,
    ))?;
    Ok(Offset::Offset(high))
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

    /// Past the assignment's budget for watermark reads, a read fails as a
    /// read that timed out: a partition resumes at its position, a running
    /// one's standing is unknown, and `latest` has no end to start at.
    #[test]
    fn reads_past_the_budget_fail_at_once() {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .create()
            .unwrap();
        let tp = TopicPartition::new("t", 0);
        let t0 = Instant::now();
        assert!(watermarks(&consumer, &tp, t0).is_err());
        let at = resume_at(&consumer, &tp, 42, OnOffsetOutOfRange::Fail, t0).unwrap();
        assert_eq!(at, 42);
        assert!(no_offset_start(&consumer, &tp, "latest", t0).is_err());
        assert!(matches!(
            standing(&consumer, &tp, 42, OnOffsetOutOfRange::Fail, t0).unwrap(),
            Standing::Unknown
        ));
    }
}
