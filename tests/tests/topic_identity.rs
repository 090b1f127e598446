//! A topic is archived under its Kafka topic id: a topic of the same name
//! with another id (deleted and created again, or another cluster's, as a
//! restore's target is) is refused before anything of it is fetched,
//! however far its log has grown, until `--rebind-topic` names it. Against
//! the mock cluster (a second cluster stands for the recreated topic), or
//! `CAIRN_TEST_BROKERS` (the topic is deleted and created again).

use std::sync::Arc;

use cairn_connector::cli::demo::{check_archive, demo_next_offsets, produce};
use cairn_connector::{ArchiveSink, PipelineOptions};
use cairn_engine::{Engine, EngineConfig};
use cairn_tests::{config, run_bounded, run_to_end, run_to_error, TestKafka};

#[test]
fn a_recreated_topic_is_refused_until_rebound() {
    cairn_tests::init_logs();
    let mut k = TestKafka::new("identity", 3);
    let n = 3_000;
    produce(&k.brokers, &k.topic, 0..n).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let group = "identity-group";
    run_to_end(&config(&k, group, dir.path()), n, || {});
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let archived_id = engine.topic_ids().unwrap()[&k.topic];
    let archived = engine.durable_offsets();
    drop(engine);

    // The same name, another topic, grown past the archive's offsets: by
    // offsets alone it looks like the old one, and a run resumed at them
    // would skip its first records.
    k.recreate_topic(3);
    produce(&k.brokers, &k.topic, 0..2 * n).unwrap();
    let cfg = config(&k, group, dir.path());
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let err = run_to_error(&cfg, &engine);
    assert!(
        err.contains(&format!(
            "Kafka's topic id is not the one archived for {} (archived: {archived_id}",
            k.topic
        )),
        "{err}"
    );
    assert!(err.contains("--rebind-topic"), "{err}");
    assert_eq!(engine.durable_offsets(), archived, "nothing fetched");
    assert_eq!(engine.topic_ids().unwrap()[&k.topic], archived_id, "kept");
    // Nothing committed to the new topic either.
    assert!(
        k.committed(group, 3).values().all(|&o| o <= 0),
        "{:?}",
        k.committed(group, 3)
    );
    // Refused again at the next run: the refusal holds until told.
    let err_again = run_to_error(&cfg, &engine);
    assert!(err_again.contains("is not the one archived"), "{err_again}");

    // Told: the same topic, moved with its offsets (here its records at
    // each offset are the archived ones: the same demo records). The run
    // records the new id and goes on from the archive's offsets.
    let mut rebound = cfg.clone();
    rebound.rebind_topics = vec![k.topic.clone()];
    let want = demo_next_offsets(&k.topic, 2 * n);
    let sink = ArchiveSink::new(engine.clone()).with_rebound_topics(rebound.rebind_topics.clone());
    let report = run_bounded(
        &rebound,
        Box::new(sink),
        PipelineOptions {
            done: Some(Box::new(move |c| {
                want.iter().all(|(tp, o)| c.get(tp) == Some(o))
            })),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(report.stats.records_duplicate, 0);
    assert_eq!(
        report.stats.records_written, n,
        "from the archive's offsets on"
    );
    let new_id = engine.topic_ids().unwrap()[&k.topic];
    assert_ne!(new_id, archived_id);
    // The refusal named the new topic's id too.
    assert!(err.contains(&format!("Kafka's now: {new_id})")), "{err}");
    check_archive(&engine, &k.topic, 2 * n).unwrap();
    assert!(engine.verify().unwrap().is_clean());
    drop(engine);
    // Once rebound, a run without the flag goes on: nothing left to do.
    let again = run_to_end(&cfg, 2 * n, || {});
    assert_eq!(again.stats.records_written, 0);
}
