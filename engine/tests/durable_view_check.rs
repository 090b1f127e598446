//! After a sync's fsync succeeds, the engine checks that its durable view
//! only moves forward and (in debug builds) matches the sync's snapshot;
//! a failed check is a bug in the engine's bookkeeping. It poisons the
//! engine under its own name, not as a failed fsync (as it was until
//! 2026-12-06), nothing more is written, and a reopen finds every record
//! the fsync covered. Uses the `wal::sync::view_check` failpoint; one test
//! per binary (failpoints are process-global).

mod common;

use cairn_engine::{Engine, EngineConfig, Error, DURABLE_VIEW_OP, FAILPOINT_VIEW_CHECK};
use common::{put_over, read_all, thirty_two};

#[test]
fn a_failed_view_check_poisons_as_such_and_the_store_reopens_whole() {
    let scenario = fail::FailScenario::setup();
    let tps = thirty_two();
    let dir = tempfile::tempdir().unwrap();
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&put_over(&tps, 0)).unwrap();
        fail::cfg(FAILPOINT_VIEW_CHECK, "return").unwrap();
        let err = e.append(&put_over(&tps, 1)).unwrap_err();
        fail::remove(FAILPOINT_VIEW_CHECK);
        match &err {
            Error::Poisoned { op, reason } => {
                assert_eq!(*op, DURABLE_VIEW_OP, "{err}");
                assert!(reason.contains("injected"), "{err}");
            }
            other => panic!("not poisoned: {other}"),
        }
        assert!(matches!(
            e.append(&put_over(&tps, 2)).unwrap_err(),
            Error::Poisoned { .. }
        ));
        assert!(matches!(e.sync().unwrap_err(), Error::Poisoned { .. }));
    }
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for tp in &tps {
        let offsets: Vec<i64> = read_all(&e, tp).iter().map(|r| r.offset).collect();
        // Puts 0 and 1 (offsets 0..10): the second's fsync succeeded
        // before the check failed.
        assert_eq!(offsets, (0..10).collect::<Vec<i64>>(), "{tp}");
    }
    assert!(e.verify().unwrap().is_clean());
    scenario.teardown();
}
