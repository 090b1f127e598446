//! `Engine::verify` on an engine that is being written and pruned: it checks
//! the store as it stood when it started, and reports no damage that is only
//! a write or a truncation in progress.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cairn_engine::fuzzing::small_config;
use cairn_engine::{Engine, TopicPartition, FAILPOINT_VERIFY_AFTER_LOG};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The failpoint is process-wide: one test at a time in this binary.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn appends_in_the_middle_of_a_verify_are_not_damage() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(Engine::open(small_config(dir.path())).unwrap());
    let a = TopicPartition::new("live", 0);
    let b = TopicPartition::new("live", 1);
    let late = TopicPartition::new("late", 0);
    engine
        .append(&[
            common::batch(&a, 0..200, 100),
            common::batch(&b, 0..50, 100),
        ])
        .unwrap();
    let before = engine.verify().unwrap();
    assert!(before.is_clean(), "{:?}", before.problems);

    // Between the log scan and the index scan: more records for `a` (its
    // index grows and its stored summary moves on), a partition that did
    // not exist, and entries of several frames for `b` that are written but
    // not yet synced.
    let fired = Arc::new(AtomicBool::new(false));
    let (writer, once) = (engine.clone(), fired.clone());
    let (a2, b2, late2) = (a.clone(), b.clone(), late.clone());
    fail::cfg_callback(FAILPOINT_VERIFY_AFTER_LOG, move || {
        if once.swap(true, Ordering::SeqCst) {
            return;
        }
        writer
            .append(&[
                common::batch(&a2, 200..400, 100),
                common::batch(&late2, 0..10, 100),
            ])
            .unwrap();
        writer.write(&[common::batch(&b2, 50..60, 3000)]).unwrap();
    })
    .unwrap();
    let during = engine.verify();
    fail::remove(FAILPOINT_VERIFY_AFTER_LOG);
    let during = during.unwrap();
    assert!(fired.load(Ordering::SeqCst), "the failpoint did not run");
    assert!(during.is_clean(), "{:?}", during.problems);
    // It checked the store as it was when it started.
    assert_eq!(
        (
            during.records,
            during.entries,
            during.index_entries,
            during.partitions
        ),
        (
            before.records,
            before.entries,
            before.index_entries,
            before.partitions
        )
    );

    // What is durable since: `b`'s ten written records wait for a sync.
    let after = engine.verify().unwrap();
    assert!(after.is_clean(), "{:?}", after.problems);
    assert_eq!(after.records, before.records + 200 + 10);
    assert_eq!(after.partitions, 3);
    engine.sync().unwrap();
    let synced = engine.verify().unwrap();
    assert!(synced.is_clean(), "{:?}", synced.problems);
    assert_eq!(synced.records, before.records + 200 + 10 + 10);
}

/// A live verify counts and checks what is durable, as `status`, export
/// and backup read: records written and not yet synced (a run's
/// `--commit interval:MS` between its fsyncs) are left for the next one,
/// as a failed fsync could still take them (until 2026-12-07 it counted
/// them; an audit).
#[test]
fn a_live_verify_counts_what_is_durable() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(small_config(dir.path())).unwrap();
    let a = TopicPartition::new("live", 0);
    let fresh = TopicPartition::new("fresh", 0);
    engine.append(&[common::batch(&a, 0..100, 100)]).unwrap();
    engine
        .write(&[
            common::batch(&a, 100..150, 100),
            common::batch(&fresh, 0..7, 3000),
        ])
        .unwrap();
    let r = engine.verify().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert_eq!((r.records, r.partitions), (100, 1), "{r:?}");
    let durable: u64 = engine.partitions().iter().map(|p| p.record_count).sum();
    assert_eq!(r.records, durable);
    engine.sync().unwrap();
    let r = engine.verify().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert_eq!((r.records, r.partitions), (157, 2), "{r:?}");
    engine.close().unwrap();
}

#[test]
fn verify_is_clean_while_appends_and_truncations_run() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let seed = common::seed("verify_is_clean_while_appends_and_truncations_run");
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(Engine::open(small_config(dir.path())).unwrap());
    let tps: Vec<TopicPartition> = (0..3).map(|p| TopicPartition::new("live", p)).collect();
    let (appends, truncations) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));

    let writer = {
        let (engine, tps) = (engine.clone(), tps.clone());
        let (appends, truncations) = (appends.clone(), truncations.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut next = vec![0i64; tps.len()];
            // Bounded, so that the store (and each verify) stays small.
            for _ in 0..1500 {
                let i = rng.gen_range(0..tps.len());
                if rng.gen_ratio(1, 8) && next[i] > 0 {
                    let cut = rng.gen_range(0..=next[i]);
                    engine.truncate_before(&tps[i], cut).unwrap();
                    truncations.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let n = rng.gen_range(1..40);
                let value_len = [10, 100, 1000][rng.gen_range(0..3)];
                let b = common::batch(&tps[i], next[i]..next[i] + n, value_len);
                if rng.gen_bool(0.5) {
                    engine.append(&[b]).unwrap();
                } else {
                    engine.write(&[b]).unwrap();
                }
                next[i] += n;
                appends.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    // Verify until the writer is done, and at least 25 times.
    let (mut overlapped, mut round) = (0, 0);
    let ops = || appends.load(Ordering::Relaxed) + truncations.load(Ordering::Relaxed);
    let mut last_ops = u64::MAX;
    while round < 25 || !writer.is_finished() {
        // The next verify waits for a write or truncation since the last
        // one: the lock they share is not fair, and a verify that took it
        // again at once could hold the writer off for good.
        while ops() == last_ops && !writer.is_finished() {
            std::thread::yield_now();
        }
        round += 1;
        let ops_before = ops();
        let r = engine.verify().unwrap();
        let ops_after = ops();
        last_ops = ops_after;
        assert!(
            r.is_clean(),
            "round {round}, CAIRN_SEED={seed}: {:?}",
            r.problems
        );
        if ops_after > ops_before {
            overlapped += 1;
        }
    }
    writer.join().expect("writer panicked");
    engine.sync().unwrap();
    let last = engine.verify().unwrap();
    assert!(last.is_clean(), "CAIRN_SEED={seed}: {:?}", last.problems);
    let stored: u64 = engine.partitions().iter().map(|p| p.record_count).sum();
    assert_eq!(last.records, stored);
    eprintln!(
        "{} appends, {} truncations; {overlapped} of {round} verifies overlapped them",
        appends.load(Ordering::Relaxed),
        truncations.load(Ordering::Relaxed)
    );
    assert!(appends.load(Ordering::Relaxed) > 1000);
    // Else every verify ran between writes, and the test showed nothing.
    assert!(
        overlapped > 0,
        "no verify overlapped a write or truncation (CAIRN_SEED={seed})"
    );
}

#[test]
fn a_stray_summary_is_still_reported_by_an_open_engine() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("live", 0);
    let stray = TopicPartition::new("stray", 0);
    let engine = Engine::open(small_config(dir.path())).unwrap();
    engine.append(&[common::batch(&tp, 0..50, 100)]).unwrap();
    engine.close().unwrap();
    // A valid summary of 50 records under a partition that has none.
    common::with_raw_tree(dir.path(), |t| {
        let v = t
            .get(cairn_engine::keys::partition_key(&tp))
            .unwrap()
            .unwrap();
        t.insert(cairn_engine::keys::partition_key(&stray), v)
            .unwrap();
    });
    let strays = |r: &cairn_engine::VerifyReport| {
        r.problems
            .iter()
            .filter(|p| {
                matches!(&p.location, cairn_engine::Location::Partition { topic, .. } if topic == "stray")
            })
            .count()
    };
    let closed = cairn_engine::verify_store(&small_config(dir.path())).unwrap();
    assert_eq!(strays(&closed), 1, "{:?}", closed.problems);
    // An open engine never skips it either: the open itself refuses it
    // (a verify of an open engine compares the summaries the engine holds,
    // and checks any stored one it does not hold against the index).
    match Engine::open(small_config(dir.path())) {
        Err(cairn_engine::Error::Corruption {
            location: cairn_engine::Location::Partition { topic, .. },
            ..
        }) => assert_eq!(topic, "stray"),
        Err(e) => panic!("expected the stray summary refused, got {e}"),
        Ok(_) => panic!("expected the stray summary refused, got an engine"),
    }
}

#[test]
fn a_verify_asked_to_stop_gives_up_and_one_not_asked_finishes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(small_config(dir.path())).unwrap();
    let tp = TopicPartition::new("live", 0);
    // Well over the 256 items between two looks at the flag.
    engine.append(&[common::batch(&tp, 0..2000, 500)]).unwrap();
    match engine.verify_unless(&AtomicBool::new(true)) {
        Err(cairn_engine::Error::Interrupted { op: "verify" }) => {}
        other => panic!("expected Interrupted, got {other:?}"),
    }
    let r = engine.verify_unless(&AtomicBool::new(false)).unwrap();
    assert!(r.is_clean() && r.records == 2000, "{r:?}");
}

/// (Since 2026-12-03 the open itself names such a key, as it scans the
/// log's key space to its end; before, it opened, and this checked that
/// the open engine's verify still reported the key.)
#[test]
fn a_malformed_log_key_above_the_log_is_named_by_the_open_and_a_verify() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("live", 0);
    let engine = Engine::open(small_config(dir.path())).unwrap();
    engine.append(&[common::batch(&tp, 0..10, 100)]).unwrap();
    engine.close().unwrap();
    // Sorts after every LSN key: a verify bounded by the next LSN must
    // still see it.
    let bad = [b'W', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00];
    common::with_raw_tree(dir.path(), |t| {
        t.insert(bad, b"x".to_vec()).unwrap();
    });
    let hex: String = bad.iter().map(|b| format!("{b:02x}")).collect();
    let at = cairn_engine::Location::Key { key_hex: hex };
    let (location, _) = common::open_refused(small_config(dir.path()), "a key past the log");
    assert_eq!(location, at);
    let r = cairn_engine::verify_store(&small_config(dir.path())).unwrap();
    assert!(
        r.problems.iter().any(|p| p.location == at),
        "{:?}",
        r.problems
    );
}

/// Damage put in while the store is closed, then a reopen: the open
/// refuses it, or the open engine's verify reports it (never neither).
fn open_refuses_or_verify_reports(
    damage: impl FnOnce(&sled::Tree, &TopicPartition),
    what: &str,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("live", 0);
    let engine = Engine::open(small_config(dir.path())).unwrap();
    engine.append(&[common::batch(&tp, 0..10, 100)]).unwrap();
    engine
        .append(&[common::batch(&TopicPartition::new("other", 0), 0..10, 100)])
        .unwrap();
    engine.close().unwrap();
    common::with_raw_tree(dir.path(), |t| damage(t, &tp));
    match Engine::open(small_config(dir.path())) {
        Err(e) => {
            assert!(e.is_corruption(), "{what}: {e}");
            format!("refused: {e}")
        }
        Ok(engine) => {
            let r = engine.verify().unwrap();
            assert!(!r.is_clean(), "{what}: neither the open nor verify saw it");
            format!("reported: {:?}", r.problems)
        }
    }
}

#[test]
fn damage_a_bounded_verify_could_skip_is_still_found() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // An index entry past the partition's records (checksum intact),
    // naming an old frame.
    let stray_index = open_refuses_or_verify_reports(
        |t, tp| {
            let (k, v) = t
                .scan_prefix(cairn_engine::keys::index_prefix(tp))
                .next()
                .unwrap()
                .unwrap();
            let (_, mut e) = cairn_engine::index::IndexEntry::decode(&k, &v).unwrap();
            e.first_offset += 1000;
            e.last_offset += 1000;
            let (k, v) = e.encode(tp);
            t.insert(k, v).unwrap();
        },
        "index entry past the records",
    );
    // A partition whose summary is gone, its index entries left.
    let lost_summary = open_refuses_or_verify_reports(
        |t, tp| {
            t.remove(cairn_engine::keys::partition_key(tp)).unwrap();
        },
        "summary removed",
    );
    // A frame far above the log's end.
    let stray_frame = open_refuses_or_verify_reports(
        |t, _| {
            let (_, v) = t.scan_prefix([b'W']).next().unwrap().unwrap();
            t.insert(common::wal_key(1 << 40), v).unwrap();
        },
        "frame above the log",
    );
    // The open compares each summary with its partition's last index
    // entry: one past the records is refused there (before 2026-12-01 only
    // verify found it). A lost summary is refused at open: the partition
    // would be missing from every listing (an export of all topics would
    // leave it out).
    assert!(
        stray_index.starts_with("refused")
            && stray_index.contains("the last index entry ends at offset 1009"),
        "{stray_index}"
    );
    assert!(
        lost_summary.starts_with("refused") && lost_summary.contains("summary is missing"),
        "{lost_summary}"
    );
    assert!(
        stray_frame.starts_with("refused") && stray_frame.contains("above the empty slot"),
        "{stray_frame}"
    );
}

/// A live verify of a poisoned engine skips the checks a failed write
/// could upset, and says so: a clean report is not a whole check. One
/// poisoned while it runs says that too.
#[test]
fn a_verify_of_a_poisoned_engine_says_what_it_skipped() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(Engine::open(small_config(dir.path())).unwrap());
    let a = TopicPartition::new("live", 0);
    engine.append(&[common::batch(&a, 0..10, 100)]).unwrap();
    let healthy = engine.verify().unwrap();
    assert!(
        healthy.is_clean() && healthy.notes.is_empty(),
        "{healthy:?}"
    );

    // Poisoned while the verify runs, between its scans.
    let (writer, a2) = (engine.clone(), a.clone());
    fail::cfg_callback(FAILPOINT_VERIFY_AFTER_LOG, move || {
        fail::cfg(cairn_engine::FAILPOINT_FLUSH_ERR, "return").unwrap();
        let failed = writer.append(&[common::batch(&a2, 10..20, 100)]);
        fail::remove(cairn_engine::FAILPOINT_FLUSH_ERR);
        assert!(failed.is_err());
    })
    .unwrap();
    let during = engine.verify();
    fail::remove(FAILPOINT_VERIFY_AFTER_LOG);
    let during = during.unwrap();
    assert!(engine.is_poisoned());
    assert!(
        during
            .notes
            .iter()
            .any(|n| n.contains("poisoned while this verify ran")),
        "{:?}",
        during.notes
    );

    // Poisoned before it starts.
    let after = engine.verify().unwrap();
    assert!(
        after
            .notes
            .iter()
            .any(|n| n.contains("the engine is poisoned") && n.contains("were skipped")),
        "{:?}",
        after.notes
    );
}
