//! Adjacent tombstones, as builds before tombstones merged both ways left
//! them (FORMAT.md: readers must accept them): a store holding two, one
//! right above the other, opens, reads, verifies clean, and prunes on
//! beside and over them, with every record kept that should be.

mod common;

use cairn_engine::frame::{self, FrameKind};
use cairn_engine::{Engine, EngineConfig, TopicPartition};

fn offsets(e: &Engine, tp: &TopicPartition) -> Vec<i64> {
    common::read_all(e, tp).iter().map(|r| r.offset).collect()
}

fn assert_clean(e: &Engine, when: &str) {
    let v = e.verify().unwrap();
    assert!(v.is_clean(), "{when}: {v:?}");
}

#[test]
fn adjacent_tombstones_are_read_verified_and_pruned_past() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        // One entry an append: a's 0..4 at LSNs 1 to 4, b's 0 at 5, a's 4 at 6.
        for o in 0..4 {
            e.append(&[common::batch(&a, o..o + 1, 20)]).unwrap();
        }
        e.append(&[common::batch(&b, 0..1, 20)]).unwrap();
        e.append(&[common::batch(&a, 4..5, 20)]).unwrap();
        e.truncate_before(&a, 3).unwrap();
        e.close().unwrap();
    }
    // The one tombstone this build left over LSNs 1 to 3, split in two as
    // an older build would have written them: LSN 1 (span 1), LSN 2 (span 2).
    common::with_raw_tree(dir.path(), |t| {
        let v = t
            .get(common::wal_key(1))
            .unwrap()
            .expect("a tombstone at LSN 1");
        let f = frame::decode(1, &v).unwrap();
        assert_eq!((f.kind, f.span().unwrap()), (FrameKind::Tombstone, 3));
        assert!(t.get(common::wal_key(2)).unwrap().is_none());
        for (lsn, span) in [(1, 1), (2, 2)] {
            let body = frame::encode_tombstone(span);
            t.insert(
                common::wal_key(lsn),
                frame::encode(lsn, FrameKind::Tombstone, 0, &body),
            )
            .unwrap();
        }
    });
    for strict in [false, true] {
        let mut cfg = EngineConfig::new(dir.path());
        if strict {
            cfg = cfg.recovery_mode(cairn_engine::RecoveryMode::Strict);
        }
        let e = Engine::open(cfg).unwrap();
        assert!(e.recovery_report().truncated.is_none());
        assert_eq!(offsets(&e, &a), [3, 4]);
        assert_eq!(offsets(&e, &b), [0]);
        assert_clean(&e, "as found");
        e.close().unwrap();
    }
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    // a's entry at LSN 4 goes: the tombstone right below it (LSN 2) grows
    // over it; the one at LSN 1 stays beside it.
    e.truncate_before(&a, 4).unwrap();
    assert_eq!(offsets(&e, &a), [4]);
    assert_clean(&e, "after a prune beside them");
    // b's entry at LSN 5 goes too, and then every one of a's.
    e.truncate_before(&b, 1).unwrap();
    e.truncate_before(&a, 5).unwrap();
    assert!(offsets(&e, &a).is_empty() && offsets(&e, &b).is_empty());
    assert_eq!(
        (e.durable_offset(&a), e.durable_offset(&b)),
        (Some(5), Some(1))
    );
    assert_clean(&e, "after prunes over them");
    e.close().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_clean(&e, "reopened");
    e.append(&[common::batch(&a, 5..6, 20)]).unwrap();
    assert_eq!(offsets(&e, &a), [5]);
    e.close().unwrap();
    // What is left of the log: the older build's tombstone at LSN 1 as it
    // was, the one at LSN 2 grown over every entry pruned since (LSNs 2 to
    // 6), and a's new entry.
    let (frames, _) = common::wal_layout(dir.path());
    assert_eq!(frames, [1, 2, 7]);
    common::with_raw_tree(dir.path(), |t| {
        for (lsn, span) in [(1, 1), (2, 5)] {
            let v = t.get(common::wal_key(lsn)).unwrap().unwrap();
            let f = frame::decode(lsn, &v).unwrap();
            assert_eq!(
                (f.kind, f.span().unwrap()),
                (FrameKind::Tombstone, span),
                "LSN {lsn}"
            );
        }
    });
}
