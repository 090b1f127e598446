//! A panic inside a truncation pass while earlier deletions of it wait for
//! its sync (a caller's `cut`; sled's, reading pages of damaged files):
//! the pass syncs nothing of a sled that may be half-changed, the engine is
//! poisoned before the pass lets go of its lock, and the store reopens
//! clean with a prefix of the pass's deletions, as after a crash.

mod common;

use cairn_engine::{Engine, EngineConfig, Error, TopicPartition};

#[test]
fn a_panic_in_a_pass_with_deletions_waiting_poisons_and_syncs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tps: Vec<TopicPartition> = (0..3).map(|p| TopicPartition::new("t", p)).collect();
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        for tp in &tps {
            e.write(&[common::batch(tp, 0..5, 10)]).unwrap();
            e.write(&[common::batch(tp, 5..10, 10)]).unwrap();
        }
        e.sync().unwrap();
        let fsyncs = e.stats().fsyncs;
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut pass = e.truncation_pass();
            let (_, r, finished) = pass.truncate_by_while(&tps[0], |_| Ok(5), || true).unwrap();
            assert!(finished && r.entries_deleted == 1, "{r:?}");
            assert!(pass.waiting());
            let _ = pass.truncate_by_while(&tps[1], |_| panic!("a damaged page"), || true);
        }));
        assert!(panicked.is_err());
        assert_eq!(
            e.stats().fsyncs,
            fsyncs,
            "the pass synced while unwinding from a panic"
        );
        assert!(
            e.is_poisoned(),
            "a panic with deletions waiting left the engine usable"
        );
        // The lock is let go: another truncation is refused, not stuck.
        let other = e.truncate_by_while(&tps[2], |_| Ok(5), || true);
        assert!(matches!(other, Err(Error::Poisoned { .. })), "{other:?}");
    }
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(e.verify().unwrap().is_clean());
    let p = e.partition(&tps[0]).unwrap();
    assert!(p.first_offset == 0 || p.first_offset == 5, "{p:?}");
    assert_eq!(p.next_offset, 10);
    for tp in &tps[1..] {
        let p = e.partition(tp).unwrap();
        assert_eq!((p.first_offset, p.next_offset), (0, 10), "{p:?}");
    }
}
