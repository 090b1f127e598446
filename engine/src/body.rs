//! The body of a records entry: bincode 2.0.1 with an explicit configuration.
//!
//! ```text
//! EntryHead { topic: String, partition: i32, record_count: u32 }
//! Record × record_count
//! ```
//! All integers are bincode varints (zig-zag for signed), little endian.
//! The configuration is part of the format; `tests/format_golden.rs` pins it.
//!
//! # Invariants
//! - A decoded entry has a legal topic, a non-negative partition, at least one
//!   record, and strictly increasing non-negative offsets. Anything else is
//!   `CorruptionKind::Decode` or `OffsetOrder`, never a panic.
//! - The record count is checked against the bytes left before any
//!   allocation sized by it. A byte string's length is bounded by
//!   `DECODE_LIMIT_BYTES` only (bincode allocates it first).

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use bincode::{Decode, Encode};

use crate::error::CorruptionKind;
use crate::record::{validate_topic, Record, TopicPartition, HEADERS_PER_RECORD_MAX};

/// Largest encoded entry body the format allows (sum of its chunks).
pub const ENTRY_BODY_BYTES_MAX: usize = 32 << 20;

/// Most records one entry may hold. The writer cuts an entry once its
/// records' counted bytes reach the target, which is at most a quarter of
/// [`ENTRY_BODY_BYTES_MAX`] (config.rs), and every record counts at least
/// [`RECORD_COUNTED_BYTES_MIN`] toward it, so no build writes more. A count
/// above it is damage: refusing it bounds the records a forged entry's
/// decode can claim (about 100 bytes of memory each, from as few as 6
/// encoded: several hundred MB for a 32 MiB body). It does not bound the
/// headers: empty ones take 2 bytes encoded and 48 in memory, and builds
/// before e0cb6c7 counted none of their framing toward the cut, so an
/// entry of many records with the most headers each may have been written
/// and must still be read (up to ~800 MB, once decoded).
pub const RECORDS_PER_ENTRY_MAX: usize = ENTRY_BODY_BYTES_MAX / 4 / RECORD_COUNTED_BYTES_MIN + 1;

/// The least any record has ever counted toward an entry's target: its
/// framing bound (36 bytes, `Record::encoded_bytes_max`) since e0cb6c7, a
/// flat 32 bytes before.
pub const RECORD_COUNTED_BYTES_MIN: usize = 32;
/// Bound on what one bincode decode may claim (bytes read plus container
/// memory), checked by bincode before it allocates. It bounds, not
/// prevents, an allocation a damaged length asks for: bincode 2.0.1 sizes a
/// byte string's buffer from its length prefix (claimed against this limit)
/// before it finds the bytes are not there, so a forged length that passed
/// the frame CRC costs up to this much memory, for a moment, before decode
/// fails.
const DECODE_LIMIT_BYTES: usize = 64 << 20;
/// The smallest encoding of one record (offset, timestamp type, timestamp,
/// key tag, value tag, header count: one byte each).
const RECORD_ENCODED_BYTES_MIN: usize = 6;
/// Records an entry decode allocates room for before decoding any.
const RECORDS_PREALLOCATED_MAX: usize = 4096;

type Config = Configuration<LittleEndian, Varint, Limit<DECODE_LIMIT_BYTES>>;

/// The bincode configuration of format version 1. Do not change.
pub const CONFIG: Config = bincode::config::standard()
    .with_little_endian()
    .with_variable_int_encoding()
    .with_limit::<DECODE_LIMIT_BYTES>();

/// Do not change field order.
#[derive(Encode, Decode)]
struct EntryHead {
    topic: String,
    partition: i32,
    record_count: u32,
}

/// Encode one entry body.
pub fn encode_entry(tp: &TopicPartition, records: &[Record]) -> Vec<u8> {
    assert!(!records.is_empty(), "an entry holds at least one record");
    assert!(records.len() <= u32::MAX as usize);
    let head = EntryHead {
        topic: tp.topic.clone(),
        partition: tp.partition,
        record_count: records.len() as u32,
    };
    let payload: u64 = records.iter().map(Record::payload_bytes).sum();
    let mut out = Vec::with_capacity(payload as usize + records.len() * 16 + 64);
    // Writing into a Vec cannot fail.
    bincode::encode_into_writer(&head, VecWriter(&mut out), CONFIG).expect("encode to Vec");
    for r in records {
        bincode::encode_into_writer(r, VecWriter(&mut out), CONFIG).expect("encode to Vec");
    }
    out
}

/// Appends straight to a Vec. bincode's `std::io::Write` adapter goes
/// through `write_all` for every primitive, which made encoding a
/// 1000-record entry cost more than its CRC.
struct VecWriter<'a>(&'a mut Vec<u8>);

impl bincode::enc::write::Writer for VecWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

/// A decoded entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub tp: TopicPartition,
    pub records: Vec<Record>,
}

fn decode_err(e: impl std::fmt::Display) -> CorruptionKind {
    CorruptionKind::Decode {
        detail: e.to_string(),
    }
}

/// The start of an entry body: its partition, record count and first
/// offset, read from the body's first bytes (an entry's first chunk holds
/// them: a head is at most 260 bytes (a 249-byte topic and its length, two
/// 5-byte varints) and the first offset 9 more, and no
/// chunk is under 1 KiB). For a check that an index entry names the right
/// frames without decoding the entry. Never panics.
pub fn decode_start(bytes: &[u8]) -> Result<(TopicPartition, u32, i64), CorruptionKind> {
    let (head, pos): (EntryHead, usize) =
        bincode::decode_from_slice(bytes, CONFIG).map_err(decode_err)?;
    let (first_offset, _): (i64, usize) =
        bincode::decode_from_slice(bytes.get(pos..).unwrap_or_default(), CONFIG)
            .map_err(decode_err)?;
    Ok((
        TopicPartition::new(head.topic, head.partition),
        head.record_count,
        first_offset,
    ))
}

/// Decode and check one entry body. Never panics.
pub fn decode_entry(bytes: &[u8]) -> Result<Entry, CorruptionKind> {
    if bytes.len() > ENTRY_BODY_BYTES_MAX {
        return Err(CorruptionKind::LengthTooLarge {
            length: bytes.len() as u64,
            max: ENTRY_BODY_BYTES_MAX as u64,
        });
    }
    let (head, mut pos): (EntryHead, usize) =
        bincode::decode_from_slice(bytes, CONFIG).map_err(decode_err)?;
    validate_topic(&head.topic).map_err(decode_err)?;
    if head.partition < 0 {
        return Err(decode_err(format!("negative partition {}", head.partition)));
    }
    let count = head.record_count as usize;
    if count == 0 {
        return Err(decode_err("entry with no records"));
    }
    if count > RECORDS_PER_ENTRY_MAX {
        return Err(decode_err(format!(
            "record count {count} is more than the {RECORDS_PER_ENTRY_MAX} an entry may hold"
        )));
    }
    let left = bytes.len() - pos;
    if count > left / RECORD_ENCODED_BYTES_MIN {
        return Err(decode_err(format!(
            "record count {count} cannot fit in {left} bytes"
        )));
    }
    // The count is only bounded by the body's length (millions at 32 MiB),
    // and the records are several times their smallest encoding in memory:
    // grow past a few thousand only as records actually decode.
    let mut records = Vec::with_capacity(count.min(RECORDS_PREALLOCATED_MAX));
    let mut previous: Option<i64> = None;
    for i in 0..count {
        let (r, used): (Record, usize) = bincode::decode_from_slice(&bytes[pos..], CONFIG)
            .map_err(|e| decode_err(format!("record {i} of {count}: {e}")))?;
        pos += used;
        if r.headers.len() > HEADERS_PER_RECORD_MAX {
            // Refused on write: only damage (with a valid CRC) gets here.
            return Err(decode_err(format!(
                "record {i} of {count} has {} headers, more than the {HEADERS_PER_RECORD_MAX} a record may have",
                r.headers.len()
            )));
        }
        if r.offset < 0 || r.offset == i64::MAX {
            // i64::MAX is refused on write (no next offset after it).
            return Err(CorruptionKind::OffsetOrder {
                detail: format!("impossible offset {}", r.offset),
            });
        }
        if let Some(p) = previous {
            if r.offset <= p {
                return Err(CorruptionKind::OffsetOrder {
                    detail: format!("offset {} follows {}", r.offset, p),
                });
            }
        }
        previous = Some(r.offset);
        records.push(r);
    }
    if pos != bytes.len() {
        return Err(CorruptionKind::TrailingBytes {
            expected: pos as u64,
            actual: bytes.len() as u64,
        });
    }
    Ok(Entry {
        tp: TopicPartition::new(head.topic, head.partition),
        records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Header, TimestampType};

    /// Entries are cut by `Record::encoded_bytes_max`: it must bound every
    /// record's real encoding, at every varint width.
    #[test]
    fn encoded_bytes_max_bounds_the_encoding() {
        let tp = TopicPartition::new("t", 0);
        let head = encode_entry(&tp, &[Record::with_value(0, "")]).len() - 7;
        let header = |name: usize, value: Option<usize>| Header {
            name: "n".repeat(name),
            value: value.map(|v| vec![7; v]),
        };
        let mut cases = Vec::new();
        for len in [0usize, 1, 250, 251, 65_535, 65_536, 70_000] {
            for offset in [0, 250, 65_536, i64::MAX - 1] {
                cases.push(Record {
                    offset,
                    timestamp_type: TimestampType::LogAppendTime,
                    timestamp_ms: i64::MIN,
                    key: Some(vec![1; len]),
                    value: Some(vec![2; len]),
                    headers: vec![header(len, Some(len)), header(0, Some(0)), header(0, None)],
                });
            }
        }
        cases.push(Record {
            headers: vec![header(0, Some(0)); 1000],
            ..Record::with_value(1, "")
        });
        for r in &cases {
            let encoded = (encode_entry(&tp, std::slice::from_ref(r)).len() - head) as u64;
            assert!(
                encoded <= r.encoded_bytes_max(),
                "offset {} payload {}: {encoded} > {}",
                r.offset,
                r.payload_bytes(),
                r.encoded_bytes_max()
            );
        }
    }

    fn sample() -> Vec<Record> {
        vec![
            Record {
                offset: 5,
                timestamp_type: TimestampType::CreateTime,
                timestamp_ms: 1_700_000_000_000,
                key: Some(b"k".to_vec()),
                value: None,
                headers: vec![Header {
                    name: "h".into(),
                    value: None,
                }],
            },
            Record::with_value(9, vec![0u8, 255]),
        ]
    }

    #[test]
    fn round_trip() {
        let tp = TopicPartition::new("t.x", 3);
        let b = encode_entry(&tp, &sample());
        let e = decode_entry(&b).unwrap();
        assert_eq!(e.tp, tp);
        assert_eq!(e.records, sample());
    }

    #[test]
    fn rejects_trailing_and_truncated() {
        let tp = TopicPartition::new("t", 0);
        let mut b = encode_entry(&tp, &sample());
        for n in 0..b.len() {
            assert!(decode_entry(&b[..n]).is_err());
        }
        b.push(0);
        assert!(decode_entry(&b).is_err());
    }

    #[test]
    fn huge_count_refused() {
        let head = EntryHead {
            topic: "t".into(),
            partition: 0,
            record_count: u32::MAX,
        };
        let b = bincode::encode_to_vec(&head, CONFIG).unwrap();
        assert!(decode_entry(&b).is_err());
    }

    /// Records of no payload, the most an entry's bytes can hold (6 bytes
    /// each encoded, more as offsets grow past a one-byte varint).
    fn tiny_records(n: usize) -> Vec<Record> {
        (0..n as i64)
            .map(|offset| Record {
                offset,
                timestamp_type: TimestampType::NotAvailable,
                timestamp_ms: 0,
                key: None,
                value: None,
                headers: Vec::new(),
            })
            .collect()
    }

    /// No build writes more records to an entry, so more is damage, and
    /// refused before they are decoded.
    #[test]
    fn more_records_than_an_entry_may_hold_are_refused() {
        let tp = TopicPartition::new("t", 0);
        let most = decode_entry(&encode_entry(&tp, &tiny_records(RECORDS_PER_ENTRY_MAX))).unwrap();
        assert_eq!(most.records.len(), RECORDS_PER_ENTRY_MAX);
        let err =
            decode_entry(&encode_entry(&tp, &tiny_records(RECORDS_PER_ENTRY_MAX + 1))).unwrap_err();
        assert!(err.to_string().contains("an entry may hold"), "{err}");
    }

    /// The writer's cut keeps within that bound even for records that
    /// count the least toward an entry's size, at the largest target.
    #[test]
    fn the_writer_never_cuts_an_entry_of_more_records_than_allowed() {
        let records = tiny_records(RECORDS_PER_ENTRY_MAX * 2);
        let target = ENTRY_BODY_BYTES_MAX / 4;
        let mut groups = 0;
        for group in crate::engine::split_entries(&records, target) {
            assert!(group.len() <= RECORDS_PER_ENTRY_MAX, "{}", group.len());
            groups += 1;
        }
        assert!(groups >= 2);
    }

    /// Never written (the write path refuses it), so only damage with a
    /// valid CRC decodes to it: refused, not handed to a reader.
    #[test]
    fn a_record_with_more_headers_than_allowed_is_refused() {
        let tp = TopicPartition::new("t", 0);
        let mut r = Record::with_value(0, "v");
        r.headers = (0..=HEADERS_PER_RECORD_MAX)
            .map(|_| Header {
                name: String::new(),
                value: None,
            })
            .collect();
        match decode_entry(&encode_entry(&tp, &[r.clone()])) {
            Err(CorruptionKind::Decode { detail }) => {
                assert!(detail.contains("headers"), "{detail}")
            }
            other => panic!(
                "expected a decode error, got {:?}",
                other.map(|e| e.records.len())
            ),
        }
        r.headers.pop();
        assert_eq!(
            decode_entry(&encode_entry(&tp, &[r]))
                .unwrap()
                .records
                .len(),
            1
        );
    }
}
