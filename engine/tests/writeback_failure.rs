//! A failed writeback (writeback.rs) poisons the engine at the next check
//! of its state,
//! is never retried, and nothing is reported durable after it; a reopen
//! recovers every record acknowledged before it. Uses the
//! `wal::writeback::err` failpoint; one test per binary (failpoints are
//! process-global).

mod common;

use cairn_engine::{
    Engine, EngineConfig, Error, TopicPartition, FAILPOINT_WRITEBACK_ERR, WRITEBACK_OP,
};

#[test]
fn a_failed_writeback_poisons_and_reopen_recovers() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&[common::batch(&tp, 0..100, 100)]).unwrap();
        let fsyncs_before = e.stats().fsyncs;
        fail::cfg(FAILPOINT_WRITEBACK_ERR, "return").unwrap();
        // Under a MiB: no writeback yet, and the write is taken.
        e.write(&[common::batch(&tp, 100..600, 1024)]).unwrap();
        // This one takes the unflushed bytes past a MiB.
        e.write(&[common::batch(&tp, 600..1400, 1024)]).unwrap();
        assert!(e.wait_writebacks(1), "the writeback never ran");
        fail::remove(FAILPOINT_WRITEBACK_ERR);
        // Asked before any write: the failure poisons it there.
        assert!(e.is_poisoned());
        let err = e.write(&[common::batch(&tp, 1400..1410, 100)]).unwrap_err();
        assert!(
            matches!(err, Error::Poisoned { op, .. } if op == WRITEBACK_OP),
            "{err}"
        );
        // Naming sled's folder, as a failed write does.
        let sled = dir.path().join("sled");
        assert!(err.to_string().contains("injected"), "{err}");
        assert!(
            err.to_string().contains(&sled.display().to_string()),
            "{err}"
        );
        assert!(matches!(e.sync(), Err(Error::Poisoned { .. })));
        assert_eq!(e.stats().fsyncs, fsyncs_before, "no fsync after it");
        assert_eq!(
            e.durable_offset(&tp),
            Some(100),
            "nothing new reported durable"
        );
        assert_eq!(e.stats().writebacks, 1, "the failed one, begun");
    }
    let mark = dir.path().join(cairn_engine::poisoned::POISON_FILE);
    let text = std::fs::read_to_string(&mark).expect("the poison mark");
    assert!(text.contains("writeback: "), "{text}");
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let before = e.recovery_report().poisoned_before.clone().unwrap();
    assert!(
        before.cache_dropped && before.reason.starts_with("writeback: "),
        "{before:?}"
    );
    // Every acknowledged record is there; of the writes never synced, a
    // prefix of the log (verified clean below).
    let got = common::read_all(&e, &tp);
    assert!((100..=1400).contains(&got.len()), "got {}", got.len());
    assert_eq!(got[..100], common::batch(&tp, 0..100, 100).records[..]);
    assert!(e.verify().unwrap().is_clean());
    // A close after a failed writeback fails too, naming it.
    let next = got.len() as i64;
    fail::cfg(FAILPOINT_WRITEBACK_ERR, "return").unwrap();
    e.write(&[common::batch(&tp, next..next + 1400, 1024)])
        .unwrap();
    assert!(e.wait_writebacks(1), "the writeback never ran");
    fail::remove(FAILPOINT_WRITEBACK_ERR);
    let err = e.close().unwrap_err();
    assert!(
        matches!(err, Error::Poisoned { op, .. } if op == WRITEBACK_OP),
        "{err}"
    );
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(e.recovery_report().poisoned_before.is_some());
    assert!(e.verify().unwrap().is_clean());
    // A drop with nothing asked of the engine since the failure: the drop
    // finds it before its sync, poisons, and leaves the mark naming it.
    let next = common::read_all(&e, &tp).len() as i64;
    fail::cfg(FAILPOINT_WRITEBACK_ERR, "return").unwrap();
    e.write(&[common::batch(&tp, next..next + 1400, 1024)])
        .unwrap();
    assert!(e.wait_writebacks(1), "the writeback never ran");
    fail::remove(FAILPOINT_WRITEBACK_ERR);
    drop(e);
    let text = std::fs::read_to_string(&mark).expect("the drop's poison mark");
    assert!(text.contains("writeback: "), "{text}");
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(e.recovery_report().poisoned_before.is_some());
    assert!(e.verify().unwrap().is_clean());
    drop(e);
    scenario.teardown();
}
