//! The key space of the one sled tree that holds a store.
//!
//! Everything lives in one tree, in one sled log, so that a frame is always
//! logged before the index entry and partition summary that describe it:
//! after a crash the log is a prefix, and recovery rebuilds the derived keys.
//!
//! ```text
//! M<name>                              metadata (format, checkpoint, store id)
//! W<lsn u64 BE>                        a frame (frame.rs)
//! I<tp><first_offset u64 BE>           a read-index entry (index.rs)
//! P<tp>                                a partition summary (offsets.rs)
//! S<i u8>, i < 32                      the fence: empty values, written once
//! T<topic_len u8><topic bytes>         a topic's Kafka id (topics.rs, format 5)
//! <tp> = <topic_len u8><topic bytes><partition u32 BE>
//! ```
//! Big-endian numbers make sled's byte order the numeric order.
//!
//! The fence keeps the log's first frames out of the leaf that holds the
//! last partition summaries. sled stores values inside its leaves, and a
//! summary is rewritten by every write to its partition, so its leaf is
//! consolidated (logged again in full) every 10 writes. Without the fence
//! the keys right after the summaries are the first frames, `W1`, `W2`...,
//! and each consolidation rewrote them too: ~500 KB every 10–14 writes of a
//! single-partition store (`strace`; raw sled probe: 1.49× of the payload
//! written without the fence, 1.01× with it). The fence's 32 keys, inserted
//! when the store is created and never changed, make sure at least one leaf
//! boundary lies between `P` and `W` (sled splits a leaf above 16 items), so
//! summaries and frames never share a leaf again. A store created before the
//! fence (format 1, or early format 2) has none and still reads the same.
//!
//! Small values carry a CRC-32 of key ++ value ([`seal`]/[`unseal`]), so a
//! value moved to another key fails like a moved frame does.

use crate::error::CorruptionKind;
use crate::record::TopicPartition;

pub const PREFIX_META: u8 = b'M';
pub const PREFIX_WAL: u8 = b'W';
pub const PREFIX_INDEX: u8 = b'I';
pub const PREFIX_PARTITION: u8 = b'P';
pub const PREFIX_FENCE: u8 = b'S';
/// A topic's identity at its source (topics.rs, format 5).
pub const PREFIX_TOPIC: u8 = b'T';
/// Keys in the fence: two leaves' worth, so a split falls inside it.
pub const FENCE_KEYS: u8 = 32;

pub const META_FORMAT: &[u8] = b"Mformat";
pub const META_CHECKPOINT: &[u8] = b"Mcheckpoint";
/// The store's identity (format 3): see [`crate::meta::StoreId`].
pub const META_STORE: &[u8] = b"Mstore";

/// The bound on LSNs: no frame lies at or past it (a frame's lsn + span,
/// the LSN after it, is at most this), nor a checkpoint. No store gets
/// near it (2^62 frames), and recovery refuses a frame, checkpoint or
/// tombstone span past it, so LSN arithmetic on anything read from a
/// store cannot overflow.
pub const LSN_MAX: u64 = 1 << 62;

pub fn wal_key(lsn: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = PREFIX_WAL;
    k[1..].copy_from_slice(&lsn.to_be_bytes());
    k
}

pub fn parse_wal_key(key: &[u8]) -> Result<u64, CorruptionKind> {
    if key.len() != 9 || key[0] != PREFIX_WAL {
        return Err(bad_key("wal key is not W + 8 bytes"));
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[1..]);
    Ok(u64::from_be_bytes(b))
}

/// Fence key `i` (`i < FENCE_KEYS`); its value is always empty.
pub fn fence_key(i: u8) -> [u8; 2] {
    assert!(i < FENCE_KEYS);
    [PREFIX_FENCE, i]
}

/// Check a key in the fence's key space and its value.
pub fn check_fence(key: &[u8], value: &[u8]) -> Result<(), CorruptionKind> {
    match key {
        [PREFIX_FENCE, i] if *i < FENCE_KEYS => {}
        _ => return Err(bad_key("fence key is not S + a byte below 32")),
    }
    if !value.is_empty() {
        return Err(bad_key("fence key with a value"));
    }
    Ok(())
}

fn bad_key(detail: &str) -> CorruptionKind {
    CorruptionKind::BadKey {
        detail: detail.to_owned(),
    }
}

fn push_tp(out: &mut Vec<u8>, tp: &TopicPartition) {
    assert!(tp.topic.len() <= u8::MAX as usize && tp.partition >= 0);
    out.push(tp.topic.len() as u8);
    out.extend_from_slice(tp.topic.as_bytes());
    out.extend_from_slice(&(tp.partition as u32).to_be_bytes());
}

fn parse_tp(bytes: &[u8]) -> Result<(TopicPartition, &[u8]), CorruptionKind> {
    let (&len, rest) = bytes
        .split_first()
        .ok_or_else(|| bad_key("missing topic length"))?;
    let len = len as usize;
    if rest.len() < len + 4 {
        return Err(bad_key("key shorter than its topic"));
    }
    let topic = std::str::from_utf8(&rest[..len]).map_err(|_| bad_key("topic is not utf-8"))?;
    // Only valid topics are ever written (FORMAT.md): a key naming another
    // is damage, and would name a partition no read could reach.
    crate::record::validate_topic(topic).map_err(|e| bad_key(&format!("topic: {e}")))?;
    let mut p = [0u8; 4];
    p.copy_from_slice(&rest[len..len + 4]);
    let partition = u32::from_be_bytes(p);
    if partition > i32::MAX as u32 {
        return Err(bad_key("partition out of range"));
    }
    Ok((
        TopicPartition::new(topic, partition as i32),
        &rest[len + 4..],
    ))
}

pub fn index_prefix(tp: &TopicPartition) -> Vec<u8> {
    let mut k = Vec::with_capacity(6 + tp.topic.len() + 8);
    k.push(PREFIX_INDEX);
    push_tp(&mut k, tp);
    k
}

/// The first key after every index key of `tp`, for seeking past them.
pub fn index_prefix_end(tp: &TopicPartition) -> Vec<u8> {
    let mut k = index_prefix(tp);
    let n = k.len();
    // The prefix ends in the partition, at most i32::MAX (push_tp): one
    // more still fits its 4 bytes and sorts right after it.
    k[n - 4..].copy_from_slice(&(tp.partition as u32 + 1).to_be_bytes());
    k
}

pub fn index_key(tp: &TopicPartition, first_offset: i64) -> Vec<u8> {
    assert!(first_offset >= 0);
    let mut k = index_prefix(tp);
    k.extend_from_slice(&(first_offset as u64).to_be_bytes());
    k
}

pub fn parse_index_key(key: &[u8]) -> Result<(TopicPartition, i64), CorruptionKind> {
    if key.first() != Some(&PREFIX_INDEX) {
        return Err(bad_key("index key without I prefix"));
    }
    let (tp, rest) = parse_tp(&key[1..])?;
    let arr: [u8; 8] = rest
        .try_into()
        .map_err(|_| bad_key("index key offset is not 8 bytes"))?;
    let off = u64::from_be_bytes(arr);
    if off > i64::MAX as u64 {
        return Err(bad_key("index key offset out of range"));
    }
    Ok((tp, off as i64))
}

pub fn partition_key(tp: &TopicPartition) -> Vec<u8> {
    let mut k = Vec::with_capacity(6 + tp.topic.len());
    k.push(PREFIX_PARTITION);
    push_tp(&mut k, tp);
    k
}

pub fn parse_partition_key(key: &[u8]) -> Result<TopicPartition, CorruptionKind> {
    if key.first() != Some(&PREFIX_PARTITION) {
        return Err(bad_key("partition key without P prefix"));
    }
    let (tp, rest) = parse_tp(&key[1..])?;
    if !rest.is_empty() {
        return Err(bad_key("trailing bytes in partition key"));
    }
    Ok(tp)
}

/// Append a CRC-32 of `key ++ value` to `value`.
pub fn seal(key: &[u8], mut value: Vec<u8>) -> Vec<u8> {
    let mut h = crc32fast::Hasher::new();
    h.update(key);
    h.update(&value);
    let c = h.finalize();
    value.extend_from_slice(&c.to_le_bytes());
    value
}

/// Check and strip the CRC that [`seal`] added; `len` is the expected length
/// of the unsealed value.
pub fn unseal<'a>(key: &[u8], sealed: &'a [u8], len: usize) -> Result<&'a [u8], CorruptionKind> {
    if sealed.len() != len + 4 {
        return Err(if sealed.len() < len + 4 {
            CorruptionKind::Truncated {
                expected: len as u64 + 4,
                actual: sealed.len() as u64,
            }
        } else {
            CorruptionKind::TrailingBytes {
                expected: len as u64 + 4,
                actual: sealed.len() as u64,
            }
        });
    }
    let (value, c) = sealed.split_at(len);
    let stored = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    let mut h = crc32fast::Hasher::new();
    h.update(key);
    h.update(value);
    let computed = h.finalize();
    if stored != computed {
        return Err(CorruptionKind::Checksum {
            expected: stored,
            actual: computed,
        });
    }
    Ok(value)
}

/// Little-endian field reader over a value already length-checked by [`unseal`].
pub struct Fields<'a>(pub &'a [u8]);

impl Fields<'_> {
    pub fn u64(&mut self) -> u64 {
        let (h, t) = self.0.split_at(8);
        self.0 = t;
        u64::from_le_bytes(h.try_into().expect("8 bytes"))
    }
    pub fn i64(&mut self) -> i64 {
        self.u64() as i64
    }
    pub fn u32(&mut self) -> u32 {
        let (h, t) = self.0.split_at(4);
        self.0 = t;
        u32::from_le_bytes(h.try_into().expect("4 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_sort() {
        let tp = TopicPartition::new("orders", 7);
        assert_eq!(parse_wal_key(&wal_key(99)).unwrap(), 99);
        assert!(wal_key(255) < wal_key(256));
        let (t, o) = parse_index_key(&index_key(&tp, 300)).unwrap();
        assert_eq!((t, o), (tp.clone(), 300));
        assert!(index_key(&tp, 255) < index_key(&tp, 256));
        assert!(index_key(&tp, 5).starts_with(&index_prefix(&tp)));
        assert_eq!(parse_partition_key(&partition_key(&tp)).unwrap(), tp);
        assert!(parse_index_key(b"I").is_err());
        assert!(parse_index_key(b"I\xff").is_err());
        assert!(parse_partition_key(b"P\x01a\x80\x00\x00\x00").is_err());
        assert!(partition_key(&tp).as_slice() < fence_key(0).as_slice());
        assert!(fence_key(FENCE_KEYS - 1).as_slice() < wal_key(0).as_slice());
        assert!(check_fence(&fence_key(3), b"").is_ok());
        assert!(check_fence(&fence_key(3), b"x").is_err());
        assert!(check_fence(b"S\x20", b"").is_err());
        assert!(check_fence(b"S", b"").is_err());
    }

    #[test]
    fn seal_binds_key() {
        let v = seal(b"k1", vec![1, 2, 3]);
        assert_eq!(unseal(b"k1", &v, 3).unwrap(), &[1, 2, 3]);
        assert!(unseal(b"k2", &v, 3).is_err());
        assert!(unseal(b"k1", &v[..5], 3).is_err());
    }
}
