//! A writeback (writeback.rs) that fails after a sync's own check of the
//! engine and before its leader flushes: the leader neither flushes nor
//! fdatasyncs (sled's flush would write the failed writeback's buffers
//! again, a retry that no failed write gets), and the sync fails as the
//! writeback did. Uses the `wal::sync::lead` failpoint as a hook where the
//! leader begins, `wal::flush::err` to count the leader's flushes, and
//! `wal::writeback::err` to fail the writeback; one test per binary
//! (failpoints are process-global).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cairn_engine::{
    Engine, EngineConfig, Error, TopicPartition, FAILPOINT_FLUSH_ERR, FAILPOINT_SYNC_LEAD,
    FAILPOINT_WRITEBACK_ERR, WRITEBACK_OP,
};

#[test]
fn a_sync_led_after_a_failed_writeback_flushes_nothing() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    e.append(&[common::batch(&tp, 0..100, 100)]).unwrap();
    e.write(&[common::batch(&tp, 100..110, 100)]).unwrap();
    let fsyncs_before = e.stats().fsyncs;
    // Every flush a sync leader begins passes here (it returns nothing).
    let flushes = Arc::new(AtomicU64::new(0));
    {
        let flushes = flushes.clone();
        fail::cfg_callback(FAILPOINT_FLUSH_ERR, move || {
            flushes.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    fail::cfg(FAILPOINT_WRITEBACK_ERR, "return").unwrap();
    // As the leader begins (past `sync`'s own check), once: another
    // thread's write takes the unflushed bytes past a MiB, and its
    // writeback fails.
    let hooked = Arc::new(AtomicBool::new(false));
    {
        let (e, tp, hooked) = (e.clone(), tp.clone(), hooked.clone());
        fail::cfg_callback(FAILPOINT_SYNC_LEAD, move || {
            if hooked.swap(true, Ordering::SeqCst) {
                return;
            }
            let e = e.clone();
            let tp = tp.clone();
            std::thread::spawn(move || {
                e.write(&[common::batch(&tp, 110..1510, 1024)]).unwrap();
                assert!(e.wait_writebacks(1), "the writeback never ran");
            })
            .join()
            .unwrap();
        })
        .unwrap();
    }
    let err = e.sync().unwrap_err();
    assert!(hooked.load(Ordering::SeqCst), "the hook never ran");
    fail::remove(FAILPOINT_SYNC_LEAD);
    fail::remove(FAILPOINT_WRITEBACK_ERR);
    assert!(
        matches!(err, Error::Poisoned { op, .. } if op == WRITEBACK_OP),
        "{err}"
    );
    assert!(err.to_string().contains("injected"), "{err}");
    assert_eq!(
        flushes.load(Ordering::SeqCst),
        0,
        "the sync flushed after the writeback had failed"
    );
    assert_eq!(e.stats().fsyncs, fsyncs_before, "no fsync after it");
    assert_eq!(
        e.durable_offset(&tp),
        Some(100),
        "nothing published after the failure"
    );
    // Nor does a sync asked for now flush: the engine is poisoned.
    assert!(matches!(e.sync(), Err(Error::Poisoned { .. })));
    assert_eq!(flushes.load(Ordering::SeqCst), 0);
    fail::remove(FAILPOINT_FLUSH_ERR);
    let e = Arc::into_inner(e).expect("the hook's clone is gone");
    drop(e);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let before = e.recovery_report().poisoned_before.clone().unwrap();
    assert!(before.reason.starts_with("writeback: "), "{before:?}");
    let got = common::read_all(&e, &tp);
    assert!(got.len() >= 100, "acknowledged records lost");
    let want: Vec<_> = (0..got.len() as i64)
        .map(|o| common::record(&tp, o, if o < 110 { 100 } else { 1024 }))
        .collect();
    assert_eq!(got, want, "not a prefix of what was written");
    assert!(e.verify().unwrap().is_clean());
    drop(e);
    scenario.teardown();
}
