//! `cairn restore`: archived records go back into Kafka with their
//! partitions, keys, values, headers and timestamps, in order, once; every
//! bad target is refused before anything is produced; a restore that fails
//! part way names where to resume, and resuming there completes it exactly
//! once. Against the mock cluster, or `CAIRN_TEST_BROKERS`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cairn_connector::restore::{plan, restore, RestoreConfig};
use cairn_connector::{ConnectorError, RestoreFailure};
use cairn_engine::{
    Engine, EngineConfig, Header, Record, RecordBatch, TimestampType, TopicPartition,
};
use cairn_tests::{init_logs, TestKafka};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message, Timestamp};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const ARCHIVED: &str = "orders";
const BIG_OFFSET: i64 = 20;

fn header(name: &str, value: Option<&[u8]>) -> Header {
    Header {
        name: name.into(),
        value: value.map(<[u8]>::to_vec),
    }
}

/// Three partitions that between them hold every shape a record can take:
/// null and empty keys and values, binary bytes, repeated and null-valued
/// headers, each timestamp type, and offsets with gaps. Partition 0 has a
/// 20 kB record at `BIG_OFFSET`.
fn archived_records() -> BTreeMap<i32, Vec<Record>> {
    let mut m = BTreeMap::new();
    m.insert(
        0,
        (0..50)
            .map(|i| Record {
                offset: i,
                timestamp_type: TimestampType::CreateTime,
                timestamp_ms: 1_700_000_000_000 + i,
                key: Some(format!("key-{i}").into_bytes()),
                value: Some(if i == BIG_OFFSET {
                    vec![b'b'; 20_000]
                } else {
                    vec![0, 0xff, i as u8, b'\n']
                }),
                headers: vec![
                    header("trace", Some(b"t-1")),
                    header("dup", None),
                    header("dup", Some(b"")),
                ],
            })
            .collect(),
    );
    m.insert(
        1,
        [10, 11, 15, 100]
            .into_iter()
            .enumerate()
            .map(|(i, offset)| Record {
                offset,
                timestamp_type: TimestampType::LogAppendTime,
                timestamp_ms: 1_600_000_000_000 + offset,
                key: None,
                value: match i {
                    0 => None,
                    1 => Some(Vec::new()),
                    _ => Some(vec![b'v'; 7]),
                },
                headers: Vec::new(),
            })
            .collect(),
    );
    m.insert(
        2,
        (0..5)
            .map(|i| Record {
                offset: i,
                timestamp_type: TimestampType::NotAvailable,
                timestamp_ms: -1,
                key: Some(Vec::new()),
                value: Some(vec![b'x'; 1024]),
                headers: vec![header("only-name", None)],
            })
            .collect(),
    );
    m
}

/// An archive of `archived_records` under `ARCHIVED`.
fn archive(dir: &std::path::Path) -> Engine {
    let engine = Engine::open(EngineConfig::new(dir)).unwrap();
    let batches: Vec<RecordBatch> = archived_records()
        .into_iter()
        .map(|(p, records)| RecordBatch {
            tp: TopicPartition::new(ARCHIVED, p),
            records,
        })
        .collect();
    engine.append(&batches).unwrap();
    engine
}

fn config(k: &TestKafka) -> RestoreConfig {
    let mut cfg = RestoreConfig::new(&k.brokers);
    cfg.rename.insert(ARCHIVED.into(), k.topic.clone());
    cfg.connect_timeout_ms = 10_000;
    cfg
}

/// A fresh archive of `archived_records` (and the logs, with `RUST_LOG`).
fn archived() -> (tempfile::TempDir, Engine) {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = archive(dir.path());
    (dir, engine)
}

/// A plain client of `k`'s cluster (`group.id` set: assigning needs one).
fn client(k: &TestKafka) -> BaseConsumer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .set("group.id", "restore-check")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap()
}

/// Produce one record to `partition` of `k`'s topic, with one header.
fn produce_one(k: &TestKafka, partition: i32, payload: &[u8], header: Option<(&str, &str)>) {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .create()
        .unwrap();
    let mut record = BaseRecord::<[u8], [u8]>::to(&k.topic)
        .partition(partition)
        .payload(payload);
    if let Some((key, value)) = header {
        record = record.headers(rdkafka::message::OwnedHeaders::new().insert(
            rdkafka::message::Header {
                key,
                value: Some(value),
            },
        ));
    }
    producer.send(record).unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();
}

/// The `RestoreFailed` a restore must end with.
fn failure(r: cairn_connector::Result<cairn_connector::restore::RestoreReport>) -> RestoreFailure {
    match r {
        Err(ConnectorError::RestoreFailed(f)) => *f,
        other => panic!("{other:?}"),
    }
}

/// A restored record as a consumer sees it.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp: Timestamp,
}

/// Everything in `k`'s topic, per partition, read from the beginning up to
/// each partition's high watermark.
fn consume_all(k: &TestKafka, partitions: i32) -> BTreeMap<i32, Vec<Seen>> {
    let c = client(k);
    let mut tpl = TopicPartitionList::new();
    let mut want = BTreeMap::new();
    for p in 0..partitions {
        tpl.add_partition_offset(&k.topic, p, Offset::Beginning)
            .unwrap();
        let (low, high) = c
            .fetch_watermarks(&k.topic, p, Duration::from_secs(10))
            .unwrap();
        assert_eq!(low, 0);
        want.insert(p, high as usize);
    }
    c.assign(&tpl).unwrap();
    let mut got: BTreeMap<i32, Vec<Seen>> = (0..partitions).map(|p| (p, Vec::new())).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.iter().any(|(p, v)| v.len() < want[p]) {
        assert!(Instant::now() < deadline, "consumed {got:?}, want {want:?}");
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.unwrap();
        let headers = m
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        got.get_mut(&m.partition()).unwrap().push(Seen {
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers,
            timestamp: m.timestamp(),
        });
    }
    got
}

/// What a consumer should see for an archived record. A record without a
/// timestamp gets the time of restore, so only its type is compared.
fn expected(r: &Record) -> Seen {
    Seen {
        key: r.key.clone(),
        value: r.value.clone(),
        headers: r
            .headers
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
        timestamp: Timestamp::CreateTime(r.timestamp_ms),
    }
}

fn assert_restored(got: &BTreeMap<i32, Vec<Seen>>, want: &BTreeMap<i32, Vec<Record>>) {
    for (p, records) in want {
        let seen = &got[p];
        assert_eq!(seen.len(), records.len(), "partition {p}: record count");
        for (i, (s, r)) in seen.iter().zip(records).enumerate() {
            let mut e = expected(r);
            if r.timestamp_type == TimestampType::NotAvailable {
                assert!(
                    matches!(s.timestamp, Timestamp::CreateTime(t) if t > 0),
                    "partition {p} record {i}: {:?}",
                    s.timestamp
                );
                e.timestamp = s.timestamp;
            }
            assert_eq!(
                s, &e,
                "partition {p} record {i} (archived offset {})",
                r.offset
            );
        }
    }
}

#[test]
fn every_field_comes_back_in_order_once() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("restored", 3);
    let report = restore(&engine, &config(&k)).unwrap();
    let want = archived_records();
    let total: usize = want.values().map(Vec::len).sum();
    assert_eq!(report.records, total as u64);
    for p in &report.partitions {
        let records = &want[&p.source.partition];
        assert_eq!(p.source.topic, ARCHIVED);
        assert_eq!(p.target, TopicPartition::new(&k.topic, p.source.partition));
        assert_eq!(p.records, records.len() as u64);
        assert_eq!(p.first_offset, Some(records[0].offset));
        assert_eq!(p.last_offset, Some(records.last().unwrap().offset));
    }
    assert_restored(&consume_all(&k, 3), &want);
}

/// Archived partitions that hold no record (here one recorded at offset 7
/// past offsets that held none, as transaction markers leave it) send
/// nothing: the target needs no partition for them, and its records there
/// are no reason to refuse (until 2026-12-06 the restore was refused for
/// a target with too few partitions, and for one holding records at the
/// empty partition's number). Every record of the others comes back once.
#[test]
fn partitions_with_no_record_need_no_target_partition() {
    let (_dir, engine) = archived();
    let empty = TopicPartition::new(ARCHIVED, 3);
    engine
        .advance_partitions(&BTreeMap::from([(empty.clone(), 7)]))
        .unwrap();
    engine.sync().unwrap();
    assert_eq!(engine.partition(&empty).unwrap().record_count, 0);
    let want = archived_records();
    let total: usize = want.values().map(Vec::len).sum();

    // Three partitions for an archive of four, the fourth empty; and a
    // `--resume` of that restore goes on (here: nothing left) rather than
    // refusing the fourth.
    let k = TestKafka::new("no-room-for-empty", 3);
    let mut cfg = config(&k);
    cfg.offset_header = Some("cairn.offset".into());
    let report = restore(&engine, &cfg).unwrap();
    assert_eq!(report.records, total as u64);
    cfg.resume = true;
    let again = restore(&engine, &cfg).unwrap();
    assert_eq!(again.records, 0);
    assert_eq!(
        highs(&k, 3),
        (0..3).map(|p| want[&p].len() as i64).collect::<Vec<_>>()
    );

    // Four partitions, the fourth holding another producer's record; and
    // its `--resume` passes over the fourth, whose last record is no
    // restore's.
    let k = TestKafka::new("occupied-where-empty", 4);
    produce_one(&k, 3, b"someone else's", None);
    let mut cfg = config(&k);
    cfg.offset_header = Some("cairn.offset".into());
    let report = restore(&engine, &cfg).unwrap();
    assert_eq!(report.records, total as u64);
    cfg.resume = true;
    assert_eq!(restore(&engine, &cfg).unwrap().records, 0);
    let mut ends: Vec<i64> = (0..3).map(|p| want[&p].len() as i64).collect();
    ends.push(1);
    assert_eq!(highs(&k, 4), ends, "the fourth holds only its own record");

    // The same with the fourth's last record another archive's restore's
    // (its header names offset 9, which this partition never reached: its
    // next offset is 7): passed over too, not refused as naming an offset
    // the archive does not hold.
    let k = TestKafka::new("restored-where-empty", 4);
    produce_one(&k, 3, b"another archive's", Some(("cairn.offset", "9")));
    let mut cfg = config(&k);
    cfg.offset_header = Some("cairn.offset".into());
    assert_eq!(restore(&engine, &cfg).unwrap().records, total as u64);
    cfg.resume = true;
    assert_eq!(restore(&engine, &cfg).unwrap().records, 0);
    assert_eq!(highs(&k, 4), ends);
}

#[test]
fn offset_header_range_and_partition_filters() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("filtered", 3);
    let mut cfg = config(&k);
    cfg.select.partition = Some(1);
    cfg.select.from = 11;
    cfg.select.to = Some(100);
    cfg.offset_header = Some("cairn.offset".into());
    let report = restore(&engine, &cfg).unwrap();
    assert_eq!(report.records, 2);
    let got = consume_all(&k, 3);
    assert!(got[&0].is_empty() && got[&2].is_empty());
    let offsets: Vec<_> = got[&1].iter().map(|s| s.headers.clone()).collect();
    assert_eq!(
        offsets,
        vec![
            vec![("cairn.offset".to_owned(), Some(b"11".to_vec()))],
            vec![("cairn.offset".to_owned(), Some(b"15".to_vec()))],
        ]
    );
}

/// The high watermark of every partition of `k`'s topic.
fn highs(k: &TestKafka, partitions: i32) -> Vec<i64> {
    let c = client(k);
    (0..partitions)
        .map(|p| {
            c.fetch_watermarks(&k.topic, p, Duration::from_secs(10))
                .unwrap()
                .1
        })
        .collect()
}

/// Wait until `k`'s topic holds `total` records over its first
/// `partitions`. A test's stop asks it before it first says yes: what the
/// restore handed to librdkafka has then been written, so that the stop,
/// which withdraws what is still queued, withdraws nothing, and the cut
/// stays where the test puts it.
fn wait_for_total(k: &TestKafka, partitions: i32, total: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let held: i64 = highs(k, partitions).iter().sum();
        if held >= total {
            assert_eq!(held, total);
            return;
        }
        assert!(Instant::now() < deadline, "{held} of {total} written");
    }
}

/// A stop that says yes from question `at` on, the first time once `k`'s
/// first `partitions` hold `total` records ([`wait_for_total`]).
fn stop_at<'a>(
    k: &'a TestKafka,
    at: usize,
    partitions: i32,
    total: i64,
) -> (
    impl Fn() -> bool + 'a,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let asked = std::sync::Arc::new(AtomicUsize::new(0));
    let waited = AtomicBool::new(false);
    let counted = asked.clone();
    let stop = move || {
        if counted.fetch_add(1, Ordering::Relaxed) < at {
            return false;
        }
        if !waited.swap(true, Ordering::Relaxed) {
            wait_for_total(k, partitions, total);
        }
        true
    };
    (stop, asked)
}

#[test]
fn bad_targets_are_refused_before_anything_is_produced() {
    let (_dir, engine) = archived();

    // Fewer partitions than the archive.
    let narrow = TestKafka::new("narrow", 2);
    match restore(&engine, &config(&narrow)) {
        Err(ConnectorError::TooFewPartitions {
            topic,
            partitions: 2,
            needed: 3,
        }) => assert_eq!(topic, narrow.topic),
        other => panic!("{other:?}"),
    }
    assert_eq!(highs(&narrow, 2), vec![0, 0]);

    // A topic that does not exist (and is not created by asking).
    // Named for this run: a real broker is shared, and may create it.
    let absent = format!("{}-absent", narrow.topic);
    let mut cfg = config(&narrow);
    cfg.rename.insert(ARCHIVED.into(), absent.clone());
    match restore(&engine, &cfg) {
        Err(e @ ConnectorError::UnknownTopic { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("\"{absent}\" does not exist")),
                "{msg}"
            );
            assert!(msg.contains("create it with at least"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    let c = client(&narrow);
    let md = c.fetch_metadata(None, Duration::from_secs(10)).unwrap();
    assert!(
        md.topics().iter().all(|t| t.name() != absent),
        "the refused restore created the topic"
    );

    // A partition that already holds a record: refused, then allowed with
    // `append`, after it.
    let k = TestKafka::new("occupied", 3);
    produce_one(&k, 1, b"already", None);
    produce_one(&k, 2, b"already", None);
    // Every occupied target is named at once, not one per attempt.
    match restore(&engine, &config(&k)) {
        Err(ConnectorError::TargetNotEmpty {
            target,
            low: 0,
            high: 1,
            others,
        }) => {
            assert_eq!(target, TopicPartition::new(&k.topic, 1));
            assert_eq!(others, format!(", and so do {}/2 (offsets 0..1)", k.topic));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(highs(&k, 3), vec![0, 1, 1]);
    let mut cfg = config(&k);
    cfg.append = true;
    restore(&engine, &cfg).unwrap();
    let want = archived_records();
    assert_eq!(
        highs(&k, 3),
        vec![
            want[&0].len() as i64,
            want[&1].len() as i64 + 1,
            want[&2].len() as i64 + 1
        ]
    );

    // No Kafka at all.
    let mut cfg = RestoreConfig::new("127.0.0.1:1");
    cfg.connect_timeout_ms = 1_500;
    match restore(&engine, &cfg) {
        Err(ConnectorError::BrokerUnreachable {
            brokers, detail, ..
        }) => {
            assert_eq!(brokers, "127.0.0.1:1");
            // The cause, not only librdkafka's bare transport failure.
            assert!(
                detail.contains("the client's last error") && detail.contains("Connection refused"),
                "{detail}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A run of `run` into its archive until Kafka holds `end` committed for
/// every partition named, the archive closed after it.
fn run_until_committed(
    run: &cairn_connector::RunConfig,
    end: &BTreeMap<TopicPartition, i64>,
) -> cairn_connector::RunReport {
    let engine = std::sync::Arc::new(Engine::open(EngineConfig::new(&run.data)).unwrap());
    let end = end.clone();
    let opts = cairn_connector::PipelineOptions {
        done: Some(Box::new(move |c| {
            end.iter().all(|(tp, o)| c.get(tp) == Some(o))
        })),
        ..Default::default()
    };
    cairn_tests::run_bounded(
        run,
        Box::new(cairn_connector::ArchiveSink::new(engine)),
        opts,
    )
    .unwrap()
}

/// A restore into a topic this archive archives (the same Kafka topic id:
/// a topic emptied by retention, restored into itself, or here, with
/// `--append`, after the records it still holds) passes over its copies in
/// the archive, so that a run of it does not archive each again beside
/// its original: its next offsets move past them. Where the archive's log
/// does not end where Kafka's does (a run behind), the copies would land
/// after records it lacks: refused before anything is sent, unless
/// `--into-archived-topic`. A topic of the same name with another id is
/// another topic.
#[test]
fn a_restore_into_a_topic_this_archive_archives_passes_over_its_copies() {
    init_logs();
    let mut k = TestKafka::new("into-itself", 3);
    let produce = |k: &TestKafka, r: std::ops::Range<u64>| {
        cairn_connector::cli::demo::produce(&k.brokers, &k.topic, r).unwrap()
    };
    let next = |n| cairn_connector::cli::demo::demo_next_offsets(&k.topic, n);
    let total = |k: &TestKafka| highs(k, 3).iter().sum::<i64>();
    let n = 200u64;
    produce(&k, 0..n);
    let dir = tempfile::tempdir().unwrap();
    let run = cairn_tests::config(&k, "into-itself-group", dir.path());
    cairn_tests::run_to_end(&run, n, || {});

    // Kafka's log runs ahead of the archive's: refused, nothing sent.
    produce(&k, n..n + 30);
    let mut cfg = RestoreConfig::new(&k.brokers);
    cfg.connect_timeout_ms = 10_000;
    cfg.append = true;
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let e = restore(&engine, &cfg).unwrap_err().to_string();
    assert!(
        e.contains(
            "are the archive's own topics' (the same Kafka topic id), and its log of them does not end where Kafka's does"
        ) && e.contains(&format!(
            "{}/0 (the archive's log ends at 67, Kafka's at 77)",
            k.topic
        )) && e.contains("run the archive until it has archived them")
            && e.contains("--into-archived-topic")
            && e.contains("nothing was sent"),
        "{e}"
    );
    assert_eq!(total(&k), (n + 30) as i64, "nothing sent");
    drop(engine);

    // Caught up: restored, and its copies passed over; in two parts, the
    // second finding the archive's log ending where Kafka's does again.
    let n = n + 30;
    cairn_tests::run_to_end(&run, n, || {});
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let passed = |r: &cairn_connector::restore::RestoreReport| -> Vec<(i32, i64, i64)> {
        r.passed_over
            .iter()
            .map(|p| (p.partition.partition, p.from, p.to))
            .collect()
    };
    let part = 40;
    cfg.select.to = Some(part);
    let first = restore(&engine, &cfg).unwrap();
    assert_eq!(first.records, 3 * part as u64);
    cfg.select.to = None;
    cfg.select.from = part;
    let rest = restore(&engine, &cfg).unwrap();
    assert_eq!(first.records + rest.records, n);
    assert_eq!(total(&k), 2 * n as i64);
    let ends = next(n);
    let (want_first, want_rest): (Vec<_>, Vec<_>) = ends
        .values()
        .enumerate()
        .map(|(p, &o)| ((p as i32, o, o + part), (p as i32, o + part, 2 * o)))
        .unzip();
    assert_eq!(passed(&first), want_first);
    assert_eq!(passed(&rest), want_rest);
    assert_eq!(
        engine.durable_offsets().into_values().collect::<Vec<_>>(),
        ends.values().map(|o| 2 * o).collect::<Vec<_>>()
    );
    drop(engine);

    // A run goes on after the copies: new records only, none twice.
    produce(&k, n..n + 30);
    let added = next(n + 30);
    let end: BTreeMap<TopicPartition, i64> = next(n)
        .into_iter()
        .map(|(tp, o)| {
            let new = added[&tp] - o;
            (tp, 2 * o + new)
        })
        .collect();
    let after = run_until_committed(&run, &end);
    assert_eq!(after.stats.records_written, 30, "{:?}", after.stats);
    assert_eq!(after.stats.records_duplicate, 0, "{:?}", after.stats);
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(engine.durable_offsets(), end);
    let held: u64 = engine.partitions().iter().map(|p| p.record_count).sum();
    assert_eq!(held, n + 30, "the originals and the new records, once each");

    // The same name, another topic (another id): restored into as any.
    k.recreate_topic(3);
    let mut cfg = RestoreConfig::new(&k.brokers);
    cfg.connect_timeout_ms = 10_000;
    let report = restore(&engine, &cfg).unwrap();
    assert!(report.passed_over.is_empty());
    assert_eq!(total(&k), (n + 30) as i64);
    assert_eq!(engine.durable_offsets(), end, "the archive as it was");
}

/// Around a restore into the archive's own topic: another archived topic's
/// records restored into it (`--rename`) are new records of it, neither
/// passed over nor refused; a restore stopped part way passes over what it
/// delivered, so each partition left goes on after it; and copies a
/// restore delivered but did not pass over (killed first) leave the logs
/// apart, refused, `--resume` included, until `--into-archived-topic`.
#[test]
fn copies_are_passed_over_only_when_they_are_the_archives_own() {
    init_logs();
    let k = TestKafka::new("own-copies", 3);
    let n = 90u64;
    cairn_connector::cli::demo::produce(&k.brokers, &k.topic, 0..n).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run = cairn_tests::config(&k, "own-copies-group", dir.path());
    cairn_tests::run_to_end(&run, n, || {});
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    // Another topic's records, archived beside it (no id recorded).
    let other = TopicPartition::new("other-source", 0);
    engine
        .append(&[cairn_engine::fuzzing::batch(&other, 0..5, 10)])
        .unwrap();
    let own = engine.durable_offsets();
    let total = |k: &TestKafka| highs(k, 3).iter().sum::<i64>();
    let mut cfg = RestoreConfig::new(&k.brokers);
    cfg.connect_timeout_ms = 10_000;
    cfg.append = true;

    // --rename: new records of the target, passed over by nothing.
    cfg.select.topics = vec![other.topic.clone()];
    cfg.rename.insert(other.topic.clone(), k.topic.clone());
    let report = restore(&engine, &cfg).unwrap();
    assert_eq!((report.records, report.passed_over.len()), (5, 0));
    assert_eq!(engine.durable_offsets(), own);
    let renamed_into = TopicPartition::new(&k.topic, 0);
    let high0 = own[&renamed_into] + 5;
    assert_eq!(highs(&k, 3)[0], high0);
    // The archive now lags on partition 0 (by the renamed records, which
    // a run would archive as the topic's): refused there until archived.
    cfg.select.topics = vec![k.topic.clone()];
    cfg.rename.clear();
    let e = restore(&engine, &cfg).unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "{}/0 (the archive's log ends at 30, Kafka's at {high0})",
            k.topic
        )),
        "{e}"
    );
    drop(engine);
    let mut caught_up = run.clone();
    caught_up.topics = vec![k.topic.clone()];
    let end = own
        .iter()
        .filter(|(tp, _)| tp.topic == k.topic)
        .map(|(tp, &o)| (tp.clone(), if tp.partition == 0 { high0 } else { o }))
        .collect::<BTreeMap<_, _>>();
    run_until_committed(&caught_up, &end);
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(engine.durable_offset(&renamed_into), Some(high0));

    // Stopped after its first partition (35 records: the 30 produced, and
    // the 5 renamed, archived as its): its copies passed over, the others
    // untouched; each then goes on after them.
    let before = total(&k);
    // The stop is asked before each partition, and within one only every
    // 256 records, more than any here holds: it ends the restore at the
    // second partition's start, whatever the machine's speed (once the
    // first's records are written, so that it withdraws none of them).
    let (stop, _) = stop_at(&k, 1, 3, before + 35);
    match cairn_connector::restore::restore_until_split(&engine, &cfg, &|| false, &stop) {
        Err(ConnectorError::RestoreStopped { delivered, .. }) => assert_eq!(delivered, 35),
        other => panic!("{other:?}"),
    }
    assert_eq!(total(&k), before + 35);
    assert_eq!(engine.durable_offset(&renamed_into), Some(high0 + 35));
    for p in 1..3 {
        let tp = TopicPartition::new(&k.topic, p);
        assert_eq!(engine.durable_offset(&tp), Some(end[&tp]), "untouched");
        let mut rest = cfg.clone();
        rest.select.partition = Some(p);
        let report = restore(&engine, &rest).unwrap();
        assert_eq!(report.passed_over.len(), 1);
        assert_eq!(engine.durable_offset(&tp), Some(2 * end[&tp]));
    }

    // Delivered, not passed over (as if killed before): the logs stay
    // apart, and the next restore is refused, --resume too.
    let before = total(&k);
    fail::cfg(
        cairn_connector::restore::FAILPOINT_PASS_OVER_LOST,
        &format!("return({})", k.topic),
    )
    .unwrap();
    let mut partition0 = cfg.clone();
    partition0.select.partition = Some(0);
    partition0.offset_header = Some("cairn.offset".into());
    partition0.select.to = Some(20);
    let lost = restore(&engine, &partition0);
    fail::remove(cairn_connector::restore::FAILPOINT_PASS_OVER_LOST);
    assert_eq!(lost.unwrap().passed_over, vec![]);
    assert_eq!(total(&k), before + 20);
    partition0.select.to = None;
    let e = restore(&engine, &partition0).unwrap_err().to_string();
    assert!(
        e.contains("its log of them does not end where Kafka's does"),
        "{e}"
    );
    let mut resume = partition0.clone();
    (resume.append, resume.resume) = (false, true);
    let e = restore(&engine, &resume).unwrap_err().to_string();
    assert!(
        e.contains("copies an earlier restore left there cannot be told apart for certain"),
        "{e}"
    );
    // Told: the rest restored, and archived again by a run (not passed
    // over).
    resume.into_archived_topic = true;
    let report = restore(&engine, &resume).unwrap();
    assert_eq!((report.records, report.passed_over.len()), (15, 0));
    assert_eq!(total(&k), before + 35);
}

/// The targets' watermarks are read together, and librdkafka fails such a
/// request whole for one partition's error: the request is asked again in
/// halves, each partition whose read still failed once more alone, and the
/// restore goes on (here the mock fails the first request, and then the
/// first target's own, which is asked alone). An error that stays stops the
/// restore before anything is produced, naming the partition.
#[test]
fn a_failed_watermark_request_is_asked_again_alone() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let (_dir, engine) = archived();
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("watermarks", 3, 1).unwrap();
    let mut cfg = RestoreConfig::new(&mock.bootstrap_servers());
    cfg.rename.insert(ARCHIVED.into(), "watermarks".into());
    cfg.connect_timeout_ms = 10_000;
    let policy = RDKafkaRespErr::RD_KAFKA_RESP_ERR_POLICY_VIOLATION;
    mock.request_errors(RDKafkaApiKey::ListOffsets, &[policy; 1_000]);
    match restore(&engine, &cfg) {
        Err(e @ ConnectorError::KafkaAt { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("fetch the watermarks") && m.contains("target partition watermarks/0"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
    mock.clear_request_errors(RDKafkaApiKey::ListOffsets);
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", mock.bootstrap_servers())
        .create()
        .unwrap();
    let high = |p| {
        c.fetch_watermarks("watermarks", p, Duration::from_secs(10))
            .unwrap()
            .1
    };
    assert_eq!(
        (0..3).map(high).collect::<Vec<_>>(),
        [0, 0, 0],
        "nothing produced"
    );
    mock.request_errors(RDKafkaApiKey::ListOffsets, &[policy; 2]);
    let report = restore(&engine, &cfg).expect("asked again in halves, then alone");
    let want = archived_records();
    assert_eq!(
        report.records as usize,
        want.values().map(Vec::len).sum::<usize>()
    );
    for (p, records) in &want {
        assert_eq!(high(*p), records.len() as i64);
    }
}

/// A `-X` setting a producer takes and a consumer refuses (a receive size
/// below the consumer's fetch size) does not stop a restore: the targets'
/// watermarks are then read one at a time, with the producer, as before
/// they were read together.
#[test]
fn a_setting_only_a_consumer_refuses_still_restores() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("consumer-refuses", 3);
    let mut cfg = config(&k);
    cfg.kafka
        .insert("receive.message.max.bytes".into(), "40000000".into());
    let refused = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .set("receive.message.max.bytes", "40000000")
        .create::<BaseConsumer>();
    assert!(
        refused.is_err(),
        "a consumer takes it now: this test shows nothing"
    );
    let report = restore(&engine, &cfg).expect("restored");
    let want = archived_records();
    assert_eq!(
        report.records as usize,
        want.values().map(Vec::len).sum::<usize>()
    );
    assert_restored(&consume_all(&k, 3), &want);
}

/// A target topic Kafka lists with an error of its own (still being
/// created, no leader) is named as one that cannot be used yet, as `run`
/// names it (until the night of 2026-12-04, a bare metadata error).
#[test]
fn a_target_topic_kafka_cannot_serve_yet_is_named_as_such() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::RDKafkaRespErr;
    let (_dir, engine) = archived();
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("settling", 3, 1).unwrap();
    mock.topic_error(
        "settling",
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
    )
    .unwrap();
    let mut cfg = RestoreConfig::new(&mock.bootstrap_servers());
    cfg.rename.insert(ARCHIVED.into(), "settling".into());
    cfg.connect_timeout_ms = 10_000;
    match restore(&engine, &cfg) {
        Err(e @ ConnectorError::TopicUnavailable { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("topic \"settling\" (the restore's target)")
                    && m.contains("cannot be used now")
                    && m.contains("eader not available"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn selections_that_name_nothing_in_the_archive_are_errors() {
    let (_dir, engine) = archived();
    let cfg = |f: &dyn Fn(&mut RestoreConfig)| {
        let mut c = RestoreConfig::new("unused:9092");
        f(&mut c);
        c
    };
    let msg = |c: RestoreConfig| match plan(&engine, &c) {
        Err(ConnectorError::Config(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(msg(cfg(&|c| c.select.topics = vec!["nope".into()])).contains("\"nope\""));
    assert!(msg(cfg(&|c| {
        c.rename.insert("nope".into(), "x".into());
    }))
    .contains("no such topic"));
    assert!(msg(cfg(&|c| c.select.partition = Some(7))).contains("--partition 7"));
    assert!(msg(cfg(&|c| {
        c.rename.insert(ARCHIVED.into(), "bad topic name".into());
    }))
    .contains("--rename"));
    assert!(msg(cfg(&|c| c.select.to = Some(0))).contains("--to 0"));
    // Within what partition 1 holds (10..101), in a gap of its offsets:
    // refused before anything is produced, as export refuses it.
    assert!(msg(cfg(&|c| {
        c.select.partition = Some(1);
        c.select.from = 16;
        c.select.to = Some(100);
    }))
    .contains("a gap in their offsets"));
    assert_eq!(
        plan(
            &engine,
            &cfg(&|c| {
                c.select.partition = Some(1);
                c.select.from = 15;
                c.select.to = Some(100);
            })
        )
        .unwrap()
        .len(),
        1
    );
    for key in [
        "enable.idempotence",
        "delivery.report.only.error",
        "metadata.broker.list",
        "transactional.id",
    ] {
        assert!(msg(cfg(&|c| {
            c.kafka.insert(key.into(), "x".into());
        }))
        .contains(key));
    }
    assert!(msg(cfg(&|c| {
        c.kafka.insert("message.timeout.ms".into(), "0".into());
    }))
    .contains("message.timeout.ms=0"));
    assert!(msg(cfg(&|c| {
        c.kafka.insert("delivery.timeout.ms".into(), "0".into());
    }))
    .contains("delivery.timeout.ms=0"));
    assert!(msg(cfg(&|c| {
        c.kafka.insert("delivery.timeout.ms".into(), "1000".into());
        c.kafka.insert("message.timeout.ms".into(), "1000".into());
    }))
    .contains("given more than once"));
    assert!(msg(cfg(&|c| c.brokers = " ".into())).contains("brokers: empty"));
    assert!(msg(cfg(&|c| c.resume = true)).contains("--offset-header"));
    assert!(msg(cfg(&|c| {
        c.resume = true;
        c.append = true;
        c.offset_header = Some("h".into());
    }))
    .contains("choose one"));
    // Two archived topics into one target would interleave their partitions.
    engine
        .append(&[RecordBatch {
            tp: TopicPartition::new("payments", 0),
            records: vec![Record::with_value(0, "p")],
        }])
        .unwrap();
    assert!(msg(cfg(&|c| {
        c.rename.insert("payments".into(), ARCHIVED.into());
    }))
    .contains("both"));
    // ...but only when both are chosen.
    let one = plan(
        &engine,
        &cfg(&|c| {
            c.select.topics = vec!["payments".into()];
            c.rename.insert("payments".into(), ARCHIVED.into());
        }),
    )
    .unwrap();
    assert_eq!(
        one,
        vec![(
            TopicPartition::new("payments", 0),
            TopicPartition::new(ARCHIVED, 0)
        )]
    );
    // Everything, by default.
    let all = plan(&engine, &RestoreConfig::new("unused:9092")).unwrap();
    assert_eq!(all.len(), 4);
}

#[test]
fn a_failed_record_stops_the_restore_and_names_where_to_resume() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("resumed", 3);
    // The 20 kB record is over this producer's limit.
    let mut cfg = config(&k);
    cfg.kafka.insert("message.max.bytes".into(), "5000".into());
    let err = restore(&engine, &cfg);
    let f = failure(err);
    let text = f.to_string();
    let RestoreFailure {
        archived,
        target,
        offset,
        delivered,
        next_step,
        ..
    } = &f;
    assert_eq!(*archived, TopicPartition::new(ARCHIVED, 0));
    assert_eq!(*target, TopicPartition::new(&k.topic, 0));
    assert_eq!(*offset, BIG_OFFSET);
    assert_eq!(*delivered, BIG_OFFSET as u64);
    // Partition 0 resumes at the failed record; 1 and 2 were never
    // reached, so they start over.
    assert!(
            next_step.contains(&format!(
                "[--topic orders --partition 0 --from 20 --rename orders={t}, --topic orders --partition 1 --from 0 --rename orders={t}, --topic orders --partition 2 --from 0 --rename orders={t}], with --append",
                t = k.topic
            )),
            "{next_step}"
        );
    assert!(text.contains("Next: rerun"), "{text}");
    assert!(
        text.contains("refused by the producer before it was sent")
            && text.contains("bytes of key, value and headers, plus the framing"),
        "{text}"
    );
    // Everything before the failed record arrived, and nothing after it.
    assert_eq!(highs(&k, 3), vec![BIG_OFFSET, 0, 0]);

    // Resume partition 0 where the error says, then the untouched ones.
    let mut cfg = config(&k);
    cfg.select.partition = Some(0);
    cfg.select.from = BIG_OFFSET;
    cfg.append = true;
    restore(&engine, &cfg).unwrap();
    for p in [1, 2] {
        let mut cfg = config(&k);
        cfg.select.partition = Some(p);
        restore(&engine, &cfg).unwrap();
    }
    assert_restored(&consume_all(&k, 3), &archived_records());

    // With the offset header, its bytes count in the size said ("cairn.offset"
    // and "20": 14), as they do in librdkafka's check.
    let k = TestKafka::new("resumed-header", 3);
    let mut cfg = config(&k);
    cfg.kafka.insert("message.max.bytes".into(), "5000".into());
    cfg.offset_header = Some("cairn.offset".into());
    let text = failure(restore(&engine, &cfg)).to_string();
    assert!(text.contains("the offset header's 14 included"), "{text}");
}

#[test]
fn a_record_over_the_producer_queue_stops_the_restore_instead_of_waiting_forever() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("queue-bound", 3);
    // librdkafka refuses the 20 kB record as "queue full" even when its
    // queue is empty: waiting for room would never end.
    let mut cfg = config(&k);
    cfg.kafka
        .insert("queue.buffering.max.kbytes".into(), "8".into());
    let f = failure(restore(&engine, &cfg));
    assert_eq!(f.archived, TopicPartition::new(ARCHIVED, 0));
    assert_eq!(f.offset, BIG_OFFSET);
    let text = f.to_string();
    assert!(text.contains("queue.buffering.max.kbytes"), "{text}");
    assert_eq!(highs(&k, 3)[0], BIG_OFFSET);
}

#[test]
fn damage_met_while_reading_stops_after_what_was_sent_is_delivered() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    archive(dir.path()).close().unwrap();
    // Flip a byte inside the frame of partition 1's entry (the second frame:
    // the entries were appended in partition order). A clean close moved the
    // checkpoint past it, so open does not look at it; the restore's read does.
    let lsn = {
        let cfg = EngineConfig::new(dir.path());
        let db = cfg.open_sled().unwrap();
        let t = db.open_tree("cairn").unwrap();
        let (k, v) = t
            .scan_prefix(b"W")
            .map(Result::unwrap)
            .filter(|(_, v)| !v.is_empty())
            .nth(1)
            .unwrap();
        let mut v = v.to_vec();
        v[40] ^= 0xff;
        t.insert(&k, v).unwrap();
        db.flush().unwrap();
        u64::from_be_bytes(k[1..9].try_into().unwrap())
    };
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let k = TestKafka::new("damaged", 3);
    match restore(&engine, &config(&k)) {
        Err(ConnectorError::RestoreCut {
            delivered,
            source,
            next_step,
        }) => {
            assert!(
                matches!(*source, ConnectorError::Engine(_)),
                "{source:?} should be the engine's damage"
            );
            assert!(
                source.to_string().contains(&format!("lsn {lsn}")),
                "{source} should name lsn {lsn}"
            );
            // What to run next is in the error, not only in a log line:
            // partition 2 from its first record, and partition 1 apart (a
            // rerun from its first record stops at the damage again while
            // it stays; until 2026-12-06 it was listed with partition 2).
            assert_eq!(delivered, archived_records()[&0].len() as u64);
            for said in [
                "once for each of [--topic orders --partition 2 --from 0 --rename orders=damaged], with --append",
                "The damage stays in orders/1: a rerun of it stops there again",
                "once it is repaired, the same command with --topic orders --partition 1 --from 0 --rename orders=damaged and --append",
                "--partition 1 --from an offset past the damaged entry",
            ] {
                assert!(next_step.contains(said), "{said}: {next_step}");
            }
        }
        other => panic!("{other:?}"),
    }
    // Partition 0, before the damage, arrived whole; nothing after it.
    let want = archived_records();
    assert_eq!(highs(&k, 3), vec![want[&0].len() as i64, 0, 0]);

    // With --offset-header: --resume is advised for partition 2 alone, not
    // plain (which would stop at partition 1's damage again and never
    // reach it; advised until 2026-12-06).
    let k = TestKafka::new("damaged-h", 3);
    let mut cfg = config(&k);
    cfg.offset_header = Some("cairn.offset".into());
    match restore(&engine, &cfg) {
        Err(ConnectorError::RestoreCut { next_step, .. }) => {
            assert!(
                next_step.contains("rerun the same command with --resume once for each of [--topic orders --partition 2")
                    && next_step.contains("a plain --resume would stop at the damage again")
                    && next_step.contains("--partition 1 --from an offset past the damaged entry"),
                "{next_step}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// An archive of `ARCHIVED` partition 0 with an entry per range of
/// offsets, whose index entry at `lost` was then removed (damage under
/// valid CRCs), opened again.
fn lost_index_entry<const N: usize>(
    dir: &std::path::Path,
    entries: [std::ops::Range<i64>; N],
    lost: i64,
) -> Engine {
    let tp = TopicPartition::new(ARCHIVED, 0);
    let e = Engine::open(EngineConfig::new(dir)).unwrap();
    for range in entries {
        let records = range.map(|o| Record::with_value(o, "v")).collect();
        e.append(&[RecordBatch {
            tp: tp.clone(),
            records,
        }])
        .unwrap();
    }
    e.close().unwrap();
    let db = EngineConfig::new(dir).open_sled().unwrap();
    let t = db.open_tree("cairn").unwrap();
    t.remove(cairn_engine::keys::index_key(&tp, lost)).unwrap();
    db.flush().unwrap();
    drop((t, db));
    Engine::open(EngineConfig::new(dir)).unwrap()
}

/// A range that meets no record because the index entry of the records
/// in it was lost is that damage (`Corruption` at the partition), not a
/// range that falls in a gap of offsets.
#[test]
fn a_range_hidden_by_a_lost_index_entry_is_damage_not_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let engine = lost_index_entry(dir.path(), [0..10, 100..110], 0);
    let mut cfg = RestoreConfig::new("unused:9092");
    cfg.select.from = 2;
    cfg.select.to = Some(8);
    match plan(&engine, &cfg) {
        Err(ConnectorError::Engine(e)) => {
            assert!(e.to_string().contains("an index entry is missing"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

/// A whole partition whose index lost an entry in its middle: the restore
/// sends none of it. Until 2026-12-05 a whole read counted the index only
/// at its end, so the records on either side of the lost entry were sent
/// first, and the target kept a hole no later run could fill in order
/// (seen in review).
#[test]
fn a_lost_index_entry_in_a_whole_partition_sends_none_of_it() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = lost_index_entry(dir.path(), [0..10, 10..20, 20..30], 10);
    let k = TestKafka::new("lost-entry", 1);
    match restore(&engine, &config(&k)) {
        Err(e) => {
            let text = format!("{e} {e:?}");
            assert!(
                text.contains("the index counts 20 records below next offset 30"),
                "{text}"
            );
        }
        Ok(r) => panic!("restored {} records", r.records),
    }
    assert_eq!(highs(&k, 1), vec![0]);
}

#[test]
fn an_empty_archive_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    match plan(&engine, &RestoreConfig::new("unused:9092")) {
        Err(ConnectorError::RestoreRefused(m)) => assert!(m.contains("nothing to restore"), "{m}"),
        other => panic!("{other:?}"),
    }
    // So is one a prune emptied: its partition is still listed, with
    // nothing in it, and a restore of nothing would look like success.
    let tp = TopicPartition::new(ARCHIVED, 0);
    let records = (0..5).map(|o| Record::with_value(o, "v")).collect();
    engine
        .append(&[RecordBatch {
            tp: tp.clone(),
            records,
        }])
        .unwrap();
    engine.truncate_before(&tp, 5).unwrap();
    match plan(&engine, &RestoreConfig::new("unused:9092")) {
        Err(ConnectorError::RestoreRefused(m)) => {
            assert!(
                m.contains("emptied by a prune") && m.contains("nothing to restore"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// The brokers refuse a batch for its size: the error names the batch's
/// first record, and says that the record too large may be a later one,
/// or the batch itself, and what to change (before, it named the first
/// record as if it were the large one).
#[test]
fn a_batch_refused_for_its_size_says_what_to_change() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("batch-size", 3);
    let Some(mock) = k.mock() else {
        cairn_tests::skipped("error injection needs the mock cluster");
        return;
    };
    let cfg = config(&k);
    mock.request_errors(
        rdkafka::types::RDKafkaApiKey::Produce,
        &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let text = failure(restore(&engine, &cfg)).to_string();
    assert!(
        text.contains("the brokers refused the batch that starts with this record")
            && text.contains("lower -X batch.size"),
        "{text}"
    );
}

/// The brokers refuse the idempotent producer its id (a principal with
/// neither IDEMPOTENT_WRITE nor WRITE: an archiver's read-only
/// credentials), which librdkafka makes fatal before any record leaves:
/// the error leads with that cause and the permission to grant, and says
/// to run the same command again once it is (until 2026-12-06 it said only
/// that each partition's first record was purged, and to rerun each with
/// `--from` and `--append`, which met the same refusal); nothing is in the
/// target.
#[test]
fn a_producer_refused_its_id_names_the_permission_to_grant() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("no-producer-id", 3);
    let Some(mock) = k.mock() else {
        cairn_tests::skipped("error injection needs the mock cluster");
        return;
    };
    let cfg = config(&k);
    mock.request_errors(
        rdkafka::types::RDKafkaApiKey::InitProducerId,
        &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED],
    );
    let text = failure(restore(&engine, &cfg)).to_string();
    assert!(
        text.contains("the producer stopped for good, and every rerun fails the same way")
            && text.contains("Cluster authorization failed")
            && text.contains("IDEMPOTENT_WRITE")
            && text.contains("Next: fix that, then run the same command again"),
        "{text}"
    );
    assert_eq!(highs(&k, 3), vec![0, 0, 0], "nothing in the target");
}

/// A failure reported by the broker, after the record left: the restore
/// stops there, the error says to `--resume`, and resuming (which reads the
/// offset header of each partition's last record) completes it exactly
/// once. Needs the mock cluster's error injection.
#[test]
fn a_broker_side_failure_resumes_exactly_once_with_the_offset_header() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("broker-failure", 3);
    let Some(mock) = k.mock() else {
        cairn_tests::skipped("error injection needs the mock cluster");
        return;
    };
    let mut cfg = config(&k);
    cfg.offset_header = Some("cairn.offset".into());
    // A first part goes in cleanly.
    cfg.select.to = Some(10);
    cfg.select.partition = Some(0);
    restore(&engine, &cfg).unwrap();
    // Then the broker refuses the next produce request, for good.
    mock.request_errors(
        rdkafka::types::RDKafkaApiKey::Produce,
        &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_RECORD],
    );
    cfg.select.to = None;
    cfg.select.partition = None;
    cfg.resume = true;
    let err = restore(&engine, &cfg);
    let f = failure(err);
    let text = f.to_string();
    let RestoreFailure {
        archived,
        offset,
        delivered,
        next_step,
        ..
    } = &f;
    assert!(next_step.contains("--resume"), "{next_step}");
    // The refused request held the failed partition's first batch
    // of this run (librdkafka may have sent other partitions' in
    // other requests, which went through): it failed at its first
    // record, and none of its records arrived.
    assert_eq!(*delivered, 0, "{text}");
    let p = archived.partition;
    let first = [10, 10, 0][p as usize];
    assert_eq!(*offset, first, "{text}");
    let already = if p == 0 { 10 } else { 0 };
    assert_eq!(highs(&k, 3)[p as usize], already, "{text}");
    // Resume: each partition continues after its last record's header.
    restore(&engine, &cfg).unwrap();
    let got = consume_all(&k, 3);
    let want = archived_records();
    for (p, records) in &want {
        let offsets: Vec<Vec<u8>> = got[p]
            .iter()
            .map(|s| s.headers.last().unwrap().1.clone().unwrap())
            .collect();
        let archived: Vec<Vec<u8>> = records
            .iter()
            .map(|r| r.offset.to_string().into_bytes())
            .collect();
        assert_eq!(
            offsets, archived,
            "partition {p}: each record once, in order"
        );
    }
    // Resuming a finished restore sends nothing.
    let report = restore(&engine, &cfg).unwrap();
    assert_eq!(report.records, 0);
}

/// Every partition refused is said at once (until 2026-12-07 only the
/// first, and each fix met the next refusal; found by an audit).
#[test]
fn resume_refuses_a_partition_this_restore_did_not_write() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("foreign", 3);
    produce_one(&k, 2, b"someone else's", None);
    let cfg = resume_config(&k);
    match restore(&engine, &cfg) {
        Err(ConnectorError::RestoreRefused(m)) => {
            assert!(
                m.contains(&format!("{}/2", k.topic)) && m.contains("cairn.offset"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(highs(&k, 3), vec![0, 0, 1]);
    produce_one(&k, 0, b"someone else's too", None);
    match restore(&engine, &cfg) {
        Err(ConnectorError::RestoreRefused(m)) => assert!(
            m.starts_with("2 partitions refused: (1) ")
                && m.contains(&format!("{}/0 (offset 0) has no", k.topic))
                && m.contains(&format!(
                    "; (2) --resume: the last record of {}/2 (offset 0) has no",
                    k.topic
                )),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(highs(&k, 3), vec![1, 0, 1]);
}

/// A timestamp of 0, which Kafka's producer reads as "now", or below -1,
/// which a broker refuses when it rebuilds a batch, is replaced, counted
/// and said; -1, Kafka's "no timestamp", is sent as archived (until
/// 2026-12-05 it was replaced too).
#[test]
fn a_timestamp_kafka_cannot_send_is_counted_not_hidden() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let records = [0, -86_400_000, -1]
        .into_iter()
        .enumerate()
        .map(|(o, ts)| {
            let mut r = Record::with_value(o as i64, "epoch");
            r.timestamp_type = TimestampType::CreateTime;
            r.timestamp_ms = ts;
            r
        })
        .collect();
    engine
        .append(&[RecordBatch {
            tp: TopicPartition::new(ARCHIVED, 0),
            records,
        }])
        .unwrap();
    let k = TestKafka::new("epoch", 1);
    let report = restore(&engine, &config(&k)).unwrap();
    assert_eq!((report.records, report.timestamps_replaced), (3, 2));
    let got = consume_all(&k, 1);
    let stamps: Vec<_> = got[&0].iter().map(|r| r.timestamp).collect();
    assert!(
        matches!(stamps[..], [Timestamp::CreateTime(a), Timestamp::CreateTime(b), _] if a > 0 && b > 0),
        "{stamps:?}"
    );
    // -1 comes back as Kafka's "no timestamp", whichever way the client
    // names it.
    assert!(
        matches!(
            stamps[2],
            Timestamp::CreateTime(-1) | Timestamp::NotAvailable
        ),
        "{stamps:?}"
    );
}

/// Records that keep failing with a retriable error time out; the restore
/// then stops, and says the failed record may be in Kafka already (a
/// timed-out record may have been written). Needs the mock cluster.
#[test]
fn a_timeout_is_reported_as_possibly_written() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("timeout", 3);
    let Some(mock) = k.mock() else {
        cairn_tests::skipped("error injection needs the mock cluster");
        return;
    };
    mock.request_errors(
        rdkafka::types::RDKafkaApiKey::Produce,
        &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 200],
    );
    let mut cfg = config(&k);
    cfg.select.partition = Some(0);
    cfg.kafka.insert("message.timeout.ms".into(), "1500".into());
    cfg.kafka.insert("retry.backoff.ms".into(), "50".into());
    let err = restore(&engine, &cfg);
    let f = failure(err);
    let text = f.to_string();
    let RestoreFailure {
        offset,
        delivered,
        next_step,
        detail,
        ..
    } = &f;
    assert_eq!((*offset, *delivered), (0, 0), "{text}");
    assert!(detail.contains("timed out"), "{detail}");
    assert!(
        next_step.contains(
            "[--topic orders --partition 0 --from 0 --rename orders=timeout], with --append"
        ) && next_step.contains("may be in Kafka already"),
        "{next_step}"
    );
    mock.clear_request_errors(rdkafka::types::RDKafkaApiKey::Produce);
    assert_eq!(highs(&k, 3), vec![0, 0, 0]);
}

/// `--resume` trusts a target's last record only if the archive holds the
/// same record at the offset its header names.
#[test]
fn resume_checks_the_last_record_against_the_archive() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("impostor", 3);
    // A record with the right header name and a plausible offset, but not
    // the archive's record there.
    produce_one(&k, 0, b"not from the archive", Some(("cairn.offset", "3")));
    let mut cfg = resume_config(&k);
    // -X settings reach the reader too: producer-only ones must not break
    // it (librdkafka ignores them there). That the reader takes -X at all
    // is `resume_reader_settings_are_checked_up_front`'s.
    cfg.kafka
        .insert("client.id".into(), "cairn-restore-test".into());
    cfg.kafka.insert("compression.type".into(), "lz4".into());
    match restore(&engine, &cfg) {
        Err(ConnectorError::RestoreRefused(m)) => assert!(
            m.contains("names archived offset 3, but its key or value differ"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(highs(&k, 3), vec![1, 0, 0]);
    // A real partial restore resumes under the same settings.
    let k = TestKafka::new("partial", 3);
    let mut cfg2 = config(&k);
    cfg2.offset_header = Some("cairn.offset".into());
    cfg2.kafka = cfg.kafka.clone();
    cfg2.select.to = Some(12);
    restore(&engine, &cfg2).unwrap();
    cfg2.select.to = None;
    cfg2.resume = true;
    let report = restore(&engine, &cfg2).unwrap();
    let want = archived_records();
    let total: usize = want.values().map(Vec::len).sum();
    let first_part = 12 + 2 + 5; // offsets below 12: 0..12 of p0, 10 and 11 of p1, all of p2
    assert_eq!(report.records as usize, total - first_part);
    assert_eq!(
        highs(&k, 3),
        want.values().map(|r| r.len() as i64).collect::<Vec<_>>()
    );
}

/// `--resume` counts the target's records from its first to its last
/// against what the archive holds between the archived offsets they name:
/// records missing below the last (an earlier restore's gap) or extra
/// among them are refused, where trusting the last record alone resumed
/// above them and ended whole (before 2026-12-03).
#[test]
fn resume_refuses_a_target_missing_records_below_its_last() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = archive_of(dir.path(), &[(ARCHIVED, 20)]);
    let go_on = format!("if the difference is another producer's records, written between restores of this archive, and none of this archive's are missing before the last, go on with this partition alone: --topic {ARCHIVED} --partition 0 --append --from 11 --rename {ARCHIVED}=");
    for (name, extra, want) in [
        ("gap", None, "holds 11 records (offsets 0..11) from archived offset 0 to 15, but the archive holds 16 between those two: records are missing from the target"),
        ("extra", Some(10), "holds 12 records (offsets 0..12) from archived offset 0 to 10, but the archive holds 11 between those two: records are in the target that the archive does not account for"),
        // Extra records only: where to go on is known (since 2026-12-05).
        ("extra-then", Some(10), go_on.as_str()),
    ] {
        let k = TestKafka::new(name, 1);
        let mut cfg = config(&k);
        cfg.offset_header = Some("cairn.offset".into());
        cfg.select.to = Some(10);
        restore(&engine, &cfg).unwrap();
        // Then another producer's record, or none; then the archive's
        // record `last`, as a restore writes it.
        let last = match extra {
            Some(last) => {
                produce_one(&k, 0, b"someone else's", None);
                last
            }
            None => 15,
        };
        let value = format!("{ARCHIVED} {last}");
        produce_one(&k, 0, value.as_bytes(), Some(("cairn.offset", &last.to_string())));
        let before = highs(&k, 1);
        cfg.select.to = None;
        cfg.resume = true;
        match restore(&engine, &cfg) {
            Err(ConnectorError::RestoreRefused(m)) => {
                assert!(m.contains(want), "{name}: {m}");
                assert_eq!(m.contains("--append --from"), extra.is_some(), "{name}: {m}");
                // This partition alone: the command's own --topic and
                // --partition would select the others too.
                let alone = format!("--rename {ARCHIVED}={} in place of --resume and of the command's own --topic, --partition, --from and every --rename, and resume the others limited to them", k.topic);
                assert_eq!(m.contains(&alone), extra.is_some(), "{name}: {m}");
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(highs(&k, 1), before, "{name}: nothing produced");
    }
}

/// An archive of 20 records of one partition in two entries, 0..6 and
/// 6..20, the first pruned: its directory, the engine, the partition and
/// the cut (6).
fn pruned_below_six() -> (tempfile::TempDir, Engine, TopicPartition, i64) {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = archive_of(dir.path(), &[(ARCHIVED, 6)]);
    let tp = TopicPartition::new(ARCHIVED, 0);
    let cut = 6;
    engine
        .append(&[RecordBatch {
            tp: tp.clone(),
            records: (cut..20).map(|o| Record::with_value(o, "later")).collect(),
        }])
        .unwrap();
    engine.truncate_before(&tp, cut).unwrap();
    (dir, engine, tp, cut)
}

/// `config(k)` resuming by the `cairn.offset` header.
fn resume_config(k: &TestKafka) -> RestoreConfig {
    let mut cfg = config(k);
    cfg.offset_header = Some("cairn.offset".into());
    cfg.resume = true;
    cfg
}

/// A target whose last record names an archived offset a prune has deleted
/// since is told apart from someone else's record: the error says the
/// archive lost those records and how to go on from what it holds.
#[test]
fn resume_past_a_prune_says_what_the_archive_lost() {
    let (_dir, engine, _, cut) = pruned_below_six();
    let k = TestKafka::new("pruned-since", 1);
    let m = resume_refused_after_restoring_3(&engine, &k, 1);
    assert!(
            m.contains("names archived offset 3, which is below what the archive holds")
                && m.contains("a prune deleted it, if this archive held it")
                && m.contains(&format!("starts at offset {cut})"))
                && m.contains(&format!(
                    "restore this partition with --topic {ARCHIVED} --partition 0 --append --from {cut} --rename {ARCHIVED}={} in place of --resume and of the command's own --topic, --partition, --from and every --rename,",
                    k.topic
                ))
                && m.contains("resume the others limited to them"),
            "{m}"
    );
}

/// The refusal of a `--resume` into `k`'s topic (of `partitions`
/// partitions) once its partition 0 holds a record restored from archived
/// offset 3, and that nothing was produced.
fn resume_refused_after_restoring_3(engine: &Engine, k: &TestKafka, partitions: i32) -> String {
    produce_one(
        k,
        0,
        b"restored before the prune",
        Some(("cairn.offset", "3")),
    );
    let before = highs(k, partitions);
    let refused = restore(engine, &resume_config(k));
    assert_eq!(highs(k, partitions), before, "nothing produced");
    match refused {
        Err(ConnectorError::RestoreRefused(m)) => m,
        other => panic!("{other:?}"),
    }
}

/// A target whose last record names an archived offset below a partition
/// a prune has emptied since: nothing is left to restore of it, and the
/// refusal says so, where it advised an `--append --from` that the restore
/// then refused as holding no records (seen in review, the night of
/// 2026-12-04).
#[test]
fn resume_into_a_partition_a_prune_emptied_says_nothing_is_left() {
    let (_dir, engine, tp, _) = pruned_below_six();
    engine.truncate_before(&tp, 20).unwrap();
    engine
        .append(&[RecordBatch {
            tp: TopicPartition::new(ARCHIVED, 1),
            records: (0..4).map(|o| Record::with_value(o, "other")).collect(),
        }])
        .unwrap();
    let k = TestKafka::new("pruned-emptied", 2);
    let m = resume_refused_after_restoring_3(&engine, &k, 2);
    assert!(
        m.contains("names archived offset 3, but the archive holds nothing of")
            && m.contains("its next offset is 20")
            && m.contains("nothing is left to restore of this partition")
            && !m.contains("--append --from"),
        "{m}"
    );
}

/// A prune that cut just above the target's last restored record (or
/// emptied the partition) lost nothing the restore had not sent: `--resume`
/// goes on right after it. Until the night of 2026-12-04 it was refused as
/// if records were gone, with advice that did not work on an emptied
/// partition.
#[test]
fn resume_just_past_a_prune_goes_on() {
    let (_dir, engine, tp, cut) = pruned_below_six();
    let k = TestKafka::new("pruned-just-below", 1);
    produce_one(
        &k,
        0,
        b"restored before the prune",
        Some(("cairn.offset", "5")),
    );
    let cfg = resume_config(&k);
    restore(&engine, &cfg)
        .expect("nothing between the last restored record and the archive's first is missing");
    assert_eq!(
        highs(&k, 1),
        vec![1 + 20 - cut],
        "offsets {cut}..20 sent once"
    );
    // A prune that emptied the partition after it was wholly restored,
    // restored with one that holds records (with none, there is nothing to
    // restore, and the restore says so).
    engine.truncate_before(&tp, 20).unwrap();
    let other = TopicPartition::new(ARCHIVED, 1);
    engine
        .append(&[RecordBatch {
            tp: other,
            records: (0..4).map(|o| Record::with_value(o, "other")).collect(),
        }])
        .unwrap();
    let k = TestKafka::new("pruned-empty", 2);
    produce_one(
        &k,
        0,
        b"restored before the prune",
        Some(("cairn.offset", "19")),
    );
    let cfg = resume_config(&k);
    restore(&engine, &cfg)
        .expect("a wholly restored partition, emptied since, has nothing left to send");
    assert_eq!(
        highs(&k, 2),
        vec![1, 4],
        "only the other partition's records"
    );
}

/// A restore asked to stop (SIGINT or SIGTERM in the CLI) stops sending,
/// waits for what it sent, and says where each partition resumes.
#[test]
fn a_stopped_restore_says_where_each_partition_resumes() {
    let (_dir, engine) = archived();
    let k = TestKafka::new("stopped", 3);
    // Stopped once sending starts: a slow answer before it (a loaded
    // machine) would otherwise end the restore in its wait for the brokers.
    match cairn_connector::restore::restore_until_split(&engine, &config(&k), &|| false, &|| true) {
        Err(ConnectorError::RestoreStopped {
            delivered,
            next_step,
        }) => {
            assert_eq!(delivered, 0);
            assert!(
                next_step.contains(&format!(
                    "[--topic orders --partition 0 --from 0 --rename orders={t}, --topic orders --partition 1 --from 0 --rename orders={t}, --topic orders --partition 2 --from 0 --rename orders={t}]",
                    t = k.topic
                )),
                "{next_step}"
            );
            // Every record sent was acknowledged: none from a resume point
            // on can be in Kafka already (until 2026-12-06 said to be).
            assert!(!next_step.contains("may arrive twice"), "{next_step}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(highs(&k, 3), vec![0, 0, 0]);
}

/// A stop seen only after the last record was sent (at the check after
/// every 256th), and written, stopped nothing: the restore is whole and
/// reports so.
#[test]
fn a_stop_after_the_last_record_is_a_whole_restore() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    // Exactly one check's worth: the check after the 256th record is the
    // first one the stop answers.
    let engine = archive_of(dir.path(), &[(ARCHIVED, 256)]);
    let k = TestKafka::new("stopped-at-the-end", 1);
    // Asked at the partition's start (go on), then after its 256th record,
    // then while the restore waits for acknowledgements.
    let (stop, asked) = stop_at(&k, 1, 1, 256);
    let report =
        cairn_connector::restore::restore_until_split(&engine, &config(&k), &|| false, &stop)
            .expect("a restore whose every record was sent and acknowledged is whole");
    assert!(asked.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    assert_eq!(report.records, 256);
    assert_eq!(highs(&k, 1), vec![256]);
}

/// A stop ends the preflight's wait for the target partitions' watermarks
/// (here from a leader whose every reply takes a minute), rather than
/// waiting out `--connect-timeout-ms`; nothing is sent.
#[test]
fn a_stop_ends_the_wait_for_a_slow_leaders_watermarks() {
    use rdkafka::mocking::MockCluster;
    let (_dir, engine) = archived();
    // Two brokers: the first answers the metadata at once, the second
    // leads the target's partitions and answers nothing within a minute.
    let mock = MockCluster::new(2).unwrap();
    mock.create_topic("slow-leader", 3, 1).unwrap();
    for p in 0..3 {
        mock.partition_leader("slow-leader", p, Some(2)).unwrap();
    }
    mock.broker_round_trip_time(2, Duration::from_secs(60))
        .unwrap();
    let first = mock.bootstrap_servers();
    let first = first.split(',').next().unwrap();
    let mut cfg = RestoreConfig::new(first);
    cfg.rename.insert(ARCHIVED.into(), "slow-leader".into());
    cfg.connect_timeout_ms = 120_000;
    // The stop comes once the metadata has been answered, as the wait for
    // the watermarks begins (a failpoint says when, on this thread: other
    // tests here restore too): a stop before an answer ends the wait there
    // (since 2026-12-05, also one the answer comes back to). A wait the
    // stop did not end would end in the watermarks (after a minute) or a
    // timeout, never in `StoppedWaiting`. (Until 2026-12-05 the stop came
    // 5 s after the start: a clock standing in for the metadata's answer.)
    use cairn_connector::restore::FAILPOINT_WATERMARKS;
    use std::sync::atomic::{AtomicBool, Ordering};
    let waiting = std::sync::Arc::new(AtomicBool::new(false));
    let this_test = std::thread::current().id();
    fail::cfg_callback(FAILPOINT_WATERMARKS, {
        let waiting = waiting.clone();
        move || {
            if std::thread::current().id() == this_test {
                waiting.store(true, Ordering::SeqCst);
            }
        }
    })
    .unwrap();
    let stop = || waiting.load(Ordering::SeqCst);
    let stopped = cairn_connector::restore::restore_until(&engine, &cfg, &stop);
    fail::remove(FAILPOINT_WATERMARKS);
    match stopped {
        // All three, asked together (since 2026-12-06; before, one at a
        // time, and the stop came during the first).
        Err(ConnectorError::StoppedWaiting { asked_for, .. }) => assert_eq!(
            asked_for,
            "the watermarks of target partitions slow-leader/0, slow-leader/1, slow-leader/2"
        ),
        other => panic!("{other:?}"),
    }
    // Stopped from the start: the metadata's answer does not carry it on.
    match cairn_connector::restore::restore_until(&engine, &cfg, &|| true) {
        Err(ConnectorError::StoppedWaiting { asked_for, .. }) => {
            assert_eq!(asked_for, "the cluster's metadata")
        }
        other => panic!("{other:?}"),
    }
}

/// An archive of one topic per (name, records) pair, partition 0 only.
fn archive_of(dir: &std::path::Path, topics: &[(&str, i64)]) -> Engine {
    let engine = Engine::open(EngineConfig::new(dir)).unwrap();
    for (topic, n) in topics {
        let records = (0..*n)
            .map(|o| Record::with_value(o, format!("{topic} {o}")))
            .collect();
        engine
            .append(&[RecordBatch {
                tp: TopicPartition::new(*topic, 0),
                records,
            }])
            .unwrap();
    }
    engine
}

/// Records that already carry a header of `--offset-header`'s name are
/// counted (and warned of): their copies carry two, the archived offset
/// last, which `--resume` reads (silent until 2026-12-07; an audit).
#[test]
fn records_carrying_the_offset_header_s_name_are_counted() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let records = (0..10)
        .map(|o| {
            let mut r = Record::with_value(o, format!("v{o}"));
            if o % 2 == 0 {
                r.headers.push(cairn_engine::Header {
                    name: "cairn.offset".into(),
                    value: Some(b"theirs".to_vec()),
                });
            }
            r
        })
        .collect();
    engine
        .append(&[RecordBatch {
            tp: TopicPartition::new("orders", 0),
            records,
        }])
        .unwrap();
    let k = TestKafka::new("clashes", 1);
    let mut cfg = config(&k);
    cfg.offset_header = Some("cairn.offset".into());
    let report = restore(&engine, &cfg).unwrap();
    assert_eq!((report.records, report.offset_header_clashes), (10, 5));
    // The last of the name is the archived offset: --resume reads it.
    assert_eq!(offsets_in(&k, &k.topic), (0..10).collect::<Vec<i64>>());
}

/// The archived offsets, in order, that the offset headers of `topic`'s
/// partition 0 name.
fn offsets_in(k: &TestKafka, topic: &str) -> Vec<i64> {
    let c = client(k);
    let (_, high) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (got.len() as i64) < high {
        assert!(Instant::now() < deadline, "read {} of {high}", got.len());
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            let m = m.unwrap();
            let h = m.headers().unwrap();
            let v = h.iter().last().unwrap().value.unwrap();
            got.push(std::str::from_utf8(v).unwrap().parse().unwrap());
        }
    }
    got
}

/// Stopped in the middle of a partition, with records in flight: what was
/// sent is delivered, and `--resume` completes it exactly once.
#[test]
fn a_restore_stopped_midway_resumes_exactly_once() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = archive_of(dir.path(), &[("orders", 2_000)]);
    let k = TestKafka::new("midway", 1);
    let mut cfg = config(&k);
    cfg.offset_header = Some("cairn.offset".into());
    // Asked at the partition's start, then every 256 records: stop at the
    // third question, after 512 records, once they are written. (The waits
    // before sending have a stop of their own, which a slow answer there
    // would ask.)
    let (stop, _) = stop_at(&k, 2, 1, 512);
    match cairn_connector::restore::restore_until_split(&engine, &cfg, &|| false, &stop) {
        Err(ConnectorError::RestoreStopped {
            delivered,
            next_step,
        }) => {
            assert_eq!(delivered, 512);
            assert!(next_step.contains("--resume"), "{next_step}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(highs(&k, 1), vec![512]);
    cfg.resume = true;
    assert_eq!(restore(&engine, &cfg).unwrap().records, 2_000 - 512);
    assert_eq!(offsets_in(&k, &k.topic), (0..2_000).collect::<Vec<i64>>());
}

/// A stop withdraws what librdkafka still holds queued: librdkafka takes in
/// up to a GiB, most restores whole within seconds, and a SIGTERM then
/// stopped nothing (the restore went on to the end, or waited out
/// `message.timeout.ms` for a broker gone; until 2026-12-07, found by two
/// audits). Here every record is handed over and lingers (`linger.ms` of
/// a minute) when the stop comes: the restore stops with what was written
/// delivered and the rest withdrawn unsent, and `--resume` completes it
/// exactly once.
#[test]
fn a_stop_withdraws_the_records_still_queued() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = archive_of(dir.path(), &[("orders", 2_000)]);
    let k = TestKafka::new("withdrawn", 1);
    let mut cfg = config(&k);
    cfg.offset_header = Some("cairn.offset".into());
    cfg.kafka.insert("linger.ms".into(), "60000".into());
    // Asked at the partition's start and after every 256th record (seven
    // times): from the ninth question on, all 2,000 are handed over and the
    // restore waits for their acknowledgements.
    let asked = std::sync::atomic::AtomicU32::new(0);
    let stop = || asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 8;
    let delivered =
        match cairn_connector::restore::restore_until_split(&engine, &cfg, &|| false, &stop) {
            Err(ConnectorError::RestoreStopped {
                delivered,
                next_step,
            }) => {
                assert!(next_step.contains("--resume"), "{next_step}");
                delivered
            }
            other => panic!("{other:?}"),
        };
    // Had nothing been withdrawn, all would be written after the linger,
    // and the restore whole.
    assert!(delivered < 2_000, "{delivered}");
    assert_eq!(highs(&k, 1), vec![delivered as i64]);
    cfg.kafka.remove("linger.ms");
    cfg.resume = true;
    assert_eq!(restore(&engine, &cfg).unwrap().records, 2_000 - delivered);
    assert_eq!(offsets_in(&k, &k.topic), (0..2_000).collect::<Vec<i64>>());
}

/// A restore of 2,000 archived records into the one partition of `k`'s
/// topic, during which another producer writes a record: at the restore's
/// third question whether to stop (512 records sent), once some of them
/// are in the topic. It stops at question `stop_at`, if given.
fn restore_beside_another_producer(
    k: &TestKafka,
    stop_at: Option<u32>,
) -> cairn_connector::Result<cairn_connector::restore::RestoreReport> {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = archive_of(dir.path(), &[("orders", 2_000)]);
    let cfg = config(k);
    let asked = std::sync::atomic::AtomicU32::new(0);
    let stop = || {
        let n = asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n == 2 {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while highs(k, 1) == vec![0] {
                assert!(std::time::Instant::now() < deadline, "nothing restored");
            }
            produce_one(k, 0, b"someone else's", None);
        }
        // Once what was sent is written (and the other producer's record),
        // so that the stop withdraws nothing.
        if stop_at.is_some_and(|s| n == s) {
            wait_for_total(k, 1, 256 * i64::from(n) + 1);
        }
        stop_at.is_some_and(|s| n >= s)
    };
    cairn_connector::restore::restore_until_split(&engine, &cfg, &|| false, &stop)
}

/// Another producer writing to the target during a restore puts its
/// records among the archive's: the restore, every record acknowledged,
/// says so and fails (before 2026-12-03 it ended whole, exit 0).
#[test]
fn a_restore_interleaved_with_another_producer_says_so() {
    let k = TestKafka::new("interleaved", 1);
    match restore_beside_another_producer(&k, None) {
        Err(ConnectorError::RestoreInterleaved {
            acknowledged, held, ..
        }) => assert_eq!((acknowledged, held), (2_000, 2_001)),
        other => panic!("{other:?}"),
    }
    assert_eq!(highs(&k, 1), vec![2_001]);
}

/// Records that appear in the target between the restore's check of it
/// and its first record (another producer's; or a killed restore's that the
/// leader held unreplicated, above the high watermark, when `--resume` read
/// the target) come before the restore's, which lie together: the
/// restore, every record acknowledged, says so and fails (until 2026-12-05
/// it ended whole, exit 0, with those records possibly there twice).
#[test]
fn records_that_appear_before_the_restore_s_first_are_reported() {
    init_logs();
    let k = TestKafka::new("started-past", 1);
    let dir = tempfile::tempdir().unwrap();
    let engine = archive_of(dir.path(), &[("orders", 300)]);
    let cfg = config(&k);
    let asked = std::sync::atomic::AtomicU32::new(0);
    // The first question whether to stop comes at the partition's start,
    // after the check and before anything is sent.
    let stop = || {
        if asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
            produce_one(&k, 0, b"someone else's", None);
        }
        false
    };
    match cairn_connector::restore::restore_until_split(&engine, &cfg, &|| false, &stop) {
        Err(e @ ConnectorError::RestoreStartedPast { .. }) => {
            let ConnectorError::RestoreStartedPast {
                acknowledged,
                checked_end,
                first,
                ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!((*acknowledged, *checked_end, *first), (300, 0, 1));
            let m = e.to_string();
            assert!(m.contains("in it twice") && m.contains("-o 0"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(highs(&k, 1), vec![301]);
}

/// A restore stopped with records left is reported as stopped, with what
/// is left to run, also when another producer wrote among its records: the
/// interleaving's own error says every record was delivered.
#[test]
fn a_stopped_restore_interleaved_with_another_producer_says_it_stopped() {
    let k = TestKafka::new("interleaved-stop", 1);
    // Stopped at the fourth question (768 records sent).
    match restore_beside_another_producer(&k, Some(3)) {
        Err(ConnectorError::RestoreStopped {
            delivered,
            next_step,
        }) => {
            assert_eq!(delivered, 768);
            assert!(next_step.contains("--from 768"), "{next_step}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(highs(&k, 1), vec![769]);
}

/// A rename of an archived topic that the selection leaves out is refused,
/// not ignored: `--topic payments --rename orders=x` would restore only
/// payments, into payments, without a word of the rename.
#[test]
fn a_rename_of_a_topic_not_restored_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let engine = archive_of(dir.path(), &[("orders", 7), ("payments", 3)]);
    let mut cfg = RestoreConfig::new("unused:9092");
    cfg.select.topics = vec!["payments".into()];
    cfg.rename.insert("orders".into(), "x".into());
    match plan(&engine, &cfg) {
        Err(ConnectorError::Config(m)) => assert!(
            m.contains("--rename orders=…") && m.contains("nothing of topic \"orders\" is among"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    cfg.select.topics.push("orders".into());
    assert_eq!(plan(&engine, &cfg).unwrap().len(), 2);
}

/// `--resume` reads the last record of every target partition at once:
/// two target topics that both have a partition 0 are told apart.
#[test]
fn resume_tells_two_topics_partition_0_apart() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = archive_of(dir.path(), &[("orders", 700), ("payments", 300)]);
    let mut k = TestKafka::new("orders-restored", 1);
    let payments = k.create_topic("payments-restored", 1);
    let mut cfg = RestoreConfig::new(&k.brokers);
    cfg.rename.insert("orders".into(), k.topic.clone());
    cfg.rename.insert("payments".into(), payments.clone());
    cfg.offset_header = Some("cairn.offset".into());
    cfg.select.to = Some(100);
    restore(&engine, &cfg).unwrap();
    cfg.select.to = None;
    cfg.resume = true;
    assert_eq!(restore(&engine, &cfg).unwrap().records, 600 + 200);
    assert_eq!(offsets_in(&k, &k.topic), (0..700).collect::<Vec<i64>>());
    assert_eq!(offsets_in(&k, &payments), (0..300).collect::<Vec<i64>>());
}
