//! The source's identity of each archived topic: Kafka's topic id
//! (KIP-516), recorded by the first run that reads it.
//!
//! ```text
//! T<topic_len u8><topic bytes>   id 16 bytes (u128 BE) | crc u32 (of key ++ value)   (format 5)
//! ```
//!
//! A topic's name is not its identity: a topic deleted and created again
//! under the same name, or the same name in another cluster (a restore's
//! target), has offsets that mean other records. An archive resumes each
//! partition at its own next offset, so without the id it would take such
//! a topic for the one it holds, and skip the new topic's records below
//! that offset. The id tells them apart; the connector compares Kafka's
//! with the one recorded here before a partition of the topic resumes.
//!
//! # Invariants
//! - A `T` key names a valid topic (`record::validate_topic`) and holds a
//!   non-zero id: Kafka's zero id means "no id" (a broker before 2.8), and
//!   is never recorded.
//! - Bindings are written by [`Engine::bind_topics`](crate::Engine::bind_topics)
//!   only, and are durable when it returns. Nothing else in the store
//!   depends on them: recovery neither reads nor rebuilds them, and a
//!   crash keeps a binding whole or not at all (one sled insert).

use std::fmt;

use base64::Engine as _;

use crate::error::{CorruptionKind, Location};
use crate::keys::{self, PREFIX_TOPIC};

/// Kafka's identity of a topic: 128 bits (a UUID) the cluster chose when
/// the topic was created. Never zero: Kafka's zero id means "none".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicId(u128);

impl TopicId {
    /// The id of these 128 bits (most significant first, as Kafka writes
    /// them), or `None` for zero, which Kafka uses for "no id".
    pub fn new(bits: u128) -> Option<TopicId> {
        (bits != 0).then_some(TopicId(bits))
    }

    /// The id's 128 bits, most significant first.
    pub fn bits(self) -> u128 {
        self.0
    }
}

/// As Kafka prints it (`kafka-topics --describe`'s `TopicId:`): the 16
/// bytes in URL-safe base64 without padding, 22 characters.
impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.0.to_be_bytes()))
    }
}

/// The key of `topic`'s binding. `topic` must be valid.
pub fn key(topic: &str) -> Vec<u8> {
    assert!(!topic.is_empty() && topic.len() <= u8::MAX as usize);
    let mut k = Vec::with_capacity(2 + topic.len());
    k.push(PREFIX_TOPIC);
    k.push(topic.len() as u8);
    k.extend_from_slice(topic.as_bytes());
    k
}

/// The topic a binding's key names.
pub fn parse_key(key: &[u8]) -> Result<String, CorruptionKind> {
    let bad = |detail: &str| CorruptionKind::BadKey {
        detail: detail.to_owned(),
    };
    let Some((&PREFIX_TOPIC, rest)) = key.split_first() else {
        return Err(bad("topic id key without T prefix"));
    };
    let (&len, topic) = rest
        .split_first()
        .ok_or_else(|| bad("topic id key without a topic length"))?;
    if topic.len() != len as usize {
        return Err(bad("topic id key's topic is not its length"));
    }
    let topic = std::str::from_utf8(topic).map_err(|_| bad("topic is not utf-8"))?;
    crate::record::validate_topic(topic).map_err(|e| bad(&format!("topic: {e}")))?;
    Ok(topic.to_owned())
}

pub fn encode(topic: &str, id: TopicId) -> Vec<u8> {
    keys::seal(&key(topic), id.0.to_be_bytes().to_vec())
}

/// The id a binding's value holds; `key` is its key (the CRC covers it).
pub fn decode(key: &[u8], value: &[u8]) -> Result<TopicId, CorruptionKind> {
    let v = keys::unseal(key, value, 16)?;
    let bits = u128::from_be_bytes(v.try_into().expect("16 bytes"));
    TopicId::new(bits).ok_or_else(|| CorruptionKind::BadMeta {
        detail: "topic id zero (Kafka's \"no id\", never recorded)".into(),
    })
}

/// Decode one binding, its damage named at its topic (or at its key when
/// the key does not parse).
pub(crate) fn decode_entry(
    key: &[u8],
    value: &[u8],
) -> Result<(String, TopicId), (Location, CorruptionKind)> {
    let topic = parse_key(key).map_err(|k| {
        (
            Location::Key {
                key_hex: crate::recovery::hex(key),
            },
            k,
        )
    })?;
    match decode(key, value) {
        Ok(id) => Ok((topic, id)),
        Err(k) => Err((Location::TopicId { topic }, k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_round_trips_and_names_its_damage() {
        let id = TopicId::new(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210).unwrap();
        let (k, v) = (key("orders"), encode("orders", id));
        assert_eq!(decode_entry(&k, &v).unwrap(), ("orders".to_owned(), id));
        // Kafka's form: the 16 bytes in URL-safe base64, no padding.
        assert_eq!(id.to_string(), "ASNFZ4mrze_-3LqYdlQyEA");
        assert_eq!(TopicId::new(0), None);
        // Moved to another topic's key: the CRC covers the key.
        let (loc, kind) = decode_entry(&key("other"), &v).unwrap_err();
        assert_eq!(
            loc,
            Location::TopicId {
                topic: "other".into()
            }
        );
        assert!(matches!(kind, CorruptionKind::Checksum { .. }), "{kind:?}");
        let zero = keys::seal(&k, vec![0; 16]);
        assert!(matches!(
            decode(&k, &zero),
            Err(CorruptionKind::BadMeta { .. })
        ));
        assert!(matches!(
            decode(&k, &v[..19]),
            Err(CorruptionKind::Truncated { .. })
        ));
        for bad in [
            &b"T"[..],
            b"T\x02a",
            b"T\x01..",
            b"T\x01\xff",
            b"X\x01a",
            b"T\x02..",
        ] {
            let (loc, kind) = decode_entry(bad, &v).unwrap_err();
            assert!(matches!(loc, Location::Key { .. }), "{bad:?}: {loc:?}");
            assert!(
                matches!(kind, CorruptionKind::BadKey { .. }),
                "{bad:?}: {kind:?}"
            );
        }
    }
}
