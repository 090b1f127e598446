//! Pins the on-disk format: a known entry at LSN 1 must encode to the
//! committed fixture byte for byte, and the fixture must decode back; every
//! other documented value (index entry, summary, meta keys, tombstone,
//! watermark, chunked frames) is pinned whole as hex. Regenerate the
//! fixture only for a deliberate format change: `CAIRN_BLESS=1` writes it
//! and fails; the next run checks it.

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
        // A blessing run proves nothing: it compared the bytes with
        // themselves. It fails, so that it is never taken for a pass.
        panic!("CAIRN_BLESS=1: wrote {FIXTURE}; rerun without it");
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
fn crc_is_ieee() {
    assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
}

fn varint_entry() -> Vec<u8> {
    let records = vec![
        Record {
            offset: 300,
            timestamp_type: TimestampType::NotAvailable,
            timestamp_ms: -1,
            key: None,
            value: Some(b"v".to_vec()),
            headers: vec![],
        },
        Record {
            offset: 70_000,
            timestamp_type: TimestampType::CreateTime,
            timestamp_ms: 0,
            key: Some(Vec::new()),
            value: None,
            headers: vec![],
        },
    ];
    let body = encode_entry(&TopicPartition::new("t", 1), &records);
    assert_eq!(decode_entry(&body).unwrap().records, records);
    body
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Every small value FORMAT.md documents, pinned whole (CRCs included): a
/// change to any byte of any of them is a format change. The values are
/// built by the same encoders the engine writes with, then checked against
/// bytes written down once.
#[test]
fn every_documented_value_is_pinned_byte_for_byte() {
    let tp = TopicPartition::new("t", 1);
    let (index_key, index) = IndexEntry {
        first_offset: 5,
        lsn: 7,
        chunks: 1,
        record_count: 2,
        last_offset: 6,
        timestamp_min_ms: 10,
        timestamp_max_ms: 20,
        payload_bytes: 30,
    }
    .encode(&tp);
    // Kafka's "no timestamp" (-1), as records without one are indexed:
    // two's complement, little endian.
    let (_, index_untimed) = IndexEntry {
        first_offset: 5,
        lsn: 7,
        chunks: 1,
        record_count: 2,
        last_offset: 6,
        timestamp_min_ms: -1,
        timestamp_max_ms: -1,
        payload_bytes: 30,
    }
    .encode(&tp);
    let (summary_key, summary) = PartitionSummary {
        first_offset: 5,
        next_offset: 7,
        record_count: 2,
        payload_bytes: 30,
        next_offset_floor: 3,
    }
    .encode(&tp);
    let id = cairn_engine::meta::StoreId(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
    let chunked: Vec<Vec<u8>> = frame::chunks(b"abcdefghij", 4)
        .enumerate()
        .map(|(i, (flags, c))| frame::encode(9 + i as u64, FrameKind::Records, flags, c))
        .collect();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("index key", index_key, "490174000000010000000000000005"),
        ("summary key", summary_key, "50017400000001"),
        ("wal key 258", cairn_engine::keys::wal_key(258).to_vec(), "570000000000000102"),
        ("index entry", index, "0700000000000000010000000200000006000000000000000a0000000000000014000000000000001e00000000000000caf8c676"),
        ("index entry, timestamps -1", index_untimed, "070000000000000001000000020000000600000000000000ffffffffffffffffffffffffffffffff1e00000000000000f5a69c74"),
        ("partition summary", summary, "0500000000000000070000000000000002000000000000001e000000000000000300000000000000cbae59cf"),
        ("Mformat 3", cairn_engine::meta::encode_format(3), "43524e4d030000003b9d3de8"),
        ("Mformat 4", cairn_engine::meta::encode_format(4), "43524e4d0400000082a5ea75"),
        ("Mformat 5 (written since format 5)", cairn_engine::meta::encode_format(cairn_engine::meta::FORMAT_VERSION), "43524e4d05000000e7c256cd"),
        ("topic id key of orders", cairn_engine::topics::key("orders"), "54066f7264657273"),
        ("topic id of orders", cairn_engine::topics::encode("orders", cairn_engine::TopicId::new(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210).unwrap()), "0123456789abcdeffedcba9876543210873ab02c"),
        ("Mcheckpoint 258", cairn_engine::meta::encode_checkpoint(258), "020100000000000086feb5a6"),
        ("Mstore", cairn_engine::meta::encode_store_id(id), "0123456789abcdeffedcba9876543210136e80ee"),
        (
            "tombstone frame at lsn 4, span 3",
            frame::encode(4, FrameKind::Tombstone, 0, &frame::encode_tombstone(3)),
            "43524e4601020000080000009a5eb7e10300000000000000",
        ),
        ("watermark 258", cairn_engine::watermark::encode(258).to_vec(), "43524e570201000000000000efd0e86e"),
        ("first of three chunks at lsn 9", chunked[0].clone(), "43524e460101010004000000738c6fbb61626364"),
        ("middle chunk at lsn 10", chunked[1].clone(), "43524e460101030004000000c243350265666768"),
        ("last chunk at lsn 11", chunked[2].clone(), "43524e460101020002000000515cbf75696a"),
        ("fence key 31 (its value is always empty)", cairn_engine::keys::fence_key(31).to_vec(), "531f"),
        // bincode's widths the golden frame does not reach: 0xfb + u16 LE
        // (offset 300, zig-zag 600), 0xfc + u32 LE (offset 70,000, zig-zag
        // 140,000), a negative zig-zag (timestamp -1 as 01), NotAvailable
        // as variant 0, and Some of an empty key (01 00) beside None (00).
        ("entry body: varint widths, zig-zag, NotAvailable", varint_entry(), "01740202fb580200010001017600fce0220200010001000000"),
    ];
    let mut drifted = Vec::new();
    for (what, bytes, want) in &cases {
        if hex(bytes) != *want {
            drifted.push(format!("{what}: {} (pinned {want})", hex(bytes)));
        }
    }
    assert!(
        drifted.is_empty(),
        "format drifted:\n{}",
        drifted.join("\n")
    );
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The pinned bytes above, read back by the decoders: each gives the fields
/// it was written from (the test above pins the encoders only; a decoder
/// that read a field from the wrong place, or in the wrong order, would
/// pass it).
#[test]
fn pinned_bytes_decode_to_their_fields() {
    let tp = TopicPartition::new("t", 1);
    let (index_tp, index) = IndexEntry::decode(
        &unhex("490174000000010000000000000005"),
        &unhex("0700000000000000010000000200000006000000000000000a0000000000000014000000000000001e00000000000000caf8c676"),
    )
    .unwrap();
    assert_eq!(index_tp, tp);
    assert_eq!(
        index,
        IndexEntry {
            first_offset: 5,
            lsn: 7,
            chunks: 1,
            record_count: 2,
            last_offset: 6,
            timestamp_min_ms: 10,
            timestamp_max_ms: 20,
            payload_bytes: 30,
        }
    );
    let (summary_tp, summary) = PartitionSummary::decode(
        &unhex("50017400000001"),
        &unhex("0500000000000000070000000000000002000000000000001e000000000000000300000000000000cbae59cf"),
    )
    .unwrap();
    assert_eq!(summary_tp, tp);
    assert_eq!(
        (
            summary.first_offset,
            summary.next_offset,
            summary.record_count,
            summary.payload_bytes,
            summary.next_offset_floor
        ),
        (5, 7, 2, 30, 3)
    );
    assert_eq!(
        cairn_engine::meta::decode_format(&unhex("43524e4d030000003b9d3de8")).unwrap(),
        3
    );
    assert_eq!(
        cairn_engine::meta::decode_format(&unhex("43524e4d0400000082a5ea75")).unwrap(),
        4
    );
    assert_eq!(
        cairn_engine::meta::decode_format(&unhex("43524e4d05000000e7c256cd")).unwrap(),
        5
    );
    assert_eq!(
        cairn_engine::topics::parse_key(&unhex("54066f7264657273")).unwrap(),
        "orders"
    );
    assert_eq!(
        cairn_engine::topics::decode(
            &unhex("54066f7264657273"),
            &unhex("0123456789abcdeffedcba9876543210873ab02c")
        )
        .unwrap()
        .to_string(),
        "ASNFZ4mrze_-3LqYdlQyEA"
    );
    assert_eq!(
        cairn_engine::meta::decode_checkpoint(&unhex("020100000000000086feb5a6")).unwrap(),
        258
    );
    assert_eq!(
        cairn_engine::meta::decode_store_id(&unhex("0123456789abcdeffedcba9876543210136e80ee"))
            .unwrap(),
        cairn_engine::meta::StoreId(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210)
    );
    assert_eq!(
        cairn_engine::watermark::decode(&unhex("43524e570201000000000000efd0e86e")).unwrap(),
        258
    );
    assert_eq!(
        cairn_engine::keys::parse_wal_key(&unhex("570000000000000102")).unwrap(),
        258
    );
    let tombstone = unhex("43524e4601020000080000009a5eb7e10300000000000000");
    let f = frame::decode(4, &tombstone).unwrap();
    assert_eq!(
        (f.kind, f.flags, f.span().unwrap()),
        (FrameKind::Tombstone, 0, 3)
    );
    let chunks = [
        (
            "43524e460101010004000000738c6fbb61626364",
            9,
            frame::FLAG_MORE,
            &b"abcd"[..],
        ),
        (
            "43524e460101030004000000c243350265666768",
            10,
            frame::FLAG_MORE | frame::FLAG_CONT,
            &b"efgh"[..],
        ),
        (
            "43524e460101020002000000515cbf75696a",
            11,
            frame::FLAG_CONT,
            &b"ij"[..],
        ),
    ];
    for (bytes, lsn, flags, body) in chunks {
        let bytes = unhex(bytes);
        let f = frame::decode(lsn, &bytes).unwrap();
        assert_eq!(
            (f.kind, f.flags, f.body),
            (FrameKind::Records, flags, body),
            "lsn {lsn}"
        );
    }
}
