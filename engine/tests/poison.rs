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
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let got = common::read_all(&e, &tp);
    // Every acknowledged record is there. The unacknowledged batch may or may
    // not have reached the disk; if it did, it is whole.
    assert!(got.len() == 100 || got.len() == 200, "got {}", got.len());
    assert_eq!(got[..100], common::batch(&tp, 0..100, 50).records[..]);
    assert!(e.verify().unwrap().is_clean());
    scenario.teardown();
}
