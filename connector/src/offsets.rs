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

/// Read `partitions`' committed offsets, keeping the ones Kafka gave apart
/// from the ones it failed to read. A read that fails as a whole is an
/// error.
pub fn read_committed<X: ConsumerContext, C: Consumer<X>>(
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
    c.create_with_context(context)
        .map_err(ConnectorError::kafka("create client"))
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
