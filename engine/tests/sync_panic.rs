//! A sync leader that panics (inside sled's flush, say) ends its sync as a
//! failure: the engine is poisoned and every appender is told so, where the
//! others would have waited for good for a sync that never ends. Uses the
//! `wal::flush::err` failpoint's `panic` action; one test per binary, since
//! failpoints are process-global.

mod common;

use cairn_engine::{Engine, EngineConfig, Error, TopicPartition, FAILPOINT_FLUSH_ERR};

#[test]
fn a_panicking_sync_poisons_instead_of_hanging_the_others() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("p", 0);
    let e = std::sync::Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    e.append(&[common::batch(&tp, 0..10, 50)]).unwrap();
    fail::cfg(FAILPOINT_FLUSH_ERR, "panic").unwrap();
    let leader = std::thread::spawn({
        let e = e.clone();
        let tp = tp.clone();
        move || e.append(&[common::batch(&tp, 10..20, 50)])
    });
    assert!(leader.join().is_err(), "the sync panicked");
    fail::remove(FAILPOINT_FLUSH_ERR);
    // Before: `syncing` stayed set, and this waited for ever.
    let err = e.append(&[common::batch(&tp, 20..30, 50)]).unwrap_err();
    assert!(matches!(err, Error::Poisoned { op: "fsync", .. }), "{err}");
    assert!(matches!(e.sync(), Err(Error::Poisoned { .. })));
    assert_eq!(e.durable_offset(&tp), Some(10));
    scenario.teardown();
}
