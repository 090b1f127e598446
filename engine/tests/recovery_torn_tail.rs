//! A torn last entry is truncated under TolerateTail and refused under Strict.

mod common;

use cairn_engine::{
    CorruptionKind, Engine, EngineConfig, Error, Location, RecoveryMode, TopicPartition,
};
use common::{batch, read_all, wal_key, with_raw_tree};

/// A torn tail is a write that was never acknowledged: the crash came
/// between the write and its fsync, so the watermark still names the last
/// acknowledged LSN. Rewind it to say so.
fn unacknowledge_after(dir: &std::path::Path, lsn: u64) {
    std::fs::write(
        dir.join(cairn_engine::watermark::WATERMARK_FILE),
        cairn_engine::watermark::encode(lsn),
    )
    .unwrap();
}

fn crashed_store(
    frame_body_bytes_max: usize,
    value_len: usize,
) -> (tempfile::TempDir, TopicPartition, u64) {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("torn", 0);
    let e = Engine::open(EngineConfig::new(dir.path()).frame_body_bytes_max(frame_body_bytes_max))
        .unwrap();
    e.append(&[batch(&tp, 0..10, 20)]).unwrap();
    e.append(&[batch(&tp, 10..20, value_len)]).unwrap();
    let last = e.stats().next_lsn - 1;
    drop(e); // crash: no close, so the whole log is tail
    (dir, tp, last)
}

/// [`crashed_store`] as a crash inside the second append leaves it: an
/// append inserts its frames first, then its index entry, then its
/// summary, so a crash among its frames leaves neither of the last two.
fn crashed_inside_second_append(
    frame_body_bytes_max: usize,
    value_len: usize,
) -> (tempfile::TempDir, TopicPartition, u64) {
    let (dir, tp, last) = crashed_store(frame_body_bytes_max, value_len);
    // The summary as the first append left it, from a store that only had it.
    let first_only = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(first_only.path())).unwrap();
    e.append(&[batch(&tp, 0..10, 20)]).unwrap();
    drop(e);
    let summary_key = cairn_engine::keys::partition_key(&tp);
    let summary = with_raw_tree(first_only.path(), |t| t.get(&summary_key).unwrap().unwrap());
    with_raw_tree(dir.path(), |t| {
        t.remove(cairn_engine::keys::index_key(&tp, 10)).unwrap();
        t.insert(&summary_key, summary).unwrap();
    });
    (dir, tp, last)
}

fn opens(dir: &std::path::Path, mode: RecoveryMode) -> Result<Engine, Error> {
    Engine::open(
        EngineConfig::new(dir)
            .frame_body_bytes_max(1024)
            .recovery_mode(mode),
    )
}

#[test]
fn torn_last_frame_truncated_or_refused() {
    let (dir, tp, last) = crashed_inside_second_append(64 << 10, 20);
    assert_eq!(last, 2);
    with_raw_tree(dir.path(), |t| {
        let v = t.get(wal_key(2)).unwrap().unwrap();
        t.insert(wal_key(2), &v[..v.len() / 2]).unwrap();
    });
    unacknowledge_after(dir.path(), 1);
    match opens(dir.path(), RecoveryMode::Strict) {
        Err(Error::Corruption {
            location: Location::Wal { lsn: 2 },
            kind: CorruptionKind::Truncated { .. },
        }) => {}
        Err(other) => panic!("strict must refuse at lsn 2, got {other}"),
        Ok(_) => panic!("strict must refuse at lsn 2"),
    }
    let e = opens(dir.path(), RecoveryMode::TolerateTail).unwrap();
    let t = e
        .recovery_report()
        .truncated
        .clone()
        .expect("tail truncated");
    assert_eq!((t.first_lsn, t.frames), (2, 1));
    assert_eq!(
        e.durable_offset(&tp),
        Some(10),
        "offset rolled back to the intact entry"
    );
    assert_eq!(read_all(&e, &tp).len(), 10);
    let v = e.verify().unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
    // Kafka redelivers 10..20; they are written again, exactly once.
    let d = e.append(&[batch(&tp, 10..20, 20)]).unwrap();
    assert_eq!((d.appended_records, d.get(&tp)), (10, Some(20)));
    assert_eq!(read_all(&e, &tp), batch(&tp, 0..20, 20).records);
}

/// A whole last frame whose length field reads more bytes than it holds
/// looks cut short, but its checksum matches the bytes it has: damage,
/// refused in both modes and named, never truncated as a torn tail (until
/// the night of 2026-12-03 TolerateTail truncated it, records and all).
#[test]
fn a_last_frame_with_a_damaged_length_is_refused_not_truncated() {
    let (dir, _tp, last) = crashed_inside_second_append(64 << 10, 20);
    assert_eq!(last, 2);
    with_raw_tree(dir.path(), |t| {
        let mut v = t.get(wal_key(2)).unwrap().unwrap().to_vec();
        let len = u32::from_le_bytes(v[8..12].try_into().unwrap());
        v[8..12].copy_from_slice(&(len + 100).to_le_bytes());
        t.insert(wal_key(2), v).unwrap();
    });
    unacknowledge_after(dir.path(), 1);
    for mode in [RecoveryMode::Strict, RecoveryMode::TolerateTail] {
        match opens(dir.path(), mode) {
            Err(Error::Corruption {
                location: Location::Wal { lsn: 2 },
                kind: CorruptionKind::LengthDamaged { .. },
            }) => {}
            Err(other) => panic!("{mode:?} must refuse at lsn 2, got {other}"),
            Ok(e) => panic!(
                "{mode:?} must refuse at lsn 2, opened with {:?}",
                e.recovery_report().truncated
            ),
        }
    }
}

/// A last value shorter than a frame header that is not the start of one
/// (garbage, another version, an unknown kind or flags) is damage in both
/// modes, refused by what is wrong with it; until 2026-12-05 any value
/// under 16 bytes read as a frame cut short, and TolerateTail truncated
/// it as a torn tail. A length damaged past the bound in a whole frame is
/// named `LengthDamaged` too (it was `LengthTooLarge`).
#[test]
fn a_short_last_value_that_starts_no_frame_is_refused_not_truncated() {
    type Named = fn(&CorruptionKind) -> bool;
    let cases: [(&[u8], Named); 5] = [
        (b"\x00", |k| matches!(k, CorruptionKind::BadMagic { .. })),
        (b"garbage", |k| matches!(k, CorruptionKind::BadMagic { .. })),
        (b"CRNF\x07\x01\x00\x00", |k| {
            matches!(k, CorruptionKind::UnsupportedVersion { found: 7 })
        }),
        (b"CRNF\x01\x09", |k| {
            matches!(k, CorruptionKind::UnknownKind { found: 9 })
        }),
        (b"CRNF\x01\x01\xff\xff", |k| {
            matches!(k, CorruptionKind::UnknownFlags { .. })
        }),
    ];
    for (bytes, named) in cases {
        let (dir, _tp, last) = crashed_inside_second_append(64 << 10, 20);
        assert_eq!(last, 2);
        with_raw_tree(dir.path(), |t| {
            t.insert(wal_key(2), bytes).unwrap();
        });
        unacknowledge_after(dir.path(), 1);
        for mode in [RecoveryMode::Strict, RecoveryMode::TolerateTail] {
            match opens(dir.path(), mode) {
                Err(Error::Corruption {
                    location: Location::Wal { lsn: 2 },
                    kind,
                }) if named(&kind) => {}
                Err(other) => panic!("{bytes:?}, {mode:?}: refused as {other}"),
                Ok(e) => panic!(
                    "{bytes:?}, {mode:?}: opened with {:?}",
                    e.recovery_report().truncated
                ),
            }
        }
    }
    // A whole last frame whose length was damaged past the bound.
    let (dir, _tp, _) = crashed_inside_second_append(64 << 10, 20);
    with_raw_tree(dir.path(), |t| {
        let mut v = t.get(wal_key(2)).unwrap().unwrap().to_vec();
        let len = u32::from_le_bytes(v[8..12].try_into().unwrap());
        v[8..12].copy_from_slice(&(len | 1 << 24).to_le_bytes());
        t.insert(wal_key(2), v).unwrap();
    });
    unacknowledge_after(dir.path(), 1);
    match opens(dir.path(), RecoveryMode::TolerateTail) {
        Err(Error::Corruption {
            location: Location::Wal { lsn: 2 },
            kind: CorruptionKind::LengthDamaged { .. },
        }) => {}
        Err(other) => panic!("refused as {other}"),
        Ok(_) => panic!("opened"),
    }
}

#[test]
fn entry_cut_off_between_chunks_is_torn() {
    // The second entry spans several 1 KiB frames; drop its last one.
    let (dir, tp, last) = crashed_inside_second_append(1024, 600);
    assert!(last >= 4, "entry is chunked");
    with_raw_tree(dir.path(), |t| t.remove(wal_key(last)).unwrap());
    unacknowledge_after(dir.path(), 1);
    match opens(dir.path(), RecoveryMode::Strict) {
        Err(Error::Corruption {
            kind: CorruptionKind::BadChunkSequence { .. },
            ..
        }) => {}
        Err(other) => panic!("strict must refuse, got {other}"),
        Ok(_) => panic!("strict must refuse"),
    }
    let e = opens(dir.path(), RecoveryMode::TolerateTail).unwrap();
    let t = e.recovery_report().truncated.clone().unwrap();
    assert_eq!(t.first_lsn, 2);
    assert_eq!(t.frames, last - 2);
    assert_eq!(e.durable_offset(&tp), Some(10));
    assert!(e.verify().unwrap().is_clean());
}

/// Cut `last`, the last frame of the entry at LSN 2: half its value when it
/// is the entry's only frame, else the whole final chunk.
fn cut_last_frame(dir: &std::path::Path, last: u64) {
    with_raw_tree(dir, |t| {
        if last == 2 {
            let v = t.get(wal_key(2)).unwrap().unwrap();
            t.insert(wal_key(2), &v[..v.len() / 2]).unwrap();
        } else {
            t.remove(wal_key(last)).unwrap();
        }
    });
}

/// Both modes refuse the store with `Corruption` at LSN 2, and leave the
/// entry there (its frame and `tp`'s index entry at `first_offset`).
fn refused_as_damage(dir: &std::path::Path, tp: &TopicPartition, first_offset: i64) {
    for mode in [RecoveryMode::TolerateTail, RecoveryMode::Strict] {
        match opens(dir, mode) {
            Err(Error::Corruption {
                location: Location::Wal { lsn: 2 },
                kind: CorruptionKind::Truncated { .. } | CorruptionKind::BadChunkSequence { .. },
            }) => {}
            // Strict's full verify may name another kind first, at the
            // same place.
            Err(Error::Corruption {
                location: Location::Wal { lsn: 2 },
                ..
            }) if mode == RecoveryMode::Strict => {}
            Err(other) => panic!("{mode:?}: expected corruption at lsn 2, got {other}"),
            Ok(e) => panic!(
                "{mode:?}: opened, truncating an indexed entry: {:?}, next offset {:?}",
                e.recovery_report().truncated,
                e.durable_offset(tp)
            ),
        }
    }
    // Nothing was removed: the entry's frames and index entry are there.
    with_raw_tree(dir, |t| {
        assert!(t.get(wal_key(2)).unwrap().is_some());
        assert!(t
            .get(cairn_engine::keys::index_key(tp, first_offset))
            .unwrap()
            .is_some());
    });
}

#[test]
fn an_indexed_last_entry_is_never_taken_for_torn() {
    // The damage of the two tests above, to an entry that was indexed: it
    // was written whole, so its cut frame or missing chunk is damage. Even
    // beyond the watermark (which may lag after a power loss), no mode
    // truncates it or moves the partition's next offset back.
    for (frame_bytes_max, value_len) in [(64 << 10, 20), (1024, 600)] {
        let (dir, tp, last) = crashed_store(frame_bytes_max, value_len);
        cut_last_frame(dir.path(), last);
        unacknowledge_after(dir.path(), 1);
        refused_as_damage(dir.path(), &tp, 10);
    }
}

/// The same, for a partition's first entry cut short after its index entry
/// and before its summary: the partition has no summary, and its index
/// entry is the only sign that the entry was written whole. Truncating it
/// left that index entry pointing at LSNs the next append reuses.
#[test]
fn an_indexed_first_entry_without_its_summary_is_never_taken_for_torn() {
    for (frame_bytes_max, value_len) in [(64 << 10, 20), (1024, 600)] {
        let dir = tempfile::tempdir().unwrap();
        let (other, tp) = (
            TopicPartition::new("other", 0),
            TopicPartition::new("torn", 0),
        );
        let e = Engine::open(EngineConfig::new(dir.path()).frame_body_bytes_max(frame_bytes_max))
            .unwrap();
        e.append(&[batch(&other, 0..10, 20)]).unwrap();
        e.append(&[batch(&tp, 0..10, value_len)]).unwrap();
        let last = e.stats().next_lsn - 1;
        drop(e); // crash: no close, so the whole log is tail
        with_raw_tree(dir.path(), |t| {
            t.remove(cairn_engine::keys::partition_key(&tp)).unwrap();
        });
        cut_last_frame(dir.path(), last);
        unacknowledge_after(dir.path(), 1);
        refused_as_damage(dir.path(), &tp, 0);
    }
}

#[test]
fn bit_flip_in_last_frame_is_corruption_not_torn() {
    let (dir, _, _) = crashed_store(64 << 10, 20);
    with_raw_tree(dir.path(), |t| {
        let mut v = t.get(wal_key(2)).unwrap().unwrap().to_vec();
        v[25] ^= 4;
        t.insert(wal_key(2), v).unwrap();
    });
    match opens(dir.path(), RecoveryMode::TolerateTail) {
        Err(Error::Corruption {
            location: Location::Wal { lsn: 2 },
            kind: CorruptionKind::Checksum { .. },
        }) => {}
        Err(other) => panic!("a complete frame with a bad CRC is corruption, got {other}"),
        Ok(_) => panic!("a complete frame with a bad CRC is corruption"),
    }
}

#[test]
fn acknowledged_tail_cut_off_is_lost_suffix_not_torn() {
    // The same damage as above, but the append was acknowledged: the
    // watermark says so, and no mode may truncate durable records away.
    let (dir, _, last) = crashed_store(1024, 600);
    with_raw_tree(dir.path(), |t| t.remove(wal_key(last)).unwrap());
    for mode in [RecoveryMode::TolerateTail, RecoveryMode::Strict] {
        match opens(dir.path(), mode) {
            // Named where the log as found ends, as verify names it (before
            // 2026-12-03 the default open named the entry's first frame,
            // log_end 1: the log as its truncation would leave it).
            Err(Error::Corruption {
                location: Location::Wal { lsn },
                kind: CorruptionKind::LostSuffix { log_end, durable },
            }) if lsn == last && log_end == last - 1 && durable == last => {}
            // Strict refuses the entry without its final chunk first, at
            // the entry's first frame.
            Err(Error::Corruption {
                location: Location::Wal { lsn: 2 },
                ..
            }) if mode == RecoveryMode::Strict => {}
            Err(other) => panic!("{mode:?}: expected LostSuffix, got {other}"),
            Ok(_) => panic!("{mode:?}: an acknowledged entry was truncated away"),
        }
    }
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| matches!(p.kind, CorruptionKind::LostSuffix { .. })),
        "{:?}",
        v.problems
    );
}

/// The refusal names the frame that is cut, not the first frame of its
/// entry (before, an entry of several chunks whose last one was cut was
/// reported at its first, which is whole), whether the watermark covers
/// the entry (before 2026-12-03 the default open then called it a lost
/// suffix at the entry's first frame) or lags it (the entry's index entry
/// tells).
#[test]
fn an_indexed_entry_cut_in_its_last_chunk_is_named_at_that_chunk() {
    let (dir, tp, last) = crashed_store(1024, 600);
    assert!(last > 2, "an entry of several chunks");
    with_raw_tree(dir.path(), |t| {
        let v = t.get(wal_key(last)).unwrap().unwrap();
        t.insert(wal_key(last), &v[..v.len() / 2]).unwrap();
    });
    for watermark in ["covers the entry", "lags it"] {
        if watermark == "lags it" {
            unacknowledge_after(dir.path(), 1);
        }
        for mode in [RecoveryMode::TolerateTail, RecoveryMode::Strict] {
            match opens(dir.path(), mode) {
                Err(Error::Corruption {
                    location: Location::Wal { lsn },
                    kind: CorruptionKind::Truncated { .. },
                }) => assert_eq!(lsn, last, "{mode:?}, the watermark {watermark}"),
                Err(other) => panic!(
                    "{mode:?}, the watermark {watermark}: expected a cut frame at lsn {last}, got {other}"
                ),
                Ok(_) => panic!("{mode:?}: opened, truncating an indexed entry"),
            }
        }
    }
    assert!(with_raw_tree(dir.path(), |t| t
        .get(cairn_engine::keys::index_key(&tp, 10))
        .unwrap()
        .is_some()));
}

/// A refused open writes none of its repairs: here partition a's newest
/// index entry is lost (recovery would rebuild it) and partition b's
/// summary is ahead of its index (damage, refused). The store is left as it
/// was found, a's index entry still missing, for verify and salvage (before,
/// the rebuilt entry was written first and kept).
#[test]
fn a_refused_open_writes_none_of_its_repairs() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&a, 0..10, 20), batch(&b, 0..10, 20)])
        .unwrap();
    drop(e); // crash: the whole log is tail
             // b's summary as a store with 50 of its records has it.
    let other = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(other.path())).unwrap();
    e.append(&[batch(&b, 0..50, 20)]).unwrap();
    drop(e);
    let b_summary_key = cairn_engine::keys::partition_key(&b);
    let ahead = with_raw_tree(other.path(), |t| t.get(&b_summary_key).unwrap().unwrap());
    let a_index_key = cairn_engine::keys::index_key(&a, 0);
    with_raw_tree(dir.path(), |t| {
        t.remove(&a_index_key).unwrap();
        t.insert(&b_summary_key, ahead).unwrap();
    });
    match opens(dir.path(), RecoveryMode::TolerateTail) {
        Err(e) => assert!(e.is_corruption(), "{e}"),
        Ok(_) => panic!("opened with b's summary ahead of its index"),
    }
    with_raw_tree(dir.path(), |t| {
        assert!(
            t.get(&a_index_key).unwrap().is_none(),
            "a refused open rebuilt a's index entry"
        );
    });
}

/// A tombstone ending the log (retention emptied the partition) that is cut
/// short is damage, not a torn write: retention writes a tombstone in one
/// batch and fsyncs it before it reports the prune. Before, it was
/// truncated as a torn tail, and the LSNs it covered would have been
/// reused.
#[test]
fn a_tombstone_cut_short_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("torn", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for i in 0..3 {
        e.append(&[batch(&tp, i * 10..i * 10 + 10, 20)]).unwrap();
    }
    e.truncate_before(&tp, 30).unwrap();
    // A crash: the tombstone lies past the checkpoint, where recovery
    // looks for a torn tail.
    drop(e);
    // The log's last frame (slots aside) is the tombstone.
    let (lsn, v) = with_raw_tree(dir.path(), |t| {
        t.scan_prefix([cairn_engine::keys::PREFIX_WAL])
            .map(Result::unwrap)
            .filter(|(_, v)| !cairn_engine::slots::is_slot(v))
            .last()
            .map(|(k, v)| (cairn_engine::keys::parse_wal_key(&k).unwrap(), v.to_vec()))
            .unwrap()
    });
    assert_eq!(
        v[5],
        cairn_engine::frame::FrameKind::Tombstone as u8,
        "the log ends in a tombstone"
    );
    // Cut anywhere from the kind byte on (six bytes: the magic, the
    // version and the kind); before 2026-12-03 a cut inside the 16-byte
    // header still read as a torn records frame.
    let whole = v.len();
    for len in [6, 8, 15, 16, whole - 1] {
        with_raw_tree(dir.path(), |t| {
            t.insert(wal_key(lsn), &v[..len]).unwrap();
        });
        unacknowledge_after(dir.path(), lsn - 1);
        match opens(dir.path(), RecoveryMode::TolerateTail) {
            Err(Error::Corruption {
                location: Location::Wal { lsn: at },
                kind: CorruptionKind::Truncated { .. },
            }) if at == lsn => {}
            Err(other) => panic!("{len} of {whole} bytes: must refuse at lsn {lsn}, got {other}"),
            Ok(e) => panic!(
                "{len} of {whole} bytes: opened, truncating the tombstone as torn: {:?}",
                e.recovery_report().truncated
            ),
        }
    }
}

/// A torn tail beside another partition's damaged index entry (a bad CRC:
/// the open rebuilds it from the log's frames) is truncated, and the index
/// entry rebuilt, as either alone would be. Before, the check that no index
/// entry points into the torn tail read the damaged entry first and
/// refused the open with its checksum error.
#[test]
fn a_torn_tail_beside_a_damaged_index_entry_is_truncated_and_the_entry_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&[batch(&b, 0..10, 20)]).unwrap();
        e.append(&[batch(&a, 0..10, 20)]).unwrap();
        drop(e); // crash: no close, so the whole log is tail
    }
    with_raw_tree(dir.path(), |t| {
        // a's first append, cut among its frames: half its only frame, and
        // neither its index entry nor its summary.
        let v = t.get(wal_key(2)).unwrap().unwrap();
        t.insert(wal_key(2), &v[..v.len() / 2]).unwrap();
        t.remove(cairn_engine::keys::index_key(&a, 0)).unwrap();
        t.remove(cairn_engine::keys::partition_key(&a)).unwrap();
        // b's index entry: a byte flipped.
        let k = cairn_engine::keys::index_key(&b, 0);
        let mut v = t.get(&k).unwrap().unwrap().to_vec();
        v[0] ^= 0x40;
        t.insert(k, v).unwrap();
    });
    unacknowledge_after(dir.path(), 1);
    let e = opens(dir.path(), RecoveryMode::TolerateTail).unwrap();
    let r = e.recovery_report();
    assert_eq!(r.truncated.as_ref().map(|t| t.first_lsn), Some(2));
    assert_eq!(r.index_entries_damaged, 1, "{r:?}");
    assert_eq!(e.durable_offset(&b), Some(10));
    assert_eq!(e.durable_offset(&a), None);
    assert_eq!(read_all(&e, &b), batch(&b, 0..10, 20).records);
    let v = e.verify().unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
}
