//! Damaged frames, written through sled directly: read, verify and a strict
//! open must all report `Corruption` at the right LSN, and no record of a
//! damaged entry may ever be yielded.

mod common;

use cairn_engine::{
    CorruptionKind, Engine, EngineConfig, Error, Location, RecoveryMode, TopicPartition,
};
use common::{batch, open_refused, wal_key, with_raw_tree};

/// Three single-frame entries for one partition at LSNs 1, 2, 3 (offsets
/// 0..10, 10..20, 20..30), then a clean close.
fn store() -> (tempfile::TempDir, TopicPartition) {
    store_closed(true)
}

/// [`store`] with its index entry at offset 10 lost (its frames whole),
/// opened.
fn store_with_a_lost_index_entry() -> (tempfile::TempDir, TopicPartition, Engine) {
    let (dir, tp) = store();
    with_raw_tree(dir.path(), |t| {
        t.remove(cairn_engine::keys::index_key(&tp, 10)).unwrap();
    });
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    (dir, tp, e)
}

/// [`store`], closed or dropped without a close (then every frame is in
/// the recovery tail: the next open reads the whole log).
fn store_closed(close: bool) -> (tempfile::TempDir, TopicPartition) {
    store_of(3, close)
}

/// [`store_closed`] with `entries` entries of 10 records each.
fn store_of(entries: i64, close: bool) -> (tempfile::TempDir, TopicPartition) {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("c", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for i in 0..entries {
        e.append(&[batch(&tp, i * 10..i * 10 + 10, 20)]).unwrap();
    }
    if close {
        e.close().unwrap();
    }
    (dir, tp)
}

/// Rewrite the index entry of `tp` at `first_offset` as `forge` changes
/// it, sealed anew: damage under a valid CRC.
fn forge_index_entry(
    dir: &std::path::Path,
    tp: &TopicPartition,
    first_offset: i64,
    forge: fn(&mut cairn_engine::index::IndexEntry),
) {
    with_raw_tree(dir, |t| {
        let k = cairn_engine::keys::index_key(tp, first_offset);
        let (_, mut e) =
            cairn_engine::index::IndexEntry::decode(&k, &t.get(&k).unwrap().unwrap()).unwrap();
        forge(&mut e);
        let (k, v) = e.encode(tp);
        t.insert(k, v).unwrap();
    });
}

fn damage(dir: &std::path::Path, lsn: u64, f: impl FnOnce(&mut Vec<u8>)) {
    with_raw_tree(dir, |t| {
        let mut v = t.get(wal_key(lsn)).unwrap().unwrap().to_vec();
        f(&mut v);
        t.insert(wal_key(lsn), v).unwrap();
    });
}

/// An open of `dir` refused with an offset order problem at `lsn` whose
/// detail says `want`.
fn assert_order_refused(dir: &std::path::Path, lsn: u64, want: &str) {
    let err = Engine::open(EngineConfig::new(dir))
        .err()
        .unwrap_or_else(|| panic!("{want}: the open must refuse the entry at lsn {lsn}"));
    match assert_corrupt_at(err, lsn) {
        CorruptionKind::OffsetOrder { detail } => {
            assert!(detail.contains(want), "{want}: {detail}")
        }
        other => panic!("{want}: expected an offset order problem, got {other}"),
    }
}

/// The LSN of the log's last frame (reserved slots above it passed over).
fn last_frame_lsn(t: &sled::Tree) -> u64 {
    let (k, _) = t
        .scan_prefix([cairn_engine::keys::PREFIX_WAL])
        .rev()
        .map(|item| item.unwrap())
        .find(|(_, v)| !v.is_empty())
        .expect("a frame");
    cairn_engine::keys::parse_wal_key(&k).unwrap()
}

/// Store at `lsn` a one-frame entry of `offsets` of `tp` (20-byte values),
/// as an append writes one: its frame's CRC holds.
fn put_entry(t: &sled::Tree, tp: &TopicPartition, lsn: u64, offsets: std::ops::Range<i64>) {
    use cairn_engine::frame::{self, FrameKind};
    let body = cairn_engine::body::encode_entry(tp, &batch(tp, offsets, 20).records);
    t.insert(
        wal_key(lsn),
        frame::encode(lsn, FrameKind::Records, 0, &body),
    )
    .unwrap();
}

fn assert_corrupt_at(err: Error, lsn: u64) -> CorruptionKind {
    match err {
        Error::Corruption {
            location: Location::Wal { lsn: at },
            kind,
        } => {
            assert_eq!(at, lsn, "wrong location for {kind}");
            kind
        }
        other => panic!("expected corruption at lsn {lsn}, got {other}"),
    }
}

/// Read the partition: records before the damaged entry come out, then the error.
fn check_read(dir: &std::path::Path, tp: &TopicPartition, lsn: u64) {
    let e = Engine::open(EngineConfig::new(dir)).unwrap();
    let mut good = 0;
    let mut err = None;
    for r in e.read(tp, 0).unwrap() {
        match r {
            Ok(r) => {
                assert!(
                    r.offset < 10,
                    "record {} from a damaged or later entry",
                    r.offset
                );
                assert_eq!(r, common::record(tp, r.offset, 20));
                good += 1;
            }
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert_eq!(good, 10);
    assert_corrupt_at(err.expect("read must report the corruption"), lsn);
    let v = e.verify().unwrap();
    assert!(!v.is_clean());
    assert!(
        v.problems
            .iter()
            .any(|p| p.location == Location::Wal { lsn }),
        "verify problems {:?}",
        v.problems
    );
    drop(e);
    let strict = Engine::open(EngineConfig::new(dir).recovery_mode(RecoveryMode::Strict));
    assert_corrupt_at(strict.err().expect("strict open must refuse"), lsn);
    let v = cairn_engine::verify_store(&EngineConfig::new(dir)).unwrap();
    assert!(v
        .problems
        .iter()
        .any(|p| p.location == Location::Wal { lsn }));
}

#[test]
fn flipped_bit_is_detected_everywhere() {
    let (dir, tp) = store();
    damage(dir.path(), 2, |v| v[30] ^= 0x10);
    check_read(dir.path(), &tp, 2);
}

/// A stopped verify whose last checks fail (here the watermark file cannot
/// be read: it is a directory) keeps the problems its scan found, with a
/// note of what went unchecked; with none found, the store was not wholly
/// checked, and that is an error rather than "clean".
#[test]
fn a_late_error_keeps_what_the_scan_found() {
    let (dir, _tp) = store();
    let mark = dir.path().join("cairn.durable");
    std::fs::remove_file(&mark).unwrap();
    std::fs::create_dir(&mark).unwrap();
    assert!(cairn_engine::verify_store(&EngineConfig::new(dir.path())).is_err());
    damage(dir.path(), 2, |v| v[30] ^= 0x10);
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.location == Location::Wal { lsn: 2 }),
        "{:?}",
        v.problems
    );
    assert!(
        v.notes
            .iter()
            .any(|n| n.contains("the checks after the scan could not finish")),
        "{:?}",
        v.notes
    );
}

/// The cut of retention by age (and a lookup by time) is known from the
/// index once an entry's oldest record is at or after it: that entry is not
/// read. So damage in the oldest entry kept does not fail every retention
/// pass (nor cost a read of it on each); a cut inside the damaged entry
/// still reads it and reports the damage.
#[test]
fn a_cut_the_index_answers_does_not_read_the_entry() {
    let (dir, tp) = store();
    damage(dir.path(), 2, |v| v[30] ^= 0x10);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    // Offsets 10..20 (LSN 2) are stamped base + 100 ..= base + 190.
    let base = 1_700_000_000_000;
    assert_eq!(e.offset_for_retention(&tp, base + 100).unwrap(), 10);
    assert_eq!(e.offset_for_time(&tp, base + 100).unwrap(), Some(10));
    assert_corrupt_at(e.offset_for_retention(&tp, base + 150).unwrap_err(), 2);
    assert_corrupt_at(e.offset_for_time(&tp, base + 150).unwrap_err(), 2);
}

#[test]
fn truncated_middle_frame_is_corruption_not_torn_tail() {
    let (dir, tp) = store();
    damage(dir.path(), 2, |v| v.truncate(v.len() - 5));
    check_read(dir.path(), &tp, 2);
}

#[test]
fn frame_copied_under_another_lsn_fails_its_checksum() {
    let (dir, tp) = store();
    with_raw_tree(dir.path(), |t| {
        let v = t.get(wal_key(1)).unwrap().unwrap();
        t.insert(wal_key(2), v).unwrap();
    });
    check_read(dir.path(), &tp, 2);
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    let p = v
        .problems
        .iter()
        .find(|p| p.location == Location::Wal { lsn: 2 })
        .unwrap();
    assert!(matches!(p.kind, CorruptionKind::Checksum { .. }), "{p}");
}

#[test]
fn damage_in_the_tail_refuses_a_default_open() {
    let (dir, _tp) = store_closed(false);
    damage(dir.path(), 2, |v| v[20] ^= 1);
    let err = Engine::open(EngineConfig::new(dir.path()))
        .err()
        .expect("must refuse");
    assert_corrupt_at(err, 2);
}

#[test]
fn missing_frame_is_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("c", 0);
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        for i in 0..3 {
            e.append(&[batch(&tp, i * 10..i * 10 + 10, 20)]).unwrap();
        }
    }
    with_raw_tree(dir.path(), |t| t.remove(wal_key(2)).unwrap());
    let err = Engine::open(EngineConfig::new(dir.path()))
        .err()
        .expect("must refuse");
    let kind = assert_corrupt_at(err, 3);
    assert_eq!(
        kind,
        CorruptionKind::LsnGap {
            expected: 2,
            found: 3
        }
    );
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(v
        .problems
        .iter()
        .any(|p| matches!(p.kind, CorruptionKind::LsnGap { .. })));
    assert!(v
        .problems
        .iter()
        .any(|p| matches!(p.kind, CorruptionKind::IndexMismatch { .. })));
}

/// A stray index entry below the partition's first offset (valid CRCs,
/// whole frames: a summary damaged to start later, here): a `read_range`
/// of the range below the first offset counts the index first and says
/// so, rather than yield records the summary does not count (until the
/// night of 2026-12-04 a range below the first offset skipped the count).
#[test]
fn a_range_below_the_first_offset_counts_the_index_first() {
    use cairn_engine::offsets::PartitionSummary;
    let (dir, tp) = store();
    with_raw_tree(dir.path(), |t| {
        let key = cairn_engine::keys::partition_key(&tp);
        let (_, mut s) = PartitionSummary::decode(&key, &t.get(&key).unwrap().unwrap()).unwrap();
        assert_eq!((s.first_offset, s.record_count), (0, 30));
        s.first_offset = 10;
        s.record_count = 20;
        let (k, v) = s.encode(&tp);
        t.insert(k, v).unwrap();
    });
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    match e.read_range(&tp, 0, Some(10)) {
        Err(cairn_engine::Error::Corruption { location, kind }) => {
            assert_eq!(
                location,
                Location::Partition {
                    topic: "c".into(),
                    partition: 0
                }
            );
            assert!(
                kind.to_string().contains("the index counts 30 records"),
                "{kind}"
            );
        }
        Err(other) => panic!("expected corruption, got {other}"),
        Ok(it) => panic!("read: {:?}", it.collect::<Vec<_>>()),
    }
    assert!(e.count_range(&tp, 0, 10).is_err());
}

/// An index entry lost below the recovery tail: the frames are whole and
/// offsets may have gaps, so only the count tells. A read of the whole
/// partition says so at its end, as verify does; a plain read from inside
/// it cannot tell, and yields what the index leads to; a `read_range`
/// (export and restore read so), of part of it or of all of it, counts
/// the index first and says so before it yields anything.
#[test]
fn missing_index_entry_fails_a_whole_read() {
    let (dir, tp, e) = store_with_a_lost_index_entry();
    let mut offsets = Vec::new();
    let mut err = None;
    for r in e.read(&tp, 0).unwrap() {
        match r {
            Ok(r) => offsets.push(r.offset),
            Err(e) => err = Some(e),
        }
    }
    assert_eq!(offsets, (0..10).chain(20..30).collect::<Vec<_>>());
    match err {
        Some(Error::Corruption {
            location: Location::Partition { partition: 0, .. },
            kind: CorruptionKind::SummaryMismatch { detail },
        }) => assert!(
            detail.contains("read 20 records below next offset 30, where the summary counts 30"),
            "{detail}"
        ),
        other => panic!("expected a count mismatch, got {other:?}"),
    }
    assert_eq!(e.read(&tp, 20).unwrap().count(), 10);
    for (from, to) in [
        (20, None),
        (0, Some(5)),
        (25, Some(28)),
        (0, None),
        (0, Some(30)),
    ] {
        match e.read_range(&tp, from, to).map(|mut it| it.next()) {
            Err(Error::Corruption {
                location: Location::Partition { partition: 0, .. },
                kind: CorruptionKind::SummaryMismatch { detail },
            }) => assert!(
                detail.contains(
                    "the index counts 20 records below next offset 30, where the summary counts 30"
                ),
                "{detail}"
            ),
            other => panic!("{from}..{to:?}: expected a count mismatch, got {other:?}"),
        }
    }
    // A count of any range (a resumed restore's check) says so too,
    // rather than come up short by the lost entry's records.
    for (from, to) in [(0, 30), (5, 25), (20, 30)] {
        match e.count_range(&tp, from, to) {
            Err(Error::Corruption {
                kind: CorruptionKind::SummaryMismatch { .. },
                ..
            }) => {}
            other => panic!("count {from}..{to}: expected a count mismatch, got {other:?}"),
        }
    }
    drop(e);
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(!v.is_clean());
}

/// A lost index entry, and a truncation under a whole read (a running
/// `--retain` beside a live export): the read's own count is moot once
/// the truncation moved the first offset, and the partition is counted
/// again as stored. Until 2026-12-05 the check was skipped, and the read
/// ended without a word, the lost entry's records missing (seen in
/// review). A partition whose index is whole reads on without an error
/// under the same truncation.
#[test]
fn a_lost_index_entry_is_said_also_when_a_truncation_runs_under_the_read() {
    let (_dir, tp, e) = store_with_a_lost_index_entry();
    for range in [false, true] {
        if range {
            // And after it: a part read counts first, against the
            // summary the truncation left.
            match e.read_range(&tp, 25, None).map(|mut it| it.next()) {
                Err(Error::Corruption {
                    kind: CorruptionKind::SummaryMismatch { detail },
                    ..
                }) => assert!(
                    detail.contains("the index counts 10 records below next offset 30, where the summary counts 20"),
                    "{detail}"
                ),
                other => panic!("range: expected a count mismatch, got {other:?}"),
            }
            continue;
        }
        let mut it = e.read(&tp, 0).unwrap();
        let first: Vec<i64> = it.by_ref().take(10).map(|r| r.unwrap().offset).collect();
        assert_eq!(first, (0..10).collect::<Vec<_>>());
        e.truncate_before(&tp, 10).unwrap();
        let rest: Vec<_> = it.collect();
        match rest.last() {
            Some(Err(Error::Corruption {
                location: Location::Partition { partition: 0, .. },
                kind: CorruptionKind::SummaryMismatch { detail },
            })) => assert!(
                detail.contains(
                    "the index counts 10 records below next offset 30, where the summary counts 20 (counted again after a truncation)"
                ),
                "{detail}"
            ),
            other => panic!("expected a count mismatch at the end, got {other:?}"),
        }
    }
    drop(e);

    // The same truncation under a read of a sound partition says nothing.
    let (dir, tp) = store();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let mut it = e.read(&tp, 0).unwrap();
    assert_eq!(it.by_ref().take(10).count(), 10);
    e.truncate_before(&tp, 10).unwrap();
    let rest: Vec<i64> = it.map(|r| r.unwrap().offset).collect();
    assert_eq!(rest, (10..30).collect::<Vec<_>>());
}

/// Retention by size over a lost index entry: a cut that keeps entries
/// keeps the lost bytes less (documented), but one that would delete every
/// entry has read them all, and refuses the bytes no entry holds before
/// any step deletes anything.
#[test]
fn a_size_cut_of_every_entry_refuses_bytes_no_entry_holds() {
    let (_dir, tp, e) = store_with_a_lost_index_entry();
    let bytes = e.partition(&tp).unwrap().payload_bytes;
    assert_eq!(e.offset_for_retained_bytes(&tp, bytes).unwrap(), 0);
    match e.offset_for_retained_bytes(&tp, 0) {
        Err(Error::Corruption {
            location: Location::Partition { partition: 0, .. },
            kind: CorruptionKind::SummaryMismatch { detail },
        }) => assert!(
            detail.contains("payload bytes fewer below next offset 30")
                && detail.contains(&format!("than the summary's {bytes}")),
            "{detail}"
        ),
        other => panic!("expected a byte count mismatch, got {other:?}"),
    }
    assert_eq!(
        e.partition(&tp).unwrap().record_count,
        30,
        "nothing deleted"
    );
}

/// An index entry (valid CRC) pointing into the reserved slots, which hold
/// no frame: read as a missing frame at that lsn, not as a torn one.
#[test]
fn an_index_entry_pointing_at_a_slot_reads_as_a_missing_frame() {
    let (dir, tp) = store();
    forge_index_entry(dir.path(), &tp, 10, |e| e.lsn = 200);
    with_raw_tree(dir.path(), |t| {
        let v = t
            .get(wal_key(200))
            .unwrap()
            .expect("a reserved slot at 200");
        assert!(v.is_empty(), "lsn 200 is a slot");
    });
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    match e.read(&tp, 10).unwrap().next() {
        Some(Err(Error::Corruption {
            location: Location::Wal { lsn: 200 },
            kind: CorruptionKind::MissingFrame,
        })) => {}
        other => panic!("expected a missing frame at lsn 200, got {other:?}"),
    }
}

/// A lost index entry below the newest is damage the store opens with
/// (the summary's count is checked against it on a whole read); a
/// truncation that would delete every remaining entry must refuse it, not
/// leave a summary counting 10 records that no entry holds, which the next
/// open would refuse.
#[test]
fn a_truncation_refuses_counts_the_summary_does_not_bear_out() {
    let (dir, tp, e) = store_with_a_lost_index_entry();
    let expect_mismatch = |r: Result<cairn_engine::TruncateReport, Error>, deleted, counted| match r
    {
        Err(Error::Corruption {
            location: Location::Partition { partition: 0, .. },
            kind: CorruptionKind::SummaryMismatch { detail },
        }) => assert!(
            detail.contains(&format!("would delete {deleted} records"))
                && detail.contains(&format!("where the summary counts {counted} records"))
                && detail.contains("index entries are lost"),
            "{detail}"
        ),
        other => panic!("expected a count mismatch, got {other:?}"),
    };
    // The dry run says what the truncation does: refuse.
    expect_mismatch(e.truncate_plan(&tp, 30), 20, 30);
    expect_mismatch(e.truncate_before(&tp, 30), 20, 30);
    // A cut that keeps an entry deletes what the summary bears out.
    let r = e.truncate_before(&tp, 20).unwrap();
    assert_eq!(r.records_deleted, 10);
    assert_eq!(r.first_offset_after, Some(20));
    drop(e);
    // Nothing the refusal touched stops the store opening; the damage is
    // still there for verify to name.
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(e.durable_offset(&tp), Some(30));
    // The whole partition's read still ends in the count mismatch.
    let whole: Vec<_> = e.read(&tp, 20).unwrap().collect();
    assert_eq!(whole.iter().filter(|r| r.is_ok()).count(), 10);
    assert!(whole.last().unwrap().is_err());
    expect_mismatch(e.truncate_before(&tp, 30), 10, 20);
    drop(e);
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(!v.is_clean());
}

/// Damage met in a later step of a truncation refuses that step; the
/// steps before it stay done and durable, and the store opens.
#[test]
fn damage_in_a_later_step_keeps_the_steps_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("c", 0);
    let entries = cairn_engine::TRUNCATE_ENTRIES_PER_STEP as i64 + 6;
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    // One entry per write, one fsync for them all.
    for o in 0..entries {
        e.write(&[batch(&tp, o..o + 1, 8)]).unwrap();
    }
    e.sync().unwrap();
    e.close().unwrap();
    // An entry of the second step claims a frame it does not have.
    let forged = cairn_engine::TRUNCATE_ENTRIES_PER_STEP as i64 + 1;
    with_raw_tree(dir.path(), |t| {
        let k = cairn_engine::keys::index_key(&tp, forged);
        let (_, mut ie) =
            cairn_engine::index::IndexEntry::decode(&k, &t.get(&k).unwrap().unwrap()).unwrap();
        ie.chunks = 2;
        let (k, v) = ie.encode(&tp);
        t.insert(k, v).unwrap();
    });
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    match e.truncate_before(&tp, entries) {
        Err(Error::Corruption {
            kind: CorruptionKind::IndexMismatch { .. },
            ..
        }) => {}
        other => panic!("expected the forged entry refused, got {other:?}"),
    }
    drop(e);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let p = e.partitions().into_iter().find(|p| p.tp == tp).unwrap();
    let kept = entries - cairn_engine::TRUNCATE_ENTRIES_PER_STEP as i64;
    assert_eq!(
        p.first_offset,
        cairn_engine::TRUNCATE_ENTRIES_PER_STEP as i64
    );
    assert_eq!(p.record_count, kept as u64);
    assert_eq!(p.next_offset, entries);
    assert_eq!(
        e.read(&tp, 0)
            .unwrap()
            .take(1)
            .next()
            .unwrap()
            .unwrap()
            .offset,
        p.first_offset
    );
}

/// On a healthy store a range read yields exactly the range.
#[test]
fn a_range_read_yields_the_range() {
    let (dir, tp) = store();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for (from, to, want) in [
        (0, None, 0..30),
        (5, Some(25), 5..25),
        (0, Some(10), 0..10),
        (29, Some(100), 29..30),
        (12, Some(12), 12..12),
        (40, None, 40..40),
    ] {
        let got: Vec<i64> = e
            .read_range(&tp, from, to)
            .unwrap()
            .map(|r| r.unwrap().offset)
            .collect();
        assert_eq!(got, want.collect::<Vec<_>>(), "{from}..{to:?}");
    }
}

/// A summary (checksum intact) that says more than its partition's index
/// holds: a next offset past the last indexed record (a run would resume
/// past records never archived), or records counted for a partition with
/// no index entries. The open refuses both, from one index entry per
/// partition; verify of the stopped store reports both.
#[test]
fn a_summary_the_index_does_not_bear_out_is_refused() {
    use cairn_engine::offsets::PartitionSummary;
    type Forge = fn(&sled::Tree, &TopicPartition);
    let cases: [(Forge, &str); 3] = [
        (
            |t, tp| {
                let key = cairn_engine::keys::partition_key(tp);
                let (_, mut s) =
                    PartitionSummary::decode(&key, &t.get(&key).unwrap().unwrap()).unwrap();
                // Its floor left as it was: a floor raised with it is an
                // advance past offsets that held no record (format 4,
                // `advance_partitions`), which is sound.
                s.next_offset += 5;
                let (k, v) = s.encode(tp);
                t.insert(k, v).unwrap();
            },
            "summary next offset 35 with 30 records, but the last index entry ends at offset 29",
        ),
        (
            |t, tp| {
                let keys: Vec<_> = t
                    .scan_prefix(cairn_engine::keys::index_prefix(tp))
                    .keys()
                    .map(|k| k.unwrap())
                    .collect();
                for k in keys {
                    t.remove(k).unwrap();
                }
            },
            "summary counts 30 records, but the partition has no index entries",
        ),
        (
            // The summary an emptying prune writes, beside entries it
            // would have deleted.
            |t, tp| {
                let key = cairn_engine::keys::partition_key(tp);
                let (_, mut s) =
                    PartitionSummary::decode(&key, &t.get(&key).unwrap().unwrap()).unwrap();
                s.record_count = 0;
                s.payload_bytes = 0;
                s.first_offset = s.next_offset;
                let (k, v) = s.encode(tp);
                t.insert(k, v).unwrap();
            },
            "summary counts no records (next offset 30), but the partition has index entries, the last ending at offset 29",
        ),
    ];
    for (forge, want) in cases {
        let (dir, tp) = store();
        with_raw_tree(dir.path(), |t| forge(t, &tp));
        match open_refused(EngineConfig::new(dir.path()), want) {
            (
                Location::Partition { partition: 0, .. },
                CorruptionKind::SummaryMismatch { detail },
            ) => assert!(detail.contains(want), "{detail}"),
            other => panic!("{want}: expected a summary mismatch, got {other:?}"),
        }
        let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
        assert!(
            v.problems
                .iter()
                .any(|p| matches!(p.kind, CorruptionKind::SummaryMismatch { .. })),
            "{want}: {v:?}"
        );
    }
}

/// The same damage to a summary when a crashed write of its partition is
/// in the recovery tail (its frames and index entry there, its summary not
/// yet written: recovery extends the stored summary with the tail's
/// entries): refused too. Before the night of 2026-12-04 such a summary
/// was extended as it stood and written back, with the tail entry that
/// straddles its next offset skipped, or the entries below it left
/// uncounted, the open succeeding with the partition's next offset below
/// records it holds. The crash alone opens, its entry counted.
#[test]
fn a_damaged_summary_is_refused_under_a_crashed_write_of_its_partition() {
    use cairn_engine::offsets::PartitionSummary;
    type Forge = fn(&mut PartitionSummary);
    let cases: [(Forge, Option<&str>); 3] = [
        (|_| {}, None),
        (
            |s| {
                s.next_offset += 5;
                s.next_offset_floor = s.next_offset;
            },
            Some("summary next offset 35 with 30 records, but the index entry below it ends at offset 39"),
        ),
        (
            |s| {
                s.record_count = 0;
                s.payload_bytes = 0;
                s.first_offset = s.next_offset;
            },
            Some("summary counts no records (next offset 30), but an index entry below that ends at offset 29"),
        ),
    ];
    for (forge, want) in cases {
        let (dir, tp) = store();
        let key = cairn_engine::keys::partition_key(&tp);
        let before = with_raw_tree(dir.path(), |t| t.get(&key).unwrap().unwrap());
        let watermark =
            std::fs::read(dir.path().join(cairn_engine::watermark::WATERMARK_FILE)).unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&[batch(&tp, 30..40, 20)]).unwrap();
        drop(e);
        // The crash: the append's summary not written, nor acknowledged.
        with_raw_tree(dir.path(), |t| {
            let (_, mut s) = PartitionSummary::decode(&key, &before).unwrap();
            forge(&mut s);
            let (k, v) = s.encode(&tp);
            t.insert(k, v).unwrap();
        });
        std::fs::write(
            dir.path().join(cairn_engine::watermark::WATERMARK_FILE),
            watermark,
        )
        .unwrap();
        let Some(want) = want else {
            let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
            assert_eq!(e.durable_offset(&tp), Some(40));
            assert_eq!(e.partition(&tp).unwrap().record_count, 40);
            continue;
        };
        match open_refused(EngineConfig::new(dir.path()), want) {
            (
                Location::Partition { partition: 0, .. },
                CorruptionKind::SummaryMismatch { detail },
            ) => assert!(detail.contains(want), "{detail}"),
            other => panic!("{want}: expected a summary mismatch, got {other:?}"),
        }
    }
}

/// A frame stored under the highest possible key (LSN u64::MAX) is
/// reported by the verify of the stopped store: it was taken for "above
/// the log", which only a live verify may skip.
#[test]
fn a_frame_at_the_highest_lsn_key_is_reported() {
    let (dir, _) = store();
    with_raw_tree(dir.path(), |t| {
        let v = t.get(wal_key(1)).unwrap().unwrap();
        t.insert(wal_key(u64::MAX), v).unwrap();
    });
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.location == Location::Wal { lsn: u64::MAX }),
        "{:?}",
        v.problems
    );
}

/// A key in the log's key space below LSN 1 (`W` + LSN 0, or `W` and
/// fewer than 8 bytes) is refused by an open in both modes, named by its
/// key, as verify reports it: until 2026-12-05 the open's scan started
/// above them and passed over them.
#[test]
fn a_log_key_below_lsn_1_is_refused_by_an_open() {
    for (key, closed) in [
        (wal_key(0).to_vec(), true),
        (wal_key(0).to_vec(), false),
        (b"W".to_vec(), true),
        (b"W\0\0".to_vec(), false),
    ] {
        let (dir, _) = store_closed(closed);
        with_raw_tree(dir.path(), |t| {
            let v = t.get(wal_key(1)).unwrap().unwrap();
            t.insert(key.clone(), v).unwrap();
        });
        for mode in [RecoveryMode::Strict, RecoveryMode::TolerateTail] {
            let (location, kind) = open_refused(
                EngineConfig::new(dir.path()).recovery_mode(mode),
                &format!("{key:?}, {mode:?}"),
            );
            let want = if key.len() == 9 {
                Location::Wal { lsn: 0 }
            } else {
                Location::Key {
                    key_hex: key.iter().map(|b| format!("{b:02x}")).collect(),
                }
            };
            assert_eq!(location, want, "{key:?}, {mode:?}: {kind:?}");
            // A closed store's open finds LSN 0 first as a gap before LSN 1.
            assert!(
                matches!(
                    kind,
                    CorruptionKind::BadKey { .. } | CorruptionKind::LsnGap { found: 0, .. }
                ),
                "{key:?}, {mode:?}: {kind:?}"
            );
        }
        let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
        assert!(!v.is_clean(), "verify passed {key:?}");
    }
}

/// A read racing a truncation that deletes records it has not reached yet
/// is told so, naming them, rather than step over them into a gap (before
/// 2026-12-03 it went on silently: a live export held 0..10, 20..30); and
/// it is no count mismatch (no damage). A truncation of records already
/// taken, of records past its end, or below where a read starts, leaves
/// the read whole.
#[test]
fn a_read_racing_a_truncation_is_told_what_it_deleted_not_skipped() {
    let offsets = |rs: &[cairn_engine::Result<cairn_engine::Record>]| -> Vec<i64> {
        rs.iter().map(|r| r.as_ref().unwrap().offset).collect()
    };
    // Entries of the given offsets, one each, for partition c/0.
    let open_with_entries = |entries: &[std::ops::Range<i64>]| {
        let dir = tempfile::tempdir().unwrap();
        let tp = TopicPartition::new("c", 0);
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        for r in entries {
            e.append(&[batch(&tp, r.clone(), 20)]).unwrap();
        }
        (dir, tp, e)
    };
    let three = [0..10, 10..20, 20..30];
    // Whole, cut at its end, and from inside the first entry.
    for (from, to) in [(0, None), (0, Some(25)), (5, Some(30))] {
        // The first entry taken (a record of it), then the second deleted
        // unread: an error names it, and nothing comes after it.
        let (_dir, tp, e) = open_with_entries(&three);
        let mut it = e.read_range(&tp, from, to).unwrap();
        assert_eq!(it.next().unwrap().unwrap().offset, from);
        e.truncate_before(&tp, 10).unwrap();
        e.truncate_before(&tp, 20).unwrap();
        let rest: Vec<_> = it.collect();
        let n = (10 - from - 1) as usize;
        assert_eq!(offsets(&rest[..n]), (from + 1..10).collect::<Vec<_>>());
        match &rest[n..] {
            [Err(
                e @ Error::PrunedUnderRead {
                    position: 10,
                    pruned_through: 19,
                    ..
                },
            )] => assert!(e.to_string().contains("read again from offset 10"), "{e}"),
            other => panic!("{from}..{to:?}: {other:?}"),
        }
        drop(e);
        // Deleted only what it had taken, or before it took anything: the
        // read is whole (what it yields has no gap).
        let (_dir, tp, e) = open_with_entries(&three);
        let mut it = e.read_range(&tp, from, to).unwrap();
        let taken: Vec<i64> = it.by_ref().take(11).map(|r| r.unwrap().offset).collect();
        assert_eq!(taken, (from..from + 11).collect::<Vec<_>>());
        let untouched = e.read_range(&tp, from, to).unwrap();
        e.truncate_before(&tp, 20).unwrap();
        let end = to.unwrap_or(30);
        let rest: Vec<_> = it.collect();
        assert_eq!(offsets(&rest), (from + 11..end).collect::<Vec<_>>());
        let rest: Vec<_> = untouched.collect();
        assert_eq!(offsets(&rest), (20..end).collect::<Vec<_>>());
    }
    // The next entry past the read's end (offsets 10..20 hold none: a
    // gap of the source's own) deleted with the one taken: nothing the
    // read wants was deleted, and it ends whole, without an error.
    let (_dir, tp, e) = open_with_entries(&[0..10, 20..30, 30..40]);
    let mut it = e.read_range(&tp, 0, Some(15)).unwrap();
    assert_eq!(it.next().unwrap().unwrap().offset, 0);
    e.truncate_before(&tp, 30).unwrap();
    let rest: Vec<_> = it.collect();
    assert_eq!(offsets(&rest), (1..10).collect::<Vec<_>>());
    // And within its end, across that gap: the entry at 20 is named.
    let (_dir, tp, e) = open_with_entries(&[0..10, 20..30, 30..40]);
    let mut it = e.read(&tp, 0).unwrap();
    assert_eq!(it.next().unwrap().unwrap().offset, 0);
    e.truncate_before(&tp, 30).unwrap();
    let rest: Vec<_> = it.collect();
    assert!(
        matches!(
            &rest[9..],
            [Err(Error::PrunedUnderRead {
                position: 20,
                pruned_through: 29,
                ..
            })]
        ),
        "{:?}",
        &rest[9..]
    );
}

/// One damaged index entry, its summary sound: problems at the entry (and
/// at its log entry, which has no index entry that decodes), none at the
/// summary, which was not compared with totals that lack the entry (a
/// note says so). Until 2026-12-05 the summary was called wrong too.
#[test]
fn a_damaged_index_entry_does_not_blame_its_summary() {
    let (dir, tp) = store();
    with_raw_tree(dir.path(), |t| {
        let k = cairn_engine::keys::index_key(&tp, 10);
        let mut v = t.get(&k).unwrap().unwrap().to_vec();
        v[0] ^= 1;
        t.insert(k, v).unwrap();
    });
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(
        v.problems.iter().any(|p| matches!(
            &p.location,
            Location::Index {
                first_offset: 10,
                ..
            }
        )),
        "{:#?}",
        v.problems
    );
    assert!(
        !v.problems
            .iter()
            .any(|p| matches!(&p.location, Location::Partition { .. })),
        "{:#?}",
        v.problems
    );
    assert!(
        v.notes
            .iter()
            .any(|n| n.contains("was not compared with its index")),
        "{:?}",
        v.notes
    );
}

#[test]
fn damaged_index_and_summary_are_reported() {
    let (dir, tp) = store();
    with_raw_tree(dir.path(), |t| {
        let k = cairn_engine::keys::index_key(&tp, 10);
        let mut v = t.get(&k).unwrap().unwrap().to_vec();
        v[0] ^= 1;
        t.insert(k, v).unwrap();
        let k = cairn_engine::keys::partition_key(&tp);
        let mut v = t.get(&k).unwrap().unwrap().to_vec();
        v[3] ^= 1;
        t.insert(k, v).unwrap();
    });
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(v.problems.iter().any(|p| matches!(
        &p.location,
        Location::Index {
            first_offset: 10,
            ..
        }
    )));
    // Damaged, not missing: one problem at the summary (until the night of 2026-12-03,
    // a second said "index entries exist but the summary is missing").
    let at_summary: Vec<_> = v
        .problems
        .iter()
        .filter(|p| matches!(&p.location, Location::Partition { .. }))
        .collect();
    assert_eq!(at_summary.len(), 1, "{:?}", v.problems);
    assert!(
        matches!(at_summary[0].kind, CorruptionKind::Checksum { .. }),
        "{:?}",
        at_summary[0]
    );
    assert_eq!(v.partitions, 1);
    // The summary is read on every open: a damaged one refuses it.
    let (location, kind) = open_refused(EngineConfig::new(dir.path()), "a damaged summary");
    assert!(
        matches!(location, Location::Partition { .. }),
        "expected summary corruption, got {location}: {kind}"
    );
}

/// A watermark file of the wrong length (here a terabyte, sparse) is
/// corruption at the watermark naming its length, for the open and for
/// verify, and nothing the length claims is allocated.
#[test]
fn a_watermark_of_the_wrong_length_is_reported_not_read() {
    let (dir, _) = store();
    let path = dir.path().join(cairn_engine::watermark::WATERMARK_FILE);
    let good = std::fs::read(&path).unwrap();
    for (len, want) in [
        (
            1u64 << 40,
            CorruptionKind::TrailingBytes {
                expected: 16,
                actual: 1 << 40,
            },
        ),
        (
            17,
            CorruptionKind::TrailingBytes {
                expected: 16,
                actual: 17,
            },
        ),
        (
            15,
            CorruptionKind::Truncated {
                expected: 16,
                actual: 15,
            },
        ),
    ] {
        std::fs::write(&path, &good).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len)
            .unwrap();
        let refused = open_refused(EngineConfig::new(dir.path()), &format!("{len} bytes"));
        assert_eq!(refused, (Location::Watermark, want.clone()));
        let report = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.location == Location::Watermark && p.kind == want),
            "{len}: {report:?}"
        );
    }
}

/// A closed store of c/0 in three entries of three frames each (LSNs 1-3,
/// 4-6, 7-9), `then` done to it before the close; its directory, its
/// config and the partition.
fn three_entries_of_three_frames(
    then: impl FnOnce(&Engine),
) -> (
    tempfile::TempDir,
    fn(&std::path::Path) -> EngineConfig,
    TopicPartition,
) {
    let cfg: fn(&std::path::Path) -> EngineConfig =
        |d| EngineConfig::new(d).frame_body_bytes_max(1024);
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("c", 0);
    let e = Engine::open(cfg(dir.path())).unwrap();
    for i in 0..3 {
        e.append(&[batch(&tp, i * 10..i * 10 + 10, 250)]).unwrap();
    }
    assert_eq!(e.stats().next_lsn, 10, "three entries of three frames");
    then(&e);
    e.close().unwrap();
    (dir, cfg, tp)
}

/// A checkpoint (with a good checksum) that points past the log or into
/// an entry refuses the open, and verify of the stopped store reports it
/// rather than calling the store clean.
#[test]
fn a_checkpoint_that_the_log_does_not_bear_out_is_reported() {
    let (dir, cfg, _) = three_entries_of_three_frames(|_| {});
    type Want = fn(&Location, &CorruptionKind) -> bool;
    let cases: [(u64, Want); 2] = [
        (20, |l, k| {
            *l == Location::Meta { key: "checkpoint" }
                && matches!(k, CorruptionKind::BadMeta { detail } if detail.contains("reserved slots"))
        }),
        (5, |l, k| {
            *l == Location::Wal { lsn: 5 } && matches!(k, CorruptionKind::BadChunkSequence { .. })
        }),
    ];
    for (checkpoint, want) in cases {
        with_raw_tree(dir.path(), |t| {
            t.insert(
                cairn_engine::keys::META_CHECKPOINT,
                cairn_engine::meta::encode_checkpoint(checkpoint),
            )
            .unwrap();
        });
        let (location, kind) = open_refused(cfg(dir.path()), &format!("checkpoint {checkpoint}"));
        assert!(want(&location, &kind), "{checkpoint}: {location}: {kind}");
        let report = cairn_engine::verify_store(&cfg(dir.path())).unwrap();
        assert_eq!(report.problems.len(), 1, "{checkpoint}: {report:?}");
        let p = &report.problems[0];
        assert!(want(&p.location, &p.kind), "{checkpoint}: {p}");
    }
}

/// An empty value (a reserved slot's) inside the log, within the span of
/// the tombstone that ends it, is refused by the open that meets it, and
/// reported by verify. Until 2026-12-06 the open passed over it when no
/// frame followed, wrote its checkpoint above it, and every later open
/// then refused the store (found in review).
#[test]
fn a_slot_inside_the_last_tombstones_span_is_refused_at_once() {
    // All pruned into one tombstone at LSN 1 spanning 9, then an entry
    // of one frame at LSN 10 (a frame after the slot is no hole).
    let (dir, cfg, _) = three_entries_of_three_frames(|e| {
        let tp = TopicPartition::new("c", 0);
        e.truncate_before(&tp, 30).unwrap();
        e.append(&[batch(&tp, 30..31, 10)]).unwrap();
    });
    // The checkpoint below the tombstone (as a crash before the last
    // checkpoint leaves it), and an empty value at LSN 5, inside its span.
    with_raw_tree(dir.path(), |t| {
        t.insert(
            cairn_engine::keys::META_CHECKPOINT,
            cairn_engine::meta::encode_checkpoint(0),
        )
        .unwrap();
        t.insert(cairn_engine::keys::wal_key(5), Vec::<u8>::new())
            .unwrap();
    });
    let inside = |l: &Location, k: &CorruptionKind| {
        *l == Location::Wal { lsn: 5 }
            && matches!(k, CorruptionKind::BadKey { detail } if detail.contains("inside the log, below its next LSN 10"))
    };
    let (location, kind) = open_refused(cfg(dir.path()), "a slot inside the log");
    assert!(inside(&location, &kind), "{location}: {kind}");
    let report = cairn_engine::verify_store(&cfg(dir.path())).unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert!(
        inside(&report.problems[0].location, &report.problems[0].kind),
        "{report:?}"
    );
    // A run of them is one report (6 after 5); another run is another (8).
    for (lsn, reports) in [(6, 1), (8, 2)] {
        with_raw_tree(dir.path(), |t| {
            t.insert(cairn_engine::keys::wal_key(lsn), Vec::<u8>::new())
                .unwrap();
        });
        let report = cairn_engine::verify_store(&cfg(dir.path())).unwrap();
        assert_eq!(report.problems.len(), reports, "{lsn}: {report:?}");
    }
}

/// A frame cut short at the log's end is truncated as torn only if its
/// chunk flags follow the frame before it: a continuation chunk after a
/// whole entry is damage (the same frame whole is refused so), refused by
/// the open; until 2026-12-06 it was truncated as torn (found in review).
#[test]
fn a_frame_cut_short_whose_flags_do_not_follow_is_refused_not_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("c", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&tp, 0..10, 20)]).unwrap();
    let last = e.stats().next_lsn - 1;
    e.close().unwrap();
    // Magic, version 1, kind 1 (records), flags CONT, a body length of 100,
    // and nothing more: 12 of the 116 bytes.
    let mut cut = b"CRNF".to_vec();
    cut.extend([1, 1, 2, 0, 100, 0, 0, 0]);
    with_raw_tree(dir.path(), |t| {
        t.insert(cairn_engine::keys::wal_key(last + 1), cut.clone())
            .unwrap();
    });
    let (location, kind) = open_refused(EngineConfig::new(dir.path()), "a CONT frame cut short");
    assert_eq!(location, Location::Wal { lsn: last + 1 });
    assert!(
        matches!(&kind, CorruptionKind::BadChunkSequence { detail } if detail.contains("continuation chunk without a first chunk")),
        "{kind}"
    );
    // The same cut short as a first chunk (flags MORE) is an append's torn
    // tail: truncated.
    cut[6] = 1;
    with_raw_tree(dir.path(), |t| {
        t.insert(cairn_engine::keys::wal_key(last + 1), cut.clone())
            .unwrap();
    });
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(e.recovery_report().truncated.is_some());
    assert_eq!(e.durable_offset(&tp), Some(10));
}

#[test]
fn unknown_format_version_is_refused() {
    let (dir, _) = store();
    with_raw_tree(dir.path(), |t| {
        t.insert(
            cairn_engine::keys::META_FORMAT,
            cairn_engine::meta::encode_format(99),
        )
        .unwrap();
    });
    match Engine::open(EngineConfig::new(dir.path())) {
        Err(Error::UnsupportedFormat {
            found: 99,
            supported: cairn_engine::meta::FORMAT_VERSION,
            ..
        }) => {}
        Err(other) => panic!("expected UnsupportedFormat, got {other}"),
        Ok(_) => panic!("expected UnsupportedFormat, got an engine"),
    }
    // A later format's longer value (its first 8 bytes kept, FORMAT.md) is
    // that format, not damage (since 2026-12-05; it was `TrailingBytes`);
    // one that names this build's version is damage still.
    let grown = |version: u32| {
        let mut v = b"CRNM".to_vec();
        v.extend_from_slice(&version.to_le_bytes());
        v.extend_from_slice(&[7; 8]);
        cairn_engine::keys::seal(cairn_engine::keys::META_FORMAT, v)
    };
    let next = cairn_engine::meta::FORMAT_VERSION + 1;
    with_raw_tree(dir.path(), |t| {
        t.insert(cairn_engine::keys::META_FORMAT, grown(next))
            .unwrap();
    });
    match Engine::open(EngineConfig::new(dir.path())) {
        Err(Error::UnsupportedFormat { found, .. }) => assert_eq!(found, next),
        Err(other) => panic!("expected UnsupportedFormat, got {other}"),
        Ok(_) => panic!("expected UnsupportedFormat, got an engine"),
    }
    // verify cannot check it either, and says so: not damage (since
    // 2026-12-05; it was one problem, exit 1).
    match cairn_engine::verify_store(&EngineConfig::new(dir.path())) {
        Err(Error::UnsupportedFormat { found, .. }) => assert_eq!(found, next),
        other => panic!("expected UnsupportedFormat from verify, got {other:?}"),
    }
    with_raw_tree(dir.path(), |t| {
        t.insert(
            cairn_engine::keys::META_FORMAT,
            grown(cairn_engine::meta::FORMAT_VERSION),
        )
        .unwrap();
    });
    let (location, kind) = open_refused(
        EngineConfig::new(dir.path()),
        "a grown value of this version",
    );
    assert!(
        matches!(kind, CorruptionKind::TrailingBytes { .. })
            && location.to_string().contains("format"),
        "{location}: {kind}"
    );
    // Version 0 was never written: damage, which verify lists, and the
    // open names as verify does (until 2026-12-05 the open said
    // `UnsupportedFormat`, as if another build read it).
    with_raw_tree(dir.path(), |t| {
        t.insert(
            cairn_engine::keys::META_FORMAT,
            cairn_engine::meta::encode_format(0),
        )
        .unwrap();
    });
    let report = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.to_string().contains("format version 0, below the oldest")),
        "{report:?}"
    );
    let (location, kind) = open_refused(EngineConfig::new(dir.path()), "format version 0");
    assert!(
        matches!(&kind, CorruptionKind::BadMeta { detail } if detail.contains("format version 0, below the oldest"))
            && location == Location::Meta { key: "format" },
        "{location}: {kind}"
    );
}

#[test]
fn keys_outside_every_key_space_are_reported() {
    let (dir, _) = store();
    // b"W\xff": in the log's key space, of no LSN, and sorted after every
    // frame (it must not be taken for the log's end).
    let foreign: [&[u8]; 7] = [b"", b"A", b"J1", b"Nx", b"Q", b"W\xff", b"X\xff"];
    with_raw_tree(dir.path(), |t| {
        for k in foreign {
            t.insert(k, b"junk".to_vec()).unwrap();
        }
    });
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    let bad_keys: Vec<&Location> = v
        .problems
        .iter()
        .filter(|p| matches!(p.kind, CorruptionKind::BadKey { .. }))
        .map(|p| &p.location)
        .collect();
    assert_eq!(bad_keys.len(), foreign.len(), "{:?}", v.problems);
    for k in foreign {
        let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
        assert!(
            bad_keys.contains(&&Location::Key { key_hex: hex }),
            "{k:?} not reported"
        );
    }
    // Nothing in the store's own key spaces was mistaken for a foreign key.
    assert_eq!(v.problems.len(), foreign.len());
}

/// A stopped store without its watermark (only `sled/` restored, say)
/// verifies clean, but says that a lost end of the log could not be told:
/// a note, not a problem.
#[test]
fn a_store_without_its_watermark_is_noted() {
    let (dir, _) = store();
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(v.is_clean() && v.notes.is_empty(), "{:?}", v.notes);
    std::fs::remove_file(dir.path().join("cairn.durable")).unwrap();
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
    assert!(
        v.notes.len() == 1 && v.notes[0].contains("no watermark file"),
        "{:?}",
        v.notes
    );
}

/// A malformed key in the log's key space just above the checkpoint's
/// frame (`W` + the checkpoint's LSN + one byte sorts below the next LSN's
/// key): the open names that key, not a checkpoint "with no frame at or
/// before it" (the frame is there).
#[test]
fn a_malformed_log_key_beside_the_checkpoint_is_named() {
    let (dir, _) = store();
    let mut k = wal_key(3).to_vec();
    k.push(0);
    with_raw_tree(dir.path(), |t| t.insert(&k, b"junk".to_vec()).unwrap());
    let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
    let (location, kind) = open_refused(EngineConfig::new(dir.path()), "malformed key");
    assert_eq!(location, Location::Key { key_hex: hex });
    assert!(matches!(kind, CorruptionKind::BadKey { .. }), "{kind:?}");
}

/// An index entry in the log's unchecked tail that is there but does not
/// match the log (damage under a valid CRC; a crash only ever leaves one
/// missing) is rebuilt from the frames like a missing one, and reported as
/// damaged, apart from the missing one a crash leaves.
#[test]
fn a_damaged_index_entry_in_the_tail_is_rebuilt_and_reported() {
    let (dir, tp) = store_closed(false);
    with_raw_tree(dir.path(), |t| {
        let k = cairn_engine::keys::index_key(&tp, 0);
        let (_, mut e) =
            cairn_engine::index::IndexEntry::decode(&k, &t.get(&k).unwrap().unwrap()).unwrap();
        e.timestamp_max_ms += 1;
        let (k, v) = e.encode(&tp);
        t.insert(k, v).unwrap();
        t.remove(cairn_engine::keys::index_key(&tp, 10)).unwrap();
    });
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let r = e.recovery_report();
    assert_eq!((r.index_entries_repaired, r.index_entries_damaged), (2, 1));
    assert_eq!(common::read_all(&e, &tp).len(), 30);
    assert!(e.verify().unwrap().is_clean());
}

/// A damaged sled snapshot: sled refuses to open its files. Every way in
/// (open, verify) reports it as corruption of sled's files, naming the
/// folder, rather than as an unexplained sled error.
#[test]
fn damaged_sled_snapshot_is_corruption_naming_sled_files() {
    let (dir, _tp) = store();
    // sled writes a snapshot when it opens a log that grew since the last.
    Engine::open(EngineConfig::new(dir.path()))
        .unwrap()
        .close()
        .unwrap();
    let sled_dir = dir.path().join("sled");
    let snaps: Vec<_> = std::fs::read_dir(&sled_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("snap."))
        })
        .collect();
    assert!(!snaps.is_empty(), "sled wrote no snapshot in {sled_dir:?}");
    for snap in &snaps {
        let mut bytes = std::fs::read(snap).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        std::fs::write(snap, bytes).unwrap();
    }
    let check = |err: Error| match err {
        Error::Corruption {
            location: Location::SledFiles { path, .. },
            kind: CorruptionKind::SledUnreadable { .. },
        } => assert_eq!(path, sled_dir),
        other => panic!("expected corruption of sled's files, got {other}"),
    };
    let open_err = || match Engine::open(EngineConfig::new(dir.path())) {
        Ok(_) => panic!("opened a store whose snapshot is damaged"),
        Err(e) => e,
    };
    check(open_err());
    check(cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap_err());
    let msg = open_err().to_string();
    assert!(msg.contains("sled's files in"), "{msg}");
}

/// A damaged tombstone (retention's stand-in for deleted frames) is
/// reported by verify at its LSN: a flipped bit fails its checksum, and a
/// span rewritten with a valid checksum, too long (hiding a live frame) or
/// too short (leaving a hole), is an LSN gap at the frame after it. The
/// records kept stay readable: the damage is beside them, not in them.
#[test]
fn damaged_tombstones_are_reported() {
    use cairn_engine::frame::{self, FrameKind};
    for case in ["flip", "long", "short"] {
        let (dir, tp) = store();
        {
            let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
            // Entries at LSNs 1 and 2 go: one tombstone at 1, span 2.
            let r = e.truncate_before(&tp, 20).unwrap();
            assert_eq!(r.entries_deleted, 2);
            assert!(e.verify().unwrap().is_clean());
            e.close().unwrap();
        }
        let tombstone =
            |span| frame::encode(1, FrameKind::Tombstone, 0, &frame::encode_tombstone(span));
        damage(dir.path(), 1, |v| match case {
            "flip" => {
                let last = v.len() - 1;
                v[last] ^= 0x01;
            }
            "long" => *v = tombstone(3),
            _ => *v = tombstone(1),
        });
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let v = e.verify().unwrap();
        let want = |p: &cairn_engine::Problem| match case {
            "flip" => {
                p.location == Location::Wal { lsn: 1 }
                    && matches!(p.kind, CorruptionKind::Checksum { .. })
            }
            "long" => {
                p.location == Location::Wal { lsn: 3 }
                    && p.kind
                        == CorruptionKind::LsnGap {
                            expected: 4,
                            found: 3,
                        }
            }
            _ => {
                p.location == Location::Wal { lsn: 3 }
                    && p.kind
                        == CorruptionKind::LsnGap {
                            expected: 2,
                            found: 3,
                        }
            }
        };
        assert!(v.problems.iter().any(want), "{case}: {:?}", v.problems);
        // A damaged tombstone is one problem: its span is unknown, so the
        // next frame is no gap on top of it.
        if case == "flip" {
            assert_eq!(v.problems.len(), 1, "{:?}", v.problems);
        }
        let kept: Vec<i64> = e.read(&tp, 0).unwrap().map(|r| r.unwrap().offset).collect();
        assert_eq!(kept, (20..30).collect::<Vec<_>>(), "{case}");
    }
}

/// The LSN gaps `v` reports.
fn lsn_gaps(v: &cairn_engine::VerifyReport) -> Vec<&cairn_engine::Problem> {
    v.problems
        .iter()
        .filter(|p| matches!(p.kind, CorruptionKind::LsnGap { .. }))
        .collect()
}

/// The same gap found by the log scan (at the frame after it) and by the
/// checkpoint's check (at the LSN it expected) is one problem.
#[test]
fn a_gap_below_the_checkpoint_is_reported_once() {
    let (dir, tp) = store_of(5, true);
    with_raw_tree(dir.path(), |t| {
        // Frame 3 and its index entry gone, the checkpoint at 3.
        t.remove(wal_key(3)).unwrap();
        t.remove(cairn_engine::keys::index_key(&tp, 20)).unwrap();
        t.insert(
            cairn_engine::keys::META_CHECKPOINT,
            cairn_engine::meta::encode_checkpoint(3),
        )
        .unwrap();
    });
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    let gaps = lsn_gaps(&v);
    assert_eq!(gaps.len(), 1, "{:?}", v.problems);
    assert_eq!(
        gaps[0].kind,
        CorruptionKind::LsnGap {
            expected: 3,
            found: 4
        }
    );
}

/// A stray frame inside a tombstone's span is one gap: the frame the span
/// ends at is not reported as a second one.
#[test]
fn a_stray_frame_inside_a_tombstones_span_is_one_gap() {
    let (dir, tp) = store_of(5, true);
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        // Entries at LSNs 1 to 3 go: one tombstone at 1, span 3.
        assert_eq!(e.truncate_before(&tp, 30).unwrap().entries_deleted, 3);
        e.close().unwrap();
    }
    // A frame, checksum intact, back at LSN 2, inside the span.
    with_raw_tree(dir.path(), |t| put_entry(t, &tp, 2, 100..110));
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    let gaps = lsn_gaps(&v);
    assert_eq!(gaps.len(), 1, "{:?}", v.problems);
    assert_eq!(gaps[0].location, Location::Wal { lsn: 2 });
    assert_eq!(
        gaps[0].kind,
        CorruptionKind::LsnGap {
            expected: 4,
            found: 2
        }
    );
}

/// A damaged frame is reported, and so is the gap at LSN 3 (at the frame
/// after it, 4): after an intact frame (frame 1 damaged), and right after a
/// damaged records frame (frame 2), whose header says it spans one LSN
/// (until the night of 2026-12-03, any damaged frame hid the gap right
/// after it, as one whose header may be a tombstone's still does).
#[test]
fn a_gap_after_a_damaged_frame_is_reported() {
    for damaged in [1, 2] {
        let (dir, _) = store_of(5, true);
        damage(dir.path(), damaged, |v| v[30] ^= 0x10);
        with_raw_tree(dir.path(), |t| {
            t.remove(wal_key(3)).unwrap();
        });
        let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
        let at = |lsn| {
            v.problems
                .iter()
                .filter(move |p| p.location == Location::Wal { lsn })
        };
        assert!(
            at(damaged).any(|p| matches!(p.kind, CorruptionKind::Checksum { .. })),
            "{damaged}: {:?}",
            v.problems
        );
        let gap = CorruptionKind::LsnGap {
            expected: 3,
            found: 4,
        };
        assert!(at(4).any(|p| p.kind == gap), "{damaged}: {:?}", v.problems);
    }
}

/// A tombstone below the checkpoint (an open does not re-read it) whose
/// span, under a valid checksum, runs past the largest LSN: the truncation
/// that would merge with it returns `Corruption` at it, and neither panics
/// (debug builds check the sum) nor merges a wrapped span (release builds
/// would have written a tombstone of span 0, a panic of its own, or
/// removed an unrelated frame).
#[test]
fn a_truncation_refuses_a_tombstone_spanning_past_the_largest_lsn() {
    use cairn_engine::frame::{encode, encode_tombstone, FrameKind};
    for span in [u64::MAX, u64::MAX - 1, cairn_engine::keys::LSN_MAX] {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (TopicPartition::new("c", 0), TopicPartition::new("c", 1));
        {
            // a at LSNs 1 and 3, b at 2 and 4; b's first entry goes, leaving
            // a tombstone at 2 right above a's first entry.
            let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
            for i in 0..2 {
                e.append(&[batch(&a, i * 10..i * 10 + 10, 20)]).unwrap();
                e.append(&[batch(&b, i * 10..i * 10 + 10, 20)]).unwrap();
            }
            assert_eq!(e.truncate_before(&b, 10).unwrap().entries_deleted, 1);
            e.close().unwrap();
        }
        with_raw_tree(dir.path(), |t| {
            let tombstone = encode(2, FrameKind::Tombstone, 0, &encode_tombstone(span));
            t.insert(wal_key(2), tombstone).unwrap();
        });
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let err = e.truncate_before(&a, 10).expect_err("span {span}");
        let kind = assert_corrupt_at(err, 2);
        assert!(
            matches!(kind, CorruptionKind::LengthTooLarge { .. }),
            "span {span}: {kind:?}"
        );
        // Nothing was deleted: a's records are all still there.
        let kept: Vec<i64> = e.read(&a, 0).unwrap().map(|r| r.unwrap().offset).collect();
        assert_eq!(kept, (0..20).collect::<Vec<_>>(), "span {span}");
    }
}

/// A malformed key in the log's key space just below an entry a
/// truncation deletes (below the checkpoint, where no open reads): the
/// truncation names that key, and deletes nothing, rather than take it for
/// "no tombstone below" and go on; so does its plan (a dry run). (Until
/// 2026-12-05 the key sat below LSN 1, which an open now refuses itself:
/// `a_log_key_below_lsn_1_is_refused_by_an_open`; another partition's
/// entry at LSN 1 now puts it above.)
#[test]
fn a_truncation_names_a_malformed_log_key_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("c", 0);
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let other = TopicPartition::new("other", 0);
        e.append(&[batch(&other, 0..10, 20)]).unwrap();
        for i in 0..3 {
            e.append(&[batch(&tp, i * 10..i * 10 + 10, 20)]).unwrap();
        }
        e.close().unwrap();
    }
    let (frames, _) = common::wal_layout(dir.path());
    assert_eq!(frames[..2], [1, 2]);
    let mut k = wal_key(frames[1] - 1).to_vec();
    k.push(0);
    with_raw_tree(dir.path(), |t| t.insert(&k, b"junk".to_vec()).unwrap());
    let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    // A dry run's plan reads the frames beside what it would delete as
    // the deletion does, and is refused the same way.
    for (op, result) in [
        ("plan", e.truncate_plan(&tp, 10)),
        ("truncation", e.truncate_before(&tp, 10)),
    ] {
        match result {
            Err(Error::Corruption {
                location: Location::Key { key_hex },
                kind: CorruptionKind::BadKey { .. },
            }) => assert_eq!(key_hex, hex, "{op}"),
            other => panic!("{op}: expected the malformed key named, got {other:?}"),
        }
    }
    let kept: Vec<i64> = e.read(&tp, 0).unwrap().map(|r| r.unwrap().offset).collect();
    assert_eq!(kept, (0..30).collect::<Vec<_>>());
}

/// An index entry (damage under a valid CRC) that names more frames than
/// its entry has, or another whole entry of the same size: a truncation
/// must refuse it, naming the frame, and delete nothing, rather than delete
/// another entry's frames with it; and its plan (a dry run) says so too.
#[test]
fn a_truncation_refuses_an_index_entry_that_names_the_wrong_frames() {
    for (what, forge) in [
        (
            "two frames",
            (|e: &mut cairn_engine::index::IndexEntry| e.chunks = 2) as fn(&mut _),
        ),
        ("the next entry", |e| e.lsn = 2),
    ] {
        let (dir, tp) = store();
        forge_index_entry(dir.path(), &tp, 0, forge);
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let at = if what == "two frames" { 1 } else { 2 };
        // A dry run's plan refuses it as the truncation does: it does not
        // promise a deletion that would be refused.
        for (op, result) in [
            ("plan", e.truncate_plan(&tp, 10)),
            ("truncation", e.truncate_before(&tp, 10)),
        ] {
            match result {
                Err(Error::Corruption {
                    location: Location::Wal { lsn },
                    kind: CorruptionKind::IndexMismatch { detail },
                }) if lsn == at => {
                    // It names the partition: a pass over thousands
                    // says which (since 2026-12-05).
                    assert!(
                        detail.contains(&format!("the index entry of {tp} offsets"))
                            && detail.contains("names this frame as its"),
                        "{detail}"
                    )
                }
                other => panic!(
                    "{what}, {op}: expected the index entry refused at lsn {at}, got {other:?}"
                ),
            }
        }
        drop(e);
        let (frames, _) = common::wal_layout(dir.path());
        assert_eq!(frames, vec![1, 2, 3], "{what}: nothing deleted");
    }
}

/// An index entry (damage under a valid CRC) whose last offset or newest
/// timestamp reads lower than its records: it would pass below a cut its
/// records reach, and take them with it. The last entry a deletion takes
/// is read whole, so the truncation and its plan refuse it, naming it, and
/// delete nothing (until the night of 2026-12-03 records 15..20 went).
#[test]
fn a_truncation_refuses_an_index_entry_whose_last_offset_reads_low() {
    for (what, forge) in [
        (
            "last offset",
            // With a count to match: more records than offsets is
            // refused as the entry is decoded (index.rs).
            (|e: &mut cairn_engine::index::IndexEntry| {
                e.last_offset = 14;
                e.record_count = 5;
            }) as fn(&mut _),
        ),
        ("newest timestamp", |e| e.timestamp_max_ms -= 1),
    ] {
        let (dir, tp) = store();
        forge_index_entry(dir.path(), &tp, 10, forge);
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let cut = if what == "last offset" { 15 } else { 20 };
        for (op, result) in [
            ("plan", e.truncate_plan(&tp, cut)),
            ("truncation", e.truncate_before(&tp, cut)),
        ] {
            match result {
                Err(Error::Corruption {
                    location: Location::Wal { lsn: 2 },
                    kind: CorruptionKind::IndexMismatch { .. },
                }) => {}
                other => {
                    panic!("{what}, {op}: expected the index entry refused at lsn 2, got {other:?}")
                }
            }
        }
        assert_eq!(e.partitions()[0].first_offset, 0, "{what}");
        drop(e);
        let (frames, _) = common::wal_layout(dir.path());
        assert_eq!(frames, vec![1, 2, 3], "{what}: nothing deleted");
    }
}

/// An index entry (damage under a valid CRC) whose chunk count is too
/// large by the whole next entry: both ends it names look right (its own
/// first chunk, the next entry's last), so the frames between are checked
/// too, and the truncation, and its plan, refuse it there and delete
/// nothing. (Before 2026-12-03 only the two ends were read, and the next
/// entry's frames went with it.)
#[test]
fn a_truncation_refuses_an_index_entry_that_takes_in_the_next_entry() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("c", 0);
    {
        // Two entries of one 1,500-byte record: two 1 KiB chunks each.
        let e = Engine::open(cairn_engine::fuzzing::small_config(dir.path())).unwrap();
        e.append(&[batch(&tp, 1..2, 1_500)]).unwrap();
        e.append(&[batch(&tp, 2..3, 1_500)]).unwrap();
        e.close().unwrap();
    }
    let (frames, _) = common::wal_layout(dir.path());
    assert_eq!(frames, vec![1, 2, 3, 4]);
    with_raw_tree(dir.path(), |t| {
        let k = cairn_engine::keys::index_key(&tp, 1);
        let (_, mut e) =
            cairn_engine::index::IndexEntry::decode(&k, &t.get(&k).unwrap().unwrap()).unwrap();
        assert_eq!((e.lsn, e.chunks), (1, 2));
        e.chunks = 4;
        let (k, v) = e.encode(&tp);
        t.insert(k, v).unwrap();
    });
    let e = Engine::open(cairn_engine::fuzzing::small_config(dir.path())).unwrap();
    for (op, result) in [
        ("plan", e.truncate_plan(&tp, 2)),
        ("truncation", e.truncate_before(&tp, 2)),
    ] {
        match result {
            // Its own last chunk, continued by nothing, is no middle one.
            Err(Error::Corruption {
                location: Location::Wal { lsn: 2 },
                kind: CorruptionKind::IndexMismatch { detail },
            }) => assert!(detail.contains("one of its middle chunks"), "{detail}"),
            other => panic!("{op}: expected the index entry refused at lsn 2, got {other:?}"),
        }
    }
    drop(e);
    let (frames, _) = common::wal_layout(dir.path());
    assert_eq!(frames, vec![1, 2, 3, 4], "nothing deleted");
}

/// Values with valid checksums that no build writes. An open must refuse
/// them with a typed error (in debug builds too, which check arithmetic):
/// a tombstone spanning past the largest LSN would have made the next LSN
/// wrap, and later writes overwrite acknowledged frames.
#[test]
fn sealed_values_no_build_writes_are_refused_not_trusted() {
    use cairn_engine::frame::{encode, encode_tombstone, FrameKind};
    use cairn_engine::keys::{partition_key, LSN_MAX, META_CHECKPOINT};
    use cairn_engine::meta::encode_checkpoint;

    for span in [u64::MAX, u64::MAX - 3, LSN_MAX] {
        let (dir, _) = store();
        with_raw_tree(dir.path(), |t| {
            let tombstone = encode(4, FrameKind::Tombstone, 0, &encode_tombstone(span));
            t.insert(wal_key(4), tombstone).unwrap();
        });
        for mode in [RecoveryMode::TolerateTail, RecoveryMode::Strict] {
            let err = Engine::open(EngineConfig::new(dir.path()).recovery_mode(mode))
                .map(|_| ())
                .expect_err("a tombstone spanning past the largest lsn");
            assert!(err.is_corruption(), "{mode:?} span {span}: {err}");
        }
        let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
        assert!(
            v.problems
                .iter()
                .any(|p| p.location == Location::Wal { lsn: 4 }
                    && matches!(p.kind, CorruptionKind::LengthTooLarge { .. })),
            "verify agrees with open, span {span}: {:?}",
            v.problems
        );
    }

    // A checkpoint past the largest LSN.
    let (dir, _) = store();
    with_raw_tree(dir.path(), |t| {
        t.insert(META_CHECKPOINT, encode_checkpoint(u64::MAX))
            .unwrap();
    });
    match Engine::open(EngineConfig::new(dir.path())) {
        Err(Error::Corruption {
            location: Location::Meta { key: "checkpoint" },
            ..
        }) => {}
        other => panic!(
            "expected the checkpoint refused, got {:?}",
            other.map(|_| ())
        ),
    }
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.location == Location::Meta { key: "checkpoint" }),
        "{:?}",
        v.problems
    );

    // A summary under a key naming a topic Kafka does not allow: damage,
    // not a partition no read could reach.
    let (dir, tp) = store();
    with_raw_tree(dir.path(), |t| {
        let v = t.get(partition_key(&tp)).unwrap().unwrap();
        let mut k = partition_key(&tp);
        k[2] = b'/';
        // Sealed under its own key, so only the topic rule can catch it.
        let sealed = cairn_engine::keys::seal(&k, v[..v.len() - 4].to_vec());
        t.insert(k, sealed).unwrap();
    });
    match Engine::open(EngineConfig::new(dir.path())) {
        Err(e) if e.is_corruption() => assert!(e.to_string().contains("topic"), "{e}"),
        other => panic!(
            "expected the summary key refused, got {:?}",
            other.map(|_| ())
        ),
    }
}

/// One damaged chunk in the middle of an entry of many chunks is one
/// problem for verify, not one more for every chunk after it (each of which
/// used to read as "a continuation chunk without a first chunk", filling
/// the list that names locations); the chunks after it are still checked,
/// and damage of their own still reported.
#[test]
fn one_damaged_chunk_is_one_problem() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("c", 0);
    {
        // One record of 20 kB: an entry of about 20 chunks of 1 KiB.
        let e = Engine::open(cairn_engine::fuzzing::small_config(dir.path())).unwrap();
        // (Offset 0 would have no value: `record`.)
        e.append(&[batch(&tp, 1..2, 20_000)]).unwrap();
        e.append(&[batch(&tp, 2..3, 10)]).unwrap();
        e.close().unwrap();
    }
    let flip = |v: &mut Vec<u8>| {
        let last = v.len() - 1;
        v[last] ^= 1;
    };
    // Frames 1..=20 are the big entry's chunks, 21 the small entry.
    let frames: Vec<u64> = common::with_raw_tree(dir.path(), |t| {
        (1..200u64)
            .filter(|&l| t.get(wal_key(l)).unwrap().is_some_and(|v| !v.is_empty()))
            .collect()
    });
    assert_eq!(frames, (1..=21).collect::<Vec<u64>>());
    damage(dir.path(), 3, flip);
    let v = cairn_engine::verify_store(&cairn_engine::fuzzing::small_config(dir.path())).unwrap();
    let in_log: Vec<_> = v
        .problems
        .iter()
        .filter(|p| matches!(p.location, Location::Wal { .. }))
        .collect();
    assert_eq!(in_log.len(), 1, "{:?}", v.problems);
    assert_eq!(in_log[0].location, Location::Wal { lsn: 3 });
    // A second damaged chunk of the same entry is reported on its own.
    damage(dir.path(), 9, flip);
    let v = cairn_engine::verify_store(&cairn_engine::fuzzing::small_config(dir.path())).unwrap();
    let lsns: Vec<_> = v
        .problems
        .iter()
        .filter_map(|p| match p.location {
            Location::Wal { lsn } => Some(lsn),
            _ => None,
        })
        .collect();
    assert_eq!(lsns, vec![3, 9], "{:?}", v.problems);
}

/// The log and the index disagree in each way they can, one at a time;
/// verify names each disagreement once, where it is: a log entry without
/// its index entry at the entry's LSN; an index entry without a log entry,
/// or unlike the log's, at the index entry. (The log scan looks index
/// entries up as it goes, and the index is read a second time only to name
/// what it holds beyond the log: a verify's memory does not grow with the
/// archive.)
#[test]
fn each_index_disagreement_is_named_once() {
    use cairn_engine::index::IndexEntry;
    use cairn_engine::keys::index_key;
    // The index entry at the second offset is read, changed by the third
    // (or, with none, removed), and stored under its (new) key.
    type Case = (
        &'static str,
        i64,
        Option<fn(&mut IndexEntry)>,
        Location,
        &'static str,
    );
    let index = |first_offset| Location::Index {
        topic: "c".into(),
        partition: 0,
        first_offset,
    };
    let cases: [Case; 4] = [
        (
            "an index entry removed",
            10,
            None,
            Location::Wal { lsn: 2 },
            "has no index entry",
        ),
        (
            "an index entry beyond the log",
            20,
            Some(|e| (e.first_offset, e.last_offset, e.lsn) = (30, 39, 4)),
            index(30),
            "no intact entry in the log at lsn 4",
        ),
        (
            "an index entry unlike the log's",
            10,
            Some(|e| e.payload_bytes += 1),
            index(10),
            "but log",
        ),
        (
            "an index entry naming another entry's frame",
            20,
            Some(|e| (e.first_offset, e.last_offset) = (30, 39)),
            index(30),
            "no intact entry in the log at lsn 3",
        ),
    ];
    for (what, from, forge, at, says) in cases {
        let (dir, tp) = store();
        with_raw_tree(dir.path(), |t| {
            let k = index_key(&tp, from);
            let Some(forge) = forge else {
                t.remove(k).unwrap();
                return;
            };
            let (_, mut e) = IndexEntry::decode(&k, &t.get(&k).unwrap().unwrap()).unwrap();
            forge(&mut e);
            let (k, v) = e.encode(&tp);
            t.insert(k, v).unwrap();
        });
        let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
        let found = index_mismatches(&v);
        assert_eq!(found.len(), 1, "{what}: {:#?}", v.problems);
        assert_eq!(found[0].location, at, "{what}");
        assert!(found[0].to_string().contains(says), "{what}: {}", found[0]);
    }
}

fn index_mismatches(v: &cairn_engine::VerifyReport) -> Vec<&cairn_engine::Problem> {
    v.problems
        .iter()
        .filter(|p| matches!(p.kind, CorruptionKind::IndexMismatch { .. }))
        .collect()
}

/// Two intact log entries at one offset (the second a valid frame past
/// the log's end, as no build writes): the one the index does not name is
/// reported at its own LSN, as having an index entry that names the
/// other; the index entry, which the other bears out, is not reported.
#[test]
fn an_entry_at_an_offset_already_indexed_is_named_at_its_lsn() {
    use cairn_engine::frame::{self, FrameKind};
    let (dir, tp) = store();
    with_raw_tree(dir.path(), |t| {
        let again = batch(&tp, 10..20, 20);
        let body = cairn_engine::body::encode_entry(&tp, &again.records);
        let v = frame::encode(4, FrameKind::Records, 0, &body);
        t.insert(wal_key(4), v).unwrap();
    });
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    let index = index_mismatches(&v);
    assert_eq!(index.len(), 1, "{:#?}", v.problems);
    assert_eq!(index[0].location, Location::Wal { lsn: 4 });
    assert!(
        index[0]
            .to_string()
            .contains("has an index entry naming lsn 2"),
        "{}",
        index[0]
    );
    assert!(
        v.problems
            .iter()
            .any(|p| matches!(p.kind, CorruptionKind::OffsetOrder { .. })),
        "{:#?}",
        v.problems
    );
    // An open refuses it too, where it once rebuilt the index entry to
    // name LSN 4 and left LSN 2's records unindexed (2026-12-03). (A
    // strict open says what verify says first.)
    for (mode, want) in [
        (
            RecoveryMode::TolerateTail,
            "starts at 10 but the index entry before it ends at 29",
        ),
        (RecoveryMode::Strict, "starts at 10 after an earlier entry"),
    ] {
        let err = Engine::open(EngineConfig::new(dir.path()).recovery_mode(mode))
            .err()
            .expect("the open must refuse the repeated entry");
        match assert_corrupt_at(err, 4) {
            CorruptionKind::OffsetOrder { detail } => assert!(detail.contains(want), "{detail}"),
            other => panic!("expected an offset order problem, got {other}"),
        }
    }
}

/// An entry in the recovery tail whose offsets overlap the entry before
/// it in its partition (a valid CRC, as no build writes) is refused at its
/// LSN: against an entry below the checkpoint (through the index) and
/// against an earlier entry of the same tail. Before 2026-12-03 an open
/// indexed it beside the entry it overlaps and kept the summary's next
/// offset, so that the next open refused the store it had written.
#[test]
fn an_entry_overlapping_the_one_before_it_is_refused_at_open() {
    // (closed: LSNs 1..3 checkpointed; the entry put at `lsn`, its
    // offsets, and what it is checked against)
    let cases = [
        (true, 4, 25..35, "the index entry before it ends at 29"),
        (false, 3, 15..25, "the tail's previous entry ends at 19"),
    ];
    for (close, lsn, offsets, want) in cases {
        let (dir, tp) = store_closed(close);
        with_raw_tree(dir.path(), |t| put_entry(t, &tp, lsn, offsets.clone()));
        assert_order_refused(dir.path(), lsn, want);
        let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
        assert!(
            v.problems
                .iter()
                .any(|p| p.location == Location::Wal { lsn }
                    && matches!(p.kind, CorruptionKind::OffsetOrder { .. })),
            "{want}: {:#?}",
            v.problems
        );
    }
}

/// The same after a prune: an entry of the tail that starts below every
/// index entry left (none below its first offset to compare with) but
/// overlaps the one above it is refused. Before, the open indexed it beside
/// that one: two reads of offsets 20..25 disagreed, and the partition read
/// whole gave more records than its summary counts.
#[test]
fn an_entry_overlapping_the_pruned_partitions_first_is_refused_at_open() {
    let (dir, tp) = store_of(3, false);
    {
        // store_of left its engine dropped (synced); open it again to prune.
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.truncate_before(&tp, 20).unwrap();
        e.close().unwrap();
    }
    let lsn = with_raw_tree(dir.path(), |t| {
        let lsn = last_frame_lsn(t) + 1;
        put_entry(t, &tp, lsn, 15..26);
        lsn
    });
    assert_order_refused(
        dir.path(),
        lsn,
        "starts at 15 but the index entry before it ends at 29",
    );
}

/// And when a prune left nothing before it: a pruned entry's own frame
/// back in the tail (its LSN's, so its CRC holds) starts below the first
/// offset the partition's summary keeps. Before, the open indexed it again:
/// reads of the partition returned pruned records, and its summary counted
/// fewer records than its index held.
#[test]
fn a_pruned_entry_back_in_the_tail_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("p", 0);
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        for i in 0..3 {
            e.append(&[batch(&tp, i * 10..i * 10 + 10, 20)]).unwrap();
        }
        e.truncate_before(&tp, 10).unwrap();
        drop(e); // no close (nor open since): the whole log is tail
    }
    // The first entry's frame as its append wrote it.
    with_raw_tree(dir.path(), |t| put_entry(t, &tp, 1, 0..10));
    assert_order_refused(
        dir.path(),
        1,
        "starts at 0 but the partition's first offset is 10",
    );
}

/// A damaged tombstone ending the log (a prune deleted the newest entries)
/// is reported where it is, and the watermark past its LSN (the end of its
/// span, which no one can read now) is a note, not records lost: nothing
/// acknowledged lies past a tombstone. Before, verify also claimed a lost
/// suffix. The same when the damage hides that it is a tombstone (a
/// flipped magic byte): until 2026-12-05 only a readable tombstone header
/// counted, and that one read as records lost.
#[test]
fn a_damaged_last_tombstone_is_no_lost_suffix() {
    for (what, byte) in [("its checksum", usize::MAX), ("its magic", 0)] {
        eprintln!("damaging {what}");
        a_damaged_last_tombstone_is_no_lost_suffix_at(byte);
    }
}

/// [`a_damaged_last_tombstone_is_no_lost_suffix`], with the tombstone's
/// byte `byte` flipped (`usize::MAX`: its last).
fn a_damaged_last_tombstone_is_no_lost_suffix_at(byte: usize) {
    let (dir, tp) = store_of(3, false);
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.truncate_before(&tp, 30).unwrap();
        e.close().unwrap();
    }
    let tomb = with_raw_tree(dir.path(), last_frame_lsn);
    damage(dir.path(), tomb, |v| {
        let i = byte.min(v.len() - 1);
        v[i] ^= 1;
    });
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.location == Location::Wal { lsn: tomb }),
        "{:#?}",
        v.problems
    );
    assert!(
        !v.problems
            .iter()
            .any(|p| matches!(p.kind, CorruptionKind::LostSuffix { .. })),
        "{:#?}",
        v.problems
    );
    assert!(
        v.notes
            .iter()
            .any(|n| n.contains("may have been a tombstone")),
        "{:?}",
        v.notes
    );
}

/// A key in the log's key space past the largest LSN's (longer than an
/// LSN's, so it sorts after `W` + eight 0xff bytes) is named by an open,
/// not passed over as beyond the log.
#[test]
fn a_log_key_past_the_largest_lsn_is_refused_at_open() {
    let (dir, _) = store();
    let mut k = wal_key(u64::MAX).to_vec();
    k.push(0);
    with_raw_tree(dir.path(), |t| {
        let v = t.get(wal_key(1)).unwrap().unwrap();
        t.insert(&k, v).unwrap();
    });
    let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
    match open_refused(EngineConfig::new(dir.path()), "a log key past the largest") {
        (Location::Key { key_hex }, CorruptionKind::BadKey { .. }) => assert_eq!(key_hex, hex),
        other => panic!("expected a bad key at {hex}, got {other:?}"),
    }
}

/// A stopped verify notes problems an open would repair only when all of
/// them are: damage beside them (here a flipped bit), damage below the
/// checkpoint (a closed store), or a summary ahead of its entries (no crash
/// leaves one, and recovery refuses it) gets no note. (torn_append.rs
/// checks that what a crash leaves gets it, and that an open repairs it.)
#[test]
fn a_stopped_verify_notes_repairs_only_when_all_problems_are_so() {
    use cairn_engine::offsets::PartitionSummary;
    type Case = (&'static str, bool, fn(&std::path::Path, &TopicPartition));
    let cases: [Case; 3] = [
        ("a flipped bit beside", false, |dir, tp| {
            with_raw_tree(dir, |t| {
                t.remove(cairn_engine::keys::index_key(tp, 20)).unwrap();
            });
            damage(dir, 2, |v| *v.last_mut().unwrap() ^= 1);
        }),
        ("below the checkpoint", true, |dir, tp| {
            with_raw_tree(dir, |t| {
                t.remove(cairn_engine::keys::index_key(tp, 20)).unwrap();
            });
        }),
        ("a summary ahead of its entries", false, |dir, tp| {
            with_raw_tree(dir, |t| {
                let k = cairn_engine::keys::partition_key(tp);
                let (_, mut s) =
                    PartitionSummary::decode(&k, &t.get(&k).unwrap().unwrap()).unwrap();
                (s.next_offset, s.record_count) = (40, 40);
                let (k, v) = s.encode(tp);
                t.insert(k, v).unwrap();
            });
        }),
    ];
    for (what, closed, harm) in cases {
        let (dir, tp) = store_closed(closed);
        harm(dir.path(), &tp);
        let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
        assert!(!v.is_clean(), "{what}");
        assert!(
            !v.notes.iter().any(|n| n.contains("next open to repair")),
            "{what}: {:?}\n{:#?}",
            v.notes,
            v.problems
        );
    }
}

/// A page of sled's log that sled cannot read, met part-way through a
/// verify, ends the check there: it is reported after the problems found
/// before it (here a missing index entry), with a note that what lies
/// after it was not checked. Before, the error alone was returned, and the
/// problems found before it were dropped.
#[test]
fn an_unreadable_sled_page_ends_the_check_keeping_what_it_found() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("s", 0);
    // A cache far smaller than the store: the scan reads pages from disk.
    let cfg = |path: &std::path::Path| {
        let mut c = EngineConfig::new(path);
        c.cache_capacity_bytes = 1 << 20;
        c
    };
    {
        let e = Engine::open(cfg(dir.path())).unwrap();
        for i in 0..400 {
            e.append(&[batch(&tp, i * 10..i * 10 + 10, 5000)]).unwrap();
        }
        e.close().unwrap();
    }
    // A second open and close: sled's snapshot then covers the whole log,
    // and the next open reads none of its pages.
    Engine::open(cfg(dir.path())).unwrap().close().unwrap();
    with_raw_tree(dir.path(), |t| {
        t.remove(cairn_engine::keys::index_key(&tp, 0)).unwrap();
    });
    Engine::open(cfg(dir.path())).unwrap().close().unwrap();
    let db = dir.path().join("sled").join("db");
    let mut bytes = std::fs::read(&db).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&db, bytes).unwrap();
    let v = cairn_engine::verify_store(&cfg(dir.path())).unwrap();
    assert_eq!(
        v.problems.first().map(|p| &p.location),
        Some(&Location::Wal { lsn: 1 }),
        "{:#?}",
        v.problems
    );
    assert!(
        matches!(
            v.problems.last().map(|p| &p.location),
            Some(Location::SledLog { .. })
        ),
        "{:#?}",
        v.problems
    );
    assert!(
        v.notes
            .iter()
            .any(|n| n.contains("the check stopped there")),
        "{:?}",
        v.notes
    );
}

/// A tombstone whose span (under a valid checksum: no build writes one)
/// leaves the log's next LSN just below the largest: an append that would
/// pass it is refused and writes nothing, one that fits is read back after
/// a reopen, and a chunk at the largest LSN is refused by an open and
/// reported by verify (before 2026-12-03 an append went past it, and an
/// open took such a chunk in, with a checkpoint no later open accepts).
#[test]
fn the_largest_lsn_bounds_appends_and_opens() {
    use cairn_engine::frame::{encode, encode_tombstone, FrameKind};
    use cairn_engine::keys::LSN_MAX;
    let (dir, tp) = store();
    with_raw_tree(dir.path(), |t| {
        // The slots reserved above the log go: the span covers them.
        for lsn in 4..1000 {
            t.remove(wal_key(lsn)).unwrap();
        }
        // At LSN 4, spanning 4 ..= LSN_MAX - 2.
        let tombstone = encode(4, FrameKind::Tombstone, 0, &encode_tombstone(LSN_MAX - 5));
        t.insert(wal_key(4), tombstone).unwrap();
    });
    let cfg = || EngineConfig::new(dir.path()).frame_body_bytes_max(1024);
    let e = Engine::open(cfg()).unwrap();
    assert_eq!(e.stats().next_lsn, LSN_MAX - 1);
    // Three chunks would end past the largest LSN.
    let err = e.append(&[batch(&tp, 30..31, 3000)]).unwrap_err();
    let kind = assert_corrupt_at(err, LSN_MAX - 1);
    assert!(
        matches!(kind, CorruptionKind::LengthTooLarge { length: 3, max: 1 }),
        "{kind:?}"
    );
    assert_eq!(e.stats().next_lsn, LSN_MAX - 1, "nothing written");
    // One chunk fits, at LSN_MAX - 1; after it nothing does.
    e.append(&[batch(&tp, 30..31, 20)]).unwrap();
    let err = e.append(&[batch(&tp, 31..32, 20)]).unwrap_err();
    assert_corrupt_at(err, LSN_MAX);
    e.close().unwrap();
    let e = Engine::open(cfg()).unwrap();
    let read: Vec<i64> = e.read(&tp, 0).unwrap().map(|r| r.unwrap().offset).collect();
    assert_eq!(read, (0..31).collect::<Vec<_>>());
    drop(e);
    // That entry again, sealed at the largest LSN, past the checkpoint.
    with_raw_tree(dir.path(), |t| put_entry(t, &tp, LSN_MAX, 30..31));
    for mode in [RecoveryMode::TolerateTail, RecoveryMode::Strict] {
        let err = Engine::open(cfg().recovery_mode(mode))
            .map(|_| ())
            .expect_err("a chunk at the largest lsn");
        let kind = assert_corrupt_at(err, LSN_MAX);
        assert!(
            matches!(kind, CorruptionKind::LengthTooLarge { .. }),
            "{mode:?}: {kind:?}"
        );
    }
    let v = cairn_engine::verify_store(&cfg()).unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.location == Location::Wal { lsn: LSN_MAX }
                && matches!(p.kind, CorruptionKind::LengthTooLarge { .. })),
        "{:?}",
        v.problems
    );
}

/// An entry past the checkpoint, with no index entry, that starts below the
/// first offset its partition's summary keeps (which only a prune raises,
/// deleting every entry below it): an open refuses it, and verify reports
/// it as that, not only as an entry without an index entry that an open
/// would repair (before 2026-12-03 its note said so).
#[test]
fn an_entry_below_the_partitions_first_offset_is_damage_for_verify_too() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("c", 0);
    // The partition emptied by a prune: its summary keeps first offset 10.
    let next_lsn = {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&[batch(&tp, 0..10, 20)]).unwrap();
        assert_eq!(e.truncate_before(&tp, 10).unwrap().entries_deleted, 1);
        let next = e.stats().next_lsn;
        e.close().unwrap();
        next
    };
    // The same entry sealed past the checkpoint: a valid frame no build
    // writes there.
    with_raw_tree(dir.path(), |t| put_entry(t, &tp, next_lsn, 0..10));
    assert_order_refused(
        dir.path(),
        next_lsn,
        "starts at 0 but the partition's first offset is 10",
    );
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.location == Location::Wal { lsn: next_lsn }
                && matches!(p.kind, CorruptionKind::OffsetOrder { .. })),
        "{:?}",
        v.problems
    );
    assert!(
        !v.notes
            .iter()
            .any(|n| n.contains("Opening the archive repairs them")),
        "{:?}",
        v.notes
    );
}

/// A crash's tail (an entry past the checkpoint without its index entry,
/// the summary behind it) is said to be repaired by an open, as it is; the
/// same tail over a summary that disagrees with the entries below it is
/// not, as the open refuses it (until 2026-12-05 verify said an open
/// repairs both: its test was not recovery's).
#[test]
fn verify_says_an_open_repairs_only_what_the_open_repairs() {
    use cairn_engine::offsets::PartitionSummary;
    let dir = tempfile::tempdir().unwrap();
    let (store, damaged) = (dir.path().join("store"), dir.path().join("damaged"));
    let tp = TopicPartition::new("c", 0);
    let next_lsn = {
        let e = Engine::open(EngineConfig::new(&store)).unwrap();
        e.append(&[batch(&tp, 0..10, 20)]).unwrap();
        e.append(&[batch(&tp, 10..20, 20)]).unwrap();
        let next = e.stats().next_lsn;
        e.close().unwrap();
        next
    };
    with_raw_tree(&store, |t| put_entry(t, &tp, next_lsn, 20..30));
    cairn_engine::fuzzing::copy_dir(&store, &damaged);
    let (key, _) = PartitionSummary::empty_at(0).encode(&tp);
    with_raw_tree(&damaged, |t| {
        let v = t.get(&key).unwrap().unwrap();
        let (_, mut s) = PartitionSummary::decode(&key, &v).unwrap();
        assert_eq!(s.next_offset, 20);
        s.next_offset = 15;
        t.insert(&key, s.encode(&tp).1).unwrap();
    });
    let says_repaired = |store: &std::path::Path| {
        let v = cairn_engine::verify_store(&EngineConfig::new(store)).unwrap();
        assert!(!v.is_clean(), "{v:?}");
        v.notes
            .iter()
            .any(|n| n.contains("Opening the archive repairs them"))
    };
    assert!(says_repaired(&store));
    assert!(!says_repaired(&damaged));
    let (location, kind) = open_refused(EngineConfig::new(&damaged), "summary at 15");
    assert!(
        matches!(kind, CorruptionKind::SummaryMismatch { .. })
            && location
                == Location::Partition {
                    topic: "c".into(),
                    partition: 0
                },
        "{location}: {kind}"
    );
    let e = Engine::open(EngineConfig::new(&store)).unwrap();
    assert_eq!(e.durable_offset(&tp), Some(30));
    assert!(e.verify().unwrap().is_clean());
    drop(e);
}

/// A store whose sled folder is gone, its watermark left: verify names the
/// loss at the watermark (until the night of 2026-12-03 it said "no cairn
/// store here", as of an empty folder), and an open refuses it rather than
/// start a new, empty store under the old watermark. So is one whose sled
/// folder lost only its data file, and the open makes none: until
/// 2026-12-07 sled made an empty one before recovery refused the store,
/// and every command after it saw another damage (found by an audit).
#[test]
fn a_store_that_lost_its_sled_folder_is_damage_not_absence() {
    for lost in ["sled", "sled/db"] {
        let (dir, _tp) = store();
        let gone = dir.path().join(lost);
        if lost == "sled" {
            std::fs::remove_dir_all(&gone).unwrap();
        } else {
            std::fs::remove_file(&gone).unwrap();
        }
        let cfg = EngineConfig::new(dir.path());
        let named = |e: Result<(), Error>, what: &str| match e {
            Err(Error::Corruption {
                location: Location::Watermark,
                kind: CorruptionKind::SledUnreadable { detail },
            }) => assert!(
                detail.contains("sled/db) is missing"),
                "{lost} {what}: {detail}"
            ),
            other => panic!("{lost} {what}: expected the loss named, got {other:?}"),
        };
        named(cairn_engine::verify_store(&cfg).map(|_| ()), "verify");
        named(Engine::open(cfg.clone()).map(|_| ()), "open");
        assert!(
            !cfg.sled_data_path().exists(),
            "{lost}: the open made a data file"
        );
    }
}

/// A truncation that empties a partition counts its whole index against
/// the summary before its first step: a lost index entry (the store opens:
/// only the newest is checked there) refuses it with nothing deleted.
/// Until the night of 2026-12-04 the steps before the emptying one (1,024
/// entries each) deleted around the lost entry first, leaving its frames
/// with no index entry, and only the last step refused.
#[test]
fn an_emptying_truncation_refuses_a_lost_index_entry_before_deleting() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("c", 0);
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        for o in 0..1500 {
            e.write(&[batch(&tp, o..o + 1, 10)]).unwrap();
        }
        e.close().unwrap();
    }
    with_raw_tree(dir.path(), |t| {
        t.remove(cairn_engine::keys::index_key(&tp, 700))
            .unwrap()
            .unwrap();
    });
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    match e.truncate_before(&tp, 1500) {
        Err(Error::Corruption {
            location: Location::Partition { partition: 0, .. },
            kind: CorruptionKind::SummaryMismatch { detail },
        }) => assert!(detail.contains("index entries are lost"), "{detail}"),
        other => panic!("expected the lost entry refused, got {other:?}"),
    }
    let p = e.partition(&tp).unwrap();
    assert_eq!(
        (p.first_offset, p.record_count),
        (0, 1500),
        "nothing deleted"
    );
    // Every record but the lost entry's is still read (a whole read then
    // ends with the count's error).
    let readable = e.read(&tp, 0).unwrap().filter(Result::is_ok).count();
    assert_eq!(readable, 1499);
}

/// A store whose first open stopped before anything it wrote was durable
/// (sled's files there, its tree empty, no watermark) is no damage to
/// verify, which says so in a note, as every open takes it for new; until
/// 2026-12-07 verify reported three problems, exit 1. Under a watermark
/// past 0 it is records lost.
#[test]
fn a_store_whose_creation_never_finished_is_no_damage() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig::new(dir.path());
    // sled's files, its tree empty, as an open killed before its first
    // batch was durable leaves them.
    let empty_tree = || {
        let db = cfg.open_sled().unwrap();
        db.open_tree("cairn").unwrap();
        db.flush().unwrap();
    };
    // Clean, with a note that says `says`.
    let clean_noting = |says: &str| {
        let v = cairn_engine::verify_store(&cfg).unwrap();
        assert!(v.problems.is_empty(), "{:?}", v.problems);
        assert!(v.notes.iter().any(|n| n.contains(says)), "{:?}", v.notes);
    };
    empty_tree();
    clean_noting("not even its format");
    // A poison mark left by that open (a failed sync of the new store) is
    // said with it.
    let poison = dir.path().join(cairn_engine::poisoned::POISON_FILE);
    std::fs::write(&poison, "open: sync new store: Input/output error\n").unwrap();
    clean_noting("was poisoned");
    std::fs::remove_file(&poison).unwrap();
    // A watermark, written once the new store's first batch is durable:
    // sled lost that, and its missing keys are problems.
    drop(cairn_engine::watermark::Watermark::open(dir.path(), 0).unwrap());
    let v = cairn_engine::verify_store(&cfg).unwrap();
    assert!(!v.problems.is_empty(), "{v:?}");
    std::fs::remove_file(dir.path().join(cairn_engine::watermark::WATERMARK_FILE)).unwrap();
    // As every open takes it: new.
    let e = Engine::open(cfg.clone()).unwrap();
    e.append(&[batch(&TopicPartition::new("t", 0), 0..10, 10)])
        .unwrap();
    e.close().unwrap();
    let v = cairn_engine::verify_store(&cfg).unwrap();
    assert!(v.problems.is_empty() && v.notes.is_empty(), "{v:?}");
    // Its tree emptied under a watermark that names frames: lost.
    std::fs::remove_dir_all(dir.path().join("sled")).unwrap();
    empty_tree();
    let v = cairn_engine::verify_store(&cfg).unwrap();
    assert!(
        matches!(
            v.problems[..],
            [cairn_engine::Problem {
                kind: CorruptionKind::LostSuffix { .. },
                ..
            }]
        ),
        "{v:?}"
    );
}

/// A damaged header of one of sled's log segments refuses an open to
/// write, at its offset in sled's data file, before anything is written: sled takes
/// such a segment for a free one whenever an open reads its header, so an
/// append into it would be lost at a later open, after its offsets were
/// committed (until 2026-12-07 `cairn run` archived onto such a store, and
/// its next open found the records gone; found by an audit). An open to
/// read takes the store, lists the damage, reads every record, and refuses
/// every write with the same error.
#[test]
fn a_damaged_segment_header_refuses_writes_not_reads() {
    let (dir, tp) = store();
    // Opened again: sled's open writes a snapshot of the log, which later
    // opens read through, not the header. (Damaged before it, the open
    // finds the log lost: `LostSuffix`.)
    Engine::open(EngineConfig::new(dir.path()))
        .unwrap()
        .close()
        .unwrap();
    let db = EngineConfig::new(dir.path()).sled_data_path();
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[9] ^= 0x01;
    std::fs::write(&db, &bytes).unwrap();
    let at_the_header = |e: Error| match e {
        Error::Corruption {
            location: Location::SledFiles { path, log_offset },
            kind: CorruptionKind::SegmentHeader { stored, computed },
        } => {
            assert_eq!((path, log_offset), (db.clone(), Some(0)));
            assert_ne!(stored, computed);
        }
        e => panic!("{e}"),
    };
    let refused = |what| match Engine::open(EngineConfig::new(dir.path())) {
        Err(e) => at_the_header(e),
        Ok(_) => panic!("{what}: opened to write"),
    };
    refused("first");
    // Nothing was written: the data file is as it was.
    assert_eq!(std::fs::read(&db).unwrap(), bytes);

    let e = Engine::open(EngineConfig::new(dir.path()).open_to_read(true)).unwrap();
    let damaged = &e.recovery_report().damaged_segment_headers;
    assert_eq!(damaged.len(), 1);
    assert_eq!(damaged[0].file_offset, 0);
    let offsets: Vec<i64> = e.read(&tp, 0).unwrap().map(|r| r.unwrap().offset).collect();
    assert_eq!(offsets, (0..30).collect::<Vec<_>>());
    at_the_header(e.append(&[batch(&tp, 30..31, 20)]).unwrap_err());
    at_the_header(e.write(&[batch(&tp, 30..31, 20)]).unwrap_err());
    at_the_header(e.truncate_before(&tp, 10).unwrap_err());
    let to = std::collections::BTreeMap::from([(tp.clone(), 40)]);
    at_the_header(e.advance_partitions(&to).unwrap_err());
    let ids = std::collections::BTreeMap::from([(
        "c".to_string(),
        cairn_engine::TopicId::new(7).unwrap(),
    )]);
    at_the_header(e.bind_topics(&ids).unwrap_err());
    assert_eq!(e.durable_offset(&tp), Some(30));
    e.close().unwrap();
    // Still refused to write, still read whole.
    refused("again");
    let e = Engine::open(EngineConfig::new(dir.path()).open_to_read(true)).unwrap();
    assert_eq!(e.read(&tp, 0).unwrap().count(), 30);
    e.close().unwrap();
}

/// A segment sled had begun as a crash came, its header torn (garbage
/// that fails its CRC) and nothing in it synced, does not refuse the open:
/// sled's open takes it for a free segment and writes zeros over it, and
/// the headers are read after that. Read before sled opened (as on
/// 2026-12-07, found in review the same day), such a crash refused the
/// store to every run.
#[test]
fn a_torn_header_of_a_segment_begun_at_a_crash_opens() {
    let (dir, tp) = store();
    let db = EngineConfig::new(dir.path()).sled_data_path();
    let mut bytes = std::fs::read(&db).unwrap();
    let segment = 8 << 20;
    assert!(bytes.len() <= segment, "{}", bytes.len());
    bytes.resize(segment, 0);
    bytes.extend_from_slice(&[0x5a; 20]);
    bytes.resize(segment + 4096, 0);
    std::fs::write(&db, &bytes).unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(e.recovery_report().damaged_segment_headers.is_empty());
    assert_eq!(e.read(&tp, 0).unwrap().count(), 30);
    e.append(&[batch(&tp, 30..40, 20)]).unwrap();
    e.close().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(e.read(&tp, 0).unwrap().count(), 40);
    assert!(e.verify().unwrap().is_clean());
    e.close().unwrap();
}
