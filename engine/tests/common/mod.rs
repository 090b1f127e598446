//! Helpers shared by the engine's integration tests.
#![allow(dead_code, unused_imports)]

use cairn_engine::{Record, TopicPartition};

// One implementation for the tests, the fuzz targets and the benches.
pub use cairn_engine::fuzzing::{batch, record, seed, skip, with_raw_tree};

/// (frame LSNs, reserved slot LSNs) as stored, read through sled directly.
/// The engine must be closed or dropped first.
pub fn wal_layout(dir: &std::path::Path) -> (Vec<u64>, Vec<u64>) {
    with_raw_tree(dir, |t| {
        let (mut frames, mut reserved) = (Vec::new(), Vec::new());
        for item in t.scan_prefix([cairn_engine::keys::PREFIX_WAL]) {
            let (k, v) = item.unwrap();
            let lsn = cairn_engine::keys::parse_wal_key(&k).unwrap();
            if cairn_engine::slots::is_slot(&v) {
                reserved.push(lsn);
            } else {
                frames.push(lsn);
            }
        }
        (frames, reserved)
    })
}

pub fn wal_key(lsn: u64) -> [u8; 9] {
    cairn_engine::keys::wal_key(lsn)
}

pub fn read_all(engine: &cairn_engine::Engine, tp: &TopicPartition) -> Vec<Record> {
    engine.read(tp, 0).unwrap().map(|r| r.unwrap()).collect()
}

/// Partitions 0..32 of topic `t`: a put over all of them is 32 frames, so a
/// few puts use up the slots a sync tops up.
pub fn thirty_two() -> Vec<TopicPartition> {
    (0..32).map(|p| TopicPartition::new("t", p)).collect()
}

/// Put `i` of a run over `tps`: records `i*5..i*5+5` of each, 20 B values.
pub fn put_over(tps: &[TopicPartition], i: i64) -> Vec<cairn_engine::RecordBatch> {
    tps.iter()
        .map(|tp| batch(tp, i * 5..i * 5 + 5, 20))
        .collect()
}

/// The corruption an open of `cfg`'s store is refused with (its location
/// and kind); `what` names the case when it opens or fails otherwise.
pub fn open_refused(
    cfg: cairn_engine::EngineConfig,
    what: &str,
) -> (cairn_engine::Location, cairn_engine::CorruptionKind) {
    match cairn_engine::Engine::open(cfg) {
        Err(cairn_engine::Error::Corruption { location, kind }) => (location, kind),
        Err(other) => panic!("{what}: expected corruption, got {other}"),
        Ok(_) => panic!("{what}: expected corruption, got an engine"),
    }
}

/// Waits, without sleeping, until `cond` holds; a minute without it is a
/// failure rather than a hang.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting for {what}"
        );
        std::thread::yield_now();
    }
}

/// The stored log is frames `1..=frames` and right above them a contiguous
/// reserve of slots, at least `SLOTS_AHEAD_MIN` and at most a full run.
pub fn assert_frames_then_reserve(dir: &std::path::Path, frames: u64) {
    use cairn_engine::slots;
    let (stored, reserved) = wal_layout(dir);
    assert_eq!(stored, (1..=frames).collect::<Vec<_>>());
    let ahead = reserved.len() as u64;
    assert!(
        (slots::SLOTS_AHEAD_MIN..=slots::SLOTS_AHEAD_MIN + slots::SLOTS_RESERVED_CHUNK)
            .contains(&ahead),
        "{ahead} slots ahead"
    );
    assert_eq!(
        reserved,
        (frames + 1..frames + 1 + ahead).collect::<Vec<_>>()
    );
}

/// At failpoint `at`, the first time it is reached: another thread's write
/// of 1,400 records of 1 KiB from offset 110 takes the unflushed bytes past
/// a MiB, and the writeback it asks for has run (failed, with
/// `wal::writeback::err` armed) before the failpoint returns. Whether the
/// hook has run.
pub fn writeback_at(
    at: &str,
    e: &std::sync::Arc<cairn_engine::Engine>,
    tp: &TopicPartition,
) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let hooked = std::sync::Arc::new(AtomicBool::new(false));
    let (e, tp, hooked_) = (e.clone(), tp.clone(), hooked.clone());
    fail::cfg_callback(at, move || {
        if hooked_.swap(true, Ordering::SeqCst) {
            return;
        }
        let (e, tp) = (e.clone(), tp.clone());
        std::thread::spawn(move || {
            e.write(&[batch(&tp, 110..1510, 1024)]).unwrap();
            assert!(e.wait_writebacks(1), "the writeback never ran");
        })
        .join()
        .unwrap();
    })
    .unwrap();
    hooked
}

/// What a sync that a failed writeback failed must show: poisoned as the
/// writeback (`err`), nothing published past the 100 records appended
/// before; then, the engine dropped (the last handle: the hook's is gone),
/// a reopen that names the writeback as the poison and verifies clean.
/// Returns the reopened engine.
pub fn failed_as_writeback(
    err: cairn_engine::Error,
    e: std::sync::Arc<cairn_engine::Engine>,
    tp: &TopicPartition,
) -> cairn_engine::Engine {
    assert!(
        matches!(err, cairn_engine::Error::Poisoned { op, .. } if op == cairn_engine::WRITEBACK_OP),
        "{err}"
    );
    assert_eq!(
        e.durable_offset(tp),
        Some(100),
        "nothing published after the failure"
    );
    assert!(e.is_poisoned());
    let dir = e.config().path.clone();
    let e = std::sync::Arc::into_inner(e).expect("the hook's clone is gone");
    drop(e);
    let e = cairn_engine::Engine::open(cairn_engine::EngineConfig::new(&dir)).unwrap();
    let before = e.recovery_report().poisoned_before.clone().unwrap();
    assert!(before.reason.starts_with("writeback: "), "{before:?}");
    assert!(e.verify().unwrap().is_clean());
    e
}

/// An engine over `dir` whose partition `t-0` holds 100 records of 100 B
/// appended (synced) and 10 more written, not synced: where the writeback
/// failure tests begin ([`writeback_at`], [`failed_as_writeback`]).
pub fn hundred_synced_ten_not(
    dir: &std::path::Path,
) -> (std::sync::Arc<cairn_engine::Engine>, TopicPartition) {
    let tp = TopicPartition::new("t", 0);
    let e = cairn_engine::Engine::open(cairn_engine::EngineConfig::new(dir)).unwrap();
    e.append(&[batch(&tp, 0..100, 100)]).unwrap();
    e.write(&[batch(&tp, 100..110, 100)]).unwrap();
    (std::sync::Arc::new(e), tp)
}
