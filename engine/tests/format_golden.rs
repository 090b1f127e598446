//! Pins the on-disk format: a known entry at LSN 1 must encode to the
//! committed fixture byte for byte, and the fixture must decode back.
//! Regenerate only for a deliberate format change: `CAIRN_BLESS=1`.

use cairn_engine::body::{decode_entry, encode_entry};
use cairn_engine::frame::{self, FrameKind};
use cairn_engine::index::IndexEntry;
use cairn_engine::offsets::PartitionSummary;
use cairn_engine::{Header, Record, TimestampType, TopicPartition};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/frame_v1_lsn1.bin"
);

fn known() -> (TopicPartition, Vec<Record>) {
    let tp = TopicPartition::new("orders", 2);
    let records = vec![
        Record {
            offset: 41,
            timestamp_type: TimestampType::CreateTime,
            timestamp_ms: 1_700_000_000_123,
            key: Some(b"key-1".to_vec()),
            value: Some(b"hello".to_vec()),
            headers: vec![
                Header {
                    name: "trace".into(),
                    value: Some(vec![0, 1, 2]),
                },
                Header {
                    name: "empty".into(),
                    value: None,
                },
            ],
        },
        Record {
            offset: 43,
            timestamp_type: TimestampType::LogAppendTime,
            timestamp_ms: 1_700_000_000_456,
            key: None,
            value: None,
            headers: vec![],
        },
    ];
    (tp, records)
}

#[test]
fn frame_matches_golden_bytes() {
    let (tp, records) = known();
    let body = encode_entry(&tp, &records);
    let bytes = frame::encode(1, FrameKind::Records, 0, &body);
    if std::env::var("CAIRN_BLESS").as_deref() == Ok("1") {
        std::fs::write(FIXTURE, &bytes).unwrap();
    }
    let golden = std::fs::read(FIXTURE).expect("fixture missing: run with CAIRN_BLESS=1 once");
    assert_eq!(bytes, golden, "frame encoding drifted from format v1");
    let f = frame::decode(1, &golden).unwrap();
    let entry = decode_entry(f.body).unwrap();
    assert_eq!((entry.tp, entry.records), (tp, records));
    // Re-encoding the decoded frame gives the same bytes.
    assert_eq!(frame::encode(1, f.kind, f.flags, f.body), golden);
}

#[test]
fn header_fields_at_documented_offsets() {
    let golden = std::fs::read(FIXTURE).unwrap();
    assert_eq!(&golden[0..4], b"CRNF");
    assert_eq!(golden[4], 1, "version");
    assert_eq!(golden[5], 1, "kind = records");
    assert_eq!(&golden[6..8], &[0, 0], "flags");
    let body_len = u32::from_le_bytes(golden[8..12].try_into().unwrap()) as usize;
    assert_eq!(body_len, golden.len() - 16);
    let mut h = crc32fast::Hasher::new();
    h.update(&1u64.to_le_bytes());
    h.update(&golden[0..12]);
    h.update(&golden[16..]);
    assert_eq!(
        u32::from_le_bytes(golden[12..16].try_into().unwrap()),
        h.finalize()
    );
    // Body starts with the topic as a varint length and bytes.
    assert_eq!(golden[16], 6);
    assert_eq!(&golden[17..23], b"orders");
}

#[test]
fn small_values_are_pinned() {
    let tp = TopicPartition::new("t", 1);
    let e = IndexEntry {
        first_offset: 5,
        lsn: 7,
        chunks: 1,
        record_count: 2,
        last_offset: 6,
        timestamp_min_ms: 10,
        timestamp_max_ms: 20,
        payload_bytes: 30,
    };
    let (k, v) = e.encode(&tp);
    assert_eq!(k, b"I\x01t\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x05");
    assert_eq!(v.len(), 52);
    assert_eq!(&v[0..8], &7u64.to_le_bytes());
    let s = PartitionSummary {
        first_offset: 5,
        next_offset: 7,
        record_count: 2,
        payload_bytes: 30,
        next_offset_floor: 0,
    };
    let (k, v) = s.encode(&tp);
    assert_eq!(k, b"P\x01t\x00\x00\x00\x01");
    assert_eq!(v.len(), 44);
    assert_eq!(
        cairn_engine::keys::wal_key(258),
        *b"W\x00\x00\x00\x00\x00\x00\x01\x02"
    );
    assert_eq!(
        cairn_engine::meta::encode_format(1)[..8],
        *b"CRNM\x01\x00\x00\x00"
    );
}

#[test]
fn crc_is_ieee() {
    assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
}
