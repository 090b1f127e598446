//! A verify of a stopped store flushes and fdatasyncs sled's files once
//! before it lets sled go (sled writes as it opens and is read): when that
//! fails, the open mark it left stays, so that the next open in this boot
//! syncs the store and reads it from the disk instead of trusting the page
//! cache. Uses the `wal::flush::err` failpoint; one test per binary
//! (failpoints are process-global).

mod common;

use cairn_engine::{verify_store, Engine, EngineConfig, TopicPartition, FAILPOINT_FLUSH_ERR};

#[test]
fn a_verify_whose_last_sync_fails_keeps_the_open_mark() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig::new(dir.path());
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(cfg.clone()).unwrap();
    e.append(&[common::batch(&tp, 0..10, 10)]).unwrap();
    e.close().unwrap();
    let mark = dir.path().join(cairn_engine::poisoned::OPEN_FILE);
    assert!(!mark.exists());
    fail::cfg(FAILPOINT_FLUSH_ERR, "return").unwrap();
    let v = verify_store(&cfg).unwrap();
    fail::remove(FAILPOINT_FLUSH_ERR);
    // The check itself stands; the report and the mark say the sync
    // failed, naming its step and file (the command exits 1 on it).
    assert!(v.is_clean(), "{:?}", v.problems);
    let failed = v.closing_sync_failed.expect("the failed sync, reported");
    let step = format!(
        "flush sled's log into {}: injected failure",
        cfg.sled_data_path().display()
    );
    assert!(failed.contains(&step), "{failed}");
    assert!(mark.exists(), "the open mark stays after a failed sync");
    // The next open acts on it (and says the store was not closed).
    let e = Engine::open(cfg.clone()).unwrap();
    assert!(e.recovery_report().unclean_stop_cache_dropped);
    e.close().unwrap();
    assert!(!mark.exists());
    // Without the failure, a verify leaves no mark.
    let v = verify_store(&cfg).unwrap();
    assert!(v.is_clean() && v.closing_sync_failed.is_none(), "{v:?}");
    assert!(!mark.exists());
    scenario.teardown();
}
