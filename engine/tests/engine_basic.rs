//! The engine's public behaviour: append, durable offsets, reads, dedup,
//! bad input, locking, reopen, time lookup, retention.

mod common;

use cairn_engine::{
    Engine, EngineConfig, Error, Header, InvalidInput, Record, RecordBatch, TopicPartition,
    HEADERS_PER_RECORD_MAX, TRUNCATE_ENTRIES_PER_STEP,
};
use common::{batch, read_all, record};

fn open(dir: &std::path::Path) -> Engine {
    Engine::open(EngineConfig::new(dir)).unwrap()
}

#[test]
fn append_read_and_durable_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let tp = TopicPartition::new("t", 0);
    let d = e.append(&[batch(&tp, 0..10, 50)]).unwrap();
    assert_eq!(d.get(&tp), Some(10));
    assert_eq!(d.appended_records, 10);
    assert_eq!(e.durable_offset(&tp), Some(10));
    let got = read_all(&e, &tp);
    assert_eq!(got, batch(&tp, 0..10, 50).records);
    let from5: Vec<i64> = e.read(&tp, 5).unwrap().map(|r| r.unwrap().offset).collect();
    assert_eq!(from5, (5..10).collect::<Vec<_>>());
    assert_eq!(e.read(&tp, 10).unwrap().count(), 0);
    assert_eq!(
        e.read(&TopicPartition::new("none", 0), 0).unwrap().count(),
        0
    );
    let p = &e.partitions()[0];
    assert_eq!((p.first_offset, p.next_offset, p.record_count), (0, 10, 10));
    assert!(e.verify().unwrap().is_clean());
    e.close().unwrap();
}

#[test]
fn duplicates_are_dropped_and_gaps_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let tp = TopicPartition::new("t", 1);
    e.append(&[batch(&tp, [0, 1, 5, 9], 10)]).unwrap();
    let d = e.append(&[batch(&tp, [1, 5, 9, 10, 12], 10)]).unwrap();
    assert_eq!((d.appended_records, d.duplicate_records), (2, 3));
    assert_eq!(d.get(&tp), Some(13));
    let offs: Vec<i64> = read_all(&e, &tp).iter().map(|r| r.offset).collect();
    assert_eq!(offs, vec![0, 1, 5, 9, 10, 12]);
    let d = e.append(&[batch(&tp, [3, 4], 10)]).unwrap();
    assert_eq!((d.appended_records, d.duplicate_records), (0, 2));
    assert_eq!(e.stats().records_duplicate, 5);
}

/// A frame size that would let sled write a leaf of frames as a blob is
/// refused at open.
#[test]
fn frames_too_large_for_sled_leaves_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let too_big = cairn_engine::FRAME_BODY_BYTES_WRITE_MAX + 1;
    let err = Engine::open(EngineConfig::new(dir.path()).frame_body_bytes_max(too_big))
        .err()
        .expect("refused");
    assert!(err.to_string().contains("frame_body_bytes_max"), "{err}");
    Engine::open(
        EngineConfig::new(dir.path())
            .frame_body_bytes_max(cairn_engine::FRAME_BODY_BYTES_WRITE_MAX),
    )
    .unwrap();
}

#[test]
fn bad_input_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig::new(dir.path()).record_bytes_max(100);
    let e = Engine::open(cfg).unwrap();
    let tp = TopicPartition::new("t", 0);
    let good = batch(&tp, 0..3, 10);
    type Case = (RecordBatch, fn(&InvalidInput) -> bool);
    let cases: Vec<Case> = vec![
        (batch(&tp, [1], 101), |e| {
            matches!(e, InvalidInput::RecordTooLarge { .. })
        }),
        (batch(&TopicPartition::new("bad topic", 0), [0], 1), |e| {
            matches!(e, InvalidInput::Topic { .. })
        }),
        (batch(&TopicPartition::new("t", -1), [0], 1), |e| {
            matches!(e, InvalidInput::NegativePartition { .. })
        }),
        (batch(&tp, [-1], 1), |e| {
            matches!(e, InvalidInput::NegativeOffset { .. })
        }),
        (batch(&tp, [3, 2], 1), |e| {
            matches!(e, InvalidInput::OffsetsNotIncreasing { .. })
        }),
        // No next offset after it.
        (
            RecordBatch {
                tp: tp.clone(),
                records: vec![Record::with_value(i64::MAX, "v")],
            },
            |e| matches!(e, InvalidInput::OffsetTooLarge { .. }),
        ),
        // Cheap on the wire, but a record that could never be decoded.
        (many_headers(&tp, HEADERS_PER_RECORD_MAX + 1), |e| {
            matches!(e, InvalidInput::TooManyHeaders { .. })
        }),
    ];
    for (bad, is) in cases {
        // A good batch in the same call must not be written either.
        match e.append(&[good.clone(), bad]) {
            Err(Error::InvalidInput(i)) => assert!(is(&i), "wrong error {i}"),
            other => panic!("expected InvalidInput, got {other:?}"),
        }
    }
    assert!(e.partitions().is_empty());
    assert_eq!(e.stats().frames, 0);
    assert!(Engine::open(EngineConfig::new(dir.path().join("x")).record_bytes_max(0)).is_err());
    // A topic-partition that cannot exist is refused by the readers too.
    for bad in [
        TopicPartition::new("t", -1),
        TopicPartition::new("x".repeat(300), 0),
    ] {
        assert!(matches!(e.read(&bad, 0), Err(Error::InvalidInput(_))));
        assert!(matches!(
            e.offset_for_time(&bad, 0),
            Err(Error::InvalidInput(_))
        ));
        assert!(matches!(
            e.truncate_before(&bad, 1),
            Err(Error::InvalidInput(_))
        ));
    }
}

fn many_headers(tp: &TopicPartition, n: usize) -> RecordBatch {
    let mut r = Record::with_value(0, "v");
    r.headers = vec![
        Header {
            name: String::new(),
            value: None,
        };
        n
    ];
    RecordBatch {
        tp: tp.clone(),
        records: vec![r],
    }
}

/// The most headers a record may carry, as many records as make the
/// largest entry: written, read back whole, verified. Before the engine
/// bounded header counts and cut entries by encoded size, such records were
/// acknowledged and then either never decoded again or tripped an assert.
#[test]
fn records_with_the_most_headers_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let tp = TopicPartition::new("h", 0);
    let mut b = many_headers(&tp, HEADERS_PER_RECORD_MAX);
    let one = b.records[0].clone();
    b.records = (0..20)
        .map(|o| Record {
            offset: o,
            ..one.clone()
        })
        .collect();
    e.append(&[b.clone()]).unwrap();
    let got = read_all(&e, &tp);
    assert_eq!(got.len(), 20);
    assert!(got
        .iter()
        .all(|r| r.headers.len() == HEADERS_PER_RECORD_MAX));
    assert!(e.verify().unwrap().is_clean());
    e.close().unwrap();
    let e = open(dir.path());
    assert_eq!(read_all(&e, &tp).len(), 20);
}

#[test]
fn second_open_is_refused_with_holder() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    match Engine::open(EngineConfig::new(dir.path())) {
        Err(Error::Locked { holder, .. }) => {
            assert!(holder.contains(&std::process::id().to_string()))
        }
        Err(other) => panic!("expected Locked, got {other}"),
        Ok(_) => panic!("expected Locked, got an engine"),
    }
    drop(e);
    open(dir.path());
}

#[test]
fn reopen_keeps_everything_and_clean_close_skips_tail() {
    let dir = tempfile::tempdir().unwrap();
    let tps: Vec<_> = (0..3).map(|p| TopicPartition::new("orders", p)).collect();
    {
        let e = open(dir.path());
        for round in 0..5 {
            let batches: Vec<_> = tps
                .iter()
                .map(|tp| batch(tp, round * 10..round * 10 + 10, 30))
                .collect();
            e.append(&batches).unwrap();
        }
        e.close().unwrap();
    }
    let e = open(dir.path());
    assert_eq!(
        e.recovery_report().frames_checked,
        0,
        "clean close leaves no tail"
    );
    for tp in &tps {
        assert_eq!(e.durable_offset(tp), Some(50));
        assert_eq!(read_all(&e, tp), batch(tp, 0..50, 30).records);
    }
    drop(e); // no close: like a crash
    let e = open(dir.path());
    assert_eq!(e.durable_offset(&tps[2]), Some(50));
    assert!(e.verify().unwrap().is_clean());
}

#[test]
fn large_records_are_chunked_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig::new(dir.path()).frame_body_bytes_max(4096);
    let tp = TopicPartition::new("big", 0);
    let big = Record::with_value(
        7,
        (0..300_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>(),
    );
    {
        let e = Engine::open(cfg.clone()).unwrap();
        e.append(&[RecordBatch {
            tp: tp.clone(),
            records: vec![record(&tp, 1, 10), big.clone(), record(&tp, 9, 10)],
        }])
        .unwrap();
        assert!(e.stats().frames > 70, "300 KB in 4 KiB frames");
    }
    let e = Engine::open(cfg).unwrap();
    let got = read_all(&e, &tp);
    assert_eq!(got[1], big);
    assert_eq!(got.len(), 3);
    assert!(e.verify().unwrap().is_clean());
}

/// `count_range` agrees with counting a read, for every range over
/// entries with gaps in their offsets, cut by the range or not, and after
/// a truncation.
#[test]
fn count_range_counts_what_a_read_yields() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let tp = TopicPartition::new("count", 0);
    e.append(&[batch(&tp, 0..10, 5)]).unwrap();
    e.append(&[batch(&tp, 10..20, 5)]).unwrap();
    let gappy = [25, 27, 30].map(|o| Record::with_value(o, "v")).to_vec();
    e.append(&[RecordBatch {
        tp: tp.clone(),
        records: gappy,
    }])
    .unwrap();
    e.append(&[batch(&tp, 31..40, 5)]).unwrap();
    let check = |e: &Engine| {
        let held: Vec<i64> = read_all(e, &tp).iter().map(|r| r.offset).collect();
        for from in -1..45 {
            for to in from..46 {
                let want = held.iter().filter(|&&o| o >= from && o < to).count() as u64;
                assert_eq!(e.count_range(&tp, from, to).unwrap(), want, "{from}..{to}");
            }
        }
    };
    check(&e);
    e.truncate_before(&tp, 20).unwrap();
    check(&e);
    assert_eq!(
        e.count_range(&TopicPartition::new("none", 0), 0, 10)
            .unwrap(),
        0
    );
}

#[test]
fn offset_for_time_finds_earliest_at_or_after() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let tp = TopicPartition::new("t", 0);
    // record() stamps offset o with 1_700_000_000_000 + 10 * o.
    for chunk in 0..5 {
        e.append(&[batch(&tp, chunk * 20..chunk * 20 + 20, 10)])
            .unwrap();
    }
    let base = 1_700_000_000_000;
    assert_eq!(e.offset_for_time(&tp, base).unwrap(), Some(0));
    assert_eq!(e.offset_for_time(&tp, base + 255).unwrap(), Some(26));
    assert_eq!(e.offset_for_time(&tp, base + 990).unwrap(), Some(99));
    assert_eq!(e.offset_for_time(&tp, base + 991).unwrap(), None);
    // Retention's cut: the same, but a record without a timestamp stops it
    // (no age), and with nothing young enough it is the next offset.
    assert_eq!(e.offset_for_retention(&tp, base + 255).unwrap(), 26);
    assert_eq!(e.offset_for_retention(&tp, base + 991).unwrap(), 100);
    let mut b = batch(&tp, 100..110, 10);
    b.records[3].timestamp_ms = -1;
    e.append(&[b]).unwrap();
    assert_eq!(e.offset_for_retention(&tp, base + 5000).unwrap(), 103);
    assert_eq!(e.offset_for_time(&tp, base + 5000).unwrap(), None);
    assert_eq!(e.offset_for_retention(&tp, i64::MIN).unwrap(), 0);
    // A timestamp before 1973 (one in seconds, most likely) has no age
    // either: it stops the cut as -1 does, and is found by time as any.
    let other = TopicPartition::new("t", 1);
    let mut b = batch(&other, 0..10, 10);
    b.records[6].timestamp_ms = 1_767_225_600;
    b.records[8].timestamp_ms = cairn_engine::AGELESS_BEFORE_MS;
    e.append(&[b]).unwrap();
    assert_eq!(e.offset_for_retention(&other, base + 5000).unwrap(), 6);
    assert_eq!(e.offset_for_time(&other, 0).unwrap(), Some(0));
    assert_eq!(e.offset_for_time(&other, base + 75).unwrap(), Some(9));
}

/// `durable_offsets_of` answers as a lookup of each key in
/// `durable_offsets` would: the partitions held, none that are not, for
/// keys before, between and after those held (it walks both in order).
#[test]
fn durable_offsets_of_is_durable_offsets_for_the_keys_given() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let held: Vec<TopicPartition> = [("b", 0), ("b", 2), ("b2", 1), ("d", 0), ("d", 7)]
        .iter()
        .map(|&(t, p)| TopicPartition::new(t, p))
        .collect();
    for (i, tp) in held.iter().enumerate() {
        e.append(&[batch(tp, 0..(i as i64 + 1), 10)]).unwrap();
    }
    let all = e.durable_offsets();
    assert_eq!(all.len(), 5, "{all:?}");
    let asked: Vec<TopicPartition> = [
        ("a", 0),
        ("b", 0),
        ("b", 1),
        ("b", 2),
        ("b2", 0),
        ("b2", 1),
        ("c", 0),
        ("d", 7),
        ("e", 0),
    ]
    .iter()
    .map(|&(t, p)| TopicPartition::new(t, p))
    .collect();
    // Every subset of the keys asked, as a mask.
    for mask in 0u32..(1 << asked.len()) {
        let keys: std::collections::BTreeMap<TopicPartition, ()> = asked
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, tp)| (tp.clone(), ()))
            .collect();
        let want: std::collections::BTreeMap<TopicPartition, i64> = keys
            .keys()
            .filter_map(|tp| Some((tp.clone(), *all.get(tp)?)))
            .collect();
        assert_eq!(e.durable_offsets_of(&keys), want, "{mask:b}");
    }
}

/// The record an age cut stops at is named when it has no age or is
/// stamped past a given time (it holds retention back), not when it is
/// merely young, nor at an offset the partition does not hold.
#[test]
fn timestamp_holding_back_names_a_record_without_age_or_from_the_future() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let tp = TopicPartition::new("t", 0);
    // record() stamps offset o with 1_700_000_000_000 + 10 * o.
    let base = 1_700_000_000_000;
    e.append(&[batch(&tp, 0..20, 10)]).unwrap();
    let mut b = batch(&tp, 20..40, 10);
    b.records[3].timestamp_ms = -1;
    b.records[5].timestamp_ms = base + 1_000_000;
    // Stamped in seconds (before 1973 as milliseconds): no age.
    b.records[7].timestamp_ms = 1_767_225_600;
    e.append(&[b]).unwrap();
    let far = base + 500_000;
    let held = |o| {
        e.timestamp_holding_back(&tp, o, far)
            .unwrap()
            .map(|h| (h.timestamp_ms, h.entry_next_offset))
    };
    assert_eq!(held(23), Some((-1, 40)));
    assert_eq!(held(25), Some((base + 1_000_000, 40)));
    assert_eq!(held(27), Some((1_767_225_600, 40)));
    for young in [0, 10, 19, 20, 24, 39] {
        assert_eq!(held(young), None, "{young}");
    }
    for outside in [-1, 40, 1_000] {
        assert_eq!(held(outside), None, "{outside}");
    }
    assert_eq!(
        e.timestamp_holding_back(&TopicPartition::new("none", 0), 0, far)
            .unwrap(),
        None
    );
    // Past the date: only the record without one still holds it back.
    let later = base + 2_000_000;
    assert_eq!(e.timestamp_holding_back(&tp, 25, later).unwrap(), None);
    let h = e.timestamp_holding_back(&tp, 23, later).unwrap().unwrap();
    assert_eq!((h.timestamp_ms, h.entry_next_offset), (-1, 40));
    e.truncate_before(&tp, 20).unwrap();
    assert_eq!(held(10), None, "pruned");
    assert_eq!(held(23), Some((-1, 40)));
    // A truncation before the entry's next offset deletes the record.
    e.truncate_before(&tp, 40).unwrap();
    assert_eq!(held(23), None);
}

#[test]
fn truncate_before_deletes_whole_entries_only() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let other = TopicPartition::new("t", 1);
    {
        let e = open(dir.path());
        for i in 0..6 {
            e.append(&[batch(&tp, i * 10..i * 10 + 10, 10), batch(&other, [i], 5)])
                .unwrap();
        }
        let r = e.truncate_before(&tp, 25).unwrap();
        assert_eq!((r.entries_deleted, r.records_deleted), (2, 20));
        assert_eq!(read_all(&e, &tp).first().unwrap().offset, 20);
        let r = e.truncate_before(&tp, 1000).unwrap();
        assert_eq!(r.entries_deleted, 4);
        assert_eq!(
            e.durable_offset(&tp),
            Some(60),
            "next offset never moves back"
        );
        assert!(read_all(&e, &tp).is_empty());
        assert_eq!(read_all(&e, &other).len(), 6);
        let v = e.verify().unwrap();
        assert!(v.is_clean(), "{:?}", v.problems);
        assert!(v.tombstones >= 1);
        // Appends continue past the old next offset only.
        let d = e.append(&[batch(&tp, [59, 60], 10)]).unwrap();
        assert_eq!((d.appended_records, d.duplicate_records), (1, 1));
    }
    let e = open(dir.path());
    assert_eq!(e.durable_offset(&tp), Some(61));
    let p = e.partitions().into_iter().find(|p| p.tp == tp).unwrap();
    assert_eq!((p.first_offset, p.record_count), (60, 1));
    assert!(e.verify().unwrap().is_clean());
}

/// Retention by size keeps the newest whole entries whose payload bytes
/// fit, counting each entry's own bytes: every limit is checked against a
/// brute-force sum, with another partition's entries interleaved and an
/// entry written but not yet durable (never counted, never cut).
#[test]
fn offset_for_retained_bytes_keeps_the_newest_entries_that_fit() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 1);
    let other = TopicPartition::new("t", 10);
    let e = open(dir.path());
    assert_eq!(e.offset_for_retained_bytes(&tp, 0).unwrap(), 0, "unknown");
    let mut sizes = Vec::new();
    for i in 0..6i64 {
        let b = batch(&tp, i * 10..i * 10 + 10, 5 + i as usize * 7);
        sizes.push(b.records.iter().map(Record::payload_bytes).sum::<u64>());
        e.append(&[b, batch(&other, [i], 1000)]).unwrap();
    }
    e.write(&[batch(&tp, 60..70, 1000)]).unwrap();
    let total: u64 = sizes.iter().sum();
    for bytes_max in (0..=total + 1).step_by(7).chain([total, total - 1]) {
        // The first entry from which the rest fit; 6 (the next offset,
        // 60) when not even the newest does.
        let first = (0..=6)
            .find(|&i| sizes[i..].iter().sum::<u64>() <= bytes_max)
            .unwrap();
        assert_eq!(
            e.offset_for_retained_bytes(&tp, bytes_max).unwrap(),
            first as i64 * 10,
            "bytes_max {bytes_max} of {sizes:?}"
        );
    }
    // After a cut, what is left is counted (the truncation's own sync made
    // the written entry durable).
    let (offset, _) = e
        .truncate_by(&tp, |e| e.offset_for_retained_bytes(&tp, sizes[5]))
        .unwrap();
    assert_eq!(offset, 50);
    let end = e.durable_offset(&tp).unwrap();
    assert_eq!(e.offset_for_retained_bytes(&tp, u64::MAX).unwrap(), 50);
    assert_eq!(e.offset_for_retained_bytes(&tp, 0).unwrap(), end);
}

/// A cut above the durable next offset deletes only what is durable: an
/// entry written and not yet synced (a put under `interval:MS`) stays, and
/// reads back once synced.
#[test]
fn truncate_before_leaves_entries_not_yet_durable() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = open(dir.path());
    e.append(&[batch(&tp, 0..10, 10)]).unwrap();
    e.write(&[batch(&tp, 10..20, 10)]).unwrap();
    assert_eq!(e.durable_offset(&tp), Some(10));
    let (offset, plan) = e.truncate_plan_by(&tp, |_| Ok(1000)).unwrap();
    assert_eq!(
        (offset, plan.records_deleted),
        (10, 10),
        "the plan says so too"
    );
    let (offset, r) = e.truncate_by(&tp, |_| Ok(1000)).unwrap();
    assert_eq!(offset, 10, "the cut stops at what is durable");
    assert_eq!(r.records_deleted, 10);
    e.sync().unwrap();
    assert_eq!(e.durable_offset(&tp), Some(20));
    let offsets: Vec<i64> = read_all(&e, &tp).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (10..20).collect::<Vec<_>>());
    assert!(e.verify().unwrap().is_clean());
}

/// A truncation larger than one step is made in several durable steps that
/// together delete exactly what one would, merge their tombstones across
/// steps, keep the other partition's entries (interleaved in the log) and
/// leave a clean archive; the plan predicts it without deleting anything.
#[test]
fn truncate_before_works_in_steps() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let other = TopicPartition::new("t", 1);
    let entries = TRUNCATE_ENTRIES_PER_STEP as i64 * 2 + 100;
    let e = open(dir.path());
    // One entry per write and partition; one fsync at the end.
    for i in 0..entries {
        let mut batches = vec![batch(&tp, [i * 2, i * 2 + 1], 10)];
        if i % 2 == 0 {
            batches.push(batch(&other, [i], 10));
        }
        e.write(&batches).unwrap();
    }
    e.sync().unwrap();
    let cut = (entries - 50) * 2 + 1; // inside an entry: that entry is kept
    let plan = e.truncate_plan(&tp, cut).unwrap();
    assert_eq!(plan.entries_deleted, entries as u64 - 50);
    assert_eq!(plan.records_deleted, 2 * (entries as u64 - 50));
    assert_eq!(
        read_all(&e, &tp).len() as i64,
        entries * 2,
        "a plan deletes nothing"
    );
    let r = e.truncate_before(&tp, cut).unwrap();
    assert_eq!(r, plan);
    let kept = read_all(&e, &tp);
    assert_eq!(kept.first().unwrap().offset, cut - 1);
    assert_eq!(kept.len(), 100);
    assert_eq!(read_all(&e, &other).len() as i64, entries / 2 + entries % 2);
    let p = e.partitions().into_iter().find(|p| p.tp == tp).unwrap();
    assert_eq!(
        (p.first_offset, p.next_offset, p.record_count),
        (cut - 1, entries * 2, 100)
    );
    let v = e.verify().unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
    let again = e.truncate_plan(&tp, cut).unwrap();
    assert_eq!(
        (again.entries_deleted, again.first_offset_after),
        (0, Some(cut - 1))
    );
    assert_eq!(
        plan.first_offset_after,
        Some(cut - 1),
        "the plan names the new first offset"
    );
    drop(e);
    let e = open(dir.path());
    let p = e.partitions().into_iter().find(|p| p.tp == tp).unwrap();
    assert_eq!(
        (p.first_offset, p.next_offset, p.record_count),
        (cut - 1, entries * 2, 100)
    );
    assert!(e.verify().unwrap().is_clean());
}

/// Entries of many frames: the frames bound, not the entries bound, ends
/// each step, and the steps still delete exactly what was asked.
#[test]
fn truncate_steps_are_bounded_by_frames_too() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path()).frame_body_bytes_max(1024)).unwrap();
    let tp = TopicPartition::new("t", 0);
    // 20 records of 800 B: ~14 frames an entry, so ~580 entries a step.
    let entries = 1300i64;
    for i in 0..entries {
        e.write(&[batch(&tp, i * 20..i * 20 + 20, 800)]).unwrap();
    }
    e.sync().unwrap();
    let plan = e.truncate_plan(&tp, (entries - 1) * 20).unwrap();
    let frames_per_entry = plan.frames_deleted / plan.entries_deleted;
    assert!(frames_per_entry >= 10, "{plan:?}");
    assert!(
        plan.frames_deleted > 2 * cairn_engine::TRUNCATE_FRAMES_PER_STEP,
        "three steps or more: {plan:?}"
    );
    let r = e.truncate_before(&tp, (entries - 1) * 20).unwrap();
    assert_eq!(r, plan);
    assert_eq!(read_all(&e, &tp).len(), 20);
    let v = e.verify().unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
    assert_eq!(v.tombstones, 1);
}

/// A store of `entries` entries of t/0, one record each (offsets
/// 0..entries), synced.
fn one_record_entries(entries: i64) -> (tempfile::TempDir, Engine, TopicPartition) {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let tp = TopicPartition::new("t", 0);
    for i in 0..entries {
        e.write(&[batch(&tp, [i], 10)]).unwrap();
    }
    e.sync().unwrap();
    (dir, e, tp)
}

/// A truncation told to stop between steps ends after the step in
/// progress: what it deleted is a prefix, the archive is consistent, and a
/// later truncation finishes it.
#[test]
fn a_truncation_stops_between_steps_when_told() {
    let per_step = cairn_engine::TRUNCATE_ENTRIES_PER_STEP as i64;
    let entries = per_step + per_step / 2;
    let (_dir, e, tp) = one_record_entries(entries);
    let asked = std::cell::Cell::new(0);
    let go = || {
        asked.set(asked.get() + 1);
        asked.get() < 2
    };
    let (offset, r, finished) = e.truncate_by_while(&tp, |_| Ok(entries), go).unwrap();
    assert_eq!((offset, finished, asked.get()), (entries, false, 2));
    assert_eq!(r.entries_deleted, per_step as u64, "one step: {r:?}");
    assert_eq!(r.first_offset_after, Some(per_step));
    let p = &e.partitions()[0];
    assert_eq!(
        (p.first_offset, p.record_count),
        (per_step, (entries - per_step) as u64)
    );
    assert!(e.verify().unwrap().is_clean());
    let (_, rest, finished) = e.truncate_by_while(&tp, |_| Ok(entries), || true).unwrap();
    assert!(finished);
    assert_eq!(rest.entries_deleted, (entries - per_step) as u64);
    assert_eq!(e.partitions()[0].record_count, 0);
}

/// A truncation told no before its first step (one that waited for the
/// lock behind a backup while its client went) deletes nothing: until the
/// night of 2026-12-04 it deleted a step first.
#[test]
fn a_truncation_told_no_at_once_deletes_nothing() {
    let entries = cairn_engine::TRUNCATE_ENTRIES_PER_STEP as i64 / 2;
    let (_dir, e, tp) = one_record_entries(entries);
    let asked = std::cell::Cell::new(0);
    let go = || {
        asked.set(asked.get() + 1);
        false
    };
    let (offset, r, finished) = e.truncate_by_while(&tp, |_| Ok(entries), go).unwrap();
    assert_eq!((offset, finished, asked.get()), (entries, false, 1));
    assert_eq!(r.entries_deleted, 0, "{r:?}");
    assert_eq!(e.partitions()[0].record_count, entries as u64);
    assert!(e.verify().unwrap().is_clean());
}

/// A plan told to stop ends within `PLAN_ENTRIES_PER_ASK` entries of its
/// count, says it did not finish, and deletes nothing; one that goes on
/// counts what the truncation deletes.
#[test]
fn a_plan_stops_counting_when_told() {
    let per_ask = cairn_engine::PLAN_ENTRIES_PER_ASK as i64;
    let entries = 3 * per_ask;
    let (_dir, e, tp) = one_record_entries(entries);
    let asked = std::cell::Cell::new(0);
    let go = || {
        asked.set(asked.get() + 1);
        asked.get() < 2
    };
    let (offset, r, finished) = e.truncate_plan_by_while(&tp, |_| Ok(entries), go).unwrap();
    assert_eq!((offset, finished, asked.get()), (entries, false, 2));
    assert_eq!(r.entries_deleted, 2 * per_ask as u64 - 1, "{r:?}");
    assert_eq!(r.first_offset_after, None);
    assert_eq!(e.partitions()[0].record_count, entries as u64);
    let (_, whole, finished) = e
        .truncate_plan_by_while(&tp, |_| Ok(entries), || true)
        .unwrap();
    assert!(finished);
    assert_eq!(whole.entries_deleted, entries as u64);
    assert_eq!(e.truncate_before(&tp, entries).unwrap(), whole);
}

/// A truncation that panics between its steps (a bug) poisons the engine:
/// what it left half done is unknown. What waits on the truncation lock
/// after it refuses or reports, as for any poisoned engine, instead of
/// panicking in turn.
#[test]
fn a_truncation_that_panics_poisons_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let tp = TopicPartition::new("t", 0);
    // One entry a write: more entries than one step deletes.
    let entries = TRUNCATE_ENTRIES_PER_STEP as i64 + 10;
    for o in 0..entries {
        e.write(&[batch(&tp, [o], 10)]).unwrap();
    }
    e.sync().unwrap();
    // `go` is asked before each step, the first included: it panics when
    // asked after the first.
    let asked = std::cell::Cell::new(0);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.truncate_by_while(
            &tp,
            |_| Ok(entries),
            || {
                asked.set(asked.get() + 1);
                assert!(
                    asked.get() < 2,
                    "injected by the test, after the first step"
                );
                true
            },
        )
    }));
    assert!(panicked.is_err());
    assert!(e.is_poisoned());
    let err = e.truncate_before(&tp, 5).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Poisoned {
                op: "truncation",
                ..
            }
        ),
        "{err}"
    );
    // A verify still runs (the checks a failed write cannot upset).
    assert!(e.verify().is_ok());
    assert!(e.append(&[batch(&tp, [entries], 10)]).is_err());
    drop(e);
    // The reopen recovers everything acknowledged that the first, durable
    // step did not delete.
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(read_all(&e, &tp).len(), 10);
    assert!(e.verify().unwrap().is_clean());
}

/// A caller's `cut` that panics has deleted nothing: the panic goes on up,
/// and the engine is not poisoned (nor is the truncation lock it ran under
/// left unusable).
#[test]
fn a_cut_that_panics_deletes_nothing_and_poisons_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let tp = TopicPartition::new("t", 0);
    e.append(&[batch(&tp, 0..10, 10)]).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.truncate_by(&tp, |_| panic!("injected by the test"))
    }));
    assert!(panicked.is_err());
    assert!(!e.is_poisoned());
    assert_eq!(read_all(&e, &tp).len(), 10);
    e.append(&[batch(&tp, 10..11, 10)]).unwrap();
    assert_eq!(e.truncate_before(&tp, 10).unwrap().entries_deleted, 1);
    assert_eq!(read_all(&e, &tp).len(), 1);
    assert!(e.verify().unwrap().is_clean());
}

/// One call that names a partition twice, its offsets going back from one
/// batch to the next, is refused whole: dropped as duplicates of what the
/// call's first batch wrote, the lower records would be lost without ever
/// having been stored. Across calls, records below the next offset are a
/// redelivery, and skipped.
#[test]
fn offsets_going_back_within_one_call_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let (t0, t1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let err = e
        .append(&[
            batch(&t0, [10], 10),
            batch(&t1, [0], 10),
            batch(&t0, [0], 10),
        ])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidInput(InvalidInput::OffsetsNotIncreasing {
                partition: 0,
                previous: 10,
                offset: 0,
                ..
            })
        ),
        "{err}"
    );
    assert!(e.partitions().is_empty(), "nothing written");
    // In order, the same records are taken; a later call's lower offsets
    // are redelivered ones.
    let d = e
        .append(&[
            batch(&t0, [0], 10),
            batch(&t1, [0], 10),
            batch(&t0, [10], 10),
        ])
        .unwrap();
    assert_eq!((d.get(&t0), d.appended_records), (Some(11), 3));
    let d = e.append(&[batch(&t0, [0, 10, 11], 10)]).unwrap();
    assert_eq!((d.duplicate_records, d.appended_records), (2, 1));
    assert_eq!(read_all(&e, &t0).len(), 3);
}

/// Settings sled would panic on are refused wherever the store is opened,
/// also by `verify_store`, which opens no engine.
#[test]
fn settings_out_of_range_are_refused_by_verify_store_too() {
    let dir = tempfile::tempdir().unwrap();
    open(dir.path()).close().unwrap();
    let mut cfg = EngineConfig::new(dir.path());
    cfg.cache_capacity_bytes = 0;
    assert!(cfg.validate().is_err());
    let err = cairn_engine::verify_store(&cfg).unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput(InvalidInput::Config(_))),
        "{err}"
    );
    assert!(matches!(
        cfg.open_sled(),
        Err(Error::InvalidInput(InvalidInput::Config(_)))
    ));
}

/// A checkpoint interval of 0 (a checkpoint insert at nearly every write)
/// or of `u64::MAX` (an open after a crash scans the whole log) is refused,
/// naming the setting; the bounds themselves are taken.
#[test]
fn a_checkpoint_interval_out_of_range_is_refused() {
    use cairn_engine::{CHECKPOINT_INTERVAL_BYTES_MAX, CHECKPOINT_INTERVAL_BYTES_MIN};
    let dir = tempfile::tempdir().unwrap();
    for n in [
        0,
        CHECKPOINT_INTERVAL_BYTES_MIN - 1,
        CHECKPOINT_INTERVAL_BYTES_MAX + 1,
        u64::MAX,
    ] {
        let cfg = EngineConfig::new(dir.path()).checkpoint_interval_bytes(n);
        match cfg.validate() {
            Err(InvalidInput::Config(m)) => assert!(m.contains("checkpoint_interval_bytes"), "{m}"),
            other => panic!("{n}: {other:?}"),
        }
        assert!(matches!(
            Engine::open(cfg),
            Err(Error::InvalidInput(InvalidInput::Config(_)))
        ));
    }
    assert!(!dir.path().join("sled").exists(), "nothing was made");
    for n in [CHECKPOINT_INTERVAL_BYTES_MIN, CHECKPOINT_INTERVAL_BYTES_MAX] {
        let cfg = EngineConfig::new(dir.path()).checkpoint_interval_bytes(n);
        cfg.validate().unwrap();
    }
}

/// Partitions interleaved in the log, pruned one after another in either
/// order: the tombstones merge both ways into one per deleted run of the
/// log. Before they merged upwards too, ~one tombstone per append stayed in
/// each old leaf, which kept sled from reclaiming the deleted frames' bytes
/// (the store grew by ~22 % of what was written, round after round;
/// `cargo run --release -p cairn-bench --bin prune-space`).
#[test]
fn tombstones_merge_into_one_per_deleted_run() {
    for order in [[0, 1, 2, 3], [3, 1, 0, 2]] {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        let tps: Vec<_> = (0..4).map(|p| TopicPartition::new("t", p)).collect();
        for i in 0..50 {
            let bs: Vec<_> = tps.iter().map(|tp| batch(tp, [i], 10)).collect();
            e.write(&bs).unwrap();
        }
        e.sync().unwrap();
        for p in order {
            e.truncate_before(&tps[p], 40).unwrap();
        }
        let v = e.verify().unwrap();
        assert!(v.is_clean(), "{order:?}: {:?}", v.problems);
        assert_eq!(v.tombstones, 1, "{order:?}");
        assert_eq!(v.records, 40, "{order:?}");
        // Everything else goes too, and the run still ends in one tombstone.
        for tp in &tps {
            e.truncate_before(tp, 50).unwrap();
        }
        let v = e.verify().unwrap();
        assert!(v.is_clean(), "{order:?}: {:?}", v.problems);
        assert_eq!((v.tombstones, v.records), (1, 0), "{order:?}");
        drop(e);
        let e = open(dir.path());
        assert!(e.verify().unwrap().is_clean());
        let d = e.append(&[batch(&tps[0], [50], 10)]).unwrap();
        assert_eq!(d.appended_records, 1);
    }
}

#[test]
fn writes_are_durable_only_after_a_sync_and_share_it() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    e.append(&[batch(&a, 0..5, 20)]).unwrap();
    let fsyncs = e.stats().fsyncs;

    let w1 = e.write(&[batch(&a, 3..10, 20)]).unwrap();
    assert_eq!((w1.appended_records, w1.duplicate_records), (5, 2));
    assert_eq!(
        w1.offsets.get(&a),
        Some(&10),
        "written, reported as written"
    );
    let w2 = e
        .write(&[batch(&a, 10..12, 20), batch(&b, 0..3, 20)])
        .unwrap();
    assert_eq!(w2.offsets.get(&b), Some(&3));
    // Nothing of it is durable, readable or counted as such yet.
    assert_eq!(e.durable_offset(&a), Some(5));
    assert_eq!(e.durable_offset(&b), None);
    assert_eq!(read_all(&e, &a).len(), 5);
    assert!(read_all(&e, &b).is_empty());
    assert_eq!(e.stats().fsyncs, fsyncs, "write does not fsync");
    // Redelivery of written records is dropped before any sync.
    let w3 = e.write(&[batch(&a, 8..12, 20)]).unwrap();
    assert_eq!((w3.appended_records, w3.duplicate_records), (0, 4));

    e.sync().unwrap();
    assert_eq!(e.stats().fsyncs, fsyncs + 1, "one fsync for three writes");
    assert_eq!(e.durable_offset(&a), Some(12));
    assert_eq!(e.durable_offset(&b), Some(3));
    assert_eq!(read_all(&e, &a), batch(&a, 0..12, 20).records);
    e.sync().unwrap();
    assert_eq!(e.stats().fsyncs, fsyncs + 1, "nothing new: no fsync");
    drop(e);
    let e = open(dir.path());
    assert_eq!(e.durable_offset(&a), Some(12));
    assert_eq!(read_all(&e, &b), batch(&b, 0..3, 20).records);
    assert!(e.verify().unwrap().is_clean());
}

/// An engine dropped without a close syncs what it wrote (by its own path,
/// which poisons on a failure, rather than sled's drop, which panics), and
/// removes its open mark: the next open finds the write and no unclean
/// stop. A crash before the sync that loses the unsynced writes is
/// `torn_append.rs`'s and the `wal_crash` fuzz target's (kill9's SIGKILL
/// keeps the page cache, so its stores keep them).
#[test]
fn an_unsynced_write_is_synced_by_the_drop() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    {
        let e = open(dir.path());
        e.append(&[batch(&tp, 0..4, 20)]).unwrap();
        e.write(&[batch(&tp, 4..8, 20)]).unwrap();
        assert_eq!(e.durable_offset(&tp), Some(4), "written, not synced");
    }
    let e = open(dir.path());
    assert_eq!(e.durable_offset(&tp), Some(8));
    assert!(!e.recovery_report().unclean_stop_cache_dropped);
    // Redelivery from the last commit (4) stores each record once.
    e.append(&[batch(&tp, 4..10, 20)]).unwrap();
    assert_eq!(read_all(&e, &tp), batch(&tp, 0..10, 20).records);
}

/// A store holding records 0..10 of `t/0`, closed.
fn closed_store_of_ten() -> (tempfile::TempDir, TopicPartition) {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let e = open(dir.path());
    e.append(&[batch(&tp, 0..10, 10)]).unwrap();
    e.close().unwrap();
    (dir, tp)
}

/// Whatever stands where the poison mark goes (here a FIFO, which would
/// block a plain open for ever) is acted on as a mark of this boot, never
/// waited on, and removed once the store recovers.
#[test]
fn a_fifo_in_place_of_the_poison_mark_does_not_block_the_open() {
    let (dir, tp) = closed_store_of_ten();
    let mark = dir.path().join(cairn_engine::poisoned::POISON_FILE);
    // Made in-process: a child spawned now would inherit, until its exec,
    // the lock files of the other tests' engines, and hold their locks.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &mark,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let e = open(dir.path());
    let before = e.recovery_report().poisoned_before.clone().unwrap();
    assert!(before.cache_dropped, "{before:?}");
    assert!(!mark.exists());
    assert_eq!(read_all(&e, &tp).len(), 10);
}

/// The watermark's files and the open mark are never opened through a
/// link someone planted under their names (a backup's directory may be
/// anyone's): a planted `cairn.durable.new` or `cairn.open` is replaced,
/// its target untouched, and a linked `cairn.durable` refuses the open.
#[test]
fn the_watermark_files_are_never_opened_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"not the store's").unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::symlink(&victim, data.join("cairn.durable.new")).unwrap();
    // The open mark's name too: replaced, not written through.
    std::os::unix::fs::symlink(&victim, data.join(cairn_engine::poisoned::OPEN_FILE)).unwrap();
    let e = open(&data);
    assert!(!data.join(cairn_engine::poisoned::OPEN_FILE).is_symlink());
    e.close().unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"not the store's");
    assert!(!data.join("cairn.durable.new").exists());
    let durable = data.join("cairn.durable");
    std::fs::remove_file(&durable).unwrap();
    std::os::unix::fs::symlink(&victim, &durable).unwrap();
    match Engine::open(EngineConfig::new(&data)) {
        Err(cairn_engine::Error::Io { path, source, .. }) => {
            assert_eq!(path, durable);
            assert_eq!(source.raw_os_error(), Some(libc::ELOOP), "{source}");
        }
        other => panic!("expected the link refused, got {:?}", other.map(|_| ())),
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"not the store's");
}

/// A FIFO in place of the watermark refuses the open at once, naming the
/// file, where it hung every open (holding the store's lock) until
/// something wrote to it (since the night of 2026-12-04).
#[test]
fn a_fifo_in_place_of_the_watermark_refuses_the_open_at_once() {
    let (dir, _tp) = closed_store_of_ten();
    let durable = dir.path().join(cairn_engine::watermark::WATERMARK_FILE);
    std::fs::remove_file(&durable).unwrap();
    // Made in-process, as the poison mark's test makes its FIFO.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &durable,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    match Engine::open(EngineConfig::new(dir.path())) {
        Err(cairn_engine::Error::Io { path, source, .. }) => {
            assert_eq!(path, durable);
            assert!(
                source.to_string().contains("not a regular file"),
                "{source}"
            );
        }
        other => panic!("expected the FIFO refused, got {:?}", other.map(|_| ())),
    }
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path()));
    assert!(
        v.is_err(),
        "the stopped verify refuses it too: {:?}",
        v.map(|_| ())
    );
}

/// A verify of a stopped store given up part-way (`cairn verify` after a
/// signal) is `Interrupted`, and lets the store go as a whole verify does:
/// its open mark removed, so that the next open in this boot does not take
/// it for a crash (until 2026-12-06 the signal killed the process, leaving
/// the mark); a mark that was there before stays.
#[test]
fn a_verify_given_up_removes_its_open_mark() {
    let (dir, tp) = closed_store_of_ten();
    let mark = dir.path().join(cairn_engine::poisoned::OPEN_FILE);
    let stop = std::sync::atomic::AtomicBool::new(true);
    match cairn_engine::verify_store_unless(&EngineConfig::new(dir.path()), &stop) {
        Err(Error::Interrupted { .. }) => {}
        other => panic!("expected Interrupted, got {other:?}"),
    }
    assert!(!mark.exists(), "the verify's own mark went with it");
    let e = open(dir.path());
    assert!(!e.recovery_report().unclean_stop_cache_dropped);
    assert_eq!(read_all(&e, &tp).len(), 10);
    // A mark that was there before (an engine of this boot killed: put
    // back by hand) stays for the next open.
    let left = std::fs::read(&mark).expect("an open engine's mark");
    e.close().unwrap();
    std::fs::write(&mark, &left).unwrap();
    match cairn_engine::verify_store_unless(&EngineConfig::new(dir.path()), &stop) {
        Err(Error::Interrupted { .. }) => {}
        other => panic!("expected Interrupted, got {other:?}"),
    }
    assert!(mark.exists(), "the killed engine's mark stays");
}

/// An open engine keeps its open mark until it is closed, or dropped after
/// a sync that succeeded. One left by an engine of this boot that stopped
/// without either (what a kill leaves: put back here by hand, since this
/// process cannot die) makes the next open sync the store and drop its
/// cached pages, and a verify say so; one of another boot does not.
#[test]
fn an_engine_that_stopped_without_a_close_is_recovered_from_the_disk() {
    let (dir, tp) = closed_store_of_ten();
    let mark = dir.path().join(cairn_engine::poisoned::OPEN_FILE);
    assert!(!mark.exists(), "closed: no mark");
    let e = open(dir.path());
    assert!(!e.recovery_report().unclean_stop_cache_dropped);
    let left = std::fs::read(&mark).expect("an open engine's mark");
    // Its shape, as FORMAT.md documents it: the boot's identity, one line.
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|b| b.trim().to_owned())
        .unwrap_or_default();
    assert_eq!(String::from_utf8_lossy(&left), format!("{boot}\n"));
    e.close().unwrap();
    assert!(!mark.exists(), "closed: no mark");
    // A kill of the engine that held it.
    std::fs::write(&mark, &left).unwrap();
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert!(v.is_clean(), "{v:?}");
    assert!(
        v.notes
            .iter()
            .any(|n| n.contains("stopped without a close")),
        "{:?}",
        v.notes
    );
    assert!(mark.exists(), "verify leaves the mark for the next open");
    let e = open(dir.path());
    assert!(e.recovery_report().unclean_stop_cache_dropped);
    assert_eq!(e.recovery_report().poisoned_before, None);
    assert_eq!(read_all(&e, &tp).len(), 10);
    e.append(&[batch(&tp, 10..20, 10)]).unwrap();
    // Dropped without a close: its drop syncs, and then the mark goes.
    drop(e);
    assert!(!mark.exists(), "dropped after a sync: no mark");
    let e = open(dir.path());
    assert!(!e.recovery_report().unclean_stop_cache_dropped);
    assert_eq!(read_all(&e, &tp).len(), 20);
    e.close().unwrap();
    let Some(now) = boot_id() else {
        return;
    };
    let other = if now.starts_with('0') {
        "10000000-0000-4000-8000-000000000000\n"
    } else {
        "00000000-0000-4000-8000-000000000000\n"
    };
    std::fs::write(&mark, other).unwrap();
    let e = open(dir.path());
    assert!(!e.recovery_report().unclean_stop_cache_dropped);
    e.close().unwrap();
    assert!(!mark.exists());
}

/// This boot's identity; `None`, skipping the test's part that needs it,
/// on a kernel without one, which fails under `CAIRN_CI` (Linux has one).
fn boot_id() -> Option<String> {
    let read = std::fs::read_to_string("/proc/sys/kernel/random/boot_id");
    if read.is_err() {
        common::skip("no boot identity on this kernel (/proc/sys/kernel/random/boot_id): every mark counts as this boot's");
    }
    read.ok()
}

/// A mark whose first line is no boot identity (cut short, stray bytes,
/// not UTF-8) is acted on as this boot's; only a well-formed identity of
/// another boot lets the open trust the page cache.
#[test]
fn a_garbled_poison_mark_counts_as_this_boots() {
    let Some(now) = boot_id() else {
        return;
    };
    let other = if now.starts_with('0') {
        "10000000-0000-4000-8000-000000000000"
    } else {
        "00000000-0000-4000-8000-000000000000"
    };
    let this_boot = format!("{}\nfsync: EIO", now.trim());
    let other_boot = format!("{other}\nfsync: EIO");
    let cases: [(&[u8], bool); 5] = [
        (&now.as_bytes()[..20], true),
        (b"\xff\xfe not text\nfsync: EIO", true),
        (b"", true),
        (this_boot.as_bytes(), true),
        (other_boot.as_bytes(), false),
    ];
    for (mark_bytes, dropped) in cases {
        let (dir, tp) = closed_store_of_ten();
        let mark = dir.path().join(cairn_engine::poisoned::POISON_FILE);
        std::fs::write(&mark, mark_bytes).unwrap();
        let e = open(dir.path());
        let before = e.recovery_report().poisoned_before.clone().unwrap();
        assert_eq!(
            before.cache_dropped,
            dropped,
            "{:?}: {before:?}",
            String::from_utf8_lossy(mark_bytes)
        );
        assert!(!mark.exists());
        assert_eq!(read_all(&e, &tp).len(), 10);
    }
}

/// A partition's start, recorded before any of its records: durable at
/// once, kept by a crash (no close), refusing records below it, and left
/// alone for a partition the store already holds.
#[test]
fn a_recorded_start_is_durable_before_any_record() {
    let dir = tempfile::tempdir().unwrap();
    let (new, held) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    {
        let e = open(dir.path());
        e.append(&[batch(&held, 0..5, 10)]).unwrap();
        let starts = [(new.clone(), 40), (held.clone(), 100)]
            .into_iter()
            .collect();
        let durable = e.start_partitions(&starts).unwrap();
        assert_eq!(
            durable,
            [(new.clone(), 40), (held.clone(), 5)].into_iter().collect()
        );
        assert_eq!(e.durable_offset(&new), Some(40));
        assert_eq!(e.read(&new, 0).unwrap().count(), 0);
        // Reopened without a close, so past no checkpoint: recovery keeps
        // a summary written with no frame.
        drop(e);
    }
    let e = open(dir.path());
    assert_eq!(e.durable_offset(&new), Some(40));
    assert_eq!(e.durable_offset(&held), Some(5));
    let p = e.partition(&new).unwrap();
    assert_eq!((p.first_offset, p.next_offset, p.record_count), (40, 40, 0));
    assert!(e.verify().unwrap().is_clean());
    let d = e.append(&[batch(&new, [38, 39, 40, 41], 10)]).unwrap();
    assert_eq!((d.appended_records, d.duplicate_records), (2, 2));
    let offs: Vec<i64> = read_all(&e, &new).iter().map(|r| r.offset).collect();
    assert_eq!(offs, vec![40, 41]);
    let p = e.partition(&new).unwrap();
    assert_eq!((p.first_offset, p.next_offset, p.record_count), (40, 42, 2));
    assert!(e.verify().unwrap().is_clean());
    for bad in [-1, i64::MAX] {
        let starts = [(TopicPartition::new("t", 2), bad)].into_iter().collect();
        assert!(matches!(
            e.start_partitions(&starts),
            Err(Error::InvalidInput(InvalidInput::StartOffset { offset, .. })) if offset == bad
        ));
    }
    e.close().unwrap();
}

/// A sled file that cannot be read fails the open with an error naming
/// sled's folder (until the night of 2026-12-04 only sled's own text, which
/// names no path, said what failed).
#[test]
fn a_sled_file_that_cannot_be_read_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig::new(dir.path());
    Engine::open(cfg.clone()).unwrap().close().unwrap();
    // Not a file any more: reading it fails, as root too.
    let conf = cfg.sled_path().join("conf");
    std::fs::remove_file(&conf).unwrap();
    std::fs::create_dir(&conf).unwrap();
    match Engine::open(cfg.clone()) {
        Err(e @ Error::Io { .. }) => {
            let said = e.to_string();
            assert!(
                said.contains("open sled") && said.contains(&cfg.sled_path().display().to_string()),
                "{said}"
            );
        }
        Err(other) => panic!("expected an I/O error naming the path, got {other}"),
        Ok(_) => panic!("opened with sled's conf unreadable"),
    }
}

/// A poison mark's new copy left behind (a full disk cut its write short)
/// is removed by the next open that recovers the store: it stayed for good
/// until 2026-12-07 (an audit).
#[test]
fn a_poison_mark_copy_left_behind_is_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&[cairn_engine::fuzzing::batch(&tp, 0..3, 10)])
            .unwrap();
        e.close().unwrap();
    }
    let stale = dir
        .path()
        .join(cairn_engine::poisoned::POISON_REPLACEMENT_FILE);
    std::fs::write(&stale, "").unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(!stale.exists(), "the stale copy stayed");
    assert_eq!(e.durable_offset(&tp), Some(3));
    e.close().unwrap();
}
