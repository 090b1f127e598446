//! `--on-oversize dead-letter`: a record over `--record-bytes-max` goes to
//! the dead-letter topic with its reason and source, acknowledged before the
//! run goes on; the archive holds every other record once; a dead letter that
//! cannot be delivered stops the run with nothing committed past it (that
//! one needs the mock cluster's error injection).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_connector::dead_letter::{REASON_HEADER, SOURCE_HEADER, TIMESTAMP_HEADER};
use cairn_connector::testing::WatchedSink;
use cairn_connector::{ArchiveSink, ConnectorError, OnOversize, PipelineOptions, RunConfig};
use cairn_engine::{Engine, EngineConfig, TopicPartition};
use cairn_tests::{config, init_logs, run_bounded, with_request_errors, TestKafka};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaApiKey;
use rdkafka::{Offset, TopicPartitionList};

const RECORDS: i64 = 10;
const BIG: i64 = 5;
/// The records' timestamp: an hour before the test began, which any
/// broker takes (a real one with `CAIRN_TEST_BROKERS` too: a time of years
/// ago would be deleted by its retention, or refused).
static PRODUCED_MS: std::sync::LazyLock<i64> = std::sync::LazyLock::new(|| {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    now.as_millis() as i64 - 3_600_000
});

/// Records 0..10 to partition 0, all small but record 5 (2 kB).
fn produce(k: &TestKafka) {
    produce_big_at(k, BIG);
}

/// Records 0..10 to partition 0, all small but record `big` (2 kB).
fn produce_big_at(k: &TestKafka, big: i64) {
    let p: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .create()
        .unwrap();
    for i in 0..RECORDS {
        let value = if i == big {
            vec![b'b'; 2_000]
        } else {
            format!("small {i}").into_bytes()
        };
        p.send(
            BaseRecord::<[u8], [u8]>::to(&k.topic)
                .partition(0)
                .key(b"k")
                .payload(&value)
                .timestamp(*PRODUCED_MS),
        )
        .unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();
}

fn dead_letter_config(k: &TestKafka, dead: &str, dir: &std::path::Path) -> RunConfig {
    let mut cfg = config(k, "dead-letter-group", dir);
    cfg.record_bytes_max = 1_000;
    cfg.on_oversize = OnOversize::DeadLetter;
    cfg.dead_letter_topic = Some(dead.into());
    cfg
}

fn run(
    cfg: &RunConfig,
    dir: &std::path::Path,
) -> cairn_connector::Result<cairn_connector::RunReport> {
    let (sink, opts) = archive_until_committed(cfg, dir, RECORDS);
    run_bounded(cfg, sink, opts)
}

/// The archive at `dir` as a sink, and options that end a run of `cfg`
/// once Kafka's commit of partition 0 is `want`.
fn archive_until_committed(
    cfg: &RunConfig,
    dir: &std::path::Path,
    want: i64,
) -> (Box<dyn cairn_connector::SinkTask>, PipelineOptions) {
    let engine = Arc::new(
        Engine::open(EngineConfig::new(dir).record_bytes_max(cfg.record_bytes_max)).unwrap(),
    );
    let tp = TopicPartition::new(&cfg.topics[0], 0);
    let opts = PipelineOptions {
        done: Some(Box::new(move |c| c.get(&tp) == Some(&want))),
        ..Default::default()
    };
    (Box::new(ArchiveSink::new(engine)), opts)
}

/// A source topic holding the test's records, and a dead-letter topic
/// beside it (its name).
fn source_and_dead_letter_topic(name: &str) -> (TestKafka, String) {
    init_logs();
    let mut k = TestKafka::new(name, 1);
    let dead = k.create_topic(&format!("{name}-dead-letters"), 1);
    produce(&k);
    (k, dead)
}

#[test]
fn an_oversize_record_is_dead_lettered_and_the_rest_archived_once() {
    let (k, dead) = source_and_dead_letter_topic("dl-source");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dead_letter_config(&k, &dead, dir.path());
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let report = run(&cfg, dir.path()).unwrap();
    assert_eq!(report.stats.records_dead_lettered, 1);
    assert_eq!(report.stats.records_written, RECORDS as u64 - 1);

    // The archive: every record but the big one, once, in order.
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let offsets: Vec<i64> = engine
        .read(&TopicPartition::new(&k.topic, 0), 0)
        .unwrap()
        .map(|r| r.unwrap().offset)
        .collect();
    assert_eq!(
        offsets,
        (0..RECORDS).filter(|o| *o != BIG).collect::<Vec<_>>()
    );

    // The dead letter: the record as produced, with its reason and source.
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .set("group.id", "dead-letter-check")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&dead, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let m = loop {
        assert!(Instant::now() < deadline, "no dead letter arrived");
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            break m.unwrap();
        }
    };
    assert_eq!(m.payload(), Some(&vec![b'b'; 2_000][..]));
    assert_eq!(m.key(), Some(&b"k"[..]));
    let headers: Vec<(String, String)> = m
        .headers()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h.key.to_owned(),
                String::from_utf8(h.value.unwrap().to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        headers,
        vec![
            (
                REASON_HEADER.to_owned(),
                // Key and value: 1 + 2,000 bytes.
                "2001 bytes, over --record-bytes-max 1000".to_owned()
            ),
            (SOURCE_HEADER.to_owned(), format!("{}/0@{BIG}", k.topic)),
            (TIMESTAMP_HEADER.to_owned(), PRODUCED_MS.to_string()),
        ]
    );
    // Stamped as sent, not with the record's time of an hour before: the
    // topic's retention would delete a dead letter of a record older than
    // it minutes after it was acknowledged (until 2026-12-06 it was sent
    // with the record's time).
    match m.timestamp() {
        rdkafka::Timestamp::CreateTime(ms) => {
            assert!(ms >= started_ms, "{ms}, before the run ({started_ms})")
        }
        other => panic!("{other:?}"),
    }
    let (_, high) = c
        .fetch_watermarks(&dead, 0, Duration::from_secs(10))
        .unwrap();
    assert_eq!(high, 1, "one dead letter");
}

/// The dead letter is acknowledged before any record after it is put: the
/// brokers answer its produce with retriable errors first (on the mock
/// cluster; a real broker answers at once), so a send that did not wait
/// for its report (fire and forget, flushed at the stop) would put the
/// records after it while it is still unwritten, and this test sees the
/// dead-letter topic empty then.
#[test]
fn a_dead_letter_is_acknowledged_before_any_record_after_it_is_put() {
    let (k, dead) = source_and_dead_letter_topic("dl-acked-first");
    if let Some(mock) = k.mock() {
        // librdkafka retries these (`retry.backoff.ms`, 100 ms and up).
        mock.request_errors(
            rdkafka::types::RDKafkaApiKey::Produce,
            &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 3],
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dead_letter_config(&k, &dead, dir.path());
    let engine = Arc::new(
        Engine::open(EngineConfig::new(dir.path()).record_bytes_max(cfg.record_bytes_max)).unwrap(),
    );
    let tp = TopicPartition::new(&k.topic, 0);
    let watcher: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .create()
        .unwrap();
    // For each put of records after the dead letter: the dead-letter
    // topic's log end then.
    let seen: Arc<std::sync::Mutex<Vec<i64>>> = Arc::default();
    let sink = WatchedSink::new(Box::new(ArchiveSink::new(engine))).before_put(Box::new({
        let (seen, tp, dead) = (seen.clone(), tp.clone(), dead.clone());
        move |batches| {
            let after = batches
                .iter()
                .filter(|b| b.tp == tp)
                .any(|b| b.records.iter().any(|r| r.offset > BIG));
            if after {
                let (_, high) = watcher
                    .fetch_watermarks(&dead, 0, Duration::from_secs(10))
                    .unwrap();
                seen.lock().unwrap().push(high);
            }
            Ok(())
        }
    }));
    let opts = PipelineOptions {
        done: Some(Box::new(move |c| c.get(&tp) == Some(&RECORDS))),
        ..Default::default()
    };
    let report = run_bounded(&cfg, Box::new(sink), opts).unwrap();
    assert_eq!(report.stats.records_dead_lettered, 1);
    assert_eq!(report.stats.records_written, RECORDS as u64 - 1);
    let seen = seen.lock().unwrap().clone();
    assert!(
        !seen.is_empty() && seen.iter().all(|&high| high == 1),
        "the dead-letter topic's log end at each put of records after it: {seen:?}"
    );
}

/// A dead letter that ends its partition is committed past once the fetch
/// catches up past it (`SinkTask::caught_up`), so the next run does not
/// send it again (until the night of 2026-12-04 the commit stayed below it
/// until a later record came, and every assignment sent it again).
#[test]
fn a_dead_letter_that_ends_its_partition_is_committed_past_and_sent_once() {
    init_logs();
    let mut k = TestKafka::new("dl-last", 1);
    let dead = k.create_topic("dl-last-dead-letters", 1);
    produce_big_at(&k, RECORDS - 1);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dead_letter_config(&k, &dead, dir.path());
    let report = run(&cfg, dir.path()).unwrap();
    assert_eq!(report.stats.records_dead_lettered, 1);
    assert_eq!(report.stats.records_written, RECORDS as u64 - 1);
    assert_eq!(k.committed("dead-letter-group", 1)[&0], RECORDS);
    // Again: nothing to archive, nothing dead-lettered twice.
    let again = run(&cfg, dir.path()).unwrap();
    assert_eq!(again.stats.records_dead_lettered, 0);
    assert_eq!(again.stats.records_written, 0);
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .create()
        .unwrap();
    let (_, high) = c
        .fetch_watermarks(&dead, 0, Duration::from_secs(10))
        .unwrap();
    assert_eq!(high, 1, "one dead letter");
}

/// Arms `consumer::end_unseen` for `topic` (its end-of-partition events
/// are not seen, as when a stop or a revoke comes before them); removed
/// when dropped, however the test ends. Only that topic's events: the
/// failpoints are the process's.
struct EndUnseen;

impl EndUnseen {
    fn of(topic: &str) -> EndUnseen {
        fail::cfg(
            cairn_connector::consumer::FAILPOINT_END_UNSEEN,
            &format!("return({topic})"),
        )
        .unwrap();
        EndUnseen
    }
}

impl Drop for EndUnseen {
    fn drop(&mut self) {
        fail::remove(cairn_connector::consumer::FAILPOINT_END_UNSEEN);
    }
}

/// A run of `cfg` into the archive at `dir` until Kafka's commit of
/// partition 0 is `want`, stopped instead after 120 s: its report, and
/// whether it got there.
fn run_until_committed(
    cfg: &RunConfig,
    dir: &std::path::Path,
    want: i64,
) -> (cairn_connector::RunReport, bool) {
    let (sink, opts) = archive_until_committed(cfg, dir, want);
    // Stopped, not failed, if the commit never gets there: the caller
    // says so.
    let watchdog = cairn_tests::Watchdog::arm(opts.stop.clone(), Duration::from_secs(120));
    let report = cairn_connector::run_pipeline(cfg, sink, opts);
    let stopped_by_watchdog = watchdog.disarm();
    (report.unwrap(), !stopped_by_watchdog)
}

/// The same, with the fetch's end-of-partition event never seen, as when
/// a stop or a revoke comes before it: the dead letter is committed past
/// all the same, since the record set aside carries the partition's catch
/// up as a record taken after it would (until 2026-12-06 only that event
/// did, and a stop in between left the commit below the dead letter, which
/// the next run or owner sent again).
#[test]
fn a_dead_letter_that_ends_its_partition_is_committed_past_before_the_end_event() {
    init_logs();
    let mut k = TestKafka::new("dl-no-end", 1);
    let dead = k.create_topic("dl-no-end-dead-letters", 1);
    produce_big_at(&k, RECORDS - 1);
    let _unseen = EndUnseen::of(&k.topic);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dead_letter_config(&k, &dead, dir.path());
    let (report, got_there) = run_until_committed(&cfg, dir.path(), RECORDS);
    assert_eq!(report.stats.records_dead_lettered, 1);
    assert_eq!(report.stats.records_written, RECORDS as u64 - 1);
    assert!(
        got_there,
        "the commit never passed the dead letter (committed {:?})",
        k.committed("dead-letter-group", 1)
    );
    assert_eq!(k.committed("dead-letter-group", 1)[&0], RECORDS);
    let again = run(&cfg, dir.path()).unwrap();
    assert_eq!(again.stats.records_dead_lettered, 0);
    assert_eq!(again.stats.records_written, 0);
    assert_eq!(dead_letters(&k, &dead), 1);
}

/// The same for a partition resumed unchecked (its log bounds unreadable
/// at the assignment, as while a leader moves), whose first record taken
/// is the one dead-lettered: that record shows the resume point was in the
/// log, so the partition has consumed up to it, and its catch-up past it
/// is committed (until 2026-12-06, review: with no consumed offset, the
/// catch-up was passed over, and only the end-of-partition event carried
/// it).
#[test]
fn a_dead_letter_first_after_an_unchecked_resume_is_committed_past() {
    init_logs();
    let mut k = TestKafka::new("dl-unchecked", 1);
    let dead = k.create_topic("dl-unchecked-dead-letters", 1);
    let Some(mock) = k.mock() else {
        cairn_tests::skipped("error injection needs the mock cluster");
        return;
    };
    // All ten small, archived and committed; then one big one, at 10.
    produce_big_at(&k, RECORDS);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dead_letter_config(&k, &dead, dir.path());
    let first = run(&cfg, dir.path()).unwrap();
    assert_eq!(first.stats.records_written, RECORDS as u64);
    produce_one(&k, vec![b'b'; 2_000]);
    let _unseen = EndUnseen::of(&k.topic);
    let (report, got_there) = with_request_errors(mock, RDKafkaApiKey::ListOffsets, 200, || {
        run_until_committed(&cfg, dir.path(), RECORDS + 1)
    });
    assert!(report.stats.resumed_unchecked >= 1, "{:?}", report.stats);
    assert_eq!(report.stats.records_dead_lettered, 1);
    assert!(
        got_there,
        "the commit never passed the dead letter (committed {:?})",
        k.committed("dead-letter-group", 1)
    );
    assert_eq!(dead_letters(&k, &dead), 1);
}

/// Produce one record with `value` to partition 0 of `k`'s topic.
fn produce_one(k: &TestKafka, value: Vec<u8>) {
    let p: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .create()
        .unwrap();
    p.send(
        BaseRecord::<[u8], [u8]>::to(&k.topic)
            .partition(0)
            .key(b"k")
            .payload(&value),
    )
    .unwrap();
    p.flush(Duration::from_secs(10)).unwrap();
}

/// How many dead letters `dead` holds (its partition 0's high watermark).
fn dead_letters(k: &TestKafka, dead: &str) -> i64 {
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .create()
        .unwrap();
    c.fetch_watermarks(dead, 0, Duration::from_secs(10))
        .unwrap()
        .1
}

/// A partition that starts at its log's beginning (nothing archived,
/// nothing committed) and holds only records set aside is committed past
/// them, and the next run archives, skips and sends nothing (until
/// 2026-12-05 it had no consumed offset until a put, its catch-up was
/// passed over, and every run read the records again: dead letters sent
/// again at each assignment).
#[test]
fn a_partition_of_only_set_aside_records_is_committed_past_them() {
    init_logs();
    for policy in [OnOversize::DeadLetter, OnOversize::Skip] {
        let name = format!("dl-only-{policy:?}").to_lowercase();
        let mut k = TestKafka::new(&name, 1);
        let dead = k.create_topic(&format!("{name}-dead-letters"), 1);
        let p: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &k.brokers)
            .create()
            .unwrap();
        for _ in 0..2 {
            p.send(
                BaseRecord::<[u8], [u8]>::to(&k.topic)
                    .partition(0)
                    .payload(&[b'b'; 2_000][..]),
            )
            .unwrap();
        }
        p.flush(Duration::from_secs(10)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = dead_letter_config(&k, &dead, dir.path());
        if policy == OnOversize::Skip {
            cfg.on_oversize = policy;
            cfg.dead_letter_topic = None;
        }
        let tp = TopicPartition::new(&k.topic, 0);
        let run = || {
            let engine = Arc::new(
                Engine::open(EngineConfig::new(dir.path()).record_bytes_max(cfg.record_bytes_max))
                    .unwrap(),
            );
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let watchdog = cairn_tests::Watchdog::arm(stop.clone(), Duration::from_secs(60));
            let want = tp.clone();
            let report = cairn_connector::run_pipeline(
                &cfg,
                Box::new(ArchiveSink::new(engine)),
                PipelineOptions {
                    stop,
                    done: Some(Box::new(move |c| c.get(&want) == Some(&2))),
                    ..Default::default()
                },
            )
            .unwrap();
            assert!(
                !watchdog.disarm(),
                "{policy:?}: never committed past the two records set aside"
            );
            report
        };
        let first = run();
        assert_eq!(
            first.stats.records_dead_lettered + first.stats.records_oversize_skipped,
            2,
            "{policy:?}: {:?}",
            first.stats
        );
        assert_eq!(k.committed("dead-letter-group", 1)[&0], 2, "{policy:?}");
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        assert_eq!(engine.durable_offset(&tp), Some(2), "{policy:?}");
        drop(engine);
        // The next run starts past them: nothing read again.
        let again = run();
        assert_eq!(again.stats.records_dead_lettered, 0, "{policy:?}");
        assert_eq!(again.stats.records_oversize_skipped, 0, "{policy:?}");
        assert_eq!(again.stats.records_written, 0, "{policy:?}");
    }
}

/// Run the test's records with the brokers refusing the dead letter's
/// produce with `error` (injected through the mock cluster; nothing else
/// produces here), which must stop the run at record `BIG` with nothing
/// committed past it: the topics, the archive's folder and the failure's
/// detail. `None` against a real broker (skipped).
fn refused_by_the_brokers(
    name: &str,
    error: rdkafka::types::RDKafkaRespErr,
) -> Option<(TestKafka, tempfile::TempDir, String)> {
    let (k, dead) = source_and_dead_letter_topic(name);
    let Some(mock) = k.mock() else {
        cairn_tests::skipped("the brokers' refusal is injected through the mock cluster");
        return None;
    };
    mock.request_errors(rdkafka::types::RDKafkaApiKey::Produce, &[error; 5]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dead_letter_config(&k, &dead, dir.path());
    let detail = refused_at_big(&k, &cfg, dir.path());
    mock.clear_request_errors(rdkafka::types::RDKafkaApiKey::Produce);
    Some((k, dir, detail))
}

#[test]
fn a_dead_letter_that_cannot_be_delivered_stops_the_run_before_it() {
    // An error that is permanent for librdkafka.
    let Some((k, dir, _)) = refused_by_the_brokers(
        "dl-refused",
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_RECORD,
    ) else {
        return;
    };
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(
        engine
            .read(&TopicPartition::new(&k.topic, 0), 0)
            .unwrap()
            .all(|r| r.unwrap().offset < BIG),
        "a record after the failed dead letter was archived"
    );
}

/// A dead letter larger than the producer's queue (`-X
/// queue.buffering.max.kbytes`) stops the run before it, with nothing
/// committed past it, and says which setting to raise (until the night of
/// 2026-12-04 it said only "Local: Queue full", on every restart).
#[test]
fn a_dead_letter_too_large_for_the_producers_queue_names_the_setting() {
    let (k, dead) = source_and_dead_letter_topic("dl-queue");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = dead_letter_config(&k, &dead, dir.path());
    // 1 KiB: the 2 kB record does not fit even an empty queue.
    cfg.kafka
        .insert("queue.buffering.max.kbytes".into(), "1".into());
    let detail = refused_at_big(&k, &cfg, dir.path());
    assert!(
        detail.contains("do not fit librdkafka's queue")
            && detail.contains("queue.buffering.max.kbytes"),
        "{detail}"
    );
}

/// Run `cfg`, which must stop at the dead letter of record `BIG` with
/// nothing committed past it: the failure's detail.
fn refused_at_big(k: &TestKafka, cfg: &RunConfig, dir: &std::path::Path) -> String {
    let detail = match run(cfg, dir) {
        Err(ConnectorError::DeadLetterFailed {
            partition: 0,
            offset: BIG,
            detail,
            dead_letter_topic,
            ..
        }) if Some(&dead_letter_topic) == cfg.dead_letter_topic.as_ref() => detail,
        other => panic!("{other:?}"),
    };
    // (No commit reads as 0.)
    let c = k.committed("dead-letter-group", 1);
    assert!(c[&0] <= BIG, "committed {c:?} past offset {BIG}");
    detail
}

/// A dead letter over the producer's own cap (`-X message.max.bytes`,
/// which has to exceed `--record-bytes-max` by a dead letter's own
/// headers) stops the run before it,
/// and says which setting refused it: librdkafka's words alone ("Broker:
/// Message size too large") sent the operator to the broker (until
/// 2026-12-05).
#[test]
fn a_dead_letter_over_the_producers_cap_names_the_setting() {
    let (k, dead) = source_and_dead_letter_topic("dl-cap");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = dead_letter_config(&k, &dead, dir.path());
    // Above --record-bytes-max (1000), below the 2 kB record.
    cfg.kafka.insert("message.max.bytes".into(), "1500".into());
    let detail = refused_at_big(&k, &cfg, dir.path());
    assert!(
        detail.contains("-X message.max.bytes (1500)") && detail.contains("not the broker"),
        "{detail}"
    );
}

/// A dead letter the dead-letter topic refuses as too large (its
/// `max.message.bytes`: the broker's refusal, injected) stops the run
/// before it, with nothing committed past it, and says to raise the
/// topic's limit (until 2026-12-06 this advice was untested).
#[test]
fn a_dead_letter_over_the_topics_limit_says_to_raise_it() {
    let Some((_, _, detail)) = refused_by_the_brokers(
        "dl-topic-limit",
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
    ) else {
        return;
    };
    assert!(
        detail.contains("the dead-letter topic's max.message.bytes is below this record")
            && detail.contains("--on-oversize skip or fail"),
        "{detail}"
    );
}

/// A record of exactly `--record-bytes-max` (key, value and headers) is
/// archived, and one a byte over it dead-lettered: the consumer and the
/// engine measure alike, and refuse only above the limit.
#[test]
fn a_record_at_the_limit_is_archived_and_one_byte_over_it_dead_lettered() {
    init_logs();
    let mut k = TestKafka::new("dl-boundary", 1);
    let dead = k.create_topic("dl-boundary-dead-letters", 1);
    // Key "k", a header "h" = "x" and 997 bytes: 1,000; then 1,001; then
    // a small one. Headers count, names and values.
    let p: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .create()
        .unwrap();
    for value in [vec![b'a'; 997], vec![b'b'; 998], b"small".to_vec()] {
        let headers = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
            key: "h",
            value: Some("x"),
        });
        p.send(
            BaseRecord::<[u8], [u8]>::to(&k.topic)
                .partition(0)
                .key(b"k")
                .payload(&value)
                .headers(headers),
        )
        .unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dead_letter_config(&k, &dead, dir.path());
    let (sink, opts) = archive_until_committed(&cfg, dir.path(), 3);
    let report = run_bounded(&cfg, sink, opts).unwrap();
    assert_eq!(report.stats.records_dead_lettered, 1);
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let held: Vec<(i64, usize)> = engine
        .read(&TopicPartition::new(&k.topic, 0), 0)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.offset, r.value.map_or(0, |v| v.len()))
        })
        .collect();
    assert_eq!(held, [(0, 997), (2, 5)]);
    assert_eq!(dead_letters(&k, &dead), 1);
}

#[test]
fn a_missing_dead_letter_topic_is_refused_at_start() {
    init_logs();
    let k = TestKafka::new("dl-missing", 1);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = dead_letter_config(&k, "unused", dir.path());
    cfg.dead_letter_topic = Some(format!("{}-no-dead-letters", k.topic));
    match run(&cfg, dir.path()) {
        Err(ConnectorError::UnknownTopic {
            topic, next_step, ..
        }) => {
            assert_eq!(topic, format!("{}-no-dead-letters", k.topic));
            assert!(next_step.contains("--dead-letter-topic"), "{next_step}");
        }
        other => panic!("{other:?}"),
    }
    // And the settings that make no sense are refused before that.
    cfg.dead_letter_topic = None;
    assert!(
        matches!(cfg.validate(), Err(ConnectorError::Config(m)) if m.contains("--dead-letter-topic"))
    );
    cfg.dead_letter_topic = Some(k.topic.clone());
    assert!(
        matches!(cfg.validate(), Err(ConnectorError::Config(m)) if m.contains("also archived"))
    );
    cfg.on_oversize = OnOversize::Skip;
    cfg.dead_letter_topic = Some("dead-letters".into());
    assert!(
        matches!(cfg.validate(), Err(ConnectorError::Config(m)) if m.contains("only used with"))
    );
}
