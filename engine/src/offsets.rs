//! Per-partition summaries and the durable offsets the engine reports.
//!
//! Summary value (40 bytes + 4 CRC):
//! ```text
//! first_offset i64 | next_offset i64 | record_count u64 | payload_bytes u64
//! | next_offset_floor i64 | crc u32 (of key ++ value)
//! ```
//!
//! # Invariants
//! - `next_offset` is one past the highest offset ever appended for the
//!   partition, or the offset it was advanced to past offsets that held no
//!   record (`Engine::advance_partitions`, format 4), whichever is higher.
//!   It never decreases, not even when retention deletes frames:
//!   `next_offset_floor` remembers it across a truncation that empties the
//!   partition, and an advance sets both.
//! - The summary is inserted after the frames and index entries it counts,
//!   into the same sled log, which a crash cuts to a prefix: a summary never
//!   counts frames that are not there. One that lags its frames is brought
//!   up to date by recovery from the frames past the checkpoint.

use std::collections::BTreeMap;

use crate::error::CorruptionKind;
use crate::keys::{self, Fields};
use crate::record::TopicPartition;

const VALUE_BYTES: usize = 40;

/// What the store holds for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionSummary {
    /// Lowest offset still stored (after retention); equals `next_offset` when empty.
    pub first_offset: i64,
    /// One past the highest offset appended, or where it was advanced to:
    /// where a consumer resumes.
    pub next_offset: i64,
    pub record_count: u64,
    pub payload_bytes: u64,
    /// A lower bound for `next_offset` whatever the index holds: as it was
    /// at the last truncation that emptied the partition, or at the last
    /// advance; the start for a partition `start_partitions` made.
    pub next_offset_floor: i64,
}

impl PartitionSummary {
    /// A partition that holds nothing and resumes at `offset`: first, next
    /// and floor all there (a start, or an advance of a partition the store
    /// held nothing of).
    pub fn empty_at(offset: i64) -> PartitionSummary {
        PartitionSummary {
            first_offset: offset,
            next_offset: offset,
            record_count: 0,
            payload_bytes: 0,
            next_offset_floor: offset,
        }
    }

    pub fn encode(&self, tp: &TopicPartition) -> (Vec<u8>, Vec<u8>) {
        let key = keys::partition_key(tp);
        let mut v = Vec::with_capacity(VALUE_BYTES + 4);
        v.extend_from_slice(&self.first_offset.to_le_bytes());
        v.extend_from_slice(&self.next_offset.to_le_bytes());
        v.extend_from_slice(&self.record_count.to_le_bytes());
        v.extend_from_slice(&self.payload_bytes.to_le_bytes());
        v.extend_from_slice(&self.next_offset_floor.to_le_bytes());
        let v = keys::seal(&key, v);
        (key, v)
    }

    pub fn decode(key: &[u8], value: &[u8]) -> Result<(TopicPartition, Self), CorruptionKind> {
        let tp = keys::parse_partition_key(key)?;
        let mut f = Fields(keys::unseal(key, value, VALUE_BYTES)?);
        let s = PartitionSummary {
            first_offset: f.i64(),
            next_offset: f.i64(),
            record_count: f.u64(),
            payload_bytes: f.u64(),
            next_offset_floor: f.i64(),
        };
        // Also under a good CRC (one can be forged), as an index entry's
        // values are: a floor below 0 no writer makes (checked since the
        // night of 2026-12-04). A record count above next − first is not
        // refused here: a truncation over a lost index entry writes one
        // (tests/corruption.rs), and the store must still open for verify
        // to name the loss; reads and verify report the count instead.
        if s.first_offset < 0
            || s.next_offset < s.first_offset
            || s.next_offset_floor > s.next_offset
            || s.next_offset_floor < 0
        {
            return Err(CorruptionKind::SummaryMismatch {
                detail: format!("impossible summary {s:?}"),
            });
        }
        Ok((tp, s))
    }
}

/// Durable next offsets, as reported by a completed fsync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurableOffsets {
    /// Per partition: one past the highest durable offset. Commit this value.
    pub offsets: BTreeMap<TopicPartition, i64>,
    /// Records this call wrote.
    pub appended_records: u64,
    /// Records this call dropped as redelivered: below their partition's
    /// next offset when the call came ([`crate::Engine::append`]).
    pub duplicate_records: u64,
}

impl DurableOffsets {
    /// The durable next offset of `tp`, if anything was ever stored for it.
    pub fn get(&self, tp: &TopicPartition) -> Option<i64> {
        self.offsets.get(tp).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let tp = TopicPartition::new("t", 0);
        let s = PartitionSummary {
            first_offset: 3,
            next_offset: 10,
            record_count: 7,
            payload_bytes: 70,
            next_offset_floor: 0,
        };
        let (k, v) = s.encode(&tp);
        assert_eq!(PartitionSummary::decode(&k, &v).unwrap(), (tp, s));
    }

    /// Values no writer makes are refused even under a good CRC: a floor
    /// below 0, as next below first.
    #[test]
    fn impossible_summaries_are_refused_under_a_good_crc() {
        let tp = TopicPartition::new("t", 0);
        let good = PartitionSummary {
            first_offset: 3,
            next_offset: 10,
            record_count: 7,
            payload_bytes: 70,
            next_offset_floor: 0,
        };
        for bad in [
            PartitionSummary {
                next_offset_floor: -1,
                ..good
            },
            PartitionSummary {
                next_offset: 2,
                next_offset_floor: 0,
                ..good
            },
        ] {
            let (k, v) = bad.encode(&tp);
            assert!(
                matches!(
                    PartitionSummary::decode(&k, &v),
                    Err(CorruptionKind::SummaryMismatch { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
