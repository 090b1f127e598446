//! Offsets that hold no record for a `read_committed` consumer (Kafka's
//! transaction markers, an aborted transaction's records) at a partition's
//! end: the archive records where the fetch caught up past them
//! (`SinkTask::caught_up`, engine `advance_partitions`), commits it, and
//! resumes there; before the night of 2026-12-04 it committed below them
//! for ever (a lag of one per marker on every lag monitor), and a restart
//! after they aged out of Kafka read them as records lost.

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_connector::cli::demo::{check_archive, produce};
use cairn_connector::{ArchiveSink, PipelineOptions};
use cairn_engine::{Engine, EngineConfig, TopicPartition};
use cairn_tests::{
    assert_committed_within_durable, config, offsets_without_records, run_bounded, TestKafka,
};

/// Run until Kafka's committed offsets are `want`, asserting at every
/// commit that none passes what is durable.
fn run_until_committed(
    cfg: &cairn_connector::RunConfig,
    want: BTreeMap<TopicPartition, i64>,
) -> cairn_connector::RunReport {
    let engine = Arc::new(Engine::open(EngineConfig::new(&cfg.data)).unwrap());
    let store = Arc::downgrade(&engine);
    let opts = PipelineOptions {
        done: Some(Box::new(move |c| {
            want.iter().all(|(tp, o)| c.get(tp) == Some(o))
        })),
        on_commit_sent: Some(Box::new(move |committed, durable| {
            assert_committed_within_durable(&store, committed, durable);
        })),
        ..Default::default()
    };
    run_bounded(cfg, Box::new(ArchiveSink::new(engine)), opts).unwrap()
}

#[test]
fn offsets_past_the_last_record_that_hold_none_are_archived_as_such_and_committed() {
    cairn_tests::init_logs();
    let k = TestKafka::new("txn-markers", 3);
    let n = 30; // demo records: ten on each partition, offsets 0..=9
    produce(&k.brokers, &k.topic, 0..n).unwrap();
    let skipped0 = offsets_without_records(&k, 0);
    let skipped1 = offsets_without_records(&k, 1) + offsets_without_records(&k, 1);
    let tp = |p| TopicPartition::new(&k.topic, p);
    let ends = BTreeMap::from([(tp(0), 10 + skipped0), (tp(1), 10 + skipped1), (tp(2), 10)]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&k, "txn-group", dir.path());
    let report = run_until_committed(&cfg, ends.clone());
    assert_eq!(report.stats.records_written, n);
    assert_eq!(report.committed, ends, "committed past the markers");
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    check_archive(&engine, &k.topic, n).unwrap();
    assert_eq!(engine.durable_offsets(), ends, "durable past the markers");
    assert!(engine.verify().unwrap().is_clean());
    let summary = engine.partition(&tp(1)).unwrap();
    assert_eq!(
        (summary.record_count, summary.next_offset),
        (10, 10 + skipped1)
    );
    // Where the next run resumes, as the archive says it: past the markers
    // (a fetch from below them would skip them too, so the run below
    // cannot tell).
    let engine = Arc::new(engine);
    {
        use cairn_connector::SinkTask;
        let mut sink = ArchiveSink::new(engine.clone());
        let all: Vec<TopicPartition> = ends.keys().cloned().collect();
        assert_eq!(sink.open(&all).unwrap(), ends, "resumes past the markers");
    }
    drop(engine);
    let kafka = k.committed("txn-group", 3);
    for (tp, end) in &ends {
        assert_eq!(kafka[&tp.partition], *end, "{tp}: Kafka's committed offset");
    }

    // A record after the markers: the next run resumes at the archive's
    // offset, past them, and archives it once, with nothing again. And a
    // marker on a partition that takes nothing before it in this run (it
    // resumes at the archive's offset, below the marker).
    produce_one(&k, 0, b"after the marker");
    let skipped2 = offsets_without_records(&k, 2);
    let mut after = ends.clone();
    after.insert(tp(0), 10 + skipped0 + 1);
    after.insert(tp(2), 10 + skipped2);
    let again = run_until_committed(&cfg, after.clone());
    assert_eq!(again.stats.records_written, 1);
    assert_eq!(again.stats.records_duplicate, 0);
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let p0 = offsets_and_values(&engine, &tp(0));
    assert_eq!(p0.len(), 11);
    assert_eq!(
        p0.last().unwrap(),
        &(10 + skipped0, Some(b"after the marker".to_vec()))
    );
    assert_eq!(engine.durable_offsets(), after);
    assert!(engine.verify().unwrap().is_clean());
    drop(engine);

    // A marker again, met by a run whose partitions resume unchecked (their
    // log bounds unreadable at the assignment, as while a leader moves):
    // the fetch that reaches the log's end past it shows the start was in
    // the log, and the catch-up is recorded and committed as above. Until
    // review of 2026-12-05 it was dropped (such a partition has no consumed
    // offset), and the run never committed past the marker.
    let Some(mock) = k.mock() else {
        cairn_tests::skipped("error injection needs the mock cluster");
        return;
    };
    let skipped3 = offsets_without_records(&k, 2);
    let mut third = after.clone();
    third.insert(tp(2), 10 + skipped2 + skipped3);
    {
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
        mock.request_errors(
            RDKafkaApiKey::ListOffsets,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN; 20],
        );
    }
    let report = run_until_committed(&cfg, third.clone());
    mock.clear_request_errors(rdkafka::types::RDKafkaApiKey::ListOffsets);
    assert!(
        report.stats.resumed_unchecked >= 1,
        "the assignment must have met the errors: {:?}",
        report.stats
    );
    assert_eq!(report.stats.records_written, 0);
    assert_eq!(report.committed, third, "committed past the marker");
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(engine.durable_offsets(), third, "durable past the marker");
    assert!(engine.verify().unwrap().is_clean());
}

/// A partition that holds only transaction markers from its log start,
/// met by a group with no offsets (`--auto-offset-reset earliest`): the
/// fetch reaches the log's end with nothing taken, and the archive records
/// and commits where it ends, so lag tools see an offset and the next run
/// does not read the markers again. Until 2026-12-06 it was never committed
/// (no record was handed over and no start recorded, and the worker left
/// such a partition out). That an empty partition, which passed nothing, is
/// not recorded is the worker's unit test's (`caught_up_past_…`): here its
/// end-of-partition event may come after the run is done.
#[test]
fn a_partition_of_only_markers_from_its_start_is_committed_at_its_end() {
    cairn_tests::init_logs();
    let k = TestKafka::new("txn-only-markers", 2);
    let skipped = offsets_without_records(&k, 0) + offsets_without_records(&k, 0);
    let tp = |p| TopicPartition::new(&k.topic, p);
    let ends = BTreeMap::from([(tp(0), skipped)]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&k, "txn-only-group", dir.path());
    let report = run_until_committed(&cfg, ends.clone());
    assert_eq!(report.stats.records_written, 0);
    assert_eq!(report.committed, ends, "committed at the log's end");
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert_eq!(engine.durable_offsets(), ends, "durable at the log's end");
    let summary = engine.partition(&tp(0)).unwrap();
    assert_eq!((summary.record_count, summary.next_offset), (0, skipped));
    assert!(engine.verify().unwrap().is_clean());
    drop(engine);
    let kafka = k.committed("txn-only-group", 2);
    assert_eq!(kafka[&0], skipped, "Kafka's committed offset");

    // The next run resumes past the markers and archives the record after
    // them once, at its own offset, and the empty partition's first record.
    produce_one(&k, 0, b"after the markers");
    produce_one(&k, 1, b"first");
    let after = BTreeMap::from([(tp(0), skipped + 1), (tp(1), 1)]);
    let again = run_until_committed(&cfg, after.clone());
    assert_eq!(again.stats.records_written, 2);
    assert_eq!(again.stats.records_duplicate, 0);
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let p0 = offsets_and_values(&engine, &tp(0));
    assert_eq!(p0, vec![(skipped, Some(b"after the markers".to_vec()))]);
    assert_eq!(engine.durable_offsets(), after);
    assert!(engine.verify().unwrap().is_clean());
}

/// Each record of `tp` in `engine`, as its offset and value.
fn offsets_and_values(engine: &Engine, tp: &TopicPartition) -> Vec<(i64, Option<Vec<u8>>)> {
    engine
        .read(tp, 0)
        .unwrap()
        .map(|r| r.map(|r| (r.offset, r.value)).unwrap())
        .collect()
}

/// One record of `value` to partition `partition` of `k`'s topic.
fn produce_one(k: &TestKafka, partition: i32, value: &[u8]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let p: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .create()
        .unwrap();
    p.send(
        BaseRecord::<(), [u8]>::to(&k.topic)
            .partition(partition)
            .payload(value),
    )
    .map_err(|(e, _)| e)
    .unwrap();
    p.flush(std::time::Duration::from_secs(30)).unwrap();
}
