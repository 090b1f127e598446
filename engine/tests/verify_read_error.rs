//! A verify that meets an error reading the store (EIO from a failing
//! disk) after it found problems reports them, with the error as a note,
//! rather than fail with the error alone: a monitor reads that as "try
//! again later" and would never see the damage found. With nothing found,
//! the error stands. Uses the `verify::after_log` failpoint; one test per
//! binary (failpoints are process-global).

mod common;

use cairn_engine::{
    verify_store, CorruptionKind, Engine, EngineConfig, Location, TopicPartition,
    FAILPOINT_VERIFY_AFTER_LOG,
};

#[test]
fn a_read_error_after_problems_were_found_keeps_them() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig::new(dir.path());
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(cfg.clone()).unwrap();
    for i in 0..3 {
        e.append(&[common::batch(&tp, i * 10..i * 10 + 10, 10)])
            .unwrap();
    }
    e.close().unwrap();

    // Clean: the error is the answer.
    fail::cfg(FAILPOINT_VERIFY_AFTER_LOG, "return").unwrap();
    let err = verify_store(&cfg).expect_err("a clean store's read error is an error");
    assert!(err.to_string().contains("verify::after_log"), "{err}");

    // The first entry's frame damaged: found by the log scan, before the
    // failing read.
    let (frames, _) = common::wal_layout(dir.path());
    let lsn = frames[0];
    common::with_raw_tree(dir.path(), |t| {
        let key = common::wal_key(lsn);
        let mut v = t.get(key).unwrap().unwrap().to_vec();
        *v.last_mut().unwrap() ^= 1;
        t.insert(key, v).unwrap();
    });
    let v = verify_store(&cfg).expect("problems found before the error are reported");
    fail::remove(FAILPOINT_VERIFY_AFTER_LOG);
    assert!(
        v.problems
            .iter()
            .any(|p| p.location == Location::Wal { lsn }
                && matches!(p.kind, CorruptionKind::Checksum { .. })),
        "{:#?}",
        v.problems
    );
    assert!(
        v.notes
            .iter()
            .any(|n| n.contains("stopped at an error reading the store")
                && n.contains("verify::after_log")),
        "{:?}",
        v.notes
    );
    assert!(!v.is_clean());
    assert!(v.stopped_at_error.is_some());

    // A backup's verify of its copy meets the same error after the
    // damage copied from the source: the copy is not verified whole, and
    // the backup fails and removes it (it kept it, marked complete, when
    // the verify's report stood without a word of the error).
    fail::cfg(FAILPOINT_VERIFY_AFTER_LOG, "return").unwrap();
    let dest = tempfile::tempdir().unwrap();
    let to = dest.path().join("copy");
    let source = Engine::open(cfg.clone()).unwrap();
    let backed_up = source.backup_to(&to, &std::sync::atomic::AtomicBool::new(false));
    fail::remove(FAILPOINT_VERIFY_AFTER_LOG);
    match backed_up {
        Err(cairn_engine::Error::Io { op, source, .. }) => {
            assert_eq!(op, "verify the backup's copy");
            assert!(source.to_string().contains("verify::after_log"), "{source}");
        }
        other => panic!("expected the copy's verify error, got {other:?}"),
    }
    assert!(!to.exists(), "the unverified copy is removed");
    source.close().unwrap();
    scenario.teardown();
}
