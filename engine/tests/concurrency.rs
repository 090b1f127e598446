//! Concurrent appenders: every append is durable, and the log stays whole.

mod common;

use std::sync::{Arc, Barrier};

use cairn_engine::{Engine, EngineConfig, TopicPartition};

#[test]
fn eight_threads_appending_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let threads = 8;
    let appends_per_thread = 50;
    {
        let e = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
        let barrier = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let e = e.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let tp = TopicPartition::new("conc", t as i32);
                    barrier.wait();
                    for i in 0..appends_per_thread {
                        let d = e.append(&[common::batch(&tp, [i as i64], 100)]).unwrap();
                        // Returned offsets are durable and cover this append.
                        assert_eq!(d.get(&tp), Some(i as i64 + 1));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let s = e.stats();
        let appends = (threads * appends_per_thread) as u64;
        assert_eq!(s.appends, appends);
        // How many syncs they shared depends on the scheduler: printed,
        // not asserted (group_commit.rs shows the sharing deterministically).
        eprintln!("appends {} fsyncs {}", s.appends, s.fsyncs);
        assert!(s.fsyncs <= appends, "{s:?}");
        // Reopen after a crash-like drop: everything acknowledged is there.
    }
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for t in 0..threads {
        let tp = TopicPartition::new("conc", t as i32);
        assert_eq!(e.durable_offset(&tp), Some(appends_per_thread as i64));
        assert_eq!(common::read_all(&e, &tp).len(), appends_per_thread);
    }
    assert!(e.verify().unwrap().is_clean());
}

/// Writers racing the syncs' slot top-ups (slots.rs `to_top_up`): each of
/// eight threads appends 32 frames at a time while others lead syncs that
/// top the slots up beside them. The log must still be frames 1..=n with a
/// contiguous run of slots right above, and every record must be there.
#[test]
fn slot_top_ups_beside_concurrent_writers_keep_the_log_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (threads, appends_per_thread, partitions_per_thread) = (8usize, 40i64, 32usize);
    let frames = {
        let e = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
        let barrier = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (e, barrier) = (e.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let tps: Vec<_> = (0..partitions_per_thread)
                        .map(|p| {
                            TopicPartition::new("top-up", (t * partitions_per_thread + p) as i32)
                        })
                        .collect();
                    barrier.wait();
                    for i in 0..appends_per_thread {
                        let put: Vec<_> = tps.iter().map(|tp| common::batch(tp, [i], 30)).collect();
                        e.append(&put).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let s = e.stats();
        eprintln!(
            "fsyncs {}, slots reserved by writes {}, by syncs {}",
            s.fsyncs, s.slots_reserved_by_writes, s.slots_reserved_by_syncs
        );
        s.frames
    }; // dropped without close
    assert_eq!(
        frames,
        (threads * partitions_per_thread) as u64 * appends_per_thread as u64
    );
    common::assert_frames_then_reserve(dir.path(), frames);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for p in 0..threads * partitions_per_thread {
        let tp = TopicPartition::new("top-up", p as i32);
        assert_eq!(common::read_all(&e, &tp).len() as i64, appends_per_thread);
    }
    assert!(e.verify().unwrap().is_clean());
}

/// A verify, a backup, a prune's dry run or another truncation waiting for
/// the truncation lock behind a truncation ends at its stop, `Interrupted`, without waiting the truncation out (a
/// live request's client gone, the run stopping); the backup leaves
/// nothing behind. Until the night of 2026-12-04 the wait ignored the stop.
#[test]
fn a_read_waiting_behind_a_truncation_ends_at_its_stop() {
    use cairn_engine::Error;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let tp = TopicPartition::new("t", 0);
    // Two entries: the truncation deletes the first (entries go whole).
    e.append(&[common::batch(&tp, 0..5, 100)]).unwrap();
    e.append(&[common::batch(&tp, 5..10, 100)]).unwrap();
    let (holding, held) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        // The truncation's cut runs under the lock: it holds it until told.
        let truncation = s.spawn(|| {
            e.truncate_by(&tp, move |_| {
                holding.send(()).unwrap();
                released.recv().unwrap();
                Ok(5)
            })
        });
        held.recv().unwrap();
        let stop = AtomicBool::new(true);
        let verified = e.verify_unless(&stop);
        assert!(
            matches!(verified, Err(Error::Interrupted { op: "verify" })),
            "{verified:?}"
        );
        let to = elsewhere.path().join("copy");
        let backed_up = e.backup_to(&to, &stop);
        assert!(
            matches!(backed_up, Err(Error::Interrupted { op: "backup" })),
            "{backed_up:?}"
        );
        assert!(!to.exists(), "the interrupted backup left {to:?}");
        // A prune's dry run too, told no by its `go`.
        let planned = e.truncate_plan_by_while(&tp, |_| Ok(10), || false);
        assert!(
            matches!(planned, Err(Error::Interrupted { op: "prune" })),
            "{planned:?}"
        );
        // And another truncation, which ends unfinished having picked and
        // deleted nothing (its cut is never asked for).
        let waited = e
            .truncate_by_while(&tp, |_| panic!("picked while told no"), || false)
            .unwrap();
        assert_eq!(waited.0, 0, "the partition's first offset");
        assert_eq!((waited.1.entries_deleted, waited.2), (0, false));
        release.send(()).unwrap();
        let (offset, r) = truncation.join().unwrap().unwrap();
        assert_eq!((offset, r.records_deleted), (5, 5));
    });
    assert!(e.verify().unwrap().is_clean());
}
