//! A restore whose last flush fails with no delivery failed says so in its
//! error, with what to run next (until the night of 2026-12-04 that was
//! only in an ERROR log line before a bare flush error). A file of its
//! own: the failpoint is process-wide, and other restores must not meet it.

use cairn_connector::restore::{restore, RestoreConfig, FAILPOINT_FLUSH_FAILS};
use cairn_connector::ConnectorError;
use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
use cairn_tests::{init_logs, TestKafka};

#[test]
fn a_failed_last_flush_says_what_to_run_next() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    engine
        .append(&[batch(&TopicPartition::new("orders", 0), 0..20, 10)])
        .unwrap();
    let k = TestKafka::new("flush-fails", 1);
    let mut cfg = RestoreConfig::new(&k.brokers);
    cfg.rename.insert("orders".into(), k.topic.clone());
    cfg.connect_timeout_ms = 10_000;
    fail::cfg(FAILPOINT_FLUSH_FAILS, "return").unwrap();
    let r = restore(&engine, &cfg);
    fail::remove(FAILPOINT_FLUSH_FAILS);
    match r {
        Err(e @ ConnectorError::RestoreCut { .. }) => {
            let said = e.to_string();
            assert!(
                said.contains("kafka error during flush restored records"),
                "{said}"
            );
            // Every record was acknowledged: nothing is left to restore.
            assert!(
                said.contains("restore stopped after 20 records were delivered"),
                "{said}"
            );
            assert!(said.contains("Next: nothing is left to restore"), "{said}");
        }
        other => panic!("expected the flush's failure with a next step, got {other:?}"),
    }
}
