//! A panic in the middle of a write (here injected among its inserts, with
//! the write lock held) poisons the engine: the next write is refused as
//! poisoned, verify and stats still answer, and a reopen recovers every
//! acknowledged record. Before, the engine stayed unpoisoned with its write
//! lock poisoned, and every later call panicked. Uses the
//! `wal::append::mid_write` failpoint; one test per binary (failpoints are
//! process-global).

mod common;

use cairn_engine::{Engine, EngineConfig, Error, TopicPartition, FAILPOINT_MID_WRITE};
use common::{batch, read_all};

#[test]
fn a_write_that_panics_poisons_the_engine() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("w", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&tp, 0..10, 10)]).unwrap();
    fail::cfg(FAILPOINT_MID_WRITE, "1*off->panic").unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.append(&[batch(&tp, 10..20, 10)])
    }));
    fail::remove(FAILPOINT_MID_WRITE);
    assert!(panicked.is_err(), "the failpoint did not panic");
    assert!(e.is_poisoned());
    let err = e.append(&[batch(&tp, 20..21, 10)]).unwrap_err();
    assert!(matches!(err, Error::Poisoned { op: "write", .. }), "{err}");
    assert!(e.verify().is_ok());
    assert_eq!(e.stats().partitions.len(), 1);
    drop(e);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let held = read_all(&e, &tp);
    assert!(
        held.len() == 10 || held.len() == 20,
        "acknowledged records lost or an entry cut: {}",
        held.len()
    );
    assert!(e.verify().unwrap().is_clean());
    scenario.teardown();
}
