//! A panic in the thread that tops the reserved slots up beside a sync
//! (engine/src/slots.rs, `to_top_up`) is a bug, not an I/O failure: the sync
//! passes the panic on, and the engine is poisoned naming the top-up, not
//! the fsync, so that the report points where the fault was. Nothing more is
//! written, and a reopen finds every record synced and a clean store. Uses
//! the `wal::sync::top_up` failpoint; one test per binary (failpoints are
//! process-global).

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use cairn_engine::{Engine, EngineConfig, Error, FAILPOINT_TOP_UP};
use common::{batch, put_over, read_all, thirty_two};

#[test]
fn a_panicking_top_up_poisons_naming_the_top_up() {
    let scenario = fail::FailScenario::setup();
    let tps = thirty_two();
    let put = |i: i64| put_over(&tps, i);
    let dir = tempfile::tempdir().unwrap();
    let appended = {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&put(0)).unwrap();
        fail::cfg(FAILPOINT_TOP_UP, "panic(top-up bug)").unwrap();
        let mut i = 1;
        loop {
            match catch_unwind(AssertUnwindSafe(|| e.append(&put(i)))) {
                Ok(Ok(_)) => i += 1,
                Ok(Err(err)) => panic!("the top-up's panic was not passed on: {err}"),
                Err(_) => break,
            }
            assert!(i < 50, "the top-up never ran");
        }
        fail::remove(FAILPOINT_TOP_UP);
        let err = e.append(&put(i + 1)).unwrap_err();
        match &err {
            Error::Poisoned { op, reason } => {
                assert_eq!(*op, "reserve slots", "{err}");
                assert!(reason.contains("top-up panicked: top-up bug"), "{err}");
            }
            other => panic!("expected Poisoned, got {other}"),
        }
        assert!(matches!(e.sync().unwrap_err(), Error::Poisoned { .. }));
        // Every append before the one that met the panic was synced, and
        // that one's sync never reported it durable.
        for tp in &tps {
            assert_eq!(e.durable_offset(tp), Some(i * 5), "{tp}");
        }
        i
    };
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let v = e.verify().unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
    for tp in &tps {
        let got = read_all(&e, tp);
        // The puts acknowledged, and perhaps the one whose sync panicked
        // (written and flushed before the panic surfaced): never a part.
        assert!(
            got == batch(tp, 0..appended * 5, 20).records
                || got == batch(tp, 0..(appended + 1) * 5, 20).records,
            "{tp}: {} records",
            got.len()
        );
    }
    scenario.teardown();
}
