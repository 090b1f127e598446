//! The records the engine stores, and the checks every batch passes before a
//! single byte is written.
//!
//! Field order of the `Encode`/`Decode` types here is part of the on-disk
//! format (docs/FORMAT.md). Do not change field order.

use bincode::{Decode, Encode};

use crate::error::InvalidInput;

/// A Kafka topic-partition.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// Kafka's timestamp types. Do not reorder: the discriminant is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Encode, Decode)]
pub enum TimestampType {
    NotAvailable,
    CreateTime,
    LogAppendTime,
}

/// One record header. Kafka header values may be null. Do not change field order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Header {
    pub name: String,
    pub value: Option<Vec<u8>>,
}

/// One record with its source offset. Do not change field order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Record {
    pub offset: i64,
    pub timestamp_type: TimestampType,
    pub timestamp_ms: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<Header>,
}

impl Record {
    /// A record with only a value, for tests and examples.
    pub fn with_value(offset: i64, value: impl Into<Vec<u8>>) -> Self {
        Record {
            offset,
            timestamp_type: TimestampType::CreateTime,
            timestamp_ms: 0,
            key: None,
            value: Some(value.into()),
            headers: Vec::new(),
        }
    }

    /// An upper bound on this record's encoded size in an entry body
    /// (body.rs): its payload plus the largest framing bincode's varints
    /// can give it (offset, timestamp, tags and lengths), per header too.
    /// Entries are cut by this, so that no entry outgrows the format.
    pub fn encoded_bytes_max(&self) -> u64 {
        self.payload_bytes()
            + RECORD_FRAMING_BYTES_MAX
            + HEADER_FRAMING_BYTES_MAX * self.headers.len() as u64
    }

    /// Payload bytes: key, value, header names and header values. This is
    /// what `record_bytes_max` limits and what the statistics count.
    pub fn payload_bytes(&self) -> u64 {
        let kv = self.key.as_ref().map_or(0, Vec::len) + self.value.as_ref().map_or(0, Vec::len);
        let headers: usize = self
            .headers
            .iter()
            .map(|h| h.name.len() + h.value.as_ref().map_or(0, Vec::len))
            .sum();
        (kv + headers) as u64
    }
}

/// Records of one topic-partition, in strictly increasing offset order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordBatch {
    pub tp: TopicPartition,
    pub records: Vec<Record>,
}

/// Timestamps below this (1973-03-03 09:46:40 UTC, 10^11 ms) have no age
/// for retention: a negative one is none (-1), and one of these few
/// years after the epoch is, in all likelihood, a stamp in seconds read as
/// milliseconds (1.7 * 10^9 s reads as January 1970), as `cairn prune
/// --before-time` reads a number this low. Taken for an age, such a record
/// would be deleted by any age retention at its first pass after it was
/// archived; with none, it and every record above it are kept, and the
/// pass says so (`Engine::timestamp_holding_back`). Kafka began in 2011:
/// no record is stamped this early in earnest.
pub const AGELESS_BEFORE_MS: i64 = 100_000_000_000;

/// Most headers one record may carry. Kafka sets no limit, but a decoded
/// record's header list costs 48 bytes of memory each, and bincode bounds
/// what one decode may claim (body.rs): a record with millions of tiny
/// headers, cheap on the wire, would be written and then never read back.
/// This bound keeps every accepted record decodable, with room to spare.
pub const HEADERS_PER_RECORD_MAX: usize = 65_536;

/// Framing of one record without its headers, at most: offset and
/// timestamp varints (9 bytes each), timestamp type (1), key and value
/// option tags and lengths (1 + 5 each), header count (5).
const RECORD_FRAMING_BYTES_MAX: u64 = 36;
// Every record counts at least this toward an entry's size, which bounds
// the records an entry holds (body.rs `RECORDS_PER_ENTRY_MAX`).
const _: () = assert!(RECORD_FRAMING_BYTES_MAX >= crate::body::RECORD_COUNTED_BYTES_MIN as u64);
/// Framing of one header, at most: name length (5), value option tag (1)
/// and value length (5).
const HEADER_FRAMING_BYTES_MAX: u64 = 11;

/// Kafka's longest legal topic name.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;

/// Check a topic name against Kafka's rules: 1 to 249 characters of
/// `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn validate_topic(topic: &str) -> Result<(), InvalidInput> {
    let bad = |reason| {
        Err(InvalidInput::Topic {
            topic: topic.to_owned(),
            reason,
        })
    };
    if topic.is_empty() {
        return bad("empty");
    }
    if topic.len() > TOPIC_NAME_BYTES_MAX {
        return bad("longer than 249 characters");
    }
    if topic == "." || topic == ".." {
        return bad("'.' and '..' are reserved");
    }
    if !topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("only [a-zA-Z0-9._-] is allowed");
    }
    Ok(())
}

/// Validate a topic-partition: a legal topic name, a partition ≥ 0.
pub(crate) fn validate_tp(tp: &TopicPartition) -> Result<(), InvalidInput> {
    validate_topic(&tp.topic)?;
    if tp.partition < 0 {
        return Err(InvalidInput::NegativePartition {
            topic: tp.topic.clone(),
            partition: tp.partition,
        });
    }
    Ok(())
}

/// Validate the batches of one call: each as [`validate_batch`] does, and a
/// partition named by more than one goes on increasing from one to the
/// next. Offsets that went back within a call are the caller's mistake, not
/// a redelivery (which comes in a later call): dropped as duplicates below
/// the partition's next offset, they would be lost without ever having been
/// stored.
pub(crate) fn validate_batches(
    batches: &[RecordBatch],
    record_bytes_max: u64,
) -> Result<(), InvalidInput> {
    let mut last: std::collections::BTreeMap<&TopicPartition, i64> = Default::default();
    for b in batches {
        validate_batch(b, record_bytes_max)?;
        let (Some(first), Some(end)) = (b.records.first(), b.records.last()) else {
            continue;
        };
        if let Some(&previous) = last.get(&b.tp) {
            if first.offset <= previous {
                return Err(InvalidInput::OffsetsNotIncreasing {
                    topic: b.tp.topic.clone(),
                    partition: b.tp.partition,
                    previous,
                    offset: first.offset,
                });
            }
        }
        last.insert(&b.tp, end.offset);
    }
    Ok(())
}

/// Validate one batch: topic, partition, offsets, record sizes and header
/// counts.
pub(crate) fn validate_batch(
    batch: &RecordBatch,
    record_bytes_max: u64,
) -> Result<(), InvalidInput> {
    let tp = &batch.tp;
    validate_tp(tp)?;
    let mut previous: Option<i64> = None;
    for r in &batch.records {
        if r.offset < 0 {
            return Err(InvalidInput::NegativeOffset {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: r.offset,
            });
        }
        if r.offset == i64::MAX {
            return Err(InvalidInput::OffsetTooLarge {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: r.offset,
            });
        }
        if r.headers.len() > HEADERS_PER_RECORD_MAX {
            return Err(InvalidInput::TooManyHeaders {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: r.offset,
                count: r.headers.len(),
                max: HEADERS_PER_RECORD_MAX,
            });
        }
        if let Some(p) = previous {
            if r.offset <= p {
                return Err(InvalidInput::OffsetsNotIncreasing {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    previous: p,
                    offset: r.offset,
                });
            }
        }
        previous = Some(r.offset);
        let size_bytes = r.payload_bytes();
        if size_bytes > record_bytes_max {
            return Err(InvalidInput::RecordTooLarge {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: r.offset,
                size_bytes,
                max_bytes: record_bytes_max,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_rules() {
        assert!(validate_topic("orders.v1_x-y").is_ok());
        assert!(validate_topic(&"a".repeat(249)).is_ok());
        assert!(validate_topic(&"a".repeat(250)).is_err());
        assert!(validate_topic("").is_err());
        assert!(validate_topic("..").is_err());
        assert!(validate_topic("has space").is_err());
        assert!(validate_topic("ünï").is_err());
    }

    #[test]
    fn batch_rules() {
        let tp = TopicPartition::new("t", 0);
        let ok = RecordBatch {
            tp: tp.clone(),
            records: vec![Record::with_value(0, "a"), Record::with_value(5, "b")],
        };
        assert!(validate_batch(&ok, 10).is_ok());
        let dup = RecordBatch {
            tp: tp.clone(),
            records: vec![Record::with_value(3, "a"), Record::with_value(3, "b")],
        };
        assert!(matches!(
            validate_batch(&dup, 10),
            Err(InvalidInput::OffsetsNotIncreasing { .. })
        ));
        let big = RecordBatch {
            tp: tp.clone(),
            records: vec![Record::with_value(0, vec![0u8; 11])],
        };
        assert!(matches!(
            validate_batch(&big, 10),
            Err(InvalidInput::RecordTooLarge { size_bytes: 11, .. })
        ));
        let neg = RecordBatch {
            tp: TopicPartition::new("t", -1),
            records: vec![],
        };
        assert!(validate_batch(&neg, 10).is_err());
    }

    /// One call naming a partition twice: its offsets go on increasing from
    /// batch to batch, or the call is refused (a later batch below an
    /// earlier one's offsets would be dropped as duplicates, never stored).
    #[test]
    fn batches_of_one_call_go_on_increasing() {
        let (t0, t1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        let b = |tp: &TopicPartition, offsets: &[i64]| RecordBatch {
            tp: tp.clone(),
            records: offsets
                .iter()
                .map(|&o| Record::with_value(o, "v"))
                .collect(),
        };
        let ok = [b(&t0, &[0, 1]), b(&t1, &[0]), b(&t0, &[]), b(&t0, &[5])];
        assert!(validate_batches(&ok, 10).is_ok());
        for (first, then) in [(&[10][..], &[0][..]), (&[0, 3], &[3, 4])] {
            let bad = [b(&t0, first), b(&t1, &[0]), b(&t0, then)];
            assert_eq!(
                validate_batches(&bad, 10),
                Err(InvalidInput::OffsetsNotIncreasing {
                    topic: "t".into(),
                    partition: 0,
                    previous: *first.last().unwrap(),
                    offset: then[0],
                })
            );
        }
    }
}
