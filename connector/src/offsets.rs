//! Reading a consumer group's committed offsets from Kafka.
//!
//! One place for it, because it has a trap: the list librdkafka returns must
//! be dropped before the consumer, or dropping the consumer hangs forever in
//! `rd_kafka_destroy`. Here the list never leaves this function.

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_engine::TopicPartition;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::topic_partition_list::TopicPartitionListElem;
use rdkafka::{Offset, TopicPartitionList};

use crate::error::{ConnectorError, Result};
use crate::librdkafka::PARTITIONS_PER_CALL_MAX;

/// Committed offsets of `partitions` for the consumer's group. Partitions
/// with nothing committed are absent; a partition whose offset Kafka could
/// not read is an error, never taken for "nothing committed" (which would
/// start it by `--auto-offset-reset`).
pub fn committed_offsets<X: ConsumerContext, C: Consumer<X>>(
    consumer: &C,
    partitions: &[TopicPartition],
    timeout: Duration,
) -> KafkaResult<BTreeMap<TopicPartition, i64>> {
    Ok(committed_with_metadata(consumer, partitions, timeout)?
        .into_iter()
        .map(|(tp, c)| (tp, c.offset))
        .collect())
}

/// An offset committed to Kafka, and the metadata committed with it: a
/// cairn archive's store identity ([`crate::SinkTask::identity`]), or
/// whatever another client wrote ("" for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub metadata: String,
}

/// [`committed_offsets`], with each offset's commit metadata.
pub fn committed_with_metadata<X: ConsumerContext, C: Consumer<X>>(
    consumer: &C,
    partitions: &[TopicPartition],
    timeout: Duration,
) -> KafkaResult<BTreeMap<TopicPartition, Committed>> {
    let read = read_committed(consumer, partitions, timeout)?;
    match read.unread.into_iter().next() {
        Some((tp, error)) => {
            tracing::warn!(%tp, %error, "could not read the committed offset");
            Err(error)
        }
        None => Ok(read.offsets),
    }
}

/// Kafka's committed offsets of some partitions, as one read gave them.
#[derive(Debug, Default)]
pub struct CommittedRead {
    /// Each partition with an offset committed, and its metadata. A
    /// partition in neither map has nothing committed.
    pub offsets: BTreeMap<TopicPartition, Committed>,
    /// Each partition whose offset Kafka could not read, and why: never
    /// "nothing committed" (which would start it by
    /// `--auto-offset-reset`).
    pub unread: BTreeMap<TopicPartition, KafkaError>,
}

/// Read `partitions`' committed offsets within `timeout`, keeping the ones
/// Kafka gave apart from the ones it failed to read. A read that fails as
/// a whole is an error.
///
/// Asked 1,000 partitions at a time (since 2026-12-06: in one
/// call, librdkafka's matching of the answer took 0.85 s of CPU for 10,000
/// partitions, and grows with the square), each call within what is left
/// of `timeout`. A call that fails as a whole fails its partitions, unread;
/// when every call fails so, the read does.
pub fn read_committed<X: ConsumerContext, C: Consumer<X>>(
    consumer: &C,
    partitions: &[TopicPartition],
    timeout: Duration,
) -> KafkaResult<CommittedRead> {
    let deadline = std::time::Instant::now() + timeout;
    let mut read = CommittedRead::default();
    let (mut failed, mut answered) = (None, false);
    for chunk in partitions.chunks(PARTITIONS_PER_CALL_MAX) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match read_committed_of(consumer, chunk, left) {
            Ok(got) => {
                answered = true;
                read.offsets.extend(got.offsets);
                read.unread.extend(got.unread);
            }
            Err(e) => {
                read.unread
                    .extend(chunk.iter().map(|tp| (tp.clone(), e.clone())));
                failed.get_or_insert(e);
            }
        }
    }
    match failed {
        Some(e) if !answered => Err(e),
        _ => Ok(read),
    }
}

/// [`read_committed`] in one call.
fn read_committed_of<X: ConsumerContext, C: Consumer<X>>(
    consumer: &C,
    partitions: &[TopicPartition],
    timeout: Duration,
) -> KafkaResult<CommittedRead> {
    let mut tpl = TopicPartitionList::new();
    for tp in partitions {
        tpl.add_partition(&tp.topic, tp.partition);
    }
    let got = consumer.committed_offsets(tpl, timeout)?;
    // librdkafka answers a failed read of some partitions with the list,
    // those partitions carrying the error and no offset.
    let unread: BTreeMap<TopicPartition, KafkaError> = got
        .elements()
        .iter()
        .filter_map(|e| {
            let error = e.error().err()?;
            Some((TopicPartition::new(e.topic(), e.partition()), error))
        })
        .collect();
    // Metadata that is not UTF-8 (which rust-rdkafka panics on) is no cairn
    // store's: it reads as none.
    let mut offsets = concrete(&got, |e, offset| Committed {
        offset,
        metadata: crate::convert::unless_not_utf8(|| e.metadata().to_owned()).unwrap_or_default(),
    });
    // An offset beside an error is not trusted.
    offsets.retain(|tp, _| !unread.contains_key(tp));
    Ok(CommittedRead { offsets, unread })
}

/// The concrete offsets in a librdkafka list (logical ones, such as "none
/// committed" or "nothing delivered yet", are left out), so that callers
/// can drop the list right away (see above).
pub(crate) fn offsets_of(tpl: &TopicPartitionList) -> BTreeMap<TopicPartition, i64> {
    concrete(tpl, |_, o| o)
}

/// `value` of each element of `tpl` with a concrete offset, by partition.
fn concrete<T>(
    tpl: &TopicPartitionList,
    value: impl Fn(&TopicPartitionListElem<'_>, i64) -> T,
) -> BTreeMap<TopicPartition, T> {
    tpl.elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((TopicPartition::new(e.topic(), e.partition()), value(e, o))),
            _ => None,
        })
        .collect()
}

/// A client that can read `group`'s offsets but never commits on its own.
pub fn group_client(brokers: &str, group: &str) -> Result<BaseConsumer> {
    group_client_with(brokers, group, &BTreeMap::new())
}

/// [`group_client`] with librdkafka properties (`-X`: security settings,
/// say). The caller refuses the ones this sets
/// ([`crate::config::MANAGED_CONSUMER_KEYS`]).
pub fn group_client_with(
    brokers: &str,
    group: &str,
    kafka: &BTreeMap<String, String>,
) -> Result<BaseConsumer> {
    client_in(
        brokers,
        Some(group),
        kafka,
        rdkafka::consumer::DefaultConsumerContext,
    )
}

/// A client in `group` (none without one) with librdkafka properties, as
/// [`group_client_with`] takes them, and a context of the caller's (one
/// that keeps the client's last error, say, to name why brokers did not
/// answer).
pub(crate) fn client_in<X: ConsumerContext>(
    brokers: &str,
    group: Option<&str>,
    kafka: &BTreeMap<String, String>,
    context: X,
) -> Result<BaseConsumer<X>> {
    let mut c = client_config(brokers, kafka);
    if let Some(group) = group {
        c.set("group.id", group);
    }
    // A refused setting as `run` says one (`-X key=value: why`), not as
    // rdkafka's text runs the three together (until 2026-12-07 `status
    // -X` said "kafka error during create client: Client config error:
    // …"; an audit).
    c.create_with_context(context).map_err(|e| match e {
        rdkafka::error::KafkaError::ClientConfig(..) => {
            ConnectorError::Config(format!("-X {}", crate::librdkafka::settings_refused(e)))
        }
        e => ConnectorError::kafka("create client")(e),
    })
}

/// A client for metadata and watermarks only, in no group, with
/// librdkafka properties as [`group_client_with`] takes them.
pub fn client_with(brokers: &str, kafka: &BTreeMap<String, String>) -> Result<BaseConsumer> {
    client_in(
        brokers,
        None,
        kafka,
        rdkafka::consumer::DefaultConsumerContext,
    )
}

fn client_config(brokers: &str, kafka: &BTreeMap<String, String>) -> ClientConfig {
    let mut c = ClientConfig::new();
    crate::librdkafka::set_kafka(&mut c, kafka, &[]);
    c.set("bootstrap.servers", brokers)
        .set("enable.auto.commit", "false");
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::consumer::CommitMode;

    /// More partitions than one call asks about: every committed offset
    /// comes back, with its metadata, from calls of
    /// [`PARTITIONS_PER_CALL_MAX`]; the partitions with none have none, and
    /// none is unread.
    #[test]
    fn committed_offsets_of_more_partitions_than_one_call_asks_about() {
        let mock = rdkafka::mocking::MockCluster::new(1).unwrap();
        let n = 2 * PARTITIONS_PER_CALL_MAX as i32 + 500;
        mock.create_topic("c", n, 1).unwrap();
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("group.id", "chunked")
            .create()
            .unwrap();
        // One partition in each call's share.
        let committed = [0, PARTITIONS_PER_CALL_MAX as i32 + 7, n - 1];
        let mut tpl = TopicPartitionList::new();
        for p in committed {
            tpl.add_partition_offset("c", p, Offset::Offset(i64::from(p) + 1))
                .unwrap();
            tpl.find_partition("c", p)
                .unwrap()
                .set_metadata(format!("m{p}"));
        }
        consumer.commit(&tpl, CommitMode::Sync).unwrap();
        let tps: Vec<TopicPartition> = (0..n).map(|p| TopicPartition::new("c", p)).collect();
        let read = read_committed(&consumer, &tps, Duration::from_secs(30)).unwrap();
        assert!(read.unread.is_empty(), "{:?}", read.unread.keys().next());
        let want: BTreeMap<TopicPartition, Committed> = committed
            .iter()
            .map(|&p| {
                let c = Committed {
                    offset: i64::from(p) + 1,
                    metadata: format!("m{p}"),
                };
                (TopicPartition::new("c", p), c)
            })
            .collect();
        assert_eq!(read.offsets, want);
        // The first call fails: its partitions are unread, the others' read.
        let policy = rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_POLICY_VIOLATION;
        mock.request_errors(rdkafka::types::RDKafkaApiKey::OffsetFetch, &[policy]);
        let read = read_committed(&consumer, &tps, Duration::from_secs(30)).unwrap();
        let unread: Vec<&TopicPartition> = read.unread.keys().collect();
        assert_eq!(
            unread,
            tps[..PARTITIONS_PER_CALL_MAX].iter().collect::<Vec<_>>()
        );
        let mut want = want;
        want.remove(&tps[0]);
        assert_eq!(read.offsets, want);
    }
}
