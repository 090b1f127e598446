//! Deferred writes have sled's log written behind them a MiB at a time
//! (writeback.rs): written to the file before any sync, never reported
//! durable for that, and all there after the sync, a close or a drop.

mod common;

use cairn_engine::{Engine, EngineConfig, TopicPartition, WRITEBACK_BYTES};

/// `n` writes of 1,000 records of 1 KiB (about 0.9 MiB of frames each: a
/// seventh carry no value) from offset `from`, never synced.
fn write_mibs(e: &Engine, tp: &TopicPartition, from: i64, n: i64) {
    for i in 0..n {
        let start = from + i * 1000;
        e.write(&[common::batch(tp, start..start + 1000, 1024)])
            .unwrap();
    }
}

fn data_file_bytes(dir: &std::path::Path) -> u64 {
    std::fs::metadata(dir.join("sled").join("db"))
        .unwrap()
        .len()
}

#[test]
fn deferred_writes_are_written_behind_a_mib_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[common::batch(&tp, 0..10, 100)]).unwrap();
    let before = e.stats();
    let file_before = data_file_bytes(dir.path());
    // Two writes take the unflushed bytes past a MiB; two more, once the
    // first writeback has begun (and counts afresh), again.
    write_mibs(&e, &tp, 10, 2);
    assert!(e.wait_writebacks(1), "no writeback came");
    write_mibs(&e, &tp, 2010, 2);
    assert!(e.wait_writebacks(2), "no second writeback came");
    let after = e.stats();
    assert!(after.writebacks >= 2, "{after:?}");
    // Written to the file before any sync (sled's buffer is 8 MiB: without
    // the writeback nothing of these 4 MiB would be there yet)...
    let grown = data_file_bytes(dir.path()) - file_before;
    assert!(
        grown >= WRITEBACK_BYTES + WRITEBACK_BYTES / 2,
        "the log grew {grown} bytes"
    );
    // ...but no fsync, and nothing reported durable for it.
    assert_eq!(after.fsyncs, before.fsyncs);
    assert_eq!(e.durable_offset(&tp), Some(10));
    e.sync().unwrap();
    assert_eq!(e.durable_offset(&tp), Some(4010));
    // More behind the sync, then a close: all of it kept.
    write_mibs(&e, &tp, 4010, 2);
    e.close().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(common::read_all(&e, &tp).len(), 6010);
    assert!(e.verify().unwrap().is_clean());
    // And a drop without a close syncs what the writeback left.
    write_mibs(&e, &tp, 6010, 2);
    assert!(e.wait_writebacks(1), "no writeback came");
    drop(e);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let got = common::read_all(&e, &tp);
    assert_eq!(got.len(), 8010);
    assert_eq!(got[8009], common::record(&tp, 8009, 1024));
    assert!(e.verify().unwrap().is_clean());
}

#[test]
fn appends_make_no_writeback() {
    // Each append's own sync flushes at once: a writeback beside it would
    // only race it for the same buffer.
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for i in 0..4 {
        e.append(&[common::batch(&tp, i * 1000..(i + 1) * 1000, 1024)])
            .unwrap();
    }
    // None begun: the thread never started.
    assert_eq!(e.stats().writebacks, 0);
    // Nor do writes that a sync flushes before they reach a MiB.
    for i in 4..40 {
        e.write(&[common::batch(&tp, i * 100..(i + 1) * 100, 1024)])
            .unwrap();
        if i % 5 == 0 {
            e.sync().unwrap();
        }
    }
    e.sync().unwrap();
    assert_eq!(e.stats().writebacks, 0);
    assert_eq!(e.durable_offset(&tp), Some(4000));
}
