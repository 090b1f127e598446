//! A reader alive when the engine's close began, and gone before the
//! engine lets go of sled, keeps the open mark: its reads may have left
//! node splits in sled's buffers after the close's last sync, which
//! sled's final flush writes with a failure only logged (it then skips
//! its fsync without a panic). The next open in this boot then syncs the
//! store before it trusts the page cache. Uses a failpoint; one test per
//! binary: failpoints are process-global.

mod common;

use std::sync::{Arc, Mutex};

use cairn_engine::{poisoned::OPEN_FILE, Engine, EngineConfig, TopicPartition};

#[test]
fn a_reader_alive_at_the_close_keeps_the_open_mark() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[common::batch(&tp, 0..10, 10)]).unwrap();
    let reader = Arc::new(Mutex::new(Some(e.read(&tp, 0).unwrap())));
    let held = reader.clone();
    // Gone at the end of the close, its syncs made: before the drop.
    fail::cfg_callback(cairn_engine::FAILPOINT_CLOSE_SYNCED, move || {
        held.lock().unwrap().take();
    })
    .unwrap();
    e.close().unwrap();
    fail::remove(cairn_engine::FAILPOINT_CLOSE_SYNCED);
    assert!(
        reader.lock().unwrap().is_none(),
        "the reader outlived the close"
    );
    assert!(
        dir.path().join(OPEN_FILE).exists(),
        "the open mark went although a reader was alive when the close began"
    );
    // Without a reader, a close removes it.
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(e.read(&tp, 0).unwrap().count(), 10);
    e.close().unwrap();
    assert!(!dir.path().join(OPEN_FILE).exists());
    scenario.teardown();
}
