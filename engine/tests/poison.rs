//! A failed fsync poisons the engine: later appends return `Poisoned`, the
//! fsync is never retried, and a reopen recovers every acknowledged record.
//! Uses the `wal::flush::err` failpoint (fail's failpoints feature is on for
//! the engine's tests). One test per binary: failpoints are process-global.

mod common;

use cairn_engine::{Engine, EngineConfig, Error, TopicPartition, FAILPOINT_FLUSH_ERR};

#[test]
fn failed_fsync_poisons_and_reopen_recovers() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("p", 0);
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&[common::batch(&tp, 0..100, 50)]).unwrap();
        let fsyncs_before = e.stats().fsyncs;
        fail::cfg(FAILPOINT_FLUSH_ERR, "return").unwrap();
        let err = e.append(&[common::batch(&tp, 100..200, 50)]).unwrap_err();
        assert!(matches!(err, Error::Poisoned { op: "fsync", .. }), "{err}");
        fail::remove(FAILPOINT_FLUSH_ERR);
        // The failure is gone, but the engine must not try again.
        for _ in 0..3 {
            let err = e.append(&[common::batch(&tp, 200..210, 50)]).unwrap_err();
            assert!(matches!(err, Error::Poisoned { .. }), "{err}");
        }
        assert!(matches!(e.sync(), Err(Error::Poisoned { .. })));
        assert!(e.is_poisoned());
        assert_eq!(
            e.stats().fsyncs,
            fsyncs_before,
            "no fsync after the failure"
        );
        assert_eq!(
            e.durable_offset(&tp),
            Some(100),
            "nothing new reported durable"
        );
    }
    // The poisoned engine left its mark, naming why; the reopen in this
    // boot acts on it (fsync, then the store's cached pages dropped, so
    // that recovery reads the disk) and removes it once recovered.
    let mark = dir.path().join(cairn_engine::poisoned::POISON_FILE);
    let text = std::fs::read_to_string(&mark).expect("the poison mark");
    // Its shape, as FORMAT.md documents it: the boot's identity, then
    // `op: reason`, each a line.
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|b| b.trim().to_owned())
        .unwrap_or_default();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    assert!(
        lines.len() == 2
            && lines[0] == format!("{boot}\n")
            && lines[1].starts_with("fsync: ")
            && lines[1].ends_with('\n'),
        "{text:?}"
    );
    // The reason names the step that failed and its file.
    let data_file = dir.path().join("sled").join("db");
    let step = format!("flush sled's log into {}", data_file.display());
    assert!(lines[1].contains(&step), "{text:?}");
    // A command removing the store it made, were it empty, keeps a
    // poisoned one without opening it (an open here would recover it and
    // clear the mark in the process whose fsync failed).
    assert_eq!(
        cairn_engine::remove_if_empty(dir.path()).unwrap(),
        cairn_engine::EmptyStoreRemoval::Kept
    );
    assert!(mark.exists(), "the poison mark stays for the next open");
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let before = e.recovery_report().poisoned_before.clone().unwrap();
    assert!(
        before.cache_dropped && before.reason.starts_with("fsync: "),
        "{before:?}"
    );
    assert!(!mark.exists());
    let got = common::read_all(&e, &tp);
    // Every acknowledged record is there. The unacknowledged batch may or may
    // not have reached the disk; if it did, it is whole.
    assert!(got.len() == 100 || got.len() == 200, "got {}", got.len());
    assert_eq!(got[..100], common::batch(&tp, 0..100, 50).records[..]);
    assert!(e.verify().unwrap().is_clean());
    drop(e);
    // Once removed, it is not acted on again.
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(e.recovery_report().poisoned_before, None);
    drop(e);
    // An open whose own fsync fails leaves the mark as well: it may have
    // read, and written over, pages the disk does not hold.
    fail::cfg(FAILPOINT_FLUSH_ERR, "return").unwrap();
    let err = Engine::open(EngineConfig::new(dir.path()))
        .err()
        .expect("refused");
    fail::remove(FAILPOINT_FLUSH_ERR);
    assert!(err.to_string().contains("sync after recovery"), "{err}");
    assert!(mark.exists());
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let before = e.recovery_report().poisoned_before.clone().unwrap();
    assert!(before.reason.starts_with("open: "), "{before:?}");
    assert!(!mark.exists());
    // An engine dropped without a close after a write it never synced
    // syncs it on the way out, by its own path: one that fails leaves the
    // mark too. (Before 2026-12-03 sled's own drop fsynced it, unwrapping
    // the error, and no mark told the next open not to trust the cache.)
    e.write(&[common::batch(&tp, 300..310, 50)]).unwrap();
    fail::cfg(FAILPOINT_FLUSH_ERR, "return").unwrap();
    drop(e);
    fail::remove(FAILPOINT_FLUSH_ERR);
    let text = std::fs::read_to_string(&mark).expect("the poison mark of the drop's sync");
    assert!(text.contains("fsync: "), "{text}");
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let before = e.recovery_report().poisoned_before.clone().unwrap();
    assert!(before.cache_dropped, "{before:?}");
    assert!(e.verify().unwrap().is_clean());
    // A healthy drop's sync keeps what was written, and leaves no mark.
    e.write(&[common::batch(&tp, 310..320, 50)]).unwrap();
    assert_eq!(e.durable_offset(&tp), Some(310));
    drop(e);
    assert!(!mark.exists());
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(e.durable_offset(&tp), Some(320));
    assert_eq!(e.recovery_report().poisoned_before, None);
    // An engine dropped by a thread that panics, after a write it never
    // synced, cannot sync (a second panic aborts), and sled's own drop,
    // which fsyncs and unwraps, would abort on a failing disk: it leaves
    // the mark first.
    let dropped_panicking = |e: Engine| {
        std::thread::spawn(move || {
            let _e = e;
            panic!("a panic elsewhere, with the engine on this thread's stack");
        })
        .join()
        .unwrap_err();
    };
    e.write(&[common::batch(&tp, 320..330, 50)]).unwrap();
    dropped_panicking(e);
    let text = std::fs::read_to_string(&mark).expect("the mark of a panicking drop");
    assert!(text.contains("drop: "), "{text}");
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let before = e.recovery_report().poisoned_before.clone().unwrap();
    assert!(
        before.cache_dropped && before.reason.starts_with("drop: "),
        "{before:?}"
    );
    assert!(e.verify().unwrap().is_clean());
    // With every write synced, a panicking drop leaves none.
    e.append(&[common::batch(&tp, 330..340, 50)]).unwrap();
    dropped_panicking(e);
    assert!(!mark.exists());
    // With every write synced, a drop still flushes (sled may hold log
    // writes no write counted: slots, a read's node split, which its own
    // drop would write with its errors only logged): one whose flush fails
    // leaves the marks. Until the night of 2026-12-03 such a drop synced
    // nothing and removed the open mark.
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[common::batch(&tp, 340..350, 50)]).unwrap();
    fail::cfg(FAILPOINT_FLUSH_ERR, "return").unwrap();
    drop(e);
    fail::remove(FAILPOINT_FLUSH_ERR);
    let text = std::fs::read_to_string(&mark).expect("the mark of an idle drop's flush");
    assert!(text.contains("fsync: "), "{text}");
    assert!(dir.path().join(cairn_engine::poisoned::OPEN_FILE).exists());
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(e.durable_offset(&tp), Some(350));
    assert!(e.verify().unwrap().is_clean());
    drop(e);
    assert!(!mark.exists());
    scenario.teardown();
}
