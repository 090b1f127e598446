//! rdkafka headers to engine headers, and engine records back to rdkafka
//! records (restore, and the demo's producer). Records taken from Kafka
//! become engine records in `fetch.rs`.

use cairn_engine::{Header, Record, TimestampType};
use rdkafka::message::{Header as KafkaHeader, Headers, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use rdkafka::util::IntoOpaque;

/// Why a record with a header name that is not UTF-8 cannot be archived.
pub(crate) const HEADER_NAME_NOT_UTF8: &str =
    "a header name is not UTF-8 (Kafka's protocol requires it); the archive stores header names as text";

/// Why a record whose header name holds a NUL byte is not archived:
/// librdkafka's C API gives a name as a C string, so the name read ends at
/// the NUL, and archived so the record would be changed without a word
/// (until 2026-12-07 it was; found by an audit).
pub(crate) const HEADER_NAME_HOLDS_NUL: &str =
    "a header name holds a NUL byte, which librdkafka's C API cuts the name short at: archived, the record would be changed";

/// `read` of text rust-rdkafka hands over as `&str` (a header name, an
/// offset's commit metadata), or `None` where rust-rdkafka panics because
/// the bytes are not UTF-8 (its `to_str().unwrap()`). Kafka's protocol
/// makes them strings, but any client can send other bytes. The panic's
/// message still reaches stderr through the panic hook.
pub(crate) fn unless_not_utf8<T>(read: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).ok()
}

/// A record's headers, or why the record cannot be archived: a header
/// name that is not UTF-8.
pub(crate) fn headers_of<H: Headers>(hs: &H) -> Result<Vec<Header>, String> {
    unless_not_utf8(|| {
        hs.iter()
            .map(|h| Header {
                name: h.key.to_owned(),
                value: h.value.map(<[u8]>::to_vec),
            })
            .collect()
    })
    .ok_or_else(|| HEADER_NAME_NOT_UTF8.to_owned())
}

/// The archived timestamp, if Kafka can take it: librdkafka reads 0 as
/// "now", and a broker that rebuilds a batch (to recompress it, or to
/// convert its format) refuses any negative timestamp but -1, Kafka's "no
/// timestamp" (its `MemoryRecordsBuilder`), failing the whole batch. So
/// -1, which a broker gives a record it up-converts from its oldest
/// format, is sent as archived (since 2026-12-05; before, it was replaced
/// too), and 0 and every other negative one are not. A record archived
/// without one has none. A log-append time is sent as a create time (a
/// topic set to LogAppendTime replaces it on arrival).
pub fn sendable_timestamp(r: &Record) -> Option<i64> {
    (r.timestamp_type != TimestampType::NotAvailable
        && (r.timestamp_ms > 0 || r.timestamp_ms == -1))
        .then_some(r.timestamp_ms)
}

/// `r` as a record for `partition` of `topic`: its key, value and headers
/// as archived (null stays null, empty stays empty), then `extra` headers,
/// and its timestamp when the producer can send it ([`sendable_timestamp`];
/// otherwise the producer stamps the time of sending).
pub fn to_base_record<'a, D: IntoOpaque>(
    r: &'a Record,
    topic: &'a str,
    partition: i32,
    opaque: D,
    extra: &[(&str, &[u8])],
) -> BaseRecord<'a, [u8], [u8], D> {
    let mut record = BaseRecord::with_opaque_to(topic, opaque).partition(partition);
    // No headers, no allocation (most records have none).
    if !r.headers.is_empty() || !extra.is_empty() {
        let mut headers = OwnedHeaders::new_with_capacity(r.headers.len() + extra.len());
        for h in &r.headers {
            headers = headers.insert(KafkaHeader {
                key: &h.name,
                value: h.value.as_deref(),
            });
        }
        for (key, value) in extra {
            headers = headers.insert(KafkaHeader {
                key,
                value: Some(*value),
            });
        }
        record = record.headers(headers);
    }
    if let Some(k) = &r.key {
        record = record.key(k.as_slice());
    }
    if let Some(v) = &r.value {
        record = record.payload(v.as_slice());
    }
    if let Some(ts) = sendable_timestamp(r) {
        record = record.timestamp(ts);
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Header as KafkaHeader;

    /// Headers as rust-rdkafka's borrowed ones behave on a name that is not
    /// UTF-8: `try_get` panics (its `to_str().unwrap()`).
    struct BadName;

    impl Headers for BadName {
        fn count(&self) -> usize {
            2
        }

        fn try_get(&self, idx: usize) -> Option<KafkaHeader<'_, &[u8]>> {
            match idx {
                0 => Some(KafkaHeader {
                    key: "fine",
                    value: Some(b"v"),
                }),
                1 => {
                    // What rust-rdkafka's `to_str().unwrap()` does to it.
                    let name = String::from_utf8(vec![0xff]);
                    Some(KafkaHeader {
                        key: name.map(|_| "unreachable").unwrap(),
                        value: None,
                    })
                }
                _ => None,
            }
        }
    }

    #[test]
    fn a_header_name_that_is_not_utf8_is_a_reason_not_a_panic() {
        let err = headers_of(&BadName).unwrap_err();
        assert!(err.contains("not UTF-8"), "{err}");
        let fine = OwnedHeaders::new().insert(KafkaHeader {
            key: "k",
            value: Some(b"v".as_slice()),
        });
        let got = headers_of(&fine).unwrap();
        assert_eq!(
            got,
            vec![Header {
                name: "k".into(),
                value: Some(b"v".to_vec())
            }]
        );
    }
}
