//! Reserved slots (engine/src/slots.rs): empty `W<lsn>` values written
//! ahead of the log so that frames replace keys sled has already split.
//! They must never be read as records, must survive reopen, and a frame
//! above one (a hole in the log) must be reported wherever it is found.
//! Also the fence (engine/src/keys.rs): 32 empty `S` keys between the
//! partition summaries and the frames.

mod common;

use cairn_engine::{
    slots, CorruptionKind, Engine, EngineConfig, Error, Location, RecoveryMode, TopicPartition,
};
use common::{assert_frames_then_reserve, batch, read_all, wal_key, wal_layout, with_raw_tree};

/// `n` single-frame entries (LSNs 1..=n, offsets 0..10n), dropped without
/// close so that every frame is in the recovery tail.
fn crashed_store_of(n: i64) -> (tempfile::TempDir, TopicPartition) {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("s", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for i in 0..n {
        e.append(&[batch(&tp, i * 10..i * 10 + 10, 20)]).unwrap();
    }
    (dir, tp)
}

fn crashed_store() -> (tempfile::TempDir, TopicPartition) {
    crashed_store_of(3)
}

/// `crashed_store`, then recovered and closed cleanly: every frame lies at
/// or below the checkpoint, where a default open does not look.
fn closed_store() -> (tempfile::TempDir, TopicPartition) {
    let (dir, tp) = crashed_store();
    Engine::open(EngineConfig::new(dir.path()))
        .unwrap()
        .close()
        .unwrap();
    (dir, tp)
}

#[test]
fn slots_lie_above_every_frame_and_survive_reopen() {
    let (dir, tp) = crashed_store();
    let (frames, reserved) = wal_layout(dir.path());
    assert_eq!(frames, vec![1, 2, 3]);
    assert!(
        reserved.len() as u64 >= slots::SLOTS_AHEAD_MIN,
        "{} slots",
        reserved.len()
    );
    assert_eq!(reserved[0], 4, "slots start right above the last frame");

    // Reopen after the crash: the slots are not frames, not records, not a
    // torn tail; the next append fills the first of them.
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(e.recovery_report().truncated.is_none());
    assert_eq!(e.recovery_report().next_lsn, 4);
    assert_eq!(read_all(&e, &tp).len(), 30);
    e.append(&[batch(&tp, 30..40, 20)]).unwrap();
    assert_eq!(read_all(&e, &tp).len(), 40);
    let v = e.verify().unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
    assert_eq!(v.frames, 4);
    e.close().unwrap();

    let (frames, reserved2) = wal_layout(dir.path());
    assert_eq!(frames, vec![1, 2, 3, 4]);
    assert_eq!(
        reserved2,
        reserved[1..].to_vec(),
        "the append used the first slot and reserved no more"
    );
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
}

#[test]
fn many_appends_keep_the_reserve_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("s", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    // 1000 single-frame entries: several runs of slots.
    for i in 0..1000 {
        e.append(&[batch(&tp, i..i + 1, 20)]).unwrap();
    }
    drop(e);
    assert_frames_then_reserve(dir.path(), 1000);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(read_all(&e, &tp).len(), 1000);
}

#[test]
fn a_frame_above_a_slot_is_a_hole_everywhere() {
    let (dir, _tp) = crashed_store();
    // Frame 2 emptied: it now reads as a slot with frame 3 above it.
    with_raw_tree(dir.path(), |t| t.insert(wal_key(2), Vec::new()).unwrap());
    let expect = CorruptionKind::FrameAfterSlot { slot_lsn: 2 };
    for mode in [RecoveryMode::TolerateTail, RecoveryMode::Strict] {
        let mut cfg = EngineConfig::new(dir.path());
        cfg.recovery_mode = mode;
        match Engine::open(cfg) {
            Err(Error::Corruption { location, kind }) => {
                assert_eq!(location, Location::Wal { lsn: 3 }, "{mode:?}");
                assert_eq!(kind, expect, "{mode:?}");
            }
            Err(other) => panic!("{mode:?}: expected FrameAfterSlot, got {other}"),
            Ok(_) => panic!("{mode:?}: opened a log with a hole"),
        }
    }
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.location == Location::Wal { lsn: 3 } && p.kind == expect),
        "{:?}",
        v.problems
    );
}

#[test]
fn a_hole_below_the_checkpoint_fails_reads_and_verify() {
    let (dir, tp) = closed_store();
    with_raw_tree(dir.path(), |t| t.insert(wal_key(2), Vec::new()).unwrap());
    // The default open does not look below the checkpoint; reads do.
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let err = e
        .read(&tp, 0)
        .unwrap()
        .find_map(|r| r.err())
        .expect("a read must hit the emptied frame");
    match err {
        Error::Corruption {
            location: Location::Wal { lsn: 2 },
            ..
        } => {}
        other => panic!("expected corruption at lsn 2, got {other}"),
    }
    let v = e.verify().unwrap();
    assert!(v
        .problems
        .iter()
        .any(|p| p.location == Location::Wal { lsn: 3 }
            && p.kind == CorruptionKind::FrameAfterSlot { slot_lsn: 2 }));
}

#[test]
fn a_version_1_store_is_upgraded_on_open() {
    let (dir, tp) = closed_store();
    with_raw_tree(dir.path(), make_version_1);
    assert!(wal_layout(dir.path()).1.is_empty());
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(read_all(&e, &tp).len(), 30);
    e.append(&[batch(&tp, 30..40, 20)]).unwrap();
    e.close().unwrap();
    let format = with_raw_tree(dir.path(), |t| {
        let v = t.get(cairn_engine::keys::META_FORMAT).unwrap().unwrap();
        cairn_engine::meta::decode_format(&v).unwrap()
    });
    assert_eq!(format, cairn_engine::meta::FORMAT_VERSION);
    assert!(!wal_layout(dir.path()).1.is_empty());
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
}

/// A version-1 store has no reserved slots: an emptied last frame in one
/// is damage at its LSN, not the log's end (an entry below it not yet
/// indexed would have been truncated as torn; since 2026-12-06).
#[test]
fn an_empty_value_in_a_version_1_store_is_damage_not_a_slot() {
    let (dir, _tp) = crashed_store_of(4);
    with_raw_tree(dir.path(), |t| {
        make_version_1(t);
        t.insert(wal_key(4), Vec::new()).unwrap();
    });
    match Engine::open(EngineConfig::new(dir.path())) {
        Err(Error::Corruption {
            location: Location::Wal { lsn: 4 },
            kind: CorruptionKind::BadKey { detail },
        }) => assert!(detail.contains("format-1 store"), "{detail}"),
        Err(other) => panic!("expected the empty value refused at lsn 4, got {other}"),
        Ok(_) => panic!("expected the empty value refused at lsn 4; the store opened"),
    }
    // Verify says so too (it read it as a slot, and the store clean).
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(
        v.problems.iter().any(|p| p.location == Location::Wal { lsn: 4 }
            && matches!(&p.kind, CorruptionKind::BadKey { detail } if detail.contains("format-1 store"))),
        "{:?}",
        v.problems
    );
    // One emptied in the middle of the log: reported there, and the frame
    // after it is no gap.
    with_raw_tree(dir.path(), |t| {
        t.insert(wal_key(2), Vec::new()).unwrap();
    });
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.location == Location::Wal { lsn: 2 }
                && matches!(&p.kind, CorruptionKind::BadKey { .. })),
        "{:?}",
        v.problems
    );
    assert!(
        !v.problems
            .iter()
            .any(|p| matches!(p.kind, CorruptionKind::LsnGap { .. })),
        "{:?}",
        v.problems
    );
}

/// What a version-1 build left: no slots, no fence, format 1.
fn make_version_1(t: &sled::Tree) {
    for lsn in layout_slots(t) {
        t.remove(wal_key(lsn)).unwrap();
    }
    remove_fence(t);
    // Format 3's store identity did not exist either.
    t.remove(cairn_engine::keys::META_STORE).unwrap();
    t.insert(
        cairn_engine::keys::META_FORMAT,
        cairn_engine::meta::encode_format(1),
    )
    .unwrap();
}

/// What a store created before the fence looks like.
fn remove_fence(t: &sled::Tree) {
    for i in 0..cairn_engine::keys::FENCE_KEYS {
        t.remove(cairn_engine::keys::fence_key(i)).unwrap();
    }
}

/// Keep the first half of frame `lsn`'s bytes.
fn cut_in_half(t: &sled::Tree, lsn: u64) {
    let v = t.get(wal_key(lsn)).unwrap().unwrap();
    t.insert(wal_key(lsn), &v[..v.len() / 2]).unwrap();
}

fn layout_slots(t: &sled::Tree) -> Vec<u64> {
    t.scan_prefix([cairn_engine::keys::PREFIX_WAL])
        .map(|i| i.unwrap())
        .filter(|(_, v)| slots::is_slot(v))
        .map(|(k, _)| cairn_engine::keys::parse_wal_key(&k).unwrap())
        .collect()
}

#[test]
fn a_cut_frame_below_a_hole_is_not_a_torn_tail() {
    // Frame 2 cut short, frame 3 emptied (it reads as a slot), frame 4
    // intact. Frame 2 looks like a torn last frame followed by slots; the
    // intact frame above the hole shows it is damage. Truncating from 2
    // would delete entry 4, so the open must refuse.
    let (dir, _tp) = crashed_store_of(4);
    with_raw_tree(dir.path(), |t| {
        cut_in_half(t, 2);
        t.insert(wal_key(3), Vec::new()).unwrap();
    });
    match Engine::open(EngineConfig::new(dir.path())) {
        Err(Error::Corruption { location, kind }) => {
            assert_eq!(location, Location::Wal { lsn: 4 });
            assert_eq!(kind, CorruptionKind::FrameAfterSlot { slot_lsn: 3 });
        }
        Err(other) => panic!("expected FrameAfterSlot, got {other}"),
        Ok(e) => panic!("opened, truncating {:?}", e.recovery_report().truncated),
    }
}

#[test]
fn a_torn_last_frame_below_the_slots_is_still_truncated() {
    let (dir, tp) = crashed_store_of(3);
    // The fourth append, torn by a crash before its index entry and summary
    // (which an append inserts after its frames).
    let summary_key = cairn_engine::keys::partition_key(&tp);
    let summary = with_raw_tree(dir.path(), |t| t.get(&summary_key).unwrap().unwrap());
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&tp, 30..40, 20)]).unwrap();
    drop(e);
    with_raw_tree(dir.path(), |t| {
        cut_in_half(t, 4);
        t.remove(cairn_engine::keys::index_key(&tp, 30)).unwrap();
        t.insert(&summary_key, summary).unwrap();
    });
    // The watermark may vouch for LSN 4 (it was acknowledged), so this is
    // judged with the watermark removed: only the log's shape is tested.
    std::fs::remove_file(dir.path().join("cairn.durable")).unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let t = e.recovery_report().truncated.clone().expect("truncated");
    assert_eq!((t.first_lsn, t.frames), (4, 1));
    assert_eq!(read_all(&e, &tp).len(), 30);
    // The slots above went with it, and the next append reserves anew.
    e.append(&[batch(&tp, 30..40, 20)]).unwrap();
    drop(e);
    let (frames, reserved) = wal_layout(dir.path());
    assert_eq!(frames, vec![1, 2, 3, 4]);
    assert_eq!(reserved.first(), Some(&5));
}

/// A stray slot at the top of the key space, above a log with its reserve
/// and above one with none (all its slots gone, as a version-1 store has
/// none): it is not taken for the reserve's end (before, the second shape
/// overflowed the slot arithmetic), and the appends still reserve runs.
#[test]
fn a_stray_slot_at_the_top_of_the_key_space_is_harmless() {
    for keep_reserve in [true, false] {
        let (dir, tp) = crashed_store();
        let (_, reserved) = wal_layout(dir.path());
        assert!(!reserved.is_empty());
        with_raw_tree(dir.path(), |t| {
            if !keep_reserve {
                for lsn in reserved {
                    t.remove(wal_key(lsn)).unwrap();
                }
            }
            t.insert(wal_key(u64::MAX), Vec::new()).unwrap()
        });
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        // Enough appends to need a new run of slots: it still comes.
        for i in 3..400 {
            e.append(&[batch(&tp, i * 10..i * 10 + 10, 20)]).unwrap();
        }
        drop(e);
        let (frames, reserved) = wal_layout(dir.path());
        assert_eq!(frames.len(), 400);
        assert!(
            reserved
                .iter()
                .filter(|&&l| l > 400 && l < u64::MAX)
                .count() as u64
                >= slots::SLOTS_AHEAD_MIN,
            "reserve kept {keep_reserve}: no reserve above the log"
        );
        let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
        assert!(v.problems.is_empty(), "{:?}", v.problems);
    }
}

#[test]
fn a_version_1_store_stays_version_1_when_its_open_fails() {
    let (dir, _tp) = crashed_store();
    with_raw_tree(dir.path(), |t| {
        make_version_1(t);
        // Damage in the recovery tail: the open must fail.
        let mut v = t.get(wal_key(2)).unwrap().unwrap().to_vec();
        v[20] ^= 1;
        t.insert(wal_key(2), v).unwrap();
    });
    assert!(Engine::open(EngineConfig::new(dir.path())).is_err());
    let format = with_raw_tree(dir.path(), |t| {
        let v = t.get(cairn_engine::keys::META_FORMAT).unwrap().unwrap();
        cairn_engine::meta::decode_format(&v).unwrap()
    });
    assert_eq!(format, 1, "a failed open must not upgrade the store");
}

#[test]
fn verify_reads_a_tombstone_at_the_end_as_covering_its_span() {
    // Retention deletes the newest entries: the log ends in a tombstone
    // whose span reaches the watermark, which is not a lost suffix.
    let (dir, tp) = crashed_store_of(4);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let r = e.truncate_before(&tp, 40).unwrap();
    assert_eq!(r.frames_deleted, 4);
    e.close().unwrap();
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
    assert_eq!(v.tombstones, 1);
}

#[test]
fn a_new_store_has_the_fence_and_verify_checks_it() {
    let (dir, _tp) = crashed_store();
    let fence: Vec<(Vec<u8>, Vec<u8>)> = with_raw_tree(dir.path(), |t| {
        t.scan_prefix([cairn_engine::keys::PREFIX_FENCE])
            .map(|i| i.unwrap())
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect()
    });
    let want: Vec<(Vec<u8>, Vec<u8>)> = (0..cairn_engine::keys::FENCE_KEYS)
        .map(|i| (cairn_engine::keys::fence_key(i).to_vec(), Vec::new()))
        .collect();
    assert_eq!(fence, want);
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);

    // A fence key with a value, and a key under the fence's prefix that is
    // not one of its 32: both reported by location, nothing else.
    with_raw_tree(dir.path(), |t| {
        t.insert(cairn_engine::keys::fence_key(5), b"x".to_vec())
            .unwrap();
        t.insert(b"S\x20", Vec::new()).unwrap();
    });
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    let at: Vec<&Location> = v.problems.iter().map(|p| &p.location).collect();
    assert_eq!(
        at,
        vec![
            &Location::Key {
                key_hex: "5305".into()
            },
            &Location::Key {
                key_hex: "5320".into()
            }
        ],
        "{:?}",
        v.problems
    );
    assert!(v
        .problems
        .iter()
        .all(|p| matches!(p.kind, CorruptionKind::BadKey { .. })));
}

#[test]
fn a_store_without_the_fence_still_opens_and_verifies() {
    let (dir, tp) = crashed_store();
    with_raw_tree(dir.path(), remove_fence);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&tp, 30..40, 20)]).unwrap();
    assert_eq!(read_all(&e, &tp).len(), 40);
    assert!(e.verify().unwrap().problems.is_empty());
}

#[test]
fn syncs_top_the_slots_up_so_writes_do_not_stop_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let tps: Vec<TopicPartition> = (0..32).map(|p| TopicPartition::new("s", p)).collect();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    // 32 frames per append, as a put spread over 32 partitions writes.
    let put = |i: i64| -> Vec<_> {
        tps.iter()
            .map(|tp| batch(tp, i * 5..i * 5 + 5, 20))
            .collect()
    };
    e.append(&put(0)).unwrap();
    let first = e.stats();
    assert!(
        first.slots_reserved_by_writes > 0,
        "a new store's first write reserves"
    );
    for i in 1..100 {
        e.append(&put(i)).unwrap();
    }
    let s = e.stats();
    assert_eq!(s.frames, 3200);
    assert_eq!(
        s.slots_reserved_by_writes, first.slots_reserved_by_writes,
        "no write after the first stopped to reserve slots"
    );
    // Every frame after the first write's run took a slot a sync inserted.
    assert!(
        s.slots_reserved_by_syncs + first.slots_reserved_by_writes >= 3200 + slots::SLOTS_AHEAD_MIN,
        "{s:?}"
    );
    drop(e);
    // The slots a sync inserted are slots like any other: above every
    // frame, never records, and the reserve stays within its bounds.
    assert_frames_then_reserve(dir.path(), 3200);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for tp in &tps {
        assert_eq!(read_all(&e, tp), batch(tp, 0..500, 20).records);
    }
    let v = e.verify().unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
}
