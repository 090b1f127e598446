//! rdkafka messages to engine records.

use cairn_engine::{Header, Record, TimestampType};
use rdkafka::message::{BorrowedMessage, Headers, Message, Timestamp};

pub fn to_record(m: &BorrowedMessage<'_>) -> Record {
    let (timestamp_type, timestamp_ms) = match m.timestamp() {
        Timestamp::NotAvailable => (TimestampType::NotAvailable, -1),
        Timestamp::CreateTime(t) => (TimestampType::CreateTime, t),
        Timestamp::LogAppendTime(t) => (TimestampType::LogAppendTime, t),
    };
    let headers = m
        .headers()
        .map(|hs| {
            hs.iter()
                .map(|h| Header {
                    name: h.key.to_owned(),
                    value: h.value.map(<[u8]>::to_vec),
                })
                .collect()
        })
        .unwrap_or_default();
    Record {
        offset: m.offset(),
        timestamp_type,
        timestamp_ms,
        key: m.key().map(<[u8]>::to_vec),
        value: m.payload().map(<[u8]>::to_vec),
        headers,
    }
}
