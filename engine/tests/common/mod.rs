//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use cairn_engine::{Header, Record, RecordBatch, TimestampType, TopicPartition};

/// The seed for a randomised test: `CAIRN_SEED` if set, else fresh. Printed
/// so that a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = match std::env::var("CAIRN_SEED") {
        Ok(s) => s.parse().expect("CAIRN_SEED must be a u64"),
        Err(_) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            t.as_nanos() as u64 ^ (std::process::id() as u64) << 32
        }
    };
    eprintln!("{test}: CAIRN_SEED={seed}");
    seed
}

/// A deterministic record for `offset`, with a mix of keys, nulls and headers.
pub fn record(tp: &TopicPartition, offset: i64, value_len: usize) -> Record {
    let mut value = format!("{}-{}-{}:", tp.topic, tp.partition, offset).into_bytes();
    while value.len() < value_len {
        value.push(b'a' + (value.len() % 26) as u8);
    }
    value.truncate(value_len.max(1));
    Record {
        offset,
        timestamp_type: TimestampType::CreateTime,
        timestamp_ms: 1_700_000_000_000 + offset * 10,
        key: (offset % 3 != 0).then(|| format!("k{offset}").into_bytes()),
        value: (offset % 7 != 0).then_some(value),
        headers: if offset % 2 == 0 {
            vec![Header {
                name: "h".into(),
                value: (offset % 4 == 0).then(|| vec![offset as u8]),
            }]
        } else {
            vec![]
        },
    }
}

pub fn batch(
    tp: &TopicPartition,
    offsets: impl IntoIterator<Item = i64>,
    value_len: usize,
) -> RecordBatch {
    RecordBatch {
        tp: tp.clone(),
        records: offsets
            .into_iter()
            .map(|o| record(tp, o, value_len))
            .collect(),
    }
}

/// Open the store's sled tree directly, bypassing the engine, to damage it.
/// The engine must be closed or dropped first.
pub fn with_raw_tree<T>(dir: &std::path::Path, f: impl FnOnce(&sled::Tree) -> T) -> T {
    let db = cairn_engine::EngineConfig::new(dir)
        .open_sled()
        .expect("open sled directly");
    let tree = db.open_tree("cairn").unwrap();
    let out = f(&tree);
    db.flush().unwrap();
    out
}

pub fn wal_key(lsn: u64) -> [u8; 9] {
    cairn_engine::keys::wal_key(lsn)
}

pub fn read_all(engine: &cairn_engine::Engine, tp: &TopicPartition) -> Vec<Record> {
    engine.read(tp, 0).unwrap().map(|r| r.unwrap()).collect()
}
