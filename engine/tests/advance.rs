//! `Engine::advance_partitions`: offsets that held no record (Kafka's
//! transaction markers, an aborted transaction's records) move a
//! partition's next offset without a record, durably, through reopens,
//! crashes, verify and retention.

mod common;

use std::collections::BTreeMap;

use cairn_engine::{Engine, EngineConfig, Error, RecordBatch, RecoveryMode, TopicPartition};
use common::{batch, read_all, with_raw_tree};

fn to(tp: &TopicPartition, offset: i64) -> BTreeMap<TopicPartition, i64> {
    BTreeMap::from([(tp.clone(), offset)])
}

fn offsets(e: &Engine, tp: &TopicPartition) -> Vec<i64> {
    read_all(e, tp).iter().map(|r| r.offset).collect()
}

fn summary(e: &Engine, tp: &TopicPartition) -> (i64, i64, u64) {
    let p = e.partition(tp).expect("a summary");
    (p.first_offset, p.next_offset, p.record_count)
}

/// The store at `dir` reopens with `tp`'s summary `want` (first, next,
/// records), and verify finds it clean.
fn reopens_to(dir: &std::path::Path, tp: &TopicPartition, want: (i64, i64, u64)) {
    let e = Engine::open(EngineConfig::new(dir)).unwrap();
    assert_eq!(summary(&e, tp), want);
    let report = e.verify().unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn an_advance_is_durable_at_the_next_sync_and_outlives_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&tp, 0..5, 20)]).unwrap();
    e.advance_partitions(&to(&tp, 7)).unwrap();
    // Written, not durable: the durable offset moves with the sync.
    assert_eq!(e.durable_offset(&tp), Some(5));
    e.sync().unwrap();
    assert_eq!(e.durable_offset(&tp), Some(7));
    assert_eq!(summary(&e, &tp), (0, 7, 5));
    // Below the new next offset is a duplicate; from it on, records go in.
    let w = e.append(&[batch(&tp, [5, 6, 7, 8], 20)]).unwrap();
    assert_eq!((w.appended_records, w.duplicate_records), (2, 2));
    assert_eq!(offsets(&e, &tp), vec![0, 1, 2, 3, 4, 7, 8]);
    // Never back: an advance to or below the next offset changes nothing.
    e.advance_partitions(&to(&tp, 4)).unwrap();
    e.advance_partitions(&to(&tp, 9)).unwrap();
    e.sync().unwrap();
    assert_eq!(summary(&e, &tp), (0, 9, 7));
    assert!(e.verify().unwrap().is_clean());
    // Advanced again with nothing after: the floor is above the newest
    // entry, which every open and verify must take as sound.
    e.advance_partitions(&to(&tp, 12)).unwrap();
    e.close().unwrap();
    for mode in [RecoveryMode::default(), RecoveryMode::Strict] {
        let e = Engine::open(EngineConfig::new(dir.path()).recovery_mode(mode)).unwrap();
        assert_eq!(summary(&e, &tp), (0, 12, 7), "{mode:?}");
        assert_eq!(offsets(&e, &tp), vec![0, 1, 2, 3, 4, 7, 8]);
        let report = e.verify().unwrap();
        assert!(report.is_clean(), "{report:?}");
        drop(e); // without close (the drop syncs): the next open recovers
    }
}

#[test]
fn an_advance_starts_a_partition_the_store_holds_nothing_of() {
    let dir = tempfile::tempdir().unwrap();
    let (tp, other) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&other, 0..3, 20)]).unwrap();
    e.advance_partitions(&BTreeMap::from([(tp.clone(), 40), (other.clone(), 2)]))
        .unwrap();
    e.sync().unwrap();
    assert_eq!(summary(&e, &tp), (40, 40, 0));
    assert_eq!(summary(&e, &other), (0, 3, 3), "not moved back");
    e.append(&[batch(&tp, 40..42, 20)]).unwrap();
    assert_eq!(summary(&e, &tp), (40, 42, 2));
    e.close().unwrap();
    reopens_to(dir.path(), &tp, (40, 42, 2));
}

#[test]
fn an_offset_no_kafka_partition_has_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&tp, 0..2, 20)]).unwrap();
    for bad in [-1, i64::MAX] {
        let both = BTreeMap::from([(tp.clone(), bad), (TopicPartition::new("u", 0), 5)]);
        let err = e.advance_partitions(&both).unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
        assert!(err.to_string().contains(&format!("offset {bad}")), "{err}");
    }
    e.sync().unwrap();
    assert_eq!(e.partitions().len(), 1, "nothing started");
    assert_eq!(summary(&e, &tp), (0, 2, 2));
}

#[test]
fn retention_keeps_an_advanced_next_offset() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for first in (0..40).step_by(10) {
        e.append(&[batch(&tp, first..first + 10, 20)]).unwrap();
    }
    e.advance_partitions(&to(&tp, 45)).unwrap();
    e.sync().unwrap();
    // Part of it, then all of it.
    let r = e.truncate_before(&tp, 20).unwrap();
    assert_eq!(r.records_deleted, 20, "{r:?}");
    assert_eq!(summary(&e, &tp), (20, 45, 20));
    assert!(e.verify().unwrap().is_clean());
    e.truncate_before(&tp, 45).unwrap();
    assert_eq!(summary(&e, &tp), (45, 45, 0));
    e.close().unwrap();
    reopens_to(dir.path(), &tp, (45, 45, 0));
}

/// The floor does not excuse every next offset: a summary whose next
/// offset is above its newest entry and is not its floor is still damage
/// (the check the advance relaxed is kept for every other shape).
#[test]
fn a_next_offset_above_the_index_that_is_not_the_floor_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&tp, 0..5, 20)]).unwrap();
    e.advance_partitions(&to(&tp, 7)).unwrap();
    e.close().unwrap();
    with_raw_tree(dir.path(), |t| {
        let k = cairn_engine::keys::partition_key(&tp);
        let (_, mut s) =
            cairn_engine::offsets::PartitionSummary::decode(&k, &t.get(&k).unwrap().unwrap())
                .unwrap();
        assert_eq!((s.next_offset, s.next_offset_floor), (7, 7));
        s.next_offset = 9; // sealed anew: only the fields disagree
        let (k, v) = s.encode(&tp);
        t.insert(k, v).unwrap();
    });
    let (at, kind) = common::open_refused(EngineConfig::new(dir.path()), "next 9 over floor 7");
    assert_eq!(
        at,
        cairn_engine::Location::Partition {
            topic: "t".into(),
            partition: 0
        }
    );
    let text = kind.to_string();
    assert!(
        text.contains("summary next offset 9 with 5 records")
            && text.contains("the summary's floor is 7"),
        "{text}"
    );
}

/// A store of format 3 (no advanced summary in it) is upgraded to 4 by an
/// open that succeeds, so a format-3 build refuses it afterwards instead
/// of taking an advanced summary for damage.
#[test]
fn a_format_3_store_is_upgraded_to_4() {
    use cairn_engine::keys::META_FORMAT;
    use cairn_engine::meta::{decode_format, encode_format, FORMAT_VERSION};
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[RecordBatch {
        tp: tp.clone(),
        records: batch(&tp, 0..3, 20).records,
    }])
    .unwrap();
    let id = e.store_id();
    e.close().unwrap();
    with_raw_tree(dir.path(), |t| {
        t.insert(META_FORMAT, encode_format(3)).unwrap();
    });
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(e.store_id(), id, "kept");
    assert_eq!(offsets(&e, &tp), vec![0, 1, 2]);
    e.close().unwrap();
    const { assert!(FORMAT_VERSION >= 4) };
    let stored = with_raw_tree(dir.path(), |t| {
        decode_format(&t.get(META_FORMAT).unwrap().unwrap()).unwrap()
    });
    assert_eq!(stored, FORMAT_VERSION);
}

/// A retention pass that leaves records keeps the floor where it was: the
/// newest index entry still says the next offset, so its loss after the
/// pass is refused by the open as before (until format 4 the pass raised
/// the floor to the next offset, the shape an advance leaves, which the
/// open would have excused). Verify reports it too.
#[test]
fn a_pruned_partition_that_lost_its_newest_index_entry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for first in (0..40).step_by(10) {
        e.append(&[batch(&tp, first..first + 10, 20)]).unwrap();
    }
    e.truncate_before(&tp, 20).unwrap();
    e.close().unwrap();
    with_raw_tree(dir.path(), |t| {
        let k = cairn_engine::keys::partition_key(&tp);
        let (_, s) =
            cairn_engine::offsets::PartitionSummary::decode(&k, &t.get(&k).unwrap().unwrap())
                .unwrap();
        assert_eq!((s.next_offset, s.next_offset_floor), (40, 0), "floor kept");
        t.remove(cairn_engine::keys::index_key(&tp, 30))
            .unwrap()
            .unwrap();
    });
    let (at, kind) = common::open_refused(EngineConfig::new(dir.path()), "newest entry lost");
    assert_eq!(
        at,
        cairn_engine::Location::Partition {
            topic: "t".into(),
            partition: 0
        }
    );
    assert!(
        kind.to_string().contains(
            "summary next offset 40 with 20 records, but the last index entry ends at offset 29"
        ),
        "{kind}"
    );
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(!v.is_clean(), "{v:?}");
}
