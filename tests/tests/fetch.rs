//! The run's own queue (`cairn_connector::fetch`) against Kafka (the mock
//! cluster, or `CAIRN_TEST_BROKERS`): records come in each partition's
//! order, exactly as produced; a taker that stops leaves the rest queued in
//! order; librdkafka's positions follow the records handed over and never
//! an error's offset; and a fetch error the run cannot go on from stops it
//! before anything after it is archived.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_connector::cli::demo::{demo_record, produce, DEMO_PARTITIONS};
use cairn_connector::fetch::{Fetch, Flow, TAKE_MAX};
use cairn_connector::{run_pipeline, ArchiveSink, PipelineOptions};
use cairn_engine::{Engine, EngineConfig, TopicPartition};
use cairn_tests::{config, init_logs, run_to_error, TestKafka, Watchdog};
use rand::{Rng, SeedableRng};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

fn consumer(k: &TestKafka, group: &str, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    for (key, value) in extra {
        c.set(*key, *value);
    }
    c.create().expect("consumer")
}

/// Assign every partition of `k`'s topic through `fetch`, from
/// `start(partition)`.
fn assign(c: &BaseConsumer, fetch: &Fetch<'_>, k: &TestKafka, start: impl Fn(i32) -> Offset) {
    let mut tpl = TopicPartitionList::new();
    for p in 0..DEMO_PARTITIONS {
        tpl.add_partition_offset(&k.topic, p, start(p)).unwrap();
    }
    fetch.assign(c, &tpl).unwrap();
}

/// Takes that stop at random points hand over every record once, in each
/// partition's offset order and as produced; after each take, the position
/// of every partition taken from so far is the offset after the last record
/// handed over.
#[test]
fn stopped_takes_leave_the_rest_in_order_and_positions_follow_the_records() {
    init_logs();
    let seed = cairn_engine::fuzzing::seed("fetch_order");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let k = TestKafka::new("fetch-order", DEMO_PARTITIONS);
    let n: u64 = 3_000;
    produce(&k.brokers, &k.topic, 0..n).unwrap();
    let c = consumer(&k, "fetch-order-group", &[]);
    // SAFETY: declared after `c`, so dropped before it.
    #[allow(unsafe_code)]
    let fetch = unsafe { Fetch::new(&c) }.unwrap();
    assign(&c, &fetch, &k, |_| Offset::Beginning);
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let (mut got, mut takes) = (0u64, 0u32);
    let deadline = Instant::now() + Duration::from_secs(120);
    while got < n {
        assert!(Instant::now() < deadline, "{got} of {n} records taken");
        let stop_after = rng.gen_range(1..=200usize);
        let mut handed = 0usize;
        let taken = fetch.take(Duration::from_millis(100), TAKE_MAX, |m| {
            assert!(m.error().is_none(), "{:?}", m.error());
            let (p, o) = (m.partition(), m.offset());
            let want = next.entry(p).or_insert(0);
            assert_eq!(o, *want, "partition {p}: offsets in order, none skipped");
            *want += 1;
            let (wp, record) = demo_record(o as u64 * DEMO_PARTITIONS as u64 + p as u64);
            assert_eq!((wp, m.to_record().unwrap()), (p, record), "as produced");
            handed += 1;
            if handed == stop_after {
                Flow::Stop
            } else {
                Flow::Go
            }
        });
        assert_eq!(taken, handed);
        assert!(handed <= stop_after, "the taker's stop is obeyed");
        got += handed as u64;
        takes += 1;
        let positions = c.position().unwrap();
        for (&p, &o) in &next {
            assert_eq!(
                positions.find_partition(&k.topic, p).unwrap().offset(),
                Offset::Offset(o),
                "partition {p}: the position is after the last record handed over"
            );
        }
    }
    assert_eq!(next.values().sum::<i64>() as u64, n);
    eprintln!("{n} records in {takes} takes");
}

/// A position out of Kafka's log, under `auto.offset.reset=error`: the
/// error reaches the taker with that offset, and the partition's position
/// does not move past it (librdkafka's batch call would have set it to the
/// error's offset plus one, so that a resumed fetch skipped that record).
#[test]
fn an_error_with_an_offset_does_not_move_the_position() {
    init_logs();
    let k = TestKafka::new("fetch-error-position", DEMO_PARTITIONS);
    produce(&k.brokers, &k.topic, 0..30).unwrap();
    let c = consumer(&k, "fetch-error-group", &[("auto.offset.reset", "error")]);
    // SAFETY: declared after `c`, so dropped before it.
    #[allow(unsafe_code)]
    let fetch = unsafe { Fetch::new(&c) }.unwrap();
    let beyond = 1_000_000;
    assign(&c, &fetch, &k, |p| {
        if p == 0 {
            Offset::Offset(beyond)
        } else {
            Offset::Beginning
        }
    });
    let mut error = None;
    let mut records = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while error.is_none() || records < 20 {
        assert!(Instant::now() < deadline, "no error, or {records} records");
        fetch.take(Duration::from_millis(100), TAKE_MAX, |m| {
            match m.error() {
                Some(e) => {
                    assert_eq!((m.partition(), m.offset()), (0, beyond), "{e}");
                    error = Some(e);
                }
                None => {
                    assert_ne!(m.partition(), 0);
                    records += 1;
                }
            }
            Flow::Go
        });
    }
    let position = c.position().unwrap();
    let p0 = position.find_partition(&k.topic, 0).unwrap().offset();
    assert_ne!(p0, Offset::Offset(beyond + 1), "{error:?}");
    assert!(
        !matches!(p0, Offset::Offset(_)),
        "nothing of 0 was handed over: {p0:?}"
    );
}

/// Assigned again outside a rebalance callback (as an offset reset does),
/// a partition's fetch stops and starts, and the stop clears its forward
/// (by hand: without `forward_again` no record arrives before the
/// deadline). Forwarding again, as the consumer loop does, brings its
/// records from the new start, in order, with nothing of the old fetch
/// after them.
#[test]
fn forwarded_again_after_a_reassignment_records_go_on_from_the_new_start() {
    init_logs();
    let k = TestKafka::new("fetch-reassign", DEMO_PARTITIONS);
    let n: u64 = 600;
    produce(&k.brokers, &k.topic, 0..n).unwrap();
    let c = consumer(&k, "fetch-reassign-group", &[]);
    // SAFETY: declared after `c`, so dropped before it.
    #[allow(unsafe_code)]
    let fetch = unsafe { Fetch::new(&c) }.unwrap();
    assign(&c, &fetch, &k, |_| Offset::Beginning);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut first = 0;
    while first == 0 {
        assert!(Instant::now() < deadline);
        first = fetch.take(Duration::from_millis(100), 5, |_| Flow::Go);
    }
    // Every partition again, from offset 150: what the old fetches queued
    // is outdated, and the new fetches' records wait in their fetch queues
    // until forwarded again.
    let restart = 150;
    let mut tpl = TopicPartitionList::new();
    for p in 0..DEMO_PARTITIONS {
        tpl.add_partition_offset(&k.topic, p, Offset::Offset(restart))
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut next: BTreeMap<i32, i64> = (0..DEMO_PARTITIONS).map(|p| (p, restart)).collect();
    let mut got = 0u64;
    let want = n - restart as u64 * DEMO_PARTITIONS as u64;
    while got < want {
        assert!(
            Instant::now() < deadline,
            "{got} of {want} records after the reassignment"
        );
        fetch.forward_again();
        fetch.take(Duration::from_millis(100), TAKE_MAX, |m| {
            assert!(m.error().is_none(), "{:?}", m.error());
            let o = next.get_mut(&m.partition()).unwrap();
            assert_eq!(
                m.offset(),
                *o,
                "partition {}: from the new start, in order",
                m.partition()
            );
            *o += 1;
            got += 1;
            Flow::Go
        });
    }
}

/// A panic in the taker goes on after librdkafka's call has returned; the
/// messages after the one it panicked on stay queued, in order.
#[test]
fn a_panicking_taker_leaves_the_rest_queued() {
    init_logs();
    let k = TestKafka::new("fetch-panic", 1);
    let n = 300;
    produce_one_partition(&k, n);
    let c = consumer(&k, "fetch-panic-group", &[]);
    // SAFETY: declared after `c`, so dropped before it.
    #[allow(unsafe_code)]
    let fetch = unsafe { Fetch::new(&c) }.unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&k.topic, 0, Offset::Beginning)
        .unwrap();
    fetch.assign(&c, &tpl).unwrap();
    let mut offsets = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Take until the taker panics on offset 10.
    let mut panicked = false;
    while !panicked {
        assert!(
            Instant::now() < deadline,
            "{} taken, no panic",
            offsets.len()
        );
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fetch.take(Duration::from_millis(100), TAKE_MAX, |m| {
                if m.offset() == 10 {
                    panic!("taker panics at 10");
                }
                offsets.push(m.offset());
                Flow::Go
            })
        }));
        if let Err(p) = r {
            assert_eq!(p.downcast_ref::<&str>(), Some(&"taker panics at 10"));
            assert_eq!(offsets, (0..10).collect::<Vec<i64>>());
            panicked = true;
        }
    }
    while offsets.len() < n as usize - 1 {
        assert!(Instant::now() < deadline, "{} taken", offsets.len());
        fetch.take(Duration::from_millis(100), TAKE_MAX, |m| {
            offsets.push(m.offset());
            Flow::Go
        });
    }
    let want: Vec<i64> = (0..10).chain(11..n).collect();
    assert_eq!(
        offsets, want,
        "the one it panicked on is gone, nothing else"
    );
}

fn produce_one_partition(k: &TestKafka, n: i64) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .create()
        .unwrap();
    for i in 0..n {
        let v = i.to_string();
        p.send(BaseRecord::<(), _>::to(&k.topic).partition(0).payload(&v))
            .unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// A fetch error the run does not go on from (not authorized for the
/// topic; librdkafka backs off and asks again, reporting it once) arrives
/// on the run's queue ahead of the records: the run stops with it, and
/// neither archives nor commits anything.
#[test]
fn a_fetch_error_that_stops_the_run_archives_nothing_after_it() {
    init_logs();
    let k = TestKafka::new("fetch-unauthorized", DEMO_PARTITIONS);
    let Some(mock) = k.mock() else {
        cairn_tests::skipped("error injection needs the mock cluster");
        return;
    };
    produce(&k.brokers, &k.topic, 0..300).unwrap();
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    mock.request_errors(
        RDKafkaApiKey::Fetch,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED],
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&k, "fetch-unauthorized-group", dir.path());
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let err = run_to_error(&cfg, &engine);
    // Named: the partition and where its fetch failed.
    assert!(
        err.contains("uthoriz") && err.contains(&format!("{}/", k.topic)),
        "{err}"
    );
    assert!(engine.durable_offsets().is_empty(), "archived nothing");
    let kafka = k.committed("fetch-unauthorized-group", DEMO_PARTITIONS);
    assert!(
        kafka.values().all(|&o| o == 0),
        "committed nothing: {kafka:?}"
    );
}

/// Headers librdkafka refuses to read (it parses at most 100,000; Kafka has
/// no such limit, so a producer can send more): the record stops the run
/// as unreadable, naming it, with nothing at or after it archived (before,
/// rust-rdkafka handed such a record over without its headers, and it was
/// archived changed).
#[test]
fn a_record_whose_headers_cannot_be_read_stops_the_run() {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    init_logs();
    let k = TestKafka::new("fetch-headers", 1);
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .create()
        .unwrap();
    let mut many = OwnedHeaders::new_with_capacity(100_001);
    for _ in 0..100_001 {
        many = many.insert(Header {
            key: "h",
            value: None::<&[u8]>,
        });
    }
    for i in 0..3 {
        let v = i.to_string();
        let mut r = BaseRecord::<(), _>::to(&k.topic).partition(0).payload(&v);
        if i == 1 {
            r = r.headers(many.clone());
        }
        p.send(r).unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&k, "fetch-headers-group", dir.path());
    // One record a put: the one before it may be archived (its put may
    // or may not have run when the error stops the run), nothing after.
    cfg.batch_records_max = 1;
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let err = run_to_error(&cfg, &engine);
    assert!(
        err.contains(&format!("{}/0@1", k.topic)) && err.contains("headers cannot be read"),
        "{err}"
    );
    let durable = engine.durable_offsets();
    assert!(
        durable
            .get(&TopicPartition::new(&k.topic, 0))
            .is_none_or(|&o| o <= 1),
        "nothing at or after offset 1 archived: {durable:?}"
    );
}

/// A topic deleted while it is archived (the mock cluster's metadata says
/// it is unknown): librdkafka reports it on the consumer queue, as the
/// group's "Subscribed topic not available: t: ...", and on each of the
/// topic's fetch queues (forwarded to the run's queue) as "topic does not
/// exist"; whichever comes first, the run stops with it, naming the topic,
/// and commits nothing past what is durable.
#[test]
fn a_topic_deleted_while_archived_stops_the_run() {
    init_logs();
    let k = TestKafka::new("fetch-deleted", DEMO_PARTITIONS);
    let Some(mock) = k.mock() else {
        cairn_tests::skipped("deleting a topic under a run needs the mock cluster");
        return;
    };
    produce(&k.brokers, &k.topic, 0..300).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&k, "fetch-deleted-group", dir.path());
    cfg.kafka
        .insert("topic.metadata.refresh.interval.ms".into(), "100".into());
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (committed_tx, committed_rx) = std::sync::mpsc::channel::<()>();
    let committed_tx = std::sync::Mutex::new(committed_tx);
    let run = std::thread::spawn({
        let engine = engine.clone();
        let stop = stop.clone();
        move || {
            run_pipeline(
                &cfg,
                Box::new(ArchiveSink::new(engine)),
                PipelineOptions {
                    stop,
                    on_commit: Some(Box::new(move |committed, durable| {
                        for (tp, o) in committed {
                            assert!(*o <= durable[tp], "committed {tp}@{o} above durable");
                        }
                        let _ = committed_tx.lock().unwrap().send(());
                    })),
                    ..Default::default()
                },
            )
            .map(drop)
            .map_err(|e| e.to_string())
        }
    });
    committed_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a first commit");
    mock.topic_error(
        &k.topic,
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
    )
    .unwrap();
    // A run that goes on past the error would run forever: stop it after a
    // minute, which then fails the test rather than hanging it.
    let watchdog = Watchdog::arm(stop.clone(), Duration::from_secs(60));
    let result = run.join().unwrap();
    assert!(
        !watchdog.disarm(),
        "the run went on for a minute with the topic gone: {result:?}"
    );
    let err = result.expect_err("the run must stop with the topic gone, not go on");
    assert!(err.contains(&k.topic), "the error names the topic: {err}");
    // Not the commit check's panic, whose message names the topic too
    // (seen in review, 2026-12-05).
    assert!(
        !err.contains("commit task failed") && !err.contains("above durable"),
        "the run stopped on the commit check, not the topic: {err}"
    );
    // What was archived before stays, and nothing was committed past it.
    let durable = engine.durable_offsets();
    assert!(!durable.is_empty(), "archived before the topic went");
    let kafka = k.committed("fetch-deleted-group", DEMO_PARTITIONS);
    for (p, o) in kafka {
        let d = durable
            .get(&TopicPartition::new(&k.topic, p))
            .copied()
            .unwrap_or(0);
        assert!(o <= d, "{}/{p}@{o} committed past durable {d}", k.topic);
    }
}

/// A fetch error code librdkafka does not know (a broker's 103,
/// INCONSISTENT_TOPIC_ID, when a topic is recreated under a consumer), which
/// librdkafka hands on as it came: the taker reads it as `Unknown`, not as
/// a value of the bindings' enum with no variant (undefined behaviour,
/// before 2026-12-03). Mock cluster only: its request errors take any code.
#[test]
#[allow(unsafe_code)]
fn an_unknown_fetch_error_code_is_read_as_unknown() {
    use rdkafka::bindings as rd;
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    init_logs();
    // A client whose own mock cluster the test drives through the C API.
    let owner: BaseProducer = ClientConfig::new()
        .set("test.mock.num.brokers", "1")
        .create()
        .expect("mock cluster");
    // SAFETY: the mock cluster lives as long as `owner`, which outlives
    // every use below; the strings are NUL-terminated.
    let (mc, brokers) = unsafe {
        let mc = rd::rd_kafka_handle_mock_cluster(owner.client().native_ptr());
        assert!(!mc.is_null());
        let b = std::ffi::CStr::from_ptr(rd::rd_kafka_mock_cluster_bootstraps(mc));
        (mc, b.to_string_lossy().into_owned())
    };
    let topic = std::ffi::CString::new("unknown-code").unwrap();
    // SAFETY: as above.
    unsafe {
        rd::rd_kafka_mock_topic_create(mc, topic.as_ptr(), 1, 1);
    }
    owner
        .send(
            BaseRecord::<(), [u8]>::to("unknown-code")
                .partition(0)
                .payload(b"r"),
        )
        .unwrap();
    owner.flush(Duration::from_secs(30)).unwrap();
    // Every Fetch answered with 103 for a while.
    // SAFETY: as above; the variadic codes are C ints.
    unsafe {
        rd::rd_kafka_mock_push_request_errors(mc, 1, 4, 103i32, 103i32, 103i32, 103i32);
    }
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", "unknown-code-group")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    // SAFETY: declared after `c`, so dropped before it.
    #[allow(unsafe_code)]
    let fetch = unsafe { Fetch::new(&c) }.unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("unknown-code", 0, Offset::Beginning)
        .unwrap();
    fetch.assign(&c, &tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = None;
    while seen.is_none() {
        assert!(Instant::now() < deadline, "no error taken");
        fetch.take(Duration::from_millis(200), TAKE_MAX, |m| {
            if let Some(e) = m.error() {
                seen = Some((e, m.describe_error()));
                return Flow::Stop;
            }
            Flow::Go
        });
    }
    let (e, described) = seen.unwrap();
    assert!(
        matches!(e, KafkaError::MessageConsumption(RDKafkaErrorCode::Unknown)),
        "{e:?}: {described}"
    );
    drop(fetch);
    drop(c);
}
