//! An engine dropped without a close syncs first, by its own path; a panic
//! inside that sync (sled's flush, here the `wal::flush::err` failpoint)
//! poisons the engine and is caught by the drop: it does not escape it
//! (escaping, it left sled's handles to their unguarded drop, whose fsync
//! unwraps: a second panic while unwinding aborts the process on a failing
//! disk). The marks stay, and the next open recovers every acknowledged
//! record. One test per binary, since failpoints are process-global.

mod common;

use cairn_engine::{Engine, EngineConfig, TopicPartition, FAILPOINT_FLUSH_ERR};

#[test]
fn a_panic_in_the_drops_sync_is_caught_and_poisons() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("p", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[common::batch(&tp, 0..10, 50)]).unwrap();
    // Written, not synced: the drop's sync has something to do.
    e.write(&[common::batch(&tp, 10..20, 50)]).unwrap();
    fail::cfg_callback(FAILPOINT_FLUSH_ERR, || panic!("sled's flush panics")).unwrap();
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(e)));
    fail::remove(FAILPOINT_FLUSH_ERR);
    assert!(dropped.is_ok(), "the drop's panic escaped it");
    assert!(
        dir.path()
            .join(cairn_engine::poisoned::POISON_FILE)
            .exists(),
        "the poison mark says why"
    );
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(e.recovery_report().poisoned_before.is_some());
    let offsets: Vec<i64> = common::read_all(&e, &tp).iter().map(|r| r.offset).collect();
    assert!(
        offsets.len() >= 10 && offsets.iter().copied().eq(0..offsets.len() as i64),
        "{offsets:?}"
    );
    scenario.teardown();
}
