//! Archive retention while archiving (`cairn run --retain`,
//! `--retain-bytes`; pruner.rs),
//! through the archive sink's own contract: the pass at start prunes what
//! is already old, the pass at a clean stop prunes what was put since, the
//! next offsets (where a run resumes) never move, and an archive the pass
//! cannot prune stops the start with the place named.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn_connector::pruner::Retention;
use cairn_connector::{ArchiveSink, SinkTask};
use cairn_engine::fuzzing::{batch, record};
use cairn_engine::{Engine, EngineConfig, RecordBatch, TopicPartition};

const DAY: Duration = Duration::from_secs(86_400);
const HOUR: Duration = Duration::from_secs(3_600);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Records `offsets` of `tp` stamped now (`fuzzing::record` stamps 2023).
fn fresh(tp: &TopicPartition, offsets: std::ops::Range<i64>) -> RecordBatch {
    let t = now_ms();
    RecordBatch {
        tp: tp.clone(),
        records: offsets
            .map(|o| {
                let mut r = record(tp, o, 20);
                r.timestamp_ms = t;
                r
            })
            .collect(),
    }
}

fn by_age(age: Duration) -> Retention {
    Retention {
        age: Some(age),
        ..Retention::default()
    }
}

/// The archive sink on `engine`, keeping a day: a pass now, the next in an
/// hour (so in these tests only the passes at start and at stop run).
fn pruning_a_day(engine: &Arc<Engine>) -> ArchiveSink {
    ArchiveSink::new(engine.clone())
        .with_retention(by_age(DAY), HOUR, no_failure())
        .unwrap()
}

/// A failure hook for runs where no pass on the thread may fail.
fn no_failure() -> cairn_connector::pruner::FailureHook {
    Box::new(|e| panic!("a pass failed: {e}"))
}

/// Records `offsets` of `tp` without a timestamp (-1).
fn unstamped(tp: &TopicPartition, offsets: std::ops::Range<i64>) -> RecordBatch {
    let mut b = batch(tp, offsets, 20);
    for r in &mut b.records {
        r.timestamp_ms = -1;
        r.timestamp_type = cairn_engine::TimestampType::NotAvailable;
    }
    b
}

/// `(first offset, next offset, records)` per partition.
fn held(e: &Engine) -> BTreeMap<TopicPartition, (i64, i64, u64)> {
    e.partitions()
        .into_iter()
        .map(|p| (p.tp, (p.first_offset, p.next_offset, p.record_count)))
        .collect()
}

/// A closed store of t/0 (offsets 0..50) and t/1 (0..30), every record
/// stamped 2023 (`fuzzing::record`): all older than a day.
fn stamped_2023() -> (tempfile::TempDir, TopicPartition, TopicPartition) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&a, 0..50, 20), batch(&b, 0..30, 20)])
        .unwrap();
    e.close().unwrap();
    (dir, a, b)
}

#[test]
fn retention_prunes_at_start_and_at_stop_and_keeps_next_offsets() {
    let (dir, a, b) = stamped_2023();
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let mut sink = pruning_a_day(&engine);
    assert_eq!(
        held(&engine),
        BTreeMap::from([(a.clone(), (50, 50, 0)), (b.clone(), (30, 30, 0))]),
        "the pass at start prunes the records of 2023"
    );
    // A run resumes where the archive ends, pruned or not.
    let resume = sink.open(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(resume, BTreeMap::from([(a.clone(), 50), (b.clone(), 30)]));
    // Old records, then fresh ones, then old ones again (a producer's
    // clock is its own): the cut is the first record young enough, so the
    // old records above it stay. Separate puts make separate entries.
    sink.put(&[batch(&a, 50..60, 20)]).unwrap();
    sink.put(&[fresh(&a, 60..65), fresh(&b, 30..35)]).unwrap();
    sink.put(&[batch(&a, 65..70, 20)]).unwrap();
    let consumed = BTreeMap::from([(a.clone(), 70), (b.clone(), 35)]);
    assert_eq!(sink.pre_commit(&consumed).unwrap(), consumed);
    drop(engine);
    sink.stop().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(
        held(&e),
        BTreeMap::from([(a.clone(), (60, 70, 10)), (b.clone(), (30, 35, 5))]),
        "the pass at stop prunes what was put since, below the cut only"
    );
    let v = e.verify().unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
    let kept: Vec<i64> = e.read(&a, 0).unwrap().map(|r| r.unwrap().offset).collect();
    assert_eq!(kept, (60..70).collect::<Vec<_>>());
}

/// A run stopped during its first pass (a signal while `--retain` catches
/// up on a large archive) does not wait the pass out: it ends after the
/// durable step in progress, and no last pass at the stop does its work
/// after all; the next start's pass finishes it. A stop that cut nothing
/// short still makes its last pass.
#[test]
fn a_stop_cuts_the_first_pass_short_and_the_next_start_finishes_it() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (dir, a, b) = stamped_2023();
    let all = BTreeMap::from([(a.clone(), (0, 50, 50)), (b.clone(), (0, 30, 30))]);
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let stop = Arc::new(AtomicBool::new(true));
    let mut sink = ArchiveSink::new(engine.clone())
        .with_retention_until(by_age(DAY), HOUR, no_failure(), stop.clone())
        .unwrap();
    assert_eq!(held(&engine), all, "stopped before its first partition");
    drop(engine);
    sink.stop().unwrap();
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    assert_eq!(held(&engine), all, "no last pass after a pass cut short");
    stop.store(false, Ordering::Relaxed);
    let mut sink = ArchiveSink::new(engine.clone())
        .with_retention_until(by_age(DAY), HOUR, no_failure(), stop.clone())
        .unwrap();
    assert_eq!(
        held(&engine),
        BTreeMap::from([(a.clone(), (50, 50, 0)), (b.clone(), (30, 30, 0))]),
        "the next start prunes"
    );
    // A clean stop that cut no pass short (the flag is set, as a signal
    // sets it, before the stop) still makes its last pass, whole.
    sink.open(&[a.clone(), b.clone()]).unwrap();
    sink.put(&[batch(&a, 50..60, 20)]).unwrap();
    let consumed = BTreeMap::from([(a.clone(), 60)]);
    assert_eq!(sink.pre_commit(&consumed).unwrap(), consumed);
    stop.store(true, Ordering::Relaxed);
    drop(engine);
    sink.stop().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(
        held(&e),
        BTreeMap::from([(a, (60, 60, 0)), (b, (30, 30, 0))]),
        "the last pass pruned what was put since"
    );
}

/// An index entry the pass must read is damaged: the start fails with the
/// entry named and how to go on archiving, and nothing is deleted.
#[test]
fn an_archive_the_pass_cannot_read_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let a = TopicPartition::new("t", 0);
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        for i in 0..3 {
            e.append(&[batch(&a, i * 10..i * 10 + 10, 20)]).unwrap();
        }
        e.close().unwrap();
    }
    {
        let db = EngineConfig::new(dir.path()).open_sled().unwrap();
        let t = db.open_tree("cairn").unwrap();
        let k = cairn_engine::keys::index_key(&a, 0);
        let mut v = t
            .get(&k)
            .unwrap()
            .expect("index entry at offset 0")
            .to_vec();
        v[3] ^= 0x40;
        t.insert(k, v).unwrap();
        db.flush().unwrap();
    }
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let err = match ArchiveSink::new(engine.clone()).with_retention(by_age(DAY), HOUR, no_failure())
    {
        Ok(_) => panic!("a pass over a damaged index must fail"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("retention") && err.contains("index"),
        "the error names the damaged index entry: {err}"
    );
    assert!(
        err.contains("start with --retain none --retain-bytes none"),
        "and says how to go on archiving: {err}"
    );
    assert_eq!(engine.partitions()[0].record_count, 30, "nothing deleted");
}

/// A record without a timestamp has no age: it and everything above it
/// stay, in a partition of such records and amid old ones.
#[test]
fn records_without_a_timestamp_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&[unstamped(&a, 0..20)]).unwrap();
        e.append(&[batch(&b, 0..10, 20)]).unwrap();
        e.append(&[unstamped(&b, 10..15)]).unwrap();
        e.append(&[batch(&b, 15..30, 20)]).unwrap();
        e.close().unwrap();
    }
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let mut sink = pruning_a_day(&engine);
    assert_eq!(
        held(&engine),
        BTreeMap::from([(a.clone(), (0, 20, 20)), (b.clone(), (10, 30, 20))]),
    );
    drop(engine);
    sink.stop().unwrap();
}

/// A pass reports each partition whose age cut stopped at a record that
/// holds it back for good (no timestamp, or one in seconds) or until a date over a day ahead
/// (the run says so as a WARN, once per partition and offset), and not
/// one whose cut stopped at a young record, nor one it emptied.
#[test]
fn a_pass_reports_what_holds_age_retention_back() {
    use cairn_connector::pruner::{prune, HeldBack, FUTURE_SLACK_MS};
    let dir = tempfile::tempdir().unwrap();
    let tp = |p| TopicPartition::new("t", p);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    // t/0: old, then one without a timestamp in an entry with old ones
    // after it, then old again.
    e.append(&[batch(&tp(0), 0..10, 20)]).unwrap();
    let mut b = batch(&tp(0), 10..15, 20);
    b.records[0].timestamp_ms = -1;
    e.append(&[b]).unwrap();
    e.append(&[batch(&tp(0), 15..20, 20)]).unwrap();
    // t/1: old, then one stamped two days ahead, then old again.
    let ahead = now_ms() + 2 * FUTURE_SLACK_MS;
    e.append(&[batch(&tp(1), 0..10, 20)]).unwrap();
    let mut future = batch(&tp(1), 10..11, 20);
    future.records[0].timestamp_ms = ahead;
    e.append(&[future]).unwrap();
    e.append(&[batch(&tp(1), 11..20, 20)]).unwrap();
    // t/2: old, then young; t/3: old only (emptied); t/4: an hour ahead
    // (clock skew, not a record that holds retention back).
    e.append(&[batch(&tp(2), 0..10, 20), fresh(&tp(2), 10..20)])
        .unwrap();
    e.append(&[batch(&tp(3), 0..10, 20)]).unwrap();
    let mut skewed = fresh(&tp(4), 0..1);
    skewed.records[0].timestamp_ms = now_ms() + 3_600_000;
    e.append(&[skewed]).unwrap();
    // t/5: old, then one stamped in seconds (2026-01-01, read as January
    // 1970 in milliseconds: a pass deleted it as old until 2026-12-07),
    // then old again.
    let seconds = 1_767_225_600;
    e.append(&[batch(&tp(5), 0..10, 20)]).unwrap();
    let mut in_seconds = batch(&tp(5), 10..12, 20);
    in_seconds.records[0].timestamp_ms = seconds;
    e.append(&[in_seconds]).unwrap();
    e.append(&[batch(&tp(5), 12..20, 20)]).unwrap();
    let (report, finished) = prune(&e, &by_age(DAY), &now_ms, &|| true).unwrap();
    assert!(finished);
    assert_eq!(
        report.held_back,
        [
            HeldBack {
                tp: tp(0),
                offset: 10,
                timestamp_ms: -1,
                entry_next_offset: 15,
            },
            HeldBack {
                tp: tp(1),
                offset: 10,
                timestamp_ms: ahead,
                entry_next_offset: 11,
            },
            HeldBack {
                tp: tp(5),
                offset: 10,
                timestamp_ms: seconds,
                entry_next_offset: 12,
            },
        ]
    );
    assert_eq!(
        held(&e)[&tp(0)],
        (10, 20, 10),
        "nothing at or above it went"
    );
    assert_eq!(held(&e)[&tp(1)], (10, 20, 10));
    assert_eq!(held(&e)[&tp(2)], (10, 20, 10));
    assert_eq!(held(&e)[&tp(3)], (10, 10, 0));
    assert_eq!(held(&e)[&tp(5)], (10, 20, 10));
    let why = report.held_back[2].why(false);
    assert!(
        why.contains(&format!(
            "is stamped 1970-01-21T10:53:45.600Z ({seconds} ms since the epoch), before 1973: most likely a timestamp in seconds (it would be 2026-01-01T00:00:00Z)"
        )),
        "{why}"
    );
    let why = report.held_back[0].why(false);
    assert!(
        why.contains("held back in t/0 at offset 10: that record has no timestamp (-1)")
            && why.contains("(--retain-bytes)")
            && why.contains("cairn prune --topic t --partition 0 --before 15 "),
        "{why}"
    );
    assert!(!report.held_back[0].why(true).contains("--retain-bytes"));
    let why = report.held_back[1].why(false);
    assert!(
        why.contains(&format!(
            "({ahead} ms since the epoch), more than a day in the future"
        )),
        "{why}"
    );
    // Size retention alone looks at no timestamp.
    let by_size = Retention {
        partition_bytes_max: Some(u64::MAX),
        ..Retention::default()
    };
    assert_eq!(
        prune(&e, &by_size, &now_ms, &|| true).unwrap().0.held_back,
        []
    );
    // Ages are measured from the clock given: ten days on, the record
    // stamped two days ahead holds it back no more, and what lay below
    // it (old) and it (eight days old then) go; the record without a
    // timestamp and the one in seconds still hold theirs back.
    let later = || now_ms() + 10 * 86_400_000;
    let (report, _) = prune(&e, &by_age(DAY), &later, &|| true).unwrap();
    let still: Vec<_> = report.held_back.iter().map(|h| h.tp.clone()).collect();
    assert_eq!(still, [tp(0), tp(5)]);
    assert_eq!(held(&e)[&tp(1)], (20, 20, 0));
    // The prune the WARN advises deletes the record that held it back,
    // and the next pass the old records above it.
    e.truncate_before(&tp(0), 15).unwrap();
    e.truncate_before(&tp(5), 12).unwrap();
    let (report, _) = prune(&e, &by_age(DAY), &now_ms, &|| true).unwrap();
    assert_eq!(report.held_back, []);
    assert_eq!(held(&e)[&tp(0)], (20, 20, 0));
    assert_eq!(held(&e)[&tp(5)], (20, 20, 0));
}

/// A sink dropped without a clean stop (the run failed) ends the pruner
/// without a last pass: nothing is deleted on the way out.
#[test]
fn no_last_pass_without_a_clean_stop() {
    let dir = tempfile::tempdir().unwrap();
    let a = TopicPartition::new("t", 0);
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let mut sink = pruning_a_day(&engine);
    sink.put(&[batch(&a, 0..10, 20)]).unwrap();
    let consumed = BTreeMap::from([(a.clone(), 10)]);
    assert_eq!(sink.pre_commit(&consumed).unwrap(), consumed);
    drop(sink);
    assert_eq!(held(&engine), BTreeMap::from([(a.clone(), (0, 10, 10))]));
}

/// A size bound per partition keeps the newest entries that fit, together
/// with an age bound the higher cut wins, and an entry larger than the
/// bound alone goes too.
#[test]
fn size_retention_keeps_the_newest_entries_that_fit() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        // Fresh records: no age cut applies. 10 entries of 10 records.
        for i in 0..10 {
            e.append(&[fresh(&a, i * 10..i * 10 + 10)]).unwrap();
        }
        e.append(&[fresh(&b, 0..10)]).unwrap();
        e.close().unwrap();
    }
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let entry_bytes = engine.partitions()[1].payload_bytes;
    // Room for three entries of `a` and a half: three stay. `b`'s one entry fits.
    let r = Retention {
        age: Some(DAY),
        partition_bytes_max: Some(entry_bytes * 7 / 2),
    };
    let sink = ArchiveSink::new(engine.clone())
        .with_retention(r, HOUR, no_failure())
        .unwrap();
    let held_a = held(&engine)[&a];
    assert_eq!((held_a.0, held_a.1, held_a.2), (70, 100, 30));
    assert!(engine.partitions()[0].payload_bytes <= entry_bytes * 7 / 2);
    assert_eq!(held(&engine)[&b], (0, 10, 10));
    drop(sink);
    // Smaller than one entry: nothing fits, everything goes; offsets stay.
    let sink = ArchiveSink::new(engine.clone())
        .with_retention(
            Retention {
                age: None,
                partition_bytes_max: Some(1),
            },
            HOUR,
            no_failure(),
        )
        .unwrap();
    assert_eq!(
        held(&engine),
        BTreeMap::from([(a.clone(), (100, 100, 0)), (b.clone(), (10, 10, 0))])
    );
    drop(sink);
    assert!(engine.verify().unwrap().is_clean());
}

/// A pass over many partitions, each with an old entry to delete, makes
/// one fsync for all their deletions (one per partition until 2026-12-06:
/// 10,000 fsyncs a pass at 10,000 partitions), and they are durable when
/// it returns: a reopen finds each partition as the pass left it, clean.
#[test]
fn a_pass_over_many_partitions_makes_one_fsync() {
    use cairn_connector::pruner::prune;
    let dir = tempfile::tempdir().unwrap();
    let tps: Vec<_> = (0..40).map(|p| TopicPartition::new("t", p)).collect();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for tp in &tps {
        e.append(&[batch(tp, 0..10, 20)]).unwrap();
        e.append(&[fresh(tp, 10..15)]).unwrap();
    }
    let fsyncs = e.stats().fsyncs;
    let (report, finished) = prune(&e, &by_age(DAY), &now_ms, &|| true).unwrap();
    assert!(finished);
    assert_eq!(report.partitions_pruned, 40);
    assert_eq!(report.deleted.records_deleted, 400);
    assert_eq!(e.stats().fsyncs, fsyncs + 1, "one fsync for the pass");
    // The durable view (what `partitions` reads) moves only at a sync:
    // every deletion is durable before the pass returns.
    for tp in &tps {
        assert_eq!(held(&e)[tp], (10, 15, 5), "{tp}");
    }
    e.close().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(e.verify().unwrap().is_clean());
    for tp in &tps {
        assert_eq!(held(&e)[tp], (10, 15, 5), "{tp}");
    }
}
