//! A writeback (writeback.rs) that fails while a sync is under way, after
//! the sync's own check of the engine: the sync leader finds it after its
//! fdatasync and publishes nothing. Uses the `wal::flush::err` failpoint as
//! a hook inside the leader's sync and `wal::writeback::err` to fail the
//! writeback; one test per binary (failpoints are process-global).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cairn_engine::{
    Engine, EngineConfig, Error, TopicPartition, FAILPOINT_FLUSH_ERR, FAILPOINT_WRITEBACK_ERR,
    WRITEBACK_OP,
};

#[test]
fn a_writeback_failing_during_a_sync_fails_the_sync() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    e.append(&[common::batch(&tp, 0..100, 100)]).unwrap();
    e.write(&[common::batch(&tp, 100..110, 100)]).unwrap();
    fail::cfg(FAILPOINT_WRITEBACK_ERR, "return").unwrap();
    // Inside the leader's sync (past `sync`'s own check), once: another
    // thread's write takes the unflushed bytes past a MiB, and its
    // writeback fails before the leader flushes and fdatasyncs.
    let hooked = Arc::new(AtomicBool::new(false));
    {
        let (e, tp, hooked) = (e.clone(), tp.clone(), hooked.clone());
        fail::cfg_callback(FAILPOINT_FLUSH_ERR, move || {
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
    fail::remove(FAILPOINT_FLUSH_ERR);
    fail::remove(FAILPOINT_WRITEBACK_ERR);
    assert!(
        matches!(err, Error::Poisoned { op, .. } if op == WRITEBACK_OP),
        "{err}"
    );
    assert_eq!(
        e.durable_offset(&tp),
        Some(100),
        "nothing published after the failure"
    );
    assert!(e.is_poisoned());
    let e = Arc::into_inner(e).expect("the hook's clone is gone");
    drop(e);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let before = e.recovery_report().poisoned_before.clone().unwrap();
    assert!(before.reason.starts_with("writeback: "), "{before:?}");
    assert!(e.verify().unwrap().is_clean());
    drop(e);
    scenario.teardown();
}
