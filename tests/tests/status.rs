//! `cairn status` against Kafka when Kafka answers only in part: the table
//! still stands, with the figures Kafka did not give left empty (and a WARN
//! saying why), rather than no table at all.

use cairn_connector::cli::status::{run, StatusArgs};
use cairn_connector::cli::DataArg;
use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
use cairn_tests::{init_logs, with_request_errors, TestKafka};
use rdkafka::types::RDKafkaApiKey;

/// The group's committed offsets cannot be read at all (every OffsetFetch
/// fails): status still succeeds (before, it failed with exit 1 and showed
/// nothing, while a failed watermark request only emptied its columns).
#[test]
fn a_group_whose_offsets_cannot_be_read_leaves_its_columns_empty() {
    init_logs();
    let k = TestKafka::new("status-offsets", 1);
    let Some(mock) = k.mock() else {
        eprintln!("SKIPPED: needs the mock cluster's request errors");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&[batch(&TopicPartition::new(&k.topic, 0), 0..10, 10)])
            .unwrap();
        e.close().unwrap();
    }
    let args = StatusArgs {
        data: DataArg {
            data: dir.path().into(),
        },
        brokers: Some(k.brokers.clone()),
        group: Some("status-group".into()),
        connect_timeout_ms: 3_000,
        kafka: Vec::new(),
        json: true,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let got = with_request_errors(mock, RDKafkaApiKey::OffsetFetch, 1_000, || {
        rt.block_on(run(args))
    });
    assert!(got.is_ok(), "{got:?}");
}
