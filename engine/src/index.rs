//! The sparse read index: one entry per records entry, keyed by partition and
//! the entry's first offset.
//!
//! Value (48 bytes + 4 CRC):
//! ```text
//! lsn u64 | chunks u32 | record_count u32 | last_offset i64
//! | timestamp_min_ms i64 | timestamp_max_ms i64 | payload_bytes u64 | crc u32 (of key ++ value)
//! ```
//!
//! # Invariants
//! - An index entry exists exactly for each records entry in the log, and
//!   names its first LSN and chunk count.
//! - Index entries of one partition cover disjoint, increasing offset ranges.

use crate::error::CorruptionKind;
use crate::keys::{self, Fields};
use crate::record::{Record, TopicPartition};

const VALUE_BYTES: usize = 8 + 4 + 4 + 8 + 8 + 8 + 8;

/// Most frames one entry can take: the largest body in the smallest frames
/// any build writes (config.rs refuses smaller).
pub const CHUNKS_PER_ENTRY_MAX: usize =
    crate::body::ENTRY_BODY_BYTES_MAX / crate::config::FRAME_BODY_BYTES_MIN;

/// One read-index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub first_offset: i64,
    pub lsn: u64,
    pub chunks: u32,
    pub record_count: u32,
    pub last_offset: i64,
    pub timestamp_min_ms: i64,
    pub timestamp_max_ms: i64,
    pub payload_bytes: u64,
}

impl IndexEntry {
    /// Describe the records of one entry written at `lsn` in `chunks` frames.
    pub fn describe(lsn: u64, chunks: u32, records: &[Record]) -> Self {
        assert!(!records.is_empty());
        IndexEntry {
            first_offset: records[0].offset,
            lsn,
            chunks,
            record_count: records.len() as u32,
            last_offset: records[records.len() - 1].offset,
            timestamp_min_ms: records.iter().map(|r| r.timestamp_ms).min().unwrap_or(-1),
            timestamp_max_ms: records.iter().map(|r| r.timestamp_ms).max().unwrap_or(-1),
            payload_bytes: records.iter().map(Record::payload_bytes).sum(),
        }
    }

    pub fn encode(&self, tp: &TopicPartition) -> (Vec<u8>, Vec<u8>) {
        let key = keys::index_key(tp, self.first_offset);
        let mut v = Vec::with_capacity(VALUE_BYTES + 4);
        v.extend_from_slice(&self.lsn.to_le_bytes());
        v.extend_from_slice(&self.chunks.to_le_bytes());
        v.extend_from_slice(&self.record_count.to_le_bytes());
        v.extend_from_slice(&self.last_offset.to_le_bytes());
        v.extend_from_slice(&self.timestamp_min_ms.to_le_bytes());
        v.extend_from_slice(&self.timestamp_max_ms.to_le_bytes());
        v.extend_from_slice(&self.payload_bytes.to_le_bytes());
        let v = keys::seal(&key, v);
        (key, v)
    }

    /// Decode and check an index entry. Never panics; bounds what retention
    /// and reads take from it (`chunks` frames from `lsn`).
    pub fn decode(key: &[u8], value: &[u8]) -> Result<(TopicPartition, Self), CorruptionKind> {
        let (tp, first_offset) = keys::parse_index_key(key)?;
        let mut f = Fields(keys::unseal(key, value, VALUE_BYTES)?);
        let e = IndexEntry {
            first_offset,
            lsn: f.u64(),
            chunks: f.u32(),
            record_count: f.u32(),
            last_offset: f.i64(),
            timestamp_min_ms: f.i64(),
            timestamp_max_ms: f.i64(),
            payload_bytes: f.u64(),
        };
        // Checked even under a good CRC (a CRC can be forged): every use of
        // `lsn + chunks` and `last_offset + 1` then stays in range, and the
        // counts and times status and retention report are possible ones
        // (more records than offsets in the range, or a newest time below
        // the oldest, cannot be written).
        if e.chunks == 0
            || e.record_count == 0
            || e.last_offset < e.first_offset
            || e.last_offset == i64::MAX
            || i128::from(e.record_count) > i128::from(e.last_offset) - i128::from(first_offset) + 1
            || e.timestamp_min_ms > e.timestamp_max_ms
            || e.lsn == 0
            || e.chunks as usize > CHUNKS_PER_ENTRY_MAX
            || e.record_count as usize > crate::body::RECORDS_PER_ENTRY_MAX
            || e.lsn.saturating_add(u64::from(e.chunks)) > keys::LSN_MAX
        {
            return Err(CorruptionKind::IndexMismatch {
                detail: format!("impossible index entry {e:?}"),
            });
        }
        Ok((tp, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let tp = TopicPartition::new("t", 1);
        let recs = vec![Record::with_value(4, "ab"), Record::with_value(8, "c")];
        let e = IndexEntry::describe(12, 2, &recs);
        assert_eq!(e.payload_bytes, 3);
        let (k, v) = e.encode(&tp);
        assert_eq!(IndexEntry::decode(&k, &v).unwrap(), (tp, e));
        let mut bad = v.clone();
        bad[0] ^= 1;
        assert!(IndexEntry::decode(&k, &bad).is_err());
    }

    /// Refused under a valid CRC: more frames than any entry takes, or
    /// frames past the largest LSN.
    #[test]
    fn impossible_spans_are_refused() {
        let tp = TopicPartition::new("t", 1);
        let recs = vec![Record::with_value(4, "ab")];
        let most = CHUNKS_PER_ENTRY_MAX as u32;
        for (lsn, chunks, ok) in [
            (1, most, true),
            (1, most + 1, false),
            (keys::LSN_MAX - 1, 1, true),
            (keys::LSN_MAX, 1, false),
            (u64::MAX, 1, false),
        ] {
            let (k, v) = IndexEntry::describe(lsn, chunks, &recs).encode(&tp);
            assert_eq!(
                IndexEntry::decode(&k, &v).is_ok(),
                ok,
                "lsn {lsn}, {chunks} chunks"
            );
        }
    }

    /// Refused under a valid CRC: more records than offsets in the entry's
    /// range, or a newest timestamp below the oldest.
    #[test]
    fn impossible_counts_and_times_are_refused() {
        let tp = TopicPartition::new("t", 1);
        let recs = vec![Record::with_value(4, "ab"), Record::with_value(5, "c")];
        let good = IndexEntry::describe(12, 1, &recs);
        for (e, ok) in [
            (good, true),
            (
                IndexEntry {
                    record_count: 3,
                    ..good
                },
                false,
            ),
            (
                IndexEntry {
                    timestamp_min_ms: good.timestamp_max_ms + 1,
                    ..good
                },
                false,
            ),
            // The widest range any entry may name: no overflow, and taken.
            (
                IndexEntry {
                    first_offset: 0,
                    last_offset: i64::MAX - 1,
                    ..good
                },
                true,
            ),
        ] {
            let (k, v) = e.encode(&tp);
            assert_eq!(IndexEntry::decode(&k, &v).is_ok(), ok, "{e:?}");
        }
    }
}
